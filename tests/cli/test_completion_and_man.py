"""`pool completion bash|zsh` and `pool man`, made from the argparse parser itself: every
command and subcommand appears in both; the bash function completes in a real bash; groff
reads every page `pool man` writes (`make man` writes them to docs/man) without a warning."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from joulepool.cli import build_parser
from joulepool.cli.completion_cmd import commands, walk
from tests.support.servers import pool_cli


def every_command() -> list[tuple[str, ...]]:
    return [node.path for node in walk(commands(build_parser()))[1:]]


def test_the_command_tree_holds_every_subcommand_and_nested_one() -> None:
    paths = every_command()
    for expected in [("usage",), ("report",), ("serve",), ("ledger", "verify"), ("token", "add"),
                     ("completion",), ("man",), ("slurm", "agent")]:  # fmt: skip
        assert expected in paths


def complete(script: Path, *words: str) -> list[str]:
    """What bash's `_pool` offers for `words` (the last one being completed)."""
    quoted = " ".join(f"'{w}'" for w in words)
    run = subprocess.run(
        ["bash", "-c", f'source {script}; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; '
         '_pool; printf "%s\\n" "${COMPREPLY[@]}"'],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip
    assert run.returncode == 0 and run.stderr == "", run.stderr
    return run.stdout.split()


def test_bash_completion_offers_every_subcommand_flag_and_choice(tmp_path: Path) -> None:
    made = pool_cli("completion", "bash")
    assert made.returncode == 0, made.stderr
    script = tmp_path / "pool.bash"
    script.write_text(made.stdout, encoding="utf-8")
    for path in every_command():
        parent, last = path[:-1], path[-1]
        assert last in complete(script, "pool", *parent, ""), path
    assert complete(script, "pool", "us") == ["usage"]
    assert "--units" in complete(script, "pool", "usage", "/srv/pool", "--u")
    assert complete(script, "pool", "report", "d", "--by", "") == ["entitlement", "class"]
    assert complete(script, "pool", "completion", "")[:2] == ["bash", "zsh"]
    (tmp_path / "deploy").mkdir()
    assert str(tmp_path / "deploy") in complete(script, "pool", "usage", str(tmp_path / "dep"))


def test_zsh_completion_is_the_same_function_through_bashcompinit() -> None:
    made = pool_cli("completion", "zsh")
    assert made.returncode == 0 and made.stdout.startswith("#compdef pool\n")
    assert "bashcompinit" in made.stdout and "complete -o filenames -F _pool pool" in made.stdout
    bad = pool_cli("completion", "fish")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pages `pool man --output DIR` writes, as `make man` runs it."""
    folder = tmp_path_factory.mktemp("man")
    made = pool_cli("man", "--output", str(folder))
    assert made.returncode == 0, made.stderr
    return folder


def test_pool_man_writes_a_page_a_command_naming_every_subcommand(pages: Path) -> None:
    written = {p.name: p.read_text(encoding="utf-8") for p in pages.iterdir()}
    top = {path[0] for path in every_command()}
    assert set(written) == {"pool.1", *(f"pool-{name}.1" for name in top)}
    for path in every_command():
        page = written[f"pool-{path[0]}.1"]
        assert " ".join(path).replace("-", "\\-") in page, path
    assert all("pool\\-" + name.replace("-", "\\-") in written["pool.1"] for name in top)
    again = pool_cli("man")  # without --output: pool.1 on stdout, the same page
    assert again.returncode == 0 and again.stdout == written["pool.1"]


def test_groff_reads_every_page_without_a_warning(pages: Path) -> None:
    groff = shutil.which("groff")
    if groff is None:
        pytest.skip("groff not installed (Debian package groff-base)")
    for page in sorted(pages.iterdir()):
        run = subprocess.run([groff, "-man", "-ww", "-z", str(page)], capture_output=True,
                             text=True, check=False, timeout=60)  # fmt: skip
        assert run.returncode == 0 and run.stderr == "", (page.name, run.stderr)
