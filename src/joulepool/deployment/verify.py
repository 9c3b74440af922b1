"""The §6.1 verifier of a ledger file or a deployment's ledger: replay from entry 0 under
the steward's keys over time, compare kept state snapshots, hold the ledger to what it
acknowledged, and attest it from kept witness receipts (§6.1, §6.4, §6.8; DESIGN.md §4).

A library function, not a command: `pool ledger verify`, `pool ledger show/usage` and
`pool witness` call it and present what it returns.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from joulepool.ledger.configs import ConfigHistory
    from joulepool.ledger.keys import KeyPair
    from joulepool.ledger.replay import Replayer
    from joulepool.ledger.rotation import KeySchedule
    from joulepool.stores.file import FileStore

Run = Callable[[Callable[[int], None] | None], "Replayer"]
"""A replay to run, given a progress callback (or None)."""


@dataclass(frozen=True, slots=True)
class Located:
    """Where a reading command finds a ledger, its key and its kept receipts."""

    ledger: Path
    key: Path
    witnesses: Path
    deployment: bool


def locate(target: str, key: str | None, witnesses: str | None = None) -> Located:
    """A ledger file, or the ledger of a deployment folder, with where its key and receipts
    are: `--key`, else `steward.pub` beside it; `--witnesses`, else `witnesses/` beside it."""
    from joulepool.deployment.config import LEDGER, PUBLIC_KEY, WITNESSES
    from joulepool.errors import InvalidInput

    path = Path(target)
    if not path.exists():
        raise InvalidInput(
            target, "no such file or folder; give a ledger file or a deployment folder"
        )
    deployment = path.is_dir()
    ledger = path / LEDGER if deployment else path
    if deployment and not ledger.is_file():
        raise InvalidInput(target, f"a folder, but not a deployment: it has no {LEDGER}")
    folder = ledger.parent
    return Located(
        ledger,
        Path(key) if key else folder / PUBLIC_KEY,
        Path(witnesses) if witnesses else folder / WITNESSES,
        deployment,
    )


def steward_key(path: Path, given: bool) -> KeyPair:
    """The steward's public key at `path`: given as `--key`, or found beside the ledger."""
    from joulepool.errors import KeyFileError
    from joulepool.ledger.keys import load_key_file

    if not given and not path.exists():
        raise KeyFileError(
            f"no steward key: {path} does not exist; pass --key with the steward's "
            "public key file, or give the deployment folder"
        )
    return load_key_file(path)


def snapshot_checks(
    ledger: Path, steward: str, keys: Any
) -> tuple[dict[int, Callable[[Replayer], None]], list[dict[str, Any]]]:
    """Stops for a full replay that compare each kept state snapshot with the replayed state
    at its length (DESIGN.md §4), and the list their findings go to, one row a snapshot.

    Compared: head, length, last instant, all-time usage, open and released claims, each
    class's evidence (§2.6), the Merkle tree (DESIGN.md §8) where it keeps one, and the
    per-period sums when the snapshot was folded without a period schedule (this replay
    groups by none).
    """
    from joulepool.errors import PoolError
    from joulepool.ledger.snapshot import (
        SnapshotFolder,
        SnapshotRefused,
        decode_copy,
        open_snapshot,
    )
    from joulepool.periods import NONE, Schedule

    found: list[dict[str, Any]] = []
    stops: dict[int, Callable[[Replayer], None]] = {}
    for length, raw in SnapshotFolder.beside(ledger).newest_first():
        row: dict[str, Any] = {"length": length}
        found.append(row)
        try:
            if isinstance(raw, SnapshotRefused):
                raise raw
            snap = open_snapshot(raw, steward, keys)
            schedule = Schedule.from_json(snap.schedule, "snapshot schedule")
            theirs = decode_copy(snap)
        except PoolError as exc:
            row |= {"agrees": False, "detail": f"refused: {exc}"}
            continue
        stops[length] = _comparison(row, theirs, snap.head, schedule == NONE)
    return stops, found


def _comparison(
    row: dict[str, Any], theirs: Any, head: bytes, same_schedule: bool
) -> Callable[[Replayer], None]:
    def stop(replayer: Replayer) -> None:
        from joulepool.ledger.fold import capture

        ours = capture(replayer.state)
        fields = ["length", "last_at_ms", "usage", "open", "evidence"]
        if same_schedule:
            fields.append("periods")
        if ours.closed is not None and theirs.closed is not None:
            fields.append("closed")  # each in memory; else the replay checks §6.4 itself
        differ = [f for f in fields if getattr(ours, f) != getattr(theirs, f)]
        # DESIGN.md §8: a snapshot from before the tree was kept has none to compare.
        if theirs.merkle is not None and theirs.merkle != replayer.merkle.state():
            differ.append("merkle")
        if replayer.head != head:
            differ.insert(0, "head")
        row["agrees"] = not differ
        if differ:
            row["detail"] = "differs from the replay in: " + ", ".join(differ)

    return stop


