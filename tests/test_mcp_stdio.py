"""`mediaindex mcp` over stdio, run as a desktop assistant runs it: a separate process, driven by the SDK's
`stdio_client` and `ClientSession`; and `mediaindex serve`'s /mcp, as a process too."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import MEDIA, REPO, cli_environment, make_settings, media, wait_until_ready
from tests.test_api_support import free_port

pytestmark = [pytest.mark.slow, pytest.mark.beside]  # waits on the `mediaindex` processes it runs

JFK = "ask not what your country can do for you"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path, embedder) -> dict[str, str]:
    """A jfk.flac index, made by `mediaindex ingest` (a small job: in its own process, without Ray), with a
    summary stored as the summary stage stores it (the summariser's own extractive summary: a model that says
    nothing usable stands in for the language model)."""
    from mediaindex.agents.stored import summary_segments
    from mediaindex.agents.summarize import summarize
    from mediaindex.agents.tools import Archive
    from mediaindex.index.index import MediaIndex
    from tests.test_agents import FAST, ScriptedModel

    index_dir = tmp_path_factory.mktemp("mcp-index")
    env = cli_environment(index_dir, cache_dir, tmp_path_factory.mktemp("tmp"))
    done = cli("ingest", str(media("audio/jfk.flac")), env=env)
    assert done.returncode == 0, done.stderr
    with MediaIndex(make_settings(index_dir, cache_dir), embedder.dim, embedder.name) as index:
        archive = Archive(index, embedder)
        record = archive.resolve("jfk.flac")
        assert record is not None
        segments = summary_segments(summarize(record.video_id, archive, ScriptedModel([]), FAST), record.language)
        index.add_segments(record.video_id, segments, embedder.embed_passages([s.text for s in segments]))
    return env


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mediaindex", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)


@asynccontextmanager
async def stdio_session(env: dict[str, str], *args: str) -> AsyncIterator[ClientSession]:
    server = StdioServerParameters(command=sys.executable, args=["-m", "mediaindex", "mcp", *args], env=env,
                                   cwd=REPO)
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def refusal(session: ClientSession, tool: str, arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result
    text = result.content[0].text  # type: ignore[union-attr]
    assert text and "Traceback" not in text
    return text


def test_search_gives_the_moments_of_the_cli_search(env: dict[str, str]) -> None:
    moments: list[dict[str, Any]] = []

    async def test() -> None:
        async with stdio_session(env) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert {"search", "search_files", "get_transcript", "ask", "list_files", "file_info", "ingest", "job_status"} == set(tools)
            assert all(t.input_schema["properties"] and t.output_schema for t in tools.values() if t.name != "list_files")
            result = await session.call_tool("search", {"query": JFK, "limit": 5})
            assert not result.is_error, result.content
            moments.extend(result.structured_content["moments"])  # type: ignore[index]
            files = (await session.call_tool("list_files", {})).structured_content
            assert [f["file"] for f in files["files"]] == ["jfk.flac"]  # type: ignore[index]
            # Over stdio nothing serves the media: no play URLs.
            assert moments and all(m["play_url"] is None for m in moments)
            assert "read-only" in await refusal(session, "ingest", {"paths": ["jfk.flac"]})

    anyio.run(test)
    # The server has ended (it held the index): the CLI opens it now.
    cli_search = cli("search", JFK, "--limit", "5", "--json", env=env)
    assert cli_search.returncode == 0, cli_search.stderr
    expected = json.loads(cli_search.stdout)
    assert [(m["source"], m["video_id"], m["start"], m["end"], m["text"], m["confidence"], m["score"])
            for m in moments] == [(h["source"], h["video_id"], h["start"], h["end"], h["text"], h["band"], h["score"])
                                  for h in expected]


def test_file_info_and_resources_give_the_stored_summary_and_the_transcript(env: dict[str, str]) -> None:
    async def test() -> None:
        async with stdio_session(env) as session:
            info = (await session.call_tool("file_info", {"file": "jfk.flac"})).structured_content
            assert info is not None and info["summary"] and "country" in info["summary"], info
            assert info["chapters"] and info["kinds"]["speech"] == 1 and info["kinds"]["summary"] == 1
            assert info["speakers"] == ["S1"] and info["languages"] == ["en"] and info["media_url"] is None
            uri = f"mediaindex://files/{info['video_id']}"
            assert {f"{uri}/transcript", f"{uri}/summary"} <= {str(r.uri) for r in
                                                                 (await session.list_resources()).resources}
            summary = (await session.read_resource(f"{uri}/summary")).contents[0].text  # type: ignore[union-attr]
            assert info["summary"] in summary and info["chapters"][0]["title"] in summary
            vtt = (await session.read_resource(f"{uri}/transcript")).contents[0].text  # type: ignore[union-attr]
            assert vtt.startswith("WEBVTT") and "<v S1>And so my fellow Americans" in vtt
            lines = (await session.call_tool("get_transcript", {"file": info["video_id"], "format": "txt",
                                                                 "to_seconds": 5})).structured_content
            assert lines is not None and lines["text"].startswith("S1: And so my fellow Americans")

    anyio.run(test)


def test_bad_calls_get_clear_errors_and_the_server_keeps_serving(env: dict[str, str]) -> None:
    async def test() -> None:
        async with stdio_session(env, "--allow-ingest", "--media-root", str(MEDIA / "audio")) as session:
            assert "Unknown tool" in await refusal(session, "delete_everything", {})
            assert "query: Field required" in await refusal(session, "search", {})
            assert "query: Input should be a valid string" in await refusal(session, "search", {"query": 5})
            assert "limit: Input should be less than or equal to 100" in await refusal(
                session, "search", {"query": "country", "limit": 10**12})
            assert "at most 1000 characters" in await refusal(session, "search", {"query": "country " * 1429})
            assert "no letters or digits" in await refusal(session, "search", {"query": "🙂🎉🚀"})
            assert "no indexed file" in await refusal(session, "get_transcript", {"file": "../../etc/passwd"})
            assert "to_seconds" in await refusal(
                session, "get_transcript", {"file": "jfk.flac", "from_seconds": 5, "to_seconds": 1})
            assert "outside the configured media roots" in await refusal(session, "ingest", {"paths": ["/etc/passwd"]})
            assert "climbs out" in await refusal(session, "ingest", {"paths": ["../video/manifesto.mp4"]})
            assert "reindex" in await refusal(session, "ingest", {"paths": ["jfk.flac"], "reindex": "yes"})
            assert "no job with id" in await refusal(session, "job_status", {"job_id": "nope"})
            good = await session.call_tool("search", {"query": JFK, "limit": 1})
            assert not good.is_error and good.structured_content["moments"][0]["file"] == "jfk.flac"  # type: ignore[index]

    anyio.run(test)


def test_a_read_only_server_needs_an_index(tmp_path: Path, cache_dir: Path) -> None:
    env = cli_environment(tmp_path / "none", cache_dir, tmp_path / "tmp")
    started = cli("mcp", env=env)
    assert started.returncode == 2 and "no index at" in started.stderr and started.stdout == ""


def test_beside_serve_the_agent_is_sent_to_its_mcp_endpoint(env: dict[str, str]) -> None:
    port = free_port()
    serve = subprocess.Popen([sys.executable, "-m", "mediaindex", "serve", "--port", str(port)], env=env, cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_ready(url, serve)
        refused = cli("mcp", env=env)
        assert refused.returncode == 2 and f"connect the MCP client to {url}/mcp" in refused.stderr

        async def test() -> None:
            async with (httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120)) as http,
                        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
                        ClientSession(read, write) as session):
                await session.initialize()
                files = (await session.call_tool("list_files", {})).structured_content
                assert files is not None and [f["file"] for f in files["files"]] == ["jfk.flac"]
                found = (await session.call_tool("search", {"query": JFK, "limit": 1})).structured_content
                assert found is not None and found["moments"][0]["play_url"].startswith(f"{url}/media/")

        anyio.run(test)
    finally:
        serve.terminate()
        serve.wait(timeout=60)
