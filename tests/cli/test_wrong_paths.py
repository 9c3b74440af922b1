"""Every command refuses a wrong path (a file where a folder is
expected, a folder that is not there, an empty folder) in one line naming it, with no
traceback; every option's help shows its default; exit codes are documented."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from joulepool.cli import build_parser, main

# Positionals and options that name a path; every other required one gets a plain value.
VALUES = {
    "id": "x",
    "claim": "x",
    "class_": "c",
    "name": "x",
    "entitlement": "vision",
    "actual_uj": "1J",
    "total_uj": "1J",
    "grade": "HwShunt",
    "scope": "operator",
    "kid": "k",
    "url": "http://127.0.0.1:9",
}
# Commands that make what they are given (a missing folder is where they create it).
CREATORS = {("init",), ("demo",), ("keys", "new"), ("ledger", "export"), ("keys", "public")}
EXTRA = [
    ["simulate", "--data-dir", "PATH", "--out", "PATH-out"],
    ["simulate", "--trace-dir", "PATH", "--out", "PATH-out"],
    ["slurm", "agent", "--once", "--config", "PATH"],
    ["slurm", "check-config", "--config", "PATH"],
    ["serve", "PATH", "--tokens", "PATH"],
]


def leaves(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from leaves(sub, (*prefix, name))
            return
    yield prefix, parser


def argv_for(command: tuple[str, ...], parser: argparse.ArgumentParser, path: str) -> list[str]:
    argv = list(command)
    for action in parser._actions:
        if action.option_strings or action.dest in {"help"}:
            continue
        argv.append(VALUES.get(action.dest, path))
    for action in parser._actions:
        if action.option_strings and action.required:
            argv += [action.option_strings[0], VALUES.get(action.dest, path)]
    return argv


def commands() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    return [(c, p) for c, p in leaves(build_parser()) if c not in {("exec",), ("meter", "list")}]


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "a-file").write_text("not a folder\n")
    (tmp_path / "empty").mkdir()
    return {
        "file": str(tmp_path / "a-file"),
        "missing": str(tmp_path / "missing"),
        "empty": str(tmp_path / "empty"),
    }


@pytest.mark.parametrize("kind", ["file", "missing", "empty"])
def test_every_command_refuses_a_wrong_path_in_one_line(
    kind: str, places: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = places[kind]
    cases = [argv_for(c, p, path) for c, p in commands() if not (kind != "file" and c in CREATORS)]
    cases += [[a.replace("PATH", path) for a in argv] for argv in EXTRA]
    walked = 0
    for argv in cases:
        if path not in argv:
            continue
        walked += 1
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own refusals: usage and one line
            code = exc.code if isinstance(exc.code, int) else 2
        err = capsys.readouterr().err
        assert "Traceback" not in err, argv
        if code not in {0, 3}:
            assert err.strip(), (argv, "a refusal with nothing on stderr")
            last = err.strip().splitlines()[-1]
            assert last.startswith(("pool", "usage")), (argv, err)
    assert walked >= 20


def test_deployment_commands_name_the_path_and_what_was_expected(
    places: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    for verb in (["usage"], ["claims"], ["estimate"], ["serve"], ["token", "add"]):
        for kind, says in (
            ("file", "is a file, not a deployment folder"),
            ("missing", "no such folder"),
            ("empty", "has no pool.toml"),
        ):
            argv = [*verb, places[kind]] + (["--scope", "operator"] if verb[0] == "token" else [])
            assert main(argv) == 1
            err = capsys.readouterr().err.strip()
            assert len(err.splitlines()) == 1 and places[kind] in err and says in err, err


def test_help_shows_every_default_and_the_exit_codes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: no hyphen splits a default
    with pytest.raises(SystemExit):
        main(["--help"])
    top = capsys.readouterr().out
    assert "0 admit" in top and "3 queue" in top and "4 deny" in top
    missing = []
    for command, parser in commands():
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            if not action.option_strings or action.default in (None, False, [], argparse.SUPPRESS):
                continue
            if action.required:
                continue
            default = action.default
            said = [str(default), str(int(default)) if isinstance(default, float) else ""]
            written = "(default:" in (action.help or "")  # spelled by hand: `500GJ`
            if not written and not any(f"default: {d}" in text for d in said if d):
                missing.append(f"{' '.join(command)} {action.option_strings[0]}")
    assert missing == []
