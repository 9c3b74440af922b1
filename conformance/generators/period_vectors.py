"""Build the budget-period vectors (DESIGN.md §3, "budget periods") from the text, by hand.

Like `ledger_vectors.py`, this does not import joulepool: entries are laid out with cbor2 and
PyNaCl from DESIGN.md §4, instants come from the standard library's calendar (an independent
clock arithmetic), and every expected figure below is written out by hand from the rules:

- a claim belongs to the period holding its `Admitted` entry's `at_ms`, for good;
- `spent_uj` of a period sums its claims (actual once released, else the reservation);
- `held_devices` counts every open claim, whatever its period;
- periods are half-open: an instant on a boundary belongs to the period it starts.

    .venv/bin/python conformance/generators/period_vectors.py conformance/vectors
"""

from __future__ import annotations

import calendar
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from ledger_vectors import (  # a sibling script, not a package
    STEWARD,
    STEWARD_SEED,
    chain,
    det,
    key,
    pub,
    sign1,
)

MUST = "10"  # §7: rebuild usage by replaying its own ledger (§6.1); periods group it (§1.2)
SECTION = "1.2"
MONTH = {"kind": "month"}
WEEK = {"kind": "week"}
DAY = {"kind": "day"}
NONE = {"kind": "none"}


def utc_ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0, ms: int = 0) -> int:
    """Milliseconds since the epoch of a UTC wall-clock instant (the stdlib's calendar)."""
    return calendar.timegm((year, month, day, hour, minute, 0)) * 1000 + ms


def adm(claim: str, ent: str, uj: int, at_ms: int) -> dict[str, Any]:
    """An Admitted core of 2 devices (gang 1 x 2)."""
    return {
        "pool_receipt": 1,
        "prev": "auto",
        "steward": STEWARD,
        "at_ms": at_ms,
        "event": "admitted",
        "claim": claim,
        "entitlement": ent,
        "gang_size": 1,
        "devices_per_member": 2,
        "reserved_uj": uj,
        "grade": "ModelBased",
        "borrowed_uj": 0,
    }


def rel(claim: str, uj: int, at_ms: int) -> dict[str, Any]:
    """A Released core."""
    return {
        "pool_receipt": 1,
        "prev": "auto",
        "steward": STEWARD,
        "at_ms": at_ms,
        "event": "released",
        "claim": claim,
        "actual_uj": uj,
        "grade": "HwShunt",
    }


def ledger(*cores: dict[str, Any]) -> str:
    """The cores sealed in order, seq filled in, as one CBOR sequence in hex."""
    numbered = [{**core, "seq": i} for i, core in enumerate(cores)]
    return b"".join(chain(numbered)).hex()


def case(period: dict[str, Any], at_ms: int, ledger_hex: str) -> dict[str, Any]:
    return {
        "op": "period_usage",
        "steward": STEWARD,
        "public_key_hex": pub(STEWARD_SEED),
        "ledger_hex": ledger_hex,
        "period": period,
        "at_ms": at_ms,
    }


def ok(
    start: int | None, end: int | None, usage: dict[str, tuple[int, int]], open_claims: list[str]
) -> dict[str, Any]:
    return {
        "ok": True,
        "period": {"start_ms": start, "end_ms": end},
        "usage": {k: {"spent_uj": s, "held_devices": h} for k, (s, h) in usage.items()},
        "open_claims": open_claims,
    }


def vector(name: str, title: str, c: dict[str, Any], expect: dict[str, Any]) -> tuple[str, Any]:
    doc = {"section": SECTION, "must": MUST, "title": title, "case": c, "expect": expect}
    return f"{MUST}-{SECTION}-period-{name}", doc


