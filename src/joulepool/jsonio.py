"""Strict JSON in, canonical JSON out, for `pool exec` and the service (CONFORMANCE.md).

Integers only (DESIGN.md §2): a float is parsed as what it is, so that the shape check of the
field it lands in refuses it by name; NaN and Infinity are not JSON and are refused here, as is
an object with a duplicate key, which would otherwise keep the last silently.
"""

from __future__ import annotations

import json
from typing import Any

from joulepool.errors import InvalidInput

MAX_DEPTH = 64


def _no_constant(text: str) -> object:
    raise InvalidInput("", f"{text} is not JSON, and not a figure: every figure is an integer")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InvalidInput(key, "appears twice in one object")
        out[key] = value
    return out


def loads_strict(data: bytes | str) -> Any:
    """Parse one JSON document strictly; every refusal is `InvalidInput` naming what was wrong."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput("", f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        value = json.loads(data, parse_constant=_no_constant, object_pairs_hook=_pairs)
    except InvalidInput:
        raise
    except RecursionError:
        raise InvalidInput("", "nested too deeply") from None
    except ValueError as exc:
        # Also an integer beyond Python's digit limit for str -> int conversion.
        raise InvalidInput("", f"not valid JSON: {exc}") from None
    if _depth(value) > MAX_DEPTH:
        raise InvalidInput("", f"nested deeper than {MAX_DEPTH} levels")
    return value


def _depth(value: Any) -> int:
    depth = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            depth = max(depth, level)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            depth = max(depth, level)
            stack.extend((v, level + 1) for v in item)
    return depth


def dumps_canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces; the same value always gives the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
