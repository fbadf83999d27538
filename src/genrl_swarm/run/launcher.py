"""From a recipe to running peers: check, build, resume, run, stop, report.

A process hosts one peer (torch.distributed, hivemind) or several (in-memory); each peer runs
in its own thread so the main thread stays free to turn Ctrl-C into an orderly stop. Each peer
gets its own components, seeds (``${peer.seed}``) and output directory.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from omegaconf import DictConfig

from genrl_swarm.comm.base import ByteBackend
from genrl_swarm.comm.errors import SwarmFailure
from genrl_swarm.comm.torch_dist import under_torchrun
from genrl_swarm.config import (
    RecipeError,
    RunConfig,
    SwarmConfig,
    import_target,
    instantiate,
    peers_in_process,
    resolve,
    section,
    validate,
)
from genrl_swarm.core.game import GameConfig, GameManager, Hooks
from genrl_swarm.core.interfaces import Communication, Coordinator
from genrl_swarm.core.trust import TrustConfig
from genrl_swarm.core.types import RoundResult
from genrl_swarm.run.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from genrl_swarm.run.console import ConsoleTable
from genrl_swarm.run.events import EventLog
from genrl_swarm.run.metrics import MetricsLogger
from genrl_swarm.run.plot import plot_rewards

log = logging.getLogger(__name__)


@dataclass
class Checkpointer:
    """``after_round`` hook: save policy, learner and the peer's books every ``every`` rounds
    and after the last one."""

    directory: Path
    every: int
    keep: int
    max_rounds: int

    def __call__(self, manager: GameManager, result: RoundResult) -> None:
        last = result.round == self.max_rounds - 1
        if last or (self.every > 0 and (result.round + 1) % self.every == 0):
            save_checkpoint(self.directory, result.round, parts(manager), books(manager), self.keep)

    def on_stop(self, manager: GameManager, results: list[RoundResult]) -> None:
        """``after_game`` hook: a run stopped by Ctrl-C saves its last finished round, so
        ``--resume`` continues from where it stopped."""
        if manager.interrupted and results and manager.config.mode != "evaluate":
            save_checkpoint(self.directory, results[-1].round, parts(manager), books(manager), self.keep)


def parts(manager: GameManager) -> dict[str, Any]:
    return {"policy": manager.policy} | ({"learner": manager.learner} if manager.learner is not None else {})


def books(manager: GameManager) -> dict[str, Any]:
    reward, wins = manager.coordinator.tally(manager.peer_id)
    return {"peer": manager.peer_id, "cumulative_reward": reward, "wins": wins}


@dataclass
class RunSummary:
    run_dir: Path
    results: dict[str, list[RoundResult]] = field(default_factory=dict)
    standings: dict[str, float] = field(default_factory=dict)
    plot: Path | None = None
    interrupted: bool = False


def build_managers(cfg: DictConfig, resume: bool = False, stream: TextIO | None = None) -> tuple[list[GameManager], RunConfig]:
    """Check the whole recipe, then build one GameManager per peer hosted here."""
    spec = resolve(cfg, rank=0)
    validate(spec)
    game: GameConfig = section(GameConfig, spec["game"], "game")
    swarm: SwarmConfig = section(SwarmConfig, spec["swarm"], "swarm")
    run: RunConfig = section(RunConfig, spec["run"], "run")
    trust: TrustConfig = section(TrustConfig, spec["trust"], "trust")
    comm_cls = import_target(spec["communication"]["_target_"], "communication._target_")
    if not (isinstance(comm_cls, type) and issubclass(comm_cls, ByteBackend)):
        raise RecipeError("communication._target_: must name a ByteBackend subclass")
    if under_torchrun() and comm_cls.in_process:
        raise RecipeError(f"communication: {comm_cls.__name__} keeps the swarm inside one process, but this is a torchrun rank: pass communication=torch (scripts/train.sh does)")
    comm_kwargs = {k: v for k, v in spec["communication"].items() if k != "_target_"}
    try:
        Path(run.dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RecipeError(f"run.dir: cannot create {run.dir}: {e.strerror or e}") from e
    try:
        comms = comm_cls.spawn(peers_in_process(comm_cls, swarm.num_peers), **comm_kwargs)
    except (ValueError, TypeError) as e:  # a constructor's own check, e.g. max_bytes <= 0
        raise RecipeError(f"communication: {e}") from e
    for comm in comms:
        if hasattr(comm, "visible_maddrs"):
            print(f"peer {comm.peer_id} is up; others join with: --initial-peers {comm.visible_maddrs()[0]}", file=stream, flush=True)
    coord_cls = import_target(spec["coordinator"]["_target_"], "coordinator._target_")
    shared = instantiate(spec["coordinator"], "coordinator") if getattr(coord_cls, "shared_per_process", True) else None
    table = ConsoleTable([c.peer_id for c in comms], game.max_rounds, stream) if run.console else None
    managers = []
    for i, comm in enumerate(comms):
        rank = getattr(comm, "rank", swarm.rank + i)
        managers.append(_build_peer(cfg, comm, rank, game=game, trust=trust, run=run, shared=shared, table=table, resume=resume))
    # Models, tokenizers and datasets are built and live for the whole run: moving them out of
    # the collector's reach keeps a full collection (triggered by decoding a peer's payload)
    # from rescanning hundreds of thousands of objects that can never be garbage.
    gc.freeze()
    return managers, run


def _build_peer(
    cfg: DictConfig,
    comm: Communication,
    rank: int,
    *,
    game: GameConfig,
    trust: TrustConfig,
    run: RunConfig,
    shared: Coordinator | None,
    table: ConsoleTable | None,
    resume: bool,
) -> GameManager:
    spec = resolve(cfg, rank)
    coordinator: Coordinator = shared or instantiate(spec["coordinator"], "coordinator")  # per peer: its own account
    directory = Path(run.dir) / comm.peer_id
    data, reward, policy = (instantiate(spec[k], k) for k in ("data", "reward", "policy"))
    learner = instantiate(spec["learner"], "learner", policy=policy) if spec.get("learner") else None
    policy = learner.acting_policy(policy) if learner is not None else policy
    manager = GameManager(data, reward, policy, learner, comm, coordinator, game, Hooks(), trust=trust)
    checkpoint = latest_checkpoint(directory / "checkpoints") if resume else None
    if checkpoint is not None:
        saved = load_checkpoint(checkpoint[1], parts(manager))
        coordinator.register(comm.peer_id)
        coordinator.restore(comm.peer_id, float(saved.get("cumulative_reward", 0.0)), int(saved.get("wins", 0)))
        manager.start_round = checkpoint[0] + 1
        if hasattr(comm, "resume_at"):  # the transport counts catch-up jumps from here, not round 0
            comm.resume_at(manager.start_round)
        log.info("%s resumes from %s at round %d (cumulative reward %.3f)", comm.peer_id, checkpoint[1], manager.start_round, saved.get("cumulative_reward", 0.0))
    elif resume:
        log.info("%s: no checkpoint in %s, starting at round 0", comm.peer_id, directory / "checkpoints")
    # The checkpoint first: a peer killed between the two hooks then has the round's training
    # saved and replays at most its metrics row, never loses a round of work.
    checkpointer = Checkpointer(directory / "checkpoints", run.checkpoint_every, run.keep_checkpoints, game.max_rounds)
    manager.hooks.after_round.append(checkpointer)
    manager.hooks.after_round.append(MetricsLogger(directory, run.tensorboard, start_round=manager.start_round))
    EventLog(directory).attach(manager)  # backend, stage progress, drop and quarantine reasons (the dashboard reads them)
    manager.hooks.after_game.append(checkpointer.on_stop)
    if table is not None:
        manager.hooks.after_round.append(table)
    return manager


def run_managers(managers: Sequence[GameManager], stream: TextIO | None = None) -> dict[str, list[RoundResult]]:
    """Run each peer in a thread; Ctrl-C asks every peer to stop (a second one exits at once).
    Re-raise a peer's error after the others stopped."""
    results: dict[str, list[RoundResult]] = {}
    errors: dict[str, BaseException] = {}

    def play(m: GameManager) -> None:
        try:
            results[m.peer_id] = m.run()
        except BaseException as e:  # noqa: BLE001 - re-raised below, after the other peers stop
            errors[m.peer_id] = e
            log.error("peer %s failed: %s", m.peer_id, e)
            for other in managers:  # one failed peer must not leave the others waiting on it
                other.stop()
        finally:
            m.comm.close()  # a dead peer leaves the swarm, so nobody waits on it
            for hook in m.hooks.after_round:
                if isinstance(hook, MetricsLogger):
                    hook.close()

    threads = [threading.Thread(target=play, args=(m,), name=m.peer_id, daemon=True) for m in managers]
    for t in threads:
        t.start()
    try:
        _join(threads)
    except KeyboardInterrupt:
        print("\ninterrupted: stopping every peer (press Ctrl-C again to quit at once)", file=stream or sys.stderr, flush=True)
        for m in managers:
            m.stop()
        try:
            _join(threads)
        except KeyboardInterrupt:
            print("quit without waiting for the peers", file=stream or sys.stderr, flush=True)
            os._exit(130)
    if errors:
        peer, error = next(iter(errors.items()))
        if isinstance(error, (SwarmFailure, RecipeError)):
            raise error
        raise RuntimeError(f"peer {peer} failed: {type(error).__name__}: {error}") from error
    return results


def _join(threads: Sequence[threading.Thread]) -> None:
    """Join with a short timeout so the main thread sees KeyboardInterrupt promptly."""
    for t in threads:
        while t.is_alive():
            t.join(0.2)


def run_recipe(cfg: DictConfig, resume: bool = False, stream: TextIO | None = None) -> RunSummary:
    managers, run = build_managers(cfg, resume, stream)
    results = run_managers(managers, stream)
    first_rank = getattr(managers[0].comm, "rank", 0) == 0  # under torchrun one rank draws, not all at once
    plot = plot_rewards(Path(run.dir)) if run.plot and first_rank else None
    interrupted = any(m.interrupted for m in managers)
    return RunSummary(Path(run.dir), results, dict(managers[0].coordinator.standings()), plot, interrupted)
