"""DESIGN.md §8, interop: the transparency log verifies under a C2SP implementation that
never heard of Pool. aics-tlog 0.2.1, in its own virtual environment, (a) verifies the
checkpoints the steward signs here with the verifier key published here; (b) writes, with
its own TileWriter over the same leaves, the same tile and entry-bundle files byte for byte
as joulepool's tile builder, across the tile boundaries and up to level-2 tiles; (c)
computes roots and inclusion and consistency proofs from joulepool's tiles that equal
joulepool's and verify against joulepool's checkpoints, and verifies joulepool's own
proofs; (d) makes a cosignature/v1 that joulepool verifies; and (e) verifies the checkpoint,
tiles, claim inclusion proofs and consistency proofs a real `pool serve` publishes, and
writes with its TileWriter the files `pool ledger tiles` writes, byte for byte. Leaves are pool/1 entries
as sealed here, then filler of every length up to the 65,535-byte entry limit."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path

import cbor2
import pytest

from joulepool.ledger.checkpoint import (
    Checkpoint,
    log_verifier_key,
    open_checkpoint,
    sign_checkpoint,
)
from joulepool.ledger.merkle import root_of
from joulepool.ledger.note import NoteSignatureInvalid, VerifierKey
from joulepool.ledger.tiles import MAX_ENTRY_BYTES, TileReader, build_tiles
from tests.interop.receipts import hexes, ledger
from tests.interop.tools import AICS_TLOG_REQUIREMENTS, AicsTlog, Unavailable, aics_tlog
from tests.support.ledgers import OTHER, STEWARD
from tests.support.servers import Deployment, Serve, admit_and_release, pool_cli, serving

ORIGIN = "pool.example/ledger"
VKEY = log_verifier_key(STEWARD, ORIGIN)
SIZES = [1, 255, 256, 257, 1000, 65793]


@pytest.fixture(scope="module")
def aics() -> AicsTlog:
    try:
        return aics_tlog()
    except Unavailable as exc:
        pytest.skip(str(exc))


def leaves_of(size: int) -> list[bytes]:
    sealed = ledger()
    out = sealed[:size]
    for i in range(len(out), size):
        # One entry at the bundle's length limit; the rest short and of varied lengths.
        out.append(b"\xa5" * MAX_ENTRY_BYTES if i == 700 else i.to_bytes(4, "big") * (i % 5))
    return out


def files_under(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.name.startswith(".")
    }


def write_ours(root: Path, leaves: list[bytes]) -> dict[str, bytes]:
    tiles = dict(build_tiles(leaves))
    for path, data in tiles.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return tiles


def test_the_foreign_environment_is_the_pinned_aics_tlog(aics: AicsTlog) -> None:
    (pin,) = AICS_TLOG_REQUIREMENTS
    assert aics.call({"op": "version"})["version"] == pin.split("==")[1] == "0.2.1"


@pytest.mark.parametrize("size", SIZES)
def test_aics_tlog_tile_writer_writes_our_tiles_byte_for_byte(
    aics: AicsTlog, tmp_path: Path, size: int
) -> None:
    leaves = leaves_of(size)
    ours = dict(build_tiles(leaves))
    answer = aics.call({"op": "write_tiles", "leaves": hexes(leaves), "out": str(tmp_path)})
    theirs = files_under(tmp_path)
    assert sorted(answer["paths"]) == sorted(theirs)
    assert sorted(theirs) == sorted(ours)
    for path, data in ours.items():
        assert theirs[path] == data, path


@pytest.mark.parametrize("size", SIZES)
def test_aics_tlog_verifies_our_checkpoint_and_proves_from_our_tiles(
    aics: AicsTlog, tmp_path: Path, size: int
) -> None:
    leaves = leaves_of(size)
    write_ours(tmp_path, leaves)
    reader = TileReader(lambda path: (tmp_path / path).read_bytes(), size)
    root = reader.root()
    assert root == root_of(leaves)
    note = sign_checkpoint(Checkpoint(ORIGIN, size, root), STEWARD)
    old_sizes = sorted({1, max(1, size // 3), max(1, size - 1), size})
    olds = {
        s: sign_checkpoint(Checkpoint(ORIGIN, s, reader.root(s)), STEWARD).decode()
        for s in old_sizes
    }
    indices = sorted({0, size // 2, size - 1, min(size - 1, 700)})
    our_inclusion = {i: reader.inclusion_proof(i) for i in indices}
    our_consistency = {s: reader.consistency_proof(s) for s in old_sizes}
    answer = aics.call(
        {
            "op": "check",
            "tiles": str(tmp_path),
            "note": note.decode(),
            "vkey": VKEY.encode(),
            "old": [{"note": olds[s]} for s in old_sizes],
            "indices": indices,
            "our_inclusion": {str(i): hexes(p) for i, p in our_inclusion.items()},
            "our_consistency": {str(s): hexes(p) for s, p in our_consistency.items()},
        }
    )
    assert answer["checkpoint_ok"] is True, answer["error"]
    assert (answer["size"], answer["root"]) == (size, root.hex())
    assert answer["root_from_tiles"] == root.hex()
    assert "error" not in answer["audit"], answer["audit"]
    assert answer["audit"]["bundles"] == -(-size // 256)
    for i in indices:
        got = answer["inclusion"][str(i)]
        assert got["theirs"] == hexes(our_inclusion[i]), i
        assert got["verifies"] is True, i
        assert got["ours_verify"] is True, i
    for s in old_sizes:
        got = answer["consistency"][str(s)]
        assert got["old_ok"] is True, s
        assert got["theirs"] == hexes(our_consistency[s]), s
        assert got["verifies"] is True, s
        assert got["ours_verify"] is True, s


def test_aics_tlog_rejects_a_tampered_checkpoint_and_another_key(
    aics: AicsTlog, tmp_path: Path
) -> None:
    leaves = leaves_of(10)
    write_ours(tmp_path, leaves)
    note = sign_checkpoint(Checkpoint(ORIGIN, 10, root_of(leaves)), STEWARD).decode()
    base: dict[str, object] = {"op": "check", "tiles": str(tmp_path), "old": [], "indices": []}
    base |= {"our_inclusion": {}, "our_consistency": {}}
    tampered = aics.call({**base, "note": note.replace("\n10\n", "\n11\n"), "vkey": VKEY.encode()})
    assert tampered["checkpoint_ok"] is False
    other = log_verifier_key(OTHER, ORIGIN).encode()
    assert aics.call({**base, "note": note, "vkey": other})["checkpoint_ok"] is False
    assert aics.call({**base, "note": note, "vkey": VKEY.encode()})["checkpoint_ok"] is True


def test_a_cosignature_aics_tlog_makes_verifies_here(aics: AicsTlog) -> None:
    leaves = leaves_of(300)
    note = sign_checkpoint(Checkpoint(ORIGIN, 300, root_of(leaves)), STEWARD)
    name, timestamp = "witness.example/aics", 1_767_225_600
    answer = aics.call(
        {
            "op": "cosign",
            "note": note.decode(),
            "seed": bytes(range(100, 132)).hex(),
            "name": name,
            "timestamp": timestamp,
        }
    )
    witness = VerifierKey.parse(answer["vkey"])
    cosigned = note + answer["line"].encode()
    opened = open_checkpoint(cosigned, VKEY, [witness], origin=ORIGIN)
    assert opened.cosigned_by == ((name, timestamp),)
    assert opened.checkpoint.size == 300
    # The same cosignature on another checkpoint is refused here.
    moved = sign_checkpoint(Checkpoint(ORIGIN, 299, root_of(leaves[:299])), STEWARD)
    with pytest.raises(NoteSignatureInvalid):
        open_checkpoint(moved + answer["line"].encode(), VKEY, [witness])


# -- a real `pool serve` and `pool ledger tiles` (DESIGN.md §8, docs/transparency.md) -------

SERVED_CLAIMS = 140  # 280 entries: a full level-0 tile, a partial one, a level-1 partial


@pytest.fixture(scope="module")
def served_log(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Deployment, Serve, Path]]:
    """A served deployment whose ledger stops growing, with every tile it serves fetched
    over HTTP into a folder, as a mirror keeps them."""
    run = serving(tmp_path_factory.mktemp("tlog-interop") / "d")
    deployment, serve = next(run)
    admit_and_release(serve, deployment.operator, 0, SERVED_CLAIMS, 1_000)
    mirror = tmp_path_factory.mktemp("mirror")
    size = 2 * SERVED_CLAIMS
    with serve.client(deployment.operator) as ops:
        note = ops.get("/checkpoint").content
        (mirror / "checkpoint").write_bytes(note)
        for path, _ in build_tiles([b""] * size):  # every tile path of a tree this size
            got = ops.get("/" + path)
            assert got.status_code == 200, (path, got.text)
            (mirror / path).parent.mkdir(parents=True, exist_ok=True)
            (mirror / path).write_bytes(got.content)
    yield deployment, serve, mirror
    run.close()


def test_aics_tlog_verifies_the_served_checkpoint_tiles_and_proofs(
    aics: AicsTlog, served_log: tuple[Deployment, Serve, Path]
) -> None:
    deployment, serve, mirror = served_log
    size = 2 * SERVED_CLAIMS
    vkey = pool_cli("keys", "vkey", str(deployment.folder)).stdout.strip()
    note = (mirror / "checkpoint").read_text()
    claims = {0: "job-0", 101: "job-50", size - 1: f"job-{SERVED_CLAIMS - 1}"}
    inclusion: dict[int, list[bytes]] = {}
    olds: dict[int, str] = {}
    consistency: dict[int, list[bytes]] = {}
    with serve.client(deployment.operator) as ops:
        for index, claim in claims.items():
            proof = ops.get(f"/v1/claims/{claim}/proof").json()
            assert proof["checkpoint"].split("\n")[1] == str(size)
            (entry,) = [e for e in proof["entries"] if e["index"] == index]
            inclusion[index] = [base64.b64decode(h) for h in entry["inclusion_b64"]]
        for old in (1, 100, 256, size):
            at_old = ops.get("/v1/proof/consistency", params={"from": old, "to": old}).json()
            olds[old] = at_old["checkpoint"]
            got = ops.get("/v1/proof/consistency", params={"from": old}).json()
            assert got["to"] == size
            consistency[old] = [base64.b64decode(h) for h in got["proof_b64"]]
    answer = aics.call(
        {
            "op": "check",
            "tiles": str(mirror),
            "note": note,
            "vkey": vkey,
            "old": [{"note": n} for n in olds.values()],
            "indices": sorted(inclusion),
            "our_inclusion": {str(i): hexes(p) for i, p in inclusion.items()},
            "our_consistency": {str(s): hexes(p) for s, p in consistency.items()},
        }
    )
    assert answer["checkpoint_ok"] is True, answer["error"]
    assert answer["size"] == size and answer["root_from_tiles"] == answer["root"]
    assert "error" not in answer["audit"], answer["audit"]
    for i, path in inclusion.items():
        got = answer["inclusion"][str(i)]
        assert got["ours_verify"] is True and got["verifies"] is True, i
        assert got["theirs"] == hexes(path), i
    for s in olds:
        got = answer["consistency"][str(s)]
        assert got["old_ok"] is True, s
        assert got["ours_verify"] is True and got["verifies"] is True, s
        assert got["theirs"] == hexes(consistency[s]), s


def test_aics_tlog_tile_writer_writes_what_pool_ledger_tiles_writes(
    aics: AicsTlog, served_log: tuple[Deployment, Serve, Path], tmp_path: Path
) -> None:
    deployment, serve, mirror = served_log
    out = tmp_path / "ours"
    written = pool_cli("ledger", "tiles", str(deployment.folder), str(out))
    assert written.returncode == 0, written.stderr
    with serve.client(deployment.operator) as ops:
        raw = ops.get("/v1/ledger/entries").content
    leaves = []
    decoder = io.BytesIO(raw)
    while decoder.tell() < len(raw):
        start = decoder.tell()
        cbor2.load(decoder)
        leaves.append(raw[start : decoder.tell()])
    theirs = tmp_path / "theirs"
    aics.call({"op": "write_tiles", "leaves": hexes(leaves), "out": str(theirs)})
    ours = {k: v for k, v in files_under(out).items() if k != "checkpoint"}
    assert ours == files_under(theirs)
    assert ours == {k: v for k, v in files_under(mirror).items() if k != "checkpoint"}
