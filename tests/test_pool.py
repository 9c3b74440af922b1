"""`Pool`: decisions on live usage, durable admissions, one fold for live and replayed state,
thread safety, clear errors that append nothing, tree reloads (§3, §4, §6.1)."""

from __future__ import annotations

import dataclasses
import random
import threading
from pathlib import Path

import pytest

from joulepool.admission import Admit, Queue, QueueReason
from joulepool.claim import Claim
from joulepool.deployment.config import CONFIG, LEDGER, parse_tree, read_config
from joulepool.deployment.init import init_deployment
from joulepool.deployment.open import open_pool
from joulepool.errors import ClaimError, InvalidTree
from joulepool.estimate import Derived
from joulepool.grade import Energy, Grade
from joulepool.ledger.replay import replay
from joulepool.pool import Decision, Pool, Release, ReleaseRequest
from joulepool.stores.file import FileStore
from joulepool.stores.memory import MemoryStore
from tests.support.builders import team_tree
from tests.support.ledgers import STEWARD

H, M, E = Grade.HwShunt, Grade.ModelBased, Grade.Estimator


def claim(
    cid: str, ent: str, uj: int, grade: Grade = H, devices: int = 1, class_: str | None = None
) -> Claim:
    return Claim(cid, ent, 1, devices, Energy(uj, grade), class_)


def fresh(store: MemoryStore | None = None) -> Pool:
    return Pool(
        team_tree(),
        STEWARD,
        store if store is not None else MemoryStore(),
        clock=lambda: 1_764_000_000_000,
    )


def fingerprint(pool: Pool) -> object:
    state = pool.state
    return (
        pool.length,
        pool.head,
        {i: state.usage.of(i) for i in ("a", "b", "c")},
        state.open_claims(),
    )


def test_queue_and_deny_write_nothing_admit_and_release_do() -> None:
    store = MemoryStore()
    pool = fresh(store)
    assert isinstance(pool.submit(claim("c1", "a", 900, E)).verdict, Admit)
    assert isinstance(pool.submit(claim("c2", "a", 200, E)).verdict, Queue)
    assert pool.submit(claim("c3", "zzz", 1)).verdict.verdict == "deny"
    assert len(store) == 1
    pool.release("c1", Energy(500, H))
    assert len(store) == 2
    assert isinstance(pool.submit(claim("c2", "a", 200, E)).verdict, Admit)


def test_a_live_pool_and_a_replayed_one_always_agree() -> None:
    rng = random.Random(7)
    store = MemoryStore()
    pool = fresh(store)
    running: list[str] = []
    for i in range(300):
        if running and rng.random() < 0.4:
            cid = running.pop(rng.randrange(len(running)))
            pool.release(cid, Energy(rng.randrange(0, 1500), rng.choice([H, M, E])))
        else:
            c = claim(
                f"c{i}",
                rng.choice("abc"),
                rng.randrange(0, 900),
                rng.choice([H, M, E]),
                rng.randrange(1, 3),
                "k",
            )
            if isinstance(pool.submit(c).verdict, Admit):
                running.append(c.id)
        if i % 50 == 0:
            again = fresh(MemoryStore(list(store.entries())))
            assert fingerprint(again) == fingerprint(pool)
    again = fresh(MemoryStore(list(store.entries())))
    assert fingerprint(again) == fingerprint(pool)
    assert again.state.classes() == pool.state.classes()


def test_duplicates_unknown_and_released_claims_are_clear_errors_appending_nothing() -> None:
    store = MemoryStore()
    pool = fresh(store)
    pool.submit(claim("c1", "a", 10))
    with pytest.raises(ClaimError) as info:
        pool.submit(claim("c1", "b", 10))
    assert info.value.code == "claim_exists"
    with pytest.raises(ClaimError) as info:
        pool.release("nope", Energy(1, H))
    assert info.value.code == "unknown_claim"
    pool.release("c1", Energy(1, H))
    with pytest.raises(ClaimError) as info:
        pool.release("c1", Energy(1, H))
    assert info.value.code == "already_released"
    with pytest.raises(ClaimError):
        pool.submit(claim("c1", "a", 10))  # an id is never reused, even after release
    assert len(store) == 2


