"""c2sp.org/signed-note: the Go reference vector (golang.org/x/mod/sumdb/note's PeterNeumann
note, signed here byte for byte), verifier keys of other implementations read and written
back unchanged, the verification rules (unknown keys ignored, a known key's bad or repeated
signature rejects the note), and hostile notes and keys refused by name, never with a
traceback, within fixed bounds."""

from __future__ import annotations

import base64
import hashlib
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulepool.ledger.keys import KeyPair
from joulepool.ledger.note import (
    ALG_COSIGNATURE_V1,
    ALG_ED25519,
    EM_DASH,
    MAX_NOTE_BYTES,
    MAX_SIGNATURES,
    NoteRefused,
    NoteSignature,
    NoteSignatureInvalid,
    NoteSigner,
    NoteUnverified,
    VerifierKey,
    key_hash,
    open_note,
    parse_note,
    sign_note,
)

# golang.org/x/mod/sumdb/note, note_test.go and its package documentation.
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY_DATA = "AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_NOTE = (
    PETER_TEXT
    + "\n— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
).encode()
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
# transparency-dev/formats' tests: a 0x01 key whose base64 holds a '+', and a 0x04 key.
PLUS_VKEY = "TEST+7997405c+AQcC+FTVKf0jlTdHDY3rbevmnKxxPjigCXlVtGe6RIr6"
COSIGNATURE_VKEY = "remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2"

PETER = KeyPair.from_seed("PeterNeumann", base64.b64decode(PETER_SKEY_DATA)[1:])
ALICE = KeyPair.from_seed("alice", bytes(range(32)))
BOB = KeyPair.from_seed("bob", bytes(range(1, 33)))
ALICE_SIGNER = NoteSigner("example.com/alice", ALICE)
BOB_SIGNER = NoteSigner("example.com/bob", BOB)


def test_the_go_reference_note_is_signed_here_byte_for_byte() -> None:
    signer = NoteSigner("PeterNeumann", PETER)
    assert signer.verifier_key().encode() == PETER_VKEY
    assert sign_note(PETER_TEXT, [signer]) == PETER_NOTE


def test_the_go_reference_note_opens_under_its_verifier_key() -> None:
    opened = open_note(PETER_NOTE, [VerifierKey.parse(PETER_VKEY)])
    assert opened.text == PETER_TEXT
    assert [k.name for k, _ in opened.verified] == ["PeterNeumann"]
    assert opened.unverified == ()


def test_the_go_reference_note_is_unverified_under_another_key() -> None:
    with pytest.raises(NoteUnverified) as err:
        open_note(PETER_NOTE, [VerifierKey.parse(ENOCH_VKEY)])
    assert err.value.field == "note"


@pytest.mark.parametrize(
    ("vkey", "algorithm"),
    [
        (PETER_VKEY, ALG_ED25519),
        (ENOCH_VKEY, ALG_ED25519),
        (PLUS_VKEY, ALG_ED25519),
        (COSIGNATURE_VKEY, ALG_COSIGNATURE_V1),
    ],
)
def test_verifier_keys_of_other_implementations_read_and_write_back_unchanged(
    vkey: str, algorithm: int
) -> None:
    key = VerifierKey.parse(vkey)
    assert key.algorithm == algorithm
    assert key.encode() == vkey
    assert key.key_hash == key_hash(key.name, algorithm, key.public_key)


def test_the_key_hash_is_sha256_of_name_newline_algorithm_key() -> None:
    key = VerifierKey.parse(PETER_VKEY)
    assert key.key_hash.hex() == "c74f20a3"
    assert key_hash("PeterNeumann", ALG_COSIGNATURE_V1, key.public_key) != key.key_hash


def _vkey(name: str, data: bytes) -> str:
    digest = hashlib.sha256(name.encode() + b"\n" + data).digest()
    return f"{name}+{digest[:4].hex()}+{base64.b64encode(data).decode()}"


GOOD_DATA = bytes([1]) + bytes(range(32))


