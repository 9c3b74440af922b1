"""DESIGN.md §8 and §6.1: `[[c2sp_witness]]` in pool.toml (read strictly, part of the
configuration digest), and the cosigned checkpoints a deployment keeps beside its ledger:
evidence like a kept pool-witness/1 receipt, so a ledger shorter than one, or another
history at its size, is refused at open; a kept file that does not verify vouches for
nothing and is left where it is. Cosignatures are made with real Ed25519 keys
(`ledger.checkpoint.cosign`); the real witness process is in tests/interop."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import pytest

from joulepool.deployment.config import CONFIG, LEDGER, WITNESSES, config_digest, read_config
from joulepool.deployment.cosigned import file_name, keep_cosigned, load_cosigned
from joulepool.deployment.init import init_deployment
from joulepool.deployment.open import open_pool
from joulepool.deployment.verify import verified
from joulepool.errors import InvalidInput, StoreError
from joulepool.grade import Energy, Grade
from joulepool.ledger.checkpoint import (
    Checkpoint,
    add_signatures,
    cosign,
    sign_checkpoint,
    witness_verifier_key,
)
from joulepool.ledger.rollback import LedgerRolledBack
from joulepool.pool import Pool
from joulepool.stores.base import head_at
from joulepool.stores.file import FileStore
from tests.support.builders import claim
from tests.support.ledgers import OTHER, WITNESS

MJ = 1_000_000_000_000
NAME = "witness.test/kept"
WKEY = witness_verifier_key(NAME, WITNESS.public_key)
ENTRY = f'\n[[c2sp_witness]]\nurl = "https://w.example/"\nvkey = "{WKEY.encode()}"\n'


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    init_deployment(tmp_path / "d", "steward")
    return tmp_path / "d"


def _append(folder: Path, text: str) -> None:
    with (folder / CONFIG).open("a", encoding="utf-8") as fh:
        fh.write(text)


def test_c2sp_witness_entries_are_read_from_pool_toml_and_change_its_digest(folder: Path) -> None:
    before = read_config(folder / CONFIG)
    _append(folder, ENTRY)
    after = read_config(folder / CONFIG)
    assert [(w.name, w.add_checkpoint_url) for w in after.witnesses] == [
        (NAME, "https://w.example/add-checkpoint")
    ]
    assert before.witnesses == ()
    assert config_digest(after) != config_digest(before)
    # Everything else equal, only the witnesses made the difference.
    assert config_digest(dataclasses.replace(after, witnesses=())) == config_digest(before)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (ENTRY.replace("vkey =", "vkye ="), "did you mean 'vkey'"),
        (ENTRY.replace("https://w.example/", "ftp://w.example/"), "c2sp_witness[0].url"),
        (ENTRY + ENTRY, "names 'witness.test/kept' again"),
        ('\n[c2sp_witness]\nurl = "https://w.example/"\n', "array of tables"),
    ],
)
def test_a_bad_c2sp_witness_in_pool_toml_is_refused_naming_the_file(
    folder: Path, text: str, said: str
) -> None:
    _append(folder, text)
    with pytest.raises(InvalidInput) as refused:
        read_config(folder / CONFIG)
    assert str(folder / CONFIG) in str(refused.value) and said in str(refused.value)


def _grow(folder: Path, prefix: str, count: int, entitlement: str = "vision") -> Pool:
    pool = open_pool(folder)
    for i in range(count):
        assert pool.submit(claim(f"{prefix}-{i}", entitlement, MJ // 100)).seq is not None
        pool.release(f"{prefix}-{i}", Energy(MJ // 200, Grade.HwShunt))
    return pool


def _cosigned_now(pool: Pool) -> tuple[bytes, bytes]:
    """The pool's checkpoint as a witness cosigned it, and the ledger's head at its size."""
    size, root = pool.merkle_head()
    checkpoint = Checkpoint("joulepool/steward", size, root)
    note = sign_checkpoint(checkpoint, pool.key)
    line = cosign(checkpoint, WITNESS, NAME, int(time.time()))
    return add_signatures(note, [line]), head_at(pool.store, size)


def test_a_kept_cosigned_checkpoint_refuses_a_shorter_or_other_history(
    folder: Path, tmp_path: Path
) -> None:
    backup = tmp_path / "backup"
    pool = _grow(folder, "a", 3)
    shutil.copytree(folder, backup)
    pool.close()
    pool = _grow(folder, "b", 2)
    note, head = _cosigned_now(pool)
    pool.close()
    kept = keep_cosigned(folder / WITNESSES, WKEY, note, head)
    assert kept.checkpoint.size == 10 and kept.path.name == file_name(WKEY)
    assert kept.path.stat().st_mode & 0o777 == 0o644
    # A stale copy of the ledger, shorter than what the witness cosigned.
    shutil.copytree(folder / WITNESSES, backup / WITNESSES, dirs_exist_ok=True)
    with pytest.raises(LedgerRolledBack) as short:
        open_pool(backup)
    assert (short.value.length, short.value.acknowledged) == (6, 10)
    assert f"C2SP witness {NAME}" in str(short.value)
    # The same copy written on past that size: another history at the cosigned size.
    (backup / WITNESSES / kept.path.name).rename(tmp_path / "aside")
    _grow(backup, "other", 3, "language").close()
    (tmp_path / "aside").rename(backup / WITNESSES / kept.path.name)
    with pytest.raises(LedgerRolledBack, match="rewritten or replaced") as other:
        open_pool(backup)
    assert (other.value.length, other.value.acknowledged) == (12, 10)
    # Its head line edited to fit the other history: the start check, which reads heads,
    # passes, but the root the witness signed does not, and `pool ledger verify` says so.
    edited = backup / WITNESSES / kept.path.name
    with FileStore(backup / LEDGER, writer=False) as store:
        other_head = head_at(store, 10)
    edited.write_bytes(edited.read_bytes().replace(head.hex().encode(), other_head.hex().encode()))
    open_pool(backup).close()
    with pytest.raises(LedgerRolledBack, match="tree root after 10 entries") as root:
        verified(str(backup))
    assert f"C2SP witness {NAME}" in str(root.value)
    # The ledger that the witness saw opens, and grows past it.
    _grow(folder, "c", 1).close()


def test_a_kept_file_that_does_not_verify_vouches_for_nothing_and_stays(folder: Path) -> None:
    pool = _grow(folder, "a", 2)
    note, head = _cosigned_now(pool)
    pool.close()
    path = keep_cosigned(folder / WITNESSES, WKEY, note, head).path
    data = path.read_bytes()
    # The cosignature line's last base64 characters changed: it no longer verifies.
    path.write_bytes(data[:-3] + (b"A" if data[-3:-2] != b"A" else b"B") + data[-2:])
    problems: list[str] = []
    assert load_cosigned(folder / WITNESSES, problems) == []
    assert len(problems) == 1 and path.name in problems[0]
    assert path.read_bytes() != data and path.exists()
    open_pool(folder).close()


def test_only_a_note_the_witness_cosigned_is_kept(folder: Path) -> None:
    pool = _grow(folder, "a", 1)
    note, head = _cosigned_now(pool)
    pool.close()
    stranger = witness_verifier_key(NAME, OTHER.public_key)
    with pytest.raises(StoreError, match="no signature by a known key"):
        keep_cosigned(folder / WITNESSES, stranger, note, head)
    assert load_cosigned(folder / WITNESSES) == []
