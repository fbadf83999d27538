"""Fuzz benchmark: hostile payloads through everything a peer runs on a stranger's bytes.

Each input is one stranger's signed commitment and revealed payload for one stage. It goes
through the real receiving path of an honest peer ("me"): the in-memory transport, commitment
and reveal checks and decoding (``ByteBackend.exchange``, ``Codec``), per-sender budgets,
``GameState.record`` with the game's ``Policy.check`` and ``texts``, the later stages' inputs
(built the way the loop builds them, isolated per sender) and ``RewardManager.score_state``.

One arena per body type: the bandit (``ArmPulls``), multistage math with plain-text bodies
(the Echo body of the tests) and with the tiny LM (``TokenRollout``), and two small games for
``Episode`` and ``Trajectory``. Inputs are honest payloads mutated at the byte level, at the
msgpack-structure level and at the body level (values crafted for the games' parsers), and
broken commitments. A crash is any exception escaping that path: the transport turns bad
payloads into drops, so nothing may escape. Peak RSS is compared with a clean run of the same
harness on honest inputs (the same hostile inputs are generated, then not sent), each run in
its own process.

Run: .venv/bin/python benchmarks/bench_fuzz.py [--inputs 2100]   (per body type)
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import random
import resource
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).parent))
from common import table  # noqa: E402  (benchmarks/ is not a package)

from genrl_swarm.comm import InMemoryBackend, InMemorySwarm  # noqa: E402
from genrl_swarm.comm.codec import DEFAULT_MAX_BYTES, Commitment, encode_signed  # noqa: E402
from genrl_swarm.comm.epoch import Epoch  # noqa: E402
from genrl_swarm.coord import LocalCoordinator  # noqa: E402
from genrl_swarm.core import (  # noqa: E402
    Body,
    DataManager,
    GameConfig,
    GameManager,
    GameState,
    Policy,
    RewardManager,
    Rollout,
    RoundRewards,
    StageInput,
    Task,
    Weights,
)
from genrl_swarm.core.admission import admit
from genrl_swarm.core.bodies import Array, ArraySpec, TokenRollout, TokenSample  # noqa: E402
from genrl_swarm.core.identity import Identity  # noqa: E402
from genrl_swarm.core.interfaces import ExchangeResult  # noqa: E402
from genrl_swarm.core.types import FORMAT_VERSION  # noqa: E402
from genrl_swarm.paradigms.agents.bodies import Episode, Turn
from genrl_swarm.paradigms.marl.bodies import Trajectory

ME, HONEST, SWARM = "me", "honest-peer", "genrl-swarm"
EPOCH = Epoch.new()  # the run every board of this process plays: the stranger's records name it
STRANGER = Identity.from_seed(hashlib.sha256(b"bench_fuzz stranger").digest())
MAX_BYTES = DEFAULT_MAX_BYTES  # the receiving peer's cap (--max-bytes; the codec's default): "huge" inputs stay under it
FREEZE = True  # gc.freeze() once the peer is built, as the launcher does (--no-gc-freeze to see the cost)
Wire = dict[str, Any]  # a body as a hostile sender encodes it: no constructor checks ran


def wire(body: Body, **changes: Any) -> Wire:
    return {**msgspec.to_builtins(body, builtin_types=(bytes,)), **changes}


# --------------------------------------------------------------------------- the games
class Untrained(Policy):
    """Policies here only receive: nothing to load or save."""

    def load_weights(self, weights: Weights) -> None: ...
    def save(self, directory: Path) -> None: ...
    def load(self, directory: Path) -> None: ...


class Text(Body, frozen=True, tag="echo"):
    """The Echo body of tests/helpers/game.py: each sample's text, as the sender wrote it."""

    outputs: tuple[str, ...]

    @property
    def num_samples(self) -> int:
        return len(self.outputs)


class TextPolicy(Untrained):
    """Plain-text bodies with the limits LMPolicy.check applies (samples, length per sample)."""

    body_type = Text

    def __init__(self, samples: int = 4, max_chars: int = 16384) -> None:
        self.samples, self.max_chars = samples, max_chars

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        return [Text(i.task_id, i.digest, ("<answer>4</answer>", "Choice: Student #1")) for i in inputs]

    def check(self, body: Body, input: StageInput) -> str | None:
        assert isinstance(body, Text)
        if not 0 < len(body.outputs) <= self.samples:
            return f"{len(body.outputs)} samples"
        return "a sample is too long" if any(len(o) > self.max_chars for o in body.outputs) else None

    def texts(self, body: Body) -> tuple[str, ...]:
        assert isinstance(body, Text)
        return body.outputs


class FixedTasks(DataManager):
    """The same tasks every round: the arena replays one round per input."""

    def __init__(self, tasks: Sequence[Task]) -> None:
        self.tasks = list(tasks)

    def round_tasks(self, round: int) -> list[Task]:
        return list(self.tasks)