@pytest.mark.parametrize(
    ("vkey", "field"),
    [
        ("example.com/foo", "verifier key"),
        ("example.com/foo+530d903a", "verifier key"),
        (PETER_VKEY.replace("c74f20a3", "C74F20A3"), "verifier key hash"),
        (PETER_VKEY.replace("c74f20a3", "c74f20a"), "verifier key"),
        (PETER_VKEY.replace("c74f20a3", "c74f20a300"), "verifier key"),
        (PETER_VKEY.replace("c74f20a3", "c74f20g3"), "verifier key hash"),
        (PETER_VKEY.replace("c74f20a3", "c74f20a4"), "verifier key hash"),
        (PETER_VKEY + "!", "verifier key data"),
        (PETER_VKEY[:-1] + "X", "verifier key hash"),
        (PETER_VKEY.replace("ARpc", "AR\npc"), "verifier key data"),
        (_vkey("a b", GOOD_DATA), "verifier key name"),
        (_vkey("", GOOD_DATA), "verifier key name"),
        (_vkey("a", bytes([2]) + bytes(range(32))), "verifier key algorithm"),
        (_vkey("a", bytes([1]) + bytes(31)), "verifier key data"),
        (_vkey("a", bytes([1])), "verifier key data"),
        (_vkey("a", bytes([1]) + bytes(31)).rstrip("="), "verifier key data"),
        ("a+00000000+", "verifier key data"),
        ("x" * 5000, "verifier key"),
    ],
)
def test_malformed_verifier_keys_are_refused_by_name(vkey: str, field: str) -> None:
    with pytest.raises(NoteRefused) as err:
        VerifierKey.parse(vkey)
    assert err.value.field == field


def test_unknown_keys_are_ignored_even_sharing_a_name_or_a_hash_with_a_known_one() -> None:
    note = sign_note("hello\n", [ALICE_SIGNER, BOB_SIGNER])
    alice = ALICE_SIGNER.verifier_key()
    impostor_name = NoteSigner("example.com/alice", BOB).sign(b"hello\n")
    impostor_hash = NoteSigner("example.com/eve", BOB).sign(b"hello\n")
    impostor_hash = type(impostor_hash)(impostor_hash.name, alice.key_hash, b"\0" * 64)
    note += (impostor_name.line() + impostor_hash.line()).encode()
    opened = open_note(note, [alice])
    assert [k for k, _ in opened.verified] == [alice]
    assert len(opened.unverified) == 3


def test_a_known_keys_bad_signature_rejects_the_whole_note() -> None:
    note = sign_note("hello\n", [ALICE_SIGNER, BOB_SIGNER])
    forged = NoteSigner("example.com/bob", BOB).sign(b"other\n")
    bad = note.replace(BOB_SIGNER.sign(b"hello\n").line().encode(), forged.line().encode())
    with pytest.raises(NoteSignatureInvalid):
        open_note(bad, [ALICE_SIGNER.verifier_key(), BOB_SIGNER.verifier_key()])
    # Unknown to this reader, the same line is just ignored.
    assert open_note(bad, [ALICE_SIGNER.verifier_key()]).text == "hello\n"


def test_a_known_key_signing_twice_rejects_the_note() -> None:
    note = sign_note("hello\n", [ALICE_SIGNER, ALICE_SIGNER])
    with pytest.raises(NoteRefused, match="more than once"):
        open_note(note, [ALICE_SIGNER.verifier_key()])


def test_a_key_listed_twice_is_refused() -> None:
    with pytest.raises(NoteRefused) as err:
        open_note(PETER_NOTE, [VerifierKey.parse(PETER_VKEY), VerifierKey.parse(PETER_VKEY)])
    assert err.value.field == "known keys"


def test_the_text_may_hold_blank_lines_the_last_one_separates() -> None:
    text = "first\n\nsecond\n\n"
    note = sign_note(text, [ALICE_SIGNER])
    assert open_note(note, [ALICE_SIGNER.verifier_key()]).text == text


def test_16_signatures_are_accepted() -> None:
    keys = [KeyPair.from_seed(f"k{i}", bytes([i]) * 32) for i in range(16)]
    signers = [NoteSigner(f"example.com/w{i}", k) for i, k in enumerate(keys)]
    note = sign_note("hello\n", signers)
    opened = open_note(note, [s.verifier_key() for s in signers])
    assert len(opened.verified) == 16


SIG = "— example.com/alice " + base64.b64encode(b"\1\2\3\4" + b"s" * 64).decode() + "\n"


