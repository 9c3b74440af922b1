"""`pool demo DIR`: a deployment walked through every verdict pool/1 can give, in plain words.

The main job of `make run`. Everything goes through the real `Pool` on a real ledger file
in DIR, and the ledger it leaves verifies with `pool ledger verify DIR/ledger.cbor`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from joulepool.cli.output import console, table

if TYPE_CHECKING:
    from rich.console import Console

    from joulepool.pool import Pool

MJ = 1_000_000_000_000
KJ = 1_000_000_000
MIN_US = 60_000_000


def _mj(uj: int) -> str:
    return f"{uj / MJ:.2f} MJ"  # display only: every figure stays an integer in µJ


class _Demo:
    def __init__(self, pool: Pool, out: Console) -> None:
        self.pool = pool
        self.out = out
        self.step = 0

    def section(self, title: str) -> None:
        self.step += 1
        self.out.print()
        self.out.rule(f"[bold]{self.step}. {title}")

    def say(self, text: str) -> None:
        self.out.print(text)

    def claim(
        self,
        claim_id: str,
        entitlement: str,
        uj: int,
        grade: str,
        gang: int = 1,
        per_member: int = 1,
        class_: str | None = None,
    ) -> str:
        from joulepool.claim import Claim
        from joulepool.grade import Energy, Grade
        from joulepool.views.explain import explain, renewal

        c = Claim(claim_id, entitlement, gang, per_member, Energy(uj, Grade(grade)), class_)
        decision = self.pool.submit(c)
        where = (
            f" (ledger entry {decision.seq})" if decision.seq is not None else " (nothing written)"
        )
        if decision.period_end_ms is not None:
            where = f"; it {renewal(decision.period_end_ms, self.pool.schedule.noun)}{where}"
        self.say(
            f"  [bold]{claim_id}[/bold] → {entitlement}: {gang}×{per_member} device(s), "
            f"{_mj(uj)} {grade}: {explain(decision.verdict)}{where}"
        )
        return decision.verdict.verdict

    def release(self, claim_id: str, uj: int, grade: str) -> None:
        from joulepool.grade import Energy, Grade

        rel = self.pool.release(claim_id, Energy(uj, Grade(grade)))
        self.say(
            f"  [bold]{claim_id}[/bold] released: charged {_mj(uj)} ({grade}) in place of its "
            f"reservation (ledger entry {rel.seq})"
        )

    def usage(self) -> None:
        from joulepool.cli.pool_cmd import usage_rows

        rows = usage_rows(self.pool)
        self.out.print(
            table(
                "usage",
                ["entitlement", "guarantee", "spent", "reserved", "borrowed", "devices"],
                [
                    [
                        r["id"],
                        _mj(r["guarantee_uj"]),
                        _mj(r["usage"]["spent_uj"]),
                        _mj(r["usage"]["reserved_uj"]),
                        _mj(r["usage"]["borrowed_uj"]),
                        f"{r['usage']['held_devices']}/{r['guarantee_devices']}",
                    ]
                    for r in rows
                ],
                right=["guarantee", "spent", "reserved", "borrowed", "devices"],
            )
        )


def run_demo(folder: Path, out: Console) -> None:
    """Set up a deployment in `folder` and walk the scenario (see the module docstring)."""
    from joulepool.attribution import attribute
    from joulepool.deployment.config import WITNESSES
    from joulepool.deployment.init import init_deployment
    from joulepool.deployment.open import open_pool
    from joulepool.deployment.witnesses import attestation, keep_receipt, load_receipts
    from joulepool.estimate import Derived
    from joulepool.grade import Energy, Grade
    from joulepool.idle import IdleObservation, IdlePolicy, idle_verdicts, reclamation_order
    from joulepool.ledger.keys import KeyPair, write_key_file
    from joulepool.ledger.witness import sign_witness
    from joulepool.pool import wall_clock_ms
    from joulepool.preemption import Workload, preemption_order, realised_cost
    from joulepool.units import energy_text

    init_deployment(folder, "steward")
    out.print(f"[bold]pool/1 demo[/bold] in {folder}: department 'research' with three teams.")
    out.print(
        "  vision 50 MJ / 8 devices, weight 3; language 30 MJ / 4 devices, weight 2, limit 60 MJ; "
        "robotics 20 MJ / 4 devices, weight 1. (1 MJ is about 0.7 GPU-hours at 400 W.)"
    )
    pool = open_pool(folder)
    d = _Demo(pool, out)
    try:
        d.section(
            "Admissions inside a guarantee: a tenant may spend its own guarantee on a guess (§4.3)"
        )
        d.claim("vision-pretrain", "vision", 30 * MJ, "Estimator", gang=2, per_member=2)
        d.claim("language-ft-1", "language", 12 * MJ, "Estimator", per_member=2)

        d.section("A guess is refused the right to borrow a sibling's surplus (§4.4)")
        d.claim("language-ft-2", "language", 25 * MJ, "Estimator")
        d.say(
            "  language has spent 12 of its 30 MJ; 25 more would borrow 7 MJ, and nobody measured this figure."
        )

        d.section("An observed estimate borrows, within its weighted share (§2.2, §4.4)")
        d.say(
            "  The same work, estimated by a calibrated model (ModelBased). Unspent sibling guarantee: "
            "vision 20 + robotics 20 = 40 MJ; language's share = floor(40 × 2 / 6) = 13.33 MJ."
        )
        d.claim("language-ft-2b", "language", 25 * MJ, "ModelBased")

        d.section("The impossible is denied, never queued (§4.2, §4.5)")
        d.claim("robotics-too-wide", "robotics", 1 * MJ, "HwShunt", gang=3, per_member=2)
        d.claim("language-too-big", "language", 70 * MJ, "ModelBased")

        d.section("Earning an estimate from history: guesses first, then measurements (§2.6)")
        for i, actual in enumerate((1_600 * KJ, 1_900 * KJ), 1):
            d.claim(f"sim-episode-{i}", "robotics", 2 * MJ, "Estimator", class_="sim-episode")
            d.release(f"sim-episode-{i}", actual, "HwShunt")
        early = pool.estimate("sim-episode")
        d.say(
            f"  estimate for 'sim-episode' after two runs: {early.to_json()} — one run is not a sample, "
            "and pool/1's default asks for three."
        )
        d.claim("sim-episode-3", "robotics", 2 * MJ, "Estimator", class_="sim-episode")
        d.release("sim-episode-3", 1_700 * KJ, "HwShunt")
        earned = pool.estimate("sim-episode")
        assert isinstance(earned, Derived)
        d.say(
            f"  now: {_mj(earned.estimate.uj)} {earned.estimate.grade.value}, the largest of "
            f"{earned.evidence} measured runs (spread {_mj(earned.min_uj)}..{_mj(earned.max_uj)}); "
            "a derived estimate is a model, never a reading."
        )

        d.section("A queued claim admits after a release (§4.5, §6.2)")
        d.claim("robotics-render", "robotics", 14 * MJ, "Estimator", per_member=4)
        est = earned.estimate
        d.claim("sim-episode-4", "robotics", est.uj, est.grade.value, class_="sim-episode")
        d.release("robotics-render", 13_100 * KJ, "HwShunt")
        d.say(
            "  robotics has now spent 18.30 of its 20 MJ: a guess of the same size could not borrow —"
        )
        d.claim("sim-episode-4-guess", "robotics", est.uj, "Estimator", class_="sim-episode")
        d.say("  — but the estimate robotics earned by being measured can:")
        d.claim("sim-episode-4", "robotics", est.uj, est.grade.value, class_="sim-episode")
        d.usage()

        d.section(
            "Budget periods: a spent guarantee renews, and nothing carries over (DESIGN.md §3)"
        )
        _rollover(d, pool)

        d.section("A shared device's energy attributed among its tenants (§2.5)")
        total = Energy(3_600 * KJ, Grade.HwShunt)
        shares = attribute(total, {"vision-notebook": 30, "language-eval": 10})
        for who, share in shares.items():
            d.say(f"  {who}: {energy_text(share.uj)}, {share.grade.value}")
        d.say(
            "  One GPU counter read 3.6 MJ (HwShunt) while two tenants shared it 30 GB : 10 GB. "
            "The shares sum to the reading exactly, and are ModelBased: a split is a model."
        )

        d.section("Idle reclamation: evidence of idleness, never the absence of a reading (§2.7)")
        observations = [
            IdleObservation(
                "vision-pretrain", 4, 15 * MIN_US, Energy(4 * 350 * 900 * 1_000_000, Grade.HwShunt)
            ),
            IdleObservation(
                "language-ft-1", 2, 20 * MIN_US, Energy(2 * 30 * 1200 * 1_000_000, Grade.HwShunt)
            ),
            IdleObservation("sim-episode-4", 1, 20 * MIN_US, Energy(0, Grade.Estimator)),
        ]
        unconfigured = idle_verdicts(IdlePolicy(), observations)
        kinds = sorted({v.kind.value for v in unconfigured.values()})
        d.say(f"  with the deployment's unconfigured policy: {kinds} — reclaims nothing.")
        policy = IdlePolicy(window_us=10 * MIN_US, threshold_uw=100_000_000)
        for key, v in idle_verdicts(policy, observations).items():
            reason = f" ({v.reason.value})" if v.reason else ""
            mean = "-" if v.mean_uw is None else f"{v.mean_uw / 1_000_000:.0f} W"
            if v.reason is not None and v.reason.value == "unobserved":
                mean = "unknown (a guess; no meter read it)"
            d.say(f"  {key}: {v.kind.value}{reason}, mean {mean}")
        d.say(
            "  policy: 10-minute window, 100 W threshold. "
            f"Reclamation order: {reclamation_order(policy, observations)}. "
            "sim-episode-4's 0 µJ is a guess (no meter), so it has no verdict and is not ranked at all."
        )

        d.section("Preemption order: evidence before declaration (§5)")
        workloads = [
            Workload("vision-pretrain", 20 * MJ, 400, 2),
            Workload("language-ft-2b", 8 * MJ, 100, 1),
            Workload("sim-episode-4", 500 * KJ, 0, 0),
            Workload("language-ft-1", 1 * MJ, 0, 1),
        ]
        for i, key in enumerate(preemption_order(workloads), 1):
            w = next(x for x in workloads if x.key == key)
            cost = realised_cost(w.spent_uj, w.completed_units)
            text = (
                "undefined (nothing completed yet)"
                if cost is None
                else f"{int(cost) / 1_000_000:,.0f} J per unit"
            )
            d.say(f"  {i}. {key}: {text}, priority {w.priority}")
        d.say(
            "  Measured work spending most per completed unit goes first; unmeasured work "
            "after it, never ranked as if its cost were known."
        )

        d.section("A witnessed ledger, verified (§6.5, §6.7, §6.8)")
        witness = KeyPair.generate("auditor")
        write_key_file(folder / "auditor.key", witness)
        receipt = sign_witness(
            witness, pool.steward, pool.head, pool.length, wall_clock_ms(), pool.key.public_key
        )
        keep_receipt(folder / WITNESSES, witness.kid, witness.public_key, receipt, pool.length)
        report = attestation(
            load_receipts(folder / WITNESSES),
            pool.steward,
            pool.key.public_key,
            pool.length,
            pool.head_at,
        )
        d.say(
            f"  an auditor holding its own key signed the head {pool.head.hex()[:16]}… at length {pool.length}: "
            f"the ledger is {report.attestation.value} through entry {report.through}."
        )
    finally:
        pool.close()
    out.print()
    out.print(
        f"Check it yourself, trusting nothing above:  pool ledger verify {folder / 'ledger.cbor'}"
    )


ROLLOVER_MS = 3000
"""The demo's short fixed period, so a rollover happens while you watch."""


