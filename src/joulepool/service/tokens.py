"""Bearer tokens for `pool serve`: stored as SHA-256 hashes, compared in constant time (API.md).

`DIR/tokens.toml` lists `[[token]]` tables of `name`, `sha256` and `scope` (and optionally
`created` and `expires`, TOML offset date-times; a token past `expires` is refused as if
unknown), where a scope is
`operator`, `metrics` (reads `/metrics` and nothing else; API.md, Additions) or
`tenant:<entitlement id>`. The token itself is printed once and never stored.

The file is a trust boundary: it is refused as a whole, naming the file and the
line of the offending `[[token]]` table, when other users may read or change it, when a
token or a name is listed twice, or when a scope is anything but exactly one of those three,
with an entitlement that is in the tree being served.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import hmac
import os
import re
import secrets
import stat
import time
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import tomli_w

from joulepool.errors import InvalidInput, InvalidTokens
from joulepool.files import write_atomically
from joulepool.tree import Tree

OPERATOR = "operator"
METRICS = "metrics"
TENANT_PREFIX = "tenant:"
_FIELDS = frozenset({"name", "sha256", "scope"})
_OPTIONAL = frozenset({"created", "expires"})
_HEX = frozenset("0123456789abcdef")
_SCOPES = "a scope is exactly 'operator', 'metrics' or 'tenant:<entitlement id>'"
# A `[[token]]` header alone on its line (TOML allows blanks inside the brackets, a quoted
# key and a comment after it). Lines end in LF or CRLF, as tomllib counts them.
_HEADER = re.compile(
    r"""[ \t]*\[\[[ \t]*(?:token|"token"|'token')[ \t]*\]\][ \t]*(?:#[^\r]*)?\r?"""
)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: an operator, a metrics scraper, or a tenant confined to one subtree."""

    name: str
    scope: str

    @property
    def operator(self) -> bool:
        """Operators may do everything (API.md, Tokens)."""
        return self.scope == OPERATOR

    @property
    def metrics_only(self) -> bool:
        """A `metrics` token reads `/metrics`, all of it, and nothing else (API.md, Additions)."""
        return self.scope == METRICS

    @property
    def tenant(self) -> str | None:
        """The entitlement at the root of a tenant's subtree; None for any other scope."""
        if not self.scope.startswith(TENANT_PREFIX):
            return None
        return self.scope[len(TENANT_PREFIX) :]

    def may_act_on(self, tree: Tree, entitlement: str) -> bool:
        """Whether `entitlement` is in this principal's subtree (an operator's is everything,
        a metrics token's nothing) (API.md, Tokens)."""
        if self.operator:
            return True
        tenant = self.tenant
        return tenant is not None and entitlement in tree and tree.is_within(entitlement, tenant)


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One configured token: its name, the hex SHA-256 of the token, its scope, and when it
    was made and stops working (None: not recorded, and never)."""

    name: str
    sha256: str
    scope: str
    expires: datetime | None = None
    created: datetime | None = dataclasses.field(default=None, compare=False)

    def expired(self, now: datetime | None = None) -> bool:
        """Whether the token has stopped working (`--expires`)."""
        return self.expires is not None and (now or datetime.now(UTC)) >= self.expires


def _stray(text: str) -> bool:
    """Whether `text` has blanks at either end, or a control, format or separator character."""
    return text != text.strip() or not text.isprintable()


def scope_problem(scope: str, tree: Tree) -> str | None:
    """Why `scope` is no scope over `tree` (API.md, Tokens), or None when it is one.

    Only `operator`, `metrics` and `tenant:<id>` with `<id>` in `tree` are scopes, exactly:
    no case folding, no blanks, no control characters.
    """
    if scope in (OPERATOR, METRICS):
        return None
    tenant = scope[len(TENANT_PREFIX) :] if scope.startswith(TENANT_PREFIX) else None
    if tenant is not None and tenant in tree:
        return None
    if _stray(scope) or (tenant is not None and _stray(tenant)):
        cleaned = "".join(c for c in scope if c.isprintable() and not c.isspace())
        hint = f"; did you mean {cleaned!r}?" if scope_problem(cleaned, tree) is None else ""
        return f"{scope!r} has stray characters (blanks or control characters): {_SCOPES}{hint}"
    if tenant is None:
        return f"{scope!r} is not a scope: {_SCOPES}"
    if not tenant:
        return f"{scope!r} names no entitlement: {_SCOPES}"
    close = difflib.get_close_matches(tenant, [e.id for e in tree], n=1)
    hint = f"; did you mean 'tenant:{close[0]}'?" if close else ""
    return f"{scope!r} names entitlement {tenant!r}, which is not in the tree{hint}"


def check_scope(scope: str, tree: Tree) -> str:
    """Refuse a scope that is not exactly `operator`, `metrics` or `tenant:<id in tree>`
    (API.md, Tokens and Additions)."""
    problem = scope_problem(scope, tree)
    if problem is not None:
        raise InvalidInput("scope", problem)
    return scope


def _read_private(path: Path) -> str | None:
    """The text of `path`, refused when group or others may read or write it; None if absent."""
    where = str(path)
    try:
        # O_NONBLOCK: a FIFO put at this name is refused below instead of hanging the start.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidTokens(where, None, f"cannot read: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidTokens(where, None, "not a regular file")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise InvalidTokens(
                where,
                None,
                f"mode {mode:04o} lets group or others read or change the tokens; "
                f"run `chmod 600 {path}`",
            )
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    except OSError as exc:
        raise InvalidTokens(where, None, f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidTokens(where, None, f"not UTF-8: {exc.reason} at byte {exc.start}") from None


def _table_lines(text: str, count: int) -> list[int] | None:
    """The 1-based line of each of the `count` `[[token]]` headers, in order; None where the
    tables were not all written as `[[token]]` headers (an inline array of tables)."""
    lines = text.split("\n")
    found = [i for i, line in enumerate(lines) if _HEADER.fullmatch(line)]
    if '"""' in text or "'''" in text:
        # A header-like line may be inside a multi-line string: the text before a real
        # header is a whole TOML document, the text before a line inside a string never is.
        found = [i for i in found if _parses("\n".join(lines[:i]))]
    return [i + 1 for i in found] if len(found) == count else None


