from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from genrl_swarm.core import (
    Body,
    DataManager,
    GameState,
    Learner,
    Policy,
    RewardManager,
    Rollout,
    RoundRewards,
    StageInput,
    Task,
    Weights,
)

# Tiny random models are built once per machine into this cache (never the user's home cache).
os.environ.setdefault("GENRL_SWARM_CACHE", str(Path(__file__).parents[1] / ".pytest_cache" / "genrl_swarm"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Echo(Body, frozen=True, tag="echo"):
    """A test body: short strings the 'policy' produced."""

    outputs: tuple[str, ...]

    @property
    def num_samples(self) -> int:
        return len(self.outputs)


def echo(inp: StageInput, *outputs: str) -> Echo:
    return Echo(inp.task_id, inp.digest, outputs)


class RecordingGame(DataManager, RewardManager, Policy, Learner):
    """One object playing data, reward, policy and learner, logging every call the loop makes."""

    body_type = Echo

    def __init__(self, log: list[str], tasks: int = 2) -> None:
        self.log, self.tasks = log, tasks
        self.trained: list[RoundRewards] = []
        self.seen_inputs: list[StageInput] = []
        self.version = 0

    def round_tasks(self, round: int) -> list[Task]:
        self.log.append(f"tasks r{round}")
        return [Task.create(f"q{round}-{i}", answer="a", secret="only for scoring") for i in range(self.tasks)]

    def stage_inputs(self, state: GameState, stage: int) -> list[StageInput]:
        self.log.append(f"inputs s{stage}")
        return [t.input(stage, f"{t.prompt}@s{stage}") for t in state.tasks.values()]

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        self.log.append(f"act s{stage}")
        self.seen_inputs.extend(inputs)
        return [echo(i, "a", "b") for i in inputs]

    def texts(self, body: Body) -> tuple[str, ...]:
        assert isinstance(body, Echo)
        return body.outputs

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        return [1.0 if c == task.answer else 0.0 for c in rollout.texts]

    def train(self, state: GameState, rewards: RoundRewards) -> dict[str, float]:
        self.log.append("train " + ",".join(sorted({f"s{s.rollout.stage}" for s in rewards.scored})))
        self.trained.append(rewards)
        self.version += 1
        return {"loss": 0.0}

    def weights(self) -> Weights:
        return Weights(self.version, None)

    def load_weights(self, weights: Weights) -> None:
        self.version = weights.version

    def save(self, directory: Path) -> None:
        (directory / "w").write_text(str(self.version))

    def load(self, directory: Path) -> None:
        self.version = int((directory / "w").read_text())


@pytest.fixture
def bandit_recipe(tmp_path: Path):
    """The packaged bandit recipe, quiet and writing under tmp_path; pass more overrides."""
    from genrl_swarm.config import load_recipe

    def make(*overrides: str):
        base = [f"run.dir={tmp_path / 'run'}", "run.tensorboard=false", "run.console=false", "run.plot=false"]
        return load_recipe("bandit", [*base, *overrides])

    return make


class Stranger:
    """A peer outside the game loop that posts whatever a test tells it to on an in-memory
    board: the hostile peer of the trust tests. Its id embeds its own key (libp2p form)."""

    def __init__(self, swarm: Any, identity: Any = None, swarm_id: str = "genrl-swarm") -> None:
        from genrl_swarm.core.identity import Identity

        self.swarm, self.swarm_id = swarm, swarm_id
        self.identity = identity or Identity.generate()
        self.peer_id = self.identity.peer_id

    def commit(self, round: int, stage: int, payload: bytes, sender: str | None = None, **fields: Any) -> bytes:
        import hashlib

        from genrl_swarm.comm.codec import Commitment, encode_signed

        sender = sender or self.peer_id
        record = Commitment(self.swarm_id, round, stage, sender, hashlib.sha256(payload).digest(), len(payload))
        signed = encode_signed("commit", msgspec_replace(record, **fields), self.identity.sign)
        self.swarm.post(round, stage, "commit", self.peer_id, signed)
        return signed

    def reveal(self, round: int, stage: int, payload: bytes) -> None:
        self.swarm.post(round, stage, "reveal", self.peer_id, payload)

    def send(self, round: int, stage: int, bodies: Sequence[Body], envelope_sender: str | None = None) -> bytes:
        """Commit to and reveal an encoded envelope (claiming ``envelope_sender`` inside it)."""
        from genrl_swarm.comm.codec import Codec

        payload = Codec().encode(envelope_sender or self.peer_id, round, stage, bodies)
        self.commit(round, stage, payload)
        self.reveal(round, stage, payload)
        return payload


def msgspec_replace(struct: Any, **fields: Any) -> Any:
    import msgspec

    return msgspec.structs.replace(struct, **fields) if fields else struct


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
