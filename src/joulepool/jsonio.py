"""Strict JSON in, canonical JSON out, for `pool exec` and the service (CONFORMANCE.md).

A case is strict I-JSON (RFC 7493, CONFORMANCE.md): a repeated key, a lone surrogate in a
key or a string, or nesting deeper than `MAX_DEPTH` is refused here, before any operation
sees the case. Integers only (DESIGN.md §2): a float is parsed as what it is, so that the
shape check of the field it lands in refuses it by name; NaN and Infinity are not JSON and
are refused here too.
"""

from __future__ import annotations

import json
from typing import Any

from joulepool.errors import InvalidInput

MAX_DEPTH = 32
"""The deepest nesting a case may have, the top-level object being level 1 (CONFORMANCE.md)."""


def _no_constant(text: str) -> object:
    raise InvalidInput("", f"{text} is not JSON, and not a figure: every figure is an integer")


def _lone_surrogate(text: str) -> int | None:
    # The parser joins an escaped pair into one code point, so any surrogate left is lone.
    for ch in text:
        if 0xD800 <= ord(ch) <= 0xDFFF:
            return ord(ch)
    return None


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        # Checked before the repeat, so that no refusal ever quotes an unencodable key.
        point = _lone_surrogate(key)
        if point is not None:
            raise InvalidInput("", f"an object key holds the lone surrogate U+{point:04X}")
        if key in out:
            raise InvalidInput(key, "appears twice in one object")
        out[key] = value
    return out


def loads_strict(data: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """Parse one strict I-JSON document (CONFORMANCE.md, RFC 7493); every refusal is
    `InvalidInput` naming what was wrong, and never quotes a lone surrogate.

    `max_depth` is for documents that wrap a case, such as a vector file, one level deeper.
    """
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
        # Also an integer beyond Python's digit limit for str -> int conversion. The
        # message quotes no input text, only a position, so it is always encodable.
        raise InvalidInput("", f"not valid JSON: {exc}") from None
    _check_tree(value, max_depth)
    return value


def _check_tree(value: Any, max_depth: int) -> None:
    # One walk, depth-first with an explicit stack, so that a hostile document cannot
    # exhaust Python's recursion limit here.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            if level > max_depth:
                raise InvalidInput("", f"nested deeper than {max_depth} levels")
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            if level > max_depth:
                raise InvalidInput("", f"nested deeper than {max_depth} levels")
            stack.extend((v, level + 1) for v in item)
        elif isinstance(item, str):
            point = _lone_surrogate(item)
            if point is not None:
                raise InvalidInput("", f"a string holds the lone surrogate U+{point:04X}")


def dumps_canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces; the same value always gives the same text
    (CONFORMANCE.md)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
