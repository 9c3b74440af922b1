"""The request shapes of the run-time routes (API.md "Run time"), for the OpenAPI schema.

As everywhere (`service/models.py`), the bodies are read by the standard's own readers
(`joulepool.live.parse_reading`, `parse_progress`), not by these models.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictInt, StrictStr

from joulepool.service.models import EnergyIn, Figure, Strict

Text = Annotated[StrictStr, Field(min_length=1, max_length=256)]


class JobIn(Strict):
    """Whose job the claim is, as the workload manager names it."""

    id: Text
    user: Text | None = None
    name: Text | None = None
    partition: Text | None = Field(
        default=None, description="where it runs or waits: preemption looks within one"
    )
    requeue: bool | None = Field(
        default=None, description="whether it may be requeued (Slurm's Requeue=1; default true)"
    )


class ReadingIn(Strict):
    """A meter reading: energy since the claim's start readings, at an instant (DESIGN.md §7)."""

    at_ms: Figure
    energy: EnergyIn
    every_ms: Annotated[StrictInt, Field(ge=1_000, le=3_600_000)] | None = Field(
        default=None, description="the sender's sample period; stale after two (default 30000)"
    )
    job: JobIn | None = None


class WaitingIn(Strict):
    """An admitted claim's job waits for resources (DESIGN.md §7): what preemption serves."""

    at_ms: Figure
    since_ms: Figure = Field(description="when it began to wait (its eligible time)")
    partition: Text
    gpus: Figure = Field(description="the GPUs it asks for, over all its nodes")
    every_ms: Annotated[StrictInt, Field(ge=1_000, le=3_600_000)] | None = Field(
        default=None, description="the sender's report period; stale after two (default 30000)"
    )
    job: JobIn | None = None


class ProgressIn(Strict):
    """Completed units so far, cumulative (§5.1)."""

    units: Figure
    unit: Text | None = Field(default=None, description='what a unit is (default "steps")')
    total: Figure | None = None
