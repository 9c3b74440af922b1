"""DESIGN.md §8 and §6.1, interop on real processes: a `pool serve` configured with a
`[[c2sp_witness]]` that is aics-witness 0.1.0 (a C2SP witness no one here wrote, its own
process on 127.0.0.1) has each new checkpoint cosigned; `GET /checkpoint` carries the
cosignature, which verifies under the witness's vkey; the cosigned checkpoint is kept
beside the ledger, and is then a rollback mark: a stale backup put back and rewritten is
refused at start (`ledger_rolled_back`, by `pool serve` and `pool ledger verify`). An
operator who moves that evidence aside to force the other history through meets the
witness's own memory: it refuses to cosign, and `pool serve` raises the fork alarm
(`/readyz` 503 `witness_fork`, `pool_c2sp_witness_fork` 1). A tenant following the live
service with `pool proof follow --cosigned 1` accepts only cosigned checkpoints."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from joulepool.deployment.config import CONFIG, WITNESSES
from joulepool.deployment.cosigned import SUFFIX, load_cosigned
from joulepool.deployment.open import open_pool
from joulepool.grade import Energy, Grade
from joulepool.ledger.checkpoint import open_checkpoint
from joulepool.ledger.note import VerifierKey
from joulepool.transparency.logkeys import parse_vkeys
from tests.interop.tools import Unavailable, aics_witness, aics_witness_cli
from tests.support.builders import claim
from tests.support.faults import claim as claim_json
from tests.support.servers import Deployment, Serve, free_port, pool_cli, sighup, start_serve

NAME = "witness.test/pool"
MJ = 1_000_000_000_000


@pytest.fixture(scope="module")
def command() -> Path:
    try:
        return aics_witness()
    except Unavailable as exc:
        pytest.skip(str(exc))


def _log_vkey(folder: Path) -> str:
    out = pool_cli("keys", "vkey", str(folder))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _until(check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.1)


@pytest.fixture
def witnessed(command: Path, tmp_path: Path) -> Iterator[tuple[Deployment, str, Path]]:
    """A deployment whose pool.toml names a running aics-witness that trusts its log key;
    the witness's vkey and its log."""
    deployment = Deployment.create(tmp_path / "d")
    home = tmp_path / "witness"
    home.mkdir()
    port = free_port()
    vkey = aics_witness_cli(command, home, "init", "--name", NAME, "--listen", f"127.0.0.1:{port}")
    vkey = vkey.strip()
    log_vkey = _log_vkey(deployment.folder)
    origin = log_vkey.split("+", 1)[0]
    aics_witness_cli(command, home, "add-log", "--origin", origin, "--vkey", log_vkey)
    entry = f'\n[[c2sp_witness]]\nurl = "http://127.0.0.1:{port}/"\nvkey = "{vkey}"\n'
    (tmp_path / "entry.toml").write_text(entry)
    with (deployment.folder / CONFIG).open("a", encoding="utf-8") as fh:
        fh.write(entry)
    log = tmp_path / "witness.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(command), "serve", "--config", str(home / "witness.json")],
            cwd=home,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:

        def listening() -> bool:
            assert process.poll() is None, log.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False

        _until(listening, "aics-witness listens", 30)
        yield deployment, vkey, log
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _admit(serve: Serve, token: str, first: int, count: int) -> None:
    with serve.client(token) as ops:
        for i in range(first, first + count):
            r = ops.post("/v1/claims", json=claim_json(f"j{i}"))
            assert r.status_code == 200, r.text


def _cosigned_checkpoint(serve: Serve, log_key: VerifierKey, vkey: str, size: int) -> bytes:
    """The checkpoint served once the witness has cosigned the ledger at `size`."""
    witness = VerifierKey.parse(vkey)
    seen: list[bytes] = []

    def cosigned() -> bool:
        note = httpx.get(f"{serve.url}/checkpoint", timeout=5).content
        seen[:] = [note]
        opened = open_checkpoint(note, log_key, [witness])
        return opened.checkpoint.size == size and [n for n, _ in opened.cosigned_by] == [NAME]

    _until(cosigned, f"a checkpoint of {size} cosigned by {NAME}")
    return seen[0]


def _metric(serve: Serve, token: str, name: str) -> float | None:
    with serve.client(token) as ops:
        text = ops.get("/metrics").text
    for line in text.splitlines():
        if line.startswith(f'{name}{{witness="{NAME}"}} '):
            return float(line.split()[-1])
    return None


