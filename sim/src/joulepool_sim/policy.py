"""The four policies compared, over the same VCs (standard §2.1, §2.2, §4.4).

Every policy splits the cluster's GPUs into device guarantees in proportion to VC size
(nodes), and devices never borrow (DESIGN.md §3): no team can occupy a GPU the cluster does
not have. Budgets are per period (periods.py): what a team does not spend in one is gone.

- **device-count quota** (today's baseline): one root, one child per VC, every VC's energy
  guarantee per period the energy all its jobs could reserve or draw (the sum, over its
  jobs, of the larger of guess and actual). A VC can never have spent more than
  that, so §4.3 admits on devices alone and no claim ever borrows: energy is enforced nowhere,
  by a finite stated figure rather than a fake one.
- **GPU-hour quota** (Slurm `GrpTRESMins`, gpu_hours.py): each VC's share, by size, of the
  cluster's GPU-time per period, the energy budget converted at the replayed jobs' mean
  modelled power per GPU; no borrowing.
- **grade-blind energy quota**: pool/1's tree, and every estimate taken as observed, so a
  guess borrows like a measurement (engine.py, mode `blind`).
- **pool/1**: each VC's energy guarantee per period is its share of the cluster's budget,
  by size. Past it a claim borrows siblings' unspent guarantees within its weighted share,
  and only on an observed estimate (§4.4), earned from measured releases (§2.6).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from joulepool.tree import Entitlement, Tree
from joulepool_sim.errors import SimulationConfigError

ROOT = "cluster"


@dataclass(frozen=True, slots=True)
class Policy:
    """A named tree to replay the trace against."""

    key: str
    title: str
    tree: Tree

    def vcs(self) -> tuple[str, ...]:
        """The tenants: the root's children, in tree order."""
        return self.tree.children(ROOT)


def split_in_proportion(total: int, weights: Mapping[str, int]) -> dict[str, int]:
    """`total` split by weight, conserving it exactly: floor shares, then the remainder one
    unit at a time to the largest fractional remainders, ties by id (as DESIGN.md §3 §2.5)."""
    weight_sum = sum(weights.values())
    if weight_sum == 0:
        raise SimulationConfigError("cannot split by weight: every VC has size 0")
    shares: dict[str, int] = {}
    remainders: list[tuple[int, str]] = []
    for key, weight in weights.items():
        shares[key], rest = divmod(total * weight, weight_sum)
        remainders.append((rest, key))
    remainders.sort(key=lambda item: (-item[0], item[1]))
    for _, key in remainders[: total - sum(shares.values())]:
        shares[key] += 1
    return shares


def _tree(sizes: Mapping[str, int], gpus: int, energy: Mapping[str, int]) -> Tree:
    devices = split_in_proportion(gpus, sizes)
    children = [
        Entitlement(
            id=vc,
            parent=ROOT,
            guarantee_uj=energy[vc],
            guarantee_devices=devices[vc],
            over_quota_weight=sizes[vc],
        )
        for vc in sorted(sizes)
    ]
    # The root holds no claims; its figures only state the cluster's totals.
    root = Entitlement(
        id=ROOT,
        guarantee_uj=sum(energy.values()),
        guarantee_devices=gpus,
        over_quota_weight=0,
    )
    return Tree([root, *children])


def _check(sizes: Mapping[str, int], gpus: int) -> None:
    if not sizes:
        raise SimulationConfigError("no VC has both a size and jobs: nothing to simulate")
    if gpus < 1:
        raise SimulationConfigError(f"the cluster needs at least one GPU, got {gpus}")


def pool1_policy(sizes: Mapping[str, int], gpus: int, budget_uj: int) -> Policy:
    """pool/1: energy and device guarantees, each VC's share by size (§2.1, §2.2, §4.4)."""
    _check(sizes, gpus)
    if budget_uj < 1:
        raise SimulationConfigError(f"the energy budget must be at least 1 µJ, got {budget_uj}")
    return Policy(
        "pool1",
        "pool/1 (energy + devices)",
        _tree(sizes, gpus, split_in_proportion(budget_uj, sizes)),
    )


def device_only_policy(
    sizes: Mapping[str, int], gpus: int, demand_uj: int | Mapping[str, int]
) -> Policy:
    """Device-count quota: the same tree, every VC's energy guarantee all that its jobs could
    reserve or draw (`demand_uj`, one figure or one per VC), so energy never binds."""
    _check(sizes, gpus)
    ceilings = dict.fromkeys(sizes, demand_uj) if isinstance(demand_uj, int) else demand_uj
    return Policy("devices", "device-count quota", _tree(sizes, gpus, ceilings))


def grade_blind_policy(sizes: Mapping[str, int], gpus: int, budget_uj: int) -> Policy:
    """pool/1's tree for the quota that takes every estimate as observed (§4.4 rule 1 off)."""
    tree = pool1_policy(sizes, gpus, budget_uj).tree
    return Policy("blind", "energy quota blind to grades", tree)


def gpu_time_budgets(sizes: Mapping[str, int], budget_gpu_us: int) -> dict[str, int]:
    """Each VC's GPU-time budget per period (GPU-µs): its share of the cluster's, by size."""
    if budget_gpu_us < 1:
        raise SimulationConfigError(f"the GPU-time budget must be at least 1, got {budget_gpu_us}")
    return split_in_proportion(budget_gpu_us, sizes)


def device_limits(tree: Tree) -> dict[str, int]:
    """Each VC's device guarantee, the GPUs it may hold at once."""
    return {vc: tree[vc].guarantee_devices for vc in tree.children(ROOT)}


def tiered_device_policy(
    sizes: Mapping[str, int], gpus: int, ceilings: Mapping[str, int], priority: Mapping[str, int]
) -> Policy:
    """The device quota for the preemption replay (preempt.py): every VC may hold the whole
    partition (its device guarantee is every GPU), so Pool admits on energy alone, which
    never binds (`ceilings`, as `device_only_policy`), and who runs is Slurm's choice by
    priority tier, as on a partition shared by a high and a low QOS."""
    _check(sizes, gpus)
    devices = dict.fromkeys(sizes, gpus)
    children = [
        Entitlement(
            id=vc,
            parent=ROOT,
            guarantee_uj=ceilings[vc],
            guarantee_devices=devices[vc],
            over_quota_weight=sizes[vc],
            priority=priority.get(vc, 0),
        )
        for vc in sorted(sizes)
    ]
    root = Entitlement(
        id=ROOT,
        guarantee_uj=sum(ceilings[vc] for vc in sizes),
        guarantee_devices=sum(devices.values()),
        over_quota_weight=0,
    )
    return Policy("tiers", "device quota, two priority tiers", Tree([root, *children]))
