"""DESIGN.md §7 on the bridge's side, without a cluster: the `act=` field keeps the note
whole, and a job's Restarts count is read from `scontrol show job` as Slurm lays it out."""

from __future__ import annotations

from dataclasses import replace

from joulepool.bridges.slurm.config import parse_note
from joulepool.bridges.slurm.jobs import parse_scontrol_jobs, run_detail

NOTE = (
    "pool:claim=slurm-c-1;entitlement=vision;gang=1;per_member=1;estimate_uj=5;"
    "grade=HwShunt;state=admitted"
)


def record(job_id: int, restarts: str, admin: str) -> str:
    return (
        f"JobId={job_id} JobName=train\n"
        "   UserId=ann(1000) GroupId=users(100) MCS_label=N/A\n"
        "   Priority=1 Nice=0 Account=phys QOS=normal\n"
        "   JobState=RUNNING Reason=None Dependency=(null)\n"
        f"   Requeue=1 Restarts={restarts} BatchFlag=1 Reboot=0 ExitCode=0:0\n"
        "   StartTime=2026-12-04T10:00:00 EndTime=Unknown Deadline=N/A\n"
        "   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)\n"
        "   NodeList=node1\n"
        "   TRES=cpu=1,gres/gpu=1,node=1\n"
        f"   AdminComment={admin} \n"
    )


def test_design_s7_the_act_field_keeps_the_bridges_note_whole() -> None:
    note = parse_note(NOTE)
    assert note is not None and note.act is None
    told = replace(note, act="notice")
    assert told.format() == NOTE + ";act=notice"
    assert parse_note(told.format()) == told
    # A later change of state keeps what was done to the job.
    assert parse_note(told.with_state("admitted").format()) == told


def test_design_s7_restarts_name_each_run_of_a_requeued_job() -> None:
    jobs = parse_scontrol_jobs(record(7, "2", NOTE + ";act=requeue"))
    assert [(j.job_id, j.restarts) for j in jobs] == [(7, 2)]
    assert jobs[0].note is not None and jobs[0].note.act == "requeue"
    assert run_detail(jobs[0]) == "slurm job 7 restarts 2"
    # A count that is not Slurm's layout is no count: the job is read as never requeued.
    assert parse_scontrol_jobs(record(8, "x", NOTE))[0].restarts == 0
