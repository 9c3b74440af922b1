"""An access log line per request: time, client address, token name, method, path, status, claim
and verdict where there is one, never the token; human or JSON (`--log-format json`)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from tests.support.servers import Deployment, Serve, start_serve

MJ = 10**12


def claim(claim_id: str, uj: int) -> dict[str, object]:
    return {
        "id": claim_id,
        "entitlement": "vision",
        "gang_size": 1,
        "devices_per_member": 1,
        "estimate": {"uj": uj, "grade": "HwShunt"},
    }


def traffic(serve: Serve, d: Deployment) -> None:
    with serve.client(d.operator) as ops:
        assert ops.post("/v1/claims", json=claim("job-1", MJ)).json()["verdict"] == "admit"
        ops.post("/v1/claims/job-1/release", json={"actual": {"uj": 1, "grade": "HwShunt"}})
        ops.post("/v1/claims", json=claim("huge", 10**5 * MJ))
    with serve.client("not-a-token") as stranger:
        assert stranger.get("/v1/entitlements").status_code == 401


def lines(serve: Serve, count: int) -> list[str]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = [x for x in serve.output().splitlines() if "/v1/" in x]
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(serve.output())


def test_access_log_human_names_token_claim_and_verdict_never_the_secret(
    tmp_path: Path,
) -> None:
    d = Deployment.create(tmp_path / "d")
    serve = start_serve(d.folder)
    try:
        traffic(serve, d)
        got = lines(serve, 4)
    finally:
        serve.kill()
    admit, release, deny, refused = got[:4]
    assert " 127.0.0.1 ops POST /v1/claims 200 " in admit and "claim=job-1 verdict=admit" in admit
    assert admit[:4].isdigit() and admit[10] == "T" and admit.split()[0].endswith("Z")
    assert "POST /v1/claims/job-1/release 200" in release and "verdict=released" in release
    assert re.search(r"claim=huge verdict=(deny|queue):[a-z_]+$", deny), deny
    assert " 127.0.0.1 - GET /v1/entitlements 401 " in refused  # who asked, even refused
    assert d.operator not in serve.output() and "not-a-token" not in serve.output()


def test_access_log_json_is_one_object_per_request(tmp_path: Path) -> None:
    d = Deployment.create(tmp_path / "d")
    serve = start_serve(d.folder, "--log-format", "json")
    try:
        traffic(serve, d)
        got = [json.loads(x) for x in lines(serve, 4)[:4]]
    finally:
        serve.kill()
    assert got[0]["token"] == "ops" and got[0]["method"] == "POST"  # noqa: S105 (a name)
    assert {g["client"] for g in got} == {"127.0.0.1"}
    assert got[0]["path"] == "/v1/claims" and got[0]["status"] == 200
    assert got[0]["claim"] == "job-1" and got[0]["verdict"] == "admit"
    assert got[3]["token"] is None and got[3]["status"] == 401 and "claim" not in got[3]
    assert all(isinstance(g["ms"], float | int) and g["time"].endswith("Z") for g in got)


def test_no_access_log_turns_it_off(tmp_path: Path) -> None:
    d = Deployment.create(tmp_path / "d")
    serve = start_serve(d.folder, "--no-access-log")
    try:
        traffic(serve, d)
        time.sleep(0.3)
        assert "/v1/claims" not in serve.output()
    finally:
        serve.kill()


def test_a_log_that_cannot_be_written_never_costs_an_answer() -> None:
    """A full disk under the log (tests/reliability/test_full_disk.py) drops the line."""
    import asyncio
    import io
    from typing import Any

    from joulepool.service.access_log import AccessLog

    class Full(io.StringIO):
        def write(self, _s: str) -> int:
            raise OSError(28, "No space left on device")

    sent: list[dict[str, Any]] = []

    async def app(_scope: Any, _receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 503, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    log = AccessLog(app, Full(), "human")
    scope = {"type": "http", "method": "POST", "path": "/v1/claims", "state": {}}
    asyncio.run(log(scope, receive, send))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert log.dropped == 1
