"""``make demo`` with LoRA adapters against full fine-tuning (issue 45): accuracy, memory, checkpoint.

Two arms on the demo's recipe (``reasoning_gym/digits``: 2 in-memory SmolLM2-135M-Instruct peers,
GRPO, greedy held-out accuracy on 48 problems), paired by seed (one seed: the same problems and
sampling keys in both arms):
- ``full``: the recipe as it is (every weight trained, lr 3e-5);
- ``adapters``: LoRA r=8, alpha=16 on all seven projections, the peers on one shared base, lr 3e-4
  (10x the full rate, fixed before any run: a usual LoRA choice, not tuned here).

Each (seed, arm) is one run of the demo module in a child process, one at a time, under
``nice -n 10``, ``timeout`` and GNU time (``/usr/bin/time -v``: the process's peak RSS), with
``OMP_NUM_THREADS=1`` and a checkpoint after the last round. One JSON line per run goes to
``--out``; a (seed, arm) whose line is there is skipped, so an interrupted benchmark resumes. A run
whose log, GNU time report and exit status are on disk already is read, not run again.

    python benchmarks/bench_demo_adapters.py --seeds 1,2,3,4 --out runs/adapters_vs_full/results.jsonl
    python benchmarks/bench_demo_adapters.py --report-only --out docs/data/demo_adapters.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import machine, mean_sd, table

DEMO = "genrl_swarm.games.reasoning_gym.demo"
RECIPE = "reasoning_gym/digits"
TARGETS = "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"
ARMS: dict[str, list[str]] = {
    "full": [],
    "adapters": ["+policy.lora.r=8", "+policy.lora.alpha=16", f"+policy.lora.target_modules={TARGETS}", "learner.grpo.learning_rate=3e-4"],
}


def overrides(arm: str, seed: int, rounds: int, every: int, run_dir: Path) -> list[str]:
    common = [f"game.max_rounds={rounds}", f"game.eval_every={every}", f"seed={seed}", f"run.checkpoint_every={rounds}", f"run.dir={run_dir}"]
    return [*common, *ARMS[arm]]


def gnu_time(path: Path) -> dict[str, float]:
    """Peak RSS (MiB), wall and CPU seconds from a ``/usr/bin/time -v`` report."""
    text = path.read_text()
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", text).group(1))
    system = float(re.search(r"System time \(seconds\): ([\d.]+)", text).group(1))
    clock = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text).group(1)
    wall = 0.0
    for part in clock.split(":"):
        wall = wall * 60 + float(part)
    return {"peak_rss_mb": round(rss, 1), "wall_s": round(wall, 1), "cpu_s": round(user + system, 1)}


def rows(metrics: Path) -> list[dict]:
    return [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]


def checkpoint_mb(peer: Path) -> float:
    """Size of the peer's newest complete checkpoint folder, MB (10^6 bytes)."""
    folder = peer / "checkpoints" / (peer / "checkpoints" / "latest").read_text().strip()
    return round(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6, 1)


def collect(seed: int, arm: str, run_dir: Path, log: Path, timing: Path, rc: int) -> dict:
    """The result line of a finished run, from its metrics rows (mean over peers), GNU time and checkpoint."""
    peers = sorted(p for p in run_dir.iterdir() if (p / "metrics.jsonl").is_file())
    before, after, rounds, row_peak = [], [], [], []
    for peer in peers:
        table_rows = rows(peer / "metrics.jsonl")
        before += [r["heldout/accuracy_before"] for r in table_rows if "heldout/accuracy_before" in r]
        scored = [r for r in table_rows if "heldout/accuracy" in r]
        after.append(scored[-1]["heldout/accuracy"])
        rounds.append(len(table_rows))
        row_peak.append(max(r.get("mem/peak_rss_mb", 0.0) for r in table_rows))
    line = {"seed": seed, "arm": arm, "rc": rc, "peers": len(peers), "rounds": min(rounds)}
    line |= {"acc_before": round(statistics.mean(before), 4), "acc_after": round(statistics.mean(after), 4)}
    line |= {"acc_after_per_peer": after, **gnu_time(timing), "rows_peak_rss_mb": max(row_peak)}
    line |= {"checkpoint_mb": checkpoint_mb(peers[0]), "overrides": ARMS[arm], "log": str(log)}
    return line


