"""A workload manager's bridge token, added by its installer (docs/slurm.md, Installing;
docs/api.md, Tokens). Here, not in `bridges/`: the bridge's own modules never open the
deployment's files (DESIGN.md §5), the `pool` command line does."""

from __future__ import annotations

import os
from pathlib import Path


def add_bridge_token(pool_dir: str, name: str, mapped: list[str]) -> tuple[str, Path]:
    """Add a token named `name` to the deployment at `pool_dir`, scoped to the smallest
    subtree holding every entitlement in `mapped` (`bridge:<id>`, or `bridge`), and return
    it with the path of tokens.toml (docs/api.md, Tokens). Refused, adding nothing, when
    one of `mapped` is not in the tree."""
    from joulepool.cli.paths import deployment_dir
    from joulepool.deployment.config import CONFIG, TOKENS, read_config
    from joulepool.service.tokens import add_token, bridge_scope

    folder = deployment_dir(pool_dir)
    tree = read_config(folder / CONFIG).tree
    scope = bridge_scope(tree, mapped)
    path = folder / TOKENS
    # Run as root, the rewrite would leave tokens.toml root's, and a `pool serve` running
    # as its own user could no longer read it: it keeps the owner it had (or the folder's).
    owner = (path if path.exists() else folder).stat()
    token = add_token(path, name, scope, tree)
    if os.geteuid() == 0:
        os.chown(path, owner.st_uid, owner.st_gid)
    return token, path


def take_back(path: Path, name: str) -> None:
    """Revoke the token `add_bridge_token` added, when the install it was for failed: a
    token for files never written would be a live credential nobody holds (docs/slurm.md,
    Installing)."""
    from joulepool.service.tokens import revoke_token

    owner = path.stat()
    revoke_token(path, name, None)
    if os.geteuid() == 0:
        os.chown(path, owner.st_uid, owner.st_gid)
