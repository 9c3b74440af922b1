"""The PostgreSQL store against a real server: round trips, replicas that see each other,
writers the advisory lock serialises, truncation caught, restarts survived, and a COMMIT
whose answer is lost reported as unknown and never written twice (DESIGN.md §6)."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import cbor2
import psycopg
import pytest

from joulepool.errors import StoreError
from joulepool.stores.export import export_ledger
from joulepool.stores.postgres import (
    CommitOutcomeUnknown,
    ConfigMismatch,
    LedgerFenced,
    LedgerLockTimeout,
    LedgerMoved,
    LedgerTruncated,
    PostgresStore,
    PostgresUnavailable,
    StatementTimeout,
    lock_key,
)
from joulepool.stores.postgres.sql import CLAIMS_PAST
from tests.support.pg import FaultProxy, PgServer, pg_dsn, pg_ledger, pg_proxy, pg_server

__all__ = ["pg_dsn", "pg_ledger", "pg_proxy", "pg_server"]

pytestmark = pytest.mark.postgres


def item(*parts: object) -> bytes:
    """An entry-shaped value: one CBOR item, as every sealed entry is."""
    return bytes(cbor2.dumps(list(parts)))


def append(store: PostgresStore, raws: list[bytes]) -> None:
    """Catch up and append, as a pool does in one section."""
    with store.writing() as w:
        assert w.unseen(w.length) == []
        w.append(raws)


def test_round_trip_of_arbitrary_bytes(pg_dsn: str, pg_ledger: str) -> None:
    rng = random.Random(7)
    raws = [b"", b"\x00", b"\x00" * 1000, bytes(range(256)), rng.randbytes(1 << 20)]
    raws += [rng.randbytes(rng.randrange(1, 600)) for _ in range(50)]
    with PostgresStore(pg_dsn, ledger=pg_ledger) as store:
        assert len(store) == 0
        assert list(store.entries()) == []
        with store.writing() as w:
            assert w.unseen(0) == []
            w.append(raws[:3])
            w.append(raws[3:])
        assert len(store) == len(raws)
        assert list(store.entries()) == raws
        assert list(store.entries(4)) == raws[4:]
        assert list(store.entries(len(raws))) == []
        assert store.entry(4) == raws[4]
        for bad in (len(raws), -1):
            with pytest.raises(StoreError, match=f"no entry {bad}"):
                store.entry(bad)
        with pytest.raises(StoreError):
            list(store.entries(-1))
    with PostgresStore(pg_dsn, ledger=pg_ledger) as again:
        assert list(again.entries()) == raws


def test_entries_stream_in_batches(pg_dsn: str, pg_ledger: str) -> None:
    raws = [item(i, b"x" * (i % 97)) for i in range(40_000)]
    with PostgresStore(pg_dsn, ledger=pg_ledger) as store:
        append(store, raws)
        it = store.entries(123)
        assert next(it) == raws[123]
        assert list(it) == raws[124:]


def test_replicas_see_each_others_appends_through_unseen(pg_dsn: str, pg_ledger: str) -> None:
    with (
        PostgresStore(pg_dsn, ledger=pg_ledger) as one,
        PostgresStore(pg_dsn, ledger=pg_ledger) as two,
    ):
        append(one, [item("one", 0), item("one", 1)])
        with two.writing() as w:
            assert w.unseen(0) == [item("one", 0), item("one", 1)]
            assert w.unseen(1) == [item("one", 1)]
            w.append([item("two", 2)])
        with one.writing() as w:
            assert w.unseen(2) == [item("two", 2)]
            assert w.unseen(3) == []
        assert list(one.entries()) == list(two.entries())
        assert len(one) == len(two) == 3


def test_concurrent_writers_are_serialised_without_gaps_or_duplicates(
    pg_dsn: str, pg_ledger: str
) -> None:
    writers, sections = 6, 25
    order: list[tuple[int, int, int]] = []  # (first seq, writer, section), in commit order
    order_lock = threading.Lock()
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def run(n: int) -> None:
        known = 0
        try:
            with PostgresStore(pg_dsn, ledger=pg_ledger) as store:
                start.wait()
                for s in range(sections):
                    with store.writing() as w:
                        known += len(w.unseen(known))
                        # Each entry names the index it must land at: a writer that had
                        # missed someone's entry would name a taken index.
                        count = 1 + (n + s) % 3
                        w.append([item(known + k, n, s) for k in range(count)])
                        with order_lock:
                            order.append((known, n, s))
                        known += count
        except BaseException as exc:  # reported below, on the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with PostgresStore(pg_dsn, ledger=pg_ledger) as store:
        got = [cbor2.loads(raw) for raw in store.entries()]
    total = sum(1 + (n + s) % 3 for n in range(writers) for s in range(sections))
    assert len(got) == total
    assert [g[0] for g in got] == list(range(total))
    # The ledger is the sections' entries laid end to end, in the order they committed.
    expected: list[list[int]] = []
    for first, n, s in sorted(order):
        assert first == len(expected)
        expected += [[first + k, n, s] for k in range(1 + (n + s) % 3)]
    assert got == expected


def test_a_ledger_shorter_than_known_is_refused(
    pg_server: PgServer, pg_dsn: str, pg_ledger: str
) -> None:
    with PostgresStore(pg_dsn, ledger=pg_ledger) as store:
        append(store, [item(i) for i in range(5)])
        with store.writing() as w, pytest.raises(LedgerTruncated) as caught:
            w.unseen(7)
        assert (caught.value.length, caught.value.known) == (5, 7)
        assert "has 5 entries but this replica has seen 7" in str(caught.value)
        # Someone deletes the tail behind the replicas' backs.
        pg_server.sql(
            "DELETE FROM pool_ledger_entries WHERE ledger = %s AND seq >= 3", (pg_ledger,)
        )
        with store.writing() as w, pytest.raises(LedgerTruncated):
            w.unseen(5)
        assert len(store) == 3
        # A hole in the middle is caught when read, not skipped over.
        pg_server.sql("DELETE FROM pool_ledger_entries WHERE ledger = %s AND seq = 1", (pg_ledger,))
        with pytest.raises(StoreError, match="no entry 1"):
            list(store.entries())
        with store.writing() as w, pytest.raises(StoreError, match="removed"):
            w.unseen(0)


def test_a_restart_between_sections_reconnects_by_itself(
    pg_server: PgServer, pg_dsn: str, pg_ledger: str
) -> None:
    with PostgresStore(pg_dsn, ledger=pg_ledger) as store:
        append(store, [item(0)])
        opened = store.connections
        pg_server.restart()
        # Both stale connections are replaced on first use; nothing surfaces to the caller.
        assert len(store) == 1
        append(store, [item(1)])
        assert list(store.entries()) == [item(0), item(1)]
        assert store.connections == opened + 2
        pg_server.restart("immediate")  # a crash: the next start replays the WAL
        assert list(store.entries()) == [item(0), item(1)]
        append(store, [item(2)])
        assert len(store) == 3


def test_a_stopped_server_is_a_store_error_quickly(
    pg_server: PgServer, pg_dsn: str, pg_ledger: str
) -> None:
    store = PostgresStore(pg_dsn, ledger=pg_ledger)
    try:
        append(store, [item(0)])
        pg_server.stop()
        began = time.monotonic()
        with pytest.raises(PostgresUnavailable) as caught:
            PostgresStore(pg_dsn + " password=hunter2", ledger=pg_ledger)
        message = str(caught.value)
        assert f"127.0.0.1:{pg_server.port}" in message
        assert "hunter2" not in message
        for call in (lambda: len(store), lambda: list(store.entries()), lambda: store.entry(0)):
            with pytest.raises(PostgresUnavailable):
                call()
        with pytest.raises(PostgresUnavailable, match="nothing was written"), store.writing():
            pass
        assert time.monotonic() - began < 3
        pg_server.start()
        append(store, [item(1)])
        assert list(store.entries()) == [item(0), item(1)]
    finally:
        store.close()


def test_a_server_that_never_answers_times_out(pg_proxy: FaultProxy, pg_ledger: str) -> None:
    pg_proxy.silent = True
    began = time.monotonic()
    with pytest.raises(PostgresUnavailable, match=f"127.0.0.1:{pg_proxy.port}"):
        PostgresStore(pg_proxy.dsn(), ledger=pg_ledger, connect_timeout_s=1)
    assert time.monotonic() - began < 5


def test_a_commit_lost_before_the_server_got_it_is_unknown_then_absent(
    pg_proxy: FaultProxy, pg_dsn: str, pg_ledger: str
) -> None:
    with PostgresStore(pg_proxy.dsn(), ledger=pg_ledger) as store:
        append(store, [item(0)])
        pg_proxy.cut_next_commit("before")
        with pytest.raises(CommitOutcomeUnknown, match="unknown") as caught, store.writing() as w:
            w.unseen(1)
            w.append([item(1), item(2)])
        assert (caught.value.first, caught.value.count) == (1, 2)
        assert pg_proxy.cuts == ["before commit"]
        assert store.fsyncs == 1
        # The next section reconnects, and the ledger says what happened: nothing landed.
        with store.writing() as w:
            assert w.unseen(1) == []
            w.append([item(1)])
    with PostgresStore(pg_dsn, ledger=pg_ledger) as direct:
        assert list(direct.entries()) == [item(0), item(1)]


def test_a_commit_whose_answer_was_lost_landed_exactly_once(
    pg_proxy: FaultProxy, pg_dsn: str, pg_ledger: str
) -> None:
    with PostgresStore(pg_proxy.dsn(), ledger=pg_ledger) as store:
        append(store, [item(0)])
        pg_proxy.cut_next_commit("after")
        with pytest.raises(CommitOutcomeUnknown), store.writing() as w:
            w.unseen(1)
            w.append([item(1), item(2)])
        assert pg_proxy.cuts == ["after commit"]
        assert store.fsyncs == 1  # not counted: this store never learned that it committed
        with store.writing() as w:
            # It landed; the caller learns so from the ledger, and the store wrote it once.
            assert w.unseen(1) == [item(1), item(2)]
            w.append([item(3)])
    with PostgresStore(pg_dsn, ledger=pg_ledger) as direct:
        assert list(direct.entries()) == [item(0), item(1), item(2), item(3)]


def test_an_error_in_the_body_rolls_back_and_the_store_recovers(
    pg_dsn: str, pg_ledger: str
) -> None:
    with PostgresStore(pg_dsn, ledger=pg_ledger) as store:
        with pytest.raises(ZeroDivisionError), store.writing() as w:
            w.unseen(0)
            _ = 1 / 0
        append(store, [item(0)])
        # A refused call fails that section only.
        with pytest.raises(StoreError, match="an index is never negative"), store.writing() as w:
            w.unseen(-1)
        append(store, [item(1)])
        assert len(store) == 2


def test_a_second_append_in_one_section_checks_nobody_came_between(
    pg_dsn: str, pg_ledger: str
) -> None:
    with (
        PostgresStore(pg_dsn, ledger=pg_ledger) as one,
        PostgresStore(pg_dsn, ledger=pg_ledger) as two,
    ):
        with one.writing() as w:
            w.append([item(0)])
            w.append([item(1)])
            assert w.length == 2
        with pytest.raises(LedgerMoved, match="grew from 3 to 4"), one.writing() as w:
            w.append([item(2)])
            # The first append committed and released the lock; another replica got in.
            append(two, [item(3)])
            w.append([item("never")])
        assert [cbor2.loads(r)[0] for r in one.entries()] == [0, 1, 2, 3]


def test_a_held_lock_times_out_as_a_store_error(pg_dsn: str, pg_ledger: str) -> None:
    with (
        PostgresStore(pg_dsn, ledger=pg_ledger) as holder,
        PostgresStore(pg_dsn, ledger=pg_ledger, lock_timeout_s=1) as waiter,
    ):
        with holder.writing():
            began = time.monotonic()
            with pytest.raises(LedgerLockTimeout, match="more than 1 s"), waiter.writing():
                pass
            assert 0.9 < time.monotonic() - began < 3
        append(waiter, [item(0)])
        assert len(holder) == 1


def test_fsyncs_count_commits_that_wrote(pg_dsn: str, pg_ledger: str) -> None:
    with PostgresStore(pg_dsn, ledger=pg_ledger) as store:
        with store.writing() as w:
            w.unseen(0)
        assert (store.fsyncs, store.commits) == (0, 1)
        append(store, [item(0), item(1)])
        append(store, [item(2)])
        assert (store.fsyncs, store.commits) == (2, 3)
        with store.writing() as w:
            w.append([])
        assert (store.fsyncs, store.commits) == (2, 4)


def test_ledger_names_are_isolated(pg_dsn: str, pg_ledger: str) -> None:
    with (
        PostgresStore(pg_dsn, ledger=pg_ledger + "-a") as a,
        PostgresStore(pg_dsn, ledger=pg_ledger + "-b") as b,
    ):
        assert lock_key(a.ledger) != lock_key(b.ledger)
        append(a, [item("a", 0), item("a", 1)])
        append(b, [item("b", 0)])
        assert list(a.entries()) == [item("a", 0), item("a", 1)]
        assert list(b.entries()) == [item("b", 0)]
        with b.writing() as w:
            assert w.unseen(0) == [item("b", 0)]
            with pytest.raises(LedgerTruncated):
                w.unseen(2)
        # A writer on one ledger does not wait for a writer on another.
        with a.writing(), b.writing() as wb:
            wb.append([item("b", 1)])
        assert len(b) == 2


def test_lock_key_is_stable_and_signed_64_bit() -> None:
    # Pinned: replicas of different versions must take the same lock for a ledger.
    assert lock_key("default") == int.from_bytes(
        __import__("hashlib").sha256(b"joulepool ledger default").digest()[:8], "big", signed=True
    )
    assert all(-(2**63) <= lock_key(str(i)) < 2**63 for i in range(100))


def test_schema_is_created_once_and_required_when_not_created(pg_server: PgServer) -> None:
    db = f"schema_{os.getpid()}_{time.monotonic_ns()}"
    pg_server.sql(f"CREATE DATABASE {db}")
    dsn = pg_server.dsn(db)
    with pytest.raises(StoreError, match="no table pool_ledger_entries"):
        PostgresStore(dsn, create_schema=False)
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            PostgresStore.create(dsn).close()
        except BaseException as exc:  # reported below, on the main thread
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # A database whose default turns synchronous_commit off does not weaken the store.
    pg_server.sql(f"ALTER DATABASE {db} SET synchronous_commit = off")
    with PostgresStore(dsn, create_schema=False) as store:
        store.ensure_schema()
        append(store, [item(0)])
        assert len(store) == 1
        for link in (store._reader, store._writer):
            assert link.conn is not None
            assert link.conn.execute("SHOW synchronous_commit").fetchall() == [("on",)]
    with psycopg.connect(dsn) as plain:
        assert plain.execute("SHOW synchronous_commit").fetchall() == [("off",)]
    cols = pg_server.sql(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_name = 'pool_ledger_entries' ORDER BY ordinal_position",
        dbname=db,
    )
    assert cols == [("ledger", "text"), ("seq", "bigint"), ("entry", "bytea")]


def test_bad_dsns_are_store_errors_that_keep_the_password(pg_server: PgServer) -> None:
    with pytest.raises(StoreError, match="malformed") as caught:
        PostgresStore("host=localhost password=s3cret junk")
    assert "s3cret" not in str(caught.value)
    with pytest.raises(PostgresUnavailable, match="nosuchdb") as caught2:
        PostgresStore(pg_server.dsn("nosuchdb") + " password=s3cret")
    assert "s3cret" not in str(caught2.value)
    with pytest.raises(StoreError, match="non-empty name"):
        PostgresStore(pg_server.dsn(), ledger="")


def test_a_closed_store_refuses_politely(pg_dsn: str, pg_ledger: str) -> None:
    store = PostgresStore(pg_dsn, ledger=pg_ledger)
    store.close()
    with pytest.raises(StoreError, match="is closed"):
        len(store)
    store.close()


def test_export_writes_exactly_the_concatenated_entries(
    pg_dsn: str, pg_ledger: str, tmp_path: Path
) -> None:
    raws = [item(i, b"e" * (i * 37 % 500)) for i in range(3000)]
    out = tmp_path / "ledger.cbor"
    with PostgresStore(pg_dsn, ledger=pg_ledger) as store:
        append(store, raws)
        assert export_ledger(store, out) == len(raws)
        assert out.read_bytes() == b"".join(raws)
        with pytest.raises(StoreError, match="already exists"):
            export_ledger(store, out)
        append(store, [item("more")])
        assert export_ledger(store, out, overwrite=True) == len(raws) + 1
        assert out.read_bytes() == b"".join([*raws, item("more")])
        # Two items in one entry would read back as two entries: refused, no file left.
        append(store, [item("x") + item("y")])
        with pytest.raises(StoreError, match=f"entry {len(raws) + 1} is not exactly one"):
            export_ledger(store, tmp_path / "bad.cbor")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.cbor"]


def test_an_exported_ledger_reads_back_as_a_ledger_file(
    pg_dsn: str, pg_ledger: str, tmp_path: Path
) -> None:
    from joulepool.stores.file import FileStore

    raws = [item(i) for i in range(100)]
    with PostgresStore(pg_dsn, ledger=pg_ledger) as store:
        append(store, raws)
        export_ledger(store, tmp_path / "l.cbor")
    with FileStore(tmp_path / "l.cbor", writer=False) as f:
        assert list(f.entries()) == raws


# -- the real Pool over two PostgreSQL replicas ---------------------------------------------


def test_two_pools_on_one_ledger_decide_linearizably(
    pg_dsn: str, pg_ledger: str, tmp_path: Path
) -> None:
    from joulepool.admission import Admit
    from joulepool.errors import ClaimError
    from joulepool.grade import Energy, Grade
    from joulepool.ledger.keys import KeyPair
    from joulepool.ledger.replay import replay
    from joulepool.pool import Pool
    from joulepool.stores.file import FileStore
    from tests.support.builders import claim, team_tree

    key = KeyPair.generate("steward")
    tree = team_tree(g=1000, gd=4)
    one = Pool(tree, key, PostgresStore(pg_dsn, ledger=pg_ledger))
    two = Pool(tree, key, PostgresStore(pg_dsn, ledger=pg_ledger))
    try:
        first = one.submit(claim("j1", "a", 600))
        assert isinstance(first.verdict, Admit)
        assert (first.seq, first.verdict.borrowed_uj) == (0, 0)
        # Replica two has not looked since it opened; its decision must count j1 anyway:
        # 600 + 600 exceeds a's guarantee by 200, which a borrows.
        second = two.submit(claim("j2", "a", 600))
        assert isinstance(second.verdict, Admit)
        assert (second.seq, second.verdict.borrowed_uj) == (1, 200)
        with pytest.raises(ClaimError) as caught:
            two.submit(claim("j1", "a", 1))
        assert caught.value.code == "claim_exists"
        # Replica one releases what two admitted, and two cannot release it again.
        released = one.release("j2", Energy(500, Grade.HwShunt))
        assert released.seq == 2
        with pytest.raises(ClaimError) as caught:
            two.release("j2", Energy(1, Grade.HwShunt))
        assert caught.value.code == "already_released"
        assert one.head == two.head
        assert one.usage_of("a") == two.usage_of("a")
        assert one.store.fsyncs == 2 and two.store.fsyncs == 1
        # Export, and the ledger file replays to the same head and usage.
        out = tmp_path / "ledger.cbor"
        assert export_ledger(one.store, out) == 3
        with FileStore(out, writer=False) as f:
            again = replay(f.entries(), key.kid, key.public_key, tree)
        assert (again.length, again.head) == (3, one.head)
        assert again.state.usage.of("a") == one.usage_of("a")
    finally:
        one.close()
        two.close()


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_pool_whose_commit_outcome_is_unknown_never_answers_falsely(
    pg_proxy: FaultProxy, pg_dsn: str, pg_ledger: str, when: str
) -> None:
    from joulepool.admission import Admit
    from joulepool.errors import ClaimError
    from joulepool.ledger.keys import KeyPair
    from joulepool.pool import Pool
    from tests.support.builders import claim, team_tree

    key = KeyPair.generate("steward")
    pool = Pool(team_tree(), key, PostgresStore(pg_proxy.dsn(), ledger=pg_ledger))
    try:
        assert isinstance(pool.submit(claim("j0", "a", 10)).verdict, Admit)
        pg_proxy.cut_next_commit(when)
        # The client gets an error, never a verdict, whichever way the COMMIT went.
        with pytest.raises(CommitOutcomeUnknown):
            pool.submit(claim("j1", "a", 10))
        assert pool.length == 1
        if when == "before":
            # It did not land: asking again admits it, once, at the next index.
            decision = pool.submit(claim("j1", "a", 10))
            assert (isinstance(decision.verdict, Admit), decision.seq) == (True, 1)
        else:
            # It landed: the next section reads it back, and asking again is refused.
            with pytest.raises(ClaimError) as caught:
                pool.submit(claim("j1", "a", 10))
            assert caught.value.code == "claim_exists"
            state = pool.claim_state("j1")
            assert state is not None
            assert state.admitted_seq == 1
        assert pool.length == 2
    finally:
        pool.close()
    with PostgresStore(pg_dsn, ledger=pg_ledger) as direct:
        assert len(direct) == 2
        rerun = Pool(team_tree(), key, direct)
        assert rerun.usage_of("a").running_claims == 2


def test_s6_1_rows_deleted_from_postgresql_are_refused_at_start(
    pg_server: PgServer, pg_dsn: str, pg_ledger: str
) -> None:
    """The high-water record rides in each append's transaction; a start holds to it."""
    from joulepool.ledger.keys import KeyPair
    from joulepool.ledger.rollback import HighWater, HighWaterMissing, LedgerRolledBack
    from joulepool.pool import Pool
    from joulepool.stores.base import head_at
    from tests.support.builders import claim, team_tree

    key = KeyPair.generate("steward")
    pool = Pool(team_tree(), key, PostgresStore(pg_dsn, ledger=pg_ledger))
    for i in range(6):
        assert pool.submit(claim(f"j{i}", "abc"[i % 3], 10)).seq == i
    high = pool.store.high_water()
    assert high == HighWater(6, pool.head)
    pool.close()
    rows = pg_server.sql(
        "SELECT length, head FROM pool_ledger_high_water WHERE ledger = %s", (pg_ledger,)
    )
    assert rows == [(6, high.head)]
    # Someone deletes the newest entries: the quota they spent must not come back.
    pg_server.sql("DELETE FROM pool_ledger_entries WHERE ledger = %s AND seq >= 4", (pg_ledger,))
    with pytest.raises(LedgerRolledBack) as info:
        Pool(team_tree(), key, PostgresStore(pg_dsn, ledger=pg_ledger))
    assert (info.value.length, info.value.acknowledged) == (4, 6)
    assert "has 4 entries" in str(info.value) and "acknowledged 6" in str(info.value)
    # Deleting the record as well leaves a ledger that nothing vouches for: refused too.
    pg_server.sql("DELETE FROM pool_ledger_high_water WHERE ledger = %s", (pg_ledger,))
    with pytest.raises(HighWaterMissing, match="pool ledger acknowledge"):
        Pool(team_tree(), key, PostgresStore(pg_dsn, ledger=pg_ledger))
    # An operator who accepts the loss records the ledger as it stands; appends go on.
    with PostgresStore(pg_dsn, ledger=pg_ledger) as store:
        store.acknowledge(HighWater(4, head_at(store, 4)))
    pool = Pool(team_tree(), key, PostgresStore(pg_dsn, ledger=pg_ledger))
    assert pool.length == 4
    assert pool.submit(claim("after", "a", 10)).seq == 4
    assert pool.store.high_water() == HighWater(5, pool.head)
    pool.close()


