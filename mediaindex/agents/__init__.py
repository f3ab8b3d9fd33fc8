"""Agentic jobs: per-video summaries with chapters, and questions answered with cited moments.

The language model runs in the serving engine (`mediaindex.serving.LLMEngine`) inside a Ray actor
(`mediaindex.agents.llm.LLMActor`). Jobs are persisted in the index directory's job store
(`mediaindex.jobs.JobStore.of(settings)`), shared by the CLI and the HTTP API.

Entry points for the HTTP API (and the CLI):

    submit_summarize(settings, video: str, recompute=False) -> str     # job id, state "pending"
    submit_ask(settings, question: str, video: str | None = None) -> str
    run_summarize_job(settings, job_id: str, llm=None, archive=None) -> Job
    run_ask_job(settings, job_id: str, llm=None, archive=None) -> Job

`run_*_job` loads the job, marks it running, does the work and stores the outcome: state "done" with
`result = {"output": <VideoSummary | Answer as JSON>, "markdown": str}`, or state "failed" with `error` (a
message for the user: unknown video, empty question, model that cannot load...). They block until the job
ends; call them from a worker thread. A summary stored at ingest (`ingest.summaries`, see `agents.stored`) is
returned as it is unless the job's params say `recompute`; the model is then not even started. An unknown job
id raises `mediaindex.jobs.JobNotFound`; a job of the other kind raises `AgentInputError` and is left untouched. `llm` is any `ChatModel` (default: one shared `LLMActor` per process,
started on first use); `archive` an open `Archive` (default: the index at `settings.index_dir`).
`VideoSummary.model_json_schema()` / `Answer.model_json_schema()` describe `output`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from mediaindex.agents.ask import MAX_QUESTION_CHARS, AgentInputError, ask
from mediaindex.agents.events import AgentEvent, OnEvent, ignore
from mediaindex.agents.llm import ChatModel, DisaggregatedChat, RemoteLLM, start_llm
from mediaindex.agents.render import answer_markdown, summary_markdown
from mediaindex.agents.schema import Answer, VideoSummary, validate_output
from mediaindex.agents.stored import stored_summary
from mediaindex.agents.summarize import summarize
from mediaindex.agents.tools import Archive
from mediaindex.config import Settings
from mediaindex.errors import MediaIndexError
from mediaindex.jobs import Job, JobStore

log = logging.getLogger(__name__)

SUMMARIZE, ASK = "summarize", "ask"
_LLMS: dict[str, RemoteLLM | DisaggregatedChat] = {}
_LLM_LOCK = threading.Lock()

__all__ = [
    "ASK", "SUMMARIZE", "AgentInputError", "Answer", "Archive", "VideoSummary", "ask", "get_llm",
    "open_archive", "run_ask_job", "run_summarize_job", "stored_summary", "submit_ask", "submit_summarize",
    "summarize",
]


def get_llm(settings: Settings) -> RemoteLLM | DisaggregatedChat:
    """One language-model actor per process and LLM configuration (loading a model is the slow part)."""
    key = settings.llm.model_dump_json()
    with _LLM_LOCK:
        if key not in _LLMS:
            _LLMS[key] = start_llm(settings)
        return _LLMS[key]


def open_archive(settings: Settings) -> Archive:
    from mediaindex.index.index import IndexMissingError, open_index
    from mediaindex.models.text_embed import load_text_embedder

    if not (settings.index_dir / "schema.json").exists():
        raise IndexMissingError(f"no index at {settings.index_dir}: run `mediaindex ingest PATH` first")
    embedder = load_text_embedder(settings.embed, settings.cache_dir)
    return Archive(open_index(settings, embedder.dim, embedder.name), embedder, settings.vision)


def submit_summarize(settings: Settings, video: str, recompute: bool = False) -> str:
    if not isinstance(video, str) or not video.strip():
        raise AgentInputError("no video given")
    store = JobStore.of(settings)
    try:
        return store.create(SUMMARIZE, {"video": video.strip(), "recompute": bool(recompute)}).id
    finally:
        store.close()


def submit_ask(settings: Settings, question: str, video: str | None = None) -> str:
    if not isinstance(question, str) or not question.strip():
        raise AgentInputError("the question is empty")
    if len(question.strip()) > MAX_QUESTION_CHARS:
        raise AgentInputError(f"the question is too long ({len(question.strip())} characters, at most "
                              f"{MAX_QUESTION_CHARS})")
    store = JobStore.of(settings)
    try:
        return store.create(ASK, {"question": question.strip(), "video": video}).id
    finally:
        store.close()


def run_summarize_job(settings: Settings, job_id: str, llm: ChatModel | None = None,
                      archive: Archive | None = None, on_event: OnEvent = ignore) -> Job:
    def work(params: dict[str, Any], arc: Archive, model: Callable[[], ChatModel]) -> tuple[dict[str, Any], str]:
        video = str(params.get("video") or "")
        out = None if params.get("recompute") else stored_summary(arc, video)
        if out is None:
            on_event(AgentEvent("stage", f"starting the language model ({settings.llm.model})"))
            out = summarize(video, arc, model(), settings.llm, on_event)
        return validate_output(out), summary_markdown(out)

    return _run(settings, job_id, SUMMARIZE, work, llm, archive)


def run_ask_job(settings: Settings, job_id: str, llm: ChatModel | None = None, archive: Archive | None = None,
                on_event: OnEvent = ignore) -> Job:
    def work(params: dict[str, Any], arc: Archive, model: Callable[[], ChatModel]) -> tuple[dict[str, Any], str]:
        on_event(AgentEvent("stage", f"starting the language model ({settings.llm.model})"))
        chat = model()
        out = ask(str(params.get("question") or ""), arc, chat, settings.llm, video=params.get("video"),
                  on_event=on_event)
        return validate_output(out), answer_markdown(out)

    return _run(settings, job_id, ASK, work, llm, archive)


def _run(settings: Settings, job_id: str, kind: str, work, llm: ChatModel | None, archive: Archive | None) -> Job:
    store = JobStore.of(settings)
    own_archive = archive is None
    try:
        job = store.get(job_id)
        if job.kind != kind:
            raise AgentInputError(f"job {job_id} is a {job.kind!r} job, not {kind!r}")
        store.set_state(job_id, "running")
        try:
            archive = archive or open_archive(settings)
            # The model starts only when the job needs it (a stored summary does not).
            output, markdown = work(job.params, archive, lambda: llm or get_llm(settings))
        except MediaIndexError as exc:
            store.set_state(job_id, "failed", error=str(exc))
        except Exception as exc:  # the job record must say why it failed, whatever the cause
            log.exception("%s job %s failed", kind, job_id)
            store.set_state(job_id, "failed", error=f"{type(exc).__name__}: {exc}")
        else:
            store.set_state(job_id, "done", result={"output": output, "markdown": markdown})
        return store.get(job_id)
    finally:
        if own_archive and archive is not None:
            archive.index.close()
        store.close()


def result_json(job: Job) -> str:
    return json.dumps(job.result["output"] if job.result else None, ensure_ascii=False, indent=2)
