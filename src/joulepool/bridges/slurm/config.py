"""The bridge's configuration file, the token file, and the job's admin comment.

One file, `pool-bridge.toml`, is read by both halves of the bridge: by `job_submit.lua`
inside slurmctld (with a small parser of its own) and by the agent and the epilog here. So
it keeps to the TOML subset the Lua parser understands, and `read_bridge_config` refuses
anything outside it, naming the line's key, before slurmctld ever sees it:

    [pool]
    url = "https://pool.example:7460"        # http:// or https:// (verified, see ca_file)
    ca_file = "/etc/slurm/pool-ca.pem"       # CAs for https (default: the system's)
    token_file = "/etc/slurm/pool-bridge.token"   # readable by SlurmUser only
    timeout_ms = 500                         # the whole exchange, at submission
    on_unreachable = "hold"                  # "hold" (fail-closed) or "admit" (fail-open)
    cluster = "mycluster"                    # part of every claim id

    mode = "enforce"                         # "enforce" or "shadow" (decide, record, hold nothing)
    cpu_only = "claim"                       # a job with no GPU: "claim" its CPUs, or "exempt"

    [accounts]                               # Slurm account = Pool entitlement
    physics = "vision"

    [default_estimate]                       # for a job that gives no estimate (Estimator)
    gpu_power_w = 700                        # W per GPU x GPUs x time limit
    cpu_power_w = 10                         # W per CPU x CPUs x time limit (CPU-only jobs)
    [account_estimate]                       # a fixed figure per job (per array task)
    physics = "20MJ"
    [partition_estimate]
    debug = "1MJ"

    [exempt_accounts]                        # never claimed
    admin = true
    [exempt_partitions]
    maint = true

This module and `epilog.py` use the standard library only: the epilog runs as SlurmUser,
often under the system's Python, where joulepool's dependencies may not be importable.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from joulepool.errors import InvalidInput, PoolError
from joulepool.units import parse_energy

SAFE = re.compile(r"^[A-Za-z0-9_.:@+/-]+$")
"""What an id may hold to travel in an admin comment: no spaces, no ';' or '=' (the separators)."""
CLUSTER = re.compile(r"^[A-Za-z0-9_.:@+-]{1,64}$")
"""A cluster name as part of a claim id: no '/' (a claim id has none, API.md), 64 at most,
so `slurm-<cluster>-<uuid>` stays inside a claim id's 256 bytes."""
ACCOUNT = re.compile(r"^[A-Za-z0-9_-]+$")
"""A Slurm account name as a bare TOML key (the Lua parser also takes quoted keys)."""
MAX_TIMEOUT_MS = 900
"""Submission stalls slurmctld for everyone while Pool answers: never a second or more."""
DEFAULT_TIMEOUT_MS = 500
ON_UNREACHABLE = ("hold", "admit")
STATES = (
    "admitted",
    "releasing",
    "queued",
    "unreachable",
    "denied",
    "unaccounted",
    "shadow_queued",
    "shadow_denied",
)
"""Where a job stands with Pool, as its admin comment records it. `releasing`: admitted, and
the agent is lifting its hold (a crash between the two is finished on the next pass).
`shadow_*`: in shadow mode, what Pool's verdict would have done; the job ran unclaimed."""
SHADOW_STATES = ("shadow_queued", "shadow_denied")
MODES = ("enforce", "shadow")
CPU_ONLY = ("claim", "exempt")
TABLES = (
    "pool",
    "accounts",
    "default_estimate",
    "account_estimate",
    "partition_estimate",
    "exempt_accounts",
    "exempt_partitions",
)
"""The tables of `pool-bridge.toml`, each one job_submit.lua reads."""
MAX_POWER_W = 100_000
"""A default power per device past this is a typo (a node's whole draw is kilowatts)."""
_LUA_ENERGY = re.compile(r"\A\d+(?:\.\d+)?(?:uJ|mJ|J|kJ|MJ|GJ|TJ|Wh|kWh|MWh|GWh)?\Z")
"""A figure both job_submit.lua's parser and `joulepool.units` read alike."""
ADMITTED_STATES = ("admitted", "releasing")
HELD_STATES = ("queued", "unreachable", "denied")
DEFAULT_GPU_WAIT_S = 30
DEFAULT_SAMPLE_EVERY_S = 30
DEFAULT_RECONCILE_AFTER_S = 60


