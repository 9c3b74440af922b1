"""The guess, made explicit: TDP × time, graded Estimator (standard §2.3, §2.7).

Where no counter exists, an operator may still want a figure to reserve against. This is
that figure, and it says what it is: a default power nobody measured on this host, so
Estimator. It can reserve inside a guarantee (§4.3) but never borrow (§4.4), and it can
never establish idleness (§2.7): a TDP figure of an idle device is the same as a busy one.
"""

from __future__ import annotations

from joulepool.errors import InvalidInput
from joulepool.grade import Energy, Grade, check_figure
from joulepool.meters.grades import MeterKind
from joulepool.meters.reading import Meter, Reading, now_us


def tdp_energy(tdp_uw: int, span_us: int) -> Energy:
    """TDP × span in µJ, rounded up, graded Estimator (§2.3).

    Rounded up because a guess is most dangerous when it is low (§1.3).
    """
    check_figure(tdp_uw, "tdp_uw")
    check_figure(span_us, "span_us")
    return Energy(-(-tdp_uw * span_us // 1_000_000), Grade.Estimator)


class TdpMeter(Meter):
    """A counter that advances at a stated power from when it was made: Estimator (§2.3)."""

    kind = MeterKind.tdp

    def __init__(self, device: str, tdp_uw: int, started_at_us: int | None = None) -> None:
        if not isinstance(device, str) or not device:
            raise InvalidInput("device", "a TDP estimator needs a device name")
        super().__init__(f"tdp:{device}")
        self.tdp_uw = check_figure(tdp_uw, "tdp_uw")
        self.started_at_us = (
            now_us() if started_at_us is None else check_figure(started_at_us, "started_at_us")
        )

    def read(self) -> Reading:
        """The guessed counter now: TDP × time since the estimator started (§2.3)."""
        at = now_us()
        if at < self.started_at_us:
            raise InvalidInput("started_at_us", "the estimator starts in the future")
        counter = tdp_energy(self.tdp_uw, at - self.started_at_us)
        return Reading(self.name, counter.uj, at, counter.grade, resolution_uj=1)
