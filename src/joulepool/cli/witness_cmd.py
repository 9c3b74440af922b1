"""`pool witness sign | check`: pool-witness/1 receipts over a ledger's head (§6.7, §6.8)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from joulepool.cli.output import add_json, emit

if TYPE_CHECKING:
    from joulepool.ledger.rotation import KeySchedule


def steward_key_facing(witness_public_key: bytes, keys: KeySchedule) -> bytes:
    """The steward key a witness is checked against (§6.7): every key the steward ever
    held counts as the steward's, so a witness holding a retired one is refused too
    (DESIGN.md §4, key rotation)."""
    return witness_public_key if witness_public_key in keys.keys else keys.current_key


def _sign(args: argparse.Namespace) -> int:
    from joulepool.cli.ledger_cmd import verified
    from joulepool.ledger.keys import load_key_file
    from joulepool.ledger.witness import sign_witness
    from joulepool.pool import wall_clock_ms

    witness = load_key_file(Path(args.witness_key), require_secret=True)
    # A witness verifies the whole ledger before it vouches for its head.
    store, steward, replayer = verified(args)
    store.close()
    length = replayer.length
    receipt = sign_witness(
        witness,
        steward.kid,
        replayer.head,
        length,
        wall_clock_ms(),
        steward_key_facing(witness.public_key, replayer.keys),
    )
    out = Path(args.out) if args.out else Path(f"{witness.kid}-{length}.receipt")
    out.write_bytes(receipt)
    result = {
        "receipt": str(out),
        "witness": witness.kid,
        "length": length,
        "head_hex": replayer.head.hex(),
    }
    emit(
        args,
        result,
        lambda c: c.print(
            f"{out}: {witness.kid} witnessed {steward.kid}'s ledger at length {length}, head {replayer.head.hex()}"
        ),
    )
    return 0


def _check(args: argparse.Namespace) -> int:
    from joulepool.cli.ledger_cmd import verified
    from joulepool.ledger.cose import GENESIS, content_address
    from joulepool.ledger.keys import load_key_file
    from joulepool.ledger.witness import check_witness

    witness = load_key_file(Path(args.witness_key))
    store, steward, replayer = verified(args)
    try:

        def head_at(n: int) -> bytes:
            return content_address(store.entry(n - 1)) if n else GENESIS

        report = check_witness(
            Path(args.receipt).read_bytes(),
            witness.kid,
            witness.public_key,
            steward.kid,
            steward_key_facing(witness.public_key, replayer.keys),
            replayer.length,
            head_at,
        )
    finally:
        store.close()
    result: dict[str, Any] = report.to_json()

    def human(c: Any) -> None:
        if report.error is None and report.through is not None:
            c.print(f"witnessed by {witness.kid} through entry {report.through} of {report.length}")
        elif report.error is None:
            # A receipt at length 0 covers no entry (DESIGN.md §3, "Edge cases, pinned").
            c.print(
                f"self-attested: the receipt from {witness.kid} covers no entry (length 0); "
                f"ledger length {report.length}"
            )
        else:
            c.print(
                f"self-attested: the receipt is refused ({report.error.value}); ledger length {report.length}"
            )

    emit(args, result, human)
    return 0 if report.error is None else 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool witness`."""
    from joulepool.cli.ledger_cmd import add_rotations

    p = sub.add_parser("witness", help="sign or check a witness receipt over a ledger's head")
    wsub = p.add_subparsers(dest="witness_command", metavar="SUBCOMMAND", required=True)
    for name, handler, helptext in (
        ("sign", _sign, "as a witness, verify the ledger and sign its head at its length"),
        ("check", _check, "check a witness receipt against the ledger"),
    ):
        w = wsub.add_parser(name, help=helptext)
        w.add_argument("file", metavar="LEDGER")
        w.add_argument(
            "--key",
            metavar="KEYFILE",
            help="the steward's public key (default: steward.pub beside LEDGER)",
        )
        w.add_argument(
            "--witness-key",
            required=True,
            metavar="KEYFILE",
            help="the witness's key (secret to sign)",
        )
        add_rotations(w)
        w.add_argument("--workers", type=int, default=0)
        if name == "sign":
            w.add_argument(
                "--out", metavar="FILE", help="where to write the receipt (WITNESS-LENGTH.receipt)"
            )
        else:
            w.add_argument("--receipt", required=True, metavar="FILE")
        add_json(w)
        w.set_defaults(handler=handler)
