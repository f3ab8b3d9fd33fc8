"""Agentic jobs: per-video summaries with chapters, and questions answered with cited moments.

The language model runs in the serving engine (`mediaindex.serving.LLMEngine`) inside a Ray actor
(`mediaindex.agents.llm.LLMActor`). Jobs are persisted in the index directory's job store
(`mediaindex.jobs.JobStore.of(settings)`) and run by `mediaindex.agents.jobs`; the faces reach them through the
service's `Archive` (`mediaindex.service.archive`). `VideoSummary.model_json_schema()` /
`Answer.model_json_schema()` describe a job's output.
"""

from mediaindex.agents.ask import AgentInputError, ask
from mediaindex.agents.events import AgentEvent
from mediaindex.agents.jobs import (
    ASK,
    SUMMARIZE,
    get_llm,
    run_ask_job,
    run_summarize_job,
    submit_ask,
    submit_summarize,
)
from mediaindex.agents.schema import Answer, VideoSummary
from mediaindex.agents.stored import stored_summary
from mediaindex.agents.summarize import summarize
from mediaindex.agents.tools import Archive

__all__ = [
    "ASK", "SUMMARIZE", "AgentEvent", "AgentInputError", "Answer", "Archive", "VideoSummary", "ask", "get_llm",
    "run_ask_job", "run_summarize_job", "stored_summary", "submit_ask", "submit_summarize",
    "summarize",
]
