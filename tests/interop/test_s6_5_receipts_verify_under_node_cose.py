"""§6.5 / DESIGN.md §4, interop under Node.js: receipts sealed here verify under
@auth0/cose (RFC 9052 in TypeScript; CBOR from cbor-x, Ed25519 from Node.js's crypto),
pinned by tests/interop/node/package-lock.json and installed with `npm ci`; tampered ones
fail there, for their signature; and a COSE_Sign1 that @auth0/cose signs with pool/1's
headers is accepted here, byte for byte the entry joulepool seals.

@auth0/cose decodes a COSE_Sign1 with or without tag 18; pool/1 requires the tag, so an
untagged envelope, sound as COSE, is refused here as `malformed` (checked below).
"""

from __future__ import annotations

import pytest

from joulepool.conformance.ledger_ops import replay_bytes
from joulepool.errors import LedgerRefused
from joulepool.ledger.cbor import MALFORMED, encode
from joulepool.ledger.cose import (
    ALG_EDDSA,
    open_envelope,
)
from tests.interop.receipts import TAMPERINGS, cores, hexes, ledger, signed_elsewhere, tampered
from tests.interop.tools import NodeCose
from tests.support.ledgers import OTHER, STEWARD

pytestmark = pytest.mark.node

KID_HEX = STEWARD.kid.encode().hex()
PACKAGE = "@auth0/cose"
VERSION = "1.0.2"
FAILED_SIGNATURE = "COSESignatureVerificationFailed"  # @auth0/cose's error for a bad signature


def node_verify(env: NodeCose, entries: list[bytes], public_key: bytes) -> list[dict[str, object]]:
    answer = env.call({"op": "verify", "public_key": public_key.hex(), "entries": hexes(entries)})
    results = answer["results"]
    assert isinstance(results, list) and len(results) == len(entries), answer
    return results


def node_sign(env: NodeCose, payload: bytes) -> bytes:
    assert STEWARD.seed is not None
    answer = env.call(
        {
            "op": "sign",
            "seed": STEWARD.seed.hex(),
            "public_key": STEWARD.public_key.hex(),
            "kid": KID_HEX,
            "payload": payload.hex(),
        }
    )
    return bytes.fromhex(answer["envelope"])


def test_the_locked_package_is_installed(node_env: NodeCose) -> None:
    assert node_env.installed_version(PACKAGE) == VERSION


def test_every_entry_sealed_here_verifies_under_node_cose(node_env: NodeCose) -> None:
    entries = ledger()
    replay_bytes(b"".join(entries), STEWARD.kid, STEWARD.public_key)  # the bytes Pool accepts
    results = node_verify(node_env, entries, STEWARD.public_key)
    for seq, (raw, result) in enumerate(zip(entries, results, strict=True)):
        assert result["verified"] is True, (seq, result)
        assert result["alg"] == ALG_EDDSA, seq
        assert result["kid"] == KID_HEX, seq
        assert result["unprotected"] == 0, seq
        assert result["payload"] == open_envelope(raw).payload.hex(), seq


@pytest.mark.parametrize("tampering", sorted(TAMPERINGS))
def test_a_tampered_entry_fails_under_node_cose(node_env: NodeCose, tampering: str) -> None:
    entries, forgeries = tampered(tampering)
    results = node_verify(node_env, entries + forgeries, STEWARD.public_key)
    genuine, forged = results[: len(entries)], results[len(entries) :]
    assert [r["verified"] for r in genuine] == [True] * len(entries)
    for seq, result in enumerate(forged):
        assert result["verified"] is False, (seq, result)
        assert str(result["error"]).startswith(FAILED_SIGNATURE), (seq, result)


def test_node_cose_refuses_the_entries_under_another_key(node_env: NodeCose) -> None:
    results = node_verify(node_env, ledger(), OTHER.public_key)
    assert [r["verified"] for r in results] == [False] * len(results)
    assert all(str(r["error"]).startswith(FAILED_SIGNATURE) for r in results)


def test_a_sign1_made_by_node_cose_with_pool_layout_is_accepted_here(node_env: NodeCose) -> None:
    """A three-entry chain signed by @auth0/cose replays here, byte for byte joulepool's own."""
    ours = ledger()[:3]
    theirs = signed_elsewhere(lambda payload: node_sign(node_env, payload))
    assert theirs == ours
    replayer = replay_bytes(b"".join(theirs), STEWARD.kid, STEWARD.public_key)
    assert replayer.length == 3


def test_an_untagged_sign1_is_refused_here_as_malformed(node_env: NodeCose) -> None:
    raw = node_sign(node_env, encode(cores()[0]))
    assert raw[:1] == b"\xd2"  # tag 18
    untagged = raw[1:]
    assert node_verify(node_env, [untagged], STEWARD.public_key)[0]["verified"] is True
    with pytest.raises(LedgerRefused) as refused:
        replay_bytes(untagged, STEWARD.kid, STEWARD.public_key)
    assert (refused.value.index, refused.value.error) == (0, MALFORMED)
