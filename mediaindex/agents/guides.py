"""Grammars for the agent's turns, for guided decoding in the serving engine (`llm.guided_decoding`).

Left free, a small model answers in prose without a tool call or a citation, so the loop never runs. Guided,
its first turn is exactly one `search` call (before a tool has returned anything, no video id or time is known
and nothing can be cited), and each later turn is another call, NOT FOUND, or a short answer that ends with
citations of moments the tools returned. Ids in later calls are limited to the videos the tools returned.
Which tool, which query, which moments and what the answer says remain the model's choice; the agent still
parses and checks everything that comes back.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from mediaindex.agents.tools import TOOL_SCHEMAS

MAX_QUERY_CHARS = 60  # a search query, not a paragraph: a small model otherwise runs on until its token limit
MIN_SENTENCE_CHARS = 10
MAX_CITATION_CHOICES = 24
MAX_CITATIONS = 3


def _call(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"name": {"const": name}, "arguments": parameters},
            "required": ["name", "arguments"], "additionalProperties": False}


def call_schema(video_ids: list[str] | None = None) -> dict[str, Any]:
    """One tool call, `{"name": ..., "arguments": ...}`, for any tool; `video_ids` limits the ids it may name
    (None: only `search` on its query, as in a first turn)."""
    if video_ids is None:
        query = {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS}
        return _call("search", {"type": "object", "properties": {"query": query}, "required": ["query"],
                                "additionalProperties": False})
    calls = []
    for name, spec in TOOL_SCHEMAS.items():
        params = copy.deepcopy(spec["parameters"])
        props = params["properties"]
        if "query" in props:
            props["query"]["maxLength"] = MAX_QUERY_CHARS
        if "video_id" in props:
            props["video_id"] = {"enum": list(video_ids)}
        calls.append(_call(name, params))
    return {"anyOf": calls}


def _literal(text: str) -> str:
    return json.dumps(text)  # an EBNF string literal: double quotes, backslash escapes


def _call_block(video_ids: list[str] | None) -> Any:  # -> xgrammar.Grammar
    import xgrammar as xgr

    return xgr.Grammar.concat(
        xgr.Grammar.from_ebnf(f"root ::= {_literal('<tool_call>' + chr(10))}"),
        xgr.Grammar.from_json_schema(json.dumps(call_schema(video_ids)), any_whitespace=False),
        xgr.Grammar.from_ebnf(f"root ::= {_literal(chr(10) + '</tool_call>')}"),
    )


def first_turn_grammar() -> str:
    """Exactly one `search` call in Hermes / Qwen3 tags."""
    return str(_call_block(None))


def later_turn_grammar(citations: list[str], video_ids: list[str], not_found: str, calls: bool = True,
                       not_found_allowed: bool = True) -> str:
    """Another tool call on `video_ids` (unless `calls` is False: the loop's last step), `not_found` (unless
    not allowed), or an answer ending in 1-3 of `citations` (`[n]`, the numbers of moments the tools returned,
    or `citations.cite` strings; most relevant first)."""
    import xgrammar as xgr

    choices = list(dict.fromkeys(citations))[:MAX_CITATION_CHOICES]
    alternatives = [xgr.Grammar.from_ebnf(f"root ::= {_literal(not_found)}")] if not_found_allowed or not choices else []
    if calls:
        # No video known yet (every search came back empty): another search on other words.
        alternatives.insert(0, _call_block(list(dict.fromkeys(video_ids)) or None))
    if choices:
        cite = " | ".join(_literal(c) for c in choices)
        alternatives.append(xgr.Grammar.from_ebnf(
            # One sentence, then the citations: a small model otherwise writes until its token limit and never
            # cites. No "[" or "<" in the words, so every citation is one of the choices and no tag is half-written;
            # no "{", so a call cannot be written as prose; no quotes, "(", ")" or ":", so the answer says it in
            # its own words: neither a quote cut at its first full stop nor the moments' labels ("(said in
            # file.mp4, video ID, 3.9-13.9 s)"). A "." followed by a letter or
            # digit is inside a number or an address ("39.9 s", "www.gutenberg.org"), not the sentence's end. At
            # least a few words: "Yes." is no answer to what was found. The sentence has no upper bound here (the
            # call's token limit is one): xgrammar masks a long bounded repetition slowly, a fixed count followed by
            # an open run fast.
            f"root ::= words [.!?] \" \" cites\nwords ::= char{{{MIN_SENTENCE_CHARS}}} char*\n"
            f"char ::= [^\\[<{{}}():\"\\n.!?] | \".\" [0-9A-Za-z]\n"
            f"cites ::= cite (\" \" cite){{0,{MAX_CITATIONS - 1}}}\ncite ::= {cite}"
        ))
    return str(xgr.Grammar.union(*alternatives))
