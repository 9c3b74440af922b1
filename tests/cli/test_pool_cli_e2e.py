"""The `pool` command driven as a user would: real processes, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

POOL = [sys.executable, "-m", "joulepool"]
MJ = 1_000_000_000_000


def pool(*args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*POOL, *args], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )
    assert proc.returncode in ok, (
        f"pool {' '.join(args)} exited {proc.returncode}: {proc.stderr}{proc.stdout}"
    )
    assert "Traceback" not in proc.stderr
    return proc


def pool_json(*args: str, ok: tuple[int, ...] = (0,)) -> Any:
    return json.loads(pool(*args, "--json", ok=ok).stdout)


def admit(
    folder: Path, claim: str, ent: str, uj: int, grade: str = "Estimator", devices: int = 1
) -> Any:
    return pool_json(
        "admit",
        str(folder),
        "--id",
        claim,
        "--entitlement",
        ent,
        "--estimate-uj",
        str(uj),
        "--grade",
        grade,
        "--devices-per-member",
        str(devices),
        ok=(0, 3, 4),
    )


def test_init_admit_until_queued_release_restart_verify(tmp_path: Path) -> None:
    folder = tmp_path / "deploy"
    pool("init", str(folder), "--no-power-ceiling")  # releases of MJ a moment after admission
    assert (folder / "steward.key").stat().st_mode & 0o777 == 0o600
    # robotics: 20 MJ, 4 devices. Guesses of 6 MJ fit three times; the fourth would borrow.
    verdicts = [admit(folder, f"job-{i}", "robotics", 6 * MJ) for i in range(4)]
    assert [v["verdict"] for v in verdicts] == ["admit", "admit", "admit", "queue"]
    assert verdicts[3]["reason"] == "guarantee_exhausted_may_not_borrow"
    assert [v.get("seq") for v in verdicts[:3]] == [0, 1, 2]
    before = pool_json("usage", str(folder))
    robotics = next(e for e in before["entitlements"] if e["id"] == "robotics")
    assert robotics["usage"] == {
        "spent_uj": 18 * MJ,
        "charged_uj": 0,
        "reserved_uj": 18 * MJ,
        "committed_uj": 18 * MJ,
        "remaining_uj": 2 * MJ,
        "borrowed_uj": 0,
        "held_devices": 3,
        "running_claims": 3,
        # pool init sets a monthly budget period (DESIGN.md §3).
        "period": before["period"],
    }
    released = pool_json(
        "release", str(folder), "job-0", "--actual-uj", str(2 * MJ), "--grade", "HwShunt"
    )
    assert released == {"claim": "job-0", "seq": 3, "charged": {"uj": 2 * MJ, "grade": "HwShunt"}}
    # The release freed 4 MJ of the guarantee: the queued claim now fits.
    assert admit(folder, "job-3", "robotics", 6 * MJ)["verdict"] == "admit"
    # Every command above was its own process: each one replayed the ledger from disk.
    after = pool_json("usage", str(folder))
    robotics = next(e for e in after["entitlements"] if e["id"] == "robotics")
    assert robotics["usage"]["spent_uj"] == 2 * MJ + 18 * MJ
    assert robotics["usage"]["held_devices"] == 3
    again = pool_json("usage", str(folder))
    assert again == after
    verify = pool_json("ledger", "verify", str(folder / "ledger.cbor"))
    assert (
        verify["ok"] is True and verify["length"] == 5 and verify["attestation"] == "self-attested"
    )
    replayed = pool_json("ledger", "usage", str(folder / "ledger.cbor"))
    assert replayed["usage"]["robotics"]["spent_uj"] == 20 * MJ
    assert replayed["open_claims"] == ["job-1", "job-2", "job-3"]


def test_errors_are_one_line_and_append_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "deploy"
    pool("init", str(folder), "--no-power-ceiling")  # releases of MJ a moment after admission
    admit(folder, "job-1", "vision", MJ)
    size = (folder / "ledger.cbor").stat().st_size
    dup = pool(
        "admit",
        str(folder),
        "--id",
        "job-1",
        "--entitlement",
        "vision",
        "--estimate-uj",
        "1",
        ok=(1,),
    )
    assert "claim_exists" in dup.stderr
    unknown = pool(
        "release", str(folder), "nope", "--actual-uj", "1", "--grade", "HwShunt", ok=(1,)
    )
    assert "unknown_claim" in unknown.stderr
    pool("release", str(folder), "job-1", "--actual-uj", "1", "--grade", "HwShunt")
    twice = pool("release", str(folder), "job-1", "--actual-uj", "1", "--grade", "HwShunt", ok=(1,))
    assert "already_released" in twice.stderr
    denied = admit(folder, "job-2", "nowhere", 1)
    assert denied == {"claim": "job-2", "verdict": "deny", "reason": "unknown_entitlement"}
    assert (folder / "ledger.cbor").stat().st_size > size  # only the one release was appended
    assert pool_json("ledger", "verify", str(folder / "ledger.cbor"))["length"] == 2


def test_a_broken_tree_names_file_node_and_field(tmp_path: Path) -> None:
    folder = tmp_path / "deploy"
    pool("init", str(folder), "--no-power-ceiling")  # releases of MJ a moment after admission
    config = folder / "pool.toml"
    config.write_text(
        config.read_text().replace("guarantee_devices = 4", "guarantee_devices = -4", 1)
    )
    out = pool("usage", str(folder), ok=(1,))
    assert (
        "pool.toml" in out.stderr and "language" in out.stderr and "guarantee_devices" in out.stderr
    )


def test_a_second_writer_is_refused_while_one_holds_the_ledger(tmp_path: Path) -> None:
    folder = tmp_path / "deploy"
    pool("init", str(folder), "--no-power-ceiling")  # releases of MJ a moment after admission
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from joulepool.stores.file import FileStore;"
            "s = FileStore(sys.argv[1]); print('held', flush=True); time.sleep(30)",
            str(folder / "ledger.cbor"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        # A second writer is refused; a reader is not (readers beside a writer).
        out = pool(
            "release", str(folder), "job-0", "--actual-uj", "1", "--grade", "HwShunt", ok=(1,)
        )
        assert "locked by another writer" in out.stderr
        assert (
            json.loads(pool("usage", str(folder), "--json").stdout)["read"]["writer_pid"]
            == holder.pid
        )
    finally:
        holder.kill()
        holder.wait()


def test_demo_walks_every_verdict_and_leaves_a_ledger_that_verifies(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    out = pool("demo", str(folder)).stdout
    for phrase in (
        "admitted",
        "queued (guarantee_exhausted_may_not_borrow)",
        "borrowed",
        "denied (devices_exceed_guarantee)",
        "denied (energy_exceeds_limit)",
        "queued (devices_held)",
        "ModelBased",
        "idle",
        "no_verdict (unobserved)",
        "undefined",
        "witnessed through",
        # DESIGN.md §3: a queued claim admits when the period renews, earned estimates stay.
        "when the period's guarantee renews",
        "still in force",
    ):
        assert phrase in " ".join(out.split()), phrase
    verify = pool_json("ledger", "verify", str(folder / "ledger.cbor"))
    assert verify["ok"] is True
    assert verify["attestation"] == "witnessed"
    assert verify["witnessed_through"] == verify["length"]


def test_human_output_prints_brackets_in_data_as_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from joulepool.cli.output import console, table

    screen = console()
    screen.print("install it: pip install 'joulepool[nvml]'")
    screen.print(table("t", ["name"], [["team[gpu]"]]))
    out = capsys.readouterr().out
    assert "'joulepool[nvml]'" in out
    assert "team[gpu]" in out
