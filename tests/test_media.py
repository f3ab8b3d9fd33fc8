"""The media stage over real files: probe, shots, keyframes, thumbnails, streamed decoding."""

from __future__ import annotations

import io
import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mediaindex.errors import MediaError
from mediaindex.media.decode import AudioStream, decode_audio, scan_video
from mediaindex.media.probe import probe
from mediaindex.pipeline.stages.decode import decode_media
from tests.conftest import MEDIA, make_settings, media

FRAME_24 = 1001 / 24000  # one frame at 23.976 fps


def _gt_cuts(name: str, fps: float) -> list[float]:
    data = json.loads((MEDIA / "groundtruth" / "pyscenedetect" / f"{name}.ContentDetector.default.json").read_text())
    return [frame / fps for frame in data["cuts"]]


def test_probe_reads_rotation_aspect_and_frame_rate() -> None:
    rotated = probe(media("video/issue-134-rotate.mp4"))
    assert rotated.rotation == 90  # display matrix says -90 degrees: shown turned clockwise
    assert (rotated.width, rotated.height) == (1280, 544)
    assert (rotated.display_width, rotated.display_height) == (544, 1280)

    anamorphic = probe(media("video/issue-195-aspect-ratio.mp4"))
    assert anamorphic.sample_aspect_ratio == "16:11"
    assert (anamorphic.display_width, anamorphic.display_height) == (1024, 576)

    vfr = probe(media("video/goldeneye-vfr-drop3.mp4"))
    assert vfr.variable_frame_rate and not vfr.has_audio and vfr.has_video
    assert not probe(media("video/testvideo.mp4")).variable_frame_rate

    audio_only = probe(media("audio/jfk.flac"))
    assert audio_only.has_audio and not audio_only.has_video and audio_only.display_width is None
    assert abs(audio_only.duration - 11.0) < 0.05
    json.dumps(rotated.to_dict())  # stored in the catalog as JSON


@pytest.mark.parametrize("name", ["goldeneye-vfr-drop3.mp4", "issue-134-rotate.mp4"])
def test_cuts_are_presentation_times_within_one_frame(name: str) -> None:
    path = media(f"video/{name}")
    info = probe(path)
    scan = scan_video(path, info, interval=5.0, max_side=256)
    cuts = [start for start, _ in scan.shots[1:]]
    assert len(cuts) == 2
    for found, expected in zip(cuts, [3.754, 8.759], strict=True):
        assert abs(found - expected) <= FRAME_24
    # Shots tile the video without gaps.
    assert scan.shots[0][0] == 0.0 and abs(scan.shots[-1][1] - info.duration) < 0.1
    assert all(a[1] == b[0] for a, b in zip(scan.shots, scan.shots[1:], strict=False))


def test_cuts_match_pyscenedetect_reference() -> None:
    path = media("video/testvideo.mp4")
    info = probe(path)
    scan = scan_video(path, info, interval=5.0, max_side=256)
    expected = _gt_cuts("testvideo.mp4", 30000 / 1001)
    found = [start for start, _ in scan.shots[1:]]
    assert len(found) == len(expected)
    assert all(abs(f - e) <= 1001 / 30000 for f, e in zip(found, expected, strict=True))


@pytest.mark.parametrize("name", ["big_buck_bunny_0_30.webm", "cockatoo.mp4", "goldeneye-vfr-drop3.mp4",
                                  "issue-195-aspect-ratio.mp4", "testvideo.mp4"])
