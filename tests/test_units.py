"""Energy typed with units: exact integer µJ from what people type, refusals that
name the figure, and one readable unit per column."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from joulepool.errors import InvalidInput
from joulepool.units import Column, column, energy_text, parse_energy


@pytest.mark.parametrize(
    ("text", "uj"),
    [
        ("4MJ", 4 * 10**12),
        ("2.5kWh", 9 * 10**12),
        ("750J", 750 * 10**6),
        ("123uj", 123),
        ("123µJ", 123),
        ("1 mJ", 1_000),
        ("0.000001J", 1),
        ("1_000 J", 10**9),
        ("4000000000000", 4 * 10**12),
        ("1Wh", 3_600 * 10**6),
        ("0.5GJ", 5 * 10**14),
    ],
)
def test_units_convert_exactly_to_integer_uj(text: str, uj: int) -> None:
    assert parse_energy(text, "--estimate") == uj


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("1.5uJ", "not a whole number"),
        ("0.0000001J", "not a whole number"),
        ("1e12", "not an energy"),
        ("-4MJ", "not an energy"),
        ("4 MJ extra", "not an energy"),
        ("4mj", "milli or mega"),
        ("4Mj", "milli or mega"),
        ("4 calories", "unknown unit"),
        ("", "not an energy"),
        ("1.", "not an energy"),
    ],
)
def test_an_energy_that_is_not_whole_uj_or_malformed_is_refused(text: str, says: str) -> None:
    with pytest.raises(InvalidInput, match=says) as info:
        parse_energy(text, "--estimate")
    assert "--estimate" in str(info.value)


@given(st.integers(min_value=0, max_value=10**24))
def test_every_uj_integer_spelled_in_joules_parses_back(uj: int) -> None:
    whole, rest = divmod(uj, 10**6)
    assert parse_energy(f"{whole}.{rest:06d}J", "x") == uj
    assert parse_energy(f"{uj}uJ", "x") == uj


def test_a_column_takes_one_unit_from_its_largest_figure() -> None:
    col = column([0, 50 * 10**12, 13_100_900_002_000])
    assert col == Column("MJ", 3)
    assert [col.show(v) for v in (0, 50 * 10**12, 13_100_900_002_000)] == [
        "0.000",
        "50.000",
        "13.101",
    ]
    assert column([5, 999_999]).unit == "J"
    assert column([2 * 10**15]).unit == "GJ"
    assert column([1], "uj").show(13_100_900_002_000) == "13,100,900,002,000"
    assert column([1], "j").show(13_100_900_002_000) == "13,100,900.002"
    assert column([1], "kwh").show(3_600 * 10**9) == "1.000000"
    assert column([1], "KWH") == column([1], "kWh") == Column("kWh", 6)
    assert column([1], "mj") == column([1], "MJ") == Column("MJ", 3)
    assert energy_text(4 * 10**12) == "4 MJ"
    assert energy_text(4 * 10**12 + 1) == "4.000 MJ (4,000,000,000,001 µJ)"


def test_pool_admit_takes_energies_with_units(tmp_path: object) -> None:
    folder = f"{tmp_path}/d"
    run = [sys.executable, "-m", "joulepool"]
    subprocess.run([*run, "init", folder], check=True, capture_output=True)
    r = subprocess.run(
        [
            *run,
            "admit",
            folder,
            "--id",
            "j1",
            "--entitlement",
            "vision",
            "--estimate",
            "2.5kWh",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert '"uj": 9000000000000' in r.stdout
    r = subprocess.run(
        [*run, "admit", folder, "--id", "j2", "--entitlement", "vision", "--estimate", "0.5uJ"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 2 and "not a whole number" in r.stderr and "Traceback" not in r.stderr


def test_a_figure_that_is_not_zero_never_shows_as_zero() -> None:
    col = column([50 * 10**12])
    assert col.show(1) == "<0.001" and col.show(0) == "0.000"
    assert col.show(499_999_999) == "<0.001"  # under half of the last place shown
    assert col.show(500_000_001) == "0.001"
    assert column([1], "kwh").show(1) == "<0.000001"


def test_a_display_unit_outside_the_list_is_refused_naming_the_list() -> None:
    with pytest.raises(InvalidInput, match="uJ, J, kJ, MJ, GJ, kWh"):
        column([1], "Wh")
