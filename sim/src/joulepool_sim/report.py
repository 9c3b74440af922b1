"""The evaluation as a Markdown report: settings, one table and figure per question, plain
conclusions computed from the figures, and the honest limits.

Every figure in a table comes from the integer records (pool/1's, the device quota's and the
grade-blind quota's energy from their replayed ledgers); ratios are exact fractions rounded
for display only (DESIGN.md §2). A job never started is censored, never dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from joulepool_sim.evaluation import (
    DEFAULT_DATA_DIR,
    MONTHLY_ORDER,
    POLICY_ORDER,
    RUNTIME_MARGIN_PCT,
    Cell,
    Evaluation,
    PreemptionRow,
    Settings,
)
from joulepool_sim.plots import BASELINES_PNG, EARNED_PNG, PERIODS_PNG, UTILISATION_PNG
from joulepool_sim.runtime import DEFAULT_CHECKPOINT_US
from joulepool_sim.summary import Percentile, Summary

REPORT_MD = "evaluation.md"
UJ_PER_GJ = 10**15
UJ_PER_MJ = 10**12
US_PER_HOUR = 3_600 * 1_000_000
US_PER_DAY = 24 * US_PER_HOUR
TITLES = {
    "devices": "device-count quota",
    "gpu_hours": "GPU-hour quota",
    "blind": "grade-blind energy quota",
    "pool1": "pool/1",
}
VARIANT_TITLES = {
    "gpu_hours": "GPU-hour quota",
    "blind": "grade-blind energy quota",
    "pool1": "pool/1, report (type × gang)",
    "pool1_requeue": "pool/1, requeue (type × gang)",
    "pool1_cancel": "pool/1, cancel (type × gang)",
    "pool1_timed": "pool/1, report (type × gang × time)",
    "pool1_timed_cancel": "pool/1, cancel (type × gang × time)",
}
LIMIT_ORDER = ("pool1", "pool1_requeue", "pool1_cancel")
CLASS_ORDER = ("pool1", "pool1_timed", "pool1_cancel", "pool1_timed_cancel")


def _one_decimal(value: int, unit: int) -> str:
    """`value` in `unit`s with one decimal, rounded half up, in integers (display only)."""
    tenths = (value * 10 + unit // 2) // unit
    return f"{tenths // 10:,}.{tenths % 10}"


def gj(uj: int) -> str:
    """Microjoules as gigajoules, one decimal, rounded half up (display only)."""
    return _one_decimal(uj, UJ_PER_GJ)


def mj(uj: int | None) -> str:
    """Microjoules as megajoules, one decimal; a dash where there is no figure."""
    return "–" if uj is None else _one_decimal(uj, UJ_PER_MJ)


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


def index_text(value: Fraction | None) -> str:
    """A fraction in [0, 1] with three decimals; a dash where it is undefined."""
    if value is None:
        return "–"
    thousandths = (value * 2000 + 1) // 2
    return f"{thousandths // 1000}.{thousandths % 1000:03d}"


def hours(us: int | None) -> str:
    """Microseconds as hours, one decimal; a dash where there is no figure."""
    return "–" if us is None else _one_decimal(us, US_PER_HOUR)


def wait_text(p: Percentile | None) -> str:
    """A censored percentile in hours, `≥` where it is a lower bound."""
    if p is None:
        return "–"
    return ("≥ " if p.at_least else "") + hours(p.us)


def _table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def spread(values: Sequence[int | Fraction], show: Callable[[Any], str] | None = None) -> str:
    """`median (min–max)` of the values; a dash for none."""
    if not values:
        return "–"
    ordered = sorted(values)
    mid = ordered[(len(ordered) - 1) // 2]

    def fmt(v: int | Fraction) -> str:
        if show is not None:
            return show(v)
        return ratio_text(v) if isinstance(v, Fraction) else f"{v:,}"

    lo, hi = fmt(ordered[0]), fmt(ordered[-1])
    if lo == hi:
        return fmt(mid)
    return f"{fmt(mid)} ({lo}–{hi})"


def command(settings: Settings, out: Path) -> str:
    """The command line that regenerates this report."""
    parts = [".venv/bin/pool", "simulate"]
    if settings != Settings():
        s = settings
        if s.data_dir != DEFAULT_DATA_DIR:
            parts += ["--data-dir", str(s.data_dir)]
        if s.trace_dir is not None:
            parts += ["--trace-dir", str(s.trace_dir)]
        else:
            parts += ["--seeds", ",".join(str(x) for x in s.seeds)]
        parts += ["--budgets", ",".join(f"{b}" for b in s.budgets_uj)]
        parts += ["--period", s.period, "--gpu-type", s.gpu_type, "--gpus", str(s.gpus)]
        parts += ["--tdp-w", str(s.tdp_w), "--error-seed", str(s.error_seed)]
        parts += ["--error-median", str(s.error_median), "--error-sigma", str(s.error_sigma)]
        parts += ["--sample", str(s.sample)]
        if s.first_jobs is not None:
            parts += ["--first-jobs", str(s.first_jobs)]
    parts += ["--out", f"{out}/"]
    return " ".join(parts)


def shown_path(path: Path) -> str:
    """A data path as a reader finds it: under the shipped traces, relative to the package."""
    try:
        return str(Path("joulepool_sim/data/traces") / path.relative_to(DEFAULT_DATA_DIR))
    except ValueError:
        return str(path)


def _all(ev: Evaluation, key: str, budget: int | None = None) -> list[Summary]:
    return [c.summaries[key] for c in ev.cells if budget is None or c.budget_uj == budget]


def _side_by_side(cell: Cell) -> list[str]:
    rows = []
    for key in POLICY_ORDER:
        s = cell.summaries[key]
        rows.append(
            [
                TITLES[key],
                f"{s.completed:,} / {s.jobs:,}",
                f"{s.denied:,}",
                f"{s.censored:,}",
                gj(s.spent_uj),
                mj(s.per_completed_uj),
                percent(s.spent_uj, s.budget_uj),
                gj(s.beyond_budget_uj),
                gj(s.beyond_guarantee_uj),
                wait_text(s.wait_all_median),
                wait_text(s.wait_all_p95),
                ratio_text(s.utilisation),
                index_text(s.fairness),
            ]
        )
    header = [
        "policy",
        "jobs completed",
        "refused",
        "censored (never started)",
        "energy (GJ)",
        "per completed job (MJ)",
        "energy / budget",
        "beyond the budget (GJ)",
        "borne by other teams (GJ)",
        "median wait, all jobs (h)",
        "p95 wait, all jobs (h)",
        "GPU utilisation",
        "fairness (Jain)",
    ]
    return _table(header, rows)


def _robustness(ev: Evaluation) -> list[str]:
    rows = []
    for budget in ev.settings.budgets_uj:
        for key in POLICY_ORDER:
            ss = _all(ev, key, budget)
            rows.append(
                [
                    gj(budget),
                    TITLES[key],
                    spread([s.completed for s in ss]),
                    spread([Fraction(s.spent_uj, s.budget_uj) for s in ss]),
                    spread([s.beyond_budget_uj for s in ss], gj),
                    spread([s.overrun_uj for s in ss], gj),
                    spread([s.wait_all_median.us for s in ss if s.wait_all_median], hours),
                    spread([s.utilisation for s in ss if s.utilisation is not None]),
                    spread([s.fairness for s in ss if s.fairness is not None], None),
                ]
            )
    header = [
        "budget / week (GJ)",
        "policy",
        "jobs completed",
        "energy / budget",
        "beyond the budget (GJ)",
        "overrun past guarantee + share (GJ)",
        "median wait, all jobs (h)",
        "GPU utilisation",
        "fairness (Jain, %)",
    ]
    return _table(header, rows)


def _periods(s: Summary, settings: Settings) -> list[str]:
    rows = [
        [
            str(p.index + 1),
            gj(p.spent_uj),
            percent(p.within_uj, p.budget_uj),
            gj(p.borrowed_uj),
            gj(p.beyond_uj),
            gj(p.overrun_uj),
        ]
        for p in s.periods
    ]
    noun = settings.period
    header = [
        noun,
        "spent (GJ)",
        "guarantees used",
        "borrowed (GJ)",
        "beyond own guarantees (GJ)",
        "past guarantee + share (GJ)",
    ]
    return _table(header, rows)


def _estimates(cell: Cell) -> list[str]:
    rows = []
    for key in POLICY_ORDER:
        s = cell.summaries[key]
        rows.append(
            [
                TITLES[key],
                gj(s.beyond_budget_uj),
                gj(s.beyond_guarantee_uj),
                gj(s.overrun_uj),
                gj(s.borrowed_uj) if key in ("blind", "pool1") else "0.0",
                gj(s.borrowed_on_guess_uj),
                gj(s.borrowed_on_earned_uj),
            ]
        )
    header = [
        "policy",
        "beyond the budget (GJ)",
        "beyond own guarantees (GJ)",
        "past guarantee + weighted share (GJ)",
        "borrowed (GJ)",
        "borrowed on a guess (GJ)",
        "borrowed on an earned estimate (GJ)",
    ]
    return _table(header, rows)


def _team_overruns(cell: Cell) -> list[str]:
    first = cell.summaries["pool1"]
    rows = []
    for team in sorted(first.guarantee_by_team):
        row = [f"`{team}`", gj(first.guarantee_by_team[team])]
        for key in POLICY_ORDER:
            s = cell.summaries[key]
            row.append(gj(s.overrun_by_team.get(team, 0)))
        rows.append(row)
    header = ["team", "guarantee / period (GJ)", *(f"{TITLES[k]} (GJ)" for k in POLICY_ORDER)]
    return _table(header, rows)


def _reservations(s: Summary) -> list[str]:
    rows = []
    words = {"guess": "the user's guess", "earned": "an earned estimate (§2.6)"}
    for source, r in s.reservations.items():
        rows.append(
            [
                words[source],
                f"{r.claims:,}",
                gj(r.actual_uj),
                percent(r.over_uj, r.actual_uj),
                percent(r.under_uj, r.actual_uj),
                percent(r.guess_over_uj, r.actual_uj),
                percent(r.guess_under_uj, r.actual_uj),
            ]
        )
    header = [
        "claims admitted on",
        "claims",
        "actual (GJ)",
        "over-reserved",
        "under-reserved",
        "users' guesses would over-reserve",
        "users' guesses would under-reserve",
    ]
    return _table(header, rows)


def _earning(ev: Evaluation) -> list[str]:
    rows = []
    for budget in ev.settings.budgets_uj:
        ss = _all(ev, "pool1", budget)
        rows.append(
            [
                gj(budget),
                spread([len(s.class_earned_days) for s in ss]),
                spread([s.classes for s in ss]),
                spread([d[(len(d) - 1) // 2] for s in ss if (d := s.class_earned_days)]),
                spread([s.submitted_earned for s in ss]),
                spread([s.borrowed_on_earned_uj for s in ss], gj),
                spread([s.borrowed_on_guess_uj for s in ss], gj),
            ]
        )
    header = [
        "budget / week (GJ)",
        "classes that earned",
        "classes",
        "median day a class earned",
        "jobs started on an earned estimate",
        "borrowed on earned estimates (GJ)",
        "borrowed on guesses (GJ)",
    ]
    return _table(header, rows)


def _median(values: Sequence[int]) -> int | None:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2] if ordered else None


def _acted(s: Summary) -> int:
    return sum(n for act, n in s.acts.items() if act != "report")


def _limit(ev: Evaluation) -> list[str]:
    rows = []
    for budget in ev.settings.budgets_uj:
        for key in LIMIT_ORDER:
            ss = _all(ev, key, budget)
            rows.append(
                [
                    gj(budget),
                    VARIANT_TITLES[key],
                    spread([s.completed for s in ss]),
                    spread([sum(s.acts.values()) for s in ss]),
                    spread([_acted(s) for s in ss]),
                    spread([Fraction(s.spent_uj, s.budget_uj) for s in ss]),
                    spread([s.beyond_budget_uj for s in ss], gj),
                    spread([s.overrun_uj for s in ss], gj),
                    spread([s.wasted_uj for s in ss], gj),
                    spread([s.wait_all_median.us for s in ss if s.wait_all_median], hours),
                    spread([s.wait_all_p95.us for s in ss if s.wait_all_p95], hours),
                ]
            )
    header = [
        f"budget / {ev.settings.period} (GJ)",
        "over_reservation (classes)",
        "jobs completed",
        f"runs past reservation + {RUNTIME_MARGIN_PCT}%",
        "acted on",
        "energy / budget",
        "beyond the budget (GJ)",
        "overrun past guarantee + share (GJ)",
        "wasted on stopped work (GJ)",
        "median wait, all jobs (h)",
        "p95 wait, all jobs (h)",
    ]
    return _table(header, rows)


def _classes(ev: Evaluation) -> list[str]:
    rows = []
    for budget in ev.settings.budgets_uj:
        for key in CLASS_ORDER:
            ss = _all(ev, key, budget)
            rows.append(
                [
                    gj(budget),
                    VARIANT_TITLES[key],
                    spread([s.classes for s in ss]),
                    spread([len(s.class_earned_days) for s in ss]),
                    spread([s.earned_claims for s in ss]),
                    spread([x for s in ss if (x := s.earned_ratio_median) is not None], times),
                    spread([x for s in ss if (x := s.earned_ratio_p90) is not None], times),
                    spread(
                        [Fraction(s.earned_under, s.earned_claims) for s in ss if s.earned_claims]
                    ),
                    spread([s.beyond_budget_uj for s in ss], gj),
                    spread([s.overrun_uj for s in ss], gj),
                    spread([s.completed for s in ss]),
                    spread([s.wait_all_median.us for s in ss if s.wait_all_median], hours),
                ]
            )
    header = [
        f"budget / {ev.settings.period} (GJ)",
        "over_reservation (classes)",
        "classes",
        "classes that earned",
        "claims admitted on an earned estimate",
        "earned / actual, median",
        "earned / actual, p90",
        "earned estimate below the actual",
        "beyond the budget (GJ)",
        "overrun past guarantee + share (GJ)",
        "jobs completed",
        "median wait, all jobs (h)",
    ]
    return _table(header, rows)


def _monthly(ev: Evaluation) -> list[str]:
    rows = []
    for cell in ev.monthly:
        weekly = ev.cell(cell.seed, ev.settings.budgets_uj[ev.monthly.index(cell)])
        for key in MONTHLY_ORDER:
            for noun, c in (("month", cell), ("week", weekly)):
                s = c.summaries[key]
                rows.append(
                    [
                        f"{gj(c.budget_uj)} a {noun}",
                        VARIANT_TITLES[key],
                        f"{s.completed:,}",
                        percent(s.spent_uj, s.budget_uj),
                        gj(s.beyond_budget_uj),
                        gj(s.overrun_uj),
                        gj(s.wasted_uj),
                        wait_text(s.wait_all_median),
                        wait_text(s.wait_all_p95),
                    ]
                )
    header = [
        "budget (GJ)",
        "policy",
        "jobs completed",
        "energy / budget",
        "beyond the budget (GJ)",
        "overrun past guarantee + share (GJ)",
        "wasted on stopped work (GJ)",
        "median wait, all jobs (h)",
        "p95 wait, all jobs (h)",
    ]
    return _table(header, rows)


PREEMPTION_TITLES = {
    "none": "no preemption",
    "realised_cost": "§5.2 realised cost (`reclaim.victims`)",
    "youngest": "Slurm: youngest first",
}


VERSUS = (
    "devices",
    "gpu_hours",
    "blind",
    "pool1",
    "pool1_cancel",
    "pool1_timed",
    "pool1_timed_cancel",
)


def _versus(ev: Evaluation) -> list[str]:
    """Every policy against the baselines, medians over seeds per budget."""
    rows = []
    for budget in ev.settings.budgets_uj:
        for key in VERSUS:
            ss = _all(ev, key, budget)
            rows.append(
                [
                    gj(budget),
                    VARIANT_TITLES.get(key, TITLES.get(key, key)),
                    spread([s.completed for s in ss]),
                    spread([s.beyond_budget_uj for s in ss], gj),
                    spread([s.wasted_uj for s in ss], gj),
                    spread([s.wait_all_median.us for s in ss if s.wait_all_median], hours),
                ]
            )
    header = [
        f"budget / {ev.settings.period} (GJ)",
        "policy",
        "jobs completed",
        "beyond the budget (GJ)",
        "wasted on stopped work (GJ)",
        "median wait, all jobs (h)",
    ]
    return _table(header, rows)


def _versus_conclusions(ev: Evaluation) -> list[str]:
    """Per pool/1 policy, against which baseline it wins and loses, in how many cells."""
    out = []
    baselines = ("devices", "gpu_hours", "blind")
    for key in ("pool1", "pool1_cancel", "pool1_timed", "pool1_timed_cancel"):
        wins: list[str] = []
        losses: list[str] = []
        for base in baselines:
            n = len(ev.cells)
            more = sum(c.summaries[key].completed > c.summaries[base].completed for c in ev.cells)
            less_over = sum(
                c.summaries[key].beyond_budget_uj <= c.summaries[base].beyond_budget_uj
                for c in ev.cells
            )
            name = TITLES[base]
            (wins if more * 2 > n else losses).append(
                f"jobs completed against the {name} ({more} of {n} cells more)"
            )
            (wins if less_over * 2 > n else losses).append(
                f"energy beyond the budget against the {name} ({less_over} of {n} cells no more)"
            )
            shorter = sum(
                (a := c.summaries[key].wait_all_median) is not None
                and (b := c.summaries[base].wait_all_median) is not None
                and a.us <= b.us
                for c in ev.cells
            )
            (wins if shorter * 2 > n else losses).append(
                f"median wait against the {name} ({shorter} of {n} cells no longer)"
            )
        out.append(
            f"- **{VARIANT_TITLES[key]}** wins on "
            + ("; ".join(wins) if wins else "nothing")
            + ". It loses on "
            + ("; ".join(losses) if losses else "nothing")
            + "."
        )
    return out


def _preemption(ev: Evaluation) -> list[str]:
    rows = []
    for seed, replays_ in ev.preemption.items():
        for r in replays_:
            s = r.summary
            rows.append(
                [
                    str(seed),
                    PREEMPTION_TITLES[r.order],
                    wait_text(r.high_wait_median),
                    wait_text(r.high_wait_p95),
                    wait_text(r.low_wait_median),
                    f"{r.preemptions:,}",
                    hours(r.lost_gpu_us),
                    gj(s.wasted_uj),
                    gj(s.spent_uj),
                    f"{s.completed:,} / {s.jobs:,}",
                ]
            )
    header = [
        "seed",
        "victims chosen by",
        "median wait, high tier (h)",
        "p95 wait, high tier (h)",
        "median wait, low tier (h)",
        "preemptions",
        "work lost (GPU-hours)",
        "energy lost (GJ)",
        "energy (GJ)",
        "jobs completed",
    ]
    return _table(header, rows)


def _preemption_conclusions(ev: Evaluation) -> list[str]:
    if not ev.preemption:
        return []
    by = {
        o: [r for rs in ev.preemption.values() for r in rs if r.order == o]
        for o in PREEMPTION_TITLES
    }

    def rng(order: str, field: Callable[[PreemptionRow], int], show: Callable[[int], str]) -> str:
        return _range([field(r) for r in by[order]], show)

    def p95(r: PreemptionRow) -> int:
        return r.high_wait_p95.us if r.high_wait_p95 else 0

    def low(r: PreemptionRow) -> int:
        return r.low_wait_median.us if r.low_wait_median else 0

    def lost(r: PreemptionRow) -> int:
        return r.lost_gpu_us

    def energy(r: PreemptionRow) -> int:
        return r.summary.wasted_uj

    def count(r: PreemptionRow) -> int:
        return r.preemptions

    less = sum(
        a.lost_gpu_us < b.lost_gpu_us
        for a, b in zip(by["realised_cost"], by["youngest"], strict=True)
    )
    n = len(by["youngest"])
    verdict = (
        f"§5.2's order lost less work than Slurm's on {less} of {n} seeds"
        if less
        else f"§5.2's order did not lose less work than Slurm's on any of the {n} seeds"
    )
    return [
        f"Preemption brings the high tier's p95 wait from {rng('none', p95, hours)} h "
        f"without it to {rng('realised_cost', p95, hours)} h (§5.2's order) and "
        f"{rng('youngest', p95, hours)} h (Slurm's youngest first). Does §5.2's order lose "
        f"less work? {verdict}: {rng('realised_cost', lost, hours)} GPU-hours "
        f"({rng('realised_cost', energy, gj)} GJ) redone over "
        f"{rng('realised_cost', count, lambda n: f'{n:,}')} "
        f"preemptions, against {rng('youngest', lost, hours)} GPU-hours "
        f"({rng('youngest', energy, gj)} GJ) over {rng('youngest', count, lambda n: f'{n:,}')}. "
        "The low "
        f"tier's median wait: {rng('realised_cost', low, hours)} h under §5.2's order, "
        f"{rng('youngest', low, hours)} h under Slurm's, {rng('none', low, hours)} h without "
        "preemption. Jobs completed: "
        + "; ".join(
            f"{PREEMPTION_TITLES[o]} {rng(o, lambda r: r.summary.completed, lambda n: f'{n:,}')}"
            for o in PREEMPTION_TITLES
        )
        + ".",
    ]


def times(value: int | Fraction) -> str:
    """A ratio as `×` with two decimals (display only)."""
    hundredths = (Fraction(value) * 200 + 1) // 2
    return f"{hundredths // 100:,}.{hundredths % 100:02d}×"


def _conclusions(ev: Evaluation) -> dict[str, list[str]]:
    focus = ev.focus
    f = focus.summaries
    p1, dev, gpu, blind = f["pool1"], f["devices"], f["gpu_hours"], f["blind"]
    out: dict[str, list[str]] = {}
    renew = hours(p1.renewal_wait_median_us)
    # The drain periods after the last arrival have little left to admit; leave them out.
    live = p1.periods[: max(1, len(p1.periods) - ev.settings.drain_periods)]
    used = [Fraction(p.within_uj, p.budget_uj) for p in live]
    out["periods"] = [
        f"Under pool/1 with {ev.settings.period}ly guarantees the cluster used a median "
        f"{spread(used)} of its guarantees per {ev.settings.period} while jobs were "
        f"arriving, and borrowed "
        f"{gj(p1.borrowed_uj)} GJ in all; {p1.renewal_admits:,} jobs waited for a renewal "
        f"(admitted at a {ev.settings.period}'s start after queueing on budget), a median "
        f"{renew} h after they arrived. Unspent guarantee is gone at the {ev.settings.period}'s "
        "end, so a team that saves cannot spend it later: periods trade long waits for "
        "use-it-or-lose-it.",
    ]
    earned_r = p1.reservations.get("earned")
    under = (
        percent(earned_r.under_uj, earned_r.actual_uj)
        if earned_r is not None and earned_r.actual_uj
        else "–"
    )
    out["estimates"] = [
        f"With users' estimates wrong by the model above, the grade-blind quota borrowed "
        f"{gj(blind.borrowed_on_guess_uj)} GJ on guesses and ran {gj(blind.overrun_uj)} GJ past "
        f"guarantee plus weighted share; pool/1 borrowed {gj(p1.borrowed_on_guess_uj)} GJ on "
        f"guesses (§4.4), yet ran {gj(p1.overrun_uj)} GJ past guarantee plus share and "
        f"{gj(p1.beyond_budget_uj)} GJ beyond the budget. Refusing guesses did not protect the "
        "budget here, because what pool/1 lends on instead is an earned estimate, and a claim "
        "falls back to one exactly when its user's guess is large, that is, for the long "
        "runs of a class: the class's largest measured figure so far under-reserved those "
        f"claims by {under} of what they drew, and a reservation is not a cap. The device "
        f"quota, blind to energy, went {gj(dev.beyond_budget_uj)} GJ beyond the budget; the "
        f"GPU-hour quota {gj(gpu.beyond_budget_uj)} GJ, by charging requested time up front "
        "and never lending.",
    ]
    guess = p1.reservations.get("guess")
    earned = p1.reservations.get("earned")
    if earned is not None and guess is not None and earned.actual_uj and guess.actual_uj:
        out["earned"] = [
            f"{len(p1.class_earned_days)} of {p1.classes} classes earned an estimate (3 measured "
            f"releases each); {p1.submitted_earned:,} jobs started on one, borrowing "
            f"{gj(p1.borrowed_on_earned_uj)} GJ that their guesses could not. The price is "
            f"reservation: earned estimates over-reserved "
            f"{percent(earned.over_uj, earned.actual_uj)} of what those jobs drew (the users' "
            f"guesses for the same jobs: {percent(earned.guess_over_uj, earned.actual_uj)}), "
            "because §2.6 takes the class's largest measured figure and a class of job type "
            "× gang size mixes runs of minutes and of days. They under-reserved "
            f"{percent(earned.under_uj, earned.actual_uj)} against the guesses' "
            f"{percent(earned.guess_under_uj, earned.actual_uj)}: the maximum of a few short "
            "runs is below a long run's cost, the limit §2.6 itself states. Earning is fast "
            "(a median class earns within weeks), but what it earns is only as good as the "
            "class is narrow.",
        ]
    else:
        out["earned"] = ["No claim started on an earned estimate in this cell."]
    out["baselines"] = [
        f"On seed {focus.seed} at {gj(focus.budget_uj)} GJ a {ev.settings.period}: the device "
        f"quota completed {dev.completed:,} jobs and spent {percent(dev.spent_uj, dev.budget_uj)} "
        f"of the budget; the GPU-hour quota {gpu.completed:,} jobs at "
        f"{percent(gpu.spent_uj, gpu.budget_uj)}; the grade-blind quota {blind.completed:,} at "
        f"{percent(blind.spent_uj, blind.budget_uj)}; pool/1 {p1.completed:,} at "
        f"{percent(p1.spent_uj, p1.budget_uj)}.",
        f"Where pool/1 loses: it completes {dev.completed - p1.completed:,} fewer jobs than the "
        f"device quota and its median wait over all jobs is {wait_text(p1.wait_all_median)} h "
        f"against {wait_text(dev.wait_all_median)} h, because it holds the cluster to an "
        "energy budget the device quota ignores; every guess past a team's guarantee "
        "waits for its class to earn an estimate or for the next period. It also completes "
        f"fewer jobs than the grade-blind quota ({blind.completed:,}) and runs further past the "
        f"budget ({gj(p1.beyond_budget_uj)} GJ against {gj(blind.beyond_budget_uj)} GJ): the "
        "earned estimates it lends on under-reserve long runs (question 2).",
        f"Against the GPU-hour quota, the same budget in GPU-time: pool/1 completes "
        f"{abs(p1.completed - gpu.completed):,} {'more' if p1.completed >= gpu.completed else 'fewer'} "
        f"jobs and spends {gj(p1.spent_uj)} GJ against its {gj(gpu.spent_uj)} GJ; a GPU-hour "
        "quota charges each user's requested time up front and cannot lend, so "
        "over-requests leave the budget idle (its GPU utilisation: "
        f"{ratio_text(gpu.utilisation)} against pool/1's {ratio_text(p1.utilisation)}).",
    ]
    out |= _runtime_conclusions(ev)
    return out


def _range(values: Sequence[int], show: Callable[[int], str]) -> str:
    """`a–b` over every cell, or one figure where they agree."""
    lo, hi = show(min(values)), show(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def _runtime_conclusions(ev: Evaluation) -> dict[str, list[str]]:
    """What holding runs to their reservation, timed classes and monthly periods buy."""
    out: dict[str, list[str]] = {}
    cells = ev.cells
    noun = ev.settings.period

    def over(key: str) -> str:
        return _range([c.summaries[key].beyond_budget_uj for c in cells], gj)

    def overrun(key: str) -> str:
        return _range([c.summaries[key].overrun_uj for c in cells], gj)

    def fewer(key: str, than: str = "pool1") -> str:
        """How many fewer (or more) jobs `key` completed than `than`, over every cell."""
        diffs = [c.summaries[than].completed - c.summaries[key].completed for c in cells]
        lo, hi = min(diffs), max(diffs)
        if lo >= 0:
            return f"{_range(diffs, lambda n: f'{n:,}')} fewer jobs"
        if hi <= 0:
            return f"{_range([-d for d in diffs], lambda n: f'{n:,}')} more jobs"
        return f"between {-lo:,} more and {hi:,} fewer jobs"

    def within(key: str) -> bool:
        return all(c.summaries[key].beyond_budget_uj == 0 for c in cells)

    def median_beyond(key: str) -> int:
        return _median([c.summaries[key].beyond_budget_uj for c in cells]) or 0

    def wasted(key: str) -> str:
        return _range([c.summaries[key].wasted_uj for c in cells], gj)

    def wait(key: str) -> str:
        return _range(
            [p.us for c in cells if (p := c.summaries[key].wait_all_median) is not None], hours
        )

    jobs = _range([c.summaries["pool1"].jobs for c in cells], lambda n: f"{n:,}")
    passed = _range([sum(c.summaries["pool1"].acts.values()) for c in cells], lambda n: f"{n:,}")
    checkpoint = hours(DEFAULT_CHECKPOINT_US)
    out["limit"] = [
        f"- **report** (today's default): pool/1 ran {over('pool1')} GJ beyond the budget "
        f"over the trace ({overrun('pool1')} GJ past guarantee + weighted share), across every "
        f"seed and budget; {passed} of {jobs} runs passed their reservation + "
        f"{RUNTIME_MARGIN_PCT}% and nothing stopped them. The median wait over all jobs was "
        f"{wait('pool1')} h.",
        "- **requeue**, as the service and the Slurm bridge carry it out, "
        + (
            "keeps the cluster within its budget in every cell"
            if within("pool1_requeue")
            else "does not keep the cluster within its budget"
        )
        + f": {over('pool1_requeue')} GJ beyond it. A requeued job keeps "
        "its claim (its reservation and its devices), so it starts again at once from its last "
        f"checkpoint (every {checkpoint} h of run time here) and runs to its end, and `due_act` "
        "makes the act due once per claim: the run that follows is never stopped. It costs "
        f"{wasted('pool1_requeue')} GJ of work done twice, and completes "
        f"{fewer('pool1_requeue')} than `report`. (A requeue that re-admitted the job on a "
        "new claim is not what the service does, and is not replayed.)",
        "- **cancel** "
        + (
            "keeps the cluster within the budget in every cell"
            if within("pool1_cancel")
            else "does not keep the cluster within the budget everywhere"
        )
        + f": {over('pool1_cancel')} GJ beyond "
        f"it, {overrun('pool1_cancel')} GJ past guarantee + share. The price: "
        f"{fewer('pool1_cancel')} completed than `report`, and "
        f"{wasted('pool1_cancel')} GJ spent on runs that were cancelled and never completed "
        "(all of a cancelled run's energy is wasted: it has no output). The median wait over "
        f"all jobs was {wait('pool1_cancel')} h (report: {wait('pool1')} h).",
    ]
    base = [c.summaries["pool1"] for c in cells]
    timed = [c.summaries["pool1_timed"] for c in cells]

    def ratio(ss: list[Summary], p90: bool) -> str:
        values = [
            x for s in ss if (x := s.earned_ratio_p90 if p90 else s.earned_ratio_median) is not None
        ]
        return spread(values, times)

    def under(ss: list[Summary]) -> str:
        return spread([Fraction(s.earned_under, s.earned_claims) for s in ss if s.earned_claims])

    out["classes"] = [
        "Declaring the requested run time, bucketed in powers of two of hours, beside job type "
        f"× gang size ({spread([s.classes for s in timed])} classes against "
        f"{spread([s.classes for s in base])}) tightens what the classes earn: an earned "
        f"estimate is a median {ratio(timed, False)} of what its job draws, p90 "
        f"{ratio(timed, True)} (type × gang: {ratio(base, False)}, p90 {ratio(base, True)}), and "
        f"{under(timed)} of the claims admitted on one drew more than it reserved (type × "
        f"gang: {under(base)}); medians over every seed and budget, with (min–max). "
        f"Claims started on an earned estimate: {spread([s.earned_claims for s in timed])} "
        f"against {spread([s.earned_claims for s in base])}.",
        f"- **Under `report` alone**, pool/1 with timed classes ran "
        f"{over('pool1_timed')} GJ beyond the budget ({overrun('pool1_timed')} GJ past "
        f"guarantee + share), against {over('pool1')} GJ with type × gang classes "
        + (
            "(less: where timed classes win, without stopping any job)"
            if median_beyond("pool1_timed") < median_beyond("pool1")
            else "(not less)"
        )
        + f"; it completes {fewer('pool1_timed')} than type × gang classes, and the median "
        f"wait over all jobs was {wait('pool1_timed')} h (type × gang: {wait('pool1')} h).",
        f"- **With `cancel`** as well: {over('pool1_timed_cancel')} GJ beyond the budget, "
        f"{wasted('pool1_timed_cancel')} GJ wasted against type × gang's "
        f"{wasted('pool1_cancel')} GJ, and {fewer('pool1_timed_cancel', 'pool1_cancel')} "
        "completed than type × gang with `cancel`.",
    ]
    if ev.monthly:
        pairs = [(m, ev.cell(m.seed, ev.settings.budgets_uj[i])) for i, m in enumerate(ev.monthly)]

        def cmp(
            key: str, field: Callable[[Summary], int], show: Callable[[int], str], unit: str = ""
        ) -> str:
            month = _range([field(m.summaries[key]) for m, _ in pairs], show)
            week = _range([field(w.summaries[key]) for _, w in pairs], show)
            return f"{month}{unit} a month against {week}{unit} a {noun}"

        def beyond(s: Summary) -> int:
            return s.beyond_budget_uj

        def done(s: Summary) -> int:
            return s.completed

        def waited(s: Summary) -> int:
            return s.wait_all_median.us if s.wait_all_median is not None else 0

        def count(n: int) -> str:
            return f"{n:,}"

        out["monthly"] = [
            f"Monthly periods (seed {pairs[0][0].seed}, each {noun}ly budget × 30/7): beyond "
            f"the budget, pool/1 under `report` ran {cmp('pool1', beyond, gj, ' GJ')}; the "
            f"grade-blind quota {cmp('blind', beyond, gj, ' GJ')}; `cancel` "
            f"{cmp('pool1_cancel', beyond, gj, ' GJ')}; timed classes under `report` "
            f"{cmp('pool1_timed', beyond, gj, ' GJ')}. Jobs completed under `cancel`: "
            f"{cmp('pool1_cancel', done, count)}; with timed classes and `cancel`: "
            f"{cmp('pool1_timed_cancel', done, count)}; timed classes under `report`: "
            f"{cmp('pool1_timed', done, count)}. Median wait over all jobs under "
            f"`cancel`: {cmp('pool1_cancel', waited, hours, ' h')}.",
        ]
    return out


def render(ev: Evaluation, out: Path) -> str:
    """The whole report as Markdown; figures are referenced by their file names in `out`."""
    s = ev.settings
    focus = ev.focus
    conclusions = _conclusions(ev)
    seeds = ", ".join(str(x) for x in s.seeds)
    traces = ev.traces
    t0 = traces[s.seeds[0]]
    first = [
        "# Evaluation: periods, wrong estimates, earned estimates, run-time limits, and the "
        "quotas operators run",
        "",
        "What do pool/1's budget periods, its refusal to let guesses borrow (§4.4), its "
        "earned estimates (§2.6), the classes an operator declares and the reservation held "
        "as a limit at run time (DESIGN.md §7) buy and cost, against the quotas platform "
        "teams run today? "
        "This report replays real multi-tenant GPU traces through joulepool's `Pool` (the "
        "same `decide()` and ledger as production) under four policies, on the same jobs, "
        f"the same wrong estimates and the same budget, over {len(s.seeds)} trace seeds × "
        f"{len(s.budgets_uj)} budgets.",
        "",
        "Regenerate it, from a fresh clone after `make .venv/.joulepool-installed` (the "
        "traces ship inside the joulepool-sim distribution, "
        "`sim/src/joulepool_sim/data/traces/`):",
        "",
        "```",
        command(s, out),
        "```",
        "",
        f"The whole evaluation ({len(ev.cells)} cells and {len(ev.monthly)} monthly ones, "
        f"{replays(ev)} replays, every `Pool` ledger replayed back with each signature "
        f"verified) took **{ev.elapsed_ms // 1000}.{ev.elapsed_ms % 1000 // 100} s** (wall "
        "time) on the machine that wrote this report.",
        "",
        "## Answers in brief",
        "",
        "Which class declaration and which runtime policy keep a cluster within its energy "
        "budget, and at what cost (sections 6 and 7; every figure over every seed and "
        "budget):",
        "",
        *conclusions["limit"],
        "",
        *conclusions["classes"],
        "",
        "Where pool/1 now wins and where it still loses against the quotas operators run "
        f"(medians over seeds {seeds}, with (min–max)):",
        "",
        *_versus(ev),
        "",
        *_versus_conclusions(ev),
        "",
        "Does §5.2's preemption order lose less work than Slurm's (section 9)?",
        "",
        *_preemption_conclusions(ev),
        "",
        "## What was replayed",
        "",
        f"- **Traces**: Microsoft Philly jobs as generated by Gavel, seeds {seeds} "
        f"(`{shown_path(s.trace_path(s.seeds[0]).parent)}/seed<N>`), one file per virtual "
        "cluster (VC), the VC being the team. "
        + "; ".join(
            f"seed {t.seed}: {len(t.jobs):,} jobs of {len(t.sizes)} VCs" for t in traces.values()
        )
        + (f" (the first {s.first_jobs:,} arrivals only)" if s.first_jobs else "")
        + (
            f". **Sampled**: every {s.sample}th job of each VC's file (lines 1, "
            f"{1 + s.sample}, {1 + 2 * s.sample}, …), the whole span kept, on a cluster and "
            "budgets scaled to match, so that the whole grid runs in minutes"
            if s.sample > 1
            else ""
        )
        + ". Jobs of VCs with no size in Helios's `philly_vc.csv` are left out ("
        + ", ".join(f"seed {t.seed}: {sum(t.left_out_no_size.values())}" for t in traces.values())
        + "): without a size they have no guarantee.",
        f"- **Cluster**: {s.gpus:,} GPUs (Helios's 352 Philly nodes at 2 GPUs each, divided "
        f"by the sampling {s.sample}), split "
        "into device guarantees by VC node count; devices never borrow, under every policy.",
        f"- **Periods and budgets**: {s.period}ly periods of fixed length from the trace's "
        "first instant. The cluster's energy budget per period is one of "
        + ", ".join(f"{gj(b)} GJ" for b in s.budgets_uj)
        + f" (seed {t0.seed}'s jobs are modelled to draw {gj(t0.demand_uj)} GJ in all), split "
        "among VCs by size; what a team does not spend in a period is gone. Every policy is "
        f"measured from the trace's start to {s.drain_periods} {s.period}s after the last "
        "arrival: nothing is admitted after that, and a job not started by then is censored "
        "there.",
        "- **Durations and energy**: `ceil(total_steps × 10⁶ / rate)` µs with Gavel's "
        f"isolated {s.gpu_type} rate (gangs Gavel does not tabulate scaled linearly); energy "
        "from Zeus's measured power of the same network for ResNet-50 jobs, TDP "
        f"({s.tdp_w} W) × GPUs × time for the rest. In this world that modelled figure is "
        "what the job really draws.",
        "- **Users' estimates are wrong** (`estimates.py`): each job's estimate is its "
        "modelled energy × a multiplier `m`, `ln m ~ Normal(ln "
        f"{s.error_median}, {s.error_sigma})`, clamped to [1/16, 64], drawn per job from "
        f"error seed {s.error_seed} and the job's id. With the defaults the median user "
        "reserves twice what the job draws, about 24% under-estimate, one in ten over-estimate "
        "more than 7-fold. The shape (mostly over, spread over an order of magnitude, a "
        "minority under) follows published studies of user run-time estimates (Mu'alem & "
        "Feitelson, IEEE TPDS 2001; Tsafrir, Etsion & Feitelson, JSSPP 2005 and IEEE TPDS "
        "2007): they measured run time on HPC logs, not energy on GPU clusters, so the "
        "parameters are an assumption. The estimate is a guess, graded `Estimator`; the "
        "same multiplier scales the run time the user requests (the GPU-hour quota's limit).",
        "- **Releases are measured**: release charges the modelled figure, graded `HwShunt` "
        "for jobs holding whole nodes (an even GPU count: the node meter the Slurm bridge "
        "reads) and `ModelBased` for jobs sharing a node. Every release is evidence (§2.6).",
        "- **Classes** (§2.4, §2.6): Gavel's job type (with its batch size) × gang size, "
        "declared on every claim and recorded in the ledger; in section 7 also the "
        "requested run time, bucketed in powers of two of hours (`estimates.timed_class`). "
        "The request carries the user's error: it is the modelled duration × the same "
        "multiplier as the energy guess.",
        "",
        "### The policies, exactly",
        "",
        "- **device-count quota** (today's baseline, through `Pool`): every VC's energy "
        "guarantee is all that its jobs could reserve or draw, so energy never binds; "
        "admission is on devices alone.",
        "- **GPU-hour quota** (Slurm `GrpTRESMins`, `gpu_hours.py`, not expressible in "
        "pool/1): each VC's share by size of the same budget in GPU-time (the energy budget "
        "÷ the replayed jobs' mean modelled power per GPU). A job starts only if GPUs × its "
        "requested time fit what is left this period (`AccountingStorageEnforce=safe`); when "
        "it ends its real GPU-time replaces the request; no borrowing; a request larger than "
        "a whole period's budget is refused.",
        "- **grade-blind energy quota** (through `Pool`): pool/1's tree and borrowing rules, "
        "with every guess presented as observed, so a guess borrows like a measurement.",
        "- **pool/1** (through `Pool`): energy and device guarantees per period; a claim "
        "goes in on the user's guess (a team may spend its own guarantee on a guess, §4.3); "
        "when that is refused because a guess may not borrow (§4.4) and its class has earned "
        "an estimate from the ledger's measured releases (`Pool.estimate`, 3 releases, the "
        "largest figure, `ModelBased`), it is decided again on that estimate, which may "
        "borrow within the weighted share.",
        f"- **Runtime policy** (`[runtime]`, DESIGN.md §7; sections 6-8; `runtime.py`): "
        f"`over_reservation` is `report`, `requeue` or `cancel`, margin {RUNTIME_MARGIN_PCT}%. "
        "A run's measured energy grows at its modelled power (`floor(actual × t / "
        "duration)`); the first whole millisecond at which it is past reservation × "
        f"(100 + {RUNTIME_MARGIN_PCT}) / 100, found exactly in integers, is put to the "
        "service's own `acts.due_act` on that instant's evidence, graded as the release "
        "would be: it must say `notice` and then the act (the replay stops otherwise). "
        "`cancel` ends the run there and releases the claim charging what it drew: its work "
        "is lost. `requeue` keeps the claim (docs/slurm.md: a requeue keeps the books), so "
        "the job restarts at once on its own devices from its last checkpoint (every "
        f"{hours(DEFAULT_CHECKPOINT_US)} h of run time) and runs to its end; the act is "
        "due once per claim; its release charges both runs. Wasted: a cancelled run's "
        "whole energy; a requeued job's charge beyond one uninterrupted run, both read from "
        "the ledger. `report` never acts: sections 1-5's pool/1 is pool/1 under `report`.",
        "- **Events**: releases first, then queued claims whose verdict may have changed, "
        "then arrivals; a period's start renews every guarantee. Outside `cancel` and "
        "`requeue` no job is stopped: each runs its modelled duration once started.",
        "",
        f"## 4. Baselines side by side (seed {focus.seed}, {gj(focus.budget_uj)} GJ a {s.period})",
        "",
        "Energy is read from each `Pool` policy's verified ledger; the GPU-hour quota keeps "
        "no ledger, so its energy is the measured actual of the jobs it started. Waits are "
        "over every job: a job never started (still queued at the horizon, or refused) is "
        "counted at its censored wait, and a percentile marked `≥` is a lower bound. "
        "Borne by other teams: energy a team spent beyond its own guarantee in a period, "
        "summed. Fairness: Jain's index of each team's energy over its guarantee.",
        "",
        *_side_by_side(focus),
        "",
        f"![Jobs completed and energy against the budget, every seed and budget]({BASELINES_PNG})",
        "",
        *conclusions["baselines"],
        "",
        "## 5. Robustness: every seed and budget",
        "",
        f"Each cell is the median over seeds {seeds}, with (min–max).",
        "",
        *_robustness(ev),
        "",
        f"## 1. Periods (pool/1, seed {focus.seed}, {gj(focus.budget_uj)} GJ a {s.period})",
        "",
        f"Per {s.period}: energy charged to claims admitted in it (from the ledger), the share "
        "of the teams' guarantees used, borrowed at admission, spent beyond each team's own "
        "guarantee, and beyond guarantee plus its weighted share of what the others left "
        "unspent at the period's end.",
        "",
        *_periods(focus.summaries["pool1"], s),
        "",
        f"![pool/1 per {s.period}]({PERIODS_PNG})",
        "",
        *conclusions["periods"],
        "",
        "## 2. Wrong estimates: the budget",
        "",
        f"Seed {focus.seed}, {gj(focus.budget_uj)} GJ a {s.period}. Past guarantee + "
        "weighted share: per team and period, spending beyond its guarantee plus its "
        "weighted share of the others' unspent guarantees at the period's end (§2.2), "
        "summed: energy no loan rule would have granted.",
        "",
        *_estimates(focus),
        "",
        "Per team, past its guarantee plus weighted share, summed over periods:",
        "",
        *_team_overruns(focus),
        "",
        *conclusions["estimates"],
        "",
        "## 3. Earned estimates (pool/1)",
        "",
        *_earning(ev),
        "",
        f"Reservation against the actual, seed {focus.seed}, {gj(focus.budget_uj)} GJ a "
        f"{s.period} (percentages of the actual those claims drew):",
        "",
        *_reservations(focus.summaries["pool1"]),
        "",
        f"![Classes earning estimates]({EARNED_PNG})",
        "",
        *conclusions["earned"],
        "",
        f"![Cluster GPU utilisation, seed {focus.seed}]({UTILISATION_PNG})",
        "",
        "## 6. The reservation as a limit (pool/1, `[runtime] over_reservation`)",
        "",
        f"Each cell is the median over seeds {seeds}, with (min–max). Runs past reservation + "
        f"{RUNTIME_MARGIN_PCT}%: admitted runs whose measured energy passed it (under "
        "`report` each is a `report` record, under the others the act). Wasted: energy spent "
        "on work that was thrown away, from the start of a cancelled run, from the last "
        f"checkpoint ({hours(DEFAULT_CHECKPOINT_US)} h) of a requeued one.",
        "",
        *_limit(ev),
        "",
        "What each policy buys and costs, in words, is in the answers at the top.",
        "",
        "## 7. Classes that name the requested run time",
        "",
        f"Each cell is the median over seeds {seeds}, with (min–max). Earned / actual: per "
        "claim admitted on an earned estimate, its ledgered reservation over what the job "
        "draws in one uninterrupted run (nearest-rank median and p90 over the claims of a "
        "replay).",
        "",
        *_classes(ev),
        "",
        "In words: the answers at the top.",
        "",
        *_monthly_section(ev),
        *_preemption_section(ev),
        "## Limits",
        "",
        "- Nothing here is a reading: every joule is a model (Zeus profiles, TDP × time), "
        "treated as the truth of this world. The error model's shape is from run-time "
        "studies; its parameters are an assumption.",
        "- A job charged to the period it was admitted in is pool/1's rule; the GPU-hour "
        "quota is held to the same rule here, where Slurm would split a running job's usage "
        "across a reset.",
        "- No job is killed at its requested time, under any policy; Philly's placement, "
        "failures and preemptions are not modelled.",
        "- A class of job type × gang size is coarse: its runs differ by orders of "
        "magnitude in length, so its largest measured figure over-reserves most runs "
        "(section 7 replays the class that also names the requested run time).",
        "- **Idle reclamation (`[idle]`, standard §2.7) cannot be evaluated on these "
        "traces**: they carry no per-job utilisation, and none is invented here.",
        "- Preemption (section 9) is replayed on one partition of half the cluster's GPUs "
        "that every VC may fill, energy never binding: its figures isolate the victim order, "
        "not pool/1's budgets. GPUs are counted per partition, not per node, as the service "
        "counts them; Slurm's scheduling is priority then age, first fit, without "
        "reservations for large jobs; the notice is given and the victim requeued at once.",
        "- The runtime acts rest on a run whose power is constant (its modelled figure "
        "spread evenly over its run time); the notice changes nothing (no job here reacts "
        "to it), and `signal` is not replayed (its effect is the job's own). A requeued job "
        "restarts the instant it is stopped: Slurm's own requeue delay is not modelled.",
        "- Requested run time is not enforced (no policy kills a job at its time limit); "
        "it only names the class.",
        "- The whole trace (`--sample 1`, with `--gpus 704` and budgets × 4) is not what "
        "this report replays: it runs well past 5 minutes here, its time going to the "
        "replay's scans of long queues rather than to `Pool`'s decisions or the ledger "
        "checks; sim/README.md gives the measured time and profile.",
        "",
    ]
    return "\n".join(first)


def replays(ev: Evaluation) -> int:
    """How many traces were replayed: the device quota once per seed (its energy never
    binds, so every budget reads the same replay), every other policy once per cell."""
    return (
        len(ev.settings.seeds)
        + sum(len(c.summaries) - 1 for c in ev.cells)
        + sum(len(c.summaries) for c in ev.monthly)
        + sum(len(rows) for rows in ev.preemption.values())
    )


def _monthly_section(ev: Evaluation) -> list[str]:
    if not ev.monthly:
        return []
    return [
        "## 8. Monthly periods beside weekly ones",
        "",
        f"Seed {ev.monthly[0].seed}: each weekly budget × 30/7 a 30-day month, every "
        "policy replayed again with monthly periods from the trace's first instant, to the "
        "first month boundary at or after the weekly replay's horizon; each monthly row is "
        "followed by the same policy's weekly row.",
        "",
        *_monthly(ev),
        "",
        *_runtime_conclusions(ev).get("monthly", []),
        "",
    ]


def _preemption_section(ev: Evaluation) -> list[str]:
    if not ev.preemption:
        return []
    high = ", ".join(f"`{vc}`" for vc in ev.high_tier)
    return [
        "## 9. Preemption by realised cost (§5.2) against Slurm's choice",
        "",
        f"Two priority tiers: the high tier is the smallest VCs, {high}, together at most a "
        "quarter of the nodes: small teams, whose few jobs an operator would not have wait "
        "behind a large team's long runs. Every VC may fill one partition of half the "
        "cluster's GPUs (the sampled trace seldom fills the whole cluster, and preemption "
        "then has nothing to do); Pool admits on energy alone, which never binds (the "
        "device quota's ceilings); Slurm starts pending jobs highest tier first, then "
        "longest pending, each that fits. A high-tier job pending 600 s (`after_s`) takes "
        "GPUs from the low tier: the victims `reclaim.victims` names (realised cost: µJ "
        "spent per Gavel step completed so far, most expensive first), or Slurm's youngest "
        "runs first. Each victim is made due through `reclaim.preemption_due` (notice, "
        "then requeue) and requeued as the service does it: it keeps its claim and resumes "
        f"from its last checkpoint ({hours(DEFAULT_CHECKPOINT_US)} h); it is no victim again "
        "within an hour (`cooldown_s`). Work lost: GPU-time since the last checkpoint of "
        "each preempted run; energy lost: its energy, drawn again and charged at release "
        "(read from the ledger). Waits: arrival to first start, censored at the horizon.",
        "",
        *_preemption(ev),
        "",
        *_preemption_conclusions(ev),
        "",
    ]


def write_report(evaluation: Evaluation, out: Path) -> Path:
    """Write `evaluation.md` into `out`; its path."""
    path = out / REPORT_MD
    path.write_text(render(evaluation, out), encoding="utf-8")
    return path


def summary_json(s: Summary) -> dict[str, object]:
    """One policy's figures for `--json`: integers, None where there is none."""
    return {
        "title": s.title,
        "jobs": s.jobs,
        "started": s.started,
        "completed": s.completed,
        "acts": s.acts,
        "wasted_uj": s.wasted_uj,
        "denied": s.denied,
        "censored": s.censored,
        "spent_uj": s.spent_uj,
        "budget_uj": s.budget_uj,
        "beyond_budget_uj": s.beyond_budget_uj,
        "beyond_guarantee_uj": s.beyond_guarantee_uj,
        "overrun_uj": s.overrun_uj,
        "borrowed_uj": s.borrowed_uj,
        "borrowed_on_guess_uj": s.borrowed_on_guess_uj,
        "borrowed_on_earned_uj": s.borrowed_on_earned_uj,
        "spent_by_team": s.spent_by_team,
        "wait_all_median_us": s.wait_all_median.us if s.wait_all_median else None,
        "wait_all_median_at_least": s.wait_all_median.at_least if s.wait_all_median else None,
        "ledger_entries": s.ledger_entries,
        "ledger_head": s.ledger_head,
        "classes_earned": len(s.class_earned_days),
        "started_on_earned": s.submitted_earned,
    }


