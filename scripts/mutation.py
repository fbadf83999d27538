"""``make mutation``: mutmut over the modules that decide correctness, one group at a time.

Why groups: mutmut runs, for each mutant, only the tests that executed the mutated function.
Each group names the fast, in-process tests that own its modules, so a run takes minutes per
group instead of the whole suite per mutant. A group runs in its own work directory
(``.mutation/<group>``) so groups never share mutmut's caches.

Equivalent mutants (a change no test can observe because behaviour is identical) are listed in
``mutation/equivalent/<group>.txt``, one per line: ``<mutant name>  <one-line reason>``. They are
reported and left out of the score. The goal is 90% of the other mutants killed per module.

Usage: ``python scripts/mutation.py [--group core,coord] [--only comm/memory.py] [--keep] [--max-children N]``.
Exits 1 when a module is below the goal.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"
EQUIVALENT = ROOT / "mutation" / "equivalent"
GOAL = 0.90


@dataclass(frozen=True)
class Group:
    """Modules mutated together and the tests that own them."""

    modules: tuple[str, ...]  # fnmatch globs under src/
    tests: tuple[str, ...]  # test files run against each mutant
    # torch's thread pool does not survive a plain fork: every mutant would die of SIGXCPU and
    # count as a (false) timeout kill. Groups that run torch fork from a clean server instead.
    isolation: str = "fork"


GROUPS: dict[str, Group] = {
    "core": Group(
        ("src/genrl_swarm/core/*.py",),
        (
            "tests/test_loop.py",
            "tests/test_exchange.py",
            "tests/test_hostile.py",
            "tests/test_local_truth.py",
            "tests/test_codec.py",
            "tests/test_checkpoint.py",
            "tests/test_multipeer.py",
            "tests/test_core_units.py",
            "tests/test_core_multipeer.py",
            "tests/test_trust_v3_book.py",
            "tests/test_trust_v3_copies.py",
            "tests/test_trust_v4_views.py",
            "tests/test_trust_v4_timing.py",
        ),
    ),
    "comm": Group(
        (
            "src/genrl_swarm/comm/base.py",
            "src/genrl_swarm/comm/codec.py",
            "src/genrl_swarm/comm/memory.py",
            "src/genrl_swarm/comm/null.py",
            "src/genrl_swarm/comm/hivemind/membership.py",
        ),
        (
            "tests/test_exchange.py",
            "tests/test_codec.py",
            "tests/test_hostile.py",
            "tests/test_multipeer.py",
            "tests/test_comm_units.py",
            "tests/test_trust_v4_equivocation.py",
            "tests/test_trust_v4_timing.py",
            "tests/test_trust_v4_views.py",
        ),
    ),
    "coord": Group(
        ("src/genrl_swarm/coord/*.py",),
        (
            "tests/test_coordinator_rules.py",
            "tests/test_multipeer.py",
            "tests/test_contract.py",
            "tests/test_coord_units.py",
            "tests/test_trust_v3_rewards.py",
        ),
    ),
    "trainers": Group(
        tuple(f"src/genrl_swarm/paradigms/lm/{m}.py" for m in ("learner", "grpo_loss", "logprobs", "precision", "prefix", "selection")),
        (
            "tests/test_grpo_loss.py",
            "tests/test_off_policy.py",
            "tests/test_reference_grpo.py",
            "tests/test_lm.py",
            "tests/test_grpo_speed.py",
            "tests/test_trust_v3_flood.py",
        ),
        isolation="forkserver",
    ),
    "lm": Group(
        tuple(
            f"src/genrl_swarm/paradigms/lm/{m}.py"
            for m in ("answers", "decoder", "models", "policy", "sampling", "sampling_model", "static_sampling", "tiny")
        ),
        ("tests/test_lm.py", "tests/test_reference_lm.py", "tests/test_grpo_loss.py", "tests/test_sampler_bf16.py", "tests/test_grpo_speed.py"),
        isolation="forkserver",
    ),
    "protocol": Group(
        ("src/genrl_swarm/protocol/*.py",),
        ("tests/test_protocol.py", "tests/test_sim.py", "tests/test_protocol_units.py"),
    ),
    "agents": Group(
        ("src/genrl_swarm/envd/parsing.py", "src/genrl_swarm/envd/schema.py", "src/genrl_swarm/envd/tasks/*.py"),
        ("tests/test_agents_parsing.py", "tests/test_agents_tasks.py", "tests/test_agents_units.py"),
    ),
    "async": Group(
        (
            "src/genrl_swarm/paradigms/lm/async_grpo/buffer.py",
            "src/genrl_swarm/paradigms/lm/async_grpo/staleness.py",
            "src/genrl_swarm/paradigms/lm/async_grpo/config.py",
        ),
        ("tests/test_async_units.py", "tests/test_async_rules.py"),
    ),
}

# Modules of the areas left out of the run, and why (printed under the table).
NOT_RUN = {
    "paradigms/lm/async_grpo/ (but buffer, staleness, config)": "Ray actors run in other processes, which mutmut's per-test coverage cannot see",
    "paradigms/marl/*.py": "every test jit-compiles JAX programs (~35 s for the math tests alone); mutants x tests is days on 2 cores",
    "paradigms/agents/, envd/ (but parsing, schema, arith, tasks)": "the sandbox, envd and training code run in worker processes or need the LM tests (minutes each)",
    "comm/hivemind/*.py (but membership.py)": "each test starts p2pd daemons (seconds per test); mutants x tests is hours on 2 cores",
    "comm/torch_dist.py": "runs inside gloo worker processes that mutmut's per-test coverage cannot see",
}


def load_equivalent() -> dict[str, str]:
    """Mutant name -> reason, from mutation/equivalent/*.txt."""
    found: dict[str, str] = {}
    for listing in sorted(EQUIVALENT.glob("*.txt")):
        for line in listing.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, reason = line.partition(" ")
                found[name] = reason.strip()
    return found


def prepare(name: str, group: Group, keep: bool) -> Path:
    """A work dir with the sources, the tests and a pyproject whose [tool.mutmut] is this group's."""
    work = WORK / name
    if work.exists() and not keep:
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    for sub in ("src", "tests", "contracts", "scripts", "benchmarks"):  # benchmarks: tests reuse their drivers
        target = work / sub
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(ROOT / sub, target, ignore=shutil.ignore_patterns("__pycache__", "node_modules"))
    if (ROOT / "contracts" / "node_modules").exists() and not (work / "contracts" / "node_modules").exists():
        (work / "contracts" / "node_modules").symlink_to(ROOT / "contracts" / "node_modules")
    tests = [t for t in group.tests if (ROOT / t).exists()]
    config = (
        "[tool.mutmut]\n"
        'source_paths = ["src"]\n'
        f"only_mutate = {json.dumps(list(group.modules))}\n"
        f'process_isolation = "{group.isolation}"\n'
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:randomly", "-q", "--timeout=120",'
        ' "--deselect", "tests/test_contract.py::test_committed_artifact_matches_the_source"]\n'
        'also_copy = ["tests", "contracts", "scripts", "benchmarks"]\n'
        "\n[tool.pytest.ini_options]\n"
        'testpaths = ["tests"]\n'
    )
    (work / "pyproject.toml").write_text(config)
    return work


def results(work: Path) -> dict[str, int | None]:
    """Mutant name -> mutmut's exit code, read from the .meta files of the run."""
    codes: dict[str, int | None] = {}
    for meta in (work / "mutants").rglob("*.meta"):
        codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    return codes


def module_of(mutant: str) -> str:
    """genrl_swarm.coord.scores.x_f__mutmut_3 -> coord/scores.py (methods: ...xǁClassǁm__mutmut_1)."""
    parts = mutant.split(".")
    return "/".join(parts[1:-1]) + ".py"


def narrowed(group: Group, only: str | None) -> Group:
    """The group with its modules cut to ``only`` (a path under src/genrl_swarm/): re-checking one
    module after new tests takes minutes instead of the whole group's run."""
    if only is None:
        return group
    path = f"src/genrl_swarm/{only}"
    if not any(fnmatch.fnmatch(path, glob) for glob in group.modules):
        raise SystemExit(f"--only {only}: not one of this group's modules ({', '.join(group.modules)})")
    return dataclasses.replace(group, modules=(path,))


def run_group(name: str, group: Group, keep: bool, max_children: int) -> dict[str, int | None]:
    work = prepare(name, group, keep)
    # The tiny test models are built once into the repo's cache, not once per work dir.
    env = {**os.environ, "GENRL_SWARM_CACHE": str(ROOT / ".pytest_cache" / "genrl_swarm")}
    started = time.monotonic()
    log = work / "mutmut.log"
    with log.open("w") as out:
        subprocess.run(
            [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children)],
            cwd=work,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    print(f"[{name}] mutmut finished in {time.monotonic() - started:.0f} s (log: {log.relative_to(ROOT)})", flush=True)
    return results(work)


def table(codes: dict[str, int | None], equivalent: dict[str, str]) -> bool:
    """Print per-module counts and the survivors; True when every module meets the goal."""
    from mutmut.stats import status_by_exit_code

    per_module: dict[str, Counter[str]] = {}
    survivors: list[str] = []
    for mutant, code in sorted(codes.items()):
        status = "equivalent" if mutant in equivalent else status_by_exit_code[code]
        per_module.setdefault(module_of(mutant), Counter())[status] += 1
        if status in ("survived", "no tests", "suspicious", "not checked"):
            survivors.append(f"{mutant}: {status}")
    ok = True
    print(f"\n{'module':38} {'mutants':>7} {'killed':>7} {'timeout':>7} {'survived':>8} {'no test':>7} {'equiv':>5} {'score':>6}")
    for module, c in sorted(per_module.items()):
        caught = c["killed"] + c["timeout"] + c["caught by type check"] + c["segfault"]
        counted = sum(c.values()) - c["equivalent"] - c["skipped"]
        score = caught / counted if counted else 1.0
        ok &= score >= GOAL
        print(
            f"{module:38} {sum(c.values()):7} {c['killed']:7} {c['timeout']:7} {c['survived']:8} {c['no tests']:7} "
            f"{c['equivalent']:5} {score:6.1%}{'' if score >= GOAL else '  < goal'}"
        )
    print(f"\nsurviving mutants ({len(survivors)}):")
    for line in survivors:
        print("  " + line)
    used = [m for m in equivalent if m in codes]
    print(f"\nequivalent mutants ({len(used)}):")
    for mutant in used:
        print(f"  {mutant}: {equivalent[mutant]}")
    print("\nnot in the run:")
    for module, why in NOT_RUN.items():
        print(f"  {module}: {why}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", default=",".join(GROUPS), help=f"comma-separated, of {', '.join(GROUPS)}")
    parser.add_argument("--only", help="one module of the group, e.g. comm/hivemind/membership.py")
    parser.add_argument("--keep", action="store_true", help="reuse the work dir: mutmut re-runs only what changed")
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    names = [g for g in args.group.split(",") if g]
    unknown = [g for g in names if g not in GROUPS]
    if unknown:
        parser.error(f"unknown group {unknown[0]!r}; groups: {', '.join(GROUPS)}")
    codes: dict[str, int | None] = {}
    for name in names:
        codes.update(run_group(name, narrowed(GROUPS[name], args.only), args.keep, args.max_children))
    ok = table(codes, load_equivalent())
    print(f"\n{time.strftime('%Y-%m-%d')} on {os.cpu_count()} CPUs; goal {GOAL:.0%} per module: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
