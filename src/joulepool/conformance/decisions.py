"""The JSON face of the standard's pure decisions (§2.5, §2.6, §2.7, §4, §5), one
operation of `pool exec` each (CONFORMANCE.md).

Each operation checks its case's shape, naming the field it refuses, and returns the
decision's JSON; `execute.OPERATIONS` lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from joulepool.acts import KINDS, Evidence, due_act, parse_runtime
from joulepool.admission import decide
from joulepool.attribution import attribute
from joulepool.checks import check_figure, check_keys, check_text
from joulepool.claim import Claim
from joulepool.errors import InvalidInput
from joulepool.estimate import DEFAULT_REQUIRED, Observation, derive_estimate
from joulepool.grade import Energy
from joulepool.idle import (
    IdleObservation,
    IdlePolicy,
    NoVerdictReason,
    idle_verdicts,
    reclamation_order,
)
from joulepool.live import (
    DEFAULT_SAMPLE_PERIOD_MS,
    MAX_PERIOD_MS,
    MAX_SAMPLES,
    MIN_PERIOD_MS,
    NO_READING,
    STALE,
    ClaimLive,
    Reading,
    parse_progress,
    project,
    record_progress,
    record_reading,
    window_ms,
)
from joulepool.preemption import Workload, preemption_order, realised_cost
from joulepool.reclaim import (
    RuleState,
    Running,
    Waiting,
    idle_due,
    parse_idle_acts,
    parse_preemption,
    victims,
)
from joulepool.tree import Tree, Usage

Result = dict[str, Any]
Operation = Callable[[Mapping[str, Any]], Result]


def _list(case: Mapping[str, Any], name: str) -> list[Any]:
    value = case[name]
    if not isinstance(value, list):
        raise InvalidInput(name, "must be a list")
    return value


def op_decide(case: Mapping[str, Any]) -> Result:
    """§4: the verdict for one claim against a tree and its usage."""
    check_keys(case, "", ("op", "tree", "usage", "claim"))
    tree = Tree.from_json(case["tree"])
    usage = Usage.from_json(tree, case["usage"])
    claim = Claim.from_json(case["claim"])
    return decide(tree, usage, claim).to_json()


def op_attribute(case: Mapping[str, Any]) -> Result:
    """§2.5: one device's total divided among its occupants."""
    check_keys(case, "", ("op", "total", "occupants"))
    total = Energy.from_json(case["total"], "total")
    occupants = case["occupants"]
    if not isinstance(occupants, Mapping):
        raise InvalidInput("occupants", "must be an object {id: weight}")
    for key, weight in occupants.items():
        check_text(key, "occupants")
        check_figure(weight, f"occupants.{key}")
    shares = attribute(total, occupants)
    return {"shares": {k: v.to_json() for k, v in shares.items()}}


def op_derive_estimate(case: Mapping[str, Any]) -> Result:
    """§2.6: an estimate earned from a history of released claims, or why not.

    `class` missing, null or empty declines `empty_class` with both counts (DESIGN.md §3).
    """
    case = check_keys(case, "", ("op", "history"), ("class", "required", "entitlement"))
    history = []
    for i, given in enumerate(_list(case, "history")):
        where = f"history[{i}]"
        item = check_keys(given, where, ("entitlement", "actual"), ("class",))
        declared = item.get("class")
        if declared is not None and not isinstance(declared, str):
            raise InvalidInput(f"{where}.class", "must be a string")
        history.append(
            Observation(
                declared,
                check_text(item["entitlement"], f"{where}.entitlement"),
                Energy.from_json(item["actual"], f"{where}.actual"),
            )
        )
    class_ = case.get("class")
    if class_ is not None and not isinstance(class_, str):
        raise InvalidInput("class", "must be a string")
    required = check_figure(case.get("required", DEFAULT_REQUIRED), "required")
    scope = case.get("entitlement")
    if scope is not None:
        check_text(scope, "entitlement")
    return derive_estimate(history, class_, required, scope).to_json()


