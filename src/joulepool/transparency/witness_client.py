"""The log's side of a C2SP witness: submit each new checkpoint with a consistency proof
and collect the witness's cosignature (c2sp.org/tlog-witness, add-checkpoint;
c2sp.org/tlog-cosignature, cosignature/v1; DESIGN.md §8).

    POST <url>add-checkpoint
    old <size the witness last cosigned>
    <base64 consistency proof hash>        (none when old is 0 or the same size)
    <blank line>
    <signed checkpoint note>

200 carries the witness's signature lines: only a cosignature/v1 line by the configured
witness key that verifies over this checkpoint counts. 409 with `text/x.tlog.size` names
the size the witness last cosigned: the request is sent again from there, once per size
named. A 409 naming a size larger than the checkpoint, or a 422 (the proof from the size it
holds does not verify, or an equal size with another root), means the witness holds a
checkpoint this log's tree does not extend: a fork alarm, never retried.

`[[c2sp_witness]]` entries of pool.toml (`url`, `vkey`) are read by `parse_witnesses`; the
witness's name is its vkey's. `collect_cosignatures` asks every configured witness about
one checkpoint, each from the size it last cosigned, for `pool serve` to add the lines to
the checkpoint it serves.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from joulepool.errors import InvalidInput, PoolError
from joulepool.ledger.checkpoint import Checkpoint, CheckpointRefused
from joulepool.ledger.merkle import HASH_SIZE
from joulepool.ledger.note import (
    ALG_COSIGNATURE_V1,
    NoteRefused,
    NoteSignature,
    VerifierKey,
    b64encode,
    open_note,
    parse_note,
)
from joulepool.transparency.errors import (
    Unreachable,
    WitnessInconsistent,
    WitnessProtocolError,
    WitnessRefused,
    WitnessUnavailable,
)
from joulepool.transparency.http import DEFAULT_TIMEOUT_S, check_url, request

SIZE_MEDIA_TYPE: Final = "text/x.tlog.size"
# c2sp.org/tlog-witness allows at most 63 proof lines: a proof between uint64 sizes fits.
MAX_PROOF_LINES: Final = 63
MAX_RESPONSE_BYTES: Final = 64 * 1024
MAX_WITNESSES: Final = 32
# Each 409 moves the old size to the one the witness names; a witness that keeps moving
# it (another log instance racing, or a witness misbehaving) is given up on after this.
MAX_ATTEMPTS: Final = 4
_ENTRY_KEYS: Final = frozenset({"url", "vkey"})

ProofFor = Callable[[int, int], list[bytes]]
"""PROOF(old, D[new]) of the log's tree (RFC 9162 §2.1.4.1), for 0 < old < new."""


@dataclass(frozen=True)
class WitnessConfig:
    """One `[[c2sp_witness]]`: the witness's base URL (ending in '/': add-checkpoint is
    `url` + "add-checkpoint") and its cosignature/v1 verifier key, which names it."""

    url: str
    vkey: VerifierKey

    @property
    def name(self) -> str:
        """The witness's name: its vkey's (c2sp.org/tlog-cosignature)."""
        return self.vkey.name

    @property
    def add_checkpoint_url(self) -> str:
        """Where add-checkpoint is posted (API.md, `[[c2sp_witness]]`)."""
        return self.url + "add-checkpoint"


def parse_witness(entry: object, where: str = "c2sp_witness") -> WitnessConfig:
    """One `[[c2sp_witness]]` table: `url` (http or https; a missing final '/' is added) and
    `vkey`, a cosignature/v1 (0x04) verifier key (API.md, pool.toml; c2sp.org/tlog-witness)."""
    if not isinstance(entry, dict):
        raise InvalidInput(where, "must be a table with url and vkey")
    unknown = sorted(str(k)[:48] for k in entry.keys() - _ENTRY_KEYS)
    missing = sorted(_ENTRY_KEYS - entry.keys())
    if unknown or missing:
        near = [m for k in unknown for m in difflib.get_close_matches(k, sorted(_ENTRY_KEYS), 1)]
        hint = f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""
        raise InvalidInput(where, f"unknown field(s) {unknown}, missing {missing}{hint}")
    url, vkey_text = entry["url"], entry["vkey"]
    if not isinstance(url, str):
        raise InvalidInput(f"{where}.url", "must be a string")
    try:
        check_url(url, f"{where}.url")
    except Unreachable as exc:
        raise InvalidInput(f"{where}.url", str(exc)) from None
    if "?" in url:
        raise InvalidInput(f"{where}.url", "must hold no query: add-checkpoint is appended to it")
    if url.rstrip("/").endswith("/add-checkpoint"):
        # The endpoint itself, not its base: appending would post to .../add-checkpoint/add-checkpoint.
        raise InvalidInput(
            f"{where}.url", "is the add-checkpoint endpoint; give its base URL, ending in '/'"
        )
    if not isinstance(vkey_text, str):
        raise InvalidInput(f"{where}.vkey", "must be a verifier key string")
    try:
        vkey = VerifierKey.parse(vkey_text.strip())
    except NoteRefused as exc:
        raise InvalidInput(f"{where}.vkey", exc.detail) from None
    if vkey.algorithm != ALG_COSIGNATURE_V1:
        raise InvalidInput(f"{where}.vkey", "must be a witness's cosignature/v1 (0x04) key")
    return WitnessConfig(url if url.endswith("/") else url + "/", vkey)


