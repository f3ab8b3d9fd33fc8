"""Media given by web address: downloaded from a real HTTP server on loopback serving the shared recordings,
then indexed as files; servers that answer with errors, web pages, other types or cut-off transfers are made at
test time."""

from __future__ import annotations

import contextlib
import http.server
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mediaindex.media.download import Downloaded, DownloadError, DownloadStopped, Missed, download, is_url
from mediaindex.pipeline.discover import MEDIA_SUFFIXES
from tests.conftest import REPO, cli_environment, media

# A server's file that can be sent from a byte on: its version (ETag), and whether its next whole sending is cut off.
RESUMABLE: dict = {"etag": '"v1"', "cut": True, "asked": []}
HANGING = threading.Event()  # set once /hangs.mp4 sent its first bytes and went quiet
SILENT = threading.Event()  # set once /silent.mp4 was asked for (it answers nothing for HANG_S)
HANG_S = 20.0  # how long /hangs.mp4 stays quiet: well under the download's own 30 s timeout


class _Handler(http.server.SimpleHTTPRequestHandler):
    """The shared recordings under /files/, and the odd answers servers give."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass

    def _send(self, status: int, kind: str, body: bytes, length: int | None = None, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)

    def _resumable(self, body: bytes) -> None:
        asked, version = self.headers.get("Range"), self.headers.get("If-Range")
        RESUMABLE["asked"].append(asked)
        if asked and version == RESUMABLE["etag"]:
            start = int(asked.removeprefix("bytes=").removesuffix("-"))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            sent = body[start:]
        else:
            self.send_response(200)
            sent = body[: len(body) // 3] if RESUMABLE["cut"] else body
            RESUMABLE["cut"] = False
        self.send_header("Content-Type", "video/mp4")
        self.send_header("Content-Length", str(len(sent) if asked and version == RESUMABLE["etag"] else len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", RESUMABLE["etag"])
        self.end_headers()
        with contextlib.suppress(OSError):  # the client read the headers and went (it asks for the rest instead)
            self.wfile.write(sent)
        self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 (the base class's name)
        bird = media("video/cockatoo.mp4").read_bytes()
        if self.path.startswith("/files/"):
            super().do_GET()
        elif self.path == "/watch?v=cockatoo":  # a page whose video is elsewhere
            self._send(200, "text/html; charset=utf-8", b"<!doctype html><title>A cockatoo</title>"
                       b'<video controls src="/files/cockatoo.mp4"></video>')
        elif self.path == "/talk":  # the talk's own captions beside its video; one more track that is gone
            self._send(200, "text/html", b'<title>Manifesto</title><video src="/files/manifesto.mp4">'
                                         b'<track kind="captions" srclang="en" src="/files/manifesto.vtt">'
                                         b'<track kind="subtitles" srclang="de" src="/files/gone.vtt"></video>')
        elif self.path == "/big/lecture.mp4":
            self._resumable(media("video/manifesto.mp4").read_bytes())
        elif self.path == "/two":
            self._send(200, "text/html", b'<title>Two</title><video src="/files/cockatoo.mp4"></video>'
                                         b'<video src="/files/jfk%20speech.flac"></video>')
        elif self.path == "/one-lost":
            self._send(200, "text/html", b'<title>Two</title><video src="/files/cockatoo.mp4"></video>'
                                         b'<video src="/files/gone.mp4"></video>')
        elif self.path == "/sounds":
            self._send(200, "text/html", b'<title>Sounds</title><audio src="/files/jfk%20speech.flac"></audio>'
                                         b'<audio src="/files/gone.flac"></audio>')
        elif self.path == "/lost":
            self._send(200, "text/html", b'<title>Lost</title><video src="/files/gone.mp4"></video>')
        elif self.path.startswith("/page/"):  # a page whose video is at an address of its own: /page/HOST:PORT/PATH
            video = f'<video src="http://{self.path.removeprefix("/page/")}"></video>'
            self._send(200, "text/html", b"<title>Elsewhere</title>" + video.encode())
        elif self.path == "/live":  # a stream that yt-dlp hands to another program (rtmpdump)
            self._send(200, "text/html", b'<title>Live</title><video src="rtmp://media.example/live/bird"></video>')
        elif self.path == "/about":
            self._send(200, "text/html; charset=utf-8", b"<!doctype html><title>About</title><p>Nothing to see.</p>")
        elif self.path == "/get/1234":  # no name in the path: the server names the file
            self._send(200, "video/mp4", bird, Content_Disposition='attachment; filename="bird clip.mp4"')
        elif self.path == "/stream/bird" or self.path.startswith("/any/"):  # /stream/bird: the type names it
            self._send(200, "video/mp4", bird)
        elif self.path == "/blob":
            self._send(200, "application/octet-stream", b"\x00" * 1000)
        elif self.path == "/notes.txt":
            self._send(200, "text/plain", b"not media")
        elif self.path == "/moved.mp4":
            self.send_response(302)
            self.send_header("Location", "/files/cockatoo.mp4")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/cut.mp4":  # says its length, sends half, closes
            self._send(200, "video/mp4", bird[: len(bird) // 2], length=len(bird))
            self.close_connection = True
        elif self.path == "/stalls.mp4":
            self.send_response(200)
            self.send_header("Content-Type", "video/mp4")
            self.send_header("Content-Length", str(len(bird)))
            self.end_headers()
            self.wfile.write(bird[:1000])
            self.wfile.flush()
            time.sleep(3)
        elif self.path == "/hangs.mp4":  # a transfer that stops sending, the connection left open
            self.send_response(200)
            self.send_header("Content-Type", "video/mp4")
            self.send_header("Content-Length", str(len(bird)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the client went
                self.wfile.write(bird[:1000])
                self.wfile.flush()
                HANGING.set()
                time.sleep(HANG_S)
            self.close_connection = True
        elif self.path == "/silent.mp4":  # a request read and never answered
            SILENT.set()
            time.sleep(HANG_S)
            self.close_connection = True
        elif self.path == "/slow.mp4":  # a large file arriving slowly: a chunk every tenth of a second
            self.send_response(200)
            self.send_header("Content-Type", "video/mp4")
            self.send_header("Content-Length", str(len(bird) * 100))
            self.end_headers()
            with contextlib.suppress(OSError):  # the client went
                for _ in range(300):
                    self.wfile.write(bird[:4096])
                    self.wfile.flush()
                    time.sleep(0.1)
            self.close_connection = True
        elif self.path == "/live/index.m3u8":
            self._send(200, "application/vnd.apple.mpegurl", b"#EXTM3U\n#EXT-X-VERSION:3\nsegment0.ts\n")
        elif self.path == "/empty.mp4":
            self._send(200, "video/mp4", b"")
        else:
            self._send(404, "text/plain", b"no such file")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("served")) as address:
        yield address


@contextlib.contextmanager
def serving(root: Path, host: str = "127.0.0.1") -> Iterator[str]:
    """A loopback server's address (`host`: 127.0.0.1, or another of 127/8): /files/ holds cockatoo.mp4, jfk.flac,
    manifesto.mp4 and its captions, copied from the shared media into `root`."""
    (root / "files").mkdir(parents=True)
    shutil.copy(media("video/cockatoo.mp4"), root / "files" / "cockatoo.mp4")
    shutil.copy(media("audio/jfk.flac"), root / "files" / "jfk speech.flac")
    shutil.copy(media("video/manifesto.mp4"), root / "files" / "manifesto.mp4")
    shutil.copy(media("groundtruth/manifesto.vtt"), root / "files" / "manifesto.vtt")
    shutil.copy(media("audio/LJ002-0020.wav"), root / "files" / "LJ002-0020.wav")

    def handler(*args: object) -> _Handler:
        return _Handler(*args, directory=str(root))  # type: ignore[arg-type]

    httpd = http.server.ThreadingHTTPServer((host, 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_addresses_are_told_from_paths() -> None:
    assert [is_url(t) for t in ("http://host/a.mp4", "HTTPS://host/a.mp4", "https://h")] == [True] * 3
    assert [is_url(t) for t in ("a.mp4", "/tmp/http://x", "ftp://host/a.mp4", "http:/host/a.mp4", "")] == [False] * 5


def test_a_file_is_downloaded_once_where_its_address_says(server: str, tmp_path: Path) -> None:
    host = server.removeprefix("http://").replace(":", "_")
    [got] = download(f"{server}/files/cockatoo.mp4", tmp_path, MEDIA_SUFFIXES)
    assert got.fetched and got.path == tmp_path / host / "files" / "cockatoo.mp4"
    assert got.path.read_bytes() == media("video/cockatoo.mp4").read_bytes()
    seen: list[tuple[int, int | None]] = []
    [again] = download(f"{server}/files/cockatoo.mp4", tmp_path, MEDIA_SUFFIXES, lambda d, t: seen.append((d, t)))
    assert (again.path, again.fetched, seen) == (got.path, False, [])  # there already, as the server has it
    got.path.write_bytes(b"an older copy")
    [again] = download(f"{server}/files/cockatoo.mp4", tmp_path, MEDIA_SUFFIXES, lambda d, t: seen.append((d, t)))
    assert again.fetched and again.path.read_bytes() == media("video/cockatoo.mp4").read_bytes()
    size = got.path.stat().st_size
    assert seen[-1] == (size, size)
    # A space in the name; a redirect lands where the file is; a name from the server, or a suffix from its type.
    assert download(f"{server}/files/jfk%20speech.flac", tmp_path, MEDIA_SUFFIXES)[0].path.name == "jfk speech.flac"
    assert download(f"{server}/moved.mp4", tmp_path, MEDIA_SUFFIXES)[0].path == got.path
    assert download(f"{server}/get/1234", tmp_path, MEDIA_SUFFIXES)[0].path == tmp_path / host / "get" / "bird clip.mp4"
    assert download(f"{server}/stream/bird", tmp_path, MEDIA_SUFFIXES)[0].path == tmp_path / host / "stream" / "bird.mp4"
    # A file downloaded where another address needs a folder: said, nothing written.
    assert download(f"{server}/any/clip.mp4", tmp_path, MEDIA_SUFFIXES)[0].fetched
    with pytest.raises(DownloadError, match="cannot make the folder .*clip.mp4 "):
        download(f"{server}/any/clip.mp4/part.mp4", tmp_path, MEDIA_SUFFIXES)
    # A path that climbs out of the folder stays in it.
    with pytest.raises(DownloadError, match="404"):
        download(f"{server}/files/%2E%2E/%2E%2E/etc/passwd.mp4", tmp_path, MEDIA_SUFFIXES)
    assert all(tmp_path in p.parents for p in tmp_path.rglob("*"))


@pytest.mark.parametrize(("path", "said"), [
    ("/about", "a web page with no video found in it: give the address of the media file itself"),
    ("/lost", "the page's video could not be saved (unable to download video data: HTTP Error 404"),
    ("/files/nothing.mp4", "the server answered 404 File not found"),
    ("/gone", "the server answered 404 Not Found"),
    ("/blob", "not a media file (“blob”, application/octet-stream)"),
    ("/notes.txt", "not a media file (“notes.txt”, text/plain)"),
    ("/cut.mp4", "the transfer ended after "),
    ("/stalls.mp4", "the transfer stalled after 1,000 bytes"),
    ("/empty.mp4", "the server sent no bytes"),
    ("/live/index.m3u8", "a streaming playlist (HLS or DASH), not a media file: save the stream as one file"),
])
def test_what_gives_no_media_file_is_said_and_leaves_nothing(server: str, tmp_path: Path, path: str, said: str) -> None:
    with pytest.raises(DownloadError) as caught:
        download(f"{server}{path}", tmp_path, MEDIA_SUFFIXES, timeout=1.0)
    assert str(caught.value).startswith(said), str(caught.value)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # no part file left behind


def test_a_stalled_transfer_ends_as_soon_as_its_caller_stops_it(server: str, tmp_path: Path) -> None:
    """Not when the stall would time out: a cancelled job's download ends within a second, leaving no part file
    (this server cannot send the rest later), also while it waits for the server's answer."""
    asked = threading.Event()
    stopped_at: list[float] = []

    def stopped() -> bool:
        if HANGING.is_set() and not stopped_at:
            stopped_at.append(time.monotonic())
        asked.set()
        return bool(stopped_at)

    HANGING.clear()
    began = time.monotonic()
    with pytest.raises(DownloadStopped, match="stopped after 1,000 bytes"):
        download(f"{server}/hangs.mp4", tmp_path, MEDIA_SUFFIXES, stopped=stopped)
    assert asked.is_set() and stopped_at and time.monotonic() - stopped_at[0] < 1.0
    assert time.monotonic() - began < HANG_S / 2
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    # A server that reads the request and never answers: stopped while it waits.
    SILENT.clear()
    began = time.monotonic()
    with pytest.raises(DownloadStopped, match="stopped before the server answered"):
        download(f"{server}/silent.mp4", tmp_path, MEDIA_SUFFIXES, stopped=SILENT.is_set)
    assert time.monotonic() - began < HANG_S / 2
    # A caller that never stops it: the file comes whole, as without one.
    got = download(f"{server}/files/cockatoo.mp4", tmp_path, MEDIA_SUFFIXES, stopped=lambda: False)
    assert isinstance(got[0], Downloaded) and got[0].path.read_bytes() == media("video/cockatoo.mp4").read_bytes()


