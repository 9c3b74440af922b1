"""Build the byte-exact ledger vectors (DESIGN.md §4) from first principles.

This script deliberately does not import joulepool: it lays out each receipt with cbor2
and PyNaCl directly from DESIGN.md §4's text, so the vectors check the implementation
against an independent construction rather than against its own output. Ed25519 is
deterministic, so fixed seeds give fixed bytes; running it again rewrites identical files.

    .venv/bin/python conformance/generators/ledger_vectors.py conformance/vectors
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import cbor2
from nacl.signing import SigningKey

STEWARD = "steward-1"
STEWARD_SEED = bytes(range(32))
OTHER_SEED = bytes(range(32, 64))
WITNESS = "auditor"
WITNESS_SEED = bytes(range(64, 96))
GENESIS = bytes(32)


def key(seed: bytes) -> SigningKey:
    return SigningKey(seed)


def det(obj: Any) -> bytes:
    # Core deterministic encoding: for these maps (text keys, or ints 1 and 4) cbor2's
    # canonical mode, which sorts length-first, gives RFC 8949 §4.2.1's bytewise order.
    return bytes(cbor2.dumps(obj, canonical=True))


def sign1(core_bytes: bytes, kid: str, signer: SigningKey) -> bytes:
    protected = det({1: -8, 4: kid.encode()})
    to_sign = det(["Signature1", protected, b"", core_bytes])
    signature = signer.sign(to_sign).signature
    return det(cbor2.CBORTag(18, [protected, {}, core_bytes, signature]))


def address(entry: bytes) -> bytes:
    return hashlib.sha256(entry).digest()


def admitted(
    seq: int, prev: bytes | str, claim: str, ent: str, uj: int, grade: str, **extra: Any
) -> dict[str, Any]:
    core: dict[str, Any] = {
        "pool_receipt": 1,
        "seq": seq,
        "prev": prev,
        "steward": STEWARD,
        "at_ms": 1_764_000_000_000 + seq,
        "event": "admitted",
        "claim": claim,
        "entitlement": ent,
        "gang_size": 1,
        "devices_per_member": 2,
        "reserved_uj": uj,
        "grade": grade,
        "borrowed_uj": 0,
    }
    core.update(extra)
    return core


def released(seq: int, prev: bytes | str, claim: str, uj: int, grade: str) -> dict[str, Any]:
    return {
        "pool_receipt": 1,
        "seq": seq,
        "prev": prev,
        "steward": STEWARD,
        "at_ms": 1_764_000_000_000 + seq,
        "event": "released",
        "claim": claim,
        "actual_uj": uj,
        "grade": grade,
    }


def chain(
    cores: list[dict[str, Any]], signer: SigningKey | None = None, kid: str = STEWARD
) -> list[bytes]:
    """Seal cores in order, filling each `prev` with the address of the one before."""
    out: list[bytes] = []
    prev = GENESIS
    for core in cores:
        if core.get("prev") == "auto":
            core["prev"] = prev
        entry = sign1(det(core), kid, signer or key(STEWARD_SEED))
        out.append(entry)
        prev = address(entry)
    return out


def good_ledger() -> list[bytes]:
    return chain(
        [
            admitted(0, "auto", "job-1", "vision", 5_000_000, "Estimator", **{"class": "train"}),
            admitted(
                1, "auto", "job-2", "language", 7_000_000, "ModelBased", borrowed_uj=1_000_000
            ),
            released(2, "auto", "job-1", 4_200_000, "HwShunt"),
        ]
    )


def pub(seed: bytes) -> str:
    return bytes(key(seed).verify_key).hex()


def vector(
    name: str, section: str, must: str, title: str, case: dict[str, Any], expect: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    return name, {"section": section, "must": must, "title": title, "case": case, "expect": expect}


def replay_case(entries: list[bytes], public_key: str | None = None) -> dict[str, Any]:
    return {
        "op": "replay",
        "steward": STEWARD,
        "public_key_hex": public_key or pub(STEWARD_SEED),
        "ledger_hex": b"".join(entries).hex(),
    }


def refused(index: int, error: str) -> dict[str, Any]:
    return {"ok": False, "error": error, "index": index}


def build() -> list[tuple[str, dict[str, Any]]]:
    good = good_ledger()
    head = address(good[-1])
    vs = []
    seal_events = [
        {
            "event": "admitted",
            "at_ms": 1_764_000_000_000,
            "claim": "job-1",
            "entitlement": "vision",
            "gang_size": 1,
            "devices_per_member": 2,
            "reserved": {"uj": 5_000_000, "grade": "Estimator"},
            "borrowed_uj": 0,
            "class": "train",
        },
        {
            "event": "admitted",
            "at_ms": 1_764_000_000_001,
            "claim": "job-2",
            "entitlement": "language",
            "gang_size": 1,
            "devices_per_member": 2,
            "reserved": {"uj": 7_000_000, "grade": "ModelBased"},
            "borrowed_uj": 1_000_000,
        },
        {
            "event": "released",
            "at_ms": 1_764_000_000_002,
            "claim": "job-1",
            "actual": {"uj": 4_200_000, "grade": "HwShunt"},
        },
    ]
    vs.append(
        vector(
            "13-6.5-seal-byte-exact",
            "6.5",
            "7.13",
            "Three events sealed as pool/1 JCR-1 receipts: det-CBOR cores in COSE_Sign1 (EdDSA, kid = steward), chained from the genesis sentinel, byte for byte.",
            {
                "op": "seal",
                "steward": STEWARD,
                "secret_key_hex": STEWARD_SEED.hex(),
                "events": seal_events,
            },
            {"entries_hex": [e.hex() for e in good], "head_hex": head.hex()},
        )
    )
    usage = {
        "language": {"spent_uj": 7_000_000, "held_devices": 2},
        "vision": {"spent_uj": 4_200_000, "held_devices": 0},
    }
    vs.append(
        vector(
            "10-6.1-replay-rebuilds-usage",
            "6.1",
            "7.10",
            "Replaying a verified ledger rebuilds every entitlement's usage: job-2 still holds its reservation and devices.",
            replay_case(good),
            {
                "ok": True,
                "length": 3,
                "head_hex": head.hex(),
                "usage": usage,
                "open_claims": ["job-2"],
            },
        )
    )
    pair = chain(
        [
            admitted(0, "auto", "job-1", "vision", 5_000_000, "Estimator", **{"class": "train"}),
            released(1, "auto", "job-1", 4_200_000, "HwShunt"),
        ]
    )
    vs.append(
        vector(
            "11-6.2-release-replaces-reservation",
            "6.2",
            "7.11",
            "job-1 reserved 5,000,000 µJ and released at 4,200,000: vision is charged 4,200,000, not 9,200,000.",
            replay_case(pair),
            {
                "ok": True,
                "length": 2,
                "head_hex": address(pair[1]).hex(),
                "usage": {"vision": {"spent_uj": 4_200_000, "held_devices": 0}},
                "open_claims": [],
            },
        )
    )
    overrun = chain(
        [
            admitted(0, "auto", "job-7", "robotics", 2_000_000, "ModelBased"),
            released(1, "auto", "job-7", 3_500_000, "HwShunt"),
        ]
    )
    vs.append(
        vector(
            "11-6.2-overrun-charged-in-full",
            "6.2",
            "7.11",
            "job-7 reserved 2,000,000 µJ and spent 3,500,000: robotics is charged 3,500,000, neither the reservation nor the sum.",
            replay_case(overrun),
            {
                "ok": True,
                "length": 2,
                "head_hex": address(overrun[1]).hex(),
                "usage": {"robotics": {"spent_uj": 3_500_000, "held_devices": 0}},
                "open_claims": [],
            },
        )
    )
    vs.append(
        vector(
            "10-6.1-empty-ledger",
            "6.1",
            "7.10",
            "An empty ledger replays to length 0 at the genesis head, with no usage.",
            replay_case([]),
            {"ok": True, "length": 0, "head_hex": GENESIS.hex(), "usage": {}, "open_claims": []},
        )
    )
    # -- every error name of DESIGN.md §4, each at its index ---------------------------
    vs.append(
        vector(
            "13-6.5-malformed-not-cose",
            "6.5",
            "7.13",
            "Entry 1 is a well-formed CBOR item that is not a COSE_Sign1: malformed at index 1.",
            replay_case([good[0], det({"hello": 1})]),
            refused(1, "malformed"),
        )
    )
    vs.append(
        vector(
            "13-6.5-malformed-truncated",
            "6.5",
            "7.13",
            "The last entry is cut short (a torn write): malformed at its index, never a shorter history.",
            replay_case([good[0], good[1], good[2][:-5]]),
            refused(2, "malformed"),
        )
    )
    noncanon_core = det(admitted(1, address(good[0]), "job-2", "language", 7, "ModelBased"))
    # Re-encode `seq` 1 in a two-byte form (0x18 0x01): same value, not the shortest form.
    marker = b"\x63seq\x01"
    assert marker in noncanon_core
    widened = noncanon_core.replace(marker, b"\x63seq\x18\x01")
    vs.append(
        vector(
            "14-6.6-non-canonical-core",
            "6.6",
            "7.14",
            "Entry 1's core writes seq as 0x18 0x01, not the shortest form: validly signed, still refused as non_canonical.",
            replay_case([good[0], sign1(widened, STEWARD, key(STEWARD_SEED))]),
            refused(1, "non_canonical"),
        )
    )
    unsorted = cbor2.dumps(
        cbor2.CBORTag(
            18,
            [
                det({1: -8, 4: STEWARD.encode()}),
                {},
                det(admitted(0, GENESIS, "job-1", "vision", 5, "HwShunt")),
                b"\x00" * 64,
            ],
        )
    )
    env = cbor2.loads(unsorted)
    # A non-canonical envelope: the protected header's map with its keys reversed (4 before 1).
    reversed_protected = b"\xa2\x04" + cbor2.dumps(STEWARD.encode()) + b"\x01\x27"
    core0 = env.value[2]
    sig = key(STEWARD_SEED).sign(det(["Signature1", reversed_protected, b"", core0])).signature
    bad_env = det(cbor2.CBORTag(18, [reversed_protected, {}, core0, sig]))
    vs.append(
        vector(
            "14-6.6-non-canonical-protected-header",
            "6.6",
            "7.14",
            "Entry 0's protected header lists kid before alg (keys out of det-CBOR order): non_canonical, though the signature covers those bytes.",
            replay_case([bad_env]),
            refused(0, "non_canonical"),
        )
    )
    vs.append(
        vector(
            "13-6.5-unknown-signer",
            "6.5",
            "7.13",
            "Entry 1 names another kid than the ledger's steward: unknown_signer at index 1.",
            replay_case(
                [
                    good[0],
                    chain(
                        [admitted(1, address(good[0]), "job-2", "language", 7, "ModelBased")],
                        key(OTHER_SEED),
                        "intruder",
                    )[0],
                ]
            ),
            refused(1, "unknown_signer"),
        )
    )
    forged = chain(
        [admitted(1, address(good[0]), "job-2", "language", 7, "ModelBased")], key(OTHER_SEED)
    )[0]
    vs.append(
        vector(
            "13-6.5-bad-signature-other-key",
            "6.5",
            "7.13",
            "Entry 1 carries the steward's kid but was signed by another key: bad_signature at index 1.",
            replay_case([good[0], forged]),
            refused(1, "bad_signature"),
        )
    )
    vs.append(
        vector(
            "13-6.5-sealed-by-different-key-refused-at-0",
            "6.5",
            "7.13",
            "A whole ledger sealed by a different key is refused at index 0.",
            replay_case(good, pub(OTHER_SEED)),
            refused(0, "bad_signature"),
        )
    )
    vs.append(
        vector(
            "13-6.5-seq-mismatch-swap",
            "6.5",
            "7.13",
            "Entries 1 and 2 swapped, each validly signed: index 1 holds seq 2, seq_mismatch at 1.",
            replay_case([good[0], good[2], good[1]]),
            refused(1, "seq_mismatch"),
        )
    )
    vs.append(
        vector(
            "13-6.5-seq-mismatch-dropped",
            "6.5",
            "7.13",
            "Entry 1 dropped: the entry now at index 1 says seq 2, seq_mismatch at 1 rather than a shorter history.",
            replay_case([good[0], good[2]]),
            refused(1, "seq_mismatch"),
        )
    )
    vs.append(
        vector(
            "13-6.5-broken-chain",
            "6.5",
            "7.13",
            "Entry 1 is validly signed with the right seq but its prev is not entry 0's address: broken_chain at 1.",
            replay_case(
                [
                    good[0],
                    chain([admitted(1, bytes([7]) * 32, "job-2", "language", 7, "ModelBased")])[0],
                ]
            ),
            refused(1, "broken_chain"),
        )
    )
    vs.append(
        vector(
            "13-6.5-broken-chain-genesis",
            "6.5",
            "7.13",
            "Entry 0's prev is not the genesis sentinel of 32 zero bytes: broken_chain at 0.",
            replay_case(chain([admitted(0, bytes([1]) * 32, "job-1", "vision", 5, "HwShunt")])),
            refused(0, "broken_chain"),
        )
    )
    missing = admitted(1, address(good[0]), "job-2", "language", 7, "ModelBased")
    del missing["entitlement"]
    vs.append(
        vector(
            "13-6.5-malformed-fields",
            "6.5",
            "7.13",
            "Entry 1 is signed and chained but its admitted core lacks entitlement: malformed at 1.",
            replay_case([good[0], chain([missing])[0]]),
            refused(1, "malformed"),
        )
    )
    vs.append(
        vector(
            "12-6.4-release-never-admitted",
            "6.4",
            "7.12",
            "Entry 1 releases a claim never admitted: inconsistent_stream at 1, not a shorter history.",
            replay_case(
                [good[0], chain([released(1, address(good[0]), "ghost", 1, "HwShunt")])[0]]
            ),
            refused(1, "inconsistent_stream"),
        )
    )
    twice = [
        admitted(0, "auto", "job-1", "vision", 5, "HwShunt"),
        released(1, "auto", "job-1", 4, "HwShunt"),
        released(2, "auto", "job-1", 4, "HwShunt"),
    ]
    vs.append(
        vector(
            "12-6.4-second-release",
            "6.4",
            "7.12",
            "job-1 released twice: the second release, at index 2, is an inconsistent_stream.",
            replay_case(chain(twice)),
            refused(2, "inconsistent_stream"),
        )
    )
    again = [
        admitted(0, "auto", "job-1", "vision", 5, "HwShunt"),
        admitted(1, "auto", "job-1", "vision", 5, "HwShunt"),
    ]
    vs.append(
        vector(
            "12-6.4-admitted-twice",
            "6.4",
            "7.12",
            "job-1 admitted twice: refused at index 1 as inconsistent_stream.",
            replay_case(chain(again)),
            refused(1, "inconsistent_stream"),
        )
    )
    # -- witnesses -----------------------------------------------------------------------
    ledger_hex = b"".join(good).hex()

    def receipt(seed: bytes, kid: str, head_bytes: bytes, length: int) -> bytes:
        core = {
            "pool_witness": 1,
            "steward": STEWARD,
            "witness": kid,
            "head": head_bytes,
            "length": length,
            "at_ms": 1_764_000_100_000,
        }
        return sign1(det(core), kid, key(seed))

    good_receipt = receipt(WITNESS_SEED, WITNESS, address(good[1]), 2)
    vs.append(
        vector(
            "16-6.7-witness-sign-byte-exact",
            "6.7",
            "7.16",
            "A pool-witness/1 receipt over the head after 2 entries, byte for byte.",
            {
                "op": "witness",
                "steward": STEWARD,
                "witness": WITNESS,
                "witness_secret_key_hex": WITNESS_SEED.hex(),
                "ledger_hex": ledger_hex,
                "length": 2,
                "at_ms": 1_764_000_100_000,
                "steward_public_key_hex": pub(STEWARD_SEED),
            },
            {"receipt_hex": good_receipt.hex()},
        )
    )
    vs.append(
        vector(
            "15-6.7-witness-refuses-steward-key",
            "6.7",
            "7.15",
            "Asked to witness with the steward's own key, the witness operation refuses: witness_is_steward.",
            {
                "op": "witness",
                "steward": STEWARD,
                "witness": WITNESS,
                "witness_secret_key_hex": STEWARD_SEED.hex(),
                "ledger_hex": ledger_hex,
                "length": 3,
                "at_ms": 1_764_000_100_000,
                "steward_public_key_hex": pub(STEWARD_SEED),
            },
            {"error": "witness_is_steward"},
        )
    )

    def check(receipt_bytes: bytes | None, witness_pub: str) -> dict[str, Any]:
        case = {
            "op": "check_witness",
            "steward": STEWARD,
            "steward_public_key_hex": pub(STEWARD_SEED),
            "ledger_hex": ledger_hex,
            "witness": WITNESS,
            "witness_public_key_hex": witness_pub,
        }
        if receipt_bytes is not None:
            case["receipt_hex"] = receipt_bytes.hex()
        return case

    vs.append(
        vector(
            "16-6.8-witnessed-through-length",
            "6.8",
            "7.16",
            "A valid receipt at length 2 grades the 3-entry ledger witnessed through 2.",
            check(good_receipt, pub(WITNESS_SEED)),
            {"attestation": "witnessed", "through": 2, "length": 3},
        )
    )
    vs.append(
        vector(
            "16-6.8-unwitnessed-is-self-attested",
            "6.8",
            "7.16",
            "With no receipt the ledger is graded self-attested, not refused and not witnessed.",
            check(None, pub(WITNESS_SEED)),
            {"attestation": "self-attested", "length": 3},
        )
    )
    steward_receipt = receipt(STEWARD_SEED, WITNESS, address(good[2]), 3)
    vs.append(
        vector(
            "15-6.7-check-refuses-steward-key",
            "6.7",
            "7.15",
            "A receipt signed with the steward's key under a witness's name establishes nothing: witness_is_steward, self-attested.",
            check(steward_receipt, pub(STEWARD_SEED)),
            {"attestation": "self-attested", "length": 3, "error": "witness_is_steward"},
        )
    )
    tampered = bytearray(good_receipt)
    tampered[-1] ^= 0x01
    vs.append(
        vector(
            "17-6.8-bad-witness-signature",
            "6.8",
            "7.17",
            "A receipt whose signature does not verify under the witness's key: bad_witness_signature.",
            check(bytes(tampered), pub(WITNESS_SEED)),
            {"attestation": "self-attested", "length": 3, "error": "bad_witness_signature"},
        )
    )
    other_head = receipt(WITNESS_SEED, WITNESS, bytes([9]) * 32, 2)
    vs.append(
        vector(
            "17-6.8-covers-different-head",
            "6.8",
            "7.17",
            "A receipt that verifies but names another head at length 2 (a rewritten history): covers_different_head.",
            check(other_head, pub(WITNESS_SEED)),
            {"attestation": "self-attested", "length": 3, "error": "covers_different_head"},
        )
    )
    too_long = receipt(WITNESS_SEED, WITNESS, address(good[2]), 5)
    vs.append(
        vector(
            "17-6.8-covers-longer-ledger",
            "6.8",
            "7.17",
            "A receipt that verifies but covers length 5 of a 3-entry ledger (a truncated history): covers_different_head.",
            check(too_long, pub(WITNESS_SEED)),
            {"attestation": "self-attested", "length": 3, "error": "covers_different_head"},
        )
    )
    vs.extend(pinned_edge_cases(good, check, receipt, seal_events))
    return vs


# -- DESIGN.md §3 "Edge cases, pinned" ---------------------------------------------------


def sign1_raw(protected: bytes, core_bytes: bytes, signer: SigningKey) -> tuple[bytes, bytes]:
    """The protected header and signature of a COSE_Sign1 over `core_bytes`, header as given."""
    return protected, signer.sign(det(["Signature1", protected, b"", core_bytes])).signature


def with_header(protected: bytes, core: dict[str, Any]) -> bytes:
    """A det-CBOR COSE_Sign1 whose protected header is `protected` byte for byte, validly signed."""
    core_bytes = det(core)
    _, signature = sign1_raw(protected, core_bytes, key(STEWARD_SEED))
    return det(cbor2.CBORTag(18, [protected, {}, core_bytes, signature]))


def with_payload(payload: bytes) -> bytes:
    """A det-CBOR COSE_Sign1 with the steward's header around `payload`, validly signed."""
    protected = det({1: -8, 4: STEWARD.encode()})
    _, signature = sign1_raw(protected, payload, key(STEWARD_SEED))
    return det(cbor2.CBORTag(18, [protected, {}, payload, signature]))