def _rollover(d: _Demo, pool: Pool) -> None:
    """A queued claim admits when the period renews; an estimate earned before still holds."""
    import time

    from joulepool.deployment.config import Config
    from joulepool.estimate import Derived
    from joulepool.periods import Schedule, utc_text
    from joulepool.pool import wall_clock_ms

    # A schedule change regroups the ledger's history and never changes the ledger, so
    # the same ledger can be watched in short periods here (pool.toml keeps the month).
    now = wall_clock_ms()
    pool.reload(
        Config(
            pool.steward,
            pool.tree,
            pool.idle_policy,
            pool.required_evidence,
            Schedule("fixed", ROLLOVER_MS, now),
        )
    )
    period = pool.period()
    assert period.end_ms is not None
    d.say(
        f'  The deployment renews guarantees monthly (\\[period] kind = "month" in pool.toml). '
        f"To watch a rollover, this pool regroups the same ledger into {ROLLOVER_MS // 1000}-second "
        f"periods; everything so far belongs to earlier ones, so robotics starts this period "
        f"({utc_text(now)}) with its whole 20 MJ."
    )
    d.claim("robotics-nightly-1", "robotics", 15 * MJ, "Estimator")
    d.claim("robotics-nightly-2", "robotics", 15 * MJ, "Estimator")
    d.say("  Nothing is released. Waiting for the period to end…")
    time.sleep(max(0, period.end_ms - wall_clock_ms()) / 1000 + 0.05)
    d.claim("robotics-nightly-2", "robotics", 15 * MJ, "Estimator")
    d.say(
        "  robotics-nightly-1 still runs and holds its device (a device held is held now), but "
        "its 15 MJ count in the period it was admitted in."
    )
    earned = pool.estimate("sim-episode")
    assert isinstance(earned, Derived)
    d.say(
        f"  The estimate sim-episode earned in an earlier period is still in force: "
        f"{_mj(earned.estimate.uj)} {earned.estimate.grade.value} from {earned.evidence} runs."
    )
    d.claim(
        "sim-episode-5",
        "robotics",
        earned.estimate.uj,
        earned.estimate.grade.value,
        class_="sim-episode",
    )
    from joulepool.views.usage import history as usage_history

    history = usage_history(pool, "robotics")["periods"]
    for row in history[-3:]:
        d.say(
            f"  robotics, period {row['label']}: {row['claims']} claim(s), "
            f"{_mj(row['committed_uj'])} committed of {_mj(row['guarantee_uj'])}"
        )


def _demo(args: argparse.Namespace) -> int:
    run_demo(Path(args.dir), console(markup=True))
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool demo`."""
    p = sub.add_parser("demo", help="walk a fresh deployment through every pool/1 verdict")
    p.add_argument("dir", metavar="DIR", help="a new (or empty) folder for the demo deployment")
    p.set_defaults(handler=_demo)