def test_concurrent_submissions_give_a_ledger_a_serial_run_could_have(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "ledger.cbor", create=True)
    pool = Pool(team_tree(g=10_000, gd=40), STEWARD, store)
    claims = [
        claim(f"t{t}-{i}", "abc"[(t + i) % 3], 97 + t * 13 + i, [H, M, E][i % 3])
        for t in range(8)
        for i in range(60)
    ]
    results: dict[str, object] = {}

    def worker(chunk: list[Claim]) -> None:
        for c in chunk:
            results[c.id] = pool.submit(c).verdict

    threads = [threading.Thread(target=worker, args=(claims[t::8],)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool.close()
    # Replaying the ledger in its order, as a serial run would, reproduces every admission:
    # no joule was reserved twice and nothing is past a guarantee without borrowing.
    entries = list(FileStore(tmp_path / "ledger.cbor", writer=False).entries())
    serial_tree_pool = Pool(team_tree(g=10_000, gd=40), STEWARD, MemoryStore(), clock=lambda: 0)
    replayed = replay(entries, STEWARD.kid, STEWARD.public_key, team_tree(g=10_000, gd=40)).state
    admitted_ids = {cid for cid, v in results.items() if isinstance(v, Admit)}
    assert len(entries) == len(admitted_ids)
    assert set(replayed.open_claims()) == admitted_ids
    for ent in "abc":
        assert replayed.usage.spent_uj(ent) == sum(
            c.estimate.uj for c in claims if c.id in admitted_ids and c.entitlement == ent
        )
    # Deciding the same claims serially in the ledger's order gives the same verdicts.
    by_id = {c.id: c for c in claims}
    from joulepool.ledger.cose import open_envelope

    order = [open_envelope(e).core["claim"] for e in entries]
    for cid in order:
        verdict = serial_tree_pool.submit(by_id[cid]).verdict
        assert verdict == results[cid]


def test_estimate_is_earned_from_the_ledgers_own_history() -> None:
    pool = fresh()
    for i, actual in enumerate((300, 320, 310)):
        pool.submit(claim(f"r{i}", "a", 100, E, class_="render"))
        pool.release(f"r{i}", Energy(actual, H))
    pool.submit(claim("g", "b", 100, E, class_="render"))
    pool.release("g", Energy(999, E))  # a guess is not evidence
    derived = pool.estimate("render")
    assert derived == Derived(Energy(320, M), 300, 320, 4, 3)


def test_a_restart_never_hands_back_a_spent_guarantee(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    init_deployment(folder, "steward")
    pool = open_pool(folder)
    pool.submit(Claim("j1", "robotics", 1, 1, Energy(19 * 10**12, E)))
    pool.close()
    again = open_pool(folder)
    try:
        assert again.usage_of("robotics").spent_uj == 19 * 10**12
        verdict = again.submit(Claim("j2", "robotics", 1, 1, Energy(2 * 10**12, E))).verdict
        assert verdict == Queue(QueueReason.guarantee_exhausted_may_not_borrow)
    finally:
        again.close()


def test_a_tree_reload_keeps_the_ledger_and_a_broken_one_changes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    init_deployment(folder, "steward")
    pool = open_pool(folder)
    try:
        pool.submit(Claim("j1", "vision", 1, 2, Energy(10**12, H)))
        text = (folder / CONFIG).read_text()
        (folder / CONFIG).write_text(
            text.replace("guarantee_devices = 8", "guarantee_devices = 16")
        )
        good = read_config(folder / CONFIG)
        pool.reload(good)
        assert pool.tree["vision"].guarantee_devices == 16
        assert pool.usage_of("vision").held_devices == 2
        broken = text.replace('parent = "research"', 'parent = "nowhere"', 1)
        (folder / CONFIG).write_text(broken)
        with pytest.raises(InvalidTree) as info:
            pool.reload(read_config(folder / CONFIG))
        assert str(folder / CONFIG) in str(info.value)
        assert info.value.node == "vision" and info.value.field == "parent"
        assert pool.tree["vision"].guarantee_devices == 16  # the old tree stays in force
        # A node removed from the tree: its claims are refused, its running claim still releases.
        smaller = parse_tree([e.to_json() for e in pool.tree if e.id != "vision"], "test")
        pool.reload(dataclasses.replace(good, tree=smaller))
        assert pool.submit(Claim("j2", "vision", 1, 1, Energy(1, H))).verdict.verdict == "deny"
        pool.release("j1", Energy(5, H))
        assert (folder / LEDGER).stat().st_size > 0
    finally:
        pool.close()


def test_apply_decides_a_batch_in_order_with_one_append(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "ledger.cbor", create=True)
    pool = Pool(team_tree(), STEWARD, store, clock=lambda: 1_764_000_000_000)
    outcomes = pool.apply(
        [
            claim("c1", "a", 600),
            claim("c1", "a", 1),  # the same id again, inside the same batch
            ReleaseRequest("nobody", Energy(1, H)),
            ReleaseRequest("c1", Energy(100, H)),
            claim("c2", "a", 900),  # inside the guarantee only because c1's release came first
        ]
    )
    first, dup, unknown, rel, second = outcomes
    assert isinstance(first, Decision) and first.seq == 0
    assert isinstance(dup, ClaimError) and dup.code == "claim_exists"
    assert isinstance(unknown, ClaimError) and unknown.code == "unknown_claim"
    assert isinstance(rel, Release) and rel.seq == 1
    assert isinstance(second, Decision) and isinstance(second.verdict, Admit)
    assert (second.seq, second.verdict.borrowed_uj) == (2, 0)
    assert (len(store), store.fsyncs, pool.appends) == (3, 1, 1)
    again = replay(store.entries(), STEWARD.kid, STEWARD.public_key, team_tree())
    assert again.state.usage.of("a") == pool.usage_of("a")
    store.close()
