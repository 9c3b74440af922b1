"""A deployment folder: the entitlement tree, the steward's key, the ledger (DESIGN.md §5).

    DIR/pool.toml        steward id, idle policy, budget period, the tree ([[entitlement]] tables)
    DIR/steward.key      the steward's COSE_Key, secret, mode 0600
    DIR/steward.pub      its public half, for anyone who verifies the ledger
    DIR/ledger.cbor      the ledger file (the entries as a CBOR sequence)
    DIR/witnesses/       witness receipts that verified, with the witnesses' public keys
    DIR/cosigned/        the latest checkpoint each C2SP witness cosigned (`deployment.cosigned`)
    DIR/tokens.toml      bearer-token hashes for `pool serve`
    DIR/pool.serve.pid   the running `pool serve`'s pid; DIR/pool.reload.json its last
                         SIGHUP reload's outcome (`service.reloads`, `pool reload DIR`)
    DIR/configs/         signed configuration statements: every configuration put in force
                         (`deployment.configs`, docs/reliability.md §18)
    DIR/pool.reload.log  every reload and what it changed, JSON lines (`pool config history`)

Reading the configuration is strict: an unknown key, a float, a negative figure or a broken
tree is refused naming the file, the node and the field, and nothing is half-applied.
"""

from __future__ import annotations

import dataclasses
import hashlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomli_w

from joulepool.acts import DEFAULT_POLICY, RuntimePolicy, parse_runtime
from joulepool.checks import check_figure, check_text, did_you_mean
from joulepool.errors import InvalidInput, InvalidTree
from joulepool.idle import IdlePolicy
from joulepool.periods import NONE, Schedule
from joulepool.pool import MAX_CLOCK_GAP_MS
from joulepool.reclaim import (
    DEFAULT_IDLE_ACTS,
    DEFAULT_PREEMPTION,
    IDLE_ACT_KEYS,
    IdleActs,
    PreemptionPolicy,
    parse_idle_acts,
    parse_preemption,
)
from joulepool.tree import Entitlement, Tree

if TYPE_CHECKING:
    from joulepool.transparency.witness_client import WitnessConfig

CONFIG = "pool.toml"
KEY = "steward.key"
PUBLIC_KEY = "steward.pub"
LEDGER = "ledger.cbor"
WITNESSES = "witnesses"
COSIGNED = "cosigned"
TOKENS = "tokens.toml"

_TOP_KEYS = {
    "pool",
    "idle",
    "period",
    "entitlement",
    "transparency",
    "c2sp_witness",
    "runtime",
    "preemption",
}
_POOL_KEYS = {"steward", "required_evidence", "max_device_power_w", "max_clock_gap"}


@dataclass(frozen=True, slots=True)
class Config:
    """What `pool.toml` says: the steward, the idle policy, the tree and the budget period."""

    steward: str
    tree: Tree
    idle: IdlePolicy
    required_evidence: int
    period: Schedule = NONE
    max_device_power_w: int | None = None
    """The most one device can draw, W: it bounds a release's actual figure
    (`joulepool.views.plausibility`). None: unconfigured, and no physical bound is applied."""
    max_clock_gap: int | None = None
    """Seconds the clock may be ahead of the last entry at start before it is a `clock_jump`
    (DESIGN.md §3). None: unset, and the default of 31 days applies (`clock_gap_ms`)."""
    origin: str | None = None
    """`[transparency] origin`: the checkpoint's origin line and the name of the steward's
    signed-note key (DESIGN.md §8). None: unset, and `joulepool/<steward>` applies."""
    witnesses: tuple[WitnessConfig, ...] = ()
    """`[[c2sp_witness]]`: the C2SP witnesses `pool serve` submits each new checkpoint to
    (c2sp.org/tlog-witness; DESIGN.md §8). Empty: none."""
    runtime: RuntimePolicy | None = None
    """`[runtime]`: what over-reservation does to a running job (DESIGN.md §7, `acts`).
    None: unset, and the default applies (report, never act)."""

    idle_acts: IdleActs | None = None
    """`[idle]`'s `action`, `notice_s` and `when`: what an idle verdict does to a running
    job (§2.7, DESIGN.md §7, `reclaim`). None: unset, and the default applies (report)."""
    preemption: PreemptionPolicy | None = None
    """`[preemption]`: whether capacity is reclaimed for waiting work in §5.2 order
    (DESIGN.md §7, `reclaim`). None: unset, and the default applies (report)."""

    @property
    def idle_acts_policy(self) -> IdleActs:
        """The idle acts in force: the configured ones, else the default (report)."""
        return DEFAULT_IDLE_ACTS if self.idle_acts is None else self.idle_acts

    @property
    def preemption_policy(self) -> PreemptionPolicy:
        """The `[preemption]` policy in force: the configured one, else the default."""
        return DEFAULT_PREEMPTION if self.preemption is None else self.preemption

    @property
    def runtime_policy(self) -> RuntimePolicy:
        """The `[runtime]` policy in force: the configured one, else the default."""
        return DEFAULT_POLICY if self.runtime is None else self.runtime

    @property
    def log_origin(self) -> str:
        """The origin checkpoints carry (DESIGN.md §8, c2sp.org/tlog-checkpoint): the
        configured one, else `joulepool/<steward>`, refused where the steward's id cannot
        make a key name (a space or '+' in it) so the operator sets one."""
        from joulepool.ledger.note import NoteRefused, check_key_name

        origin = self.origin if self.origin is not None else f"joulepool/{self.steward}"
        try:
            return check_key_name(origin, "transparency.origin")
        except NoteRefused as exc:
            raise InvalidInput(
                "transparency.origin",
                f"{exc.detail}; the default is joulepool/<steward>, so set [transparency] "
                "origin where the steward's id has a space or '+'",
            ) from None

    @property
    def clock_gap_ms(self) -> int:
        """`max_clock_gap` in milliseconds, or its default (DESIGN.md §3)."""
        if self.max_clock_gap is None:
            return MAX_CLOCK_GAP_MS
        return self.max_clock_gap * 1000


