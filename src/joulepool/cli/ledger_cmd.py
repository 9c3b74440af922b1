"""`pool ledger verify | show | usage | recover | acknowledge | export`: reading, repairing
and exporting ledgers (§6).

Each reading command takes a ledger file or a deployment folder. Given a folder, it also
holds the ledger to what the deployment acknowledged: its high-water record and its kept
witness receipts (`ledger.rollback`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from joulepool.cli.output import add_json, emit, energy_column, print_json, table

if TYPE_CHECKING:
    from rich.console import Console

    from joulepool.ledger.keys import KeyPair
    from joulepool.ledger.replay import Replayer
    from joulepool.stores.file import FileStore

PROGRESS_FROM = 20_000
"""A ledger at least this long shows a progress bar while it verifies (on a terminal)."""


def verified(
    args: argparse.Namespace, snapshots: list[dict[str, Any]] | None = None
) -> tuple[FileStore, KeyPair, Replayer]:
    """`deployment.verify.verified` with a reading command's flags, and a progress bar on
    a terminal for a long ledger (§6.1)."""
    from joulepool.deployment.verify import verified as verify

    return verify(
        args.file,
        key=args.key,
        witnesses=getattr(args, "witnesses", None),
        rotations=getattr(args, "rotations", None),
        workers=getattr(args, "workers", 0) or 0,
        snapshots=snapshots,
        with_progress=_with_progress,
    )


def _with_progress(total: int, run: Callable[[Callable[[int], None] | None], Replayer]) -> Replayer:
    if total < PROGRESS_FROM or not sys.stderr.isatty():
        return run(None)
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("verifying"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("verify", total=total)
        return run(lambda n: bar.update(task, completed=n))


def _verify(args: argparse.Namespace) -> int:
    from joulepool.errors import InvalidInput, LedgerRefused
    from joulepool.ledger.note import b64encode
    from joulepool.ledger.rollback import HighWaterMissing, LedgerRolledBack
    from joulepool.ledger.rotation import RotationRefused

    if len(args.receipt) != len(args.witness_key):
        raise InvalidInput("--receipt", "give one --witness-key for each --receipt")
    snapshots: list[dict[str, Any]] = []
    try:
        store, key, replayer = verified(args, snapshots)
    except RotationRefused as bad:
        rotation = bad
        out_bad = {"ok": False, "error": "bad_rotation", "index": bad.index, "detail": bad.detail}
        emit(
            args,
            out_bad,
            lambda c: c.print(
                f"REFUSED: rotation statement {rotation.index}: bad_rotation: {rotation.detail}"
            ),
        )
        return 1
    except LedgerRefused as refused:
        exc = refused
        failure = {"ok": False, "index": exc.index, "error": exc.error, "detail": exc.detail}
        emit(
            args,
            failure,
            lambda c: c.print(f"REFUSED at entry {exc.index}: {exc.error}: {exc.detail}"),
        )
        return 1
    except (LedgerRolledBack, HighWaterMissing) as rolled:
        gone = rolled
        out: dict[str, Any] = {"ok": False, "error": gone.code, "detail": gone.detail}
        if isinstance(gone, LedgerRolledBack):
            out |= {"length": gone.length, "acknowledged": gone.acknowledged}
        emit(args, out, lambda c: c.print(f"REFUSED: {gone.code}: {gone.detail}"))
        return 1
    from joulepool.deployment.verify import verified_configs
    from joulepool.ledger.configs import ConfigStatementRefused

    try:
        configs = verified_configs(args.file, replayer.keys, replayer.length)
    except ConfigStatementRefused as bad_config:
        store.close()
        config_bad = bad_config
        emit(
            args,
            {
                "ok": False,
                "error": "bad_config_statement",
                "index": config_bad.index,
                "detail": config_bad.detail,
            },
            lambda c: c.print(
                f"REFUSED: configuration statement {config_bad.index}: bad_config_statement: "
                f"{config_bad.detail}"
            ),
        )
        return 1
    try:
        from joulepool.deployment.verify import ledger_attestation, locate

        pairs = [(Path(r), Path(w)) for r, w in zip(args.receipt, args.witness_key, strict=False)]
        where = locate(args.file, args.key, args.witnesses)
        report = ledger_attestation(where, store, key, replayer, pairs)
        high = store.high_water()
    finally:
        store.close()
    result: dict[str, Any] = {
        "ok": True,
        "steward": key.kid,
        "length": replayer.length,
        "head_hex": replayer.head.hex(),
        "attestation": report.attestation.value,
        "acknowledged": high.length if high is not None else None,
        "writer_pid": store.writer_pid,
        "rotations": len(replayer.keys.statements),
        "configurations": len(configs.statements),
        "snapshots": snapshots,
        # DESIGN.md §8: the tree a checkpoint of this ledger signs, rebuilt by this replay.
        "tree_size": replayer.merkle.size,
        "root_hash": b64encode(replayer.merkle.root()),
    }
    for row in snapshots:
        # A snapshot the replay never reached (length 0, or past the ledger) was not compared.
        if row["length"] == 0:
            row.setdefault("agrees", True)
        row.setdefault("agrees", False)
        if not row["agrees"]:
            row.setdefault("detail", "longer than the ledger: this replay never reached it")
    if report.through is not None:
        result["witnessed_through"] = report.through

    def human(c: Console) -> None:
        c.print(
            f"ledger {args.file}: {replayer.length} entries verified (signatures, chain, events)"
        )
        c.print(f"steward {key.kid}, head {replayer.head.hex()}")
        c.print(
            f"Merkle tree (C2SP): size {replayer.merkle.size}, "
            f"root {b64encode(replayer.merkle.root())}"
        )
        if replayer.keys.statements:
            c.print(
                f"steward keys: {len(replayer.keys.statements)} rotation statements verified "
                f"from the first key; the key in force is {replayer.keys.current_key.hex()}"
            )
        if configs.statements:
            c.print(
                f"configurations: {len(configs.statements)} statements verified (signatures, "
                "order, digests); `pool config history` lists them"
            )
        if store.writer_pid is not None:
            c.print(beside_writer(store.writer_pid))
        if high is None:
            c.print("high-water record: none beside this file (not a deployment's ledger)")
        else:
            c.print(f"high-water record: {high.length} entries acknowledged, all present")
        for row in snapshots:
            if row["agrees"]:
                c.print(f"state snapshot at {row['length']}: agrees with the replay")
            else:
                c.print(f"state snapshot at {row['length']}: DISAGREES: {row['detail']}")
        if report.through is None:
            c.print("attestation: self-attested (no witness receipt covers this ledger)")
        else:
            tail = replayer.length - report.through
            c.print(
                f"attestation: witnessed through entry {report.through}"
                + (f"; the {tail} entries after it are self-attested" if tail else "")
            )

    emit(args, result, human)
    # A snapshot that disagrees would be trusted at the next start: the status says so.
    return 0 if all(row["agrees"] for row in snapshots) else 1


def entry_rows(
    store: FileStore, steward: str, start: int, limit: int | None
) -> Iterator[dict[str, Any]]:
    """Each entry's index, content address and event, for `pool ledger show`."""
    from joulepool.errors import LedgerRefused
    from joulepool.ledger.cbor import CborRefused
    from joulepool.ledger.cose import content_address, open_envelope
    from joulepool.ledger.entry import EntryMalformed, event_of

    for i, raw in enumerate(store.entries(start), start):
        if limit is not None and i >= start + limit:
            return
        try:
            event = event_of(open_envelope(raw).core, steward)
        except CborRefused as exc:
            # Verified a moment ago: the file changed in between. Refuse, never a traceback.
            raise LedgerRefused(
                i, exc.error, f"changed since it was verified: {exc.detail}"
            ) from None
        except EntryMalformed as exc:
            raise LedgerRefused(i, "malformed", f"changed since it was verified: {exc}") from None
        yield {"seq": i, "address_hex": content_address(raw).hex(), **event.to_json()}


