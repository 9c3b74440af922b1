"""The evaluation as a Markdown report: settings, tables, figures and the honest limits.

Every figure in a table comes from the integer records (energy from the replayed ledgers);
ratios are exact fractions rounded for display only (DESIGN.md §2). A job never admitted
has no queueing delay, so it is counted, never averaged in as 0 or as the end of the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from pathlib import Path

from joulepool.grade import Grade
from joulepool.simulate.evaluation import (
    DEFAULT_DATA_DIR,
    Evaluation,
)
from joulepool.simulate.plots import ENERGY_PNG, UTILISATION_PNG
from joulepool.simulate.summary import PolicySummary, TenantSummary

REPORT_MD = "evaluation.md"
UJ_PER_GJ = 10**15
US_PER_HOUR = 3_600 * 1_000_000
US_PER_DAY = 24 * US_PER_HOUR


def _one_decimal(value: int, unit: int) -> str:
    """`value` in `unit`s with one decimal, rounded half up, in integers (display only)."""
    tenths = (value * 10 + unit // 2) // unit
    return f"{tenths // 10:,}.{tenths % 10}"


def gj(uj: int) -> str:
    """Microjoules as gigajoules, one decimal, rounded half up (display only)."""
    return _one_decimal(uj, UJ_PER_GJ)


def percent(part: int, whole: int) -> str:
    """`part` as a whole percentage of `whole`; a dash where `whole` is 0 (no ratio)."""
    if whole == 0:
        return "–"
    return f"{(part * 200 + whole) // (2 * whole)}%"


def ratio_text(value: Fraction | None) -> str:
    """A fraction as a percentage with one decimal; a dash where it is undefined."""
    if value is None:
        return "–"
    tenths = (value * 1000 * 2 + 1) // 2
    return f"{tenths // 10}.{tenths % 10}%"


def hours(us: int | None) -> str:
    """Microseconds as hours, one decimal; a dash where there is no figure (no job started)."""
    if us is None:
        return "–"
    return _one_decimal(us, US_PER_HOUR)


def reasons(counts: Mapping[str, int]) -> str:
    """`reason n` pairs, largest first; 0 where there are none."""
    if not counts:
        return "0"
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return "<br>".join(f"{n} `{reason}`" for reason, n in items)


def _table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def grade_note(evaluation: Evaluation) -> str:
    """The line under every table: what the energy figures are (§2.3)."""
    model_based = sum(j.energy.grade is Grade.ModelBased for j in evaluation.jobs)
    estimator = len(evaluation.jobs) - model_based
    return (
        f"*Energy is modelled, never read: {model_based:,} jobs `ModelBased` (Zeus-measured "
        f"{evaluation.settings.gpu_type.upper()} power of the same model), {estimator:,} jobs "
        f"`Estimator` (TDP {evaluation.settings.tdp_w} W × GPUs × time).*"
    )


def shown_path(path: Path) -> str:
    """A data path as a reader finds it: under the shipped traces, relative to the package
    (`joulepool/data/traces/...`), so a report does not name the machine that wrote it."""
    try:
        return str(Path("joulepool/data/traces") / path.relative_to(DEFAULT_DATA_DIR))
    except ValueError:
        return str(path)


def command(evaluation: Evaluation, out: Path) -> str:
    """The command line that regenerates this report."""
    s = evaluation.settings
    parts = [".venv/bin/pool", "simulate"]
    if s.data_dir != DEFAULT_DATA_DIR:
        parts += ["--data-dir", str(s.data_dir)]
    if s.trace_dir is not None:
        parts += ["--trace-dir", str(s.trace_dir)]
    else:
        parts += ["--seed", str(s.seed)]
    parts += ["--gpu-type", s.gpu_type, "--gpus", str(s.gpus)]
    parts += ["--budget-uj", str(s.budget_uj), "--tdp-w", str(s.tdp_w)]
    if s.first_jobs is not None:
        parts += ["--first-jobs", str(s.first_jobs)]
    parts += ["--out", f"{out}/"]
    return " ".join(parts)


def _guarantees(ev: Evaluation) -> list[str]:
    pool1 = ev.policy("pool1")
    rows = [
        [
            f"`{t.vc}`",
            str(ev.sizes[t.vc]),
            str(t.guarantee_devices),
            str(t.weight),
            gj(t.guarantee_uj),
            f"{t.jobs:,}",
            f"{t.model_based_jobs:,}",
            f"{t.jobs - t.model_based_jobs:,}",
            gj(t.demand_uj),
            percent(t.demand_uj, t.guarantee_uj),
        ]
        for t in pool1.tenants
    ]
    header = [
        "VC",
        "nodes",
        "GPUs guaranteed",
        "borrowing weight",
        "pool/1 energy guarantee (GJ)",
        "jobs",
        "ModelBased jobs",
        "Estimator jobs",
        "modelled demand (GJ)",
        "demand / guarantee",
    ]
    return _table(header, rows)


def _energy(ev: Evaluation) -> list[str]:
    pool1, quota = ev.policy("pool1"), ev.policy("devices")
    rows = []
    for t in pool1.tenants:
        q = quota.tenant(t.vc)
        rows.append(
            [
                f"`{t.vc}`",
                gj(t.guarantee_uj),
                gj(t.spent_uj),
                percent(t.spent_uj, t.guarantee_uj),
                gj(t.borrowed_uj),
                gj(q.spent_uj),
                percent(q.spent_uj, t.guarantee_uj),
            ]
        )
    guarantee = sum(t.guarantee_uj for t in pool1.tenants)
    spent = sum(t.spent_uj for t in pool1.tenants)
    quota_spent = sum(t.spent_uj for t in quota.tenants)
    rows.append(
        [
            "**all**",
            gj(guarantee),
            gj(spent),
            percent(spent, guarantee),
            gj(sum(t.borrowed_uj for t in pool1.tenants)),
            gj(quota_spent),
            percent(quota_spent, guarantee),
        ]
    )
    header = [
        "VC",
        "pool/1 guarantee (GJ)",
        "pool/1 spent (GJ)",
        "of guarantee",
        "pool/1 borrowed (GJ)",
        "device quota spent (GJ)",
        "of the pool/1 guarantee",
    ]
    return _table(header, rows)


def _queueing(ev: Evaluation) -> list[str]:
    pool1, quota = ev.policy("pool1"), ev.policy("devices")
    rows = []
    for t in pool1.tenants:
        q = quota.tenant(t.vc)
        rows.append(
            [
                f"`{t.vc}`",
                f"{t.started:,} / {t.jobs:,}",
                hours(t.wait_median_us),
                hours(t.wait_p95_us),
                f"{q.started:,} / {q.jobs:,}",
                hours(q.wait_median_us),
                hours(q.wait_p95_us),
            ]
        )
    header = [
        "VC",
        "pool/1 started / jobs",
        "pool/1 median wait (h)",
        "pool/1 p95 wait (h)",
        "quota started / jobs",
        "quota median wait (h)",
        "quota p95 wait (h)",
    ]
    return _table(header, rows)


def _verdicts(summary: PolicySummary) -> list[str]:
    rows = [
        [
            f"`{t.vc}`",
            f"{t.admitted_at_once:,}",
            f"{t.admitted_after_queue:,}",
            reasons(t.still_queued),
            reasons(t.denied),
            f"{t.guesses_refused_borrowing:,}",
        ]
        for t in summary.tenants
    ]
    header = [
        "VC",
        "admitted on arrival",
        "admitted after queueing",
        "still queued at the end (last reason)",
        "denied (reason)",
        "Estimator claims refused borrowing",
    ]
    return _table(header, rows)


def _cluster(ev: Evaluation) -> list[str]:
    rows = []
    for p in ev.policies:
        started = sum(t.started for t in p.tenants)
        rows.append(
            [
                p.title,
                f"{started:,} / {sum(t.jobs for t in p.tenants):,}",
                gj(sum(t.spent_uj for t in p.tenants)),
                ratio_text(p.mean_utilisation(ev.end_us)),
                f"{p.last_event_us // US_PER_DAY:,}",
                f"{p.ledger_entries:,}",
                f"`{p.ledger_head[:16]}…`",
                f"{p.submissions:,}",
            ]
        )
    header = [
        "policy",
        "jobs started",
        "energy spent (GJ)",
        "mean GPU utilisation",
        "last GPU freed (day)",
        "ledger entries",
        "ledger head",
        "submissions to Pool",
    ]
    return _table(header, rows)


def _findings(ev: Evaluation) -> list[str]:
    pool1, quota = ev.policy("pool1"), ev.policy("devices")
    over = [
        (Fraction(quota.tenant(t.vc).spent_uj, t.guarantee_uj), t.vc)
        for t in pool1.tenants
        if quota.tenant(t.vc).spent_uj > t.guarantee_uj
    ]
    over.sort(reverse=True)
    lines = []
    if over:
        worst_ratio, worst = over[0]
        tenths = (worst_ratio * 20 + 1) // 2
        lines.append(
            f"- Under the device-count quota {len(over)} of {len(pool1.tenants)} VCs spend more "
            f"energy than their pool/1 share of the budget, `{worst}` the most "
            f"({tenths // 10}.{tenths % 10}× its share); nothing in a device quota notices."
        )
    started_p = sum(t.started for t in pool1.tenants)
    started_q = sum(t.started for t in quota.tenants)
    waiting = sum(sum(t.still_queued.values()) for t in pool1.tenants)
    spent_p = sum(t.spent_uj for t in pool1.tenants)
    budget = sum(t.guarantee_uj for t in pool1.tenants)
    lines.append(
        f"- pool/1 starts {started_p:,} jobs against the quota's {started_q:,}, spending "
        f"{gj(spent_p)} GJ against a {gj(budget)} GJ budget; {waiting:,} claims are still "
        "queued when the window's events run out, waiting for a window the replay does not "
        "model."
    )
    if spent_p > budget:
        lines.append(
            f"- pool/1 ends {gj(spent_p - budget)} GJ over the budget, and correctly so: a loan "
            "is made from a sibling's guarantee while it is unspent, the lender may still "
            "spend its own guarantee later (§4.3), and nothing recalls a loan already running. "
            "The weighted-share bound holds at every admission; the total is not a cap."
        )
    guesses = sum(t.guesses_refused_borrowing for t in pool1.tenants)
    borrowed = sum(t.borrowed_uj for t in pool1.tenants)
    borrowers = sum(t.borrowed_uj > 0 for t in pool1.tenants)
    lines.append(
        f"- {guesses:,} `Estimator` claims were refused the right to borrow (§4.4); "
        f"{borrowers} VCs borrowed {gj(borrowed)} GJ in all, on `ModelBased` estimates: of "
        "the borrowed microjoules granted at admission, "
        f"{pool1.borrowed_uj_by_grade[Grade.Estimator.value]:,} µJ rest on an `Estimator` figure."
    )
    faster = [
        t.vc
        for t in pool1.tenants
        if t.wait_median_us is not None
        and quota.tenant(t.vc).wait_median_us is not None
        and t.wait_median_us < (quota.tenant(t.vc).wait_median_us or 0)
    ]
    lines.append(
        f"- Median queueing delay is lower under pool/1 for {len(faster)} VCs: fewer jobs "
        "start, so fewer hold devices; the delay reported is that of the jobs that started."
    )
    return lines


def render(evaluation: Evaluation, out: Path) -> str:
    """The whole report as Markdown; figures are referenced by their file names in `out`."""
    ev = evaluation
    s = ev.settings
    note = grade_note(ev)
    pool1 = ev.policy("pool1")
    scaled = sum(j.scaled_rate for j in ev.jobs)
    left_out = sum(ev.left_out_no_size.values())
    budget_w = s.budget_uj // ev.end_us if ev.end_us else None
    tdp_words = (
        "300 W, the V100 SXM2's rated board power; Zeus's card tops out at a 250 W limit"
        if (s.gpu_type, s.tdp_w) == ("v100", 300)
        else f"{s.tdp_w} W, as stated with `--tdp-w`"
    )
    lines = [
        "# Evaluation: energy-denominated entitlements on the Philly trace",
        "",
        "What happens to each tenant's energy, queueing and borrowing under pool/1, compared "
        "with the device-count quota it runs today? This report replays a real multi-tenant "
        "GPU trace through joulepool's `Pool` (the same `decide()` and ledger as production), "
        "once under each policy, on the same jobs.",
        "",
        "Regenerate it from any folder (the traces ship inside the package, `src/joulepool/data/traces/`):",
        "",
        "```",
        command(ev, out),
        "```",
        "",
        f"The whole run (reading, modelling, both replays, and replaying both ledgers back "
        f"with every signature verified) took **{ev.elapsed_ms // 1000}.{ev.elapsed_ms % 1000 // 100} s** "
        "(wall time) on the machine "
        "that wrote this report.",
        "",
        "## What was replayed",
        "",
        f"- **Trace**: `{shown_path(s.trace_path)}`, Microsoft Philly jobs as generated by Gavel, one "
        f"file per virtual cluster (VC), the VC being the tenant. {len(ev.jobs):,} jobs of "
        f"{len(ev.sizes)} VCs are replayed.",
    ]
    if left_out:
        vcs = ", ".join(f"`{vc}` ({n})" for vc, n in sorted(ev.left_out_no_size.items()))
        lines.append(
            f"- **Left out**: {left_out} jobs of VCs with no size in Helios's "
            f"`philly_vc.csv`: {vcs}. Without a size they have no guarantee, and a guarantee "
            "of 0 would be a made-up figure."
        )
    if ev.unmodelled:
        lines.append(
            f"- **Left out**: {len(ev.unmodelled)} jobs with no {s.gpu_type} rate in Gavel's "
            "throughputs, so no duration."
        )
    lines += [
        f"- **Cluster**: {s.gpus:,} GPUs, split into device guarantees in proportion to each "
        "VC's node count (largest remainder). That is Helios's 352 Philly nodes at 2 GPUs each, "
        "the smaller of Philly's two node types: the Gavel trace keeps at most 2,000 jobs per "
        "VC, so at 8 GPUs a node the cluster would sit about 90% idle and no policy would "
        "matter. Devices never borrow (DESIGN.md §3), in both policies.",
        f"- **Window and budget**: the window is the whole trace (one ledger per policy, "
        f"guarantees never reset). The cluster's energy budget for it is "
        f"{s.budget_uj:,} µJ ({gj(s.budget_uj)} GJ"
        + (f", a mean of {budget_w:,} W over the replay" if budget_w is not None else "")
        + f"), {percent(s.budget_uj, ev.demand_uj)} of the {gj(ev.demand_uj)} GJ the replayed "
        "jobs are modelled to need. Each VC's energy guarantee is its share of the budget in "
        "proportion to its node count (largest remainder).",
        "- **Borrowing**: every VC is a child of one root, `cluster`; its over-quota weight is "
        "its node count, so its weighted share of siblings' unspent guarantees is in "
        "proportion to size (§2.2).",
        f"- **Durations**: `ceil(total_steps × 10⁶ / rate)` µs with Gavel's isolated "
        f"{s.gpu_type} rate for the job type and gang size. Gavel turned each Philly run time "
        "into a step count with a measured rate. Gavel and Zeus both measured V100 and P100 "
        f"(`--gpu-type p100` replays on P100); V100 is the default. {scaled:,} jobs have "
        "a gang size Gavel does not tabulate (above 8 GPUs, or above 1 for A3C and CycleGAN) "
        "and take the rate of the largest tabulated gang, scaled linearly: an assumption.",
        "- **Energy**: `ModelBased` for Gavel's ResNet-50 jobs, the one job type Zeus measured "
        "as the same model on the same data (ResNet-50 on ImageNet, same batch sizes; the "
        "profile at Zeus's highest power limit, per GPU, times GPUs and duration). Every other "
        f"type is `Estimator`: TDP ({tdp_words}) × GPUs × "
        "duration. Zeus's other rows are other networks (ShuffleNet, BERT, DeepSpeech2, NCF); "
        "lending their curves to ResNet-18, Transformer, LM, Recommendation, CycleGAN or A3C "
        "would grade a guess as a model.",
        "- **Estimate and actual**: each claim's estimate is its modelled figure at its grade, "
        "and release charges the same figure at the same grade: there is no reading to "
        "charge instead, and a different 'actual' would be a number nobody measured.",
        "- **Device-count quota**: the same tree, with every VC's energy guarantee set to the "
        f"modelled energy of the whole replayed trace ({gj(ev.demand_uj)} GJ): no VC can "
        "spend more than that, so energy can never bind and no claim ever borrows. No "
        "infinite or zero figure stands in for 'unlimited'.",
        "- **Events**: at each instant, releases first (earliest admission first), then the "
        "queued claims of each VC that freed devices (VCs in id order, claims in arrival "
        "order), then arrivals (arrival time, VC, line). A claim is submitted on arrival; a "
        "Queue verdict puts it in its VC's queue.",
        "",
        "## Guarantees",
        "",
        *_guarantees(ev),
        "",
        note,
        "",
        "## Energy spent against the guarantee",
        "",
        "Energy spent is each VC's usage after replaying its policy's ledger (every entry's "
        "signature and chain verified), not a sum kept by the simulator. Borrowed is the part "
        "of pool/1 spending above the VC's own guarantee, drawn from siblings' unspent "
        "guarantees. The device quota's spending is set against the pool/1 guarantee, the "
        "share of the budget that VC would have had.",
        "",
        *_energy(ev),
        "",
        note,
        "",
        f"![Energy per VC]({ENERGY_PNG})",
        "",
        "## Queueing delay",
        "",
        "Arrival to admission, over the jobs that started; a job still queued at the end has "
        "no delay to report and is counted in the next tables instead.",
        "",
        *_queueing(ev),
        "",
        note,
        "",
    ]
    for summary in ev.policies:
        lines += [
            f"## Verdicts under {summary.title}",
            "",
            *_verdicts(summary),
            "",
            note,
            "",
        ]
    lines += [
        "## The cluster",
        "",
        *_cluster(ev),
        "",
        note,
        "",
        f"![Cluster GPU utilisation]({UTILISATION_PNG})",
        "",
        "## Findings",
        "",
        *_findings(ev),
        "",
        "## Limits",
        "",
        "- Nothing here is a reading: every joule is a model or a guess, graded as such. A "
        "conclusion about energy holds only as far as the Zeus profiles and the TDP stand-in "
        "do.",
        "- One window: a VC that spends its share waits for a next window the replay does not "
        "model. A shorter window that resets would trade these long waits for a steady "
        "state; it needs a ledger per window, which this replay does not build.",
        "- Durations of gangs Gavel does not tabulate are scaled linearly; Philly's placement, "
        "failures and preemptions are not modelled; a job runs exactly its modelled duration.",
        f"- pool/1 starts fewer jobs in this run: {sum(t.started for t in pool1.tenants):,}. "
        "That is the budget binding, not a scheduling gain; lower waits under pool/1 come "
        "from the same cause.",
        "",
    ]
    return "\n".join(lines)


def write_report(evaluation: Evaluation, out: Path) -> Path:
    """Write `evaluation.md` into `out`; its path."""
    path = out / REPORT_MD
    path.write_text(render(evaluation, out), encoding="utf-8")
    return path


def tenant_json(t: TenantSummary) -> dict[str, object]:
    """One VC's figures for `--json`."""
    return {
        "vc": t.vc,
        "guarantee_uj": t.guarantee_uj,
        "guarantee_devices": t.guarantee_devices,
        "jobs": t.jobs,
        "model_based_jobs": t.model_based_jobs,
        "demand_uj": t.demand_uj,
        "spent_uj": t.spent_uj,
        "borrowed_uj": t.borrowed_uj,
        "admitted_at_once": t.admitted_at_once,
        "admitted_after_queue": t.admitted_after_queue,
        "still_queued": t.still_queued,
        "denied": t.denied,
        "wait_median_us": t.wait_median_us,
        "wait_p95_us": t.wait_p95_us,
        "guesses_refused_borrowing": t.guesses_refused_borrowing,
    }


def evaluation_json(evaluation: Evaluation) -> dict[str, object]:
    """The whole evaluation's figures for `--json`: integers, None where there is none."""
    s = evaluation.settings
    return {
        "trace": shown_path(s.trace_path),
        "gpu_type": s.gpu_type,
        "gpus": s.gpus,
        "budget_uj": s.budget_uj,
        "tdp_w": s.tdp_w,
        "jobs": len(evaluation.jobs),
        "demand_uj": evaluation.demand_uj,
        "left_out_no_size": evaluation.left_out_no_size,
        "unmodelled": len(evaluation.unmodelled),
        "elapsed_ms": evaluation.elapsed_ms,
        "policies": {
            p.key: {
                "title": p.title,
                "ledger_entries": p.ledger_entries,
                "ledger_head": p.ledger_head,
                "submissions": p.submissions,
                "tenants": [tenant_json(t) for t in p.tenants],
            }
            for p in evaluation.policies
        },
    }
