"""Head to head with gensyn-genrl 0.3.0 (the system this project re-implements): its Reasoning Gym
example against our ``reasoning_gym`` recipe, same model, datasets (genrl's own composite config,
read from its installed package, passed to both), questions per round, generations, max new
tokens, rounds, learning rate and system prompt; the runs alternate (genrl, ours, ours, genrl, ...).

genrl runs in its own venv (``benchmarks/genrl/install.sh``; ``GENRL_VENV``, default
/work/genrl-env) through ``benchmarks/genrl/genrl_side.py``; ours in a child of this venv. Each
side reports completions/s (questions x generations x peers x rounds over the rounds' wall time),
completions per CPU second (the same completions over the game's process CPU time, all threads:
steadier than wall time on a shared machine), wall time per round (generation + exchange +
rewards, and training), peak RSS (the sum of its processes' peaks) and held-out Reasoning Gym
accuracy after the rounds: one greedy completion per held-out question (the same questions for
both, drawn with their own seed), each side with the prompt it trains with, all scored here by
Reasoning Gym's own ``extract_answer`` and the dataset's ``score_answer`` (its partial credit
included; "exact" counts scores of 1).

Where the two differ by design (stated, not hidden): genrl samples with HF ``generate`` in fp32,
one call per generation (``num_generations`` calls, each over the round's questions), and skips
the update when every reward is 0; ours samples all of a round's completions in one batch in its
lean sampler. genrl updates in minibatches of ``--minibatch`` rows (default: the whole round, one
step, as ours); gradient checkpointing on (genrl's default) unless ``--no-checkpointing``.
Sharing: genrl transplants up to ``--sharing`` of the other peers' question trees, those with a
non-zero total reward (its rgym ``num_transplant_trees``, over torch.distributed, one process per
peer); genrl 0.3.0's transplant reads its own ``Payload`` dataclass as a mapping and fails
silently (its round loop logs the TypeError at INFO and goes on), so genrl_side.py gives Payload
a one-line ``__getitem__`` unless ``--genrl-as-shipped``. Ours trains on ``--sharing``
informative swarm groups (``num_external``, in-memory peers in one process). One peer: sharing
off on both sides.

    benchmarks/genrl/install.sh
    python benchmarks/bench_vs_genrl.py --model tiny-random --datasets basic_arithmetic --rounds 2   # smoke
    python benchmarks/bench_vs_genrl.py --rounds 4 --peers 2 --sharing 2 --repeats 2                  # SmolLM2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import machine, table

HERE = Path(__file__).resolve().parent
GENRL_VENV = Path(os.environ.get("GENRL_VENV", "/work/genrl-env"))
SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def model_path(name: str) -> str:
    """A local folder both venvs load: genrl's trainer reads the tokenizer from the model's own path."""
    from genrl_swarm.paradigms.lm.models import TINY, ensure_smollm2, ensure_tiny_model

    if name in (SMOLLM2, "smollm2"):
        return str(ensure_smollm2())
    if name == TINY:
        return str(ensure_tiny_model())
    return name


def genrl_datasets() -> dict[str, dict[str, Any]]:
    """genrl's rgym example's datasets and configs, read from genrl's installed package."""
    import yaml

    found = subprocess.run(
        [str(GENRL_VENV / "bin" / "python"), "-c", "import genrl.examples.rgym as m, os; print(os.path.dirname(m.__file__))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    spec = yaml.safe_load((Path(found) / "datasets.yaml").read_text())
    return {d["name"]: dict(d.get("config", {})) for d in spec["datasets"]}


def strip(config: dict[str, Any]) -> dict[str, Any]:
    """A dataset's config without its own seed and size (each side draws with the run's seed)."""
    return {k: v for k, v in config.items() if k not in ("seed", "size")}


def held_out(datasets: dict[str, dict[str, Any]], per_dataset: int, seed: int) -> list[tuple[str, dict[str, Any]]]:
    import reasoning_gym

    return [
        (name, e) for name, cfg in sorted(datasets.items()) for e in reasoning_gym.create_dataset(name, size=per_dataset, seed=seed, **strip(cfg))
    ]


def hydra_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(hydra_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{hydra_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {v!r} as a Hydra override")


# ------------------------------------------------------------------------------------- our side
def ours(job: dict[str, Any], result_path: str) -> None:
    import resource

    import torch

    from genrl_swarm.config import load_recipe
    from genrl_swarm.core import Task
    from genrl_swarm.run.launcher import Checkpointer, build_managers, run_managers

    peers, names = job["peers"], sorted(job["datasets"])
    with tempfile.TemporaryDirectory() as out:
        cfg = load_recipe("reasoning_gym", [
            f"seed={job['seed']}", f"swarm.num_peers={peers}", f"game.max_rounds={job['rounds']}", "game.mode=train",
            f"run.dir={out}", "run.console=false", "run.tensorboard=false", "run.plot=false", "run.checkpoint_every=0",
            *(["communication=none"] if peers == 1 else []),
            f"data.datasets={hydra_value(names)}", f"data.tasks_per_round={job['questions']}", "data.eval_size=0", "data.questions=shared",
            *(f"+data.dataset_config.{n}={hydra_value(strip(job['datasets'][n]))}" for n in names if strip(job["datasets"][n])),
            "reward.format_weight=0.0", f"policy.model={job['model']}", f"policy.sampling.num_generations={job['generations']}",
            f"policy.sampling.max_new_tokens={job['max_new_tokens']}", f"learner.grpo.learning_rate={job['lr']}",
            "learner.grpo.num_local=-1", f"learner.grpo.num_external={job['sharing'] if peers > 1 else 0}",
        ])  # fmt: skip
        managers, _ = build_managers(cfg)
        for m in managers:
            if job.get("system_prompt") is not None:
                m.policy.system_prompt = job["system_prompt"]
        tasks = [Task.create(q, answer=e["answer"], public={"dataset": n}, dataset=n, entry=e, config=strip(job["datasets"][n]))
                 for n, q, e in ((n, e["question"], e) for n, e in held_out(job["datasets"], job["per_dataset"], job["held_out_seed"]))]  # fmt: skip
        before = greedy(managers[0].policy, tasks) if job["before"] else []
        print(f"ours: before-training held-out done ({len(before)} completions)", flush=True)
        marks: dict[str, list[tuple[str, float]]] = {m.peer_id: [] for m in managers}
        for m in managers:
            m.hooks.after_round = [h for h in m.hooks.after_round if not isinstance(h, Checkpointer)]
            m.hooks.after_game = []
            m.hooks.after_rewards.append(lambda mm, state, rewards: marks[mm.peer_id].append(("gen", time.perf_counter())))
            m.hooks.after_round.append(
                lambda mm, result: (
                    marks[mm.peer_id].append(("round", time.perf_counter())),
                    print(f"ours: {mm.peer_id} round {result.round + 1} done", flush=True),
                )
            )
        t0, cpu0 = time.perf_counter(), time.process_time()
        run_managers(managers)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        after = [greedy(m.policy, tasks) for m in managers]
    rounds = []
    for peer_marks in marks.values():  # per peer: the same phases as genrl's hooks
        start = t0
        for (_, gen), (_, end) in zip(peer_marks[0::2], peer_marks[1::2]):
            rounds.append({"gen_s": gen - start, "train_s": end - gen, "wall_s": end - start})
            start = end
    result = {
        "side": "ours", "rank": 0, "rounds": rounds, "rounds_done": len(rounds) // peers, "elapsed_s": elapsed, "cpu_s": cpu,
        "completions": job["questions"] * job["generations"] * len(rounds), "train_errors": [],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "before": before, "after": after,
        "threads": torch.get_num_threads(),
    }  # fmt: skip
    Path(result_path).write_text(json.dumps(result))


def greedy(policy: Any, tasks: list[Any]) -> list[str]:
    bodies = policy.act([t.input(0) for t in tasks], 0, greedy=True)
    return [policy.texts(b)[0] for b in bodies]


# ------------------------------------------------------------------------------------- the runs
def run_side(side: str, job: dict[str, Any]) -> list[dict[str, Any]]:
    """One run of one side in fresh processes (genrl: one per peer); each rank's result."""
    with tempfile.TemporaryDirectory() as tmp:
        job = {**job, "log_dir": tmp}
        (Path(tmp) / "job.json").write_text(json.dumps(job))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled"}
        if job["threads"]:  # torch's thread count, the same on both sides (genrl and ours read OMP_NUM_THREADS)
            env |= {"OMP_NUM_THREADS": str(job["threads"]), "MKL_NUM_THREADS": str(job["threads"])}
        ranks = job["peers"] if side == "genrl" else 1
        procs = []
        for rank in range(ranks):
            if side == "genrl":
                cmd = [str(GENRL_VENV / "bin" / "python"), str(HERE / "genrl" / "genrl_side.py"), f"{tmp}/job.json", f"{tmp}/result-{rank}.json"]
                env_r = {**env, "RANK": str(rank), "WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(job["port"]),
                         "PYTHONPATH": ""}  # fmt: skip
            else:
                cmd = [sys.executable, str(Path(__file__).resolve()), "--ours", f"{tmp}/job.json", f"{tmp}/result-0.json"]
                env_r = env
            log = Path(job["logs"]) / f"{side}-{job['run']}-rank{rank}.log"  # the child's output, to follow it while it runs
            with log.open("w") as out:
                procs.append((subprocess.Popen(cmd, env=env_r, stdout=out, stderr=subprocess.STDOUT), log))
        for p, _ in procs:
            p.wait()
        results = []
        for rank, (p, log) in enumerate(procs):
            path = Path(tmp) / f"result-{rank}.json"
            if p.returncode != 0 or not path.exists():
                raise RuntimeError(f"{side} rank {rank} exited with {p.returncode} ({log}):\n{log.read_text()[-4000:]}")
            results.append(json.loads(path.read_text()))
        return results


def score(items: list[tuple[str, dict[str, Any]]], texts: list[str]) -> tuple[float, float]:
    """Reasoning Gym's own scoring of one completion per held-out item: (mean score, share scoring 1)."""
    from reasoning_gym.factory import get_score_answer_fn
    from reasoning_gym.utils import extract_answer

    scores = [float(get_score_answer_fn(name)(extract_answer(t), entry)) for (name, entry), t in zip(items, texts)]
    return statistics.mean(scores), statistics.mean(s >= 1.0 for s in scores)


def summarize(side: str, results: list[dict[str, Any]], items: list[tuple[str, dict[str, Any]]], peers: int) -> dict[str, Any]:
    rounds = [r for res in results for r in res["rounds"]]
    wall = sum(r["wall_s"] for r in rounds) / peers  # peers run side by side: a round's wall is each peer's
    completions = sum(res["completions"] for res in results)
    texts_after = [res["after"] for res in results] if side == "genrl" else results[0]["after"]
    after = [score(items, t) for t in texts_after]
    before = [score(items, res["before"]) for res in results if res["before"]]
    return {
        "completions_s": completions / wall if wall else 0.0,
        "completions_cpu_s": completions / cpu if (cpu := sum(res.get("cpu_s", 0.0) for res in results)) else 0.0,  # per CPU second of the game
        "round_s": statistics.median(r["wall_s"] for r in rounds) if rounds else float("nan"),
        "gen_s": statistics.median(r["gen_s"] for r in rounds) if rounds else float("nan"),
        "train_s": statistics.median(r["train_s"] for r in rounds) if rounds else float("nan"),
        "rss_mb": sum(res["peak_rss_mb"] for res in results), "processes": len(results),
        "before": before[0] if before else None,
        "after": (statistics.mean(a for a, _ in after), statistics.mean(e for _, e in after)),
        "rounds_done": min(res["rounds_done"] for res in results), "errors": sum(len(res["train_errors"]) for res in results),
        "error_text": next((e for res in results for e in res["train_errors"]), ""),
        "rank_rounds": [res["rounds"] for res in results],  # each process's rounds, for a later look
        "transplanted": [n for res in results for n in res.get("transplanted", [])],  # genrl: the others' questions per peer-round
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default=SMOLLM2)
    p.add_argument("--datasets", default="", help="comma-separated subset of genrl's rgym datasets (default: all nine)")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="replace a dataset's config on both sides, e.g. basic_arithmetic='{\"max_terms\": 2, \"max_digits\": 1}' (keys not given keep genrl's)",
    )
    p.add_argument("--questions", type=int, default=2, help="questions per peer and round (genrl's rl-swarm: 2)")
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--lr", type=float, default=5e-6)
    p.add_argument("--peers", type=int, default=1)
    p.add_argument("--sharing", type=int, default=0, help="with --peers > 1: swarm groups per update (genrl: num_transplant_trees)")
    p.add_argument("--minibatch", type=int, default=0, help="genrl's rows per optimizer step (0: the whole round, one step like ours)")
    p.add_argument("--no-checkpointing", action="store_true", help="genrl without gradient checkpointing (its default is on)")
    p.add_argument("--held-out", type=int, default=4, help="held-out questions per dataset")
    p.add_argument("--repeats", type=int, default=1, help="runs per side, alternating (genrl, ours, ours, genrl, ...)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--our-prompt", action="store_true", help="both sides with our system prompt (default: both with genrl's, Reasoning Gym's)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per process on both sides (0: each side's default); "
        "1 on a shared machine: 2 threads on 2 loaded cores wait at every parallel region's barrier",
    )
    p.add_argument("--logs", default="runs/vs_genrl", help="where each run's output goes (to follow it)")
    p.add_argument(
        "--genrl-as-shipped",
        action="store_true",
        help="genrl's rgym transplant without the Payload adapter (genrl_side.py): its exchange fails and it trains on its own questions",
    )
    p.add_argument("--json", default="", help="write every run's numbers here")
    p.add_argument("--ours", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.ours:
        ours(json.loads(Path(a.ours[0]).read_text()), a.ours[1])
        return
    if not (GENRL_VENV / "bin" / "python").exists():
        sys.exit(f"bench_vs_genrl: no genrl venv at {GENRL_VENV}: run benchmarks/genrl/install.sh (or set GENRL_VENV)")
    from reasoning_gym.utils import SYSTEM_PROMPTS

    from genrl_swarm.paradigms.lm.policy import DEFAULT_SYSTEM_PROMPT

    all_sets = genrl_datasets()
    chosen = [d for d in a.datasets.split(",") if d] or sorted(all_sets)
    datasets = {d: all_sets[d] for d in chosen}
    for item in a.config:
        name, _, text = item.partition("=")
        if name not in datasets:
            sys.exit(f"bench_vs_genrl: --config {name}: not one of the chosen datasets {chosen}")
        datasets[name] = {**datasets[name], **json.loads(text)}
    items = held_out(datasets, a.held_out, a.seed + 1_000_003)
    job = {
        "model": model_path(a.model), "datasets": datasets, "questions": a.questions, "generations": a.generations,
        "max_new_tokens": a.max_new_tokens, "rounds": a.rounds, "lr": a.lr, "peers": a.peers, "sharing": a.sharing,
        "seed": a.seed, "minibatch_size": a.minibatch or a.questions * a.generations * (1 + (a.sharing if a.peers > 1 else 0)),
        "gradient_checkpointing": not a.no_checkpointing, "held_out": [e["question"] for _, e in items], "per_dataset": a.held_out,
        "held_out_seed": a.seed + 1_000_003, "system_prompt": DEFAULT_SYSTEM_PROMPT if a.our_prompt else SYSTEM_PROMPTS["default"],
        "port": 29500 + os.getpid() % 1000, "threads": a.threads, "payload_shim": not a.genrl_as_shipped,
    }  # fmt: skip
    composite = Path(tempfile.mkdtemp(prefix="genrl-composite-")) / "datasets.yaml"  # genrl's configs as it ships them, for the chosen datasets
    composite.write_text(json.dumps({"size": 1000, "seed": a.seed, "datasets": [{"name": d, "weight": 1, "config": datasets[d]} for d in chosen]}))
    job["composite"] = str(composite)
    Path(a.logs).mkdir(parents=True, exist_ok=True)
    job["logs"] = str(Path(a.logs).resolve())
    start, load0 = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.getloadavg()[0]
    print(f"{machine()} | {start} | load average {load0:.1f}", flush=True)
    changed = "".join(f" ({n}: {json.dumps(json.loads(t))})" for n, t in (c.split("=", 1) for c in a.config))
    print(f"model {a.model}, datasets {', '.join(chosen)}{changed}, {a.questions} questions x {a.generations} generations x "
          f"{a.max_new_tokens} new tokens per peer-round, {a.rounds} rounds, {a.peers} peer(s), sharing {a.sharing if a.peers > 1 else 'off'}, "
          f"lr {a.lr}, {a.threads or 'default'} torch thread(s) per process, held-out {len(items)} questions, {'our' if a.our_prompt else 'genrl/Reasoning Gym'} system prompt", flush=True)  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {"genrl": [], "ours": []}
    for rep in range(a.repeats):
        for side in ("genrl", "ours") if rep % 2 == 0 else ("ours", "genrl"):
            t0 = time.perf_counter()
            try:
                results = run_side(side, {**job, "before": rep == 0, "run": rep + 1})
                texts = [res["after"] for res in results] if side == "genrl" else results[0]["after"]
                (Path(job["logs"]) / f"{side}-{rep + 1}-held-out.json").write_text(json.dumps(
                    [{"question": e["question"], "answer": e["answer"], "after": [t[i] for t in texts]} for i, (_, e) in enumerate(items)], indent=1))  # fmt: skip
                s = summarize(side, results, items, a.peers)
            except RuntimeError as e:
                print(f"{side}, run {rep + 1}: failed: {e}", flush=True)
                continue
            runs[side].append(s)
            if a.json:  # after every run: a cut-short series keeps its finished runs
                Path(a.json).write_text(
                    json.dumps({"machine": machine(), "start": start, "load_start": load0, "args": vars(a), "runs": runs}, indent=1)
                )
            print(f"{side}, run {rep + 1}: {time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.1f}, "
                  f"{s['completions_s']:.2f} completions/s, {s['completions_cpu_s']:.2f} per CPU s, held-out after {s['after'][0]:.3f}, "
                  f"{s['rounds_done']}/{a.rounds} rounds, training errors {s['errors']}"
                  + (f", transplanted trees per peer-round {s['transplanted']}" if side == "genrl" and a.peers > 1 else ""), flush=True)  # fmt: skip
            if s["error_text"]:
                print(f"  first training error ({side}): {s['error_text'].strip().splitlines()[-1]}", flush=True)
    rows = []
    for side, v in runs.items():
        if not v:
            rows.append([side, "failed", "", "", "", "", "", "", "", "0"])
            continue
        spread = lambda k, f, v=v: f"{statistics.mean(x[k] for x in v):{f}} ± {sd([x[k] for x in v]):{f}}"  # noqa: E731
        b = v[0]["before"]
        rows.append([side, spread("completions_s", ".2f"), spread("completions_cpu_s", ".2f"), spread("round_s", ".1f"),
                     f"{statistics.mean(x['gen_s'] for x in v):.1f} / {statistics.mean(x['train_s'] for x in v):.1f}",
                     f"{max(x['rss_mb'] for x in v):.0f} ({v[0]['processes']} proc)", f"{b[0]:.3f} ({b[1]:.3f})" if b else "",
                     f"{statistics.mean(x['after'][0] for x in v):.3f} ({statistics.mean(x['after'][1] for x in v):.3f})",
                     f"{sum(x['errors'] for x in v)}", len(v)])  # fmt: skip
    print(table(["side", "completions/s (mean ± sd)", "per CPU s", "round s (mean ± sd)", "gen / train s", "peak RSS MB", "held-out before (exact)",
                 f"held-out after {a.rounds} rounds (exact)", "train errors", "runs"], rows))  # fmt: skip
    for side, v in runs.items():
        cs, acc, rss = (", ".join(f % x[k] if isinstance(k, str) else f % x[k[0]][k[1]] for x in v) for k, f in
                        (("completions_s", "%.2f"), (("after", 0), "%.3f"), ("rss_mb", "%.0f")))  # fmt: skip
        print(f"{side} per run: completions/s {cs}; held-out after {acc}; peak RSS MB {rss}")
    ratio = None
    if runs["genrl"] and runs["ours"]:
        ratio = statistics.mean(x["completions_s"] for x in runs["ours"]) / statistics.mean(x["completions_s"] for x in runs["genrl"])
        pairs = [o["completions_s"] / g["completions_s"] for o, g in zip(runs["ours"], runs["genrl"])]  # run k of each side, back to back
        cpu_ratio = statistics.mean(x["completions_cpu_s"] for x in runs["ours"]) / statistics.mean(x["completions_cpu_s"] for x in runs["genrl"])
        print(f"ours / genrl completions/s: {ratio:.2f}x (per pair of runs {min(pairs):.2f}x..{max(pairs):.2f}x), per CPU second {cpu_ratio:.2f}x | "
              f"load average {load0:.1f} at start, {os.getloadavg()[0]:.1f} at the end")  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps({"machine": machine(), "start": start, "load_start": load0, "load_end": os.getloadavg()[0],
                                            "args": vars(a), "runs": runs, "ratio": ratio}, indent=1, default=str))  # fmt: skip


def sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


if __name__ == "__main__":
    main()