def beside_writer(pid: int) -> str:
    """What a reader says when a writer held the ledger as it read (§6.1)."""
    return (
        f"read beside the running writer (pid {pid}): up to the last whole entry when this "
        "command opened the ledger; later appends are not in this answer"
    )


def _show(args: argparse.Namespace) -> int:
    store, key, _ = verified(args)
    try:
        rows = list(entry_rows(store, key.kid, args.start, args.limit))
    finally:
        store.close()

    def human(c: Console) -> None:
        body = []
        energies: list[dict[str, Any]] = [r.get("reserved") or r["actual"] for r in rows]
        heading, cells = energy_column("energy", [e["uj"] for e in energies])
        borrowed_heading, borrowed = energy_column("borrowed", [r.get("borrowed_uj") for r in rows])
        for r, energy, cell, lent in zip(rows, energies, cells, borrowed, strict=True):
            body.append(
                [
                    r["seq"],
                    r["event"],
                    r["claim"],
                    r.get("entitlement", ""),
                    cell,
                    energy["grade"],
                    lent,
                    r.get("class", ""),
                    r["address_hex"][:16],
                ]
            )
        c.print(
            table(
                f"{args.file}",
                [
                    "seq",
                    "event",
                    "claim",
                    "entitlement",
                    heading,
                    "grade",
                    borrowed_heading,
                    "class",
                    "address",
                ],
                body,
                right=["seq", heading, borrowed_heading],
            )
        )
        if store.writer_pid is not None:
            c.print(beside_writer(store.writer_pid))

    emit(args, {"entries": rows, "writer_pid": store.writer_pid}, human)
    return 0


