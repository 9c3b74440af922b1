"""Bearer tokens for `pool serve`: stored as SHA-256 hashes, compared in constant time (API.md).

`DIR/tokens.toml` lists `[[token]]` tables of `name`, `sha256` and `scope`, where a scope is
`operator` or `tenant:<entitlement id>`. The token itself is printed once and never stored.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import tomllib
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from joulepool.checks import check_text
from joulepool.errors import InvalidInput
from joulepool.files import write_atomically
from joulepool.tree import Tree

OPERATOR = "operator"
TENANT_PREFIX = "tenant:"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as: an operator, or a tenant confined to one subtree."""

    name: str
    scope: str

    @property
    def operator(self) -> bool:
        """Operators may do everything (API.md)."""
        return self.scope == OPERATOR

    @property
    def tenant(self) -> str | None:
        """The entitlement at the root of a tenant's subtree; None for an operator."""
        return None if self.operator else self.scope[len(TENANT_PREFIX) :]

    def may_act_on(self, tree: Tree, entitlement: str) -> bool:
        """Whether `entitlement` is in this principal's subtree (an operator's is everything)."""
        if self.operator:
            return True
        assert self.tenant is not None
        return entitlement in tree and tree.is_within(entitlement, self.tenant)


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One configured token: its name, the hex SHA-256 of the token, its scope."""

    name: str
    sha256: str
    scope: str


def check_scope(scope: str) -> str:
    """Refuse a scope that is neither `operator` nor `tenant:<id>`."""
    if scope == OPERATOR or (scope.startswith(TENANT_PREFIX) and len(scope) > len(TENANT_PREFIX)):
        return scope
    raise InvalidInput("scope", f"{scope!r} is neither 'operator' nor 'tenant:<entitlement id>'")


def read_tokens(path: Path) -> list[TokenEntry]:
    """Read `tokens.toml`; a missing file is no tokens (every request is then 401)."""
    if not path.exists():
        return []
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(str(path), f"not valid TOML: {exc}") from None
    if set(doc) - {"token"}:
        raise InvalidInput(str(path), "only [[token]] tables belong here")
    entries = []
    for i, t in enumerate(doc.get("token", [])):
        where = f"{path}: token[{i}]"
        if not isinstance(t, dict) or set(t) != {"name", "sha256", "scope"}:
            raise InvalidInput(where, "a token has exactly name, sha256 and scope")
        digest = check_text(t["sha256"], f"{where}.sha256")
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise InvalidInput(f"{where}.sha256", "must be 64 lowercase hex digits")
        entries.append(
            TokenEntry(check_text(t["name"], f"{where}.name"), digest, check_scope(t["scope"]))
        )
    return entries


def add_token(path: Path, name: str, scope: str) -> str:
    """Create a random token, store its hash under `name`, and return it (shown once)."""
    check_text(name, "name")
    check_scope(scope)
    entries = read_tokens(path)
    if any(e.name == name for e in entries):
        raise InvalidInput("name", f"a token named {name!r} exists already")
    token = "jp_" + secrets.token_urlsafe(32)
    entries.append(TokenEntry(name, hashlib.sha256(token.encode()).hexdigest(), scope))
    text = tomli_w.dumps(
        {"token": [{"name": e.name, "sha256": e.sha256, "scope": e.scope} for e in entries]}
    )
    header = "# Bearer tokens for `pool serve`: only their SHA-256 is stored (API.md).\n"
    write_atomically(path, (header + text).encode("utf-8"), 0o600)
    return token


class TokenBook:
    """The configured tokens, looked up in constant time per entry (API.md)."""

    def __init__(self, entries: list[TokenEntry]) -> None:
        self._entries = [(bytes.fromhex(e.sha256), Principal(e.name, e.scope)) for e in entries]

    def principal(self, token: str) -> Principal | None:
        """The principal a bearer token names, or None for an unknown one."""
        digest = hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
        found: Principal | None = None
        # Every entry is compared, whatever matches, so timing says nothing about which.
        for stored, principal in self._entries:
            if hmac.compare_digest(stored, digest):
                found = principal
        return found
