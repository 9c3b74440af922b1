"""`pool init`, `admit`, `release`, `usage`, `estimate`, `preempt`, `idle`, `attribute`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from joulepool.cli.output import add_json, emit, energy_column, table

if TYPE_CHECKING:
    from rich.console import Console

    from joulepool.pool import Pool

GRADES = ("HwShunt", "ModelBased", "Estimator")
EXIT_BY_VERDICT = {"admit": 0, "queue": 3, "deny": 4}
"""`pool admit` exits 0 on Admit, 3 on Queue, 4 on Deny: verdicts, not errors (which exit 1)."""


def _open(args: argparse.Namespace, *, read_only: bool = False) -> Pool:
    from joulepool.cli.paths import deployment_dir
    from joulepool.deployment.open import open_pool

    return open_pool(deployment_dir(args.dir), read_only=read_only)


def read_source(pool: Pool) -> dict[str, Any]:
    """Where a read-only command's answer came from: the ledger file, up to which length,
    and the running writer it was read beside, if any (readers beside `pool serve`)."""
    return {
        "ledger": pool.store.name,
        "length": pool.length,
        "writer_pid": pool.store.writer_pid,
    }


def source_words(source: dict[str, Any]) -> str:
    """`read_source` as one sentence for people."""
    where = f"read from {source['ledger']} up to its last whole entry ({source['length']} entries)"
    if source["writer_pid"] is None:
        return where + "; no writer is running"
    return (
        where
        + f", beside the running writer (pid {source['writer_pid']}), which may have appended since"
    )


def _init(args: argparse.Namespace) -> int:
    from joulepool.deployment.init import init_deployment

    folder = Path(args.dir)
    ceiling = None if args.no_power_ceiling else args.max_device_power_w
    init_deployment(folder, args.steward, ceiling)
    result = {"dir": str(folder), "steward": args.steward, "max_device_power_w": ceiling}

    def human(c: Console) -> None:
        c.print(f"created deployment {folder}: steward {args.steward!r}, an empty ledger,")
        c.print(f"and an example tree in {folder / 'pool.toml'} (edit it, then use `pool admit`).")
        if ceiling is not None:
            c.print(
                f"Releases above {ceiling} W a device since admission are refused unless "
                "overridden (max_device_power_w in pool.toml)."
            )

    emit(args, result, human)
    return 0


def _energy(uj_value: int, grade: str) -> Any:
    from joulepool.grade import Energy, Grade

    return Energy(uj_value, Grade.parse(grade, "--grade"))


def _admit(args: argparse.Namespace) -> int:
    from joulepool.claim import Claim
    from joulepool.errors import InvalidInput
    from joulepool.estimate import Derived
    from joulepool.views.explain import explain, renewal

    pool = _open(args)
    try:
        if args.earned:
            derived = pool.estimate(args.class_, args.entitlement)
            if not isinstance(derived, Derived):
                raise InvalidInput(
                    "--earned",
                    f"no estimate earned for class {args.class_!r}: {derived.reason.value} "
                    f"({derived.observations} observations, {derived.evidence} evidence)",
                )
            estimate = derived.estimate
        else:
            if args.estimate_uj is None:
                raise InvalidInput("--estimate-uj", "give an estimate, or --earned with --class")
            estimate = _energy(args.estimate_uj, args.grade)
        claim = Claim(
            args.id,
            args.entitlement,
            args.gang_size,
            args.devices_per_member,
            estimate,
            args.class_,
        )
        if args.dry_run:
            from joulepool.views.claims import dry_run

            decision = dry_run(pool, claim)
        else:
            decision = pool.submit(claim)
        noun = pool.schedule.noun
        hint = ""
        if (
            decision.verdict.verdict == "deny"
            and decision.verdict.reason.value == "unknown_entitlement"
        ):
            from joulepool.views.claims import did_you_mean

            hint = did_you_mean(pool.tree, claim.entitlement)
    finally:
        pool.close()
    words = explain(decision.verdict) + hint
    if decision.period_end_ms is not None:
        words += f"; it {renewal(decision.period_end_ms, noun)}"
    out = decision.to_json()
    if args.dry_run:
        # A dry run's verdict is what a submission would get now; nothing was written.
        out["dry_run"] = True
        words = f"would be {words}" + (" (dry run: nothing written)")
    emit(args, out, lambda c: c.print(f"{claim.id}: {words}"))
    return EXIT_BY_VERDICT[decision.verdict.verdict]


def _confirmed(words: str) -> bool:
    """An operator at a terminal confirms a doubtful figure by typing `yes`; piped, never."""
    if not sys.stdin.isatty():
        return False
    print(f"{words}.\nCharge it anyway? Type yes to confirm: ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip() == "yes"


def _claims(args: argparse.Namespace) -> int:
    from joulepool.cli.live_cmd import ask, client_of
    from joulepool.periods import utc_text
    from joulepool.units import column
    from joulepool.views.claims import claim_json, claims

    client = client_of(args)
    if client is not None:
        # The service holds the live figures (soft state): ask it, page by page.
        rows: list[dict[str, Any]] = []
        cursor: int | None = 0
        while cursor is not None:
            params = {"entitlement": args.entitlement, "state": args.state, "cursor": cursor}
            answer = ask(client, "/v1/claims", {**params, "min_age_s": args.min_age_s})
            rows.extend(answer["claims"])
            cursor = answer["next_cursor"]
    else:
        if args.dir is None:
            from joulepool.errors import InvalidInput

            raise InvalidInput("DIR", "give a deployment folder, or --url to ask a service")
        # A reader beside `pool serve`: no lock taken, nothing written (soft state stays there).
        pool = _open(args, read_only=True)
        try:
            found = claims(pool, args.entitlement, args.state)
            now = pool.now_ms()
        finally:
            pool.close()
        age = None if args.min_age_s is None else args.min_age_s * 1000
        rows = [
            claim_json(state) | {"admitted_ms": at}
            for state, at in found
            if age is None or now - at >= age
        ]
    for r in rows:
        r.setdefault("admitted_ms", None)

    def human(c: Console) -> None:
        # One unit for the table: a reservation, its actual and the energy so far side by
        # side compare at a glance.
        so_far_uj = [(r.get("live") or {}).get("energy_uj") for r in rows]
        reserved = actual = so_far = column(
            [r["reserved"]["uj"] for r in rows]
            + [r["actual"]["uj"] for r in rows if "actual" in r]
            + [uj for uj in so_far_uj if uj is not None],
            args.units,
        )
        live = client is not None
        headings = [
            "claim",
            "entitlement",
            "state",
            "admitted" if not live else "admitted seq",
            "devices",
            f"reserved ({reserved.label})",
            f"actual ({actual.label})",
            "grade",
        ]
        if live:
            headings += [f"so far ({so_far.label})", "power (W)", "idle", "used %", "units", "cost"]
        table_rows = []
        for r in rows:
            row: list[object] = [
                r["claim"],
                r["entitlement"],
                r["state"],
                utc_text(r["admitted_ms"]) if not live else r["admitted_seq"],
                r["devices"],
                reserved.show(r["reserved"]["uj"]),
                actual.show(r["actual"]["uj"]) if "actual" in r else None,
                (r.get("actual") or r["reserved"])["grade"],
            ]
            if live:
                row += live_cells(r.get("live"), so_far)
            table_rows.append(row)
        c.print(
            table(
                f"{len(rows)} claim(s)",
                headings,
                table_rows,
                right=["devices", f"reserved ({reserved.label})", f"actual ({actual.label})"],
            )
        )
        if not live:
            c.print(
                "live figures (energy so far, power, idle, units, cost): ask the service with --url"
            )

    emit(args, {"claims": rows}, human)
    return 0


def live_cells(live: dict[str, Any] | None, so_far: Any) -> list[object]:
    """A running claim's live figures as table cells, the realised cost (§5.1) as the API
    gives it; None (shown empty) where unknown or, for the cost, undefined."""
    if live is None:
        return [None] * 6
    idle = live["idle"]["verdict"] + (
        f" ({live['idle']['reason']})" if live["idle"]["reason"] else ""
    )
    power = live["power_uw"]
    units = live["units"]
    return [
        None if live["energy_uj"] is None else so_far.show(live["energy_uj"]),
        None if power is None else f"{power / 1_000_000:.1f}",
        idle,
        live["reservation_used_pct"],
        None if units is None else f"{units}" + (f"/{live['total']}" if live["total"] else ""),
        None if live["realised_cost"] is None else f"{live['realised_cost']} µJ/unit",
    ]


def _claim(args: argparse.Namespace) -> int:
    from joulepool.cli.live_cmd import ask, client_of
    from joulepool.errors import ClaimError
    from joulepool.periods import utc_text
    from joulepool.units import energy_text
    from joulepool.views.claims import claim_json

    client = client_of(args)
    if client is not None:
        from urllib.parse import quote

        out = ask(client, "/v1/claims/" + quote(args.claim, safe=""))
        emit(args, out, lambda c: _claim_live_text(c, out))
        return 0
    if args.dir is None:
        from joulepool.errors import InvalidInput

        raise InvalidInput("DIR", "give a deployment folder, or --url to ask a service")
    pool = _open(args, read_only=True)
    try:
        state = pool.claim_state(args.claim)
    finally:
        pool.close()
    if state is None:
        raise ClaimError(
            "unknown_claim",
            f"the ledger never admitted claim {args.claim!r} (Queue and Deny leave no record)",
        )
    out = claim_json(state) | {"admitted_ms": state.admitted.at_ms}
    if state.released is not None:
        out["released_ms"] = state.released.at_ms

    def human(c: Console) -> None:
        adm = state.admitted
        c.print(f"claim {state.claim}: {out['state']}, entitlement {adm.entitlement}")
        c.print(
            f"admitted at entry {state.admitted_seq} ({utc_text(adm.at_ms)}): "
            f"{adm.gang_size} member(s) × {adm.devices_per_member} device(s), reserved "
            f"{energy_text(adm.reserved.uj)} ({adm.reserved.grade.value}), "
            f"borrowed {energy_text(adm.borrowed_uj)}, class {adm.class_ or '-'}"
        )
        if state.released is not None:
            rel = state.released
            c.print(
                f"released at entry {state.released_seq} ({utc_text(rel.at_ms)}): charged "
                f"{energy_text(rel.actual.uj)} ({rel.actual.grade.value})"
            )

    emit(args, out, human)
    return 0


def _claim_live_text(c: Console, out: dict[str, Any]) -> None:
    """`pool claim --url`: the service's answer, its live figures in a sentence each."""
    from joulepool.units import energy_text

    c.print(f"claim {out['claim']}: {out['state']}, entitlement {out['entitlement']}")
    c.print(
        f"reserved {energy_text(out['reserved']['uj'])} ({out['reserved']['grade']}), "
        f"{out['devices']} device(s), admitted at entry {out['admitted_seq']}"
    )
    if "actual" in out:
        c.print(f"charged {energy_text(out['actual']['uj'])} ({out['actual']['grade']})")
    live = out.get("live")
    if live is None:
        return
    so_far = "unknown" if live["energy_uj"] is None else energy_text(live["energy_uj"])
    c.print(f"so far {so_far} ({live['grade'] or 'no fresh reading'})")
    power = live["power_uw"]
    c.print(f"power {'unknown' if power is None else f'{power / 1_000_000:.1f} W'}")
    reason = live["idle"]["reason"]
    c.print(f"idle: {live['idle']['verdict']}" + (f" ({reason})" if reason else ""))
    c.print(f"units {live['units'] if live['units'] is not None else 'unknown'}", end="")
    c.print(f", realised cost {live['realised_cost'] or 'undefined'} µJ/unit")
    c.print(
        f"reservation used {live['reservation_used_pct']}%, exhausts at {live['exhausts_at_ms']}"
    )
    if live["job"] is not None:
        job = live["job"]
        c.print(f"job {job['id']} of {job['user'] or '?'} ({job['name'] or '?'})")