class EpisodeGame(RewardManager, Untrained):
    """A tool-use game: reward 1 for an episode that ended with an answer, scaled by the share of
    assistant tokens (reads the mask and log-probs the way a learner would)."""

    body_type = Episode

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        return [episode(i, (5, 6, 7)) for i in inputs]

    def check(self, body: Body, input: StageInput) -> str | None:
        assert isinstance(body, Episode)
        if body.tokenizer != "toy" or len(body.turns) > 32 or body.units > 8192:
            return "not this game's tokenizer, or too long"
        return "token id outside the vocabulary" if any(i >= 1000 for t in body.turns for i in t.token_ids) else None

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        body = rollout.body
        mask = body.loss_mask
        share = sum(mask) / max(len(mask), 1)
        return [share * (body.finish_reason == "answer") + 0.0 * sum(body.logprobs)]


SPEC = {"observations": ArraySpec("float32", (4,)), "actions": ArraySpec("int64"), "rewards": ArraySpec("float32"), "dones": ArraySpec("bool")}


class TrajectoryGame(RewardManager, Untrained):
    """A control game: reward is the episode's return, recomputed from the arrays it sent."""

    body_type = Trajectory

    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        return [trajectory(i, 8) for i in inputs]

    def check(self, body: Body, input: StageInput) -> str | None:
        assert isinstance(body, Trajectory)
        return body.violations(SPEC) or ("too many steps" if body.steps > 4096 else None)

    def score(self, task: Task, input: StageInput, rollout: Rollout[Any]) -> list[float]:
        import numpy as np

        returns = np.nan_to_num(rollout.body.rewards.numpy().astype(np.float64)).sum()
        return [float(np.clip(returns, -1e6, 1e6)) / 1e6 + float(rollout.body.actions.numpy().max(initial=0) >= 0)]


def episode(inp: StageInput, ids: Sequence[int], finish: str = "answer") -> Episode:
    turns = (Turn("user", (1, 2, 3)), Turn("assistant", tuple(ids), tuple(-0.5 for _ in ids)))
    return Episode(inp.task_id, inp.digest, turns, finish, 0, "toy")  # type: ignore[arg-type]


def trajectory(inp: StageInput, steps: int, seed: int = 0) -> Trajectory:
    import numpy as np

    rng = np.random.default_rng(seed)
    return Trajectory(
        inp.task_id, inp.digest, steps, Array.of(rng.normal(size=(steps, 4)).astype(np.float32)),
        Array.of(rng.integers(0, 4, steps).astype(np.int64)), Array.of(rng.random(steps).astype(np.float32)),
        Array.of(np.arange(steps) == steps - 1),
    )  # fmt: skip


# --------------------------------------------------------------------------- arenas
@dataclass
class Arena:
    """An honest peer of one game, ready to receive one stranger's payload per input."""

    name: str
    data: DataManager
    reward: RewardManager
    policy: Policy
    stages: int
    own: Callable[[Sequence[StageInput], int], list[Body]]  # honest bodies of peer k (0: me, 1: honest, 2: stranger)
    crafted: Callable[[random.Random, Sequence[StageInput]], tuple[str, list[Wire]]]  # hostile bodies, as sent
    identity: Identity = field(init=False, default_factory=Identity.generate)
    manager: GameManager = field(init=False)
    tasks: list[Task] = field(init=False)

    def __post_init__(self) -> None:
        comm = InMemoryBackend(InMemorySwarm(), ME, identity=self.identity)
        self.manager = GameManager(self.data, self.reward, self.policy, None, comm, LocalCoordinator(0.0), GameConfig(num_stages=self.stages))
        self.tasks = self.data.round_tasks(0)

    def history(self, stage: int) -> tuple[GameState, list[StageInput]]:
        """Round 1 played honestly up to ``stage`` (the same every time), and this peer's inputs."""
        state = GameState(1, ME)
        state.set_tasks(self.tasks)
        for s in range(stage + 1):
            inputs, _ = self.manager._stage_inputs(state, s)  # the loop's own isolation of peer data
            if s < stage:
                admit(state, s, inputs, {ME: self.own(inputs, 0), HONEST: self.own(inputs, 1)}, self.policy.check, derive=self.policy.texts)
        return state, inputs

    def receive(self, state: GameState, stage: int, inputs: list[StageInput], case: Case) -> tuple[ExchangeResult, RoundRewards]:
        """Everything after the bytes arrive: exchange (on a board of its own), budgets, record,
        later stages, scoring."""
        board = InMemorySwarm(epoch=EPOCH)
        backend = InMemoryBackend(board, ME, max_bytes=MAX_BYTES, identity=self.identity)
        board.post(state.round, stage, "commit", STRANGER.peer_id, case.commit)
        if case.payload is not None:
            board.post(state.round, stage, "reveal", STRANGER.peer_id, case.payload)
        result = backend.exchange(state.round, stage, self.own(inputs, 0), case.wait, self.policy.body_type)
        received = {ME: result.received[ME], HONEST: tuple(self.own(inputs, 1))} | dict(result.received)
        over = self.manager.book.over_budget(stage, received, result.sizes)
        budget = self.manager.book.config.cpu_budget
        kept = {p: b for p, b in received.items() if p not in {d.peer_id for d in over}}
        admit(state, stage, inputs, kept, self.policy.check, derive=self.policy.texts, cpu_budget=budget)
        for s in range(stage + 1, self.stages):
            later, _ = self.manager._stage_inputs(state, s)
            admit(
                state, s, later, {ME: self.own(later, 0), HONEST: self.own(later, 1)}, self.policy.check, derive=self.policy.texts, cpu_budget=budget
            )
        rewards = self.reward.score_state(state, cpu_budget=budget)
        state.drops.extend(over + [_drop(p, stage, why) for p, why in result.dropped.items()])
        return result, rewards


