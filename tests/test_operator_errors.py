"""Errors that name their cause: a bad identity file is an identity error (not a "recipe error"),
a listen port another p2pd holds is named at once (p2pd shares ports: SO_REUSEPORT), and a crash
below Python prints where every thread was."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest

from genrl_swarm import cli
from genrl_swarm.comm.errors import SwarmFailure
from genrl_swarm.games.bandit import SoftmaxPolicy
from test_operator_stop import QUIET, Cli


class SegfaultingPolicy(SoftmaxPolicy):
    """The bandit policy, crashing below Python (a read of address 0) when it acts."""

    def act(self, inputs: Any, stage: int, greedy: bool = False) -> Any:
        return ctypes.string_at(0)


def test_a_bad_identity_file_is_an_identity_error_not_a_recipe_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("hivemind")
    key = tmp_path / "peer.key"
    key.write_bytes(b"not a key")
    code = cli.main(["swarm", "--identity", str(key), "--recipe", "bandit", f"run.dir={tmp_path / 'run'}", *QUIET])
    (line,) = capsys.readouterr().err.splitlines()[-1:]
    assert code == 2 and line.startswith("genrl-swarm: identity error: identity file") and "recipe" not in line, line


def test_a_port_another_p2pd_holds_is_named() -> None:
    pytest.importorskip("hivemind")
    from genrl_swarm.comm.hivemind.dht import HivemindBackend

    first = HivemindBackend(host_maddrs=["/ip4/127.0.0.1/tcp/0"])
    try:
        taken = first.visible_maddrs()[0].split("/p2p/")[0]
        with pytest.raises(SwarmFailure, match=f"port in use: cannot listen on {taken}: another process"):
            HivemindBackend(host_maddrs=[taken])
    finally:
        first.close()


@pytest.mark.slow
def test_a_native_crash_prints_every_threads_stack(tmp_path: Path) -> None:
    args = ["run", "--recipe", "bandit", f"run.dir={tmp_path / 'run'}", "swarm.num_peers=2", *QUIET]
    policy = ["policy._target_=test_operator_errors.SegfaultingPolicy"]
    peer = Cli(tmp_path, "peer", [*args, *policy], env={"PYTHONFAULTHANDLER": ""})  # not the interpreter's own switch
    assert peer.wait() == -11, peer.text()[-3000:]
    text = peer.text()
    assert "Fatal Python error: Segmentation fault" in text and "in act" in text, text[-3000:]
