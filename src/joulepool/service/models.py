"""The request and response shapes of the HTTP API, as the OpenAPI schema publishes them.

They mirror CONFORMANCE.md's shapes exactly. A request body is not validated against these
models: the routes read it with the standard's own readers (`from_json`, `checks.py`; see
`service/body.py`), the path `pool exec` takes. The request models describe the same rules
for clients: integers only (no float, no bool, no numeric string), every figure in
[0, 2**64 - 1], no empty name, no unknown field; an optional field given as null is absent,
and a required one given as null is refused (DESIGN.md §2, §3 "Edge cases, pinned").
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr
from pydantic.json_schema import SkipJsonSchema

Figure = Annotated[StrictInt, Field(ge=0, le=2**64 - 1)]
Name = Annotated[StrictStr, Field(min_length=1)]
GradeName = Literal["HwShunt", "ModelBased", "Estimator"]
Hex = Annotated[StrictStr, Field(pattern=r"^([0-9a-f]{2})*$")]


class Strict(BaseModel):
    """Every request model: unknown fields refused; null only where a field is optional.

    An optional field (typed `X | None`, default None) given as null is absent (DESIGN.md
    §3, "Edge cases, pinned"); a required field's type admits no null, so a null there is
    refused naming the field.
    """

    model_config = ConfigDict(extra="forbid", strict=True)


class EnergyIn(Strict):
    """An energy figure and its grade (§2.3)."""

    uj: Figure
    grade: GradeName


class ClaimIn(Strict):
    """A claim (§2.4)."""

    id: Name
    entitlement: Name
    gang_size: Figure
    devices_per_member: Figure
    estimate: EnergyIn
    class_: Name | SkipJsonSchema[None] = Field(default=None, alias="class")


class ReleaseIn(Strict):
    """A release: what the claim actually spent (§6.2)."""

    actual: EnergyIn
    override: bool = Field(
        default=False,
        description="charge a figure above the physical ceiling anyway (operator; logged)",
    )


class EstimateIn(Strict):
    """A request for the estimate a class earned (§2.6).

    `class` missing, null or empty declines `empty_class` with both counts (DESIGN.md §3).
    """

    class_: StrictStr | SkipJsonSchema[None] = Field(default=None, alias="class")
    entitlement: Name | SkipJsonSchema[None] = None
    required: Figure | SkipJsonSchema[None] = None


class WorkloadIn(Strict):
    """A running workload for the preemption order (§5)."""

    key: Name
    spent_uj: Figure
    completed_units: Figure
    priority: Figure


class PreemptionIn(Strict):
    """Workloads to order (§5.2)."""

    workloads: list[WorkloadIn]


class PolicyIn(Strict):
    """An idle policy (§2.7); either field absent leaves it unconfigured."""

    window_us: Figure | SkipJsonSchema[None] = None
    threshold_uw: Figure | SkipJsonSchema[None] = None


class IdleWorkloadIn(Strict):
    """One idle observation (§2.7)."""

    key: Name
    held_devices: Figure
    observed_us: Figure
    energy: EnergyIn


class IdleIn(Strict):
    """Observations to judge, under a policy or the deployment's (§2.7)."""

    policy: PolicyIn | SkipJsonSchema[None] = None
    workloads: list[IdleWorkloadIn]


class AttributionIn(Strict):
    """A device total and its occupants' weights (§2.5)."""

    total: EnergyIn
    occupants: dict[Name, Figure]


class WitnessIn(Strict):
    """A witness receipt to check and keep (§6.7)."""

    witness: Name
    public_key_hex: Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{64}$")]
    receipt_hex: Hex


# -- responses ---------------------------------------------------------------------------


class EnergyOut(BaseModel):
    """An energy figure and its grade."""

    uj: int
    grade: GradeName


class AdmitOut(BaseModel):
    """An admission: what was reserved, at which grade, and its ledger index (§4.6)."""

    claim: str
    verdict: Literal["admit"]
    reserved: EnergyOut
    devices: int
    borrowed_uj: int
    seq: int


class QueueOut(BaseModel):
    """A claim that does not fit now (§4.5)."""

    claim: str
    verdict: Literal["queue"]
    reason: Literal[
        "devices_held",
        "guarantee_exhausted_may_not_borrow",
        "limit_reached",
        "surplus_insufficient",
    ]
    period_end_ms: int | SkipJsonSchema[None] = Field(
        default=None, description="when the budget period renews (DESIGN.md §3)"
    )


