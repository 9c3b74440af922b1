"""A claim's proof bundle, checked offline (API.md, Transparency; docs/transparency.md).

The bundle is what `GET /v1/claims/{id}/proof` answers, saved as a file:

    {"claim": "<id>", "checkpoint": "<signed checkpoint note>",
     "entries": [{"event": "admitted" | "released", "index": N,
                  "entry_b64": "<base64 of the entry's exact bytes>",
                  "inclusion_b64": ["<base64 hash>", ...]}, ...]}

It proves that the log whose key signed the checkpoint holds, at each index, an entry
recording that claim's admission or release: the checkpoint's signature under the tenant's
verifier key (c2sp.org/tlog-checkpoint), each RFC 9162 §2.1.3.2 inclusion proof of the
entry's leaf hash against the checkpoint's root, and each entry read as a pool/1 entry
(DESIGN.md §4) naming the claim with the event it names. Everything is bounded before
it is parsed: the file, the entries, the proofs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from joulepool.claim_id import NAMESPACE_SEPARATOR
from joulepool.errors import InvalidInput, PoolError
from joulepool.events import Admitted, Released
from joulepool.jsonio import loads_strict
from joulepool.ledger.checkpoint import Checkpoint
from joulepool.ledger.cose import open_envelope
from joulepool.ledger.entry import EntryMalformed, brief, event_of
from joulepool.ledger.merkle import HASH_SIZE, leaf_hash, verify_inclusion
from joulepool.ledger.note import MAX_NOTE_BYTES, NoteRefused, VerifierKey, b64decode, b64encode
from joulepool.ledger.tiles import MAX_ENTRY_BYTES
from joulepool.transparency.errors import BundleMalformed, ClaimNotInEntry, ProofMismatch
from joulepool.transparency.logkeys import open_log_checkpoint

# A tree of 2**64 leaves has inclusion proofs of at most 64 hashes.
MAX_PROOF_HASHES: Final = 64
# A claim has an admission and a release; room for events a later version may add.
MAX_BUNDLE_ENTRIES: Final = 16
MAX_BUNDLE_BYTES: Final = 4 * 1024 * 1024
KINDS: Final = {"admitted": Admitted, "released": Released}
_BUNDLE_KEYS: Final = frozenset({"claim", "checkpoint", "entries"})
_ENTRY_KEYS: Final = frozenset({"event", "index", "entry_b64", "inclusion_b64"})


@dataclass(frozen=True)
class ProvenEntry:
    """One entry the bundle proves: its kind, index and exact bytes."""

    kind: str
    index: int
    entry: bytes


@dataclass(frozen=True)
class ProvenClaim:
    """What a bundle proved: the claim, the id the ledger records it under (a tenant's
    claim is namespaced there), the checkpoint it was proven against, its entries."""

    claim: str
    ledger_claim: str
    checkpoint: Checkpoint
    note: bytes
    entries: tuple[ProvenEntry, ...]

    def summary(self) -> dict[str, Any]:
        """The JSON `pool proof check --json` prints (docs/transparency.md)."""
        return {
            "claim": self.claim,
            "ledger_claim": self.ledger_claim,
            "origin": self.checkpoint.origin,
            "size": self.checkpoint.size,
            "root_b64": b64encode(self.checkpoint.root_hash),
            "entries": [{"event": e.kind, "index": e.index} for e in self.entries],
        }


def _field(obj: dict[str, Any], keys: frozenset[str], where: str) -> None:
    unknown = sorted(brief(k) for k in obj.keys() - keys)
    missing = sorted(keys - obj.keys())
    if unknown or missing:
        raise BundleMalformed(where, f"unknown field(s) {unknown}, missing {missing}")


def _index(value: object, where: str) -> int:
    if type(value) is not int or not 0 <= value < 2**64:
        raise BundleMalformed(where, "must be an integer in [0, 2**64)")
    return value


def _hashes(value: object, where: str) -> list[bytes]:
    if not isinstance(value, list):
        raise BundleMalformed(where, "must be a list of base64 hashes")
    if len(value) > MAX_PROOF_HASHES:
        raise BundleMalformed(where, f"holds {len(value)} hashes, more than {MAX_PROOF_HASHES}")
    out: list[bytes] = []
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise BundleMalformed(f"{where}[{i}]", "must be base64 text")
        try:
            raw = b64decode(item, f"{where}[{i}]")
        except NoteRefused as exc:
            raise BundleMalformed(exc.field, exc.detail) from None
        if len(raw) != HASH_SIZE:
            raise BundleMalformed(f"{where}[{i}]", f"is {len(raw)} bytes, not {HASH_SIZE}")
        out.append(raw)
    return out


def parse_hashes(value: object, where: str) -> list[bytes]:
    """A JSON list of at most 64 standard-base64 SHA-256 hashes (API.md, Transparency)."""
    return _hashes(value, where)


def read_json(data: bytes, limit: int, where: str) -> dict[str, Any]:
    """A strict I-JSON object of at most `limit` bytes (CONFORMANCE.md), or `BundleMalformed`."""
    if len(data) > limit:
        raise BundleMalformed(where, f"is longer than {limit} bytes")
    try:
        value = loads_strict(data)
    except InvalidInput as exc:
        raise BundleMalformed(where, str(exc)) from None
    if not isinstance(value, dict):
        raise BundleMalformed(where, "must be a JSON object")
    return value


def note_bytes(value: object, where: str) -> bytes:
    """A signed note carried as a JSON string, bounded (c2sp.org/signed-note)."""
    if not isinstance(value, str):
        raise BundleMalformed(where, "must be the signed note's text")
    if len(value) > MAX_NOTE_BYTES:
        raise BundleMalformed(where, f"is longer than {MAX_NOTE_BYTES} characters")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise BundleMalformed(where, "is not valid UTF-8") from None


def _names(ledger_id: str, claim: str) -> bool:
    """Whether the ledger's id is the bundle's claim: the same id, or the claim in a tenant's
    namespace, `<root>/<claim>`, which is how the service records a tenant's claim and
    shows it back to that tenant by its plain id (API.md "Additions", claim_id.py)."""
    if ledger_id == claim:
        return True
    root, sep, own = ledger_id.rpartition(NAMESPACE_SEPARATOR)
    return bool(sep and root) and NAMESPACE_SEPARATOR not in claim and own == claim


def _entry_claim(raw: bytes, kind: str, claim: str, where: str) -> str:
    try:
        env = open_envelope(raw)
        # The entry's own steward names it: which key sealed it is the ledger's business;
        # that the log holds it is what the inclusion proof shows.
        event = event_of(env.core, env.kid)
    except (PoolError, EntryMalformed) as exc:
        raise ClaimNotInEntry(f"{where}: not a pool/1 ledger entry: {exc}") from None
    if not isinstance(event, KINDS[kind]):
        raise ClaimNotInEntry(
            f"{where}: records an event {type(event).__name__}, not {KINDS[kind].__name__}"
        )
    if not _names(event.claim, claim):
        raise ClaimNotInEntry(
            f"{where}: records claim {brief(event.claim)}, not the bundle's {brief(claim)}"
        )
    return event.claim


def check_bundle(data: bytes, keys: Sequence[VerifierKey]) -> ProvenClaim:
    """Verify a proof bundle offline against the log's verifier keys (API.md, Transparency;
    c2sp.org/tlog-checkpoint; RFC 9162 §2.1.3.2; DESIGN.md §4 entries)."""
    doc = read_json(data, MAX_BUNDLE_BYTES, "bundle")
    _field(doc, _BUNDLE_KEYS, "bundle")
    claim = doc["claim"]
    if not isinstance(claim, str) or not claim or len(claim) > 1024:
        raise BundleMalformed("claim", "must be a claim id (non-empty text)")
    signed = open_log_checkpoint(note_bytes(doc["checkpoint"], "checkpoint"), keys)
    checkpoint = signed.checkpoint
    entries = doc["entries"]
    if not isinstance(entries, list) or not entries:
        raise BundleMalformed("entries", "must be a non-empty list")
    if len(entries) > MAX_BUNDLE_ENTRIES:
        raise BundleMalformed("entries", f"holds more than {MAX_BUNDLE_ENTRIES} entries")
    proven: list[ProvenEntry] = []
    ledger_claim = ""
    seen: set[int] = set()
    for i, item in enumerate(entries):
        where = f"entries[{i}]"
        if not isinstance(item, dict):
            raise BundleMalformed(where, "must be an object")
        _field(item, _ENTRY_KEYS, where)
        kind = item["event"]
        if not isinstance(kind, str) or kind not in KINDS:
            raise BundleMalformed(f"{where}.event", f"must be one of {sorted(KINDS)}")
        index = _index(item["index"], f"{where}.index")
        if index in seen:
            raise BundleMalformed(f"{where}.index", f"{index} is given twice")
        seen.add(index)
        text = item["entry_b64"]
        if not isinstance(text, str) or len(text) > 4 * (MAX_ENTRY_BYTES // 3 + 1):
            raise BundleMalformed(f"{where}.entry_b64", "must be base64 of at most 65,535 bytes")
        try:
            raw = b64decode(text, f"{where}.entry_b64")
        except NoteRefused as exc:
            raise BundleMalformed(exc.field, exc.detail) from None
        proof = _hashes(item["inclusion_b64"], f"{where}.inclusion_b64")
        if index >= checkpoint.size:
            raise ProofMismatch(
                f"{where}: index {index} is not in the checkpoint's tree of {checkpoint.size}"
            )
        if not verify_inclusion(
            leaf_hash(raw), index, checkpoint.size, proof, checkpoint.root_hash
        ):
            raise ProofMismatch(
                f"{where}: the inclusion proof of entry {index} does not lead to the "
                f"checkpoint's root at size {checkpoint.size}"
            )
        ledger_id = _entry_claim(raw, kind, claim, where)
        # A tenant's `c7` may be `vision/c7` in the ledger; one bundle is one claim, so
        # every entry must record the same one.
        if proven and ledger_id != ledger_claim:
            raise ClaimNotInEntry(
                f"{where}: records claim {brief(ledger_id)}, but entries before it record "
                f"{brief(ledger_claim)}"
            )
        ledger_claim = ledger_id
        proven.append(ProvenEntry(kind, index, raw))
    return ProvenClaim(claim, ledger_claim, checkpoint, signed.note, tuple(proven))


def bundle_json(
    claim: str, note: bytes, entries: Sequence[tuple[str, int, bytes, Sequence[bytes]]]
) -> bytes:
    """A bundle in the shape `check_bundle` reads, from (kind, index, entry bytes, proof)
    tuples (API.md, Transparency): what `GET /v1/claims/{id}/proof` answers."""
    doc = {
        "claim": claim,
        "checkpoint": note.decode("utf-8"),
        "entries": [
            {
                "event": kind,
                "index": index,
                "entry_b64": b64encode(raw),
                "inclusion_b64": [b64encode(p) for p in proof],
            }
            for kind, index, raw, proof in entries
        ],
    }
    return json.dumps(doc, sort_keys=True).encode("utf-8") + b"\n"
