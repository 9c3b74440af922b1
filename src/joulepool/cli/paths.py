"""The paths a person types, checked before anything opens them ("papercuts").

A file where a folder is expected, a folder that is not there, an empty folder: each is
refused in one line naming the path and what was expected, never with a traceback.
"""

from __future__ import annotations

from pathlib import Path

from joulepool.errors import InvalidInput


def deployment_dir(text: str) -> Path:
    """`text` as a deployment folder (DESIGN.md §5): it exists, is a folder, holds pool.toml."""
    from joulepool.deployment.config import CONFIG

    path = Path(text)
    if not path.exists():
        raise InvalidInput(
            text, "no such folder; give a deployment folder (`pool init DIR` makes one)"
        )
    if not path.is_dir():
        raise InvalidInput(text, "is a file, not a deployment folder (`pool init DIR` makes one)")
    if not (path / CONFIG).is_file():
        raise InvalidInput(
            text,
            f"is a folder but not a deployment: it has no {CONFIG} (`pool init DIR` makes one)",
        )
    return path
