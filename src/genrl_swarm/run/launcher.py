"""From a recipe to running peers: check, build, resume, run, stop, report.

A process hosts one peer (torch.distributed, hivemind) or several (in-memory); each peer runs
in its own thread so the main thread stays free to turn Ctrl-C into an orderly stop. Each peer
gets its own components, seeds (``${peer.seed}``) and output directory.
"""

from __future__ import annotations

import functools
import gc
import logging
import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from omegaconf import DictConfig, OmegaConf

from genrl_swarm.comm.base import ByteBackend
from genrl_swarm.comm.errors import SwarmFailure
from genrl_swarm.comm.torchrun import under_torchrun
from genrl_swarm.config import (
    RecipeError,
    RunConfig,
    import_target,
    instantiate,
    resolve,
    validate,
)
from genrl_swarm.coord import keys
from genrl_swarm.core.game import GameConfig, GameManager, Hooks
from genrl_swarm.core.identity import IdentityError
from genrl_swarm.core.interfaces import Coordinator
from genrl_swarm.core.trust import TrustConfig
from genrl_swarm.core.types import RoundResult
from genrl_swarm.run.checkpoint import latest_checkpoint, load_checkpoint, write_atomic
from genrl_swarm.run.checkpointer import DATA_KEY, LEARNER, ROW_KEY, Checkpointer, parts
from genrl_swarm.run.console import ConsoleTable
from genrl_swarm.run.events import EventLog
from genrl_swarm.run.metrics import MetricsLogger
from genrl_swarm.run.plot import plot_rewards
from genrl_swarm.run.preflight import preflight
from genrl_swarm.run.rundir import RECIPE_FILE, Existing, RunDirLock
from genrl_swarm.run.stopping import StopSignals
from genrl_swarm.run.storage import is_storage
from genrl_swarm.run.threads import budget_for, settle

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    run_dir: Path
    results: dict[str, list[RoundResult]] = field(default_factory=dict)
    standings: dict[str, float] = field(default_factory=dict)
    plot: Path | None = None
    interrupted: bool = False
    stopped_by: signal.Signals | None = None  # SIGINT or SIGTERM, when a signal stopped the run


def build_managers(
    cfg: DictConfig, resume: bool = False, stream: TextIO | None = None, overwrite: bool = False
) -> tuple[list[GameManager], RunConfig]:
    """Check the whole recipe, then build one GameManager per peer hosted here, each holding
    the lock on its peer directory (a directory that holds a run needs ``resume`` or ``overwrite``)."""
    keys.take()  # the chain key out of the environment before any peer can start a child process
    spec = resolve(cfg, rank=0)
    recipe = validate(spec)
    game, swarm, run, trust = recipe.game, recipe.swarm, recipe.run, recipe.trust
    comm_cls = _transport(spec)
    _make_run_dir(run)
    try:  # torch threads for each peer hosted here
        peers_here = comm_cls.peers_in_process(swarm.num_peers)
        budget = budget_for(peers_here, run.threads)
    except ValueError as e:
        raise RecipeError(str(e)) from e
    preflight(spec, peers_here)  # a model that cannot load fails here, once, before any peer loads one
    comms = _spawn(comm_cls, swarm.num_peers, {k: v for k, v in spec["communication"].items() if k != "_target_"}, stream)
    coord_cls = import_target(spec["coordinator"]["_target_"], "coordinator._target_")
    shared = instantiate(spec["coordinator"], "coordinator") if getattr(coord_cls, "shared_per_process", True) else None
    rank = comms[0].rank if under_torchrun() else None  # one peer per torchrun rank
    table = None  # torchrun: rank 0 prints the swarm's table (every peer's reward as it scored it), the others none
    if run.console and not (rank or 0) > 0:
        table = ConsoleTable([c.peer_id for c in comms], game.max_rounds, stream, swarm=rank == 0)
    existing = Existing.OVERWRITE if overwrite else Existing.RESUME if resume else Existing.REFUSE
    managers: list[GameManager] = []
    try:
        for i, comm in enumerate(comms):
            rank = swarm.rank + i if comm.rank is None else comm.rank
            managers.append(_build_peer(cfg, comm, rank, game=game, trust=trust, run=run, shared=shared, table=table, existing=existing))
    except BaseException:  # a peer that cannot start: free what the others hold (directories, ports)
        for m in managers:
            _release(m)
        for comm in comms:
            comm.close()
        raise
    # Models, tokenizers and datasets are built and live for the whole run: moving them out of
    # the collector's reach keeps a full collection (triggered by decoding a peer's payload)
    # from rescanning hundreds of thousands of objects that can never be garbage.
    gc.freeze()
    settle(budget)  # logged and applied after the components: they are what imports torch, if anything does
    return managers, run