def _usage(args: argparse.Namespace) -> int:
    store, _, replayer = verified(args)
    store.close()
    usage = replayer.state.usage
    figures = {
        i: {
            "spent_uj": usage.of(i).spent_uj,
            "reserved_uj": usage.of(i).reserved_uj,
            "held_devices": usage.of(i).held_devices,
            "running_claims": usage.of(i).running_claims,
        }
        for i in usage.ids()
    }
    result = {
        "length": replayer.length,
        "usage": figures,
        "open_claims": replayer.state.open_claims(),
        "writer_pid": store.writer_pid,
    }

    spent_heading, spent = energy_column("spent", [f["spent_uj"] for f in figures.values()])
    reserved_heading, reserved = energy_column(
        "reserved", [f["reserved_uj"] for f in figures.values()]
    )

    def human(c: Console) -> None:
        c.print(
            table(
                f"usage replayed from {args.file} ({replayer.length} entries)",
                ["entitlement", spent_heading, reserved_heading, "devices held", "running"],
                [
                    [i, spent[n], reserved[n], f["held_devices"], f["running_claims"]]
                    for n, (i, f) in enumerate(figures.items())
                ],
                right=[spent_heading, reserved_heading, "devices held", "running"],
            )
        )
        if store.writer_pid is not None:
            c.print(beside_writer(store.writer_pid))

    emit(args, result, human)
    return 0


def _recover(args: argparse.Namespace) -> int:
    from joulepool.deployment.verify import locate
    from joulepool.stores.file import recover

    done = recover(locate(args.file, None).ledger)
    if done is None:
        result: dict[str, Any] = {"recovered": False, "detail": "the ledger ends in a whole entry"}
        emit(
            args,
            result,
            lambda c: c.print(f"{args.file}: nothing to recover; it ends in a whole entry"),
        )
        return 0
    result = {
        "recovered": True,
        "offset": done.offset,
        "removed_bytes": done.removed,
        "entries": done.entries,
    }
    emit(
        args,
        result,
        lambda c: c.print(
            f"{args.file}: truncated an incomplete final entry at byte offset {done.offset} "
            f"({done.removed} bytes); {done.entries} whole entries remain. Run `pool ledger verify`."
        ),
    )
    return 0


def _acknowledge(args: argparse.Namespace) -> int:
    """Record a ledger, verified whole, as what its deployment acknowledged (§6.1)."""
    from joulepool.deployment.verify import locate, steward_key
    from joulepool.deployment.witnesses import kept_marks
    from joulepool.errors import InvalidInput, LedgerRefused
    from joulepool.ledger.replay import replay
    from joulepool.ledger.rollback import HighWater, Mark, check_acknowledged
    from joulepool.stores.base import Store, head_at

    store: Store
    if args.postgres:
        from joulepool.extras import require

        require("postgres", "pool ledger acknowledge --postgres")
        from joulepool.stores.postgres import PostgresStore

        if not args.ledger or not args.key:
            raise InvalidInput(
                "--postgres", "also name the ledger (--ledger) and the steward's key (--key)"
            )
        store = PostgresStore(args.postgres, ledger=args.ledger)
        key_path = Path(args.key)
        witnesses = Path(args.witnesses) if args.witnesses else None
    else:
        from joulepool.stores.file import FileStore

        if args.file is None:
            raise InvalidInput("FILE", "name a ledger file or a deployment folder, or --postgres")
        where = locate(args.file, args.key, args.witnesses)
        key_path, witnesses = where.key, where.witnesses
        store = FileStore(where.ledger)
    try:
        from joulepool.deployment.keys import statements_for

        key = steward_key(key_path, bool(args.key))
        given = Path(args.rotations) if args.rotations else None
        keys = (
            statements_for(Path(store.name), key, given) if args.file or given else key.public_key
        )
        # Only a ledger that verifies whole may be acknowledged.
        try:
            replayer = replay(store.entries(), key.kid, keys)
        except LedgerRefused as exc:
            raise InvalidInput(
                "ledger", f"it does not verify, so it cannot be acknowledged: {exc}"
            ) from None
        length, head = replayer.length, replayer.head
        marks, _ = kept_marks(witnesses, key.kid) if witnesses else ([], [])
        # Kept receipts are a witness's word, not the deployment's: they are not overruled.
        check_acknowledged(marks, length, lambda n: head_at(store, n), store.name)
        before = store.high_water()
        if before is not None and not args.accept_loss:
            mark = Mark("its high-water record", before)
            check_acknowledged([mark], length, lambda n: head_at(store, n), store.name)
        store.acknowledge(HighWater(length, head))
    finally:
        store.close()
    previous = before.length if before is not None else None
    result = {
        "ledger": store.name,
        "acknowledged": length,
        "head_hex": head.hex(),
        "previous": previous,
    }
    emit(
        args,
        result,
        lambda c: c.print(
            f"{store.name}: recorded {length} verified entries (head {head.hex()[:16]}) as "
            "acknowledged"
            + (f"; the record said {previous} before" if previous is not None else "")
        ),
    )
    return 0


