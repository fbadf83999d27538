"""genrl 0.3.0's side of benchmarks/bench_vs_genrl.py: its Reasoning Gym example driven through its
own API, in its own venv (benchmarks/genrl/install.sh). Run by bench_vs_genrl.py, not by hand:

    $GENRL_VENV/bin/python benchmarks/genrl/genrl_side.py JOB.json RESULT.json

The example's pieces, as genrl ships them: ``genrl.examples.rgym`` (ReasoningGymDataManager over a
Reasoning Gym composite config, RGRewards: Reasoning Gym's accuracy), genrl's
GRPOLanguageTrainerModule (one HF ``generate`` per completion) and BaseGameManager; sharing is
genrl's tree transplant (``num_transplant_trees`` of the others' questions, over
torch.distributed) or off (NullCommunicationBackend, one peer). This file only calls genrl: none of
its code is copied here or into the project. Each rank writes its own result, with how many of the others' questions it transplanted each
round (genrl's round loop logs a failed exchange at INFO and goes on without it).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from typing import Any


def main(job_path: str, result_path: str) -> None:
    with open(job_path) as f:
        job = json.load(f)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(job["seed"])
    peers = job["peers"]
    rank = int(os.environ.get("RANK", "0"))
    if peers > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=rank, world_size=peers)
    from genrl.communication.distributed.torch_comm import TorchBackend
    from genrl.communication.local.null_comm import NullCommunicationBackend
    from genrl.examples.rgym.data import ReasoningGymDataManager
    from genrl.examples.rgym.rewards import RGRewards
    from genrl.game.game_manager import BaseGameManager
    from genrl.rewards import DefaultRewardManager
    from genrl.rewards.reward_store import RewardFnStore, RoundRewardFnStore
    from genrl.state.game_state import GameState
    from genrl.trainer.grpo_trainer import GRPOLanguageTrainerModule, GRPOTrainerConfig

    if peers > 1 and job.get("payload_shim", True):
        # genrl 0.3.0's rgym transplant reads a received Payload (a dataclass) as a mapping,
        # ``transplants[key]["actions"]``, and fails with "TypeError: 'Payload' object is not subscriptable";
        # its round loop logs that at INFO and trains on the local questions alone, so as shipped its
        # sharing never happens. This one-line adapter lets genrl's own transplant code run as written.
        from genrl.communication.communication import Payload

        Payload.__getitem__ = lambda self, key: getattr(self, key)  # type: ignore[attr-defined]

    rounds: list[dict[str, float]] = []
    errors: list[str] = []

    class TimedGame(BaseGameManager):
        """genrl's BaseGameManager with its two round hooks timing generation and training."""

        def run_game(self) -> None:
            self._t = time.perf_counter()
            super().run_game()

        def _hook_after_rewards_updated(self) -> None:  # generation, exchange and rewards done
            self._gen = time.perf_counter()

        def _hook_after_round_advanced(self) -> None:  # training done, next round staged
            now = time.perf_counter()
            rounds.append({"gen_s": self._gen - self._t, "train_s": now - self._gen, "wall_s": now - self._t})
            print(f"genrl_side: round {len(rounds)} done: {rounds[-1]}", flush=True)
            self._t = now

    model = AutoModelForCausalLM.from_pretrained(job["model"], dtype=torch.float32)
    config = GRPOTrainerConfig(
        epsilon=0.2, epsilon_high=0.28, beta=0.0, temperature=1.0, dtype="float32",
        max_new_tokens=job["max_new_tokens"], num_generations=job["generations"], learning_rate=job["lr"],
        minibatch_size=job["minibatch_size"], enable_gradient_checkpointing=job["gradient_checkpointing"],
    )  # fmt: skip
    trainer = GRPOLanguageTrainerModule([model], config, log_dir=job["log_dir"])
    train = trainer.train

    def train_and_report(*args: Any, **kwargs: Any) -> Any:  # genrl's round loop swallows training errors
        try:
            return train(*args, **kwargs)
        except Exception:
            errors.append(traceback.format_exc(limit=4))
            raise

    trainer.train = train_and_report
    data = ReasoningGymDataManager(
        yaml_config_path=job["composite"], num_train_samples=job["questions"], num_evaluation_samples=0,
        seed=job["seed"], num_transplant_trees=job["sharing"] if peers > 1 else 0,
    )  # fmt: skip
    if job.get("system_prompt") is not None:
        data.system_prompt = job["system_prompt"]
    prepare_states, transplanted = data.prepare_states, []

    def count_transplants(state: Any, swarm: Any) -> Any:  # genrl's round loop swallows sharing errors too
        trees = lambda: sum(len(v) for v in state.trees.values())  # noqa: E731
        before = trees()
        try:
            out = prepare_states(state, swarm)
        except Exception:
            errors.append(traceback.format_exc(limit=4))
            raise
        transplanted.append(trees() - before)  # the other peers' questions this peer trains on this round
        return out

    data.prepare_states = count_transplants
    rewards = DefaultRewardManager(
        RewardFnStore(max_rounds=job["rounds"], reward_fn_stores=[RoundRewardFnStore(num_stages=1, reward_fns=[RGRewards()])])
    )
    comm = TorchBackend() if peers > 1 else NullCommunicationBackend()
    game = TimedGame(
        max_stage=1, max_round=job["rounds"], game_state=GameState(round=0, stage=0), reward_manager=rewards,
        trainer=trainer, data_manager=data, communication=comm, run_mode="train",
    )  # fmt: skip

    tokenizer = AutoTokenizer.from_pretrained(job["model"], padding_side="left")
    before = greedy(model, tokenizer, job, data.system_prompt) if job["before"] and rank == 0 else []
    print(f"genrl_side: rank {rank} before-training held-out done ({len(before)} completions)", flush=True)
    if peers > 1:  # rank 0's held-out pass must not count in the others' first round (they would wait for it there)
        dist.barrier()
    t0, cpu0 = time.perf_counter(), time.process_time()
    game.run_game()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    after = greedy(trainer.model, tokenizer, job, data.system_prompt)
    result = {
        "side": "genrl", "rank": rank, "rounds": rounds, "rounds_done": game.state.round, "elapsed_s": elapsed, "cpu_s": cpu,
        "completions": job["questions"] * job["generations"] * len(rounds), "train_errors": errors, "transplanted": transplanted,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "before": before, "after": after,
        "threads": torch.get_num_threads(),
    }  # fmt: skip
    with open(result_path, "w") as f:
        json.dump(result, f)


def greedy(model: Any, tokenizer: Any, job: dict[str, Any], system_prompt: str) -> list[str]:
    """One greedy completion per held-out question, with the prompt genrl trains with (its
    system prompt and the model's chat template), the run's budget, in batches of 16."""
    import torch

    model.eval()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    out: list[str] = []
    questions = job["held_out"]
    for i in range(0, len(questions), 16):
        prompts = [
            tokenizer.apply_chat_template([{"role": "system", "content": system_prompt}, {"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
            for q in questions[i : i + 16]
        ]  # fmt: skip
        enc = tokenizer(prompts, return_tensors="pt", padding=True)
        with torch.no_grad():
            ids = model.generate(**enc, max_new_tokens=job["max_new_tokens"], do_sample=False, pad_token_id=tokenizer.pad_token_id)
        out += tokenizer.batch_decode(ids[:, enc.input_ids.shape[1] :], skip_special_tokens=True)
    return out


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
