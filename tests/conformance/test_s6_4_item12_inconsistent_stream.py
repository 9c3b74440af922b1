"""§7 item 12: an inconsistent stream is refused at its index, not read as a shorter history."""

import pytest

from joulepool.errors import LedgerRefused
from joulepool.events import Event
from joulepool.ledger.replay import replay
from tests.support.ledgers import STEWARD, admitted, released, seal_all


@pytest.mark.parametrize(
    ("events", "index"),
    [
        ([admitted("c1"), released("ghost")], 1),
        ([admitted("c1"), released("c1"), released("c1")], 2),
        ([admitted("c1"), admitted("c1")], 1),
        ([admitted("c1"), released("c1"), admitted("c1")], 2),
    ],
    ids=["never-admitted", "second-release", "admitted-twice", "id-reused"],
)
def test_each_inconsistency_is_refused_at_its_index(events: list[Event], index: int) -> None:
    with pytest.raises(LedgerRefused) as info:
        replay(seal_all(events), STEWARD.kid, STEWARD.public_key)
    assert (info.value.index, info.value.error) == (index, "inconsistent_stream")


def test_a_consistent_stream_is_accepted() -> None:
    r = replay(
        seal_all([admitted("c1"), released("c1"), admitted("c2")]), STEWARD.kid, STEWARD.public_key
    )
    assert r.length == 3
