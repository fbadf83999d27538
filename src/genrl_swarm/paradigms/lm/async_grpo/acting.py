"""WorkerPolicy: the game acts through the pipeline's rollout workers (``pipeline.act_on_workers``).

With it, the peer's own rollouts for each round, the ones it shares with the swarm, come from the
same replicas that fill the buffer, at the newest published weights, and the process running the
game loop never spends its CPU (or GPU) sampling for training. It keeps the local policy for what
must stay local: greedy evaluation, reading peers' bodies (``check``, ``texts``), checkpoints, and a
fallback when no worker answers in time (logged and counted, so a round is never lost).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from genrl_swarm.core import ActSeed, Body, Policy, Refusal, StageInput, TokenRollout, Weights
from genrl_swarm.paradigms.lm.policy import LMPolicy

if TYPE_CHECKING:
    from genrl_swarm.paradigms.lm.async_grpo.pipeline import AsyncPipeline

log = logging.getLogger(__name__)


class WorkerPolicy(Policy):
    body_type = TokenRollout

    def __init__(self, local: LMPolicy, pipe: AsyncPipeline) -> None:
        self.local, self.pipe = local, pipe
        self._stop = threading.Event()

    @property
    def fallbacks(self) -> int:
        """Rounds sampled locally because no worker answered (the pipeline counts them)."""
        return self.pipe.counters.act_failures

    @property
    def version(self) -> int:  # type: ignore[override]  # read-only here: the local policy's
        return self.local.version

    def begin_round(self, seed: ActSeed) -> None:
        """The round's draws are seeded alike on the worker and, where it falls back, here."""
        self.local.begin_round(seed)

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        """Training rollouts on a worker; greedy (evaluation) and worker-less pipelines act locally."""
        if greedy or not inputs or not self.pipe.workers:
            return self.local.act(inputs, stage, greedy)
        try:
            return [*self.pipe.act(list(inputs), self._stop, self.local.act_seed)]
        except RuntimeError as e:
            log.warning("async_grpo: %s; this peer samples the round itself", e)
            return self.local.act(inputs, stage)
        finally:
            self._stop.clear()

    def interrupt(self) -> None:
        self._stop.set()
        self.local.interrupt()

    def check(self, body: Body, input: StageInput) -> str | Refusal | None:
        return self.local.check(body, input)

    def texts(self, body: Body) -> tuple[str, ...]:
        return self.local.texts(body)

    def load_weights(self, weights: Weights) -> None:
        self.local.load_weights(weights)

    def save(self, directory: Path) -> None:
        self.local.save(directory)

    def load(self, directory: Path) -> None:
        self.local.load(directory)
