"""Agentic jobs: per-video summaries with chapters, and questions answered with cited moments.

The language model runs in the serving engine (`mediaindex.serving.LLMEngine`) inside a Ray actor
(`mediaindex.agents.llm.LLMActor`). Jobs are persisted in the index directory's job store
(`mediaindex.jobs.JobStore.of(settings)`) and run by `mediaindex.agents.jobs`; the faces reach them through the
service's `Archive` (`mediaindex.service.archive`). `VideoSummary.model_json_schema()` /
`Answer.model_json_schema()` describe a job's output.
"""
