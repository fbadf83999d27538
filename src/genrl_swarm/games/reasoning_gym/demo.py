"""``make demo``: a swarm trains on a recipe (default ``reasoning_gym/digits``) and prints greedy
held-out accuracy and format before training and every ``game.eval_every`` rounds.

Why a module and not ``genrl-swarm run``: the run's console shows training reward, which moves
with sampling luck and format bonuses; the question a demo should answer is whether the peers
got better on problems they never saw, measured from where they started.

    python -m genrl_swarm.games.reasoning_gym.demo [--recipe R] [hydra overrides ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from genrl_swarm.config import RecipeError, load_recipe
from genrl_swarm.games.reasoning_gym.heldout import HeldOutEval
from genrl_swarm.run.launcher import build_managers, run_managers
from genrl_swarm.run.plot import plot_rewards
from genrl_swarm.run.rundir import RunDirError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default="reasoning_gym/digits")
    p.add_argument("overrides", nargs="*")
    a = p.parse_args(argv)
    try:
        # The held-out hook below evaluates; the game's own evaluation would repeat the work.
        cfg = load_recipe(a.recipe, [*a.overrides, "game.mode=train"])
        managers, run = build_managers(cfg, overwrite=True)  # a demo measures from the start, every time
    except RecipeError as e:
        print(f"genrl-swarm: recipe error: {e}", file=sys.stderr)
        return 2
    except RunDirError as e:
        print(f"genrl-swarm: run directory error: {e}", file=sys.stderr)
        return 2
    game = managers[0].config
    heldout = HeldOutEval(every=game.eval_every, max_rounds=game.max_rounds, peers=len(managers), stream=sys.stdout)
    start = heldout.before(managers[0])  # every peer starts from the same weights
    n = start.n
    print(
        f"held-out before training (greedy, {n} problems never served in a round): accuracy {start.accuracy:.3f}, format {start.format:.3f}",
        flush=True,
    )
    for m in managers:
        m.hooks.after_round.append(heldout)
    run_managers(managers)
    plot = plot_rewards(Path(run.dir)) if run.plot else None
    print(f"\nheld-out accuracy (greedy, {n} problems), mean over {len(managers)} peers:")
    print(f"{'rounds trained':>15}{'accuracy':>10}{'format':>8}")
    for rounds, acc, fmt in heldout.table():
        print(f"{rounds:>15}{acc:>10.3f}{fmt:>8.3f}")
    final = heldout.table()[-1][1]
    print(f"accuracy {start.accuracy:.3f} -> {final:.3f} ({final - start.accuracy:+.3f}); logs: {run.dir}/<peer>/metrics.jsonl"
          + (f", reward curve: {plot}" if plot else ""))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
