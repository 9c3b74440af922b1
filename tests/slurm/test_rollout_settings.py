"""The rollout settings of the bridge's file (shadow mode, default estimates, exemptions):
read exactly, and every bad value refused naming its key, before job_submit.lua sees it."""

from __future__ import annotations

from pathlib import Path

import pytest

from joulepool.bridges.slurm.config import read_bridge_config
from joulepool.errors import InvalidInput

BASE = '[pool]\nurl = "https://pool.example:7460"\ntoken_file = "/etc/slurm/t"\n'


def write(tmp_path: Path, pool: str = "", tables: str = "") -> Path:
    path = tmp_path / "pool-bridge.toml"
    path.write_text(BASE + pool + '\n[accounts]\nphys = "vision"\n' + tables + "\n")
    return path


def test_rollout_settings_are_read_exactly(tmp_path: Path) -> None:
    config = read_bridge_config(
        write(
            tmp_path,
            'mode = "shadow"\ncpu_only = "exempt"\n',
            "[default_estimate]\ngpu_power_w = 700\ncpu_power_w = 10\n"
            '[account_estimate]\nphys = "2.5kWh"\n[partition_estimate]\ndebug = "750J"\n'
            "[exempt_accounts]\nadmin = true\n[exempt_partitions]\nmaint = true\n",
        )
    )
    assert (config.mode, config.cpu_only) == ("shadow", "exempt")
    assert config.default_power_w == {"gpu_power_w": 700, "cpu_power_w": 10}
    assert config.account_estimate == {"phys": 9_000_000_000_000}
    assert config.partition_estimate == {"debug": 750_000_000}
    assert (config.exempt_accounts, config.exempt_partitions) == (
        frozenset({"admin"}),
        frozenset({"maint"}),
    )


def test_enforcing_and_claiming_are_the_defaults(tmp_path: Path) -> None:
    config = read_bridge_config(write(tmp_path))
    assert (config.mode, config.cpu_only, config.default_power_w) == ("enforce", "claim", {})
    assert config.exempt_accounts == frozenset()


@pytest.mark.parametrize(
    ("pool", "tables", "key"),
    [
        ('mode = "shadoww"', "", "pool.mode"),
        ("mode = true", "", "pool.mode"),
        ('cpu_only = "skip"', "", "pool.cpu_only"),
        ("", "[default_estimate]\ngpu_power_w = 0", "default_estimate.gpu_power_w"),
        ("", "[default_estimate]\ngpu_power_w = 100001", "default_estimate.gpu_power_w"),
        ("", '[default_estimate]\ngpu_power_w = "700"', "default_estimate.gpu_power_w"),
        ("", "[default_estimate]\ngpu_watts = 700", "default_estimate.gpu_watts"),
        ("", '[account_estimate]\nphys = "4 MJ"', "account_estimate.phys"),
        ("", '[account_estimate]\nphys = "4mj"', "account_estimate.phys"),
        ("", '[account_estimate]\nphys = "0.5uJ"', "account_estimate.phys"),
        ("", '[account_estimate]\nphys = "0J"', "account_estimate.phys"),
        ("", "[account_estimate]\nphys = 4000", "account_estimate.phys"),
        ("", '[partition_estimate]\ndebug = "-1J"', "partition_estimate.debug"),
        ("", '[exempt_accounts]\nadmin = "yes"', "exempt_accounts.admin"),
        ("", "[exempt_partitions]\nmaint = false", "exempt_partitions.maint"),
        ("", "[exempt]\nadmin = true", "exempt"),
    ],
)
def test_bad_rollout_settings_are_refused_naming_the_key(
    tmp_path: Path, pool: str, tables: str, key: str
) -> None:
    with pytest.raises(InvalidInput, match=key.replace(".", r"\.")):
        read_bridge_config(write(tmp_path, pool + "\n", tables))