def run(seed: int, arm: str, a: argparse.Namespace) -> dict:
    run_dir = Path(a.dir) / f"seed{seed}_{arm}"
    log, timing, status = (run_dir.with_name(f"{run_dir.name}{ext}") for ext in (".log", ".time", ".rc"))
    if not (status.is_file() and timing.is_file()):
        cmd = ["nice", "-n", "10", "timeout", str(a.timeout), "/usr/bin/time", "-v", "-o", str(timing)]
        cmd += [sys.executable, "-m", DEMO, "--recipe", RECIPE, *overrides(arm, seed, a.rounds, a.every, run_dir)]
        print(f"{time.strftime('%H:%M:%S')} seed {seed} {arm}: {' '.join(cmd[9:])}", flush=True)
        with log.open("w") as out:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"}).returncode
        status.write_text(f"{rc}\n")
    rc = int(status.read_text())
    if rc != 0:
        return {"seed": seed, "arm": arm, "rc": rc, "log": str(log)}
    return collect(seed, arm, run_dir, log, timing, rc)


def report(lines: list[dict]) -> None:
    done = {(x["seed"], x["arm"]): x for x in lines if x.get("rc") == 0}
    failed = [x for x in lines if x.get("rc") != 0]
    headers = ["arm", "seed", "untrained", "final acc", "wall s", "CPU s", "peak RSS MiB", "checkpoint MB"]
    body = [
        [x["arm"], x["seed"], x["acc_before"], x["acc_after"], x["wall_s"], x["cpu_s"], x["peak_rss_mb"], x["checkpoint_mb"]] for x in done.values()
    ]
    print(table(headers, body))
    for x in failed:
        print(f"seed {x['seed']} {x['arm']}: exit {x['rc']} (no result; {x['log']})")
    for arm in ARMS:
        mine = [x for x in done.values() if x["arm"] == arm]
        if mine:
            acc, rss = [x["acc_after"] for x in mine], [x["peak_rss_mb"] for x in mine]
            print(f"{arm}: final accuracy {mean_sd(acc)} over {len(mine)} seeds; peak RSS {statistics.mean(rss):,.0f} MiB (max {max(rss):,.0f})")
    paired = sorted(s for s, arm in done if arm == "adapters" and (s, "full") in done)
    if paired:
        diff = [done[s, "adapters"]["acc_after"] - done[s, "full"]["acc_after"] for s in paired]
        print(f"adapters - full, paired over seeds {paired}: " + ", ".join(f"{d:+.3f}" for d in diff) + f"; mean {mean_sd(diff)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1,2,3,4", help="comma-separated; each seed runs both arms, full first")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--every", type=int, default=4, help="held-out evaluation every this many rounds")
    p.add_argument("--out", default="runs/adapters_vs_full/results.jsonl")
    p.add_argument("--dir", default="runs/adapters_vs_full", help="run folders, logs and GNU time reports")
    p.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    p.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    p.add_argument("--report-only", action="store_true", help="print the table of --out and run nothing")
    a = p.parse_args()
    print(machine(), f"| OMP_NUM_THREADS=1 in the runs | load {os.getloadavg()[0]:.2f}", flush=True)
    out = Path(a.out)
    lines = [json.loads(x) for x in out.read_text().splitlines() if x.strip()] if out.is_file() else []
    if not a.report_only:
        Path(a.dir).mkdir(parents=True, exist_ok=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        for seed in (int(s) for s in a.seeds.split(",")):
            for arm in a.arms:
                if any(x["seed"] == seed and x["arm"] == arm for x in lines):
                    continue
                line = run(seed, arm, a)
                line["load_after"] = round(os.getloadavg()[0], 2)
                lines.append(line)
                with out.open("a") as f:
                    f.write(json.dumps(line) + "\n")
                print(json.dumps({k: v for k, v in line.items() if k not in ("overrides", "acc_after_per_peer")}), flush=True)
    report(lines)


if __name__ == "__main__":
    main()
