"""Shared parts of the reliability battery: a load that survives its server being
killed, the after-the-fault ledger audit every test runs, and the figures each test records.

Figures go to stdout (`pytest -s` shows them) and to one JSON file per test under
`$JOULEPOOL_RELIABILITY_DIR` (default: `<tmp>/joulepool-reliability`), which is where
docs/reliability.md takes its numbers from.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from joulepool.events import Admitted, Released
from joulepool.ledger.cose import content_address, open_envelope
from joulepool.ledger.entry import event_of
from joulepool.ledger.replay import Replayer, replay
from joulepool.tree import Tree

MJ = 10**12
GRADES = ("HwShunt", "ModelBased", "Estimator")
TEAMS = ("vision", "language", "robotics")


@dataclass
class Figures:
    """What one reliability test did, for docs/reliability.md."""

    test: str
    rounds: int = 0
    faults_injected: int = 0
    entries_checked: int = 0
    admissions_told: int = 0
    releases_told: int = 0
    errors_answered: int = 0
    entries_lost: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self) -> Path:
        """Print the figures and write them as JSON; return the file written."""
        folder = Path(
            os.environ.get("JOULEPOOL_RELIABILITY_DIR")
            or Path(tempfile.gettempdir()) / "joulepool-reliability"
        )
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / f"{self.test}.json"
        text = json.dumps(asdict(self), sort_keys=True)
        out.write_text(text + "\n", encoding="utf-8")
        print(f"\nRELIABILITY {text}")
        return out


@dataclass
class Told:
    """What clients were answered with 200: admissions and releases, with their indexes."""

    admits: dict[str, int] = field(default_factory=dict)
    releases: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    codes: dict[str, int] = field(default_factory=dict)
    unanswered: int = 0
    # Requests whose connection failed: (path, body). A careful client retries them.
    pending: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def merge(self, other: Told) -> None:
        """Add another run's answers to these."""
        overlap = set(self.admits) & set(other.admits)
        assert not overlap, f"an id was told admitted twice: {sorted(overlap)[:5]}"
        self.admits.update(other.admits)
        self.releases.update(other.releases)
        self.errors.extend(other.errors)
        for code, n in other.codes.items():
            self.codes[code] = self.codes.get(code, 0) + n
        self.unanswered += other.unanswered
        self.pending.extend(other.pending)


def retry_pending(url: str, token: str, told: Told) -> dict[str, int]:
    """Send every unanswered request again, as a careful client does after a failure.

    A claim id is the client's idempotency key: a retry of a submission that landed is
    refused `claim_exists` (it is in the ledger already), one that did not is decided now;
    a retried release is `already_released` or recorded now. Nothing is written twice.
    """
    outcome = {"landed_before": 0, "decided_now": 0}
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        for path, body in told.pending:
            r = http.post(path, json=body)
            cid = str(body["id"]) if path == "/v1/claims" else path.split("/")[3]
            if r.status_code == 409:
                assert r.json()["error"] in ("claim_exists", "already_released"), r.text
                assert http.get(f"/v1/claims/{cid}").status_code == 200
                outcome["landed_before"] += 1
                continue
            assert r.status_code == 200, r.text
            answer = r.json()
            if path != "/v1/claims":
                told.releases[cid] = answer["seq"]
            elif answer["verdict"] == "admit":
                told.admits[cid] = answer["seq"]
            outcome["decided_now"] += 1
    told.pending.clear()
    return outcome


def claim(cid: str, entitlement: str = "vision", uj: int = MJ) -> dict[str, object]:
    """A one-device HwShunt claim as `POST /v1/claims` takes it (API.md)."""
    return {
        "id": cid,
        "entitlement": entitlement,
        "gang_size": 1,
        "devices_per_member": 1,
        "estimate": {"uj": uj, "grade": "HwShunt"},
    }


def claim_body(cid: str, rng: random.Random, teams: tuple[str, ...] = TEAMS) -> dict[str, Any]:
    """A random, valid claim: small enough that many admit, big enough that some queue."""
    return {
        "id": cid,
        "entitlement": rng.choice(teams),
        "gang_size": rng.randrange(1, 3),
        "devices_per_member": rng.randrange(1, 3),
        "estimate": {"uj": rng.randrange(1, 6) * MJ, "grade": rng.choice(GRADES)},
    }


