"""Test-session rules: under CI (JOULEPOOL_CI=1) a skipped test is a failure, except tests
that need hardware no CI machine has (marked `gpu`), which are listed instead."""

from __future__ import annotations

import os

import pytest

_skipped: list[tuple[str, str, bool]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        reason = (
            str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        )
        _skipped.append((report.nodeid, reason, "gpu" in report.keywords))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    gpu = [s for s in _skipped if s[2]]
    if gpu:
        terminalreporter.write_sep("-", f"{len(gpu)} test(s) need a GPU and did not run here")
        for nodeid, reason, _ in gpu:
            terminalreporter.write_line(f"GPU-ONLY {nodeid}: {reason}")
    if os.environ.get("JOULEPOOL_CI") == "1":
        others = [s for s in _skipped if not s[2]]
        if others:
            terminalreporter.write_sep("!", f"CI forbids skips: {len(others)} test(s) skipped")
            for nodeid, reason, _ in others:
                terminalreporter.write_line(f"SKIPPED IN CI {nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if os.environ.get("JOULEPOOL_CI") == "1" and any(not gpu for _, _, gpu in _skipped):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
