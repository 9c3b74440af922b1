"""Runs inside the pycose virtual environment (pycose 1.1.0, cbor2 5.x; never joulepool):
pool/1 receipts through a COSE implementation that never heard of Pool. Reads one JSON
request on standard input and writes one JSON answer.

    {"op": "verify", "public_key": HEX, "entries": [HEX, ...]}
      -> {"results": [{"verified": BOOL, "alg": INT, "kid": HEX, "unprotected": INT,
                       "payload": HEX, "protected": HEX} | {"verified": false, "error": TEXT}]}
    {"op": "sign", "seed": HEX, "public_key": HEX, "kid": HEX, "payload": HEX,
     "header_order": "alg_first" | "kid_first"}
      -> {"envelope": HEX}   (pycose's own tagged COSE_Sign1 encoding)
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pycose.algorithms import EdDSA
from pycose.headers import KID, Algorithm
from pycose.keys import OKPKey
from pycose.keys.curves import Ed25519
from pycose.messages import Sign1Message


def verify(request: dict[str, Any]) -> dict[str, Any]:
    key = OKPKey(crv=Ed25519, x=bytes.fromhex(request["public_key"]))
    results: list[dict[str, Any]] = []
    for entry in request["entries"]:
        try:
            msg = Sign1Message.decode(bytes.fromhex(entry))
        except Exception as exc:  # what pycose refuses to decode, named
            results.append({"verified": False, "error": f"{type(exc).__name__}: {exc}"})
            continue
        msg.key = key
        results.append(
            {
                "verified": bool(msg.verify_signature()),
                "alg": msg.phdr[Algorithm].identifier,
                "kid": bytes(msg.phdr[KID]).hex(),
                "unprotected": len(msg.uhdr),
                "payload": bytes(msg.payload).hex(),
                "protected": bytes(msg.phdr_encoded).hex(),
            }
        )
    return {"results": results}


def sign(request: dict[str, Any]) -> dict[str, Any]:
    key = OKPKey(
        crv=Ed25519, d=bytes.fromhex(request["seed"]), x=bytes.fromhex(request["public_key"])
    )
    kid = bytes.fromhex(request["kid"])
    # pycose keeps the header's insertion order when it encodes, so the order is the caller's.
    if request["header_order"] == "alg_first":
        phdr: dict[Any, Any] = {Algorithm: EdDSA, KID: kid}
    else:
        phdr = {KID: kid, Algorithm: EdDSA}
    msg = Sign1Message(phdr=phdr, payload=bytes.fromhex(request["payload"]), key=key)
    return {"envelope": msg.encode(tag=True).hex()}


def main() -> None:
    request = json.load(sys.stdin)
    answer = {"verify": verify, "sign": sign}[request["op"]](request)
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
