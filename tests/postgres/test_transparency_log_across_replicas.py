"""The ledger as a C2SP log on PostgreSQL (DESIGN.md §8): two `pool serve` replicas of one
ledger both sign the tree of every replica's entries, and a restart from a snapshot in the
database carries the tree on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from joulepool.ledger.checkpoint import open_checkpoint
from joulepool.ledger.merkle import root_of
from joulepool.ledger.note import VerifierKey
from tests.support.pg import pg_dsn, pg_ledger, pg_server
from tests.support.servers import Deployment, Serve, admit_and_release, pool_cli, start_serve

__all__ = ["pg_dsn", "pg_ledger", "pg_server"]

pytestmark = pytest.mark.postgres


def _entries(serve: Serve, token: str) -> list[bytes]:
    import io

    import cbor2

    with serve.client(token) as ops:
        raw = ops.get("/v1/ledger/entries").content
    out, stream = [], io.BytesIO(raw)
    while stream.tell() < len(raw):
        at = stream.tell()
        cbor2.load(stream)
        out.append(raw[at : stream.tell()])
    return out


def test_replicas_sign_the_tree_of_every_replicas_entries(
    tmp_path: Path, pg_dsn: str, pg_ledger: str
) -> None:
    d = Deployment.create(tmp_path / "d")
    args = ("--postgres", pg_dsn, "--ledger", pg_ledger, "--snapshot-every", "8")
    vkey = VerifierKey.parse(pool_cli("keys", "vkey", str(d.folder)).stdout.strip())
    first = start_serve(d.folder, *args)
    second = start_serve(d.folder, *args)
    try:
        admit_and_release(first, d.operator, 0, 6, 1_000)
        admit_and_release(second, d.operator, 6, 6, 1_000)
        admit_and_release(first, d.operator, 12, 3, 1_000)
        time.sleep(1.1)  # past any checkpoint either signed during the traffic
        entries = _entries(first, d.operator)
        assert len(entries) == 30
        for serve in (first, second):
            with serve.client(None) as anyone:
                opened = open_checkpoint(anyone.get("/checkpoint").content, vkey).checkpoint
            assert (opened.size, opened.root_hash) == (30, root_of(entries))
    finally:
        first.kill()
        second.kill()
    again = start_serve(d.folder, *args)
    try:
        with again.client(d.operator) as ops:
            assert ops.get("/readyz").json()["started_from"] > 0  # from a snapshot
        with again.client(None) as anyone:
            opened = open_checkpoint(anyone.get("/checkpoint").content, vkey).checkpoint
        assert (opened.size, opened.root_hash) == (30, root_of(entries))
    finally:
        again.kill()
