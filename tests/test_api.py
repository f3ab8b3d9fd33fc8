"""The HTTP API over a real sample index: search, videos, transcripts, media, errors, limits."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mediaindex.api import create_app
from mediaindex.index.filters import SearchFilters
from tests.conftest import MEDIA, assert_ranked, media
from tests.test_api_support import Sample, live_server_factory, sample  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow


def make_client(sample: Sample, tmp: Path, **api) -> TestClient:  # noqa: F811
    app = create_app(sample.app_settings(tmp, **api), index=sample.index, embedder=sample.embedder,
                     pipeline=sample.pipeline)
    return TestClient(app, raise_server_exceptions=False)


@pytest.fixture(scope="module")
def client(sample: Sample, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:  # noqa: F811
    with make_client(sample, tmp_path_factory.mktemp("client")) as c:
        yield c


def assert_error(response, status: int, words: str = "") -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) >= {"error", "message"} and body["message"]
    assert "Traceback" not in response.text
    assert words.lower() in body["message"].lower()
    return body


# ---- search ---------------------------------------------------------------------------------------

def test_search_returns_cli_fields_urls_and_highlights(client: TestClient) -> None:
    r = client.get("/search", params={"q": "ask not what your country can do for you", "limit": 3})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert 1 <= len(hits) <= 3
    best = hits[0]
    assert best["source"] == str(media("audio/jfk.flac"))
    assert {"source", "video_id", "start", "end", "score", "modality", "text"} <= set(best)
    assert best["modality"] == "speech" and best["start"] < 8.0 < best["end"] + 3
    assert best["media_url"] == f"/media/{best['video_id']}"
    # Plays from the first matched word ("ask", after "And so my fellow Americans"), inside the moment.
    assert best["seek"] is not None and best["start"] <= best["seek"] < best["end"]
    assert best["play_url"] == f"/media/{best['video_id']}#t={best['seek']:.2f}"
    assert best["title"] == "jfk.flac"
    marked = [best["text"][s:e].lower() for s, e in best["highlights"]]
    assert "country" in marked and "ask" in marked
    assert_ranked([(h["score"], h["band"]) for h in hits])
    assert best["band"] == "high" and all(h["band"] in ("high", "medium", "low") for h in hits)


def test_search_by_file_groups_the_moments_of_the_same_search(client: TestClient) -> None:
    q = "banana"
    moments = client.get("/search", params={"q": q, "limit": 100, "min_confidence": "none"}).json()["hits"]
    r = client.get("/search/files", params={"q": q, "per_file": 2, "min_confidence": "none"})
    assert r.status_code == 200, r.text
    files = r.json()["files"]
    assert [f["title"] for f in files] == list(dict.fromkeys(h["title"] for h in moments))  # each file once
    for f in files:
        own = [h for h in moments if h["video_id"] == f["video_id"]]
        assert f["count"] == len(own) and len(f["moments"]) == min(2, len(own))
        assert [(m["start"], m["score"]) for m in f["moments"]] == sorted(
            ((h["start"], h["score"]) for h in own), key=lambda m: -m[1])[:2]
        assert f["score"] == f["moments"][0]["score"] and f["page_url"] == f"/#/video/{f['video_id']}"
        assert f["on_disk"] and all(m["play_url"].startswith(f"/media/{f['video_id']}#t=") for m in f["moments"])
    assert client.post("/search/files", json={"q": q, "per_file": 2, "min_confidence": "none"}).json()["files"] == files
    best = client.get("/search/files", params={"q": "ask not what your country can do for you", "limit": 1}).json()
    assert [(f["title"], f["band"]) for f in best["files"]] == [("jfk.flac", "high")]
    assert client.get("/search/files", params={"q": "xqzv plorth wimble"}).json()["files"] == []
    for params in ({"q": q, "per_file": 0}, {"q": q, "per_file": 21}, {"q": q, "limit": 101}, {"q": ""},
                   {"q": q, "min_confidence": "sure"}):
        assert_error(client.get("/search/files", params=params), 422)
    assert_error(client.post("/search/files", json={"q": q, "per_file": "two"}), 422)


def test_search_takes_a_folder_and_a_time_range(client: TestClient) -> None:
    q = "ask not what your country can do for you"
    audio = str(MEDIA / "audio") + "/"
    both = client.get("/search", params={"q": q, "under": audio, "from_seconds": 5, "to_seconds": 9,
                                         "min_confidence": "none"}).json()["hits"]
    assert both and all(h["source"].startswith(audio) and h["end"] >= 5 and h["start"] <= 9 for h in both)
    body = {"q": q, "min_confidence": "none", "filters": {"under": audio, "from_seconds": 5, "to_seconds": 9}}
    assert client.post("/search", json=body).json()["hits"] == both
    assert client.get("/search", params={"q": q, "under": str(MEDIA / "video") + "/"}).json()["hits"] == []
    assert_error(client.get("/search", params={"q": q, "from_seconds": 9, "to_seconds": 5}), 422, "before it starts")
    assert_error(client.get("/search/files", params={"q": q, "from_seconds": -1}), 422)
    assert_error(client.get("/search", params={"q": q, "under": ""}), 422)
    assert_error(client.post("/search", json={"q": q, "filters": {"from_seconds": "soon"}}), 422)


def test_a_question_is_searched_as_written(client: TestClient) -> None:
    r = client.get("/search", params={"q": "When does someone say banana?", "limit": 3, "min_confidence": "none"})
    assert r.status_code == 200, r.text
    titles = [h["title"] for h in r.json()["hits"]]
    assert "auto-editor_example.mp4" in titles, titles


def test_the_reader_chooses_how_sure_a_hit_must_be(client: TestClient) -> None:
    q = "ask not what your country can do for you"
    found = {level: client.get("/search", params={"q": q, "limit": 50, "min_confidence": level}).json()["hits"]
             for level in ("high", "medium", "low", "none")}
    sizes = [len(found[level]) for level in ("high", "medium", "low", "none")]
    assert sizes == sorted(sizes) and sizes[0] >= 1 and all(h["band"] == "high" for h in found["high"])
    assert client.get("/search", params={"q": q}).json()["hits"] == found["low"][:10]
    body = client.post("/search", json={"q": "xqzv plorth wimble", "min_confidence": "none", "limit": 2}).json()
    assert len(body["hits"]) == 2  # the closest moments, for a reader who asks for them


def test_what_the_archive_does_not_hold_is_an_empty_list(client: TestClient) -> None:
    for q in ("xqzv plorth wimble", "a recipe for kimchi fried rice", "내일 서울 날씨"):
        r = client.get("/search", params={"q": q})
        assert r.status_code == 200 and r.json()["hits"] == [], (q, r.text)


def test_search_in_another_language_and_by_post_with_filters(client: TestClient, sample: Sample) -> None:  # noqa: F811
    r = client.get("/search", params={"q": "Fragt nicht, was euer Land für euch tun kann", "limit": 1})
    assert Path(r.json()["hits"][0]["source"]).name == "jfk.flac"
    video = sample.video_id("auto-editor_example.mp4")
    r = client.post("/search", json={"q": "my fellow Americans", "limit": 5, "filters": {"video_id": video}})
    assert r.status_code == 200 and r.json()["hits"] == [], r.text  # JFK is not in that video
    r = client.post("/search", json={"q": "an example video", "limit": 5, "filters": {"video_id": video}})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert hits and all(h["video_id"] == video for h in hits)
    r = client.post("/search", json={"q": "my fellow Americans", "filters": {"modality": "ocr"}})
    assert r.status_code == 200 and all(h["modality"] == "ocr" for h in r.json()["hits"])


def test_video_hits_carry_a_thumbnail_that_is_served(client: TestClient, sample: Sample) -> None:  # noqa: F811
    video = sample.video_id("auto-editor_example.mp4")
    hits = client.get("/search", params={"q": "example video", "video_id": video}).json()["hits"]
    with_thumb = [h for h in hits if h["thumbnail_url"]]
    assert with_thumb, hits
    r = client.get(with_thumb[0]["thumbnail_url"])
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg" and r.content[:2] == b"\xff\xd8"


@pytest.mark.parametrize(
    ("params", "where"),
    [({}, "q"), ({"q": ""}, "q"), ({"q": "x" * 1001}, "q"), ({"q": "x", "limit": 0}, "limit"),
     ({"q": "x", "limit": 101}, "limit"), ({"q": "x", "limit": "ten"}, "limit"),
     ({"q": "x", "modality": "smell"}, "modality"), ({"q": "   "}, "empty"), ({"q": "x" * 10_000}, "q"),
     ({"q": "🙂🎉🚀"}, "letters or digits"), ({"q": "x", "min_confidence": "sure"}, "min_confidence")],
)
def test_bad_search_parameters_are_refused_clearly(client: TestClient, params: dict, where: str) -> None:
    assert_error(client.get("/search", params=params), 422, where)


@pytest.mark.parametrize(
    ("body", "where"),
    [({"limit": 3}, "q"), ({"q": "x", "colour": "red"}, "colour"), ({"q": "x", "filters": {"modality": "x"}}, "modality"),
     ({"q": 5}, "q"), ([1, 2], ""), ({"q": "x", "min_confidence": "maybe"}, "min_confidence")],
)
def test_bad_search_bodies_are_refused_clearly(client: TestClient, body, where: str) -> None:
    assert_error(client.post("/search", json=body), 422, where)


def test_malformed_and_oversized_bodies(client: TestClient) -> None:
    assert_error(client.post("/search", content=b'{"q": ', headers={"content-type": "application/json"}), 422)
    big = b'{"q": "' + b"a" * (2 * 1024**2) + b'"}'
    assert_error(client.post("/search", content=big, headers={"content-type": "application/json"}), 413, "limit")
    assert_error(client.post("/search", content=b"x", headers={"content-length": "abc"}), 400, "Content-Length")


def test_search_by_image(client: TestClient, sample: Sample) -> None:  # noqa: F811
    png = (MEDIA / "images" / "CLIP.png").read_bytes()
    assert_error(client.post("/search/image", content=png, headers={"content-type": "text/plain"}), 415, "image")
    assert_error(client.post("/search/image", content=b"", headers={"content-type": "image/png"}), 400, "empty")
    assert_error(client.post("/search/image", content=b"\x89PNG broken", headers={"content-type": "image/png"}),
                 422, "image")
    rocket = (MEDIA / "images" / "skimage_rocket.jpg").read_bytes()
    r = client.post("/search/image", content=rocket, headers={"content-type": "image/jpeg"})
    assert r.status_code == 200 and r.json()["hits"] == [], r.text  # no rocket anywhere in the archive
    # A shot's own thumbnail (smaller, re-encoded) finds that shot, surely.
    video = sample.video_id("auto-editor_example.mp4")
    thumb = next(p["thumbnail"] for p in sample.index.store.segments_of(video, "visual") if p.get("thumbnail"))
    shot = (sample.settings.index_dir / "thumbs" / thumb).read_bytes()
    r = client.post("/search/image", content=shot, headers={"content-type": "image/jpeg"})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert hits and all(h["modality"] == "visual" for h in hits)
    assert hits[0]["video_id"] == video and hits[0]["score"] >= 0.9  # picture similarity (no band: no fitted model)
    assert {"thumbnail_url", "play_url", "start", "end"} <= set(hits[0])


# ---- videos, transcripts, media ----------------------------------------------------------------

def test_videos_list_and_detail_with_transcript(client: TestClient, sample: Sample) -> None:  # noqa: F811
    listed = client.get("/videos").json()
    assert sorted(v["title"] for v in listed) == ["auto-editor_example.mp4", "jfk.flac"]
    jfk = next(v for v in listed if v["title"] == "jfk.flac")
    assert jfk["has_video"] is False and 10.5 < jfk["duration"] < 11.5
    detail = client.get(f"/videos/{jfk['video_id']}").json()
    assert detail["probe"]["has_audio"] is True and detail["probe"]["sample_rate"]
    text = " ".join(line["text"] for line in detail["transcript"]).lower()
    assert "fellow americans" in text and "your country" in text
    starts = [line["start"] for line in detail["transcript"]]
    assert starts == sorted(starts)
    video = next(v for v in listed if v["title"] == "auto-editor_example.mp4")
    assert video["has_video"] and video["thumbnail_url"].startswith(f"/thumbs/{video['video_id']}/")


def test_transcript_exports(client: TestClient, sample: Sample) -> None:  # noqa: F811
    vid = sample.video_id("jfk.flac")
    lines = client.get(f"/videos/{vid}/transcript").json()
    srt = client.get(f"/videos/{vid}/transcript", params={"format": "srt"})
    assert srt.headers["content-type"].startswith("application/x-subrip")
    cues = srt.text.strip().split("\n\n")
    assert len(cues) >= len(lines)  # cues are cut to subtitle size from the sentences' words
    assert all(len(line) <= 42 for cue in cues for line in cue.splitlines()[2:])
    txt = client.get(f"/videos/{vid}/transcript", params={"format": "txt"})
    assert txt.headers["content-type"].startswith("text/plain") and "fellow Americans" in txt.text
    assert all("speaker" in line for line in lines)
    first = cues[0].splitlines()
    assert first[0] == "1" and re.fullmatch(r"\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}", first[1])
    vtt = client.get(f"/videos/{vid}/transcript", params={"format": "vtt"})
    assert vtt.headers["content-type"].startswith("text/vtt") and vtt.text.startswith("WEBVTT\n\n")
    assert re.search(r"\d\d:\d\d:\d\d\.\d{3} --> ", vtt.text)
    assert_error(client.get(f"/videos/{vid}/transcript", params={"format": "docx"}), 422, "format")


@pytest.mark.parametrize("path", ["/videos/0000000000000000", "/videos/0000000000000000/transcript",
                                  "/media/0000000000000000"])
def test_unknown_video_is_404(client: TestClient, path: str) -> None:
    assert_error(client.get(path), 404, "no video")


def test_bad_video_id_is_422(client: TestClient) -> None:
    assert_error(client.get("/videos/bad%20id%3B"), 422, "video_id")


def test_media_supports_range_requests(client: TestClient, sample: Sample) -> None:  # noqa: F811
    vid = sample.video_id("auto-editor_example.mp4")
    size = media("video/auto-editor_example.mp4").stat().st_size
    whole = client.get(f"/media/{vid}")
    assert whole.status_code == 200 and len(whole.content) == size
    assert whole.headers["accept-ranges"] == "bytes" and whole.headers["content-type"] == "video/mp4"
    part = client.get(f"/media/{vid}", headers={"Range": "bytes=100-199"})
    assert part.status_code == 206 and part.content == whole.content[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{size}"
    tail = client.get(f"/media/{vid}", headers={"Range": "bytes=-10"})
    assert tail.status_code == 206 and tail.content == whole.content[-10:]
    bad = client.get(f"/media/{vid}", headers={"Range": f"bytes={size + 10}-"})
    assert bad.status_code == 416
    audio = client.get(f"/media/{sample.video_id('jfk.flac')}", headers={"Range": "bytes=0-3"})
    assert audio.status_code == 206 and audio.content == b"fLaC"


def test_a_moment_is_downloaded_as_a_clip_of_its_own(sample: Sample, tmp_path: Path) -> None:  # noqa: F811
    from mediaindex.media.probe import probe

    settings = sample.app_settings(tmp_path)
    with make_client(sample, tmp_path) as c:
        video = c.get(f"/media/{sample.video_id('auto-editor_example.mp4')}/clip", params={"start": 14, "end": 17})
        assert video.status_code == 200, video.text
        assert video.headers["content-type"] == "video/mp4"
        assert video.headers["content-disposition"] == 'attachment; filename="auto-editor_example_0m14.0s-0m17.0s.mp4"'
        sound = c.get(f"/media/{sample.video_id('jfk.flac')}/clip", params={"start": 2, "end": 99})
        assert sound.status_code == 200 and sound.headers["content-type"] == "audio/mp4"
        assert "jfk_0m02.0s-0m11.0s.m4a" in sound.headers["content-disposition"]  # held to the file's end
        for body, suffix, seconds in ((video.content, ".mp4", 3.0), (sound.content, ".m4a", 9.0)):
            saved = tmp_path / f"got{suffix}"
            saved.write_bytes(body)
            assert probe(saved).duration == pytest.approx(seconds, abs=0.1)
        assert probe(tmp_path / "got.mp4").has_video and not probe(tmp_path / "got.m4a").has_video
        assert not list(settings.temp_dir.glob("clip-*"))  # each cut is deleted once sent
        jfk = sample.video_id("jfk.flac")
        assert_error(c.get(f"/media/{jfk}/clip", params={"start": 5, "end": 2}), 422, "before it starts")
        assert_error(c.get(f"/media/{jfk}/clip", params={"start": 30, "end": 40}), 422, "after the file ends")
        assert_error(c.get(f"/media/{jfk}/clip", params={"start": -1, "end": 2}), 422)
        assert_error(c.get(f"/media/{jfk}/clip", params={"start": 1}), 422)
        assert_error(c.get("/media/0000000000000000/clip", params={"start": 1, "end": 2}), 404, "no video")
    (tmp_path / "elsewhere").mkdir()
    with make_client(sample, tmp_path, media_roots=[tmp_path / "elsewhere"]) as c:
        assert_error(c.get(f"/media/{sample.video_id('jfk.flac')}/clip", params={"start": 1, "end": 2}), 403)


def test_shots_like_a_files_shot_leave_that_shot_out(client: TestClient, sample: Sample) -> None:  # noqa: F811
    vid = sample.video_id("auto-editor_example.mp4")
    own = [s for s in sample.index.store.segments_of(vid, "visual") if s["start"] <= 3.0 <= s["end"]]
    everything = client.get("/search/like", params={"video_id": vid, "t": 3, "min_confidence": "none", "limit": 50})
    assert everything.status_code == 200, everything.text
    hits = everything.json()["hits"]
    shots = sample.index.store.count(SearchFilters(modality="visual"))
    assert len(own) == 1 and (hits or shots == 1) and all(h["modality"] == "visual" for h in hits)
    assert not any(h["video_id"] == vid and h["start"] <= own[0]["start"] and own[0]["end"] <= h["end"] for h in hits)
    frame = (sample.settings.thumbs_dir / own[0]["thumbnail"]).read_bytes()
    picture = client.post("/search/image", params={"limit": 50}, content=frame,
                          headers={"Content-Type": "image/jpeg"}).json()["hits"]
    assert picture and picture[0]["video_id"] == vid  # the same frame as a picture finds its own shot first
    closest = client.post("/search/image", params={"limit": 50, "min_confidence": "none"}, content=frame,
                          headers={"Content-Type": "image/jpeg"}).json()["hits"]
    assert len(closest) >= len(picture) and closest[:len(picture)] == picture
    assert_error(client.post("/search/image", params={"min_confidence": "sure"}, content=frame,
                             headers={"Content-Type": "image/jpeg"}), 422, "unknown min_confidence")
    close = client.get("/search/like", params={"video_id": vid, "t": 3}).json()["hits"]
    assert [h["start"] for h in close] == [h["start"] for h in hits if h["score"] >= 0.5864][:10]
    assert_error(client.get("/search/like", params={"video_id": sample.video_id("jfk.flac"), "t": 3}), 422, "no shot")
    assert_error(client.get("/search/like", params={"video_id": vid, "t": 500}), 422, "no shot")
    assert_error(client.get("/search/like", params={"video_id": "0000000000000000", "t": 3}), 404, "no video")
    assert_error(client.get("/search/like", params={"video_id": vid, "t": -1}), 422)
    assert_error(client.get("/search/like", params={"video_id": vid}), 422)
    assert_error(client.get("/search/like", params={"video_id": vid, "t": 3, "min_confidence": "sure"}), 422)


def test_media_outside_the_roots_is_refused(sample: Sample, tmp_path: Path) -> None:  # noqa: F811
    (tmp_path / "elsewhere").mkdir()
    with make_client(sample, tmp_path, media_roots=[tmp_path / "elsewhere"]) as c:
        assert_error(c.get(f"/media/{sample.video_id('jfk.flac')}"), 403, "outside")
        assert_error(c.get("/files/audio/jfk.flac"), 404)


# ---- path safety ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rooted(sample: Sample, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:  # noqa: F811
    """A media root with a file inside, symlinks out of it, and a secret file beside it."""
    tmp_path = tmp_path_factory.mktemp("rooted")
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "clip.wav").write_bytes(media("audio/english.wav").read_bytes())
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    (root / "link-out.wav").symlink_to(secret)
    (root / "dir-out").symlink_to(tmp_path)
    (root / "link-in.wav").symlink_to(root / "sub" / "clip.wav")
    with make_client(sample, tmp_path, media_roots=[root]) as c:
        c.secret = secret  # type: ignore[attr-defined]
        yield c


def test_files_inside_the_root_are_served(rooted: TestClient) -> None:
    assert rooted.get("/files/sub/clip.wav").content[:4] == b"RIFF"
    assert rooted.get("/files/link-in.wav").status_code == 200  # a symlink that stays inside is fine


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("/files/%2e%2e/secret.txt", 403),                    # encoded ..
        ("/files/%2E%2E/%2E%2E/%2E%2E/etc/passwd", 403),
        ("/files/sub/..%2f..%2fsecret.txt", 403),             # encoded slash
        ("/files/sub%2f%2e%2e%2f%2e%2e%2fsecret.txt", 403),
        ("/files/..%5c..%5csecret.txt", 403),                 # backslash
        ("/files/%2fetc%2fpasswd", 403),                      # absolute, encoded
        ("/files//etc/passwd", 403),                          # absolute
        ("/files/%252e%252e/secret.txt", (403, 404)),         # double-encoded: refused or a literal name
        ("/files/link-out.wav", 403),                         # symlink out of the root
        ("/files/dir-out/secret.txt", 403),                   # symlinked folder out of the root
        ("/files/sub%00.wav", 400),                           # NUL byte
        ("/files/sub", 400),                                  # a folder, not a file
        ("/files/nothing-here.wav", 404),
        ("/thumbs/%2e%2e/%2e%2e/catalog.db", 403),            # thumbnails: same rules
        ("/thumbs//etc/passwd", 403),
    ],
)
def test_path_traversal_is_refused(rooted: TestClient, url: str, status: int | tuple[int, int]) -> None:
    r = rooted.get(url)
    assert_error(r, r.status_code if isinstance(status, tuple) and r.status_code in status else status)
    assert b"secret" not in r.content.replace(b"secret.txt", b"")


def test_literal_dot_dot_in_a_raw_request_is_refused(sample: Sample, tmp_path: Path,  # noqa: F811
                                                     live_server_factory) -> None:  # noqa: F811
    """Clients normalise `..` away; a raw request line keeps it, so send one over a socket."""
    import socket

    app = create_app(sample.app_settings(tmp_path, media_roots=[MEDIA / "audio"]), index=sample.index,
                     embedder=sample.embedder, pipeline=sample.pipeline)
    server = live_server_factory(app)
    for target in ("/files/../video/manifesto.mp4", "/files/..%2f..%2f..%2fetc%2fpasswd", "/media/../health"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            raw = b""
            while chunk := s.recv(65536):
                raw += chunk
        head, _, body = raw.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        assert status in (403, 404), (target, head)
        assert body.startswith(b"{") and b"ftyp" not in body


@pytest.mark.parametrize(
    ("paths", "status", "words"),
    [
        (["../secret.txt"], 403, ".."),
        (["sub/../../secret.txt"], 403, ".."),
        (["..\\secret.txt"], 403, ".."),
        (["/etc/passwd"], 403, "outside"),
        (["link-out.wav"], 403, "outside"),
        (["dir-out/secret.txt"], 403, "outside"),
        (["%2e%2e/secret.txt"], 404, "no file"),
        (["missing.wav"], 404, "no file"),
        (["sub\x00.wav"], 400, "NUL"),
        ([""], 400, "empty"),
    ],
)
def test_ingest_refuses_paths_outside_the_roots(rooted: TestClient, paths: list[str], status: int, words: str) -> None:
    before = len(rooted.get("/jobs").json())
    assert_error(rooted.post("/ingest", json={"paths": paths}), status, words)
    assert len(rooted.get("/jobs").json()) == before  # no job was created


@pytest.mark.parametrize("body", [{}, {"paths": []}, {"paths": "sub"}, {"paths": [1]}, {"paths": ["a"], "x": 1}])
def test_ingest_bodies_are_validated(rooted: TestClient, body) -> None:
    assert_error(rooted.post("/ingest", json=body), 422)


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, [True], {}])
def test_ingest_summaries_must_be_a_boolean(rooted: TestClient, value) -> None:
    before = len(rooted.get("/jobs").json())
    body = assert_error(rooted.post("/ingest", json={"paths": ["sub/clip.wav"], "summaries": value}), 422,
                        "summaries: Input should be a valid boolean")
    assert body["details"] == [{"where": "summaries", "problem": "Input should be a valid boolean"}]
    upload = rooted.post("/ingest/upload", params={"filename": "clip.wav", "summaries": "maybe"}, content=b"RIFF")
    assert_error(upload, 422, "query.summaries: Input should be a valid boolean")
    assert len(rooted.get("/jobs").json()) == before  # no job was created


def test_ingest_summaries_is_documented(rooted: TestClient) -> None:
    spec = rooted.get("/openapi.json").json()
    field = spec["components"]["schemas"]["IngestRequest"]["properties"]["summaries"]
    assert "ingest.summaries" in field["description"] and "--summaries" in field["description"]
    assert field["anyOf"] == [{"type": "boolean"}, {"type": "null"}] and field.get("default") is None
    upload = spec["paths"]["/ingest/upload"]["post"]["parameters"]
    assert "ingest.summaries" in next(p for p in upload if p["name"] == "summaries")["description"]


def test_no_media_roots_means_nothing_is_served(sample: Sample, tmp_path: Path) -> None:  # noqa: F811
    settings = sample.app_settings(tmp_path, media_roots=[], upload_dir=tmp_path / "up")
    app = create_app(settings, index=sample.index, embedder=sample.embedder, pipeline=sample.pipeline)
    with TestClient(app) as c:
        assert_error(c.get(f"/media/{sample.video_id('jfk.flac')}"), 403, "outside")
        assert_error(c.post("/ingest", json={"paths": [str(media("audio/jfk.flac"))]}), 403, "outside")


# ---- errors, health, metrics ---------------------------------------------------------------------

def test_unknown_routes_methods_and_internal_errors_answer_json(sample: Sample, tmp_path: Path) -> None:  # noqa: F811
    client = make_client(sample, tmp_path)
    assert_error(client.get("/no/such/thing"), 404)
    assert_error(client.delete("/search"), 405)

    @client.app.get("/boom")  # a route that fails the way an unforeseen bug would
    def boom() -> None:
        raise RuntimeError("secret internals /very/private/path")

    with client:
        r = client.get("/boom")
    body = assert_error(r, 500)
    assert "private" not in r.text and body["error"] == "internal"


def test_health_readiness_and_metrics(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    ready = client.get("/health/ready").json()
    assert ready["ready"] is True and ready["checks"]["index"].startswith("ok")
    client.get("/search", params={"q": "country"})
    client.get("/videos/0000000000000000")
    text = client.get("/metrics").text
    assert 'mediaindex_http_requests_total{method="GET",route="/search",status="200"}' in text
    assert 'route="/videos/{video_id}",status="404"' in text
    assert "mediaindex_http_request_seconds_bucket" in text
    assert 'mediaindex_searches_total{kind="text"}' in text


def test_not_ready_when_the_index_cannot_open(tmp_path: Path, cache_dir: Path, sample: Sample) -> None:  # noqa: F811
    from tests.conftest import make_settings

    index_dir = tmp_path / "index"
    index_dir.mkdir()
    (index_dir / "schema.json").write_text('{"schema_version": 999}')
    settings = make_settings(index_dir, cache_dir)
    with TestClient(create_app(settings, embedder=sample.embedder), raise_server_exceptions=False) as c:
        assert c.get("/health").status_code == 200
        r = c.get("/health/ready")
        assert r.status_code == 503 and r.json()["ready"] is False and "schema" in r.json()["checks"]["index"]
        assert_error(c.get("/search", params={"q": "x"}), 503, "index is not available")
