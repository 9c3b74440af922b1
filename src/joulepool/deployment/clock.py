"""An operator's acceptance of the clock, kept beside the ledger (DESIGN.md §3, "Time faults
are reported, never absorbed"): `pool ledger accept-clock DIR` writes it, and a writer opening
the folder reads it when its clock is far ahead of the last entry or stepped while running.

The record names the instant the clock read when it was accepted, and the ledger's length
and head at that moment: it covers a jump seen at that length or before, never one seen
after an entry appended since. Each acceptance is also appended, one JSON line, to the folder's log. A
replica of a PostgreSQL ledger keeps its record in its own folder: each replica's clock is
accepted where it runs.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
from pathlib import Path

from joulepool.deployment.config import CONFIG, LEDGER
from joulepool.errors import InvalidInput, utc_ms
from joulepool.files import write_atomically
from joulepool.pool import ClockAcceptance

CLOCK_RECORD = LEDGER + ".clock"
"""The acceptance in force, beside the ledger file."""
CLOCK_LOG = LEDGER + ".clock.log"
"""Every acceptance ever made, one JSON line each, oldest first."""

log = logging.getLogger("joulepool.clock")


def read_acceptance(folder: Path) -> ClockAcceptance | None:
    """The acceptance kept in `folder`, or None where there is none (DESIGN.md §3). One
    that cannot be read covers nothing: the jump stays reported."""
    try:
        doc = json.loads((folder / CLOCK_RECORD).read_text(encoding="utf-8"))
        at_ms, length, head = doc["accepted_at_ms"], doc["length"], bytes.fromhex(doc["head_hex"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("%s ignored: %s", folder / CLOCK_RECORD, exc)
        return None
    if not isinstance(at_ms, int) or not isinstance(length, int) or isinstance(length, bool):
        log.warning("%s ignored: figures are not integers", folder / CLOCK_RECORD)
        return None
    return ClockAcceptance(at_ms, length, head)


def accept_clock(folder: Path, at_ms: int, length: int, head: bytes) -> dict[str, object]:
    """Keep an acceptance of the clock reading `at_ms` at a ledger of `length` entries with
    `head` (DESIGN.md §3): the record in force, and a line in the log. Returns the record."""
    if not (folder / CONFIG).is_file():
        raise InvalidInput(str(folder), f"no {CONFIG} here: not a deployment folder")
    try:
        who = getpass.getuser()
    except (KeyError, OSError):
        who = str(os.getuid())
    record: dict[str, object] = {
        "accepted_at_ms": at_ms,
        "accepted_at": utc_ms(at_ms),
        "length": length,
        "head_hex": head.hex(),
        "by": who,
    }
    line = json.dumps(record, sort_keys=True, ensure_ascii=True)
    with open(folder / CLOCK_LOG, "a", encoding="ascii") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())
    write_atomically(folder / CLOCK_RECORD, (line + "\n").encode("ascii"), 0o644)
    return record