def evaluation_json(evaluation: Evaluation) -> dict[str, object]:
    """The whole evaluation's figures for `--json`."""
    s = evaluation.settings
    return {
        "trace": shown_path(s.trace_path(s.seeds[0])),
        "seeds": list(s.seeds),
        "budgets_uj": list(s.budgets_uj),
        "period": s.period,
        "gpus": s.gpus,
        "elapsed_ms": evaluation.elapsed_ms,
        "traces": {
            str(t.seed): {
                "trace": shown_path(t.path),
                "jobs": len(t.jobs),
                "demand_uj": t.demand_uj,
                "left_out_no_size": t.left_out_no_size,
            }
            for t in evaluation.traces.values()
        },
        "cells": [
            {
                "seed": c.seed,
                "budget_uj": c.budget_uj,
                "budget_gpu_us": c.budget_gpu_us,
                "policies": {k: summary_json(v) for k, v in c.summaries.items()},
            }
            for c in evaluation.cells
        ],
        "monthly": [
            {
                "seed": c.seed,
                "budget_uj": c.budget_uj,
                "budget_gpu_us": c.budget_gpu_us,
                "policies": {k: summary_json(v) for k, v in c.summaries.items()},
            }
            for c in evaluation.monthly
        ],
        "preemption": {
            str(seed): {
                r.order: summary_json(r.summary)
                | {
                    "preemptions": r.preemptions,
                    "lost_gpu_us": r.lost_gpu_us,
                    "high_wait_median_us": r.high_wait_median.us if r.high_wait_median else None,
                    "high_wait_p95_us": r.high_wait_p95.us if r.high_wait_p95 else None,
                }
                for r in rows
            }
            for seed, rows in evaluation.preemption.items()
        },
    }
