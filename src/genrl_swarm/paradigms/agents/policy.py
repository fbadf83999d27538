"""AgentPolicy: a language model that plays multi-turn, tool-calling episodes.

Each stage input names an episode (task kind, seed, turn and token limits, see
``episodes.task_spec``). The policy starts a session per input on the environment, then plays
all live episodes turn by turn: one batched generation per turn over every session still
running (per generating policy, when cross-policy sampling is on), each reply parsed and
stepped, each answer appended with the chat template. The body is an ``Episode``: token ids
per turn, behaviour log-probs on the model's turns only, so its loss mask is exactly the
tokens the model produced (``Episode.loss_mask``).

Everything about the model (loading, tokenizer fingerprint, sampler, weights, checkpoints) is
``LMPolicy``'s; ``sampling.max_new_tokens`` is the cap of one turn and
``sampling.num_generations`` is unused (a group is several copies of a task, see the game).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from genrl_swarm.core import Body, Refusal, RunInterrupted, StageInput
from genrl_swarm.envd.api import EnvClient
from genrl_swarm.paradigms.agents.bodies import Episode
from genrl_swarm.paradigms.agents.chat import ChatRenderer
from genrl_swarm.paradigms.agents.cross_policy import OWN, CrossPolicy, CrossPolicyConfig
from genrl_swarm.paradigms.agents.episodes import Session, prefills, task_spec
from genrl_swarm.paradigms.agents.shared_env import shared_env
from genrl_swarm.paradigms.lm.models import SMOLLM2, LoraSettings, check_model
from genrl_swarm.paradigms.lm.policy import LMPolicy, SamplingConfig


@dataclass(frozen=True)
class Played:
    """An episode as this peer played it: the body, and what stays local (the environment's
    reward and which policy generated each model turn)."""

    episode: Episode
    reward: float
    sources: tuple[str, ...]


class AgentPolicy(LMPolicy):
    body_type = Episode

    def __init__(
        self,
        model: str = SMOLLM2,
        sampling: SamplingConfig | Mapping[str, Any] | None = None,
        lora: LoraSettings | Mapping[str, Any] | None = None,
        device: str = "auto",
        dtype: str = "auto",
        seed: int = 0,
        env: str | EnvClient = "local",
        cross_policy: CrossPolicyConfig | Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(model, sampling, lora, "", device, dtype, seed)  # the environment sends the system prompt
        self.renderer = ChatRenderer(self.tokenizer)
        self.env = shared_env(env) if isinstance(env, str) else env
        config = cross_policy if isinstance(cross_policy, CrossPolicyConfig) else CrossPolicyConfig(**(cross_policy or {}))
        self.cross = CrossPolicy.build(self, config, seed, device=str(self.device), dtype=dtype)
        self._prompts: dict[str, tuple[int, ...]] = {}  # input digest -> the prompt ids this peer built

    @classmethod
    def preflight(cls, arguments: Mapping[str, Any], peers_here: int = 1) -> None:
        """The model, and the other policies' models when cross-policy sampling is on."""
        super().preflight(arguments, peers_here)
        cross = arguments.get("cross_policy") or {}
        for other in cross.get("models", ()) if cross.get("enabled") else ():
            check_model(str(other))

    # ------------------------------------------------------------------ acting
    def act(self, inputs: Sequence[StageInput], stage: int, greedy: bool = False) -> list[Body]:
        return [p.episode for p in self.play(inputs, greedy)]

    def play(self, inputs: Sequence[StageInput], greedy: bool = False) -> list[Played]:
        """One episode per input, all sessions advanced together turn by turn."""
        sessions = [Session.start(self.env, task_spec(i.context), self.renderer, prefills(i.context)) for i in inputs]
        try:
            for s in sessions:
                s.check_room(self.sampling.max_new_tokens)
            while live := [s for s in sessions if not s.done]:
                self._turn(live, greedy)
        except RunInterrupted:
            self._stop.clear()
            raise
        finally:
            for s in sessions:
                s.stop()
        played = []
        for inp, s in zip(inputs, sessions):
            self._remember(inp.digest, s.conversation.turns[0].token_ids)
            played.append(Played(s.episode(inp.task_id, inp.digest, self.version, self.fingerprint), s.reward, tuple(s.sources)))
        return played

    def _turn(self, live: Sequence[Session], greedy: bool) -> None:
        """One turn of every live session: generate (batched), cut to each episode's token
        budget (a prefix of a sample is a sample, with the same log-probs), step."""
        if self._stop.is_set():
            raise RunInterrupted("interrupted while acting")
        for s, t in zip(live, self.cross.generate([s.conversation.ids for s in live], greedy)):
            s.turn(t.ids[: s.budget], t.logprobs[: s.budget], t.source, tolerant=True)

    def interrupt(self) -> None:
        super().interrupt()
        self.cross.interrupt()

    def _remember(self, digest: str, ids: tuple[int, ...]) -> None:
        if len(self._prompts) > 4096:
            self._prompts.clear()
        self._prompts[digest] = ids

    # ------------------------------------------------------------------ receiving
    def texts(self, body: Body) -> tuple[str, ...]:
        """The model's turns of an episode, decoded with this peer's tokenizer."""
        if not isinstance(body, Episode):
            return ()
        return ("\n".join(self.renderer.reply_text(t.token_ids) for t in body.turns if t.role == "assistant"),)

    def check(self, body: Body, input: StageInput) -> str | Refusal | None:
        """Why a peer's episode cannot be used here (the replay in the reward manager checks the
        environment's turns against this peer's environment), or None."""
        if not isinstance(body, Episode):
            return f"a {type(body).__name__} body, this policy takes Episode"
        if body.tokenizer != self.fingerprint:  # this peer's model: a local verdict (see LMPolicy.check)
            return Refusal(f"tokenizer fingerprint {body.tokenizer} differs from this peer's {self.fingerprint}", local=True)
        spec = task_spec(input.context)
        roles = [t.role for t in body.turns]
        if roles[0] != "user" or any(r != ("tool" if k % 2 else "assistant") for k, r in enumerate(roles[1:])):
            return "turns are not a prompt followed by alternating model and tool turns"
        own = self._prompts.get(input.digest)
        if own is not None and body.turns[0].token_ids != own:
            return Refusal(f"the prompt turn differs from the {len(own)} ids this peer built for task {input.task_id}", local=True)
        model_turns = [t for t in body.turns if t.role == "assistant"]
        if spec.max_turns and len(model_turns) > spec.max_turns:
            return f"{len(model_turns)} model turns, more than the task's {spec.max_turns}"
        if any(not t.token_ids for t in model_turns):
            return "an empty model turn"
        if any(len(t.token_ids) > self.sampling.max_new_tokens for t in model_turns):
            return Refusal(f"a model turn is longer than this peer's max_new_tokens {self.sampling.max_new_tokens}", local=True)
        top = max(max(t.token_ids, default=0) for t in body.turns)
        if top >= self.vocab_size:
            return Refusal(f"token id {top} is outside this peer's vocabulary of {self.vocab_size}", local=True)
        return None


__all__ = ["OWN", "AgentPolicy", "Played"]
