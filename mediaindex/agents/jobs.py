"""Summary and question jobs: created in the job store, run to their end, their outcome recorded on the job.

`submit_*` create a pending job; `run_*_job` load it, mark it running, do the work on the `archive` they are
given (the caller opened it) and store the outcome: state "done" with `result = {"output": <VideoSummary |
Answer as JSON>, "markdown": str}`, or state "failed" with `error` (a message for the user: unknown video, empty
question, model that cannot load...). They block until the job ends; call them from a worker thread. A summary
stored at ingest (`agents.stored`) is returned as it is unless the job's params say `recompute`; the model is
then not even started. An unknown job id raises `mediaindex.jobs.JobNotFound`; a job of the other kind raises
`AgentInputError` and is left untouched. `llm` is any `ChatModel` (default: one shared language-model actor per
process, started on first use with `start_ray`, which starts or joins Ray: the caller passes it in, since Ray's
runtime lives above the agents).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from mediaindex.agents.ask import AgentInputError, ask, check_question, check_scope
from mediaindex.agents.events import AgentEvent, OnEvent, ignore
from mediaindex.agents.llm import (
    ChatModel,
    Completion,
    DisaggregatedChat,
    Message,
    RemoteLLM,
    StartRay,
    start_llm,
)
from mediaindex.agents.render import answer_markdown, summary_markdown
from mediaindex.agents.schema import validate_output
from mediaindex.agents.stored import stored_summary
from mediaindex.agents.summarize import summarize
from mediaindex.agents.tools import Archive
from mediaindex.config import Settings
from mediaindex.errors import MediaIndexError
from mediaindex.jobs import Job, JobStore

log = logging.getLogger("mediaindex.agents")

SUMMARIZE, ASK = "summarize", "ask"
_LLMS: dict[str, RemoteLLM | DisaggregatedChat] = {}
_LLM_LOCK = threading.Lock()

Work = Callable[[dict[str, Any], Archive, Callable[[], ChatModel]], tuple[dict[str, Any], str]]


def get_llm(settings: Settings, start_ray: StartRay | None = None) -> RemoteLLM | DisaggregatedChat:
    """One language-model actor per process and LLM configuration (loading a model is the slow part)."""
    key = settings.llm.model_dump_json()
    with _LLM_LOCK:
        if key not in _LLMS:
            _LLMS[key] = start_llm(settings, start_ray)
        return _LLMS[key]


def submit_summarize(settings: Settings, video: str, recompute: bool = False) -> str:
    if not isinstance(video, str) or not video.strip():
        raise AgentInputError("no video given")
    store = JobStore.of(settings)
    try:
        return store.create(SUMMARIZE, {"video": video.strip(), "recompute": bool(recompute)}).id
    finally:
        store.close()


def ask_params(question: str, video: str | None, where: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """A question job's parameters, as its store keeps them; AgentInputError for what cannot be asked."""
    question = check_question(question)
    check_scope(where)
    return {"question": question, "video": video, **({"where": [list(p) for p in where]} if where else {})}


def submit_ask(settings: Settings, question: str, video: str | None = None,
               where: tuple[tuple[str, str], ...] = ()) -> str:
    params = ask_params(question, video, where)
    store = JobStore.of(settings)
    try:
        return store.create(ASK, params).id
    finally:
        store.close()


def run_summarize_job(settings: Settings, job_id: str, llm: ChatModel | None = None, *, archive: Archive,
                      on_event: OnEvent = ignore, start_ray: StartRay | None = None) -> Job:
    def work(params: dict[str, Any], arc: Archive, model: Callable[[], ChatModel]) -> tuple[dict[str, Any], str]:
        video = str(params.get("video") or "")
        out = None if params.get("recompute") else stored_summary(arc, video)
        if out is None:
            out = summarize(video, arc, model(), settings.llm, on_event)
        return validate_output(out), summary_markdown(out)

    def start() -> ChatModel:
        on_event(AgentEvent("stage", f"starting the language model ({settings.llm.model})"))
        return get_llm(settings, start_ray)

    # A summary of pictures alone, or of nothing, is written without the model: it starts at its first call.
    started = _StartsWhenNeeded(start, settings.llm.model)
    return _run(settings, job_id, SUMMARIZE, work, archive, lambda: llm or started)