def _transport(spec: dict[str, Any]) -> type[ByteBackend]:
    """The recipe's communication class, checked: a ByteBackend, and one that can run here."""
    comm_cls = import_target(spec["communication"]["_target_"], "communication._target_")
    if not (isinstance(comm_cls, type) and issubclass(comm_cls, ByteBackend)):
        raise RecipeError("communication._target_: must name a ByteBackend subclass")
    if under_torchrun() and comm_cls.in_process:
        raise RecipeError(
            f"communication: {comm_cls.__name__} keeps the swarm inside one process, but this is a torchrun rank: pass communication=torch (scripts/train.sh does)"
        )
    return comm_cls


def _make_run_dir(run: RunConfig) -> None:
    try:
        Path(run.dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if is_storage(e):  # the disk's to fix, not the recipe's: a storage error (run/failures.py)
            raise
        raise RecipeError(f"run.dir: cannot create {run.dir}: {e.strerror or e}") from e


def _spawn(comm_cls: type[ByteBackend], num_peers: int, options: dict[str, Any], stream: TextIO | None) -> list[ByteBackend]:
    """The transports of the peers hosted here, each announced (how others join it)."""
    try:
        comms = comm_cls.spawn(comm_cls.peers_in_process(num_peers), **options)
    except IdentityError:  # the identity file, not the recipe: its message says what to do
        raise
    except (ValueError, TypeError) as e:  # a constructor's own check, e.g. max_bytes <= 0
        raise RecipeError(f"communication: {e}") from e
    for comm in comms:
        if (joining := comm.announce()) is not None:
            print(f"peer {comm.peer_id} is up; others join with: {joining}", file=stream, flush=True)
    return list(comms)


def _build_peer(
    cfg: DictConfig,
    comm: ByteBackend,
    rank: int,
    *,
    game: GameConfig,
    trust: TrustConfig,
    run: RunConfig,
    shared: Coordinator | None,
    table: ConsoleTable | None,
    existing: Existing,
) -> GameManager:
    directory = Path(run.dir) / comm.peer_id
    lock = RunDirLock(directory, existing)  # first: nothing below may touch a directory in use
    try:
        write_atomic(directory / RECIPE_FILE, OmegaConf.to_yaml(cfg))
        manager = _build_game(cfg, comm, rank, directory, game=game, trust=trust, run=run, shared=shared, resume=existing is Existing.RESUME)
    except BaseException:
        lock.release()
        raise
    if table is not None:
        table.attach(manager)
    manager.hooks.after_game.append(lock)  # last: the stop checkpoint is written while it is held
    return manager


def _build_game(
    cfg: DictConfig,
    comm: ByteBackend,
    rank: int,
    directory: Path,
    *,
    game: GameConfig,
    trust: TrustConfig,
    run: RunConfig,
    shared: Coordinator | None,
    resume: bool,
) -> GameManager:
    spec = resolve(cfg, rank)
    coordinator: Coordinator = shared or instantiate(spec["coordinator"], "coordinator")  # per peer: its own account
    data, reward, policy = (instantiate(spec[k], k) for k in ("data", "reward", "policy"))
    learner = instantiate(spec["learner"], "learner", policy=policy) if spec.get("learner") else None
    policy = learner.acting_policy(policy) if learner is not None else policy
    try:
        manager = GameManager(data, reward, policy, learner, comm, coordinator, game, Hooks(), trust=trust)
    except ValueError as e:  # a component that cannot serve this game (DataManager.attach's checks)
        raise RecipeError(f"data: {e}") from e
    comm.bind_run(directory, resume)  # its epoch (kept on --resume) and what it signed last per epoch (kept always)
    checkpoint = latest_checkpoint(directory / "checkpoints") if resume else None
    carried = None
    if checkpoint is not None:
        saved = load_checkpoint(checkpoint[1], parts(manager), optional={LEARNER})
        coordinator.register(comm.peer_id)
        coordinator.restore(comm.peer_id, float(saved.get("cumulative_reward", 0.0)), int(saved.get("wins", 0)))
        manager.start_round, carried = checkpoint[0] + 1, saved.get(ROW_KEY)
        try:
            manager.data.restore(saved.get(DATA_KEY) or {})
        except ValueError as e:
            raise RecipeError(f"{checkpoint[1]}: data: {e} (a checkpoint of another recipe? --overwrite starts over)") from e
        comm.resume_at(manager.start_round)  # the transport counts catch-up jumps from here, not round 0
        log.info(
            "%s resumes from %s at round %d (cumulative reward %.3f)",
            comm.peer_id,
            checkpoint[1],
            manager.start_round,
            saved.get("cumulative_reward", 0.0),
        )
    elif resume:
        log.info("%s: no checkpoint in %s, starting at round 0", comm.peer_id, directory / "checkpoints")
    # The checkpoint first: a peer killed between the two hooks then has the round's training
    # saved, and the checkpoint carries the round's row, so the resumed run writes it again.
    checkpointer = Checkpointer(
        directory / "checkpoints", run.checkpoint_every, run.keep_checkpoints, game.max_rounds, run.learner_state_in_latest_only
    )
    manager.hooks.after_round.append(checkpointer)
    game_name = str(spec.get("name") or "game")
    metrics = MetricsLogger(
        directory, run.loggers, tensorboard=run.tensorboard, start_round=manager.start_round, carried=carried, game=game_name, recipe=spec
    )
    manager.hooks.after_round.append(metrics)
    EventLog(directory, game=game_name).attach(manager)  # game, backend, stage progress, drop and quarantine reasons (the dashboard reads them)
    manager.hooks.after_game.append(checkpointer.on_stop)
    return manager


def run_managers(
    managers: Sequence[GameManager], stream: TextIO | None = None, keep_results: bool = True, signals: StopSignals | None = None
) -> dict[str, list[RoundResult]]:
    """Run each peer in a thread; Ctrl-C or SIGTERM asks every peer to stop (a second one exits
    at once; see ``stopping``). Re-raise a peer's error after the others stopped. With
    ``keep_results=False`` the results only stream to the hooks (bounded memory)."""
    results: dict[str, list[RoundResult]] = {}
    errors: dict[str, BaseException] = {}

    def play(m: GameManager) -> None:
        try:
            results[m.peer_id] = m.run(keep_results)
        except BaseException as e:  # noqa: BLE001 - re-raised below, after the other peers stop
            errors[m.peer_id] = e
            log.error("peer %s failed: %s", m.peer_id, e)
            for other in managers:  # one failed peer must not leave the others waiting on it
                other.stop()
        finally:
            m.comm.close()  # a dead peer leaves the swarm, so nobody waits on it
            _release(m)

    threads = [threading.Thread(target=play, args=(m,), name=m.peer_id, daemon=True) for m in managers]
    tables = list({id(h): h for m in managers for h in m.hooks.after_round if isinstance(h, ConsoleTable)}.values())
    with signals or StopSignals(functools.partial(stop_all, managers), stream):
        for table in tables:
            table.start()  # the progress line of a long round
        for t in threads:
            t.start()
        for t in threads:
            t.join()  # never interrupted: the signal handlers only set flags (CPython issue 90882)
        for table in tables:
            table.stop()
    if errors:
        peer, error = next(iter(errors.items()))
        if isinstance(error, (SwarmFailure, RecipeError)):
            raise error
        raise RuntimeError(f"peer {peer} failed: {type(error).__name__}: {error}") from error
    return results


def stop_all(managers: Sequence[GameManager]) -> None:
    """Ask every peer to stop after its round step (safe inside a signal handler: sets flags)."""
    for m in managers:
        m.stop()


def _release(m: GameManager) -> None:
    """Close what a peer holds open in its directory: the metrics writer, the directory's lock."""
    for hook in [*m.hooks.after_round, *m.hooks.after_game]:
        if isinstance(hook, MetricsLogger):
            hook.close()
        elif isinstance(hook, RunDirLock):
            hook.release()


def run_recipe(cfg: DictConfig, resume: bool = False, stream: TextIO | None = None, overwrite: bool = False, keep_results: bool = True) -> RunSummary:
    """Build and run the peers hosted here; returns once every one of them stopped and saved."""
    managers, run = build_managers(cfg, resume, stream, overwrite)
    signals = StopSignals(functools.partial(stop_all, managers), stream)
    results = run_managers(managers, stream, keep_results, signals)
    comm = managers[0].comm  # a ByteBackend: build_managers requires one
    first_rank = not isinstance(comm, ByteBackend) or comm.rank in (None, 0)  # under torchrun one rank draws, not all at once
    plot = plot_rewards(Path(run.dir)) if run.plot and first_rank else None
    interrupted = any(m.interrupted for m in managers)
    return RunSummary(Path(run.dir), results, dict(managers[0].coordinator.standings()), plot, interrupted, signals.received)
