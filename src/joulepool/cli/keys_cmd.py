"""`pool keys new | public | rotate | vkey`: Ed25519 keys as COSE_Key files, and a deployment's
steward key replaced by a rotation statement (DESIGN.md §4)."""

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


def _rotate(args: argparse.Namespace) -> int:
    from joulepool.deployment.config import PUBLIC_KEY
    from joulepool.deployment.keys import NEXT_KEY, pending_key
    from joulepool.deployment.open import open_pool
    from joulepool.errors import InvalidInput
    from joulepool.ledger.keys import KeyPair, load_key_file, write_key_file
    from joulepool.stores.file import LedgerLocked

    folder = Path(args.dir)
    if not (folder / PUBLIC_KEY).is_file():
        raise InvalidInput(str(folder), f"not a deployment: it has no {PUBLIC_KEY}")
    if pending_key(folder) is not None:
        raise InvalidInput(
            str(folder / NEXT_KEY),
            "a rotation is already pending: send SIGHUP to `pool serve`, or restart it",
        )
    steward = load_key_file(folder / PUBLIC_KEY).kid
    incoming = KeyPair.generate(steward)
    # Pending first: whoever holds the ledger's lock next (this command, a SIGHUP'd or
    # restarted `pool serve`) seals the statement at its length, under that lock.
    write_key_file(folder / NEXT_KEY, incoming)
    result: dict[str, object] = {"public_key_hex": incoming.public_key.hex()}
    if args.pending:
        # A ledger in PostgreSQL is not the file in DIR: a replica that holds it puts the
        # key in force, at the ledger's length, under the ledger's lock.
        result |= {"state": "pending"}
        words = (
            f"new steward key {incoming.public_key.hex()} is pending: send SIGHUP to one "
            "`pool serve` replica to put it in force, then give the others DIR's rotations/ "
            "and steward.key and restart them"
        )
        emit(args, result, lambda c: c.print(words))
        return 0
    try:
        pool = open_pool(folder)
    except LedgerLocked as exc:
        result |= {"state": "pending", "writer_pid": exc.holder}
        who = f"pid {exc.holder}" if exc.holder is not None else "the running writer"
        words = (
            f"new steward key {incoming.public_key.hex()} is pending: `pool serve` ({who}) "
            "holds the ledger; send it SIGHUP (or restart it) to put the key in force"
        )
        emit(args, result, lambda c: c.print(words))
        return 0
    try:
        in_force = pool.key.public_key == incoming.public_key
        from_seq = pool.keys.last_from_seq
    finally:
        pool.close()
    if not in_force:
        # Only "no entry since the last rotation" stops it here: nothing to wait for, so
        # the new key goes and nothing changed.
        (folder / NEXT_KEY).unlink()
        raise InvalidInput(
            str(folder),
            "no entry has been sealed since the last rotation; the key in force stays",
        )
    result |= {"state": "in_force", "from_seq": from_seq}
    emit(
        args,
        result,
        lambda c: c.print(
            f"steward key rotated: entries from {from_seq} on are sealed by "
            f"{incoming.public_key.hex()}; the statement signed by the old key is in "
            f"{folder / 'rotations'}, and the old secret key is gone"
        ),
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
    r = ksub.add_parser(
        "rotate",
        help="replace a deployment's steward key: a rotation statement signed by the old key",
    )
    r.add_argument("dir", metavar="DIR")
    r.add_argument(
        "--pending",
        action="store_true",
        help="only write the new key as pending, for a running `pool serve` to put in force on "
        "SIGHUP (required with a ledger in PostgreSQL: DIR's ledger file is not that ledger)",
    )
    add_json(r)
    r.set_defaults(handler=_rotate)
    from joulepool.cli.transparency_cmd import register_keys

    register_keys(ksub)