def _accept_clock(args: argparse.Namespace) -> int:
    """Accept the clock as it reads now, against the ledger as it stands (DESIGN.md §3)."""
    from joulepool.deployment.clock import accept_clock
    from joulepool.deployment.open import open_pool
    from joulepool.errors import utc_ms
    from joulepool.pool import wall_clock_ms

    folder = Path(args.dir)
    if args.postgres:
        from joulepool.extras import require

        require("postgres", "pool ledger accept-clock --postgres")
    # A reader: it works beside a running writer, which picks the acceptance up itself.
    pool = open_pool(folder, read_only=True, postgres=args.postgres, ledger=args.ledger)
    try:
        length, head = pool.snapshot()
        last = pool.state.last_at_ms
    finally:
        pool.close()
    now = wall_clock_ms()
    record = accept_clock(folder, now, length, head)
    print(
        f"pool: clock accepted at {utc_ms(now)} for {folder} at length {length} "
        f"(last entry at {utc_ms(last)})",
        file=sys.stderr,
    )
    result = {**record, "last_entry_at_ms": last}

    def human(c: Console) -> None:
        c.print(
            f"{folder}: the clock reading {utc_ms(now)} is accepted at length {length}; "
            f"the next entry is dated by it (the last one is at {utc_ms(last)})"
        )

    emit(args, result, human)
    return 0


def _backup(args: argparse.Namespace) -> int:
    from joulepool.deployment.backup import backup

    result = backup(Path(args.dir), Path(args.out), with_secret_key=args.with_secret_key)
    key_words = (
        "with the secret key" if args.with_secret_key else "without the secret key (keep it apart)"
    )
    emit(
        args,
        result,
        lambda c: c.print(
            f"{args.out}: backup of {args.dir} at ledger length {result['length']} "
            f"(head {result['head_hex'][:16]}), verified, {key_words}"
        ),
    )
    return 0


def _restore(args: argparse.Namespace) -> int:
    from joulepool.deployment.backup import RestoreOtherSteward, RestoreWouldLose, restore

    try:
        done = restore(Path(args.backup), Path(args.dir), accept_loss=args.accept_loss)
    except RestoreOtherSteward as other:
        if not getattr(args, "json", False):
            raise
        print_json({"ok": False, "error": other.code, "detail": other.detail})
        return 1
    except RestoreWouldLose as refused:
        loss = refused.loss
        out = {"ok": False, "error": refused.code, **loss.to_json()}

        def refuse(c: Console) -> None:
            c.print(f"REFUSED: {loss.sentence()}")
            for row in loss.entries:
                c.print(f"  would lose entry {row['seq']}: {row['event']} {row['claim']}")
            c.print("run again with --accept-loss to restore anyway (the decision is logged)")

        emit(args, out, refuse)
        return 1
    lost = done.loss
    result = {"ok": True, "dir": args.dir, **done.to_json()}

    def human(c: Console) -> None:
        c.print(f"{args.dir}: restored from {args.backup} at length {lost.backup_length}")
        c.print(lost.sentence())
        if lost.lost:
            c.print(f"the loss was accepted and logged in {Path(args.dir) / 'restore.log'}")
        for step in done.to_do:
            c.print(f"left to do: {step}")

    emit(args, result, human)
    return 0


