"""What one client may cost `pool serve`, and their defaults (docs/reliability.md).

Kept apart from the middleware and the protocol that enforce them, so the command line
can show the defaults without importing the web stack.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may cost the service; the defaults are `pool serve`'s (API.md)."""

    max_body_bytes: int = 1_048_576
    body_timeout_s: float = 30.0


RESERVED_DESCRIPTORS = 128
"""Descriptors kept for the ledger, PostgreSQL, logs and threads, beyond connections."""


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The bounds on connections; the defaults are `pool serve`'s (docs/reliability.md)."""

    max_connections: int = 4096
    header_timeout_s: float = 10.0
    max_header_bytes: int = 65_536


def raise_descriptor_limit() -> int:
    """Raise this process's open-file limit to its hard limit; return the limit now in force.

    A server that accepts connections needs descriptors for them; the soft limit (often
    1,024) is a default for interactive shells, not a decision about this service.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 1_048_576 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # the limit stays; `connection_cap` sizes the cap to it
    return int(soft)


def connection_cap(wanted: int, descriptors: int) -> int:
    """The connection cap that fits the descriptor limit, leaving some for everything else."""
    return max(1, min(wanted, descriptors - RESERVED_DESCRIPTORS))
