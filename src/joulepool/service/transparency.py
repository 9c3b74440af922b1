"""What `pool serve` publishes of its ledger as a C2SP log (DESIGN.md §8, API.md
"Transparency"): the signed checkpoint, cached for at most a second, and the tile index that
serves tiles and proofs, kept following the ledger.

Every answer rests on one signed head: its size is read with the root under the state a
decision sees (`Pool.merkle_head`), the index is brought up to that size, and the index's
own root at that size must be the pool's, or the answer is refused (503) rather than served
with a proof that cannot verify.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

from joulepool.deployment.checkpoints import SignedHead, sign_head
from joulepool.deployment.config import Config
from joulepool.errors import InvalidInput, StoreError
from joulepool.ledger.merkle import range_hash
from joulepool.ledger.tile_index import TileIndex
from joulepool.pool import Pool


def origin_or_none(config: Config) -> str | None:
    """The checkpoint origin pool.toml gives (DESIGN.md §8), or None where it gives none that
    can be one: the service still starts, and only its log answers 503."""
    try:
        return config.log_origin
    except InvalidInput:
        return None


CHECKPOINT_MAX_AGE_S = 1.0
"""How long a signed checkpoint is served again before a newer one is signed."""


@dataclass
class PublishedLog:
    """The checkpoint and tiles of one pool's ledger (DESIGN.md §8)."""

    pool: Pool
    origin: str
    _index: TileIndex | None = None
    _cached: tuple[float, SignedHead] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self, start: int, count: int) -> list[bytes]:
        """The ledger's entries [start, start + count), as stored: what entry bundles and
        level-0 tiles hold (c2sp.org/tlog-tiles)."""
        return list(itertools.islice(self.pool.entries(start), count))

    @property
    def index(self) -> TileIndex:
        """The tile index (c2sp.org/tlog-tiles, `ledger/tile_index.py`), created at first use."""
        with self._lock:
            if self._index is None:
                self._index = TileIndex(self.read)
            return self._index

    def head(self, *, fresh: bool = False) -> SignedHead:
        """The signed checkpoint of the ledger now; one signed less than
        `CHECKPOINT_MAX_AGE_S` ago unless `fresh` (c2sp.org/tlog-checkpoint)."""
        now = time.monotonic()
        cached = self._cached
        if not fresh and cached is not None and now - cached[0] < CHECKPOINT_MAX_AGE_S:
            return cached[1]
        # A replica of a shared ledger signs what every replica appended, not its own view.
        self.pool.catch_up()
        size, root = self.pool.merkle_head()
        self.follow(size)
        if size and range_hash(0, size, self.index) != root:
            raise StoreError(
                f"the tile index disagrees with the ledger's tree at {size} entries; "
                "restart `pool serve` to rebuild it"
            )
        signed = sign_head(self.origin, size, root, self.pool.key)
        self._cached = (now, signed)
        return signed

    def head_at(self, size: int) -> SignedHead:
        """A checkpoint of the ledger's first `size` entries, signed now (for a consistency
        proof ending there); `size` at most what the index follows."""
        return sign_head(self.origin, size, range_hash(0, size, self.index), self.pool.key)

    def follow(self, size: int) -> None:
        """Bring the tile index up to `size` entries of the ledger (c2sp.org/tlog-tiles: tiles
        only grow to the right)."""
        index = self.index
        if index.size < size:
            index.follow(self.pool.entries(index.size), size)
