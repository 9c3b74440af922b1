"""Session fixtures: the foreign COSE implementations, built once (see tools.py), or a skip
that names what to install (under CI, JOULEPOOL_CI=1, a skip fails the run)."""

from __future__ import annotations

import pytest

from tests.interop.tools import NodeCose, Pycose, Unavailable, node_cose, pycose


@pytest.fixture(scope="session")
def pycose_env() -> Pycose:
    try:
        return pycose()
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def node_env() -> NodeCose:
    try:
        return node_cose()
    except Unavailable as exc:
        pytest.skip(str(exc))