def test_s6_1_a_database_from_before_the_record_gains_its_table(
    pg_server: PgServer, pg_ledger: str
) -> None:
    db = f"legacy_{os.getpid()}_{time.monotonic_ns()}"
    pg_server.sql(f"CREATE DATABASE {db}")
    dsn = pg_server.dsn(db)
    pg_server.sql(
        "CREATE TABLE pool_ledger_entries (ledger text NOT NULL, seq bigint NOT NULL"
        " CHECK (seq >= 0), entry bytea NOT NULL, PRIMARY KEY (ledger, seq))",
        dbname=db,
    )
    with PostgresStore(dsn, ledger=pg_ledger, create_schema=False) as old:
        assert old.high_water() is None  # no table yet: no record, and no error
    with PostgresStore(dsn, ledger=pg_ledger) as store:
        append(store, [item(0), item(1)])
        high = store.high_water()
        assert high is not None and high.length == 2


# -- bounded waits, fencing, one configuration, the readiness probe -------------------------


def test_every_session_bounds_its_waits(pg_dsn: str, pg_ledger: str) -> None:
    with PostgresStore(
        pg_dsn,
        ledger=pg_ledger,
        lock_timeout_s=8,
        statement_timeout_s=2.5,
        idle_in_transaction_s=5,
    ) as store:
        append(store, [item(0)])
        store.probe()
        for link in (store._reader, store._writer, store._prober):
            assert link.conn is not None
            shown = [
                link.conn.execute(f"SHOW {name}").fetchall()[0][0]
                for name in (
                    "lock_timeout",
                    "statement_timeout",
                    "idle_in_transaction_session_timeout",
                )
            ]
            assert shown == ["8s", "2500ms", "5s"]


