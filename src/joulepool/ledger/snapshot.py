"""State snapshots: the fold's state at a length, so a restart replays only the tail
(DESIGN.md §4, "state snapshot"; a cache, never a second source of truth, standard §6.1).

A snapshot is a COSE_Sign1 of the entry profile signed by the steward, its core
`{pool_snapshot: 1, steward, length, head, at_ms, schedule, state}`: `schedule` and `state`
are byte strings holding CBOR (the period schedule it was folded under, and the state
itself), so the core stays within the profile's types. It counts only when its signature
verifies under a steward key in force around its `length` (`sealing_keys`: the key of its
last entry, or the one a rotation at exactly that length hands over to) and the ledger's
head at that length is its `head`; anything else about it (bytes, fields, figures) that fails refuses it whole
(`SnapshotRefused`), and the caller replays from an earlier one or from entry 0. Its core
can never pass as a ledger entry: its keys are not an event's.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import cbor2

from joulepool.errors import PoolError
from joulepool.estimate import Tally
from joulepool.events import Admitted
from joulepool.files import fsync_dir, write_atomically
from joulepool.grade import Energy, Grade
from joulepool.ledger.cbor import CborRefused
from joulepool.ledger.cose import open_envelope, seal, verify_signature
from joulepool.ledger.entry import brief
from joulepool.ledger.fold import LedgerState, StateCopy, restore
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.merkle import CompactRange
from joulepool.ledger.released import ReleasedClaims
from joulepool.ledger.rotation import KeySchedule
from joulepool.ledger.sequence import split
from joulepool.periods import Schedule
from joulepool.tree import Tree

SNAPSHOT_VERSION = 1
_FIELDS = frozenset(
    {"pool_snapshot", "steward", "length", "head", "at_ms", "schedule", "state_sha256"}
)
MAX_SNAPSHOT_BYTES = 1 << 31
MAX_ENVELOPE_BYTES = 64 << 10
"""The signed envelope is small (its state travels after it, by digest)."""
KEEP = 3
"""Snapshots kept: the newest and two before it, in case the newest is damaged."""
STATE_LAYOUT = 3
"""The state array's layout: 3 adds the Merkle tree's right edge (DESIGN.md §8); 2 keeps
§2.6's counts and extremes per class and entitlement and where its last entry lies in a
ledger file; 1 (seven items, no marker) kept every released claim. 2 and 1 are still read,
with no tree: a start then replays the ledger from entry 0 to rebuild it."""
_LAYOUT_NO_TREE = 2


class SnapshotRefused(PoolError):
    """A snapshot that cannot be used; `detail` says why (DESIGN.md §4). Never fatal."""

    code = "snapshot_refused"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot whose signature verified: where it stands, and its state still encoded."""

    length: int
    head: bytes
    at_ms: int
    schedule: dict[str, Any]
    state: bytes


def encode_state(copy: StateCopy) -> bytes:
    """The state as CBOR: plain arrays and maps of integers and text (DESIGN.md §4)."""
    open_ = {
        claim: [
            seq,
            a.entitlement,
            a.gang_size,
            a.devices_per_member,
            a.reserved.uj,
            a.reserved.grade.value,
            a.borrowed_uj,
            a.at_ms,
            a.class_ if a.class_ is not None else "",
        ]
        for claim, (a, seq) in copy.open.items()
    }
    evidence = {
        cls: {ent: [t.observations, t.evidence, t.low, t.high] for ent, t in tallies.items()}
        for cls, tallies in copy.evidence.items()
    }
    periods = [[index, ents] for index, ents in sorted(copy.periods.items())]
    # None: the released claims are in the claim index beside the ledger, not here.
    closed = (
        None if copy.closed is None else {claim: list(pair) for claim, pair in copy.closed.items()}
    )
    usage = {ent: list(figures) for ent, figures in copy.usage.items()}
    bounds = None if copy.bounds is None else list(copy.bounds)
    merkle = None if copy.merkle is None else [copy.merkle[0], list(copy.merkle[1])]
    body = [
        copy.length,
        copy.last_at_ms,
        usage,
        open_,
        closed,
        evidence,
        periods,
        STATE_LAYOUT,
        bounds,
        merkle,
    ]
    return bytes(cbor2.dumps(body))


