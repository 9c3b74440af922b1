"""The entitlement tree and the usage charged against it (standard §2.1, §2.2).

A `Tree` is validated when it is built, naming the node at fault. `Usage` holds what each
entitlement has spent and holds, and keeps per-parent sums of unspent guarantees and of
borrowing up to date as figures move, so one admission decision reads a constant number
of figures whether a parent has 10 children or 10,000 (DESIGN.md §3, §2.2).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from joulepool.checks import check_figure, check_keys, did_you_mean
from joulepool.errors import InvalidInput, InvalidTree
from joulepool.units import energy_text

_REQUIRED_FIELDS = ("id", "guarantee_uj", "guarantee_devices", "over_quota_weight")
_OPTIONAL_FIELDS = ("parent", "limit_uj", "priority")


@dataclass(frozen=True, slots=True)
class Entitlement:
    """A node of the tree: its guarantees, its share of a parent's surplus, its ceiling (§2.1)."""

    id: str
    guarantee_uj: int
    guarantee_devices: int
    over_quota_weight: int
    parent: str | None = None
    limit_uj: int | None = None
    priority: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidTree(
                None,
                "id",
                f"an entitlement id must be a non-empty string, got {self.id!r}",
                structural=isinstance(self.id, str),
            )
        for name in ("guarantee_uj", "guarantee_devices", "over_quota_weight", "priority"):
            _node_figure(self.id, name, getattr(self, name))
        if self.parent is not None and not isinstance(self.parent, str):
            raise InvalidTree(
                self.id, "parent", f"must be a string, got {self.parent!r}", structural=False
            )
        if self.parent == "":
            # An empty parent names no node of the tree (DESIGN.md §3, "Edge cases, pinned").
            raise InvalidTree(self.id, "parent", "an empty parent names no node")
        if self.limit_uj is not None:
            _node_figure(self.id, "limit_uj", self.limit_uj)
            if self.limit_uj < self.guarantee_uj:
                raise InvalidTree(
                    self.id,
                    "limit_uj",
                    f"limit_uj {self.limit_uj} ({energy_text(self.limit_uj)}) is below "
                    f"guarantee_uj {self.guarantee_uj} ({energy_text(self.guarantee_uj)})",
                )

    @classmethod
    def from_json(cls, obj: object, where: str = "entitlement") -> Entitlement:
        """Read the CONFORMANCE.md Entitlement shape strictly: no unknown or missing field (§2.1).

        An optional field given as null is absent (DESIGN.md §3, "Edge cases, pinned").
        """
        node = obj.get("id") if isinstance(obj, Mapping) else None
        node_id = node if isinstance(node, str) else None
        try:
            fields = check_keys(obj, where, _REQUIRED_FIELDS, _OPTIONAL_FIELDS)
        except InvalidInput as exc:
            reason = exc.detail.rsplit(": ", 1)[-1]
            if reason == "unknown field":
                key = exc.field.rsplit(".", 1)[-1]
                reason += did_you_mean(key, (*_REQUIRED_FIELDS, *_OPTIONAL_FIELDS))
            raise InvalidTree(node_id, exc.field, reason, structural=False) from None
        return cls(
            id=fields["id"],
            parent=fields.get("parent"),
            guarantee_uj=fields["guarantee_uj"],
            guarantee_devices=fields["guarantee_devices"],
            over_quota_weight=fields["over_quota_weight"],
            limit_uj=fields.get("limit_uj"),
            priority=fields.get("priority", 0),
        )

    def to_json(self) -> dict[str, object]:
        """The CONFORMANCE.md Entitlement shape; optional fields absent, never null."""
        out: dict[str, object] = {"id": self.id}
        if self.parent is not None:
            out["parent"] = self.parent
        out |= {
            "guarantee_uj": self.guarantee_uj,
            "guarantee_devices": self.guarantee_devices,
            "over_quota_weight": self.over_quota_weight,
        }
        if self.limit_uj is not None:
            out["limit_uj"] = self.limit_uj
        out["priority"] = self.priority
        return out


