"""Key-value store puzzle: a stateful, multi-step task. The model reads and edits a small store
with get/set/delete/list_keys until it meets a goal, then answers ``done``; the reward checks the
final store against the goal state computed from the seed (the answer text does not matter).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from genrl_swarm.envd.schema import Param, Tool
from genrl_swarm.envd.tasks.base import Outcome, Setup, Task, ToolFailure

MAX_KEYS = 64
KEY = Param("string", "a key", max_length=64)
WORDS = ["apple", "river", "stone", "cloud", "amber", "maple", "delta", "ember", "frost", "grove"]


def _goal_sum(rng: Any, store: dict[str, str]) -> tuple[str, dict[str, str]]:
    items = {f"item_{w}": str(rng.randint(1, 99)) for w in rng.sample(WORDS, rng.randint(3, 5))}
    store.update(items)
    total = sum(int(v) for v in items.values())
    return "Set the key total to the sum of the values of all keys that start with item_.", {**store, "total": str(total)}


def _goal_chain(rng: Any, store: dict[str, str]) -> tuple[str, dict[str, str]]:
    hops = [f"node_{w}" for w in rng.sample(WORDS, rng.randint(3, 5))]
    store["start"] = hops[0]
    store.update(dict(zip(hops, hops[1:])))
    store[hops[-1]] = str(rng.randint(100, 999))
    goal = "Starting at key start, follow the values (each names the next key) to a number; set the key result to it."
    return goal, {**store, "result": store[hops[-1]]}


def _goal_swap(rng: Any, store: dict[str, str]) -> tuple[str, dict[str, str]]:
    a, b = (f"slot_{w}" for w in rng.sample(WORDS, 2))
    store[a], store[b] = rng.sample(WORDS, 2)
    return f"Swap the values of the keys {a} and {b}.", {**store, a: store[b], b: store[a]}


GOALS = (_goal_sum, _goal_chain, _goal_swap)


class KvStore(Task):
    name = "kvstore"
    summary = "edit a key-value store to reach a goal; reward 1 when the final store is right"
    tools = (
        Tool("list_keys", "List every key in the store."),
        Tool("get", "Read the value of a key.", {"key": KEY}),
        Tool("set", "Write a value under a key.", {"key": KEY, "value": Param("string", "the value", max_length=256)}),
        Tool("delete", "Remove a key.", {"key": KEY}),
    )

    def setup(self, seed: int, scratch: Path | None) -> Setup:
        rng = self.rng(seed, self.name)
        store = {f"misc_{w}": rng.choice(WORDS) for w in rng.sample(WORDS, 2)}  # distractors
        goal, target = GOALS[rng.randrange(len(GOALS))](rng, store)
        prompt = f"You manage a key-value store. {goal} Use the tools; when the store is right, answer <answer>done</answer>."
        return Setup(prompt, json.dumps(target, sort_keys=True), dict(store))

    def call(self, tool: str, arguments: dict[str, Any], state: Any, scratch: Path | None) -> Outcome:
        store: dict[str, str] = dict(state)
        key = arguments.get("key", "")
        if tool == "list_keys":
            return Outcome(", ".join(sorted(store)) or "(empty)", store)
        if tool != "set" and key not in store:
            raise ToolFailure(f"no key {key!r}")
        if tool == "get":
            return Outcome(store[key], store)
        if tool == "delete":
            del store[key]
            return Outcome(f"deleted {key}", store)
        if key not in store and len(store) >= MAX_KEYS:
            raise ToolFailure(f"the store is full ({MAX_KEYS} keys)")
        store[key] = arguments["value"]
        return Outcome(f"{key} = {store[key]}", store)

    def reward(self, answer: str, truth: str, state: Any) -> float:
        return float(dict(state or {}) == json.loads(truth))
