"""lm.heap: with glibc told to keep freed memory, a decode step's big temporaries reuse their
pages (counted as page faults, which load does not change); the user's allocator choice wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from genrl_swarm.paradigms.lm import heap

# Decode-like steps: each allocates, touches and frees a block of logits (ROWS rows of SmolLM2's
# 49,152-token vocabulary: 128 rows are 25 MB) and a temporary as large. Prints the page faults
# of the last 20 of 40 steps.
STEPS = """
import json, resource, sys, torch
from genrl_swarm.paradigms.lm import heap
kept = heap.keep_freed_memory() if sys.argv[1] == "keep" else False
faults = []
for _ in range(40):
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
    logits = torch.ones(int(sys.argv[2]), 49152)
    (logits * 2).sum()
    del logits
print(json.dumps({"kept": kept, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults[20]}))
"""


def untuned() -> dict[str, str]:
    """This environment without any allocator choice of the user's (``heap.users_choice``)."""
    return {k: v for k, v in os.environ.items() if heap.users_choice({k: v}) is None}


def faults(mode: str, rows: int) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", STEPS, mode, str(rows)], capture_output=True, text=True, timeout=300, env=untuned())
    assert out.returncode == 0, out.stderr[-2000:]
    result: dict[str, int] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_kept_memory_serves_later_steps_without_new_pages_and_giants_are_still_returned() -> None:
    """Steps after the first ones need no new pages for blocks under 32 MB when memory is kept
    (by default glibc may map each one afresh: 6,112 to 245,120 faults here, run to run); blocks
    of 32 MB or more are still mapped and given back on free, so each faults in its ~12,000
    pages again (a giant freed never stays resident)."""
    small, giant = faults("keep", 128), faults("keep", 256)
    assert small["kept"] == giant["kept"] == 1
    assert small["faults"] < 1_000, small
    assert giant["faults"] > 20 * 12_000, giant


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({}, None),
        ({"PATH": "/bin"}, None),
        ({heap.ENV: "default"}, f"{heap.ENV}=default"),
        ({heap.ENV: "Off "}, f"{heap.ENV}=off"),
        ({heap.ENV: "0"}, f"{heap.ENV}=0"),
        ({heap.ENV: "keep"}, None),
        ({"MALLOC_ARENA_MAX": "2"}, "MALLOC_ARENA_MAX"),
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}, "GLIBC_TUNABLES"),
        ({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}, "LD_PRELOAD jemalloc"),
        ({"LD_PRELOAD": "libasan.so"}, None),
    ],
)
def test_the_users_allocator_choice_is_left_alone(env: dict[str, str], reason: str | None) -> None:
    assert heap.users_choice(env) == reason


def test_an_lm_policy_on_a_cpu_keeps_freed_memory() -> None:
    code = (
        "from genrl_swarm.paradigms.lm import heap; from genrl_swarm.paradigms.lm.policy import LMPolicy; LMPolicy('tiny-random'); print(heap._done)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=untuned())
    assert out.returncode == 0 and out.stdout.split()[-1] == "True", out.stderr[-2000:]


@pytest.mark.parametrize(("peers_here", "one_heap"), [(3, True), (1, False)])
def test_the_recipe_check_sets_one_heap_before_the_in_process_peers_allocate(peers_here: int, one_heap: bool) -> None:
    """glibc gives a thread a heap of its own at its first allocation, and each keeps what it
    freed: in-process peers (threads) each held an update's freed activations (3 SmolLM2 adapter
    peers of the demo peaked at 5.0 GB; one heap, set in the recipe check before any peer is
    built, and updates taking turns: 3.3 GB). So the check (``LMPolicy.preflight``, run in the
    main thread before peers are built) sets the heap, one arena included when the process hosts
    several peers; a process of one peer keeps glibc's arenas (its transport's threads allocate
    beside it)."""
    code = (
        "import ctypes; calls = []\n"
        "from genrl_swarm.paradigms.lm import heap; from genrl_swarm.paradigms.lm.policy import LMPolicy\n"
        "class Libc:\n"
        "    def __init__(self, *a, **k): pass\n"
        "    class mallopt:\n"
        "        argtypes = restype = None\n"
        "        def __new__(cls, param, value): calls.append((param, value)); return 1\n"
        "ctypes.CDLL = Libc\n"
        f"LMPolicy.preflight({{'model': 'tiny-random', 'device': 'cpu'}}, {peers_here}); print(heap._done, calls)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=untuned())
    assert out.returncode == 0, out.stderr[-2000:]
    done, calls = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert done == "True" and f"({heap.M_TRIM_THRESHOLD}, {heap.KEEP})" in calls, out.stdout
    assert (f"({heap.M_ARENA_MAX}, 1)" in calls) == one_heap, out.stdout


def test_the_launcher_tells_the_recipe_check_how_many_peers_this_process_hosts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from genrl_swarm.config import load_recipe
    from genrl_swarm.run import launcher

    seen: list[int] = []
    monkeypatch.setattr(launcher, "preflight", lambda spec, peers_here=1: seen.append(peers_here))
    for peers in (3, 1):
        overrides = [f"swarm.num_peers={peers}", "game.max_rounds=1", f"run.dir={tmp_path / str(peers)}", "run.console=false"]
        managers, _ = launcher.build_managers(load_recipe("bandit", overrides))
        launcher.run_managers(managers)
    assert seen == [3, 1]
