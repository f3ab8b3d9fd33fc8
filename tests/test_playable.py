"""Files whose format browsers do not play, played through a copy made as it is read
(`GET /media/{id}/playable`), and the transcript's times for such a copy (`?offset=`).

The files are made at test time from the shared recordings: jfk.flac's speech under cockatoo.mp4's pictures in
an AVI (MPEG-4 Part 2 + MP3) and jfk.flac as WMA; the index holds jfk.flac's reference transcript for both.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import av
import httpx
import pytest
from fastapi.testclient import TestClient

from mediaindex.api import create_app
from mediaindex.api.routes import videos
from mediaindex.config import ApiSettings, Settings
from mediaindex.index.catalog import VideoRecord
from mediaindex.index.index import MediaIndex
from mediaindex.index.transcript import shifted
from mediaindex.media.ffmpeg_bin import ffmpeg_exe
from tests.conftest import make_settings, media
from tests.corpus import references
from tests.test_api_support import LiveServer

pytestmark = pytest.mark.slow  # the embedder


@dataclass
class Unplayable:
    settings: Settings
    ids: dict[str, str]  # file name → video id
    duration: float


def build_unplayable(root: Path, cache_dir: Path, embedder, long: bool = False) -> Unplayable:
    """An index of `jfk.avi`, `jfk.wma` and `jfk.mkv` (H.264 with AC-3 sound, which Chromium plays as silence), made
    from the shared recordings, with jfk.flac's transcript, and
    where `long`, `long.mkv`: 90 s of cockatoo.mp4's pictures looped, without sound or segments, `broken.avi`:
    bytes that are no media, and `gone.avi`: indexed, then deleted."""
    folder = root / "media"
    folder.mkdir(parents=True)
    jfk = media("audio/jfk.flac")
    avi, wma = folder / "jfk.avi", folder / "jfk.wma"
    subprocess.run([ffmpeg_exe(), "-v", "error", "-nostdin", "-stream_loop", "-1", "-i", str(media("video/cockatoo.mp4")),
                    "-i", str(jfk), "-map", "0:v", "-map", "1:a", "-shortest", "-vf", "scale=320:-2",
                    "-c:v", "mpeg4", "-c:a", "libmp3lame", str(avi)], check=True)
    subprocess.run([ffmpeg_exe(), "-v", "error", "-nostdin", "-i", str(jfk), "-c:a", "wmav2", str(wma)], check=True)
    mkv = folder / "jfk.mkv"
    subprocess.run([ffmpeg_exe(), "-v", "error", "-nostdin", "-stream_loop", "-1", "-i", str(media("video/cockatoo.mp4")),
                    "-i", str(jfk), "-map", "0:v", "-map", "1:a", "-shortest", "-c:v", "copy", "-c:a", "ac3", str(mkv)],
                   check=True)
    segs = [s for s in references() if Path(s.source).name == "jfk.flac"]
    with av.open(str(jfk)) as f:
        duration = float(f.duration or 0) / 1e6
    settings = make_settings(root / "index", cache_dir).model_copy(update={"api": ApiSettings(
        media_roots=[folder], rate_limit_per_minute=0, keys_db=root / "keys.db")})
    ids = {}
    with MediaIndex(settings, embedder.dim, embedder.name, extra_dims={}) as index:
        for path, has_video in ((avi, True), (wma, False), (mkv, True)):
            video_id = path.stem + path.suffix[1:]
            own = [replace(s, source=str(path), video_id=video_id, vectors={}) for s in segs]
            record = VideoRecord(video_id, str(path), path.name, path.stat().st_size, 1, duration, "en", len(own),
                                 {"has_video": has_video, "has_audio": True}, 0.0)
            index.replace_video(record, own, embedder.embed_passages([s.text for s in own]))
            ids[path.name] = video_id
        if long:
            path = folder / "long.mkv"  # copied, not encoded: made at once; its 720p copy takes a while
            subprocess.run([ffmpeg_exe(), "-v", "error", "-nostdin", "-stream_loop", "-1", "-i",
                            str(media("video/cockatoo.mp4")), "-t", "90", "-an", "-c", "copy", str(path)], check=True)
            index.replace_video(VideoRecord("longmkv", str(path), path.name, path.stat().st_size, 1, 90.0, None, 0,
                                            {"has_video": True, "has_audio": False}, 0.0), [], [])
            ids[path.name] = "longmkv"
            broken = folder / "broken.avi"  # indexed, then damaged
            broken.write_bytes(bytes(range(256)) * 200)
            index.replace_video(VideoRecord("brokenavi", str(broken), broken.name, broken.stat().st_size, 1, 9.0, None,
                                            0, {"has_video": True}, 0.0), [], [])
            ids[broken.name] = "brokenavi"
            gone = folder / "gone.avi"  # indexed, then deleted
            shutil.copyfile(broken, gone)
            index.replace_video(VideoRecord("goneavi", str(gone), gone.name, gone.stat().st_size, 1, 9.0, None, 0,
                                            {"has_video": True}, 0.0), [], [])
            gone.unlink()
            ids[gone.name] = "goneavi"
    return Unplayable(settings, ids, duration)


@pytest.fixture(scope="module")
def unplayable(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path, embedder) -> Unplayable:
    return build_unplayable(tmp_path_factory.mktemp("unplayable"), cache_dir, embedder, long=True)


@pytest.fixture(scope="module")
def client(unplayable: Unplayable, embedder):
    with TestClient(create_app(unplayable.settings, embedder=embedder)) as c:
        yield c


def streams(data: bytes, tmp: Path) -> tuple[list[str], float]:
    path = tmp / "copy.mp4"
    path.write_bytes(data)
    with av.open(str(path)) as f:
        return [f"{s.type}:{s.codec_context.name}" for s in f.streams], float(f.duration or 0) / 1e6


def test_a_video_browsers_do_not_play_comes_as_fragmented_h264_from_the_moment(client, unplayable: Unplayable,
                                                                              tmp_path: Path) -> None:
    r = client.get(f"/media/{unplayable.ids['jfk.avi']}/playable", params={"start": 4})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "video/mp4" and r.headers["cache-control"] == "no-store"
    assert r.content[4:8] == b"ftyp" and b"moof" in r.content  # fragmented: plays as it arrives
    kinds, duration = streams(r.content, tmp_path)
    assert kinds == ["video:h264", "audio:aac"]
    assert duration == pytest.approx(unplayable.duration - 4, abs=0.3)


def test_the_files_say_whether_they_have_sound(client, unplayable: Unplayable) -> None:
    sound = {v["title"]: v["has_audio"] for v in client.get("/videos").json()}
    assert sound["jfk.mkv"] and sound["jfk.wma"] and not sound["long.mkv"]


def test_sound_alone_comes_as_aac(client, unplayable: Unplayable, tmp_path: Path) -> None:
    r = client.get(f"/media/{unplayable.ids['jfk.wma']}/playable")
    assert r.status_code == 200 and r.headers["content-type"] == "audio/mp4"
    kinds, duration = streams(r.content, tmp_path)
    assert kinds == ["audio:aac"]
    assert duration == pytest.approx(unplayable.duration, abs=0.3)


@pytest.mark.parametrize(("start", "said"), [
    ("11.5", "start 11.5 s is after the file ends (11"),
    ("-1", "greater than or equal to 0"),
    ("soon", "valid number"),
    ("1e9", "less than or equal to 10000000"),
])
def test_a_start_that_is_no_time_in_the_file_is_refused(client, unplayable: Unplayable, start: str, said: str) -> None:
    r = client.get(f"/media/{unplayable.ids['jfk.avi']}/playable", params={"start": start})
    assert r.status_code == 422 and said in r.text, r.text


@pytest.mark.parametrize(("name", "track", "said"), [
    ("long.mkv", "1", "long.mkv: it has no audio track: leave out the track"),
    ("jfk.avi", "2", "jfk.avi: it has one audio track: the only track is 1"),
    ("jfk.avi", "0", "greater than or equal to 1"),
    ("jfk.avi", "first", "valid integer"),
])
def test_a_track_the_file_lacks_is_refused(client, unplayable: Unplayable, name: str, track: str, said: str) -> None:
    """A converted copy and a clip take the audio track asked for, by the number players give it."""
    for kind in ("playable", "clip"):
        r = client.get(f"/media/{unplayable.ids[name]}/{kind}", params={"start": 0, "end": 1, "track": track})
        assert r.status_code == 422 and said in r.text, (kind, r.text)


def test_unknown_or_gone_files_are_not_converted(client, unplayable: Unplayable) -> None:
    r = client.get("/media/nosuchfile/playable")
    assert r.status_code == 404 and "no video with id 'nosuchfile'" in r.json()["message"]
    r = client.get(f"/media/{unplayable.ids['gone.avi']}/playable")
    assert r.status_code == 404 and r.json()["message"] == "the file of video 'goneavi' is no longer on disk"


def test_a_file_ffmpeg_cannot_read_is_refused_with_its_reason(client, unplayable: Unplayable) -> None:
    r = client.get(f"/media/{unplayable.ids['broken.avi']}/playable")
    assert r.status_code == 422, r.text
    assert r.json()["message"] == ("the file could not be converted for playing: Error opening input files: "
                                   "Invalid data found when processing input")
    assert not videos._PLAYING


def test_too_many_at_once_are_asked_to_come_back(client, unplayable: Unplayable, monkeypatch) -> None:
    monkeypatch.setattr(videos, "MAX_PLAYING", 0)
    r = client.get(f"/media/{unplayable.ids['jfk.avi']}/playable")
    assert r.status_code == 503 and r.headers["retry-after"] == "5"
    assert r.json()["message"] == "0 files are being converted for playing: try again in a few seconds"


def test_a_reader_that_goes_stops_the_conversion(unplayable: Unplayable, embedder) -> None:
    """A 90 s 720p copy is still being made when its reader goes after the first bytes: its ffmpeg is killed."""
    with LiveServer(create_app(unplayable.settings, embedder=embedder)) as live:
        with httpx.stream("GET", f"{live.url}/media/longmkv/playable", timeout=60) as r:
            assert r.status_code == 200
            chunks = r.iter_bytes()  # kept: a dropped iterator closes the connection when it is collected
            next(chunks)
            [proc] = videos._PLAYING
            assert proc.returncode is None
        deadline = time.monotonic() + 10
        while proc.returncode is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.returncode == -9 and not videos._PLAYING


def vtt_cues(text: str) -> list[tuple[float, float, str]]:
    def seconds(stamp: str) -> float:
        h, m, s = stamp.split(":") if stamp.count(":") == 2 else ("0", *stamp.split(":"))
        return int(h) * 3600 + int(m) * 60 + float(s)

    cues = re.findall(r"([\d:.]+) --> ([\d:.]+)\n(.+?)(?:\n\n|\Z)", text, flags=re.S)
    return [(seconds(a), seconds(b), t.replace("\n", " ")) for a, b, t in cues]


def test_captions_for_a_copy_that_starts_later_are_shifted_with_it(client, unplayable: Unplayable) -> None:
    url = f"/videos/{unplayable.ids['jfk.avi']}/transcript"
    whole = vtt_cues(client.get(url, params={"format": "vtt"}).text)
    later = vtt_cues(client.get(url, params={"format": "vtt", "offset": 4}).text)
    assert whole and later and later[0][0] == 0.0
    # Each cue that ends after 4 s is there, 4 s earlier (one begun before 4 s starts at 0).
    assert [(max(0.0, a - 4), round(b - 4, 3), t) for a, b, t in whole if b > 4] == [
        (a, round(b, 3), t) for a, b, t in later]
    assert "ask not what your country can do for you" in " ".join(t for _, _, t in later).lower()
    for bad in ("-2", "x"):
        r = client.get(url, params={"format": "vtt", "offset": bad})
        assert r.status_code == 422, r.text


def test_shifting_keeps_the_words_after_the_offset() -> None:
    seg = asdict(next(s for s in references() if Path(s.source).name == "jfk.flac"))
    said = seg["text"].split()
    step = (seg["end"] - seg["start"]) / len(said)
    words = [[seg["start"] + i * step, seg["start"] + (i + 1) * step, w] for i, w in enumerate(said)]
    seg["extra"] = {**seg["extra"], "words": words}
    cut = words[len(words) // 2][0] + step / 2  # inside a word: it stays, from 0
    [moved] = shifted([seg], cut)
    assert moved["start"] == 0.0 and moved["end"] == pytest.approx(seg["end"] - cut)
    assert [w[2] for w in moved["extra"]["words"]] == said[len(said) // 2:]
    assert moved["extra"]["words"][0][0] == 0.0
    assert shifted([seg], seg["end"]) == []
    assert seg["extra"]["words"] == words  # the stored segment is left as it was
