"""A `genrl-swarm swarm` process, as an operator starts one: the launcher path end to end, with
the tests' helpers importable by Hydra target (``PYTHONPATH=tests``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

TESTS = Path(__file__).parents[1]
# p2pd and the DHT start beside a CPU hog: these tests are about rounds, not start-up speed.
QUIET = ["run.tensorboard=false", "run.plot=false", "run.console=false", "communication.startup_timeout=120"]


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.1)


class SwarmPeer:
    """One peer process: ``args`` after ``swarm --identity <tmp>/<identity or name>.key``."""

    def __init__(self, tmp: Path, name: str, args: list[str], initial: str | None = None, identity: str | None = None) -> None:
        self.out = tmp / f"{name}.out"
        cmd = [sys.executable, "-m", "genrl_swarm.cli", "swarm", "--identity", str(tmp / f"{identity or name}.key")]
        cmd += [*(["--initial-peers", initial] if initial else []), *args]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
        with self.out.open("w") as sink:
            self.proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, text=True, env=env)

    def text(self) -> str:
        return self.out.read_text() if self.out.exists() else ""

    def maddr(self, deadline: float = 120) -> str:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            for line in self.text().splitlines():
                if "others join with: --initial-peers " in line:
                    return line.rsplit(" ", 1)[1]
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"peer did not come up:\n{self.text()[-2000:]}")

    @property
    def peer_id(self) -> str:
        return self.maddr().rsplit("/", 1)[1]

    def wait(self, timeout: float = 120) -> int:
        """Its exit status once it ends by itself (killed after ``timeout``)."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"peer still running after {timeout:.0f}s:\n{self.text()[-3000:]}") from None

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (if still running) and its exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"peer still running {timeout:.0f}s after SIGTERM:\n{self.text()[-3000:]}") from None
