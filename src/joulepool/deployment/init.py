"""`pool init`: a new deployment folder (DESIGN.md §5)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_MAX_DEVICE_POWER_W = 1000
"""`pool init`'s release ceiling, W a device: the board power of the hungriest accelerators in
service (B200 about 1000 W; H100 SXM 700 W, MI300X 750 W), so a true figure of any of them
is never refused, while one typed in kJ for J, or ×1000, is (DESIGN.md "Plausible releases")."""


def init_deployment(folder: Path, steward: str, max_device_power_w: int | None = None) -> None:
    """Create a deployment folder: the steward's key and its public half, the example tree
    with a monthly budget period, an empty ledger (DESIGN.md §3, §5), its first configuration
    statement (docs/reliability.md §18), and the release ceiling `max_device_power_w` when
    given. A folder that is not empty is refused, never overwritten."""
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

    if max_device_power_w is not None and not 1 <= max_device_power_w < 2**64:
        raise InvalidInput("--max-device-power-w", "must be a whole number of W, at least 1")
    if folder.exists() and any(folder.iterdir()):
        raise InvalidInput(str(folder), "is not empty; pool init never overwrites a deployment")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / WITNESSES).mkdir()
    key = KeyPair.generate(steward)
    write_key_file(folder / KEY, key)
    write_key_file(folder / PUBLIC_KEY, key.public())
    claim_secret(folder)  # claim tokens (API.md "Run time") are derived under it
    write_config(
        folder / CONFIG,
        steward,
        EXAMPLE_TREE,
        period=MONTHLY,
        max_device_power_w=max_device_power_w,
    )
    create(folder / LEDGER).close()
    # The first configuration statement: the tree `pool init` wrote, in force from entry 0
    # (docs/reliability.md §18).
    import time

    from joulepool.deployment.config import read_config
    from joulepool.deployment.configs import applier, record_config
    from joulepool.ledger.configs import ConfigHistory
    from joulepool.ledger.rotation import KeySchedule

    history = ConfigHistory(KeySchedule(steward, key.public_key))
    config = read_config(folder / CONFIG)
    record_config(
        folder, history, key, config, 0, time.time_ns() // 1_000_000, applier("pool init")
    )