def _release(args: argparse.Namespace) -> int:
    from joulepool.deployment.config import CONFIG, read_config
    from joulepool.units import energy_text
    from joulepool.views.plausibility import check_release, refusal

    pool = _open(args)
    try:
        ceiling = read_config(Path(args.dir) / CONFIG).max_device_power_w
        finding = check_release(pool, args.claim, args.actual_uj, ceiling)
        if finding is not None:
            if not args.override and not _confirmed(finding.words):
                if finding.kind == "above_ceiling":
                    raise refusal(finding)
                from joulepool.errors import ClaimError

                raise ClaimError(
                    "implausible_actual",
                    f"claim {args.claim!r}: {finding.words}; nothing was charged. "
                    "If the figure is right, release again with --override",
                )
            # Charged as typed, and said where the operator's log (stderr) keeps it.
            print(
                f"pool: warning: release {args.claim!r} overridden: {finding.words}",
                file=sys.stderr,
            )
        rel = pool.release(args.claim, _energy(args.actual_uj, args.grade))
    finally:
        pool.close()
    result = {"claim": rel.claim, "seq": rel.seq, "charged": rel.charged.to_json()}
    emit(
        args,
        result,
        lambda c: c.print(
            f"{rel.claim}: released at entry {rel.seq}; charged {energy_text(rel.charged.uj)} "
            f"({rel.charged.grade.value}) in place of its reservation"
        ),
    )
    return 0