def test_a_pages_stalled_video_ends_as_soon_as_its_caller_stops_it(server: str, tmp_path: Path) -> None:
    """yt-dlp's transfer of a page's video is stopped as a file's is: its connection is shut within a second of the
    caller's stop, not when the stall would time out, and nothing is left behind."""
    stopped_at: list[float] = []

    def stopped() -> bool:
        if HANGING.is_set() and not stopped_at:
            stopped_at.append(time.monotonic())
        return bool(stopped_at)

    HANGING.clear()
    began = time.monotonic()
    page = f"{server}/page/{server.removeprefix('http://')}/hangs.mp4"
    with pytest.raises(DownloadStopped, match="stopped while it fetched the page or its video"):
        download(page, tmp_path, MEDIA_SUFFIXES, stopped=stopped)
    assert stopped_at and time.monotonic() - stopped_at[0] < 1.0
    assert time.monotonic() - began < HANG_S / 2
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_the_video_of_a_web_page_is_saved_once(server: str, tmp_path: Path) -> None:
    """A page with a video in it: yt-dlp finds the video and saves it under the page's host, named by its title."""
    seen: list[tuple[int, int | None]] = []
    [got] = download(f"{server}/watch?v=cockatoo", tmp_path, MEDIA_SUFFIXES, lambda d, t: seen.append((d, t)))
    host = server.removeprefix("http://").replace(":", "_")
    assert got.fetched and got.path.parent == tmp_path / host and got.path.name.startswith("A cockatoo")
    assert got.path.suffix == ".mp4" and got.path.read_bytes() == media("video/cockatoo.mp4").read_bytes()
    assert seen and seen[-1][0] == got.path.stat().st_size
    [again] = download(f"{server}/watch?v=cockatoo", tmp_path, MEDIA_SUFFIXES)
    assert (again.path, again.fetched) == (got.path, False)
    assert sorted(p.name for p in (tmp_path / host).iterdir()) == [got.path.name]


