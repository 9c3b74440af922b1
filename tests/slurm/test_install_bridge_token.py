"""`pool slurm install-config --pool-dir`, without Slurm: the install adds a bridge token to
the deployment, scoped to the smallest subtree holding every mapped entitlement, keeps
tokens.toml's owner, and takes the token back when the install fails (docs/slurm.md,
Installing; docs/api.md, Tokens)."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from joulepool.deployment.config import CONFIG, TOKENS, read_config
from joulepool.deployment.init import init_deployment
from joulepool.service.tokens import read_tokens
from tests.support.servers import pool_cli


def pool(*args: str) -> subprocess.CompletedProcess[str]:
    return pool_cli(*args, timeout_s=60)


def install(etc: Path, folder: Path, user: str, *maps: str) -> subprocess.CompletedProcess[str]:
    return pool(
        *("slurm", "install-config", str(etc), "--url", "https://pool.example:7460"),
        *("--pool-dir", str(folder), "--cluster", "c1", "--slurm-user", user, "--json"),
        *(a for m in maps for a in ("--map", m)),
    )


def scopes(folder: Path) -> dict[str, str]:
    tree = read_config(folder / CONFIG).tree
    return {e.name: e.scope for e in read_tokens(folder / TOKENS, tree)}


def test_install_config_adds_a_bridge_token_for_the_mapped_subtree(
    tmp_path: Path, slurm_user: str
) -> None:
    folder = tmp_path / "pool"
    init_deployment(folder, "steward")
    done = install(tmp_path / "etc", folder, slurm_user, "phys=vision", "ling=language")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["token_name"] == "slurm-bridge-c1"  # noqa: S105 (a name)
    assert scopes(folder) == {"slurm-bridge-c1": "bridge:research"}
    written = (tmp_path / "etc" / "pool-bridge.token").read_text().strip()
    assert written.startswith("jp_")
    # The token written is the one the deployment holds, by its hash.
    (entry,) = read_tokens(folder / TOKENS, read_config(folder / CONFIG).tree)
    assert hashlib.sha256(written.encode()).hexdigest() == entry.sha256

    one = tmp_path / "one"
    init_deployment(one, "steward")
    done = install(tmp_path / "etc-one", one, slurm_user, "phys=vision")
    assert done.returncode == 0, done.stderr
    assert scopes(one) == {"slurm-bridge-c1": "bridge:vision"}


def test_install_config_keeps_the_owner_of_tokens_toml(tmp_path: Path, slurm_user: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give tokens.toml to another user")
    folder = tmp_path / "pool"
    init_deployment(folder, "steward")
    owner = pwd.getpwnam("nobody")
    (folder / TOKENS).write_text("")
    os.chmod(folder / TOKENS, 0o600)
    os.chown(folder / TOKENS, owner.pw_uid, owner.pw_gid)
    done = install(tmp_path / "etc", folder, slurm_user, "phys=vision")
    assert done.returncode == 0, done.stderr
    info = (folder / TOKENS).stat()
    assert (info.st_uid, info.st_gid) == (owner.pw_uid, owner.pw_gid)


def test_a_failed_install_takes_its_bridge_token_back(tmp_path: Path, slurm_user: str) -> None:
    folder = tmp_path / "pool"
    init_deployment(folder, "steward")
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "pool-bridge.toml").write_text("a site's own, never overwritten without --force\n")
    done = install(etc, folder, slurm_user, "phys=vision")
    assert done.returncode != 0 and "--force" in done.stderr, done.stderr
    assert scopes(folder) == {}
    # An entitlement the tree lacks is refused before any token is made.
    done = install(tmp_path / "etc2", folder, slurm_user, "phys=vison")
    assert done.returncode != 0 and "'vison' is not in the tree" in done.stderr, done.stderr
    assert scopes(folder) == {}
