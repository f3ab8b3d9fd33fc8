"""One agent tool loop over MCP, end to end: a language model behind the OpenAI-compatible endpoint answers
questions by calling the archive's MCP tools over streamable HTTP, both served by one `serve` app on loopback.

Per question: the model is offered the MCP tools `search` and `get_transcript` as functions, each with the few
arguments a small model fills sensibly (the tools' own schemas, narrowed: a client may offer a model less than a
server has); its first turn calls `search` (a named `tool_choice`, so the call matches the schema), later turns
may call a tool (`auto`) for at most `--steps` calls in all; each call goes to /mcp through the SDK's client and
its moments come back as compact lines (`[file @ start-end s] text`), followed by the question again and, when
nothing matched, the advice to say so (as the project's own agent tells its model); then the model answers
without tools. `--ask` also puts the questions to the MCP `ask` tool (the project's own agent).
Latency is wall time per question, split into the model's turns and the MCP tool calls.

    python benchmarks/mcp_loop.py                       # builds a sample index of ../shared/media in a temp folder
    python benchmarks/mcp_loop.py --index DIR --model smollm2 --ask
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2

REPO = Path(__file__).resolve().parents[1]
SAMPLES = ["audio/jfk.flac", "video/auto-editor_example.mp4"]
QUESTIONS = [
    "What does the speaker ask his fellow Americans to do?",
    "When does someone say banana, and in which file?",
    "Which team won the football world cup final?",  # not in the archive
]
NEXT = "Question: {question}\nAnswer it in one sentence with what these moments say, citing file and seconds."
NEXT_EMPTY = "Question: {question}\nNothing in the archive matched: say that the archive does not hold the answer."
OFFERED = {"search": ("query", "limit"), "get_transcript": ("file", "from_seconds", "to_seconds")}
SYSTEM = ("You answer questions about a media archive with its tools. Search first; then answer in one or two "
          "sentences using only what the tool results say, and cite the file and the seconds, like "
          "[jfk.flac @ 0.2-10.4 s]. If the results do not answer the question, say that the archive does not hold "
          "the answer.")


def build_index(index: Path, media: Path) -> None:
    """The sample files, indexed by `mediaindex ingest` (a small job: in its own process, without Ray)."""
    subprocess.run([sys.executable, "-m", "mediaindex", "ingest", *(str(media / s) for s in SAMPLES),
                    "--index", str(index)], check=True, cwd=REPO)


class Server:
    """The `serve` app (the HTTP API with /v1 and /mcp) on a free loopback port, in a thread of this process."""

    def __init__(self, index: Path, model: str) -> None:
        import socket

        import uvicorn

        from mediaindex.api import create_app
        from mediaindex.config import load_settings

        settings = load_settings("cpu", index_dir=index, llm={"model": model}, api={"rate_limit_per_minute": 0})
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)


async def loop(url: str, model: str, steps: int, max_tokens: int) -> list[dict[str, Any]]:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(30, read=1800)
    async with (httpx2.AsyncClient(timeout=timeout) as http,
                streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
                ClientSession(read, write) as session):
        await session.initialize()
        listed = {t.name: t for t in (await session.list_tools()).tools}
        functions = [{"type": "function", "function": {
            "name": name, "description": listed[name].description, "parameters": narrowed(listed[name].input_schema,
                                                                                       kept)}}
            for name, kept in OFFERED.items()]

        async def chat(messages: list[dict[str, Any]], choice: str | dict[str, Any]) -> dict[str, Any]:
            body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
            if choice != "none":
                body |= {"tools": functions, "tool_choice": choice}
            r = await http.post(f"{url}/v1/chat/completions", json=body)
            r.raise_for_status()
            return r.json()["choices"][0]["message"]

        results = []
        for question in QUESTIONS:
            began = time.perf_counter()
            model_s = tool_s = 0.0
            calls: list[str] = []
            found = False
            messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                              {"role": "user", "content": question}]
            for step in range(steps + 1):
                choice: str | dict[str, Any] = (
                    {"type": "function", "function": {"name": "search"}} if step == 0
                    else "auto" if step < steps else "none")
                t = time.perf_counter()
                reply = await chat(messages, choice)
                model_s += time.perf_counter() - t
                messages.append({"role": "assistant", "content": reply.get("content") or "",
                                 **({"tool_calls": reply["tool_calls"]} if reply.get("tool_calls") else {})})
                if not reply.get("tool_calls"):
                    break
                for call in reply["tool_calls"]:
                    name, arguments = call["function"]["name"], json.loads(call["function"]["arguments"])
                    calls.append(f"{name}({json.dumps(arguments, ensure_ascii=False)})")
                    t = time.perf_counter()
                    out = await session.call_tool(name, arguments)
                    tool_s += time.perf_counter() - t
                    text = (lines(out.structured_content or {}) if not out.is_error
                            else out.content[0].text)  # type: ignore[union-attr]
                    found |= not out.is_error and text.startswith("[")
                    messages.append({"role": "tool", "tool_call_id": call.get("id"), "content": text[:1500]})
                # The question again, next to where the model writes (a small model loses it behind the results),
                # and what to do when nothing matched (as the project's own agent tells its model).
                messages.append({"role": "user", "content": (NEXT if found else NEXT_EMPTY).format(question=question)})
            results.append({"question": question, "seconds": round(time.perf_counter() - began, 1),
                            "model_seconds": round(model_s, 1), "tool_seconds": round(tool_s, 2), "calls": calls,
                            "answer": messages[-1]["content"].strip()})
            print(json.dumps(results[-1], ensure_ascii=False), flush=True)
        return results


async def ask_tool(url: str) -> None:
    """The same questions through the MCP `ask` tool: the project's own agent (its tool loop inside the server)."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with (httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=1800)) as http,
                streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
                ClientSession(read, write) as session):
        await session.initialize()
        for question in QUESTIONS:
            began = time.perf_counter()
            out = await session.call_tool("ask", {"question": question})
            data = out.structured_content or {}
            print(json.dumps({"tool": "ask", "question": question, "seconds": round(time.perf_counter() - began, 1),
                              "status": data.get("status"), "answer": data.get("answer") or out.content[0].text,
                              "citations": [f"{c['file']} @ {c['start']:.1f}-{c['end']:.1f}"
                                            for c in data.get("citations", [])]}, ensure_ascii=False), flush=True)


