"""DESIGN.md §8, interop: joulepool's C2SP witness submitter (c2sp.org/tlog-witness,
add-checkpoint) collects cosignatures from aics-witness 0.1.0, a witness no one here wrote,
run as its own process on 127.0.0.1: it cosigns a growing log whose checkpoints the pure
layer signs, and a tenant following the log with its key accepts only checkpoints it
cosigned; a submission from a stale size is sent again from the size its 409 names; a log
rolled back and rewritten, or rolled back to a smaller size, is a fork alarm and never
cosigned; and the cosignatures it returns verify under its published vkey here."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from joulepool.ledger.checkpoint import (
    add_signatures,
    log_verifier_key,
    open_checkpoint,
    witness_verifier_key,
)
from joulepool.ledger.merkle import HashLevels, consistency_proof
from joulepool.ledger.note import NoteSignature
from joulepool.transparency.errors import (
    CheckpointUnverified,
    WitnessInconsistent,
    WitnessRefused,
    WitnessUnavailable,
)
from joulepool.transparency.follow import follow_round
from joulepool.transparency.logkeys import parse_vkeys
from joulepool.transparency.witness_client import (
    ProofFor,
    WitnessConfig,
    collect_cosignatures,
    parse_witness,
    submit,
)
from tests.interop.tools import Unavailable, aics_witness, aics_witness_cli
from tests.support.ledgers import OTHER, STEWARD
from tests.support.servers import free_port
from tests.transparency.logs import ORIGIN, VKEY, Log, entries, note_of, serving

NAME = "witness.test/w1"
LEAVES = entries(420)
REWRITTEN = LEAVES[:250] + entries(420, salt=1)[250:]
LOG_KEY = log_verifier_key(STEWARD, ORIGIN)
KEYS = parse_vkeys(VKEY)


@dataclass
class RunningWitness:
    config: WitnessConfig
    process: subprocess.Popen[bytes]
    log: Path


@pytest.fixture(scope="module")
def command() -> Path:
    try:
        return aics_witness()
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def witness(command: Path, tmp_path: Path) -> Iterator[RunningWitness]:
    port = free_port()
    vkey = aics_witness_cli(
        command, tmp_path, "init", "--name", NAME, "--listen", f"127.0.0.1:{port}"
    )
    aics_witness_cli(command, tmp_path, "add-log", "--origin", ORIGIN, "--vkey", VKEY)
    log = tmp_path / "witness.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(command), "serve", "--config", str(tmp_path / "witness.json")],
            cwd=tmp_path,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, log.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        config = parse_witness({"url": f"http://127.0.0.1:{port}/", "vkey": vkey.strip()})
        yield RunningWitness(config, process, log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _proofs(leaves: list[bytes]) -> ProofFor:
    levels = HashLevels.of_leaves(leaves)
    return lambda old, new: consistency_proof(old, new, levels)


def _cosigned(w: RunningWitness, note: bytes, sigs: list[NoteSignature]) -> None:
    assert [s.name for s in sigs] == [NAME]
    opened = open_checkpoint(add_signatures(note, sigs), LOG_KEY, [w.config.vkey])
    assert [name for name, _ in opened.cosigned_by] == [NAME]
    assert abs(opened.cosigned_by[0][1] - time.time()) < 300


def test_aics_witness_cosigns_a_growing_log(witness: RunningWitness) -> None:
    cosigned = 0
    # Across a tile boundary, with proofs of several lengths.
    for size in (1, 5, 256, 257, 420):
        note = note_of(LEAVES[:size])
        sigs = submit(witness.config, note, cosigned, _proofs(LEAVES[:size]))
        _cosigned(witness, note, sigs)
        cosigned = size


def test_a_stale_size_is_sent_again_from_the_size_the_witness_names(
    witness: RunningWitness,
) -> None:
    submit(witness.config, note_of(LEAVES[:10]), 0, _proofs(LEAVES[:10]))
    # The log lost what it knew of the witness (a restart): it sends from 0, and from a
    # size the witness never saw; only a resend from 10 (the 409's) can succeed.
    for stale, size in ((0, 40), (17, 100)):
        note = note_of(LEAVES[:size])
        _cosigned(witness, note, submit(witness.config, note, stale, _proofs(LEAVES[:size])))
    assert witness.log.read_text().count("refused (409)") == 2


def test_a_rolled_back_and_rewritten_log_is_a_fork_alarm(witness: RunningWitness) -> None:
    submit(witness.config, note_of(LEAVES[:300]), 0, _proofs(LEAVES[:300]))
    # Rewritten from 250 and grown past what the witness cosigned: its proof fails there.
    note = note_of(REWRITTEN[:400])
    with pytest.raises(WitnessInconsistent, match="422"):
        submit(witness.config, note, 300, _proofs(REWRITTEN[:400]))
    # Rewritten to the same size: another root at the size it holds.
    with pytest.raises(WitnessInconsistent, match="422"):
        submit(witness.config, note_of(REWRITTEN[:300]), 300, _proofs(REWRITTEN[:300]))
    # Rolled back to a smaller tree: its 409 names a size larger than the checkpoint's.
    with pytest.raises(WitnessInconsistent, match="larger than this checkpoint"):
        submit(witness.config, note_of(REWRITTEN[:280]), 0, _proofs(REWRITTEN[:280]))
    # The honest log still extends what the witness holds, and is cosigned.
    note = note_of(LEAVES[:420])
    _cosigned(witness, note, submit(witness.config, note, 300, _proofs(LEAVES[:420])))


def test_a_checkpoint_by_a_key_the_witness_does_not_trust_is_refused(
    witness: RunningWitness,
) -> None:
    with pytest.raises(WitnessRefused) as refused:
        submit(witness.config, note_of(LEAVES[:5], OTHER), 0, _proofs(LEAVES[:5]))
    assert refused.value.status == 403
    with pytest.raises(WitnessRefused) as unknown:
        note = note_of(LEAVES[:5], STEWARD, "pool.example/unknown")
        submit(witness.config, note, 0, _proofs(LEAVES[:5]))
    assert unknown.value.status == 404


def test_a_tenant_follows_only_checkpoints_aics_witness_cosigned(
    witness: RunningWitness, tmp_path: Path
) -> None:
    vkey = witness.config.vkey
    log = Log(LEAVES[:5])
    log.note = add_signatures(
        note_of(LEAVES[:5]), submit(witness.config, note_of(LEAVES[:5]), 0, _proofs(LEAVES[:5]))
    )
    state = tmp_path / "kept"
    with serving(log) as url:
        first = follow_round(url, KEYS, state, witnesses=(vkey,), quorum=1)
        assert [name for name, _ in first.kept.cosigned_by] == [NAME]
        # The log grows and shows the tenant a checkpoint the witness never saw.
        log.leaves, log.note = LEAVES[:300], None
        with pytest.raises(CheckpointUnverified, match="fewer than the 1 required"):
            follow_round(url, KEYS, state, witnesses=(vkey,), quorum=1)
        note = note_of(LEAVES[:300])
        log.note = add_signatures(note, submit(witness.config, note, 5, _proofs(LEAVES[:300])))
        grew = follow_round(url, KEYS, state, witnesses=(vkey,), quorum=1)
    assert (grew.outcome, grew.kept.checkpoint.size) == ("grew", 300)


def test_every_witness_is_asked_and_one_down_stops_none(witness: RunningWitness) -> None:
    down = WitnessConfig(
        f"http://127.0.0.1:{free_port()}/", witness_verifier_key("down.test/w", OTHER.public_key)
    )
    sizes: dict[str, int] = {}
    for size in (5, 260, 420):
        note = note_of(LEAVES[:size])
        got = collect_cosignatures([down, witness.config], note, sizes, _proofs(LEAVES[:size]))
        _cosigned(witness, note, list(got.signatures))
        assert got.sizes == {NAME: size}
        assert isinstance(got.failures["down.test/w"], WitnessUnavailable)
        assert got.alarms == {}
        sizes |= got.sizes
    # Each witness was sent the size it held: no 409 was needed.
    assert "refused (409)" not in witness.log.read_text()
    rewritten = note_of(REWRITTEN[:420])
    got = collect_cosignatures([witness.config], rewritten, sizes, _proofs(REWRITTEN[:420]))
    assert got.signatures == () and list(got.alarms) == [NAME]