def _export(args: argparse.Namespace) -> int:
    from joulepool.deployment.keys import ROTATIONS, read_statements, write_statements
    from joulepool.errors import InvalidInput, StoreError
    from joulepool.stores.base import Store
    from joulepool.stores.export import export_ledger

    store: Store
    if args.ledger and not args.postgres:
        raise InvalidInput("--ledger", "names a ledger in PostgreSQL; use it with --postgres DSN")
    if args.postgres:
        from joulepool.extras import require

        require("postgres", "pool ledger export --postgres")
        from joulepool.stores.postgres import PostgresStore

        if not args.ledger:
            raise InvalidInput(
                "--ledger", "name the ledger to export (pool serve names it after the steward)"
            )
        store = PostgresStore(args.postgres, ledger=args.ledger, create_schema=False)
        source = f"ledger {args.ledger!r} at {store.where}"
    else:
        from joulepool.stores.file import FileStore

        store = FileStore(Path(args.file), writer=False)
        source = args.file
    # The statements that hand entries to later keys travel with the entries (DESIGN.md §4):
    # without them a verifier holding the first key refuses the first rotated entry.
    given = Path(args.rotations) if args.rotations else None
    if given is None and args.file:
        given = Path(args.file).parent / ROTATIONS
    statements = read_statements(given) if given is not None else []
    rotations_out = Path(f"{args.out}.{ROTATIONS}")
    if statements and rotations_out.exists() and not args.overwrite:
        raise StoreError(f"{rotations_out} already exists; pass --overwrite to replace it")
    try:
        count = export_ledger(store, Path(args.out), overwrite=args.overwrite)
    finally:
        store.close()
    if statements:
        write_statements(rotations_out, statements)
    result: dict[str, Any] = {"source": source, "out": args.out, "entries": count}
    result["rotations"] = len(statements)
    check = f"pool ledger verify {args.out} --key STEWARD.pub"
    if statements:
        result["rotations_out"] = str(rotations_out)
        check += f" --rotations {rotations_out}"
    emit(
        args,
        result,
        lambda c: c.print(
            f"wrote {count} entries of {source} to {args.out}"
            + (
                f" and {len(statements)} rotation statements to {rotations_out}"
                if statements
                else ""
            )
            + f"; check it with `{check}`"
        ),
    )
    return 0


def add_rotations(p: argparse.ArgumentParser) -> None:
    """`--rotations DIR`: the steward's key rotation statements (DESIGN.md §4)."""
    p.add_argument(
        "--rotations",
        metavar="DIR",
        help="the key rotation statements, NNNNNNNN.cose in order (default: rotations/ beside FILE)",
    )


