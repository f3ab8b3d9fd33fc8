"""`ingest()` on the in-process pipeline: the real decode, speech and embed stages on threads, no Ray.

A cancel request stops the job at a file boundary: the finished files stay indexed, the others wait, charged
nothing, for a resume that indexes them.
"""

from __future__ import annotations

import shutil
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


def test_a_moved_file_keeps_its_segments_and_a_copy_runs_through_no_stage(tmp_path: Path, cache_dir: Path,
                                                                         embedder) -> None:
    """Renamed into a new folder, a file's entry follows it (found by its bytes among the indexed files of its
    size whose path is gone); a copy of an indexed file is said to be one. Neither goes through a stage."""
    settings = make_settings(tmp_path / "idx", cache_dir, vision={"enabled": False})
    settings.index_dir.mkdir(parents=True)
    pipeline = InProcessPipeline(settings)
    folder = tmp_path / "archive"
    folder.mkdir()
    for clip in ("audio/jfk.flac", "audio/LJ002-0035.wav"):
        shutil.copyfile(media(clip), folder / Path(clip).name)
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        assert len(ingest(IngestRequest(settings, [folder]), index, pipeline).indexed) == 2
        jfk = index.catalog.by_source(str(folder / "jfk.flac"))
        assert jfk is not None
        before = index.store.segments_of(jfk.video_id)

        (folder / "speeches").mkdir()
        moved = folder / "speeches" / "kennedy.flac"
        (folder / "jfk.flac").rename(moved)
        shutil.copyfile(folder / "LJ002-0035.wav", folder / "speeches" / "copy.wav")
        planned: list[int] = []
        report = ingest(IngestRequest(settings, [folder]), index, pipeline, IngestHooks(on_plan=planned.append))
        assert planned == [0]
        assert {Path(o.path).name: (o.status, o.reason) for o in report.outcomes} == {
            "LJ002-0035.wav": ("unchanged", "already indexed"),
            "copy.wav": ("unchanged", f"same content as {folder / 'LJ002-0035.wav'}"),
            "kennedy.flac": ("unchanged", f"moved from {folder / 'jfk.flac'}; its segments follow it")}
        assert index.catalog.get(jfk.video_id).source == str(moved)
        assert sorted(r.source for r in index.catalog.all()) == [str(folder / "LJ002-0035.wav"), str(moved)]
        after = index.store.segments_of(jfk.video_id)
        assert [p["text"] for p in after] == [p["text"] for p in before] and {p["source"] for p in after} == {str(moved)}


def test_a_manifest_edited_since_gives_its_new_values_without_indexing_again(tmp_path: Path, cache_dir: Path,
                                                                            embedder) -> None:
    """Values a job gives an indexed, unchanged file are set in place, through no stage; keys it does not give keep
    theirs, also through a folder's walk, a file indexed again and a file moved; a search may ask for them."""
    from mediaindex.index.filters import SearchFilters

    settings = make_settings(tmp_path / "idx", cache_dir, vision={"enabled": False})
    settings.index_dir.mkdir(parents=True)
    pipeline = InProcessPipeline(settings)
    folder = tmp_path / "archive"
    folder.mkdir()
    shutil.copyfile(media("audio/jfk.flac"), folder / "jfk.flac")
    manifest = folder / "talks.csv"

    def run(*inputs: Path, reindex: bool = False) -> dict[str, tuple[str, str, int]]:
        """The file's status and reason, and how many files went through the stages."""
        run_settings = settings.model_copy(update={"ingest": settings.ingest.model_copy(update={"reindex": reindex})})
        planned: list[int] = []
        report = ingest(IngestRequest(run_settings, [p for p in inputs if p.suffix not in (".csv", ".jsonl")],
                                      manifests=[p for p in inputs if p.suffix in (".csv", ".jsonl")]),
                        index, pipeline, IngestHooks(on_plan=planned.append))
        return {Path(o.path).name: (o.status, o.reason, planned[0]) for o in report.outcomes
                if o.path.endswith(".flac")}

    def holds(key: str, value: str) -> bool:
        return index.store.count(SearchFilters(metadata=((key, value),))) == len(index.store.segments_of(jfk))

    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        manifest.write_text("path,title,tags\njfk.flac,Inaugural,speech;1961\n")
        assert run(manifest)["jfk.flac"][::2] == ("indexed", 1)
        jfk = index.catalog.by_source(str(folder / "jfk.flac")).video_id
        assert index.catalog.get(jfk).metadata == {"title": "Inaugural", "tags": ["speech", "1961"]}

        manifest.write_text("path,title,year\njfk.flac,Inaugural address,1961\n")
        assert run(manifest) == {"jfk.flac": ("unchanged", "already indexed; its metadata updated (title, year)", 0)}
        assert index.catalog.get(jfk).metadata == {"title": "Inaugural address", "tags": ["speech", "1961"],
                                                   "year": "1961"}
        assert holds("title", "Inaugural address") and holds("year", "1961") and holds("tags", "speech")
        assert not holds("title", "Inaugural")
        assert all(p["extra"]["words"] for p in index.store.segments_of(jfk, modality="speech"))  # the stage's own

        assert run(manifest) == run(folder) == {"jfk.flac": ("unchanged", "already indexed", 0)}
        assert run(folder, reindex=True)["jfk.flac"][::2] == ("indexed", 1)
        assert index.catalog.get(jfk).metadata["title"] == "Inaugural address" and holds("year", "1961")

        # Moved, and named by the manifest at its new path with a new value: it follows, through no stage.
        (folder / "talks").mkdir()
        (folder / "jfk.flac").rename(folder / "talks" / "jfk.flac")
        manifest.write_text("path,title\ntalks/jfk.flac,The inaugural address\n")
        assert run(manifest)["jfk.flac"] == ("unchanged", f"moved from {folder / 'jfk.flac'}; its segments follow it", 0)
        assert index.catalog.get(jfk).source == str(folder / "talks" / "jfk.flac")
        assert holds("title", "The inaugural address") and holds("year", "1961")

        # A JSON manifest's null takes a key away (a CSV's blank cell gives no value: the key stays).
        listed = folder / "talks.jsonl"
        listed.write_text('{"path": "talks/jfk.flac", "year": null, "tags": ["speech"]}\n')
        assert run(listed) == {"jfk.flac": ("unchanged", "already indexed; its metadata updated (year, tags)", 0)}
        assert index.catalog.get(jfk).metadata == {"title": "The inaugural address", "tags": ["speech"]}
        assert not holds("year", "1961") and holds("tags", "speech") and not holds("tags", "1961")
        assert run(listed) == {"jfk.flac": ("unchanged", "already indexed", 0)}  # taken away once
        manifest.write_text("path,title,year\ntalks/jfk.flac,The inaugural address,\n")
        assert run(manifest) == {"jfk.flac": ("unchanged", "already indexed", 0)}
