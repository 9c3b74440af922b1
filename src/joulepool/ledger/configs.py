"""Configuration statements: which configuration decided which entries (DESIGN.md §3,
"budget periods"; §4, the statements kept beside the ledger; docs/reliability.md §18).

A configuration statement is a COSE_Sign1 of the entry profile, signed by the steward key
in force where it takes effect, with the core `{pool_config: 1, steward, position,
from_length, at_ms, digest, config, applied_by}`: from ledger length `from_length` (entries
`from_length` on) and from `at_ms`, the configuration whose canonical text is `config`
(the document `config_digest` hashes: tree, period schedule, policies) was in force;
`digest` is its SHA-256; `applied_by` says who put it in force. The text is kept whole,
since the signed core carries no arrays: the tree is read back from it.

A verifier takes the statements in order: each at its position, signed by a key that may
seal at its `from_length` (`statement_keys`: the key in force there, or the one handing
over exactly there), `from_length` and `at_ms`
never going back, the digest that of the text, and the text a configuration. The first that
fails refuses the whole set (`bad_config_statement`): a history judged by a forged tree is
worse than none.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from joulepool.errors import InvalidInput, PoolError
from joulepool.ledger.cbor import CborRefused
from joulepool.ledger.cose import open_envelope, seal, verify_signature
from joulepool.ledger.entry import brief
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.rotation import MAX_SEQ, KeySchedule
from joulepool.periods import Schedule
from joulepool.tree import Entitlement, Tree

CONFIG_VERSION = 1
_FIELDS = frozenset(
    {
        "pool_config",
        "steward",
        "position",
        "from_length",
        "at_ms",
        "digest",
        "config",
        "applied_by",
    }
)
DIGEST_BYTES = 32
MAX_CONFIG_STATEMENT_BYTES = 4 << 20
"""A statement carries a whole tree: 4 MiB holds tens of thousands of entitlements."""


class ConfigStatementRefused(PoolError):
    """Configuration statement `index` (its position, from 0) was refused:
    `bad_config_statement` (DESIGN.md §4; docs/reliability.md §18)."""

    code = "bad_config_statement"

    def __init__(self, index: int, detail: str) -> None:
        super().__init__(f"configuration statement {index}: bad_config_statement ({detail})")
        self.index = index
        self.error = "bad_config_statement"
        self.detail = detail


@dataclass(frozen=True, slots=True)
class AppliedConfig:
    """What a verified statement says: from ledger length `from_length` and from `at_ms`,
    the configuration `text` (digest `digest`) was in force, put there by `applied_by`."""

    position: int
    from_length: int
    at_ms: int
    digest: bytes
    text: str
    applied_by: str
    tree: Tree
    period: Schedule

    def to_json(self) -> dict[str, Any]:
        """How a report names the configuration it used (API.md "configuration")."""
        return {
            "position": self.position,
            "digest": self.digest.hex(),
            "from_length": self.from_length,
            "since_ms": self.at_ms,
            "applied_by": self.applied_by,
        }


def config_text(doc: dict[str, Any]) -> str:
    """The canonical text of a configuration document: sorted keys, no spaces, ASCII; the
    bytes `config_digest` hashes (docs/reliability.md §8)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def seal_config(
    key: KeyPair, position: int, from_length: int, at_ms: int, text: str, applied_by: str
) -> bytes:
    """The statement putting configuration `text` in force from `from_length` and `at_ms`,
    signed by the steward key in force there (DESIGN.md §4; docs/reliability.md §18)."""
    if key.seed is None:
        raise PoolError("a configuration statement is signed by the steward: it needs the secret")
    core = {
        "pool_config": CONFIG_VERSION,
        "steward": key.kid,
        "position": position,
        "from_length": from_length,
        "at_ms": at_ms,
        "digest": hashlib.sha256(text.encode("ascii")).digest(),
        "config": text,
        "applied_by": applied_by,
    }
    return seal(core, key.kid, key.signing_key)


def statement_keys(keys: KeySchedule, from_length: int) -> list[bytes]:
    """The steward keys that may sign a statement taking effect at `from_length` (DESIGN.md
    §4): the key in force there, and a key whose span ends exactly there (the outgoing key
    of a rotation at that length, which signed the statement before handing over), as
    snapshots allow (`snapshot.sealing_keys`). A rotation before any entry retires a key
    whose span is empty, `[0, 0)`: a statement it signed at length 0 stays its own."""
    spans = keys.keys_over_time()
    out = []
    for i, (start, key) in enumerate(spans):
        end = spans[i + 1][0] if i + 1 < len(spans) else None
        # In force at from_length, or handing over exactly there (the outgoing key).
        if start <= from_length and (end is None or from_length <= end):
            out.append(key)
    return out


def _figure(core: dict[Any, Any], name: str, index: int) -> int:
    value = core[name]
    if type(value) is not int or not 0 <= value <= MAX_SEQ:
        raise ConfigStatementRefused(index, f"{name} is {brief(value)}, not a figure")
    return value


def _configuration(text: str, index: int) -> tuple[Tree, Schedule]:
    """The tree and period schedule a statement's text holds, or the refusal naming why."""
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("entitlements"), list):
            raise InvalidInput("config", "not a configuration document with entitlements")
        tree = Tree(
            Entitlement.from_json(e, f"entitlements[{i}]")
            for i, e in enumerate(doc["entitlements"])
        )
        period = Schedule.from_json(
            {k: v for k, v in doc.get("period", {"kind": "none"}).items() if v is not None}
        )
    except (ValueError, AttributeError) as exc:
        raise ConfigStatementRefused(index, f"its configuration does not read: {exc}") from None
    except PoolError as exc:
        raise ConfigStatementRefused(index, f"its configuration does not read: {exc}") from None
    return tree, period


