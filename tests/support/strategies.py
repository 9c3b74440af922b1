"""Hypothesis strategies and a reference verifier for fuzzing DESIGN.md §4 (standard §6.5, §6.6).

Cores start as valid `admitted` / `released` maps written by the project's own `core_of`,
then are mutated into every CBOR type the decoder can produce (integers up to 2**64 - 1 and
down to -2**64, text, bytes, maps with int, text and bytes keys, nested maps, arrays, bools,
null, undefined, simple values, floats, tags) and into non-canonical encodings of profile
values. `encode` is an independent det-CBOR encoder (RFC 8949 §4.2.1) that also writes what
the profile forbids, so a core the project's `seal` would refuse can still be sealed with a
real signature over the real Sig_structure: the signature check passes and the later checks
of DESIGN.md §4 are reached. `verdict` is the reference model: DESIGN.md §4's checks, written
from the text, in its order, against which every verifying surface is compared.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import cbor2
from hypothesis import strategies as st
from nacl.signing import SigningKey

from joulepool.events import Admitted, Event, Released
from joulepool.grade import Energy, Grade
from joulepool.ledger.entry import core_of
from tests.support.ledgers import OTHER, STEWARD, WITNESS

GENESIS: Final = bytes(32)
KID: Final = STEWARD.kid
ERRORS: Final = frozenset(
    {
        "malformed",
        "non_canonical",
        "unknown_signer",
        "bad_signature",
        "seq_mismatch",
        "broken_chain",
        "inconsistent_stream",
    }
)
"""DESIGN.md §4's error names: the only refusals a verifier may give an entry."""

MAX_NESTING: Final = 8
"""Containers a core may nest, itself included (cbor.MAX_NESTING); deeper is `malformed`."""

MAX_ITEM_BYTES: Final = 1 << 20
"""The largest item the decoder reads (cbor.MAX_ITEM_BYTES); a longer payload is `malformed`."""

INTRUDER: Final = SigningKey(bytes(range(3, 35)))


# -- values outside the profile's canonical form --------------------------------------------