def _drop(peer: str, stage: int, why: str) -> Any:
    from genrl_swarm.core.types import Drop

    return Drop(peer, stage, None, why, "payload")


def bandit_arena() -> Arena:
    import numpy as np

    from genrl_swarm.games.bandit import ArmPulls, BanditData, BanditReward, SoftmaxPolicy

    policies = [SoftmaxPolicy(num_contexts=16, num_arms=8, num_stages=2, num_generations=4, seed=k) for k in range(2)]

    def own(inputs: Sequence[StageInput], k: int) -> list[Body]:
        policy = policies[k % 2]
        policy.rng = np.random.default_rng([k, *(int(i.digest, 16) & 0xFFFFFFFF for i in inputs)])  # replayable rounds
        return policy.act(inputs, inputs[0].stage if inputs else 0)

    def crafted(rng: random.Random, inputs: Sequence[StageInput]) -> tuple[str, list[Wire]]:
        arms = rng.choice([(1 << 16,), (7,) * 256, (8,), (0, 1, 2, 3), tuple(rng.randrange(1 << 16) for _ in range(rng.randint(1, 256)))])
        logp = rng.choice([-1e308, -5e-324, -0.0, 0.0, -1.0])
        version = rng.choice([0, (1 << 63) - 1])
        return "arms-edge", [
            wire(ArmPulls(i.task_id, i.digest, (0,), (0.0,)), arms=arms, logprobs=[logp] * len(arms), policy_version=version) for i in inputs
        ]

    return Arena("ArmPulls (bandit)", BanditData(16, 8, 4), BanditReward(), policies[0], 2,
                 own, crafted)  # fmt: skip


def math_tasks(count: int = 4) -> list[Task]:
    """Reasoning Gym arithmetic, one task per dataset where possible (each has its own scorer)."""
    from genrl_swarm.data.reasoning_gym import ReasoningGymData
    from genrl_swarm.games.multistage_math.game import MATH_DATASETS

    data, picked = ReasoningGymData(MATH_DATASETS, tasks_per_round=4, seed=0), dict[str, Task]()
    for r in range(12):
        for t in data.round_tasks(r):
            picked.setdefault(t.metadata["dataset"], t)
    return list(picked.values())[:count]


def text_arena() -> Arena:
    from genrl_swarm.games.multistage_math import MultistageMathData, MultistageReward

    policy = TextPolicy()
    answers = [("<answer>4</answer>", "Choice: Student #1", "final answer: 3"), ("\\boxed{2}", "Choice: Student #2")]

    def crafted(rng: random.Random, inputs: Sequence[StageInput]) -> tuple[str, list[Wire]]:
        name, texts = zip(*(parser_text(rng, policy.max_chars) for _ in range(rng.randint(1, policy.samples))))
        return f"text:{name[0]}", [wire(Text(i.task_id, i.digest, tuple(texts))) for i in inputs]

    return Arena("Echo text (multistage math)", MultistageMathData(FixedTasks(math_tasks())), MultistageReward(), policy, 3,
                 lambda inputs, k: [Text(i.task_id, i.digest, answers[k % 2]) for i in inputs], crafted)  # fmt: skip