def drive(
    urls: list[str],
    token: str,
    prefix: str,
    clients: int,
    stop: threading.Event,
    *,
    max_ops: int = 10_000,
    on_error: Callable[[httpx.Response], bool] | None = None,
    timeout_s: float = 30.0,
) -> Told:
    """Submit and release from `clients` threads until `stop` is set or the server dies.

    A request whose connection fails has no answer: it is counted, and that client stops
    (its server is gone). A non-200 answer is kept in `errors`; `on_error` may accept it
    (return True) so that the load carries on through expected faults.
    """
    told = Told()

    def client(n: int) -> None:
        rng = random.Random(f"{prefix}-{n}")
        running: list[str] = []
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(headers=headers, timeout=timeout_s) as http:
            for i in range(max_ops):
                if stop.is_set():
                    return
                base = urls[rng.randrange(len(urls))]
                if running and rng.random() < 0.4:
                    cid = running.pop(rng.randrange(len(running)))
                    path = f"/v1/claims/{cid}/release"
                    body = {"actual": {"uj": rng.randrange(0, 4 * MJ), "grade": rng.choice(GRADES)}}
                else:
                    cid = f"{prefix}-{n}-{i}"
                    path, body = "/v1/claims", claim_body(cid, rng)
                try:
                    r = http.post(base + path, json=body)
                except httpx.TransportError:
                    with told.lock:
                        told.unanswered += 1
                        told.pending.append((path, body))
                    if len(urls) == 1:
                        return
                    continue
                if r.status_code == 200:
                    answer = r.json()
                    with told.lock:
                        if path != "/v1/claims":
                            told.releases[cid] = answer["seq"]
                        elif answer["verdict"] == "admit":
                            running.append(cid)
                            told.admits[cid] = answer["seq"]
                    continue
                try:
                    code = str(r.json()["error"])
                except (ValueError, KeyError, TypeError):
                    code = f"not JSON: {r.text[:100]}"
                with told.lock:
                    told.errors.append(f"{r.request.url.path}: {r.status_code} {r.text[:300]}")
                    told.codes[code] = told.codes.get(code, 0) + 1
                if on_error is None or not on_error(r):
                    return
                time.sleep(0.02)  # the store is down: do not spin while it comes back

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a load client hung"
    return told


@dataclass(frozen=True)
class Audit:
    """The result of auditing a ledger against what clients were told."""

    replayer: Replayer
    entries: int
    lost: list[str]


def audit(entries: list[bytes], steward: str, public_key: bytes, tree: Tree, told: Told) -> Audit:
    """Verify the ledger, and check every answer a client got is in it where it was told.

    The ledger must verify from index 0 (signatures, chain, events); no claim is admitted
    twice and no entry appears twice; each told admission and release is the event at the
    index its client was given. Returns the told admissions and releases that are missing.
    """
    replayer = replay(entries, steward, public_key, tree)
    admitted_at: dict[str, int] = {}
    released_at: dict[str, int] = {}
    addresses: set[bytes] = set()
    for index, raw in enumerate(entries):
        address = content_address(raw)
        assert address not in addresses, f"entry {index} is a duplicate of an earlier one"
        addresses.add(address)
        event = event_of(open_envelope(raw).core, steward)
        if isinstance(event, Admitted):
            assert event.claim not in admitted_at, f"claim {event.claim} admitted twice"
            admitted_at[event.claim] = index
        elif isinstance(event, Released):
            assert event.claim not in released_at, f"claim {event.claim} released twice"
            released_at[event.claim] = index
    lost = [f"admit {c}@{s}" for c, s in told.admits.items() if admitted_at.get(c) != s]
    lost += [f"release {c}@{s}" for c, s in told.releases.items() if released_at.get(c) != s]
    return Audit(replayer, len(entries), lost)


def usage_matches(replayer: Replayer, reported: list[dict[str, Any]]) -> None:
    """The usage a service reports equals the usage its ledger replays to (§6.1)."""
    tree = replayer.state.usage.tree
    by_id = {e["id"]: e["usage"] for e in reported}
    assert set(by_id) == {e.id for e in tree}
    for ent in tree:
        fig = replayer.state.usage.of(ent.id)
        # These deployments have no budget period (DESIGN.md §3): all time is one period.
        assert by_id[ent.id] == fig.to_json(ent.guarantee_uj, {"start_ms": None, "end_ms": None})


def roomy(deployment_folder: Path, devices: int = 64) -> Tree:
    """Give the deployment's teams guarantees no test load exhausts, so most claims admit.

    The example tree runs out of energy after a few dozen claims, after which every claim
    queues and nothing is written: a fault would then meet an idle ledger.
    """
    from joulepool.deployment.config import CONFIG, read_config, write_config
    from joulepool.tree import Entitlement

    config = read_config(deployment_folder / CONFIG)
    tree = Tree(
        [
            Entitlement("research", 0, 0, 0),
            *(
                # 10⁶ MJ: far more than any test spends, and within 2⁶⁴ − 1 µJ (DESIGN.md §3).
                Entitlement(t, 10**6 * MJ, devices, 1, parent="research", priority=i)
                for i, t in enumerate(TEAMS)
            ),
        ]
    )
    (deployment_folder / CONFIG).unlink()
    write_config(deployment_folder / CONFIG, config.steward, tree, config.idle)
    return tree


def rss_kib(pid: int) -> int:
    """Resident memory of a process, from /proc (KiB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")
