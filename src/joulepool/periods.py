"""Budget periods: which period holds an instant, and its bounds (DESIGN.md §3, "budget periods").

A deployment's schedule is `none` (one period for all time), `day`, `week` (from Monday
00:00 UTC), `month` (from the 1st, 00:00 UTC) or `fixed` (`[epoch + k*length, epoch +
(k+1)*length)` for every integer k). Every period is half-open, so an instant on a boundary
belongs to the period it starts.

A period is named by an integer index under its schedule: days and weeks since the Unix
epoch, months since year 0, k for `fixed`, 0 for `none`. The arithmetic is integer only
(Howard Hinnant's days/civil conversions), because `at_ms` runs to 2**64 - 1, far past the
year 9999 where `datetime` stops, and no float may enter a figure (DESIGN.md §2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from joulepool.checks import check_figure, check_keys, join_field
from joulepool.errors import InvalidInput

DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS
_MONDAY_BEFORE_EPOCH = -3
"""1970-01-01 was a Thursday: the week holding it starts on Monday 1969-12-29, day -3."""

Kind = Literal["none", "day", "week", "month", "fixed"]
KINDS: tuple[Kind, ...] = ("none", "day", "week", "month", "fixed")


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's algorithm, exact)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """The proleptic Gregorian (year, month, day) of a day count since 1970-01-01."""
    days += 719_468
    era = days // 146_097
    doe = days - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def utc_text(at_ms: int) -> str:
    """An instant as `YYYY-MM-DD HH:MM UTC`, with seconds and milliseconds only when nonzero."""
    days, ms = divmod(at_ms, DAY_MS)
    year, month, day = civil_from_days(days)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    seconds, ms = divmod(ms, 1000)
    clock = f"{hours:02d}:{minutes:02d}"
    if seconds or ms:
        clock += f":{seconds:02d}" + (f".{ms:03d}" if ms else "")
    return f"{year:04d}-{month:02d}-{day:02d} {clock} UTC"


@dataclass(frozen=True, slots=True)
class Period:
    """One budget period: its index under its schedule and its half-open bounds in ms.

    `start_ms` and `end_ms` are None for `none` (all time). A bound may lie before the Unix
    epoch (the week holding 1970-01-01 starts in 1969): it is the period's true bound.
    """

    index: int
    start_ms: int | None
    end_ms: int | None

    def to_json(self) -> dict[str, int | None]:
        """API.md's and CONFORMANCE.md's `{"start_ms", "end_ms"}` (null bounds for `none`)."""
        return {"start_ms": self.start_ms, "end_ms": self.end_ms}


@dataclass(frozen=True, slots=True)
class Schedule:
    """A deployment's budget period schedule (DESIGN.md §3, "budget periods")."""

    kind: Kind = "none"
    length_ms: int | None = None
    epoch_ms: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidInput("period.kind", f"must be one of {', '.join(KINDS)}")
        if self.kind == "fixed":
            if self.length_ms is None or self.epoch_ms is None:
                raise InvalidInput("period", "a fixed period needs length_ms and epoch_ms")
            check_figure(self.length_ms, "period.length_ms")
            check_figure(self.epoch_ms, "period.epoch_ms")
            if self.length_ms < 1:
                raise InvalidInput("period.length_ms", "must be at least 1")
        elif self.length_ms is not None or self.epoch_ms is not None:
            raise InvalidInput(
                "period", f"length_ms and epoch_ms belong to kind fixed, not {self.kind}"
            )

    @classmethod
    def from_json(cls, obj: object, where: str = "period") -> Schedule:
        """Read `{"kind", "length_ms"?, "epoch_ms"?}` strictly, refusals naming `where`.

        The same shape serves CONFORMANCE.md's `period` and pool.toml's `[period]` table.
        """
        fields = check_keys(obj, where, ("kind",), ("length_ms", "epoch_ms"))
        kind = fields["kind"]
        if kind not in KINDS:
            raise InvalidInput(
                join_field(where, "kind"), f"must be one of {', '.join(KINDS)}, got {kind!r}"
            )
        if kind == "fixed":
            for name in ("length_ms", "epoch_ms"):
                if name not in fields:
                    raise InvalidInput(join_field(where, name), "missing: a fixed period needs it")
                check_figure(fields[name], join_field(where, name))
            if fields["length_ms"] < 1:
                raise InvalidInput(join_field(where, "length_ms"), "must be at least 1")
            return cls("fixed", fields["length_ms"], fields["epoch_ms"])
        for name in ("length_ms", "epoch_ms"):
            if name in fields:
                raise InvalidInput(
                    join_field(where, name), f"belongs to kind fixed only, not {kind}"
                )
        return cls(kind)

    def to_json(self) -> dict[str, Any]:
        """The `{"kind", ...}` shape `from_json` reads."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind == "fixed":
            out |= {"length_ms": self.length_ms, "epoch_ms": self.epoch_ms}
        return out

    @property
    def noun(self) -> str:
        """What an operator calls one period: month, week, day, period."""
        return {"day": "day", "week": "week", "month": "month"}.get(self.kind, "period")

    def index_at(self, at_ms: int) -> int:
        """The index of the period holding `at_ms`: half-open, a boundary starts its period."""
        if self.kind == "none":
            return 0
        if self.kind == "day":
            return at_ms // DAY_MS
        if self.kind == "week":
            return (at_ms // DAY_MS - _MONDAY_BEFORE_EPOCH) // 7
        if self.kind == "month":
            year, month, _ = civil_from_days(at_ms // DAY_MS)
            return year * 12 + month - 1
        length, epoch = self._fixed()
        # Floor division: an instant before the epoch is in a period of negative k.
        return (at_ms - epoch) // length

    def period(self, index: int) -> Period:
        """The period of that index, with its bounds."""
        if self.kind == "none":
            return Period(0, None, None)
        if self.kind == "day":
            return Period(index, index * DAY_MS, (index + 1) * DAY_MS)
        if self.kind == "week":
            start = (index * 7 + _MONDAY_BEFORE_EPOCH) * DAY_MS
            return Period(index, start, start + WEEK_MS)
        if self.kind == "month":
            return Period(index, _month_start_ms(index), _month_start_ms(index + 1))
        length, epoch = self._fixed()
        start = epoch + index * length
        return Period(index, start, start + length)

    def _fixed(self) -> tuple[int, int]:
        """A fixed schedule's length and epoch, which `__post_init__` made sure of."""
        if self.length_ms is None or self.epoch_ms is None:
            raise InvalidInput("period", "a fixed period needs length_ms and epoch_ms")
        return self.length_ms, self.epoch_ms

    def period_at(self, at_ms: int) -> Period:
        """The period holding `at_ms` (DESIGN.md §3, "budget periods")."""
        return self.period(self.index_at(at_ms))

    def label(self, index: int) -> str:
        """The name `pool usage --period` takes: `2026-11`, `2026-W48`, `2026-11-30`, or k."""
        if self.kind == "none":
            return "all"
        if self.kind == "month":
            year, month0 = divmod(index, 12)
            return f"{year:04d}-{month0 + 1:02d}"
        if self.kind == "day":
            year, month, day = civil_from_days(index)
            return f"{year:04d}-{month:02d}-{day:02d}"
        if self.kind == "week":
            monday = index * 7 + _MONDAY_BEFORE_EPOCH
            # ISO 8601: a week belongs to the year that holds its Thursday.
            year = civil_from_days(monday + 3)[0]
            return f"{year:04d}-W{(monday - _iso_week1_monday(year)) // 7 + 1:02d}"
        return str(index)

    def parse_label(self, text: str, where: str = "period") -> int:
        """The index a `label` names, refusing text that names no period of this schedule."""
        if not isinstance(text, str):
            raise InvalidInput(where, "must be a string")
        match = _LABELS[self.kind].fullmatch(text)
        if match is None:
            raise InvalidInput(
                where, f"{text[:40]!r} is not a {self.kind} period: {_HINTS[self.kind]}"
            )
        if self.kind == "none":
            return 0
        if self.kind == "fixed":
            return int(text)
        year = int(match["year"])
        if self.kind == "week":
            week = int(match["week"])
            weeks = (_iso_week1_monday(year + 1) - _iso_week1_monday(year)) // 7
            if not 1 <= week <= weeks:
                raise InvalidInput(where, f"{year:04d} has ISO weeks 01 to {weeks}, not {week:02d}")
            return (_iso_week1_monday(year) + (week - 1) * 7 - _MONDAY_BEFORE_EPOCH) // 7
        month = int(match["month"])
        if not 1 <= month <= 12:
            raise InvalidInput(where, f"month {month:02d} is not 01 to 12")
        if self.kind == "month":
            return year * 12 + month - 1
        day = int(match["day"])
        days = days_from_civil(year, month, day)
        if day < 1 or civil_from_days(days) != (year, month, day):
            raise InvalidInput(where, f"{text!r} is not a calendar date")
        return days


