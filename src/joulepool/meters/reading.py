"""Readings of an energy counter, and the energy between two of them (standard §2.3, §2.7).

A meter is read, never trusted to be there. The reading "this workload spent 0 µJ" arrives
identically from a parked workload and from a meter that is not there, so a meter that
cannot be read raises `MeterUnavailable` with its reason and never yields a figure: the
chain "meter unavailable → 0 µJ → idle → reclaim" of §2.7 is refused at its first link.

Every figure is an integer (DESIGN.md §2): the counter in microjoules, the time it was read
in microseconds of the monotonic clock, the meter's resolution in microjoules.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from joulepool.errors import InvalidInput, PoolError
from joulepool.grade import Energy, Grade, check_figure
from joulepool.meters.grades import MeterKind, grade_of


class UnavailableReason(StrEnum):
    """Why a meter gave no figure; each names what an operator has to fix (§2.7)."""

    missing_device = "missing_device"
    """The device, zone or file is not on this host."""
    permission_denied = "permission_denied"
    """The counter exists but this process may not read it (RAPL: root-only on patched kernels)."""
    unsupported_device = "unsupported_device"
    """The device has no energy counter (NVML before Volta)."""
    library_missing = "library_missing"
    """The library that reads it is not installed (nvidia-ml-py, libnvidia-ml.so)."""
    unreachable = "unreachable"
    """A scrape endpoint did not answer, or answered with an error status."""
    not_found = "not_found"
    """The endpoint answered, but without the series this meter reads."""
    invalid_value = "invalid_value"
    """The counter's text is not a non-negative integer figure (or is ambiguous, or imprecise)."""
    counter_reset = "counter_reset"
    """A counter that does not wrap went backwards: driver reload or exporter restart."""
    window_exceeds_wrap = "window_exceeds_wrap"
    """The window is long enough for a wrapping counter to have wrapped more than once."""
    driver_error = "driver_error"
    """The driver refused the read for a reason not listed above."""


class MeterUnavailable(PoolError):
    """A meter gave no figure, with the reason; it never stands in for 0 µJ (§2.7)."""

    code = "meter_unavailable"

    def __init__(self, meter: str, reason: UnavailableReason, explanation: str) -> None:
        super().__init__(f"meter {meter!r} unavailable ({reason.value}): {explanation}")
        self.meter = meter
        self.reason = reason
        self.explanation = explanation

    def to_json(self) -> dict[str, object]:
        """Machine-readable: the meter, the reason code, the sentence for people (§2.7)."""
        return {"meter": self.meter, "reason": self.reason.value, "detail": self.explanation}


@dataclass(frozen=True, slots=True)
class Reading:
    """One read of an energy counter: its value, when, at what grade and resolution (§2.3).

    `counter_uj` is the counter as the meter reports it, converted to microjoules without
    passing through a float. `read_at_us` is `time.monotonic_ns() // 1000` when the value
    came back. `wrap_uj`, where set, is the counter's modulus: it counts 0 .. wrap_uj - 1 and
    then returns to 0 (for RAPL, `max_energy_range_uj + 1`). `max_power_uw`, where the meter
    knows a bound on the device's power, lets `energy_between` refuse a window long enough
    to hide a second wrap.
    """

    meter: str
    counter_uj: int
    read_at_us: int
    grade: Grade
    resolution_uj: int
    wrap_uj: int | None = None
    max_power_uw: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.meter, str) or not self.meter:
            raise InvalidInput("meter", "must be a non-empty string")
        check_figure(self.counter_uj, "counter_uj")
        check_figure(self.read_at_us, "read_at_us")
        if not isinstance(self.grade, Grade):
            raise InvalidInput("grade", f"must be a Grade, got {self.grade!r}")
        if check_figure(self.resolution_uj, "resolution_uj") == 0:
            raise InvalidInput("resolution_uj", "must be at least 1")
        if self.wrap_uj is not None:
            # A modulus, not a figure: a full 64-bit counter wraps at 2**64, one past the
            # largest figure (DESIGN.md §3), and every step it yields is still a figure.
            full_64_bit = type(self.wrap_uj) is int and self.wrap_uj == 2**64
            if not full_64_bit and check_figure(self.wrap_uj, "wrap_uj") == 0:
                raise InvalidInput("wrap_uj", "must be at least 1")
            if self.counter_uj >= self.wrap_uj:
                raise InvalidInput(
                    "counter_uj",
                    f"{self.counter_uj} is outside the counter's range 0..{self.wrap_uj - 1}",
                )
        if self.max_power_uw is not None and check_figure(self.max_power_uw, "max_power_uw") == 0:
            raise InvalidInput("max_power_uw", "must be at least 1 where it is stated")

    def to_json(self) -> dict[str, object]:
        """The reading as JSON: integers and the grade's name, nothing else (§2.3)."""
        out: dict[str, object] = {
            "meter": self.meter,
            "counter_uj": self.counter_uj,
            "read_at_us": self.read_at_us,
            "grade": self.grade.value,
            "resolution_uj": self.resolution_uj,
        }
        if self.wrap_uj is not None:
            out["wrap_uj"] = self.wrap_uj
        if self.max_power_uw is not None:
            out["max_power_uw"] = self.max_power_uw
        return out


