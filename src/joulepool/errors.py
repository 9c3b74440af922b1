"""The one error hierarchy of joulepool: every refusal it makes on purpose is a `PoolError`.

Each class is named for what went wrong and carries the machine-readable parts (a field,
a node, an index, an error name) beside a sentence for people, so a caller can catch one
kind on its own and a command line can print it without a traceback.
"""

from __future__ import annotations

import errno


class PoolError(Exception):
    """Root of every error joulepool raises on purpose."""

    code: str = "pool_error"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidInput(PoolError):
    """A figure, field or document broke the rules of its shape (DESIGN.md §2)."""

    code = "invalid_input"

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}" if field else detail)
        self.field = field


class InvalidTree(InvalidInput):
    """An entitlement tree was refused when it was built (standard §2.1, DESIGN.md §3).

    `structural` tells a broken tree (an empty id or parent, duplicate id, unknown parent,
    cycle, limit below the guarantee) from a badly typed figure in one node, which is invalid
    input like any other: its `code` is then `invalid_input` (DESIGN.md §3, "Edge cases,
    pinned").
    """

    code = "invalid_tree"

    def __init__(
        self,
        node: str | None,
        field: str,
        reason: str,
        file: str | None = None,
        *,
        structural: bool = True,
    ) -> None:
        where = f"entitlement {node!r}" if node is not None else "tree"
        prefix = f"{file}: " if file else ""
        PoolError.__init__(self, f"{prefix}{where}, field {field!r}: {reason}")
        self.field = field
        self.node = node
        self.reason = reason
        self.file = file
        self.structural = structural
        self.code = "invalid_tree" if structural else "invalid_input"

    def in_file(self, file: str) -> InvalidTree:
        """The same refusal, naming the file the tree came from."""
        return InvalidTree(self.node, self.field, self.reason, file, structural=self.structural)


class InvalidTokens(InvalidInput):
    """`tokens.toml` was refused (API.md, Tokens): open to other users, a token or a name
    listed twice, a scope naming nothing in the tree. `file` and `line` (of the offending
    `[[token]]` table, None for the file as a whole) say where."""

    code = "invalid_tokens"

    def __init__(self, file: str, line: int | None, detail: str) -> None:
        where = file if line is None else f"{file}:{line}"
        PoolError.__init__(self, f"{where}: {detail}")
        self.field = file
        self.file = file
        self.line = line


class ReloadRefused(PoolError):
    """`pool reload DIR`: the running `pool serve` refused what it read, or cannot be
    reached (docs/reliability.md §15); the detail is its own words. The old configuration
    and tokens stay in force."""

    code = "reload_refused"


class AttributionRefused(PoolError):
    """A device total could not be divided: no occupants, or no weight (standard §2.5)."""

    code = "attribution_refused"

    def __init__(self, error: str, detail: str) -> None:
        super().__init__(detail)
        self.error = error


class LedgerRefused(PoolError):
    """A ledger failed verification or replay at `index` with the error name `error` (§6.4-§6.6)."""

    code = "ledger_refused"

    def __init__(self, index: int, error: str, detail: str = "") -> None:
        super().__init__(f"entry {index}: {error}" + (f" ({detail})" if detail else ""))
        self.detail = detail  # the sentence alone: index and error have their own fields
        self.index = index
        self.error = error


class WitnessRefused(PoolError):
    """A witness receipt was refused: its key is the steward's, or it cannot be made (§6.7)."""

    code = "witness_refused"

    def __init__(self, error: str, detail: str) -> None:
        super().__init__(detail)
        self.error = error


class KeyFileError(PoolError):
    """A key file is missing, readable by others, or not the COSE_Key it should be."""

    code = "key_file"


class CertificateOutOfDate(InvalidInput):
    """`pool serve`'s TLS certificate is expired or not yet valid (docs/reliability.md §17)."""

    code = "certificate_out_of_date"


class StoreError(PoolError):
    """A ledger store could not be opened, read or appended to."""

    code = "store_error"


class DiskFull(StoreError):
    """A write found no space left (ENOSPC, EDQUOT); what was there before is unchanged."""

    code = "disk_full"


def no_space(exc: OSError) -> bool:
    """Whether an OSError says the disk (or the quota) is full."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


class ClaimError(PoolError):
    """A claim or release the pool cannot take: duplicate id, unknown or released claim."""

    code = "claim_error"

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


class MissingExtra(PoolError):
    """A command reached a part of joulepool whose optional packages are not installed."""

    code = "missing_extra"

    def __init__(self, needed_by: str, what: str, install: str, reason: str) -> None:
        super().__init__(f"{needed_by} needs {what} ({reason}): {install}")
        self.needed_by = needed_by
        self.install = install


def utc_ms(ms: int) -> str:
    """An instant as people read it and machines parse it, ISO 8601 UTC to the millisecond
    with the integer beside it: how a time fault names both instants (DESIGN.md §3)."""
    from datetime import UTC, datetime

    try:
        text = datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms"
    return f"{text}.{ms % 1000:03d}Z ({ms} ms)"


class ClockFault(PoolError):
    """The clock cannot be trusted to date an entry (DESIGN.md §3, "Time faults are
    reported, never absorbed"): nothing is appended while it lasts.

    `code` is `clock_behind_ledger` (the clock is more than the absorbed step behind the
    last entry) or `clock_jump` (the clock is far ahead of the last entry at start, or
    stepped against the monotonic clock while running, and no operator has accepted it
    with `pool ledger accept-clock`). `clock_ms` is the clock's reading and `ledger_ms` the
    last entry's `at_ms`; the sentence names both.
    """

    code = "clock_fault"

    def __init__(self, code: str, clock_ms: int, ledger_ms: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.clock_ms = clock_ms
        self.ledger_ms = ledger_ms
