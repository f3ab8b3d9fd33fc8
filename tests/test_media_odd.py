"""Odd and broken media through the real pipeline (Ray stages, models, index): each file is indexed
or refused with a specific reason, and nothing half-made reaches the index."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mediaindex.index.index import MediaIndex
from mediaindex.media.ffmpeg_bin import ffmpeg_exe
from mediaindex.service import IngestRequest, Pipeline, ingest
from tests.conftest import make_settings, media

pytestmark = pytest.mark.slow


def _broken_variants(folder: Path) -> None:
    """Odd files made from the real media at test time."""
    folder.mkdir(parents=True)
    shutil.copy(media("video/cockatoo.mp4"), folder / "silent track.mp4")
    shutil.copy(media("video/video_with_failing_audio.mp4"), folder / "failing audio.mp4")
    shutil.copy(media("video/issue-134-rotate.mp4"), folder / "rotated.mp4")
    shutil.copy(media("video/goldeneye-vfr-drop3.mp4"), folder / "vfr no audio.mp4")
    shutil.copy(media("audio/english.wav"), folder / "only audio.wav")
    shutil.copy(media("audio/LJ002-0020.wav"), folder / "Grüße aus Köln – 東京 clip.wav")
    (folder / "zero.mp4").write_bytes(b"")
    (folder / "readme.mp4").write_text("These are my holiday notes, not a video.\n", encoding="utf-8")
    whole = media("video/manifesto.mp4").read_bytes()
    (folder / "cut in half.mp4").write_bytes(whole[: len(whole) // 2])
    webm = media("video/big_buck_bunny_0_30.webm").read_bytes()
    (folder / "cut webm.webm").write_bytes(webm[: len(webm) // 2])
    subprocess.run([ffmpeg_exe(), "-v", "error", "-nostdin", "-t", "3", "-i", str(media("video/cockatoo.mp4")),
                    "-vf", "fps=8,scale=480:-1", str(folder / "parrot loop.gif")], check=True)
    (folder / "damaged.gif").write_bytes(b"GIF89a" + bytes(range(256)))


def test_every_odd_file_is_indexed_or_refused_with_its_reason(tmp_path: Path, pipeline: Pipeline, embedder,
                                                              cache_dir: Path) -> None:
    settings = make_settings(tmp_path / "idx", cache_dir)
    folder = tmp_path / "odd"
    _broken_variants(folder)
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        report = ingest(IngestRequest(settings, [folder]), index, pipeline)
        out = {Path(o.path).name: o for o in report.outcomes}
        assert len(out) == 12

        def indexed(name: str):
            o = out[name]
            assert o.status == "indexed", (name, o.reason)
            return o, index.catalog.get(o.video_id)

        # Refused, each with its own reason.
        assert out["zero.mp4"].status == "failed" and out["zero.mp4"].reason == "empty file (0 bytes)"
        assert out["readme.mp4"].status == "failed"
        assert out["readme.mp4"].reason.startswith("not a readable media file")
        assert out["cut in half.mp4"].status == "failed"
        assert "truncated MP4/MOV file" in out["cut in half.mp4"].reason

        assert out["damaged.gif"].status == "failed"
        assert out["damaged.gif"].reason.startswith("video cannot be decoded"), out["damaged.gif"].reason

        # An animated GIF: a silent clip, whose shots are seen.
        o, rec = indexed("parrot loop.gif")
        assert rec.probe["has_video"] and not rec.probe["has_audio"]
        labels = [name for s in index.store.segments_of(o.video_id, "visual")
                  for name, _ in (s.get("extra") or {}).get("labels") or []]
        assert "sulphur-crested cockatoo" in labels, labels

        # A cut WebM keeps its readable first half, and says so.
        o, rec = indexed("cut webm.webm")
        assert any("ends early" in n for n in o.notes)

        # Silence: indexed with no speech text at all.
        o, rec = indexed("silent track.mp4")
        assert "no speech found" in o.notes  # its segments, if any, are the vision stage's visual ones
        assert not index.store.segments_of(o.video_id, "speech")
        assert o.segments == len(index.store.segments_of(o.video_id, "visual"))
        o, rec = indexed("failing audio.mp4")
        assert rec.probe["has_audio"] and not index.store.segments_of(o.video_id, "speech")

        o, rec = indexed("rotated.mp4")
        assert rec.probe["rotation"] == 90 and rec.probe["display_height"] == 1280
        # Thumbnails go to the data directory of the index written, whatever settings the stages started with.
        thumbs = [s["thumbnail"] for s in index.store.segments_of(o.video_id, "speech")]
        assert thumbs and all((index.thumbs_dir / t).is_file() for t in thumbs)

        o, rec = indexed("vfr no audio.mp4")
        assert rec.probe["variable_frame_rate"] and any("no audio track" in n for n in o.notes)

        o, rec = indexed("only audio.wav")
        assert not rec.probe["has_video"] and o.segments >= 1
        assert "one" in " ".join(s["text"].lower() for s in index.store.segments_of(o.video_id, "speech")) or \
            "1" in " ".join(s["text"] for s in index.store.segments_of(o.video_id, "speech"))

        o, rec = indexed("Grüße aus Köln – 東京 clip.wav")
        assert rec.source == str(folder / "Grüße aus Köln – 東京 clip.wav")

        # Nothing half-made: the store holds exactly the segments the catalog records.
        records = index.catalog.all()
        assert len(records) == 8
        assert index.store.count() == sum(r.segments for r in records)
        for r in records:
            assert len(index.store.segments_of(r.video_id)) == r.segments
