"""One engine, many jobs at once: requests from any thread join the running batch between engine steps.

Decoding on a CPU reads every weight once per step whatever the batch size, so questions asked together cost
little more than one alone. Each caller blocks for its own outputs; one thread drives the engine, which is never
touched from two threads.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from concurrent.futures import Future
from typing import Any

log = logging.getLogger(__name__)


class ContinuousBatcher:
    def __init__(self, engine: Any) -> None:  # engine: mediaindex.serving.LLMEngine
        self.engine = engine
        self._cond = threading.Condition()
        self._pending: list[tuple[Any, Any, Future]] = []
        self._driver: threading.Thread | None = None

    def generate(self, prompts: list[Any], params: list[Any]) -> list[Any]:  # -> list[RequestOutput]
        futures: list[Future] = [Future() for _ in prompts]
        with self._cond:
            self._pending.extend(zip(prompts, params, futures, strict=True))
            if self._driver is None or not self._driver.is_alive():
                self._driver = threading.Thread(target=self._drive, name="llm-batcher", daemon=True)
                self._driver.start()
            self._cond.notify()
        return [f.result() for f in futures]

    def _drive(self) -> None:
        from mediaindex.serving import InvalidRequestError, RequestOutput

        waiting: dict[str, Future] = {}
        while True:
            with self._cond:
                while not self._pending and not waiting:
                    # Idle: the thread ends, and the next call starts another.
                    if not self._cond.wait(timeout=30.0) and not self._pending:
                        self._driver = None
                        return
                new, self._pending = self._pending, []
            for prompt, params, future in new:
                try:
                    waiting[self.engine.add_request(prompt, params)] = future
                except InvalidRequestError as exc:
                    future.set_result(RequestOutput("rejected", [], [], [], "", True, "error", exc))
            if not waiting:
                continue
            try:
                outs = self.engine.step() if self.engine.has_unfinished() else []
            except Exception as exc:  # every caller learns why; the engine drops what it held
                log.exception("engine step failed")
                for rid, future in waiting.items():
                    self._abort(rid)
                    future.set_exception(exc)
                waiting.clear()
                continue
            for out in outs:
                if out.finished and out.request_id in waiting:
                    waiting.pop(out.request_id).set_result(out)
            if waiting and not self.engine.has_unfinished():  # finished without a report: never hang a caller
                for future in waiting.values():
                    future.set_exception(RuntimeError("the engine dropped the request"))
                waiting.clear()

    def _abort(self, request_id: str) -> None:
        with contextlib.suppress(Exception):  # already gone
            self.engine.abort(request_id)