def text_key(name: str) -> bytes:
    return det(name)


def repeated_key_map(core: dict[str, Any], repeat: str) -> bytes:
    """`core` in det-CBOR order with the pair of `repeat` written twice: well-formed CBOR."""
    pairs = sorted(((det(k), det(v)) for k, v in core.items()), key=lambda kv: kv[0])
    body = b""
    for k, v in pairs:
        body += k + v
        if k == det(repeat):
            body += k + v
    count = len(pairs) + 1
    assert count < 24
    return bytes([0xA0 | count]) + body


def pinned_edge_cases(
    good: list[bytes], check: Any, receipt: Any, seal_events: list[dict[str, Any]]
) -> list[tuple[str, dict[str, Any]]]:
    """Vectors for DESIGN.md §3 "Edge cases, pinned": the ledger and witness lines."""
    vs = []
    prev1 = address(good[0])
    entry1 = admitted(1, prev1, "job-2", "language", 7, "ModelBased")
    sound1 = chain([dict(entry1)])[0]
    assert sound1 == chain([admitted(1, prev1, "job-2", "language", 7, "ModelBased")])[0]

    # Not tag 18: a tag-55799 (self-described CBOR) wrapper around a sound entry.
    vs.append(
        vector(
            "13-6.5-malformed-tag-55799-wrapper",
            "6.5",
            "7.13",
            "Entry 1 is a sound, validly signed COSE_Sign1 wrapped in tag 55799 (self-described CBOR): not tag 18, malformed at 1.",
            replay_case([good[0], b"\xd9\xd9\xf7" + sound1]),
            refused(1, "malformed"),
        )
    )
    parts = cbor2.loads(sound1).value
    vs.append(
        vector(
            "13-6.5-malformed-untagged-array",
            "6.5",
            "7.13",
            "Entry 1 has the four parts of a sound COSE_Sign1 but no tag: not tag 18, malformed at 1.",
            replay_case([good[0], det(list(parts))]),
            refused(1, "malformed"),
        )
    )
    vs.append(
        vector(
            "13-6.5-malformed-other-tag",
            "6.5",
            "7.13",
            "Entry 1 carries the four parts of a sound COSE_Sign1 under tag 98 (COSE_Sign): not tag 18, malformed at 1.",
            replay_case([good[0], det(cbor2.CBORTag(98, list(parts)))]),
            refused(1, "malformed"),
        )
    )
    # Protected headers that are not exactly {1: -8, 4: kid}, each in det-CBOR key order
    # and validly signed, so nothing but the header's content is at fault.
    kid = det(STEWARD.encode())
    headers = {
        "true-key": (
            b"\xa2\x04" + kid + b"\xf5\x27",
            "{4: kid, true: -8}: a true key is not the integer 1",
        ),
        "float-key": (
            b"\xa2\x04" + kid + b"\xf9\x3c\x00\x27",
            "{4: kid, 1.0: -8}: a float key is not the integer 1",
        ),
        "extra-key": (
            b"\xa3\x01\x27\x03\x00\x04" + kid,
            "{1: -8, 3: 0, 4: kid}: a third parameter",
        ),
        "true-beside-1": (
            b"\xa3\x01\x27\x04" + kid + b"\xf5\x27",
            "{1: -8, 4: kid, true: -8}: a true key beside 1 is a third parameter, not a repeat",
        ),
        "other-alg": (b"\xa2\x01\x26\x04" + kid, "{1: -7 (ES256), 4: kid}: not EdDSA"),
        "text-keys": (
            b"\xa2" + text_key("1") + b"\x27" + text_key("4") + kid,
            '{"1": -8, "4": kid}: text keys, not integers',
        ),
    }
    for name, (protected, why) in headers.items():
        cbor2.loads(protected)  # each is well-formed CBOR
        vs.append(
            vector(
                f"13-6.5-malformed-protected-header-{name}",
                "6.5",
                "7.13",
                f"Entry 1's protected header is {why}; validly signed: malformed at 1.",
                replay_case([good[0], with_header(protected, entry1)]),
                refused(1, "malformed"),
            )
        )
    vs.append(
        vector(
            "14-6.6-non-canonical-protected-header-repeated-key",
            "6.6",
            "7.14",
            "Entry 1's protected header writes 1: -8 twice ({1: -8, 1: -8, 4: kid}), validly signed: well-formed, exactly alg and kid, but a repeated key: non_canonical at 1.",
            replay_case([good[0], with_header(b"\xa3\x01\x27\x01\x27\x04" + kid, entry1)]),
            refused(1, "non_canonical"),
        )
    )
    # Payloads that are not one well-formed CBOR item that is a map.
    payloads = {
        "array": (det(list(entry1.values())), "an array of the core's values"),
        "integer": (det(1), "the integer 1"),
        "float": (b"\xf9\x3e\x00", "the float 1.5"),
        "trailing-bytes": (det(entry1) + b"\x00", "a sound core followed by one byte 0x00"),
    }
    for name, (payload, why) in payloads.items():
        vs.append(
            vector(
                f"13-6.5-malformed-payload-{name}",
                "6.5",
                "7.13",
                f"Entry 1's payload is {why}, validly signed: not one CBOR map, malformed at 1.",
                replay_case([good[0], with_payload(payload)]),
                refused(1, "malformed"),
            )
        )
    repeated = repeated_key_map(entry1, "claim")
    cbor2.loads(repeated)  # well-formed
    vs.append(
        vector(
            "14-6.6-non-canonical-repeated-key",
            "6.6",
            "7.14",
            "Entry 1's core writes the pair claim: 'job-2' twice: well-formed CBOR, validly signed, but no det-CBOR map repeats a key: non_canonical at 1.",
            replay_case([good[0], with_payload(repeated)]),
            refused(1, "non_canonical"),
        )
    )
    empty_class = admitted(1, prev1, "job-2", "language", 7, "ModelBased", **{"class": ""})
    vs.append(
        vector(
            "13-6.5-malformed-empty-class",
            "6.5",
            "7.13",
            "Entry 1 is an admission declaring class '', signed and chained: an empty class names no class, malformed at 1.",
            replay_case([good[0], chain([empty_class])[0]]),
            refused(1, "malformed"),
        )
    )
    # Witness receipts at length 0 cover no entry.
    zero = receipt(WITNESS_SEED, WITNESS, GENESIS, 0)
    vs.append(
        vector(
            "16-6.8-receipt-at-length-0-stays-self-attested",
            "6.8",
            "7.16",
            "A valid receipt over the genesis head at length 0 covers no entry: the 3-entry ledger stays self-attested, with no error.",
            check(zero, pub(WITNESS_SEED)),
            {"attestation": "self-attested", "length": 3},
        )
    )
    empty_case = check(zero, pub(WITNESS_SEED))
    empty_case["ledger_hex"] = ""
    vs.append(
        vector(
            "16-6.8-receipt-over-empty-ledger-stays-self-attested",
            "6.8",
            "7.16",
            "A valid receipt at length 0 over an empty ledger: self-attested at length 0, never witnessed through 0.",
            empty_case,
            {"attestation": "self-attested", "length": 0},
        )
    )
    # An optional field given as null is absent.
    null_receipt = check(None, pub(WITNESS_SEED))
    null_receipt["receipt_hex"] = None
    vs.append(
        vector(
            "16-6.8-null-receipt-is-no-receipt",
            "6.8",
            "7.16",
            "receipt_hex given as null is absent: the ledger is graded self-attested as with no receipt.",
            null_receipt,
            {"attestation": "self-attested", "length": 3},
        )
    )
    ledger_hex = b"".join(good).hex()
    vs.append(
        vector(
            "16-6.7-witness-null-steward-key-is-absent",
            "6.7",
            "7.16",
            "steward_public_key_hex given as null is absent: the same receipt bytes as a witness told no steward key.",
            {
                "op": "witness",
                "steward": STEWARD,
                "witness": WITNESS,
                "witness_secret_key_hex": WITNESS_SEED.hex(),
                "ledger_hex": ledger_hex,
                "length": 2,
                "at_ms": 1_764_000_100_000,
                "steward_public_key_hex": None,
            },
            {"receipt_hex": receipt(WITNESS_SEED, WITNESS, address(good[1]), 2).hex()},
        )
    )
    null_class = [dict(e) for e in seal_events]
    assert "class" not in null_class[1]
    null_class[1]["class"] = None
    vs.append(
        vector(
            "13-6.5-seal-null-class-is-absent",
            "6.5",
            "7.13",
            "An admitted event whose class is null seals exactly as one with no class: byte for byte the same entries.",
            {
                "op": "seal",
                "steward": STEWARD,
                "secret_key_hex": STEWARD_SEED.hex(),
                "events": null_class,
            },
            {"entries_hex": [e.hex() for e in good], "head_hex": address(good[-1]).hex()},
        )
    )
    top = 2**64 - 1
    big = chain(
        [admitted(0, "auto", "job-1", "vision", top, "HwShunt", at_ms=top, borrowed_uj=top)]
    )
    vs.append(
        vector(
            "10-6.1-figures-at-2-64-minus-1-replay",
            "6.1",
            "7.10",
            "An admission whose reserved_uj, borrowed_uj and at_ms are 2**64 - 1, the largest figure an entry carries, replays.",
            replay_case(big),
            {
                "ok": True,
                "length": 1,
                "head_hex": address(big[0]).hex(),
                "usage": {"vision": {"spent_uj": top, "held_devices": 2}},
                "open_claims": ["job-1"],
            },
        )
    )
    over = [dict(seal_events[0], at_ms=2**64)]
    vs.append(
        vector(
            "13-6.5-seal-figure-past-2-64-minus-1-is-invalid-input",
            "6.5",
            "7.13",
            "An event whose at_ms is 2**64, past the range an entry can carry: invalid_input, nothing sealed.",
            {
                "op": "seal",
                "steward": STEWARD,
                "secret_key_hex": STEWARD_SEED.hex(),
                "events": over,
            },
            {"error": "invalid_input"},
        )
    )
    return vs


