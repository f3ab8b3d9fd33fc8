"""ASGI middleware: request metrics, and a cap on request bodies before any handler reads them."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mediaindex.api.errors import error_response


class BodyLimit:
    """Refuse bodies over the limit: at once from Content-Length, or while reading a chunked body."""

    def __init__(self, app: ASGIApp, limit: int, upload_limit: int, upload_paths: tuple[str, ...]) -> None:
        self.app, self.limit, self.upload_limit, self.upload_paths = app, limit, upload_limit, upload_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.upload_limit if scope["path"] in self.upload_paths else self.limit
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await error_response(400, "the Content-Length header is not a number")(scope, receive, send)
                return
            if int(declared) > limit:
                await error_response(413, f"the request body is {int(declared)} bytes; the limit here is "
                                          f"{limit} bytes")(scope, receive, send)
                return
        if scope["path"] in self.upload_paths:
            await self.app(scope, self._counted(receive, limit), send)
            return
        # Other bodies are small (api.max_body_bytes): read them whole first, so one over the limit without a
        # Content-Length (chunked) is answered 413 here, before a handler's parser turns the cut into a 400.
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > limit:
                await error_response(413, f"the request body exceeds the limit of {limit} bytes")(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    @staticmethod
    def _counted(receive: Receive, limit: int) -> Receive:
        """Uploads stream to disk: count while the handler reads, and stop it past the limit (its own 413)."""
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    from mediaindex.api.errors import ApiError

                    raise ApiError(413, f"the request body exceeds the limit of {limit} bytes")
            return message

        return counted


class RequestMetrics:
    def __init__(self, app: ASGIApp, metrics) -> None:  # metrics: mediaindex.api.metrics.Metrics
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            # The route's template, not the raw path: ids must not explode the label space.
            label = getattr(route, "path", None) or ("/static" if scope["path"].startswith("/static/") else "unmatched")
            method = scope.get("method", "GET")
            self.metrics.requests.labels(method, label, str(status)).inc()
            self.metrics.latency.labels(method, label).observe(time.perf_counter() - started)
