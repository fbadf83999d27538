"""The codec: round trips of every body type, and one clear error for every bad payload."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genrl_swarm.comm.codec import Codec, PayloadError
from genrl_swarm.core import FORMAT_VERSION, Array, ArraySpec, Task, TokenRollout, TokenSample
from genrl_swarm.paradigms.agents.bodies import Episode, Turn
from genrl_swarm.paradigms.marl.bodies import Trajectory

INPUT = Task.create("q").input(0)
ids = st.lists(st.integers(0, 2**31 - 1), max_size=40).map(tuple)


@st.composite
def samples(draw: Any) -> TokenSample:
    completion = draw(ids)
    logps = tuple(draw(st.lists(st.floats(-1e6, 0.0), min_size=len(completion), max_size=len(completion))))
    return TokenSample(completion, logps, draw(st.sampled_from(["stop", "length"])))


token_rollouts = st.builds(
    TokenRollout,
    task_id=st.just(INPUT.task_id),
    input_digest=st.just(INPUT.digest),
    prompt_ids=ids,
    samples=st.lists(samples(), min_size=1, max_size=4).map(tuple),
    policy_version=st.integers(0, 2**40),
    tokenizer=st.text(max_size=20),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(token_rollouts, max_size=4))
def test_token_rollouts_round_trip(bodies: list[TokenRollout]) -> None:
    codec = Codec()
    envelope = codec.decode(codec.encode("peer-a", 3, 1, bodies), TokenRollout)
    assert (envelope.version, envelope.sender, envelope.round, envelope.stage) == (FORMAT_VERSION, "peer-a", 3, 1)
    assert envelope.bodies == tuple(bodies)


def trajectory(steps: int = 5, agents: int = 3) -> Trajectory:
    rng = np.random.default_rng(0)
    return Trajectory(
        INPUT.task_id, INPUT.digest, steps,
        observations=Array.of(rng.normal(size=(steps, agents, 7)).astype(np.float32)),
        actions=Array.of(rng.integers(0, 5, size=(steps, agents)).astype(np.int32)),
        rewards=Array.of(rng.normal(size=(steps, agents)).astype(np.float32)),
        dones=Array.of(np.zeros((steps,), bool)),
        action_masks=Array.of(np.ones((steps, agents, 5), bool)),
        logprobs=Array.of(-rng.random((steps, agents)).astype(np.float32)),
    )  # fmt: skip


def test_trajectory_round_trips_arrays_exactly_and_checks_its_spec() -> None:
    sent = trajectory()
    got = Codec().decode(Codec().encode("a", 0, 0, [sent]), Trajectory).bodies[0]
    assert np.array_equal(got.observations.numpy(), sent.observations.numpy())
    assert got.actions.numpy().dtype == np.int32 and got.actions.numpy().shape == (5, 3)
    spec = {"observations": ArraySpec("float32", (3, 7)), "actions": ArraySpec("int32", (3,)), "rewards": ArraySpec("float32", (3,)),
            "dones": ArraySpec("bool"), "action_masks": ArraySpec("bool", (3, 5)), "logprobs": ArraySpec("float32", (3,))}  # fmt: skip
    assert got.violations(spec) is None
    assert got.violations({**spec, "actions": ArraySpec("int64", (3,))}) == "actions: int32[3] per step, expected int64[3]"
    assert got.violations({k: v for k, v in spec.items() if k != "logprobs"}) == "logprobs: not declared by this game"


def test_episode_loss_mask_covers_only_model_tokens() -> None:
    ep = Episode(INPUT.task_id, INPUT.digest, (
        Turn("user", (1, 2, 3)), Turn("assistant", (4, 5), (-0.5, -0.1)), Turn("tool", (6,)), Turn("assistant", (7,), (-1.0,)),
    ), "answer", 3, "tok")  # fmt: skip
    got = Codec().decode(Codec().encode("a", 0, 0, [ep]), Episode).bodies[0]
    assert got.token_ids == [1, 2, 3, 4, 5, 6, 7]
    assert got.loss_mask == [False, False, False, True, True, False, True]
    assert got.logprobs == [0.0, 0.0, 0.0, -0.5, -0.1, 0.0, -1.0]


def test_oversized_payload_refused_on_both_sides() -> None:
    small = Codec(max_bytes=200)
    big = [TokenRollout(INPUT.task_id, INPUT.digest, tuple(range(300)), (TokenSample((1,), (0.0,), "stop"),), 0, "t")]
    with pytest.raises(PayloadError, match="over the limit"):
        small.encode("p", 0, 0, big)
    with pytest.raises(PayloadError, match="over the limit"):
        small.decode(Codec().encode("p", 0, 0, big), TokenRollout)


def _raw(body_type: str = "tokens", **overrides: Any) -> bytes:
    sample = {"completion_ids": [5, 6], "logprobs": [-0.1, -0.2], "finish_reason": "stop"}
    body = {"type": body_type, "task_id": INPUT.task_id, "input_digest": INPUT.digest, "prompt_ids": [1, 2],
            "samples": [sample], "policy_version": 0, "tokenizer": "t"}  # fmt: skip
    envelope = {"version": FORMAT_VERSION, "sender": "a", "round": 1, "stage": 0, "bodies": [body]}
    for key, value in overrides.items():
        target, _, name = key.partition("__")
        {"s": sample, "b": body, "e": envelope}[target][name] = value
    return msgspec.msgpack.encode(envelope)


@pytest.mark.parametrize(
    "data, why",
    [
        (b"", "truncated"),
        (b"\xc1\xc1\xc1", "invalid"),
        (msgspec.msgpack.encode([1, 2, 3]), "Expected `object`"),
        (_raw(e__version=99), "format version 99"),
        (_raw(e__round=-1), r"Expected `int` >= 0"),
        (_raw(e__bodies=None), "Expected `array`"),
        (_raw(e__extra=1), "unknown field `extra`"),
        (_raw("trajectory"), "Invalid value 'trajectory'"),  # another game's body
        (_raw(b__samples=[]), "length >= 1"),
        (_raw(b__input_digest="../../etc"), "matching regex"),
        (_raw(b__prompt_ids=[-1]), ">= 0"),
        (_raw(b__prompt_ids=[2**40]), "<= 2147483647"),
        (_raw(s__logprobs=[-0.1]), "1 log-probs for 2 tokens"),
        (_raw(s__logprobs=[-0.1, 0.5]), "not a finite value <= 0"),
        (_raw(s__logprobs=[-0.1, float("nan")]), "not a finite value <= 0"),
        (_raw(s__finish_reason="eos"), "Invalid enum value 'eos'"),
        (_raw(s__completion_ids="xy"), "Expected `array`"),
    ],
)
def test_bad_payloads_raise_one_error_type(data: bytes, why: str) -> None:
    with pytest.raises(PayloadError, match=why):
        Codec().decode(data, TokenRollout)


def test_array_whose_bytes_do_not_match_dtype_and_shape_is_refused_before_use() -> None:
    good = msgspec.to_builtins(trajectory(), builtin_types=(bytes,))
    good["observations"]["shape"] = [5, 3, 7000]  # claims 420 KB, carries 420 bytes
    envelope = {"version": FORMAT_VERSION, "sender": "a", "round": 0, "stage": 0, "bodies": [good]}
    with pytest.raises(PayloadError, match=r"needs 420000 bytes, got 420"):
        Codec().decode(msgspec.msgpack.encode(envelope), Trajectory)


def test_trajectory_arrays_must_share_the_step_dimension() -> None:
    with pytest.raises(ValueError, match=r"trajectory.dones: first dimension \(4,\) is not steps=5"):
        msgspec.structs.replace(trajectory(), dones=Array.of(np.zeros(4, bool)))


def test_non_bytes_refused() -> None:
    with pytest.raises(PayloadError, match="not bytes"):
        Codec().decode("text")  # type: ignore[arg-type]