ROTATED_SEED = bytes(range(96, 128))
THIRD_SEED = bytes(range(128, 160))


def rotation(seq: int, incoming: bytes, signer: bytes, **override: Any) -> bytes:
    """A rotation statement (DESIGN.md §4): the outgoing key hands entries from `from_seq`
    on to the incoming public key (`seq` is its from_seq)."""
    core: dict[str, Any] = {
        "pool_key_rotation": 1,
        "steward": STEWARD,
        "from_seq": seq,
        "public_key": bytes(key(incoming).verify_key),
    }
    core.update(override)
    return sign1(det(core), STEWARD, key(signer))


def rotated_chain(cores: list[dict[str, Any]], signers: list[bytes]) -> list[bytes]:
    """Seal cores in order, entry i by `signers[i]`, filling each `prev`."""
    out: list[bytes] = []
    prev = GENESIS
    for core, seed in zip(cores, signers, strict=True):
        if core.get("prev") == "auto":
            core["prev"] = prev
        entry = sign1(det(core), STEWARD, key(seed))
        out.append(entry)
        prev = address(entry)
    return out


def good_cores() -> list[dict[str, Any]]:
    return [
        admitted(0, "auto", "job-1", "vision", 5_000_000, "Estimator", **{"class": "train"}),
        admitted(1, "auto", "job-2", "language", 7_000_000, "ModelBased", borrowed_uj=1_000_000),
        released(2, "auto", "job-1", 4_200_000, "HwShunt"),
    ]


