"""The report's figures, as small PNGs drawn with matplotlib's Agg backend (no display).

Plotting converts integer figures to floats for drawing only; nothing drawn here feeds a
decision or a table (DESIGN.md §2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from joulepool.simulate.evaluation import Evaluation

UTILISATION_PNG = "evaluation-utilisation.png"
ENERGY_PNG = "evaluation-energy.png"
US_PER_DAY = 86_400 * 1_000_000
UJ_PER_GJ = 10**15


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_utilisation(evaluation: Evaluation, path: Path) -> None:
    """Cluster GPU utilisation over time under both policies, as step lines."""
    plt = _pyplot()
    end = evaluation.end_us
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    for summary, style in zip(evaluation.policies, ("-", "--"), strict=True):
        times = [t / US_PER_DAY for t, _ in summary.busy] + [end / US_PER_DAY]
        levels = [100 * b / summary.gpus for _, b in summary.busy]
        levels.append(levels[-1])
        ax.step(times, levels, where="post", linestyle=style, linewidth=0.8, label=summary.title)
    ax.set_xlabel("days since the trace's first arrival")
    ax.set_ylabel("GPUs busy (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"Cluster GPU utilisation, {evaluation.policies[0].gpus} GPUs", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_energy(evaluation: Evaluation, path: Path) -> None:
    """Per VC: energy spent under each policy against the pool/1 guarantee."""
    plt = _pyplot()
    pool1 = evaluation.policy("pool1")
    devices = evaluation.policy("devices")
    vcs = [t.vc for t in pool1.tenants]
    xs = list(range(len(vcs)))
    own = [min(t.spent_uj, t.guarantee_uj) / UJ_PER_GJ for t in pool1.tenants]
    borrowed = [t.borrowed_uj / UJ_PER_GJ for t in pool1.tenants]
    quota = [devices.tenant(vc).spent_uj / UJ_PER_GJ for vc in vcs]
    guarantee = [t.guarantee_uj / UJ_PER_GJ for t in pool1.tenants]
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=100)
    width = 0.38
    ax.bar([x - width / 2 for x in xs], own, width, label="pool/1: within guarantee")
    ax.bar([x - width / 2 for x in xs], borrowed, width, bottom=own, label="pool/1: borrowed")
    ax.bar([x + width / 2 for x in xs], quota, width, label="device-count quota", color="0.6")
    ax.scatter(xs, guarantee, marker="_", s=300, color="black", label="pool/1 guarantee", zorder=3)
    ax.set_xticks(xs, vcs, rotation=45, fontsize=8)
    ax.set_ylabel("energy (GJ, modelled)")
    ax.set_title("Energy per VC (ModelBased / Estimator models, no readings)", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_plots(evaluation: Evaluation, folder: Path) -> list[Path]:
    """Both PNGs into `folder`; their paths."""
    paths = [folder / UTILISATION_PNG, folder / ENERGY_PNG]
    plot_utilisation(evaluation, paths[0])
    plot_energy(evaluation, paths[1])
    return paths