def test_a_statement_past_its_timeout_is_a_typed_error(pg_dsn: str, pg_ledger: str) -> None:
    with PostgresStore(pg_dsn, ledger=pg_ledger, statement_timeout_s=0.3) as store:
        began = time.monotonic()
        with pytest.raises(StatementTimeout, match=r"longer than 0\.3 s"):
            store._read_rows("sleeping", "SELECT pg_sleep(3)", (), binary=False)
        assert time.monotonic() - began < 2
        append(store, [item(0)])  # the connection is still good


def test_a_section_frozen_past_the_idle_timeout_is_fenced_and_writes_nothing(
    pg_dsn: str, pg_ledger: str
) -> None:
    with (
        PostgresStore(pg_dsn, ledger=pg_ledger, idle_in_transaction_s=1) as frozen,
        PostgresStore(pg_dsn, ledger=pg_ledger, lock_timeout_s=5) as other,
    ):
        append(frozen, [item(0)])
        waited: list[float] = []

        def meanwhile() -> None:
            began = time.monotonic()
            append(other, [item("other")])
            waited.append(time.monotonic() - began)

        with pytest.raises(LedgerFenced, match="nothing was written"), frozen.writing() as w:
            assert w.unseen(1) == []
            t = threading.Thread(target=meanwhile)
            t.start()
            time.sleep(2.0)  # frozen with the lock, past idle_in_transaction_s
            t.join(timeout=10)
            w.append([item("never")])
        # The other replica waited about the idle timeout, not its whole lock timeout.
        assert len(waited) == 1 and waited[0] < 2.5, waited
        # The fenced one catches up on its next section and goes on.
        with frozen.writing() as w:
            assert w.unseen(1) == [item("other")]
            w.append([item(2)])
        assert list(other.entries()) == [item(0), item("other"), item(2)]