def test_planes_resized_in_place_find_the_cuts_whole_frames_find(name: str) -> None:
    """VP8 and H.264, 4:2:0 and 4:4:4, even and odd detector sizes: the fast picture gives the same cuts
    as converting each whole frame with swscale and resizing it, as PySceneDetect does."""
    import av
    import cv2

    from mediaindex.media.shots import ShotDetector, detector_picture

    with av.open(str(media(f"video/{name}"))) as container:
        stream = container.streams.video[0]
        rate = stream.average_rate or Fraction(25)
        fast, whole = (ShotDetector(stream.codec_context.width, Fraction(rate)) for _ in range(2))
        for frame in container.decode(stream):
            assert frame.pts is not None and frame.time_base is not None
            size = fast.size(frame.width, frame.height)
            picture = detector_picture(frame, size)
            reference = cv2.resize(frame.to_ndarray(format="bgr24"), size, interpolation=cv2.INTER_LINEAR)
            assert picture.shape == reference.shape and picture.flags.c_contiguous
            fast.feed(frame.pts, Fraction(frame.time_base), picture)
            whole.feed(frame.pts, Fraction(frame.time_base), reference)
    assert fast.finish() == whole.finish()
    assert fast.cuts == whole.cuts
    assert len(fast.cuts) >= 1


def test_keyframes_per_shot_plus_interval_inside_long_shots(tmp_path: Path, cache_dir: Path) -> None:
    settings = make_settings(tmp_path / "index", cache_dir, frames={"interval": 2.0, "max_side": 320})
    item = decode_media(str(media("video/testvideo.mp4")), settings)
    times = [k.time for k in item.keyframes]
    # Every shot starts with a keyframe.
    for start, _ in item.shots:
        assert any(abs(t - start) < 1e-3 for t in times)
    # Inside the 11-second last shot there is one every ~2 s, not just one.
    start, end = item.shots[-1]
    inside = [t for t in times if start <= t < end]
    assert len(inside) >= int((end - start) / 2.0)
    assert all(b - a <= 2.0 + 0.05 for a, b in zip(inside, inside[1:], strict=False))
    # Spans tile the video; each keyframe stands for [time, end).
    assert all(a.end == pytest.approx(b.time) for a, b in zip(item.keyframes, item.keyframes[1:], strict=False))
    assert item.keyframes[-1].end == pytest.approx(item.shots[-1][1])
    for k in item.keyframes:
        assert k.image.dtype == np.uint8 and k.image.ndim == 3 and k.image.shape[2] == 3
        assert max(k.image.shape[:2]) <= 320
        data = item.thumbnail_files[k.thumbnail]
        assert len(data) < 40_000
        with Image.open(io.BytesIO(data)) as im:
            assert max(im.size) <= settings.frames.thumbnail_side and im.format == "JPEG"
    # A stage touches no index: its thumbnails travel on the item until the writer saves them.
    assert not settings.index_dir.exists()


def test_each_part_is_sampled_from_inside_not_at_its_cut(tmp_path: Path, cache_dir: Path) -> None:
    settings = make_settings(tmp_path / "index", cache_dir, frames={"samples": 4, "sample_side": 128})
    item = decode_media(str(media("video/testvideo.mp4")), settings)
    cuts = [start for start, _ in item.shots[1:]]
    for part in item.keyframes:
        # No part crosses a cut, and every part has its frames: the picture and three squares.
        assert not any(part.time < c < part.end - 1e-3 for c in cuts)
        assert len(part.samples) == 4
        assert sum(s is part.image for s in part.samples) == 1
        assert all(s.shape == (128, 128, 3) for s in part.samples if s is not part.image)
    scan = scan_video(media("video/testvideo.mp4"), item.info, interval=5.0, max_side=512, samples=4)
    for part in scan.parts:
        length = part.end - part.start
        times = [f.time for f in part.frames]
        assert all(part.start <= t < part.end for t in times) and times == sorted(times)
        if length > 1.0:  # the first frame of a shot (a fade, a blend of two shots) is not taken
            assert times[0] - part.start >= length / 16
        # Spread evenly: one frame near the centre of each quarter; the picture is the middle one.
        for i, t in enumerate(times):
            assert abs(t - (part.start + (i + 0.5) * length / 4)) <= length / 16 + 0.05
        assert abs(part.keyframe.time - (part.start + part.end) / 2) <= length / 4 + 0.05
        assert max(part.keyframe.image.shape[:2]) == 512