def test_each_video_of_a_page_of_several_is_saved_up_to_the_limit(server: str, tmp_path: Path) -> None:
    """A page of several videos (a playlist's, a channel's) gives each of its videos as a file; past the limit
    they are left out, and said to be; one that cannot be had costs only itself."""
    host = tmp_path / server.removeprefix("http://").replace(":", "_")
    first, more = download(f"{server}/two", tmp_path, MEDIA_SUFFIXES, max_videos=1)
    assert isinstance(first, Downloaded) and first.fetched and first.path.parent == host
    assert first.url == f"{server}/files/cockatoo.mp4" and first.path.read_bytes() == media("video/cockatoo.mp4").read_bytes()
    assert more == Missed(f"{server}/two", "the page's videos after the first 1 are left out (ingest.max_page_videos)")
    both = download(f"{server}/two", tmp_path, MEDIA_SUFFIXES)
    assert [(type(d), d.fetched) for d in both] == [(Downloaded, False), (Downloaded, True)]  # type: ignore[union-attr]
    assert both[1].path.suffix == ".flac" and both[1].path.read_bytes() == media("audio/jfk.flac").read_bytes()  # type: ignore[union-attr]
    one_lost = download(f"{server}/one-lost", tmp_path, MEDIA_SUFFIXES)
    assert isinstance(one_lost[0], Downloaded) and one_lost[0].path.name == "Two (1) [one-lost-1].mp4"
    assert isinstance(one_lost[1], Missed) and one_lost[1].url == f"{server}/files/gone.mp4"
    assert one_lost[1].reason.startswith("the page's video could not be saved (unable to download video data: HTTP "
                                         "Error 404")
    assert sorted(p.suffix for p in host.iterdir()) == [".flac", ".mp4", ".mp4"]  # and no part file