class _Odd:
    """A value written in a form det-CBOR forbids; it decodes to a profile value (or not)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


class Wide(_Odd):
    """An integer whose argument is longer than its shortest form."""


class LongHeader(_Odd):
    """A text or byte string whose length header is longer than its shortest form."""


class Indefinite(_Odd):
    """A string, array or map of indefinite length."""


class Unsorted(_Odd):
    """A map (of two keys or more) whose keys are written in descending order."""


class Duplicated(_Odd):
    """A map (of one key or more) whose first key is written twice."""


class AsWritten(_Odd):
    """A map whose keys are written in the order given, sorted or not."""


def _head(major: int, arg: int, width: int | None = None) -> bytes:
    if width is None:
        if arg < 24:
            return bytes((major << 5 | arg,))
        width = 1 if arg < 0x100 else 2 if arg < 0x10000 else 4 if arg < 1 << 32 else 8
    info = {1: 24, 2: 25, 4: 26, 8: 27}[width]
    return bytes((major << 5 | info,)) + arg.to_bytes(width, "big")


def _int(value: int, width: int | None = None) -> bytes:
    return _head(0, value, width) if value >= 0 else _head(1, -1 - value, width)


def _pairs(obj: Mapping[Any, Any]) -> list[bytes]:
    return sorted(encode(k) + encode(v) for k, v in obj.items())


def encode(obj: Any) -> bytes:
    """det-CBOR of `obj` (RFC 8949 §4.2.1), with map keys sorted bytewise by their encoding.

    Also writes what det-CBOR forbids: bools, null, undefined, simple values, floats, tags,
    arrays, and the `_Odd` forms, so that a hostile core can be sealed exactly as chosen.
    """
    if obj is True or obj is False:
        return b"\xf5" if obj else b"\xf4"
    if obj is None:
        return b"\xf6"
    if obj is cbor2.undefined:
        return b"\xf7"
    if isinstance(obj, cbor2.CBORSimpleValue):
        return bytes((0xE0 | obj.value,)) if obj.value < 24 else b"\xf8" + bytes((obj.value,))
    if type(obj) is int:
        return _int(obj)
    if type(obj) is float:
        return bytes(cbor2.dumps(obj))  # any float is outside the profile, whatever its width
    if type(obj) is str:
        data = obj.encode("utf-8")
        return _head(3, len(data)) + data
    if type(obj) is bytes:
        return _head(2, len(obj)) + obj
    if isinstance(obj, list | tuple):
        return _head(4, len(obj)) + b"".join(map(encode, obj))
    if isinstance(obj, dict):
        # A key's encoding is self-delimiting: sorting pairs sorts them by key bytewise.
        return _head(5, len(obj)) + b"".join(_pairs(obj))
    if isinstance(obj, cbor2.CBORTag):
        return _head(6, obj.tag) + encode(obj.value)
    if isinstance(obj, Wide):
        value: int = obj.value
        return _int(value, 8)
    if isinstance(obj, LongHeader):
        data = obj.value.encode("utf-8") if isinstance(obj.value, str) else obj.value
        major = 3 if isinstance(obj.value, str) else 2
        return _head(major, len(data), 8) + data
    if isinstance(obj, Indefinite):
        inner = obj.value
        if isinstance(inner, str):
            return b"\x7f" + encode(inner) + b"\xff"
        if isinstance(inner, bytes):
            return b"\x5f" + encode(inner) + b"\xff"
        if isinstance(inner, list):
            return b"\x9f" + b"".join(map(encode, inner)) + b"\xff"
        return b"\xbf" + b"".join(_pairs(inner)) + b"\xff"
    if isinstance(obj, Unsorted):
        return _head(5, len(obj.value)) + b"".join(sorted(_pairs(obj.value), reverse=True))
    if isinstance(obj, AsWritten):
        return _head(5, len(obj.value)) + b"".join(
            encode(k) + encode(v) for k, v in obj.value.items()
        )
    if isinstance(obj, Duplicated):
        pairs = _pairs(obj.value)
        return _head(5, len(pairs) + 1) + b"".join(pairs) + pairs[0]
    raise TypeError(f"no CBOR for {obj!r}")


def is_map(obj: Any) -> bool:
    """Whether `obj` decodes as a CBOR map, in whatever form it is written."""
    return isinstance(obj, dict) or (
        isinstance(obj, Indefinite | Unsorted | Duplicated | AsWritten)
        and isinstance(obj.value, dict)
    )


def nesting(obj: Any) -> int:
    """How many containers (maps, arrays, tags) the deepest item of `obj` sits in."""
    if isinstance(obj, _Odd):
        return nesting(obj.value) if not isinstance(obj, Wide | LongHeader) else 0
    if isinstance(obj, dict):
        return 1 + max((max(nesting(k), nesting(v)) for k, v in obj.items()), default=0)
    if isinstance(obj, list | tuple):
        return 1 + max(map(nesting, obj), default=0)
    if isinstance(obj, cbor2.CBORTag):
        return 1 + nesting(obj.value)
    return 0


def outside_profile(obj: Any) -> bool:
    """Whether `obj` holds anything det-CBOR's profile forbids (DESIGN.md §4 `non_canonical`):
    anything but integers, text, bytes and maps with such keys, or a non-canonical form."""
    kind = type(obj)
    if kind is int or kind is str or kind is bytes:
        return False
    if kind is dict:
        return any(
            type(k) not in (int, str, bytes) or outside_profile(k) or outside_profile(v)
            for k, v in obj.items()
        )
    return True


# -- CBOR values of every type the decoder can produce --------------------------------------

EDGE_INTS: Final = (0, 1, 23, 24, 255, 256, 65535, 65536, 2**32, 2**63, 2**64 - 1)
ints = st.one_of(
    st.integers(-(2**64), 2**64 - 1),
    st.sampled_from(EDGE_INTS + tuple(-1 - n for n in EDGE_INTS)),
    st.integers(-30, 30),
)
texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "\n",
            "[bold]x[/bold]",
            ":smile:",
            "\u2028",
            "é",
            "\U0001f600",
            "x" * 300,
            "seq",
            "admitted",
            "released",
            "HwShunt",
            "steward",
        ]
    ),
)
byte_strings = st.one_of(st.binary(max_size=40), st.sampled_from([b"", bytes(32), b"seq"]))
TAGS: Final = (0, 1, 2, 3, 4, 5, 18, 21, 24, 25, 28, 29, 32, 55799, 256, 2**16, 2**64 - 1)
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 1.5, 2.0**64]),
)
odd_scalars = st.one_of(
    st.booleans(),
    st.none(),
    st.just(cbor2.undefined),
    st.sampled_from([0, 19, 23, 32, 255]).map(cbor2.CBORSimpleValue),
    floats,
)
scalars = st.one_of(ints, texts, byte_strings)
keys = st.one_of(
    texts,
    st.integers(-(2**64), 2**64 - 1),
    byte_strings,
    st.sampled_from(EDGE_INTS),
    st.booleans(),
    st.none(),
    st.sampled_from([0.0, 1.0, 1.5]),
)
profile_keys = st.one_of(texts, st.integers(-(2**64), 2**64 - 1), byte_strings)


def _wrapped(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Profile values written in a non-canonical form."""
    return st.one_of(
        st.integers(0, 2**32 - 1).map(Wide),
        st.integers(-(2**32), -1).map(Wide),
        st.one_of(st.text(max_size=8), st.binary(max_size=8)).map(LongHeader),
        st.one_of(st.text(max_size=8), st.binary(max_size=8)).map(Indefinite),
        st.lists(inner, max_size=3).map(Indefinite),
        st.dictionaries(profile_keys, inner, max_size=3).map(Indefinite),
        st.dictionaries(keys, inner, min_size=2, max_size=4).map(Unsorted),
        st.dictionaries(keys, inner, min_size=1, max_size=3).map(Duplicated),
    )


