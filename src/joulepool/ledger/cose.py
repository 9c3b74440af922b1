"""COSE_Sign1 exactly as pool/1 JCR-1 lays it out (RFC 9052 §4.2, DESIGN.md §4).

    envelope  = tag 18 [ protected: bstr .cbor {1: -8, 4: kid}, unprotected: {},
                         payload: bstr .cbor core, signature: bstr .size 64 ]
    signature = Ed25519 over det-CBOR ["Signature1", protected, h'', payload]

The envelope has one fixed shape, so its bytes are built and checked directly rather than
through a general encoder: what arrives must be byte for byte what this module would
write for the same parts (§6.6). The core inside is checked by the det-CBOR decoder.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

import cbor2
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey

from joulepool.ledger.cbor import (
    MALFORMED,
    NON_CANONICAL,
    CborRefused,
    decode_map_pairs,
    decode_strict,
    decode_wellformed,
    encode,
)
from joulepool.ledger.signing import sign_detached

COSE_SIGN1_TAG: Final = 18
ALG_EDDSA: Final = -8
HEADER_ALG: Final = 1
HEADER_KID: Final = 4
SIGNATURE_BYTES: Final = 64
PUBLIC_KEY_BYTES: Final = 32
GENESIS: Final = bytes(32)
"""The `prev` of entry 0 and the head of an empty ledger (DESIGN.md §4)."""

_SIG_CONTEXT: Final = b"\x84\x6aSignature1"  # array(4), text(10) "Signature1"
_ENVELOPE_START: Final = b"\xd2\x84"  # tag 18, array(4)
_EMPTY_MAP: Final = b"\xa0"
_EMPTY_BSTR: Final = b"\x40"
_SIG_HEADER: Final = b"\x58\x40"  # bstr of 64 bytes

# Envelope openings (tag, array, protected header, empty map) already found canonical, with
# their protected header and kid: every entry of a ledger opens the same way.
_known_openings: dict[bytes, tuple[bytes, str]] = {}


def bstr_header(length: int) -> bytes:
    """The shortest CBOR byte-string header for `length` bytes (RFC 8949 §4.2.1)."""
    if length < 0x100:
        return _SHORT_HEADERS[length]
    if length < 0x10000:
        return b"\x59" + length.to_bytes(2, "big")
    if length < 0x100000000:
        return b"\x5a" + length.to_bytes(4, "big")
    return b"\x5b" + length.to_bytes(8, "big")


_SHORT_HEADERS: Final = tuple(
    bytes((0x40 | n,)) if n < 24 else bytes((0x58, n)) for n in range(0x100)
)


_protected: dict[str, bytes] = {}


def protected_header(kid: str) -> bytes:
    """det-CBOR `{1: -8, 4: kid}`: alg EdDSA and the signer's identifier (DESIGN.md §4)."""
    header = _protected.get(kid)
    if header is None:
        header = encode({HEADER_ALG: ALG_EDDSA, HEADER_KID: kid.encode("utf-8")})
        if len(_protected) < 256:
            _protected[kid] = header
    return header


_sig_prefixes: dict[bytes, bytes] = {}


def _sig_prefix(protected: bytes) -> bytes:
    """The Sig_structure up to the payload's header: the same for every entry of a ledger."""
    prefix = _sig_prefixes.get(protected)
    if prefix is None:
        prefix = _SIG_CONTEXT + bstr_header(len(protected)) + protected + _EMPTY_BSTR
        if len(_sig_prefixes) < 256:
            _sig_prefixes[protected] = prefix
    return prefix


def sig_structure(protected: bytes, payload: bytes) -> bytes:
    """det-CBOR `["Signature1", protected, h'', payload]`, the bytes signed (RFC 9052 §4.4)."""
    return _sig_prefix(protected) + bstr_header(len(payload)) + payload


def envelope_bytes(protected: bytes, payload: bytes, signature: bytes) -> bytes:
    """The det-CBOR COSE_Sign1 of these parts, with an empty unprotected map (DESIGN.md §4)."""
    return (
        _ENVELOPE_START
        + bstr_header(len(protected))
        + protected
        + _EMPTY_MAP
        + bstr_header(len(payload))
        + payload
        + _SIG_HEADER
        + signature
    )


def seal(core: Mapping[str, object], kid: str, signing_key: SigningKey) -> bytes:
    """Seal `core` as a COSE_Sign1 signed by `signing_key` under `kid` (§6.5)."""
    protected = protected_header(kid)
    payload = encode(core)
    signature = sign_detached(signing_key, sig_structure(protected, payload))
    return envelope_bytes(protected, payload, signature)


