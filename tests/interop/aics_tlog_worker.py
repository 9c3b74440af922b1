"""Runs inside the aics-tlog virtual environment (aics-tlog 0.2.1; never joulepool): C2SP
checkpoints, tiles and proofs through an implementation that never heard of Pool. Reads
one JSON request on standard input and writes one JSON answer.

    {"op": "version"} -> {"version": TEXT}
    {"op": "write_tiles", "leaves": [HEX, ...], "out": DIR}
      -> {"paths": [PATH, ...]}   (aics-tlog's TileWriter, written under DIR)
    {"op": "check", "tiles": DIR, "note": TEXT, "vkey": TEXT,
     "old": [{"note": TEXT}, ...], "indices": [INT, ...],
     "our_inclusion": {"INDEX": [HEX, ...]}, "our_consistency": {"OLD_SIZE": [HEX, ...]}}
      -> {"checkpoint_ok": BOOL, "error": TEXT|null, "size": INT, "root": HEX,
          "root_from_tiles": HEX, "audit": {"tiles": INT, "bundles": INT} | {"error": TEXT},
          "inclusion": {"INDEX": {"theirs": [HEX], "verifies": BOOL, "ours_verify": BOOL}},
          "consistency": {"OLD_SIZE": {"old_ok": BOOL, "theirs": [HEX], "verifies": BOOL,
                                       "ours_verify": BOOL}}}
    {"op": "cosign", "note": TEXT, "seed": HEX, "name": TEXT, "timestamp": INT}
      -> {"line": TEXT, "vkey": TEXT}   (a cosignature/v1 signature line by aics-tlog)
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import aics_tlog as a  # type: ignore[import-not-found]
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def hexes(items: list[bytes]) -> list[str]:
    return [x.hex() for x in items]


def unhex(items: list[str]) -> list[bytes]:
    return [bytes.fromhex(x) for x in items]


def write_tiles(request: dict[str, Any]) -> dict[str, Any]:
    paths = a.TileWriter(unhex(request["leaves"])).write_to(request["out"])
    return {"paths": paths}


def check(request: dict[str, Any]) -> dict[str, Any]:
    vkey = a.parse_vkey(request["vkey"])
    note = a.parse_note(request["note"])
    result = a.verify_checkpoint(note, vkey)
    answer: dict[str, Any] = {"checkpoint_ok": result.ok, "error": result.error}
    if not result.ok:
        return answer
    size, root = result.size, result.root
    assert size is not None and root is not None
    reader = a.FileSystemTileReader(request["tiles"])
    answer["size"] = size
    answer["root"] = root.hex()
    answer["root_from_tiles"] = a.tree_root_from_tiles(reader, size).hex()
    try:
        report = a.audit_tiles(reader, size, root)
        answer["audit"] = {"tiles": report.tiles, "bundles": report.bundles}
    except Exception as exc:  # what aics-tlog refuses, named
        answer["audit"] = {"error": f"{type(exc).__name__}: {exc}"}
    inclusion: dict[str, Any] = {}
    for index in request["indices"]:
        theirs = a.inclusion_proof_from_tiles(reader, index, size)
        entry = a.read_entry(reader, index, size)
        ours = unhex(request["our_inclusion"][str(index)])
        inclusion[str(index)] = {
            "theirs": hexes(theirs),
            "verifies": a.verify_leaf_inclusion(entry, index, size, theirs, root),
            "ours_verify": a.verify_leaf_inclusion(entry, index, size, ours, root),
        }
    answer["inclusion"] = inclusion
    consistency: dict[str, Any] = {}
    for old in request["old"]:
        old_result = a.verify_checkpoint(a.parse_note(old["note"]), vkey)
        old_size, old_root = old_result.size, old_result.root
        assert old_size is not None and old_root is not None
        theirs = a.consistency_proof_from_tiles(reader, old_size, size)
        ours = unhex(request["our_consistency"][str(old_size)])
        consistency[str(old_size)] = {
            "old_ok": old_result.ok,
            "theirs": hexes(theirs),
            "verifies": a.verify_consistency(old_size, size, old_root, root, theirs),
            "ours_verify": a.verify_consistency(old_size, size, old_root, root, ours),
        }
    answer["consistency"] = consistency
    return answer


def cosign(request: dict[str, Any]) -> dict[str, Any]:
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(request["seed"]))
    cp = a.parse_checkpoint(a.parse_note(request["note"]).text)
    _, line = a.sign_cosignature(
        key, request["name"], request["timestamp"], cp.origin, cp.size, cp.root, cp.extension_lines
    )
    blob = base64.b64encode(line.key_id + line.signature).decode()
    return {
        "line": f"\u2014 {line.name} {blob}\n",
        "vkey": a.format_vkey(a.cosignature_vkey(request["name"], key.public_key())),
    }


def main() -> None:
    request = json.load(sys.stdin)
    ops = {
        "version": lambda _: {"version": a.__version__},
        "write_tiles": write_tiles,
        "check": check,
        "cosign": cosign,
    }
    json.dump(ops[request["op"]](request), sys.stdout)


if __name__ == "__main__":
    main()
