"""§7 item 10: rebuild usage by replaying the ledger (§6.1), verifying before deriving (§6.4)."""

import pytest

from joulepool.errors import LedgerRefused
from joulepool.ledger.replay import replay
from tests.support.builders import team_tree
from tests.support.ledgers import STEWARD, admitted, released, seal_all


def test_replay_rebuilds_every_entitlements_usage() -> None:
    ledger = seal_all([admitted("c1", "a", 100), admitted("c2", "b", 40), released("c1", 70)])
    state = replay(ledger, STEWARD.kid, STEWARD.public_key, team_tree()).state
    assert (state.usage.spent_uj("a"), state.usage.held_devices("a")) == (70, 0)
    assert (state.usage.spent_uj("b"), state.usage.held_devices("b")) == (40, 2)
    assert state.open_claims() == ["c2"]


def test_a_bad_entry_anywhere_means_no_usage_at_all() -> None:
    ledger = seal_all([admitted("c1"), admitted("c2"), admitted("c3")])
    ledger[2] = ledger[2][:-1] + bytes([ledger[2][-1] ^ 1])
    with pytest.raises(LedgerRefused) as info:
        replay(ledger, STEWARD.kid, STEWARD.public_key)
    assert (info.value.index, info.value.error) == (2, "bad_signature")
