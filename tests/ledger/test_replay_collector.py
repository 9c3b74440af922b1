"""Replay pauses the cyclic garbage collector and always puts it back as it was (§6.1)."""

from __future__ import annotations

import gc

import pytest

from joulepool.errors import LedgerRefused
from joulepool.ledger.replay import replay
from tests.support.ledgers import STEWARD, twenty


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_it_was_after_an_accepted_or_refused_replay(
    workers: int, enabled: bool
) -> None:
    entries = twenty()
    tampered = [*entries[:5], entries[6], entries[5], *entries[7:]]
    before = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        replayer = replay(entries, STEWARD.kid, STEWARD.public_key, workers=workers)
        assert replayer.length == 20
        assert gc.isenabled() is enabled
        with pytest.raises(LedgerRefused) as refused:
            replay(tampered, STEWARD.kid, STEWARD.public_key, workers=workers)
        assert refused.value.index == 5
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if before else gc.disable)()
