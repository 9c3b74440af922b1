"""Reading the Philly/Gavel trace and the Philly VC sizes (data/traces/README.md).

A trace folder holds one `<vc>.trace` file per virtual cluster: the VC is the tenant. Each
line is seven tab-separated fields, Gavel's layout: job_type, command, num_steps_arg,
needs_data_dir, total_steps, arrival_time_s, scale_factor. The simulation uses job_type,
total_steps, arrival_time_s and scale_factor (the job's GPUs); the command fields are read
only to check the line's shape. Arrival times are decimal seconds in the file and become
integer microseconds here, exactly (DESIGN.md §2: no float enters a figure).

VC sizes come from Helios's `philly_vc.csv` as nodes per VC.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from joulepool_sim.errors import SimulationInputError

FIELDS = 7
US_PER_S = 1_000_000


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One trace line: who submitted what, when, on how many GPUs."""

    tenant: str
    line: int
    job_type: str
    total_steps: int
    arrival_us: int
    gpus: int

    @property
    def id(self) -> str:
        """The claim id the simulation submits: `<vc>:<line>`, unique in a trace."""
        return f"{self.tenant}:{self.line}"


def _count(text: str, field: str, where: Path, line: int, *, positive: bool) -> int:
    if not text.isdigit():
        raise SimulationInputError(where, f"{field} must be a whole number, got {text!r}", line)
    value = int(text)
    if positive and value == 0:
        raise SimulationInputError(where, f"{field} must be at least 1, got 0", line)
    return value


def seconds_to_us(text: str, field: str, where: Path, line: int) -> int:
    """A decimal count of seconds as whole microseconds, rounded up, exactly (DESIGN.md §2)."""
    try:
        value = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise SimulationInputError(
            where, f"{field} must be a decimal number of seconds, got {text!r}", line
        ) from None
    if value < 0:
        raise SimulationInputError(where, f"{field} must not be negative, got {text!r}", line)
    return math.ceil(value * US_PER_S)


def parse_line(text: str, tenant: str, where: Path, line: int) -> TraceJob:
    """One Gavel trace line (7 tab-separated fields) as a `TraceJob`."""
    fields = text.rstrip("\r\n").split("\t")
    if len(fields) != FIELDS:
        raise SimulationInputError(
            where, f"expected {FIELDS} tab-separated fields, found {len(fields)}", line
        )
    job_type, _command, _steps_arg, needs_data, steps, arrival, scale = fields
    if not job_type.strip():
        raise SimulationInputError(where, "job_type is empty", line)
    if needs_data not in ("0", "1"):
        raise SimulationInputError(
            where, f"needs_data_dir must be 0 or 1, got {needs_data!r}", line
        )
    return TraceJob(
        tenant=tenant,
        line=line,
        job_type=job_type.strip(),
        total_steps=_count(steps, "total_steps", where, line, positive=True),
        arrival_us=seconds_to_us(arrival, "arrival_time_s", where, line),
        gpus=_count(scale, "scale_factor", where, line, positive=True),
    )


def read_trace_file(path: Path) -> list[TraceJob]:
    """Every job of one VC's trace file; the VC is the file's stem."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SimulationInputError(path, f"cannot read the trace file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise SimulationInputError(path, "the trace file is not UTF-8 text") from None
    jobs = []
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.strip():
            jobs.append(parse_line(raw, path.stem, path, number))
    return jobs


def read_trace(folder: Path) -> list[TraceJob]:
    """Every job of every `*.trace` file in `folder`, in arrival order.

    Ties in arrival time are broken by VC id, then line, so a replay is deterministic.
    """
    if not folder.is_dir():
        raise SimulationInputError(folder, "no such trace folder")
    files = sorted(folder.glob("*.trace"))
    if not files:
        raise SimulationInputError(folder, "holds no *.trace files")
    jobs = [job for path in files for job in read_trace_file(path)]
    jobs.sort(key=lambda j: (j.arrival_us, j.tenant, j.line))
    return jobs


def read_vc_sizes(path: Path) -> dict[str, int]:
    """Nodes per VC from Helios's `philly_vc.csv` (header `vc,node num`)."""
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.reader(handle))
    except OSError as exc:
        raise SimulationInputError(path, f"cannot read the VC sizes ({exc.strerror})") from None
    if not rows or [c.strip() for c in rows[0]] != ["vc", "node num"]:
        raise SimulationInputError(path, "expected the header 'vc,node num'", 1)
    sizes: dict[str, int] = {}
    for number, row in enumerate(rows[1:], 2):
        if not row:
            continue
        if len(row) != 2:
            raise SimulationInputError(path, f"expected 2 fields, found {len(row)}", number)
        vc = row[0].strip()
        if not vc:
            raise SimulationInputError(path, "the VC id is empty", number)
        if vc in sizes:
            raise SimulationInputError(path, f"VC {vc!r} appears twice", number)
        sizes[vc] = _count(row[1].strip(), "node num", path, number, positive=True)
    if not sizes:
        raise SimulationInputError(path, "lists no VC")
    return sizes