def usage_rows(pool: Pool, index: int | None = None) -> list[dict[str, Any]]:
    """Every entitlement's guarantees and usage in a period, interior nodes with their
    subtree's totals beside (API.md figures, DESIGN.md §3; `usage_report`)."""
    from joulepool.views.usage import entitlement_reports

    return entitlement_reports(pool, None, index)


def usage_table(rows: list[dict[str, Any]], depth: dict[str, int], units: str) -> Any:
    """`pool usage`'s table: one unit per energy column, interior nodes marked Σ
    and showing their subtree's totals."""
    from joulepool.units import column

    shown = [r.get("subtree", r["usage"]) for r in rows]
    energy = {
        "guarantee": [
            u.get("guarantee_uj", r["guarantee_uj"]) for r, u in zip(rows, shown, strict=True)
        ],
        "limit": [r.get("limit_uj") for r in rows],
        **{
            name: [u[f"{name}_uj"] for u in shown]
            for name in ("charged", "reserved", "committed", "remaining", "borrowed")
        },
    }
    # One unit for the whole table, so figures in different columns compare at a glance.
    one = column([v for values in energy.values() for v in values], units)
    cols = dict.fromkeys(energy, one)
    headings = [f"{name} ({one.label})" for name in energy]
    body = []
    for i, (r, u) in enumerate(zip(rows, shown, strict=True)):
        name = "  " * depth[r["id"]] + r["id"] + (" Σ" if "subtree" in r else "")
        figures = [cols[n].show(values[i]) for n, values in energy.items()]
        body.append(
            [
                name,
                *figures,
                f"{u['held_devices']}/{u.get('guarantee_devices', r['guarantee_devices'])}",
                u["running_claims"],
            ]
        )
    return ["entitlement", *headings, "devices", "running"], body