class BridgeConfigError(InvalidInput):
    """The bridge's configuration file or token file is missing, malformed or unsafe."""

    code = "bridge_config"


@dataclass(frozen=True, slots=True)
class BridgeConfig:
    """The parsed `pool-bridge.toml`."""

    path: Path
    url: str
    token_file: Path
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    on_unreachable: str = "hold"
    cluster: str = "slurm"
    accounts: dict[str, str] = field(default_factory=dict)
    gpu_energy: bool = False
    """Whether every node runs the GPU Prolog/Epilog (`gpu.py`). Without it a job that held
    GPUs has no complete figure and is charged its reservation, Estimator."""
    gpu_wait_s: int = DEFAULT_GPU_WAIT_S
    """How long the epilog waits for the nodes' GPU figures to arrive."""
    reconcile_after_s: int = DEFAULT_RECONCILE_AFTER_S
    """The agent releases a claim whose job ended unreported once it ended this long ago."""
    ca_file: Path | None = None
    """For an https URL: the CAs that may vouch for Pool's certificate (None: the system's)."""
    gpus_per_node: int | None = None
    """GPUs on each node: an --exclusive job holds them all, so it claims them all."""
    sample_every_s: int = DEFAULT_SAMPLE_EVERY_S
    """How often the agent posts running jobs' readings (DESIGN.md §7); 0: never."""
    dcgm_url: str | None = None
    """Each node's dcgm-exporter, `{node}` standing for the node's name (`sampling.py`)."""
    node_exporter_url: str | None = None
    """Each node's node_exporter (RAPL), `{node}` standing for the node's name."""
    gpu_state_dir: Path | None = None
    """The GPU Prolog's `--state-dir`, where the agent finds jobs' start readings."""
    mode: str = "enforce"
    """`shadow`: every job is decided and recorded, none held or rejected (docs/slurm.md)."""
    cpu_only: str = "claim"
    """A job that asks for no GPU: `claim` (its CPUs are its devices) or `exempt`."""
    default_power_w: dict[str, int] = field(default_factory=dict)
    """`gpu_power_w` and `cpu_power_w`: a job without an estimate is charged this per
    device times its time limit, graded Estimator (§4.4: a guess never borrows)."""
    account_estimate: dict[str, int] = field(default_factory=dict)
    """A fixed estimate (µJ) per job of the account, for a job without one."""
    partition_estimate: dict[str, int] = field(default_factory=dict)
    """A fixed estimate (µJ) per job of the partition, after the account's."""
    exempt_accounts: frozenset[str] = frozenset()
    """Accounts whose jobs are never claimed."""
    exempt_partitions: frozenset[str] = frozenset()
    """Partitions whose jobs are never claimed."""

    @property
    def gpu_wait(self) -> float | None:
        """`gpu_wait_s` where the nodes publish GPU figures, else None (see `report_job`)."""
        return float(self.gpu_wait_s) if self.gpu_energy else None

    @property
    def fail_open(self) -> bool:
        """Whether a job goes on unaccounted when Pool cannot be reached."""
        return self.on_unreachable == "admit"


_LUA_VALUE = re.compile(r'^(?:"[^"\\]*"|\d+|true|false)\s*(?:#.*)?$')
_LUA_KEY = re.compile(r'^(?:"[^"]+"|[A-Za-z0-9_-]+)\s*=')


def _check_lua_subset(text: str, where: str) -> None:
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if re.fullmatch(r"\[(" + "|".join(TABLES) + r")\]", line):
            continue
        if line.startswith("["):
            raise BridgeConfigError(
                f"{where}:{n}", f"unknown table {line}; only {', '.join(TABLES)}"
            )
        key = _LUA_KEY.match(line)
        if key is None or not _LUA_VALUE.match(line[key.end() :].strip()):
            raise BridgeConfigError(
                f"{where}:{n}",
                'job_submit.lua reads only key = "string without escapes", integers, true/false',
            )


