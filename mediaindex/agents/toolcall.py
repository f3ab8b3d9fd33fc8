"""Hermes / Qwen3-style tool calls, parsed strictly.

The wire format (used by Qwen3, Kanana-2 and Hermes chat templates) is a JSON object inside tags:

    <tool_call>
    {"name": "search", "arguments": {"query": "budget"}}
    </tool_call>

and results go back to the model as a user turn holding `<tool_response>...</tool_response>`, which is how
those templates render a "tool" message. Anything that looks like a call but is not exactly this raises
`ToolCallError`; nothing is guessed or repaired.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from mediaindex.agents.tools import TOOL_SCHEMAS, ToolError, tool_specs, validate_arguments

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
# A bare JSON call outside the tags is an error, not a call: strict parsing never guesses.
_BARE = re.compile(r"\{\s*\"name\"\s*:\s*\"(" + "|".join(TOOL_SCHEMAS) + r")\"")
MAX_CALLS_PER_TURN = 3


class ToolCallError(ValueError):
    """A malformed tool call; the message is fed back to the model once."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]

    def key(self) -> str:
        return json.dumps([self.name, self.arguments], sort_keys=True)


@dataclass(frozen=True)
class ParsedReply:
    content: str  # the text outside tool calls (the answer, when there are no calls)
    calls: list[ToolCall]


def close_truncated(text: str, finish_reason: str | None) -> str:
    """Generation stops at the stop string `</tool_call>`, which the engine leaves out: put it back."""
    if finish_reason == "stop" and text.count(OPEN) > text.count(CLOSE):
        return text + CLOSE
    return text


def parse_reply(text: str) -> ParsedReply:
    text = _THINK.sub("", text)
    calls: list[ToolCall] = []
    for raw in _BLOCK.findall(text):
        calls.append(_parse_call(raw))
    outside = _BLOCK.sub("", text)
    if OPEN in outside or CLOSE in outside:
        raise ToolCallError(f"unbalanced {OPEN} / {CLOSE} tags")
    if _BARE.search(outside):
        raise ToolCallError(f"a tool call must be wrapped in {OPEN}...{CLOSE}")
    if len(calls) > MAX_CALLS_PER_TURN:
        raise ToolCallError(f"at most {MAX_CALLS_PER_TURN} tool calls per turn, got {len(calls)}")
    return ParsedReply(outside.strip(), calls)


def _parse_call(raw: str) -> ToolCall:
    try:
        obj = json.loads(raw.strip())
    except json.JSONDecodeError as exc:
        raise ToolCallError(f"tool call is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(obj, dict):
        raise ToolCallError("tool call must be a JSON object with \"name\" and \"arguments\"")
    extra = set(obj) - {"name", "arguments"}
    if extra:
        raise ToolCallError(f"unexpected keys in tool call: {sorted(extra)}")
    name = obj.get("name")
    if not isinstance(name, str):
        raise ToolCallError("tool call has no \"name\" string")
    if "arguments" not in obj:
        raise ToolCallError(f"tool call {name!r} has no \"arguments\" object")
    try:
        args = validate_arguments(name, obj["arguments"])
    except ToolError as exc:
        raise ToolCallError(str(exc)) from None
    return ToolCall(name, args)


def tools_system_prompt(instructions: str) -> str:
    """The Hermes / Qwen3 tool preamble, as those chat templates render `tools=` into the system turn."""
    specs = "\n".join(json.dumps(s, ensure_ascii=False) for s in tool_specs())
    return (
        f"{instructions}\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{specs}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def tool_response_message(payloads: list[str]) -> dict[str, str]:
    body = "\n".join(f"<tool_response>\n{p}\n</tool_response>" for p in payloads)
    return {"role": "user", "content": body}
