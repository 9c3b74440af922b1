"""The reservation as a limit: what `[runtime] over_reservation` does to a replayed job.

The act is decided by the service's own pure decision, `joulepool.acts.due_act`, never by a
copy: the simulation only finds the instant to ask it about. In this world a running job's
measured energy grows at its modelled power, `E(t) = floor(A × t / D)` µJ after `t` µs of a
run that draws `A` µJ in `D` µs, graded as its release is (`HwShunt` or `ModelBased`, so
every job carries the fresh measured evidence an act needs). `acts.over_limit` is
`E × 100 > R × (100 + margin)`; with `L = floor(R × (100 + margin) / 100)` that is `E > L`,
first true at `t = ceil((L + 1) × D / A)`, exactly, in integers. The service reads on a
millisecond clock, so the act falls on the first whole millisecond at or after that crossing;
there `due_act` is asked on that instant's `Evidence`, first with nothing done (it must say
`notice`: the notice has by then been given, since the job reached its reservation before
its margin) and then with the notice done: it must name the policy's act (`report` under
the default). Anything else stops the replay: the two would disagree.

What each act does to the job, as the service and the Slurm bridge carry it out:

- `report`: nothing; the job runs to its end and is charged what it drew (today's replay).
- `cancel`: the job ends at the act; its claim is released charging the energy drawn so far;
  its work is lost (never completed), and all that energy is wasted.
- `requeue`: the run ends at the act and the job goes back to the queue keeping its claim
  (docs/slurm.md, "A requeue keeps the books"): its reservation and its devices stay held,
  so it starts again at once from its last checkpoint (every `checkpoint_us` of run time),
  and runs to its end: `due_act` makes an act due at most once per claim, and the claim is
  the same. Its release charges both runs: what the stopped run drew plus the rest from the
  checkpoint. Wasted: the stopped run's energy since its last checkpoint.

The notice itself is not modelled as changing anything: no job here reacts to SIGUSR1, and
`signal` (SIGUSR2, whose effect is the job's own) is not replayed.
"""

from __future__ import annotations

from dataclasses import dataclass

from joulepool.acts import Evidence, RuntimePolicy, due_act
from joulepool.grade import Energy
from joulepool_sim.errors import SimulationConfigError
from joulepool_sim.estimates import SimJob

US_PER_MS = 1_000
DEFAULT_CHECKPOINT_US = 3_600 * 1_000_000
"""A requeued job resumes from its last checkpoint, taken every hour of run time."""
REPLAYED = ("report", "requeue", "cancel")


@dataclass(frozen=True, slots=True)
class Plan:
    """What happens to one admitted run: `act` (None where it never passes its margin),
    after how long (`act_us`, from its start), how long it holds its devices, what its
    release charges, and the energy spent on work that was thrown away."""

    act: str | None
    act_us: int | None
    run_us: int
    charged_uj: int
    wasted_uj: int
    completed: bool
    stopped_uj: int = 0


def energy_at(actual_uj: int, duration_us: int, t_us: int) -> int:
    """The energy a run has drawn `t_us` into its `duration_us`, at its modelled power."""
    return actual_uj * t_us // duration_us


def crossing_us(margin_pct: int, reserved_uj: int, actual_uj: int, duration_us: int) -> int | None:
    """The first µs into the run at which its energy is past reservation × (100 + margin)
    / 100 (`acts.over_limit`), exactly; None where the whole run stays within it."""
    limit = reserved_uj * (100 + margin_pct) // 100
    if actual_uj <= limit:
        return None
    return -(-(limit + 1) * duration_us // actual_uj)


def plan(
    policy: RuntimePolicy,
    job: SimJob,
    reserved_uj: int,
    start_us: int,
    checkpoint_us: int = DEFAULT_CHECKPOINT_US,
) -> Plan:
    """What `policy` does to `job` admitted at `start_us` holding `reserved_uj` (module
    docstring), confirmed by `due_act` at the act's instant."""
    if policy.over_reservation not in REPLAYED:
        raise SimulationConfigError(
            f"over_reservation {policy.over_reservation!r} is not replayed here"
        )
    if checkpoint_us < 1:
        raise SimulationConfigError(
            f"the checkpoint interval must be at least 1 µs, got {checkpoint_us}"
        )
    actual, duration = job.actual.uj, job.duration_us
    whole = Plan(None, None, duration, actual, 0, True)
    t = crossing_us(policy.margin_pct, reserved_uj, actual, duration)
    if t is None:
        return whole
    at_ms = -(-(start_us + t) // US_PER_MS)
    act_us = at_ms * US_PER_MS - start_us
    if act_us >= duration:
        return whole  # it ends before the service's clock reaches the crossing
    used = energy_at(actual, duration, act_us)
    evidence = Evidence(
        reserved_uj,
        Energy(used, job.actual.grade),
        at_ms,
        actual * 1_000_000 // duration,
        -(-(start_us + -(-reserved_uj * duration // actual)) // US_PER_MS),
    )
    want = policy.over_reservation
    told = due_act(policy, evidence, at_ms, frozenset())
    due = due_act(policy, evidence, at_ms, frozenset({"notice"}))
    if (policy.acts and told.kind != "notice") or due.kind != want:
        raise SimulationConfigError(
            f"job {job.job.id}: due_act says {told.kind}, then {due.kind} at {at_ms} ms, not {want}"
        )
    if want == "report":
        return Plan("report", act_us, duration, actual, 0, True, used)
    if want == "cancel":
        return Plan("cancel", act_us, act_us, used, used, False, used)
    kept = act_us // checkpoint_us * checkpoint_us
    redone = actual - energy_at(actual, duration, kept)
    return Plan(
        "requeue",
        act_us,
        act_us + duration - kept,
        used + redone,
        used - energy_at(actual, duration, kept),
        True,
        used,
    )