def now_us() -> int:
    """Microseconds of the monotonic clock, the time base of every reading (§2.7)."""
    return time.monotonic_ns() // 1000


def energy_between(a: Reading, b: Reading) -> Energy:
    """The energy a meter counted from reading `a` to reading `b`, at its grade (§2.3, §2.7).

    Both readings must come from the same meter, `b` no earlier than `a`. Where the counter
    went up, the figure is the difference. Where it went down:

    - on a wrapping counter (`wrap_uj` set) it wrapped once, and the figure is exactly
      `b.counter_uj + wrap_uj - a.counter_uj`;
    - on any other counter it was reset (driver reload, exporter restart), and no figure
      exists for the window: `MeterUnavailable` with `counter_reset`, never a negative
      figure and never 0.

    At most one wrap can be seen in two readings: a wrapping counter read twice across two
    or more wraps looks exactly like one read across none or one. Where the readings state
    `max_power_uw`, a window in which the device could have counted a whole wrap is refused
    with `window_exceeds_wrap`; where they do not (RAPL's powercap has no trustworthy bound),
    the caller must read at least once per wrap period (RAPL: `max_energy_range_uj` at the
    package's peak power, minutes on a large server) and sum the steps, as `Accumulator` does.

    The grade is the weaker of the two readings' grades: it is never raised.
    """
    if a.meter != b.meter:
        raise InvalidInput("readings", f"readings of two meters, {a.meter!r} and {b.meter!r}")
    if a.wrap_uj != b.wrap_uj:
        raise InvalidInput("readings", f"meter {a.meter!r} changed its wrap range between readings")
    if b.read_at_us < a.read_at_us:
        raise InvalidInput(
            "readings",
            f"meter {a.meter!r}: the second reading is {a.read_at_us - b.read_at_us} µs earlier",
        )
    grade = a.grade.weaker(b.grade)
    wrap = a.wrap_uj
    if wrap is not None:
        bound = a.max_power_uw if b.max_power_uw is None else b.max_power_uw
        span_us = b.read_at_us - a.read_at_us
        # Cross-multiplied so no float decides: at `bound` µW for `span_us` µs the device
        # could count bound * span_us / 1e6 µJ; a whole wrap in that makes the delta ambiguous.
        if bound is not None and bound * span_us >= wrap * 1_000_000:
            raise MeterUnavailable(
                a.meter,
                UnavailableReason.window_exceeds_wrap,
                f"a window of {span_us} µs at up to {bound} µW could hide a whole wrap of "
                f"{wrap} µJ; read the meter more often and sum the steps",
            )
    if b.counter_uj >= a.counter_uj:
        return Energy(b.counter_uj - a.counter_uj, grade)
    if wrap is None:
        raise MeterUnavailable(
            a.meter,
            UnavailableReason.counter_reset,
            f"the counter went back from {a.counter_uj} µJ to {b.counter_uj} µJ and does not "
            "wrap: it was reset, so the window has no figure",
        )
    return Energy(b.counter_uj + wrap - a.counter_uj, grade)


class Meter(ABC):
    """A source of graded energy readings (§2.3): one counter on one device.

    `name` is stable and unique on the host (it is the device key the feed helpers use) and
    `kind` says which source it is. The grade is not the meter's to choose: it is looked up
    in the one table of `joulepool.meters.grades`, so no meter can claim better than its
    kind. `read()` returns a `Reading` or raises `MeterUnavailable`; it never returns a
    figure it did not read.
    """

    kind: MeterKind

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidInput("meter", "a meter's name must be a non-empty string")
        self.name = name

    @property
    def grade(self) -> Grade:
        """The grade of this meter's readings, from the grade table (§2.3)."""
        return grade_of(self.kind)

    @abstractmethod
    def read(self) -> Reading:
        """Read the counter now, or raise `MeterUnavailable` naming why not (§2.7)."""

    def unavailable(self, reason: UnavailableReason, detail: str) -> MeterUnavailable:
        """The refusal this meter raises when it cannot be read (§2.7)."""
        return MeterUnavailable(self.name, reason, detail)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def read_all(meters: Iterable[Meter]) -> dict[str, Reading]:
    """Read every meter once, keyed by name; the first that cannot be read raises (§2.7).

    A duplicate name is refused: two meters under one name would count one device twice.
    """
    out: dict[str, Reading] = {}
    for meter in meters:
        if meter.name in out:
            raise InvalidInput("meters", f"meter {meter.name!r} listed twice")
        out[meter.name] = meter.read()
    return out
