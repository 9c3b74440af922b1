"""Energy as people type and read it: `4MJ`, `2.5kWh`, `750J`, `123uj`.

Inside joulepool every energy is an integer of microjoules (DESIGN.md §2). This module is
the one place where a person's spelling becomes that integer, exactly, and where an integer
becomes a column a person reads without counting digits. Parsing never rounds: a figure
that is not a whole number of µJ is refused, naming it. Arithmetic is on `Fraction`, never
on float, so `2.5kWh` is 9,000,000,000,000 µJ and not a neighbour of it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

from joulepool.errors import InvalidInput

UJ_PER: dict[str, int] = {
    "uJ": 1,
    "mJ": 10**3,
    "J": 10**6,
    "kJ": 10**9,
    "MJ": 10**12,
    "GJ": 10**15,
    "TJ": 10**18,
    "Wh": 3_600 * 10**6,
    "kWh": 3_600 * 10**9,
    "MWh": 3_600 * 10**12,
    "GWh": 3_600 * 10**15,
}
"""Microjoules in one of each unit a person may type."""

# Spellings accepted for each unit. `m` and `M` differ by a factor of 10⁹, so a spelling
# that could be either (`mj`, `Mj`, `mwh`) is refused rather than guessed.
_SPELLINGS: dict[str, str] = {
    "uj": "uJ",
    "uJ": "uJ",
    "µj": "uJ",
    "µJ": "uJ",
    "μj": "uJ",
    "μJ": "uJ",
    "mJ": "mJ",
    "j": "J",
    "J": "J",
    "kj": "kJ",
    "kJ": "kJ",
    "KJ": "kJ",
    "MJ": "MJ",
    "gj": "GJ",
    "GJ": "GJ",
    "Gj": "GJ",
    "tj": "TJ",
    "TJ": "TJ",
    "wh": "Wh",
    "Wh": "Wh",
    "WH": "Wh",
    "kwh": "kWh",
    "kWh": "kWh",
    "KWH": "kWh",
    "kWH": "kWh",
    "MWh": "MWh",
    "MWH": "MWh",
    "gwh": "GWh",
    "GWh": "GWh",
    "GWH": "GWh",
}
_AMBIGUOUS = {"mj", "Mj", "mwh", "mWh", "Mwh", "mWH", "MJh"}
_FIGURE = re.compile(r"(?P<number>[0-9][0-9_]*(?:\.[0-9][0-9_]*)?)\s*(?P<unit>[^\s0-9.]*)")


def parse_energy(text: str, where: str, *, bare: str = "uJ") -> int:
    """`text` as an exact integer of µJ (DESIGN.md §2; "energy typed with units").

    `4MJ`, `2.5 kWh`, `750J`, `123uj`, `1_000 J`; a bare number is in `bare` (µJ, so the
    integers every `--...-uj` flag took keep their meaning). Refused with `InvalidInput`
    naming `where`: a negative or malformed figure, an unknown or ambiguous unit (`mj` could
    be milli or mega), and a figure that is not a whole number of µJ (never rounded).
    """
    raw = text.strip()
    match = _FIGURE.fullmatch(raw)
    if match is None or match["number"].endswith("_") or "_." in match["number"]:
        raise InvalidInput(
            where,
            f"{text!r} is not an energy: give a non-negative figure and a unit, "
            "such as 4MJ, 2.5kWh, 750J or 123uJ",
        )
    unit_text = match["unit"] or bare
    if unit_text in _AMBIGUOUS:
        raise InvalidInput(
            where, f"{text!r}: {unit_text!r} could be milli or mega; write mJ or MJ (mWh or MWh)"
        )
    unit = _SPELLINGS.get(unit_text)
    if unit is None:
        known = ", ".join(UJ_PER)
        raise InvalidInput(where, f"{text!r}: unknown unit {unit_text!r} (one of {known})")
    value = Fraction(match["number"].replace("_", "")) * UJ_PER[unit]
    if value.denominator != 1:
        raise InvalidInput(
            where,
            f"{text!r} is {float(value):.6g} µJ, not a whole number of microjoules; "
            "joulepool records integers and never rounds a figure",
        )
    return int(value)


# -- reading -------------------------------------------------------------------------------

AUTO_UNITS = ("J", "kJ", "MJ", "GJ")
"""The units `auto` chooses among for a column: the largest its biggest figure reaches."""
UNIT_CHOICES = ("auto", "uJ", "J", "kJ", "MJ", "GJ", "kWh")
"""`--units` of `pool usage`, `pool claims` and `pool report`, in any case: a display unit
is chosen, not typed as a figure, so `mj` (which `parse_energy` refuses as ambiguous)
can only mean MJ here: millijoules are never a display unit."""
_UNIT_BY_FOLDED = {u.casefold(): u for u in UNIT_CHOICES}
_UNIT_BY_FOLDED["µj"] = _UNIT_BY_FOLDED["μj"] = "uJ"


def display_unit(text: str, where: str = "--units") -> str:
    """`--units` as written, in any case, as its one spelling in `UNIT_CHOICES`
    (DESIGN.md "Figures as people type and read them"); anything else is refused naming them."""
    unit = _UNIT_BY_FOLDED.get(text.strip().casefold())
    if unit is None:
        raise InvalidInput(where, f"{text!r}: one of {', '.join(UNIT_CHOICES)} (any case)")
    return unit


@dataclass(frozen=True, slots=True)
class Column:
    """One unit for a whole column of figures, so they compare at a glance."""

    unit: str
    places: int

    def show(self, value: int | None) -> str:
        """`value` µJ in this column's unit: exact for µJ and J, else to `places` decimals
        (round half even; `--json` and `--units uj` carry the exact integer). A figure that
        is not 0 never reads 0: below half the last place it is `<0.001`, since a team that
        spent something must not read as having spent nothing."""
        if value is None:
            return "-"
        if self.unit == "uJ":
            return f"{value:,}"
        per = UJ_PER[self.unit]
        if self.unit == "J":
            whole, rest = divmod(value, per)
            return f"{whole:,}" if rest == 0 else f"{whole:,}.{rest:06d}".rstrip("0")
        quantum = Decimal(1).scaleb(-self.places)
        shown = (Decimal(value) / Decimal(per)).quantize(quantum, rounding=ROUND_HALF_EVEN)
        if value != 0 and shown == 0:
            return f"<{quantum:.{self.places}f}"
        return f"{shown:,.{self.places}f}"

    @property
    def label(self) -> str:
        """The unit as a column heading shows it."""
        return "µJ" if self.unit == "uJ" else self.unit


def column(values: Sequence[int | None], units: str = "auto") -> Column:
    """The unit a column (or a whole table) of µJ figures is shown in: `units` as `--units`
    names it, in any case, or for `auto` the largest of J, kJ, MJ, GJ that its biggest figure
    reaches, to 3 decimals (DESIGN.md "Figures as people type and read them")."""
    unit = display_unit(units)
    if unit == "uJ":
        return Column("uJ", 0)
    if unit == "J":
        return Column("J", 6)
    if unit == "kWh":
        return Column("kWh", 6)
    if unit != "auto":
        return Column(unit, 3)
    top = max((v for v in values if v is not None), default=0)
    chosen = "J"
    for unit in AUTO_UNITS:
        if top >= UJ_PER[unit]:
            chosen = unit
    return Column(chosen, 3)


def energy_text(value: int) -> str:
    """One figure for a sentence: its auto unit, and the exact µJ beside it when rounded."""
    col = column([value])
    per = UJ_PER[col.unit]
    if value % per == 0:
        return f"{value // per:,} {col.label}"
    shown = f"{col.show(value)} {col.label}"
    return shown if col.unit == "J" else f"{shown} ({value:,} µJ)"
