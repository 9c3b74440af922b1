"""From meter readings to the figures Pool takes: a release's actual, an idle observation.

A device counter reads the whole device. The figure it gives a claim depends on who held
the device over the window (§2.5): a device held by one gang only keeps the counter's own
grade; a device held by several is divided by `attribute()`, and every share comes out
ModelBased. A claim over several devices is the sum of its parts, at the weakest of their
grades (`Energy.__add__`). Nothing here raises a grade.

Occupancy must be constant over a window. Where another claim joins or leaves a device,
read the meters at that moment and take each segment's share separately
(`claim_share` per segment, summed).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from joulepool.attribution import attribute
from joulepool.errors import InvalidInput
from joulepool.grade import Energy, check_figure
from joulepool.idle import IdleObservation
from joulepool.meters.rapl import zones_overlap
from joulepool.meters.reading import Meter, Reading, energy_between, read_all

Occupants = Mapping[str, Mapping[str, int]]
"""For each device (meter name), each occupant's claim id and its weight (§2.5)."""


class Accumulator:
    """One meter's energy summed over many readings (§2.3, §2.7).

    Two readings of a wrapping counter can see one wrap at most; reading it more often than
    it wraps and summing the steps measures a window of any length. The grade is the
    weakest of the steps.
    """

    def __init__(self, first: Reading) -> None:
        self.first = first
        self.last = first
        self.energy = Energy(0, first.grade)

    def add(self, reading: Reading) -> Energy:
        """Take a later reading of the same meter; the step's energy (§2.3)."""
        step = energy_between(self.last, reading)
        self.energy = self.energy + step
        self.last = reading
        return step

    @property
    def span_us(self) -> int:
        """Microseconds from the first reading to the last: the window measured (§2.7)."""
        return self.last.read_at_us - self.first.read_at_us


def claim_share(
    claim: str, device_energy: Mapping[str, Energy], occupants: Occupants | None = None
) -> Energy:
    """A claim's energy over its devices for one window, each device graded by its occupancy (§2.5).

    `device_energy` is each device's whole-device figure for the window. With `occupants`
    None the claim is the sole occupant of every device listed; otherwise every device must
    be listed there with this claim among its occupants, and each is divided by
    `attribute()`: one occupant keeps the device's grade, two or more make it ModelBased.
    """
    if not isinstance(claim, str) or not claim:
        raise InvalidInput("claim", "must be a non-empty string")
    if not device_energy:
        raise InvalidInput(
            "devices", f"claim {claim!r} has no metered devices: there is no figure to give"
        )
    overlap = zones_overlap(device_energy)
    if overlap is not None:
        raise InvalidInput(
            "devices", f"{overlap[1]} is inside {overlap[0]}: the claim would be charged twice"
        )
    total: Energy | None = None
    for device in sorted(device_energy):
        energy = device_energy[device]
        if occupants is None:
            share = energy
        else:
            held_by = occupants.get(device)
            if held_by is None:
                raise InvalidInput(
                    "occupants", f"device {device!r} is not listed: who held it is unknown"
                )
            if claim not in held_by:
                raise InvalidInput("occupants", f"claim {claim!r} is not an occupant of {device!r}")
            share = attribute(energy, held_by)[claim]
        total = share if total is None else total + share
    assert total is not None
    return total


def _windows(
    before: Mapping[str, Reading], after: Mapping[str, Reading]
) -> dict[str, tuple[Energy, int]]:
    if set(before) != set(after):
        missing = sorted(set(before) ^ set(after))
        raise InvalidInput("readings", f"devices read only once: {', '.join(missing)}")
    out: dict[str, tuple[Energy, int]] = {}
    for device in sorted(before):
        a, b = before[device], after[device]
        if a.meter != device or b.meter != device:
            raise InvalidInput(
                "readings", f"device {device!r} carries a reading of {a.meter!r} / {b.meter!r}"
            )
        out[device] = (energy_between(a, b), b.read_at_us - a.read_at_us)
    return out


def release_actual(
    claim: str,
    before: Mapping[str, Reading],
    after: Mapping[str, Reading],
    occupants: Occupants | None = None,
) -> Energy:
    """A release's actual figure, from its devices read at admission and at release (§6.2, §2.5).

    `before` and `after` map each of the claim's devices (meter names) to a reading; the
    figure is the claim's share of each device's energy between them, summed (see
    `claim_share`). A meter that cannot be read, or whose counter was reset, leaves the
    release without a figure (`MeterUnavailable`): it is never charged as 0. For a wrapping
    counter over a long claim, read it periodically with `Accumulator` and pass the sums to
    `claim_share`.
    """
    windows = _windows(before, after)
    return claim_share(claim, {d: e for d, (e, _) in windows.items()}, occupants)


def idle_observation(
    key: str,
    held_devices: int,
    before: Mapping[str, Reading],
    after: Mapping[str, Reading],
    occupants: Occupants | None = None,
) -> IdleObservation:
    """A §2.7 observation of a workload from two readings of its devices' meters.

    The energy is the workload's share of its devices (as `claim_share`, `key` as its claim
    id), at the grade that leaves it. The span is the shortest of the devices' windows: each
    device's energy is over a window at least that long, so the stated rate can only err
    high, towards `working`, the side on which nothing is reclaimed. `held_devices` is the
    number of devices Pool says the workload holds, which a meter cannot know.
    """
    check_figure(held_devices, "held_devices")
    windows = _windows(before, after)
    if not windows:
        raise InvalidInput("readings", f"workload {key!r} has no metered devices")
    energy = claim_share(key, {d: e for d, (e, _) in windows.items()}, occupants)
    observed = min(span for _, span in windows.values())
    return IdleObservation(key, held_devices, observed, energy)


def sample_idle(
    key: str,
    held_devices: int,
    meters: Sequence[Meter],
    span_us: int,
    occupants: Occupants | None = None,
) -> IdleObservation:
    """Read a workload's meters, wait `span_us`, read them again: its §2.7 observation.

    A meter that cannot be read raises `MeterUnavailable`, so no observation exists and the
    workload cannot be judged idle: unknown is not idle.
    """
    check_figure(span_us, "span_us")
    if not meters:
        raise InvalidInput("meters", f"workload {key!r} has no meters to sample")
    before = read_all(meters)
    time.sleep(span_us / 1_000_000)
    after = read_all(meters)
    return idle_observation(key, held_devices, before, after, occupants)
