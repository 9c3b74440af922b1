"""`pool slurm agent`: re-ask Pool for held jobs, release their holds on Admit (§4; API.md).

Each pass:
1. A job job_submit.lua held (a user hold, priority 0) becomes an administrator's hold
   (`scontrol hold`, JobHeldAdmin), which its owner cannot release.
2. When the ledger moved since the last ask (a release frees energy and devices), or a
   held job is new, or Pool was unreachable, the held jobs are asked again with their
   original claim, per entitlement in submission order (job id order); so are they when a
   held job's budget period has renewed (DESIGN.md §3), so a job queued on a spent monthly
   budget starts on the first of the month with no one acting. The first that is
   still queued stops its entitlement: a later, smaller job does not overtake it.
   Admit → the note says admitted, then the hold is released. Deny (the tree changed) →
   the job stays held with the reason. A claim Pool already admitted (409: the
   submission's answer was lost to a timeout) is released from its hold as well.
3. Reconciliation: admitted jobs that ended without a report (cancelled while pending:
   EpilogSlurmctld does not run for them; Pool unreachable at the end; slurmctld restarted
   mid-epilog; a node failure) are found in sacct and reported as the epilog would, once
   they ended `reconcile_after_s` ago (see `_reconcile`).
4. Every `sample_every_s`, each running admitted job's energy so far is posted as a live
   reading (`sampling.py`; DESIGN.md §7).
   With each sample, each admitted job Slurm keeps pending for resources (Reason
   `Resources` or `Priority`) is reported as waiting (`POST /v1/claims/{id}/waiting`: its
   partition, the GPUs it asks for, since its EligibleTime): what §5.2 preemption and the
   idle policy's `when = "contended"` decide on.
5. After each sample, the acts Pool says are due (`GET /v1/actions/due`: the reservation as
   a limit, §2.7 idle reclamation and §5.2 preemption, DESIGN.md §7) are carried out and
   their outcomes reported (`POST /v1/actions`, with the rule that made each due):
   `notice` writes `act=notice` into the admin comment (the note stays whole) and sends
   SIGUSR1 to the job's batch script and steps; `signal` sends SIGUSR2 the same way;
   `requeue` is `scontrol requeue`; `cancel` is `scancel`. Once a job is requeued or
   cancelled in a pass, nothing more is done to it in that pass. The agent never decides:
   Pool lists an act as due until it is recorded done, so each is carried out once across
   agent restarts (twice at most, if the agent stops between carrying it out and reporting
   it).
"""

from __future__ import annotations

import sys
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from joulepool.bridges.slurm.config import (
    ADMITTED_STATES,
    HELD_STATES,
    BridgeConfig,
    PoolNote,
    PoolUnreachable,
    read_token,
)
from joulepool.bridges.slurm.jobs import (
    TERMINAL,
    Ended,
    PoolClient,
    SlurmCommandFailed,
    SlurmJob,
    ended_jobs,
    list_jobs,
    report_job,
    run_slurm,
    sacct_restarts,
)
from joulepool.bridges.slurm.sampling import Sampler

ACTS = ("notice", "signal", "requeue", "cancel")
"""The acts the agent carries out: `joulepool.acts.ACTS`, restated because the bridge runs on
the standard library (`acts` imports the grade types, which need msgspec)."""
FINAL = ("requeue", "cancel")
"""Acts after which the job is not this run any more: nothing else is done to it in a pass."""
RULES = ("over_reservation", "idle", "preemption")
"""The rules an act may be due under (`deployment.actions.RULES`)."""
WAITING = ("Resources", "Priority")
"""Why a pending job waits for capacity (squeue's reasons): these, and no hold or
dependency, make an admitted job one that preemption may reclaim capacity for."""

FULL_PASS_S = 30.0
"""Ask every held job again at least this often, whatever the ledger did (a reloaded tree)."""
RECONCILE_EVERY_S = 5.0
"""How often sacct is asked for ended jobs whose claims are still open."""
LOOKBACK_S = 7 * 86_400
"""How far back sacct is asked: a claim open longer than this after its job ended needs an
operator (`pool` release by hand)."""


