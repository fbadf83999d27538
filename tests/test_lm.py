"""Language-model parts with a tiny random Llama: generation, training, SAPO, rewards, games."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from genrl_swarm.core import GameState, RoundRewards, Rollout, ScoredRollout, Task
from genrl_swarm.games.multistage_math import MultistageReward
from genrl_swarm.lm.answers import answers_match, extract_answer, well_formatted
from genrl_swarm.lm.models import ModelLoadError, load_model
from genrl_swarm.rewards.reasoning import ReasoningReward
from genrl_swarm.run.launcher import run_recipe
from genrl_swarm.trainers.grpo import GRPOTrainer

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def trainer() -> GRPOTrainer:
    return GRPOTrainer(model="tiny-random", grpo={"num_generations": 3, "max_new_tokens": 6, "learning_rate": 1e-2}, seed=1)


def test_generation_is_batched_and_shaped(trainer: GRPOTrainer) -> None:
    shapes: list[tuple[int, int]] = []
    hook = trainer.policy.register_forward_pre_hook(lambda m, a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    try:
        tasks = [Task.create(f"Calculate {i} + {i}.") for i in range(5)]
        out = trainer.generate(tasks, stage=0)
    finally:
        hook.remove()
    assert shapes[0][0] == 5 and shapes[0][1] > 1  # one prefill per prompt, not per generation
    assert all(rows <= 15 and width == 1 for rows, width in shapes[1:])  # then 5 x 3 rows decode together
    assert len(shapes) <= trainer.cfg.max_new_tokens
    assert [len(o) for o in out] == [3] * 5 and all(isinstance(c, str) for o in out for c in o)
    assert trainer.tokenizer.padding_side == "left"  # generation appends on the right


def test_lean_sampler_matches_hf_generate_greedy(trainer: GRPOTrainer) -> None:
    prompts = [trainer.chat(q) for q in ("Calculate 1 + 2.", "What is the answer to 12 * 13, step by step?", "Hi")]
    lean = trainer.generate_ids(prompts, 1, greedy=True)
    trainer.cfg.sampler = "hf"
    try:
        hf = trainer.generate_ids(prompts, 1, greedy=True)
    finally:
        trainer.cfg.sampler = "lean"
    assert torch.equal(lean, hf)


def test_generation_stops_at_eos(trainer: GRPOTrainer) -> None:
    prompt = [trainer.chat("Calculate 1 + 2.")]
    free = trainer.generate_ids(prompt, 1, greedy=True)[0].tolist()
    assert len(free) == 6
    stop = free[1]  # make the greedy path's second token the EOS
    original = trainer.eos_ids
    trainer.eos_ids = [stop]
    try:
        stopped = trainer.generate_ids(prompt, 1, greedy=True)[0].tolist()
    finally:
        trainer.eos_ids = original
    first_stop = stopped.index(stop)
    assert first_stop <= 1
    assert all(t == trainer.tokenizer.pad_token_id for t in stopped[first_stop + 1 :])


def test_sampling_is_reproducible_per_peer_seed() -> None:
    a = GRPOTrainer(model="tiny-random", grpo={"max_new_tokens": 5}, seed=4)
    b = GRPOTrainer(model="tiny-random", grpo={"max_new_tokens": 5}, seed=4)
    tasks = [Task.create("Calculate 5 + 5.")]
    assert a.generate(tasks, 0) == b.generate(tasks, 0)


def _scored(peer: str, task: Task, completions: tuple[str, ...], rewards: tuple[float, ...]) -> ScoredRollout:
    return ScoredRollout(Rollout(peer, 0, 0, task.id, task.prompt, completions), rewards)


def test_training_moves_probability_towards_rewarded_completion() -> None:
    trainer = GRPOTrainer(model="tiny-random", grpo={"max_new_tokens": 4, "learning_rate": 3e-2}, seed=2)
    task = Task.create("Calculate 2 + 2.")
    state = GameState(0, "me", tasks={task.id: task})
    rewards = RoundRewards((_scored("me", task, ("4", "7"), (1.0, 0.0)),))

    def margin() -> float:
        samples = trainer._samples(list(rewards.scored))
        batch = trainer.collate(samples)
        with torch.no_grad():
            logp = (trainer.token_logps(trainer.policy, batch) * batch.completion_mask).sum(1)
        return float(logp[0] - logp[1])

    before = margin()
    for _ in range(5):
        metrics = trainer.train(state, rewards)
    assert margin() > before + 0.5
    assert metrics["train/sequences"] == 2


def test_zero_advantage_group_is_skipped(trainer: GRPOTrainer) -> None:
    task = Task.create("q")
    rewards = RoundRewards((_scored("me", task, ("a", "b"), (1.0, 1.0)),))
    assert trainer.train(GameState(0, "me", tasks={task.id: task}), rewards) == {"train/sequences": 0.0}


def test_completion_masks_and_eos() -> None:
    trainer = GRPOTrainer(model="tiny-random", grpo={"max_new_tokens": 3}, seed=0)
    task = Task.create("q")
    samples = trainer._samples([_scored("me", task, ("1", "11 22 33 44"), (1.0, 0.0))])
    eos = trainer.tokenizer.eos_token_id
    assert samples[0].completion_ids[-1] == eos  # finished answer ends with EOS
    assert len(samples[1].completion_ids) == 3 and eos not in samples[1].completion_ids  # truncated, no EOS
    batch = trainer.collate(samples)
    assert batch.completion_mask.sum(1).tolist() == [len(s.completion_ids) for s in samples]
    assert batch.input_ids[0, -1] == eos


def test_sapo_selects_local_and_external(trainer: GRPOTrainer) -> None:
    task = Task.create("q")
    scored = tuple(_scored(p, task, ("a",), (1.0,)) for p in ["me", "me", "x", "y", "z"])
    trainer.cfg.num_local, trainer.cfg.num_external = 1, 2
    try:
        chosen = trainer.select(GameState(0, "me"), RoundRewards(scored))
    finally:
        trainer.cfg.num_local, trainer.cfg.num_external = -1, 0
    peers = [s.rollout.peer_id for s in chosen]
    assert peers.count("me") == 1 and len(peers) == 3 and set(peers) - {"me"} <= {"x", "y", "z"}


def test_claimed_rewards_in_a_payload_are_ignored() -> None:
    task = Task.create("Calculate 2 + 2.", answer="4")
    liar = Rollout("liar", 0, 0, task.id, task.prompt, ("<answer>5</answer>",), {"reward": 1.0, "rewards": [1.0]})
    state = GameState(0, "me", tasks={task.id: task}, rollouts=[liar])
    assert ReasoningReward().score_state(state).mean_by_peer() == {"liar": 0.0}


def test_rollouts_for_unknown_tasks_are_unscorable() -> None:
    stranger = Rollout("x", 0, 0, "not-a-task-here", "p", ("4",))
    rewards = ReasoningReward().score_state(GameState(0, "me", rollouts=[stranger]))
    assert rewards.scored == () and rewards.unscorable == 1


@pytest.mark.parametrize(
    "text, answer",
    [
        ("think... <answer> 42 </answer>", "42"),
        ("<answer>1</answer> no wait <answer>2</answer>", "2"),
        ("so it is <answer>17", "17"),
        ("The result is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("Let me see.\nThe final answer is 12.", "12"),
        ("Answer: Tuesday", "Tuesday"),
        ("blah\n\n  7  \n", "7"),
        ("", None),
    ],
)
def test_extract_answer(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


def test_answer_matching_and_format() -> None:
    assert answers_match("0.5", "1/2") and answers_match("1,000", "1000") and answers_match(" Tuesday", "tuesday")
    assert not answers_match("3", "4") and not answers_match(None, "4")
    assert well_formatted("x <answer>4</answer>") and not well_formatted("<answer></answer>")
    assert not well_formatted("<answer>1</answer><answer>2</answer>")


def test_reasoning_gym_scorer_and_format_reward() -> None:
    from genrl_swarm.data.reasoning_gym import ReasoningGymData

    task = ReasoningGymData(["basic_arithmetic"], tasks_per_round=1, eval_size=0, seed=3).round_tasks(0)[0]
    rollout = Rollout("me", 0, 0, task.id, task.prompt, (f"<answer>{task.answer}</answer>", "no idea"))
    assert ReasoningReward(format_weight=0.5).score(task, rollout) == [1.5, 0.0]


def test_multistage_choice_reward_reads_the_prompt() -> None:
    task = Task.create("Calculate 2 + 2.", answer="4")
    prompt = "Calculate 2 + 2.\n\nAnswers from the swarm:\nStudent #1: 5\nStudent #2: 4\n\nWhich?"
    rollout = Rollout("p", 0, 1, task.id, prompt, ("Choice: Student #2", "Choice: Student #1", "Choice: Student #9", "??"))
    assert MultistageReward().score(task, rollout) == [1.0, 0.0, 0.0, 0.0]


def test_checkpoint_reloads_with_from_pretrained(trainer: GRPOTrainer, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    trainer.save(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "model"))
    for (name, a), b in zip(trainer.policy.state_dict().items(), reloaded.state_dict().values()):
        assert torch.equal(a, b), name
    other = GRPOTrainer(model="tiny-random", seed=9)
    other.load(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(trainer.policy.parameters(), other.policy.parameters()))


def test_missing_model_error_says_what_was_tried() -> None:
    with pytest.raises(ModelLoadError, match=r"(?s)tried hub id 'no-such-org/no-such-model'.*Fix: pass a local directory"):
        load_model("no-such-org/no-such-model")


def test_lora_trains_only_adapters() -> None:
    t = GRPOTrainer(model="tiny-random", lora={"r": 4, "target_modules": ["q_proj", "v_proj"]}, seed=0)
    trainable = [n for n, p in t.policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora" in n for n in trainable)


@pytest.mark.parametrize("game", ["reasoning_gym", "multistage_math"])
def test_llm_games_play_two_rounds_in_memory(bandit_recipe, game: str, tmp_path: Path) -> None:
    from genrl_swarm.config import load_recipe

    overrides = [
        f"run.dir={tmp_path}", "run.tensorboard=false", "run.console=false", "run.plot=false",
        "game.max_rounds=2", "game.mode=train", "trainer.model=tiny-random",
        "trainer.grpo.max_new_tokens=8", "trainer.grpo.num_generations=2",
    ]  # fmt: skip
    if game == "reasoning_gym":
        overrides.append("data.datasets=[basic_arithmetic, chain_sum]")
    summary = run_recipe(load_recipe(game, overrides))
    assert sorted(summary.results) == ["peer-0", "peer-1"]
    for rounds in summary.results.values():
        assert [r.round for r in rounds] == [0, 1]
        assert all(sorted(r.rewards) == ["peer-0", "peer-1"] for r in rounds)  # each scored the other too
        assert all("train/sequences" in r.metrics for r in rounds)
    assert (tmp_path / "peer-1" / "checkpoints" / "round_000001" / "model" / "config.json").is_file()