def run_ask_job(settings: Settings, job_id: str, llm: ChatModel | None = None, *, archive: Archive,
                on_event: OnEvent = ignore, start_ray: StartRay | None = None) -> Job:
    def work(params: dict[str, Any], arc: Archive, model: Callable[[], ChatModel]) -> tuple[dict[str, Any], str]:
        on_event(AgentEvent("stage", f"starting the language model ({settings.llm.model})"))
        chat = model()
        where = tuple((str(k), str(v)) for k, v in params.get("where") or [])
        out = ask(str(params.get("question") or ""), arc, chat, settings.llm, video=params.get("video"),
                  on_event=on_event, where=where)
        return validate_output(out), answer_markdown(out)

    return _run(settings, job_id, ASK, work, archive, lambda: llm or get_llm(settings, start_ray))


class _Cancelled(Exception):
    pass


class _StartsWhenNeeded:
    """A language model started at its first call (loading one, and Ray with it, takes seconds)."""

    def __init__(self, start: Callable[[], ChatModel], name: str) -> None:
        self._start, self.name = start, name
        self._model: ChatModel | None = None

    def _started(self) -> ChatModel:
        if self._model is None:
            self._model = self._start()
        return self._model

    @property
    def max_context(self) -> int:
        return self._started().max_context

    def chat(self, conversations: list[list[Message]], max_tokens: int, stop: list[str] | None = None,
             temperature: float = 0.0, guide: str | None = None) -> list[Completion]:
        return self._started().chat(conversations, max_tokens, stop, temperature, guide)


class _StopsWhenCancelled:
    """The job's language model, asking the job store before each call whether the job was cancelled: a summary
    is three calls (notes on each chapter, their titles, the whole) and an answer one per tool step, so a
    cancelled job stops at its next call, not when it would have ended."""

    def __init__(self, model: ChatModel, cancelled: Callable[[], bool]) -> None:
        self._model, self._cancelled = model, cancelled
        self.name = model.name

    @property
    def max_context(self) -> int:
        return self._model.max_context

    def chat(self, conversations: list[list[Message]], max_tokens: int, stop: list[str] | None = None,
             temperature: float = 0.0, guide: str | None = None) -> list[Completion]:
        if self._cancelled():
            raise _Cancelled
        return self._model.chat(conversations, max_tokens, stop, temperature, guide)


def _run(settings: Settings, job_id: str, kind: str, work: Work, archive: Archive,
         model: Callable[[], ChatModel]) -> Job:
    store = JobStore.of(settings)
    try:
        job = store.get(job_id)
        if job.kind != kind:
            raise AgentInputError(f"job {job_id} is a {job.kind!r} job, not {kind!r}")
        store.set_state(job_id, "running")

        def stoppable() -> ChatModel:
            return _StopsWhenCancelled(model(), lambda: store.is_cancel_requested(job_id))

        try:
            # The model starts only when the job needs it (a stored summary does not).
            output, markdown = work(job.params, archive, stoppable)
        except _Cancelled:
            store.set_state(job_id, "cancelled", error="stopped before its next language-model call")
        except KeyboardInterrupt:  # Ctrl-C in the command running it: it ends cancelled, not as a dead run's job
            store.set_state(job_id, "cancelled", error="stopped by Ctrl-C")
            raise
        except MediaIndexError as exc:
            store.set_state(job_id, "failed", error=str(exc))
        except Exception as exc:  # the job record must say why it failed, whatever the cause
            log.exception("%s job %s failed", kind, job_id)
            store.set_state(job_id, "failed", error=f"{type(exc).__name__}: {exc}")
        else:
            store.set_state(job_id, "done", result={"output": output, "markdown": markdown})
        return store.get(job_id)
    finally:
        store.close()