def op_preemption_order(case: Mapping[str, Any]) -> Result:
    """§5: realised costs and the order capacity is reclaimed in."""
    check_keys(case, "", ("op", "workloads"))
    workloads = []
    for i, item in enumerate(_list(case, "workloads")):
        where = f"workloads[{i}]"
        check_keys(item, where, ("key", "spent_uj", "completed_units", "priority"))
        workloads.append(
            Workload(
                check_text(item["key"], f"{where}.key"),
                check_figure(item["spent_uj"], f"{where}.spent_uj"),
                check_figure(item["completed_units"], f"{where}.completed_units"),
                check_figure(item["priority"], f"{where}.priority"),
            )
        )
    order = preemption_order(workloads)
    costs: dict[str, str | None] = {}
    for w in workloads:
        cost = realised_cost(w.spent_uj, w.completed_units)
        costs[w.key] = None if cost is None else f"{cost.numerator}/{cost.denominator}"
    return {"order": order, "costs": costs}


def op_idle(case: Mapping[str, Any]) -> Result:
    """§2.7: idle verdicts and the reclamation order under a policy."""
    check_keys(case, "", ("op", "policy", "workloads"))
    policy = idle_policy_from_json(case["policy"])
    observations = []
    for i, item in enumerate(_list(case, "workloads")):
        where = f"workloads[{i}]"
        check_keys(item, where, ("key", "held_devices", "observed_us", "energy"))
        observations.append(
            IdleObservation(
                check_text(item["key"], f"{where}.key"),
                check_figure(item["held_devices"], f"{where}.held_devices"),
                check_figure(item["observed_us"], f"{where}.observed_us"),
                Energy.from_json(item["energy"], f"{where}.energy"),
            )
        )
    verdicts = idle_verdicts(policy, observations)
    return {
        "verdicts": {k: v.to_json() for k, v in verdicts.items()},
        "order": reclamation_order(policy, observations),
    }


def idle_policy_from_json(obj: object, where: str = "policy") -> IdlePolicy:
    """Read the CONFORMANCE.md policy shape `{"window_us"?, "threshold_uw"?}` (§2.7)."""
    policy = check_keys(obj, where, (), ("window_us", "threshold_uw"))
    window = policy.get("window_us")
    threshold = policy.get("threshold_uw")
    return IdlePolicy(
        None if window is None else check_figure(window, f"{where}.window_us"),
        None if threshold is None else check_figure(threshold, f"{where}.threshold_uw"),
    )


def op_over_reservation(case: Mapping[str, Any]) -> Result:
    """DESIGN.md §7: the act over-reservation makes due now (`acts.due_act`). `policy` is
    pool.toml's `[runtime]` table; `evidence` is `{"reserved_uj", "energy"?: Energy | null,
    "at_ms"?, "power_uw"?, "exhausts_at_ms"?, "unknown"?}` (absent or null: unknown);
    `done` lists the kinds already recorded done for the claim."""
    check_keys(case, "", ("op", "policy", "evidence", "now_ms"), ("done",))
    policy = parse_runtime(case["policy"], "policy")
    ev = check_keys(
        case["evidence"],
        "evidence",
        ("reserved_uj",),
        ("energy", "at_ms", "power_uw", "exhausts_at_ms", "unknown"),
    )

    def figure(name: str) -> int | None:
        value = ev.get(name)
        return None if value is None else check_figure(value, f"evidence.{name}")

    energy = ev.get("energy")
    unknown = ev.get("unknown")
    # `unknown` says why there is no fresh figure (live.project's reasons); beside a figure
    # it would contradict it, and any other word would be passed on as a reason no one set.
    if unknown is not None and (energy is not None or unknown not in (NO_READING, STALE)):
        raise InvalidInput(
            "evidence.unknown",
            f"must be {NO_READING} or {STALE}, and only where energy is unknown",
        )
    evidence = Evidence(
        check_figure(ev["reserved_uj"], "evidence.reserved_uj"),
        None if energy is None else Energy.from_json(energy, "evidence.energy"),
        figure("at_ms"),
        figure("power_uw"),
        figure("exhausts_at_ms"),
        unknown,
    )
    done = case.get("done", [])
    if not isinstance(done, list) or any(k not in KINDS for k in done):
        raise InvalidInput("done", f"must be a list of {', '.join(KINDS)}")
    due = due_act(policy, evidence, check_figure(case["now_ms"], "now_ms"), frozenset(done))
    return {"kind": due.kind, "reason": due.reason}


