"""`pool serve`'s side of C2SP witnessing (DESIGN.md §8; c2sp.org/tlog-witness,
add-checkpoint; c2sp.org/tlog-cosignature): every `[[c2sp_witness]]` is sent each new
checkpoint, and its cosignature is kept and served.

- One thread per witness, never a request: at most one submission to a witness is in flight,
  and each round sends the newest checkpoint (`PublishedLog.head`), so checkpoints that came
  and went while a submission ran are coalesced into the next.
- The old size sent is the size the witness last cosigned, as kept on disk
  (`deployment.cosigned`), with a consistency proof from the tile index; 0 when nothing is
  kept, and the witness's 409 names its size.
- A witness that cannot be reached, or answers off the protocol, is tried again after a
  backoff that doubles from `RETRY_S` to `MAX_RETRY_S`; a warning is logged when the reason
  changes, not on every try.
- A cosignature that verifies is kept (`keep_cosigned`, a rollback mark from then on) and
  served: `GET /checkpoint` carries the lines of every witness whose kept checkpoint is the
  one served (`Witnessing.signatures_for`).
- A witness that holds a checkpoint this ledger does not extend (`WitnessInconsistent`) is
  a fork alarm: logged as an error naming the witness and both sizes, kept in
  `alarms` for `/readyz` (503 `witness_fork`) and `/metrics` (`pool_c2sp_witness_fork`), and
  that witness is sent nothing more until `pool serve` is restarted, which an operator does
  once the cause is found (docs/transparency.md, Witnessing). The alarm is raised again at
  the restart if the fork is still there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from joulepool.deployment.checkpoints import SignedHead
from joulepool.deployment.cosigned import KeptCosigned, keep_cosigned, load_cosigned
from joulepool.errors import PoolError
from joulepool.ledger.checkpoint import add_signatures
from joulepool.ledger.merkle import consistency_proof
from joulepool.ledger.note import NoteRefused, NoteSignature, open_note
from joulepool.service.transparency import PublishedLog
from joulepool.stores.base import head_at
from joulepool.transparency.errors import WitnessInconsistent
from joulepool.transparency.witness_client import WitnessConfig, submit

log = logging.getLogger("joulepool.serve")

POLL_S: Final = 1.0
"""How often a witness's thread looks for a newer checkpoint once the last was cosigned."""
RETRY_S: Final = 1.0
MAX_RETRY_S: Final = 60.0


@dataclass
class WitnessState:
    """One configured witness as `pool serve` knows it: its latest kept cosigned checkpoint
    and cosignature line, the fork alarm it raised, and its thread."""

    config: WitnessConfig
    kept: KeptCosigned | None = None
    signature: NoteSignature | None = None
    alarm: str | None = None
    problem: str | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None