def read_bridge_config(path: Path) -> BridgeConfig:
    """Read and validate `pool-bridge.toml` (the bridge's side of API.md's client contract)."""
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BridgeConfigError(
            where, "no such file; `pool slurm install-config` writes one"
        ) from None
    except OSError as exc:
        raise BridgeConfigError(where, f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise BridgeConfigError(where, "not a bridge configuration: not UTF-8 text") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BridgeConfigError(where, f"not valid TOML: {exc}") from None
    _check_lua_subset(text, where)
    extra = sorted(set(doc) - set(TABLES))
    if extra:
        raise BridgeConfigError(f"{where}: {extra[0]}", f"unknown table; only {', '.join(TABLES)}")
    pool = doc.get("pool", {})
    known = {
        "url",
        "token_file",
        "timeout_ms",
        "on_unreachable",
        "cluster",
        "gpu_energy",
        "gpu_wait_s",
        "reconcile_after_s",
        "ca_file",
        "gpus_per_node",
        "sample_every_s",
        "dcgm_url",
        "node_exporter_url",
        "gpu_state_dir",
        "mode",
        "cpu_only",
    }
    extra = sorted(set(pool) - known)
    if extra:
        raise BridgeConfigError(
            f"{where}: pool.{extra[0]}", f"unknown key (known: {', '.join(sorted(known))})"
        )
    url = pool.get("url")
    if not isinstance(url, str) or not re.fullmatch(r"https?://[^:/\s\"]+(:\d+)?/?", url):
        raise BridgeConfigError(f"{where}: pool.url", "must be http(s)://host[:port]")
    scheme, _, rest = url.partition("://")
    host = rest.split(":")[0].split("/")[0]
    if scheme == "http" and not (host == "localhost" or re.fullmatch(r"127(\.\d{1,3}){3}", host)):
        # The bearer token rides on every request: over the network only inside TLS.
        raise BridgeConfigError(
            f"{where}: pool.url",
            "http:// would send the token in clear; use https:// (plain http only to "
            "127.0.0.1 or localhost)",
        )
    ca_file = pool.get("ca_file")
    if ca_file is not None and (not isinstance(ca_file, str) or not ca_file.startswith("/")):
        raise BridgeConfigError(f"{where}: pool.ca_file", "must be an absolute path")
    token_file = pool.get("token_file")
    if not isinstance(token_file, str) or not token_file.startswith("/"):
        raise BridgeConfigError(f"{where}: pool.token_file", "must be an absolute path")
    timeout = pool.get("timeout_ms", DEFAULT_TIMEOUT_MS)
    if type(timeout) is not int or not 1 <= timeout <= MAX_TIMEOUT_MS:
        raise BridgeConfigError(
            f"{where}: pool.timeout_ms",
            f"an integer from 1 to {MAX_TIMEOUT_MS}: slurmctld waits this long for everyone",
        )
    on_unreachable = pool.get("on_unreachable", "hold")
    if on_unreachable not in ON_UNREACHABLE:
        raise BridgeConfigError(
            f"{where}: pool.on_unreachable", 'must be "hold" (fail-closed) or "admit" (fail-open)'
        )
    cluster = pool.get("cluster", "slurm")
    if not isinstance(cluster, str) or not CLUSTER.match(cluster):
        raise BridgeConfigError(
            f"{where}: pool.cluster",
            "1 to 64 letters, digits and _.:@+- (no '/': it is in claim ids)",
        )
    accounts = doc.get("accounts", {})
    mapping: dict[str, str] = {}
    for account, entitlement in accounts.items():
        if not isinstance(entitlement, str) or not SAFE.match(entitlement):
            raise BridgeConfigError(
                f"{where}: accounts.{account}",
                "an entitlement id of letters, digits and _.:@+/- only",
            )
        mapping[account] = entitlement
    gpu_energy = pool.get("gpu_energy", False)
    if type(gpu_energy) is not bool:
        raise BridgeConfigError(f"{where}: pool.gpu_energy", "must be true or false")
    waits = {}
    for key, default, top in (
        ("gpu_wait_s", DEFAULT_GPU_WAIT_S, 300),
        ("reconcile_after_s", DEFAULT_RECONCILE_AFTER_S, 86_400),
    ):
        value = pool.get(key, default)
        if type(value) is not int or not 0 <= value <= top:
            raise BridgeConfigError(f"{where}: pool.{key}", f"an integer from 0 to {top} seconds")
        waits[key] = value
    gpus_per_node = pool.get("gpus_per_node")
    if gpus_per_node is not None and (
        type(gpus_per_node) is not int or not 1 <= gpus_per_node <= 1024
    ):
        raise BridgeConfigError(f"{where}: pool.gpus_per_node", "an integer from 1 to 1024")
    sampling = _sampling(pool, where)
    mode = pool.get("mode", "enforce")
    if mode not in MODES:
        raise BridgeConfigError(
            f"{where}: pool.mode",
            'must be "enforce" or "shadow" (decide and record every job, hold none)',
        )
    cpu_only = pool.get("cpu_only", "claim")
    if cpu_only not in CPU_ONLY:
        raise BridgeConfigError(
            f"{where}: pool.cpu_only",
            'must be "claim" (a job with no GPU claims its CPUs) or "exempt"',
        )
    return BridgeConfig(
        path,
        url.rstrip("/"),
        Path(token_file),
        timeout,
        on_unreachable,
        cluster,
        mapping,
        gpu_energy,
        waits["gpu_wait_s"],
        waits["reconcile_after_s"],
        None if ca_file is None else Path(ca_file),
        gpus_per_node,
        *sampling,
        mode,
        cpu_only,
        _power(doc.get("default_estimate", {}), where),
        _figures(doc.get("account_estimate", {}), where, "account_estimate"),
        _figures(doc.get("partition_estimate", {}), where, "partition_estimate"),
        _names(doc.get("exempt_accounts", {}), where, "exempt_accounts"),
        _names(doc.get("exempt_partitions", {}), where, "exempt_partitions"),
    )


def _sampling(
    pool: dict[str, object], where: str
) -> tuple[int, str | None, str | None, Path | None]:
    """`sample_every_s`, `dcgm_url`, `node_exporter_url`, `gpu_state_dir` (DESIGN.md §7)."""
    every = pool.get("sample_every_s", DEFAULT_SAMPLE_EVERY_S)
    if type(every) is not int or not 0 <= every <= 3600:
        raise BridgeConfigError(
            f"{where}: pool.sample_every_s", "an integer from 0 to 3600 seconds"
        )
    urls: list[str | None] = []
    for key in ("dcgm_url", "node_exporter_url"):
        url = pool.get(key)
        if url is not None and (
            not isinstance(url, str) or not re.fullmatch(r"https?://[^\s\"]+", url)
        ):
            raise BridgeConfigError(
                f"{where}: pool.{key}", "must be http(s)://host:port/metrics ({node}: the node)"
            )
        urls.append(url)
    state_dir = pool.get("gpu_state_dir")
    if state_dir is not None and (not isinstance(state_dir, str) or not state_dir.startswith("/")):
        raise BridgeConfigError(f"{where}: pool.gpu_state_dir", "must be an absolute path")
    return every, urls[0], urls[1], None if state_dir is None else Path(state_dir)


def _power(table: dict[str, object], where: str) -> dict[str, int]:
    known = ("gpu_power_w", "cpu_power_w")
    out: dict[str, int] = {}
    for key, value in table.items():
        if key not in known:
            raise BridgeConfigError(
                f"{where}: default_estimate.{key}", f"unknown key (known: {', '.join(known)})"
            )
        if type(value) is not int or not 1 <= value <= MAX_POWER_W:
            raise BridgeConfigError(
                f"{where}: default_estimate.{key}",
                f"watts per device, an integer from 1 to {MAX_POWER_W}",
            )
        out[key] = value
    return out


def _figures(table: dict[str, object], where: str, name: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, value in table.items():
        if not isinstance(value, str) or not _LUA_ENERGY.match(value):
            raise BridgeConfigError(
                f"{where}: {name}.{key}",
                'an energy in quotes with its unit, such as "20MJ" or "5.5kWh"',
            )
        uj = parse_energy(value, f"{where}: {name}.{key}")
        if not 1 <= uj < 10**18:
            raise BridgeConfigError(f"{where}: {name}.{key}", "from 1 uJ to below 10^18 uJ")
        out[key] = uj
    return out


def _names(table: dict[str, object], where: str, name: str) -> frozenset[str]:
    for key, value in table.items():
        if value is not True:
            raise BridgeConfigError(
                f"{where}: {name}.{key}", "must be true (remove the line to claim its jobs)"
            )
    return frozenset(table)


def read_token(path: Path) -> str:
    """The bridge's bearer token, refusing a file other users could read (API.md, Tokens)."""
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BridgeConfigError(str(path), "no such token file") from None
    except OSError as exc:
        raise BridgeConfigError(str(path), f"cannot read the token file: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise BridgeConfigError(str(path), "not a token file: not UTF-8 text") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise BridgeConfigError(
            str(path),
            f"mode {stat.S_IMODE(st.st_mode):04o}: must be readable by its owner only (0600)",
        )
    token = text.strip()
    if not token or any(c.isspace() for c in token):
        raise BridgeConfigError(str(path), "must hold one token on one line")
    return token


@dataclass(frozen=True, slots=True)
class PoolNote:
    """What the bridge wrote in a job's admin comment: its claim, and where it stands."""

    claim: str
    entitlement: str
    gang_size: int
    devices_per_member: int
    estimate_uj: int
    grade: str
    state: str
    klass: str | None = None
    reason: str | None = None
    renews_ms: int | None = None
    """For a job queued on its period's budget: when the period renews (DESIGN.md §3)."""
    tasks: int | None = None
    """For a job array: its task count. The claim is the whole array's: every task's energy
    (`estimate_uj` is tasks × each task's) and the devices of the tasks that may run at once."""
    act: str | None = None
    """The last act Pool's `[runtime]` policy had carried out on the running job (`notice`,
    `signal`, ...: DESIGN.md §7), so its owner sees it in the admin comment."""

    def claim_json(self) -> dict[str, object]:
        """The claim as API.md's `POST /v1/claims` takes it (§2.4)."""
        out: dict[str, object] = {
            "id": self.claim,
            "entitlement": self.entitlement,
            "gang_size": self.gang_size,
            "devices_per_member": self.devices_per_member,
            "estimate": {"uj": self.estimate_uj, "grade": self.grade},
        }
        if self.klass is not None:
            out["class"] = self.klass
        return out

    def with_state(
        self, state: str, reason: str | None = None, renews_ms: int | None = None
    ) -> PoolNote:
        """The same claim in another state."""
        return PoolNote(
            self.claim,
            self.entitlement,
            self.gang_size,
            self.devices_per_member,
            self.estimate_uj,
            self.grade,
            state,
            self.klass,
            reason,
            renews_ms,
            self.tasks,
            self.act,
        )

    def format(self) -> str:
        """The admin comment text (the same layout job_submit.lua writes)."""
        parts = [
            f"pool:claim={self.claim}",
            f"entitlement={self.entitlement}",
            f"gang={self.gang_size}",
            f"per_member={self.devices_per_member}",
            f"estimate_uj={self.estimate_uj}",
            f"grade={self.grade}",
        ]
        if self.klass is not None:
            parts.append(f"class={self.klass}")
        if self.tasks is not None:
            parts.append(f"tasks={self.tasks}")
        parts.append(f"state={self.state}")
        if self.reason is not None:
            parts.append(f"reason={self.reason}")
        if self.renews_ms is not None:
            parts.append(f"renews_ms={self.renews_ms}")
        if self.act is not None:
            parts.append(f"act={self.act}")
        return ";".join(parts)


_NOTE_INTS = {"gang": "gang_size", "per_member": "devices_per_member", "estimate_uj": "estimate_uj"}


def parse_note(text: str | None) -> PoolNote | None:
    """The bridge's note in an admin comment, or None when the job is not the bridge's."""
    if not text or not text.startswith("pool:"):
        return None
    fields: dict[str, str] = {}
    for part in text[len("pool:") :].split(";"):
        key, sep, value = part.partition("=")
        if not sep or not SAFE.match(value) or key in fields:
            return None
        fields[key] = value
    needed = {"claim", "entitlement", "gang", "per_member", "estimate_uj", "grade", "state"}
    if not needed <= set(fields) or fields["state"] not in STATES:
        return None
    if not all(fields[k].isdigit() for k in _NOTE_INTS):
        return None
    renews = fields.get("renews_ms")
    if renews is not None and not renews.isdigit():
        return None
    tasks = fields.get("tasks")
    if tasks is not None and (not tasks.isdigit() or int(tasks) < 1):
        return None
    return PoolNote(
        fields["claim"],
        fields["entitlement"],
        int(fields["gang"]),
        int(fields["per_member"]),
        int(fields["estimate_uj"]),
        fields["grade"],
        fields["state"],
        fields.get("class"),
        fields.get("reason"),
        None if renews is None else int(renews),
        None if tasks is None else int(tasks),
        fields.get("act"),
    )


def slurm_env(conf: Path | None = None) -> dict[str, str]:
    """The environment for Slurm's commands (slurmctld does not pass SLURM_CONF to scripts)."""
    env = dict(os.environ)
    if conf is not None:
        env["SLURM_CONF"] = str(conf)
    return env


class PoolUnreachable(PoolError):
    """`pool serve` did not answer (connection refused, timeout, or not HTTP)."""

    code = "pool_unreachable"