def test_a_commit_after_the_session_was_fenced_is_refused_not_unknown(
    pg_dsn: str, pg_ledger: str
) -> None:
    with PostgresStore(pg_dsn, ledger=pg_ledger, idle_in_transaction_s=1) as store:
        with pytest.raises(LedgerFenced, match="committing 1 entry"), store.writing() as w:
            conn = w._conn
            assert conn is not None
            execute = conn.execute

            def frozen_before_commit(query: object, *args: object, **kw: object) -> object:
                if query == "COMMIT":
                    time.sleep(2.0)  # the replica stalls between its insert and its COMMIT
                return execute(query, *args, **kw)  # type: ignore[call-overload]

            conn.execute = frozen_before_commit  # type: ignore[method-assign, assignment]
            w.append([item(0)])
        assert len(store) == 0
        append(store, [item(1)])
        assert list(store.entries()) == [item(1)]


def test_replicas_with_different_configurations_refuse_until_one_is_adopted(
    pg_dsn: str, pg_ledger: str
) -> None:
    x, y = bytes([1]) * 32, bytes([2]) * 32
    with (
        PostgresStore(pg_dsn, ledger=pg_ledger, config_digest=x) as a,
        PostgresStore(pg_dsn, ledger=pg_ledger, config_digest=y) as b,
        PostgresStore(pg_dsn, ledger=pg_ledger) as unchecked,
    ):
        assert a.recorded_config() is None
        append(a, [item(0)])  # the first section records its digest
        recorded = a.recorded_config()
        assert recorded is not None and recorded.digest == x and "pid" in recorded.by
        with pytest.raises(ConfigMismatch) as caught, b.writing():
            pass
        assert x.hex() in str(caught.value) and y.hex() in str(caught.value)
        assert (caught.value.mine, caught.value.recorded.digest) == (y, x)
        assert b.probe().recorded == recorded
        assert b.probe().length == 1
        append(unchecked, [item(1)])  # tools that decide nothing (ledger commands) check nothing
        # An explicit adoption, under the lock: from its commit on, x decides nothing.
        b.adopt_config(y)
        append(b, [item(2)])
        with pytest.raises(ConfigMismatch, match="nothing was written"), a.writing() as w:
            w.append([item("never")])
        with pytest.raises(ConfigMismatch):
            a.agree_config()
        assert list(unchecked.entries()) == [item(0), item(1), item(2)]


