"""Language-model parts with a tiny random Llama: the policy's bodies, exact training data, the
receiving-side checks, interrupts, checkpoints, rewards and data."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from genrl_swarm.core import GameState, RoundRewards, Rollout, RunInterrupted, ScoredRollout, StageInput, Task, TokenRollout, TokenSample, Weights
from genrl_swarm.lm.answers import answers_match, extract_answer, well_formatted
from genrl_swarm.lm.models import ModelLoadError, load_model
from genrl_swarm.lm.policy import LMPolicy
from genrl_swarm.rewards.reasoning import ReasoningReward
from genrl_swarm.trainers.grpo import GRPOLearner

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
QUESTIONS = ("Calculate 1 + 2.", "What is the answer to 12 * 13, step by step?", "Hi")


def sharpen(policy: LMPolicy, factor: float = 8.0) -> LMPolicy:
    """The tiny random model is nearly uniform: its greedy output ignores the prompt and its
    log-probs hardly move with temperature, so tests on it could not fail. Scaled weights make
    a peaked, prompt-dependent model."""
    with torch.no_grad():
        for name, w in policy.model.named_parameters():
            if "norm" not in name:
                w.mul_(factor)
    return policy


def make(seed: int = 1, sharp: bool = False, **sampling: Any) -> LMPolicy:
    policy = LMPolicy("tiny-random", {"num_generations": 3, "max_new_tokens": 6} | sampling, seed=seed)
    return sharpen(policy) if sharp else policy


def inputs(*questions: str) -> list[StageInput]:
    return [Task.create(q).input(0) for q in questions or QUESTIONS]


@pytest.fixture(scope="module")
def policy() -> LMPolicy:
    return make()


@pytest.fixture(scope="module")
def sharp() -> LMPolicy:
    return make(sharp=True)


# --------------------------------------------------------------------------- acting
def test_act_returns_one_token_rollout_per_input(policy: LMPolicy) -> None:
    shapes: list[tuple[int, int]] = []
    hook = policy.model.register_forward_pre_hook(lambda m, a, kw: shapes.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    try:
        ins = inputs(*(f"Calculate {i} + {i}." for i in range(5)))
        bodies = policy.act(ins, 0)
    finally:
        hook.remove()
    assert shapes[0][0] == 5 and shapes[0][1] > 1  # one prefill per prompt, not per generation
    assert all(rows <= 15 and width == 1 for rows, width in shapes[1:])  # then 5 x 3 rows decode together
    for inp, body in zip(ins, bodies, strict=True):
        assert isinstance(body, TokenRollout) and body.task_id == inp.task_id and body.input_digest == inp.digest
        assert list(body.prompt_ids) == policy.prompt_ids(inp) and body.tokenizer == policy.fingerprint
        assert len(body.samples) == 3 and body.policy_version == policy.version
        for s in body.samples:
            assert 1 <= len(s.completion_ids) <= 6 and len(s.logprobs) == len(s.completion_ids)
            assert (s.finish_reason == "stop") == (s.completion_ids[-1] in policy.eos_ids)
            assert not set(s.completion_ids[:-1]) & set(policy.eos_ids)  # nothing after an EOS
        assert policy.check(body, inp) is None


@pytest.mark.parametrize("sampler", ["lean", "hf"])
def test_a_row_that_emits_eos_keeps_it_and_ends_there(sharp: LMPolicy, sampler: str) -> None:
    (inp,) = inputs("Calculate 1 + 2.")
    free = sharp.rollouts([inp], greedy=True)[0].samples[0]
    assert len(free.completion_ids) == 6 and free.finish_reason == "length"
    stop = free.completion_ids[2]  # make the greedy path's third token an EOS
    original, sharp.eos_ids, sharp.sampling.sampler = sharp.eos_ids, [stop], sampler  # type: ignore[assignment]
    try:
        (s,) = sharp.rollouts([inp], greedy=True)[0].samples
    finally:
        sharp.eos_ids, sharp.sampling.sampler = original, "lean"
    assert s.completion_ids == free.completion_ids[: free.completion_ids.index(stop) + 1]
    assert s.finish_reason == "stop" and len(s.logprobs) == len(s.completion_ids)


def test_lean_greedy_equals_hf_generate(sharp: LMPolicy) -> None:
    prompts = [sharp.prompt_ids(i) for i in inputs()]
    lean = sharp.generate(prompts, 1, greedy=True)
    sharp.sampling.sampler = "hf"
    try:
        hf = sharp.generate(prompts, 1, greedy=True)
    finally:
        sharp.sampling.sampler = "lean"
    assert len({tuple(r) for r in lean.ids.tolist()}) == len(prompts)  # greedy output depends on the prompt
    assert torch.equal(lean.ids, hf.ids) and torch.equal(lean.lengths, hf.lengths)


def full_forward_logprobs(policy: LMPolicy, body: TokenRollout, temperature: float, top_p: float) -> list[list[float]]:
    """Reference: one forward over prompt + completion, tempered, nucleus renormalised."""
    out = []
    for s in body.samples:
        seq = torch.tensor([[*body.prompt_ids, *s.completion_ids]])
        with torch.no_grad():
            logits = policy.model(input_ids=seq).logits[0, len(body.prompt_ids) - 1 : -1].float() / temperature
        probs = torch.softmax(logits, -1)
        row = []
        for t, tok in enumerate(s.completion_ids):
            ranked = sorted(probs[t].tolist(), reverse=True)
            mass, kept = 0.0, 0.0
            for p in ranked:  # the smallest prefix whose mass reaches top_p
                kept += p
                mass = kept
                if kept >= top_p:
                    break
            row.append(float(torch.log(probs[t, tok])) - float(torch.log(torch.tensor(mass))))
        out.append(row)
    return out


@pytest.mark.parametrize("sampler", ["lean", "hf"])
@pytest.mark.parametrize("temperature, top_p", [(0.7, 1.0), (1.3, 0.8)])
def test_behaviour_logprobs_equal_a_full_forward(sharp: LMPolicy, sampler: str, temperature: float, top_p: float) -> None:
    saved = sharp.sampling
    sharp.sampling = type(saved)(3, 6, temperature, top_p, sampler)  # type: ignore[arg-type]
    try:
        bodies = sharp.rollouts(inputs())
    finally:
        sharp.sampling = saved
    for body in bodies:
        want = full_forward_logprobs(sharp, body, temperature, top_p)  # type: ignore[arg-type]
        for s, ref in zip(body.samples, want):  # type: ignore[attr-defined]
            assert list(s.logprobs) == pytest.approx(ref, abs=2e-3)


def test_draw_follows_the_probabilities_and_never_picks_a_zero() -> None:
    from genrl_swarm.lm.sampling import draw

    probs = torch.tensor([[0.5, 0.2, 0.0, 0.1, 0.2, 0.0]]) * 0.7  # unnormalised, like a masked nucleus
    picks = draw(probs.repeat(100_000, 1), torch.Generator().manual_seed(0)).squeeze(1)
    freq = torch.bincount(picks, minlength=6).float() / len(picks)
    assert freq.tolist() == pytest.approx([0.5, 0.2, 0.0, 0.1, 0.2, 0.0], abs=0.01)
    assert freq[2] == 0 and freq[5] == 0


def test_sampling_is_reproducible_per_peer_seed() -> None:
    a, b = make(seed=4), make(seed=4)
    ins = inputs("Calculate 5 + 5.")
    assert a.rollouts(ins) == b.rollouts(ins)


@pytest.mark.parametrize("sampler", ["lean", "hf"])
def test_interrupt_stops_a_long_generation_within_a_second(sampler: str) -> None:
    p = make(max_new_tokens=4000, num_generations=4, sampler=sampler)
    p.eos_ids = [p.vocab_size]  # never sampled: without the interrupt this runs for many seconds
    threading.Timer(0.5, p.interrupt).start()
    start = time.perf_counter()
    with pytest.raises(RunInterrupted):
        p.act(inputs(), 0)
    assert time.perf_counter() - start < 1.5
    p.sampling.max_new_tokens = 2
    assert len(p.rollouts(inputs("Hi"))) == 1  # the request was consumed: the policy acts again


# --------------------------------------------------------------------------- receiving
def forge(body: TokenRollout, **changes: Any) -> TokenRollout:
    fields = {f: getattr(body, f) for f in body.__struct_fields__} | changes
    return TokenRollout(**fields)


def test_check_refuses_foreign_or_forged_bodies(policy: LMPolicy) -> None:
    (inp,) = inputs("Calculate 1 + 2.")
    (body,) = policy.rollouts([inp])
    assert policy.check(body, inp) is None
    other = forge(body, tokenizer="0123456789abcdef")
    assert policy.check(other, inp) == f"tokenizer fingerprint 0123456789abcdef differs from this peer's {policy.fingerprint}"
    (elsewhere,) = inputs("Calculate 2 + 2.")
    assert "prompt_ids differ" in str(policy.check(forge(body, prompt_ids=tuple(policy.prompt_ids(elsewhere))), inp))
    assert "prompt_ids differ" in str(policy.check(forge(body, prompt_ids=body.prompt_ids[1:]), inp))
    s = body.samples[0]
    oov = TokenSample((*s.completion_ids[:-1], policy.vocab_size), s.logprobs, s.finish_reason)
    assert "outside this peer's vocabulary of 512" in str(policy.check(forge(body, samples=(oov,)), inp))
    long = TokenSample((1,) * 7, (-1.0,) * 7, "length")
    assert "more than this peer's max_new_tokens 6" in str(policy.check(forge(body, samples=(long,)), inp))
    many = body.samples * (policy.sampling.num_generations + 1)
    assert "more than this peer's num_generations" in str(policy.check(forge(body, samples=many), inp))


def test_texts_decode_without_special_tokens(policy: LMPolicy) -> None:
    (inp,) = inputs("q")
    ids = policy.tokenizer("<answer>4</answer>", add_special_tokens=False)["input_ids"]
    body = TokenRollout(inp.task_id, inp.digest, tuple(policy.prompt_ids(inp)),
                        (TokenSample((*ids, policy.tokenizer.eos_token_id), (-1.0,) * (len(ids) + 1), "stop"),),
                        0, policy.fingerprint)  # fmt: skip
    assert policy.texts(body) == ("<answer>4</answer>",)


def test_fingerprint_is_stable_and_tells_tokenizers_apart(policy: LMPolicy) -> None:
    from genrl_swarm.lm.policy import tokenizer_fingerprint

    policy.tokenizer(["a", "bb b"], padding=True)  # calls that touch the backend's padding state
    assert tokenizer_fingerprint(policy.tokenizer) == policy.fingerprint == make(seed=7).fingerprint
    _, tok = load_model("tiny-random")
    tok.chat_template = tok.chat_template.replace("assistant", "bot")
    assert tokenizer_fingerprint(tok) != policy.fingerprint


# --------------------------------------------------------------------------- learning
def scored(policy: LMPolicy, peer: str, body: TokenRollout, rewards: tuple[float, ...]) -> ScoredRollout:
    return ScoredRollout(Rollout(peer, 0, 0, body, policy.texts(body)), rewards)


def handmade(policy: LMPolicy, inp: StageInput) -> TokenRollout:
    """One completion stopped on EOS, one cut at max_new_tokens (no EOS)."""
    eos = policy.tokenizer.eos_token_id
    stop = TokenSample((40, 41, eos), (-1.0, -2.0, -0.5), "stop")
    cut = TokenSample((50, 51, 52, 53, 54, 55), (-1.0,) * 6, "length")
    return TokenRollout(inp.task_id, inp.digest, tuple(policy.prompt_ids(inp)), (stop, cut), 0, policy.fingerprint)


def test_learner_trains_on_exactly_the_sampled_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    import genrl_swarm.trainers.grpo as grpo

    policy = make(seed=3)
    learner = GRPOLearner(policy, {"micro_batch_size": 16})
    ins = inputs()
    bodies = [*policy.rollouts(ins[:2]), handmade(policy, ins[2])]
    fed: list[list[int]] = []
    masks: list[list[float]] = []

    def capture(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        fed.extend([i for i, m in zip(row, keep) if m] for row, keep in zip(kwargs["input_ids"].tolist(), kwargs["attention_mask"].tolist()))

    real_loss = grpo.grpo_loss
    def spy(*a: Any, **k: Any) -> Any:
        masks.extend(a[3].sum(1).tolist())
        return real_loss(*a, **k)

    monkeypatch.setattr(grpo, "grpo_loss", spy)
    hook = policy.model.register_forward_pre_hook(capture, with_kwargs=True)
    try:
        rewards = RoundRewards(0, tuple(scored(policy, "me", b, tuple(float(i % 2) for i in range(len(b.samples)))) for b in bodies))
        learner.train(GameState(0, "me"), rewards)
    finally:
        hook.remove()
    sampled = [[*b.prompt_ids, *s.completion_ids] for b in bodies for s in b.samples]
    assert sorted(fed) == sorted(sampled)  # not re-tokenized text, no EOS appended, EOS kept
    assert sorted(masks) == sorted(float(len(s.completion_ids)) for b in bodies for s in b.samples)
    eos = policy.tokenizer.eos_token_id
    assert [*bodies[2].prompt_ids, 40, 41, eos] in fed and [*bodies[2].prompt_ids, 50, 51, 52, 53, 54, 55] in fed


def test_training_moves_probability_towards_rewarded_completion() -> None:
    policy = make(seed=2)
    learner = GRPOLearner(policy, {"learning_rate": 3e-2})
    (inp,) = inputs("Calculate 2 + 2.")
    body = handmade(policy, inp)
    rewards = RoundRewards(0, (scored(policy, "me", body, (1.0, 0.0)),))

    def margin() -> float:
        batch = learner.collate(learner.samples(list(rewards.scored)))
        with torch.no_grad():
            logp = (learner.token_logps(policy.model, batch) * batch.completion_mask).sum(1)
        return float(logp[0] - logp[1])  # sorted by length: the 3-token (rewarded) one first

    before = margin()
    for _ in range(5):
        metrics = learner.train(GameState(0, "me"), rewards)
        policy.load_weights(learner.weights())
    assert margin() > before + 0.5
    assert metrics["train/sequences"] == 2 and policy.version == learner.version == 5
    assert {"train/is_weight_mean", "train/is_weight_max", "train/is_truncated_frac", "train/behaviour_kl"} <= set(metrics)


def test_zero_advantage_group_is_skipped(policy: LMPolicy) -> None:
    learner = GRPOLearner(policy)
    (inp,) = inputs("q")
    rewards = RoundRewards(0, (scored(policy, "me", handmade(policy, inp), (1.0, 1.0)),))
    assert learner.train(GameState(0, "me"), rewards) == {"train/sequences": 0.0}
    assert learner.version == policy.version  # no update, no new version


def test_sapo_selects_local_and_external(policy: LMPolicy) -> None:
    learner = GRPOLearner(policy, {"num_local": 1, "num_external": 2})
    (inp,) = inputs("q")
    body = handmade(policy, inp)
    chosen = learner.select(GameState(0, "me"), RoundRewards(0, tuple(scored(policy, p, body, (1.0, 0.0)) for p in ["me", "me", "x", "y", "z"])))
    peers = [s.rollout.peer_id for s in chosen]
    assert peers.count("me") == 1 and len(peers) == 3 and set(peers) - {"me"} <= {"x", "y", "z"}


def test_load_weights_shares_in_process_and_copies_otherwise(policy: LMPolicy) -> None:
    other = make(seed=5)
    with torch.no_grad():
        next(other.model.parameters()).add_(1.0)
    weights = next(policy.model.parameters()).detach().clone()
    policy.load_weights(Weights(3, policy.model))  # the learner's module is this one: nothing copied
    assert policy.version == 3 and torch.equal(next(policy.model.parameters()), weights)
    fresh = make(seed=6)
    fresh.load_weights(Weights(4, other.model.state_dict()))
    assert fresh.version == 4 and all(torch.equal(a, b) for a, b in zip(fresh.model.parameters(), other.model.parameters()))
    policy.load_weights(Weights(0, policy.model))


def test_checkpoint_restores_weights_version_rng_and_optimizer(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    policy, (inp,) = make(seed=8), inputs("q")
    learner = GRPOLearner(policy, {"learning_rate": 1e-2})
    learner.train(GameState(0, "me"), RoundRewards(0, (scored(policy, "me", handmade(policy, inp), (1.0, 0.0)),)))
    policy.load_weights(learner.weights())
    policy.save(tmp_path)
    learner.save(tmp_path)
    next_bodies = policy.rollouts([inp])
    reloaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "model"))
    assert all(torch.equal(a, b) for a, b in zip(policy.model.state_dict().values(), reloaded.state_dict().values()))
    again = make(seed=9)
    again_learner = GRPOLearner(again, {"learning_rate": 1e-2})
    again.load(tmp_path)
    again_learner.load(tmp_path)
    assert again.version == again_learner.version == 1 and again_learner.steps == 1
    assert again.rollouts([inp]) == next_bodies  # same weights, same sampling stream
    state = again_learner.optimizer.state_dict()["state"]
    assert state and all(torch.equal(v["exp_avg"], learner.optimizer.state_dict()["state"][k]["exp_avg"]) for k, v in state.items())


def test_lora_trains_only_adapters() -> None:
    p = LMPolicy("tiny-random", lora={"r": 4, "target_modules": ["q_proj", "v_proj"]}, seed=0)
    GRPOLearner(p)
    trainable = [n for n, w in p.model.named_parameters() if w.requires_grad]
    assert trainable and all("lora" in n for n in trainable)


def test_missing_model_error_says_what_was_tried() -> None:
    with pytest.raises(ModelLoadError, match=r"(?s)tried hub id 'no-such-org/no-such-model'.*Fix: pass a local directory"):
        load_model("no-such-org/no-such-model")


# --------------------------------------------------------------------------- rewards and data
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


def test_reasoning_reward_scores_the_receivers_decoded_text(policy: LMPolicy) -> None:
    from genrl_swarm.data.reasoning_gym import ReasoningGymData

    task = ReasoningGymData(["basic_arithmetic"], tasks_per_round=1, eval_size=0, seed=3).round_tasks(0)[0]
    inp = task.input(0)
    right = policy.tokenizer(f"<answer>{task.answer}</answer>", add_special_tokens=False)["input_ids"]
    body = TokenRollout(task.id, inp.digest, tuple(policy.prompt_ids(inp)),
                        (TokenSample(tuple(right), (-1.0,) * len(right), "length"), TokenSample((40,), (-1.0,), "length")),
                        0, policy.fingerprint)  # fmt: skip
    rollout = Rollout("peer", 0, 0, body, policy.texts(body))
    assert ReasoningReward(format_weight=0.5).score(task, inp, rollout) == [1.5, 0.0]


def test_ground_truth_never_reaches_a_stage_input(tmp_path: Path) -> None:
    from genrl_swarm.data.files import FileQAData
    from genrl_swarm.data.reasoning_gym import ReasoningGymData

    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + 1000?", "answer": str(i + 1000)}) + "\n" for i in range(6)))
    tasks = [*ReasoningGymData(["basic_arithmetic"], tasks_per_round=3, eval_size=0, seed=3).round_tasks(0),
             *FileQAData(str(path), tasks_per_round=2, eval_size=1).round_tasks(0)]  # fmt: skip
    for task in tasks:
        inp = task.input(0)
        assert set(inp.context) == {"dataset"} and inp.context["dataset"] == task.metadata["dataset"]
        assert task.answer is not None and task.answer not in inp.context.values()


def test_two_lm_peers_train_on_each_others_token_rollouts(tmp_path: Path) -> None:
    """The whole contract in memory: bodies cross the codec, each peer checks, decodes, scores
    and trains on the other's ids; a peer with another system prompt builds other prompt ids
    for the same input, so its bodies are refused."""
    from genrl_swarm.comm import InMemoryBackend
    from genrl_swarm.coord import LocalCoordinator
    from genrl_swarm.core import GameConfig, GameManager
    from genrl_swarm.data.files import FileQAData

    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(8)))
    results: dict[str, Any] = {}
    prompts = {"peer-0": "Answer briefly.", "peer-1": "Answer briefly.", "peer-2": "Another system prompt."}

    def play(comm: Any) -> None:
        pol = LMPolicy("tiny-random", {"num_generations": 2, "max_new_tokens": 4}, system_prompt=prompts[comm.peer_id], seed=int(comm.peer_id[-1]))
        learner = GRPOLearner(pol, {"num_local": 2, "num_external": 4})
        reward = type("ByIndex", (ReasoningReward,), {"score": lambda self, task, inp, r: [float(i) for i in range(len(r.texts))]})()
        game = GameManager(FileQAData(str(path), tasks_per_round=2, eval_size=1), reward, pol, learner, comm, LocalCoordinator(), GameConfig(max_rounds=1, exchange_timeout=30))
        results[comm.peer_id] = game.run()

    threads = [threading.Thread(target=play, args=(c,)) for c in InMemoryBackend.spawn(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    (r0,), (r2,) = results["peer-0"], results["peer-2"]
    assert sorted(r0.rewards) == ["peer-0", "peer-1"] and r0.dropped == {"peer-2": 2}  # peer-2's prompt ids differ
    assert r0.metrics["train/sequences"] == 8  # (2 own + the 2 of peer-1 that were accepted) x 2 samples
    assert sorted(r2.rewards) == ["peer-2"]
