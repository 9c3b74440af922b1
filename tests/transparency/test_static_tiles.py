"""A log published as static files (c2sp.org/tlog-tiles: `checkpoint` and `tile/...`, as
`tiles.build_tiles` writes them) and served by Python's own http.server on 127.0.0.1 is
enough for a tenant: a follow round proves growth from its tiles, a rewritten history is a
fork alarm, and a claim's bundle built from its tiles verifies under `pool proof check`
(DESIGN.md §8; docs/transparency.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from joulepool.cli import main
from joulepool.ledger.tiles import TileReader
from joulepool.transparency.follow import fetch_checkpoint, tile_fetcher
from joulepool.transparency.logkeys import parse_vkeys
from joulepool.transparency.proof_bundle import bundle_json, check_bundle
from tests.transparency.logs import VKEY, entries, static_files, write_tiles

KEYS = parse_vkeys(VKEY)
LEAVES = entries(700)


def _follow(url: str, state: Path) -> int:
    argv = ["proof", "follow", url, "--vkey", VKEY, "--state", str(state), "--once", "--tiles"]
    return main(argv)


def test_following_static_tiles_proves_growth_and_alarms_on_a_rewrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site, state = tmp_path / "site", tmp_path / "kept"
    write_tiles(site, LEAVES[:300])
    with static_files(site) as url:
        assert _follow(url, state) == 0
        write_tiles(site, LEAVES)
        assert _follow(url, state) == 0
        assert "grew: pool.example/ledger at size 700" in capsys.readouterr().out
        kept = state.read_bytes()
        shutil.rmtree(site)
        write_tiles(site, LEAVES[:290] + entries(800, salt=1)[290:])
        assert _follow(url, state) == 5
    assert state.read_bytes() == kept
    assert "does not extend the kept one at size 700" in capsys.readouterr().err


def test_a_bundle_built_from_static_tiles_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site"
    write_tiles(site, LEAVES)
    with static_files(site) as url:
        signed = fetch_checkpoint(url, KEYS)
        reader = TileReader(tile_fetcher(url), signed.checkpoint.size)
        # Claim c200 is admitted at 400 and released at 401, past the first full tiles.
        rows = [
            (kind, i, reader.entry(i), reader.inclusion_proof(i))
            for kind, i in (("admitted", 400), ("released", 401))
        ]
    bundle = bundle_json("c200", signed.note, rows)
    assert check_bundle(bundle, KEYS).claim == "c200"
    saved = tmp_path / "c200.json"
    saved.write_bytes(bundle)
    assert main(["proof", "check", str(saved), "--vkey", VKEY]) == 0
    assert "claim c200: admitted at 400, released at 401" in capsys.readouterr().out
