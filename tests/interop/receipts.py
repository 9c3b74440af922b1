"""The ledger the interop tests hand to foreign COSE implementations, and its tamperings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from joulepool.events import Event
from joulepool.grade import Grade
from joulepool.ledger.cbor import encode
from joulepool.ledger.cose import (
    GENESIS,
    content_address,
    envelope_bytes,
    open_envelope,
    protected_header,
    seal,
    verify_signature,
)
from joulepool.ledger.entry import core_of
from tests.support.ledgers import OTHER, STEWARD, admitted, released, seal_all

EVENTS: Final[tuple[Event, ...]] = (
    admitted("c0", "a", 100, Grade.HwShunt, class_="train"),
    admitted("c1", "b", 250, Grade.ModelBased, class_=None),
    released("c0", 60, Grade.HwShunt),
    # A reservation past 2**32 µJ takes CBOR's 8-byte integer form; part of it borrowed.
    admitted("c2", "a", 5_000_000_000_000, Grade.Estimator, class_="inference", borrowed=7),
    released("c1", 300, Grade.ModelBased),
    admitted("c3", "c", 0, Grade.HwShunt, class_=None),
    released("c2", 4_999_999_999_999, Grade.Estimator),
)
"""Admitted and released events, with and without a class, over every grade."""


def ledger() -> list[bytes]:
    """EVENTS sealed by joulepool as the steward `steward`."""
    return seal_all(EVENTS)


def cores() -> list[dict[str, object]]:
    """The core of each entry of `ledger()`, as joulepool builds it."""
    out: list[dict[str, object]] = []
    head = GENESIS
    for seq, (event, raw) in enumerate(zip(EVENTS, ledger(), strict=True)):
        out.append(core_of(event, seq, head, STEWARD.kid))
        head = content_address(raw)
    return out


def _payload_altered(raw: bytes) -> bytes:
    env = open_envelope(raw)
    core = dict(env.core)
    core["at_ms"] = (
        core["at_ms"] + 1
    )  # still det-CBOR and well formed; only the bytes signed differ
    return envelope_bytes(env.protected, encode(core), env.signature)


def _signature_flipped(raw: bytes) -> bytes:
    return raw[:-1] + bytes((raw[-1] ^ 0x01,))


def _signed_by_other(raw: bytes) -> bytes:
    env = open_envelope(raw)
    return seal(env.core, env.kid, OTHER.signing_key)  # same kid "steward", another key


TAMPERINGS: Final[dict[str, Callable[[bytes], bytes]]] = {
    "payload_altered": _payload_altered,
    "signature_flipped": _signature_flipped,
    "signed_by_another_key": _signed_by_other,
}
"""Each turns an entry into one whose structure is intact but whose signature is not the
steward's over these bytes."""


def tampered(tampering: str) -> tuple[list[bytes], list[bytes]]:
    """`ledger()`, and each of its entries with `tampering` applied (every one changed)."""
    entries = ledger()
    out = [TAMPERINGS[tampering](raw) for raw in entries]
    assert all(t != raw for t, raw in zip(out, entries, strict=True))
    return entries, out


def signed_elsewhere(sign: Callable[[bytes], bytes], length: int = 3) -> list[bytes]:
    """The first `length` cores of `ledger()`, each chained over the envelope before it and
    signed by `sign` (a foreign implementation, given the det-CBOR core), checked to open
    here as joulepool's own: same kid, header and core, a good signature, the same bytes."""
    out: list[bytes] = []
    head = GENESIS
    for own in cores()[:length]:
        core = {**own, "prev": head}  # chained over the foreign envelopes themselves
        raw = sign(encode(core))
        env = open_envelope(raw)
        assert env.kid == STEWARD.kid
        assert env.protected == protected_header(STEWARD.kid)
        assert env.core == core
        assert verify_signature(env, STEWARD.public_key)
        assert raw == seal(core, STEWARD.kid, STEWARD.signing_key)
        out.append(raw)
        head = content_address(raw)
    return out


def hexes(entries: Sequence[bytes]) -> list[str]:
    return [e.hex() for e in entries]