COLLIDING_KEYS: Final = ((1, 4), (1, 4), (1, 4), (0, 1), (1,), (0,), (-1, 1), (1, 2, 3))
"""Integer key tuples a decoder may have met already (every protected header's is (1, 4))."""


@st.composite
def colliding_maps(draw: st.DrawFn, inner: st.SearchStrategy[Any] = scalars) -> AsWritten:
    """A map whose keys equal integer keys in Python but not in CBOR (`true` is not 1, nor
    is 1.0), written in the integers' order: det-CBOR refuses it (`non_canonical`)."""
    ints_ = draw(st.sampled_from(COLLIDING_KEYS))
    twins = [
        draw(st.sampled_from([k, float(k), *([bool(k)] if k in (0, 1) else [])])) for k in ints_
    ]
    if all(type(k) is int for k in twins):
        twins[0] = float(twins[0])
    return AsWritten({k: draw(inner) for k in twins})


def _values(depth: int) -> st.SearchStrategy[Any]:
    if depth == 0:
        return st.one_of(scalars, odd_scalars)
    inner = _values(depth - 1)
    return st.one_of(
        scalars,
        odd_scalars,
        st.dictionaries(profile_keys, inner, max_size=4),
        st.dictionaries(keys, inner, max_size=3),
        st.lists(inner, max_size=4),
        st.builds(cbor2.CBORTag, st.sampled_from(TAGS), inner),
        _wrapped(inner),
        colliding_maps(inner),
    )


values = _values(3)
"""Any CBOR value, nested at most three containers deep (a core is one more: within MAX_NESTING)."""


# -- valid events, and the ledgers they make ------------------------------------------------

CLAIMS: Final = ("c0", "c1", "c2", "c3")
ENTITLEMENTS: Final = ("a", "b", "c")
figures = st.one_of(st.integers(0, 1000), st.sampled_from([0, 2**32, 2**63, 2**64 - 1]))
grades = st.sampled_from(list(Grade))