def period_words(schedule: Any, period: Any) -> str:
    """A period as an operator reads it: `month 2026-11 (2026-11-01 00:00 UTC to ...)`."""
    from joulepool.periods import utc_text

    if period.start_ms is None or period.end_ms is None:
        return "all time (no budget period)"
    return (
        f"{schedule.noun} {schedule.label(period.index)} "
        f"({utc_text(period.start_ms)} to {utc_text(period.end_ms)})"
    )


def _usage(args: argparse.Namespace) -> int:
    pool = _open(args, read_only=True)
    try:
        if args.history is not None:
            return _history(args, pool)
        index = None if args.period is None else pool.schedule.parse_label(args.period, "--period")
        period = pool.period(index)
        rows = usage_rows(pool, period.index)
        from joulepool.views.usage import judged_by

        tree, configuration = judged_by(pool, period)
        length = pool.length
        words = period_words(pool.schedule, period)
        source = read_source(pool)
    finally:
        pool.close()

    depth = {e.id: sum(1 for _ in tree.ancestors(e.id)) for e in tree}
    columns, body = usage_table(rows, depth, args.units)

    def human(c: Console) -> None:
        c.print(
            table(f"usage in {words}, at ledger length {length}", columns, body, right=columns[1:])
        )
        c.print(
            "committed = charged (released actuals) + reserved (running claims): what admission "
            "compares with the guarantee; devices and running claims are now, whatever the period"
        )
        if any("subtree" in r for r in rows):
            c.print(
                "Σ: an interior node's figures are its whole subtree's totals (--json: `subtree`)"
            )
        if args.units not in {"uJ", "J"}:
            c.print("figures are rounded in the table's unit; --units uJ or --json give exact µJ")
        c.print(configuration_words(configuration))
        c.print(source_words(source))

    out = {"length": length, "period": period.to_json(), "entitlements": rows, "read": source}
    if configuration is not None:
        out["configuration"] = configuration
    if pool.schedule.kind != "none":
        out["label"] = pool.schedule.label(period.index)
    emit(args, out, human)
    return 0