def op_live_projection(case: Mapping[str, Any]) -> Result:
    """DESIGN.md §7: a running claim's live figures (`live.project`), API.md's `"live"`
    object less `job` and `waiting`. `readings` are `[{"at_ms", "energy": Energy}]` in time
    order, energy since the claim's start; `progress` is `{"units", "unit"?, "total"?}`,
    reported at `progress_at_ms` (default `now_ms`); absent or null, no progress was
    reported (units going up within the idle window make a claim `working`, reason
    `progress`). `sample_period_ms` defaults to the agent's 30 s."""
    check_keys(
        case,
        "",
        ("op", "policy", "reserved_uj", "held_devices", "readings", "now_ms"),
        ("progress", "progress_at_ms", "sample_period_ms"),
    )
    policy = idle_policy_from_json(case["policy"])
    reserved = check_figure(case["reserved_uj"], "reserved_uj")
    held = check_figure(case["held_devices"], "held_devices")
    now_ms = check_figure(case["now_ms"], "now_ms")
    period = case.get("sample_period_ms")
    period = (
        DEFAULT_SAMPLE_PERIOD_MS if period is None else check_figure(period, "sample_period_ms")
    )
    if not MIN_PERIOD_MS <= period <= MAX_PERIOD_MS:
        raise InvalidInput(
            "sample_period_ms", f"must be between {MIN_PERIOD_MS} and {MAX_PERIOD_MS} ms"
        )
    readings = _list(case, "readings")
    # The live book keeps no more than this; a case that gives more would be judged on
    # fewer samples than it names, so it is refused instead.
    if len(readings) > MAX_SAMPLES:
        raise InvalidInput("readings", f"at most {MAX_SAMPLES} readings")
    live = ClaimLive()
    for i, item in enumerate(readings):
        where = f"readings[{i}]"
        given = check_keys(item, where, ("at_ms", "energy"))
        reading = Reading(
            check_figure(given["at_ms"], f"{where}.at_ms"),
            Energy.from_json(given["energy"], f"{where}.energy"),
            period,
        )
        record_reading(live, reading, None, window_ms(policy))
    progress = case.get("progress")
    at = case.get("progress_at_ms")
    at = now_ms if at is None else check_figure(at, "progress_at_ms")
    if at > now_ms:
        raise InvalidInput("progress_at_ms", "must not be after now_ms")
    if progress is not None:
        record_progress(live, parse_progress(progress, at, "progress"))
    figures = project(
        live,
        key="claim",
        policy=policy,
        held_devices=held,
        reserved_uj=reserved,
        now_ms=now_ms,
        sample_period_ms=period,
    ).to_json()
    del figures["job"], figures["waiting"]
    return figures


LIVE_REASONS: dict[str, tuple[str | None, ...]] = {
    "idle": (None,),
    "working": (None, "progress"),
    "nothing_held": (None,),
    "no_verdict": (NO_READING, STALE, *(r.value for r in NoVerdictReason)),
}
"""The reasons a live projection gives beside each §2.7 verdict (DESIGN.md §7)."""


def _done(state: Mapping[str, Any], where: str) -> frozenset[str]:
    done = state.get("done", [])
    if not isinstance(done, list) or any(type(k) is not str or k not in KINDS for k in done):
        raise InvalidInput(f"{where}.done", f"must be a list of {', '.join(KINDS)}")
    return frozenset(done)


def op_idle_act(case: Mapping[str, Any]) -> Result:
    """DESIGN.md §7: the act `[idle]` makes due now (`reclaim.idle_due`). `policy` is
    pool.toml's `[idle]` table (§2.7's `window_us` and `threshold_uw` beside `action`,
    `notice_s` and `when`); `live` the projection's `{"verdict", "reason"?}`; `state` the
    action log's `{"done"?, "notice_at_ms"?}` for the claim and rule."""
    check_keys(case, "", ("op", "policy", "live", "contended", "state", "now_ms"))
    table = check_keys(case["policy"], "policy", (), ("window_us", "threshold_uw", *ACT_KEYS))
    configured = idle_policy_from_json(
        {k: v for k, v in table.items() if k not in ACT_KEYS}
    ).configured
    policy = parse_idle_acts({k: v for k, v in table.items() if k in ACT_KEYS}, "policy")
    live = check_keys(case["live"], "live", ("verdict",), ("reason",))
    verdict = live["verdict"]
    if type(verdict) is not str or verdict not in LIVE_REASONS:
        raise InvalidInput("live.verdict", f"must be one of {', '.join(LIVE_REASONS)}")
    reason = live.get("reason")
    if reason not in LIVE_REASONS[verdict] or (reason is not None and type(reason) is not str):
        raise InvalidInput("live.reason", f"is not a reason the verdict {verdict} gives")
    contended = case["contended"]
    if type(contended) is not bool:
        raise InvalidInput("contended", "must be true or false")
    state = check_keys(case["state"], "state", (), ("done", "notice_at_ms"))
    notice_at = state.get("notice_at_ms")
    due = idle_due(
        policy,
        configured,
        verdict,
        reason,
        contended,
        RuleState(
            _done(state, "state"),
            None if notice_at is None else check_figure(notice_at, "state.notice_at_ms"),
        ),
        check_figure(case["now_ms"], "now_ms"),
    )
    return {"kind": due.kind, "reason": due.reason}


