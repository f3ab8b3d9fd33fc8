"""Every error leaves the API as JSON with a code and a clear message, never a stack trace."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("mediaindex.api")

_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
          409: "conflict", 413: "too_large", 415: "unsupported_media_type", 416: "range_not_satisfiable",
          422: "invalid_request", 429: "rate_limited", 501: "not_implemented", 503: "not_ready"}


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


def _where(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if p != "body") or "request"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = [{"where": _where(tuple(e.get("loc", ()))), "problem": e.get("msg", "invalid")}
                   for e in exc.errors()]
        message = "; ".join(f"{d['where']}: {d['problem']}" for d in details) or "invalid request"
        return error_response(422, message, details=details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else _CODES.get(exc.status_code, "error")
        if exc.status_code == 404 and message == "Not Found":
            message = "no such endpoint or resource"
        return error_response(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # The trace goes to the server log only; the client gets a message it can act on.
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal error: the server could not complete this request (see the server log)",
                              code="internal")
