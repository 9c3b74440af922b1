"""`pool completion bash|zsh` and `pool man`: shell completion and manual pages, both written
from the one argparse parser (`cli.build_parser`), so neither can list a command or a flag
the command line does not have (docs/operations.md "Completion and manual pages")."""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from joulepool import __version__


@dataclass
class Command:
    """One command of the tree: its words after `pool`, its help, its parser, its options,
    the choices of its options, and its subcommands."""

    path: tuple[str, ...]
    help: str
    parser: argparse.ArgumentParser
    options: list[str] = field(default_factory=list)
    choices: dict[str, list[str]] = field(default_factory=dict)
    values: list[str] = field(default_factory=list)
    """The choices of its positional arguments (`bash` and `zsh` of `pool completion`)."""
    subcommands: list[Command] = field(default_factory=list)


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = (), words: str = ""
) -> Command:
    """The command tree under `parser`, in the order the parser declares it."""
    node = Command(path, words or (parser.description or ""), parser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:
                    continue  # an alias
                seen.add(id(sub))
                node.subcommands.append(commands(sub, (*path, name), helps.get(name, "")))
        elif not action.option_strings and action.choices is not None:
            node.values.extend(str(c) for c in action.choices)
        elif action.option_strings and action.help is not argparse.SUPPRESS:
            node.options.extend(action.option_strings)
            if action.choices is not None:
                for flag in action.option_strings:
                    node.choices[flag] = [str(c) for c in action.choices]
    return node


def walk(node: Command) -> list[Command]:
    """`node` and every command under it, depth first."""
    out = [node]
    for sub in node.subcommands:
        out.extend(walk(sub))
    return out


def bash_script(root: Command) -> str:
    """A bash completion function for `pool`: subcommands, then flags, the choices of a flag
    that has them, and file names for everything else (a deployment folder, a ledger)."""
    cases = []
    for node in walk(root):
        key = " ".join(node.path)
        words = " ".join([s.path[-1] for s in node.subcommands] + node.values + node.options)
        flags = "".join(
            f"            {shlex.quote(flag)}) COMPREPLY=($(compgen -W {shlex.quote(' '.join(c))} "
            '-- "$cur")); return;;\n'
            for flag, c in node.choices.items()
        )
        cases.append(
            f"        {shlex.quote(key)})\n"
            f'            case "$prev" in\n{flags}            esac\n'
            f"            words={shlex.quote(words)};;\n"
        )
    return (
        f"# bash completion for pool (joulepool {__version__}), made by `pool completion bash`.\n"
        "# Install: pool completion bash > /etc/bash_completion.d/pool  (or source it)\n"
        "_pool() {\n"
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"\n'
        '    local path="" word i words=""\n'
        "    # The command so far: the words after `pool` that name subcommands.\n"
        "    for ((i = 1; i < COMP_CWORD; i++)); do\n"
        '        word="${COMP_WORDS[i]}"\n'
        '        [[ "$word" == -* ]] && continue\n'
        '        if _pool_is_command "${path:+$path }$word"; then path="${path:+$path }$word"; fi\n'
        "    done\n"
        '    case "$path" in\n' + "".join(cases) + "    esac\n"
        '    if [[ "$cur" == -* || -z "$cur" ]] && [[ -n "$words" ]]; then\n'
        '        COMPREPLY=($(compgen -W "$words" -- "$cur"))\n'
        '        [[ -n "$cur" || ${#COMPREPLY[@]} -gt 0 ]] && return\n'
        "    fi\n"
        '    COMPREPLY=($(compgen -W "$words" -- "$cur") $(compgen -f -- "$cur"))\n'
        "}\n"
        "_pool_is_command() {\n"
        '    case "$1" in\n'
        + "".join(f"        {shlex.quote(' '.join(n.path))}) return 0;;\n" for n in walk(root)[1:])
        + "    esac\n"
        "    return 1\n"
        "}\n"
        "complete -o filenames -F _pool pool\n"
    )


def zsh_script(root: Command) -> str:
    """zsh completion: the bash function through zsh's bashcompinit, one source of truth."""
    return (
        f"#compdef pool\n# zsh completion for pool (joulepool {__version__}), made by "
        '`pool completion zsh`.\n# Install: pool completion zsh > "${fpath[1]}/_pool", or '
        "source it from ~/.zshrc\nautoload -U +X bashcompinit && bashcompinit\n" + bash_script(root)
    )


def _roff(text: str) -> str:
    """Text safe in a roff line: backslashes and hyphens escaped, a leading dot or quote too."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    # Beyond ASCII (×, µ, Σ) as groff's named code points: raw, troff reads bytes.
    text = "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in text)
    return "\\&" + text if text[:1] in {".", "'"} else text


def man_page(node: Command, root: Command) -> str:
    """A section 1 manual page for one top-level command (or `pool` itself): its usage, its
    help, and each subcommand's, from argparse's own help text."""
    name = "-".join(("pool", *node.path))
    # No date in the page: the same code writes the same page, so docs/man can be checked.
    lines = [
        f'.TH {name.upper()} 1 "" "joulepool {__version__}" "joulepool manual"',
        ".SH NAME",
        f"{_roff(name)} \\- {_roff(node.help.splitlines()[0] if node.help else name)}",
    ]
    for sub in walk(node):
        if sub is not node:
            lines.append(f".SH {_roff(' '.join(('pool', *sub.path)).upper())}")
            lines.append(_roff(sub.help) if sub.help else "")
        else:
            lines.append(".SH SYNOPSIS")
        lines.append(".nf")
        lines.extend(_roff(line) for line in sub.parser.format_help().rstrip().splitlines())
        lines.append(".fi")
    if node is root:
        lines.append(".SH COMMANDS")
        for sub in root.subcommands:
            lines.append(f".TP\n.B {_roff(' '.join(('pool', *sub.path)))}\n{_roff(sub.help)}")
            lines.append(f"See \\fB{_roff('-'.join(('pool', *sub.path)))}\\fR(1).")
    lines.append(".SH SEE ALSO\nThe project's README.md, docs/api.md and docs/operations.md.")
    return "\n".join(lines) + "\n"


def man_pages(root: Command) -> dict[str, str]:
    """`pool.1` and one page a top-level command, `pool-<command>.1`, by file name."""
    pages = {"pool.1": man_page(root, root)}
    for sub in root.subcommands:
        pages[f"pool-{sub.path[-1]}.1"] = man_page(sub, root)
    return pages


def _tree() -> Command:
    from joulepool.cli import build_parser

    return commands(build_parser())


def _completion(args: argparse.Namespace) -> int:
    root = _tree()
    sys.stdout.write(bash_script(root) if args.shell == "bash" else zsh_script(root))
    return 0


def _man(args: argparse.Namespace) -> int:
    import os

    # argparse wraps help to the terminal's width: a fixed one makes the same pages anywhere.
    os.environ["COLUMNS"] = "80"
    pages = man_pages(_tree())
    if args.output is None:
        sys.stdout.write(pages["pool.1"])
        return 0
    folder = Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (folder / name).write_text(text, encoding="utf-8")
    print(f"wrote {len(pages)} manual pages to {folder}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pool completion` and `pool man`."""
    p = sub.add_parser("completion", help="print shell completion for pool (bash or zsh)")
    p.add_argument("shell", choices=("bash", "zsh"))
    p.set_defaults(handler=_completion)
    p = sub.add_parser("man", help="write manual pages made from this command line's own help")
    p.add_argument(
        "--output",
        metavar="DIR",
        help="write pool.1 and pool-<command>.1 into DIR (docs/man in the repository); "
        "without it, print pool.1",
    )
    p.set_defaults(handler=_man)