class DenyOut(BaseModel):
    """A claim that can never fit as written (§4.5)."""

    claim: str
    verdict: Literal["deny"]
    reason: Literal[
        "unknown_entitlement",
        "empty_gang",
        "devices_exceed_guarantee",
        "energy_exceeds_limit",
        "unobserved_cannot_borrow",
        "weight_zero_cannot_borrow",
        "exceeds_weighted_share",
    ]


class ReleaseOut(BaseModel):
    """A recorded release (§6.2)."""

    claim: str
    seq: int
    charged: EnergyOut


class ClaimStateOut(BaseModel):
    """Where a claim stands."""

    claim: str
    state: Literal["running", "released"]
    entitlement: str
    reserved: EnergyOut
    devices: int
    borrowed_uj: int
    admitted_seq: int
    actual: EnergyOut | SkipJsonSchema[None] = None
    released_seq: int | SkipJsonSchema[None] = None


class PeriodOut(BaseModel):
    """A budget period's half-open bounds in ms; null for `none` (DESIGN.md §3)."""

    start_ms: int | None
    end_ms: int | None


class UsageOut(BaseModel):
    """An entitlement's figures in a budget period (API.md; DESIGN.md §3)."""

    spent_uj: int
    charged_uj: int
    reserved_uj: int
    committed_uj: int
    remaining_uj: int
    borrowed_uj: int
    held_devices: int
    running_claims: int
    period: PeriodOut


class SubtreeUsageOut(UsageOut):
    """An interior node's subtree totals: the sums of its and its descendants' figures and
    guarantees (API.md usage fields)."""

    guarantee_uj: int
    guarantee_devices: int
    subtree: Literal[True]


class ConfigurationOut(BaseModel):
    """The configuration that judged a period: its statement (docs/reliability.md §18)."""

    position: int
    digest: str
    from_length: int
    since_ms: int
    applied_by: str
    recorded_after_period: Literal[True] | SkipJsonSchema[None] = None


class PeriodFiguresOut(BaseModel):
    """One period's energy against the guarantee in force at its end; for an interior
    node its subtree's sums (`subtree`); without a guarantee (`in_tree` false) where the
    tree that judges the period did not have the node (docs/reliability.md §18)."""

    label: str
    period: PeriodOut
    claims: int
    charged_uj: int
    reserved_uj: int
    committed_uj: int
    guarantee_uj: int | SkipJsonSchema[None] = None
    remaining_uj: int | SkipJsonSchema[None] = None
    borrowed_uj: int | SkipJsonSchema[None] = None
    subtree: Literal[True] | SkipJsonSchema[None] = None
    in_tree: Literal[False] | SkipJsonSchema[None] = None
    configuration: ConfigurationOut | SkipJsonSchema[None] = None


class PeriodScheduleOut(BaseModel):
    """The deployment's period schedule."""

    kind: Literal["none", "day", "week", "month", "fixed"]
    length_ms: int | SkipJsonSchema[None] = None
    epoch_ms: int | SkipJsonSchema[None] = None


class PeriodsOut(BaseModel):
    """Each period in which the entitlement had claims admitted, oldest first."""

    id: str
    period: PeriodScheduleOut
    periods: list[PeriodFiguresOut]


class EntitlementOut(BaseModel):
    """An entitlement with its usage."""

    id: str
    parent: str | SkipJsonSchema[None] = None
    guarantee_uj: int
    guarantee_devices: int
    over_quota_weight: int
    limit_uj: int | SkipJsonSchema[None] = None
    priority: int
    usage: UsageOut
    subtree: SubtreeUsageOut | SkipJsonSchema[None] = None
    configuration: ConfigurationOut | SkipJsonSchema[None] = None


class EntitlementsOut(BaseModel):
    """The tree, as far as the caller may see it."""

    entitlements: list[EntitlementOut]


class LedgerOut(BaseModel):
    """The ledger's head, length and attestation (§6.8)."""

    steward: str
    length: int
    head_hex: str
    attestation: Literal["self-attested", "witnessed"]
    witnessed_through: int | SkipJsonSchema[None] = None


class TokenOut(BaseModel):
    """The calling token's name and scope (docs/api.md, Tokens), never the token or its hash."""

    name: str
    scope: str


class DerivedOut(BaseModel):
    """An earned estimate (§2.6)."""

    estimate: EnergyOut
    min_uj: int
    max_uj: int
    observations: int
    evidence: int


