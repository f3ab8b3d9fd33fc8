"""One index, several openers: the first holds the vector store and serves reads, the others read through it
(over its Unix socket, exactly as another process does), a writer waits or is refused, and when the holder
closes, a reader takes the store over and keeps answering. A second process is tested in
tests/test_concurrent_cli.py."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from mediaindex.errors import IndexBusyError
from mediaindex.index.filters import SearchFilters
from mediaindex.index.holder import read_holder
from mediaindex.index.index import IndexHeldError, MediaIndex, open_index
from mediaindex.index.lease import writer_waiting
from mediaindex.index.read_service import HolderGone, ReadClient
from mediaindex.index.shared_store import Access, SharedStore
from mediaindex.segments import Segment
from tests.conftest import REPO, make_settings
from tests.corpus import references
from tests.test_index_store import DIM, _fill


@pytest.fixture(scope="module")
def corpus(embedder) -> tuple[list[Segment], np.ndarray]:
    segs = references()
    return segs, embedder.embed_passages([s.text for s in segs])


def test_a_second_opener_reads_through_the_holder_and_takes_over_when_it_closes(
        tmp_path: Path, cache_dir: Path, embedder, corpus) -> None:
    segs, vectors = corpus
    settings = make_settings(tmp_path / "index", cache_dir)
    holder = MediaIndex(settings, DIM, embedder.name)
    _fill(holder, segs, vectors)
    record = json.loads((settings.index_dir / "holder.json").read_text())
    assert record["pid"] == os.getpid() and record["socket"] and len(bytes.fromhex(record["key"])) == 32
    assert stat.S_IMODE(os.stat(settings.index_dir / "holder.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(record["socket"]).st_mode) == 0o600

    reader = MediaIndex(settings, DIM, embedder.name)
    try:
        assert isinstance(reader.store, SharedStore) and not reader.store.holds
        query = embedder.embed_query("ask not what your country can do for you")
        assert reader.store.count() == holder.store.count() == len(segs)
        assert [h.text for h in reader.store.search(query, 5)] == [h.text for h in holder.store.search(query, 5)]
        jfk = SearchFilters(source_prefix=next(s.source for s in segs if s.source.endswith("jfk.flac")))
        assert reader.store.count(jfk) == 2 and reader.store.stats()["points"] == len(segs)
        with pytest.raises(ValueError, match="no 'image' vectors"):  # the holder's error arrives as itself
            reader.store.search(query, 5, using="image")
        with pytest.raises(IndexBusyError, match="can only be read here"):
            reader.store.delete_video(segs[0].video_id)
        assert reader.store.count() == len(segs)  # nothing was deleted
        for wait in (False, True):  # a process never waits for itself
            with pytest.raises(IndexHeldError, match=rf"held by `.*` \(pid {os.getpid()}\)"):
                open_index(settings, DIM, embedder.name, access=Access(write=True, wait=wait))

        holder.close()  # the holder ends: the reader's next read takes the store over
        assert reader.store.count() == len(segs) and reader.store.holds
        assert read_holder(settings.index_dir) is not None
        reader.store.delete_video(segs[0].video_id)  # and now it may write
        assert reader.store.count() < len(segs)
    finally:
        holder.close()
        reader.close()
    assert read_holder(settings.index_dir) is None and not (settings.index_dir / "holder.sock").exists()


HOLD_UNTIL_A_LINE = """
import sys
from mediaindex.config import load_settings
from mediaindex.index.index import MediaIndex
index = MediaIndex(load_settings("cpu", index_dir=sys.argv[1]), int(sys.argv[2]), sys.argv[3])
print("open", flush=True)
sys.stdin.readline()
index.close()
print("closed", flush=True)
sys.stdin.readline()
"""


def test_a_writer_waits_for_the_holder_says_for_whom_and_goes_before_readers(
        tmp_path: Path, cache_dir: Path, embedder) -> None:
    settings = make_settings(tmp_path / "index", cache_dir)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_UNTIL_A_LINE, str(settings.index_dir), str(DIM),
                               embedder.name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert holder.stdin is not None and holder.stdout is not None
    waited_for: list[int | None] = []
    opened: list[MediaIndex] = []
    access = Access(write=True, on_wait=lambda h: waited_for.append(h and h.pid))
    writer = threading.Thread(target=lambda: opened.append(
        MediaIndex(settings, DIM, embedder.name, thread_safe=True, access=access)))
    reader = None
    try:
        assert holder.stdout.readline().strip() == "open"
        writer.start()
        deadline = time.monotonic() + 30
        # The writer says it waits (so that readers let it go first) a moment before it looks whom it waits for.
        while not (writer_waiting(settings.index_dir) and waited_for):
            assert time.monotonic() < deadline and writer.is_alive()
            time.sleep(0.05)
        assert waited_for == [holder.pid]
        holder.stdin.write("close\n")  # the holder ends: the waiting writer, not a reader, takes the index
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "closed"
        reader = MediaIndex(settings, DIM, embedder.name)
        writer.join(timeout=30)
        assert opened and opened[0].store.holds and not reader.store.holds
        assert reader.store.count() == 0 and not writer_waiting(settings.index_dir)
    finally:
        holder.kill()
        holder.wait(timeout=30)
        if reader is not None:
            reader.close()
        if writer.ident is not None:  # started
            writer.join(timeout=30)
        for index in opened:
            index.close()


def test_a_reader_with_the_wrong_key_gets_nothing(tmp_path: Path, cache_dir: Path, embedder) -> None:
    settings = make_settings(tmp_path / "index", cache_dir)
    with MediaIndex(settings, DIM, embedder.name):
        record = read_holder(settings.index_dir)
        assert record is not None and record.socket
        with pytest.raises(HolderGone, match="digest"):
            ReadClient(record.socket, b"x" * 32)
        assert record.key and ReadClient(record.socket, bytes.fromhex(record.key)).call("count") == 0


def test_reset_refuses_an_index_in_use(tmp_path: Path, cache_dir: Path, embedder) -> None:
    from typer.testing import CliRunner

    from mediaindex.cli.app import app

    settings = make_settings(tmp_path / "index", cache_dir)
    with MediaIndex(settings, DIM, embedder.name):
        result = CliRunner().invoke(app, ["index", "reset", "--yes", "--index", str(settings.index_dir)])
        assert result.exit_code == 2 and "is held by `" in " ".join(result.output.split())
        assert (settings.index_dir / "qdrant").is_dir() and (settings.index_dir / "schema.json").exists()
    result = CliRunner().invoke(app, ["index", "reset", "--yes", "--index", str(settings.index_dir)])
    assert result.exit_code == 0 and not (settings.index_dir / "qdrant").exists()


def test_an_index_path_too_long_for_a_socket_is_served_from_a_private_folder(
        tmp_path: Path, cache_dir: Path, embedder) -> None:
    settings = make_settings(tmp_path / ("long-folder-name-" * 6) / "index", cache_dir)
    with MediaIndex(settings, DIM, embedder.name) as holder:
        record = read_holder(settings.index_dir)
        assert record is not None and record.socket and not record.socket.startswith(str(settings.index_dir))
        assert stat.S_IMODE(os.stat(Path(record.socket).parent).st_mode) == 0o700
        with MediaIndex(settings, DIM, embedder.name) as reader:
            assert not reader.store.holds and reader.store.count() == holder.store.count() == 0
    assert not Path(record.socket).parent.exists()


def test_closing_ends_the_threads_that_serve_reads(tmp_path: Path, cache_dir: Path, embedder) -> None:
    settings = make_settings(tmp_path / "index", cache_dir)
    before = {t.ident for t in threading.enumerate() if t.name == "index-reads"}
    for _ in range(3):
        MediaIndex(settings, DIM, embedder.name).close()
    assert {t.ident for t in threading.enumerate() if t.name == "index-reads"} == before
