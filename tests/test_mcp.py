"""The MCP server mounted in `serve` (/mcp, streamable HTTP), driven by the SDK's own client over loopback."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mediaindex.api import create_app
from mediaindex.api.keys import KeyStore
from tests.conftest import MEDIA, make_settings, media
from tests.test_api_support import LiveServer, Sample, sample  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

JFK = "ask not what your country can do for you"
TOOLS = {"search", "search_files", "get_transcript", "ask", "list_files", "file_info", "ingest", "job_status"}


@asynccontextmanager
async def mcp_session(url: str, key: str | None = None) -> AsyncIterator[ClientSession]:
    headers = {"X-API-Key": key} if key else {}
    async with (httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=600)) as http,
                streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
                ClientSession(read, write) as session):
        await session.initialize()
        yield session


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    anyio.run(test)


async def call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def refusal(session: ClientSession, tool: str, arguments: dict[str, Any]) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result
    text = result.content[0].text  # type: ignore[union-attr]
    assert "Traceback" not in text and text
    return text


@pytest.fixture(scope="module")
def keyed(sample: Sample, tmp_path_factory: pytest.TempPathFactory):  # noqa: F811
    """A read-only server over the sample index (jfk.flac, auto-editor_example.mp4) with one API key."""
    tmp = tmp_path_factory.mktemp("mcp-http")
    settings = sample.app_settings(tmp)
    # Few tokens: the small model on two shared cores (as the agents' tests run it).
    settings = settings.model_copy(update={"llm": settings.llm.model_copy(update={
        "max_steps": 1, "max_new_tokens": 32, "token_budget": 64})})
    store = KeyStore(tmp / "keys.db")
    _, secret = store.create("agent")
    store.close()
    app = create_app(settings, index=sample.index, embedder=sample.embedder, pipeline=sample.pipeline)
    with LiveServer(app) as server:
        yield server.url, secret


def test_tools_are_listed_with_schemas_and_search_gives_moments_that_play(keyed: tuple[str, str]) -> None:
    url, key = keyed

    async def test() -> None:
        async with mcp_session(url, key) as session:
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert set(listed) == TOOLS
            for tool in listed.values():
                assert tool.description and len(tool.description) > 40, tool.name
                assert tool.input_schema["type"] == "object" and tool.output_schema, tool.name
                assert "ctx" not in tool.input_schema.get("properties", {}), tool.name
            search = listed["search"].input_schema
            assert search["required"] == ["query"] and search["properties"]["limit"]["maximum"] == 100
            assert listed["search"].annotations.read_only_hint and not listed["ingest"].annotations.read_only_hint

            found = await call(session, "search", {"query": JFK, "limit": 3})
            best = found["moments"][0]
            assert (best["file"], best["modality"], best["confidence"]) == ("jfk.flac", "speech", "high")
            assert best["start"] < 8.0 < best["end"] and "country" in best["text"]
            assert best["play_url"].startswith(f"{url}/media/{best['video_id']}#t=")
            only_video = await call(session, "search", {"query": JFK, "file": "auto-editor_example.mp4"})
            assert only_video["moments"] == []  # JFK is not in that file
            untagged = await call(session, "search", {"query": JFK, "where": {"tags": "speech"}})
            assert untagged["moments"] == []  # no file was indexed with tags
            unreviewed = await call(session, "search", {"query": JFK, "where": {"reviewed": True}})
            assert unreviewed["moments"] == []  # a boolean is taken as one (no file has it)
            assert "without quotes" in await refusal(session, "search", {"query": JFK, "where": {'ta"gs': "x"}})
            assert "without quotes" in await refusal(session, "ask", {"question": "who?", "where": {'ta"gs': "x"}})
            spoken = await call(session, "search", {"query": "banana", "modality": ["speech"], "from_seconds": 30})
            assert spoken["moments"] and all(m["modality"] == "speech" and m["end"] > 30 for m in spoken["moments"])
            by_file = await call(session, "search_files", {"query": JFK, "per_file": 1})
            first = by_file["files"][0]
            assert (first["file"], first["confidence"], first["count"]) == ("jfk.flac", "high", len(
                [m for m in (await call(session, "search", {"query": JFK, "limit": 100}))["moments"]
                 if m["file"] == "jfk.flac"]))
            assert [m["start"] for m in first["moments"]] == [best["start"]]
            assert "per_file" in await refusal(session, "search_files", {"query": JFK, "per_file": 0})
            misspelt = await refusal(session, "search", {"query": JFK, "from": 30})  # as if unfiltered, passed over
            assert misspelt.startswith("bad arguments for search: unknown argument 'from'; it takes "), misspelt
            assert "from_seconds" in misspelt, misspelt
        # The play URL is the API's own media route, behind the same key.
        played = httpx.get(best["play_url"].split("#")[0], headers={"X-API-Key": key, "Range": "bytes=0-3"})
        assert played.status_code == 206 and played.content == b"fLaC"

    run(test)


def test_files_transcripts_and_resources(keyed: tuple[str, str]) -> None:
    url, key = keyed

    async def test() -> None:
        async with mcp_session(url, key) as session:
            files = await call(session, "list_files", {})
            assert files["total"] == 2 and {f["file"] for f in files["files"]} == {"jfk.flac", "auto-editor_example.mp4"}
            jfk = next(f for f in files["files"] if f["file"] == "jfk.flac")
            assert jfk["duration"] == pytest.approx(11.0, abs=0.1) and jfk["language"] == "en"

            info = await call(session, "file_info", {"file": jfk["video_id"]})
            assert info["languages"] == ["en"] and info["kinds"]["speech"] >= 1 and info["summary"] is None
            assert info["media_url"] == f"{url}/media/{jfk['video_id']}"

            lines = (await call(session, "get_transcript", {"file": "jfk.flac"}))["lines"]
            said = " ".join(line["text"] for line in lines)
            assert "ask not what your country can do for you" in said.replace(",", "")
            part = await call(session, "get_transcript", {"file": jfk["video_id"], "from_seconds": 8, "format": "srt"})
            assert part["text"].startswith("1\n00:00:") and "your country" in part["text"]

            uris = {str(r.uri) for r in (await session.list_resources()).resources}
            transcript_uri = f"mediaindex://files/{jfk['video_id']}/transcript"
            assert transcript_uri in uris and f"mediaindex://files/{jfk['video_id']}/summary" in uris
            vtt = (await session.read_resource(transcript_uri)).contents[0].text  # type: ignore[union-attr]
            assert vtt.startswith("WEBVTT") and "fellow Americans" in vtt
            with pytest.raises(MCPError, match="no summary"):
                await session.read_resource(f"mediaindex://files/{jfk['video_id']}/summary")
            prompt = await session.get_prompt("answer_from_archive", {"question": "What does Kennedy ask?"})
            text = prompt.messages[0].content.text  # type: ignore[union-attr]
            assert "What does Kennedy ask?" in text and "search" in text and "cite" in text

            assert "read-only" in await refusal(session, "ingest", {"paths": ["jfk.flac"]})

    run(test)


def test_a_wrong_or_missing_key_is_refused(keyed: tuple[str, str]) -> None:
    url, _ = keyed
    for headers in ({}, {"X-API-Key": "mik_0123456789ab_wrong"}, {"Authorization": "Bearer nonsense"}):
        r = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
        assert r.status_code == 401 and r.json()["error"] == "unauthorized", r.text

    async def test() -> None:
        async with mcp_session(url, "mik_0123456789ab_wrong"):
            pass

    with pytest.raises(BaseExceptionGroup) as refused:  # the client's task groups carry its error
        run(test)
    assert refused.group_contains(MCPError)


def test_mcp_requests_share_the_api_rate_limit(sample: Sample, tmp_path: Path) -> None:  # noqa: F811
    app = create_app(sample.app_settings(tmp_path, rate_limit_per_minute=1, rate_limit_burst=2),
                     index=sample.index, embedder=sample.embedder, pipeline=sample.pipeline)
    with LiveServer(app) as server:
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        assert [httpx.post(f"{server.url}/mcp", json=ping).status_code != 429 for _ in range(2)] == [True, True]
        limited = httpx.post(f"{server.url}/mcp", json=ping)
        assert limited.status_code == 429 and limited.headers["Retry-After"] and "rate limit" in limited.json()["message"]
        assert httpx.get(f"{server.url}/videos").status_code == 429  # one bucket for the API and its MCP endpoint


@pytest.mark.llm
def test_ask_answers_with_cited_moments(keyed: tuple[str, str]) -> None:
    url, key = keyed

    async def test() -> None:
        async with mcp_session(url, key) as session:
            out = await call(session, "ask", {"question": "What does the speaker ask his fellow Americans to do?"})
        assert out["status"] == "answered" and out["job_id"] and out["searches"], out
        assert any(c["file"] == "jfk.flac" and c["start"] < 11.0 and c["play_url"] for c in out["citations"]), out

    run(test)


@pytest.mark.llm
def test_an_ask_the_client_cancels_stops_its_job(keyed: tuple[str, str], sample: Sample) -> None:  # noqa: F811
    """A client that gives up on `ask` (its call cancelled: the SDK sends notifications/cancelled) does not leave
    the server's agent answering for no one: the question's job ends cancelled before its next model call."""
    from mediaindex.jobs import JobStore

    url, key = keyed
    store = JobStore.of(sample.settings)
    before = {j.id for j in store.list(kind="ask", limit=100_000)}

    def started() -> str | None:
        return next((j.id for j in store.list(kind="ask", limit=100_000)
                     if j.id not in before and j.state == "running"), None)

    running: list[str] = []

    async def test() -> None:
        async with mcp_session(url, key) as session, anyio.create_task_group() as tasks:
            tasks.start_soon(call, session, "ask", {"question": "What does the speaker ask his fellow Americans?"})
            with anyio.fail_after(120):
                while (job_id := started()) is None:
                    await anyio.sleep(0.1)
            running.append(job_id)
            tasks.cancel_scope.cancel()

    run(test)
    job_id = running[0]
    deadline = time.monotonic() + 120
    while (job := store.get(job_id)).state == "running":
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    store.close()
    assert (job.state, job.error) == ("cancelled", "stopped before its next language-model call"), job


def test_ingest_with_write_access_makes_a_job_whose_file_becomes_searchable(sample: Sample, tmp_path: Path,  # noqa: F811
                                                                             cache_dir: Path) -> None:
    # jfk.flac has no pictures: the sample's pipeline (whose thumbnails go to the sample's folder) indexes it
    # into this index without loading the models again.
    settings = make_settings(tmp_path / "index", cache_dir, api={
        "media_roots": [MEDIA / "audio"], "rate_limit_per_minute": 0, "mcp_allow_ingest": True})
    app = create_app(settings, embedder=sample.embedder, pipeline=sample.pipeline)

    async def test(url: str) -> None:
        async with mcp_session(url) as session:
            assert "outside the configured media roots" in await refusal(
                session, "ingest", {"paths": [str(media("video/manifesto.mp4"))]})
            assert "climbs out" in await refusal(session, "ingest", {"paths": ["../video/manifesto.mp4"]})
            job = await call(session, "ingest", {"paths": ["jfk.flac"]})
            assert job["kind"] == "ingest" and job["state"] in ("pending", "running")
            deadline = time.monotonic() + 600
            while job["state"] in ("pending", "running"):
                assert time.monotonic() < deadline, job
                await anyio.sleep(1)
                job = await call(session, "job_status", {"job_id": job["id"]})
            assert job["state"] == "done" and job["result"]["indexed"] == 1, job
            found = await call(session, "search", {"query": JFK})
            assert found["moments"][0]["file"] == "jfk.flac"

    with LiveServer(app) as server:
        anyio.run(test, server.url)