def seal_snapshot(
    key: KeyPair, length: int, head: bytes, at_ms: int, schedule: Schedule, state: bytes
) -> bytes:
    """A snapshot of `state` at `length`, signed by the steward key in force there (§4)."""
    core = {
        "pool_snapshot": SNAPSHOT_VERSION,
        "steward": key.kid,
        "length": length,
        "head": head,
        "at_ms": at_ms,
        "schedule": bytes(cbor2.dumps(schedule.to_json(), canonical=True)),
        "state_sha256": hashlib.sha256(state).digest(),
    }
    # The state follows the envelope, bound to it by its digest: an envelope stays within
    # the profile's item size however large the state grows.
    return seal(core, key.kid, key.signing_key) + state


def sealing_keys(keys: KeySchedule, length: int) -> list[bytes]:
    """The steward keys that may seal a snapshot at `length` (DESIGN.md §4): the key in
    force for its last entry (`length - 1`), which sealed that entry, and the key in force
    for the next entry (`length`).

    The two differ only when a rotation takes effect at exactly `length`: the outgoing key
    sealed every entry the snapshot covers, and the incoming key may seal one before any
    entry of its own exists. Both are safe: the outgoing key is the one whose entries the
    snapshot summarises, and the incoming key was handed authority at `length` by a
    statement the outgoing key signed, so it could as well append entry `length` itself.
    Any other key is refused: a key retired before `length - 1` sealed none of the entries
    nearest the snapshot and cannot speak for them, and a key that takes over after `length`
    had no authority yet. The snapshot's head is still checked against the ledger's head at
    `length` by every caller, whatever key sealed it.
    """
    if length == 0:
        return [keys.key_at(0)]
    before, after = keys.key_at(length - 1), keys.key_at(length)
    return [before] if before == after else [before, after]


def open_snapshot(raw: bytes, steward: str, keys: KeySchedule) -> Snapshot:
    """A snapshot whose signature verifies under one of its `sealing_keys`, or
    `SnapshotRefused` naming why (DESIGN.md §4). Its head is checked by the caller."""
    head_bytes = raw[:MAX_ENVELOPE_BYTES]
    offsets, tail = split(head_bytes)
    if not offsets:
        raise SnapshotRefused("not a snapshot: it does not start with a COSE_Sign1")
    end = offsets[1] if len(offsets) > 1 else (tail.offset if tail else len(head_bytes))
    envelope, state = raw[:end], raw[end:]
    try:
        env = open_envelope(envelope)
    except CborRefused as exc:
        raise SnapshotRefused(f"not a snapshot: {exc.error}: {exc.detail}") from None
    if env.kid != steward:
        raise SnapshotRefused(f"signed as {brief(env.kid)}, not the steward {steward!r}")
    core = env.core
    if set(core) != _FIELDS or core.get("pool_snapshot") != SNAPSHOT_VERSION:
        raise SnapshotRefused(f"its core has the keys {sorted(map(str, core))}, not a snapshot's")
    length, head, at_ms = core["length"], core["head"], core["at_ms"]
    if type(length) is not int or length < 0 or type(at_ms) is not int or at_ms < 0:
        raise SnapshotRefused("its length or at_ms is not a non-negative integer")
    if type(head) is not bytes or len(head) != 32:
        raise SnapshotRefused("its head is not a 32-byte content address")
    if core["steward"] != steward:
        raise SnapshotRefused(f"it names the steward {brief(core['steward'])}")
    if not any(verify_signature(env, key) for key in sealing_keys(keys, length)):
        raise SnapshotRefused(
            "its signature does not verify under the steward key of its last entry, "
            f"nor under one a rotation at {length} hands over to"
        )
    schedule, digest = core["schedule"], core["state_sha256"]
    if type(schedule) is not bytes or type(digest) is not bytes:
        raise SnapshotRefused("its schedule and state digest are not byte strings")
    if hashlib.sha256(state).digest() != digest:
        raise SnapshotRefused("the state after its envelope is not the state it signed")
    try:
        schedule_json = cbor2.loads(schedule)
    except Exception as exc:  # hostile bytes: any decoder failure is a refusal
        raise SnapshotRefused(f"its schedule does not decode: {exc}") from None
    if not isinstance(schedule_json, dict):
        raise SnapshotRefused("its schedule is not a map")
    return Snapshot(length, head, at_ms, schedule_json, state)


def _int(v: object) -> int:
    if type(v) is not int or v < 0:
        raise ValueError(f"{brief(v)} is not a non-negative integer")
    return v


def _text(v: object) -> str:
    if type(v) is not str:
        raise ValueError(f"{brief(v)} is not text")
    return v


def _bytes(v: object) -> bytes:
    if not isinstance(v, bytes):
        raise ValueError(f"{brief(v)} is not a byte string")
    return v