class DeclinedOut(BaseModel):
    """No estimate, with both counts (§2.6)."""

    declined: Literal["insufficient_evidence", "empty_class"]
    observations: int
    evidence: int


class PreemptionOut(BaseModel):
    """The preemption order and each realised cost, `num/den` or null (§5)."""

    order: list[str]
    costs: dict[str, str | None]


class IdleVerdictOut(BaseModel):
    """One idle verdict (§2.7)."""

    verdict: Literal["idle", "working", "nothing_held", "no_verdict"]
    reason: (
        Literal["unconfigured", "window_too_short", "unobserved", "empty_window"]
        | SkipJsonSchema[None]
    ) = None
    mean_uw: int | None


class IdleOut(BaseModel):
    """Idle verdicts and the reclamation order (§2.7)."""

    verdicts: dict[str, IdleVerdictOut]
    order: list[str]


class AttributionOut(BaseModel):
    """Each occupant's share (§2.5)."""

    shares: dict[str, EnergyOut]


class WitnessCheckOut(BaseModel):
    """A witness receipt that verified and covers this ledger (§6.8)."""

    attestation: Literal["witnessed", "self-attested"]
    length: int
    through: int | SkipJsonSchema[None] = None
    error: str | SkipJsonSchema[None] = None


class WitnessReceiptOut(BaseModel):
    """A kept receipt."""

    witness: str
    public_key_hex: str
    receipt_hex: str
    length: int
    head_hex: str


class WitnessReceiptsOut(BaseModel):
    """Every kept receipt."""

    receipts: list[WitnessReceiptOut]


class ErrorOut(BaseModel):
    """Every error: a stable code and a sentence (API.md)."""

    error: str
    detail: str


class DashboardPeriodOut(BaseModel):
    """A budget period the dashboard may show: its label (`pool usage --period`) and bounds."""

    label: str
    start_ms: int | None
    end_ms: int | None
    current: bool


class LenderOut(BaseModel):
    """A sibling whose unspent guarantee is part of the surplus a borrower draws on (§2.2)."""

    id: str
    remaining_uj: int


class VerdictSeenOut(BaseModel):
    """A verdict this service gave (Queue and Deny are never in the ledger)."""

    at_ms: int
    claim: str
    entitlement: str
    verdict: Literal["admit", "queue", "deny"]
    reason: str | SkipJsonSchema[None] = None
    reserved: EnergyOut | SkipJsonSchema[None] = None
    devices: int | SkipJsonSchema[None] = None
    borrowed_uj: int | SkipJsonSchema[None] = None
    seq: int | SkipJsonSchema[None] = None
    period_end_ms: int | SkipJsonSchema[None] = None


class ClassEstimateOut(BaseModel):
    """What a class earned from the ledger's history (§2.6), with its evidence counts."""

    model_config = ConfigDict(populate_by_name=True)

    class_: str = Field(alias="class")
    entitlement: str | SkipJsonSchema[None] = None
    estimate: EnergyOut | SkipJsonSchema[None] = None
    min_uj: int | SkipJsonSchema[None] = None
    max_uj: int | SkipJsonSchema[None] = None
    declined: str | SkipJsonSchema[None] = None
    observations: int
    evidence: int


class DashboardLedgerOut(LedgerOut):
    """`GET /v1/ledger`, the last entry's `at_ms` (absent while the ledger is empty), and the
    witness of the receipt that witnesses it and when that receipt was signed (absent while
    self-attested)."""

    last_at_ms: int | SkipJsonSchema[None] = None
    witness: str | SkipJsonSchema[None] = None
    witnessed_at_ms: int | SkipJsonSchema[None] = None


class DashboardOut(BaseModel):
    """Everything `/ui` shows, as far as the token's scope reaches, read at one instant."""

    now_ms: int
    period: DashboardPeriodOut
    periods: list[DashboardPeriodOut]
    entitlements: list[EntitlementOut]
    lenders: dict[str, list[LenderOut]]
    timeline: dict[str, list[list[int]]]
    verdicts: list[VerdictSeenOut]
    estimates: list[ClassEstimateOut]
    running: list[dict[str, Any]] = Field(
        description="running claims, newest admitted first, each as `GET /v1/claims` shows it"
    )
    running_more: int = Field(description="running claims visible but not listed")
    recent_actions: list[dict[str, Any]] | None = Field(
        description="the newest records of the action log, as `GET /v1/actions`; "
        "null where the service keeps no action log"
    )
    ledger: DashboardLedgerOut | SkipJsonSchema[None] = None
