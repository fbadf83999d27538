"""The documentation is true and whole: the site builds strictly, every relative link in the
README and the docs resolves, the README's and the Python guide's code runs, and the recipe
reference lists every key the config schemas have (so it cannot drift from them)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import unicodedata
from pathlib import Path

import pytest
import yaml

from genrl_swarm.cli import main as cli_main
from genrl_swarm.config import SECTIONS, RecipeSchema

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.rglob("*.md"))
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "NO_MKDOCS_2_WARNING": "1"}


def _prose(text: str) -> str:
    """The text without fenced code blocks (links inside code are not links)."""
    return FENCE.sub("", text)


def _slug(heading: str) -> str:
    """Python-Markdown's toc slug of a heading's text (what mkdocs and GitHub link to, closely enough)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").replace("*", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", _prose(page.read_text()), re.M)}


def _links(page: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(_prose(page.read_text()))]


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file})")
        elif anchor and file.suffix == ".md" and file.name != "api.md" and anchor not in _anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {file.name})")  # api.md's anchors come from mkdocstrings
    assert not broken, f"{page.name}: broken links: {broken}"


def _nav_files(nav: object) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return set().union(*(_nav_files(x) for x in nav))
    if isinstance(nav, dict):
        return set().union(*(_nav_files(x) for x in nav.values()))
    return set()


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = _nav_files(config["nav"])
    pages = {str(p.relative_to(DOCS)) for p in PAGES}
    assert pages - listed == set(), f"docs pages missing from mkdocs.yml's nav: {sorted(pages - listed)}"
    assert listed - pages == set(), f"nav entries without a page: {sorted(listed - pages)}"


@pytest.mark.slow  # a whole mkdocs build
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """``mkdocs build --strict``: a broken link, a missing anchor or an API reference that does
    not resolve fails the build."""
    pytest.importorskip("mkdocs", reason="the docs extra is needed: pip install '.[docs]'")
    pytest.importorskip("mkdocstrings_handlers.python", reason="the docs extra is needed: pip install '.[docs]'")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "api" / "index.html").read_text().count("GameManager") > 0


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)


def _run(code: str, cwd: Path, timeout: float = 240) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"exit {done.returncode}:\n{code}\n--- stderr:\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_readme_python_example_runs(tmp_path: Path) -> None:
    (block,) = _python_blocks(README)
    out = _run(block, tmp_path)
    assert "peer-0" in out and (tmp_path / "runs" / "readme" / "peer-0" / "metrics.jsonl").is_file()


@pytest.mark.parametrize("index", range(len(_python_blocks(DOCS / "python-api.md"))))
def test_the_python_quickstart_runs(index: int, tmp_path: Path) -> None:
    out = _run(_python_blocks(DOCS / "python-api.md")[index], tmp_path)
    assert "peer-0" in out


def test_the_two_sided_reward_of_the_game_guide_runs(tmp_path: Path) -> None:
    """The guide's ``score_state`` override, in a 3-peer bandit swarm: stage-0 pulls earn more
    than their payoff once the swarm picks the same arms in stage 1."""
    (block,) = [b for b in _python_blocks(DOCS / "write-a-game.md") if "score_state" in b]
    (tmp_path / "bonus.py").write_text(block)
    driver = textwrap.dedent("""
        from bonus import ProposerBonus
        from genrl_swarm.comm.memory import InMemoryBackend
        from genrl_swarm.coord.local import LocalCoordinator
        from genrl_swarm.core import GameConfig, GameManager
        from genrl_swarm.games.bandit import BanditData, BanditReward, SoftmaxLearner, SoftmaxPolicy
        from genrl_swarm.run.launcher import run_managers

        seen = []
        managers, coordinator = [], LocalCoordinator()
        for rank, comm in enumerate(InMemoryBackend.spawn(3)):
            policy = SoftmaxPolicy(num_stages=2, seed=rank)
            m = GameManager(BanditData(tasks_per_round=4, seed=1), ProposerBonus(), policy, SoftmaxLearner(policy),
                            comm, coordinator, GameConfig(num_stages=2, max_rounds=3, exchange_timeout=10.0))
            m.hooks.after_rewards.append(lambda m, state, rewards: seen.append((state, rewards)))
            managers.append(m)
        run_managers(managers)
        plain = BanditReward()
        raised = 0
        for state, rewards in seen:
            for s in rewards.select(stage=0):
                base = plain.score(state.tasks[s.rollout.task_id], state.input_for(s.rollout), s.rollout)
                assert all(x >= b for x, b in zip(s.rewards, base))
                raised += any(x > b for x, b in zip(s.rewards, base))
        assert raised > 0
        print("ok", raised)
    """)
    assert _run(driver, tmp_path).startswith("ok")