def rotation_vectors() -> list[tuple[str, dict[str, Any]]]:
    """Key rotation (DESIGN.md §4): a valid rotation, and each refusal."""
    a, b, c = STEWARD_SEED, ROTATED_SEED, THIRD_SEED
    usage = {
        "language": {"spent_uj": 7_000_000, "held_devices": 2},
        "vision": {"spent_uj": 4_200_000, "held_devices": 0},
    }

    def ok(entries: list[bytes]) -> dict[str, Any]:
        return {
            "ok": True,
            "length": len(entries),
            "head_hex": address(entries[-1]).hex(),
            "usage": usage,
            "open_claims": ["job-2"],
        }

    def case(entries: list[bytes], statements: list[bytes]) -> dict[str, Any]:
        return {**replay_case(entries), "rotations_hex": [r.hex() for r in statements]}

    vs = []
    once = rotated_chain(good_cores(), [a, a, b])
    vs.append(
        vector(
            "18-6.5-key-rotation-valid",
            "6.5",
            "7.13",
            "Entries 0-1 sealed by the first key, entry 2 by the key a rotation statement signed by the first key puts in force from seq 2: the ledger verifies and replays as usual.",
            case(once, [rotation(2, b, a)]),
            ok(once),
        )
    )
    twice = rotated_chain(good_cores(), [a, b, c])
    vs.append(
        vector(
            "18-6.5-key-rotation-twice",
            "6.5",
            "7.13",
            "Two rotations in order (first key to second from seq 1, second to third from seq 2), each signed by the key it replaces: every entry verifies under the key in force at its index.",
            case(twice, [rotation(1, b, a), rotation(2, c, b)]),
            ok(twice),
        )
    )
    vs.append(
        vector(
            "18-6.5-key-rotation-old-key-after-from-seq",
            "6.5",
            "7.13",
            "Entry 2 is sealed by the outgoing key although the rotation hands seq 2 on to the incoming one: bad_signature at 2.",
            case(good_ledger(), [rotation(2, b, a)]),
            refused(2, "bad_signature"),
        )
    )
    early = rotated_chain(good_cores(), [a, b, b])
    vs.append(
        vector(
            "18-6.5-key-rotation-new-key-before-from-seq",
            "6.5",
            "7.13",
            "Entry 1 is sealed by the incoming key before its from_seq (2): bad_signature at 1.",
            case(early, [rotation(2, b, a)]),
            refused(1, "bad_signature"),
        )
    )
    vs.append(
        vector(
            "18-6.5-key-rotation-without-statement",
            "6.5",
            "7.13",
            "Entry 2 is sealed by another key and no rotation statement is given: bad_signature at 2.",
            replay_case(once),
            refused(2, "bad_signature"),
        )
    )
    vs.append(
        vector(
            "18-6.5-bad-rotation-signed-by-other-key",
            "6.5",
            "7.13",
            "A rotation statement signed by the incoming key, not the key it replaces: bad_rotation at statement 0, before any entry is read.",
            case(once, [rotation(2, b, b)]),
            refused(0, "bad_rotation"),
        )
    )
    vs.append(
        vector(
            "18-6.5-bad-rotation-from-seq-not-increasing",
            "6.5",
            "7.13",
            "The second statement's from_seq (2) does not exceed the first's (2): bad_rotation at statement 1.",
            case(twice, [rotation(2, b, a), rotation(2, c, b)]),
            refused(1, "bad_rotation"),
        )
    )
    vs.append(
        vector(
            "18-6.5-bad-rotation-second-signed-by-first-key",
            "6.5",
            "7.13",
            "The second statement is signed by the first key, which the first statement retired: bad_rotation at statement 1.",
            case(twice, [rotation(1, b, a), rotation(2, c, a)]),
            refused(1, "bad_rotation"),
        )
    )
    vs.append(
        vector(
            "18-6.5-bad-rotation-not-cose",
            "6.5",
            "7.13",
            "A rotation statement that is not a COSE_Sign1 (a CBOR text string): bad_rotation at statement 0.",
            case(once, [det("rotate")]),
            refused(0, "bad_rotation"),
        )
    )
    vs.append(
        vector(
            "18-6.5-bad-rotation-entry-as-statement",
            "6.5",
            "7.13",
            "A ledger entry, validly signed by the first key, given as a rotation statement: its keys are an event's, so bad_rotation at statement 0.",
            case(once, [good_ledger()[0]]),
            refused(0, "bad_rotation"),
        )
    )
    vs.append(
        vector(
            "18-6.5-bad-rotation-short-public-key",
            "6.5",
            "7.13",
            "A rotation statement whose public_key is 31 bytes: bad_rotation at statement 0.",
            case(once, [rotation(2, b, a, public_key=bytes(key(b).verify_key)[:31])]),
            refused(0, "bad_rotation"),
        )
    )
    vs.append(
        vector(
            "18-6.5-bad-rotation-float-from-seq",
            "6.5",
            "7.13",
            "A rotation statement whose from_seq is a float: bad_rotation at statement 0.",
            case(once, [rotation(2, b, a, from_seq=2.0)]),
            refused(0, "bad_rotation"),
        )
    )
    vs.append(
        vector(
            "18-6.5-bad-rotation-before-any-entry",
            "6.5",
            "7.13",
            "A bad statement and a ledger broken at entry 0: the statement is refused first (bad_rotation at 0), before any entry is read.",
            case([det("not an entry")], [rotation(2, b, b)]),
            refused(0, "bad_rotation"),
        )
    )
    vs.append(
        vector(
            "18-3-key-rotation-period-usage",
            "1.2",
            "7.10",
            "period_usage takes rotations_hex as replay does: a rotated ledger's usage in the period holding its entries.",
            {
                "op": "period_usage",
                "steward": STEWARD,
                "public_key_hex": pub(STEWARD_SEED),
                "ledger_hex": b"".join(once).hex(),
                "rotations_hex": [rotation(2, b, a).hex()],
                "period": {"kind": "none"},
                "at_ms": 1_764_000_000_002,
            },
            {
                "ok": True,
                "period": {"start_ms": None, "end_ms": None},
                "usage": usage,
                "open_claims": ["job-2"],
            },
        )
    )
    vs.append(
        vector(
            "18-3-bad-rotation-period-usage",
            "1.2",
            "7.10",
            "period_usage refuses a bad rotation statement as replay does.",
            {
                "op": "period_usage",
                "steward": STEWARD,
                "public_key_hex": pub(STEWARD_SEED),
                "ledger_hex": b"".join(once).hex(),
                "rotations_hex": [rotation(2, b, b).hex()],
                "period": {"kind": "none"},
                "at_ms": 1_764_000_000_002,
            },
            refused(0, "bad_rotation"),
        )
    )
    return vs


def main(folder: str) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for name, doc in build() + rotation_vectors():
        (out / f"{name}.json").write_text(
            json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    print(f"wrote {len(build()) + len(rotation_vectors())} ledger vectors to {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "conformance/vectors")