def _node_figure(node: str, field: str, value: object) -> None:
    """A tree's figure is a figure like any other (DESIGN.md §3): a bad one is invalid input."""
    try:
        check_figure(value, field)
    except InvalidInput as exc:
        raise InvalidTree(node, field, exc.detail.rsplit(": ", 1)[-1], structural=False) from None


class Tree:
    """A validated forest of entitlements (§2.1): unique ids, known parents, no cycles.

    Surplus never crosses roots (§2.2), so every root is a group of its own; the children of
    one parent form one sibling group, whose weight and guarantee sums are computed once.
    """

    __slots__ = ("_by_id", "_children", "_group_guarantee_uj", "_group_weight", "_order")

    def __init__(self, entitlements: Iterable[Entitlement]) -> None:
        by_id: dict[str, Entitlement] = {}
        order: list[str] = []
        for ent in entitlements:
            if not isinstance(ent, Entitlement):
                raise InvalidTree(
                    None, "entitlements", f"not an Entitlement: {ent!r}", structural=False
                )
            if ent.id in by_id:
                raise InvalidTree(ent.id, "id", "appears more than once")
            by_id[ent.id] = ent
            order.append(ent.id)
        children: dict[str, list[str]] = {}
        for node_id in order:
            parent = by_id[node_id].parent
            if parent is None:
                continue
            if parent not in by_id:
                hint = did_you_mean(parent, order)
                raise InvalidTree(
                    node_id, "parent", f"names {parent!r}, which is not in the tree{hint}"
                )
            children.setdefault(parent, []).append(node_id)
        _refuse_cycles(by_id, order)
        self._by_id = by_id
        self._order = order
        self._children = {p: tuple(c) for p, c in children.items()}
        self._group_weight = {
            p: sum(by_id[c].over_quota_weight for c in kids) for p, kids in children.items()
        }
        self._group_guarantee_uj = {
            p: sum(by_id[c].guarantee_uj for c in kids) for p, kids in children.items()
        }

    @classmethod
    def from_json(cls, obj: object) -> Tree:
        """Read the CONFORMANCE.md Tree shape `{"entitlements": [...]}` strictly."""
        items = check_keys(obj, "tree", ("entitlements",))["entitlements"]
        if not isinstance(items, list):
            raise InvalidInput("tree.entitlements", "must be a list")
        return cls(
            Entitlement.from_json(item, f"tree.entitlements[{i}]") for i, item in enumerate(items)
        )

    def to_json(self) -> dict[str, object]:
        """The CONFORMANCE.md Tree shape, in the order the tree was given."""
        return {"entitlements": [self._by_id[i].to_json() for i in self._order]}

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._by_id

    def __getitem__(self, node_id: str) -> Entitlement:
        return self._by_id[node_id]

    def __iter__(self) -> Iterator[Entitlement]:
        return (self._by_id[i] for i in self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tree) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def get(self, node_id: str) -> Entitlement | None:
        """The entitlement named `node_id`, or None where the tree holds none (§4.1)."""
        return self._by_id.get(node_id)

    def children(self, node_id: str) -> tuple[str, ...]:
        """The ids of `node_id`'s children, in tree order."""
        return self._children.get(node_id, ())

    def group_weight(self, node_id: str) -> int:
        """W of DESIGN.md §3: the summed weight of every node under `node_id`'s parent (§2.2).

        A root has no siblings, so its group is itself alone.
        """
        ent = self._by_id[node_id]
        if ent.parent is None:
            return ent.over_quota_weight
        return self._group_weight[ent.parent]

    def siblings_guarantee_uj(self, node_id: str) -> int:
        """The summed guarantees of `node_id`'s siblings, itself excluded; 0 for a root (§2.2)."""
        ent = self._by_id[node_id]
        if ent.parent is None:
            return 0
        return self._group_guarantee_uj[ent.parent] - ent.guarantee_uj

    def group_guarantees_uj(self) -> dict[str, int]:
        """For every parent, the summed guarantees of its children (§2.2): what is unspent
        before anything is spent."""
        return dict(self._group_guarantee_uj)

    def ancestors(self, node_id: str) -> Iterator[str]:
        """`node_id`'s parent, its parent's parent, and so on to the root."""
        parent = self._by_id[node_id].parent
        while parent is not None:
            yield parent
            parent = self._by_id[parent].parent

    def is_within(self, node_id: str, scope: str) -> bool:
        """Whether `node_id` is `scope` itself or one of its descendants."""
        return node_id == scope or scope in self.ancestors(node_id)


