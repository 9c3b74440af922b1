"""The report's figures, as small PNGs drawn with matplotlib's Agg backend (no display).

Plotting converts integer figures to floats for drawing only; nothing drawn here feeds a
decision or a table (DESIGN.md §2).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from joulepool_sim.evaluation import Evaluation

BASELINES_PNG = "evaluation-baselines.png"
PERIODS_PNG = "evaluation-periods.png"
EARNED_PNG = "evaluation-earned.png"
UTILISATION_PNG = "evaluation-utilisation.png"
US_PER_DAY = 86_400 * 1_000_000
UJ_PER_GJ = 10**15
_TITLES = {
    "devices": "device-count quota",
    "gpu_hours": "GPU-hour quota",
    "blind": "grade-blind energy quota",
    "pool1": "pool/1",
}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_baselines(ev: Evaluation, path: Path) -> None:
    """Per budget and policy: jobs completed and energy over budget, median with min–max."""
    from joulepool_sim.evaluation import POLICY_ORDER

    plt = _pyplot()
    budgets = ev.settings.budgets_uj
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), dpi=100)
    width = 0.8 / len(POLICY_ORDER)
    for k, key in enumerate(POLICY_ORDER):
        for ax, metric in zip(axes, ("jobs", "energy"), strict=True):
            mids, lows, highs = [], [], []
            for budget in budgets:
                ss = [c.summaries[key] for c in ev.cells if c.budget_uj == budget]
                values = sorted(
                    s.completed if metric == "jobs" else 100 * s.spent_uj / s.budget_uj for s in ss
                )
                mid = values[(len(values) - 1) // 2]
                mids.append(mid)
                lows.append(mid - values[0])
                highs.append(values[-1] - mid)
            xs = [i + (k - (len(POLICY_ORDER) - 1) / 2) * width for i in range(len(budgets))]
            ax.bar(xs, mids, width, yerr=[lows, highs], capsize=2, label=_TITLES[key])
    labels = [f"{b / UJ_PER_GJ:g} GJ" for b in budgets]
    for ax, title in zip(axes, ("jobs completed", "energy / budget (%)"), strict=True):
        ax.set_xticks(range(len(budgets)), labels, fontsize=8)
        ax.set_xlabel(f"budget per {ev.settings.period}", fontsize=8)
        ax.set_title(title, fontsize=9)
    axes[1].axhline(100, color="black", linewidth=0.8)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle("Median over seeds, bars min–max", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_periods(ev: Evaluation, path: Path) -> None:
    """pool/1 per period: guarantees used, borrowed, and spent past guarantees."""
    plt = _pyplot()
    s = ev.focus.summaries["pool1"]
    xs = [p.index + 1 for p in s.periods]
    within = [p.within_uj / UJ_PER_GJ for p in s.periods]
    beyond = [p.beyond_uj / UJ_PER_GJ for p in s.periods]
    borrowed = [p.borrowed_uj / UJ_PER_GJ for p in s.periods]
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    ax.bar(xs, within, label="within guarantees")
    ax.bar(xs, beyond, bottom=within, label="beyond own guarantees")
    ax.plot(xs, borrowed, "k.", label="borrowed at admission")
    ax.axhline(ev.focus.budget_uj / UJ_PER_GJ, color="black", linewidth=0.8, label="budget")
    ax.set_xlabel(ev.settings.period)
    ax.set_ylabel("energy (GJ, modelled)")
    ax.set_title(f"pool/1 per {ev.settings.period}, seed {ev.focus.seed}", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_earned(ev: Evaluation, path: Path) -> None:
    """Classes that have earned an estimate, by day, for each seed at the focus budget."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.0), dpi=100)
    for cell in ev.cells:
        if cell.budget_uj != ev.focus.budget_uj:
            continue
        s = cell.summaries["pool1"]
        days = s.class_earned_days
        ax.step([0, *days], list(range(len(days) + 1)), where="post", label=f"seed {cell.seed}")
        ax.axhline(s.classes, linestyle=":", linewidth=0.6, color="grey")
    ax.set_xlabel("days since the trace's first arrival")
    ax.set_ylabel("classes with an earned estimate")
    ax.set_title("Classes earning estimates (dotted: classes in the trace)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_utilisation(ev: Evaluation, path: Path) -> None:
    """Cluster GPU utilisation over time under each policy, focus cell."""
    from joulepool_sim.evaluation import POLICY_ORDER

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    for key in POLICY_ORDER:
        s = ev.focus.summaries[key]
        times = [t / US_PER_DAY for t, _ in s.busy]
        levels = [100 * b / s.gpus for _, b in s.busy]
        ax.step(times, levels, where="post", linewidth=0.7, label=_TITLES[key])
    ax.set_xlabel("days since the trace's first arrival")
    ax.set_ylabel("GPUs busy (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"Cluster GPU utilisation, seed {ev.focus.seed}", fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_plots(ev: Evaluation, folder: Path) -> list[Path]:
    """Every PNG into `folder`; their paths."""
    paths = [folder / n for n in (BASELINES_PNG, PERIODS_PNG, EARNED_PNG, UTILISATION_PNG)]
    plot_baselines(ev, paths[0])
    plot_periods(ev, paths[1])
    plot_earned(ev, paths[2])
    plot_utilisation(ev, paths[3])
    return paths
