"""Tool-call parsing and argument checks: good calls parse, every malformed one is a ToolError
with a message for the model, and nothing raises."""

from __future__ import annotations

import pytest

from genrl_swarm.envd import Answer, ToolCall, ToolError, parse_action
from genrl_swarm.envd.schema import Param, Tool
from genrl_swarm.envd.types import MAX_TEXT


@pytest.mark.parametrize(
    "text, expected",
    [
        ('<tool_call>{"name": "calculate", "arguments": {"expression": "2 + 3"}}</tool_call>', ToolCall("calculate", {"expression": "2 + 3"})),
        ('Let me compute.\n<tool_call>\n{"name": "get", "arguments": {"key": "a"}}\n</tool_call>', ToolCall("get", {"key": "a"})),
        ('<tool_call>{"name": "get", "arguments": "{\\"key\\": \\"a\\"}"}</tool_call>', ToolCall("get", {"key": "a"})),  # stringified
        ('<tool_call>{"name": "get", "parameters": {"key": "a"}}</tool_call>', ToolCall("get", {"key": "a"})),  # Llama style
        ('<tool_call>```json\n{"name": "list_keys"}\n```</tool_call>', ToolCall("list_keys", {})),  # fenced, no arguments
        ('<tool_call>{"name": "get", "arguments": {"key": "a"}}', ToolCall("get", {"key": "a"})),  # stopped on the closing tag
        ("<think>maybe <answer>3</answer>?</think> <answer>42</answer>", Answer("42")),  # reasoning is skipped
        ("The result is <answer> 1,234 </answer>.", Answer("1,234")),
        ("<answer>done", Answer("done")),
    ],
)
def test_good_turns_parse(text: str, expected: object) -> None:
    assert parse_action(text) == expected


@pytest.mark.parametrize(
    "text, says",
    [
        ("I think the answer is 5.", "no tool call or answer"),
        ("<tool_call>{name: calculate}</tool_call>", "not valid JSON"),
        ('<tool_call>["calculate", {}]</tool_call>', "JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', '"name"'),
        ('<tool_call>{"name": "rm -rf /", "arguments": {}}</tool_call>', '"name"'),
        ('<tool_call>{"name": "get", "arguments": [1, 2]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "get", "arguments": "key=a"}</tool_call>', "not a JSON object"),
        ('<tool_call>{"name": "a"}</tool_call><tool_call>{"name": "b"}</tool_call>', "2 tool calls"),
        ('<tool_call>{"name": "a"}</tool_call><answer>1</answer>', "not both"),
        ("<answer>1</answer><answer>2</answer>", "more than one"),
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", "characters long"),  # over the call cap
        ("<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>", "JSON"),  # deep nesting: RecursionError is caught
        ("x" * (MAX_TEXT + 1), "characters long"),
    ],
)
def test_malformed_turns_become_tool_errors(text: str, says: str) -> None:
    action = parse_action(text)
    assert isinstance(action, ToolError), action
    assert says in action.message


def test_tool_call_renders_for_chat_templates() -> None:
    call = ToolCall("get", {"key": "a"}, id="call_1")
    assert call.to_chat() == {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": {"key": "a"}}}


TOOL = Tool(
    "t",
    "a tool",
    {"n": Param("integer", "n", minimum=0, maximum=9), "s": Param("string", "s", max_length=3, enum=("a", "bb")), "f": Param("boolean", "f")},
    optional=frozenset({"f"}),
)


@pytest.mark.parametrize(
    "arguments, says",
    [
        ({"n": 1, "s": "a"}, None),
        ({"n": 1, "s": "bb", "f": True}, None),
        ({"s": "a"}, "needs the argument 'n'"),
        ({"n": 1, "s": "a", "x": 0}, "no argument 'x'"),
        ({"n": "1", "s": "a"}, "must be a integer"),
        ({"n": True, "s": "a"}, "must be a integer"),  # bool is an int in Python, not in JSON Schema
        ({"n": 10, "s": "a"}, "<= 9"),
        ({"n": 1, "s": "cccc"}, "at most 3"),
        ({"n": 1, "s": "c"}, "one of"),
        ({"n": 1, "s": "a", "f": 1}, "must be a boolean"),
    ],
)
def test_arguments_are_checked_against_the_schema(arguments: dict[str, object], says: str | None) -> None:
    problem = TOOL.problem(arguments)
    assert problem is None if says is None else says in (problem or "")


def test_declaration_is_the_openai_tools_format() -> None:
    declared = TOOL.declaration()
    assert declared["type"] == "function" and declared["function"]["name"] == "t"
    assert declared["function"]["parameters"]["required"] == ["n", "s"]
    assert declared["function"]["parameters"]["properties"]["s"] == {"type": "string", "description": "s", "maxLength": 3, "enum": ["a", "bb"]}
