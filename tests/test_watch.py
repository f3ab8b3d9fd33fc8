"""Which files a watched folder offers to an ingest: only settled ones, each version once, one whose subtitles
changed, and, when an indexed file is gone, the copies of its size that were passed over (on an index of copies of
real recordings)."""

from __future__ import annotations

import shutil
from pathlib import Path

from mediaindex.service.archive import Archive
from mediaindex.service.watch import FolderWatch
from tests.conftest import media
from tests.test_index_remove import build


def test_files_are_offered_once_they_settle_and_a_copy_when_its_original_goes(tmp_path: Path, cache_dir: Path,
                                                                              embedder) -> None:
    built = build(tmp_path, cache_dir, embedder, ["talks/jfk.flac"])
    copy = built.folder / "other" / "jfk-copy.flac"
    copy.parent.mkdir()
    shutil.copyfile(built.folder / "talks" / "jfk.flac", copy)
    with Archive.open(built.settings, write=True, embedder=embedder) as archive:
        watch = FolderWatch(archive, [built.folder])
        assert watch.look() == [] and watch.settled and not watch.gone  # the copy was given to the first ingest

        arriving = built.folder / "talks" / "english.wav"
        data = media("audio/english.wav").read_bytes()
        arriving.write_bytes(data[: len(data) // 2])
        assert watch.look() == [] and not watch.settled  # new since the previous look
        with arriving.open("ab") as f:
            f.write(data[len(data) // 2:])
        assert watch.look() == [] and not watch.settled  # still growing
        assert watch.look() == [str(arriving)] and watch.settled
        assert watch.look() == []  # taken once, though the ingest that took it is not run here

        captions = built.folder / "talks" / "jfk.en.srt"  # subtitles arrive beside an indexed file
        captions.write_text("1\n00:00:00,000 --> 00:00:03,000\nAnd so my fellow Americans\n\n", encoding="utf-8")
        assert watch.look() == [] and not watch.settled
        assert watch.look() == [str(built.folder / "talks" / "jfk.flac")]
        assert watch.look() == []
        captions.unlink()

        (built.folder / "talks" / "jfk.flac").unlink()
        assert watch.look() == [str(copy)]  # its original is gone: the copy takes its place
        assert list(watch.gone) == [built.ids["talks/jfk.flac"]]
        assert watch.look() == []
