"""From a recipe to running peers: check, build, resume, run, report.

A process hosts one peer (torch.distributed, hivemind) or several in threads (in-memory).
Each peer gets its own components, seeds (``${peer.seed}``) and output directory.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from omegaconf import DictConfig

from genrl_swarm.comm.base import ByteBackend
from genrl_swarm.comm.errors import SwarmFailure
from genrl_swarm.comm.torch_dist import TorchBackend, under_torchrun
from genrl_swarm.config import (
    RecipeError,
    RunConfig,
    SwarmConfig,
    import_target,
    instantiate,
    resolve,
    section_obj,
    validate,
)
from genrl_swarm.core.game import GameConfig, GameManager, Hooks
from genrl_swarm.core.interfaces import Communication, Coordinator
from genrl_swarm.core.types import RoundResult
from genrl_swarm.run.checkpoint import latest_checkpoint, save_checkpoint
from genrl_swarm.run.console import ConsoleTable
from genrl_swarm.run.metrics import MetricsLogger
from genrl_swarm.run.plot import plot_rewards

log = logging.getLogger(__name__)



@dataclass
class Checkpointer:
    """``after_round`` hook: save every ``every`` rounds and after the last one."""

    directory: Path
    every: int
    keep: int
    max_rounds: int

    def __call__(self, manager: GameManager, result: RoundResult) -> None:
        last = result.round == self.max_rounds - 1
        if last or (self.every > 0 and (result.round + 1) % self.every == 0):
            save_checkpoint(self.directory, result.round, manager.trainer, {"peer": result.peer_id}, self.keep)


@dataclass
class RunSummary:
    run_dir: Path
    results: dict[str, list[RoundResult]] = field(default_factory=dict)
    standings: dict[str, float] = field(default_factory=dict)
    plot: Path | None = None


def build_managers(cfg: DictConfig, resume: bool = False, stream: TextIO | None = None) -> tuple[list[GameManager], RunConfig]:
    """Check the whole recipe, then build one GameManager per peer hosted here."""
    spec = resolve(cfg, rank=0)
    validate(spec)
    game: GameConfig = section_obj(GameConfig, spec["game"], "game")
    swarm: SwarmConfig = section_obj(SwarmConfig, spec["swarm"], "swarm")
    run: RunConfig = section_obj(RunConfig, spec["run"], "run")
    comm_cls = import_target(spec["communication"]["_target_"], "communication")
    if under_torchrun() and getattr(comm_cls, "in_process", False):
        log.info("torchrun environment detected: using the torch.distributed backend, one peer per rank")
        kept = {k: v for k, v in spec["communication"].items() if k == "max_bytes"}
        spec["communication"], swarm.num_peers, comm_cls = {"_target_": "genrl_swarm.comm.torch_dist.TorchBackend", **kept}, 1, TorchBackend
    if not (isinstance(comm_cls, type) and issubclass(comm_cls, ByteBackend)):
        raise RecipeError("communication._target_: must name a ByteBackend subclass")
    comm_kwargs = instantiate({k: v for k, v in spec["communication"].items() if k != "_target_"})
    comms = comm_cls.spawn(swarm.num_peers, **comm_kwargs)
    for comm in comms:
        if hasattr(comm, "visible_maddrs"):
            print(f"peer {comm.peer_id} is up; others join with: --initial-peers {comm.visible_maddrs()[0]}", file=stream, flush=True)
    coord_cls = import_target(spec["coordinator"]["_target_"], "coordinator")
    shared = instantiate(spec["coordinator"]) if getattr(coord_cls, "shared_per_process", True) else None
    table = ConsoleTable([c.peer_id for c in comms], game.max_rounds, stream) if run.console else None
    managers = []
    for i, comm in enumerate(comms):
        managers.append(_build_peer(cfg, comm, getattr(comm, "rank", swarm.rank + i), game, run, shared, table, resume))
    return managers, run


def _build_peer(
    cfg: DictConfig,
    comm: Communication,
    rank: int,
    game: GameConfig,
    run: RunConfig,
    shared: Coordinator | None,
    table: ConsoleTable | None,
    resume: bool,
) -> GameManager:
    spec = resolve(cfg, rank)
    coordinator: Coordinator = shared or instantiate(spec["coordinator"])  # per peer: its own account
    directory = Path(run.dir) / comm.peer_id
    data, reward, trainer = (instantiate(spec[k]) for k in ("data", "reward", "trainer"))
    start = 0
    checkpoint = latest_checkpoint(directory / "checkpoints") if resume else None
    if checkpoint is not None:
        trainer.load(checkpoint[1])
        start = checkpoint[0] + 1
        log.info("%s resumes from %s at round %d", comm.peer_id, checkpoint[1], start)
    elif resume:
        log.info("%s: no checkpoint in %s, starting at round 0", comm.peer_id, directory / "checkpoints")
    hooks = Hooks()
    hooks.after_round.append(MetricsLogger(directory, run.tensorboard))
    hooks.after_round.append(Checkpointer(directory / "checkpoints", run.checkpoint_every, run.keep_checkpoints, game.max_rounds))
    if table is not None:
        hooks.after_round.append(table)
    return GameManager(data, reward, trainer, comm, coordinator, game, hooks, start_round=start)


def run_managers(managers: Sequence[GameManager]) -> dict[str, list[RoundResult]]:
    """Run the peers of this process (threads when there are several); re-raise a peer's error."""
    results: dict[str, list[RoundResult]] = {}
    errors: dict[str, BaseException] = {}

    def play(m: GameManager) -> None:
        try:
            results[m.peer_id] = m.run()
        except BaseException as e:  # noqa: BLE001 - re-raised below, after the other peers stop
            errors[m.peer_id] = e
            log.error("peer %s failed: %s", m.peer_id, e)
        finally:
            m.comm.close()  # a dead peer leaves the swarm, so nobody waits on it
            for hook in m.hooks.after_round:
                if isinstance(hook, MetricsLogger):
                    hook.close()

    if len(managers) == 1:
        play(managers[0])
    else:
        threads = [threading.Thread(target=play, args=(m,), name=m.peer_id) for m in managers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        peer, error = next(iter(errors.items()))
        if isinstance(error, SwarmFailure):
            raise error
        raise RuntimeError(f"peer {peer} failed: {error}") from error
    return results


def run_recipe(cfg: DictConfig, resume: bool = False, stream: TextIO | None = None) -> RunSummary:
    managers, run = build_managers(cfg, resume, stream)
    results = run_managers(managers)
    first_rank = getattr(managers[0].comm, "rank", 0) == 0  # under torchrun one rank draws, not all at once
    plot = plot_rewards(Path(run.dir)) if run.plot and first_rank else None
    return RunSummary(Path(run.dir), results, dict(managers[0].coordinator.standings()), plot)

