"""Episode token ids from a chat template, built turn by turn so the model's ids are never re-tokenized.

Why incremental: re-rendering and re-tokenizing the whole conversation each turn can split the
model's own text into other ids than it sampled (BPE merges across the boundary), and then the
learner would train on tokens the model never produced. Here the model's ids are appended
exactly; only what the environment adds (a tool result, an error, the next generation prompt)
is rendered by the tokenizer's chat template and tokenized, as the *difference* between two
renderings of the conversation.

Pre-filled scaffolds (``prefills``: a text per model turn, e.g. the opening of a tool call)
are context, not model tokens: their ids end the turn before the model's (the prompt or the
tool turn), so the loss mask leaves them out, the model's sampled ids are conditioned on them,
and the text the environment parses is the scaffold followed by the model's reply. A receiver
given the same scaffold (it is public, in the task) rebuilds the same ids.

Templates that ignore ``tools=`` (SmolLM2's, the tiny test model's) would hide the tools from
the model, so their declarations are then written into the system message instead.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from genrl_swarm.envd.types import Message
from genrl_swarm.paradigms.agents.bodies import Turn


def _chat(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.to_chat() for m in messages]


class ChatRenderer:
    """Renders a task's messages into ids with one tokenizer's chat template."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.special = {int(i) for i in getattr(tokenizer, "all_special_ids", ())}
        probe = [{"role": "user", "content": "x"}]
        tool = {"type": "function", "function": {"name": "probe", "description": "d", "parameters": {"type": "object", "properties": {}}}}
        self.native_tools = True
        self.native_tools = self.render(probe, [tool], False) != self.render(probe, [], False)

    def render(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], generation: bool) -> str:
        if not getattr(self.tokenizer, "chat_template", None):  # a base model: plain role-tagged text
            text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
            return text + ("assistant: " if generation else "")
        kwargs = {"tools": list(tools)} if tools and self.native_tools else {}
        return str(self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation, **kwargs))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def reply_text(self, ids: Sequence[int]) -> str:
        """The model's text of a turn, without the special token it stopped on."""
        body = ids[:-1] if ids and ids[-1] in self.special else ids
        return str(self.tokenizer.decode(list(body), skip_special_tokens=False))

    def start(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]], prefills: Sequence[str] = ()) -> Conversation:
        """The first prompt of an episode (its ids and the history to extend); ``prefills[k]``
        is written ahead of the model's k-th turn."""
        history = _chat(messages)
        if tools and not self.native_tools:
            listing = "\n".join(json.dumps(t["function"], sort_keys=True) for t in tools)
            note = f"\n\nYou can call these tools:\n{listing}"
            if history and history[0]["role"] == "system":
                history[0] = {**history[0], "content": history[0]["content"] + note}
            else:
                history.insert(0, {"role": "system", "content": note.strip()})
        prompt = self.render(history, tools, True)
        ids = self.encode(prompt)
        conv = Conversation(self, tuple(tools), history, prompt, list(ids), [Turn("user", tuple(ids))], tuple(prefills))
        conv.scaffold()
        return conv


@dataclass
class Conversation:
    """One episode so far: the chat history, the text of the prompt the model last answered,
    every id in order (``ids``, what the next turn is generated from) and the same ids as
    turns. The first turn (role ``user``) is the whole rendered prompt, system message
    included; ``tool`` turns are everything the environment added, whatever its message role."""

    renderer: ChatRenderer
    tools: tuple[dict[str, Any], ...]
    history: list[dict[str, Any]]
    prompt: str
    ids: list[int]
    turns: list[Turn]
    prefills: tuple[str, ...] = ()
    last_reply: list[int] = field(default_factory=list)
    model_turns: int = 0
    pending: str = ""  # the scaffold written ahead of the model's next turn

    def scaffold(self) -> None:
        """Append the next model turn's scaffold, if any, to the last (environment) turn."""
        text = self.prefills[self.model_turns] if self.model_turns < len(self.prefills) else ""
        if not text:
            return
        ids = self.renderer.encode(text)
        last = self.turns[-1]
        self.turns[-1] = Turn(last.role, last.token_ids + tuple(ids))
        self.ids.extend(ids)
        self.pending = text

    def reply(self, ids: Sequence[int], logprobs: Sequence[float]) -> str:
        """Record the model's turn (ids exactly as sampled, behaviour log-probs); returns its
        text after the scaffold it continued, which the environment parses."""
        text = self.pending + self.renderer.reply_text(ids)
        self.pending, self.model_turns = "", self.model_turns + 1
        self.history.append({"role": "assistant", "content": text})
        self.last_reply = list(ids)
        self.turns.append(Turn("assistant", tuple(ids), tuple(logprobs)))
        self.ids.extend(ids)
        return text

    def respond(self, messages: Sequence[Message]) -> list[int]:
        """Record what the environment's ``messages`` add after the model's last turn, through
        the next generation prompt: the template's end of the assistant turn (minus the stop
        token the model already emitted), the messages, the opening of the next assistant turn."""
        ids = self._respond(messages)
        self.turns.append(Turn("tool", tuple(ids)))
        self.ids.extend(ids)
        self.scaffold()
        return ids

    def _respond(self, messages: Sequence[Message]) -> list[int]:
        r, ids = self.renderer, self.last_reply
        answered = r.render(self.history, self.tools, False)
        content = self.history[-1]["content"]
        if answered.startswith(self.prompt + content):
            closing = answered[len(self.prompt) + len(content) :]
        else:  # a template that rewrites replies: close the turn the simplest way
            closing = "\n"
        stop = r.tokenizer.decode([ids[-1]], skip_special_tokens=False) if ids and ids[-1] in r.special else ""
        if stop and closing.startswith(stop):
            closing = closing[len(stop) :]
        self.history.extend(_chat(messages))
        self.prompt = r.render(self.history, self.tools, True)
        tail = self.prompt[len(answered) :] if self.prompt.startswith(answered) else r.render(_chat(messages), (), True)
        return r.encode(closing + tail)
