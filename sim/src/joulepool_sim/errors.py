"""What `pool simulate` refuses: a trace or data file that is missing or malformed.

Every refusal names the file, and where it can the line and field, so a bad input is one
sentence on the command line rather than a traceback (DESIGN.md §5, CLI conventions).
"""

from __future__ import annotations

from pathlib import Path

from joulepool.errors import PoolError


class SimulationInputError(PoolError):
    """An input of the simulation is missing, unreadable or breaks its format."""

    code = "simulation_input"

    def __init__(self, where: Path | str, detail: str, line: int | None = None) -> None:
        at = f"{where}:{line}" if line is not None else str(where)
        super().__init__(f"{at}: {detail}")
        self.where = str(where)
        self.line = line


class SimulationConfigError(PoolError):
    """A simulation setting (a flag) that cannot describe a cluster."""

    code = "simulation_config"