def narrowed(schema: dict[str, Any], kept: tuple[str, ...]) -> dict[str, Any]:
    """The tool's input schema with only the `kept` arguments."""
    return {**schema, "properties": {k: v for k, v in schema["properties"].items() if k in kept},
            "required": [k for k in schema.get("required", []) if k in kept]}


def lines(result: dict[str, Any]) -> str:
    """A tool's result as a small model reads it best: one line per moment or spoken line."""
    if "moments" in result:
        found = [f"[{m['file']} @ {m['start']:.1f}-{m['end']:.1f} s] {m['text']}" for m in result["moments"]]
        return "\n".join(found) or "nothing in the archive matches"
    said = [f"[{result['file']} @ {x['start']:.1f}-{x['end']:.1f} s] {x['text']}" for x in result.get("lines") or []]
    return "\n".join(said) or "no speech in this range"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, help="an index of the sample files (default: built in a temp folder)")
    parser.add_argument("--media", type=Path, default=REPO.parent / "shared" / "media")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="llm.model behind /v1 (default: the CPU "
                                                                       "profile's)")
    parser.add_argument("--steps", type=int, default=1, help="tool calls at most, before the answer")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--ask", action="store_true", help="also ask each question through the MCP `ask` tool (the "
                                                          "project's agent; its model starts in a Ray actor)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        index = args.index or Path(tmp) / "index"
        if args.index is None:
            build_index(index, args.media)
        with Server(index, args.model) as server:
            began = time.perf_counter()
            # The first request builds the engine (loads the model): timed apart from the questions.
            anyio.run(_warm, server.url, args.model)
            print(json.dumps({"model_load_seconds": round(time.perf_counter() - began, 1)}), flush=True)
            anyio.run(loop, server.url, args.model, args.steps, args.max_tokens)
            if args.ask:
                anyio.run(ask_tool, server.url)


async def _warm(url: str, model: str) -> None:
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=1800)) as http:
        r = await http.post(f"{url}/v1/chat/completions",
                            json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
        r.raise_for_status()


if __name__ == "__main__":
    main()
