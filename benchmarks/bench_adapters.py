"""The lean sampler on an adapter peer (issue 45.1): how to apply LoRA without a per-peer base.

Arms, one policy each, on the same prompts and keys (EOS off: every arm generates exactly rows x
new tokens), alternating call by call, median wall and CPU (this process's) time per arm (the CPU time is the
steadier measure on a machine shared with other busy processes):
- ``full``: a fully trained model of its own, its weights packed for oneDNN (the sampler before);
- ``adapter-packed``: LoRA on the process's shared base, the base packed once and each peer's
  low-rank term added per matmul (``lm.adapters``; the default);
- ``adapter-modules``: the same peer through peft's LoRA modules, nothing packed;
- ``adapter-merged``: the adapters merged into a private copy of the base, packed like ``full``
  (the alternative: a full copy of the weights per peer). Its ``setup`` is what each weight
  update costs it: copy, merge and pack.
Trained adapters are simulated: B drawn away from zero (speed does not depend on the values).

    OMP_NUM_THREADS=2 python benchmarks/bench_adapters.py --model HuggingFaceTB/SmolLM2-135M-Instruct
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from dataclasses import replace

import torch
from common import machine, table

from genrl_swarm.core import ActSeed, Task
from genrl_swarm.paradigms.lm.policy import LMPolicy
from genrl_swarm.paradigms.lm.seeding import Uniforms

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def merged_copy(adapter: LMPolicy, into: LMPolicy) -> float:
    """Merge ``adapter``'s LoRA into a copy of its model and load that into ``into``; seconds,
    packing for the next call included."""
    start = time.perf_counter()
    merged = copy.deepcopy(adapter.model).merge_and_unload()
    into.model.load_state_dict(merged.state_dict())
    del merged
    into.generate([[1, 2, 3]], 1, greedy=True)  # packs the new weights
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--new-tokens", default="16,64")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    print(machine(), f"| OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')} | load {os.getloadavg()[0]:.2f}")
    sampling = {"num_generations": a.generations}
    lora = {"r": a.rank, "alpha": 2 * a.rank, "target_modules": TARGETS}
    full, adapter = LMPolicy(a.model, sampling), LMPolicy(a.model, sampling, lora=lora)
    unpacked = LMPolicy(a.model, sampling, lora=lora)
    unpacked.sampling = replace(unpacked.sampling, pack=False)
    merged = LMPolicy(a.model, sampling)
    with torch.no_grad():
        for (name, w), twin in zip(adapter.model.named_parameters(), unpacked.model.parameters(), strict=True):
            if "lora_B" in name:
                w.normal_(0, 0.01)
            twin.copy_(w)
    setup = merged_copy(adapter, merged)
    arms: dict[str, LMPolicy] = {"full": full, "adapter-packed": adapter, "adapter-modules": unpacked, "adapter-merged": merged}
    inputs = [Task.create(f"Calculate {i} * {i + 3}.").input(0) for i in range(a.prompts)]
    prompts = [full.prompt_ids(i) for i in inputs]
    for policy in arms.values():
        policy.eos_ids = [policy.vocab_size]  # never drawn
    rows = []
    for new in (int(n) for n in a.new_tokens.split(",")):
        times: dict[str, list[float]] = {name: [] for name in arms}
        cpu: dict[str, list[float]] = {name: [] for name in arms}
        for r in range(a.repeats + 1):  # the first pass warms every arm up and is dropped
            keys = Uniforms.of(ActSeed(b"bench", r, "peer"), [i.digest for i in inputs], a.generations)
            order = list(arms)[r % len(arms) :] + list(arms)[: r % len(arms)]
            for name in order:
                policy = arms[name]
                policy.sampling = replace(policy.sampling, max_new_tokens=new)
                start, start_cpu = time.perf_counter(), time.process_time()
                policy.generate(prompts, a.generations, uniforms=keys)
                if r:
                    times[name].append(time.perf_counter() - start)
                    cpu[name].append(time.process_time() - start_cpu)
        wall, used = statistics.median(times["full"]), statistics.median(cpu["full"])
        for name in arms:
            t, c = statistics.median(times[name]), statistics.median(cpu[name])
            rows.append([new, name, t * 1e3, c * 1e3, f"{wall / t:.3f}", f"{used / c:.3f}", setup if name == "adapter-merged" else ""])
    print(f"load after {os.getloadavg()[0]:.2f}; {len(prompts) * a.generations} rows, rank {a.rank} on {', '.join(TARGETS)}")
    print(table(["new tokens", "arm", "wall ms", "cpu ms", "speed vs full (wall)", "(cpu)", "setup per update s"], rows))


if __name__ == "__main__":
    main()