def _parses(text: str) -> bool:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return True


def _entry(table: object, tree: Tree | None, file: str, line: int) -> TokenEntry:
    """One `[[token]]` table, checked (API.md, Tokens)."""
    if not isinstance(table, dict) or not _FIELDS <= set(table) <= _FIELDS | _OPTIONAL:
        keys = sorted(map(str, table)) if isinstance(table, dict) else []
        extra = [k for k in keys if k not in _FIELDS | _OPTIONAL]
        missing = sorted(_FIELDS - set(keys))
        said = f"unknown key {extra[0]!r}" if extra else f"missing {missing[0]!r}"
        raise InvalidTokens(
            file,
            line,
            f"{said}: a token has exactly name, sha256 and scope (and may have created, expires)",
        )
    when = {k: _instant(table[k], k, file, line) for k in _OPTIONAL if k in table}
    name, digest, scope = table["name"], table["sha256"], table["scope"]
    for field, value in (("name", name), ("sha256", digest), ("scope", scope)):
        if type(value) is not str or not value:
            raise InvalidTokens(file, line, f"{field} must be a non-empty string")
    if _stray(name):
        raise InvalidTokens(
            file, line, f"name {name!r} has stray characters (blanks or control characters)"
        )
    if len(digest) != 64 or not set(digest) <= _HEX:
        raise InvalidTokens(file, line, "sha256 must be 64 lowercase hex digits")
    if tree is None:
        # No tree to check against (a revoke beside a broken pool.toml): the shape only.
        tenant = scope[len(TENANT_PREFIX) :] if scope.startswith(TENANT_PREFIX) else None
        if scope not in (OPERATOR, METRICS) and (not tenant or _stray(tenant)):
            raise InvalidTokens(file, line, f"scope {scope!r} is not a scope: {_SCOPES}")
    elif (problem := scope_problem(scope, tree)) is not None:
        raise InvalidTokens(file, line, f"scope {problem}")
    return TokenEntry(name, digest, scope, when.get("expires"), when.get("created"))