ACT_KEYS = ("action", "notice_s", "when")
"""The keys of `[idle]` that say what is done with an idle verdict (DESIGN.md §7)."""


def _claim_fields(item: Mapping[str, Any], where: str) -> tuple[str, str, int, str | None, int]:
    """claim, entitlement, priority, partition (a string or null) and gpus of an item."""
    partition = item.get("partition")
    if partition is not None:
        partition = check_text(partition, f"{where}.partition")
    return (
        check_text(item["claim"], f"{where}.claim"),
        check_text(item["entitlement"], f"{where}.entitlement"),
        check_figure(item["priority"], f"{where}.priority"),
        partition,
        check_figure(item["gpus"], f"{where}.gpus"),
    )


def _optional_figure(item: Mapping[str, Any], name: str, where: str) -> int | None:
    value = item.get(name)
    return None if value is None else check_figure(value, f"{where}.{name}")


def _running(item: Any, where: str) -> Running:
    # `partition` may be null (unknown), so it is checked present on the raw object:
    # check_keys reads a null optional field as absent.
    given = check_keys(
        item,
        where,
        ("claim", "entitlement", "priority", "gpus"),
        ("partition", "spent_uj", "units", "requeueable", "requeued_at_ms"),
    )
    if "partition" not in item:
        raise InvalidInput(f"{where}.partition", "missing")
    requeueable = given.get("requeueable", True)
    if type(requeueable) is not bool:
        raise InvalidInput(f"{where}.requeueable", "must be true or false")
    return Running(
        *_claim_fields(given, where),
        _optional_figure(given, "spent_uj", where),
        _optional_figure(given, "units", where),
        requeueable,
        _optional_figure(given, "requeued_at_ms", where),
    )


def _waiting(item: Any, where: str) -> Waiting:
    given = check_keys(
        item,
        where,
        ("claim", "entitlement", "priority", "gpus", "since_ms"),
        ("partition", "requeued_at_ms"),
    )
    if "partition" not in item:
        raise InvalidInput(f"{where}.partition", "missing")
    return Waiting(
        *_claim_fields(given, where),
        check_figure(given["since_ms"], f"{where}.since_ms"),
        _optional_figure(given, "requeued_at_ms", where),
    )


def op_victims(case: Mapping[str, Any]) -> Result:
    """DESIGN.md §7, standard §5.2: the running claims to requeue for the waiting ones
    (`reclaim.victims`). `policy` is pool.toml's `[preemption]` table; `waiting` items are
    `{"claim", "entitlement", "priority", "partition": s | null, "gpus", "since_ms",
    "requeued_at_ms"?}`, `running` items `{"claim", "entitlement", "priority", "partition",
    "gpus", "spent_uj"?, "units"?, "requeueable"?, "requeued_at_ms"?}`. A claim named twice,
    in either list or across both, is refused."""
    check_keys(case, "", ("op", "policy", "now_ms", "waiting", "running"))
    policy = parse_preemption(case["policy"], "policy")
    now_ms = check_figure(case["now_ms"], "now_ms")
    waiting = [_waiting(x, f"waiting[{i}]") for i, x in enumerate(_list(case, "waiting"))]
    running = [_running(x, f"running[{i}]") for i, x in enumerate(_list(case, "running"))]
    claims = [(f"waiting[{i}]", w.claim) for i, w in enumerate(waiting)]
    claims += [(f"running[{i}]", r.claim) for i, r in enumerate(running)]
    seen: set[str] = set()
    for where, claim in claims:
        if claim in seen:
            raise InvalidInput(f"{where}.claim", f"claim {claim!r} appears twice")
        seen.add(claim)
    taken, uncovered = victims(policy, waiting, running, now_ms)
    return {
        "victims": [{"claim": v.claim, "for": v.for_claim} for v in taken],
        "uncovered": uncovered,
    }
