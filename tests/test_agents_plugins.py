"""Plug-in agent tasks (issue 47.3): a task registered by an installed distribution under the
entry-point group ``genrl_swarm.agent_tasks`` is known to the environment service, its workers
and their sandboxed children, with no extra process.

The package is built and installed here as a user would (``pip install``, into a target directory
outside the repository, put on PYTHONPATH), so its entry point is a real distribution's; each
check runs in a fresh interpreter that knows nothing else about it. A plug-in that cannot load is
reported by name and reason where the task is asked for, and leaves the packaged tasks alone."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from genrl_swarm.envd.tasks import TASKS, TaskRegistry
from genrl_swarm.envd.tasks.calculator import Calculator

TESTS = Path(__file__).parent
#: The plug-in: a unit converter in 30 lines, as a user writes one (docs/paradigms/agents.md).
UNITCONV = '''
"""Convert lengths with a ``convert`` tool; reward 1 for the exact value, 0.2 for a number."""
from fractions import Fraction
from genrl_swarm.envd.schema import Param, Tool
from genrl_swarm.envd.tasks import Outcome, Setup, Task, ToolFailure
from genrl_swarm.envd.tasks.base import same_answer

METRES = {"mm": Fraction(1, 1000), "cm": Fraction(1, 100), "m": Fraction(1), "km": Fraction(1000)}
UNIT = Param("string", "a unit of length", enum=tuple(METRES))


class UnitConverter(Task):
    name = "unit-converter"
    summary = "convert lengths with a convert tool"
    tools = (Tool("convert", "Convert a length.", {"value": Param("number", "the length"), "unit": UNIT, "to": UNIT}),)

    def setup(self, seed, scratch):
        rng = self.rng(seed, self.name)
        value, unit, to = rng.randint(1, 99), *rng.sample(sorted(METRES), 2)
        prompt = f"How many {to} are {value} {unit}? Use the convert tool, then answer as <answer>...</answer>."
        return Setup(prompt, f"{float(value * METRES[unit] / METRES[to]):g}")

    def call(self, tool, arguments, state, scratch):
        if arguments["value"] < 0:
            raise ToolFailure("a length is never negative")
        return Outcome(f"{float(Fraction(arguments['value']) * METRES[arguments['unit']] / METRES[arguments['to']]):g}")

    def reward(self, answer, truth, state):  # partial credit for a number: a signal early on
        return 1.0 if same_answer(answer, truth) else 0.2 * any(c.isdigit() for c in answer)
'''
PYPROJECT = """
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "genrl-unitconv"
version = "0.1.0"

[project.entry-points."genrl_swarm.agent_tasks"]
unit-converter = "unitconv:UnitConverter"
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plug-in package, built from its source and installed into a directory of its own."""
    root = tmp_path_factory.mktemp("plugin")
    (root / "src").mkdir()
    (root / "src" / "pyproject.toml").write_text(PYPROJECT)
    (root / "src" / "unitconv.py").write_text(textwrap.dedent(UNITCONV))
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*pip, "--target", str(root / "site"), str(root / "src")], check=True, capture_output=True, timeout=300)
    assert (root / "site" / "genrl_unitconv-0.1.0.dist-info" / "entry_points.txt").is_file()
    return root / "site"


def env_with(site: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(site), str(TESTS), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def python(site: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env_with(site), timeout=timeout)


PLAY = """
from genrl_swarm.envd import Environment, TaskSpec, connect
from genrl_swarm.envd.tasks import TASKS
assert TASKS.plugins == ("unit-converter",), TASKS.plugins
with connect("local") as client:                 # the in-process service: a worker and its sandbox children
    env = Environment(client)
    first = env.reset(TaskSpec("unit-converter", seed=5))
    assert [t["function"]["name"] for t in first.tools] == ["convert"], first.tools
    question = first.messages[-1].content
    value, unit = question.split(" are ")[1].split("?")[0].split()
    to = question.split("How many ")[1].split(" are ")[0]
    call = '{"name": "convert", "arguments": {"value": %s, "unit": "%s", "to": "%s"}}' % (value, unit, to)
    said = env.step("<tool_call>" + call + "</tool_call>").message.content
    wrong = env.step('<tool_call>{"name": "convert", "arguments": {"value": -1, "unit": "m", "to": "m"}}</tool_call>')
    end = env.step("<answer>" + said + "</answer>")
    print(question, said, wrong.message.content, end.reward, end.finish_reason, sep="|")