def _add_reading(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "file", metavar="FILE|DIR", help="the ledger file (a CBOR sequence) or deployment folder"
    )
    p.add_argument(
        "--key",
        metavar="KEYFILE",
        help="the steward's first public key (default: steward.pub beside FILE)",
    )
    add_rotations(p)
    p.add_argument(
        "--workers", type=int, default=0, help="processes verifying signatures (default: up to 4)"
    )
    add_json(p)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool ledger`."""
    p = sub.add_parser("ledger", help="verify, show, replay or recover a ledger file")
    lsub = p.add_subparsers(dest="ledger_command", metavar="SUBCOMMAND", required=True)
    from joulepool.cli.transparency_cmd import register_ledger

    register_ledger(lsub)

    v = lsub.add_parser("verify", help="verify every entry; print length, head and attestation")
    _add_reading(v)
    v.add_argument(
        "--witnesses",
        metavar="DIR",
        help="folder of kept receipts (default: witnesses/ beside the ledger)",
    )
    v.add_argument("--receipt", action="append", default=[], help="a witness receipt file")
    v.add_argument(
        "--witness-key", action="append", default=[], help="that witness's public key file"
    )
    v.set_defaults(handler=_verify)

    s = lsub.add_parser("show", help="a table of entries (after verifying the ledger)")
    _add_reading(s)
    s.add_argument("--from", dest="start", type=int, default=0, help="first index (0)")
    s.add_argument("--limit", type=int, help="at most this many entries")
    s.set_defaults(handler=_show)

    u = lsub.add_parser("usage", help="the usage the ledger replays to (§6.1)")
    _add_reading(u)
    u.set_defaults(handler=_usage)

    e = lsub.add_parser(
        "export", help="write a store's ledger as a ledger file (CBOR sequence) for any verifier"
    )
    e.add_argument("out", metavar="OUT", help="the ledger file to write (whole or not at all)")
    source = e.add_mutually_exclusive_group(required=True)
    source.add_argument("--file", metavar="FILE", help="a ledger file (e.g. to copy it safely)")
    source.add_argument("--postgres", metavar="DSN", help="a PostgreSQL store (libpq DSN)")
    e.add_argument("--ledger", metavar="NAME", help="the ledger's name in PostgreSQL")
    e.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    e.add_argument(
        "--rotations",
        metavar="DIR",
        help="the key rotation statements to export beside OUT, as OUT.rotations/ "
        "(default: rotations/ beside --file; with --postgres, name the deployment's rotations/)",
    )
    add_json(e)
    e.set_defaults(handler=_export)

    b = lsub.add_parser(
        "backup", help="copy a deployment, consistent at one length (works beside pool serve)"
    )
    b.add_argument("dir", metavar="DIR", help="the deployment folder")
    b.add_argument("out", metavar="OUT", help="a new folder for the backup")
    b.add_argument(
        "--with-secret-key", action="store_true", help="also copy steward.key (left out by default)"
    )
    add_json(b)
    b.set_defaults(handler=_backup)

    s = lsub.add_parser(
        "restore", help="put a backup in place; says what acknowledged entries it loses"
    )
    s.add_argument("backup", metavar="BACKUP", help="a folder `pool ledger backup` wrote")
    s.add_argument("dir", metavar="DIR", help="the deployment folder to restore (replaced)")
    s.add_argument(
        "--accept-loss",
        action="store_true",
        help="proceed although acknowledged entries the backup lacks or replaces are lost "
        "(logged); another steward's backup is refused all the same",
    )
    add_json(s)
    s.set_defaults(handler=_restore)

    r = lsub.add_parser(
        "recover",
        help="truncate an unfinished final entry (a torn write), nothing else",
        description=(
            "Truncate the final fragment of an append that never finished. Refuses, changing "
            "nothing, where the bytes after the last whole entry could be anything else: "
            "longer than any entry, not the start of one, holding a whole entry, or covered "
            "by the deployment's high-water record."
        ),
    )
    r.add_argument("file", metavar="FILE|DIR", help="a ledger file or a deployment folder")
    add_json(r)
    r.set_defaults(handler=_recover)

    c = lsub.add_parser(
        "accept-clock",
        help="accept a clock far ahead of the ledger, or stepped (clock_jump), as right",
        description=(
            "Record, beside the ledger, that the clock as it reads now is right, at the "
            "ledger's present length and head (DESIGN.md §3). A writer refusing clock_jump "
            "appends again once it reads it; the record covers that jump only, and each "
            "acceptance is logged in ledger.cbor.clock.log. A clock behind the ledger "
            "(clock_behind_ledger) cannot be accepted: see docs/reliability.md."
        ),
    )
    c.add_argument("dir", metavar="DIR", help="the deployment folder")
    c.add_argument(
        "--postgres",
        metavar="DSN",
        help="the ledger is in PostgreSQL (the record is kept in DIR, for its replica)",
    )
    c.add_argument("--ledger", metavar="NAME", help="the ledger's name in PostgreSQL")
    add_json(c)
    c.set_defaults(handler=_accept_clock)

    a = lsub.add_parser(
        "acknowledge",
        help="record a verified ledger as what its deployment acknowledged (high-water record)",
        description=(
            "Verify the ledger whole and write its length and head as the high-water record "
            "that start-up holds it to. Needed once for a ledger made before high-water "
            "records existed. Lowering the record (accepting that acknowledged entries are "
            "lost, after restoring an old copy) needs --accept-loss; kept witness receipts "
            "are never overruled."
        ),
    )
    a.add_argument("file", metavar="FILE|DIR", nargs="?", help="a ledger file or deployment folder")
    a.add_argument("--key", metavar="KEYFILE", help="the steward's public key (default: beside)")
    a.add_argument("--witnesses", metavar="DIR", help="kept receipts (default: witnesses/ beside)")
    add_rotations(a)
    a.add_argument(
        "--postgres", metavar="DSN", help="a ledger in PostgreSQL (with --ledger, --key)"
    )
    a.add_argument("--ledger", metavar="NAME", help="the ledger's name in PostgreSQL")
    a.add_argument(
        "--accept-loss",
        action="store_true",
        help="lower the record to this ledger even though it lost acknowledged entries",
    )
    add_json(a)
    a.set_defaults(handler=_acknowledge)
