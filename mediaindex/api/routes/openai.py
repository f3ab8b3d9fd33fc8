"""OpenAI-compatible chat endpoint over the serving engine: `/v1/models` and `/v1/chat/completions`.

Anything that speaks OpenAI's chat API (the `openai` client, agent frameworks, load testers) can talk to the
engine. Requests go through the API's keys and rate limits; errors come back in OpenAI's shape
(`{"error": {"message", "type", "param", "code"}}`) with a 4xx status for anything the client can fix.

- `stream: true` answers with server-sent events (`chat.completion.chunk` objects, then `data: [DONE]`); a client
  that goes away mid-stream aborts its request, which returns its KV pages at once.
- `tools` with `tool_choice` "required" or a named function: the output is constrained by the guided-decoding
  grammar to one call `{"name": ..., "arguments": {...}}` whose arguments match the function's JSON schema, and is
  returned as `tool_calls`. With "auto" the tools are rendered into the prompt (when the chat template takes them)
  and an output that is such a call is returned as one; "none" ignores them.
- `response_format` `json_schema` (and `json_object`) constrain the output the same way.

The engine is the one `settings.llm` names, built on the first request (loading a model takes a while), unless
one was attached with `attach_engine` (tests, embedding apps).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Request, Security
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mediaindex.api.deps import authorize
from mediaindex.api.errors import ApiError
from mediaindex.errors import MediaIndexError

_header = APIKeyHeader(name="X-API-Key", auto_error=False)
_bearer = HTTPBearer(auto_error=False)


class OpenAIError(Exception):
    """An error answered in OpenAI's shape."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code, self.headers = (
            status, message, type_, param, code, headers)

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 429: "rate_limit_error"}


def openai_authorize(
    request: Request,
    header_key: Annotated[str | None, Security(_header)] = None,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)] = None,
) -> str:
    """The API's own key check and rate limit, with its refusals rewritten in OpenAI's error shape."""
    try:
        return authorize(request, header_key, bearer)
    except ApiError as exc:
        raise OpenAIError(exc.status, exc.message, _TYPES.get(exc.status, "invalid_request_error"), code=exc.code,
                          headers=exc.headers) from exc


# -- request bodies ---------------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class FunctionCall(_Strict):
    name: str
    arguments: str


class ToolCall(_Strict):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text for p in self.content)
        return self.content or ""


class FunctionDef(_Strict):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(_Strict):
    name: str = "response"
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(_Strict):
    include_usage: bool = False


class ChatRequest(_Strict):
    model: str
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1, le=1, description="one choice per request")
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0)
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    response_format: ResponseFormat | None = None
    user: str | None = None


# -- the engine -------------------------------------------------------------------------------------------------


class ChatBackend:
    """The engine behind the endpoint and the model name it answers to; built on first use unless attached."""

    def __init__(self, settings: Any, engine: Any = None, name: str | None = None) -> None:
        self._settings = settings
        self._engine = engine
        self.name = name or str(settings.model)
        self._lock = threading.Lock()
        self.created = int(time.time())

    def engine(self) -> Any:  # -> mediaindex.serving.LLMEngine
        with self._lock:
            if self._engine is None:
                from mediaindex.agents.llm import ChatEngine

                try:
                    self._engine = ChatEngine(self._settings).engine
                except MediaIndexError as exc:
                    raise OpenAIError(503, f"the language model cannot be loaded: {exc}", "server_error",
                                      code="model_unavailable") from exc
            return self._engine


def attach_engine(app: FastAPI, engine: Any, name: str) -> None:
    """Serve `engine` (an LLMEngine) under model id `name` instead of building the configured one."""
    app.state.chat_backend = ChatBackend(app.state.api.settings.llm, engine, name)


def _backend(request: Request) -> ChatBackend:
    return request.app.state.chat_backend


# -- request -> engine ------------------------------------------------------------------------------------------


def _tool_call_schema(tools: list[Tool]) -> dict[str, Any]:
    calls = [{"type": "object", "properties": {"name": {"const": t.function.name}, "arguments": t.function.parameters},
              "required": ["name", "arguments"], "additionalProperties": False} for t in tools]
    return calls[0] if len(calls) == 1 else {"anyOf": calls}


def check_tools(body: ChatRequest) -> None:
    """A 400 for `tools` and `tool_choice` that cannot go together (as OpenAI answers them), before any model
    work: a choice without tools, a function that is not among the tools, tools named twice, and a function
    whose parameters are not an object schema (its arguments could not be an object)."""
    choice = body.tool_choice
    if body.tools is not None and not body.tools:
        raise OpenAIError(400, "tools is an empty list: give at least one tool, or leave tools out", param="tools")
    names = [t.function.name for t in body.tools or []]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise OpenAIError(400, f"tools names the function {twice[0]!r} more than once", param="tools")
    for i, tool in enumerate(body.tools or []):
        kind = tool.function.parameters.get("type", "object")
        if kind != "object":
            raise OpenAIError(400, f"tools[{i}].function.parameters must be a JSON schema of type 'object', not "
                                   f"{kind!r}", param=f"tools[{i}].function.parameters")
    if choice in (None, "none"):
        return
    if not body.tools:
        shown = choice.function.name if isinstance(choice, NamedToolChoice) else choice
        raise OpenAIError(400, f"tool_choice {shown!r} is only allowed when tools are given", param="tool_choice")
    if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
        raise OpenAIError(400, f"tool_choice names the function {choice.function.name!r}, which is not in tools "
                               f"(they are: {', '.join(names)})", param="tool_choice")


