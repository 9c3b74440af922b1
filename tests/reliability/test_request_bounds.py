"""`pool serve` at a trust boundary: what one client may cost the service.

Each test drives a real `pool serve` over real sockets on 127.0.0.1, as an attacker
would: bodies sent without a token, bodies past the limit, headers trickled or
swollen, a flood of connections past the descriptor limit, redirects built from `Host`.
Loops are bounded and every socket has a timeout.
"""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.faults import Figures
from tests.support.servers import Deployment, Serve, free_port, serving, wait_ready

CLAIM = {
    "id": "job-1",
    "entitlement": "vision",
    "gang_size": 1,
    "devices_per_member": 1,
    "estimate": {"uj": 1000, "grade": "HwShunt"},
}

FIGURES = Figures("request_bounds")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Serve]]:
    yield from serving(tmp_path_factory.mktemp("bounds") / "dep")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def port_of(serve: Serve) -> int:
    return int(serve.url.rsplit(":", 1)[1])


def raw_request(serve: Serve, head: bytes, body: bytes = b"", timeout: float = 10) -> bytes:
    """Send bytes as they are and read the answer until the server closes or pauses."""
    with socket.create_connection(("127.0.0.1", port_of(serve)), timeout=timeout) as s:
        s.sendall(head + body)
        return read_answer(s)


def read_answer(s: socket.socket) -> bytes:
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(65536)
        if not chunk:
            return got
        got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest


def status_and_error(answer: bytes) -> tuple[int, str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)["error"] if body else ""


# -- bodies ------------------------------------------------------------------------------


def test_a_gibibyte_without_a_token_is_401_before_the_body_is_read(
    served: tuple[Deployment, Serve],
) -> None:
    """Found: a 1 GiB body with no token took RSS from 59 MB to 2.9 GB and kept it."""
    _, serve = served
    before = rss_kib(serve.proc.pid)
    head = (
        b"POST /v1/claims HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        b"content-length: 1073741824\r\n\r\n"
    )
    sent = 0
    with socket.create_connection(("127.0.0.1", port_of(serve)), timeout=10) as s:
        s.sendall(head)
        started = time.monotonic()
        # Keep sending until the server answers and closes: a megabyte at a time, 64 at most.
        s.setblocking(False)
        answer = b""
        while sent < 64 * 2**20 and time.monotonic() - started < 10:
            try:
                sent += s.send(b"{" * 2**20)
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                break  # closed by the server: what we want
            with contextlib.suppress(BlockingIOError):
                answer += s.recv(65536)
            if b"\r\n\r\n" in answer:
                break
        s.setblocking(True)
        answer += read_answer(s) if b"\r\n\r\n" not in answer else b""
    assert status_and_error(answer)[0] == 401
    after = rss_kib(serve.proc.pid)
    FIGURES.extra["gib_without_token"] = {
        "sent_bytes_before_401": sent,
        "rss_before_kib": before,
        "rss_after_kib": after,
    }
    assert after - before < 32 * 1024, f"RSS grew by {after - before} KiB"


def test_fifty_mib_of_json_without_a_token_is_refused_at_once(
    served: tuple[Deployment, Serve],
) -> None:
    """Found: a 50 MiB JSON object with no token got its 401 after 7 s; /healthz stalled."""
    _, serve = served
    # Many small items, as slow to parse as JSON gets per byte.
    body = b'{"a": [' + b"1," * (25 * 2**20) + b"1]}"
    answers: list[int] = []

    took: list[float] = []

    def post() -> None:
        started = time.monotonic()
        try:
            r = httpx.post(
                f"{serve.url}/v1/claims",
                content=body,
                headers={"content-type": "application/json"},
                timeout=30,
            )
            answers.append(r.status_code)
        except httpx.TransportError:
            answers.append(-1)  # closed while still sending: refused before the body
        took.append(time.monotonic() - started)

    sender = threading.Thread(target=post)
    sender.start()
    health: list[float] = []
    while sender.is_alive() and len(health) < 200:
        started = time.monotonic()
        assert httpx.get(f"{serve.url}/healthz", timeout=10).status_code == 200
        health.append(time.monotonic() - started)
    sender.join(timeout=30)
    assert answers and answers[0] in (401, -1)
    FIGURES.extra["fifty_mib_without_token"] = {
        "answered_after_s": round(took[0], 4),
        "healthz_max_s": round(max(health, default=0), 4),
    }
    # Before the boundary: 7 s to the 401, /healthz held as long. Now it is refused at the
    # headers; the bounds are loose enough for a loaded CI machine.
    assert took[0] < 3, took
    assert max(health, default=0) < 1, health