"""


def test_an_installed_task_plays_in_the_services_sandbox(installed: Path) -> None:
    done = python(installed, "-c", PLAY)
    assert done.returncode == 0, done.stderr[-3000:]
    question, said, wrong, reward, reason = done.stdout.strip().splitlines()[-1].split("|")
    assert question.startswith("How many ") and said and "never negative" in wrong, done.stdout  # tool code ran, its failure shown
    assert (float(reward), reason) == (1.0, "answer"), done.stdout


def test_envd_offers_installed_tasks_by_default(installed: Path) -> None:
    args = [sys.executable, "-m", "genrl_swarm.cli", "envd", "--port", "0", "--workers", "1", "--sandboxes", "1"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_with(installed))
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        line = proc.stdout.readline() if ready else "(nothing within 120 s)"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert line.startswith("envd listening on"), (line, err[-2000:])
    offered = line.split(" tasks ")[1].split(", sandbox:")[0].split(",")
    assert offered == ["calculator", "calculator-1", "calculator-2", "sql", "kvstore", "unit-converter"], line


@pytest.mark.slow  # LM training
def test_the_agent_recipe_trains_two_rounds_on_an_installed_task(installed: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")  # the run's interpreter trains the tiny model
    pytest.importorskip("transformers")
    run = tmp_path / "run"
    overrides = [
        f"run.dir={run}", "run.tensorboard=false", "run.console=false", "run.plot=false",
        "policy.model=tiny-random", "policy.sampling.max_new_tokens=10", "game.max_rounds=2",
        "data.tasks=[unit-converter]", "data.prefill=['<answer>']", "data.group_size=4", "data.max_turns=2", "data.max_tokens=1000", "data.eval_size=0",
    ]  # fmt: skip
    done = python(installed, "-m", "genrl_swarm.cli", "run", "--recipe", "agent", *overrides, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    for peer in ("peer-0", "peer-1"):
        rows = [json.loads(line) for line in (run / peer / "metrics.jsonl").read_text().splitlines()]
        assert [r["round"] for r in rows] == [0, 1], peer
        for r in rows:
            assert r["swarm/peers_s0"] == 2 and r["swarm/refused_s0"] == 0, r  # each peer replayed the other's episodes
            assert {k for k in r if k.startswith("agent/") and k.endswith("/reward")} == {"agent/unit-converter/reward"}, r
        assert sum(r["train/sequences"] for r in rows) > 0, rows  # the plug-in's partial credit gave GRPO a signal


# --------------------------------------------------------------------------- broken plug-ins
def distribution(site: Path, name: str, entry_points: str, module: str = "") -> None:
    """An installed distribution in its simplest form (dist-info metadata, entry points, a module)."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[genrl_swarm.test_plugins]\n{entry_points}\n")
    if module:
        (site / f"{name}.py").write_text(module)


@pytest.fixture
def broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TaskRegistry]:
    def calc(cls: str, name: str) -> str:
        return f"from genrl_swarm.envd.tasks.calculator import Calculator\nclass {cls}(Calculator):\n    name = {name!r}\n"

    distribution(tmp_path, "imports_nothing", "missing = no_such_module:Task")
    distribution(tmp_path, "not_a_task", "notatask = not_a_task:thing", "thing = 42\n")
    distribution(tmp_path, "misnamed", "misnamed = misnamed:Other", calc("Other", "other"))
    distribution(tmp_path, "squatter", "calculator = squatter:Other", calc("Other", "calculator"))
    distribution(tmp_path, "good", "good = good:Good", calc("Good", "good"))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield TaskRegistry([Calculator()], group="genrl_swarm.test_plugins")


def test_a_broken_plugin_is_named_with_its_reason_and_spares_the_others(broken: TaskRegistry) -> None:
    assert sorted(broken) == ["calculator", "good"] and broken.plugins == ("good",)
    assert isinstance(broken["calculator"], Calculator) and type(broken["calculator"]) is Calculator  # never replaced
    assert sorted(broken.broken) == ["calculator", "misnamed", "missing", "notatask"]
    assert broken.unknown(["good", "calculator"]) is None
    assert "failed to load: ModuleNotFoundError" in str(broken.unknown(["missing"]))
    assert "is a int, not a genrl_swarm.envd.tasks.Task" in str(broken.unknown(["notatask"]))
    assert "registered as 'misnamed' but its task is named 'other'" in str(broken.unknown(["misnamed"]))
    assert "a packaged task's" in broken.broken["calculator"]
    said = str(broken.unknown(["chess"]))
    assert said.startswith("unknown task 'chess' (known: calculator, good;") and "genrl_swarm.test_plugins" in said


def test_the_packaged_registry_names_the_plugin_group_when_a_task_is_unknown() -> None:
    from genrl_swarm.games.agent import AgentData

    with pytest.raises(ValueError, match=r"^tasks: unknown task 'chess' \(known: .*entry-point group genrl_swarm.agent_tasks\)$"):
        AgentData(["calculator", "chess"])
    assert "calculator" in TASKS and TASKS.unknown(["sql"]) is None
