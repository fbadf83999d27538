"""The agents paradigm's bodies: a multi-turn, tool-using episode as token ids per turn.

Only ``assistant`` turns were sampled by the policy: they carry log-probs and are the only
tokens a learner trains on. The static ceilings and field types are core's (``core.bodies``),
so the codec bounds an episode as it bounds any body.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from genrl_swarm.core.bodies import MAX_TOKENS, MAX_TURNS, MIN_COPY_UNITS, Body, LogProbs, TokenIds, Version, check_logprobs


class Turn(msgspec.Struct, frozen=True, gc=False, forbid_unknown_fields=True):
    """One message of an episode. Only ``assistant`` tokens were sampled by the policy: they
    carry log-probs and are the only ones a learner trains on (the loss mask)."""

    role: Literal["system", "user", "assistant", "tool"]
    token_ids: TokenIds
    logprobs: LogProbs = ()

    def __post_init__(self) -> None:
        if self.role == "assistant":
            check_logprobs(self.logprobs, self.token_ids, "assistant turn")
        elif self.logprobs:
            raise ValueError(f"a {self.role} turn was not sampled and has no log-probs")


class Episode(Body, frozen=True, tag="episode"):
    """A multi-turn, tool-using episode as token ids per turn."""

    turns: Annotated[tuple[Turn, ...], msgspec.Meta(min_length=1, max_length=MAX_TURNS)]
    finish_reason: Literal["answer", "turn_limit", "token_limit", "error"]
    policy_version: Version
    tokenizer: Annotated[str, msgspec.Meta(max_length=64)]

    def __post_init__(self) -> None:
        if sum(len(t.token_ids) for t in self.turns) > MAX_TOKENS * 4:
            raise ValueError("episode is longer than the token ceiling")

    @property
    def units(self) -> int:
        return sum(len(t.token_ids) for t in self.turns)

    def content_key(self) -> bytes | None:
        sampled = [t.token_ids for t in self.turns if t.role == "assistant"]
        return msgspec.msgpack.encode(sampled) if sum(map(len, sampled)) >= MIN_COPY_UNITS else None

    @property
    def token_ids(self) -> list[int]:
        return [i for t in self.turns for i in t.token_ids]

    @property
    def loss_mask(self) -> list[bool]:
        """True for tokens the model produced (trained on), False for prompt and tool tokens."""
        return [t.role == "assistant" for t in self.turns for _ in t.token_ids]

    @property
    def logprobs(self) -> list[float]:
        """Behaviour log-probs aligned with ``token_ids`` (0.0 where the mask is False)."""
        return [lp for t in self.turns for lp in (t.logprobs if t.role == "assistant" else (0.0,) * len(t.token_ids))]