def configuration_words(configuration: dict[str, Any] | None) -> str:
    """Which configuration judged a period, as an operator reads it (docs/reliability.md §18)."""
    from joulepool.periods import utc_text

    if configuration is None:
        return "judged by the tree in pool.toml (no configuration statement records it)"
    words = (
        f"judged by configuration {configuration['digest'][:12]} (statement "
        f"{configuration['position']}, in force since {utc_text(configuration['since_ms'])}, "
        f"from entry {configuration['from_length']}, applied by {configuration['applied_by']})"
    )
    if configuration.get("recorded_after_period"):
        words += "; recorded after this period ended: the earliest record there is"
    return words


def _history(args: argparse.Namespace, pool: Pool) -> int:
    from joulepool.views.usage import history

    result = history(pool, args.history)
    schedule = pool.schedule

    def human(c: Console) -> None:
        from joulepool.periods import utc_text
        from joulepool.units import column

        periods = result["periods"]
        names = ("charged", "reserved", "guarantee", "remaining")
        one = column([r[f"{n}_uj"] for r in periods for n in names if f"{n}_uj" in r], args.units)
        energy = [
            (
                f"{n} ({one.label})",
                [one.show(r[f"{n}_uj"]) if f"{n}_uj" in r else "-" for r in periods],
            )
            for n in names
        ]
        headings = [h for h, _ in energy]
        c.print(
            table(
                f"{args.history}: each {schedule.noun}'s energy against its guarantee",
                ["period", "from", "claims", *headings, "configuration"],
                [
                    [
                        r["label"] + (" Σ" if r.get("subtree") else ""),
                        "-"
                        if r["period"]["start_ms"] is None
                        else utc_text(r["period"]["start_ms"]),
                        r["claims"],
                        *(cells[i] for _, cells in energy),
                        r["configuration"]["digest"][:12] if "configuration" in r else "-",
                    ]
                    for i, r in enumerate(periods)
                ],
                right=["claims", *headings],
            )
        )
        c.print("a guarantee unspent at its period's end is gone: nothing carries over")
        c.print(
            "each period is judged by the configuration in force at its end (its digest; "
            "`pool config history DIR` lists them); Σ: the subtree's sums"
        )
        # A statement judging periods before it was made is said so, apart from its own.
        used = {
            (
                r["configuration"]["position"],
                bool(r["configuration"].get("recorded_after_period")),
            ): r["configuration"]
            for r in periods
            if "configuration" in r
        }
        for _, configuration in sorted(used.items()):
            c.print(configuration_words(configuration))

    emit(args, result, human)
    return 0


def _estimate(args: argparse.Namespace) -> int:
    from joulepool.estimate import DeclineReason, Derived

    pool = _open(args, read_only=True)
    try:
        result = pool.estimate(args.class_, args.entitlement, args.required)
        source = read_source(pool)
    finally:
        pool.close()

    def human(c: Console) -> None:
        if not isinstance(result, Derived) and result.reason is DeclineReason.empty_class:
            c.print("no class given: no estimate (empty_class); an empty class asserts nothing")
        elif isinstance(result, Derived):
            from joulepool.units import energy_text

            c.print(
                f"class {args.class_!r}: estimate {energy_text(result.estimate.uj)} "
                f"({result.estimate.grade.value}), the largest of {result.evidence} measured "
                f"runs (spread {energy_text(result.min_uj)} to {energy_text(result.max_uj)}; "
                f"{result.observations} observations in all; --json gives exact µJ)"
            )
        else:
            hint = (
                "it needs a meter"
                if result.observations > result.evidence
                else "it needs more runs"
            )
            c.print(
                f"class {args.class_!r}: no estimate ({result.reason.value}): {result.observations} "
                f"observations, {result.evidence} of them evidence; {hint}"
            )
        c.print(source_words(source))

    # The JSON is the one estimate answer of every surface (DESIGN.md §3): where it was
    # read from is said to people only.
    emit(args, result.to_json(), human)
    return 0 if isinstance(result, Derived) else 3


