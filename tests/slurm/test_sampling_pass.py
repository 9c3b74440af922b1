"""DESIGN.md §7: one sample pass of `pool slurm agent` asks Slurm once and each exporter once.

Which GPUs every running job holds comes from one `scontrol show job -d` of all jobs (here
text captured from the real Slurm 22.05 test cluster, `fixtures/README.md`); each node's
exporter page is read once a pass, a bounded number at a time, and a node whose exporter
does not answer costs the pass its timeout, not more. Exporters and the service are real
HTTP servers on 127.0.0.1; `scontrol` is a script on PATH that prints the jobs' text.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from joulepool.bridges.slurm.jobs import PoolClient, parse_scontrol_jobs
from joulepool.bridges.slurm.sampling import (
    MAX_DETAIL_BYTES,
    Sampler,
    parse_job_detail,
    parse_jobs_detail,
)
from joulepool.errors import InvalidInput

CAPTURED = Path(__file__).parent / "fixtures" / "scontrol_show_job_d_22.05.txt"


def test_design_s7_every_running_jobs_gpus_come_from_one_scontrol_show_job_d() -> None:
    text = CAPTURED.read_text(encoding="utf-8")
    details = parse_jobs_detail(text)
    gpus = {job_id: d.gpus for job_id, d in details.items() if d is not None}
    assert gpus == {
        1: {"node1": [0]},
        2: {"node1": [1, 2]},
        3: {"node1": [3], "node2": [0]},
        6: {"node2": [1]},
        5: {},  # pending: no GPU yet
        4: {"node2": [2]},
    }
    assert details[1] is not None and details[1].name == "cap"
    # Each block reads as that job's own `scontrol show job -d <id>` does.
    block = text[text.index("JobId=3 ") : text.index("JobId=6 ")]
    assert parse_job_detail(block) == details[3]


def test_design_s7_an_array_tasks_detail_names_the_task_and_its_gpus() -> None:
    # As Slurm 22.05 lays out a running task of an array (its ids before the name).
    text = (
        "JobId=12 ArrayJobId=11 ArrayTaskId=1 JobName=sweep\n"
        "   JobState=RUNNING Reason=None Dependency=(null)\n"
        "     Nodes=node1 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:2)\n"
    )
    assert parse_jobs_detail(text)[12] == parse_job_detail(text)
    assert parse_job_detail(text).gpus == {"node1": [2]}
    assert parse_job_detail(text).name == "sweep"


def test_design_s7_a_job_listed_twice_is_left_to_its_own_query() -> None:
    # A job name may hold a newline: job 9's owner writes a block claiming job 3's GPUs.
    forged = "JobId=9 JobName=x\nJobId=3 JobName=y\n     Nodes=node1 CPU_IDs=0 Mem=0 GRES=gpu:4(IDX:0-3)\n"
    details = parse_jobs_detail(CAPTURED.read_text(encoding="utf-8") + "\n" + forged)
    assert details[3] is None
    assert details[1] is not None and details[1].gpus == {"node1": [0]}


@pytest.mark.parametrize(
    "text",
    [
        "x" * (MAX_DETAIL_BYTES + 1),
        "JobId=1 JobName=a\n     Nodes=n[1-999999999999] CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0)\n",
        "JobId=1 JobName=a\n\nJobId=2 JobName=b\n     Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0-99999999)\n",
    ],
)
def test_design_s7_an_all_jobs_detail_that_does_not_parse_is_refused_in_bounded_time(
    text: str,
) -> None:
    started = time.monotonic()
    with pytest.raises(InvalidInput):
        parse_jobs_detail(text)
    assert time.monotonic() - started < 2.0


NODES = 12
GPUS = 2
SLOW = "node007"


def jobs_text(detail: bool) -> str:
    out = []
    for i in range(NODES * GPUS):
        node = f"node{i // GPUS:03d}"
        note = (
            f"pool:claim=job-{i};entitlement=t;gang=1;per_member=1;"
            f"estimate_uj=1000000000;grade=HwShunt;state=admitted"
        )
        lines = [
            f"JobId={i + 1} JobName=train{i}",
            "   UserId=u(1000) GroupId=users(100) MCS_label=N/A",
            "   JobState=RUNNING Reason=None Dependency=(null)",
            "   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)",
            f"   NodeList={node}",
            "   TRES=cpu=1,gres/gpu=1,node=1",
        ]
        if detail:
            lines.append(f"     Nodes={node} CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:{i % GPUS})")
        lines.append(f"   AdminComment={note} ")
        out.append("\n".join(lines) + "\n")
    return "\n".join(out)


class Servers:
    """Every node's exporter (the path names the node; `SLOW` trickles a page that never ends) and a
    service that takes readings; each counts what it was asked."""

    def __init__(self) -> None:
        self.gets: Counter[str] = Counter()
        self.readings: list[dict[str, object]] = []
        self.release = threading.Event()
        servers = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                servers.gets[self.path] += 1
                if self.path == f"/{SLOW}":
                    self.trickle()
                    return
                body = "".join(
                    f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="{g}"}} 1000\n' for g in range(GPUS)
                )
                self.reply(200, body)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                servers.readings.append(json.loads(raw))
                self.reply(200, "{}")

            def trickle(self) -> None:
                # A byte every 0.3 s: each socket wait is short, the page never ends.
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", "1000000")
                    self.end_headers()
                    while not servers.release.wait(0.3):
                        self.wfile.write(b"#")
                        self.wfile.flush()
                except OSError:
                    pass

            def reply(self, status: int, text: str) -> None:
                body = text.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the sampler gave up on the slow page and closed

            def log_message(self, *_args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def servers() -> Iterator[Servers]:
    s = Servers()
    yield s
    s.release.set()
    s.server.shutdown()
    s.server.server_close()


def test_design_s7_a_pass_asks_slurm_once_reads_each_exporter_once_and_waits_out_only_its_timeout(
    servers: Servers, tmp_path: Path
) -> None:
    (tmp_path / "detail.txt").write_text(jobs_text(detail=True))
    calls = tmp_path / "calls"
    script = tmp_path / "bin" / "scontrol"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\necho "$*" >> {calls}\ncat {tmp_path / "detail.txt"}\n')
    script.chmod(0o755)
    env = {**os.environ, "PATH": f"{script.parent}:{os.environ['PATH']}"}
    lines: list[str] = []
    sampler = Sampler(
        servers.url + "/{node}",
        None,
        1,
        PoolClient(servers.url, "t", 10.0),
        env,
        None,
        lines.append,
        scrape_timeout_s=1.0,
        max_fetchers=4,
    )
    jobs = parse_scontrol_jobs(jobs_text(detail=False))
    assert len(jobs) == NODES * GPUS

    started = time.monotonic()
    sent = sampler.sample(jobs)
    took = time.monotonic() - started

    assert calls.read_text().splitlines() == ["show job -d"]
    assert servers.gets == {f"/node{n:03d}": 1 for n in range(NODES)}
    # Every job but the slow node's has its reading; theirs have none (never a made-up 0).
    assert sent == (NODES - 1) * GPUS
    read = {str(r["job"]["id"]) for r in servers.readings}  # type: ignore[index]
    assert read == {str(i + 1) for i in range(NODES * GPUS) if i // GPUS != 7}
    # A new job's start reading and its first figure: the start is never stamped later
    # than the figure (the service refuses a reading older than the last).
    stamps: dict[str, list[int]] = {}
    for r in servers.readings:
        stamps.setdefault(str(r["job"]["id"]), []).append(int(r["at_ms"]))  # type: ignore[index, call-overload]
    assert all(len(s) == 2 and s[0] <= s[1] for s in stamps.values()), stamps
    assert any(SLOW in line and "no page" in line for line in lines), lines
    # The slow page costs the pass its timeout (1 s, and the second's grace), not 30 s.
    assert took < 4.0, took
