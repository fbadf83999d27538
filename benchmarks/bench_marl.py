"""IPPO and MAPPO in JAX on Jumanji: speed, learning, and the swarm against isolated peers.

1. Speed: environment steps per second of the compiled trainer (Mava's loop: rollout of 128
   steps, 4 epochs x 2 minibatches, all in one ``lax.scan``) for IPPO and MAPPO on LBF
   ``2s-8x8-2p-2f-coop`` and RWARE ``tiny-2ag`` with 16 and 64 environments; compile time apart.
2. Learning: IPPO on LBF ``2s-8x8-2p-2f-coop`` (16 environments, Mava's defaults), evaluation
   return (32 sampled episodes, as Mava evaluates) against environment steps, up to 1M steps.
3. The swarm: 2 peers playing the ``marl`` game, sharing replay-verified trajectories, sharing
   parameters, or isolated, at equal environment steps per peer.
4. Start-up (``--parts startup``): ``genrl-swarm run --recipe marl`` to the end of its first
   round (imports, setup, compiles, one collect + replay + update), in a fresh process with an
   empty JAX compilation cache, then again with the cache the first filled; pairs back to back,
   wall and CPU seconds, and the cache's hits and writes.
5. Side by side with Mava (``--parts mava``): Mava 57c8e64's ff_ippo/ff_mappo in its own
   environment (``benchmarks/mava/README.md``; ``benchmarks/mava/run_mava.sh``) and ours,
   alternating run by run at equal settings (32 environments, rollout 128, 4 epochs, 2
   minibatches): steady environment steps/s, each Mava run the median of its evaluation
   intervals after the first (2 updates each), each of ours the median of ``--calls`` timed
   calls of 2 updates. Mava at its fastest here: jax 0.6.2 (``MAVA_VENV``; the newest its
   dependencies import with) and 2 CPU devices (``--mava-devices``).

The other parts measure compilation, so they run with the persistent cache off.

    python benchmarks/bench_marl.py                      # everything (~20 min on 2 CPU cores)
    python benchmarks/bench_marl.py --parts speed --updates 5 --envs 16
    python benchmarks/bench_marl.py --parts startup --pairs 3
    MAVA_VENV=/work/mava-env-newjax python benchmarks/bench_marl.py --parts mava --repeats 2
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from common import machine, table

from genrl_swarm.config import load_recipe
from genrl_swarm.paradigms.marl.config import EnvConfig, Scenario, SystemConfig
from genrl_swarm.paradigms.marl.report import eval_curves
from genrl_swarm.paradigms.marl.team import Team
from genrl_swarm.run.launcher import run_recipe

LBF = EnvConfig(scenario=Scenario("2s-8x8-2p-2f-coop", "lbf", {"grid_size": 8, "fov": 2, "num_agents": 2, "num_food": 2, "max_agent_level": 2, "force_coop": True}),
                time_limit=100, kwargs={"normalize_reward": True, "penalty": 0.0})  # fmt: skip
RWARE = EnvConfig(env_name="RobotWarehouse-v0", time_limit=500, scenario=Scenario("tiny-2ag", "rware", {
    "shelf_rows": 1, "shelf_columns": 3, "column_height": 8, "num_agents": 2, "sensor_range": 1, "request_queue_size": 2}))  # fmt: skip
#: Mava's measurements on this machine class (issue 12): steps/s range, compile s range.
MAVA = {("ippo", "LBF"): "10-12k", ("ippo", "RWARE"): "6.5-8.4k", ("mappo", "LBF"): "~12k", ("mappo", "RWARE"): "n/a"}


def speed(system: str, env: EnvConfig, num_envs: int, updates: int, calls: int = 1) -> dict[str, float]:
    """Compile seconds and steady-state environment steps/s of ``updates`` updates in one call
    (the median of ``calls`` calls)."""
    team = Team(env, SystemConfig(name=system, num_envs=num_envs))  # a fresh Team: nothing cached
    start = time.perf_counter()
    runner = team.start(jax.random.PRNGKey(0))
    compiled = team.learn.lower(runner, num_updates=updates).compile()
    compile_s = time.perf_counter() - start
    runner, metrics = compiled(runner)  # first run: warms caches and allocations
    jax.block_until_ready(metrics)
    rates = []
    for _ in range(calls):
        start = time.perf_counter()
        runner, metrics = compiled(runner)
        jax.block_until_ready(metrics)
        rates.append(updates * num_envs * team.system.rollout_length / (time.perf_counter() - start))
    return {"compile_s": compile_s, "steps_per_s": statistics.median(rates)}


MAVA_SCRIPT = Path(__file__).parent / "mava" / "run_mava.sh"
#: (system, scenario name, ours, run_mava.sh's scenario) compared side by side.
SIDE_BY_SIDE = (("ippo", "LBF", LBF, "lbf"), ("mappo", "LBF", LBF, "lbf"), ("ippo", "RWARE", RWARE, "rware"))


def mava(system: str, scenario: str, total_steps: int, devices: int) -> float:
    """Mava's steady steps/s (``run_mava.sh``: 32 environments, one update per 4,096 steps, an
    evaluation every 2 updates; the median over the intervals after the first). With ``devices``
    > 1 JAX shows Mava that many CPU devices and each runs 32 / devices environments (Mava's
    ``num_envs`` is per device): its fastest configuration here."""
    env = {**os.environ, "TOTAL": str(total_steps), "NUM_EVAL": str(total_steps // (INTERVAL_UPDATES * 4096)), "NUM_ENVS": str(32 // devices)}
    inherited = re.sub(r"--xla_force_host_platform_device_count=\S+", "", env.get("XLA_FLAGS", ""))  # ours, set at import
    env["XLA_FLAGS"] = f"{inherited} --xla_force_host_platform_device_count={devices}".strip()
    done = subprocess.run(["bash", str(MAVA_SCRIPT), scenario, f"ff_{system}"], env=env, capture_output=True, text=True, timeout=3600)
    found = re.search(r"steady_steps_per_s_median=(\d+)", done.stdout)
    if done.returncode or not found:
        raise SystemExit(f"Mava's run failed ({MAVA_SCRIPT} {scenario} ff_{system}): {(done.stderr or done.stdout)[-2000:]}")
    return float(found[1])


#: Updates in one of Mava's evaluation intervals here (8,192 steps of 32 environments x 128): the
#: work each side times per call, so per-call overheads weigh the same on both.
INTERVAL_UPDATES = 2


def side_by_side(repeats: int, calls: int, mava_steps: int, mava_devices: int) -> list[list[Any]]:
    """Ours and Mava's, alternating run by run, ``repeats`` times: one row per (system, scenario)
    with each side's median [range] and the ratio of the medians."""
    ours: dict[tuple[str, str], list[float]] = {}
    theirs: dict[tuple[str, str], list[float]] = {}
    for r in range(repeats):
        for system, name, env, scenario in SIDE_BY_SIDE:
            ours.setdefault((system, name), []).append(speed(system, env, 32, INTERVAL_UPDATES, calls)["steps_per_s"])
            theirs.setdefault((system, name), []).append(mava(system, scenario, mava_steps, mava_devices))
            print(
                f"   repeat {r} {system} {name}: ours {ours[system, name][-1]:,.0f}, Mava {theirs[system, name][-1]:,.0f} steps/s, load {os.getloadavg()[0]:.2f}",
                flush=True,
            )

    def cell(xs: list[float]) -> str:
        return f"{statistics.median(xs):,.0f} [{min(xs):,.0f}-{max(xs):,.0f}]"

    return [
        [
            system.upper(),
            name,
            cell(ours[system, name]),
            cell(theirs[system, name]),
            f"{statistics.median(ours[system, name]) / statistics.median(theirs[system, name]):.2f}x",
        ]
        for system, name, _, _ in SIDE_BY_SIDE
    ]


