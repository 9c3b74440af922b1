"""The two events that move the ledger, and only two (standard §6.2).

A Queue or a Deny reserves nothing and is never an event. `Admitted` records the class the
claim declared beside its reservation, so the history can be read back as evidence (§2.6)
with no second store to drift from the ledger (§6.1).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from joulepool.checks import check_figure, check_keys, check_text
from joulepool.errors import InvalidInput
from joulepool.grade import Energy


class Admitted(msgspec.Struct, frozen=True, gc=False):
    """A claim's estimate reserved against its entitlement, with its declared class (§6.2)."""

    claim: str
    entitlement: str
    gang_size: int
    devices_per_member: int
    reserved: Energy
    borrowed_uj: int
    at_ms: int
    class_: str | None = None

    def __post_init__(self) -> None:
        check_text(self.claim, "claim")
        check_text(self.entitlement, "entitlement")
        check_figure(self.gang_size, "gang_size")
        check_figure(self.devices_per_member, "devices_per_member")
        check_figure(self.borrowed_uj, "borrowed_uj")
        check_figure(self.at_ms, "at_ms")
        if not isinstance(self.reserved, Energy):
            raise InvalidInput("reserved", "must be an Energy")
        if self.gang_size < 1 or self.devices_per_member < 1:
            raise InvalidInput("gang_size", "an admitted gang has members and devices")
        if self.borrowed_uj > self.reserved.uj:
            raise InvalidInput("borrowed_uj", "cannot exceed the reservation")
        if self.class_ is not None:
            # An empty class names no class (DESIGN.md §3, pinned): in an entry it is malformed.
            check_text(self.class_, "class")

    @property
    def devices(self) -> int:
        """Devices the admitted gang holds (§2.4)."""
        return self.gang_size * self.devices_per_member

    def to_json(self) -> dict[str, object]:
        """The CONFORMANCE.md `seal` event shape."""
        out: dict[str, object] = {
            "event": "admitted",
            "at_ms": self.at_ms,
            "claim": self.claim,
            "entitlement": self.entitlement,
            "gang_size": self.gang_size,
            "devices_per_member": self.devices_per_member,
            "reserved": self.reserved.to_json(),
            "borrowed_uj": self.borrowed_uj,
        }
        if self.class_ is not None:
            out["class"] = self.class_
        return out


class Released(msgspec.Struct, frozen=True, gc=False):
    """A reservation lifted and the actual figure charged in its place (§6.2)."""

    claim: str
    actual: Energy
    at_ms: int

    def __post_init__(self) -> None:
        check_text(self.claim, "claim")
        check_figure(self.at_ms, "at_ms")
        if not isinstance(self.actual, Energy):
            raise InvalidInput("actual", "must be an Energy")

    def to_json(self) -> dict[str, object]:
        """The CONFORMANCE.md `seal` event shape."""
        return {
            "event": "released",
            "at_ms": self.at_ms,
            "claim": self.claim,
            "actual": self.actual.to_json(),
        }


Event = Admitted | Released

_ADMITTED_REQUIRED = (
    "event",
    "at_ms",
    "claim",
    "entitlement",
    "gang_size",
    "devices_per_member",
    "reserved",
    "borrowed_uj",
)
_RELEASED_REQUIRED = ("event", "at_ms", "claim", "actual")


def event_from_json(obj: object, where: str = "event") -> Event:
    """Read a CONFORMANCE.md `seal` event strictly (§6.2)."""
    kind = obj.get("event") if isinstance(obj, Mapping) else None
    if kind == "admitted":
        check_keys(obj, where, _ADMITTED_REQUIRED, ("class",))
    elif kind == "released":
        check_keys(obj, where, _RELEASED_REQUIRED)
    else:
        raise InvalidInput(f"{where}.event", f"must be 'admitted' or 'released', got {kind!r}")
    assert isinstance(obj, Mapping)
    for name in ("claim", "entitlement"):
        if name in obj:
            check_text(obj[name], f"{where}.{name}")
    for name in ("at_ms", "gang_size", "devices_per_member", "borrowed_uj"):
        if name in obj:
            check_figure(obj[name], f"{where}.{name}")
    if kind == "released":
        return Released(
            obj["claim"], Energy.from_json(obj["actual"], f"{where}.actual"), obj["at_ms"]
        )
    class_ = obj.get("class")
    if class_ is not None and not isinstance(class_, str):
        raise InvalidInput(f"{where}.class", "must be a string")
    try:
        return Admitted(
            claim=obj["claim"],
            entitlement=obj["entitlement"],
            gang_size=obj["gang_size"],
            devices_per_member=obj["devices_per_member"],
            reserved=Energy.from_json(obj["reserved"], f"{where}.reserved"),
            borrowed_uj=obj["borrowed_uj"],
            at_ms=obj["at_ms"],
            class_=class_,
        )
    except InvalidInput as exc:
        raise InvalidInput(f"{where}.{exc.field}", exc.detail.split(": ", 1)[-1]) from None
