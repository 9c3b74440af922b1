"""pool.toml as people write it: energies with their unit (`guarantee = "10MJ"`) beside the
exact `guarantee_uj`, exactly one of the two, parsed exactly (a fraction of a µJ refused);
an unknown key or parent names the near miss (did you mean); messages name energies in
their unit. Through the real `pool` command line and `pool serve --check`."""

from __future__ import annotations

import json
from pathlib import Path

from joulepool.deployment.config import CONFIG
from tests.support.servers import pool_cli

HEAD = '[pool]\nsteward = "steward"\n\n'


def deployment(tmp_path: Path, tree: str, pool_table: str = HEAD) -> Path:
    folder = tmp_path / "d"
    made = pool_cli("init", str(folder), "--no-power-ceiling")
    assert made.returncode == 0, made.stderr
    (folder / CONFIG).write_text(pool_table + tree, encoding="utf-8")
    return folder


TEAM = "guarantee_devices = 4\nover_quota_weight = 1\n"


def test_energies_written_with_units_are_exact_microjoules(tmp_path: Path) -> None:
    tree = (
        f'[[entitlement]]\nid = "lab"\nguarantee = "5MJ"\nlimit = "2.5kWh"\n{TEAM}\n'
        f'[[entitlement]]\nid = "team"\nparent = "lab"\nguarantee_uj = 7\n{TEAM}'
    )
    folder = deployment(tmp_path, tree)
    usage = pool_cli("usage", str(folder), "--json")
    assert usage.returncode == 0, usage.stderr
    rows = {e["id"]: e for e in json.loads(usage.stdout)["entitlements"]}
    assert rows["lab"]["guarantee_uj"] == 5 * 10**12
    assert rows["lab"]["limit_uj"] == 9 * 10**12  # 2.5 kWh, exactly
    assert rows["team"]["guarantee_uj"] == 7
    assert pool_cli("serve", str(folder), "--check").returncode == 0


def refused(tmp_path: Path, tree: str, pool_table: str = HEAD) -> str:
    folder = deployment(tmp_path, tree, pool_table)
    run = pool_cli("usage", str(folder))
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert len(run.stderr.splitlines()) == 1
    return run.stderr


def test_both_spellings_of_one_energy_are_refused(tmp_path: Path) -> None:
    said = refused(
        tmp_path, f'[[entitlement]]\nid = "a"\nguarantee = "1MJ"\nguarantee_uj = 1\n{TEAM}'
    )
    assert "give guarantee or guarantee_uj, not both" in said and "'a'" in said


def test_a_fraction_of_a_microjoule_or_a_bare_number_is_refused(tmp_path: Path) -> None:
    said = refused(tmp_path, f'[[entitlement]]\nid = "a"\nguarantee = "0.5uJ"\n{TEAM}')
    assert "not a whole number of microjoules" in said
    said = refused(tmp_path / "2", f'[[entitlement]]\nid = "a"\nguarantee = "1000"\n{TEAM}')
    assert '"10MJ"' in said and "guarantee_uj takes an integer of µJ" in said
    said = refused(tmp_path / "3", f'[[entitlement]]\nid = "a"\nguarantee = 1000\n{TEAM}')
    assert "an energy with its unit" in said


def test_unknown_keys_and_parents_name_the_near_miss(tmp_path: Path) -> None:
    said = refused(tmp_path, f'[[entitlement]]\nid = "a"\nguarante = "1MJ"\n{TEAM}')
    assert "unknown field; did you mean 'guarantee_uj'" in said
    said = refused(
        tmp_path / "2",
        f'[[entitlement]]\nid = "research"\nguarantee_uj = 0\n{TEAM}\n'
        f'[[entitlement]]\nid = "vision"\nparent = "reserch"\nguarantee_uj = 1\n{TEAM}',
    )
    assert "names 'reserch', which is not in the tree; did you mean 'research'?" in said
    said = refused(tmp_path / "3", "", '[pool]\nsteward = "steward"\nmax_device_powr_w = 700\n')
    assert "pool.max_device_powr_w: unknown key; did you mean 'max_device_power_w'?" in said
    said = refused(tmp_path / "4", "", HEAD + '[perod]\nkind = "month"\n')
    assert "perod: unknown table or key; did you mean 'period'?" in said
    said = refused(tmp_path / "5", "", HEAD + '[furniture]\nkind = "chair"\n')
    assert "did you mean" not in said  # nothing close: no guess


def test_a_limit_below_its_guarantee_is_named_in_units(tmp_path: Path) -> None:
    said = refused(
        tmp_path, f'[[entitlement]]\nid = "a"\nguarantee = "10MJ"\nlimit = "9MJ"\n{TEAM}'
    )
    assert "(9 MJ) is below guarantee_uj 10000000000000 (10 MJ)" in said