@st.composite
def admitted(draw: st.DrawFn, claim: str) -> Admitted:
    reserved = draw(figures)
    return Admitted(
        claim=claim,
        entitlement=draw(st.sampled_from(ENTITLEMENTS)),
        gang_size=draw(st.integers(1, 4) | st.just(2**64 - 1)),
        devices_per_member=draw(st.integers(1, 8)),
        reserved=Energy(reserved, draw(grades)),
        borrowed_uj=draw(st.integers(0, reserved) | st.just(reserved)),
        at_ms=draw(figures),
        class_=draw(st.none() | st.sampled_from(["train", "x", "é"])),
    )


@st.composite
def released(draw: st.DrawFn, claim: str) -> Released:
    return Released(claim, Energy(draw(figures), draw(grades)), draw(figures))


@st.composite
def histories(draw: st.DrawFn, max_size: int = 8) -> list[Event]:
    """A consistent history over a few claim ids, sometimes with an inconsistent event."""
    size = draw(st.integers(1, max_size))
    events: list[Event] = []
    running: list[str] = []
    fresh = iter(f"c{i}" for i in range(max_size))
    seen: list[str] = []
    for _ in range(size):
        kind = draw(st.sampled_from(["admit"] * 4 + ["release"] * 3 + ["stray"]))
        if kind == "release" and running:
            claim = draw(st.sampled_from(running))
            running.remove(claim)
            events.append(draw(released(claim)))
        elif kind == "stray":
            # Inconsistent on purpose: a claim admitted twice, or released unopened.
            claim = draw(st.sampled_from([*seen, *CLAIMS, "never"]))
            if draw(st.booleans()):
                events.append(draw(admitted(claim)))
            else:
                events.append(draw(released(claim)))
        else:
            claim = next(fresh)
            seen.append(claim)
            running.append(claim)
            events.append(draw(admitted(claim)))
    return events


AUTO: Final = "\x00auto"
"""Stands for `seq` or `prev` until sealing fills in the chained value."""
SEQ_OFFSETS: Final = tuple(f"{AUTO}{d:+d}" for d in (-2, -1, 1, 2))
"""Stand for a `seq` this far from the entry's own index, filled in when sealed."""
PREVS: Final = (GENESIS, b"\x01" * 32, hashlib.sha256(b"").digest())
"""Heads of no entry before (GENESIS is the right one at index 0 only)."""


@dataclass
class Planned:
    """One entry to seal: its core (any CBOR value) and how its envelope is built."""

    core: Any
    envelope: str = "good"


# Envelope variants, each with the refusal DESIGN.md §4's first checks give it (None: good).
ENVELOPES: Final[dict[str, str | None]] = {
    "good": None,
    "other_kid": "unknown_signer",
    "empty_kid": "unknown_signer",
    "other_key": "bad_signature",
    "flipped_signature": "bad_signature",
    "zero_signature": "bad_signature",
    "tag_17": "malformed",
    "untagged": "malformed",
    "tag_on_tag": "malformed",
    "three_items": "malformed",
    "five_items": "malformed",
    "as_map": "malformed",
    "protected_text": "malformed",
    "protected_not_cbor": "malformed",
    "protected_extra_label": "malformed",
    "protected_no_kid": "malformed",
    "alg_es256": "malformed",
    "kid_text": "malformed",
    "kid_not_utf8": "malformed",
    "unprotected_filled": "malformed",
    "unprotected_array": "malformed",
    "payload_text": "malformed",
    "payload_not_cbor": "malformed",
    "payload_truncated": "malformed",
    "payload_trailing": "malformed",
    "signature_63": "malformed",
    "signature_65": "malformed",
    "signature_text": "malformed",
    "trailing": "malformed",
    "tag_long_form": "non_canonical",
    "array_indefinite": "non_canonical",
    "unprotected_indefinite": "non_canonical",
    "protected_long_header": "non_canonical",
    "payload_long_header": "non_canonical",
    "signature_long_header": "non_canonical",
    "protected_unsorted": "non_canonical",
    "alg_wide": "non_canonical",
    "protected_repeated_label": "non_canonical",
    # DESIGN.md §3, "Edge cases, pinned": a tag-55799 wrapper is not tag 18, and a header
    # label `true` or 1.0 is not the integer 1.
    "self_described": "malformed",
    "true_label": "malformed",
    "float_label": "malformed",
}


