"""The codec: round trips of every value kind, and one clear error for every bad payload."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genrl_swarm.comm.codec import Codec, PayloadError
from genrl_swarm.core import FORMAT_VERSION, Rollout

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20)
rollouts = st.builds(
    Rollout,
    peer_id=st.just("peer-a"),
    round=st.just(3),
    stage=st.just(1),
    task_id=st.text(max_size=30),
    prompt=st.text(),
    completions=st.lists(st.text(), min_size=1, max_size=5).map(tuple),
    metadata=st.dictionaries(st.text(), values, max_size=5),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(rollouts, max_size=4))
def test_round_trip(body: list[Rollout]) -> None:
    codec = Codec()
    envelope = codec.decode(codec.encode("peer-a", 3, 1, body))
    assert (envelope.version, envelope.sender, envelope.round, envelope.stage) == (FORMAT_VERSION, "peer-a", 3, 1)
    assert envelope.body == tuple(body)


def test_nan_survives() -> None:
    codec = Codec()
    out = codec.decode(codec.encode("p", 0, 0, [Rollout("p", 0, 0, "t", "", ("x",), {"v": float("nan")})]))
    assert out.body[0].metadata["v"] != out.body[0].metadata["v"]


def test_int_beyond_msgpack_range_is_a_payload_error() -> None:
    with pytest.raises(PayloadError, match="cannot encode"):
        Codec().encode("p", 0, 0, [Rollout("p", 0, 0, "t", "", ("x",), {"big": 2**64})])


def test_oversized_payload_refused_on_both_sides() -> None:
    small = Codec(max_bytes=200)
    big = [Rollout("p", 0, 0, "t", "x" * 500, ("y",))]
    with pytest.raises(PayloadError, match="over the limit"):
        small.encode("p", 0, 0, big)
    with pytest.raises(PayloadError, match="over the limit"):
        small.decode(Codec().encode("p", 0, 0, big))


def _raw(**overrides: object) -> bytes:
    rollout = {"peer_id": "a", "round": 1, "stage": 0, "task_id": "t", "prompt": "p", "completions": ["x"]}
    envelope = {"version": FORMAT_VERSION, "sender": "a", "round": 1, "stage": 0, "body": [rollout]}
    for key, value in overrides.items():
        if key.startswith("r_"):
            rollout[key[2:]] = value
        else:
            envelope[key] = value
    return msgspec.msgpack.encode(envelope)


@pytest.mark.parametrize(
    "data, why",
    [
        (b"", "truncated"),
        (b"\xc1\xc1\xc1", "invalid"),
        (msgspec.msgpack.encode([1, 2, 3]), "Expected `object`"),
        (_raw(version=99), "format version 99"),
        (_raw(round=-1), "round and stage"),
        (_raw(sender="b"), "inside envelope of b"),  # a rollout claiming another peer
        (_raw(r_completions=[]), "at least one completion"),
        (_raw(r_completions="xy"), "Expected `array`"),
        (_raw(r_round="1"), "Expected `int`"),
        (_raw(body=None), "Expected `array`"),
    ],
)
def test_bad_payloads_raise_one_error_type(data: bytes, why: str) -> None:
    with pytest.raises(PayloadError, match=why):
        Codec().decode(data)


def test_non_bytes_refused() -> None:
    with pytest.raises(PayloadError, match="not bytes"):
        Codec().decode("text")  # type: ignore[arg-type]
