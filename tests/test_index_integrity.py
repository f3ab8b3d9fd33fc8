"""Vectors and catalog agree after any kill or damage: a reset stopped midway is finished, leftovers of an
unfinished write are removed, lost segments are reported with the fix (or re-indexed by an ingest), and a
full disk is refused with a message before the engine writes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mediaindex.config import Settings
from mediaindex.errors import IndexCorruptError, IndexDiskFullError
from mediaindex.index.catalog import Catalog, VideoRecord
from mediaindex.index.filters import SearchFilters
from mediaindex.index.index import IndexMissingError, MediaIndex, open_index
from mediaindex.index.reset import INDEX_PARTS, RESET_MARKER, reset_index, reset_pending
from mediaindex.segments import Segment
from tests.conftest import cli_environment, make_settings
from tests.corpus import manifesto
from tests.test_cli import run

FILES, PER_FILE, DIM = 4, 12, 16


def _build(settings: Settings) -> None:
    texts = [s.text for s in manifesto()]
    rng = np.random.default_rng(0)
    with MediaIndex(settings, DIM, "integrity-test", extra_dims={}) as index:
        for f in range(FILES):
            vid, source = f"video{f:03d}", f"/archive/video{f:03d}.mp4"
            segs = [Segment(vid, source, i * 2.0, i * 2.0 + 2.0, "speech", texts[(f + i) % len(texts)], "en")
                    for i in range(PER_FILE)]
            index.replace_video(VideoRecord(vid, source, vid, 1, 1, None, "en", PER_FILE, {}, 0.0), segs,
                                rng.normal(size=(PER_FILE, DIM)).astype(np.float32))


def _open(settings: Settings, **kwargs) -> MediaIndex:
    return open_index(settings, DIM, "integrity-test", extra_dims={}, **kwargs)


@pytest.fixture
def built(tmp_path: Path, cache_dir: Path) -> Settings:
    settings = make_settings(tmp_path / "index", cache_dir)
    _build(settings)
    return settings


@pytest.mark.parametrize("deleted", range(len(INDEX_PARTS) + 1))
def test_a_reset_stopped_after_any_step_is_finished_by_the_next_open(built: Settings, deleted: int) -> None:
    index_dir = built.index_dir
    (index_dir / RESET_MARKER).write_text("")  # what reset_index writes first
    for name in INDEX_PARTS[:deleted]:  # the parts deleted before the kill
        target = index_dir / name
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    with pytest.raises(IndexMissingError, match="no index at"):
        _open(built, must_exist=True)
    assert not reset_pending(index_dir)
    assert not any((index_dir / name).exists() for name in INDEX_PARTS)
    with _open(built) as index:  # an ingest starts from nothing: no catalog entry survives its vectors
        assert index.catalog.count() == 0 and index.store.count() == 0


def test_reset_deletes_the_index_and_keeps_the_job_records(built: Settings) -> None:
    (built.index_dir / "jobs.db").write_bytes(b"")
    reset_index(built.index_dir)
    # The lease file stays too: other processes may be waiting on its lock.
    assert sorted(p.name for p in built.index_dir.iterdir()) == ["holder.lock", "jobs.db"]


def test_leftovers_of_an_unfinished_write_are_removed_on_open(built: Settings) -> None:
    # A kill between a file's points and its catalog entry: the points belong to no indexed file.
    catalog = Catalog(built.index_dir / "catalog.db")
    catalog.delete("video002")
    catalog.close()
    with _open(built, must_exist=True) as index:
        assert index.agreement.orphan_points == PER_FILE
        assert index.store.count() == (FILES - 1) * PER_FILE == sum(r.segments for r in index.catalog.all())
        assert index.store.count(SearchFilters(video_id="video002")) == 0


def test_a_summary_written_without_its_count_is_recounted(built: Settings) -> None:
    catalog = Catalog(built.index_dir / "catalog.db")
    record = catalog.get("video001")
    assert record is not None
    catalog.upsert(VideoRecord(**{**record.__dict__, "segments": PER_FILE - 3}))
    catalog.close()
    with _open(built, must_exist=True) as index:
        assert [r.video_id for r in index.agreement.recounted] == ["video001"]
        assert index.catalog.get("video001").segments == PER_FILE  # type: ignore[union-attr]


def test_lost_segments_are_reported_to_readers_and_re_indexed_by_an_ingest(built: Settings) -> None:
    with _open(built) as index:
        index.store.delete_video("video003")  # the catalog still lists it: its data is gone
    with pytest.raises(IndexCorruptError, match=r"1 of its 4 files .*video003\.mp4.*backup.*mediaindex ingest"):
        _open(built, must_exist=True)
    with _open(built, repair=True) as index:  # an ingest: the file is no longer "already indexed"
        assert index.catalog.get("video003") is None
        assert index.catalog.count() == FILES - 1
    with _open(built, must_exist=True) as index:
        assert index.agreement.whole


def test_a_truncated_id_tracker_is_an_error_not_an_empty_index(built: Settings) -> None:
    trackers = [p for p in (built.index_dir / "qdrant").rglob("*") if p.is_file() and "id_tracker" in p.name]
    assert trackers
    for p in trackers:
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 3])
    # Checked on open: never an index that opens and answers nothing.
    with pytest.raises(IndexCorruptError, match=r"(cannot be read|missing).*(index reset|backup)"):
        _open(built, must_exist=True)


def _mount_tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    return done.returncode == 0


def test_a_full_disk_is_refused_with_a_message_and_the_index_opens_once_space_is_freed(
        tmp_path: Path, cache_dir: Path) -> None:
    disk = tmp_path / "small-disk"
    if not _mount_tmpfs(disk, "300m"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        settings = make_settings(disk / "index", cache_dir)
        _build(settings)
        free = shutil.disk_usage(disk).free
        filler = disk / "filler"
        with open(filler, "wb") as f:  # leave a few MB: less than the engine's pre-sized files may take
            f.write(b"\0" * (free - 4 * 1024**2))
        with pytest.raises(IndexDiskFullError, match=r"has \d+ MB free.*Free some space and run the command again"):
            _open(settings, must_exist=True)
        filler.unlink()
        with _open(settings, must_exist=True) as index:
            assert index.store.count() == FILES * PER_FILE and index.agreement.whole
            seg = Segment("video009", "/archive/video009.mp4", 0.0, 2.0, "speech", "one more file", "en")
            with open(filler, "wb") as f:
                f.write(b"\0" * (shutil.disk_usage(disk).free - 4 * 1024**2))
            with pytest.raises(IndexDiskFullError, match="MB free"):
                index.store.upsert([seg], np.ones((1, DIM), dtype=np.float32))
            filler.unlink()
            assert index.store.count() == FILES * PER_FILE
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_cli_reset_refuses_a_held_index_and_a_stopped_reset_reads_as_no_index(built: Settings, cache_dir: Path,
                                                                              tmp_path: Path) -> None:
    env = cli_environment(built.index_dir, cache_dir, tmp_path / "t")
    with _open(built, must_exist=True):  # this process holds the index, as a running ingest would
        held = run("index", "reset", "--yes", env=env)
    assert held.returncode == 2 and "is held by" in " ".join(held.stderr.split()) and "Traceback" not in held.stderr
    assert (built.index_dir / "catalog.db").exists()

    (built.index_dir / RESET_MARKER).write_text("")  # killed after its first write, before any deletion
    for args in (["index", "stats"], ["search", "anything"]):
        stopped = run(*args, env=env)
        said = " ".join(stopped.stderr.split())
        assert stopped.returncode == 2 and "no index at" in said and "Traceback" not in said
    assert not any((built.index_dir / name).exists() for name in (*INDEX_PARTS, RESET_MARKER))
    again = run("index", "reset", "--yes", env=env)
    assert again.returncode == 0 and "nothing to reset" in again.stdout


class _Stop(Exception):
    """Where the process would have died."""


def _reindexed(video_id: str) -> tuple[VideoRecord, list[Segment], np.ndarray]:
    segs = [Segment(video_id, "/archive/video001.mp4", i * 3.0, i * 3.0 + 3.0, "speech", f"changed words {i}", "en")
            for i in range(PER_FILE + 5)]
    record = VideoRecord(video_id, "/archive/video001.mp4", video_id, 2, 2, None, "en", len(segs), {}, 0.0)
    return record, segs, np.random.default_rng(1).normal(size=(len(segs), DIM)).astype(np.float32)


@pytest.mark.parametrize("stopped_at", ["catalog.upsert", "catalog.set_words", "store.delete_video"])
def test_re_indexing_a_changed_file_leaves_its_old_state_or_its_new_one(built: Settings, stopped_at: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    record, segs, vectors = _reindexed("changed001")
    with _open(built) as index:
        part, method = stopped_at.split(".")
        real = getattr(getattr(index, part), method)

        def stop(video_id: str, *args: object) -> object:
            if method != "delete_video" or video_id == "video001":  # the old points' deletion is the last step
                raise _Stop
            return real(video_id, *args)

        monkeypatch.setattr(getattr(index, part), method, stop)
        with pytest.raises(_Stop):
            index.replace_video(record, segs, vectors)
        monkeypatch.undo()
    with _open(built, must_exist=True) as index:
        entry = index.catalog.by_source("/archive/video001.mp4")
        assert entry is not None and index.agreement.orphan_points > 0
        old, new = index.store.count(SearchFilters(video_id="video001")), index.store.count(
            SearchFilters(video_id="changed001"))
        if entry.video_id == "video001":
            assert (old, new) == (PER_FILE, 0)
        else:
            assert entry.video_id == "changed001" and (old, new) == (0, PER_FILE + 5)
        assert index.store.count() == sum(r.segments for r in index.catalog.all())


@pytest.mark.slow
def test_ingest_indexes_again_a_file_whose_segments_were_lost(tmp_path: Path, cache_dir: Path, embedder,
                                                              copy_media) -> None:
    clip = copy_media("audio/jfk.flac")
    env = {**cli_environment(tmp_path / "index", cache_dir, tmp_path / "t"), "MEDIAINDEX_VISION__ENABLED": "false"}
    first = run("ingest", str(clip), env=env)
    assert first.returncode == 0, first.stderr
    settings = make_settings(tmp_path / "index", cache_dir, vision={"enabled": False})
    with open_index(settings, embedder.dim, embedder.name, must_exist=True) as index:
        (record,) = index.catalog.all()
        index.store.delete_video(record.video_id)  # its vectors are gone; the catalog still lists it
    found = run("search", "ask not what your country can do for you", env=env)
    assert found.returncode == 2 and "segments are missing" in " ".join(found.stderr.split())
    again = run("ingest", str(clip), env=env)
    assert again.returncode == 0, again.stderr
    assert "already indexed" not in again.stderr and "1 file indexed" in again.stderr
    with open_index(settings, embedder.dim, embedder.name, must_exist=True) as index:
        assert index.agreement.whole and index.store.count() == index.catalog.all()[0].segments > 0