def _sign(key: SigningKey, protected: bytes, payload: bytes) -> bytes:
    """Ed25519 over the real Sig_structure ["Signature1", protected, h'', payload] (RFC 9052)."""
    return bytes(key.sign(encode(["Signature1", protected, b"", payload])).signature)


def envelope(payload: bytes, variant: str = "good") -> bytes:
    """A COSE_Sign1 around `payload`, built and signed here with the steward's key, in the
    form `variant` names (ENVELOPES)."""
    key = STEWARD.signing_key
    alg: Any = -8
    kid_bytes: Any = KID.encode("utf-8")
    if variant == "other_kid":
        kid_bytes, key = b"intruder", INTRUDER
    elif variant == "empty_kid":
        kid_bytes = b""
    elif variant == "other_key":
        key = OTHER.signing_key
    elif variant == "kid_text":
        kid_bytes = KID
    elif variant == "kid_not_utf8":
        kid_bytes = b"\xffsteward"
    elif variant == "alg_es256":
        alg = -7
    elif variant == "alg_wide":
        alg = Wide(-8)
    header: Any = {1: alg, 4: kid_bytes}
    if variant == "protected_extra_label":
        header[5] = b"x"
    elif variant == "protected_no_kid":
        header = {1: alg}
    elif variant == "protected_unsorted":
        header = Unsorted(header)
    elif variant == "true_label":
        header = {True: alg, 4: kid_bytes}
    elif variant == "float_label":
        header = {1.0: alg, 4: kid_bytes}
    elif variant == "protected_repeated_label":
        header = Duplicated(header)
    protected = b"\xff\x00" if variant == "protected_not_cbor" else encode(header)
    if variant == "payload_not_cbor":
        payload = b"\xff" + payload
    elif variant == "payload_truncated":
        payload = payload[:-1]
    elif variant == "payload_trailing":
        payload += b"\x00"
    signature = _sign(key, protected, payload)
    if variant == "flipped_signature":
        signature = signature[:-1] + bytes((signature[-1] ^ 1,))
    elif variant == "zero_signature":
        signature = bytes(64)
    parts: list[Any] = [protected, {}, payload, signature]
    if variant == "protected_text":
        parts[0] = "protected"
    elif variant == "unprotected_filled":
        parts[1] = {4: b"steward"}
    elif variant == "unprotected_array":
        parts[1] = []
    elif variant == "unprotected_indefinite":
        parts[1] = Indefinite({})
    elif variant == "payload_text":
        parts[2] = "payload"
    elif variant == "signature_63":
        parts[3] = signature[:63]
    elif variant == "signature_65":
        parts[3] = signature + b"\x00"
    elif variant == "signature_text":
        parts[3] = "x" * 64
    elif variant == "protected_long_header":
        parts[0] = LongHeader(protected)
    elif variant == "payload_long_header":
        parts[2] = LongHeader(payload)
    elif variant == "signature_long_header":
        parts[3] = LongHeader(signature)
    items: Any = parts
    if variant == "three_items":
        items = parts[:3]
    elif variant == "five_items":
        items = [*parts, b""]
    elif variant == "as_map":
        items = dict(enumerate(parts))
    elif variant == "array_indefinite":
        items = Indefinite(parts)
    body = encode(items)
    if variant == "untagged":
        return body
    if variant == "tag_17":
        return b"\xd1" + body
    if variant == "tag_long_form":
        return b"\xd8\x12" + body
    if variant == "tag_on_tag":
        return b"\xd2\xd2" + body
    if variant == "self_described":
        return b"\xd9\xd9\xf7\xd2" + body
    if variant == "trailing":
        return b"\xd2" + body + b"\xa0"
    return b"\xd2" + body


# -- a ledger plan, sealed ------------------------------------------------------------------


@dataclass
class Sealed:
    """What was sealed at one index: its final core value and envelope variant."""

    core: Any
    envelope: str
    raw: bytes
    payload_size: int = 0


def _fill(core: Any, seq: int, prev: bytes) -> Any:
    if isinstance(core, dict):
        return {k: _filled(k, v, seq, prev) for k, v in core.items()}
    return core