def test_a_pages_subtitles_come_with_its_video(server: str, tmp_path: Path) -> None:
    """The captions a page gives its video are saved beside it, named as subtitle files are read with their media
    file; a track the page names but the server lacks costs only that track."""
    from mediaindex.media.subtitles import read_subtitles

    [got] = download(f"{server}/talk", tmp_path, MEDIA_SUFFIXES)
    assert got.fetched and got.path.read_bytes() == media("video/manifesto.mp4").read_bytes()
    assert sorted(p.name for p in got.path.parent.iterdir()) == sorted([got.path.name, f"{got.path.stem}.en.vtt"])
    found = read_subtitles(got.path)
    (track,) = found.tracks
    assert (track.origin, track.language) == (f"{got.path.stem}.en.vtt", "en")
    assert track.cues[0].text == "this audiobook is in the public domain"


def test_the_chapters_a_site_gives_a_video_are_written_into_the_saved_file(server: str, tmp_path: Path) -> None:
    """What a video site's extractor gives yt-dlp (its chapters among it; no site is reached here, so the
    extractor's answer is written out) saved as a page's video is: the file marks those chapters, which the probe
    reads; a video given without chapters is saved byte for byte as it came."""
    import yt_dlp

    from mediaindex.media.download import page_options
    from mediaindex.media.probe import probe

    given = {"id": "bird1", "title": "A cockatoo", "ext": "mp4", "url": f"{server}/files/cockatoo.mp4",
             "chapters": [{"start_time": 0.0, "end_time": 5.0, "title": "The bird looks up"},
                          {"start_time": 5.0, "end_time": 14.0, "title": "It turns its head"}]}
    bare = {**{k: v for k, v in given.items() if k != "chapters"}, "id": "bird2"}
    with yt_dlp.YoutubeDL(page_options(tmp_path, lambda status: None, 5)) as loader:
        saved = [Path(loader.process_ie_result(dict(info), download=True)["requested_downloads"][0]["filepath"])
                 for info in (given, bare)]
    assert [(c["start"], c["end"], c["title"]) for c in probe(saved[0]).chapters] == [
        (0.0, 5.0, "The bird looks up"), (5.0, 14.0, "It turns its head")]
    assert saved[1].read_bytes() == media("video/cockatoo.mp4").read_bytes() and probe(saved[1]).chapters == []