def verified(
    target: str,
    *,
    key: str | None = None,
    witnesses: str | None = None,
    rotations: str | None = None,
    workers: int = 0,
    snapshots: list[dict[str, Any]] | None = None,
    with_progress: Callable[[int, Run], Replayer] | None = None,
) -> tuple[FileStore, KeyPair, Replayer]:
    """Open the ledger `target` (a file or a deployment folder) read-only and replay it from
    entry 0, or raise `LedgerRefused` at its index; then hold it to what it acknowledged, or
    raise `LedgerRolledBack` (§6.1).

    `key`, `witnesses` and `rotations` override where the steward's public key, the kept
    receipts and the rotation statements are found (else beside the ledger). `workers` 0
    picks a count from the CPUs (`replay.default_workers`). Given `snapshots`, the kept
    state snapshots are compared with the replay and a row each is added there (DESIGN.md
    §4). `with_progress(total, run)` may wrap the replay to show its progress.
    """
    from joulepool.deployment.keys import statements_for
    from joulepool.errors import LedgerRefused
    from joulepool.ledger.replay import replay
    from joulepool.stores.file import FileStore

    where = locate(target, key, witnesses)
    anchor = steward_key(where.key, bool(key))
    # The key is the trust anchor; rotation statements beside the ledger (or given) say
    # which key seals which entries, and are verified before any entry (DESIGN.md §4).
    keys = statements_for(where.ledger, anchor, Path(rotations) if rotations else None)
    stops: dict[int, Callable[[Replayer], None]] = {}
    if snapshots is not None:
        stops, rows = snapshot_checks(where.ledger, anchor.kid, keys)
        snapshots.extend(rows)
    store = FileStore(where.ledger, writer=False)
    from joulepool.stores.claim_index import ClaimIndex

    # The duplicate check of §6.4 in bounded memory: released claims go to a private
    # on-disk index, removed when done.
    claims = ClaimIndex()
    try:
        wrap = with_progress if with_progress is not None else _quietly
        replayer = wrap(
            len(store),
            lambda progress: replay(
                store.entries(),
                anchor.kid,
                keys,
                workers=workers,
                progress=progress,
                stops=stops,
                claims=claims,
            ),
        )
        if store.tail is not None:
            tail = store.tail
            if tail.torn:
                detail = (
                    f"{tail.length} bytes at offset {tail.offset} are incomplete (a torn "
                    f"write); `pool ledger recover {target}` truncates them"
                )
            else:
                detail = (
                    f"{tail.length} bytes at offset {tail.offset} are a damaged entry, not a "
                    f"torn write: {tail.detail}"
                )
            raise LedgerRefused(len(store), "malformed", detail)
        _hold_to_acknowledged(store, where, anchor.kid)
    except BaseException:
        store.close()
        claims.close()
        raise
    claims.close()
    return store, anchor, replayer


def _quietly(_total: int, run: Run) -> Replayer:
    return run(None)


def _hold_to_acknowledged(store: FileStore, where: Located, steward: str) -> None:
    """Refuse a verified ledger shorter than its high-water record or a kept receipt.

    A bare ledger file without a record is read as it is (it may be a copy or an export);
    a deployment's ledger without one is refused, as `pool serve` would refuse it.
    """
    from joulepool.deployment.witnesses import kept_marks
    from joulepool.ledger.rollback import check_acknowledged
    from joulepool.stores.base import head_at, refuse_rollback

    marks, problems = kept_marks(where.witnesses, steward)
    for problem in problems:
        print(f"pool: warning: {where.witnesses}: {problem}", file=sys.stderr)
    if where.deployment or store.high_water() is not None:
        refuse_rollback(store, marks)
    else:
        check_acknowledged(marks, len(store), lambda n: head_at(store, n), store.name)
    from joulepool.deployment.cosigned import check_roots, load_cosigned

    # The heads agree; the roots the witnesses signed are checked too (DESIGN.md §8).
    check_roots(load_cosigned(where.witnesses), len(store), store.entries(), store.name)


def ledger_attestation(
    where: Located,
    store: FileStore,
    key: KeyPair,
    replayer: Replayer,
    receipts: Sequence[tuple[Path, Path]] = (),
) -> Any:
    """The best attestation of a verified ledger (§6.8): its kept receipts and the given
    (receipt file, witness key file) pairs, checked against its head at each length."""
    from joulepool.deployment.witnesses import KeptReceipt, attestation, load_receipts
    from joulepool.ledger.keys import load_key_file
    from joulepool.stores.base import head_at

    kept = load_receipts(where.witnesses)
    for receipt, witness_key in receipts:
        wk = load_key_file(witness_key)
        kept.append(KeptReceipt(wk.kid, wk.public_key, receipt.read_bytes()))
    return attestation(kept, key.kid, key.public_key, replayer.length, lambda n: head_at(store, n))


def verified_configs(target: str, keys: KeySchedule, length: int) -> ConfigHistory:
    """The configuration statements beside the ledger `target` (`configs/`), each verified
    under the steward's keys over time, in order, and none taking effect past the ledger's
    `length` (docs/reliability.md §18); `ConfigStatementRefused` at the first that fails."""
    from joulepool.deployment.configs import CONFIGS, read_config_statements
    from joulepool.ledger.configs import ConfigHistory, ConfigStatementRefused

    where = locate(target, None)
    history = ConfigHistory.verified(keys, read_config_statements(where.ledger.parent / CONFIGS))
    for applied in history.applied:
        if applied.from_length > length:
            raise ConfigStatementRefused(
                applied.position,
                f"it takes effect from entry {applied.from_length}, past the ledger's "
                f"{length} entries",
            )
    return history
