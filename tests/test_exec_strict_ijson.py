"""`pool exec` reads every case as strict I-JSON (CONFORMANCE.md, RFC 7493): a lone
surrogate in a key or a string, a repeated key, or nesting deeper than 32 levels is
`invalid_input`, checked before the operation runs; no input makes it exit non-zero, print
a traceback, or answer with a lone surrogate.

Lone surrogates cannot be conformance vectors: a vector file is itself strict I-JSON, and a
conforming reader of vector files refuses the very escape the case would need to carry, so
they are here, as raw bytes.
"""

from __future__ import annotations

import json
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from joulepool.conformance.execute import exec_bytes
from joulepool.jsonio import MAX_DEPTH

# Each operation, its smallest case shape with a lone surrogate in a key or a string, the
# shapes differential fuzzing found to crash the writer of the answer.
SURROGATE_CASES: list[str] = [
    r'{"op":"idle","policy":{},"workloads":[{"\ud800":1}]}',
    r'{"op":"idle","policy":{},"workloads":[{"key":"\udfff","held_devices":1,"observed_us":1,"energy":{"uj":1,"grade":"HwShunt"}}]}',
    r'{"op":"idle","policy":{"\udc00":1},"workloads":[]}',
    r'{"op":"decide","tree":{"entitlements":[]},"usage":{"\ud800":{"spent_uj":0,"held_devices":0}},"claim":{}}',
    r'{"op":"decide","tree":{"entitlements":[{"id":"\ud800","guarantee_uj":1,"guarantee_devices":1,"over_quota_weight":1}]},"usage":{},"claim":{"id":"c","entitlement":"\ud800","gang_size":1,"devices_per_member":1,"estimate":{"uj":1,"grade":"HwShunt"}}}',
    r'{"op":"decide","\ud800":1}',
    r'{"op":"preemption_order","workloads":[{"key":"\ud800","spent_uj":1,"completed_units":1,"priority":0}]}',
    r'{"op":"preemption_order","workloads":[{"\udbff":1}]}',
    r'{"op":"period_usage","steward":"\ud800","public_key_hex":"","ledger_hex":"","period":{"kind":"none"},"at_ms":0}',
    r'{"op":"period_usage","steward":"s","public_key_hex":"","ledger_hex":"","period":{"kind":"\ud800"},"at_ms":0}',
    r'{"op":"replay","steward":"\ud800","public_key_hex":"00","ledger_hex":""}',
    r'{"op":"replay","steward":"s","public_key_hex":"\ud800","ledger_hex":""}',
    r'{"op":"seal","steward":"\ud800","secret_key_hex":"00","events":[]}',
    r'{"op":"seal","steward":"s","secret_key_hex":"'
    + "00" * 32
    + r'","events":[{"event":"admitted","at_ms":0,"claim":"\ud800","entitlement":"a","gang_size":1,"devices_per_member":1,"reserved":{"uj":1,"grade":"HwShunt"},"borrowed_uj":0}]}',
    r'{"op":"\ud800"}',
    r'{"\ud800":"decide"}',
    r'{"op":"attribute","total":{"uj":1,"grade":"HwShunt"},"occupants":{"\ud800":1}}',
    r'{"op":"derive_estimate","history":[],"class":"\udfff"}',
    r'{"op":"witness","\ud800":1}',
    r'{"op":"check_witness","steward":"\ud800"}',
    # A repeated key that is itself a lone surrogate: the refusal must not quote it.
    r'{"op":"idle","policy":{},"workloads":[{"\ud800":1,"\ud800":2}]}',
    # Raw (unescaped) surrogate code points as CESU-style bytes are not UTF-8 at all.
    '{"op":"idle","policy":{},"workloads":[{"\ud800":1}]}',
]


def answer(data: bytes) -> dict[str, object]:
    out = exec_bytes(data)
    text = out.decode("utf-8")  # strict: a lone surrogate would not encode to begin with
    result = json.loads(text)
    assert isinstance(result, dict)
    assert not any(0xD800 <= ord(ch) <= 0xDFFF for ch in json.dumps(result, ensure_ascii=False))
    return result


def as_bytes(case: str) -> bytes:
    return case.encode("utf-8", "surrogatepass")


def test_a_lone_surrogate_in_any_operation_is_invalid_input() -> None:
    for case in SURROGATE_CASES:
        result = answer(as_bytes(case))
        assert result["error"] == "invalid_input", (case, result)


def test_a_lone_surrogate_is_refused_before_the_operation_reads_its_fields() -> None:
    # Were the operation first, this would be refused naming the missing `claim`.
    result = answer(as_bytes(r'{"op":"decide","tree":"\ud800"}'))
    assert result["error"] == "invalid_input"
    assert "surrogate" in str(result["detail"])


def test_an_escaped_surrogate_pair_is_one_character_and_accepted() -> None:
    case = {"op": "attribute", "total": {"uj": 10, "grade": "HwShunt"}, "occupants": {"😀": 1}}
    result = answer(json.dumps(case, ensure_ascii=True).encode())
    assert result == {"shares": {"😀": {"uj": 10, "grade": "HwShunt"}}}


