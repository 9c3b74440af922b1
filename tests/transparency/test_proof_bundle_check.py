"""`pool proof check`: a saved proof bundle verifies offline under the log's verifier key,
and every way a hostile bundle can be wrong is refused by name, never with a traceback
(API.md, Transparency; docs/transparency.md)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from joulepool.cli import main
from joulepool.ledger.checkpoint import log_verifier_key
from joulepool.ledger.note import b64encode
from joulepool.transparency.errors import (
    BundleMalformed,
    CheckpointUnverified,
    ClaimNotInEntry,
    ProofMismatch,
)
from joulepool.transparency.logkeys import load_vkeys, parse_vkeys
from joulepool.transparency.proof_bundle import check_bundle
from tests.support.ledgers import OTHER, WITNESS, admitted, released, seal_all
from tests.transparency.logs import ORIGIN, VKEY, bundle_of, entries, note_of

LEAVES = entries(300)
# Claim c7 is admitted at index 14 and released at 15.
GOOD = bundle_of(LEAVES, "c7", {"admitted": 14, "released": 15})


def _edit(change: object) -> bytes:
    doc = json.loads(GOOD)
    change(doc)  # type: ignore[operator]
    return json.dumps(doc).encode()


def test_a_claims_admission_and_release_are_proven_in_the_signed_log() -> None:
    proven = check_bundle(GOOD, parse_vkeys(VKEY))
    assert proven.claim == "c7"
    assert [(e.kind, e.index) for e in proven.entries] == [("admitted", 14), ("released", 15)]
    assert proven.checkpoint.size == 300
    assert proven.entries[0].entry == LEAVES[14]


def test_pool_proof_check_says_what_was_proven_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "c7.json"
    bundle.write_bytes(GOOD)
    assert main(["proof", "check", str(bundle), "--vkey", VKEY, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["claim"] == "c7"
    assert out["size"] == 300
    assert out["origin"] == ORIGIN
    assert out["entries"] == [
        {"event": "admitted", "index": 14},
        {"event": "released", "index": 15},
    ]
    assert main(["proof", "check", str(bundle), "--vkey", VKEY]) == 0
    assert "claim c7: admitted at 14, released at 15" in capsys.readouterr().out


def test_a_file_of_several_vkeys_verifies_a_checkpoint_signed_by_any_of_them(
    tmp_path: Path,
) -> None:
    keys = tmp_path / "log.vkeys"
    other = log_verifier_key(OTHER, "pool.example/old").encode()
    keys.write_text(f"# keys of pool.example\n{other}\n\n{VKEY}\n")
    assert len(load_vkeys(str(keys))) == 2
    assert check_bundle(GOOD, load_vkeys(str(keys))).claim == "c7"
    # As `pool keys vkey --all` prints them: each key after the first entry it signs.
    keys.write_text(f"0 {other}\n120 {VKEY}\n")
    assert check_bundle(GOOD, load_vkeys(str(keys))).claim == "c7"


def test_a_checkpoint_not_signed_by_the_vkey_is_a_bad_signature() -> None:
    other = log_verifier_key(OTHER, ORIGIN).encode()
    with pytest.raises(CheckpointUnverified, match="no valid signature"):
        check_bundle(GOOD, parse_vkeys(other))


def test_a_checkpoint_signed_by_a_key_named_for_another_log_is_a_bad_signature() -> None:
    # A valid signature by a key the tenant holds, but published for another log: it vouches
    # for that log's checkpoints only.
    elsewhere = log_verifier_key(OTHER, "other.example/log")
    note = note_of(LEAVES, OTHER, ORIGIN, name="other.example/log")
    forged = json.loads(GOOD)
    forged["checkpoint"] = note.decode()
    data = json.dumps(forged).encode()
    with pytest.raises(CheckpointUnverified, match="by no key named by its origin"):
        check_bundle(data, (elsewhere,))


def test_a_forged_signature_by_the_vkey_is_a_bad_signature() -> None:
    def forge(doc: dict[str, object]) -> None:
        text = str(doc["checkpoint"])
        head, _, sig = text.rpartition(" ")
        raw = bytearray(base64.b64decode(sig))
        raw[-1] ^= 1
        doc["checkpoint"] = head + " " + b64encode(bytes(raw)) + "\n"

    with pytest.raises(CheckpointUnverified, match="invalid"):
        check_bundle(_edit(forge), parse_vkeys(VKEY))


def test_an_altered_proof_hash_is_a_proof_mismatch() -> None:
    def alter(doc: dict[str, list[dict[str, list[str]]]]) -> None:
        doc["entries"][1]["inclusion_b64"][3] = b64encode(bytes(32))

    with pytest.raises(ProofMismatch, match="entry 15"):
        check_bundle(_edit(alter), parse_vkeys(VKEY))


def test_another_entrys_bytes_under_the_proof_is_a_proof_mismatch() -> None:
    def swap(doc: dict[str, list[dict[str, object]]]) -> None:
        doc["entries"][0]["entry_b64"] = b64encode(LEAVES[16])

    with pytest.raises(ProofMismatch):
        check_bundle(_edit(swap), parse_vkeys(VKEY))


def test_an_index_past_the_checkpoint_is_a_proof_mismatch() -> None:
    def past(doc: dict[str, list[dict[str, object]]]) -> None:
        doc["entries"][0]["index"] = 300

    with pytest.raises(ProofMismatch, match="not in the checkpoint"):
        check_bundle(_edit(past), parse_vkeys(VKEY))


def test_a_proven_entry_of_another_claim_is_claim_not_in_entry() -> None:
    # Index 16 is c8's admission, proven honestly: but the bundle says c7.
    bundle = bundle_of(LEAVES, "c7", {"admitted": 16})
    with pytest.raises(ClaimNotInEntry, match="c8"):
        check_bundle(bundle, parse_vkeys(VKEY))


def test_an_admission_presented_as_a_release_is_claim_not_in_entry() -> None:
    bundle = bundle_of(LEAVES, "c7", {"released": 14})
    with pytest.raises(ClaimNotInEntry, match="event Admitted, not Released"):
        check_bundle(bundle, parse_vkeys(VKEY))


def test_a_proven_leaf_that_is_no_ledger_entry_is_claim_not_in_entry() -> None:
    leaves = [b"not an entry", *LEAVES[1:8]]
    bundle = bundle_of(leaves, "c0", {"admitted": 0})
    with pytest.raises(ClaimNotInEntry, match="not a pool/1 ledger entry"):
        check_bundle(bundle, parse_vkeys(VKEY))


def test_a_tenants_plain_claim_id_is_proven_by_its_namespaced_entries() -> None:
    # The service records a tenant's `c7` as `vision/c7` and shows it back as `c7`.
    leaves = seal_all(
        [
            admitted("vision/c7"),
            admitted("robotics/c7"),
            released("vision/c7"),
            released("robotics/c7"),
        ]
    )
    proven = check_bundle(
        bundle_of(leaves, "c7", {"admitted": 0, "released": 2}), parse_vkeys(VKEY)
    )
    assert (proven.claim, proven.ledger_claim) == ("c7", "vision/c7")
    assert check_bundle(bundle_of(leaves, "vision/c7", {"admitted": 0}), parse_vkeys(VKEY))
    # One claim a bundle: another tenant's c7 does not complete it.
    with pytest.raises(ClaimNotInEntry, match="entries before it record 'vision/c7'"):
        check_bundle(bundle_of(leaves, "c7", {"admitted": 0, "released": 3}), parse_vkeys(VKEY))
    for other in ("7", "vision", "robotics/c7", "/c7"):
        with pytest.raises(ClaimNotInEntry):
            check_bundle(bundle_of(leaves, other, {"admitted": 0}), parse_vkeys(VKEY))


def _set(path: tuple[object, ...], value: object) -> object:
    def change(doc: dict[str, object]) -> None:
        target: object = doc
        for key in path[:-1]:
            target = target[key]  # type: ignore[index]
        target[path[-1]] = value  # type: ignore[index]

    return change


HOSTILE: dict[str, bytes] = {
    "not JSON": b"{claim: c7",
    "not UTF-8": b'{"claim": "\xff"}',
    "an array": b"[]",
    "nested deeply": b"[" * 5000 + b"]" * 5000,
    "a key twice": b'{"claim": "c7", "claim": "c8", "checkpoint": "", "entries": []}',
    "an extra field": _edit(_set(("signed_by",), "me")),
    "no entries field": _edit(lambda d: d.pop("entries")),
    "no entries": _edit(_set(("entries",), [])),
    "17 entries": _edit(_set(("entries",), [{}] * 17)),
    "an empty claim": _edit(_set(("claim",), "")),
    "a number for the claim": _edit(_set(("claim",), 7)),
    "a checkpoint that is no note": _edit(_set(("checkpoint",), "hello\n")),
    "a checkpoint over the size bound": _edit(_set(("checkpoint",), "x" * 300_000)),
    "an unknown kind": _edit(_set(("entries", 0, "event"), "Progress")),
    "a boolean index": _edit(_set(("entries", 0, "index"), True)),
    "a negative index": _edit(_set(("entries", 0, "index"), -1)),
    "an index beyond uint64": _edit(_set(("entries", 0, "index"), 2**64)),
    "a float index": _edit(_set(("entries", 0, "index"), 14.0)),
    "an index given twice": _edit(_set(("entries", 1, "index"), 14)),
    "entry not base64": _edit(_set(("entries", 0, "entry_b64"), "!!!!")),
    "entry base64url": _edit(_set(("entries", 0, "entry_b64"), "-_-_")),
    "entry over 65535 bytes": _edit(_set(("entries", 0, "entry_b64"), "A" * 90_000)),
    "a proof of 65 hashes": _edit(
        _set(("entries", 0, "inclusion_b64"), [b64encode(bytes(32))] * 65)
    ),
    "a proof hash of 31 bytes": _edit(
        _set(("entries", 0, "inclusion_b64", 0), b64encode(bytes(31)))
    ),
    "a proof that is text": _edit(_set(("entries", 0, "inclusion_b64"), "abcd")),
    "an entry that is a list": _edit(_set(("entries", 0), [1, 2])),
    "over 4 MiB": b" " * (4 * 1024 * 1024 + 1),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_bundle_is_refused_by_name(case: str) -> None:
    with pytest.raises((BundleMalformed, CheckpointUnverified)):
        check_bundle(HOSTILE[case], parse_vkeys(VKEY))


@pytest.mark.parametrize("case", ["not JSON", "nested deeply", "a proof of 65 hashes"])
def test_pool_proof_check_refuses_a_hostile_bundle_in_one_line(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "bundle.json"
    bundle.write_bytes(HOSTILE[case])
    assert main(["proof", "check", str(bundle), "--vkey", VKEY]) == 1
    err = capsys.readouterr().err
    assert err.startswith("pool: bundle_malformed: "), err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "vkey",
    [
        "nobody+00000000+AAAA",
        log_verifier_key(WITNESS, "w").encode().replace("+AQ", "+BA", 1),
        "/no/such/file",
    ],
)
def test_a_bad_vkey_is_refused_by_name(vkey: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["proof", "check", "/dev/null", "--vkey", vkey]) == 1
    assert capsys.readouterr().err.startswith("pool: bundle_malformed: ")


def test_a_missing_bundle_file_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["proof", "check", str(tmp_path / "none.json"), "--vkey", VKEY]) == 1
    assert "cannot be read" in capsys.readouterr().err
