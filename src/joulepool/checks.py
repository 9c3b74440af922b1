"""The shape rules every input obeys (DESIGN.md §2): integers, never negative; real names.

No float, bool or None stands in for a figure, and no empty string for a name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from joulepool.errors import InvalidInput


def check_figure(value: object, field: str) -> int:
    """Refuse anything but a non-negative integer (DESIGN.md §2): no float, bool or None."""
    if type(value) is not int:
        if isinstance(value, int) and not isinstance(value, bool):
            return check_figure(int(value), field)  # an int subclass (an IntEnum) is its value
        raise InvalidInput(field, f"must be a non-negative integer, got {type(value).__name__}")
    if value < 0:
        raise InvalidInput(field, f"must not be negative, got {value}")
    return value


def check_text(value: object, field: str) -> str:
    """Refuse anything but a non-empty string, for ids and names (DESIGN.md §3)."""
    if type(value) is not str or not value:
        if isinstance(value, str) and value:
            return str(value)
        raise InvalidInput(field, "must be a non-empty string")
    return value


def check_keys(
    obj: object, where: str, required: Iterable[str], optional: Iterable[str] = ()
) -> Mapping[str, Any]:
    """Refuse an object with an unknown, a missing or a null field, naming it (CONFORMANCE.md).

    An optional field is absent, never null (DESIGN.md §4).
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
    for name, value in obj.items():
        if value is None:
            raise InvalidInput(join_field(where, str(name)), "null is not a value: leave it out")
    return obj


def join_field(where: str, name: str) -> str:
    """A field's dotted path inside `where`."""
    return f"{where}.{name}" if where else name