def _refuse_cycles(by_id: Mapping[str, Entitlement], order: list[str]) -> None:
    state: dict[str, int] = {}  # 1: on the current path, 2: reaches a root
    for start in order:
        path: list[str] = []
        node: str | None = start
        while node is not None and state.get(node) != 2:
            if state.get(node) == 1:
                raise InvalidTree(node, "parent", "the parent chain loops back to this node")
            state[node] = 1
            path.append(node)
            node = by_id[node].parent
        for visited in path:
            state[visited] = 2


@dataclass(slots=True)
class EntitlementUsage:
    """One entitlement's figures (API.md): spent includes running reservations (§3, §6.2).

    In a budget period (DESIGN.md §3) `spent_uj` and `reserved_uj` count the claims admitted
    in that period; `held_devices` and `running_claims` count every open claim.
    """

    spent_uj: int = 0
    reserved_uj: int = 0
    held_devices: int = 0
    running_claims: int = 0

    @property
    def charged_uj(self) -> int:
        """Released claims' actual figures: what is spent for good (API.md)."""
        return self.spent_uj - self.reserved_uj

    def borrowed_uj(self, guarantee_uj: int) -> int:
        """How far spending is past the guarantee: the borrowed part (DESIGN.md §3)."""
        return max(0, self.spent_uj - guarantee_uj)

    def remaining_uj(self, guarantee_uj: int) -> int:
        """What is left of the guarantee: `max(0, guarantee_uj - committed_uj)` (API.md)."""
        return max(0, guarantee_uj - self.spent_uj)

    def to_json(
        self, guarantee_uj: int, period: Mapping[str, int | None] | None = None
    ) -> dict[str, Any]:
        """The API.md `usage` object, against the entitlement's energy guarantee (§2.2).

        `committed_uj` is what admission compares (equal to `spent_uj`, kept for clients
        that read it); `period` names the budget period the figures belong to.
        """
        out: dict[str, Any] = {
            "spent_uj": self.spent_uj,
            "charged_uj": self.charged_uj,
            "reserved_uj": self.reserved_uj,
            "committed_uj": self.spent_uj,
            "remaining_uj": self.remaining_uj(guarantee_uj),
            "borrowed_uj": self.borrowed_uj(guarantee_uj),
            "held_devices": self.held_devices,
            "running_claims": self.running_claims,
        }
        if period is not None:
            out["period"] = dict(period)
        return out