def _map(v: object) -> dict[Any, Any]:
    if type(v) is not dict:
        raise ValueError("expected a map")
    return v


def _list(v: object, n: int | None = None) -> list[Any]:
    if type(v) is not list or (n is not None and len(v) != n):
        raise ValueError("expected an array" + (f" of {n}" if n is not None else ""))
    return v


def _tally(v: object) -> Tally:
    observations, evidence, low, high = _list(v, 4)
    out = Tally(_int(observations), _int(evidence))
    if out.evidence > out.observations:
        raise ValueError(f"{out.evidence} evidence among {out.observations} observations")
    if out.evidence == 0:
        if low is not None or high is not None:
            raise ValueError("extremes without evidence")
        return out
    out.low, out.high = _int(low), _int(high)
    if out.low > out.high:
        raise ValueError(f"least evidence {out.low} above the greatest {out.high}")
    return out


def _tallies_of_history(v: object) -> dict[str, dict[str, Tally]]:
    """Layout 1 kept every released claim's (entitlement, actual, grade): count them."""
    out: dict[str, dict[str, Tally]] = {}
    for cls, rows in _map(v).items():
        tallies = out.setdefault(_text(cls), {})
        for row in _list(rows):
            ent, uj, grade = _list(row, 3)
            tallies.setdefault(_text(ent), Tally()).add(Energy(_int(uj), Grade.parse(grade)))
    return out


def decode_state(
    snapshot: Snapshot,
    tree: Tree,
    schedule: Schedule,
    claims: ReleasedClaims | None = None,
    copy: StateCopy | None = None,
) -> LedgerState:
    """The fold's state the snapshot holds (`copy`, where it was decoded already), under
    `schedule`, or `SnapshotRefused` (§4)."""
    if schedule.to_json() != snapshot.schedule:
        raise SnapshotRefused(
            f"it was folded under the period schedule {snapshot.schedule}, not {schedule.to_json()}"
        )
    if copy is None:
        copy = decode_copy(snapshot)
    try:
        return restore(tree, schedule, copy, claims)
    except Exception as exc:  # figures inside a valid signature that no fold could leave
        raise SnapshotRefused(f"its state cannot be a fold's: {exc}") from None


def decode_copy(snapshot: Snapshot) -> StateCopy:
    """The state the snapshot holds, decoded and type-checked, not yet a fold's; or
    `SnapshotRefused` (DESIGN.md §4)."""
    try:
        body = _list(cbor2.loads(snapshot.state))
        bounds = None
        merkle = None
        if (len(body) == 10 and body[7] == STATE_LAYOUT) or (
            len(body) == 9 and body[7] == _LAYOUT_NO_TREE
        ):
            if len(body) == 10 and body[9] is not None:
                size, hashes = _list(body[9], 2)
                merkle = (_int(size), tuple(_bytes(h) for h in _list(hashes)))
                CompactRange.from_state(*merkle)  # one 32-byte hash per set bit, or refused
                if merkle[0] != _int(body[0]):
                    raise ValueError(f"its tree has {merkle[0]} leaves, its state {body[0]}")
            if body[8] is not None:
                start, end = (_int(x) for x in _list(body[8], 2))
                if start >= end:
                    raise ValueError(f"its last entry's bytes [{start}, {end}) are empty")
                bounds = (start, end)
            evidence = {
                _text(cls): {_text(e): _tally(t) for e, t in _map(tallies).items()}
                for cls, tallies in _map(body[5]).items()
            }
        elif len(body) == 7:
            evidence = _tallies_of_history(body[5])
        else:
            raise ValueError(f"its state is an array of {len(body)}, not a known layout")
        length, last_at_ms = _int(body[0]), _int(body[1])
        if length != snapshot.length:
            raise ValueError(f"its state is at length {length}, its core says {snapshot.length}")
        usage = {_text(e): tuple(_int(x) for x in _list(f, 4)) for e, f in _map(body[2]).items()}
        open_: dict[str, tuple[Admitted, int]] = {}
        for claim, row in _map(body[3]).items():
            seq, ent, gang, dpm, uj, grade, borrowed, at_ms, cls = _list(row, 9)
            admitted = Admitted(
                claim=_text(claim),
                entitlement=_text(ent),
                gang_size=_int(gang),
                devices_per_member=_int(dpm),
                reserved=Energy(_int(uj), Grade.parse(grade)),
                borrowed_uj=_int(borrowed),
                at_ms=_int(at_ms),
                class_=_text(cls) or None,
            )
            open_[claim] = (admitted, _int(seq))
        closed = (
            None
            if body[4] is None
            else {
                _text(c): (_int(p[0]), _int(p[1]))
                for c, pair in _map(body[4]).items()
                for p in (_list(pair, 2),)
            }
        )
        periods: dict[int, dict[str, list[int]]] = {}
        for item in _list(body[6]):
            index, ents = _list(item, 2)
            if type(index) is not int:
                raise ValueError("a period index is not an integer")
            periods[index] = {
                _text(e): [_int(x) for x in _list(s, 3)] for e, s in _map(ents).items()
            }
        return StateCopy(
            length,
            last_at_ms,
            usage,  # type: ignore[arg-type]
            open_,
            closed,
            evidence,
            periods,
            bounds,
            merkle,
        )
    except Exception as exc:  # hostile bytes inside a valid signature: refuse it whole
        raise SnapshotRefused(f"its state does not decode: {exc}") from None