def test_a_download_cut_short_goes_on_from_where_it_stopped(server: str, tmp_path: Path) -> None:
    """A server that sends a file from a byte on (Accept-Ranges, ETag): a transfer cut off keeps its hidden part,
    and the next download of the address asks for the rest of that version alone; a changed version comes whole."""
    whole = media("video/manifesto.mp4").read_bytes()
    url = f"{server}/big/lecture.mp4"
    RESUMABLE.update(etag='"v1"', cut=True, asked=[])
    with pytest.raises(DownloadError, match="the transfer ended after .* of .*; an ingest of this address again goes "
                                            "on from there"):
        download(url, tmp_path, MEDIA_SUFFIXES)
    kept = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert sorted(p.name for p in kept) == [".lecture.mp4.part", ".lecture.mp4.part.version"]  # hidden: not media
    seen: list[tuple[int, int | None]] = []
    [got] = download(url, tmp_path, MEDIA_SUFFIXES, lambda d, t: seen.append((d, t)))
    assert got.fetched and got.path.read_bytes() == whole
    third = len(whole) // 3
    assert RESUMABLE["asked"] == [None, None, f"bytes={third}-"]  # the rest alone, once the file was seen unchanged
    assert seen[0][0] > third and seen[-1] == (len(whole), len(whole))
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["lecture.mp4"]

    got.path.unlink()
    RESUMABLE.update(cut=True)
    with pytest.raises(DownloadError):
        download(url, tmp_path, MEDIA_SUFFIXES)
    RESUMABLE.update(etag='"v2"', asked=[])  # the file changed on the server: what was kept is not continued
    [got] = download(url, tmp_path, MEDIA_SUFFIXES)
    assert got.path.read_bytes() == whole and RESUMABLE["asked"] == [None]
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["lecture.mp4"]