def _filled(key: Any, value: Any, seq: int, prev: bytes) -> Any:
    if key == "seq" and value in SEQ_OFFSETS:
        wrong = seq + int(value[len(AUTO) :])
        return wrong if wrong >= 0 else seq + 1
    if value == AUTO and key in ("seq", "prev"):
        return seq if key == "seq" else prev
    return value


def seal_plan(plan: Sequence[Planned], after: Sequence[Sealed] = ()) -> list[Sealed]:
    """Seal each planned core in order, chained after the entries `after`: `seq` its index,
    `prev` the head before it (unless the plan set them to something else)."""
    out: list[Sealed] = []
    head = hashlib.sha256(after[-1].raw).digest() if after else GENESIS
    for seq, item in enumerate(plan, len(after)):
        core = _fill(item.core, seq, head)
        payload = encode(core)
        raw = envelope(payload, item.envelope)
        out.append(Sealed(core, item.envelope, raw, len(payload)))
        head = hashlib.sha256(raw).digest()
    return out


def as_bytes_view(sealed: Sequence[Sealed]) -> list[Sealed]:
    """The entries as a CBOR sequence splits them: an envelope followed by a stray item is
    two items there, a good envelope and an item that is no envelope (`malformed`)."""
    out: list[Sealed] = []
    for s in sealed:
        if s.envelope == "trailing":
            out.append(Sealed(s.core, "good", s.raw[:-1], s.payload_size))
            out.append(Sealed({}, "stray", b"\xa0"))
        else:
            out.append(s)
    return out


# -- the reference verifier -------------------------------------------------------------------

COMMON: Final = frozenset({"pool_receipt", "seq", "prev", "steward", "at_ms", "event"})
ADMITTED_KEYS: Final = COMMON | {
    "claim",
    "entitlement",
    "gang_size",
    "devices_per_member",
    "reserved_uj",
    "grade",
    "borrowed_uj",
}
RELEASED_KEYS: Final = COMMON | {"claim", "actual_uj", "grade"}
GRADE_NAMES: Final = frozenset(g.value for g in Grade)


def _figure(v: Any, least: int = 0) -> bool:
    return type(v) is int and v >= least


def _name(v: Any) -> bool:
    return type(v) is str and v != ""


def fields_ok(core: Mapping[Any, Any], steward: str = KID) -> bool:
    """DESIGN.md §4: a map with exactly the event's keys, every figure an integer, every id
    a non-empty string, gang_size and devices_per_member at least 1, borrowed <= reserved."""
    event = core.get("event")
    if event == "admitted":
        required, optional = ADMITTED_KEYS, {"class"}
    elif event == "released":
        required, optional = RELEASED_KEYS, set()
    else:
        return False
    present = set(core)
    if not required <= present <= required | optional:
        return False
    if not (type(core["pool_receipt"]) is int and core["pool_receipt"] == 1):
        return False
    if core["steward"] != steward or not _figure(core["at_ms"]):
        return False
    if not (_name(core["claim"]) and type(core["grade"]) is str and core["grade"] in GRADE_NAMES):
        return False
    if event == "released":
        return _figure(core["actual_uj"])
    return (
        _name(core["entitlement"])
        and _figure(core["gang_size"], 1)
        and _figure(core["devices_per_member"], 1)
        and _figure(core["reserved_uj"])
        and _figure(core["borrowed_uj"])
        and core["borrowed_uj"] <= core["reserved_uj"]
        and ("class" not in core or _name(core["class"]))
    )


@dataclass
class Verdict:
    """What a verifier must conclude: refused at (index, error), or accepted with this state."""

    refused: tuple[int, str] | None
    length: int = 0
    head: bytes = GENESIS
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    open_claims: list[str] = field(default_factory=list)


