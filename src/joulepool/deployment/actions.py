"""The action log: every act on a running job, and every act withheld, with its evidence
(DESIGN.md §7; API.md `GET /v1/actions`).

    DIR/actions.jsonl      one JSON object a line, appended and fsynced before it is answered
    DIR/actions.jsonl.1    the previous file, once the current one reached `MAX_BYTES`

Not the ledger: nothing here is signed or charged. A line is at most `MAX_LINE` bytes (a
longer record is refused, never cut); when a line would take the file past `MAX_BYTES` the
file becomes `actions.jsonl.1` (replacing the one before) and a new one is begun, so the
log never holds more than about twice `MAX_BYTES`. Reading is hostile-file-safe: at most
the bytes the cap allows are read from each file's end, and a line that is not a record
(torn by a crash, edited, too long) is skipped and counted, never fatal.

A record: `{"at_ms", "claim", "entitlement", "job", "rule", "kind", "outcome", "reason",
"detail", "evidence", "policy"}`, `rule` one of `RULES` (absent: `over_reservation`, as the
first records were written), `kind` one of `acts.KINDS` or `run` (a requeued job's earlier
run and its figure, added to its release), `outcome` one of `OUTCOMES`.

What the log says of a claim, per rule, is what the rules decide on (`reclaim.RuleState`):
the kinds done, when the outstanding notice was given (a later `withheld` record of the
rule withdraws it: the job is told afresh before any act), and when the job was last
requeued. A requeue done starts a new run: the idle and preemption rules then start over,
while over-reservation, which the whole claim's energy feeds, does not.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from joulepool.acts import KINDS
from joulepool.errors import InvalidInput
from joulepool.files import fsync_dir
from joulepool.tree import Tree

ACTIONS = "actions.jsonl"
MAX_LINE = 4096
MAX_BYTES = 16 * 1024 * 1024
LOG_KINDS = (*KINDS, "run")
OUTCOMES = ("done", "failed", "withheld", "reported", "recorded")
"""`done`/`failed`: a bridge carried an act out, or tried; `withheld`: an act the evidence
could not carry; `reported`: over-reservation under the `report` policy; `recorded`: a run."""
DONE = frozenset({"done", "reported"})
"""Outcomes after which the same kind is never due again for the claim (and rule, and run)."""
RULES = ("over_reservation", "idle", "preemption")
"""What made an act due: the reservation as a limit, §2.7 idle reclamation, §5 preemption."""
PER_RUN = frozenset({"idle", "preemption"})
"""The rules that start over when a job is requeued: a new run is judged afresh."""


def rule_of(record: dict[str, Any]) -> str:
    """The rule a record belongs to; records written before rules existed are the limit's."""
    return str(record.get("rule") or "over_reservation")


def _served(record: dict[str, Any]) -> str | None:
    """The waiting claim a preemption record names in its detail (`for <claim>`), if any."""
    detail = record.get("detail")
    if isinstance(detail, str) and detail.startswith("for "):
        return detail[4:].split(": ", 1)[0] or None
    return None


def valid_record(value: object) -> dict[str, Any] | None:
    """`value` if it has a record's shape (module docstring), else None."""
    if not isinstance(value, dict):
        return None
    at, claim, kind, outcome = (value.get(k) for k in ("at_ms", "claim", "kind", "outcome"))
    if type(at) is not int or at < 0 or not isinstance(claim, str):
        return None
    if kind not in LOG_KINDS or outcome not in OUTCOMES:
        return None
    if not isinstance(value.get("entitlement"), str):
        return None
    if value.get("rule") not in (None, *RULES):
        return None
    return value


