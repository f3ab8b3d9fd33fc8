"""The OpenAI-compatible endpoint of `mediaindex serve`, driven by the real `openai` client against a real uvicorn
server, over the serving engine with a tiny random model: the same tokens as the engine itself, streaming, tool
calls and JSON schemas through the guided-decoding grammar, the API's keys and rate limits, 4xx errors in OpenAI's
shape for every kind of bad input, and a client that disconnects mid-stream getting its pages freed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mediaindex.config import ApiSettings
from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams
from tests.test_api_support import LiveServer

openai = pytest.importorskip("openai")

MODEL = "tiny-llama"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                       "required": ["city"], "additionalProperties": False},
    },
}
ASK = [{"role": "user", "content": "Say something about the archive."}]


def _app(tmp: Path, cache_dir: Path, embedder, engine: LLMEngine, **api):
    from mediaindex.api import create_app
    from mediaindex.api.routes.openai import attach_engine
    from tests.conftest import make_settings

    settings = make_settings(tmp / "index", cache_dir)
    base = {"rate_limit_per_minute": 0, "keys_db": tmp / "keys.db"}
    settings = settings.model_copy(update={"api": ApiSettings(**{**base, **api})})
    app = create_app(settings, embedder=embedder)
    attach_engine(app, engine, MODEL)
    return app


def _engine(tiny_models, tok) -> LLMEngine:
    model, _ = tiny_models("llama")
    return LLMEngine(model, tok, EngineConfig(page_size=4, num_pages=256, max_model_len=400))


@pytest.fixture(scope="module")
def served(tiny_models, char_tokenizer, embedder, cache_dir, tmp_path_factory) -> Iterator[tuple]:
    tmp = tmp_path_factory.mktemp("openai")
    engine = _engine(tiny_models, char_tokenizer)
    app = _app(tmp, cache_dir, embedder, engine)
    _, secret = app.state.api.keys.create("openai-test")
    with LiveServer(app) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=secret, max_retries=0, timeout=60)
        yield client, engine, server, secret


def test_models_lists_the_served_model(served):
    client, *_ = served
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_completion_is_the_engines_own_output(served, char_tokenizer):
    client, engine, *_ = served
    got = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=12, temperature=0)
    ref = engine.generate([ASK], SamplingParams(max_tokens=12))[0]
    choice = got.choices[0]
    assert choice.message.role == "assistant" and choice.message.content == ref.text
    assert choice.finish_reason == {"length": "length", "stop": "stop"}[ref.finish_reason]
    assert got.usage.completion_tokens == len(ref.token_ids) and got.usage.prompt_tokens == len(ref.prompt_token_ids)


def test_streaming_sends_the_same_text_in_pieces(served):
    client, *_ = served
    full = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=16, temperature=0)
    chunks = list(client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=16, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1, "streamed, not sent whole"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].usage.completion_tokens == 16


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_call_matches_the_function_schema(served, choice):
    client, *_ = served
    got = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Weather in Oslo?"}],
                                         tools=[WEATHER], tool_choice=choice, max_tokens=60, temperature=0)
    c = got.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None, c
    call = c.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    args = json.loads(call.function.arguments)
    assert set(args) == {"city"} and isinstance(args["city"], str) and len(args["city"]) <= 12


def test_streamed_tool_call(served):
    client, *_ = served
    chunks = list(client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], tool_choice="required",
                                                 max_tokens=60, temperature=0, stream=True))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    assert "city" in json.loads(calls[0].function.arguments)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_response_format_json_schema(served):
    client, *_ = served
    schema = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 10},
                                               "year": {"type": "integer", "minimum": 1900, "maximum": 2100}},
              "required": ["title", "year"], "additionalProperties": False}
    got = client.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=80, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "film", "schema": schema}},
    )
    value = json.loads(got.choices[0].message.content)
    assert set(value) == {"title", "year"} and 1900 <= value["year"] <= 2100 and len(value["title"]) <= 10


def _assert_openai_error(exc: Exception, status: int, words: str) -> None:
    assert exc.status_code == status, exc
    body = exc.response.json()
    assert set(body) == {"error"} and set(body["error"]) >= {"message", "type", "param", "code"}
    assert words in body["error"]["message"], body


@pytest.mark.parametrize(
    ("kwargs", "error", "status", "words"),
    [
        (dict(model="gpt-17"), "NotFoundError", 404, "does not exist"),
        (dict(max_tokens=0), "BadRequestError", 400, "at least 1"),
        (dict(max_tokens=-5), "BadRequestError", 400, "at least 1"),
        (dict(max_tokens=10_000), "BadRequestError", 400, "context"),
        (dict(messages=[{"role": "robot", "content": "hi"}]), "BadRequestError", 400, "messages"),
        (dict(messages=[{"content": "no role"}]), "BadRequestError", 400, "messages"),
        (dict(messages=[]), "BadRequestError", 400, "messages"),
        (dict(messages=[{"role": "user", "content": "x" * 500}]), "BadRequestError", 400, "context"),
        (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "frobnicate"}}}],
              tool_choice="required"), "BadRequestError", 400, "schema"),
        (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"a": {"$ref": "#/definitions/missing"}}}}}),
         "BadRequestError", 400, "schema"),
        (dict(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "other"}}),
         "BadRequestError", 400, "not in tools"),
        # A choice the request cannot honour is refused, never answered with a plain completion.
        (dict(tool_choice={"type": "function", "function": {"name": "get_weather"}}), "BadRequestError", 400,
         "only allowed when tools are given"),
        (dict(tool_choice="required"), "BadRequestError", 400, "only allowed when tools are given"),
        (dict(tools=[], tool_choice="auto"), "BadRequestError", 400, "empty list"),
        (dict(tools=[WEATHER, WEATHER], tool_choice="required"), "BadRequestError", 400, "more than once"),
        (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]),
         "BadRequestError", 400, "type 'object'"),
        (dict(tools=[WEATHER], tool_choice={"type": "function"}), "BadRequestError", 400, "tool_choice"),
        (dict(tools=[WEATHER], tool_choice="sometimes"), "BadRequestError", 400, "tool_choice"),
        (dict(tools=[{"type": "function", "function": {"name": "no spaces allowed"}}]), "BadRequestError", 400,
         "tools"),
        (dict(temperature=7), "BadRequestError", 400, "temperature"),
    ],
)
def test_bad_input_is_a_4xx_in_openai_shape(served, kwargs, error, status, words):
    client, engine, *_ = served
    args = dict(model=MODEL, messages=ASK, max_tokens=4)
    args.update(kwargs)
    with pytest.raises(getattr(openai, error)) as info:
        client.chat.completions.create(**args)
    _assert_openai_error(info.value, status, words)
    assert engine.metrics().pages_used == 0


@pytest.mark.parametrize("body", [b"{not json", b"", b"[1, 2]", b'{"model": "tiny-llama", "messages": "hi"}'])
def test_malformed_bodies(served, body):
    _, _, server, secret = served
    r = httpx.post(f"{server.url}/v1/chat/completions", content=body,
                   headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert set(r.json()["error"]) >= {"message", "type", "param", "code"}


def test_keys_are_required(served):
    _, _, server, _ = served
    bad = openai.OpenAI(base_url=f"{server.url}/v1", api_key="mi_not_a_key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        bad.models.list()
    _assert_openai_error(info.value, 401, "not valid")
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model=MODEL, messages=ASK, max_tokens=2)


def test_disconnect_mid_stream_frees_pages(served):
    _, engine, server, secret = served
    body = {"model": MODEL, "messages": ASK, "max_tokens": 300, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {secret}"}, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        seen = [next(lines) for _ in range(6)]
        assert any('"content"' in line for line in seen)
        assert engine.metrics().num_running == 1 and engine.metrics().pages_used > 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (engine.metrics().pages_used or engine.metrics().num_running):
        time.sleep(0.05)
    m = engine.metrics()
    assert m.pages_used == 0 and m.num_running == 0 and m.num_waiting == 0


def test_rate_limit_in_openai_shape(tiny_models, char_tokenizer, embedder, cache_dir, tmp_path):
    from fastapi.testclient import TestClient

    app = _app(tmp_path, cache_dir, embedder, _engine(tiny_models, char_tokenizer),
               rate_limit_per_minute=2, rate_limit_burst=2)
    with TestClient(app) as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http, max_retries=0)
        client.models.list()
        client.models.list()
        with pytest.raises(openai.RateLimitError) as info:
            client.models.list()
    _assert_openai_error(info.value, 429, "rate limit")
