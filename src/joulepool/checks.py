"""The shape rules every input obeys (DESIGN.md §2, §3): integers in [0, 2**64 - 1]; real names.

No float, bool or None stands in for a figure, and no empty string for a name. A figure
past 2**64 - 1 is refused at the door, not when its entry is sealed: the range is the one a
ledger entry can carry (DESIGN.md §3, "Edge cases, pinned").
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from joulepool.errors import InvalidInput

FIGURE_MAX = 2**64 - 1
"""The largest figure (DESIGN.md §3): the largest unsigned integer a det-CBOR entry carries."""


def check_figure(value: object, field: str) -> int:
    """Refuse anything but an integer in [0, 2**64 - 1] (DESIGN.md §2, §3): no float, bool or None."""
    if type(value) is not int:
        if isinstance(value, int) and not isinstance(value, bool):
            return check_figure(int(value), field)  # an int subclass (an IntEnum) is its value
        raise InvalidInput(field, f"must be a non-negative integer, got {type(value).__name__}")
    if value < 0:
        raise InvalidInput(field, f"must not be negative, got {value}")
    if value > FIGURE_MAX:
        raise InvalidInput(field, f"must be at most 2**64 - 1, got {value}")
    return value


def check_text(value: object, field: str) -> str:
    """Refuse anything but a non-empty string, for ids and names (DESIGN.md §3)."""
    if type(value) is not str or not value:
        if isinstance(value, str) and value:
            return str(value)
        raise InvalidInput(field, "must be a non-empty string")
    return value


def check_hex(value: object, field: str, size: int | None = None) -> bytes:
    """The bytes of a lower-case hex string (of exactly `size` bytes, where given): keys,
    receipts and heads as API.md sends them."""
    if type(value) is not str or len(value) % 2 or value.strip("0123456789abcdef"):
        raise InvalidInput(field, "must be lower-case hex, two digits a byte")
    if size is not None and len(value) != 2 * size:
        raise InvalidInput(field, f"must be {size} bytes ({2 * size} hex digits)")
    return bytes.fromhex(value)


def check_keys(
    obj: object, where: str, required: Iterable[str], optional: Iterable[str] = ()
) -> Mapping[str, Any]:
    """Refuse an object with an unknown or a missing field, naming it (CONFORMANCE.md).

    In JSON input an optional field given as null is absent (DESIGN.md §3, "Edge cases,
    pinned"): the mapping returned leaves it out, so a caller reads the returned mapping,
    not `obj`. A required field given as null is refused as missing its value.
    """
    if not isinstance(obj, Mapping):
        raise InvalidInput(where, "must be an object")
    need = tuple(required)
    allowed = set(need).union(optional)
    extra = sorted(str(k) for k in obj if k not in allowed)
    if extra:
        raise InvalidInput(join_field(where, extra[0]), "unknown field")
    for name in need:
        if name not in obj:
            raise InvalidInput(join_field(where, name), "missing")
        if obj[name] is None:
            raise InvalidInput(join_field(where, name), "missing: null is not a value")
    if any(value is None for value in obj.values()):
        return {name: value for name, value in obj.items() if value is not None}
    return obj


def join_field(where: str, name: str) -> str:
    """A field's dotted path inside `where`."""
    return f"{where}.{name}" if where else name


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`"; did you mean 'vision'?"` when `name` is a near miss of one of `known` (difflib's
    ratio of at least 0.6), else "": the hint of an unknown key or id (docs/operations.md)."""
    near = difflib.get_close_matches(name, list(known), n=2, cutoff=0.6)
    if not near:
        return ""
    return "; did you mean " + " or ".join(repr(n) for n in near) + "?"