def learning(total_steps: int, evals: int, episodes: int) -> list[tuple[int, float, float]]:
    """(environment steps, mean, std of evaluation return) of IPPO on LBF with Mava's defaults."""
    team = Team(LBF, SystemConfig(name="ippo", num_envs=16))
    per_update = 16 * 128
    chunk = max(1, total_steps // per_update // evals)
    runner, rows, key = team.start(jax.random.PRNGKey(0)), [], jax.random.PRNGKey(7)
    for i in range(evals):
        runner, _ = team.learn(runner, num_updates=chunk)
        returns = np.asarray(team.evaluate(runner.train.params.actor, jax.random.fold_in(key, i), episodes))
        rows.append(((i + 1) * chunk * per_update, float(returns.mean()), float(returns.std())))
        print(f"  {rows[-1][0]:>8} steps: eval return {rows[-1][1]:.3f} ± {rows[-1][2]:.3f}", flush=True)
    return rows


def swarm(share: str, rounds: int, num_envs: int, out: Path) -> list[tuple[int, float]]:
    """(environment steps per peer, evaluation return averaged over the 2 peers) of the game."""
    run_dir = out / share
    cfg = load_recipe("marl", [
        f"policy.share={share}", f"game.max_rounds={rounds}", f"policy.system.num_envs={num_envs}", f"run.dir={run_dir}",
        f"learner.eval_every={max(1, rounds // 5)}", "run.console=false", "run.tensorboard=false", "run.plot=false",
    ])  # fmt: skip
    run_recipe(cfg, stream=io.StringIO())
    curves = eval_curves(run_dir)
    return [(step, float(np.mean([c.mean[i] for c in curves]))) for i, step in enumerate(curves[0].steps)]


STARTUP = """
import json, sys, time
start = time.perf_counter()
from genrl_swarm.cli import main
import genrl_swarm.games.marl
imported = time.perf_counter()
from genrl_swarm.paradigms.marl import cache
code = main(["run", "--overwrite", "--recipe", sys.argv[2], f"run.dir={sys.argv[1]}", "game.max_rounds=1", "learner.total_rounds=1000",
             "run.console=false", "run.plot=false", "run.tensorboard=false", *sys.argv[3:]])
print(json.dumps({"code": code, "import_s": imported - start, "run_s": time.perf_counter() - imported, **cache.counts()}))
"""


def startup(recipe: str, overrides: list[str], pairs: int) -> list[dict[str, float | str]]:
    """Pairs of (empty cache, the cache the first run filled) runs of one round, back to back."""
    rows: list[dict[str, float | str]] = []
    for pair in range(pairs):
        with tempfile.TemporaryDirectory() as tmp:
            env = os.environ | {"GENRL_SWARM_JAX_CACHE": f"{tmp}/jax"}
            for phase in ("first", "second"):
                load, cpu = os.getloadavg()[0], resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                out = subprocess.run([sys.executable, "-c", STARTUP, f"{tmp}/run", recipe, *overrides], env=env, capture_output=True, text=True)
                wall = time.perf_counter() - start
                if out.returncode != 0:
                    raise SystemExit(out.stderr[-3000:])
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                report = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append({"pair": pair, "run": phase, "wall_s": round(wall, 2), "cpu_s": round(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 2),
                             "import_s": round(report["import_s"], 2), "hits": report["hits"], "writes": report["writes"],
                             "saved_s": report["saved_s"], "load_1min": round(load, 2)})  # fmt: skip
                print("  ", rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="speed,learning,swarm")
    parser.add_argument("--updates", type=int, default=20, help="updates timed per speed measurement")
    parser.add_argument("--envs", default="16,64")
    parser.add_argument("--learning-steps", type=int, default=1_000_000)
    parser.add_argument("--evals", type=int, default=10)
    parser.add_argument("--swarm-rounds", type=int, default=30)
    parser.add_argument("--swarm-envs", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=3, help="start-up: pairs of (empty cache, warm cache) runs")
    parser.add_argument("--startup-recipe", default="marl")
    parser.add_argument("--repeats", type=int, default=2, help="mava: alternating runs of each side")
    parser.add_argument("--calls", type=int, default=40, help="mava: timed calls (2 updates each) per run of ours")
    parser.add_argument("--mava-steps", type=int, default=327_680, help="mava: environment steps per Mava run")
    parser.add_argument("--mava-devices", type=int, default=2, help="mava: CPU devices shown to Mava (its fastest here: 2)")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_marl"))
    a = parser.parse_args()
    os.environ.setdefault("GENRL_SWARM_JAX_CACHE", "off")  # speed, learning, swarm: compile times as a fresh process pays them
    parts, results = set(a.parts.split(",")), {"machine": machine(), "devices": [str(d) for d in jax.devices()]}
    print(results["machine"], "|", "jax", jax.__version__, results["devices"])
    if "speed" in parts:
        rows = []
        for system in ("ippo", "mappo"):
            for name, env in (("LBF", LBF), ("RWARE", RWARE)):
                for num_envs in map(int, a.envs.split(",")):
                    r = speed(system, env, num_envs, a.updates)
                    rows.append(
                        [system.upper(), f"{name} {env.task.name}", num_envs, round(r["steps_per_s"]), round(r["compile_s"], 1), MAVA[(system, name)]]
                    )
                    print("  ", rows[-1], flush=True)
        results["speed"] = rows
        print(table(["system", "scenario", "num_envs", "env steps/s", "compile s", "Mava steps/s (issue)"], rows))
    if "learning" in parts:
        rows = learning(a.learning_steps, a.evals, 32)
        results["learning"] = rows
        print(table(["env steps", "eval return (32 episodes)", "std"], [[s, round(m, 3), round(sd, 3)] for s, m, sd in rows]))
    if "swarm" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            curves = {share: swarm(share, a.swarm_rounds, a.swarm_envs, Path(tmp)) for share in ("trajectories", "parameters", "none")}
        results["swarm"] = curves
        steps = [s for s, _ in curves["none"]]
        rows = [[s, *(round(curves[k][i][1], 3) for k in ("trajectories", "parameters", "none"))] for i, s in enumerate(steps)]
        print(table(["env steps per peer", "shared trajectories", "shared parameters", "isolated"], rows))
    if "mava" in parts:
        rows = side_by_side(a.repeats, a.calls, a.mava_steps, a.mava_devices)
        results["mava"] = rows
        print(table(["system", "scenario", "ours steps/s", "Mava steps/s", "ours / Mava"], rows))
    if "startup" in parts:
        rows = startup(a.startup_recipe, [], a.pairs)
        results["startup"] = rows
        keys = ["pair", "run", "wall_s", "cpu_s", "import_s", "hits", "writes", "saved_s", "load_1min"]
        print(table(keys, [[r[k] for k in keys] for r in rows]))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