def read_config(path: Path) -> Config:
    """Read and validate `pool.toml`; every refusal names the file (and node and field)."""
    where = str(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(where, "no such configuration file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(where, f"not valid TOML: {exc}") from None
    return parse_config(doc, where)


def parse_config(doc: Mapping[str, Any], where: str) -> Config:
    """Validate a parsed `pool.toml` document (see `read_config`)."""
    extra = sorted(set(doc) - _TOP_KEYS)
    if extra:
        hint = did_you_mean(extra[0], _TOP_KEYS)
        raise InvalidInput(f"{where}: {extra[0]}", f"unknown table or key{hint}")
    pool = doc.get("pool", {})
    if not isinstance(pool, Mapping):
        raise InvalidInput(f"{where}: pool", "must be a table")
    extra = sorted(set(pool) - _POOL_KEYS)
    if extra:
        hint = did_you_mean(extra[0], _POOL_KEYS)
        raise InvalidInput(f"{where}: pool.{extra[0]}", f"unknown key{hint}")
    if "steward" not in pool:
        raise InvalidInput(f"{where}: pool.steward", "missing: the steward's identifier (kid)")
    steward = check_text(pool["steward"], f"{where}: pool.steward")
    required = check_figure(pool.get("required_evidence", 3), f"{where}: pool.required_evidence")
    ceiling = None
    if "max_device_power_w" in pool:
        ceiling = check_figure(pool["max_device_power_w"], f"{where}: pool.max_device_power_w")
        if ceiling == 0:
            # A ceiling of 0 W would refuse every release; unconfigured is spelled by absence.
            raise InvalidInput(f"{where}: pool.max_device_power_w", "must be at least 1 W")
    gap = None
    if "max_clock_gap" in pool:
        gap = check_figure(pool["max_clock_gap"], f"{where}: pool.max_clock_gap")
        if gap == 0:
            # 0 s would make every start a clock_jump; the default is spelled by absence.
            raise InvalidInput(f"{where}: pool.max_clock_gap", "must be at least 1 s")
    idle = doc.get("idle", {})
    if not isinstance(idle, Mapping) or set(idle) - {"window_us", "threshold_uw", *IDLE_ACT_KEYS}:
        raise InvalidInput(
            f"{where}: idle",
            "a table of window_us, threshold_uw, action, notice_s and when only",
        )
    acts = {k: v for k, v in idle.items() if k in IDLE_ACT_KEYS}
    idle_acts = parse_idle_acts(acts, where) if acts else None
    policy = IdlePolicy(
        _optional_figure(idle, "window_us", where), _optional_figure(idle, "threshold_uw", where)
    )
    period = NONE
    if "period" in doc:
        # Refusals name the file and the field, like the tree's (DESIGN.md §3, budget periods).
        try:
            period = Schedule.from_json(doc["period"], "period")
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc.field}", exc.detail.rsplit(": ", 1)[-1]) from None
    tree = parse_tree(doc.get("entitlement"), where)
    return Config(
        steward,
        tree,
        policy,
        required,
        period,
        ceiling,
        gap,
        _origin(doc, where),
        _witnesses(doc, where),
        parse_runtime(doc["runtime"], where) if "runtime" in doc else None,
        idle_acts,
        parse_preemption(doc["preemption"], where) if "preemption" in doc else None,
    )


def _witnesses(doc: Mapping[str, Any], where: str) -> tuple[WitnessConfig, ...]:
    """`[[c2sp_witness]]` tables (API.md, pool.toml; c2sp.org/tlog-witness), refusals
    naming the file."""
    from joulepool.transparency.witness_client import parse_witnesses

    try:
        return parse_witnesses(doc.get("c2sp_witness"))
    except InvalidInput as exc:
        detail = exc.detail.removeprefix(f"{exc.field}: ")
        raise InvalidInput(f"{where}: {exc.field}", detail) from None


def _origin(doc: Mapping[str, Any], where: str) -> str | None:
    """`[transparency] origin`, a c2sp.org/tlog-checkpoint origin line that is also a
    c2sp.org/signed-note key name (DESIGN.md §8); None when unset."""
    from joulepool.ledger.note import NoteRefused, check_key_name

    table = doc.get("transparency", {})
    if not isinstance(table, Mapping) or set(table) - {"origin"}:
        raise InvalidInput(f"{where}: transparency", "a table of origin only")
    if "origin" not in table:
        return None
    origin = table["origin"]
    if not isinstance(origin, str):
        raise InvalidInput(f"{where}: transparency.origin", "must be a string")
    try:
        return check_key_name(origin, "origin")
    except NoteRefused as exc:
        raise InvalidInput(f"{where}: transparency.origin", exc.detail) from None


def config_digest(config: Config) -> bytes:
    """The SHA-256 of `config_document`'s canonical text (docs/reliability.md §8)."""
    from joulepool.ledger.configs import config_text

    return hashlib.sha256(config_text(config_document(config)).encode("ascii")).digest()


def config_document(config: Config) -> dict[str, Any]:
    """The document `config_digest` hashes and a configuration statement keeps
    (docs/reliability.md §8, §18): SHA-256 of what decides in `pool.toml`: every field of every entitlement, in the
    tree's order, the idle policy, `required_evidence` and the budget period schedule
    (DESIGN.md §3: the period decides which spending counts), as canonical JSON. Replicas of
    one PostgreSQL ledger must agree on it (docs/reliability.md); comments, key order and
    layout of the file do not change it, and neither does the steward (its key is checked
    on its own). The release ceiling `max_device_power_w` is covered where it is set, so
    replicas refuse the same figures; unset, it leaves the digest as the rest makes it. So
    does `max_clock_gap` (DESIGN.md §3), and so does the checkpoint origin (DESIGN.md §8:
    replicas must sign one log), so existing deployments keep their digest. So do the
    `[[c2sp_witness]]` entries (DESIGN.md §8: replicas of one log submit to the same
    witnesses, or each would serve other cosignatures), in their order. So does
    `[runtime]`, the `[idle]` acts and `[preemption]` (DESIGN.md §7: replicas must agree
    on which acts are due), each only where it is set."""
    idle = config.idle
    doc: dict[str, Any] = {
        "pool.toml": 1,
        "entitlements": [dataclasses.asdict(ent) for ent in config.tree],
        "idle": {"window_us": idle.window_us, "threshold_uw": idle.threshold_uw},
        "required_evidence": config.required_evidence,
        "period": dataclasses.asdict(config.period),
    }
    if config.max_device_power_w is not None:
        doc["max_device_power_w"] = config.max_device_power_w
    if config.max_clock_gap is not None:
        doc["max_clock_gap"] = config.max_clock_gap
    if config.origin is not None:
        doc["origin"] = config.origin
    if config.witnesses:
        doc["c2sp_witness"] = [{"url": w.url, "vkey": w.vkey.encode()} for w in config.witnesses]
    if config.runtime is not None:
        doc["runtime"] = config.runtime.to_json()
    if config.idle_acts is not None:
        doc["idle_acts"] = config.idle_acts.to_json()
    if config.preemption is not None:
        doc["preemption"] = config.preemption.to_json()
    return doc


def _optional_figure(table: Mapping[str, Any], name: str, where: str) -> int | None:
    if name not in table:
        return None
    return check_figure(table[name], f"{where}: idle.{name}")


def parse_tree(tables: object, where: str) -> Tree:
    """The `[[entitlement]]` tables as a validated `Tree` (§2.1), refusals naming the file."""
    if tables is None:
        tables = []
    if not isinstance(tables, list):
        raise InvalidInput(f"{where}: entitlement", "must be an array of tables ([[entitlement]])")
    try:
        return Tree(
            Entitlement.from_json(_exact_energies(t, f"entitlement[{i}]"), f"entitlement[{i}]")
            for i, t in enumerate(tables)
        )
    except InvalidTree as exc:
        raise exc.in_file(where) from None


ENERGY_KEYS = {"guarantee": "guarantee_uj", "limit": "limit_uj"}
"""An entitlement's energies as people write them (`guarantee = "10MJ"`) beside the exact µJ."""


def _exact_energies(table: object, where: str) -> object:
    """An `[[entitlement]]` table with `guarantee`/`limit` written with a unit ("10MJ",
    "2.5kWh": `units.parse_energy`, exact, a fraction of a µJ refused) replaced by their
    `_uj` figures. Exactly one spelling of each: both is refused, never one preferred."""
    if not isinstance(table, Mapping) or not set(ENERGY_KEYS) & set(table):
        return table
    from joulepool.units import parse_energy

    node = table.get("id")
    node_id = node if isinstance(node, str) else None
    out = dict(table)
    for human, exact in ENERGY_KEYS.items():
        if human not in table:
            continue
        value = out.pop(human)
        if exact in table:
            raise InvalidTree(
                node_id, human, f"give {human} or {exact}, not both", structural=False
            )
        if not isinstance(value, str) or value.strip().replace("_", "").isdigit():
            raise InvalidTree(
                node_id,
                human,
                f'{value!r}: an energy with its unit, as "10MJ" or "2.5kWh" '
                f"({exact} takes an integer of µJ)",
                structural=False,
            )
        try:
            out[exact] = parse_energy(value, f"{where}.{human}")
        except InvalidInput as exc:
            reason = exc.detail.removeprefix(f"{exc.field}: ")
            raise InvalidTree(node_id, human, reason, structural=False) from None
    return out


def tree_to_toml(tree: Tree) -> str:
    """The `[[entitlement]]` tables of `tree`, in tree order, as TOML text."""
    return tomli_w.dumps({"entitlement": [ent.to_json() for ent in tree]})


MJ = 1_000_000_000_000
"""A megajoule in microjoules: about 0.7 GPU-hours at 400 W."""

EXAMPLE_TREE = Tree(
    [
        Entitlement("research", 0, 0, 0, priority=0),
        Entitlement("vision", 50 * MJ, 8, 3, parent="research", priority=2),
        Entitlement("language", 30 * MJ, 4, 2, parent="research", limit_uj=60 * MJ, priority=1),
        Entitlement("robotics", 20 * MJ, 4, 1, parent="research", priority=0),
    ]
)
"""`pool init`'s tree: a department and three teams with mixed weights and one limit."""

MONTHLY = Schedule("month")
"""`pool init`'s period: guarantees renew on the 1st of each month, 00:00 UTC."""


PERIOD_COMMENT = (
    "# Budget period (DESIGN.md §3): each guarantee is spent within one period and renews at\n"
    '# its end; nothing carries over. kind = "none" (one period for all time), "day", "week"\n'
    '# (from Monday 00:00 UTC), "month" (from the 1st, 00:00 UTC), or "fixed" with length_ms\n'
    "# and epoch_ms (periods [epoch + k*length, epoch + (k+1)*length)). Changing it regroups\n"
    "# the ledger's history; it never changes the ledger.\n"
)


def write_config(
    path: Path,
    steward: str,
    tree: Tree,
    idle: IdlePolicy | None = None,
    period: Schedule = NONE,
    max_device_power_w: int | None = None,
) -> None:
    """Write `pool.toml`, refusing to overwrite one; the [period] table says its choices, and
    `max_device_power_w`, when given, the release ceiling (DESIGN.md "Plausible releases")."""
    doc: dict[str, Any] = {"pool": {"steward": steward, "required_evidence": 3}}
    if max_device_power_w is not None:
        doc["pool"]["max_device_power_w"] = max_device_power_w
    if idle is not None and idle.configured:
        doc["idle"] = {"window_us": idle.window_us, "threshold_uw": idle.threshold_uw}
    text = (
        "# pool/1 deployment: the steward, the idle policy, the budget period and the tree.\n"
        "# Figures are integers: microjoules (_uj), microseconds (_us), microwatts (_uw).\n"
        "# With no [idle] table the idle policy is unconfigured and reclaims nothing (§2.7).\n"
        "# max_device_power_w: the most one device draws (W); a release above devices x it x\n"
        "# the time since admission is refused implausible_actual unless overridden.\n"
        + tomli_w.dumps(doc)
        + "\n"
        + PERIOD_COMMENT
        + tomli_w.dumps({"period": period.to_json()})
        + "\n"
        + tree_to_toml(tree)
    )
    with path.open("x", encoding="utf-8") as fh:
        fh.write(text)
