"""DESIGN.md §8: a `[[c2sp_witness]]` that cannot be reached never holds `pool serve` back.
Admissions are answered, `/readyz` stays ready, `GET /checkpoint` is served plain, the
witness is tried again with a backoff and the reason is logged once, not at every try."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from joulepool.deployment.config import CONFIG
from joulepool.ledger.checkpoint import witness_verifier_key
from tests.support.faults import claim
from tests.support.ledgers import WITNESS
from tests.support.servers import Deployment, free_port, start_serve

NAME = "witness.test/down"


def test_a_witness_that_cannot_be_reached_holds_nothing_back(tmp_path: Path) -> None:
    deployment = Deployment.create(tmp_path / "d")
    vkey = witness_verifier_key(NAME, WITNESS.public_key).encode()
    with (deployment.folder / CONFIG).open("a", encoding="utf-8") as fh:
        fh.write(f'\n[[c2sp_witness]]\nurl = "http://127.0.0.1:{free_port()}/"\nvkey = "{vkey}"\n')
    serve = start_serve(deployment.folder)
    try:
        with serve.client(deployment.operator) as ops:
            for i in range(3):
                assert ops.post("/v1/claims", json=claim(f"j{i}")).status_code == 200
            time.sleep(4)  # long enough for a first try and two retries (1 s, then 2 s)
            assert httpx.get(f"{serve.url}/readyz").status_code == 200
            note = httpx.get(f"{serve.url}/checkpoint").text
            assert note.split("\n")[1] == "3" and NAME not in note
            metrics = ops.get("/metrics").text
        assert f'pool_c2sp_witness_fork{{witness="{NAME}"}} 0.0' in metrics
        assert "pool_c2sp_witness_cosigned_size{" not in metrics
        said = serve.output()
        assert said.count(f"C2SP witness {NAME} not cosigning: witness_unavailable") == 1, said
        assert "Traceback" not in said
    finally:
        serve.kill()
