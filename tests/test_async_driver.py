"""The pipeline driver's bookkeeping, Ray-free: the staleness gate counts only the workers' groups,
the published (version, weights) pair is read as one, a resume rolls workers back, and the
game's act has one deadline however many workers it tries.

Stand-ins replace the actors and ``ray.get``/``ray.wait`` here because these are rules of the
driver's own state; the real pipeline runs on Ray in test_async_pipeline.py and test_async_game.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

pytest.importorskip("torch")
import torch

pytest.importorskip("ray")

import genrl_swarm.paradigms.lm.async_grpo.pipeline as pipeline_module  # noqa: E402
import genrl_swarm.paradigms.lm.async_grpo.worker as worker_module  # noqa: E402
from genrl_swarm.core import TokenRollout, TokenSample  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.buffer import Group, RolloutBuffer  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.config import PipelineConfig  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.pipeline import AsyncPipeline  # noqa: E402
from genrl_swarm.paradigms.lm.async_grpo.weight_sync import export_state  # noqa: E402

pytestmark = pytest.mark.slow  # a Ray cluster


class Ref:
    """Stands for an ObjectRef: ``ray.get`` (patched) returns ``value``."""

    def __init__(self, value: Any = None) -> None:
        self.value = value


class Method:
    def remote(self, *args: Any, **kwargs: Any) -> Ref:
        return Ref()


class Actor:
    def __getattr__(self, name: str) -> Method:
        return Method()


def _group(version: int, source: str) -> Group:
    body = TokenRollout("t", "d", (1, 2), (TokenSample((3,), (-0.1,), "stop"), TokenSample((4,), (-0.2,), "stop")), version, "fp")
    return Group(body, (0.0, 1.0), version, source, not source.startswith("worker-") and source != "peer")


def _pipe(workers: int, max_staleness: int = 0, batch_groups: int = 2, timeout: float = 120.0) -> AsyncPipeline:
    cfg = PipelineConfig(num_workers=workers, max_staleness=max_staleness, batch_groups=batch_groups, timeout=timeout)
    pipe = AsyncPipeline(cfg, Actor(), [Actor() for _ in range(workers)], RolloutBuffer(cfg.buffer_capacity, max_staleness), 2, 2)
    pipe._idle = list(range(workers))
    return pipe


def _in_flight(pipe: AsyncPipeline) -> int:
    return sum(f.groups for f in pipe._flights.values())


def test_swarm_groups_dropped_as_stale_do_not_open_the_gate() -> None:
    """AReaL's bound counts the workers' groups: the swarm's and the game's own, dropped as
    stale, never held a place, so dropping them must not let workers start more draws."""
    pipe = _pipe(workers=4)
    pipe._dispatch()
    assert _in_flight(pipe) == 2  # (0 updates + 0 + 1) x 2 groups
    pipe.version = 5
    pipe.put([_group(3, "peerB") for _ in range(10)] + [_group(3, "peer")])
    pipe._maybe_train()
    assert pipe.buffer.stats.dropped == 11 and pipe._train is None
    pipe._dispatch()
    assert _in_flight(pipe) == 2, "stale swarm groups opened the gate"


def test_worker_groups_dropped_as_stale_free_their_places() -> None:
    pipe = _pipe(workers=2)
    pipe._dispatch()
    (ref,) = list(pipe._flights)
    pipe._flights.pop(ref)
    pipe._idle.append(0)
    pipe.buffer.put([_group(0, "worker-0"), _group(0, "worker-0")])  # the generation came back at version 0 ...
    pipe.version = 2  # ... and the learner moved on (the swarm's groups trained it)
    pipe._maybe_train()
    assert pipe.buffer.worker_lost == 2 and pipe._train is None
    pipe._dispatch()
    assert _in_flight(pipe) == 2, "dropped worker groups kept their places"


def test_buffer_counts_worker_groups_that_leave_untrained() -> None:
    buffer = RolloutBuffer(capacity=3, max_staleness=0)
    buffer.put([_group(0, "worker-1"), _group(1, "peerB"), _group(2, "worker-0"), _group(3, "worker-0")])  # evicts version 0
    assert (buffer.evicted, buffer.worker_lost) == (1, 1)
    assert buffer.clear() == 3 and buffer.worker_lost == 3 and len(buffer) == 0


def test_weights_reads_the_version_and_the_tensors_as_one_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver publishes the version and the weights under the lock; a game thread reading
    between the two assignments must not get the new version on the old tensors."""
    monkeypatch.setattr(pipeline_module.ray, "get", lambda ref, timeout=None: ref.value)
    paused, go = threading.Event(), threading.Event()

    class Paused(AsyncPipeline):
        def __setattr__(self, name: str, value: Any) -> None:
            if name == "_box" and getattr(self, "pause_box", False):
                paused.set()
                go.wait(5)
            object.__setattr__(self, name, value)

    pipe = Paused(PipelineConfig(num_workers=0, batch_groups=1), Actor(), [], RolloutBuffer(8, 0), 1, 1)
    pipe._published, pipe._box, pipe.version = 1, [Ref("weights 1")], 1
    pipe._train, pipe._state = Ref({"async/version": 2.0}), Ref("weights 2")
    pipe.pause_box = True  # type: ignore[attr-defined]
    driver = threading.Thread(target=pipe._finish_update, args=(None,))
    driver.start()
    assert paused.wait(5)
    seen: list[tuple[int, Any]] = []
    reader = threading.Thread(target=lambda: seen.append(pipe.weights()))
    reader.start()
    reader.join(0.3)
    go.set()
    driver.join(5)
    reader.join(5)
    assert seen in ([(1, "weights 1")], [(2, "weights 2")]), seen