def test_the_quickstart_command_runs(tmp_path: Path) -> None:
    """The README's quickstart, ``genrl-swarm run --recipe bandit`` (shortened to 2 rounds)."""
    done = subprocess.run(
        [sys.executable, "-m", "genrl_swarm.cli", "run", "--recipe", "bandit", "game.max_rounds=2", f"run.dir={tmp_path / 'bandit'}"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cumulative reward: peer-0=" in done.stdout
    assert "make demo-bandit" in README.read_text() and "genrl-swarm run --recipe bandit" in README.read_text()


def _documented_keys(section: str) -> set[str]:
    """Keys in the table under ``## `section` ...`` of the recipe reference."""
    text = (DOCS / "recipes.md").read_text()
    part = re.search(rf"^## `{section}`.*?$(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert part, f"recipes.md has no section for `{section}`"
    return set(re.findall(r"^\| `([a-z_]+)` \|", part.group(1), re.M))


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_the_recipe_reference_lists_every_key(section: str) -> None:
    fields = {f.name for f in dataclasses.fields(SECTIONS[section])}
    assert _documented_keys(section) == fields


def test_the_recipe_reference_names_every_group_option_key() -> None:
    text = (DOCS / "recipes.md").read_text()
    conf = ROOT / "src" / "genrl_swarm" / "conf"
    missing = []
    for group in ("communication", "coordinator"):
        for option in sorted((conf / group).glob("*.yaml")):
            keys = set(yaml.safe_load(option.read_text())) - {"_target_"}
            missing += [f"{group}={option.stem}: {k}" for k in sorted(keys) if f"`{k}`" not in text]
    assert not missing, f"recipes.md does not mention: {missing}"


def test_the_readme_is_short_and_about_the_project() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    for history in ("this session", "the issue", "issue's"):
        assert history not in text.lower(), f"project history in the README: {history!r}"


def _run_commands(page: Path) -> list[list[str]]:
    """``genrl-swarm run --recipe ...`` lines of a page's bash blocks, comments, ``--resume`` and ``--overwrite`` off;
    lines with placeholders (``my_recipe``, ``...``, ``<...>``) left out."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("genrl-swarm run --recipe") and not re.search(r"my_recipe|\.\.\.|<|path/to", line):
                commands.append([a for a in shlex.split(line)[2:] if a not in ("--resume", "--overwrite")])
    return commands


@pytest.mark.parametrize(
    "page",
    [README, *(DOCS / p for p in ("getting-started.md", "recipes.md", "scaling.md", "paradigms/lm.md", "paradigms/marl.md"))],
    ids=lambda p: p.name,
)
def test_the_documented_run_commands_are_valid_recipes(
    page: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each documented ``genrl-swarm run`` names a recipe that exists with overrides that check
    (``genrl-swarm validate --no-build``: types and imports, no model loaded)."""
    commands = _run_commands(page)
    assert commands, f"no genrl-swarm run commands found in {page.name}"
    monkeypatch.chdir(tmp_path)
    for args in commands:
        code = cli_main(["validate", "--no-build", *args])
        err = capsys.readouterr().err
        if "is its extra installed?" in err:  # e.g. the marl pages without jax: a skip, not a doc error
            pytest.skip(f"an extra this page's commands need is missing: {err.strip()}")
        assert code == 0, f"{page.name}: genrl-swarm run {' '.join(args)}: {err.strip()}"


def test_genrl_swarm_games_lists_the_packaged_games(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "genrl_swarm.cli", "games"], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "bandit" in done.stdout and "reasoning_gym" in done.stdout


def test_the_complete_game_of_the_guide_runs_and_learns(tmp_path: Path) -> None:
    """The guide's one-file game and recipe, run as documented (``PYTHONPATH=. genrl-swarm run``)."""
    text = (DOCS / "write-a-game.md").read_text()
    (code,) = [b for b in _python_blocks(DOCS / "write-a-game.md") if "class Guesses" in b]
    (recipe,) = [b for b in re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M) if "name: guess" in b]
    (tmp_path / "guess.py").write_text(code)
    (tmp_path / "guess.yaml").write_text(recipe)
    assert "PYTHONPATH=. genrl-swarm run --recipe guess.yaml" in text
    script = Path(sys.executable).parent / "genrl-swarm"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "genrl_swarm.cli"]
    done = subprocess.run([*command, "run", "--recipe", "guess.yaml"], cwd=tmp_path, env={**ENV, "PYTHONPATH": "."},
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "runs" / "guess" / "peer-0" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 20 and rows[-1]["reward/swarm_mean"] > rows[0]["reward/swarm_mean"] + 0.1


#: File names the docs mention that a run or a user writes, not files of the repository.
RUNTIME_FILES = {"state.json", "policy.json", "FILE.peers.json", "mygame/game.py", "./mygame/game.py", "guess.py", "guess.yaml"}


def test_every_source_file_the_docs_name_exists() -> None:
    """A `path.py` (or .yaml, .sol, ...) in backticks names a file of the repository: a renamed or
    moved module must not leave the docs pointing at nothing."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    tracked += [str(p.relative_to(ROOT)) for p in (ROOT / "src").rglob("*") if p.is_file()]  # new files not yet committed
    missing = []
    for page in [README, *PAGES]:
        for name in sorted(set(re.findall(r"`([A-Za-z0-9_./-]+\.(?:py|yaml|sol|sh|ts))`", page.read_text()))):
            if name not in RUNTIME_FILES and not any(f == name or f.endswith("/" + name.lstrip("./")) for f in tracked):
                missing.append(f"{page.name}: {name}")
    assert not missing, f"the docs name files that do not exist: {missing}"


# --------------------------------------------------------------------------- the generated group reference
CONF = ROOT / "src" / "genrl_swarm" / "conf"
BEGIN = "<!-- generated from src/genrl_swarm/conf by `python tests/test_docs.py`; do not edit by hand -->"
END = "<!-- end of generated reference -->"
_KEY = re.compile(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*):\s*(.*?)\s*(?:#\s*(.*))?$")


def _option_rows(path: Path) -> tuple[str, list[tuple[str, str, str]]]:
    """An option file's description (its leading comments) and (dotted key, default, comment) rows."""
    lines = path.read_text().splitlines()
    about = " ".join(line.lstrip("# ").strip() for line in lines if line.startswith("#") and "@package" not in line)
    rows, parents = [], []  # parents: (indent, key)
    for line in lines:
        m = _KEY.match(line)
        if not m or line.lstrip().startswith("#"):
            continue
        indent, key, value, comment = len(m.group(1)), m.group(2), m.group(3), (m.group(4) or "").strip()
        parents = [(i, k) for i, k in parents if i < indent]
        if key == "_target_":
            continue
        if value == "":
            parents.append((indent, key))
            continue
        rows.append((".".join([k for _, k in parents] + [key]), value, comment))
    return about, rows


def _cell(text: str) -> str:
    """Comment text safe in a Markdown table cell (no column breaks, no raw HTML)."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def group_reference() -> str:
    """Markdown tables of every option of the shared config groups, from their YAML files."""
    out = [BEGIN, ""]
    for group in sorted(p for p in CONF.iterdir() if p.is_dir() and not p.name.startswith("_")):
        for option in sorted(group.glob("*.yaml")):
            about, rows = _option_rows(option)
            out += [f"### `{group.name}={option.stem}`", "", _cell(about), ""]
            if rows:
                out += ["| key | default | meaning |", "|---|---|---|"]
                out += [f"| `{k}` | `{v}` | {_cell(c)} |" for k, v, c in rows]
                out.append("")
    return "\n".join(out + [END])


def _generated_block(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def test_the_group_reference_is_up_to_date() -> None:
    """recipes.md's tables of the config groups' keys match the YAML files (regenerate with
    ``python tests/test_docs.py``)."""
    assert _generated_block((DOCS / "recipes.md").read_text()) == group_reference(), "stale: run python tests/test_docs.py"


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_the_recipe_reference_gives_the_schema_defaults(section: str) -> None:
    """The defaults in the section tables are the ones a recipe gets (``genrl_swarm_base``)."""
    defaults = getattr(RecipeSchema(), section)
    text = (DOCS / "recipes.md").read_text()
    part = re.search(rf"^## `{section}`.*?$(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert part
    documented = {k: yaml.safe_load(v) for k, v in re.findall(r"^\| `([a-z_]+)` \| `([^`]*)`", part.group(1), re.M)}
    assert documented == defaults


if __name__ == "__main__":  # regenerate the group reference in docs/recipes.md
    page = DOCS / "recipes.md"
    text = page.read_text()
    page.write_text(text.replace(_generated_block(text), group_reference()))
    print(f"wrote the group reference into {page}")