def lists(count: int) -> object:
    """`count` arrays, one inside the next; under a case's key they reach level count + 1."""
    value: object = 1
    for _ in range(count):
        value = [value]
    return value


def test_nesting_deeper_than_32_levels_is_refused_before_the_operation() -> None:
    deep: dict[str, object] = {
        "op": "attribute",
        "total": {"uj": 1, "grade": "HwShunt"},
        "occupants": {"a": 1},
    }
    deep["x"] = lists(MAX_DEPTH)  # the case object is level 1: this reaches level 33
    result = answer(json.dumps(deep).encode())
    assert result["error"] == "invalid_input"
    assert f"deeper than {MAX_DEPTH}" in str(result["detail"])
    within = dict(deep, x=lists(MAX_DEPTH - 1))  # level 32: the unknown key is refused instead
    result = answer(json.dumps(within).encode())
    assert result["error"] == "invalid_input"
    assert "x" in str(result["detail"]) and "deeper" not in str(result["detail"])


def test_repeated_and_unknown_keys_are_still_refused() -> None:
    repeated = answer(b'{"op":"idle","policy":{},"policy":{},"workloads":[]}')
    assert repeated["error"] == "invalid_input" and "twice" in str(repeated["detail"])
    unknown = answer(b'{"op":"idle","policy":{},"workloads":[],"extra":1}')
    assert unknown["error"] == "invalid_input" and "extra" in str(unknown["detail"])


# -- arbitrary JSON-ish text --------------------------------------------------------------

SURROGATES = st.integers(0xD800, 0xDFFF).map(lambda n: f"\\u{n:04x}")
PIECES = st.one_of(
    SURROGATES,
    st.sampled_from(['"', ":", ",", "{", "}", "[", "]", "1", "-0", "1e9", "true", "null", " "]),
    st.sampled_from(['"op"', '"idle"', '"decide"', '"seal"', '"replay"', '"workloads"']),
    st.text(max_size=4),
)


@st.composite
def jsonish_with_a_surrogate(draw: st.DrawFn) -> str:
    """A case of any operation whose key or string holds a lone surrogate somewhere."""
    op = draw(
        st.sampled_from(["decide", "idle", "preemption_order", "period_usage", "replay", "seal"])
    )
    junk = "".join(draw(st.lists(PIECES, max_size=6)))
    lone = draw(SURROGATES)
    where = draw(st.sampled_from(["key", "value", "nested"]))
    depth = draw(st.integers(1, 20))
    inner = {
        "key": f'{{"{junk}{lone}":1}}',
        "value": f'"{junk}{lone}"',
        "nested": "[" * depth + f'"{lone}"' + "]" * depth,
    }[where]
    return f'{{"op":"{op}","workloads":[{inner}]}}'


@st.composite
def deep_jsonish(draw: st.DrawFn) -> str:
    op = draw(
        st.sampled_from(["decide", "idle", "preemption_order", "period_usage", "replay", "seal"])
    )
    depth = draw(st.integers(MAX_DEPTH, 5_000))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"k":', "}")]))
    return f'{{"op":"{op}","x":' + opener * depth + "0" + closer * depth + "}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jsonish_with_a_surrogate())
def test_any_case_carrying_a_lone_surrogate_is_invalid_input(text: str) -> None:
    assert answer(text.encode("utf-8", "surrogatepass"))["error"] == "invalid_input"


@settings(max_examples=100, deadline=None)
@given(deep_jsonish())
def test_any_case_nested_past_the_limit_is_invalid_input(text: str) -> None:
    assert answer(text.encode())["error"] == "invalid_input"


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join))
def test_arbitrary_jsonish_text_always_gets_one_encodable_answer(text: str) -> None:
    answer(text.encode("utf-8", "surrogatepass"))  # UTF-8, one object, no surrogate


def test_the_pool_exec_process_answers_surrogates_and_deep_nesting_with_exit_0() -> None:
    cases = [as_bytes(c) for c in SURROGATE_CASES[:4]] + [
        b'{"op":"idle","x":' + b"[" * 100 + b"0" + b"]" * 100 + b"}",
        b'{"op":"seal","x":' + b'{"k":' * 40 + b"0" + b"}" * 40 + b"}",
    ]
    for data in cases:
        assert run_pool_exec(data)["error"] == "invalid_input", data


def run_pool_exec(data: bytes) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", "joulepool", "exec"],
        input=data,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert proc.stderr == b"", proc.stderr.decode(errors="replace")
    result = json.loads(proc.stdout.decode("utf-8"))
    assert isinstance(result, dict)
    return result


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(jsonish_with_a_surrogate(), deep_jsonish()))
def test_the_pool_exec_process_on_generated_surrogate_and_deep_cases(text: str) -> None:
    assert run_pool_exec(text.encode("utf-8", "surrogatepass"))["error"] == "invalid_input"