def test_span_sampler_stays_small_and_spreads_its_choice() -> None:
    from mediaindex.media.sampling import SpanSampler

    sampler: SpanSampler[int] = SpanSampler(5)
    made = 0

    def make() -> int:
        nonlocal made
        made += 1
        return made

    for n in range(30 * 600):  # a ten-minute shot at 30 frames per second
        sampler.offer(n / 30, make)
        assert len(sampler.candidates) <= 2 * sampler.keep
    assert made < 200  # only candidates are turned into images, not every frame
    chosen = sampler.close(600.0)
    assert [round(c.time / 60) for c in chosen] == [1, 3, 5, 7, 9]  # centres of five 2-minute slices
    assert sampler.start == 600.0 and sampler.candidates == []
    sampler.offer(600.0, make)
    assert [c.time for c in sampler.close(600.5)] == [600.0]  # a span shorter than the spacing: what there is


def test_keyframes_are_shown_upright_and_unstretched(tmp_path: Path, cache_dir: Path) -> None:
    settings = make_settings(tmp_path / "index", cache_dir, frames={"thumbnail_format": "webp"})
    rotated = decode_media(str(media("video/issue-134-rotate.mp4")), settings)
    h, w = rotated.keyframes[0].image.shape[:2]
    assert h > w and abs(w / h - 544 / 1280) < 0.02  # portrait, as a player shows it
    assert rotated.info.rotation == 90 and rotated.keyframes[0].thumbnail.endswith(".webp")
    anamorphic = decode_media(str(media("video/issue-195-aspect-ratio.mp4")), settings)
    h, w = anamorphic.keyframes[0].image.shape[:2]
    assert abs(w / h - 16 / 9) < 0.02  # 704x576 pixels that are 16:11 wide make 16:9


def test_keyframe_memory_is_capped(tmp_path: Path, cache_dir: Path) -> None:
    path = media("video/testvideo.mp4")
    scan = scan_video(path, probe(path), interval=0.1, max_side=64, max_keyframes=6, samples=4, sample_side=32)
    assert len(scan.parts) <= 6 and scan.images <= 6 * 4
    assert scan.spans[0][0] == 0.0 and scan.spans[-1][1] == pytest.approx(scan.end)
    assert all(a[1] == b[0] for a, b in zip(scan.spans, scan.spans[1:], strict=False))
    # Merged parts keep their frames spread over the joined span, the picture whole.
    for part in scan.parts:
        assert 1 <= len(part.frames) <= 4 and all(part.start <= f.time < part.end for f in part.frames)
        assert max(part.keyframe.image.shape[:2]) == 64
        assert all(f.image.shape == (32, 32, 3) for f in part.frames if f is not part.keyframe)


def test_audio_streams_in_bounded_chunks() -> None:
    path = media("video/manifesto.mp4")
    stream = AudioStream(path, chunk_seconds=10.0)
    sizes = [len(c) for c in stream]
    assert max(sizes) == 16_000 * 10 and len(sizes) == 9
    assert abs(stream.decoded_seconds - probe(path).duration) < 0.1
    whole = decode_audio(path)
    assert len(whole) == sum(sizes) and whole.dtype == np.float32


def test_time_limit_stops_decoding(tmp_path: Path, cache_dir: Path) -> None:
    settings = make_settings(tmp_path / "index", cache_dir, ingest={"file_timeout": 0.05})
    with pytest.raises(MediaError, match="video decoding took longer than 0.05 s"):
        decode_media(str(media("video/auto-editor_example.mp4")), settings)
    with pytest.raises(MediaError, match="audio decoding took longer than"):
        list(AudioStream(media("video/auto-editor_example.mp4"), chunk_seconds=60, timeout=0.001))


