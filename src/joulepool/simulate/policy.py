"""The two policies compared, as two entitlement trees over the same VCs (standard §2.1, §2.2).

Both trees have one root, `cluster`, and one child per VC (tenant). Both split the cluster's
GPUs into device guarantees in proportion to VC size (nodes), and weight borrowing by VC
size too. Devices never borrow (DESIGN.md §3), so the device guarantees together are
exactly the cluster: no tenant can occupy a GPU the cluster does not have.

- **pool/1**: each VC's energy guarantee is its share of the stated cluster energy budget
  for the window, in proportion to VC size. Past it, a claim borrows siblings' unspent
  guarantees within its weighted share, and only on an observed estimate (§4.4).
- **device-count quota**: the same tree, with energy made unable to bind by a finite,
  stated figure rather than a fake one: every VC's energy guarantee is the modelled energy
  of the whole replayed trace (every job of every VC). A VC can never have spent more than
  that, so `spent + estimate <= guarantee` always holds, §4.3 admits on devices alone, and
  no claim ever borrows. This is what a device quota does: energy is enforced nowhere.

The window is the whole trace: one ledger per policy, guarantees never reset. A claim
that cannot fit once its VC's window budget is spent waits for a window the replay does
not model, and the report counts it as still queued rather than inventing a start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from joulepool.simulate.errors import SimulationConfigError
from joulepool.tree import Entitlement, Tree

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


def device_only_policy(sizes: Mapping[str, int], gpus: int, demand_uj: int) -> Policy:
    """Device-count quota: the same tree, every energy guarantee the whole trace's demand."""
    _check(sizes, gpus)
    return Policy(
        "devices", "device-count quota", _tree(sizes, gpus, dict.fromkeys(sizes, demand_uj))
    )
