"""`ingest()` on the in-process pipeline: the real decode, speech and embed stages on threads, no Ray.

A cancel request stops the job at a file boundary: the finished files stay indexed, the others wait, charged
nothing, for a resume that indexes them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mediaindex.index.index import MediaIndex
from mediaindex.jobs import JobStore
from mediaindex.pipeline.inprocess import InProcessPipeline
from mediaindex.service import FileOutcome, IngestHooks, IngestRequest, ingest
from tests.conftest import make_settings, media

pytestmark = pytest.mark.slow

CLIPS = ["audio/jfk.flac", "audio/LJ002-0020.wav", "audio/LJ002-0035.wav"]


def test_a_cancelled_job_keeps_its_finished_files_and_resumes_the_rest(tmp_path: Path, cache_dir: Path,
                                                                       embedder) -> None:
    settings = make_settings(tmp_path / "idx", cache_dir, vision={"enabled": False},
                             ray={"max_files_in_flight": 1})
    settings.index_dir.mkdir(parents=True)
    pipeline = InProcessPipeline(settings)
    assert [s.name for s in pipeline.stages] == ["decode", "speech", "embed"]
    jobs = JobStore(settings.index_dir / "jobs.db")
    job_ids: list[str] = []

    def cancel_after_first(outcome: FileOutcome) -> None:
        jobs.request_cancel(job_ids[0])  # as `jobs cancel` or DELETE /jobs/{id} would, from another process

    files = [media(c) for c in CLIPS]
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        report = ingest(IngestRequest(settings, files, jobs=jobs), index, pipeline,
                        IngestHooks(on_job=job_ids.append, on_file=cancel_after_first))
        (job_id,) = job_ids
        assert report.cancelled and [(Path(o.path).name, o.status) for o in report.outcomes] == [("jfk.flac",
                                                                                                  "indexed")]
        assert jobs.get(job_id).state == "cancelled"
        states = {Path(f.path).name: (f.state, f.attempts) for f in jobs.files(job_id)}
        assert states == {"jfk.flac": ("done", 1), "LJ002-0020.wav": ("pending", 0), "LJ002-0035.wav": ("pending", 0)}
        assert [r.source for r in index.catalog.all()] == [str(files[0])]
        hits = index.store.segments_of(report.outcomes[0].video_id, modality="speech")
        assert any("ask not what your country can do for you" in h["text"].lower() for h in hits)

        resumed = ingest(IngestRequest(settings, resume=job_id, jobs=jobs), index, pipeline,
                         IngestHooks(cancelled=lambda: False))
        assert sorted(Path(o.path).name for o in resumed.indexed) == ["LJ002-0020.wav", "LJ002-0035.wav"]
    jobs.close()
