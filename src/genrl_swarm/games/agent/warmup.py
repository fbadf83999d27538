"""A short supervised warm-up on synthetic correct episodes that the environment itself plays.

Why: SmolLM2-135M-Instruct almost never writes a parsable ``<tool_call>`` on its own, so every
episode of a GRPO group scores 0 and there is nothing to learn from. A few steps of supervised
training on episodes that solve the task teach the format; reinforcement learning then starts
from a model whose groups have some successes. No download: the episodes are played in the
in-process environment service with the known solution of a calculator task (call
``calculate`` on the question's expression, answer the tool's result), through the same
``Session``/``Conversation`` as the policy, so prompt, scaffolds and tool results are the
environment's own ids and each model turn ends on the tokenizer's EOS as a sampled turn does.

Only the model's tokens are trained: the loss is cross-entropy on the episode's ``loss_mask``
(its model turns), never on the prompt, the scaffolds (they end the environment's turn) or tool
results. Seeds come from a ``warmup`` stream that avoids the held-out seeds and questions of
``heldout.py`` (the first ``HELDOUT_RESERVE`` of each kind).

    OMP_NUM_THREADS=1 python -m genrl_swarm.games.agent.warmup --out runs/demo-agent/warm \\
        --tasks calculator-1 calculator-2 --episodes 32
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genrl_swarm.envd.api import EnvClient
from genrl_swarm.envd.tasks import TASKS
from genrl_swarm.envd.tasks.calculator import Calculator
from genrl_swarm.envd.types import TaskSpec
from genrl_swarm.games.agent.heldout import heldout_seeds
from genrl_swarm.paradigms.agents.bodies import Episode
from genrl_swarm.paradigms.agents.chat import ChatRenderer
from genrl_swarm.paradigms.agents.episodes import Session
from genrl_swarm.run.failures import command
from genrl_swarm.run.storage import saving

#: The demo's scaffolds (games/agent/demo.yaml data.prefill): a call's opening, then the answer tag.
DEMO_PREFILL: tuple[str, ...] = ('<tool_call>{"name": "calculate", "arguments": {"expression": "', "<answer>")
#: Held-out seeds per kind that the warm-up never uses (the benchmark takes a prefix of these).
HELDOUT_RESERVE = 512
IGNORE = -100  # the label of a token that is not trained on


def solution(kind: str, seed: int) -> list[str]:
    """The full text of each model turn of a correct episode: the call, then the answer."""
    task = TASKS.get(kind)
    if not isinstance(task, Calculator):
        raise ValueError(f"no synthetic solution for task {kind!r} (calculator levels only)")
    setup = task.setup(seed, None)
    expression = setup.prompt.removeprefix("What is ").split("?", 1)[0]
    call = json.dumps({"name": "calculate", "arguments": {"expression": expression}})
    return [f"<tool_call>{call}</tool_call>", f"<answer>{setup.truth}</answer>"]


def synthetic_episode(env: EnvClient, renderer: ChatRenderer, kind: str, seed: int, prefill: Sequence[str] = (), max_tokens: int = 768) -> Episode:
    """Play the known solution of (kind, seed) in ``env``; each turn's scaffold is written by the
    conversation, so the model's part is the solution's text after it. Raises unless it scores 1."""
    texts = solution(kind, seed)
    session = Session.start(env, TaskSpec(kind, seed, len(texts), max_tokens), renderer, prefill)
    eos = renderer.tokenizer.eos_token_id
    for k, text in enumerate(texts):
        scaffold = prefill[k] if k < len(prefill) else ""
        if not text.startswith(scaffold):
            raise ValueError(f"scaffold {scaffold!r} does not open the solution's turn {text!r}")
        ids = renderer.encode(text[len(scaffold) :]) + [int(eos)]
        session.turn(ids, [0.0] * len(ids))
        if session.done:
            break
    if session.reward != 1.0:
        raise RuntimeError(f"the synthetic episode {kind} #{seed} scored {session.reward} ({session.finish_reason})")
    return session.episode(f"{kind} #{seed}", "", 0, "")


def warmup_seeds(kind: str, n: int, seed: int) -> list[int]:
    """``n`` seeds for ``kind`` from the warm-up's own stream, none held out (nor their questions)."""
    return heldout_seeds(kind, n, seed, exclude=set(heldout_seeds(kind, HELDOUT_RESERVE, seed)), stream="warmup")