def test_frames_past_1080p_give_the_same_parts_as_the_original(tmp_path: Path) -> None:
    """Above 1080p candidates are converted as they come (memory), below they are held as frames:
    the same video at both sizes is cut and sampled alike."""
    import subprocess

    from mediaindex.media.ffmpeg_bin import ffmpeg_exe

    original = media("video/testvideo.mp4")
    big = tmp_path / "testvideo-1440p.mp4"
    subprocess.run([ffmpeg_exe(), "-nostdin", "-loglevel", "error", "-i", str(original), "-t", "8",
                    "-vf", "scale=2560:1440", "-c:v", "libx264", "-preset", "ultrafast", "-crf", "18", str(big)],
                   check=True)
    small_scan = scan_video(original, probe(original), interval=5.0, max_side=256)
    big_scan = scan_video(big, probe(big), interval=5.0, max_side=256)
    assert [s for s in big_scan.shots if s[1] < 7.5] == [s for s in small_scan.shots if s[1] < 7.5]
    early = [p for p in small_scan.parts if p.end < 7.5]
    assert [(p.start, [f.time for f in p.frames]) for p in big_scan.parts[: len(early)]] == \
        [(p.start, [f.time for f in p.frames]) for p in early]
    assert all(max(p.keyframe.image.shape[:2]) == 256 for p in big_scan.parts)


def test_pictures_muxed_in_after_the_sound_keep_their_time_in_the_file(tmp_path: Path) -> None:
    """A video stream that starts 3 s into the file (its sound from 0 s): its pictures and cuts are placed at the
    file's time, as a player shows them and as the sound is read, not at the stream's own."""
    import subprocess

    from mediaindex.media.ffmpeg_bin import ffmpeg_exe

    late = tmp_path / "late picture.mp4"
    subprocess.run([ffmpeg_exe(), "-v", "error", "-itsoffset", "3", "-i", str(media("video/cockatoo.mp4")),
                    "-i", str(media("audio/jfk.flac")), "-map", "0:v", "-map", "1:a", "-c:v", "copy", "-c:a", "aac",
                    str(late)], check=True)
    own = scan_video(media("video/cockatoo.mp4"), probe(media("video/cockatoo.mp4")), interval=5.0, max_side=256)
    moved = scan_video(late, probe(late), interval=5.0, max_side=256)
    assert [round(p.start - 3.0, 2) for p in moved.parts] == [round(p.start, 2) for p in own.parts]
    assert [round(end - 3.0, 2) for _, end in moved.shots[:-1]] == [round(end, 2) for _, end in own.shots[:-1]]


def test_a_sound_files_cover_picture_is_the_thumbnail_of_its_moments(tmp_path: Path, cache_dir: Path) -> None:
    """An MP3 with its cover stored as a one-frame picture stream (made at test time): not video, but its moments
    show the cover instead of nothing."""
    import subprocess

    from mediaindex.media.decode import cover_picture
    from mediaindex.media.ffmpeg_bin import ffmpeg_exe
    from mediaindex.pipeline.stages.speech import SpeechResult
    from mediaindex.segments import Segment

    cover = tmp_path / "cover.png"
    Image.fromarray(np.full((90, 160, 3), (200, 30, 30), np.uint8)).save(cover)
    song = tmp_path / "episode.mp3"
    subprocess.run([ffmpeg_exe(), "-v", "error", "-i", str(media("audio/jfk.flac")), "-i", str(cover),
                    "-map", "0:a", "-map", "1:v", "-c:a", "libmp3lame", "-c:v", "mjpeg",
                    "-disposition:v", "attached_pic", str(song)], check=True)
    info = probe(song)
    assert info.cover_art and not info.has_video and info.video_streams == 0
    picture = cover_picture(song)
    assert picture is not None and picture.shape == (90, 160, 3)
    assert abs(picture[45, 80].astype(int) - (200, 30, 30)).max() < 20

    item = decode_media(str(song), make_settings(tmp_path / "index", cache_dir))
    assert item.cover is not None and list(item.thumbnail_files) == [item.cover] and not item.keyframes
    assert Image.open(io.BytesIO(item.thumbnail_files[item.cover])).size == (160, 90)
    heard = SpeechResult([Segment("", str(song), 0.3, 10.0, "speech", "And so my fellow Americans")])
    assert [s.thumbnail for s in heard.join(item).segments] == [item.cover]

    plain = decode_media(str(media("audio/jfk.flac")), make_settings(tmp_path / "index", cache_dir))
    assert plain.cover is None and not plain.thumbnail_files and cover_picture(media("audio/jfk.flac")) is None
