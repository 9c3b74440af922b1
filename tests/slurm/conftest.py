"""Fixtures the Slurm bridge's tests share."""

from __future__ import annotations

import pwd

import pytest


@pytest.fixture
def slurm_user() -> str:
    """The `slurm` user the installed scripts run as, or a skip naming the package."""
    try:
        pwd.getpwnam("slurm")
    except KeyError:
        pytest.skip("no 'slurm' user: apt-get install slurm-wlm")
    return "slurm"
