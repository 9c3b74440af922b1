"""`pool keys new | public`: Ed25519 keys as COSE_Key files (DESIGN.md §4)."""

from __future__ import annotations

import argparse
from pathlib import Path

from joulepool.cli.output import add_json, emit


def _new(args: argparse.Namespace) -> int:
    from joulepool.ledger.keys import KeyPair, write_key_file

    key = KeyPair.generate(args.kid)
    write_key_file(Path(args.file), key)
    if args.public:
        write_key_file(Path(args.public), key.public())
    result = {"kid": key.kid, "public_key_hex": key.public_key.hex(), "file": args.file}
    emit(
        args,
        result,
        lambda c: c.print(
            f"{args.file}: new Ed25519 key {key.kid!r} (mode 0600), public {key.public_key.hex()}"
        ),
    )
    return 0


def _public(args: argparse.Namespace) -> int:
    from joulepool.ledger.keys import load_key_file, write_key_file

    key = load_key_file(Path(args.file))
    write_key_file(Path(args.out), key.public())
    result = {"kid": key.kid, "public_key_hex": key.public_key.hex(), "file": args.out}
    emit(
        args,
        result,
        lambda c: c.print(f"{args.out}: public key of {key.kid!r} ({key.public_key.hex()})"),
    )
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool keys`."""
    p = sub.add_parser("keys", help="create Ed25519 keys and export their public halves")
    ksub = p.add_subparsers(dest="keys_command", metavar="SUBCOMMAND", required=True)
    n = ksub.add_parser("new", help="a new secret key file (COSE_Key, mode 0600)")
    n.add_argument("file", metavar="FILE")
    n.add_argument("--kid", required=True, help="the key's identifier (a steward's or a witness's)")
    n.add_argument("--public", metavar="FILE", help="also write its public key here")
    add_json(n)
    n.set_defaults(handler=_new)
    u = ksub.add_parser("public", help="write the public-only COSE_Key of a key file")
    u.add_argument("file", metavar="KEYFILE")
    u.add_argument("out", metavar="OUT")
    add_json(u)
    u.set_defaults(handler=_public)
