"""§6.5 / DESIGN.md §4, interop: the wire format verifies under a tool that never heard of
Pool. Receipts sealed here verify under pycose 1.1.0 (its own venv, cbor2 5.x) with the
steward's public key, and tampered ones fail there; a COSE_Sign1 that pycose makes with
pool/1's layout is accepted here, provided its protected header is det-CBOR.

What pycose does with the protected header, found by these tests: pycose 1.1.0 encodes the
header map in the order its keys were inserted. Given {alg, kid} it writes exactly det-CBOR
`{1: -8, 4: kid}`, and since Ed25519 is deterministic its envelope is byte for byte the one
joulepool seals. Given {kid, alg} it writes `{4: kid, 1: -8}`: a valid COSE_Sign1 whose
signature verifies over the Sig_structure of those very bytes (RFC 9052 does not require
deterministic headers), but not det-CBOR, so joulepool refuses it as `non_canonical`
(DESIGN.md §4, §6.6): an entry's content address must be a function of its content.
"""

from __future__ import annotations

import cbor2
import pytest
from nacl.signing import VerifyKey

from joulepool.conformance.ledger_ops import replay_bytes
from joulepool.errors import LedgerRefused
from joulepool.ledger.cbor import NON_CANONICAL, CborRefused, decode_strict, encode
from joulepool.ledger.cose import (
    ALG_EDDSA,
    content_address,
    open_envelope,
    protected_header,
    sig_structure,
    verify_signature,
)
from tests.interop.receipts import TAMPERINGS, cores, hexes, ledger, signed_elsewhere, tampered
from tests.interop.tools import Pycose
from tests.support.ledgers import OTHER, STEWARD

KID_HEX = STEWARD.kid.encode().hex()


def pycose_verify(env: Pycose, entries: list[bytes], public_key: bytes) -> list[dict[str, object]]:
    answer = env.call({"op": "verify", "public_key": public_key.hex(), "entries": hexes(entries)})
    results = answer["results"]
    assert isinstance(results, list) and len(results) == len(entries), answer
    return results


def pycose_sign(env: Pycose, payload: bytes, header_order: str) -> bytes:
    assert STEWARD.seed is not None
    answer = env.call(
        {
            "op": "sign",
            "seed": STEWARD.seed.hex(),
            "public_key": STEWARD.public_key.hex(),
            "kid": KID_HEX,
            "payload": payload.hex(),
            "header_order": header_order,
        }
    )
    return bytes.fromhex(answer["envelope"])


def test_the_foreign_environment_is_pycose_1_1_0_under_cbor2_5(pycose_env: Pycose) -> None:
    versions = pycose_env.versions()
    assert versions["pycose"] == "1.1.0"
    assert versions["cbor2"].split(".")[0] == "5"


def test_every_entry_sealed_here_verifies_under_pycose(pycose_env: Pycose) -> None:
    entries = ledger()
    replay_bytes(b"".join(entries), STEWARD.kid, STEWARD.public_key)  # the bytes Pool accepts
    results = pycose_verify(pycose_env, entries, STEWARD.public_key)
    for seq, (raw, result, core) in enumerate(zip(entries, results, cores(), strict=True)):
        env = open_envelope(raw)
        assert result["verified"] is True, (seq, result)
        assert result["alg"] == ALG_EDDSA, seq
        assert result["kid"] == KID_HEX, seq
        assert result["unprotected"] == 0, seq
        assert result["protected"] == env.protected.hex(), seq
        assert result["payload"] == env.payload.hex(), seq
        assert decode_strict(bytes.fromhex(str(result["payload"]))) == core, seq


def test_the_ledger_covers_both_events_with_and_without_class() -> None:
    seen = {(c["event"], "class" in c) for c in cores()}
    assert seen == {("admitted", True), ("admitted", False), ("released", False)}


@pytest.mark.parametrize("tampering", sorted(TAMPERINGS))
def test_a_tampered_entry_fails_under_pycose(pycose_env: Pycose, tampering: str) -> None:
    entries, forgeries = tampered(tampering)
    results = pycose_verify(pycose_env, entries + forgeries, STEWARD.public_key)
    genuine, forged = results[: len(entries)], results[len(entries) :]
    assert [r["verified"] for r in genuine] == [True] * len(entries)
    # Each forgery still decodes as a COSE_Sign1 with pool/1's headers: only the signature fails.
    for seq, result in enumerate(forged):
        assert result["verified"] is False, (seq, result)
        assert result["kid"] == KID_HEX and result["alg"] == ALG_EDDSA, (seq, result)
    for raw in forgeries:  # and joulepool agrees
        assert not verify_signature(open_envelope(raw), STEWARD.public_key)


def test_pycose_refuses_the_entries_under_another_key(pycose_env: Pycose) -> None:
    results = pycose_verify(pycose_env, ledger(), OTHER.public_key)
    assert [r["verified"] for r in results] == [False] * len(results)


def test_a_sign1_made_by_pycose_with_pool_layout_is_accepted_here(pycose_env: Pycose) -> None:
    """A three-entry chain signed by pycose (header {alg, kid}) replays here, byte for byte
    the ledger joulepool seals."""
    ours = ledger()[:3]
    theirs = signed_elsewhere(lambda payload: pycose_sign(pycose_env, payload, "alg_first"))
    assert theirs == ours
    replayer = replay_bytes(b"".join(theirs), STEWARD.kid, STEWARD.public_key)
    assert replayer.length == 3
    assert replayer.head == content_address(ours[-1])


def test_pycose_with_kid_before_alg_is_a_valid_sign1_but_refused_as_non_canonical(
    pycose_env: Pycose,
) -> None:
    core = cores()[0]
    raw = pycose_sign(pycose_env, encode(core), "kid_first")
    protected, unprotected, payload, signature = cbor2.loads(raw).value
    # pycose wrote the header in insertion order: {4: kid, 1: -8}, not det-CBOR's {1: -8, 4: kid}.
    assert protected == cbor2.dumps({4: STEWARD.kid.encode(), 1: ALG_EDDSA})
    assert protected != protected_header(STEWARD.kid)
    assert unprotected == {} and payload == encode(core)
    # As COSE it is sound: pycose verifies it, and so does Ed25519 over RFC 9052's Sig_structure.
    assert pycose_verify(pycose_env, [raw], STEWARD.public_key)[0]["verified"] is True
    VerifyKey(STEWARD.public_key).verify(sig_structure(protected, payload), signature)
    # As a pool/1 entry it is not: the envelope does not re-encode to itself.
    with pytest.raises(CborRefused) as refused:
        open_envelope(raw)
    assert refused.value.error == NON_CANONICAL
    assert "protected header" in refused.value.detail
    with pytest.raises(LedgerRefused) as ledger_refused:
        replay_bytes(raw, STEWARD.kid, STEWARD.public_key)
    assert (ledger_refused.value.index, ledger_refused.value.error) == (0, NON_CANONICAL)