def first_check(s: Sealed) -> str | None:
    """The first three checks of DESIGN.md §4 (shape, canonical form, signer) and the fourth
    (signature), for an entry whose envelope and core are known by construction."""
    if s.envelope == "stray":
        return "malformed"
    expected = ENVELOPES[s.envelope]
    if expected == "malformed":
        return "malformed"
    if not is_map(s.core) or nesting(s.core) > MAX_NESTING or s.payload_size > MAX_ITEM_BYTES:
        return "malformed"
    if expected == "non_canonical" or outside_profile(s.core):
        return "non_canonical"
    return expected  # None, unknown_signer or bad_signature


def verdict(sealed: Sequence[Sealed], steward: str = KID) -> Verdict:
    """DESIGN.md §4, entry by entry and check by check, in its order."""
    head = GENESIS
    running: dict[str, tuple[str, int, int]] = {}
    closed: set[str] = set()
    usage: dict[str, dict[str, int]] = {}
    for i, s in enumerate(sealed):
        error = first_check(s)
        if error is not None:
            return Verdict((i, error))
        core: dict[Any, Any] = s.core
        if not (type(core.get("seq")) is int and core.get("seq") == i):
            return Verdict((i, "seq_mismatch"))
        if core.get("prev") != head:
            return Verdict((i, "broken_chain"))
        if not fields_ok(core, steward):
            return Verdict((i, "malformed"))
        claim = core["claim"]
        if core["event"] == "admitted":
            if claim in running or claim in closed:
                return Verdict((i, "inconsistent_stream"))
            ent, devices = core["entitlement"], core["gang_size"] * core["devices_per_member"]
            running[claim] = (ent, core["reserved_uj"], devices)
            figs = usage.setdefault(ent, {"spent_uj": 0, "held_devices": 0})
            figs["spent_uj"] += core["reserved_uj"]
            figs["held_devices"] += devices
        else:
            if claim not in running:
                return Verdict((i, "inconsistent_stream"))
            ent, reserved, devices = running.pop(claim)
            closed.add(claim)
            usage[ent]["spent_uj"] += core["actual_uj"] - reserved
            usage[ent]["held_devices"] -= devices
        head = hashlib.sha256(s.raw).digest()
    return Verdict(None, len(sealed), head, usage, sorted(running))


# -- mutations of valid cores -----------------------------------------------------------------

FIELD_EDGES: Final[dict[str, list[Any]]] = {
    "seq": [-1, 1, 2**64 - 1, "0", b"\x00", {}],
    "prev": [GENESIS, b"", bytes(31), b"\x01" * 32, bytes(33), "prev", 0],
    "steward": ["", "intruder", "Steward", b"steward", 0, {"steward": "steward"}],
    "event": ["", "Admitted", "release", b"admitted", 0, {}, {"event": "admitted"}],
    "grade": ["", "hwshunt", "HwShunt ", b"HwShunt", 1, {"grade": "HwShunt"}, {}],
    "pool_receipt": [0, 2, -1, 2**64 - 1, "1", b"\x01"],
    "claim": ["", b"c0", 0, {}, "never", "c0"],
    "entitlement": ["", b"a", 0, {}, "z"],
    "class": ["", b"x", 0, {}, "other"],
}
FIGURE_EDGES: Final[list[Any]] = [-1, -(2**64), 0, 2**64 - 1, "1", b"\x01", {}]
FIGURES: Final = frozenset(
    {"at_ms", "gang_size", "devices_per_member", "reserved_uj", "borrowed_uj", "actual_uj"}
)


MUTATIONS: Final = (
    *("drop", "add", "replace", "edge", "edge", "swap_event", "retype"),
    *("whole", "whole", "chain", "chain"),
)


