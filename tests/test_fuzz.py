"""Fuzzing what an honest peer does with a stranger's bytes (hypothesis; bounded for `make test`).

For the bandit, multistage math with text bodies and multistage math with the tiny LM, one
stranger sends a commitment and a payload: an honest payload mutated byte by byte or node by
node, bodies generated with hostile values (parser-crafted text, extreme numbers, wrong digests,
duplicate tasks), or a broken commitment. It goes through the real receiving path (the arenas
of benchmarks/bench_fuzz.py: exchange, budgets, record with the game's check and texts, later
stages' inputs, scoring). Properties: nothing escapes (bad payloads are dropped inside the
exchange, game code failing on a body drops that body), every body the stranger sent is kept
or counted in ``state.drops``, and honest peers lose nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from bench_fuzz import (  # noqa: E402
    ARENAS,
    BOMBS,
    EXTREMES,
    HONEST,
    ME,
    PARSER_PIECES,
    STRANGER,
    Arena,
    Case,
    commitment,
    envelope,
    structure_mutation,
)  # fmt: skip

from genrl_swarm.core.identity import Identity  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]  # hypothesis over every body type
# No per-example deadline: on a loaded CPU one example may take seconds; a hang is still caught by
# pytest-timeout (300 s a test, pyproject.toml).
FUZZ = settings(max_examples=220, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
_built: dict[str, Arena] = {}


def arena(kind: str) -> Arena:
    if kind not in _built:
        _built[kind] = ARENAS[kind]()
    return _built[kind]


# --------------------------------------------------------------------------- strategies
parser_text = st.one_of(
    st.lists(st.sampled_from(PARSER_PIECES), max_size=400).map("".join),
    st.text(max_size=300),
    st.builds(lambda p, n: p * n, st.sampled_from(PARSER_PIECES), st.integers(1, 4000)),
)
numbers = st.one_of(st.sampled_from(EXTREMES), st.integers(-(1 << 63), (1 << 64) - 1), st.floats())
leaves = st.one_of(st.none(), st.booleans(), numbers, parser_text, st.binary(max_size=64))
trees = st.recursive(leaves, lambda kids: st.lists(kids, max_size=6) | st.dictionaries(st.text(max_size=12), kids, max_size=6), max_leaves=24)


def logprobs_for(ids: list[Any]) -> st.SearchStrategy[list[float]]:
    """Mostly one valid log-prob per item (so bodies reach game code), sometimes anything."""
    return st.one_of(st.lists(st.floats(max_value=0.0, allow_nan=False), min_size=len(ids), max_size=len(ids)), st.lists(st.floats(), max_size=8))


def body_fields(kind: str, a: Arena) -> st.SearchStrategy[dict[str, Any]]:
    if kind == "bandit":
        arms = st.lists(st.integers(-1, (1 << 16) + 1) | st.sampled_from([0, 7, 8]), min_size=0, max_size=260)
        return arms.flatmap(
            lambda x: st.fixed_dictionaries({"type": st.just("arms"), "arms": st.just(x), "logprobs": logprobs_for(x), "policy_version": numbers})
        )
    if kind == "text":
        return st.fixed_dictionaries({"type": st.just("echo"), "outputs": st.lists(parser_text, max_size=6)})
    policy: Any = a.policy
    encoded = parser_text.map(lambda t: list(policy.tokenizer(t[:3000], add_special_tokens=False)["input_ids"])[:520])
    ids = st.one_of(encoded, st.lists(st.integers(0, policy.vocab_size + 2), max_size=40), st.lists(st.integers(-1, (1 << 31)), max_size=4))
    sample = ids.flatmap(
        lambda x: st.fixed_dictionaries(
            {"completion_ids": st.just(x), "logprobs": logprobs_for(x), "finish_reason": st.sampled_from(["stop", "length", "oops"])}
        )
    )
    return st.fixed_dictionaries({
        "type": st.just("tokens"), "samples": st.lists(sample, max_size=6), "policy_version": numbers,
        "tokenizer": st.sampled_from([policy.fingerprint, "someone else's"]),
    })  # fmt: skip


def bodies(kind: str, a: Arena, inputs: list[Any]) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Bodies naming this round's tasks and digests (or others), with hostile fields."""
    own = {i.task_id: a.own([i], 0)[0] for i in inputs}

    def body(fields: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        task = st.sampled_from(sorted(own)) | st.text(max_size=130)
        return st.fixed_dictionaries({"task_id": task, "input_digest": st.sampled_from([i.digest for i in inputs]) | st.text(max_size=30)}).map(
            lambda head: _with_prompt(kind, own, head | fields)
        )

    return st.lists(body_fields(kind, a).flatmap(body), max_size=6)


def _with_prompt(kind: str, own: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """Token bodies carry this peer's own prompt ids (what a stranger can compute), so they get
    past the prompt check into texts and scoring."""
    if kind == "tokens":
        mine = own.get(body["task_id"]) or next(iter(own.values()))
        body["prompt_ids"] = list(mine.prompt_ids)
    return body


def byte_mutations(payload: bytes) -> st.SearchStrategy[bytes]:
    edit = st.tuples(st.sampled_from(["flip", "set", "cut", "insert"]), st.integers(0, 1 << 16), st.integers(0, 255), st.sampled_from(BOMBS))

    def apply(edits: list[tuple[str, int, int, bytes]]) -> bytes:
        data = bytearray(payload)
        for op, i, value, bomb in edits:
            i %= max(len(data), 1)
            if op == "flip" and data:
                data[i] ^= 1 << (value % 8)
            elif op == "set" and data:
                data[i] = value
            elif op == "cut":
                del data[i:]
            else:
                data[i:i] = bomb if value % 2 else bytes([value])
        return bytes(data)

    return st.lists(edit, min_size=1, max_size=6).map(apply)


def tree_mutation(payload: bytes) -> st.SearchStrategy[bytes]:
    """Replace one node of the honest payload's msgpack tree with a generated value."""

    def apply(args: tuple[int, Any]) -> bytes:
        tree = msgspec.msgpack.decode(payload)
        nodes = _paths(tree)
        path = nodes[args[0] % len(nodes)]
        node = tree
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = args[1]
        return msgspec.msgpack.encode(tree)

    return st.tuples(st.integers(0, 10_000), trees).map(apply)


def _paths(tree: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path] if path else []
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in list(items)[:16]:
        out += _paths(value, (*path, key))
    return out


def case(data: st.DataObject, kind: str, a: Arena) -> tuple[Case, Any, list[Any]]:
    stage = data.draw(st.integers(0, a.stages - 1), label="stage")
    state, inputs = a.history(stage)
    r = state.round
    honest = envelope(r, stage, a.own(inputs, 2))
    how = data.draw(st.sampled_from(["bytes", "tree", "structure", "bodies", "commit"]), label="how")
    if how == "commit":
        op = data.draw(st.sampled_from(["digest", "size", "forged", "replay", "bytes", "none"]), label="commit")
        signed = {
            "digest": lambda: commitment(r, stage, honest, digest=bytes(32)),
            "size": lambda: commitment(r, stage, honest, size=data.draw(st.integers(0, (1 << 64) - 1))),
            "forged": lambda: commitment(r, stage, honest, sign=Identity.generate()),
            "replay": lambda: commitment(r - 1, stage, honest),
            "bytes": lambda: data.draw(byte_mutations(commitment(r, stage, honest))),
            "none": lambda: commitment(r, stage, honest),
        }[op]()
        return Case(f"commit-{op}", stage, signed, None if op == "none" else honest, wait=0.01), state, inputs
    if how == "bytes":
        payload = data.draw(byte_mutations(honest), label="payload")
    elif how == "tree":
        payload = data.draw(tree_mutation(honest), label="payload")
    elif how == "structure":
        import random

        payload = structure_mutation(random.Random(data.draw(st.integers(0, 1 << 32))), honest)[1]
    else:
        payload = envelope(r, stage, data.draw(bodies(kind, a, inputs), label="bodies"))
    return Case(how, stage, commitment(r, stage, payload), payload), state, inputs


# --------------------------------------------------------------------------- the property
def check_received(kind: str, a: Arena, data: st.DataObject) -> None:
    c, state, inputs = case(data, kind, a)
    result, rewards = a.receive(state, c.stage, inputs, c)  # must not raise
    sender = STRANGER.peer_id
    drops = [d for d in state.drops if d.peer_id == sender]
    assert not [d for d in state.drops if d.peer_id in (ME, HONEST)], state.drops
    assert {s.rollout.peer_id for s in rewards.scored} >= {ME, HONEST}
    sent = result.received.get(sender)
    if sent is None:  # refused by the transport (commitment, reveal or decode), with its reason
        assert sender in result.dropped
        return
    if any(d.task_id is None for d in drops):  # dropped whole: budget, CPU, or its bodies broke stage inputs
        return
    kept = state.select(stage=c.stage, peer=sender)
    refused = [d for d in drops if d.stage == c.stage and d.kind != "scoring"]
    assert len(kept) + len(refused) == len(sent), (len(kept), refused[:3], len(sent))
    scored = {id(s.rollout) for s in rewards.scored}
    failed = {(d.stage, d.task_id) for d in drops if d.kind in ("scoring", "cpu")}
    assert all(id(r) in scored or (r.stage, r.task_id) in failed for r in kept)  # scored, or its failure counted


@pytest.mark.parametrize("kind", ["bandit", "text", "tokens"])
def test_a_strangers_payload_never_escapes_and_every_body_is_accounted_for(kind: str) -> None:
    built = arena(kind)  # outside the examples' deadline (loading the model takes seconds)

    @FUZZ
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        check_received(kind, built, data)

    fuzz()


@pytest.mark.parametrize("kind", ["bandit", "text", "tokens", "episode", "trajectory"])
def test_honest_payloads_are_all_kept(kind: str) -> None:
    """The harness itself: an unmutated payload is kept and scored (else the fuzz proves nothing)."""
    a = arena(kind)
    for stage in range(a.stages):
        state, inputs = a.history(stage)
        payload = envelope(state.round, stage, a.own(inputs, 2))
        result, rewards = a.receive(state, stage, inputs, Case("honest", stage, commitment(state.round, stage, payload), payload))
        assert not state.drops and len(state.select(stage=stage, peer=STRANGER.peer_id)) == len(inputs)
        assert STRANGER.peer_id in {s.rollout.peer_id for s in rewards.scored}
