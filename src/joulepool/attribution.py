"""Dividing one device's energy among its occupants (standard §2.5).

The shares are a model of who caused which joule, never a reading, so a division of two or
more occupants degrades HwShunt to ModelBased; the shares conserve the total exactly, with
the flooring remainder handed out by largest remainder, ties on occupant id (DESIGN.md §3).
"""

from __future__ import annotations

from collections.abc import Mapping

from joulepool.checks import check_figure
from joulepool.errors import AttributionRefused
from joulepool.grade import Energy


def attribute(total: Energy, occupants: Mapping[str, int]) -> dict[str, Energy]:
    """Split `total` among `occupants` by weight, conserving every microjoule (§2.5).

    Raises `AttributionRefused` with `no_occupants` or `no_weight` where there is no basis
    to divide on, since discarding the figure would lose energy the counter really read.
    """
    if not occupants:
        raise AttributionRefused("no_occupants", "a device with no occupants cannot be attributed")
    for key, weight in occupants.items():
        if not isinstance(key, str) or not key:
            raise AttributionRefused(
                "no_occupants", f"occupant id {key!r} is not a non-empty string"
            )
        check_figure(weight, f"occupants.{key}")
    weight_sum = sum(occupants.values())
    if weight_sum == 0:
        raise AttributionRefused("no_weight", "every occupant carries zero weight")
    grade = total.grade if len(occupants) == 1 else total.grade.divided()
    shares: dict[str, int] = {}
    remainders: list[tuple[int, str]] = []
    for key, weight in occupants.items():
        share, remainder = divmod(total.uj * weight, weight_sum)
        shares[key] = share
        remainders.append((remainder, key))
    left = total.uj - sum(shares.values())
    # Largest remainder first; among equal remainders the smaller id in code-point order.
    remainders.sort(key=lambda item: (-item[0], item[1]))
    for _, key in remainders[:left]:
        shares[key] += 1
    return {key: Energy(shares[key], grade) for key in sorted(shares)}