def test_pool_serve_is_cosigned_and_the_kept_cosignature_refuses_a_rewritten_ledger(
    witnessed: tuple[Deployment, str, Path], tmp_path: Path
) -> None:
    deployment, vkey, witness_log = witnessed
    folder = deployment.folder
    log_key = parse_vkeys(_log_vkey(folder))[0]
    # A stale backup of the whole folder, taken before anything was witnessed.
    backup = tmp_path / "backup"
    shutil.copytree(folder, backup)
    serve = start_serve(folder)
    try:
        _admit(serve, deployment.operator, 0, 3)
        note = _cosigned_checkpoint(serve, log_key, vkey, 3)
        _admit(serve, deployment.operator, 3, 4)
        note = _cosigned_checkpoint(serve, log_key, vkey, 7)
        # The kept file is the served checkpoint, cosignature and all.
        kept = load_cosigned(folder / WITNESSES)
        assert [(k.vkey.name, k.checkpoint.size) for k in kept] == [(NAME, 7)]
        assert kept[0].note == note
        assert _metric(serve, deployment.operator, "pool_c2sp_witness_cosigned_size") == 7
        when = _metric(
            serve, deployment.operator, "pool_c2sp_witness_last_cosigned_timestamp_seconds"
        )
        assert when is not None and abs(when - time.time()) < 300
        assert _metric(serve, deployment.operator, "pool_c2sp_witness_fork") == 0
        # A tenant following the live service, with the witness's key, holds size 7.
        state = tmp_path / "follow-state"
        out = pool_cli(
            "proof",
            "follow",
            serve.url,
            "--vkey",
            _log_vkey(folder),
            "--witness-vkey",
            vkey,
            "--cosigned",
            "1",
            "--once",
            "--json",
            "--state",
            str(state),
        )
        assert out.returncode == 0, out.stderr
        followed = json.loads(out.stdout)
        assert (followed["size"], followed["cosigned_by"]) == (7, [NAME]), out.stdout
    finally:
        serve.kill()
    assert "Traceback" not in serve.output()

    # The backup is put back and written on: another history, 8 entries long.
    pool = open_pool(backup)
    try:
        for i in range(4):
            assert pool.submit(claim(f"other-{i}", "language", MJ // 100)).seq is not None
            pool.release(f"other-{i}", Energy(1, Grade.HwShunt))
        assert pool.length == 8
    finally:
        pool.close()
    evidence = next((folder / WITNESSES).glob("*" + SUFFIX))
    (backup / WITNESSES).mkdir(exist_ok=True)
    shutil.copyfile(evidence, backup / WITNESSES / evidence.name)
    refused = pool_cli("ledger", "verify", str(backup))
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "rewritten or replaced" in said, refused
    assert f"C2SP witness {NAME} cosigned" in said, said
    serve = start_serve(backup, wait=False)
    try:

        def rolled_back() -> bool:
            try:
                answer = httpx.get(f"{serve.url}/readyz", timeout=2)
            except httpx.TransportError:
                return False
            return answer.status_code == 503 and "ledger_rolled_back" in answer.text

        _until(rolled_back, "readyz says ledger_rolled_back")
        detail = httpx.get(f"{serve.url}/readyz", timeout=2).json()["detail"]
        assert NAME in detail and "after 7 entries" in detail and "has 8 entries" in detail, detail
    finally:
        serve.kill()
    assert "Traceback" not in serve.output()

    # The operator moves the evidence aside and serves the other history anyway: the
    # witness remembers size 7, refuses to cosign, and the service raises the alarm.
    aside = tmp_path / "aside"
    aside.mkdir()
    shutil.move(str(backup / WITNESSES / evidence.name), aside / evidence.name)
    serve = start_serve(backup, wait=False)
    try:

        def forked() -> bool:
            try:
                answer = httpx.get(f"{serve.url}/readyz", timeout=2)
            except httpx.TransportError:
                return False
            return answer.status_code == 503 and answer.json()["error"] == "witness_fork"

        _until(forked, "readyz says witness_fork")
        detail = httpx.get(f"{serve.url}/readyz", timeout=2).json()["detail"]
        assert NAME in detail and "size 8" in detail, detail
        assert _metric(serve, deployment.operator, "pool_c2sp_witness_fork") == 1
        assert _metric(serve, deployment.operator, "pool_c2sp_witness_cosigned_size") is None
        # Nothing the witness refused is served as cosigned, nor kept.
        note = httpx.get(f"{serve.url}/checkpoint", timeout=5).content
        opened = open_checkpoint(note, log_key, [VerifierKey.parse(vkey)])
        assert opened.checkpoint.size == 8 and opened.cosigned_by == ()
        assert not list((backup / WITNESSES).glob("*" + SUFFIX))
        assert "witness_fork" in serve.output()
        # A tenant who asks for a cosigned checkpoint is given none to accept.
        out = pool_cli(
            "proof",
            "follow",
            serve.url,
            "--vkey",
            _log_vkey(folder),
            "--witness-vkey",
            vkey,
            "--cosigned",
            "1",
            "--once",
            "--state",
            str(tmp_path / "follow-other"),
        )
        assert out.returncode != 0 and "fewer than the 1 required" in out.stderr, out
        assert not (tmp_path / "follow-other").exists()
    finally:
        serve.kill()
    assert "Traceback" not in serve.output()
    assert "422" in witness_log.read_text()


def test_a_witness_added_or_removed_by_sighup_is_put_in_force(
    witnessed: tuple[Deployment, str, Path], tmp_path: Path
) -> None:
    deployment, vkey, _log = witnessed
    folder = deployment.folder
    config = folder / CONFIG
    with_witness = config.read_text()
    entry = (tmp_path / "entry.toml").read_text()
    config.write_text(with_witness.replace(entry, ""))
    log_key = parse_vkeys(_log_vkey(folder))[0]
    serve = start_serve(folder)
    try:
        _admit(serve, deployment.operator, 0, 2)
        time.sleep(1.5)
        plain = open_checkpoint(httpx.get(f"{serve.url}/checkpoint").content, log_key)
        assert plain.checkpoint.size == 2 and not list((folder / WITNESSES).glob("*" + SUFFIX))
        config.write_text(with_witness)
        assert "configuration reloaded" in sighup(serve)
        _cosigned_checkpoint(serve, log_key, vkey, 2)
        # Removed again: nothing more is submitted, and what was kept stays kept.
        config.write_text(with_witness.replace(entry, ""))
        assert "configuration reloaded" in sighup(serve)
        _admit(serve, deployment.operator, 2, 1)
        time.sleep(2.5)
        kept = load_cosigned(folder / WITNESSES)
        assert [k.checkpoint.size for k in kept] == [2]
        assert _metric(serve, deployment.operator, "pool_c2sp_witness_cosigned_size") is None
    finally:
        serve.kill()
    assert "Traceback" not in serve.output()
