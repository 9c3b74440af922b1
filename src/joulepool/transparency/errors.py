"""The refusals of the transparency clients (docs/transparency.md), one class per
thing that can fail, so `pool proof` prints which one and a caller can catch one kind."""

from __future__ import annotations

from joulepool.errors import InvalidInput, PoolError


class Unreachable(PoolError):
    """A log, tile server or witness could not be asked, or answered outside HTTP's shape."""

    code = "unreachable"


class BundleMalformed(InvalidInput):
    """A proof bundle, a server's JSON answer or a state file is not the shape API.md gives."""

    code = "bundle_malformed"


class CheckpointUnverified(PoolError):
    """A checkpoint's note carries no valid signature by a given log key whose name is its
    origin (c2sp.org/tlog-checkpoint, c2sp.org/signed-note)."""

    code = "bad_signature"


class ProofMismatch(PoolError):
    """An inclusion or consistency proof does not verify against the checkpoint (RFC 9162
    §2.1.3.2, §2.1.4.2)."""

    code = "proof_mismatch"


class ClaimNotInEntry(PoolError):
    """A proven entry is not a ledger entry recording the bundle's claim (DESIGN.md §4)."""

    code = "claim_not_in_entry"


class ForkAlarm(PoolError):
    """Two signed checkpoints of the log that cannot both be true: a smaller size than one
    seen before (rollback), another root at the same size, or a larger tree that is not an
    extension of the kept one (fork). `kept` and `seen` are both notes, as received: the
    pair is the evidence (DESIGN.md §8, a kept checkpoint is rollback evidence). `kept` is
    empty when the other checkpoint is one a witness holds and did not show."""

    code = "fork_alarm"

    def __init__(self, detail: str, kept: bytes, seen: bytes) -> None:
        super().__init__(detail)
        self.kept = kept
        self.seen = seen


class WitnessRefused(PoolError):
    """A C2SP witness refused a checkpoint for a reason that is not a fork: an unknown log,
    an untrusted key, a malformed request (c2sp.org/tlog-witness, add-checkpoint)."""

    code = "witness_refused"

    def __init__(self, witness: str, status: int, detail: str) -> None:
        super().__init__(f"witness {witness}: HTTP {status}: {detail}")
        self.witness = witness
        self.status = status


class WitnessUnavailable(PoolError):
    """A C2SP witness could not be reached or asked to retry later (503)."""

    code = "witness_unavailable"


class WitnessProtocolError(PoolError):
    """A witness's answer is not what c2sp.org/tlog-witness allows: a malformed 409 body, a
    200 without a valid cosignature by its key, a 409 that repeats the size sent."""

    code = "witness_protocol_error"


class WitnessInconsistent(ForkAlarm):
    """The witness holds a checkpoint this log's tree does not extend (422 to a proof from
    the size it named, or it knows a larger tree than the log now signs): the log or the
    witness has forked (c2sp.org/tlog-witness)."""

    code = "witness_inconsistent"