def test_an_unreachable_host_is_said(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    with pytest.raises(DownloadError, match=r"cannot reach 127\.0\.0\.1 \(Connection refused\)"):
        download(f"http://127.0.0.1:{port}/a.mp4", tmp_path, MEDIA_SUFFIXES)
    with pytest.raises(DownloadError, match="cannot reach no-such-host.invalid"):
        download("http://no-such-host.invalid/a.mp4", tmp_path, MEDIA_SUFFIXES)


@pytest.mark.slow
@pytest.mark.beside
def test_ingest_takes_web_addresses(server: str, tmp_path: Path, cache_dir: Path) -> None:
    """`mediaindex ingest URL …` as a user runs it: the file is downloaded into the index's downloads/ folder and
    indexed; an address with no media file is said to be skipped; again, nothing is downloaded or indexed anew."""
    env = cli_environment(tmp_path / "index", cache_dir, tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    cmd = [sys.executable, "-m", "mediaindex", "ingest", f"{server}/files/jfk%20speech.flac", f"{server}/about"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    stored = tmp_path / "index" / "downloads" / server.removeprefix("http://").replace(":", "_") / "files" / "jfk speech.flac"
    said = result.stderr.replace("\n", " ")
    assert f"downloaded {server}/files/jfk%20speech.flac to {stored}" in said
    assert f"skipped    {server}/about: a web page with no video found in it" in said
    assert "done: 1 file indexed" in said
    search = subprocess.run([sys.executable, "-m", "mediaindex", "search", "ask not what your country can do",
                             "--json", "--limit", "1"], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert f'"source": "{stored}"' in search.stdout, search.stdout + search.stderr
    # The file keeps the address it came from: a search may ask for what came from there.
    for where, found in ((f"source_url={server}/files/jfk%20speech.flac", True), ("source_url=elsewhere", False)):
        search = subprocess.run([sys.executable, "-m", "mediaindex", "search", "ask not what your country can do",
                                 "--json", "--min-confidence", "none", "--where", where], capture_output=True,
                                text=True, env=env, cwd=REPO, timeout=300)
        assert search.returncode == 0 and (f'"source": "{stored}"' in search.stdout) is found, search.stderr
    table = subprocess.run([sys.executable, "-m", "mediaindex", "search", "ask not what your country can do", "--where",
                            "source_url=elsewhere"], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert table.stdout == "no moments match: nothing indexed passes these filters\n", table.stdout + table.stderr

    result = subprocess.run(cmd[:5], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"already downloaded {server}/files/jfk%20speech.flac" in result.stderr.replace("\n", " ")
    assert "done: 1 already indexed" in result.stderr and not result.stderr.startswith("\n")

    only_bad = subprocess.run(cmd[:4] + [f"{server}/blob"], capture_output=True, text=True, env=env, cwd=REPO,
                              timeout=300)
    assert only_bad.returncode == 1 and "skipped    " in only_bad.stderr and "Traceback" not in only_bad.stderr
    watched = subprocess.run(cmd[:5] + ["--watch", "5"], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert watched.returncode == 2 and "a web address is downloaded once" in watched.stderr

    # A manifest may list web addresses beside files: each is downloaded, its files keeping the row's metadata.
    manifest = tmp_path / "talks.csv"
    manifest.write_text(f"path,title,tags\n{server}/files/LJ002-0020.wav,In 1813,prison;history\n"
                        f"{server}/notes.txt,Notes,\n")
    listed = subprocess.run(cmd[:4] + ["--manifest", str(manifest)], capture_output=True, text=True, env=env,
                            cwd=REPO, timeout=300)
    assert listed.returncode == 0, listed.stderr
    said = listed.stderr.replace("\n", " ")
    assert f"downloaded {server}/files/LJ002-0020.wav to " in said and "done: 1 file indexed" in said
    assert f"skipped    {server}/notes.txt: not a media file" in said
    job = json.loads(subprocess.run([sys.executable, "-m", "mediaindex", "jobs", "--json", "--limit", "1"],
                                    capture_output=True, text=True, env=env, cwd=REPO, timeout=300).stdout)[0]
    shown = json.loads(subprocess.run([sys.executable, "-m", "mediaindex", "jobs", job["id"], "--json"],
                                      capture_output=True, text=True, env=env, cwd=REPO, timeout=300).stdout)
    assert [(Path(f["path"]).name, f["state"], f["meta"]) for f in shown["files"]] == [
        ("LJ002-0020.wav", "done", {"source_url": f"{server}/files/LJ002-0020.wav", "title": "In 1813",
                                    "tags": ["prison", "history"]})]
    listed = subprocess.run([sys.executable, "-m", "mediaindex", "index", "list", "--where", "tags=History", "--json"],
                            capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    [entry] = json.loads(listed.stdout)
    assert (Path(entry["source"]).name, entry["metadata"]["title"], entry["on_disk"]) == ("LJ002-0020.wav", "In 1813",
                                                                                           True), listed.stderr
    table = subprocess.run([sys.executable, "-m", "mediaindex", "index", "list"], capture_output=True, text=True,
                           env=env, cwd=REPO, timeout=300).stdout.splitlines()
    assert table[-1] == "2 files" and f"    source_url: {server}/files/jfk%20speech.flac" in table, table
    assert f"    source_url: {server}/files/LJ002-0020.wav · title: In 1813 · tags: prison, history" in table
    tagged = subprocess.run([sys.executable, "-m", "mediaindex", "search", "prison", "--json", "--min-confidence",
                             "none", "--where", "tags=history", "--where", "title=in 1813"], capture_output=True,
                            text=True, env=env, cwd=REPO, timeout=300)
    assert {Path(h["source"]).name for h in json.loads(tagged.stdout)} == {"LJ002-0020.wav"}, tagged.stderr
    # A key no file has (a misspelt one) is named, with the keys the files have.
    misspelt = subprocess.run([sys.executable, "-m", "mediaindex", "search", "prison", "--where", "Tags=history"],
                              capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert misspelt.returncode == 0 and " ".join(misspelt.stdout.split()) == (
        "no moments match: no indexed file has the metadata key 'Tags' (the keys they have: source_url, tags, "
        "title)"), misspelt.stdout


def test_serve_takes_downloaded_files_as_media(server: str, tmp_path: Path) -> None:
    """The download folder is a media root of `serve`, as the upload folder is: a downloaded file may be ingested
    through the server and played from it; a part file still arriving may not."""
    from mediaindex.api.errors import ApiError
    from mediaindex.api.state import ApiState
    from mediaindex.config import load_settings

    settings = load_settings("cpu", index_dir=tmp_path / "index", cache_dir=tmp_path / "cache")
    [got] = download(f"{server}/files/cockatoo.mp4", settings.download_dir, MEDIA_SUFFIXES)
    part = got.path.with_name(".next.mp4.part")
    part.write_bytes(b"arriving")
    state = ApiState(settings)
    assert state.media.resolve(str(got.path)) == got.path.resolve()
    for refused in (part, settings.index_dir / "jobs.db"):
        with pytest.raises(ApiError):
            state.media.resolve(str(refused))
