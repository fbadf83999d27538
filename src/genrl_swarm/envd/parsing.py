"""Model text -> one action: a tool call, a final answer, or a ToolError the model will see.

The format is the Hermes/Qwen one that Hugging Face chat templates render tools for:

    <tool_call>{"name": "calculate", "arguments": {"expression": "2 + 3"}}</tool_call>
    <answer>5</answer>

One action per turn. Anything else (no tag, broken JSON, two calls, a call and an answer) is a
``ToolError`` whose message says how to fix it: the policy sends it to ``step`` like any action,
so a malformed turn costs a turn and the model reads why. Text after the last ``</think>`` is
parsed (reasoning models think first). Parsing is linear in the text (``str.find``, one
``json.loads`` of a bounded block) and never raises on model output.
"""

from __future__ import annotations

import json
import re
from typing import Any

from genrl_swarm.envd.types import MAX_ARGUMENTS, MAX_TEXT, Action, Answer, ToolCall, ToolError

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
THINK_CLOSE = "</think>"
MAX_CALL_CHARS = 16 << 10
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
FORMAT_HINT = 'Call one tool as <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>, or give the final answer as <answer>...</answer>.'


def _blocks(text: str, opening: str, closing: str) -> list[str]:
    """The contents of each ``opening ... closing`` block; an unclosed last block runs to the end
    of the text (generation often stops on the closing tag, which is then not in the text)."""
    found, start = [], text.find(opening)
    while start >= 0:
        body_start = start + len(opening)
        end = text.find(closing, body_start)
        found.append(text[body_start:] if end < 0 else text[body_start:end])
        if end < 0:
            break
        start = text.find(opening, end + len(closing))
    return found


def _unfence(block: str) -> str:
    """Drop a Markdown code fence around JSON (```json ... ```), which small models add."""
    block = block.strip()
    if block.startswith("```") and block.endswith("```"):  # a lone ``` unfences to "", as invalid as itself
        block = block[3:-3]
        block = block[4:] if block.startswith("json") else block
    return block.strip()


def _arguments(raw: Any) -> dict[str, Any] | str:
    """The arguments object, or why it is not one (some models send it as a JSON string)."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError):
            return '"arguments" is a string that is not a JSON object'
    if not isinstance(raw, dict):
        return f'"arguments" must be a JSON object, got {type(raw).__name__}'
    if len(raw) > MAX_ARGUMENTS:
        return f'"arguments" has {len(raw)} keys (at most {MAX_ARGUMENTS})'
    return raw


def parse_tool_call(block: str) -> ToolCall | ToolError:
    """The JSON inside one ``<tool_call>`` block -> a ToolCall, or a ToolError saying what is wrong."""
    block = _unfence(block)
    if len(block) > MAX_CALL_CHARS:
        return ToolError(f"the tool call is {len(block)} characters long (at most {MAX_CALL_CHARS})")
    try:
        data = json.loads(block)
    except (ValueError, RecursionError) as e:
        return ToolError(f"the tool call is not valid JSON ({str(e)[:120]}). {FORMAT_HINT}")
    if not isinstance(data, dict):
        return ToolError(f'the tool call must be a JSON object with "name" and "arguments". {FORMAT_HINT}')
    name = data.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return ToolError(f'the tool call needs a "name" naming one of the tools. {FORMAT_HINT}')
    arguments = _arguments(data.get("arguments", data.get("parameters")))
    if isinstance(arguments, str):
        return ToolError(f"{arguments}. {FORMAT_HINT}")
    return ToolCall(name, arguments)


def parse_action(text: str) -> Action:
    """One turn of model text -> ToolCall | Answer | ToolError. Never raises."""
    if len(text) > MAX_TEXT:
        return ToolError(f"the turn is {len(text)} characters long (at most {MAX_TEXT})")
    cut = text.rfind(THINK_CLOSE)
    visible = text if cut < 0 else text[cut + len(THINK_CLOSE) :]
    calls = _blocks(visible, CALL_OPEN, CALL_CLOSE)
    answers = _blocks(visible, ANSWER_OPEN, ANSWER_CLOSE)
    if calls and answers:
        return ToolError(f"a turn either calls a tool or answers, not both. {FORMAT_HINT}")
    if len(calls) > 1:
        return ToolError(f"{len(calls)} tool calls in one turn; call one tool per turn and wait for its result.")
    if calls:
        return parse_tool_call(calls[0])
    if len(answers) > 1:
        return ToolError("more than one <answer> in a turn; give exactly one final answer.")
    if answers:
        return Answer(answers[0].strip())
    return ToolError(f"no tool call or answer found. {FORMAT_HINT}")