def sft_batch(episodes: Sequence[Episode], pad_id: int) -> tuple[Any, Any, Any]:
    """(input ids, attention mask, labels), right-padded; labels are the ids on model tokens and
    ``IGNORE`` everywhere else (prompt, scaffolds, tool results, padding)."""
    import torch

    width = max(len(e.token_ids) for e in episodes)
    ids = torch.full((len(episodes), width), pad_id, dtype=torch.long)
    labels = torch.full((len(episodes), width), IGNORE, dtype=torch.long)
    attention = torch.zeros((len(episodes), width), dtype=torch.long)
    for row, e in enumerate(episodes):
        tokens, mask = torch.tensor(e.token_ids), torch.tensor(e.loss_mask)
        ids[row, : len(tokens)] = tokens
        attention[row, : len(tokens)] = 1
        labels[row, : len(tokens)] = torch.where(mask, tokens, torch.full_like(tokens, IGNORE))
    return ids, attention, labels


def train(model: Any, episodes: Sequence[Episode], pad_id: int, epochs: int = 1, batch: int = 8, lr: float = 2e-5, seed: int = 0) -> list[float]:
    """Cross-entropy on the model tokens of ``episodes`` (AdamW, shuffled each epoch); the loss of each step."""
    import random

    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    rng, order, losses = random.Random(seed), list(range(len(episodes))), []
    for _ in range(epochs):
        rng.shuffle(order)
        for start in range(0, len(order), batch):
            ids, attention, labels = sft_batch([episodes[i] for i in order[start : start + batch]], pad_id)
            loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    model.eval()
    return losses


def main(argv: list[str] | None = None) -> int:
    """Train and save; an error is one line with its status, as genrl-swarm's (run/failures.py)."""
    return command(lambda: _main(argv), interrupted="genrl-swarm: warm-up interrupted: nothing saved")


def _main(argv: list[str] | None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--out", type=Path, required=True, help="where the warmed-up model and tokenizer are saved")
    p.add_argument("--tasks", nargs="+", default=["calculator-1"])
    p.add_argument("--episodes", type=int, default=32, help="synthetic episodes in all (kinds in turn)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--seed", type=int, default=42, help="the run's data seed (held-out seeds are avoided)")
    p.add_argument("--prefill", default=json.dumps(DEMO_PREFILL), help="JSON list: the scaffold ahead of each model turn, as the run's data.prefill")
    args = p.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from genrl_swarm.envd import connect
    from genrl_swarm.paradigms.lm.models import resolve_model_path

    start = time.perf_counter()
    path = str(resolve_model_path(args.model))
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    renderer, prefill = ChatRenderer(tokenizer), tuple(json.loads(args.prefill))
    per_kind = {k: warmup_seeds(k, -(-args.episodes // len(args.tasks)), args.seed) for k in args.tasks}
    plan = [(args.tasks[i % len(args.tasks)], per_kind[args.tasks[i % len(args.tasks)]][i // len(args.tasks)]) for i in range(args.episodes)]
    with connect("local") as env:
        episodes = [synthetic_episode(env, renderer, kind, s, prefill) for kind, s in plan]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    losses = train(model, episodes, int(pad), args.epochs, args.batch, args.lr, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    with saving(args.out):  # a full disk is a storage error, not safetensors' RuntimeError
        model.save_pretrained(args.out)
        tokenizer.save_pretrained(args.out)
    trained = sum(sum(e.loss_mask) for e in episodes)
    print(f"warm-up: {len(episodes)} synthetic episodes ({', '.join(args.tasks)}), {trained} model tokens trained, {len(losses)} steps")
    print(f"loss per step: {' '.join(f'{x:.3f}' for x in losses)}; {time.perf_counter() - start:.1f}s; saved to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
