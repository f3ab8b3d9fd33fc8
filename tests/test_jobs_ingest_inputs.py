"""What an ingest job covers: folders with globs, manifests (text, CSV, JSONL) and their errors. No Ray."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mediaindex.config import load_settings
from mediaindex.errors import ConfigError
from mediaindex.jobs import JobStore
from mediaindex.pipeline.inputs import InputError, ManifestError, plan_inputs, read_manifest
from mediaindex.pipeline.job import GLOBS_LEFT_OUT
from mediaindex.pipeline.run import create_job
from tests.conftest import MEDIA, make_settings, media


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """A small folder tree of links to real media (links: no copies of the media)."""
    root = tmp_path / "archive"
    for rel, target in [
        ("talks/jfk.flac", "audio/jfk.flac"),
        ("talks/drafts/english.wav", "audio/english.wav"),
        ("films/chaplin.mp4", "video/chaplin.mp4"),
        ("films/cockatoo.mp4", "video/cockatoo.mp4"),
    ]:
        link = root / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(media(target))
    (root / "talks" / "notes.txt").write_text("not media")
    return root


def _names(plan) -> list[str]:
    return sorted(Path(p).name for p, _ in plan.files)


def test_folders_are_walked_with_include_and_exclude_globs(archive: Path) -> None:
    assert _names(plan_inputs([archive])) == ["chaplin.mp4", "cockatoo.mp4", "english.wav", "jfk.flac"]
    assert _names(plan_inputs([archive], include=["*.mp4"])) == ["chaplin.mp4", "cockatoo.mp4"]
    assert _names(plan_inputs([archive], exclude=["talks/drafts/*"])) == ["chaplin.mp4", "cockatoo.mp4", "jfk.flac"]
    assert _names(plan_inputs([archive], include=["talks/*"], exclude=["english.*"])) == ["jfk.flac"]
    assert _names(plan_inputs([archive], include=["*.mkv"])) == []  # matches nothing: an empty job, no error
    # What the globs leave out is counted, so that an empty job can say why.
    assert [plan_inputs([archive], **globs).left_out for globs in (
        {}, {"include": ["*.mp4"]}, {"include": ["*.mkv"]}, {"include": ["talks/*"], "exclude": ["english.*"]})] == [0, 2, 4, 3]


def test_plain_manifest_resolves_relative_paths_and_reports_missing_ones(archive: Path) -> None:
    manifest = archive / "list.txt"
    manifest.write_text("# the talks\ntalks/jfk.flac\n\n  films  \nmissing.mp4\ntalks/jfk.flac\n")
    plan = plan_inputs(manifests=[manifest])
    assert _names(plan) == ["chaplin.mp4", "cockatoo.mp4", "jfk.flac"]  # a folder entry is walked; no doubles
    assert plan.skipped == [(str(archive / "missing.mp4"), "file not found")]


def test_csv_and_jsonl_manifests_carry_metadata(tmp_path: Path) -> None:
    csv_manifest = tmp_path / "a.csv"
    csv_manifest.write_text(f"path,title,tags,year\n{media('audio/jfk.flac')},Inaugural,speech; 1961,1961\n"
                            f"{media('video/chaplin.mp4')},,,\n")
    rows = dict(read_manifest(csv_manifest))
    assert rows[str(media("audio/jfk.flac"))] == {"title": "Inaugural", "tags": ["speech", "1961"], "year": "1961"}
    assert rows[str(media("video/chaplin.mp4"))] == {}  # empty cells are no metadata

    jsonl = tmp_path / "b.jsonl"
    jsonl.write_text(json.dumps({"path": str(media("audio/jfk.flac")), "title": "JFK", "tags": ["speech"],
                                 "year": 1961, "public": True}) + "\n\n")
    assert read_manifest(jsonl) == [(str(media("audio/jfk.flac")), {"title": "JFK", "tags": ["speech"],
                                                                     "year": 1961, "public": True})]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.txt", "# only a comment\n\n", "lists no files"),
        ("nopath.csv", "file,title\na.mp4,A\n", "needs a header row with a 'path' column"),
        ("blank.csv", "path,title\n,A\n", "line 2: empty 'path'"),
        ("wide.csv", "path,title\na.mp4,A,extra\n", "line 2: more fields than the header has"),
        ("bad.jsonl", '{"path": "a.mp4"}\n{"path": \n', "line 2: not valid JSON"),
        ("list.jsonl", '["a.mp4"]\n', "line 1: each line must be a JSON object"),
        ("nopath.jsonl", '{"title": "A"}\n', "line 1: 'path' must be a non-empty string"),
        ("nested.jsonl", '{"path": "a.mp4", "title": {"en": "A"}}\n', "metadata 'title' must be a string"),
        ("reserved.jsonl", '{"path": "a.mp4", "words": "x"}\n', "'words' cannot be used as a metadata key"),
        ("web.csv", "path,title\na.mp4,A\nhttps://example.org/b.mp4,B\n",
         "lists a web address (https://example.org/b.mp4): it is downloaded first, by `mediaindex ingest "
         "--manifest` or a server's ingest job"),
        ("ftp.txt", "a.mp4\nftp://example.org/b.mp4\n",
         "lists ftp://example.org/b.mp4: ftp:// addresses are not read; give files, folders or http(s) addresses"),
    ],
)
def test_bad_manifests_are_refused_with_file_and_line(tmp_path: Path, name: str, content: str, message: str) -> None:
    manifest = tmp_path / name
    manifest.write_text(content)
    with pytest.raises(ManifestError, match=str(manifest).replace(".", r"\.")) as info:
        plan_inputs(manifests=[manifest])
    assert message in str(info.value)


def test_unreadable_manifests_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="manifest not found"):
        read_manifest(tmp_path / "nope.txt")
    with pytest.raises(ManifestError, match="is a folder"):
        read_manifest(tmp_path)
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ManifestError, match="not UTF-8"):
        read_manifest(binary)


def test_bad_globs_and_no_inputs_are_refused() -> None:
    with pytest.raises(InputError, match="glob is empty"):
        plan_inputs([MEDIA], include=[" "])
    with pytest.raises(InputError, match="nothing to ingest"):
        plan_inputs([])


def test_a_bad_manifest_creates_no_job(tmp_path: Path, cache_dir: Path, archive: Path) -> None:
    settings = make_settings(tmp_path / "idx", cache_dir)
    jobs = JobStore(tmp_path / "jobs.db")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json}\n")
    with pytest.raises(ManifestError):
        create_job(jobs, settings, [archive], manifests=[bad])
    assert jobs.list() == []
    job_id = create_job(jobs, settings, [archive, tmp_path / "gone.mp4"], include=["*.flac"])
    states = {Path(f.path).name: (f.state, f.reason) for f in jobs.files(job_id)}
    assert states == {"jfk.flac": ("pending", ""), "gone.mp4": ("skipped", "file not found"),
                      "notes.txt": ("skipped", "unsupported type (.txt)")}
    assert jobs.get(job_id).params["include"] == ["*.flac"]
    assert jobs.get(job_id).params[GLOBS_LEFT_OUT] == 3  # chaplin.mp4, cockatoo.mp4, english.wav


def test_stage_resources_come_from_the_profile(cache_dir: Path, tmp_path: Path) -> None:
    from mediaindex.pipeline.spec import default_stages

    cpu = {s.name: (s.workers, s.cpus, s.gpus) for s in default_stages(make_settings(tmp_path, cache_dir))}
    assert cpu["decode"] == (1, 0.5, 0.0) and cpu["speech"] == (1, 1.0, 0.0)
    assert list(cpu)[0] == "decode" and list(cpu)[-1] == "embed"
    gpu = load_settings("gpu", cache_dir=cache_dir)
    assert {s.name: s.gpus for s in default_stages(gpu)}["speech"] == 0.25  # speech.device is cuda there
    on_cpu = load_settings("gpu", cache_dir=cache_dir, speech={"device": "cpu"})
    assert {s.name: s.gpus for s in default_stages(on_cpu)}["speech"] == 0.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"ray": {"stages": {"speech": {"workers": 0}}}}, "ray.stages.speech.workers"),
        ({"ray": {"stages": {"vision": {"gpus": -0.5}}}}, "ray.stages.vision.gpus"),
        ({"ray": {"max_files_in_flight": 0}}, "ray.max_files_in_flight"),
        ({"ray": {"stages": {"ocr": {"cpus": 1}}}}, "ray.stages.ocr: Extra inputs are not permitted"),
        ({"ray": {"stages": {"decode": {"nice": -5}}}}, "ray.stages.decode.nice"),
        ({"ray": {"stages": {"decode": {"nice": 20}}}}, "ray.stages.decode.nice"),
        ({"ray": {"stages": {"speech": {"threads": "many"}}}}, "ray.stages.speech.threads"),
        # The flat keys of earlier versions name their new place.
        ({"ray": {"speech_workers": 2}}, "ray.speech_workers is now ray.stages.speech.workers"),
        ({"ray": {"llm_gpus": 0.5}}, "ray.llm_gpus is now ray.stages.summary.gpus"),
        ({"ray": {"stage_nice": {"decode": 4}}}, "ray.stage_nice is now ray.stages.<stage>.nice"),
        ({"ingest": {"max_retries": -1}}, "ingest.max_retries"),
        ({"ingest": {"file_timeout": 0}}, "ingest.file_timeout"),
    ],
)
def test_bad_ray_and_ingest_settings_are_refused(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_settings("cpu", **overrides)


def test_live_display_shows_media_hours_eta_and_stage_speeds() -> None:
    import io

    from rich.console import Console

    from mediaindex.cli.progress import IngestDisplay
    from mediaindex.pipeline.progress import IngestStats, StageStats
    from mediaindex.pipeline.run import FileOutcome

    buffer = io.StringIO()
    display = IngestDisplay(Console(file=buffer, force_terminal=True, width=160))
    stats = IngestStats("j1", total=4, stages=[StageStats("decode", 1, 2, 10.0, 1800.0),
                                               StageStats("speech", 2, 2, 600.0, 1800.0)])
    stats.done, stats.media, stats.started = 2, 1800.0, stats.started - 60
    with display:
        display.on_job("j1")
        display.on_plan(4)
        display.on_file(FileOutcome("/m/a.mp4", "indexed", segments=3))
        display.on_file(FileOutcome("/m/b.mp4", "summarised", segments=4))
        display.on_tick(stats)
        display.progress.refresh()
    text = buffer.getvalue()
    assert "job j1" in text and "indexed    /m/a.mp4: 3 segments" in text
    assert "summarised /m/b.mp4: 4 summary and chapter segments added" in text
    assert "0:30:00 of media" in text and "ETA 0:01:00" in text
    assert "decode 180.0x" in text and "speech 6.0x" in text  # media s per busy s, times the pool's actors


def test_only_stages_that_did_real_work_show_a_speed() -> None:
    """An audio job, as one was measured: the pictures and the decode had next to nothing to do (0.2 ms
    and 24 ms for 11 s of audio: "vision 31326.3x" said nothing); speech took most of the run."""
    from mediaindex.pipeline.progress import IngestStats, StageStats

    stages = [StageStats("decode", 1, 1, 0.0224, 11.0), StageStats("vision", 1, 1, 0.00035, 11.0),
              StageStats("speech", 1, 1, 3.1, 11.0), StageStats("embed", 1, 1, 0.0283, 11.0)]
    stats = IngestStats("j2", total=1, stages=stages, done=1, media=11.0)
    stats.started -= 6.0
    assert stats.speeds() == ["speech 3.5x"]
    assert stats.line().endswith("0:00:11 of media in 0:00:06; speech 3.5x")
    # Over a long job a stage busy a second in all, a sliver of the hour, still shows nothing; one that
    # kept its two workers busy for a tenth of it shows its (high) speed: that stage is keeping up.
    stats = IngestStats("j3", total=500, stages=[StageStats("vision", 1, 400, 1.5, 7200.0),
                                                 StageStats("decode", 2, 400, 720.0, 7200.0)])
    stats.started -= 3600.0
    assert stats.speeds() == ["decode 20.0x"]
    assert StageStats("speech", 1).speed_worth_showing(10.0) is None  # nothing finished yet


def test_resume_refuses_other_kinds_of_job_and_another_index(tmp_path: Path, cache_dir: Path, embedder) -> None:
    from mediaindex.index.index import MediaIndex
    from mediaindex.jobs import JobNotFound
    from mediaindex.service import IngestRequest, ingest

    first = make_settings(tmp_path / "a", cache_dir)
    other = make_settings(tmp_path / "b", cache_dir)
    jobs = JobStore(tmp_path / "jobs.db")
    job_id = create_job(jobs, first, [media("audio/jfk.flac")])
    ask = jobs.create("ask", {"question": "q"}).id
    with MediaIndex(other, embedder.dim, embedder.name) as index:
        with pytest.raises(InputError, match=f"job {job_id} writes to the index at .*a; resume it with --index"):
            ingest(IngestRequest(other, resume=job_id, jobs=jobs), index)
        with pytest.raises(InputError, match=f"job {ask} is a ask job, not an ingest job"):
            ingest(IngestRequest(other, resume=ask, jobs=jobs), index)
        with pytest.raises(JobNotFound):
            ingest(IngestRequest(other, resume="nope", jobs=jobs), index)
    assert {f.state for f in jobs.files(job_id)} == {"pending"}  # nothing lost, nothing started


def test_reindex_plans_unchanged_files_again_and_a_resume_keeps_it(tmp_path: Path, cache_dir: Path, embedder) -> None:
    """An unchanged file is left alone unless the job re-indexes; one indexed by an earlier version of the
    stages says so; a job started with --reindex resumes with it."""
    from mediaindex.index.catalog import VideoRecord
    from mediaindex.index.index import MediaIndex
    from mediaindex.pipeline.job import resumable, with_choices
    from mediaindex.pipeline.plan import EARLIER_ANALYSIS, Outcome, plan_file
    from mediaindex.segments import ANALYSIS_VERSION

    settings = make_settings(tmp_path / "i", cache_dir)
    again = with_choices(settings, reindex=True)
    assert (again.ingest.reindex, settings.ingest.reindex, again.ingest.summaries) == (True, False, False)
    assert with_choices(settings) is settings and with_choices(settings, summaries=False) is settings
    jobs = JobStore(tmp_path / "jobs.db")
    path = media("audio/jfk.flac")
    stat = path.stat()
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        for version, reason in ((ANALYSIS_VERSION, "already indexed"), (ANALYSIS_VERSION - 1, EARLIER_ANALYSIS)):
            index.catalog.upsert(VideoRecord("v1", str(path), "h", stat.st_size, stat.st_mtime_ns, 11.0, "en", 3,
                                             {}, 0.0, analysis=version))
            (f,) = jobs.files(create_job(jobs, settings, [path]))
            plan = plan_file(f, index, settings)
            assert (plan.outcome, plan.reason) == (Outcome.UNCHANGED, reason)
            assert plan_file(f, index, again).outcome is Outcome.NEW
        assert index.catalog.earlier_analysis(ANALYSIS_VERSION) == 1
    started = create_job(jobs, again, [path])
    assert jobs.get(started).params["reindex"] is True
    assert resumable(jobs, started, settings).ingest.reindex is True
    assert resumable(jobs, create_job(jobs, settings, [path]), settings).ingest.reindex is False


def test_a_catalog_from_before_analysis_versions_opens_with_its_files_as_version_1(tmp_path: Path) -> None:
    import sqlite3

    from mediaindex.index.catalog import Catalog

    path = tmp_path / "catalog.db"
    with sqlite3.connect(path) as db:  # the table as earlier versions created it, with one file
        db.execute("CREATE TABLE videos (video_id TEXT PRIMARY KEY, source TEXT UNIQUE NOT NULL, content_hash TEXT "
                   "NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, duration REAL, language TEXT, "
                   "segments INTEGER NOT NULL, probe TEXT, indexed_at REAL NOT NULL)")
        db.execute("INSERT INTO videos VALUES ('v1', '/m/a.mp4', 'h', 1, 1, 2.0, 'en', 4, '{}', 0.0)")
    db.close()
    catalog = Catalog(path)
    record = catalog.get("v1")
    assert record is not None and record.analysis == 1 and record.segments == 4
    assert catalog.earlier_analysis(2) == 1
    catalog.close()
    second = Catalog(path)  # opened again: the column is there, nothing changes
    assert second.get("v1") == record
    second.close()