def _month_start_ms(index: int) -> int:
    year, month0 = divmod(index, 12)
    return days_from_civil(year, month0 + 1, 1) * DAY_MS


def _iso_week1_monday(year: int) -> int:
    """The day number of the Monday that starts ISO week 1 of `year` (the week of 4 January)."""
    jan4 = days_from_civil(year, 1, 4)
    # Day 0 was a Thursday, so (day + 3) % 7 is 0 on Mondays.
    return jan4 - (jan4 + 3) % 7


_LABELS: Mapping[str, re.Pattern[str]] = {
    "none": re.compile(r"all"),
    "day": re.compile(r"(?P<year>\d{4,6})-(?P<month>\d{2})-(?P<day>\d{2})"),
    "week": re.compile(r"(?P<year>\d{4,6})-W(?P<week>\d{2})"),
    "month": re.compile(r"(?P<year>\d{4,6})-(?P<month>\d{2})"),
    "fixed": re.compile(r"-?\d{1,20}"),
}
_HINTS = {
    "none": "a deployment without periods has one, 'all'",
    "day": "give YYYY-MM-DD, e.g. 2026-11-30",
    "week": "give an ISO week YYYY-Www, e.g. 2026-W48",
    "month": "give YYYY-MM, e.g. 2026-11",
    "fixed": "give the period's index k, an integer",
}

NONE = Schedule()
"""The default schedule: one period for all time (DESIGN.md §3)."""
