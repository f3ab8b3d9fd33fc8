"""Killing a writer mid-ingest (SIGKILL) loses nothing reported done, duplicates nothing, corrupts nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from mediaindex.index.filters import SearchFilters
from mediaindex.index.index import MediaIndex
from tests.conftest import REPO, make_settings

FILES, PER_FILE, DIM = 40, 30, 16

# Writes FILES files of PER_FILE segments the way ingest does (skip what the catalog has, replace the
# rest) and reports each file once it is written.
WRITER = textwrap.dedent(f"""
    import sys, numpy as np
    from mediaindex.config import load_settings
    from mediaindex.index.catalog import VideoRecord
    from mediaindex.index.index import MediaIndex
    from mediaindex.segments import Segment
    from tests.corpus import manifesto

    texts = [s.text for s in manifesto()]
    rng = np.random.default_rng(0)
    with MediaIndex(load_settings("cpu"), {DIM}, "crash-test") as index:
        for f in range({FILES}):
            vid, source = f"video{{f:03d}}", f"/archive/video{{f:03d}}.mp4"
            if index.catalog.by_source(source) is not None:
                continue
            segs = [Segment(vid, source, i * 2.0, i * 2.0 + 2.0, "speech", texts[(f + i) % len(texts)], "en")
                    for i in range({PER_FILE})]
            vectors = rng.normal(size=({PER_FILE}, {DIM})).astype(np.float32)
            index.replace_video(VideoRecord(vid, source, vid, 1, 1, None, "en", len(segs), {{}}, 0.0), segs, vectors)
            print("done", vid, flush=True)
""")


def _writer(index_dir: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "MEDIAINDEX_INDEX_DIR": str(index_dir)}
    return subprocess.Popen([sys.executable, "-c", WRITER], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _check_consistent(index: MediaIndex) -> set[str]:
    """Every file the catalog holds has exactly its segments; returns those files."""
    records = index.catalog.all()
    for r in records:
        assert index.store.count(SearchFilters(video_id=r.video_id)) == r.segments == PER_FILE
    return {r.video_id for r in records}


def test_sigkill_during_writes_then_rerun(tmp_path: Path, cache_dir: Path) -> None:
    index_dir = tmp_path / "index"
    proc = _writer(index_dir)
    done: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("done"):
            done.append(line.split()[1])
        if len(done) == 6:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""

    settings = make_settings(index_dir, cache_dir)
    with MediaIndex(settings, DIM, "crash-test") as index:
        indexed = _check_consistent(index)
        assert set(done) <= indexed  # reported done means kept
        orphans = index.store.count() - PER_FILE * len(indexed)
        assert 0 <= orphans <= PER_FILE  # at most the file being written when killed

    rerun = _writer(index_dir)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert not set(done) & {line.split()[1] for line in out.splitlines()}  # done files are not redone
    with MediaIndex(settings, DIM, "crash-test") as index:
        assert len(_check_consistent(index)) == FILES
        assert index.store.count() == FILES * PER_FILE  # no duplicates, nothing lost
