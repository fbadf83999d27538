"""``make demo``: a swarm trains on a recipe (default ``reasoning_gym/digits``) and prints greedy
held-out accuracy and format before training and every ``game.eval_every`` rounds.

Why a module and not ``genrl-swarm run``: the run's console shows training reward, which moves
with sampling luck and format bonuses; the question a demo should answer is whether the peers
got better on problems they never saw, measured from where they started.

It keeps ``genrl-swarm run``'s promises (docs/operations.md): a line says what it is doing from
the first second (loading a model and the first evaluation take minutes on a CPU); Ctrl-C or
SIGTERM stops every peer after its round step, each saves a checkpoint, and it exits 130 / 143;
an error is one line with its documented status. It reports an accuracy after training only for
an evaluation that every peer finished: a stop before one says that none was measured.

    python -m genrl_swarm.games.reasoning_gym.demo [--recipe R] [hydra overrides ...]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the first line prints before torch and the launcher load
    from genrl_swarm.games.reasoning_gym.heldout import HeldOutEval


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--recipe", default="reasoning_gym/digits")
    p.add_argument("overrides", nargs="*")
    a = p.parse_args(argv)
    # Warnings and errors as log records, as genrl-swarm prints them; its INFO notes would crowd the demo's lines.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(f"demo: {a.recipe}: loading the recipe and the libraries", flush=True)  # torch's import alone takes seconds
    from genrl_swarm.run.failures import command  # the run's rules, after the first line

    return command(lambda: _demo(a.recipe, a.overrides), after_storage="what was saved is intact")


def _demo(recipe: str, overrides: list[str]) -> int:
    import functools
    from pathlib import Path

    from genrl_swarm.config import load_recipe
    from genrl_swarm.games.reasoning_gym.heldout import HeldOutEval
    from genrl_swarm.run.launcher import build_managers, run_managers, stop_all
    from genrl_swarm.run.plot import plot_rewards
    from genrl_swarm.run.stopping import StopSignals, exit_status

    # The held-out hook below evaluates; the game's own evaluation would repeat the work.
    cfg = load_recipe(recipe, [*overrides, "game.mode=train"])
    began = time.monotonic()
    print(f"demo: building {cfg.swarm.num_peers} peers, each loading {cfg.policy.get('model', 'its model')}", flush=True)
    managers, run = build_managers(cfg, overwrite=True)  # a demo measures from the start, every time
    game = managers[0].config
    heldout = HeldOutEval(every=game.eval_every, max_rounds=game.max_rounds, peers=len(managers), stream=sys.stdout)
    n = len(managers[0].data.eval_tasks())
    print(f"demo: peers ready in {time.monotonic() - began:.0f} s; held-out evaluation before training ({n} problems, greedy)", flush=True)
    start = heldout.before(managers[0])  # every peer starts from the same weights
    print(
        f"held-out before training (greedy, {n} problems never served in a round): accuracy {start.accuracy:.3f}, format {start.format:.3f}",
        flush=True,
    )
    for m in managers:
        m.hooks.after_round.insert(0, heldout)  # first: its scores join the round's row (checkpoint, metrics.jsonl, trackers)
    signals = StopSignals(functools.partial(stop_all, managers))
    run_managers(managers, signals=signals)
    plot = plot_rewards(Path(run.dir)) if run.plot else None
    report(heldout, n, len(managers))
    print(f"logs: {run.dir}/<peer>/metrics.jsonl" + (f", reward curve: {plot}" if plot else ""))
    if signals.received is not None:
        print(f"stopped ({signals.received.name}): every peer saved its last finished round in {run.dir}/<peer>/checkpoints", file=sys.stderr)
        return exit_status(signals.received)
    return 0


def report(heldout: HeldOutEval, n: int, peers: int) -> None:
    """The held-out table and the change it shows, from evaluations every peer finished only."""
    points = heldout.table()
    if len(points) < 2:  # the evaluation before training alone: training changed nothing measured
        print(
            f"\nheld-out accuracy after training: not measured (stopped before the first evaluation, due after {heldout.every or heldout.max_rounds} rounds)"
        )
        return
    print(f"\nheld-out accuracy (greedy, {n} problems), mean over {peers} peers:")
    print(f"{'rounds trained':>15}{'accuracy':>10}{'format':>8}")
    for rounds, acc, fmt in points:
        print(f"{rounds:>15}{acc:>10.3f}{fmt:>8.3f}")
    (_, first, _), (rounds, last, _) = points[0], points[-1]
    print(f"accuracy {first:.3f} -> {last:.3f} ({last - first:+.3f}) after {rounds} rounds")


if __name__ == "__main__":
    sys.exit(main())