def content_address(raw: bytes) -> bytes:
    """SHA-256 of an entry's complete envelope bytes (DESIGN.md §4)."""
    return hashlib.sha256(raw).digest()


class Envelope(NamedTuple):
    """An opened COSE_Sign1: its parts and its decoded core; the signature not yet checked.

    A named tuple rather than a frozen dataclass: replay opens one per entry, and building
    a frozen dataclass of these six fields took 0.66 µs against the tuple's 0.23 µs here.
    """

    raw: bytes
    protected: bytes
    kid: str
    payload: bytes
    signature: bytes
    core: dict[str, Any]


def _kid_of(protected: bytes) -> tuple[str, bool]:
    """The kid of a protected header and whether the header is canonical; malformed raises.

    The header must be exactly `{1: -8, 4: kid}` with integer keys (DESIGN.md §3, §4): a
    `true` or `1.0` key is not 1, and a third parameter or another algorithm is refused.
    A key written twice with the same value is a repeated key, so not canonical.
    """
    try:
        pairs = decode_map_pairs(protected)
    except CborRefused:
        raise CborRefused(MALFORMED, "the protected header is not a CBOR item") from None
    shape = CborRefused(MALFORMED, "the protected header is not {1: -8 (EdDSA), 4: kid}")
    if pairs is None or any(type(k) is not int for k, _ in pairs):
        raise shape
    if {k for k, _ in pairs} != {HEADER_ALG, HEADER_KID}:
        raise shape
    algs = [v for k, v in pairs if k == HEADER_ALG]
    kids = [v for k, v in pairs if k == HEADER_KID]
    if any(type(a) is not int or a != ALG_EDDSA for a in algs):
        raise shape
    if any(type(v) is not bytes for v in kids) or len(set(kids)) != 1:
        raise shape
    kid_bytes = kids[0]
    assert isinstance(kid_bytes, bytes)
    try:
        kid = kid_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise CborRefused(MALFORMED, "the kid is not UTF-8") from None
    return kid, protected == protected_header(kid)


def _payload_at(raw: bytes, pos: int) -> tuple[int, int] | None:
    """Start and end of the byte string at `pos` if its header is in shortest form."""
    head = raw[pos]
    if 0x40 <= head < 0x58:
        start = pos + 1
        return start, start + head - 0x40
    if head == 0x58:
        length = raw[pos + 1]
        return (pos + 2, pos + 2 + length) if length >= 24 else None
    if head == 0x59:
        length = raw[pos + 1] << 8 | raw[pos + 2]
        return (pos + 3, pos + 3 + length) if length >= 0x100 else None
    return None  # longer payloads never occur in an entry; the thorough path names them


def _canonical_parts(raw: bytes) -> tuple[bytes, str, bytes, bytes] | None:
    """Protected header, kid, payload and signature of an envelope already in det-CBOR form.

    The common case, read straight off the bytes: the envelope opens exactly as one already
    found canonical, and the payload's header is in shortest form, so success means the
    envelope re-encodes to itself. None sends the envelope down the thorough path.
    """
    try:
        head = raw[2]
        if head < 0x58:
            cut = head - 0x3C  # tag, array, 1-byte header, header, empty map
        elif head == 0x58:
            cut = raw[3] + 5
        else:
            return None
        known = _known_openings.get(raw[:cut])
        if known is None:
            return None
        span = _payload_at(raw, cut)
    except IndexError:
        return None
    if span is None:
        return None
    start, end = span
    if raw[end : end + 2] != _SIG_HEADER or end + 2 + SIGNATURE_BYTES != len(raw):
        return None
    return known[0], known[1], raw[start:end], raw[end + 2 :]


def open_envelope(raw: bytes) -> Envelope:
    """Decode a COSE_Sign1 and check it is canonical, in DESIGN.md §4's order (§6.5, §6.6).

    Raises `CborRefused("malformed")` where the bytes are not a pool/1 COSE_Sign1 whose
    payload is a CBOR map, then `CborRefused("non_canonical")` where the envelope or the
    core does not re-encode to the bytes it came as.
    """
    parts = _canonical_parts(raw)
    if parts is not None:
        # The common case: an envelope in det-CBOR form around a det-CBOR map. Anything
        # else is read again by the thorough path, which names the refusal in §4's order.
        protected, kid, payload, signature = parts
        try:
            core = decode_strict(payload)
        except CborRefused:
            return _open_thoroughly(raw)
        if type(core) is dict:
            # tuple.__new__ skips the named tuple's Python-level constructor: half the cost.
            return _new_tuple(Envelope, (raw, protected, kid, payload, signature, core))
    return _open_thoroughly(raw)