def test_bodies_past_the_limit_are_413_declared_or_chunked(
    served: tuple[Deployment, Serve],
) -> None:
    deployment, serve = served
    with serve.client(deployment.tenants["vision"]) as c:
        declared = c.post(
            "/v1/claims", content=b" " * 2_000_000, headers={"content-type": "application/json"}
        )
        assert declared.status_code == 413
        assert declared.json()["error"] == "body_too_large"
        assert "1048576" in declared.json()["detail"]

        def chunks() -> Iterator[bytes]:
            for _ in range(20):
                yield b" " * 100_000

        chunked = c.post(
            "/v1/claims", content=chunks(), headers={"content-type": "application/json"}
        )
        assert chunked.status_code == 413
        assert chunked.json()["error"] == "body_too_large"
        # Under the limit, the same service answers as before.
        assert c.post("/v1/claims", json={**CLAIM, "id": "under-limit"}).status_code == 200


def test_a_tenants_huge_decision_bodies_do_not_delay_an_operators_admissions(
    served: tuple[Deployment, Serve],
) -> None:
    """Found: four 17 MiB /v1/preemption-order bodies from a tenant delayed admissions 4 s."""
    deployment, serve = served
    workloads = [
        {"key": f"w{i}", "spent_uj": i, "completed_units": 1, "priority": 1} for i in range(300_000)
    ]
    body = json.dumps({"workloads": workloads}).encode()
    assert len(body) > 17 * 2**20
    codes: list[int] = []

    def flood() -> None:
        with httpx.Client(
            base_url=serve.url,
            headers={"Authorization": f"Bearer {deployment.tenants['vision']}"},
            timeout=60,
        ) as c:
            codes.append(c.post("/v1/preemption-order", content=body).status_code)

    threads = [threading.Thread(target=flood) for _ in range(4)]
    for t in threads:
        t.start()
    latencies = []
    with serve.client(deployment.operator) as ops:
        for i in range(20):
            started = time.monotonic()
            r = ops.post("/v1/claims", json={**CLAIM, "id": f"ops-{i}"})
            latencies.append(time.monotonic() - started)
            assert r.status_code == 200
    for t in threads:
        t.join(timeout=60)
    assert codes == [413] * 4
    assert max(latencies) < 2, latencies
    FIGURES.extra["operator_admission_max_s_during_17mib_bodies"] = round(max(latencies), 4)


def test_a_body_trickled_past_its_deadline_is_408(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "dep")
    serve = start(deployment.folder, "--body-timeout-s", "1")
    try:
        head = (
            b"POST /v1/claims HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            b"authorization: Bearer " + deployment.operator.encode() + b"\r\n"
            b"content-length: 200\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", port_of(serve)), timeout=10) as s:
            s.sendall(head + b"{")
            started = time.monotonic()
            answer = read_answer(s)
            waited = time.monotonic() - started
        assert status_and_error(answer) == (408, "body_timeout")
        assert 0.9 < waited < 8
    finally:
        serve.kill()


# -- headers and connections -------------------------------------------------------------


def start(folder: Path, *extra: str, nofile: int | None = None) -> Serve:
    """`pool serve` with its own options, under a descriptor limit (soft and hard) when given."""
    port = free_port()
    log = folder.parent / f"serve-{port}.log"
    argv = [sys.executable, "-m", "joulepool", "serve", str(folder), "--port", str(port), *extra]
    if nofile is not None:
        argv = ["sh", "-c", f'ulimit -n {nofile} && exec "$0" "$@"', *argv]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    serve = Serve(proc, f"http://127.0.0.1:{port}", log)
    wait_ready(serve)
    return serve


