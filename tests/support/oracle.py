"""A sequential oracle for a ledger written under concurrency (§4, §6.1): replaying its
entries one by one through the pure `decide()` must reproduce every admission exactly."""

from __future__ import annotations

from joulepool.admission import Admit, decide
from joulepool.claim import Claim
from joulepool.events import Admitted
from joulepool.ledger.replay import Replayer
from joulepool.tree import Tree


def replay_with_oracle(
    entries: list[bytes], tree: Tree, steward: str, public_key: bytes
) -> Replayer:
    """Verify, and at each admission assert the serial verdict matches what was recorded."""
    from joulepool.ledger.cose import open_envelope
    from joulepool.ledger.entry import event_of

    replayer = Replayer(steward, public_key, tree)
    for index, raw in enumerate(entries):
        event = event_of(open_envelope(raw).core, steward)
        if isinstance(event, Admitted):
            claim = Claim(
                event.claim,
                event.entitlement,
                event.gang_size,
                event.devices_per_member,
                event.reserved,
                event.class_,
            )
            verdict = decide(tree, replayer.state.usage, claim)
            assert verdict == Admit(event.reserved, event.devices, event.borrowed_uj), (
                index,
                event,
                verdict,
            )
        replayer.feed(raw)
    return replayer