def test_a_worker_loads_republished_weights_older_than_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resume republishes the checkpoint's version, older than what a worker that ran before
    the resume holds: it must load them, not keep sampling with the un-restored weights."""
    from genrl_swarm.paradigms.lm.policy import LMPolicy

    monkeypatch.setattr(worker_module, "fetch", lambda box, timeout: box[0])
    worker = object.__new__(worker_module.RolloutWorker)
    worker.policy, worker.timeout = LMPolicy("tiny-random", {"num_generations": 2, "max_new_tokens": 4}, seed=0), 1.0
    worker.policy.version = 3
    restored = LMPolicy("tiny-random", {"num_generations": 2, "max_new_tokens": 4}, seed=0)
    with torch.no_grad():
        for p in restored.model.parameters():
            p.add_(0.01)
    worker._catch_up(2, [export_state(restored.model)])
    assert worker.policy.version == 2
    assert all(torch.equal(a, b) for a, b in zip(worker.policy.model.parameters(), restored.model.parameters(), strict=True))


def test_act_tries_every_worker_within_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """pipeline.timeout bounds the whole act, not each worker tried (8 silent workers would
    otherwise hold a round for 8 timeouts)."""
    monkeypatch.setattr(pipeline_module.ray, "wait", lambda refs, timeout=None, **kw: (time.sleep(min(timeout or 0, 0.05)), ([], refs))[1])
    monkeypatch.setattr(pipeline_module.ray, "cancel", lambda ref: None)
    pipe = _pipe(workers=4, timeout=0.4)
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="no rollout worker sampled the round"):
        pipe.act([])
    assert time.perf_counter() - start < 0.8
    assert pipe.counters.act_failures == 1


def test_settle_finishes_generations_in_flight_and_trains_on_none_of_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resume settles first: what workers sampled before it (in flight or buffered) is counted
    and dropped, never trained on, and the staleness gate counts afresh from there."""
    from genrl_swarm.paradigms.lm.async_grpo.worker import StepResult

    pipe = _pipe(workers=2, max_staleness=1)
    pipe._dispatch()
    assert len(pipe._flights) == 2
    results = {ref: StepResult(f.worker, f.draw, (_group(0, f"worker-{f.worker}"), _group(0, f"worker-{f.worker}")), 0.1, 0)
               for ref, f in pipe._flights.items()}  # fmt: skip
    monkeypatch.setattr(pipeline_module.ray, "wait", lambda refs, num_returns=1, timeout=None: (refs[:1], refs[1:]))
    monkeypatch.setattr(pipeline_module.ray, "get", lambda ref, timeout=None: results[ref])
    assert pipe.settle() == 4
    assert not pipe._flights and len(pipe.buffer) == 0 and pipe.counters.groups == 4
    assert pipe.buffer.take(1, pipe.version) is None
    assert pipe._gate() and sorted(pipe._idle) == [0, 1]
