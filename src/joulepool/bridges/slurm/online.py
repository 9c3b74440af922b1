"""`pool slurm check-config --online`: what the bridge's file cannot show by itself.

The offline check reads the file and the token. This one asks the world the file points
at, each answer a finding named so an operator can grep for it:

- `token`: Pool knows the bridge's token and it has the operator scope (API.md, Tokens:
  releasing a claim needs it), by `GET /v1/ledger`, which only an operator may read;
- `entitlement:<account>`: each mapped entitlement exists in Pool's tree (§2.1), with the
  closest existing name where one is misspelled;
- `slurm:<Key>`: Slurm's energy accounting (`scontrol show config`): without
  AcctGatherEnergyType, JobAcctGatherType and slurmdbd accounting the epilog has no figure
  and every job is charged its reservation at Estimator (§2.3);
- `exporter:<node>`: each node's DCGM exporter answers with GPU energy counters: the
  `dcgm_url` given (`{node}` in it is the node's name), else, with `gpu_energy = true`,
  the one the installed GPU Prolog beside the file reads, its loopback host taken as
  each node's own name.

Standard library only, like the rest of the controller's side of the bridge.
"""

from __future__ import annotations

import difflib
import re
import shlex
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from joulepool.bridges.slurm.config import BridgeConfig, PoolUnreachable, read_token
from joulepool.bridges.slurm.install import GPU_PROLOG
from joulepool.bridges.slurm.jobs import PoolClient, SlurmCommandFailed, run_slurm

ENERGY_COUNTER = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
CHARGED_RESERVATION = "without it every job is charged its reservation at Estimator"
SLURM_NEEDS: dict[str, tuple[str, ...]] = {
    "AccountingStorageType": ("accounting_storage/slurmdbd",),
    "JobAcctGatherType": ("jobacct_gather/linux", "jobacct_gather/cgroup"),
}
"""Keys of `scontrol show config` and the values the bridge can work with."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing checked: its name, whether it holds, and what was found."""

    check: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, object]:
        """The finding as `--json` prints it."""
        return {"check": self.check, "ok": self.ok, "detail": self.detail}


def check_online(
    config: BridgeConfig, env: Mapping[str, str], dcgm_url: str | None = None
) -> list[Finding]:
    """Every finding of the online check (see the module docstring; API.md, §2.1, §2.3)."""
    url = dcgm_url if dcgm_url is not None else configured_dcgm_url(config)
    return [*check_pool(config), *check_slurm(env), *check_exporters(env, url)]


_LOOPBACK = re.compile(r"\A(https?://)(?:127\.0\.0\.1|localhost)([:/].*)\Z")


def configured_dcgm_url(config: BridgeConfig) -> str | None:
    """The DCGM exporter the installed GPU Prolog reads (`pool slurm install-config --gpu
    --dcgm-url`), with a loopback host made `{node}`: each node reads its own exporter.
    None without GPU energy, without that script, or where it names no exporter (NVML)."""
    script = config.path.parent / GPU_PROLOG
    if not config.gpu_energy or not script.is_file():
        return None
    try:
        lines = script.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        if not line.startswith("exec "):
            continue
        try:
            argv = shlex.split(line)
        except ValueError:
            return None
        if "--dcgm-url" in argv[:-1]:
            url = argv[argv.index("--dcgm-url") + 1]
            m = _LOOPBACK.match(url)
            return f"{m.group(1)}{{node}}{m.group(2)}" if m else url
    return None