def _guide(body: ChatRequest) -> tuple[Any, bool]:
    """(grammar the output must match or None, whether the output is a forced tool call)."""
    from mediaindex.serving import Guide, InvalidRequestError

    choice = body.tool_choice
    try:
        if body.tools and choice not in (None, "none", "auto"):
            tools = body.tools
            if isinstance(choice, NamedToolChoice):  # check_tools made sure it is among them
                tools = [t for t in body.tools if t.function.name == choice.function.name]
            return Guide.json_schema(_tool_call_schema(tools)), True
        fmt = body.response_format
        if fmt is not None and fmt.type == "json_schema":
            if fmt.json_schema is None or not fmt.json_schema.schema_:
                raise OpenAIError(400, "response_format json_schema needs json_schema.schema", param="response_format")
            return Guide.json_schema(fmt.json_schema.schema_), False
        if fmt is not None and fmt.type == "json_object":
            return Guide.json_schema({"type": "object"}), False
    except InvalidRequestError as exc:
        param = "tools" if body.tools and choice not in (None, "none", "auto") else "response_format"
        raise OpenAIError(400, str(exc), param=param, code="invalid_schema") from exc
    return None, False


def _prompt_ids(engine: Any, body: ChatRequest) -> list[int]:
    tok = engine.tokenizer
    if getattr(tok, "chat_template", None) is None:
        raise OpenAIError(400, "this model has no chat template, so it cannot take chat messages", param="messages")
    messages: list[dict[str, Any]] = []
    for m in body.messages:
        msg: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
        if m.tool_calls:
            msg["tool_calls"] = [{"type": "function", "id": c.id, "function": {
                "name": c.function.name, "arguments": _json_or_text(c.function.arguments)}} for c in m.tool_calls]
        if m.tool_call_id:
            msg["tool_call_id"] = m.tool_call_id
        messages.append(msg)
    tools = [t.model_dump() for t in body.tools] if body.tools and body.tool_choice != "none" else None
    try:
        text = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # template errors come in many types; the caller needs the message
        raise OpenAIError(400, f"the chat template cannot render these messages: {exc}", param="messages") from exc
    return list(tok(text, add_special_tokens=False)["input_ids"])


def _json_or_text(s: str) -> Any:
    try:
        return json.loads(s)
    except ValueError:
        return s


def _params(engine: Any, body: ChatRequest, prompt_len: int, guide: Any) -> Any:
    from mediaindex.serving import InvalidRequestError, SamplingParams

    room = int(engine.max_model_len) - prompt_len
    if room < 1:
        raise OpenAIError(400, f"the messages take {prompt_len} tokens; this model's context is "
                               f"{engine.max_model_len} tokens", param="messages", code="context_length_exceeded")
    requested = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    if requested is not None and requested < 1:
        raise OpenAIError(400, f"max_tokens must be at least 1, got {requested}", param="max_tokens")
    if requested is not None and requested > room:
        raise OpenAIError(400, f"max_tokens={requested} plus the messages' {prompt_len} tokens exceed this model's "
                               f"context of {engine.max_model_len} tokens", param="max_tokens",
                          code="context_length_exceeded")
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    temperature = 1.0 if body.temperature is None else body.temperature
    try:
        params = SamplingParams(temperature=temperature, top_p=body.top_p or 1.0, max_tokens=requested or room,
                                stop=stop, seed=body.seed, guide=guide)
        engine.check_request([0] * prompt_len, params)
    except InvalidRequestError as exc:
        raise OpenAIError(400, str(exc)) from exc
    return params


_FINISH = {"stop": "stop", "length": "length", "abort": "stop"}


def _tool_calls(text: str, forced: bool, tools: list[Tool] | None) -> list[dict[str, Any]] | None:
    """The output as OpenAI tool_calls when it is a call of one of `tools`."""
    if not tools:
        return None
    try:
        call = json.loads(text)
    except ValueError:
        if forced:
            raise OpenAIError(500, "the constrained tool call did not parse", "server_error") from None
        return None
    names = {t.function.name for t in tools}
    if not (isinstance(call, dict) and call.get("name") in names and isinstance(call.get("arguments"), dict)):
        return None
    return [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]


# -- routes -----------------------------------------------------------------------------------------------------

# Not in this API's OpenAPI schema: these routes follow OpenAI's published API and error shape instead.
router = APIRouter(prefix="/v1", tags=["openai"], include_in_schema=False)


