"""docs/design.md §5's map of the package matches the tree: every path it names exists,
and every folder of the package and every module at its root is named (DESIGN.md §5:
"keep it true")."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "joulepool"


def map_block() -> str:
    text = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    section = text[text.index("## 5. Architecture") :]
    return section[section.index("```\n") + 4 : section.index("\n```", section.index("```\n") + 4)]


def named_in_map() -> set[str]:
    return set(re.findall(r"[\w/]+(?:\.py|/)", map_block()))


def test_design_s5_every_root_module_and_folder_of_the_package_is_on_the_map() -> None:
    named = named_in_map()
    missing = [
        p.name + ("/" if p.is_dir() else "")
        for p in sorted(PACKAGE.iterdir())
        if (p.suffix == ".py" and not p.name.startswith("__"))
        or (p.is_dir() and not p.name.startswith("__") and (p / "__init__.py").exists())
        if (p.name + ("/" if p.is_dir() else "")) not in named
    ]
    assert not missing, f"docs/design.md §5 does not name: {missing}"


def test_design_s5_every_module_the_where_to_look_sentence_names_exists() -> None:
    text = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    paragraph = text[text.index("Where to look first:") :].split("\n\n", 1)[0]
    paths = re.findall(r"`([\w/]+\.py)`", paragraph)
    assert len(paths) >= 5
    absent = [p for p in paths if not (PACKAGE / p).is_file()]
    assert not absent, f"named but absent: {absent}"