class ActionLog:
    """`DIR/actions.jsonl` and what it says was done, per claim (module docstring).

    Thread-safe: appends and the index are under one lock. `counts` are this process's
    appends by (kind, outcome), for `pool_actions_total`."""

    def __init__(self, path: Path, max_bytes: int = MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._done: dict[tuple[str, str], set[str]] = {}
        self._last: dict[tuple[str, str], tuple[str, str | None]] = {}
        self._notice: dict[tuple[str, str], int] = {}
        self._requeued: dict[str, int] = {}
        self._requeued_for: dict[str, list[tuple[str, int]]] = {}
        self._latest: dict[str, dict[str, Any]] = {}
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self.skipped = 0
        for record in self._records(count=True):
            self._index(record)

    @property
    def previous(self) -> Path:
        """Where the file before the current one is kept."""
        return self.path.with_name(self.path.name + ".1")

    def _lines(self, path: Path) -> Iterator[bytes]:
        try:
            with path.open("rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                start = max(0, size - self.max_bytes - MAX_LINE)
                fh.seek(start)
                data = fh.read(self.max_bytes + MAX_LINE)
        except FileNotFoundError:
            return
        lines = data.split(b"\n")
        if start > 0:
            lines = lines[1:]  # the first is a line's tail
        yield from (line for line in lines if line)

    def _parsed(self, line: bytes) -> dict[str, Any] | None:
        if len(line) > MAX_LINE:
            return None
        try:
            return valid_record(json.loads(line))
        except (ValueError, RecursionError):
            return None

    def _records(self, count: bool = False) -> Iterator[dict[str, Any]]:
        """Every readable record, oldest first; `count`: add the lines skipped to `skipped`."""
        for path in (self.previous, self.path):
            for line in self._lines(path):
                record = self._parsed(line)
                if record is None:
                    self.skipped += count
                    continue
                yield record

    def _newest_first(self) -> Iterator[dict[str, Any]]:
        """Every readable record, newest first, parsed only as far as a reader goes."""
        for path in (self.path, self.previous):
            for line in reversed(list(self._lines(path))):
                record = self._parsed(line)
                if record is not None:
                    yield record

    def _index(self, record: dict[str, Any]) -> None:
        claim, kind, outcome = record["claim"], record["kind"], record["outcome"]
        if kind == "run":
            return
        key = (claim, rule_of(record))
        self._latest[claim] = {
            "at_ms": record["at_ms"],
            "rule": key[1],
            "kind": kind,
            "outcome": outcome,
            "reason": record.get("reason"),
        }
        if kind == "requeue" and outcome == "done":
            self._requeued[claim] = record["at_ms"]
            waiter = _served(record) if key[1] == "preemption" else None
            if waiter is not None:
                self._requeued_for.setdefault(waiter, []).append((claim, record["at_ms"]))
            for rule in PER_RUN:
                self._done.pop((claim, rule), None)
                self._notice.pop((claim, rule), None)
                self._last.pop((claim, rule), None)
            if key[1] in PER_RUN:
                return  # the new run starts with nothing done under its rules
        if outcome in DONE:
            self._done.setdefault(key, set()).add(kind)
        if kind == "notice" and outcome == "done":
            self._notice[key] = record["at_ms"]
        elif kind == "withheld":
            self._notice.pop(key, None)
            if key[1] in PER_RUN:
                # A withdrawn notice of these rules is given afresh if the act is due again
                # (DESIGN.md §7): it is no longer done, or its report would be refused.
                self._done.get(key, set()).discard("notice")
        self._last[key] = (kind, record.get("reason"))

    def done(self, claim: str, rule: str = "over_reservation") -> frozenset[str]:
        """The kinds carried out (or reported) for `claim` under `rule` (this run's, for a
        per-run rule): never due again (DESIGN.md §7)."""
        with self._lock:
            return frozenset(self._done.get((claim, rule), ()))

    def notice_at(self, claim: str, rule: str) -> int | None:
        """When `claim`'s outstanding notice under `rule` was given; None if none is."""
        with self._lock:
            return self._notice.get((claim, rule))

    def latest(self, claim: str) -> dict[str, Any] | None:
        """`claim`'s newest act, withheld act or report (a run aside): `{"at_ms", "rule",
        "kind", "outcome", "reason"}`, None if the log holds none (DESIGN.md §7)."""
        with self._lock:
            found = self._latest.get(claim)
            return None if found is None else dict(found)

    def touched(self, claim: str) -> bool:
        """Whether the log holds any record of `claim` (a run aside): most claims have none,
        and their state is known without building it."""
        return claim in self._latest

    def requeued_at(self, claim: str) -> int | None:
        """When `claim`'s job was last requeued by an act, if ever."""
        with self._lock:
            return self._requeued.get(claim)

    def requeued_for(self, waiter: str) -> list[tuple[str, int]]:
        """The claims requeued by preemption for `waiter` (their records' `for <claim>`),
        each with when: GPUs freed for it that Slurm may not have given it yet."""
        with self._lock:
            return list(self._requeued_for.get(waiter, ()))

    def append(
        self, record: dict[str, Any], *, if_changed: bool = False, if_not_done: bool = False
    ) -> dict[str, Any] | None:
        """Append one record, durably, before returning it (module docstring). With
        `if_changed`, only if its (kind, reason) differs from the claim's last record under
        its rule; with `if_not_done`, only if its kind is not recorded done under its rule:
        checked and appended under one lock, so two requests at once record it once. None
        where it was not appended."""
        if valid_record(record) is None:
            raise InvalidInput("action", "not an action record")
        line = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        data = line.encode("ascii") + b"\n"
        if len(data) > MAX_LINE:
            raise InvalidInput("action", f"a record over {MAX_LINE} bytes")
        key = (record["claim"], rule_of(record))
        with self._lock:
            if if_changed and self._last.get(key) == (record["kind"], record.get("reason")):
                return None
            if if_not_done and record["kind"] in self._done.get(key, ()):
                return None
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size and size + len(data) > self.max_bytes:
                os.replace(self.path, self.previous)
                fsync_dir(self.path.parent)
            created = size == 0 and not self.path.exists()
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    # A line torn by a crash stays one bad line; it never swallows this one.
                    data = b"\n" + data
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                fsync_dir(self.path.parent)
            self._index(record)
            self.counts[(rule_of(record), record["kind"], record["outcome"])] += 1
        return record

    def read(
        self,
        keep: Callable[[dict[str, Any]], bool] = lambda _r: True,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Up to `limit` records `keep` admits, newest first (API.md `GET /v1/actions`)."""
        found: list[dict[str, Any]] = []
        with self._lock:
            for record in self._newest_first():
                if len(found) >= limit:
                    break
                if keep(record):
                    found.append(record)
        return found


def matching(
    tree: Tree,
    roots: Sequence[str] = (),
    kind: str | None = None,
    since_ms: int | None = None,
    claim: str | None = None,
    rule: str | None = None,
) -> Callable[[dict[str, Any]], bool]:
    """Which records a reader asked for (API.md `GET /v1/actions`, `pool actions`): within
    every one of `roots`' subtrees (a tenant's root, an `entitlement` filter), of `kind`,
    at or after `since_ms`, of `claim`, of `rule`."""
    if kind is not None and kind not in LOG_KINDS:
        raise InvalidInput("kind", f"must be one of {', '.join(LOG_KINDS)}")
    if rule is not None and rule not in RULES:
        raise InvalidInput("rule", f"must be one of {', '.join(RULES)}")

    def keep(record: dict[str, Any]) -> bool:
        ent = record["entitlement"]
        if any(not (ent in tree and tree.is_within(ent, root)) for root in roots):
            return False
        if kind is not None and record["kind"] != kind:
            return False
        if claim is not None and record["claim"] != claim:
            return False
        if rule is not None and rule_of(record) != rule:
            return False
        return since_ms is None or record["at_ms"] >= since_ms

    return keep


def open_action_log(folder: Path) -> ActionLog:
    """The deployment's action log (`DIR/actions.jsonl`)."""
    return ActionLog(folder / ACTIONS)
