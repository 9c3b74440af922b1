"""c2sp.org/tlog-checkpoint and c2sp.org/tlog-cosignature (cosignature/v1): the spec's own
example text read and written back, checkpoints signed by the steward's key under the
origin and opened only by that key, strict parsing of every line, and witnesses'
cosignatures verified over exactly the checkpoint they were made for."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulepool.ledger.checkpoint import (
    Checkpoint,
    CheckpointRefused,
    add_signatures,
    cosign,
    log_verifier_key,
    open_checkpoint,
    sign_checkpoint,
    witness_verifier_key,
)
from joulepool.ledger.keys import KeyPair
from joulepool.ledger.merkle import EMPTY_ROOT, root_of
from joulepool.ledger.note import (
    NoteRefused,
    NoteSignature,
    NoteSignatureInvalid,
    NoteSigner,
    NoteUnverified,
    VerifierKey,
    parse_note,
    sign_note,
)
from tests.support.ledgers import OTHER, STEWARD

ORIGIN = "pool.example/ledger"
SPEC_TEXT = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
WITNESS = KeyPair.from_seed("w1", bytes([7]) * 32)
WITNESS2 = KeyPair.from_seed("w2", bytes([8]) * 32)
W1, W2 = "witness.example/w1", "witness.example/w2"
T = 1_700_000_000

CP = Checkpoint(ORIGIN, 5, root_of([b"a", b"b", b"c", b"d", b"e"]))
NOTE = sign_checkpoint(CP, STEWARD)
VKEY = log_verifier_key(STEWARD, ORIGIN)


def test_the_spec_example_reads_and_writes_back() -> None:
    cp = Checkpoint.parse(SPEC_TEXT)
    assert cp.origin == "example.com/behind-the-sofa"
    assert cp.size == 20852163
    assert cp.root_hash == base64.b64decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=")
    assert cp.extensions == ()
    assert cp.text() == SPEC_TEXT


def test_extension_lines_round_trip() -> None:
    cp = Checkpoint(ORIGIN, 0, EMPTY_ROOT, ("ext one", "ext two"))
    assert cp.text() == f"{ORIGIN}\n0\n{base64.b64encode(EMPTY_ROOT).decode()}\next one\next two\n"
    assert Checkpoint.parse(cp.text()) == cp


def test_the_steward_signs_under_the_origin_and_the_vkey_opens_it() -> None:
    signature = parse_note(NOTE).signatures
    assert [s.name for s in signature] == [ORIGIN]
    opened = open_checkpoint(NOTE, VKEY, origin=ORIGIN)
    assert opened.checkpoint == CP
    assert opened.cosigned_by == ()
    assert VerifierKey.parse(VKEY.encode()) == VKEY
    assert open_checkpoint(NOTE.decode(), VKEY) == opened


def test_another_key_cannot_open_it() -> None:
    with pytest.raises(NoteUnverified):
        open_checkpoint(NOTE, log_verifier_key(OTHER, ORIGIN))
    with pytest.raises(NoteUnverified):
        open_checkpoint(NOTE, log_verifier_key(STEWARD, "pool.example/other"))


def test_after_a_rotation_the_new_key_signs_and_only_its_vkey_opens() -> None:
    rotated = sign_checkpoint(Checkpoint(ORIGIN, 6, CP.root_hash), OTHER)
    assert open_checkpoint(rotated, log_verifier_key(OTHER, ORIGIN)).checkpoint.size == 6
    with pytest.raises(NoteUnverified):
        open_checkpoint(rotated, VKEY)


def test_an_unexpected_origin_is_refused() -> None:
    with pytest.raises(CheckpointRefused) as err:
        open_checkpoint(NOTE, VKEY, origin="pool.example/elsewhere")
    assert err.value.field == "origin"


def test_a_signed_note_that_is_not_a_checkpoint_is_refused() -> None:
    note = sign_checkpoint(CP, STEWARD).replace(b"\n5\n", b"\nfive\n")
    with pytest.raises(NoteSignatureInvalid):
        open_checkpoint(note, VKEY)
    not_a_checkpoint = sign_note(f"{ORIGIN}\nfive\nroot\n", [NoteSigner(ORIGIN, STEWARD)])
    with pytest.raises(CheckpointRefused) as err:
        open_checkpoint(not_a_checkpoint, VKEY)
    assert err.value.field == "size"


B64_ROOT = base64.b64encode(EMPTY_ROOT).decode()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (f"{ORIGIN}\n5\n{B64_ROOT}", "checkpoint"),
        (f"{ORIGIN}\n5\n", "checkpoint"),
        (f"\n5\n{B64_ROOT}\n", "origin"),
        (f"{ORIGIN}\n05\n{B64_ROOT}\n", "size"),
        (f"{ORIGIN}\n00\n{B64_ROOT}\n", "size"),
        (f"{ORIGIN}\n+5\n{B64_ROOT}\n", "size"),
        (f"{ORIGIN}\n 5\n{B64_ROOT}\n", "size"),
        (f"{ORIGIN}\n-1\n{B64_ROOT}\n", "size"),
        (f"{ORIGIN}\n\u0665\n{B64_ROOT}\n", "size"),
        (f"{ORIGIN}\n{2**64}\n{B64_ROOT}\n", "size"),
        (f"{ORIGIN}\n{'9' * 30}\n{B64_ROOT}\n", "size"),
        (f"{ORIGIN}\n\n{B64_ROOT}\n", "size"),
        (f"{ORIGIN}\n5\n{B64_ROOT.rstrip('=')}\n", "root hash"),
        (f"{ORIGIN}\n5\n{base64.b64encode(EMPTY_ROOT[:31]).decode()}\n", "root hash"),
        (f"{ORIGIN}\n5\n{B64_ROOT[:-2]}V=\n", "root hash"),
        (f"{ORIGIN}\n5\n{B64_ROOT}\n\n", "extension line 1"),
        (f"{ORIGIN}\n5\n{B64_ROOT}\next\r\n", "extension line 1"),
        (f"{ORIGIN}\t\n5\n{B64_ROOT}\n", "origin"),
        ("x" * 300_000, "checkpoint"),
    ],
)
def test_malformed_checkpoint_text_is_refused_by_name(text: str, field: str) -> None:
    with pytest.raises(CheckpointRefused) as err:
        Checkpoint.parse(text)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Checkpoint("", 1, EMPTY_ROOT), "origin"),
        (lambda: Checkpoint("a\nb", 1, EMPTY_ROOT), "origin"),
        (lambda: Checkpoint(ORIGIN, -1, EMPTY_ROOT), "size"),
        (lambda: Checkpoint(ORIGIN, 2**64, EMPTY_ROOT), "size"),
        (lambda: Checkpoint(ORIGIN, True, EMPTY_ROOT), "size"),
        (lambda: Checkpoint(ORIGIN, 1, EMPTY_ROOT[:31]), "root_hash"),
        (lambda: Checkpoint(ORIGIN, 1, EMPTY_ROOT, ("",)), "extension line 1"),
    ],
)
def test_a_checkpoint_that_cannot_be_written_is_not_built(make: object, field: str) -> None:
    assert callable(make)
    with pytest.raises(CheckpointRefused) as err:
        make()
    assert err.value.field == field


def test_an_origin_that_is_no_key_name_needs_a_key_name_to_sign() -> None:
    cp = Checkpoint("pool example", 1, EMPTY_ROOT)
    with pytest.raises(NoteRefused):
        sign_checkpoint(cp, STEWARD)
    note = sign_checkpoint(cp, STEWARD, name="pool.example/log")
    opened = open_checkpoint(note, log_verifier_key(STEWARD, "pool.example/log"))
    assert opened.checkpoint.origin == "pool example"


def cosigned(*lines: NoteSignature) -> bytes:
    return add_signatures(NOTE, list(lines))


def test_a_witness_cosignature_verifies_with_its_timestamp() -> None:
    note = cosigned(cosign(CP, WITNESS, W1, T), cosign(CP, WITNESS2, W2, T + 5))
    wkeys = [
        witness_verifier_key(W1, WITNESS.public_key),
        witness_verifier_key(W2, WITNESS2.public_key),
    ]
    opened = open_checkpoint(note, VKEY, wkeys)
    assert opened.checkpoint == CP
    assert opened.cosigned_by == ((W1, T), (W2, T + 5))
    # A reader who knows only the log key ignores the cosignatures.
    assert open_checkpoint(note, VKEY).cosigned_by == ()


def test_the_cosignature_key_hash_uses_type_0x04() -> None:
    line = cosign(CP, WITNESS, W1, T)
    assert line.key_hash == witness_verifier_key(W1, WITNESS.public_key).key_hash
    assert line.key_hash != VerifierKey.ed25519(W1, WITNESS.public_key).key_hash
    assert line.signature[:8] == T.to_bytes(8, "big")
    assert len(line.signature) == 72


def test_a_cosignature_over_another_checkpoint_or_time_fails() -> None:
    wkey = witness_verifier_key(W1, WITNESS.public_key)
    other = cosign(Checkpoint(ORIGIN, 6, CP.root_hash), WITNESS, W1, T)
    with pytest.raises(NoteSignatureInvalid):
        open_checkpoint(cosigned(other), VKEY, [wkey])
    good = cosign(CP, WITNESS, W1, T)
    retimed = NoteSignature(W1, good.key_hash, (T + 1).to_bytes(8, "big") + good.signature[8:])
    with pytest.raises(NoteSignatureInvalid):
        open_checkpoint(cosigned(retimed), VKEY, [wkey])
    over_range = NoteSignature(W1, good.key_hash, (2**63).to_bytes(8, "big") + good.signature[8:])
    with pytest.raises(NoteSignatureInvalid):
        open_checkpoint(cosigned(over_range), VKEY, [wkey])


def test_a_cosignature_alone_does_not_stand_for_the_log_signature() -> None:
    wkey = witness_verifier_key(W1, WITNESS.public_key)
    bare = CP.text().encode() + b"\n" + cosign(CP, WITNESS, W1, T).line().encode()
    with pytest.raises(NoteUnverified, match="log's key"):
        open_checkpoint(bare, VKEY, [wkey])


def test_keys_of_the_wrong_type_are_refused_for_their_role() -> None:
    with pytest.raises(NoteRefused) as err:
        open_checkpoint(NOTE, VKEY, [VerifierKey.ed25519(W1, WITNESS.public_key)])
    assert err.value.field == f"witness key {W1}"
    with pytest.raises(NoteRefused) as err:
        open_checkpoint(NOTE, witness_verifier_key(ORIGIN, STEWARD.public_key))
    assert err.value.field == "log key"


def test_a_cosignature_time_past_2_63_is_not_made() -> None:
    with pytest.raises(NoteRefused) as err:
        cosign(CP, WITNESS, W1, 2**63)
    assert err.value.field == "timestamp"


checkpoints = st.builds(
    Checkpoint,
    origin=st.text(
        st.characters(min_codepoint=0x20, max_codepoint=0xD7FF), min_size=1, max_size=30
    ),
    size=st.integers(min_value=0, max_value=2**64 - 1),
    root_hash=st.binary(min_size=32, max_size=32),
    extensions=st.lists(
        st.text(st.characters(min_codepoint=0x20, max_codepoint=0xD7FF), min_size=1),
        max_size=3,
    ).map(tuple),
)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(checkpoints)
def test_every_checkpoint_reads_back_as_itself(cp: Checkpoint) -> None:
    assert Checkpoint.parse(cp.text()) == cp


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.text(max_size=200))
def test_arbitrary_text_parses_or_is_refused_by_name(text: str) -> None:
    try:
        Checkpoint.parse(text)
    except CheckpointRefused as exc:
        assert exc.field
