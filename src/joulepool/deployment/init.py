"""`pool init`: a new deployment folder (DESIGN.md §5)."""

from __future__ import annotations

from pathlib import Path


def init_deployment(folder: Path, steward: str) -> None:
    """Create a deployment folder: the steward's key and its public half, the example tree
    with a monthly budget period, an empty ledger (DESIGN.md §3, §5). A folder that is not
    empty is refused, never overwritten."""
    from joulepool.deployment.claim_tokens import claim_secret
    from joulepool.deployment.config import (
        CONFIG,
        EXAMPLE_TREE,
        KEY,
        LEDGER,
        MONTHLY,
        PUBLIC_KEY,
        WITNESSES,
        write_config,
    )
    from joulepool.errors import InvalidInput
    from joulepool.ledger.keys import KeyPair, write_key_file
    from joulepool.stores.file import create

    if folder.exists() and any(folder.iterdir()):
        raise InvalidInput(str(folder), "is not empty; pool init never overwrites a deployment")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / WITNESSES).mkdir()
    key = KeyPair.generate(steward)
    write_key_file(folder / KEY, key)
    write_key_file(folder / PUBLIC_KEY, key.public())
    claim_secret(folder)  # claim tokens (API.md "Run time") are derived under it
    write_config(folder / CONFIG, steward, EXAMPLE_TREE, period=MONTHLY)
    create(folder / LEDGER).close()
