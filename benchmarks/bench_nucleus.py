"""Nucleus (top-p) sampling cost per decode step on real next-token distributions.

Sorting a 49k vocabulary for 64 rows costs more than the forward it follows on a CPU core; the
sampler cuts the top ``PRECUT`` tokens first and sorts a row in full only when they hold less
than top_p. This measures both on SmolLM2-135M-Instruct's own distributions: 64 completions
(8 prompts x 8) are sampled, one forward gives the logits before each completion token, and
each arm picks the next token for the 64 rows at each position. Arms alternate position by
position, so load from other processes hits both alike.

    OMP_NUM_THREADS=1 python benchmarks/bench_nucleus.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from common import machine, table

from genrl_swarm.core import ActSeed
from genrl_swarm.paradigms.lm.models import load_model
from genrl_swarm.paradigms.lm.sampling import PRECUT, _from_sorted, pick, ranked, sample
from genrl_swarm.paradigms.lm.seeding import Uniforms

PROMPTS = [
    "What is 17 + 25? Answer inside <answer></answer>.",
    "Write a short poem about the sea.",
    "Explain why the sky is blue.",
    "List three prime numbers greater than 50.",
    "What is the capital of France?",
    "Sort these numbers: 5, 2, 9, 1.",
    "Translate 'good morning' to Spanish.",
    "What is 12 times 13?",
]


def full_sort(logits: torch.Tensor, temperature: float, top_p: float, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The arm before: softmax, sort the whole vocabulary, cut, draw."""
    return _from_sorted(*ranked(torch.softmax(logits.float() / temperature, -1)), top_p, u)


def next_token_logits(model_name: str, rows_per_prompt: int, new_tokens: int) -> torch.Tensor:
    """[positions, rows, vocab]: the model's logits before each sampled completion token."""
    model, tok = load_model(model_name, dtype="float32")
    texts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True) for q in PROMPTS]
    enc = tok(texts, return_tensors="pt", padding=True, padding_side="left")
    keys = Uniforms.of(ActSeed(b"bench-nucleus", 0, ""), [str(i) for i in range(len(PROMPTS))], rows_per_prompt)
    out = sample(model, enc.input_ids, enc.attention_mask, rows_per_prompt, new_tokens, [tok.eos_token_id], 1.0, 1.0, False, keys)
    prompt = enc.input_ids.repeat_interleave(rows_per_prompt, 0)
    mask = torch.cat([enc.attention_mask.repeat_interleave(rows_per_prompt, 0), torch.ones_like(out.ids)], 1)
    with torch.no_grad():
        logits = model(input_ids=torch.cat([prompt, out.ids], 1), attention_mask=mask).logits
    return logits[:, prompt.shape[1] - 1 : -1].transpose(0, 1).float().contiguous()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--positions", type=int, default=24, help="decode steps timed per arm")
    args = p.parse_args()
    logits = next_token_logits(args.model, 8, 48)
    steps = logits[: args.positions]
    print(machine(), f"| load {os.getloadavg()[0]:.2f} | OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    rows = []
    for temperature, top_p in ((1.0, 0.9), (1.0, 0.95), (0.7, 0.9)):
        probs = torch.softmax(steps / temperature, -1)
        precut_ok = float((probs.topk(PRECUT, -1).values.sum(-1) >= top_p).float().mean())
        times: dict[str, list[float]] = {"full sort": [], "pre-cut": []}
        gen = torch.Generator().manual_seed(1)
        arms = {"full sort": full_sort, "pre-cut": lambda s, t, p, g: pick(s, t, p, False, g)}
        for step in steps:
            u = torch.rand((step.shape[0], 1), generator=gen, dtype=torch.float64)
            for name, arm in arms.items():
                start = time.perf_counter()
                arm(step, temperature, top_p, u)
                times[name].append((time.perf_counter() - start) * 1e3)
        full, cut = statistics.median(times["full sort"]), statistics.median(times["pre-cut"])
        rows.append([temperature, top_p, f"{precut_ok:.2f}", full, cut, f"{full / cut:.1f}x"])
    print(f"64 rows, {len(steps)} decode steps each, median ms per step, load after {os.getloadavg()[0]:.2f}")
    print(table(["temperature", "top_p", f"rows whose top {PRECUT} hold top_p", "full sort ms", "pre-cut ms", "speed-up"], rows))


if __name__ == "__main__":
    main()
