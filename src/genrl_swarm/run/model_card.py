"""The model card of an exported peer: the Hub's README.md (YAML front matter, then Markdown).

Why these fields: the front matter is what the Hub indexes (``base_model`` links the model to
its base and lists it under the base's fine-tunes or adapters, ``library_name`` picks the loading
snippet the Hub shows, ``tags`` make it findable); the body is what a reader needs to judge a
swarm-trained model: which game, how many rounds, what it scored (this peer's own scoring, the
only truth a peer has), and the swarm it learned in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

#: Metrics of how the run went rather than what the model learned: left out of the card's table.
OPERATIONAL = ("time/", "reward/peer/", "dropped/", "swarm/", "trust/", "train/", "mem/")
CURVE_POINTS = 12  # rounds shown in the card's reward table (evenly spaced, the last one always)


@dataclass(frozen=True)
class CardFacts:
    """What the card says, gathered by ``export`` from the recipe, the checkpoint and the logs."""

    name: str  # the recipe's name
    recipe: str  # the recipe as given to the command
    peer: str
    round: int  # the checkpoint's round, counted from 0
    max_rounds: int
    stages: int
    num_peers: int  # peers the recipe runs in one process (a HiveMind swarm: 1 here, more out there)
    base_model: str | None  # a Hub id, or None when the base is a local or test model
    adapter: bool  # a PEFT (LoRA) adapter folder, not full weights
    components: Mapping[str, str] = field(default_factory=dict)  # section -> its _target_
    state: Mapping[str, Any] = field(default_factory=dict)  # the checkpoint's state.json
    rows: Sequence[Mapping[str, Any]] = ()  # this peer's metrics rows up to the checkpoint's round


def short(target: str) -> str:
    return target.rsplit(".", 1)[-1] if target else "-"


def front_matter(facts: CardFacts) -> dict[str, Any]:
    learner = facts.components.get("learner", "").lower()
    tags = ["genrl-swarm", "reinforcement-learning", "swarm", facts.name]
    tags += ["grpo"] if "grpo" in learner else []
    tags += ["lora"] if facts.adapter else []
    out: dict[str, Any] = {"base_model": facts.base_model} if facts.base_model else {}
    return out | {"library_name": "peft" if facts.adapter else "transformers", "pipeline_tag": "text-generation", "tags": tags}


def latest_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[float, int]]:
    """Each result metric's latest value and its round (evaluations run only some rounds)."""
    out: dict[str, tuple[float, int]] = {}
    for row in rows:
        for key, value in row.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and key != "round" and not key.startswith(OPERATIONAL):
                out[key] = (float(value), int(row.get("round", -1)))
    return out


def curve(rows: Sequence[Mapping[str, Any]], points: int = CURVE_POINTS) -> list[Mapping[str, Any]]:
    """At most ``points`` rows, evenly spaced, the first and the last included."""
    if len(rows) <= points:
        return list(rows)
    step = (len(rows) - 1) / (points - 1)
    return [rows[round(i * step)] for i in range(points)]


def number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def body(facts: CardFacts) -> list[str]:
    rounds = facts.round + 1
    what = "a LoRA adapter (PEFT) on" if facts.adapter else "a post-trained"
    base = f"`{facts.base_model}`" if facts.base_model else "its base model"
    lines = [
        f"# {facts.name}: {facts.peer} after {rounds} rounds",
        "",
        f"{what} {base}, trained by peer `{facts.peer}` of a GenRL-Swarm swarm: "
        "each round it generated rollouts, shared them with the other peers, scored every rollout itself and updated its policy.",
        "",
        "## Game",
        "",
        f"- recipe: `{facts.recipe}` (name `{facts.name}`), {facts.stages} stage(s) per round",
        f"- rounds played: {rounds} of {facts.max_rounds}",
    ]
    lines += [f"- {section}: `{target}`" for section, target in facts.components.items() if section not in ("communication", "coordinator")]
    metrics = latest_metrics(facts.rows)
    lines += ["", "## Metrics", "", "This peer's own scoring (rewards are recomputed locally, never read from other peers)."]
    if metrics:
        lines += ["", "| metric | value | round |", "|---|---|---|"]
        lines += [f"| `{k}` | {number(v)} | {r + 1} |" for k, (v, r) in sorted(metrics.items())]
    shown = [c for c in ("reward/own", "reward/swarm_mean", "eval/reward") if any(c in row for row in facts.rows)]
    if shown:
        lines += ["", "| round | " + " | ".join(f"`{c}`" for c in shown) + " |", "|---" * (len(shown) + 1) + "|"]
        lines += [f"| {int(row.get('round', -1)) + 1} | " + " | ".join(number(row.get(c, "")) for c in shown) + " |" for row in curve(facts.rows)]
    scored = sorted(k.removeprefix("reward/peer/") for k in (facts.rows[-1] if facts.rows else {}) if k.startswith("reward/peer/"))
    lines += [
        "",
        "## Swarm",
        "",
        f"- backend: `{short(facts.components.get('communication', ''))}`, coordinator: `{short(facts.components.get('coordinator', ''))}`",
        f"- peers per process: {facts.num_peers}; peers this one scored in its last round: {', '.join(scored) or '-'}",
        f"- cumulative reward: {number(float(facts.state.get('cumulative_reward', 0.0)))}, rounds won: {facts.state.get('wins', 0)}",
    ]
    return lines


def render(facts: CardFacts) -> str:
    """The README.md text: ``---`` YAML ``---`` then the body."""
    yaml_text = yaml.safe_dump(front_matter(facts), sort_keys=False, allow_unicode=True)
    return f"---\n{yaml_text}---\n\n" + "\n".join(body(facts)) + "\n"