@router.get("/models")
def list_models(request: Request, _: Annotated[str, Security(openai_authorize)]) -> dict[str, Any]:
    """The model this server answers with (OpenAI's list shape)."""
    backend = _backend(request)
    return {"object": "list", "data": [{"id": backend.name, "object": "model", "created": backend.created,
                                        "owned_by": "mediaindex"}]}


@router.post("/chat/completions")
async def chat_completions(request: Request, _: Annotated[str, Security(openai_authorize)]) -> Any:
    """Chat completion, streamed as server-sent events when `stream` is true."""
    from starlette.concurrency import run_in_threadpool

    try:
        raw = await request.json()
    except (ValueError, UnicodeDecodeError) as exc:
        raise OpenAIError(400, f"the request body is not valid JSON: {exc}") from exc
    try:
        body = ChatRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or None
        raise OpenAIError(400, f"{where or 'request'}: {first.get('msg', 'invalid')}", param=where) from exc
    backend = _backend(request)
    if body.model != backend.name:
        raise OpenAIError(404, f"the model {body.model!r} does not exist; this server has {backend.name!r}",
                          param="model", code="model_not_found")
    check_tools(body)
    engine = await run_in_threadpool(backend.engine)
    guide, forced = await run_in_threadpool(_guide, body)
    prompt = await run_in_threadpool(_prompt_ids, engine, body)
    params = _params(engine, body, len(prompt), guide)
    rid = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    if body.stream:
        return StreamingResponse(_events(engine, body, prompt, params, rid, created, forced),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    from mediaindex.serving import InvalidRequestError

    final = None
    try:
        async with contextlib.aclosing(engine.stream(prompt, params, rid)) as outs:
            async for out in outs:
                final = out
    except InvalidRequestError as exc:
        raise OpenAIError(400, str(exc)) from exc
    assert final is not None
    return _completion(body, final, rid, created, backend.name, forced)


def _usage(out: Any) -> dict[str, int]:
    return {"prompt_tokens": len(out.prompt_token_ids), "completion_tokens": len(out.token_ids),
            "total_tokens": len(out.prompt_token_ids) + len(out.token_ids)}


def _check_failed(out: Any) -> None:
    if out.finish_reason == "error":
        raise OpenAIError(500, f"generation failed: {out.error}", "server_error")


def _completion(body: ChatRequest, out: Any, rid: str, created: int, model: str, forced: bool) -> dict[str, Any]:
    _check_failed(out)
    calls = _tool_calls(out.text, forced, body.tools if body.tool_choice != "none" else None)
    message: dict[str, Any] = {"role": "assistant", "content": None if calls else out.text}
    if calls:
        message["tool_calls"] = calls
    finish = "tool_calls" if calls else _FINISH.get(out.finish_reason or "stop", "stop")
    return {"id": rid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": _usage(out)}


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj)}\n\n"


async def _events(engine: Any, body: ChatRequest, prompt: list[int], params: Any, rid: str, created: int,
                  forced: bool) -> AsyncIterator[str]:
    """Chunks as tokens arrive. Tool calls are sent whole once complete (their JSON must be whole to be one).
    When the client disconnects, the server cancels this generator: closing the engine's stream aborts the
    request and frees its pages."""
    model = body.model
    tools = body.tools if body.tool_choice != "none" else None
    buffered = bool(tools)  # an output that may be a tool call is held back until it is complete

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    yield _sse(chunk({"role": "assistant", "content": ""}))
    sent = 0
    final = None
    async with contextlib.aclosing(engine.stream(prompt, params, rid)) as outs:
        async for out in outs:
            final = out
            if out.finish_reason == "error":
                break
            if not buffered and len(out.text) > sent and not out.finished:
                # Hold back a possibly incomplete multi-byte character or stop string at the end.
                text = out.text
                if text.endswith("\ufffd"):
                    continue
                yield _sse(chunk({"content": text[sent:]}))
                sent = len(text)
    assert final is not None
    if final.finish_reason == "error":
        err = {"message": f"generation failed: {final.error}", "type": "server_error", "param": None, "code": None}
        yield _sse({"error": err})
        yield "data: [DONE]\n\n"
        return
    calls = _tool_calls(final.text, forced, tools) if tools else None
    if calls:
        yield _sse(chunk({"tool_calls": [{"index": 0, **c} for c in calls]}))
        finish = "tool_calls"
    else:
        if len(final.text) > sent:
            yield _sse(chunk({"content": final.text[sent:]}))
        finish = _FINISH.get(final.finish_reason or "stop", "stop")
    yield _sse(chunk({}, finish))
    if body.stream_options is not None and body.stream_options.include_usage:
        yield _sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [],
                    "usage": _usage(final)})
    yield "data: [DONE]\n\n"


def install(app: FastAPI) -> None:
    """Add the /v1 routes and their error shape to the app (the engine is built on the first request)."""
    app.state.chat_backend = ChatBackend(app.state.api.settings.llm)

    @app.exception_handler(OpenAIError)
    async def _openai_error(_: Request, exc: OpenAIError) -> JSONResponse:
        return exc.response()

    app.include_router(router)


__all__ = ["OpenAIError", "attach_engine", "install", "router"]
