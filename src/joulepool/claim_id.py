"""Which claim ids a deployment accepts, and whose they are (API.md "Additions").

pool/1 only asks that a claim id be a non-empty string the ledger admits once (§2.4, §6.4).
A service in front of many teams needs more: an id every surface can carry (a URL path, a
command line, a terminal) and one no team can use to learn about or block another's.

- **The alphabet.** A claim id is 1 to 256 bytes of UTF-8, printable (no control, format
  or bidi character, no separator but the ASCII space) and without `/`. `pool exec` keeps
  the standard's looser rule: it decides, it does not admit.
- **Namespaces.** A claim a tenant token submits is recorded under `<root>/<id>`, where
  `<root>` is the entitlement at the top of the token's subtree. No submitted id holds a
  `/`, so a namespaced id can only be made by the service for that subtree: another
  tenant's `x` is `other/x` in the ledger, and a tenant's own `x` is `mine/x`. Each id is
  still admitted at most once (§6.4), and an id held outside a tenant's subtree is, for
  that tenant, exactly a free id. Operators and the Slurm bridge submit plain ids, and
  may name a namespaced one to act on a tenant's claim.
"""

from __future__ import annotations

from joulepool.errors import InvalidInput
from joulepool.tree import Tree

MAX_CLAIM_ID_BYTES = 256
"""The longest claim id a client may submit, in bytes of UTF-8."""

NAMESPACE_SEPARATOR = "/"
"""Between a tenant's root entitlement and its own id; never inside a submitted id."""


def check_claim_id(value: object, field: str = "id") -> str:
    """Refuse a claim id outside the documented alphabet, naming the rule (API.md).

    The message never repeats the id: a hostile one may be a megabyte of escapes.
    """
    if type(value) is not str or not value:
        raise InvalidInput(field, "a claim id must be a non-empty string")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput(field, "a claim id must be valid UTF-8") from None
    if size > MAX_CLAIM_ID_BYTES:
        raise InvalidInput(
            field, f"a claim id is at most {MAX_CLAIM_ID_BYTES} bytes of UTF-8, not {size}"
        )
    if NAMESPACE_SEPARATOR in value:
        raise InvalidInput(field, "a claim id must not contain '/'")
    if not value.isprintable():
        bad = next(c for c in value if not c.isprintable())
        raise InvalidInput(
            field,
            f"a claim id must be printable: U+{ord(bad):04X} at character "
            f"{value.index(bad)} is a control, format, bidi or separator character",
        )
    return value


def namespaced(root: str, claim_id: str) -> str:
    """The ledger's id for a tenant's claim `claim_id`, the tenant's subtree at `root`."""
    return f"{root}{NAMESPACE_SEPARATOR}{claim_id}"


def check_admitted_id(claim_id: str, entitlement: str, tree: Tree, field: str = "id") -> str:
    """Refuse an id a deployment must not admit (API.md "Additions").

    Either a plain id in the alphabet, or `<root>/<id>` where `<root>` is an entitlement
    of the tree, the claim's entitlement lies in its subtree, and `<id>` is plain.
    """
    root, sep, own = claim_id.rpartition(NAMESPACE_SEPARATOR)
    if not sep:
        return check_claim_id(claim_id, field)
    check_claim_id(own, field)
    if root not in tree:
        raise InvalidInput(
            field,
            "a claim id has no '/' but in a tenant's namespaced id <entitlement>/<id>, and "
            "the namespace before its last '/' is no entitlement of the tree",
        )
    if entitlement in tree and not tree.is_within(entitlement, root):
        raise InvalidInput(
            field, "a claim in a tenant's namespace must name an entitlement in its subtree"
        )
    return claim_id


def lookup_ids(root: str | None, claim_id: str) -> tuple[str, ...]:
    """The ledger ids a request for `claim_id` may mean, in order, for a token at `root`.

    An operator (root None) names ledger ids as they are. A tenant's plain id is first its
    own namespace's, then a plain id an operator or the Slurm bridge admitted for it; a
    tenant may also name a namespaced id in full. The caller shows the first that exists
    and lies in the token's subtree, and answers every other case as a claim that is not.
    """
    if root is None or NAMESPACE_SEPARATOR in claim_id:
        return (claim_id,)
    return (namespaced(root, claim_id), claim_id)


def shown_id(root: str | None, ledger_id: str) -> str:
    """The id a token sees for a ledger id: a tenant sees its own claims by their plain id."""
    if root is not None:
        prefix = root + NAMESPACE_SEPARATOR
        if ledger_id.startswith(prefix) and NAMESPACE_SEPARATOR not in ledger_id[len(prefix) :]:
            return ledger_id[len(prefix) :]
    return ledger_id


def printable(text: str) -> str:
    """`text` safe for a terminal: each unprintable character as its escape.

    A ledger written before these rules, or by another implementation, may hold ids with
    terminal escapes, NUL or U+202E; an operator's terminal must show them, not obey them.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"