@dataclass
class Agent:
    """The agent's state between passes."""

    config: BridgeConfig
    env: Mapping[str, str]
    client: PoolClient
    log: Callable[[str], None] = field(
        default=lambda line: print(line, file=sys.stderr, flush=True)
    )
    last_length: int | None = None
    last_held: frozenset[int] = frozenset()
    last_full: float = 0.0
    reported: set[int] = field(default_factory=set)
    last_reconcile: float = 0.0
    sampler: Sampler | None = None
    refused: set[str] = field(default_factory=set)
    """Array claims whose due requeue was refused (reported once, see `carry_out`)."""
    exempt_seen: set[int] = field(default_factory=set)
    exempt_total: int = 0
    """Jobs seen exempt since the agent started (docs/slurm.md, "Exempt jobs")."""

    @classmethod
    def from_config(cls, config: BridgeConfig, env: Mapping[str, str]) -> Agent:
        """An agent with the configured token (a 10 s HTTP timeout: it stalls nobody)."""
        client = PoolClient(config.url, read_token(config.token_file), 10.0, config.ca_file)
        agent = cls(config, env, client)
        agent.sampler = Sampler(
            config.dcgm_url,
            config.node_exporter_url,
            config.sample_every_s,
            client,
            env,
            config.gpu_state_dir,
            agent.log,
        )
        return agent

    def scontrol(self, *args: str) -> None:
        """Run scontrol as this (root) process: holds set here are administrator's holds."""
        run_slurm(["scontrol", *args], self.env)

    def set_note(self, job: SlurmJob, note: PoolNote) -> None:
        """Rewrite the job's admin comment."""
        self.scontrol("update", f"jobid={job.job_id}", f"admincomment={note.format()}")

    def run_pass(self) -> None:
        """One pass (see the module docstring)."""
        listed = list_jobs(self.env)
        self._count_exempt(listed)
        jobs = [j for j in listed if j.note is not None]
        for job in jobs:
            if job.state == "PENDING" and job.reason == "JobHeldUser" and _held(job):
                self.scontrol("hold", str(job.job_id))
                self.log(f"job {job.job_id}: Pool's hold made an administrator's hold")
        self._ask_held(jobs)
        self._reconcile(jobs)
        if self.sampler is not None and self.sampler.due(time.monotonic()):
            self.sampler.sample(jobs)
            self.report_waiting(jobs)
            self.carry_out(jobs)

    def report_waiting(self, jobs: list[SlurmJob]) -> int:
        """Tell Pool which admitted jobs Slurm keeps pending for resources, with their
        partition, the GPUs they ask for and since when (DESIGN.md §7); how many."""
        at_ms = time.time_ns() // 1_000_000
        every_ms = self.config.sample_every_s * 1000
        sent = 0
        for job in jobs:
            note = job.note
            if (
                job.state != "PENDING"
                or job.reason not in WAITING
                or note is None
                or note.state not in ADMITTED_STATES
                or job.partition is None
            ):
                continue
            since_ms = at_ms if job.eligible_s is None else int(job.eligible_s * 1000)
            body = {
                "at_ms": at_ms,
                "since_ms": min(since_ms, at_ms),
                "partition": job.partition,
                "gpus": job.gpus,
                "every_ms": max(1000, min(every_ms, 3_600_000)),
                "job": {"id": str(job.job_id), **({"user": job.user} if job.user else {})},
            }
            path = "/v1/claims/" + urllib.parse.quote(note.claim, safe="") + "/waiting"
            answer = self.client.call("POST", path, body)
            if answer.status == 200:
                sent += 1
            else:
                self.log(f"job {job.job_id}: waiting report refused: HTTP {answer.status}")
        return sent

    def carry_out(self, jobs: list[SlurmJob]) -> int:
        """Carry out the acts Pool says are due for running jobs, and report each outcome
        (DESIGN.md §7; the module docstring's step 5); how many were done."""
        answer = self.client.call("GET", "/v1/actions/due")
        due = answer.body.get("due")
        if answer.status != 200 or not isinstance(due, list):
            self.log(f"acts due: HTTP {answer.status} {answer.error}")
            return 0
        running: dict[str, SlurmJob] = {}
        for j in jobs:
            if j.state != "RUNNING" or j.note is None or j.note.state not in ADMITTED_STATES:
                continue
            # An array's claim is the whole array's: its acts are the array's, by its id
            # (every task; scancel and scontrol update take the array's id for all).
            whole = j.note.tasks is not None and j.array_job is not None
            running[j.note.claim] = replace(j, job_id=j.array_job or j.job_id) if whole else j
        done = 0
        ended: set[int] = set()
        for item in due:
            if not isinstance(item, dict) or item.get("kind") not in ACTS:
                continue
            kind = str(item["kind"])
            rule = item.get("rule", "over_reservation")
            job = running.get(str(item.get("claim")))
            if job is None or job.job_id in ended or rule not in RULES:
                continue  # not running here now (or no more this pass): nothing to act on
            assert job.note is not None
            if kind == "requeue" and job.note.tasks is not None:
                if job.note.claim in self.refused:
                    continue
                # A requeued task's earlier run is not kept (its claim is settled task by
                # task at the array's end), so requeueing would charge less than was spent.
                self.refused.add(job.note.claim)
                refusal = "a job array is never requeued: runs would go uncharged"
                told = self.client.call(
                    "POST",
                    "/v1/actions",
                    {
                        "claim": job.note.claim,
                        "rule": str(rule),
                        "kind": kind,
                        "outcome": "failed",
                        "job": str(job.job_id),
                        "detail": refusal,
                    },
                )
                self.log(f"array {job.job_id}: requeue refused ({refusal}); HTTP {told.status}")
                continue
            # A preemption's record names the waiting claim it made room for, as Pool's own
            # records of that rule do (`for <claim>`).
            served = item.get("for")
            why = f"for {served}" if rule == "preemption" and isinstance(served, str) else None
            detail = why
            try:
                self._act(job, kind, str(rule))
                outcome = "done"
            except SlurmCommandFailed as exc:
                failed = str(exc)[: 200 - len(why or "")]
                outcome, detail = "failed", failed if why is None else f"{why}: {failed}"
            assert job.note is not None
            body = {
                "claim": job.note.claim,
                "rule": str(rule),
                "kind": kind,
                "outcome": outcome,
                "job": str(job.job_id),
            }
            if outcome == "done" and kind in FINAL:
                ended.add(job.job_id)
            if detail is not None:
                body["detail"] = detail[:256]  # Pool takes at most 256 characters
            told = self.client.call("POST", "/v1/actions", body)
            self.log(
                f"job {job.job_id}: {rule} {kind} {outcome} ({item.get('reason')}); "
                f"reported: HTTP {told.status}{' ' + detail if detail else ''}"
            )
            done += outcome == "done"
        return done

    def _act(self, job: SlurmJob, kind: str, rule: str = "over_reservation") -> None:
        """Carry out one act; the admin comment says which, and under which rule (its owner
        reads why in `scontrol show job` and sacct: `act=idle:notice`, `act=notice` for the
        reservation as a limit, as it always read)."""
        jid = str(job.job_id)
        note = job.note
        assert note is not None
        self.set_note(
            job, replace(note, act=kind if rule == "over_reservation" else f"{rule}:{kind}")
        )
        if kind in ("notice", "signal"):
            signal = "USR1" if kind == "notice" else "USR2"
            run_slurm(["scancel", "--full", f"--signal={signal}", jid], self.env)
        elif kind == "requeue":
            self.scontrol("requeue", jid)
        elif kind == "cancel":
            run_slurm(["scancel", jid], self.env)

    def _count_exempt(self, listed: list[SlurmJob]) -> None:
        """Log each job job_submit.lua exempted, once, with the running count: exempt jobs
        are never claimed, so this log is where an operator sees how many ran."""
        exempt = {j.job_id: j.exempt for j in listed if j.exempt is not None}
        for job_id in sorted(exempt.keys() - self.exempt_seen):
            self.exempt_total += 1
            self.log(
                f"job {job_id}: exempt ({exempt[job_id]}), never claimed; {self.exempt_total} exempt since start"
            )
        # Only jobs slurmctld still lists are remembered; a forgotten one is never listed again.
        self.exempt_seen = set(exempt)

    def _ask_held(self, jobs: list[SlurmJob]) -> None:
        held = [j for j in jobs if j.state == "PENDING" and j.note is not None and _held(j)]
        for job in jobs:
            if job.note is not None and job.note.state == "releasing" and job.state == "PENDING":
                # Admitted, but the agent stopped before lifting the hold last time.
                self._admit(job, job.note, "admitted (finishing an interrupted release)")
        if not held:
            self.last_held = frozenset()
            return
        length = self.client.ledger_length()
        ids = frozenset(j.job_id for j in held)
        now = time.monotonic()
        wall_ms = time.time_ns() // 1_000_000
        due = (
            length != self.last_length
            or not ids <= self.last_held
            or any(j.note is not None and j.note.state == "unreachable" for j in held)
            or any(_renewed(j, wall_ms) for j in held)
            or now - self.last_full >= FULL_PASS_S
        )
        self.last_held = ids
        if not due:
            return
        self.last_length, self.last_full = length, now
        blocked: set[str] = set()
        for job in held:
            note = job.note
            assert note is not None
            if note.entitlement in blocked or note.state == "denied":
                continue
            if not self._ask(job, note):
                blocked.add(note.entitlement)
        # Admits moved the ledger: the next pass need not ask again for that alone.
        self.last_length = self.client.ledger_length()

    def _ask(self, job: SlurmJob, note: PoolNote) -> bool:
        """Ask Pool for one held job; True when its entitlement's queue may move on."""
        answer = self.client.call("POST", "/v1/claims", note.claim_json())
        if answer.status == 409 and answer.error == "claim_exists":
            self._admit(job, note, "admitted earlier; its answer had been lost")
            return True
        if answer.status != 200:
            raise PoolUnreachable(
                f"claim {note.claim}: HTTP {answer.status} {answer.error}: {answer.body.get('detail')}"
            )
        verdict, reason = answer.body.get("verdict"), answer.body.get("reason")
        if verdict == "admit":
            self._admit(job, note, "admitted")
            return True
        if verdict == "deny":
            self.set_note(job, note.with_state("denied", str(reason)))
            self.log(f"job {job.job_id}: denied ({reason}); it stays held for its owner to cancel")
            return True
        renews = answer.body.get("period_end_ms")
        renews = renews if type(renews) is int and renews >= 0 else None
        if note.state != "queued" or note.reason != reason or note.renews_ms != renews:
            self.set_note(job, note.with_state("queued", str(reason), renews))
        return False

    def _admit(self, job: SlurmJob, note: PoolNote, how: str) -> None:
        # The note says releasing before the hold is lifted and admitted after: a job must
        # never run with a note the epilog would not report, and a crash in between is
        # finished by the next pass.
        self.set_note(job, note.with_state("releasing"))
        if job.reason in ("JobHeldAdmin", "JobHeldUser"):
            self.scontrol("release", str(job.job_id))
        self.set_note(job, note.with_state("admitted"))
        self.log(f"job {job.job_id}: claim {note.claim} {how}; hold released")

    def _reconcile(self, known: list[SlurmJob]) -> None:
        """Release claims still open in Pool whose jobs Slurm has finished (§6.2).

        sacct lists every job of the last `LOOKBACK_S` with its end state and admin comment,
        whether or not slurmctld still remembers it (MinJobAge); `known` (slurmctld's jobs)
        adds those sacct has not recorded yet. A job in any end state
        (COMPLETED, FAILED, TIMEOUT, NODE_FAIL, CANCELLED, also before it started...) that
        ended at least `reconcile_after_s` ago (at once, if it never started: no epilog runs
        for it) and whose claim Pool still holds open is reported as the epilog would, from
        the same evidence; the grace leaves the epilog its time. A requeued job is PENDING or
        RUNNING again, not ended: its claim stays until it really ends.
        """
        now = time.time()
        if now - self.last_reconcile < RECONCILE_EVERY_S:
            return
        self.last_reconcile = now
        ended = ended_jobs(self.env, now - LOOKBACK_S)
        # A job cancelled before it was eligible may reach sacct late: slurmctld's own
        # record counts too while it remembers the job.
        for job in known:
            if job.state in TERMINAL and job.note is not None and job.end_s is not None:
                ended.setdefault(
                    job.job_id, Ended(job.state, job.end_s, job.note, job.array_job, job.started)
                )
        self.reported &= set(ended)
        for job_id, end in ended.items():
            state, note = end.state, end.note
            if job_id in self.reported or note.state not in ADMITTED_STATES:
                continue
            if end.started and now - end.end_s < self.config.reconcile_after_s:
                # A job that ran has its epilog at work; one that never did gets none.
                continue
            current = list_jobs(self.env, job_id)
            if current and current[0].state not in TERMINAL:
                continue  # requeued since sacct's record was written
            open_claim = self.client.call("GET", f"/v1/claims/{note.claim}")
            if open_claim.status == 200 and open_claim.body.get("state") == "running":
                job = (
                    current[0]
                    if current
                    else SlurmJob(
                        job_id,
                        state,
                        "",
                        "",
                        "",
                        "",
                        note,
                        array_job=end.array_job,
                        restarts=sacct_restarts(job_id, self.env),
                    )
                )
                report = report_job(
                    job,
                    self.client,
                    self.env,
                    self.config.gpu_wait,
                    settle_after_s=self.config.reconcile_after_s,
                )
                if report is not None and report.outcome == "array_running":
                    continue  # asked again once the array's last task has ended
                if report is not None:
                    self.log(f"job {job_id} ended {state} unreported; {report.to_json()}")
            elif open_claim.status not in (200, 404):
                continue  # ask again on the next round
            self.reported.add(job_id)

    def run_forever(self, interval_s: float, stop: Callable[[], bool] = lambda: False) -> None:
        """Pass after pass; Pool or Slurm being away is logged and retried, never fatal."""
        while not stop():
            try:
                self.run_pass()
            except (PoolUnreachable, SlurmCommandFailed) as exc:
                self.log(f"pool slurm agent: {exc.code}: {exc}")
            time.sleep(interval_s)


def _renewed(job: SlurmJob, wall_ms: int) -> bool:
    """Whether the budget period a held job waits on has ended (DESIGN.md §3)."""
    note = job.note
    return note is not None and note.renews_ms is not None and wall_ms >= note.renews_ms


def _held(job: SlurmJob) -> bool:
    return job.note is not None and job.note.state in HELD_STATES
