"""Run inside a virtual environment with pycose 1.1.0 and cbor2 5.x (pycose cannot decode
under cbor2 6): decode and verify each entry of a ledger file with pycose, print the rate.

    python pycose_verify.py LEDGER PUBLIC_KEY_HEX COUNT
"""

import json
import sys
import time

import cbor2
from pycose.keys import OKPKey
from pycose.keys.curves import Ed25519
from pycose.messages import Sign1Message


def main() -> None:
    path, public_hex, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    key = OKPKey(crv=Ed25519, x=bytes.fromhex(public_hex))
    with open(path, "rb") as fh:
        decoder = cbor2.CBORDecoder(fh)
        raws = []
        for _ in range(count):
            start = fh.tell()
            decoder.decode()
            end = fh.tell()
            fh.seek(start)
            raws.append(fh.read(end - start))
    started = time.perf_counter()
    for raw in raws:
        msg = Sign1Message.decode(raw)
        msg.key = key
        if not msg.verify_signature():
            raise SystemExit("pycose refused a receipt")
    elapsed = time.perf_counter() - started
    print(json.dumps({"entries": len(raws), "per_s": len(raws) / elapsed}))


if __name__ == "__main__":
    main()