@st.composite
def mutated(draw: st.DrawFn, core: dict[str, Any]) -> Any:
    """`core` changed in one to three ways: a key dropped, added or given another value of
    any CBOR type, an edge value, the event's name swapped, or the whole core replaced."""
    out: dict[Any, Any] = dict(core)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(MUTATIONS))
        present = sorted(out, key=repr)
        if op == "drop" and present:
            del out[draw(st.sampled_from(present))]
        elif op == "add":
            out[draw(keys | st.sampled_from(["class", "grade", "bogus"]))] = draw(values)
        elif op == "replace" and present:
            out[draw(st.sampled_from(present))] = draw(values)
        elif op == "edge" and present:
            name = draw(st.sampled_from(present))
            edges = FIGURE_EDGES if name in FIGURES else FIELD_EDGES.get(name, [None, ""])
            out[name] = draw(st.sampled_from(edges))
        elif op == "chain":
            # Another entry's place: a seq off by one, or a prev that is some other head.
            if draw(st.booleans()):
                out["seq"] = draw(st.sampled_from(SEQ_OFFSETS))
            else:
                out["prev"] = draw(st.sampled_from(PREVS))
        elif op == "swap_event":
            out["event"] = "released" if out.get("event") == "admitted" else "admitted"
        elif op == "retype" and present:
            name = draw(st.sampled_from(present))
            out[draw(st.sampled_from([name.encode() if isinstance(name, str) else 0, 7]))] = (
                out.pop(name)
            )
        elif op == "whole":
            return draw(
                st.one_of(
                    values,
                    colliding_maps(),
                    colliding_maps(),
                    st.just(Unsorted(out)) if len(out) > 1 else st.just(Indefinite(out)),
                    st.just(Indefinite(out)),
                    st.just([out]),
                    st.sampled_from(TAGS).map(lambda tag: cbor2.CBORTag(tag, out)),
                )
            )
    return out


def valid_core(event: Event) -> dict[str, Any]:
    """The project's own core of `event`, with `seq` and `prev` left for the chain to fill."""
    return core_of(event, 0, GENESIS, KID) | {"seq": AUTO, "prev": AUTO}


@st.composite
def plans(
    draw: st.DrawFn, max_size: int = 8, envelopes: Sequence[str] = tuple(ENVELOPES)
) -> list[Planned]:
    """A ledger to seal: a history's valid cores, a few of them mutated or enveloped oddly."""
    plan = [Planned(valid_core(e)) for e in draw(histories(max_size))]
    first = len(plan) - 1
    for n in range(draw(st.sampled_from([0, 1, 1, 1, 2]))):
        # A second change lands at or after the first, so that the first is still reached.
        i = draw(st.integers(0, first) if n == 0 else st.integers(first, len(plan) - 1))
        first = i
        how = draw(st.sampled_from(["core", "core", "core", "envelope", "both"]))
        if how in ("core", "both"):
            core = plan[i].core
            plan[i].core = draw(mutated(core)) if isinstance(core, dict) else draw(values)
        if how in ("envelope", "both"):
            signer = [
                e for e in envelopes if ENVELOPES.get(e) in ("unknown_signer", "bad_signature")
            ]
            plan[i].envelope = draw(st.sampled_from(signer) | st.sampled_from(list(envelopes)))
    return plan


# -- witness receipts -------------------------------------------------------------------------


@st.composite
def witness_cores(draw: st.DrawFn, heads: Sequence[bytes], steward: str = KID) -> Any:
    """A pool-witness/1 core over one of `heads` (head i is the head at length i), mutated
    or not, or with a length past the ledger's end."""
    length = draw(st.integers(0, len(heads) + 2))
    head = heads[length] if length < len(heads) else draw(byte_strings)
    core: dict[str, Any] = {
        "pool_witness": 1,
        "steward": steward,
        "witness": WITNESS.kid,
        "head": head,
        "length": length,
        "at_ms": draw(figures),
    }
    if draw(st.booleans()):
        return core
    return draw(mutated(core))


def witness_envelope(payload: bytes, variant: str, kid: str) -> bytes:
    """A receipt around `payload` signed by the witness's key (or as `variant` says)."""
    protected = encode({1: -8, 4: kid.encode()})
    key = WITNESS.signing_key if variant != "other_key" else OTHER.signing_key
    signature = _sign(key, protected, payload)
    if variant == "flipped_signature":
        signature = signature[:-1] + bytes((signature[-1] ^ 1,))
    return b"\xd2" + encode([protected, {}, payload, signature])


def iter_prefixes(raws: Sequence[bytes]) -> Iterator[bytes]:
    """The head after each prefix of `raws`: GENESIS, then each entry's content address."""
    yield GENESIS
    for raw in raws:
        yield hashlib.sha256(raw).digest()