def open_config(
    raw: bytes, keys: KeySchedule, index: int, previous: AppliedConfig | None
) -> AppliedConfig:
    """Statement `index` verified under a key that may seal at its `from_length`, after
    `previous`, or `ConfigStatementRefused` naming why (DESIGN.md §4). Every byte is
    hostile: nothing from a statement that fails is kept."""
    steward = keys.steward
    if len(raw) > MAX_CONFIG_STATEMENT_BYTES:
        raise ConfigStatementRefused(index, "larger than any configuration statement")
    try:
        env = open_envelope(raw)
    except CborRefused as exc:
        raise ConfigStatementRefused(
            index, f"not a configuration statement: {exc.error}: {exc.detail}"
        ) from None
    if env.kid != steward:
        raise ConfigStatementRefused(
            index, f"signed as {brief(env.kid)}, not the steward {steward!r}"
        )
    core = env.core
    if set(core) != _FIELDS:
        raise ConfigStatementRefused(
            index, f"its core has the keys {sorted(map(str, core))}, not {sorted(_FIELDS)}"
        )
    from_length = _figure(core, "from_length", index)
    if not any(verify_signature(env, k) for k in statement_keys(keys, from_length)):
        raise ConfigStatementRefused(
            index, f"its signature does not verify under the steward's key at {from_length}"
        )
    if type(core["pool_config"]) is not int or core["pool_config"] != CONFIG_VERSION:
        raise ConfigStatementRefused(index, f"pool_config is {brief(core['pool_config'])}, not 1")
    if core["steward"] != steward:
        raise ConfigStatementRefused(index, f"it names the steward {brief(core['steward'])}")
    position, at_ms = _figure(core, "position", index), _figure(core, "at_ms", index)
    if position != index:
        raise ConfigStatementRefused(index, f"it says it is statement {position}")
    digest, text, who = core["digest"], core["config"], core["applied_by"]
    if type(digest) is not bytes or len(digest) != DIGEST_BYTES:
        raise ConfigStatementRefused(index, "digest is not a 32-byte SHA-256")
    if type(text) is not str or not text.isascii():
        raise ConfigStatementRefused(index, "config is not the canonical (ASCII) text")
    if type(who) is not str or not who:
        raise ConfigStatementRefused(index, "applied_by is not a non-empty string")
    if hashlib.sha256(text.encode("ascii")).digest() != digest:
        raise ConfigStatementRefused(index, "digest is not the SHA-256 of its configuration")
    if previous is not None and (from_length < previous.from_length or at_ms < previous.at_ms):
        raise ConfigStatementRefused(
            index,
            f"it goes back: from length {from_length} at {at_ms} ms, after statement "
            f"{previous.position} from length {previous.from_length} at {previous.at_ms} ms",
        )
    tree, period = _configuration(text, index)
    return AppliedConfig(position, from_length, at_ms, digest, text, who, tree, period)


class ConfigHistory:
    """Every configuration put in force, oldest first, each verified (DESIGN.md §3, §4):
    what judges a past period."""

    __slots__ = ("_names", "_starts", "applied", "keys", "statements")

    def __init__(self, keys: KeySchedule) -> None:
        self.keys = keys
        self.applied: list[AppliedConfig] = []
        self.statements: list[bytes] = []
        self._starts: list[int] = []
        self._names: tuple[Tree, Schedule, int, bool] | None = None

    def last_names(self, tree: Tree, period: Schedule) -> bool:
        """Whether the last statement records `tree` and `period` (the ones in force): asked
        by every read, so the answer is kept until either or the last statement changes."""
        last = self.last
        if last is None:
            return False
        seen = self._names
        if seen is not None and seen[0] is tree and seen[1] == period and seen[2] == last.position:
            return seen[3]
        same = last.period == period and list(last.tree) == list(tree)
        self._names = (tree, period, last.position, same)
        return same

    @classmethod
    def verified(cls, keys: KeySchedule, statements: Sequence[bytes]) -> ConfigHistory:
        """The history the statements set, each verified in order, or
        `ConfigStatementRefused` at the first that fails (DESIGN.md §4)."""
        history = cls(keys)
        for raw in statements:
            history.add(raw)
        return history

    def add(self, raw: bytes) -> AppliedConfig:
        """Verify one more statement after those already taken and keep it."""
        previous = self.applied[-1] if self.applied else None
        applied = open_config(raw, self.keys, len(self.statements), previous)
        self.applied.append(applied)
        self.statements.append(raw)
        self._starts.append(applied.at_ms)
        return applied

    @property
    def last(self) -> AppliedConfig | None:
        """The configuration put in force last, or None before any statement."""
        return self.applied[-1] if self.applied else None

    def in_force_before(self, end_ms: int | None) -> AppliedConfig | None:
        """The configuration in force at a period's end (`end_ms`, exclusive): the last one
        applied before it; the last of all for a period without end. None when every
        statement is later: the period ended before any configuration was recorded."""
        if not self.applied:
            return None
        if end_ms is None:
            return self.applied[-1]
        i = bisect.bisect_left(self._starts, end_ms)
        return self.applied[i - 1] if i else None
