"""Fuzz benchmark for scorers: hostile completions through decode -> text -> every scorer a recipe
can name, as an honest peer scores a stranger's body (``ReasoningReward`` under a sender's meter).

Hostile completions: code injection (a shell command, a file write, a socket, a process,
ctypes), exponent towers, deep nesting, huge numbers, and inputs for backtracking or quadratic
parsers, each wrapped the ways answers are extracted (``<answer>`` block, bare, ``\\boxed{}``).
Then the escape corpus (``escape_corpus``), through ``spiral_matrix``'s ``eval``: each first
switches off the worker's Python audit hook (closure tampering found by a ``gc`` walk), then
tries to read a secret (the peer's working directory, a 0600 key, ``/proc``, the environment),
type into a terminal (TIOCSTI), forge or stall its reply (frame games), reach the kernel
directly (ctypes syscalls) or carry a value to the sender's next body (persistence); it scores
above 0 exactly when it got what it tried, so any positive score is an escape; so is holding the peer past the sender's budget.
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


#: Switch the worker's audit hook off: find its closure by a gc walk, replace its ``refuse``.
BYPASS = (
    "[setattr(c, 'cell_contents', lambda why: None) for f in __import__('gc').get_objects()"
    " if type(f).__name__ == 'function' and f.__name__ == 'hook' and f.__closure__"
    " for c in f.__closure__ if getattr(c.cell_contents, '__name__', '') == 'refuse']"
)
_SOCKETS = "[s for s in __import__('gc').get_objects() if type(s).__name__ == 'socket' and s.fileno() >= 0]"


def escape_corpus(secret: Path, cwd_secret: Path) -> dict[str, str]:
    """name -> an answer for ``spiral_matrix`` that scores 0.1 exactly when its attack worked
    (``oracle_answer`` is a local of the frame Reasoning Gym's scorer ``eval``s in)."""
    got = {
        "read a 0600 key": f"open({str(secret)!r}).read()",
        "read the peer's working directory": f"open({str(cwd_secret)!r}).read()",
        "read the zygote's environment": "b'GENRL' in open('/proc/%d/environ' % __import__('os').getppid(), 'rb').read()",
        "read every process's cmdline": "any(b'pytest' in open(f'/proc/{p}/cmdline', 'rb').read() or b'bench' in open(f'/proc/{p}/cmdline', 'rb').read() for p in __import__('os').listdir('/proc') if p.isdigit())",
        "read its own environment": "'GENRL_SWARM' in str(__import__('os').environ)",
        "list the host's /etc": "__import__('os').path.exists('/etc/passwd')",
        "TIOCSTI into /dev/tty": "__import__('fcntl').ioctl(__import__('os').open('/dev/tty', 0), 0x5412, b'x') is not None",
        "TIOCSTI into fd 0-2": "[__import__('fcntl').ioctl(fd, 0x5412, b'x') for fd in (0, 1, 2)]",
        "fork through ctypes": "__import__('ctypes').CDLL(None).syscall(57) >= 0",
        "SysV shared memory": "__import__('ctypes').CDLL(None).shmget(0, 4096, 0o1600) >= 0",
        "clear the refusal log": "__import__('sys').modules['genrl_swarm.sandbox.kernel'].VIOLATIONS.clear() is None and open('/etc/hostname').read()",
        "write in scratch for the next worker": "open('/scratch/carried', 'w').write('x')",
        "read what a previous worker wrote": "open('/scratch/carried').read() == 'x'",
        "plant a builtin": "setattr(__import__('builtins'), 'CARRIED', 1) is None and False",
        "find a builtin planted before": "hasattr(__import__('builtins'), 'CARRIED')",
        "signal the zygote": "__import__('os').kill(__import__('os').getppid(), 19) is None",
    }
    corpus = {name: f"({BYPASS}, oracle_answer.split() if ({cond}) else [])[1]" for name, cond in got.items()}
    forged = "(lambda b: len(b).to_bytes(4, 'big') + b)(__import__('msgspec').msgpack.encode({'value': 1.0, 'nonce': 1}))"
    corpus["forge a reply of 1.0 for another job"] = f"({BYPASS}, [__import__('os').write(s.fileno(), {forged}) for s in {_SOCKETS}], [])[2]"
    corpus["half a reply, then sleep"] = (
        f"({BYPASS}, [__import__('os').write(s.fileno(), b'\\x00\\x00\\x00\\x40ab') for s in {_SOCKETS}], __import__('time').sleep(30))[2]"
    )
    return corpus


def run_escapes(secret: Path, cwd_secret: Path, budget: float) -> tuple[list[list[object]], int]:
    """Every escape attempt on ``spiral_matrix``, as a stranger's body: (rows, escapes)."""
    task = ReasoningGymData(["spiral_matrix"], tasks_per_round=1, eval_size=0, seed=1).round_tasks(0)[0]
    rows, escapes = [], 0
    for name, answer in escape_corpus(secret, cwd_secret).items():
        with metered("escaper", budget) as m:  # one stranger: its bodies may try to carry state to each other
            start = time.perf_counter()
            try:
                value: float | str = accuracy(task, f"<answer>{answer}</answer>")
            except CutOff as e:
                value = f"dropped: {str(e)[:60]}"
            took = time.perf_counter() - start
        stalled = took > budget + 0.5  # held the peer past the sender's budget
        escaped = (isinstance(value, float) and value > 0) or stalled
        escapes += escaped
        verdict = "STALLED" if stalled else "ESCAPED" if escaped else "no"
        rows.append([name, verdict, str(value)[:70], f"{took:.2f}", f"{m.spent:.2f}"])
    return rows, escapes


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--entries", type=int, default=2, help="tasks per dataset")
    p.add_argument("--budget", type=float, default=2.0, help="trust.cpu_budget per sender (seconds)")
    p.add_argument("--escapes-only", action="store_true", help="only the escape corpus (seconds, not minutes)")
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
    for dataset in () if args.escapes_only else (*SAPO_DATASETS, *RISKY):
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
    keys = Path(tempfile.mkdtemp())
    secret, cwd_secret = keys / "chain.key", Path.cwd() / f".bench-secret-{os.getpid()}"
    for path in (secret, cwd_secret):
        path.write_text("secret")
        path.chmod(0o600)
    os.environ["GENRL_SWARM_BENCH_CANARY"] = "secret"  # a variable of the peer's, for the environment attacks
    try:
        escape_rows, escaped = run_escapes(secret, cwd_secret, args.budget)
    finally:
        cwd_secret.unlink()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(machine(), f"| load {os.getloadavg()[0]:.1f} | cpu_budget {args.budget} s")
    if rows:
        print(table(["dataset", "scored", "bodies", "dropped", "slowest body (s wall)", "most charged (s CPU)"], rows))
    print(table(["escape attempt (after disabling the audit hook)", "escaped", "result", "wall (s)", "charged (s)"], escape_rows))
    print(f"escapes: {escapes + escaped} ({escaped} of {len(escape_rows)} in the escape corpus) | peer peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
