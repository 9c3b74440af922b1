"""Whether a release's actual figure is physically possible (API.md "Additions").

A release charges its actual figure for good (§6.2): a figure typed ×1000 too large would
leave its team queueing `limit_reached` for the rest of the period. With a ceiling
configured (`max_device_power_w` in pool.toml), no claim can have drawn more than
devices × ceiling × the real time since its admission; a figure above that bound is refused as
`implausible_actual`, naming the bound, unless an operator overrides it (and the override is
logged). Without a ceiling there is no physical bound to apply, so a figure more than
`UNCONFIGURED_RATIO` times its reservation is flagged: the CLI asks for confirmation and the
service logs it. The CLI and the HTTP service both come here.

The time since admission is real elapsed time, never a difference of `at_ms` (DESIGN.md §3,
`Pool.elapsed_since_admission_ms`): for a claim the process admitted, the monotonic clock
since its admission; for one admitted before the process started, the larger of the
process's own age and the wall clock's distance from the admission's `at_ms`, never below 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from joulepool.errors import ClaimError
from joulepool.units import energy_text

if TYPE_CHECKING:
    from joulepool.pool import Pool

UNCONFIGURED_RATIO = 10
"""Without a ceiling: an actual above this many times its reservation asks for confirmation."""
UJ_PER_W_MS = 1_000
"""1 W for 1 ms is 1 mJ: 1,000 µJ."""


@dataclass(frozen=True, slots=True)
class Finding:
    """Why an actual figure is not believed as it stands.

    `bound_uj` is the physical bound where a ceiling is configured (`above_ceiling`), or
    the reservation × `UNCONFIGURED_RATIO` where none is (`far_above_reservation`).
    """

    kind: str
    claim: str
    actual_uj: int
    bound_uj: int
    words: str


def physical_bound_uj(devices: int, ceiling_w: int, elapsed_ms: int) -> int:
    """devices × ceiling (W) × time since admission (ms), in µJ: the most a claim can draw."""
    return devices * ceiling_w * max(0, elapsed_ms) * UJ_PER_W_MS


def check_release(
    pool: Pool, claim_id: str, actual_uj: int, ceiling_w: int | None
) -> Finding | None:
    """A reason to doubt `actual_uj` for `claim_id`, or None (API.md "Additions").

    A claim the ledger does not hold as running is not judged here: the release itself
    answers `unknown_claim` or `already_released`, as it always has.
    """
    state = pool.claim_state(claim_id)
    if state is None or not state.running:
        return None
    adm = state.admitted
    if ceiling_w is not None:
        # Real elapsed time (DESIGN.md §3): an `at_ms` raised to its predecessor's across a
        # clock step would make the bound 0 and refuse every figure.
        elapsed_ms = pool.elapsed_since_admission_ms(claim_id, adm)
        bound = physical_bound_uj(adm.devices, ceiling_w, elapsed_ms)
        if actual_uj <= bound:
            return None
        return Finding(
            "above_ceiling",
            claim_id,
            actual_uj,
            bound,
            f"actual {energy_text(actual_uj)} is above the physical bound of {energy_text(bound)} "
            f"({adm.devices} device(s) × {ceiling_w} W max_device_power_w × {elapsed_ms:,} ms "
            "since admission)",
        )
    bound = adm.reserved.uj * UNCONFIGURED_RATIO
    if actual_uj <= bound:
        return None
    return Finding(
        "far_above_reservation",
        claim_id,
        actual_uj,
        bound,
        f"actual {energy_text(actual_uj)} is more than {UNCONFIGURED_RATIO}× its reservation "
        f"of {energy_text(adm.reserved.uj)} (no max_device_power_w is configured to bound it)",
    )


def refusal(finding: Finding) -> ClaimError:
    """The error a refused figure is answered with: `implausible_actual`, naming the bound."""
    return ClaimError(
        "implausible_actual",
        f"claim {finding.claim!r}: {finding.words}; nothing was charged. An operator may "
        "override a figure that is right (logged)",
    )