def _read_json(source: str) -> Any:
    from joulepool.errors import InvalidInput
    from joulepool.jsonio import loads_strict

    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise InvalidInput(source, f"cannot read: {exc.strerror}") from None
    try:
        return loads_strict(data)
    except InvalidInput as exc:
        raise InvalidInput(source, str(exc)) from None


def _run_op(case: dict[str, Any]) -> dict[str, Any]:
    from joulepool.conformance.execute import run_case
    from joulepool.errors import InvalidInput

    result = run_case(case)
    if "error" in result:
        raise InvalidInput(case["op"], str(result.get("detail", result["error"])))
    return result


def _per_unit(cost: str | None) -> str:
    """A realised cost (§5.1, `n/d` µJ per unit) as people read it: `80 kJ`, or its exact
    fraction beside a rounded figure; `--json` keeps the fraction as computed."""
    from fractions import Fraction

    from joulepool.units import column, energy_text

    if not cost:
        return "undefined (nothing completed)"
    value = Fraction(cost)
    if value.denominator == 1:
        return energy_text(int(value))
    col = column([round(value)])
    return f"≈ {col.show(round(value))} {col.label} ({cost} µJ exactly)"


def _preempt(args: argparse.Namespace) -> int:
    result = _run_op({"op": "preemption_order", "workloads": _read_json(args.workloads)})

    def human(c: Console) -> None:
        c.print(
            table(
                "preemption order (§5.2): evidence first, most expensive first; then unmeasured, lowest priority first",
                ["#", "workload", "realised cost per unit"],
                [[i + 1, k, _per_unit(result["costs"][k])] for i, k in enumerate(result["order"])],
            )
        )

    emit(args, result, human)
    return 0


def _idle(args: argparse.Namespace) -> int:
    policy: dict[str, int] = {}
    if args.dir is not None:
        from joulepool.cli.paths import deployment_dir
        from joulepool.deployment.config import CONFIG, read_config

        configured = read_config(deployment_dir(args.dir) / CONFIG).idle
        if configured.window_us is not None:
            policy["window_us"] = configured.window_us
        if configured.threshold_uw is not None:
            policy["threshold_uw"] = configured.threshold_uw
    if args.window_us is not None:
        policy["window_us"] = args.window_us
    if args.threshold_uw is not None:
        policy["threshold_uw"] = args.threshold_uw
    result = _run_op({"op": "idle", "policy": policy, "workloads": _read_json(args.workloads)})

    def human(c: Console) -> None:
        rows = [
            [
                k,
                v["verdict"],
                v.get("reason"),
                "-" if v["mean_uw"] is None else f"{v['mean_uw']:,} µW",
            ]
            for k, v in sorted(result["verdicts"].items())
        ]
        c.print(
            table("idle verdicts (§2.7)", ["workload", "verdict", "reason", "mean power"], rows)
        )
        order = ", ".join(result["order"]) or "nothing (only an idle verdict permits reclamation)"
        c.print(f"reclamation order: {order}")

    emit(args, result, human)
    return 0


