"""Every input the transparency clients read is hostile: any bytes as a bundle, any text
as a verifier-key file, any value as a `[[c2sp_witness]]` entry, any note as a checkpoint
to submit is a typed refusal (a `PoolError`) or a success, never another exception, and
within the size bounds (docs/transparency.md)."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from joulepool.errors import InvalidInput, PoolError
from joulepool.ledger.checkpoint import witness_verifier_key
from joulepool.transparency.logkeys import parse_vkeys
from joulepool.transparency.proof_bundle import check_bundle
from joulepool.transparency.witness_client import WitnessConfig, parse_witnesses, submit
from tests.support.ledgers import WITNESS
from tests.transparency.logs import VKEY, bundle_of, entries

KEYS = parse_vkeys(VKEY)
GOOD = bundle_of(entries(20), "c3", {"admitted": 6, "released": 7})
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None)


@SETTINGS
@given(st.data())
def test_a_bundle_with_any_bytes_changed_is_refused_by_type_or_still_proves_c3(
    data: st.DataObject,
) -> None:
    raw = bytearray(GOOD)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    try:
        proven = check_bundle(bytes(raw), KEYS)
    except PoolError:
        return
    # A change the JSON reader cannot see (a digit for the same figure does not exist,
    # so only insignificant whitespace) leaves the same proof.
    assert proven.claim == "c3"
    assert [e.index for e in proven.entries] == [6, 7]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@SETTINGS
@given(JSON)
def test_any_json_value_as_a_bundle_is_a_typed_refusal(value: object) -> None:
    try:
        check_bundle(json.dumps(value).encode(), KEYS)
    except PoolError:
        return
    raise AssertionError("an arbitrary value proved a claim")


@SETTINGS
@given(st.text(max_size=300))
def test_any_text_as_a_vkey_file_is_keys_or_a_typed_refusal(text: str) -> None:
    with contextlib.suppress(PoolError):
        parse_vkeys(text)


@SETTINGS
@given(JSON)
def test_any_value_as_c2sp_witness_entries_is_a_typed_refusal(value: object) -> None:
    with contextlib.suppress(PoolError):
        parse_witnesses(value)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.binary(max_size=400))
def test_any_bytes_as_a_checkpoint_to_submit_are_refused_before_any_request(raw: bytes) -> None:
    # A request would be WitnessUnavailable (nothing listens on port 9 of the loopback):
    # invalid input means the note was refused before any request was made.
    witness = WitnessConfig("http://127.0.0.1:9/", witness_verifier_key("w", WITNESS.public_key))
    with pytest.raises(InvalidInput, match="checkpoint_note"):
        submit(witness, raw, 0, lambda old, new: [], timeout_s=0.5)