def token_arena() -> Arena:
    from genrl_swarm.games.multistage_math import MultistageMathData, MultistageReward
    from genrl_swarm.paradigms.lm.policy import LMPolicy

    policy = LMPolicy("tiny-random", {"num_generations": 4, "max_new_tokens": 512}, seed=0)
    encode = lambda text: list(policy.tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    honest = [encode(t) for t in ("<answer>4</answer>", "Choice: Student #1", "so the answer is 12")]

    def own(inputs: Sequence[StageInput], k: int) -> list[Body]:
        samples = tuple(TokenSample(tuple(honest[(k + j) % 3]), (-1.0,) * len(honest[(k + j) % 3]), "length") for j in range(2))
        return [TokenRollout(i.task_id, i.digest, tuple(policy.prompt_ids(i)), samples, 0, policy.fingerprint) for i in inputs]

    def crafted(rng: random.Random, inputs: Sequence[StageInput]) -> tuple[str, list[Wire]]:
        name, text = parser_text(rng, 4000)
        ids = rng.choice(
            [encode(text)[:512], [rng.randrange(policy.vocab_size) for _ in range(512)], [policy.eos_ids[0]] * 512, [policy.vocab_size - 1]]
        )
        lps = rng.choice([[-0.0] * len(ids), [-1e-300] * len(ids), [math.nan] * len(ids), [-1.0] * (len(ids) + 1)])
        samples = [{"completion_ids": ids, "logprobs": lps, "finish_reason": "stop"}] * rng.randint(1, 5)
        return f"tokens:{name}", [wire(b, samples=samples) for b in own(inputs, 0)]

    return Arena("TokenRollout (tiny LM, multistage math)", MultistageMathData(FixedTasks(math_tasks())), MultistageReward(), policy, 3, own, crafted)


def episode_arena() -> Arena:
    game = EpisodeGame()

    def crafted(rng: random.Random, inputs: Sequence[StageInput]) -> tuple[str, list[Wire]]:
        n = rng.choice([1, 32, 33, 256])
        ids = [rng.randrange(1 << rng.choice([3, 10, 31])) for _ in range(rng.choice([0, 1, 255, 4096]))]
        lps = rng.choice([[-1e-300] * len(ids), [math.inf] * len(ids), []])
        turns = [{"role": rng.choice(["assistant", "tool", "user"]), "token_ids": ids, "logprobs": lps} for k in range(n)]
        finish = rng.choice(["answer", "error", "other"])
        return "episode-edge", [wire(episode(i, (1,)), turns=turns, finish_reason=finish) for i in inputs]

    return Arena("Episode (tool game)", FixedTasks([Task.create(f"env {k}", answer="done") for k in range(4)]), game, game, 1,
                 lambda inputs, k: [episode(i, (5 + k, 6, 7)) for i in inputs], crafted)  # fmt: skip


def trajectory_arena() -> Arena:
    import numpy as np

    game = TrajectoryGame()

    def crafted(rng: random.Random, inputs: Sequence[StageInput]) -> tuple[str, list[Wire]]:
        steps = rng.choice([1, 4096, 4097, 1 << 16])
        fill = rng.choice([np.nan, np.inf, -np.inf, 3.4e38, 0.0])
        arrays = {
            "observations": Array.of(np.zeros((steps, 4), np.float32)), "rewards": Array.of(np.full(steps, fill, np.float32)),
            "actions": Array.of(np.full(steps, rng.choice([-(1 << 63), (1 << 63) - 1, 0]), np.int64)), "dones": Array.of(np.zeros(steps, bool)),
        }  # fmt: skip
        lie: Wire = rng.choice([{}, {"steps": steps + 1}, {"rewards": {"dtype": "float64", "shape": [steps], "data": b"\0" * 4 * steps}},
                          {"actions": {"dtype": "int64", "shape": [1 << 30, 1 << 30], "data": b""}}])  # fmt: skip
        fields = {"steps": steps} | {k: msgspec.to_builtins(v, builtin_types=(bytes,)) for k, v in arrays.items()} | lie
        return f"trajectory-edge:{fill}", [wire(trajectory(i, 1), **fields) for i in inputs]

    return Arena("Trajectory (control game)", FixedTasks([Task.create(f"env {k}") for k in range(4)]), game, game, 1,
                 lambda inputs, k: [trajectory(i, 8, k) for i in inputs], crafted)  # fmt: skip


ARENAS: dict[str, Callable[[], Arena]] = {
    "bandit": bandit_arena, "text": text_arena, "tokens": token_arena, "episode": episode_arena, "trajectory": trajectory_arena,
}  # fmt: skip


# --------------------------------------------------------------------------- hostile inputs
PARSER_PIECES = [
    "<answer>", "</answer>", "<ANSWER>", "\\boxed{", "{", "}", "\\boxed{a{b}c}", "answer is ", "final answer: ", "Answer = ",
    "Choice: Student #", "Student #", "#", "9", "0", "1", ",", ".", "/", "-", "+", "e", "E", "$", "%", " ", "\n", "\r\n", "\t",
    "\\frac{", "\\dfrac{", "1e999", "1e-999", "9" * 64, "١٢٣", "１２３", "²", "\u00a0", "\u202e", "\u0301", "x = ", "=", "*", "·",
]  # fmt: skip


def parser_text(rng: random.Random, limit: int) -> tuple[str, str]:
    """A completion crafted for the answer parser (lm/answers.py) and the games' parsers:
    repetitions of parser tokens, long numbers and exponents, many lines, nested braces."""
    k = rng.choice([1, 10, 100, 1000, limit])
    kind = rng.choice(["repeat", "mix", "number", "nested", "choice", "lines", "unicode"])
    if kind == "repeat":
        piece = rng.choice(PARSER_PIECES)
        text = piece * max(1, k // max(len(piece), 1))
    elif kind == "mix":
        text = "".join(rng.choice(PARSER_PIECES) for _ in range(k))
    elif kind == "number":
        text = rng.choice(["<answer>", "answer is ", "\\boxed{", ""]) + rng.choice(
            ["9" * k, "1e" + "9" * min(k, 60), "1/" + "0" * k, "1," * k, "0." + "3" * k, "-" * k + "1"]
        )
    elif kind == "nested":
        text = "\\boxed{" + "{" * k + "1" + "}" * k + "}"
    elif kind == "choice":
        text = rng.choice(["Choice: Student #" + "9" * min(k, 50), "Choice: Student #1 " * (k // 19 + 1), "Choice:" + " " * k + "Student # 2"])
    elif kind == "lines":
        text = rng.choice(["\n", "answer: 1\n", " \n", "answer is\n"]) * k
    else:
        text = "".join(rng.choice(["١", "٣", "１", "²", "\u0301", "\u202e", "😀", "\u00a0"]) for _ in range(k))
    return kind, text[:limit]


EXTREMES: list[Any] = [(1 << 63) - 1, -(1 << 63), (1 << 64) - 1, -1, 0, 1 << 31, 1 << 16, math.nan, math.inf, -math.inf, -0.0, 1e308, -1e308, 5e-324]
BOMBS = [
    b"\xdd\xff\xff\xff\xff",
    b"\xdb\xff\xff\xff\xffabc",
    b"\xc6\x7f\xff\xff\xff",
    b"\xdf\xff\xff\xff\xff",
    b"\xdc\xff\xff",
    b"\xc9\xff\xff\xff\xff\x01",
]
_HOLE = "\x00hole\x00"


@dataclass(frozen=True)
class Case:
    """One stranger's input for one stage: its signed commitment and its reveal (None: none)."""

    mutation: str
    stage: int
    commit: bytes
    payload: bytes | None
    wait: float = 5.0  # the exchange's deadline; it returns at once unless a reveal is missing


def commitment(round: int, stage: int, payload: bytes, sign: Identity = STRANGER, **fields: Any) -> bytes:
    record = Commitment(SWARM, EPOCH.value, round, stage, STRANGER.peer_id, hashlib.sha256(payload).digest(), len(payload))
    return encode_signed("commit", msgspec.structs.replace(record, **fields), sign.sign)


def envelope(round: int, stage: int, bodies: Sequence[Body | Wire]) -> bytes:
    return msgspec.msgpack.encode({"version": FORMAT_VERSION, "sender": STRANGER.peer_id, "round": round, "stage": stage,
                                   "bodies": [b if isinstance(b, dict) else msgspec.to_builtins(b, builtin_types=(bytes,)) for b in bodies]})  # fmt: skip


def _nodes(tree: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in list(items)[:64]:
        yield from _nodes(value, (*path, key))


def _replace(tree: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = tree
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return tree


def structure_mutation(rng: random.Random, payload: bytes) -> tuple[str, bytes]:
    """Change one node of the msgpack tree: extreme numbers, another type, a missing or extra
    field, a long string or array (within the cap), deep nesting, a container header that
    announces 4 G items."""
    tree = msgspec.msgpack.decode(payload)
    path = rng.choice(list(_nodes(tree))[1:])
    op = rng.choice(
        ["int-extreme", "float-extreme", "type-swap", "drop-field", "extra-field", "long-string", "long-array", "deep-nesting", "header-bomb"]
    )
    raw = b""
    if op in ("int-extreme", "float-extreme"):
        value: Any = rng.choice([x for x in EXTREMES if isinstance(x, int if op == "int-extreme" else float)])
    elif op == "type-swap":
        value = rng.choice(["1", b"\x01", [], {}, None, True, 1.5, {"type": "echo"}])
    elif op == "long-string":
        piece, chars = rng.choice(["9", "<answer>", "a"]), rng.choice([1 << 10, 1 << 16, 1 << 20, 7 << 20])
        value = (piece * (chars // len(piece) + 1))[:chars]
    elif op == "long-array":
        value = [rng.choice([0, 1, -1, 1 << 40, 0.5])] * rng.choice([300, 1 << 16, (1 << 16) + 1, 1 << 20])
    elif op in ("drop-field", "extra-field"):
        parent, key = path[:-1], path[-1]
        node = tree
        for k in parent:
            node = node[k]
        if isinstance(node, dict) and op == "drop-field":
            del node[key]
        elif isinstance(node, dict):
            node["zz_extra"] = [1, 2, 3]
        return op, msgspec.msgpack.encode(tree)
    else:
        value, raw = _HOLE, (b"\x91" * rng.choice([100, 1000, 100_000]) + b"\xc0") if op == "deep-nesting" else rng.choice(BOMBS)
    encoded = msgspec.msgpack.encode(_replace(tree, path, value))
    return op, encoded.replace(msgspec.msgpack.encode(_HOLE), raw, 1) if raw else encoded


def byte_mutation(rng: random.Random, payload: bytes) -> tuple[str, bytes]:
    data = bytearray(payload)
    op = rng.choice(["bitflip", "bytes", "truncate", "append", "splice", "header-bytes", "random"])
    if op == "bitflip":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif op == "bytes":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.choice([0x00, 0xFF, 0xC1, 0xDD, 0xDF, 0xC7, rng.randrange(256)])
    elif op == "truncate":
        del data[rng.randrange(len(data)) :]
    elif op == "append":
        data += rng.randbytes(rng.choice([1, 100, 1 << 16]))
    elif op == "splice":
        i, j = sorted(rng.randrange(len(data) + 1) for _ in range(2))
        data[i:i] = data[i:j] * rng.randint(1, 4)
    elif op == "header-bytes":
        i = rng.randrange(len(data))
        data[i:i] = rng.choice(BOMBS)
    else:
        data = bytearray(rng.randbytes(rng.choice([0, 1, 64, 4096])))
    return op, bytes(data)


def hostile_cases(arena: Arena, rng: random.Random, count: int) -> Iterator[tuple[Case, GameState, list[StageInput]]]:
    """``count`` hostile inputs, each with the fresh round (state and inputs) it arrives in."""
    for _ in range(count):
        stage = rng.randrange(arena.stages)
        state, inputs = arena.history(stage)
        r = state.round
        honest = envelope(r, stage, arena.own(inputs, 2))
        family = rng.random()
        if family < 0.3:
            name, payload = byte_mutation(rng, honest)
        elif family < 0.6:
            name, payload = structure_mutation(rng, honest)
        elif family < 0.9:
            name, bodies = body_mutation(arena, rng, inputs)
            payload = envelope(r, stage, fit(bodies))
        else:
            yield commitment_mutation(rng, r, stage, honest), state, inputs
            continue
        if len(payload) > MAX_BYTES:
            payload = payload[:MAX_BYTES]
            name += "+cut"
        yield Case(name, stage, commitment(r, stage, payload), payload), state, inputs


def body_mutation(arena: Arena, rng: random.Random, inputs: Sequence[StageInput]) -> tuple[str, list[Wire]]:
    """Schema-valid bodies with hostile values: the game's crafted ones, duplicate tasks, wrong
    digests, unknown tasks, or thousands of bodies."""
    name, bodies = arena.crafted(rng, inputs)
    op = rng.choice(["crafted", "crafted", "duplicate-tasks", "wrong-digest", "unknown-task", "many-bodies", "tiny-structs"])
    if op == "duplicate-tasks":
        return op, bodies[:1] * rng.choice([2, 100, 4096])
    if op == "wrong-digest":
        return op, [{**b, "input_digest": rng.randbytes(12).hex()} for b in bodies]
    if op == "unknown-task":
        return op, [{**b, "task_id": rng.choice(["x", "é" * 128, b["input_digest"]])} for b in bodies]
    if op == "many-bodies":
        return op, (bodies * (4096 // max(len(bodies), 1) + 1))[: rng.choice([64, 4096])]
    if op == "tiny-structs":
        return op, [tiny_structs(bodies[0])] * 4096
    return name, bodies


def tiny_structs(body: Wire) -> Wire:
    """``body`` holding as many minimal sub-structs as its schema allows: decoding costs per
    object, so this is the most decode work (and memory) a payload under the cap can buy."""
    smallest: dict[str, tuple[str, Any, int]] = {
        "tokens": ("samples", {"completion_ids": [1], "logprobs": [-0.5], "finish_reason": "stop"}, 1024),
        "episode": ("turns", {"role": "assistant", "token_ids": [1], "logprobs": [-0.5]}, 256),
        "echo": ("outputs", "a", 1 << 22),
        "arms": ("arms", 1, 256),
    }
    if body["type"] not in smallest:
        return body
    name, item, count = smallest[body["type"]]
    changed = {**body, name: [item] * count}
    return changed | ({"logprobs": [-0.5] * count} if body["type"] == "arms" else {})


def fit(bodies: list[Wire]) -> list[Wire]:
    """As many of ``bodies`` as fit under the cap (huge, but not refused for size alone)."""
    each = max(len(msgspec.msgpack.encode(b)) for b in bodies[:8]) + 16
    return bodies[: max(1, MAX_BYTES // each)]


def commitment_mutation(rng: random.Random, r: int, stage: int, honest: bytes) -> Case:
    op = rng.choice(["commit-digest", "commit-size", "commit-forged", "commit-replay", "commit-bytes", "commit-only"])
    if op == "commit-digest":
        return Case(op, stage, commitment(r, stage, honest, digest=rng.randbytes(32)), honest)
    if op == "commit-size":
        return Case(op, stage, commitment(r, stage, honest, size=rng.choice([0, len(honest) + 1, MAX_BYTES + 1, (1 << 63) - 1])), honest)
    if op == "commit-forged":
        return Case(op, stage, commitment(r, stage, honest, sign=Identity.generate()), honest)
    if op == "commit-replay":
        return Case(op, stage, commitment(r - 1, stage, honest), honest)  # a record signed for the round before
    if op == "commit-bytes":
        return Case(op, stage, byte_mutation(rng, commitment(r, stage, honest))[1], honest)
    return Case(op, stage, commitment(r, stage, honest), None, wait=0.01)  # waits out its deadline, by design


def clean_cases(arena: Arena, rng: random.Random, count: int) -> Iterator[tuple[Case, GameState, list[StageInput]]]:
    """The hostile inputs are generated as in a hostile run (so the harness's own memory is the
    same), then an honest payload for the same round is received instead."""
    for case, state, inputs in hostile_cases(arena, rng, count):
        payload = envelope(state.round, case.stage, arena.own(inputs, 2))
        yield Case("honest", case.stage, commitment(state.round, case.stage, payload), payload), state, inputs


# --------------------------------------------------------------------------- running
@dataclass
class Report:
    """One run of one arena. Times are this thread's CPU time per input (what the peer spends;
    the machine's other load does not count), and wall time beside it."""

    kind: str
    mode: str
    inputs: int = 0
    crashes: int = 0
    first_crashes: list[str] = field(default_factory=list)
    rejected: int = 0  # payloads dropped by the transport (commitment, reveal, decode)
    dropped: int = 0  # bodies refused later (checks, budgets, stage inputs, scoring)
    kept: int = 0  # stranger's bodies stored and scored
    cpu_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    slowest: str = ""
    rss_mb: float = 0.0

    def summary(self) -> dict[str, Any]:
        cpu = sorted(self.cpu_ms)
        p99 = cpu[min(len(cpu) - 1, int(len(cpu) * 0.99))] if cpu else 0.0
        extra = {"slowest_ms": cpu[-1] if cpu else 0.0, "p99_ms": p99, "slowest_wall_ms": max(self.wall_ms, default=0.0)}
        return {k: v for k, v in vars(self).items() if k not in ("cpu_ms", "wall_ms")} | extra


def run(kind: str, mode: str, count: int, seed: int = 0) -> Report:
    import logging

    logging.disable(logging.WARNING)  # every drop logs a warning; the counts are the output
    arena = ARENAS[kind]()
    if FREEZE:
        import gc

        gc.collect()
        gc.freeze()
    rng = random.Random(f"bench_fuzz/{kind}/{seed}")
    report = Report(arena.name, mode)
    cases = hostile_cases(arena, rng, count) if mode == "hostile" else clean_cases(arena, rng, count)
    for case, state, inputs in cases:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            arena.receive(state, case.stage, inputs, case)
        except Exception:  # noqa: BLE001 - the measurement: anything escaping is a crash
            report.crashes += 1
            if len(report.first_crashes) < 5:
                report.first_crashes.append(f"#{report.inputs} {case.mutation}: {traceback.format_exc(limit=6)}")
        report.cpu_ms.append((time.thread_time() - cpu) * 1e3)
        report.wall_ms.append((time.perf_counter() - wall) * 1e3)
        if report.cpu_ms[-1] >= max(report.cpu_ms):
            report.slowest = f"#{report.inputs} {case.mutation} ({len(case.payload or b'')} B, stage {case.stage})"
        report.inputs += 1
        stranger = [d for d in state.drops if d.peer_id == STRANGER.peer_id]
        report.rejected += sum(d.kind == "payload" for d in stranger)
        report.dropped += sum(d.kind != "payload" for d in stranger)
        report.kept += len(state.select(peer=STRANGER.peer_id))
    report.rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return report


def memory(kind: str, count: int, top: int = 6) -> None:
    """The inputs that made the peer allocate most (tracemalloc peak while receiving, the input's
    own bytes excluded): where a peak RSS comes from."""
    import logging
    import tracemalloc

    logging.disable(logging.WARNING)
    arena = ARENAS[kind]()
    tracemalloc.start()
    peaks = []
    for i, (case, state, inputs) in enumerate(hostile_cases(arena, random.Random(f"bench_fuzz/{kind}/0"), count)):
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        with contextlib.suppress(Exception):  # counted by the main run; here only memory matters
            arena.receive(state, case.stage, inputs, case)
        peaks.append(((tracemalloc.get_traced_memory()[1] - before) / 2**20, i, case.mutation, len(case.payload or b""), case.stage))
    for mb, i, mutation, size, stage in sorted(peaks, reverse=True)[:top]:
        print(f"#{i} {mutation} ({size} B, stage {stage}): peak {mb:.1f} MB allocated while receiving")


def profile(kind: str, index: int) -> None:
    """Replay hostile input ``index`` of ``kind`` under cProfile (inputs are deterministic)."""
    import cProfile
    import logging
    import pstats

    logging.disable(logging.WARNING)
    arena = ARENAS[kind]()
    for i, (case, state, inputs) in enumerate(hostile_cases(arena, random.Random(f"bench_fuzz/{kind}/0"), index + 1)):
        if i == index:
            print(f"#{index}: {case.mutation}, {len(case.payload or b'')} bytes, stage {case.stage}")
            with cProfile.Profile() as p:
                arena.receive(state, case.stage, inputs, case)
            pstats.Stats(p).sort_stats("tottime").print_stats(12)


def child(kind: str, mode: str, count: int) -> dict[str, Any]:
    """One run in a fresh process, so each peak RSS is its own."""
    cmd = [sys.executable, __file__, "--max-bytes", str(MAX_BYTES), *([] if FREEZE else ["--no-gc-freeze"]), "--child", kind, mode, str(count)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{kind}/{mode} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    import platform

    return platform.processor() or platform.machine()


def main() -> None:
    global MAX_BYTES, FREEZE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=2100, help="hostile inputs per body type")
    parser.add_argument("--only", nargs="*", default=list(ARENAS), choices=list(ARENAS))
    parser.add_argument("--max-bytes", type=int, default=MAX_BYTES, help="the receiving peer's communication.max_bytes")
    parser.add_argument("--no-gc-freeze", dest="gc_freeze", action="store_false", help="skip the launcher's gc.freeze() after the peer is built")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "MODE", "COUNT"), help=argparse.SUPPRESS)
    parser.add_argument("--profile", nargs=2, metavar=("KIND", "INDEX"), help="profile one hostile input (the table names the slowest)")
    parser.add_argument("--memory", nargs=2, metavar=("KIND", "COUNT"), help="the inputs that allocate most")
    args = parser.parse_args()
    MAX_BYTES, FREEZE = args.max_bytes, args.gc_freeze
    if args.profile:
        profile(args.profile[0], int(args.profile[1]))
        return
    if args.memory:
        memory(args.memory[0], int(args.memory[1]))
        return
    if args.child:
        kind, mode, count = args.child
        print(json.dumps(run(kind, mode, int(count)).summary()))
        return
    import datetime
    import os
    import platform

    print(f"{datetime.datetime.now():%Y-%m-%d %H:%M} | {cpu_model()} | {os.cpu_count()} cores | Python {platform.python_version()} "
          f"| max_bytes {MAX_BYTES:,}{' | gc.freeze()' if FREEZE else ''}")  # fmt: skip
    rows, total, crashes = [], 0, []
    for kind in args.only:
        clean, hostile = child(kind, "clean", args.inputs), child(kind, "hostile", args.inputs)
        total += hostile["inputs"]
        crashes += hostile["first_crashes"]
        rows.append([
            hostile["kind"], hostile["inputs"], hostile["rejected"], hostile["dropped"], hostile["kept"], hostile["crashes"],
            f"{hostile['slowest_ms']:.1f}", hostile["slowest"], f"{hostile['p99_ms']:.2f}", f"{hostile['slowest_wall_ms']:.1f}",
            f"{clean['rss_mb']:.0f} / {hostile['rss_mb']:.0f} ({hostile['rss_mb'] / clean['rss_mb']:.2f}x)",
        ])  # fmt: skip
    headers = ["body type", "inputs", "payloads rejected", "bodies dropped", "bodies kept", "crashes", "slowest CPU ms", "slowest input",
               "p99 CPU ms", "slowest wall ms", "peak RSS MB clean / hostile"]  # fmt: skip
    print(table(headers, rows))
    print(f"{total} hostile inputs; targets: 0 crashes, slowest < 100 ms, peak RSS within 2x of clean. "
          "Replay one input: --profile KIND INDEX; largest allocations: --memory KIND COUNT")  # fmt: skip
    for c in crashes:
        print("\nCRASH", c)


if __name__ == "__main__":
    main()