def _instant(value: object, key: str, file: str, line: int) -> datetime:
    """A `created` or `expires` value: a TOML offset date-time (an instant, not a wall time)."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidTokens(
            file, line, f"{key} must be a date-time with its offset, such as 2027-01-01T00:00:00Z"
        )
    return value.astimezone(UTC)


UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def parse_expiry(text: str, now: datetime | None = None) -> datetime:
    """`--expires`: a duration from now (`90d`, `12h`, `30m`) or an instant (`2027-01-01`,
    `2027-01-01T12:00:00Z`; a date alone is its midnight UTC)."""
    now = now or datetime.now(UTC)
    match = re.fullmatch(r"([0-9]{1,6})([dhm])", text.strip())
    if match:
        amount, unit = int(match[1]), match[2]
        if amount == 0:
            raise InvalidInput("--expires", f"{text!r}: a token that expires at once is no token")
        span = timedelta(**{UNITS[unit]: amount})
        return (now + span).replace(microsecond=0)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(
            "--expires", f"{text!r}: give a duration (90d, 12h, 30m) or a date (2027-01-01)"
        ) from None
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    when = when.replace(microsecond=0)
    if when <= now:
        raise InvalidInput("--expires", f"{text!r} is in the past")
    return when


def _write_tokens(path: Path, entries: list[TokenEntry]) -> None:
    """Write `entries` to `path` atomically, mode 0600 (API.md, Tokens)."""
    tables = []
    for e in entries:
        table: dict[str, object] = {"name": e.name, "sha256": e.sha256, "scope": e.scope}
        if e.created is not None:
            table["created"] = e.created
        if e.expires is not None:
            table["expires"] = e.expires
        tables.append(table)
    header = "# Bearer tokens for `pool serve`: only their SHA-256 is stored (API.md).\n"
    text = header + tomli_w.dumps({"token": tables})
    try:
        write_atomically(path, text.encode("utf-8"), 0o600)
    except OSError as exc:
        raise InvalidTokens(str(path), None, f"cannot write: {exc.strerror}") from None


def revoke_token(path: Path, name: str, tree: Tree | None) -> TokenEntry:
    """Remove the token named `name` (`pool token revoke DIR NAME`); a running service
    stops taking it within a second (docs/reliability.md §15). Refused, naming the closest
    names, when no token has that name. With no `tree` (pool.toml cannot be read), the
    scopes are checked for their shape only: a broken pool.toml never holds a revoke back."""
    entries = read_tokens(path, tree)
    found = [e for e in entries if e.name == name]
    if not found:
        close = difflib.get_close_matches(name, [e.name for e in entries], n=3)
        hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
        raise InvalidInput("NAME", f"no token named {name!r} in {path}{hint}")
    _write_tokens(path, [e for e in entries if e.name != name])
    return found[0]


def read_tokens(path: Path, tree: Tree | None) -> list[TokenEntry]:
    """Read `tokens.toml` and check it against `tree`, the tree being served (API.md, Tokens);
    with None, each scope's shape only (`revoke_token`).

    A missing file is no tokens (every request is then 401). Anything else wrong refuses
    the file as a whole (`InvalidTokens`, naming the file and the line of the `[[token]]`
    table at fault): a mode that lets group or others in, a sha256 or a name listed twice
    (whatever the scopes), a scope that is not exactly `operator`, `metrics` or
    `tenant:<id>` with `<id>` in `tree`.
    """
    where = str(path)
    text = _read_private(path)
    if text is None:
        return []
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidTokens(where, None, f"not valid TOML: {exc}") from None
    extra = sorted(set(doc) - {"token"})
    if extra:
        raise InvalidTokens(where, None, f"{extra[0]!r}: only [[token]] tables belong here")
    tables = doc.get("token", [])
    lines = _table_lines(text, len(tables)) if isinstance(tables, list) else None
    if lines is None:
        raise InvalidTokens(where, None, "write each token as a [[token]] table of its own")
    entries: list[TokenEntry] = []
    digests: dict[str, int] = {}
    names: dict[str, int] = {}
    for table, line in zip(tables, lines, strict=True):
        entry = _entry(table, tree, where, line)
        if entry.sha256 in digests:
            raise InvalidTokens(
                where,
                line,
                f"this sha256 is listed already at line {digests[entry.sha256]}: a token has "
                "one entry and one scope; remove one of them",
            )
        if entry.name in names:
            raise InvalidTokens(
                where, line, f"the name {entry.name!r} is taken already at line {names[entry.name]}"
            )
        digests[entry.sha256] = names[entry.name] = line
        entries.append(entry)
    return entries


def add_token(
    path: Path, name: str, scope: str, tree: Tree, expires: datetime | None = None
) -> str:
    """Create a random token, store its hash under `name`, and return it (shown once)
    (API.md, Tokens: `pool token add DIR --scope ...`).

    The file is written with mode 0600; an existing one that group or others may read, or
    that is refused for any other reason, is refused here too and left as it is.
    """
    if type(name) is not str or not name or _stray(name):
        raise InvalidInput(
            "name", "must be non-empty, with no blanks at either end and no control characters"
        )
    check_scope(scope, tree)
    entries = read_tokens(path, tree)
    if any(e.name == name for e in entries):
        raise InvalidInput("name", f"a token named {name!r} exists already")
    token = "jp_" + secrets.token_urlsafe(32)
    created = datetime.now(UTC).replace(microsecond=0)
    digest = hashlib.sha256(token.encode()).hexdigest()
    entries.append(TokenEntry(name, digest, scope, expires, created))
    _write_tokens(path, entries)
    return token


class TokenBook:
    """The configured tokens, looked up in constant time per entry (API.md, Tokens)."""

    def __init__(self, entries: list[TokenEntry]) -> None:
        self._entries = [
            (bytes.fromhex(e.sha256), Principal(e.name, e.scope), _epoch_ms(e.expires))
            for e in entries
        ]

    def __len__(self) -> int:
        return len(self._entries)

    def scopes(self) -> list[tuple[str, str]]:
        """Each token's name and scope, in the file's order, never a hash (API.md, Tokens):
        what a new tree is checked against (docs/reliability.md §15)."""
        return [(p.name, p.scope) for _, p, _ in self._entries]

    def principal(self, token: str, at_ms: int | None = None) -> Principal | None:
        """The principal a bearer token names, or None for an unknown one or one expired at
        `at_ms` (milliseconds since the epoch; the wall clock by default). `pool serve`
        passes the wall clock raised to the ledger's last entry (docs/reliability.md §15),
        so a clock set back never makes an expired token work again."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: Principal | None = None
        expiry: int | None = None
        # Every entry is compared, whatever matches, so timing says nothing about which.
        for stored, principal, expires in self._entries:
            if hmac.compare_digest(stored, digest):
                found, expiry = principal, expires
        now = time.time_ns() // 1_000_000 if at_ms is None else at_ms
        if expiry is not None and now >= expiry:
            return None  # past its `expires`: answered exactly like an unknown token
        return found

    def expiries(self) -> list[tuple[str, str, int]]:
        """(name, scope, expiry in ms since the epoch) of every token that expires, for
        `pool_token_expiry_timestamp_seconds` (docs/operations.md): never the digest."""
        return [(p.name, p.scope, when) for _, p, when in self._entries if when is not None]


def _epoch_ms(when: datetime | None) -> int | None:
    """`when` in whole milliseconds since the Unix epoch (DESIGN.md §2: no float), or None."""
    if when is None:
        return None
    return (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
