"""Build the strict I-JSON vectors (CONFORMANCE.md: nesting deeper than 32 levels is
`invalid_input`, checked before anything else) by hand; this does not import joulepool.

The level count: the case object is level 1, `claim` level 2, `estimate` level 3, and each
array wrapped around the figure one more. Each vector pairs the depth with a tree that
loops, so that an implementation checking the tree first answers `invalid_tree` and one
checking the depth first answers `invalid_input`: level 33 must be refused for its depth,
level 32 must not be.

Lone surrogates and repeated keys cannot be vectors: a vector file is strict I-JSON too, so
a conforming reader refuses the file itself. tests/test_exec_strict_ijson.py carries them.

    .venv/bin/python conformance/generators/ijson_vectors.py conformance/vectors
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

MUST = "7.4"  # a claim's shape is checked before any decision (§4.1)
SECTION = "4.1"
LIMIT = 32


def looping_tree() -> dict[str, Any]:
    """Two entitlements, each the other's parent: `invalid_tree` when it is read."""
    node = {"guarantee_uj": 100, "guarantee_devices": 2, "over_quota_weight": 1}
    return {
        "entitlements": [
            {"id": "x", "parent": "y", **node},
            {"id": "y", "parent": "x", **node},
        ]
    }


def claim_nested_to(level: int) -> dict[str, Any]:
    """A claim whose estimate figure sits inside arrays reaching `level`."""
    figure: Any = 10
    for _ in range(level - 3):
        figure = [figure]
    estimate = {"uj": figure, "grade": "HwShunt"}
    return {
        "id": "c1",
        "entitlement": "x",
        "gang_size": 1,
        "devices_per_member": 1,
        "estimate": estimate,
    }


VECTORS: dict[str, dict[str, Any]] = {
    f"04-4.1-case-nested-{LIMIT + 1}-levels-is-invalid-input-before-the-tree": {
        "section": SECTION,
        "must": MUST,
        "title": f"A case nested {LIMIT + 1} levels deep is invalid_input, before its "
        "looping tree is read.",
        "case": {
            "op": "decide",
            "tree": looping_tree(),
            "usage": {},
            "claim": claim_nested_to(LIMIT + 1),
        },
        "expect": {"error": "invalid_input"},
    },
    f"04-4.1-case-nested-{LIMIT}-levels-reaches-the-tree": {
        "section": SECTION,
        "must": MUST,
        "title": f"A case nested exactly {LIMIT} levels deep is read: its looping tree is "
        "invalid_tree.",
        "case": {
            "op": "decide",
            "tree": looping_tree(),
            "usage": {},
            "claim": claim_nested_to(LIMIT),
        },
        "expect": {"error": "invalid_tree"},
    },
}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, doc in VECTORS.items():
        (out / f"{name}.json").write_text(
            json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