class Snapshots(Protocol):
    """Where a pool keeps its state snapshots: a folder beside a ledger file, or a table
    beside a ledger in PostgreSQL (`stores.postgres.PostgresSnapshots`)."""

    @property
    def where(self) -> str:
        """Where they are kept, for messages."""
        ...

    def lengths(self) -> list[int]:
        """The lengths of the kept snapshots, newest first."""
        ...

    def newest_first(self) -> Iterator[tuple[int, bytes | SnapshotRefused]]:
        """Each kept snapshot's length and bytes (or why it cannot be read), newest first."""
        ...

    def write(self, length: int, raw: bytes, keep: int = KEEP) -> object:
        """Keep a new snapshot durably, then drop all but the newest `keep`."""
        ...

    def newest(self) -> tuple[int, float] | None:
        """The newest kept snapshot's length and when it was written (seconds since the
        epoch), or None when none is kept."""
        ...


class SnapshotFolder:
    """The snapshots of a ledger file, in a folder beside it: `<ledger>.snapshots/`, one
    file per snapshot named by its length, written atomically, the newest `KEEP` kept."""

    _NAME = re.compile(r"^([0-9]{16})\.snapshot$")

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @property
    def where(self) -> str:
        """Where the snapshots are kept, for messages."""
        return str(self.folder)

    @classmethod
    def beside(cls, ledger: Path) -> SnapshotFolder:
        """The snapshot folder of the ledger file `ledger`."""
        return cls(ledger.with_name(ledger.name + ".snapshots"))

    def lengths(self) -> list[int]:
        """The lengths of the kept snapshots, newest first."""
        if not self.folder.is_dir():
            return []
        found = [self._NAME.match(p.name) for p in self.folder.iterdir()]
        return sorted((int(m.group(1)) for m in found if m), reverse=True)

    def newest(self) -> tuple[int, float] | None:
        """The newest kept snapshot's length and when it was written (seconds since the
        epoch, its file's mtime), or None when none is kept (DESIGN.md §4; for `/metrics`)."""
        for length in self.lengths():
            try:
                return length, (self.folder / f"{length:016d}.snapshot").stat().st_mtime
            except OSError:
                continue  # removed since it was listed: the next one is the newest
        return None

    def read(self, length: int) -> bytes:
        """The snapshot at `length`, as stored (`SnapshotRefused` if unreadable)."""
        path = self.folder / f"{length:016d}.snapshot"
        try:
            if path.stat().st_size > MAX_SNAPSHOT_BYTES:
                raise SnapshotRefused(f"{path} is larger than any snapshot")
            return path.read_bytes()
        except OSError as exc:
            raise SnapshotRefused(f"{path}: cannot read: {exc.strerror}") from None

    def newest_first(self) -> Iterator[tuple[int, bytes | SnapshotRefused]]:
        """Each kept snapshot's length and bytes (or why it cannot be read), newest first."""
        for length in self.lengths():
            try:
                yield length, self.read(length)
            except SnapshotRefused as exc:
                yield length, exc

    def write(self, length: int, raw: bytes, keep: int = KEEP) -> Path:
        """Keep a new snapshot durably, then drop all but the newest `keep`."""
        if not self.folder.is_dir():
            self.folder.mkdir(mode=0o755)
            fsync_dir(self.folder.parent)
        path = self.folder / f"{length:016d}.snapshot"
        write_atomically(path, raw, 0o644)
        for old in self.lengths()[keep:]:
            try:
                os.unlink(self.folder / f"{old:016d}.snapshot")
            except OSError as exc:
                print(f"pool: warning: cannot remove an old snapshot: {exc}", file=sys.stderr)
        return path
