"""Hand-built jobs and a tiny data folder for the simulation tests."""

from __future__ import annotations

import json
from pathlib import Path

from joulepool.grade import Energy, Grade
from joulepool_sim.energy import ModelledJob
from joulepool_sim.estimates import SimJob, job_class
from joulepool_sim.trace import TraceJob

REPO = Path(__file__).resolve().parents[2]
SHARED_TRACES = REPO / "sim" / "src" / "joulepool_sim" / "data" / "traces"


def job(
    tenant: str,
    line: int,
    at_us: int,
    gpus: int,
    uj: int,
    grade: Grade,
    duration_us: int,
    actual_uj: int | None = None,
    requested_us: int | None = None,
) -> SimJob:
    """A job whose user estimates `uj` at `grade` and which draws `actual_uj` (by default the
    same), measured `ModelBased`; no data files involved."""
    trace_job = TraceJob(tenant, line, "T (batch size 1)", 1, at_us, gpus)
    drawn = uj if actual_uj is None else actual_uj
    modelled = ModelledJob(trace_job, duration_us, Energy(drawn, grade), "hand-written", False)
    return SimJob(
        modelled,
        Energy(uj, grade),
        Energy(drawn, Grade.ModelBased),
        duration_us if requested_us is None else requested_us,
        job_class(trace_job),
    )


def trace_line(job_type: str, steps: int, arrival_s: str, gpus: int | str) -> str:
    """One Gavel trace line."""
    return f"{job_type}\tcd %s && python3 x.py\t-n\t1\t{steps}\t{arrival_s}\t{gpus}\n"


def write_data(root: Path, traces: dict[str, list[str]], sizes: dict[str, int]) -> Path:
    """A data folder in the shared layout: traces, VC sizes, Gavel rates, Zeus power."""
    seed = root / "philly-gavel" / "seed0"
    seed.mkdir(parents=True)
    for vc, lines in traces.items():
        (seed / f"{vc}.trace").write_text("".join(lines), encoding="utf-8")
    rates = {
        "v100": {
            "('ResNet-50 (batch size 64)', 1)": {"null": 2.5},
            "('ResNet-50 (batch size 64)', 2)": {"null": 4.0},
            "('LM (batch size 20)', 1)": {"null": 10.0},
        }
    }
    (root / "philly-gavel" / "simulation_throughputs.json").write_text(
        json.dumps(rates), encoding="utf-8"
    )
    helios = root / "helios-vc"
    helios.mkdir()
    (helios / "philly_vc.csv").write_text(
        "vc,node num\n" + "".join(f"{vc},{n}\n" for vc, n in sizes.items()), encoding="utf-8"
    )
    zeus = root / "zeus-power"
    zeus.mkdir()
    (zeus / "summary_power_v100.csv").write_text(
        "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n"
        "imagenet,resnet50,64,adadelta,200,10.0,180.5\n"
        "imagenet,resnet50,64,adadelta,250,9.0,200.25\n"
        "imagenet,resnet50,64,adam,250,9.0,199.0\n",
        encoding="utf-8",
    )
    return root
