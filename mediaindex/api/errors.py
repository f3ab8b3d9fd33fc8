"""Every error leaves the API as JSON with a code and a clear message, never a stack trace.

One shape for all: ``{"error": CODE, "message": TEXT}`` (plus ``details`` for invalid requests), from
handlers, middleware and range errors alike; messages never show the server's own folders."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from mediaindex.api.models import ErrorOut

log = logging.getLogger("mediaindex.api")

_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
          409: "conflict", 413: "too_large", 415: "unsupported_media_type", 416: "range_not_satisfiable",
          422: "invalid_request", 429: "rate_limited", 501: "not_implemented", 503: "not_ready"}


def _error_doc(description: str) -> dict:
    return {"model": ErrorOut, "description": description}


# Answers any endpoint may give, declared on every route so that the schema lists every status sent.
COMMON_ERRORS: dict[int | str, dict] = {
    400: _error_doc("Malformed request (e.g. a Content-Length that is not a number)"),
    413: _error_doc("The request body is over the limit"),
    422: _error_doc("Invalid parameters or body"),
    503: _error_doc("The index is not open (yet)"),
}
KEYED_ERRORS: dict[int | str, dict] = {
    401: _error_doc("No valid API key"),
    429: _error_doc("Rate limit exceeded (see Retry-After)"),
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or _CODES.get(status, "error")
        self.headers = headers


def error_response(status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None,
                   details: list | None = None) -> JSONResponse:
    body: dict = {"error": code or _CODES.get(status, "error"), "message": message}
    if details:
        body["details"] = details
    return JSONResponse(body, status_code=status, headers=headers)


def public(request: Request, message: str) -> str:
    """The message as a client may see it: the server's own folders replaced by labels."""
    state = getattr(request.app.state, "api", None)
    return state.public(message) if state is not None else message


def _where(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if p != "body") or "request"


def _json_invalid(error: dict) -> dict[str, str]:
    """A body that is not JSON, said so with where it breaks (its loc holds the character's place)."""
    at = next((p for p in error.get("loc", ()) if isinstance(p, int)), None)
    why = str((error.get("ctx") or {}).get("error") or "").strip()
    return {"where": "body", "problem": "not valid JSON" + (f" at character {at}" if at is not None else "")
            + (f" ({why})" if why else "")}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, public(request, exc.message), exc.code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        details = [_json_invalid(e) if e.get("type") == "json_invalid" else
                   {"where": _where(tuple(e.get("loc", ()))), "problem": public(request, e.get("msg", "invalid"))}
                   for e in exc.errors()]
        message = "; ".join(f"{d['where']}: {d['problem']}" for d in details) or "invalid request"
        return error_response(422, message, details=details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else _CODES.get(exc.status_code, "error")
        if exc.status_code == 404 and message == "Not Found":
            message = "no such endpoint or resource"
        return error_response(exc.status_code, public(request, message), headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # The trace goes to the server log only; the client gets a message it can act on.
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal error: the server could not complete this request (see the server log)",
                              code="internal")
