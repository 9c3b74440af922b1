"""The core of a pool/1 JCR-1 receipt: an event's fields as a det-CBOR map (DESIGN.md §4).

Reading and writing the core sit side by side here, so the wire form of an event is
defined in one place. Every entry carries `pool_receipt`, `seq`, `prev`, `steward`, `at_ms`
and `event`; an optional field is absent, never null.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nacl.signing import SigningKey

from joulepool.errors import InvalidInput
from joulepool.events import Admitted, Event, Released
from joulepool.grade import Energy, Grade
from joulepool.ledger.cose import seal
from joulepool.ledger.sequence import LONGEST_SEALED

PROFILE_VERSION = 1
_COMMON = frozenset({"pool_receipt", "seq", "prev", "steward", "at_ms", "event"})
_ADMITTED = _COMMON | {
    "claim",
    "entitlement",
    "gang_size",
    "devices_per_member",
    "reserved_uj",
    "grade",
    "borrowed_uj",
}
_ADMITTED_ALLOWED = _ADMITTED | {"class"}
_RELEASED = _COMMON | {"claim", "actual_uj", "grade"}


_GRADES = {g.value: g for g in Grade}


class EntryMalformed(ValueError):
    """A core whose fields are not the event's, or not well typed (DESIGN.md §4 `malformed`)."""


def core_of(event: Event, seq: int, prev: bytes, steward: str) -> dict[str, object]:
    """The core map of `event` sealed at index `seq` after head `prev` (DESIGN.md §4)."""
    core: dict[str, object] = {
        "pool_receipt": PROFILE_VERSION,
        "seq": seq,
        "prev": prev,
        "steward": steward,
        "at_ms": event.at_ms,
    }
    if isinstance(event, Admitted):
        core |= {
            "event": "admitted",
            "claim": event.claim,
            "entitlement": event.entitlement,
            "gang_size": event.gang_size,
            "devices_per_member": event.devices_per_member,
            "reserved_uj": event.reserved.uj,
            "grade": event.reserved.grade.value,
            "borrowed_uj": event.borrowed_uj,
        }
        if event.class_ is not None:
            core["class"] = event.class_
    else:
        core |= {
            "event": "released",
            "claim": event.claim,
            "actual_uj": event.actual.uj,
            "grade": event.actual.grade.value,
        }
    return core


# Key tuples already found to be exactly the fields of an event, with that event's name:
# a ledger's cores come in a few shapes, and a lookup is cheaper than two set comparisons.
_shapes: dict[tuple[str, ...], str] = {}


def _check_fields(kind: object, keys: Any) -> None:
    """Refuse a core whose fields are not exactly those of the event it names."""
    if kind == "admitted":
        allowed, required = _ADMITTED_ALLOWED, _ADMITTED
    elif kind == "released":
        allowed, required = _RELEASED, _RELEASED
    elif kind is None:
        raise EntryMalformed("the core has no 'event' field")
    else:
        raise EntryMalformed(f"event {brief(kind)} is neither 'admitted' nor 'released'")
    if not required <= keys or not keys <= allowed:
        # A hostile core's keys may mix ints, bytes and text: sort them by their repr.
        unknown = sorted(map(brief, keys - allowed))
        missing = sorted(required - keys)
        raise EntryMalformed(
            f"{kind} entry: unknown field(s) [{', '.join(unknown)}], missing {missing}"
        )
    if len(_shapes) < 64:
        _shapes[tuple(keys)] = kind


def brief(value: object, limit: int = 48) -> str:
    """A value's repr cut to `limit` characters, for a refusal's message about hostile bytes."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def event_of(core: Mapping[str, Any], steward: str) -> Event:
    """The event a verified core records; `EntryMalformed` if its fields are not the event's.

    `seq` and `prev` are checked by the chain before this is asked (DESIGN.md §4).
    """
    receipt = core.get("pool_receipt")
    if type(receipt) is not int or receipt != PROFILE_VERSION:
        raise EntryMalformed(f"pool_receipt must be {PROFILE_VERSION}")
    named = core.get("steward")
    if type(named) is not str or named != steward:
        raise EntryMalformed(f"steward {brief(named)} is not this ledger's {steward!r}")
    kind = core.get("event")
    keys = tuple(core)
    known = _shapes.get(keys)
    # A shape is remembered with the event it was checked for; a core naming another event
    # (or none) with the same keys is checked again, and refused.
    if known is None or known != kind:
        _check_fields(kind, core.keys())
    grade = _GRADES.get(core["grade"]) if type(core["grade"]) is str else None
    if grade is None:
        raise EntryMalformed(f"grade {brief(core['grade'])} is not a pool/1 grade")
    # The events validate their own fields (types, signs, shapes): one check, one place.
    try:
        if kind == "released":
            return Released(core["claim"], Energy(core["actual_uj"], grade), core["at_ms"])
        return Admitted(
            claim=core["claim"],
            entitlement=core["entitlement"],
            gang_size=core["gang_size"],
            devices_per_member=core["devices_per_member"],
            reserved=Energy(core["reserved_uj"], grade),
            borrowed_uj=core["borrowed_uj"],
            at_ms=core["at_ms"],
            class_=core.get("class"),
        )
    except InvalidInput as exc:
        raise EntryMalformed(f"{kind} entry: {exc}") from None


def seal_entry(event: Event, seq: int, prev: bytes, steward: str, signing_key: SigningKey) -> bytes:
    """Seal `event` as entry `seq` after head `prev` (DESIGN.md §4), refusing one longer than
    `LONGEST_SEALED` as invalid input: a torn write is told from damage by that bound."""
    raw = seal(core_of(event, seq, prev, steward), steward, signing_key)
    if len(raw) > LONGEST_SEALED:
        raise InvalidInput(
            "claim",
            f"its entry would be {len(raw)} bytes, over the {LONGEST_SEALED}-byte longest entry; "
            "shorten its ids and class",
        )
    return raw
