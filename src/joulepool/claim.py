"""The claim: capacity requested for a gang that must start together (standard §2.4)."""

from __future__ import annotations

from dataclasses import dataclass

from joulepool.checks import check_figure, check_keys, check_text
from joulepool.errors import InvalidInput
from joulepool.grade import Energy

_REQUIRED = ("id", "entitlement", "gang_size", "devices_per_member", "estimate")


@dataclass(frozen=True, slots=True)
class Claim:
    """A gang's request: its figures describe the whole gang, never a member (§2.4).

    A gang of no members or members of no devices is representable so that `decide()` can
    refuse it with its reason (§4.1); negative figures are invalid input.
    """

    id: str
    entitlement: str
    gang_size: int
    devices_per_member: int
    estimate: Energy
    class_: str | None = None

    def __post_init__(self) -> None:
        check_text(self.id, "id")
        check_text(self.entitlement, "entitlement")
        check_figure(self.gang_size, "gang_size")
        check_figure(self.devices_per_member, "devices_per_member")
        if not isinstance(self.estimate, Energy):
            raise InvalidInput("estimate", "must be an Energy")
        if self.class_ is not None:
            # An empty class names no class (DESIGN.md §3, "Edge cases, pinned").
            check_text(self.class_, "class")

    @property
    def devices(self) -> int:
        """Devices the whole gang occupies: gang_size × devices_per_member (§2.4)."""
        return self.gang_size * self.devices_per_member

    @classmethod
    def from_json(cls, obj: object, where: str = "claim") -> Claim:
        """Read the CONFORMANCE.md Claim shape strictly: no unknown or missing field (§2.4).

        `class` given as null is absent; given as "" it is invalid (DESIGN.md §3, pinned).
        """
        obj = check_keys(obj, where, _REQUIRED, ("class",))
        check_text(obj["id"], f"{where}.id")
        check_text(obj["entitlement"], f"{where}.entitlement")
        check_figure(obj["gang_size"], f"{where}.gang_size")
        check_figure(obj["devices_per_member"], f"{where}.devices_per_member")
        class_ = obj.get("class")
        if class_ is not None:
            check_text(class_, f"{where}.class")
        return cls(
            id=obj["id"],
            entitlement=obj["entitlement"],
            gang_size=obj["gang_size"],
            devices_per_member=obj["devices_per_member"],
            estimate=Energy.from_json(obj["estimate"], f"{where}.estimate"),
            class_=class_,
        )

    def to_json(self) -> dict[str, object]:
        """The CONFORMANCE.md Claim shape; `class` absent when none was declared."""
        out: dict[str, object] = {
            "id": self.id,
            "entitlement": self.entitlement,
            "gang_size": self.gang_size,
            "devices_per_member": self.devices_per_member,
            "estimate": self.estimate.to_json(),
        }
        if self.class_ is not None:
            out["class"] = self.class_
        return out