def parse_witnesses(entries: object) -> tuple[WitnessConfig, ...]:
    """Every `[[c2sp_witness]]` of a parsed pool.toml (absent: none), names distinct
    (API.md, pool.toml; c2sp.org/tlog-witness)."""
    if entries is None:
        return ()
    if not isinstance(entries, list):
        raise InvalidInput("c2sp_witness", "must be an array of tables ([[c2sp_witness]])")
    if len(entries) > MAX_WITNESSES:
        raise InvalidInput("c2sp_witness", f"lists more than {MAX_WITNESSES} witnesses")
    out: list[WitnessConfig] = []
    for i, entry in enumerate(entries):
        witness = parse_witness(entry, f"c2sp_witness[{i}]")
        if any(w.name == witness.name for w in out):
            raise InvalidInput(f"c2sp_witness[{i}].vkey", f"names {witness.name!r} again")
        out.append(witness)
    return tuple(out)


def request_body(old_size: int, proof: Sequence[bytes], note: bytes) -> bytes:
    """An add-checkpoint request body (c2sp.org/tlog-witness, add-checkpoint)."""
    lines = [f"old {old_size}\n", *(b64encode(p) + "\n" for p in proof), "\n"]
    return "".join(lines).encode("ascii") + note


def _proof(old: int, new: int, proof_for: ProofFor, witness: str) -> list[bytes]:
    if old in (0, new):
        return []
    proof = proof_for(old, new)
    if not isinstance(proof, list) or len(proof) > MAX_PROOF_LINES:
        raise InvalidInput("proof", f"for {witness}: must be a list of at most 63 hashes")
    for p in proof:
        if not isinstance(p, bytes) or len(p) != HASH_SIZE:
            raise InvalidInput("proof", f"for {witness}: every hash must be {HASH_SIZE} bytes")
    return proof


def _size_of(body: bytes, witness: str) -> int:
    text = body.decode("ascii", "replace")
    digits = text[:-1] if text.endswith("\n") else ""
    if not digits or not digits.isdigit() or not digits.isascii() or len(digits) > 20:
        raise WitnessProtocolError(f"witness {witness}: a 409 body is not '<size>\\n'")
    if digits != "0" and digits.startswith("0"):
        raise WitnessProtocolError(f"witness {witness}: a 409 size has a leading zero")
    return int(digits)


def _cosignatures(witness: WitnessConfig, text: str, body: bytes) -> list[NoteSignature]:
    try:
        lines = body.decode("utf-8")
    except UnicodeDecodeError:
        raise WitnessProtocolError(f"witness {witness.name}: a 200 body is not UTF-8") from None
    # The answer's lines are signatures of the checkpoint's text: read and verified as the
    # note they make with it, so a line by another key is ignored and a bad one refused.
    try:
        opened = open_note(text + "\n" + lines, [witness.vkey])
    except NoteRefused as exc:
        raise WitnessProtocolError(
            f"witness {witness.name}: no valid cosignature by its key in the 200 answer: "
            f"{exc.detail}"
        ) from None
    return [sig for _, sig in opened.verified]


