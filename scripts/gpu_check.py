"""The GPU check behind ``scripts/gpu_check.sh``: CUDA-relevant tests and a short benchmark, one table.

Why: nothing in this project has run on a GPU (every number in the docs is a CPU's), so the
first machine with one should answer in one command, in under 10 minutes, whether the CUDA
paths work and how fast they are. Without a usable CUDA device it says why in one line and
exits 2 before doing anything. Every step runs under one deadline (``DEADLINE_S``): a step cut
by it is a row that says so, never a hang. The exit status is 0 only when every test passed
and the benchmark ran.

    scripts/gpu_check.sh            # or: python scripts/gpu_check.py [--list]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 540.0  # the whole check; 60 s of the 10 minutes left for start-up and slack
BENCH_RESERVE_S = 150.0  # kept for the benchmark while the tests run
EXIT_NO_CUDA = 2
#: Tests that run on the policy's device (``device: auto`` is CUDA where there is one), and why
#: each matters there. Multi-GPU paths (NCCL weight sync, torchrun over NCCL) need two devices:
#: not in a one-GPU check.
TESTS: dict[str, str] = {
    "tests/test_lm.py": "LMPolicy, the lean sampler and the GRPO learner on the device; device and dtype choice",
    "tests/test_sampler_bf16.py": "bf16 sampling against fp32 log-probs (on CUDA, dtype auto is bf16)",
    "tests/test_decoder_prefill_and_buffer.py": "the static KV buffer and prefill of the lean sampler",
    "tests/test_grpo_speed.py": "the learner's levers: shared prefix, buckets, fused log-prob gather, autocast",
    "tests/test_off_policy.py": "behaviour log-probs and the off-policy correction",
    "tests/test_packed.py": "oneDNN weight packing stays off on CUDA",
    "tests/test_reference_lm.py": "log-probs and sampling against transformers' own",
    "tests/test_reference_grpo.py": "the GRPO loss and update against a reference implementation",
    "tests/test_agents_training.py": "multi-turn episodes: masks and training on the device",
}


@dataclass(frozen=True)
class Check:
    """One row of the table."""

    name: str
    result: str
    detail: str = ""
    seconds: float | None = None
    ok: bool = True


def cuda_problem() -> str | None:
    """Why this interpreter cannot run on a CUDA device, in words that say what to do; None when it can."""
    try:
        import torch
    except ImportError as e:
        return f"torch does not import ({e}): install the project first (make install)"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build: install a CUDA build of torch (https://pytorch.org/get-started/locally/)"
    if not torch.cuda.is_available():
        seen = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
        return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device (CUDA_VISIBLE_DEVICES={seen}): check nvidia-smi and the driver"
    return None


def device_check() -> Check:
    import torch

    props = torch.cuda.get_device_properties(0)
    detail = f"{props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}, torch {torch.__version__}, bf16 {torch.cuda.is_bf16_supported()}"
    return Check("device", f"{torch.cuda.device_count()} GPU(s)", detail)


def junit_check(name: str, report: Path, seconds: float, code: int, timed_out: bool) -> Check:
    """A pytest run's row from its JUnit report: counts, and the first failure's test and line."""
    if timed_out or not report.is_file():
        why = "cut by the check's deadline" if timed_out else f"pytest exited {code} without a report"
        return Check(name, "not finished", why, seconds, ok=False)
    suite = ET.parse(report).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    assert suite is not None
    total, failed = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    skipped = int(suite.get("skipped", 0))
    counts = ", ".join(f"{n} {w}" for n, w in ((total - failed - skipped, "passed"), (failed, "failed"), (skipped, "skipped")) if n)
    first = next((case for case in suite.iter("testcase") if case.find("failure") is not None or case.find("error") is not None), None)
    detail = ""
    if first is not None:
        problem = first.find("failure") if first.find("failure") is not None else first.find("error")
        message = " ".join(((problem.get("message") if problem is not None else "") or "").split())[:160]
        detail = f"first: {first.get('name')}: {message}"
    return Check(name, counts or "no tests", detail, seconds, ok=failed == 0 and code == 0)


def run_tests(deadline: float, reserve: float) -> list[Check]:
    rows = []
    for path, _why in TESTS.items():
        budget = deadline - reserve - time.monotonic()
        if budget <= 5:
            rows.append(Check(path, "not run", "no time left before the benchmark", ok=False))
            continue
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.xml"
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", path]
            start = time.monotonic()
            try:
                done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=budget)
                rows.append(junit_check(path, report, time.monotonic() - start, done.returncode, False))
            except subprocess.TimeoutExpired:
                rows.append(junit_check(path, report, time.monotonic() - start, -1, True))
    return rows


def run_benchmark(deadline: float) -> list[Check]:
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"), "--json"]
    start = time.monotonic()
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=max(5.0, deadline - start))
    except subprocess.TimeoutExpired as e:
        partial = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else e.stdout or ""
        return [*bench_rows(partial), Check("benchmark", "not finished", "cut by the check's deadline", time.monotonic() - start, ok=False)]
    rows = bench_rows(done.stdout)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:160]
        rows.append(Check("benchmark", f"failed (exit {done.returncode})", last, time.monotonic() - start, ok=False))
    return rows


def bench_rows(stdout: str) -> list[Check]:
    rows = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rows.append(Check(row["arm"], f"{row['rate']:,.1f} {row['unit']}", row["detail"]))
    return rows


def table(rows: list[Check]) -> str:
    cells = [["check", "result", "detail", "s"]] + [[r.name, r.result, r.detail, "" if r.seconds is None else f"{r.seconds:.1f}"] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(4)]
    line = lambda c: "| " + " | ".join(x.ljust(w) for x, w in zip(c, widths)) + " |"  # noqa: E731
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells[1:])])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--list", action="store_true", help="print what the check runs, and why, without a GPU")
    p.add_argument("--deadline", type=float, default=DEADLINE_S, help="seconds for the whole check (a lease shorter than 10 minutes)")
    args = p.parse_args(argv)
    if args.list:
        print("\n".join(f"{path}: {why}" for path, why in TESTS.items()))
        print("benchmarks/bench_gpu.py: the lean sampler fp32/bf16 and HF generate (tokens/s), one GRPO step (completions/s), tiny model")
        return 0
    if (problem := cuda_problem()) is not None:
        print(f"gpu_check: no usable CUDA device: {problem}", file=sys.stderr)
        return EXIT_NO_CUDA
    deadline = time.monotonic() + args.deadline
    reserve = min(BENCH_RESERVE_S, args.deadline / 3)  # the benchmark's share of a shorter deadline
    rows = [device_check(), *run_tests(deadline, reserve), *run_benchmark(deadline)]
    print(table(rows), flush=True)
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
