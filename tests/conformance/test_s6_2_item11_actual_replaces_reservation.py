"""§7 item 11: on release the actual figure replaces the reservation, not added to it (§6.2)."""

from joulepool.ledger.replay import replay
from tests.support.ledgers import STEWARD, admitted, released, seal_all


def test_release_charges_the_actual_in_place_of_the_reservation() -> None:
    state = replay(
        seal_all([admitted("c1", uj=500), released("c1", 420)]), STEWARD.kid, STEWARD.public_key
    ).state
    assert state.usage.spent_uj("a") == 420


def test_an_overrun_is_charged_what_it_cost_and_an_open_claim_keeps_its_reservation() -> None:
    ledger = seal_all([admitted("c1", uj=500), released("c1", 900), admitted("c2", uj=300)])
    usage = replay(ledger, STEWARD.kid, STEWARD.public_key).state.usage
    assert usage.spent_uj("a") == 900 + 300
    assert usage.of("a").reserved_uj == 300