def submit(
    witness: WitnessConfig,
    checkpoint_note: bytes,
    old_size: int,
    proof_for: ProofFor,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[NoteSignature]:
    """Ask `witness` to cosign `checkpoint_note` (c2sp.org/tlog-witness, add-checkpoint),
    starting from `old_size`, the size it is believed to have last cosigned (0: none), and
    answer its verified cosignature/v1 lines (c2sp.org/tlog-cosignature)."""
    try:
        note = parse_note(checkpoint_note)
        checkpoint = Checkpoint.parse(note.text)
    except (NoteRefused, CheckpointRefused) as exc:
        raise InvalidInput("checkpoint_note", str(exc)) from None
    size = checkpoint.size
    if isinstance(old_size, bool) or not isinstance(old_size, int) or old_size < 0:
        raise InvalidInput("old_size", "must be a non-negative integer")
    name = witness.name
    tried: set[int] = set()
    for _ in range(MAX_ATTEMPTS):
        if old_size > size:
            raise WitnessInconsistent(
                f"witness {name} has cosigned size {old_size}, larger than this checkpoint's "
                f"{size}: the log was rolled back, or the witness follows a fork",
                b"",
                bytes(checkpoint_note),
            )
        tried.add(old_size)
        body = request_body(old_size, _proof(old_size, size, proof_for, name), checkpoint_note)
        try:
            answer = request(
                witness.add_checkpoint_url,
                MAX_RESPONSE_BYTES,
                body=body,
                content_type="text/plain; charset=utf-8",
                timeout_s=timeout_s,
            )
        except Unreachable as exc:
            raise WitnessUnavailable(f"witness {name}: {exc.detail}") from None
        if answer.status == 200:
            return _cosignatures(witness, note.text, answer.body)
        if answer.status == 409:
            if answer.content_type != SIZE_MEDIA_TYPE:
                raise WitnessProtocolError(
                    f"witness {name}: a 409 answer is {answer.content_type!r}, not {SIZE_MEDIA_TYPE}"
                )
            known = _size_of(answer.body, name)
            if known in tried:
                raise WitnessProtocolError(
                    f"witness {name}: 409 names size {known}, which was already sent"
                )
            old_size = known
            continue
        detail = answer.body[:200].decode("utf-8", "replace").strip() or "(no body)"
        if answer.status == 422:
            raise WitnessInconsistent(
                f"witness {name} refused the consistency proof from size {old_size} to {size} "
                f"(422: {detail}): it holds a checkpoint this tree does not extend",
                b"",
                bytes(checkpoint_note),
            )
        if answer.status == 503:
            raise WitnessUnavailable(f"witness {name}: HTTP 503: {detail}")
        raise WitnessRefused(name, answer.status, detail)
    raise WitnessUnavailable(
        f"witness {name}: still answered 409 after {MAX_ATTEMPTS} sizes; another submitter "
        "may be racing this one"
    )


@dataclass(frozen=True)
class Collected:
    """One checkpoint's round of every witness (c2sp.org/tlog-witness): the cosignature
    lines collected, the size each witness that cosigned now holds (the old size to send it
    next), and each other witness's refusal, by name. `alarms` are the refusals that are
    fork alarms: evidence for the operator, never to be retried past."""

    signatures: tuple[NoteSignature, ...]
    sizes: dict[str, int]
    failures: dict[str, PoolError]

    @property
    def alarms(self) -> dict[str, WitnessInconsistent]:
        """The witnesses that hold a checkpoint this tree does not extend."""
        return {n: e for n, e in self.failures.items() if isinstance(e, WitnessInconsistent)}


def collect_cosignatures(
    witnesses: Sequence[WitnessConfig],
    checkpoint_note: bytes,
    sizes: Mapping[str, int],
    proof_for: ProofFor,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Collected:
    """Submit `checkpoint_note` to every witness, each from the size it was last known to
    hold (`sizes`, by name; 0 when unknown: its 409 corrects it), one failing never
    stopping the others (c2sp.org/tlog-witness, add-checkpoint; DESIGN.md §8)."""
    try:
        size = Checkpoint.parse(parse_note(checkpoint_note).text).size
    except (NoteRefused, CheckpointRefused) as exc:
        raise InvalidInput("checkpoint_note", str(exc)) from None
    signatures: list[NoteSignature] = []
    held: dict[str, int] = {}
    failures: dict[str, PoolError] = {}
    for witness in witnesses:
        try:
            got = submit(
                witness, checkpoint_note, sizes.get(witness.name, 0), proof_for, timeout_s=timeout_s
            )
        except PoolError as exc:
            failures[witness.name] = exc
            continue
        signatures.extend(got)
        held[witness.name] = size
    return Collected(tuple(signatures), held, failures)