def test_a_readiness_probe_is_bounded_when_the_network_says_nothing(
    pg_proxy: FaultProxy, pg_ledger: str
) -> None:
    with PostgresStore(pg_proxy.dsn(), ledger=pg_ledger) as store:
        assert store.probe().length == 0
        store._prober.drop()
        pg_proxy.silent = True  # new connections are accepted and never answered
        for _ in range(3):
            began = time.monotonic()
            with pytest.raises(PostgresUnavailable, match="readiness probe"):
                store.probe(timeout_s=0.5)
            assert time.monotonic() - began < 1.5
        pg_proxy.silent = False
        deadline = time.monotonic() + 15
        while True:
            try:
                assert store.probe().length == 0
                break
            except PostgresUnavailable:
                assert time.monotonic() < deadline
                time.sleep(0.2)


def test_s6_4_a_start_cuts_claim_rows_past_the_end_by_an_index(pg_dsn: str, pg_ledger: str) -> None:
    """Each start deletes the claim rows past the ledger's end (DESIGN.md §4): by an index on
    `released`, so that costs those rows, not every claim the ledger ever released; a
    database whose tables were made without the index gains it when a store opens it."""
    with PostgresStore(pg_dsn, ledger=pg_ledger):
        pass
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX pool_ledger_claims_released")
    with PostgresStore(pg_dsn, ledger=pg_ledger):
        pass
    with psycopg.connect(pg_dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        cur = psycopg.ClientCursor(conn)
        plan = cur.execute("EXPLAIN " + CLAIMS_PAST, (pg_ledger, 0)).fetchall()
    assert "pool_ledger_claims_released" in str(plan), plan