def test_headers_trickled_past_their_deadline_are_408(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "dep")
    serve = start(deployment.folder, "--header-timeout-s", "1")
    try:
        with socket.create_connection(("127.0.0.1", port_of(serve)), timeout=10) as s:
            started = time.monotonic()
            s.sendall(b"GET /healthz HTTP/1.1\r\n")
            for _ in range(3):
                time.sleep(0.3)
                s.sendall(b"X-Slow: 1\r\n")
            answer = read_answer(s)
            waited = time.monotonic() - started
        assert status_and_error(answer) == (408, "header_timeout")
        assert 0.9 < waited < 8
        # A connection that sends nothing at all is closed too.
        with socket.create_connection(("127.0.0.1", port_of(serve)), timeout=10) as s:
            assert status_and_error(read_answer(s)) == (408, "header_timeout")
    finally:
        serve.kill()


def test_swollen_headers_are_431(served: tuple[Deployment, Serve]) -> None:
    _, serve = served
    answer = raw_request(
        serve, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n"
    )
    assert status_and_error(answer) == (431, "headers_too_large")
    # A request id in the path of 300 KiB is the same: no request reaches the application.
    answer = raw_request(
        serve, b"GET /v1/claims/" + b"a" * 300_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    assert status_and_error(answer) == (431, "headers_too_large")


def test_a_flood_of_slow_connections_past_the_descriptor_limit_locks_nobody_out(
    tmp_path: Path,
) -> None:
    """Found: under a 1,024-descriptor limit, 1,100 trickling connections made every
    normal request fail, and 2,000 were held for 30 s."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1400:
        pytest.fail(f"this test needs 1,400 descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1400), hard))
    deployment = Deployment.create(tmp_path / "dep")
    serve = start(deployment.folder, nofile=1024)
    slow: list[socket.socket] = []
    try:
        for _ in range(1100):
            s = socket.create_connection(("127.0.0.1", port_of(serve)), timeout=10)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the end
            slow.append(s)
        served_ok = 0
        latencies = []
        for i in range(20):
            # A new connection each time, as each new client would open one.
            with serve.client(deployment.operator) as ops:
                started = time.monotonic()
                r = ops.post("/v1/claims", json={**CLAIM, "id": f"flood-{i}"})
                latencies.append(time.monotonic() - started)
                served_ok += r.status_code == 200
        assert served_ok == 20
        assert serve.proc.poll() is None
        cap = [line for line in serve.output().splitlines() if "at most" in line]
        FIGURES.extra["flood_1100_slow_under_1024_fds"] = {
            "admissions_ok": served_ok,
            "max_latency_s": round(max(latencies), 4),
            "startup": cap[0] if cap else "",
        }
    finally:
        for s in slow:
            s.close()
        serve.kill()


# -- redirects and the reference ---------------------------------------------------------


def test_no_redirect_is_built_from_the_host_header(served: tuple[Deployment, Serve]) -> None:
    deployment, serve = served
    with serve.client(deployment.operator) as c:
        for method, path in (
            ("POST", "/v1/claims/"),
            ("GET", "/v1/entitlements/"),
            ("GET", "/v1/ledger/"),
        ):
            r = c.request(method, path, headers={"host": "evil.example"}, json=CLAIM)
            assert r.status_code not in (301, 302, 307, 308), (path, r.status_code)
            assert "location" not in r.headers
            assert "evil.example" not in r.text


def test_the_api_reference_is_served_from_the_package(
    served: tuple[Deployment, Serve],
) -> None:
    _, serve = served
    with serve.client(None) as anyone:
        page = anyone.get("/docs")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        text = page.text
        assert "/v1/claims" in text and "ClaimIn" in text
        # Nothing to fetch from elsewhere: no script, no stylesheet, no absolute URL.
        assert "<script" not in text and "<link" not in text
        assert "http://" not in text and "https://" not in text
        assert anyone.get("/openapi.json").status_code == 200
        assert anyone.get("/redoc").status_code in (401, 404)


def test_zz_record_the_figures() -> None:
    FIGURES.record()