def _attribute(args: argparse.Namespace) -> int:
    from joulepool.errors import InvalidInput

    occupants: dict[str, int] = {}
    for item in args.occupant:
        name, sep, weight = item.partition("=")
        if not sep or not weight.isdigit():
            raise InvalidInput("--occupant", f"{item!r} is not ID=WEIGHT with an integer weight")
        occupants[name] = int(weight)
    result = _run_op(
        {
            "op": "attribute",
            "total": {"uj": args.total_uj, "grade": args.grade},
            "occupants": occupants,
        }
    )
    from joulepool.units import energy_text

    shares = result["shares"]
    heading, cells = energy_column("share", [v["uj"] for v in shares.values()])
    emit(
        args,
        result,
        lambda c: c.print(
            table(
                f"{energy_text(args.total_uj)} ({args.grade}) divided (§2.5)",
                ["occupant", "weight", heading, "grade"],
                [
                    [k, occupants[k], cell, v["grade"]]
                    for (k, v), cell in zip(shares.items(), cells, strict=True)
                ],
                right=["weight", heading],
            )
        ),
    )
    return 0


def energy_flag(text: str) -> int:
    """An energy typed on the command line, with its unit (`4MJ`, `2.5kWh`; a bare number is
    µJ): exact integer µJ or a one-line refusal (`joulepool.units`)."""
    from joulepool.errors import InvalidInput
    from joulepool.units import parse_energy

    try:
        return parse_energy(text, "energy")
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


ENERGY_HELP = "4MJ, 2.5kWh, 750J, 123uJ; a bare number is µJ"


def _units(text: str) -> str:
    from joulepool.errors import InvalidInput
    from joulepool.units import display_unit

    try:
        return display_unit(text)
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(exc.detail.rsplit(": ", 1)[-1]) from None


def add_units(parser: argparse.ArgumentParser) -> None:
    """`--units` of a table of energies (DESIGN.md "Figures as people type and read them")."""
    parser.add_argument(
        "--units",
        type=_units,
        default="auto",
        metavar="UNIT",
        help="one energy unit for the whole table: uJ, J, kJ, MJ, GJ or kWh, any case; auto "
        "picks the largest of J, kJ, MJ, GJ the table's biggest figure reaches (default: auto)",
    )