@pytest.mark.parametrize(
    ("note", "field"),
    [
        (b"", "note"),
        (b"text\n", "note"),
        (b"text\n\n", "note"),
        (("text\n\n" + SIG).encode()[:-1], "note"),
        (("text\n\n" + SIG.replace(EM_DASH, "-")).encode(), "signature line 1"),
        (("text\n\n" + SIG.replace(EM_DASH + " ", EM_DASH)).encode(), "signature line 1"),
        (("text\n\n" + SIG.replace("alice ", "alice  ")).encode(), "signature line 1"),
        (("text\n\n" + SIG.replace("alice", "al+ice")).encode(), "signature line 1 key name"),
        (("text\n\n" + SIG.replace("alice", "al\u00a0ice")).encode(), "signature line 1 key name"),
        (("text\n\n" + SIG.replace("example.com/alice", "")).encode(), "signature line 1 key name"),
        (("text\n\n" + SIG.replace("=\n", "\n")).encode(), "signature line 1 signature"),
        (("text\n\n" + SIG.replace("A", "*", 1)).encode(), "signature line 1 signature"),
        (
            ("text\n\n— a " + base64.b64encode(b"1234").decode() + "\n").encode(),
            "signature line 1",
        ),
        (("te\rxt\n\n" + SIG).encode(), "note"),
        (("text\n\n" + SIG + "\t").encode(), "note"),
        (b"te\xffxt\n\n" + SIG.encode(), "note"),
        (b"te\x00xt\n\n" + SIG.encode(), "note"),
        (("text\n\n" + SIG + SIG.strip()).encode(), "note"),
        (("text\n\n" + SIG + "\n").encode(), "note"),
        (("text\n\n" + SIG * (MAX_SIGNATURES + 1)).encode(), "note"),
        (b"x" * (MAX_NOTE_BYTES - 1) + b"\n\n" + SIG.encode(), "note"),
        ("text\n\n\ud800".encode("utf-8", "surrogatepass"), "note"),
        ("text\n\n\ud800", "note"),
    ],
)
def test_malformed_notes_are_refused_by_name(note: bytes | str, field: str) -> None:
    with pytest.raises(NoteRefused) as err:
        parse_note(note)
    assert err.value.field == field
    with pytest.raises(NoteRefused):
        open_note(note, [ALICE_SIGNER.verifier_key()])


def test_a_huge_note_is_refused_before_any_work() -> None:
    huge = ("line\n" * 4_000_000).encode() + b"\n" + SIG.encode()
    began = time.monotonic()
    with pytest.raises(NoteRefused, match="longer than"):
        parse_note(huge)
    assert time.monotonic() - began < 0.05


@pytest.mark.parametrize(
    ("text", "field"),
    [("no newline", "text"), ("tab\there\n", "text"), ("x" * MAX_NOTE_BYTES + "\n", "text")],
)
def test_text_that_cannot_be_a_note_is_not_signed(text: str, field: str) -> None:
    with pytest.raises(NoteRefused) as err:
        sign_note(text, [ALICE_SIGNER])
    assert err.value.field == field


def test_a_public_only_key_cannot_sign() -> None:
    with pytest.raises(NoteRefused) as err:
        NoteSigner("example.com/alice", ALICE.public())
    assert err.value.field == "key"


def test_a_signer_name_must_be_a_key_name() -> None:
    for name in ["", "a b", "a+b", "a\u2003b", "a\nb"]:
        with pytest.raises(NoteRefused):
            NoteSigner(name, ALICE)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_parse_or_are_refused_by_name(data: bytes) -> None:
    try:
        parse_note(data)
    except NoteRefused as exc:
        assert exc.field


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_a_changed_byte_of_a_signed_note_never_verifies_silently(data: st.DataObject) -> None:
    note = sign_note("example.com/log\n42\nsome text\n", [ALICE_SIGNER])
    at = data.draw(st.integers(min_value=0, max_value=len(note) - 1), label="at")
    value = data.draw(st.integers(min_value=0, max_value=255), label="value")
    if note[at] == value:
        return
    changed = note[:at] + bytes([value]) + note[at + 1 :]
    with pytest.raises(NoteRefused):
        open_note(changed, [ALICE_SIGNER.verifier_key()])


note_texts = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xD7FF) | st.just("\n"), max_size=200
).map(lambda t: t + "\n")


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(note_texts)
def test_every_text_signed_opens_as_itself(text: str) -> None:
    note = sign_note(text, [ALICE_SIGNER, BOB_SIGNER])
    opened = open_note(note, [BOB_SIGNER.verifier_key()])
    assert opened.text == text
    assert [s.name for s in opened.unverified] == ["example.com/alice"]
    assert parse_note(note).encode() == note


def test_a_small_order_key_verifies_no_note_not_even_the_identity_forgery() -> None:
    # Under the identity point, R = identity and S = 0 satisfy the bare Ed25519 equation for
    # every message; libsodium refuses small-order keys, so such a key opens nothing.
    identity = bytes([1]) + bytes(31)
    key = VerifierKey.ed25519("example.com/weak", identity)
    line = NoteSignature(key.name, key.key_hash, bytes([1]) + bytes(63)).line()
    with pytest.raises(NoteSignatureInvalid):
        open_note(("hello\n\n" + line).encode(), [key])