def check_pool(config: BridgeConfig) -> list[Finding]:
    """The token's scope and each mapped entitlement, asked of Pool (API.md, Tokens; §2.1)."""
    client = PoolClient(config.url, read_token(config.token_file), 10.0, config.ca_file)
    try:
        ledger = client.call("GET", "/v1/ledger")
        listed = client.call("GET", "/v1/entitlements") if ledger.status == 200 else None
    except PoolUnreachable as exc:
        return [Finding("token", False, f"Pool is unreachable: {exc}")]
    if ledger.status == 401:
        return [
            Finding(
                "token",
                False,
                f"Pool at {config.url} does not know the token in {config.token_file} (or it "
                "expired): `pool token add DIR --scope operator` makes one",
            )
        ]
    if ledger.status == 403:
        return [
            Finding(
                "token",
                False,
                f"the token in {config.token_file} is not an operator's: the bridge releases "
                "claims, which needs `--scope operator`",
            )
        ]
    if ledger.status != 200 or listed is None or listed.status != 200:
        status = ledger.status if listed is None else listed.status
        return [Finding("token", False, f"Pool answered HTTP {status}, not 200")]
    found = [Finding("token", True, "known to Pool, scope operator")]
    rows = listed.body.get("entitlements")
    ids = sorted(
        str(r["id"]) for r in (rows if isinstance(rows, list) else []) if isinstance(r, dict)
    )
    for account, entitlement in sorted(config.accounts.items()):
        if entitlement in ids:
            found.append(Finding(f"entitlement:{account}", True, entitlement))
            continue
        near = difflib.get_close_matches(entitlement, ids, n=1, cutoff=0.6)
        hint = f"; did you mean '{near[0]}'?" if near else f" (Pool has: {', '.join(ids)})"
        found.append(
            Finding(
                f"entitlement:{account}",
                False,
                f"account {account} maps to '{entitlement}', which Pool's tree lacks{hint}",
            )
        )
    return found


def check_slurm(env: Mapping[str, str]) -> list[Finding]:
    """Slurm's energy accounting, from `scontrol show config` (§2.3: no figure, Estimator)."""
    try:
        text = run_slurm(["scontrol", "show", "config"], env)
    except SlurmCommandFailed as exc:
        return [Finding("slurm", False, f"cannot ask slurmctld: {exc}")]
    conf: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            conf.setdefault(key.strip(), value.strip())
    found = []
    for key, good in SLURM_NEEDS.items():
        value = conf.get(key, "(not set)")
        ok = value in good
        detail = value if ok else f"{value}; set {key}={good[0]}: {CHARGED_RESERVATION}"
        found.append(Finding(f"slurm:{key}", ok, detail))
    energy = conf.get("AcctGatherEnergyType", "(not set)")
    ok = energy.startswith("acct_gather_energy/") and energy != "acct_gather_energy/none"
    found.append(
        Finding(
            "slurm:AcctGatherEnergyType",
            ok,
            energy
            if ok
            else f"{energy}; set AcctGatherEnergyType=acct_gather_energy/rapl (or ipmi, "
            f"pm_counters): {CHARGED_RESERVATION}",
        )
    )
    return found


def check_exporters(env: Mapping[str, str], dcgm_url: str | None) -> list[Finding]:
    """Each node's DCGM exporter answers with GPU energy counters (`{node}`: the node's name)."""
    if dcgm_url is None:
        return []
    if "{node}" not in dcgm_url:
        return [_scrape("exporter", dcgm_url)]
    try:
        nodes = sorted(set(run_slurm(["sinfo", "-h", "-N", "-o", "%N"], env).split()))
    except SlurmCommandFailed as exc:
        return [Finding("exporter", False, f"cannot list the nodes: {exc}")]
    return [_scrape(f"exporter:{n}", dcgm_url.replace("{node}", n)) for n in nodes]


def _scrape(check: str, url: str) -> Finding:
    if not url.startswith(("http://", "https://")):
        return Finding(check, False, f"{url}: not an http(s):// URL")
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 (scheme checked)
            body = resp.read(4 << 20).decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return Finding(check, False, f"{url}: {getattr(exc, 'reason', exc)}")
    if ENERGY_COUNTER not in body:
        return Finding(check, False, f"{url} answered without {ENERGY_COUNTER}")
    gpus = sum(1 for ln in body.splitlines() if ln.startswith(ENERGY_COUNTER))
    return Finding(check, True, f"{url}: {gpus} GPU energy counter(s)")
