"""Fixtures and session hooks only; the helpers tests import live in tests/helpers/."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import load, peak

# Tiny random models are built once per machine into this cache (never the user's home cache).
os.environ.setdefault("GENRL_SWARM_CACHE", str(Path(__file__).parents[1] / ".pytest_cache" / "genrl_swarm"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def cpu_hog() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Every core kept busy by another process for the whole test (tests/helpers/load.py)."""
    with load.cpu_hog() as hogs:
        yield hogs
    assert all(h.returncode is not None for h in hogs)


@pytest.fixture
def bandit_recipe(tmp_path: Path):
    """The packaged bandit recipe, quiet and writing under tmp_path; pass more overrides."""
    from genrl_swarm.config import load_recipe

    def make(*overrides: str):
        base = [f"run.dir={tmp_path / 'run'}", "run.tensorboard=false", "run.console=false", "run.plot=false"]
        return load_recipe("bandit", [*base, *overrides])

    return make


# --- No silent skips -------------------------------------------------------------------------
# On the reference machine every extra is installed, so a skipped test is a test that did not
# run. `.ci/run` sets GENRL_SWARM_NO_SKIPS=1: any skip then fails the session, naming the test
# and its reason.
_SKIPPED: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPPED.append(f"{report.nodeid}: {reason}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:  # a whole module skipped (importorskip at module level)
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPPED.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("GENRL_SWARM_NO_SKIPS") == "1" and _SKIPPED:
        print(f"\nGENRL_SWARM_NO_SKIPS=1 and {len(_SKIPPED)} test(s) skipped:", *_SKIPPED, sep="\n  ")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# --- Memory -------------------------------------------------------------------------------------
# The session's peak RSS and the tests that raised it, printed at the end (tests/helpers/peak.py).
def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    peak.after_test(nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    peak.report(terminalreporter)