class Usage:
    """What every entitlement has spent and holds, against one tree (§2.1, §2.2, §6.1).

    Usage is charged only to the entitlement a claim names (DESIGN.md §3). Figures of ids
    the tree does not hold (a node removed from the configuration while the ledger still
    names it) are kept, since the ledger is the truth, but take part in no sibling group.
    """

    __slots__ = ("_borrowed_sum", "_figures", "_tree", "_unspent_sum")

    def __init__(self, tree: Tree) -> None:
        self._tree = tree
        self._figures: dict[str, EntitlementUsage] = {}
        # Per parent: sum of unspent guarantees and of borrowing over its children.
        self._unspent_sum: dict[str, int] = tree.group_guarantees_uj()
        self._borrowed_sum: dict[str, int] = dict.fromkeys(self._unspent_sum, 0)

    @property
    def tree(self) -> Tree:
        """The tree these figures are grouped by."""
        return self._tree

    @classmethod
    def from_json(cls, tree: Tree, obj: object) -> Usage:
        """Read the CONFORMANCE.md Usage shape `{"id": {"spent_uj", "held_devices"}}` strictly."""
        if not isinstance(obj, Mapping):
            raise InvalidInput("usage", "must be an object")
        usage = cls(tree)
        for node_id, figures in obj.items():
            where = f"usage.{node_id}"
            check_keys(figures, where, ("spent_uj", "held_devices"))
            for name in ("spent_uj", "held_devices"):
                check_figure(figures[name], f"{where}.{name}")
            usage.move(node_id, spent_uj=figures["spent_uj"], held_devices=figures["held_devices"])
        return usage

    def rebind(self, tree: Tree) -> Usage:
        """The same figures grouped by another tree, for a configuration reload (§6.1)."""
        usage = Usage(tree)
        for node_id, fig in self._figures.items():
            usage.move(
                node_id,
                spent_uj=fig.spent_uj,
                reserved_uj=fig.reserved_uj,
                held_devices=fig.held_devices,
                running_claims=fig.running_claims,
            )
        return usage

    def of(self, node_id: str) -> EntitlementUsage:
        """A copy of one entitlement's figures; zero for an id nothing was charged to."""
        fig = self._figures.get(node_id)
        if fig is None:
            return EntitlementUsage()
        return EntitlementUsage(fig.spent_uj, fig.reserved_uj, fig.held_devices, fig.running_claims)

    def spent_uj(self, node_id: str) -> int:
        """Energy spent, running reservations included (§3)."""
        fig = self._figures.get(node_id)
        return fig.spent_uj if fig is not None else 0

    def held_devices(self, node_id: str) -> int:
        """Devices held by running claims (§2.1)."""
        fig = self._figures.get(node_id)
        return fig.held_devices if fig is not None else 0

    def ids(self) -> list[str]:
        """Every id with figures, sorted."""
        return sorted(self._figures)

    def lendable_uj(self, node_id: str) -> int:
        """L_b of DESIGN.md §3: the unspent guarantees of `node_id`'s siblings; 0 for a root."""
        ent = self._tree[node_id]
        if ent.parent is None:
            return 0
        own = max(0, ent.guarantee_uj - self.spent_uj(node_id))
        return self._unspent_sum[ent.parent] - own

    def group_borrowed_uj(self, node_id: str) -> int:
        """What all of `node_id`'s sibling group has borrowed, itself included (§2.2)."""
        ent = self._tree[node_id]
        if ent.parent is None:
            return max(0, self.spent_uj(node_id) - ent.guarantee_uj)
        return self._borrowed_sum[ent.parent]

    def move(
        self,
        node_id: str,
        *,
        spent_uj: int = 0,
        reserved_uj: int = 0,
        held_devices: int = 0,
        running_claims: int = 0,
    ) -> None:
        """Add (or with negative deltas, take back) figures, keeping group sums exact (§6.2).

        A move that would leave any figure negative is refused before anything changes.
        """
        fig = self._figures.get(node_id)
        if fig is None:
            fig = self._figures[node_id] = EntitlementUsage()
        new = (
            fig.spent_uj + spent_uj,
            fig.reserved_uj + reserved_uj,
            fig.held_devices + held_devices,
            fig.running_claims + running_claims,
        )
        if min(new) < 0:
            raise InvalidInput(f"usage.{node_id}", "a figure would fall below zero")
        ent = self._tree.get(node_id)
        if ent is not None and ent.parent is not None and spent_uj:
            g = ent.guarantee_uj
            parent = ent.parent
            self._unspent_sum[parent] += max(0, g - new[0]) - max(0, g - fig.spent_uj)
            self._borrowed_sum[parent] += max(0, new[0] - g) - max(0, fig.spent_uj - g)
        fig.spent_uj, fig.reserved_uj, fig.held_devices, fig.running_claims = new

    def to_json(self, ids: Iterable[str] | None = None) -> dict[str, dict[str, int]]:
        """The CONFORMANCE.md Usage shape for `ids` (default: every id with figures)."""
        chosen = self.ids() if ids is None else sorted(ids)
        return {
            i: {"spent_uj": self.spent_uj(i), "held_devices": self.held_devices(i)} for i in chosen
        }