def _uint(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative integer")
    return int(text)


def _count(text: str) -> int:
    """A non-negative integer flag; anything else is a usage error naming it."""
    if not text.isascii() or not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative integer")
    return int(text)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the deployment commands."""
    from joulepool.cli.live_cmd import add_client

    p = sub.add_parser("init", help="create a deployment folder: key, example tree, empty ledger")
    p.add_argument("dir", metavar="DIR")
    p.add_argument(
        "--steward", default="steward", help="the steward's identifier (default: steward)"
    )
    from joulepool.deployment.init import DEFAULT_MAX_DEVICE_POWER_W

    p.add_argument(
        "--max-device-power-w",
        type=_uint,
        default=DEFAULT_MAX_DEVICE_POWER_W,
        metavar="W",
        help="the most one device draws: a release above devices × W × the time since "
        "admission is refused implausible_actual unless overridden; "
        f"{DEFAULT_MAX_DEVICE_POWER_W} W is the hungriest accelerators' board power",
    )
    p.add_argument(
        "--no-power-ceiling",
        action="store_true",
        help="no ceiling: releases over 10× their reservation need override instead",
    )
    add_json(p)
    p.set_defaults(handler=_init)

    p = sub.add_parser(
        "admit", help="submit a claim; on admit its entry is on disk before the answer"
    )
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--id", required=True, help="the claim's id (never reused)")
    p.add_argument("--entitlement", required=True)
    p.add_argument("--gang-size", type=_uint, default=1, help="members of the gang (default: 1)")
    p.add_argument(
        "--devices-per-member", type=_uint, default=1, help="devices each member holds (default: 1)"
    )
    p.add_argument(
        "--estimate",
        "--estimate-uj",
        dest="estimate_uj",
        type=energy_flag,
        metavar="ENERGY",
        help=f"the gang's total energy estimate ({ENERGY_HELP}); no default: give it or --earned",
    )
    p.add_argument(
        "--grade",
        choices=GRADES,
        default="Estimator",
        help="the estimate's grade (default: Estimator)",
    )
    p.add_argument("--class", dest="class_", help="the claim's class, recorded for §2.6 history")
    p.add_argument(
        "--earned", action="store_true", help="use the estimate this class earned from the ledger"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="the verdict against live usage now, with the same exit code; nothing is written",
    )
    add_json(p)
    p.set_defaults(handler=_admit)

    p = sub.add_parser(
        "claims", help="claims admitted per entitlement, running or released (squeue's job)"
    )
    p.add_argument("dir", metavar="DIR", nargs="?", help="the deployment (or --url)")
    p.add_argument("--entitlement", metavar="E", help="only E and its descendants (default: all)")
    p.add_argument(
        "--state", choices=("running", "released"), help="only claims in this state (default: both)"
    )
    p.add_argument(
        "--min-age-s", type=_count, metavar="N", help="only claims admitted at least N s ago"
    )
    add_client(p)
    add_units(p)
    add_json(p)
    p.set_defaults(handler=_claims)

    p = sub.add_parser("claim", help="where one claim stands: its reservation, actual, entries")
    p.add_argument("dir", metavar="DIR", nargs="?", help="the deployment (or --url)")
    p.add_argument("claim", metavar="ID")
    add_client(p)
    add_json(p)
    p.set_defaults(handler=_claim)

    p = sub.add_parser("release", help="record a claim's end, charging its actual energy")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("claim", metavar="CLAIM")
    p.add_argument(
        "--actual",
        "--actual-uj",
        dest="actual_uj",
        type=energy_flag,
        required=True,
        metavar="ENERGY",
        help=f"the energy the claim used ({ENERGY_HELP})",
    )
    p.add_argument(
        "--grade", choices=GRADES, required=True, help="the grade of the meter that read it"
    )
    p.add_argument(
        "--override",
        action="store_true",
        help="charge a figure above max_device_power_w's physical bound, or (with no ceiling "
        "configured) over 10× its reservation, without asking; logged on stderr",
    )
    add_json(p)
    p.set_defaults(handler=_release)

    p = sub.add_parser(
        "usage", help="each entitlement's guarantee and usage in the current budget period"
    )
    p.add_argument("dir", metavar="DIR")
    p.add_argument(
        "--period",
        metavar="P",
        help="a past period: 2026-11 (month), 2026-W48 (week), 2026-11-30 (day), k (fixed)",
    )
    p.add_argument(
        "--history", metavar="ENT", help="each period's charged energy against ENT's guarantee"
    )
    add_units(p)
    add_json(p)
    p.set_defaults(handler=_usage)

    p = sub.add_parser(
        "estimate", help="the estimate a class earned from the ledger's history (§2.6)"
    )
    p.add_argument("dir", metavar="DIR")
    # A missing or empty CLASS declines `empty_class` like every surface (DESIGN.md §3).
    p.add_argument("class_", metavar="CLASS", nargs="?", default=None)
    p.add_argument("--entitlement", help="only this entitlement's history")
    p.add_argument("--required", type=_uint, help="evidence required (the deployment's, default 3)")
    add_json(p)
    p.set_defaults(handler=_estimate)

    p = sub.add_parser("preempt", help="the preemption order of workloads (§5)")
    p.add_argument(
        "--workloads",
        required=True,
        metavar="FILE",
        help='JSON list of {"key", "spent_uj", "completed_units", "priority"}; - for stdin',
    )
    add_json(p)
    p.set_defaults(handler=_preempt)

    p = sub.add_parser("idle", help="idle verdicts and the reclamation order (§2.7)")
    p.add_argument("dir", metavar="DIR", nargs="?", help="a deployment whose idle policy to use")
    p.add_argument(
        "--workloads",
        required=True,
        metavar="FILE",
        help='JSON list of {"key", "held_devices", "observed_us", "energy"}; - for stdin',
    )
    p.add_argument("--window-us", type=_uint)
    p.add_argument("--threshold-uw", type=_uint)
    add_json(p)
    p.set_defaults(handler=_idle)

    p = sub.add_parser("attribute", help="divide a device's energy among its occupants (§2.5)")
    p.add_argument(
        "--total",
        "--total-uj",
        dest="total_uj",
        type=energy_flag,
        required=True,
        metavar="ENERGY",
        help=f"the device's total energy ({ENERGY_HELP})",
    )
    p.add_argument("--grade", choices=GRADES, required=True)
    p.add_argument("--occupant", action="append", default=[], metavar="ID=WEIGHT")
    add_json(p)
    p.set_defaults(handler=_attribute)