class Witnessing:
    """The witnesses of one `pool serve` (module docstring; DESIGN.md §8)."""

    def __init__(self, folder: Path, published: Callable[[], PublishedLog]) -> None:
        self._folder = folder
        self._published = published
        self._lock = threading.Lock()
        self._states: dict[str, WitnessState] = {}
        self._stopped = False

    def configure(self, witnesses: Sequence[WitnessConfig]) -> None:
        """Put `[[c2sp_witness]]` in force (at start and at each SIGHUP reload): a witness
        added is started, one removed is stopped, one whose URL changed is restarted with
        what was kept for it (API.md, pool.toml)."""
        kept = {k.vkey: k for k in load_cosigned(self._folder)}
        wanted = {w.vkey.encode(): w for w in witnesses}
        with self._lock:
            if self._stopped:
                return
            for key, state in list(self._states.items()):
                if wanted.get(key) != state.config:
                    state.stop.set()
                    del self._states[key]
            for key, config in wanted.items():
                if key in self._states:
                    continue
                state = WitnessState(config)
                found = kept.get(config.vkey)
                if found is not None:
                    _remember(state, found)
                thread = threading.Thread(
                    target=self._run, args=(state,), name=f"witness {config.name}", daemon=True
                )
                state.thread = thread
                self._states[key] = state
                thread.start()

    def stop(self) -> None:
        """Stop every witness's thread (the service stops); a submission in flight ends by
        its own timeout."""
        with self._lock:
            self._stopped = True
            for state in self._states.values():
                state.stop.set()

    def states(self) -> list[WitnessState]:
        """Every configured witness, for `/metrics` (API.md "Metrics")."""
        with self._lock:
            return list(self._states.values())

    def alarms(self) -> dict[str, str]:
        """The fork alarms raised since start, by witness name (DESIGN.md §8)."""
        return {s.config.name: s.alarm for s in self.states() if s.alarm is not None}

    def signatures_for(self, head: SignedHead, origin: str) -> list[NoteSignature]:
        """The cosignature lines of the witnesses that cosigned exactly this checkpoint
        (c2sp.org/tlog-cosignature), in configuration order."""
        lines = []
        for state in self.states():
            kept, signature = state.kept, state.signature
            if kept is None or signature is None:
                continue
            point = kept.checkpoint
            if (point.origin, point.size, point.root_hash) == (origin, head.size, head.root):
                lines.append(signature)
        return lines

    def _run(self, state: WitnessState) -> None:
        delay = RETRY_S
        while not state.stop.is_set():
            try:
                done = self._round(state)
            except Exception as exc:
                # Whatever went wrong, this witness is tried again later: a thread that died
                # here would leave the witness silently unsubmitted.
                done = False
                self._problem(state, f"{type(exc).__name__}: {exc}")
            if state.alarm is not None:
                return
            if done:
                delay = RETRY_S
                state.stop.wait(POLL_S)
            else:
                state.stop.wait(delay)
                delay = min(MAX_RETRY_S, delay * 2)

    def _round(self, state: WitnessState) -> bool:
        """One submission of the newest checkpoint, if the witness has not cosigned it;
        False when it must be tried again after a backoff."""
        try:
            published = self._published()
            head = published.head()
        except Exception as exc:
            # Not ready yet (replay runs), or no origin: nothing to submit, so no alarm.
            self._problem(state, f"no checkpoint to submit: {exc}")
            return False
        kept = state.kept
        old = kept.checkpoint.size if kept is not None else 0
        if head.size == 0 or (
            kept is not None
            and (kept.checkpoint.size, kept.checkpoint.root_hash) == (head.size, head.root)
        ):
            return True
        index = published.index

        def proof(old_size: int, new_size: int) -> list[bytes]:
            return consistency_proof(old_size, new_size, index)

        config = state.config
        try:
            signatures = submit(config, head.note, old, proof)
        except WitnessInconsistent as exc:
            # Replicas of one shared ledger each submit: another may have had a longer
            # checkpoint cosigned than this one has seen. Only a fork past a fresh look is one.
            if published.head(fresh=True).size > head.size:
                return True
            self._fork(state, head, exc)
            return False
        except PoolError as exc:
            self._problem(state, f"{exc.code}: {exc}")
            return False
        note = add_signatures(head.note, signatures)
        # The chain head at the checkpoint's size: the entries that root commits to, read
        # from the ledger that is only ever appended to while this process serves it.
        chain = head_at(published.pool.store, head.size)
        try:
            kept_now = keep_cosigned(self._folder, config.vkey, note, chain)
        except PoolError as exc:
            # Not kept, so it is served and used as a mark by no one: asked again later.
            self._problem(state, f"cosigned, but not kept: {exc.code}: {exc}")
            return False
        _remember(state, kept_now)
        if state.problem is not None:
            log.warning("C2SP witness %s cosigns again", config.name)
            state.problem = None
        return True

    def _problem(self, state: WitnessState, problem: str) -> None:
        if problem != state.problem:
            log.warning("C2SP witness %s not cosigning: %s", state.config.name, problem)
        state.problem = problem

    def _fork(self, state: WitnessState, head: SignedHead, exc: WitnessInconsistent) -> None:
        kept = state.kept
        ours = (
            f"it last cosigned size {kept.checkpoint.size} root {kept.checkpoint.root_hash.hex()} "
            "here"
            if kept is not None
            else "nothing it cosigned is kept here"
        )
        state.alarm = (
            f"C2SP witness {state.config.name} refuses this ledger's checkpoint of size "
            f"{head.size} root {head.root.hex()}; {ours}: {exc.detail}. It is sent nothing "
            "more until pool serve is restarted"
        )
        log.error("witness_fork: %s", state.alarm)


def _remember(state: WitnessState, kept: KeptCosigned) -> None:
    """Make `kept` the witness's latest, with its cosignature line for serving."""
    try:
        opened = open_note(kept.note, [kept.vkey])
    except NoteRefused:
        return
    state.signature = opened.verified[0][1]
    state.kept = kept