def build() -> list[tuple[str, Any]]:
    vs = []
    oct_last = utc_ms(2026, 10, 31, 23, 59, 59_999)
    nov_1 = utc_ms(2026, 11, 1)
    dec_1 = utc_ms(2026, 12, 1)
    oct_1 = utc_ms(2026, 10, 1)
    # A in October's last millisecond, B on November's first instant.
    around_nov = ledger(adm("a", "vision", 5, oct_last), adm("b", "language", 3, nov_1))
    vs.append(
        vector(
            "instant-on-boundary-starts-the-month",
            "an instant on a boundary belongs to the period it starts; other periods' claims "
            "keep their devices held",
            case(MONTH, nov_1, around_nov),
            ok(nov_1, dec_1, {"language": (3, 2), "vision": (0, 2)}, ["a", "b"]),
        )
    )
    vs.append(
        vector(
            "last-millisecond-of-the-month",
            "the last millisecond of October is October's: B, admitted on November's first "
            "instant, holds its devices but spends nothing there",
            case(MONTH, oct_last, around_nov),
            ok(oct_1, nov_1, {"language": (0, 2), "vision": (5, 2)}, ["a", "b"]),
        )
    )
    dec_31 = utc_ms(2026, 12, 31, 12)
    jan_1 = utc_ms(2027, 1, 1)
    vs.append(
        vector(
            "december-to-january",
            "UTC months across the year's end: January 2027 starts at 2027-01-01 00:00 UTC",
            case(
                MONTH,
                utc_ms(2027, 1, 15),
                ledger(
                    adm("dec", "vision", 11, dec_31),
                    rel("dec", 13, dec_31 + 1),
                    adm("jan", "vision", 17, jan_1),
                    rel("jan", 19, jan_1 + 1),
                ),
            ),
            ok(jan_1, utc_ms(2027, 2, 1), {"vision": (19, 0)}, []),
        )
    )
    vs.append(
        vector(
            "december-is-its-own-month",
            "December 2026 ends where January 2027 starts; its claim's actual counts there",
            case(
                MONTH,
                dec_31,
                ledger(
                    adm("dec", "vision", 11, dec_31),
                    rel("dec", 13, dec_31 + 1),
                    adm("jan", "vision", 17, jan_1),
                ),
            ),
            ok(dec_1, jan_1, {"vision": (13, 2)}, ["jan"]),
        )
    )
    feb_29 = utc_ms(2028, 2, 29, 23, 59, 59_999)
    mar_1 = utc_ms(2028, 3, 1)
    vs.append(
        vector(
            "february-in-a-leap-year",
            "February 2028 has 29 days: its last millisecond is 2028-02-29 23:59:59.999 UTC",
            case(
                MONTH,
                feb_29,
                ledger(adm("leap", "vision", 7, feb_29), adm("march", "vision", 9, mar_1)),
            ),
            ok(utc_ms(2028, 2, 1), mar_1, {"vision": (7, 4)}, ["leap", "march"]),
        )
    )
    vs.append(
        vector(
            "february-in-a-common-year",
            "February 2027 has 28 days: 2027-03-01 00:00 UTC starts March",
            case(MONTH, utc_ms(2027, 2, 28, 23, 59, 59_999), ledger()),
            ok(utc_ms(2027, 2, 1), utc_ms(2027, 3, 1), {}, []),
        )
    )
    sunday_last = utc_ms(2026, 11, 29, 23, 59, 59_999)
    monday = utc_ms(2026, 11, 30)
    vs.append(
        vector(
            "week-from-monday",
            "weeks start on Monday 00:00 UTC: Sunday's last millisecond is the week before",
            case(
                WEEK,
                utc_ms(2026, 12, 2, 12),
                ledger(adm("sun", "vision", 5, sunday_last), adm("mon", "vision", 3, monday)),
            ),
            ok(monday, utc_ms(2026, 12, 7), {"vision": (3, 4)}, ["mon", "sun"]),
        )
    )
    vs.append(
        vector(
            "week-before-monday",
            "Sunday 2026-11-29 is in the week that started on Monday 2026-11-23",
            case(
                WEEK,
                sunday_last,
                ledger(adm("sun", "vision", 5, sunday_last), adm("mon", "vision", 3, monday)),
            ),
            ok(utc_ms(2026, 11, 23), monday, {"vision": (5, 4)}, ["mon", "sun"]),
        )
    )
    vs.append(
        vector(
            "week-holding-the-unix-epoch",
            "1970-01-01 was a Thursday: its week started on Monday 1969-12-29, before the epoch",
            case(WEEK, 0, ledger(adm("first", "vision", 5, 0))),
            ok(-3 * 86_400_000, 4 * 86_400_000, {"vision": (5, 2)}, ["first"]),
        )
    )
    vs.append(
        vector(
            "day-boundary",
            "days are UTC days: the previous day's last millisecond is not today's",
            case(
                DAY,
                utc_ms(2026, 11, 30, 12),
                ledger(adm("late", "vision", 5, sunday_last), adm("early", "vision", 3, monday)),
            ),
            ok(monday, utc_ms(2026, 12, 1), {"vision": (3, 4)}, ["early", "late"]),
        )
    )
    fixed = {"kind": "fixed", "length_ms": 1000, "epoch_ms": 10_000}
    before = ledger(adm("early", "vision", 5, 9_500), adm("on", "vision", 3, 10_000))
    vs.append(
        vector(
            "fixed-before-its-epoch",
            "fixed periods run before their epoch too: 9500 is in [9000, 10000), k = -1",
            case(fixed, 9_999, before),
            ok(9_000, 10_000, {"vision": (5, 4)}, ["early", "on"]),
        )
    )
    vs.append(
        vector(
            "fixed-epoch-starts-a-period",
            "the epoch itself starts period 0: [10000, 11000)",
            case(fixed, 10_000, before),
            ok(10_000, 11_000, {"vision": (3, 4)}, ["early", "on"]),
        )
    )
    vs.append(
        vector(
            "fixed-far-before-its-epoch",
            "k = floor((at - epoch) / length): instant 0 under epoch 10000, length 3000 is in "
            "[-2000, 1000)",
            case({"kind": "fixed", "length_ms": 3000, "epoch_ms": 10_000}, 0, ledger()),
            ok(-2_000, 1_000, {}, []),
        )
    )
    epoch0 = {"kind": "fixed", "length_ms": 1000, "epoch_ms": 0}
    across = ledger(adm("x", "vision", 10, 500), rel("x", 7, 1_500))
    vs.append(
        vector(
            "released-in-the-next-period-counts-where-admitted",
            "admitted in [0, 1000), released in [1000, 2000): its actual counts in the first",
            case(epoch0, 999, across),
            ok(0, 1_000, {"vision": (7, 0)}, []),
        )
    )
    vs.append(
        vector(
            "released-in-the-next-period-spends-nothing-there",
            "the period of the release holds none of the claim's energy",
            case(epoch0, 1_500, across),
            ok(1_000, 2_000, {"vision": (0, 0)}, []),
        )
    )
    still_open = ledger(adm("x", "vision", 10, 500), adm("y", "language", 4, 1_200))
    vs.append(
        vector(
            "open-claim-across-a-boundary",
            "a claim still open across a boundary: its devices held, its energy not counted",
            case(epoch0, 1_200, still_open),
            ok(1_000, 2_000, {"language": (4, 2), "vision": (0, 2)}, ["x", "y"]),
        )
    )
    vs.append(
        vector(
            "open-claim-in-its-own-period",
            "an open claim's reservation counts in its own period",
            case(epoch0, 0, still_open),
            ok(0, 1_000, {"language": (0, 2), "vision": (10, 2)}, ["x", "y"]),
        )
    )
    vs.append(
        vector(
            "none-is-one-period-for-all-time",
            "kind none: one period for all time, with null bounds",
            case(NONE, 2**64 - 1, still_open),
            ok(None, None, {"language": (4, 2), "vision": (10, 2)}, ["x", "y"]),
        )
    )
    vs.append(
        vector(
            "none-counts-every-release",
            "kind none: the actual of a released claim counts whenever it was admitted",
            case(NONE, 0, across),
            ok(None, None, {"vision": (7, 0)}, []),
        )
    )
    vs.append(
        vector(
            "month-of-year-9999",
            "months past any calendar library's year 9999 still end: December 9999 ends at "
            "10000-01-01 00:00 UTC",
            case(MONTH, utc_ms(9999, 12, 31, 23, 59, 59_999), ledger()),
            ok(utc_ms(9999, 12, 1), utc_ms(9999, 12, 31) + 86_400_000, {}, []),
        )
    )
    bad = "invalid_input"
    for name, period in (
        ("fixed-length-zero", {"kind": "fixed", "length_ms": 0, "epoch_ms": 0}),
        ("fixed-without-epoch", {"kind": "fixed", "length_ms": 1000}),
        ("month-with-length", {"kind": "month", "length_ms": 1000}),
        ("unknown-kind", {"kind": "fortnight"}),
        ("negative-epoch", {"kind": "fixed", "length_ms": 1000, "epoch_ms": -1}),
        ("float-length", {"kind": "fixed", "length_ms": 1000.0, "epoch_ms": 0}),
    ):
        vs.append(
            vector(
                f"{name}-is-invalid-input",
                f"a period schedule that breaks DESIGN.md §3 ({name}) is invalid input",
                case(period, 0, ledger()),
                {"error": bad},
            )
        )
    vs.append(
        vector(
            "at-past-2-64-minus-1-is-invalid-input",
            "at_ms is a figure: past 2**64 - 1 is invalid input",
            case(MONTH, 2**64, ledger()),
            {"error": bad},
        )
    )
    vs.append(
        vector(
            "null-length-for-month-is-absent",
            "an optional field given as null is absent",
            case({"kind": "month", "length_ms": None}, nov_1, ledger()),
            ok(nov_1, dec_1, {}, []),
        )
    )
    twice = [{**adm("x", "vision", 1, 5), "seq": 0}, {**adm("x", "vision", 1, 6), "seq": 1}]
    vs.append(
        vector(
            "refused-ledger-gives-the-replay-refusal",
            "a ledger replay refuses gives period_usage the same refusal",
            case(MONTH, 0, b"".join(chain(twice)).hex()),
            {"ok": False, "error": "inconsistent_stream", "index": 1},
        )
    )
    # An entry sealed by another key: refused at 0 exactly as replay refuses it.
    core = {**adm("x", "vision", 1, 5), "seq": 0, "prev": bytes(32)}
    forged = sign1(det(core), STEWARD, key(bytes(range(32, 64))))
    vs.append(
        vector(
            "bad-signature-refused-at-its-index",
            "period_usage verifies the ledger before deriving anything from it (§6.4)",
            case(MONTH, 0, forged.hex()),
            {"ok": False, "error": "bad_signature", "index": 0},
        )
    )
    return vs


def main(folder: str) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    built = build()
    for name, doc in built:
        (out / f"{name}.json").write_text(
            json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    print(f"wrote {len(built)} period vectors to {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "conformance/vectors")