_new_tuple = tuple.__new__


def _open_thoroughly(raw: bytes) -> Envelope:
    """The reference path: decodes everything, and names the first refusal exactly."""
    # Tags stay bare: a tag-55799 (self-described CBOR) wrapper is not tag 18, and must not
    # be peeled off before the tag is checked (DESIGN.md §3, "Edge cases, pinned").
    item = decode_wellformed(raw)  # raises CborRefused("malformed"), naming why
    if not isinstance(item, cbor2.CBORTag) or item.tag != COSE_SIGN1_TAG:
        raise CborRefused(MALFORMED, "not a COSE_Sign1 (tag 18)")
    parts = item.value
    # cbor2 decodes a tag's content immutably: the array as a tuple, a map as a frozendict.
    if not isinstance(parts, list | tuple) or len(parts) != 4:
        raise CborRefused(MALFORMED, "a COSE_Sign1 is an array of four")
    protected, unprotected, payload, signature = parts
    if not (
        isinstance(protected, bytes) and isinstance(payload, bytes) and isinstance(signature, bytes)
    ):
        raise CborRefused(MALFORMED, "protected, payload and signature must be byte strings")
    if not isinstance(unprotected, Mapping) or unprotected:
        raise CborRefused(MALFORMED, "the unprotected header must be an empty map")
    if len(signature) != SIGNATURE_BYTES:
        raise CborRefused(MALFORMED, f"an Ed25519 signature is 64 bytes, not {len(signature)}")
    kid, protected_canonical = _kid_of(protected)
    try:
        core = decode_strict(payload)
        core_problem = None
    except CborRefused as exc:
        if exc.error == MALFORMED:
            raise CborRefused(MALFORMED, f"the payload: {exc.detail}") from None
        core = decode_wellformed(payload)
        core_problem = exc.detail
    if not isinstance(core, dict):
        raise CborRefused(MALFORMED, "the payload is not a CBOR map")
    expected = envelope_bytes(protected, payload, signature)
    if raw != expected:
        if len(raw) > len(expected) and raw.startswith(expected):
            raise CborRefused(MALFORMED, f"{len(raw) - len(expected)} bytes follow the envelope")
        raise CborRefused(NON_CANONICAL, "the envelope is not in det-CBOR form")
    if not protected_canonical:
        raise CborRefused(NON_CANONICAL, "the protected header is not in det-CBOR form")
    if core_problem is not None:
        raise CborRefused(NON_CANONICAL, f"the core: {core_problem}")
    if len(_known_openings) < 256:
        opening = _ENVELOPE_START + bstr_header(len(protected)) + protected + _EMPTY_MAP
        _known_openings[opening] = (protected, kid)
    return Envelope(raw, protected, kid, payload, signature, core)


def verify_signature(env: Envelope, public_key: bytes) -> bool:
    """Whether the Ed25519 signature verifies under `public_key` (RFC 9052 §4.4)."""
    return verify_parts(env.protected, env.payload, env.signature, public_key)


def verify_parts(protected: bytes, payload: bytes, signature: bytes, public_key: bytes) -> bool:
    """Whether `signature` signs the Sig_structure of these parts under `public_key` (§6.5)."""
    return first_forged(((protected, payload, signature),), public_key) is None


def first_forged(signed: Iterable[tuple[bytes, bytes, bytes]], public_key: bytes) -> int | None:
    """The position of the first (protected, payload, signature) whose signature does not
    verify under `public_key`, or None when all do (§6.5).

    Replay spends nine tenths of its time in this loop, so `sig_structure` is written out
    in it, and PyNaCl is called as its own `VerifyKey.verify` calls it, with one copy of
    the message fewer.
    """
    good_key = len(public_key) == PUBLIC_KEY_BYTES
    prefixes, short = _sig_prefixes, _SHORT_HEADERS
    for i, (protected, payload, signature) in enumerate(signed):
        if not good_key or len(signature) != SIGNATURE_BYTES:
            return i
        prefix = prefixes.get(protected) or _sig_prefix(protected)
        n = len(payload)
        header = short[n] if n < 0x100 else bstr_header(n)
        try:
            crypto_sign_open(signature + prefix + header + payload, public_key)
        except BadSignatureError:
            return i
    return None
