"""`pool slurm uninstall`: lift every hold the bridge set, so no job waits on a Pool that
is no longer asked (docs/slurm.md, "Uninstalling").

Run after job_submit.lua no longer calls the bridge and the agent is stopped (else the
agent would hold the jobs again). Each job whose admin comment says the bridge holds it
(queued, unreachable or denied) is released with `scontrol release`, then its note says
`state=unaccounted;reason=bridge_uninstalled`: it runs outside Pool, and neither the epilog
nor a later agent reports it. Released first, noted second: a second run finishes what a
crash between the two left, since the note still names the hold.
"""

from __future__ import annotations

from collections.abc import Mapping

from joulepool.bridges.slurm.config import HELD_STATES
from joulepool.bridges.slurm.jobs import list_jobs, run_slurm

UNINSTALLED = "bridge_uninstalled"
HOLD_REASONS = ("JobHeldAdmin", "JobHeldUser")


def release_holds(env: Mapping[str, str]) -> list[int]:
    """Release every job the bridge holds (§4.5 holds are the bridge's, not Slurm's); the
    job ids released, in submission order."""
    released = []
    for job in list_jobs(env):
        note = job.note
        if note is None or note.state not in HELD_STATES:
            continue
        if job.state == "PENDING" and job.reason in HOLD_REASONS:
            run_slurm(["scontrol", "release", str(job.job_id)], env)
        new = note.with_state("unaccounted", UNINSTALLED)
        run_slurm(
            ["scontrol", "update", f"jobid={job.job_id}", f"admincomment={new.format()}"], env
        )
        released.append(job.job_id)
    return released
