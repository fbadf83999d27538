"""Fuzz benchmark for scorers: hostile completions through decode -> text -> every scorer a recipe
can name, as an honest peer scores a stranger's body (``ReasoningReward`` under a sender's meter).

Hostile completions: code injection (a shell command, a file write, a socket, a process,
ctypes), exponent towers, deep nesting, huge numbers, and inputs for backtracking or quadratic
parsers, each wrapped the ways answers are extracted (``<answer>`` block, bare, ``\\boxed{}``).
They are encoded with the tiny model's tokenizer and decoded back as a peer derives text. Per
dataset: bodies scored, escapes (a marker file written or a connection made), the slowest body in
wall time and in charged CPU, failures (dropped bodies), and the peer's peak RSS at the end.

Run: .venv/bin/python benchmarks/bench_fuzz_scorers.py [--entries 3] [--budget 2.0]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, table  # noqa: E402

from genrl_swarm.core.meter import CutOff, metered  # noqa: E402
from genrl_swarm.data.reasoning_gym import SAPO_DATASETS, ReasoningGymData  # noqa: E402
from genrl_swarm.rewards.reasoning import accuracy  # noqa: E402
from genrl_swarm.scoring.rg import where  # noqa: E402

#: Datasets whose Reasoning Gym scorer calls eval or sympy on the answer (audit in docs/sandbox.md).
RISKY = (
    "spiral_matrix",
    "string_insertion",
    "n_queens",
    "polynomial_multiplication",
    "intermediate_integration",
    "simple_integration",
    "countdown",
    "puzzle24",
)


def payloads(marker: Path, port: int) -> list[str]:
    code = [
        f'__import__("os").system("touch {marker}")',
        f'open("{marker}", "w").write("x")',
        f'__import__("subprocess").run(["touch", "{marker}"])',
        f'__import__("socket").create_connection(("127.0.0.1", {port}), 1)',
        '__import__("ctypes").CDLL(None)',
        "9**9**9**9",
        "10**10**10",
        "(" * 3000 + "1" + ")" * 3000,
        "[" * 3000 + "]" * 3000,
        "9" * 5000,
        "1e999999999",
        "x**2" + "*x" * 3000,
        "<answer>" * 2000,
        "\\frac{" * 2000,
        "a" * 20000 + "!",
        "1/" * 3000 + "1",
        '"x" * (1 << 34)',
        "__import__('time').sleep(30)",
    ]
    return [w.format(p) for p in code for w in ("<answer>{}</answer>", "{}", "\\boxed{{{}}}")]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--entries", type=int, default=2, help="tasks per dataset")
    p.add_argument("--budget", type=float, default=2.0, help="trust.cpu_budget per sender (seconds)")
    args = p.parse_args()
    marker = Path(tempfile.mkdtemp()) / "escaped"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    from transformers import AutoTokenizer

    from genrl_swarm.paradigms.lm.models import TINY, resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_path(TINY)))
    texts = [tokenizer.decode(tokenizer(x, add_special_tokens=False)["input_ids"]) for x in payloads(marker, port)]
    rows, escapes = [], 0
    for dataset in (*SAPO_DATASETS, *RISKY):
        tasks = ReasoningGymData([dataset], tasks_per_round=args.entries, eval_size=0, seed=1).round_tasks(0)
        slowest = charged = 0.0
        failed = 0
        for i, text in enumerate(texts):
            for task in tasks:
                with metered(f"stranger-{dataset}-{i}", args.budget) as m:
                    start = time.perf_counter()
                    try:
                        accuracy(task, text)
                    except CutOff:
                        failed += 1
                    slowest, charged = max(slowest, time.perf_counter() - start), max(charged, m.spent)
        try:
            listener.accept()[0].close()
            escapes += 1
        except BlockingIOError:
            pass
        escapes += marker.exists()
        rows.append([dataset, where(dataset).name.lower(), len(texts) * len(tasks), failed, f"{slowest:.3f}", f"{charged:.3f}"])
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(machine(), f"| load {os.getloadavg()[0]:.1f} | cpu_budget {args.budget} s")
    print(table(["dataset", "scored", "bodies", "dropped", "slowest body (s wall)", "most charged (s CPU)"], rows))
    print(f"escapes: {escapes} | peer peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
