"""Web addresses given to a running server (POST /ingest, MCP): its job downloads them from a real HTTP server
on loopback and indexes what they give; addresses the server's policy (api.fetch_urls) does not allow are
refused before a job exists, and so is every address read on the way there (redirects, a page's video)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mediaindex.api import create_app
from mediaindex.api.mcp_host import ApiHost
from mediaindex.config import ApiSettings
from mediaindex.media.download import DownloadError, PrivateAddress, download, public_only, public_peer
from mediaindex.pipeline.discover import MEDIA_SUFFIXES
from tests.conftest import MEDIA, make_settings
from tests.test_api import assert_error
from tests.test_api_jobs import wait_for_job
from tests.test_api_support import Sample, sample  # noqa: F401  (fixture)
from tests.test_download import HANG_S, HANGING, server, serving  # noqa: F401  (fixture)


def _client(sample: Sample, tmp: Path, cache_dir: Path, **api: object) -> TestClient:  # noqa: F811
    settings = make_settings(tmp / "index", cache_dir)
    settings = settings.model_copy(update={"api": ApiSettings(media_roots=[MEDIA], rate_limit_per_minute=0, **api)})
    return TestClient(create_app(settings, embedder=sample.embedder, pipeline=sample.pipeline),
                      raise_server_exceptions=False)


@pytest.fixture
def trusting(sample: Sample, tmp_path: Path, cache_dir: Path) -> Iterator[TestClient]:  # noqa: F811
    """A server that downloads from any address (the test's server is on loopback)."""
    with _client(sample, tmp_path, cache_dir, fetch_urls="all") as client:
        yield client


@pytest.mark.slow
def test_a_job_downloads_its_addresses_and_indexes_what_they_give(trusting: TestClient, server: str) -> None:  # noqa: F811
    flac, about = f"{server}/files/jfk%20speech.flac", f"{server}/about"
    # An address as a manifest entry carries its metadata into its file's segments.
    described = {"path": flac, "metadata": {"title": "Inaugural", "year": 1961}}
    r = trusting.post("/ingest", json={"urls": [about, about], "manifest": [described, {"path": flac}]})
    assert r.status_code == 202, r.text
    assert r.json()["params"]["urls"] == [about, flac]  # named twice, downloaded once
    job = wait_for_job(trusting, r.json()["id"])
    assert job["state"] == "done", job
    files = {f["path"]: f for f in job["files"]}
    assert files[about]["state"] == "skipped"
    assert files[about]["reason"] == "a web page with no video found in it: give the address of the media file itself"
    [stored] = [f for f in job["files"] if f["state"] == "done"]
    assert Path(stored["path"]).name == "jfk speech.flac" and stored["video_id"] in job["result"]["video_ids"]
    index = trusting.app.state.api.index  # type: ignore[attr-defined]
    assert all((s["extra"]["title"], s["extra"]["year"], s["extra"]["source_url"]) == ("Inaugural", 1961, flac)
               for s in index.store.segments_of(stored["video_id"]))
    hits = trusting.get("/search", params={"q": "ask not what your country can do", "limit": 1}).json()
    assert hits["hits"][0]["video_id"] == stored["video_id"], hits
    # The file's page says what it was given and where it came from; a search may ask for either.
    detail = trusting.get(f"/videos/{stored['video_id']}").json()
    assert detail["metadata"] == {"source_url": flac, "title": "Inaugural", "year": 1961}
    assert detail["title"] == hits["hits"][0]["title"] == "Inaugural"  # a manifest's title is the file's
    ask = {"q": "ask not what your country can do", "min_confidence": "none"}
    for where, found in ((["year=1961"], True), (["year=1961.0", f"source_url={flac}"], True), (["year=1962"], False),
                         (["title=inaugural"], True), (["title=inaugura"], False)):  # text in any case, but whole
        hits = trusting.get("/search", params={**ask, "where": where}).json()["hits"]
        assert bool(hits) is found and all(h["video_id"] == stored["video_id"] for h in hits), (where, hits)
    for where, files in (("year=1961", 1), ("year=1962", 0), ("title=INAUGURAL", 1)):
        library = trusting.get("/library", params={"where": where}).json()
        assert (library["files"], len(library["videos"])) == (files, files), library
    assert_error(trusting.get("/library", params={"where": "year"}), 422, "a metadata filter is KEY=VALUE")
    for where in ({"year": None}, {"year": [1961]}, {"": "x"}):
        assert_error(trusting.post("/search", json={**ask, "filters": {"where": where}}), 422, "where")
    unmet = trusting.post("/search", json={**ask, "filters": {"where": {"year": True}}})
    assert unmet.status_code == 200 and unmet.json()["hits"] == [], unmet.text  # true is not 1961, nor 1
    posted = trusting.post("/search", json={**ask, "filters": {"where": {"title": "Inaugural", "year": 1961}}})
    assert posted.json()["hits"][0]["video_id"] == stored["video_id"], posted.text
    for bad, message in ((["year"], "a metadata filter is KEY=VALUE"), (["year=1", "year=2"], "is given twice"),
                         (['ti"tle=A'], "without quotes")):
        assert_error(trusting.get("/search", params={**ask, "where": bad}), 422, message)

    # The same request again joins nothing (the first ended) and downloads nothing: the file is there as the
    # server has it, and indexed.
    again = wait_for_job(trusting, trusting.post("/ingest", json={"urls": [flac]}).json()["id"])
    assert again["state"] == "done" and again["result"]["unchanged"] == 1, again

    # Only addresses that give nothing: the job fails, saying why for each.
    failed = wait_for_job(trusting, trusting.post("/ingest", json={"urls": [about, f"{server}/notes.txt"]}).json()["id"])
    assert failed["state"] == "failed" and f"{about}: a web page with no video" in failed["error"], failed
    assert "not a media file" in failed["error"]


def test_a_job_cancelled_while_it_downloads_stops_downloading(trusting: TestClient, server: str,  # noqa: F811
                                                              tmp_path: Path) -> None:
    """Its line says how far the download is; a cancel ends it at the next chunk, indexing nothing and leaving no
    part file (this server cannot send the rest later)."""
    import time

    address = f"{server}/slow.mp4"
    job_id = trusting.post("/ingest", json={"urls": [address]}).json()["id"]
    deadline = time.monotonic() + 60
    while (share := ((trusting.get(f"/jobs/{job_id}").json().get("progress") or {}).get("now") or {})
           .get(address, {}).get("download")) is None:  # first None: the length is not known yet
        assert time.monotonic() < deadline, "the job never said how far its download was"
        time.sleep(0.1)
    assert 0 < share < 0.5
    assert trusting.delete(f"/jobs/{job_id}").status_code in (200, 202)
    began = time.monotonic()
    job = wait_for_job(trusting, job_id, timeout=30)
    assert time.monotonic() - began < 5  # at the next chunk, not at the end of the file
    assert job["state"] == "cancelled", job
    assert job["error"] == "cancelled while downloading its web addresses: nothing indexed"
    downloads = trusting.app.state.api.settings.download_dir  # type: ignore[attr-defined]
    assert [p for p in downloads.rglob("*") if p.is_file()] == []


def test_a_job_cancelled_while_its_download_stalls_stops_at_once(trusting: TestClient, server: str) -> None:  # noqa: F811
    """A transfer that sends nothing more is not waited for until it times out: the cancel ends it."""
    import time

    HANGING.clear()
    job_id = trusting.post("/ingest", json={"urls": [f"{server}/hangs.mp4"]}).json()["id"]
    assert HANGING.wait(30), "the download never began"
    time.sleep(0.5)  # well inside the stall
    assert trusting.delete(f"/jobs/{job_id}").status_code in (200, 202)
    began = time.monotonic()
    job = wait_for_job(trusting, job_id, timeout=HANG_S)
    assert time.monotonic() - began < 3
    assert job["state"] == "cancelled", job
    assert job["error"] == "cancelled while downloading its web addresses: nothing indexed"


@pytest.mark.slow
def test_an_agent_gives_addresses_through_mcp(sample: Sample, tmp_path: Path, cache_dir: Path,  # noqa: F811
                                              server: str) -> None:  # noqa: F811
    """Through the MCP host as through HTTP; a page of several recordings gives each, one that is gone costs only
    itself."""
    with _client(sample, tmp_path, cache_dir, fetch_urls="all") as client:
        host = ApiHost(client.app.state.api)  # type: ignore[attr-defined]
        job = host.ingest([], None, urls=[f"{server}/blob", f"{server}/sounds"])
        assert job["params"]["urls"] == [f"{server}/blob", f"{server}/sounds"]
        done = wait_for_job(client, job["id"])
        assert done["state"] == "done", done
        files = [(Path(f["path"]).name, f["state"], f["reason"]) for f in done["files"]]
        assert files[0] == ("blob", "skipped", "not a media file (“blob”, application/octet-stream); the types "
                                               "indexed are audio and video")
        assert files[1][:2] == ("Sounds (1) [sounds-1].flac", "done")
        assert files[2][:2] == ("gone.flac", "skipped") and "HTTP Error 404" in files[2][2]
        # A page's video keeps its own address, not the page's.
        [kept] = [f for f in done["files"] if f["state"] == "done"]
        address = client.get(f"/videos/{kept['video_id']}").json()["metadata"]["source_url"]
        assert address.startswith(f"{server}/") and address != f"{server}/sounds", address


@pytest.mark.parametrize(("body", "status", "words"), [
    ({"urls": ["ftp://example.org/talk.mp4"]}, 422, "not a web address"),
    ({"urls": ["https://"]}, 422, "not a web address"),
    ({"urls": ["https://example.org/a talk.mp4"]}, 422, "not a web address"),
    ({"urls": [""]}, 422, "at least 1 character"),
    ({"urls": ["https://example.org/" + "a" * 2100]}, 422, "at most 2048"),
    ({"urls": [f"https://example.org/{i}.mp4" for i in range(21)]}, 422, "at most 20"),
    ({"urls": "https://example.org/talk.mp4"}, 422, "valid list"),
    ({"urls": []}, 422, "nothing to ingest"),
    ({"manifest": [{"path": "https://"}]}, 400, "manifest entry 'https://': not a web address"),
    ({"manifest": [{"path": "https://example.org/a.mp4", "metadata": {"path": "x"}}]}, 400,
     "cannot be used as a metadata key"),
])
def test_what_is_not_a_web_address_is_refused(sample: Sample, tmp_path: Path, cache_dir: Path,  # noqa: F811
                                              body: dict, status: int, words: str) -> None:
    with _client(sample, tmp_path, cache_dir) as client:
        assert_error(client.post("/ingest", json=body), status, words)
        assert client.get("/jobs").json() == []


def test_private_addresses_are_refused_unless_the_server_allows_them(sample: Sample, tmp_path: Path,  # noqa: F811
                                                                     cache_dir: Path, server: str) -> None:  # noqa: F811
    address = f"{server}/files/cockatoo.mp4"
    with _client(sample, tmp_path / "public", cache_dir) as client:  # the default: public addresses only
        assert client.get("/library").json()["fetch_urls"] == "public"
        for body in ({"urls": [address]}, {"manifest": [{"path": address, "metadata": {"title": "A bird"}}]}):
            assert_error(client.post("/ingest", json=body), 403,
                         "127.0.0.1 is on a private network or this machine (127.0.0.1); this server downloads from "
                         "public addresses only (api.fetch_urls)")
        assert client.get("/jobs").json() == []
    with _client(sample, tmp_path / "off", cache_dir, fetch_urls="off") as client:
        assert client.get("/library").json()["fetch_urls"] == "off"
        assert_error(client.post("/ingest", json={"urls": [address]}), 403, "does not download web addresses")
        assert_error(client.post("/ingest", json={"urls": ["https://example.org/talk.mp4"]}), 403,
                     "api.fetch_urls is off")


def test_each_host_is_looked_up_once(sample: Sample, tmp_path: Path, cache_dir: Path,  # noqa: F811
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A manifest of many addresses on few hosts asks the resolver once a host, not once an address."""
    import socket

    looked_up: list[str] = []
    resolve = socket.getaddrinfo

    def counted(host: str, *args: object, **kwargs: object) -> object:
        looked_up.append(host)
        return resolve(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", counted)
    entries = [{"path": f"http://{host}/talk-{i}.mp4"} for i in range(300) for host in ("93.184.215.14", "10.9.8.7")]
    with _client(sample, tmp_path, cache_dir) as client:
        assert_error(client.post("/ingest", json={"manifest": entries}), 403, "10.9.8.7 is on a private network")
    assert looked_up == ["93.184.215.14", "10.9.8.7"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "10.1.2.3", "192.168.0.10", "169.254.169.254",
                                  "100.64.0.1", "[::1]", "[fe80::1]", "0.0.0.0", "224.0.0.1"])
def test_hosts_off_the_public_internet_are_private(host: str) -> None:
    with pytest.raises(PrivateAddress, match="on a private network or this machine"):
        public_only(f"http://{host}/talk.mp4")


def test_public_addresses_pass() -> None:
    public_only("http://93.184.215.14/talk.mp4")  # an address literal: nothing to resolve
    public_only("https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/talk.mp4")


def _rebinding(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """`name` resolves as a rebinding DNS server answers: a public address to the lookups that check it (asked
    without a port), this machine to the lookup a connection makes (asked with its port)."""
    import socket

    resolve = socket.getaddrinfo

    def rebinding(host: str, port: object, *args: object, **kwargs: object) -> object:
        if host != name:
            return resolve(host, port, *args, **kwargs)  # type: ignore[arg-type]
        return resolve("93.184.215.14" if port is None else "127.0.0.1", port, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)


def _resolving(monkeypatch: pytest.MonkeyPatch, name: str, address: str) -> None:
    """`name` resolves to `address` (another of this machine's, 127.0.0.2: a server of its own listens there)."""
    import socket

    resolve = socket.getaddrinfo

    def to_address(host: str, *args: object, **kwargs: object) -> object:
        return resolve(address if host == name else host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", to_address)


def test_a_connection_is_checked_by_the_address_it_reached(server: str, tmp_path: Path,  # noqa: F811
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that passed the check as public and then resolves to this machine (DNS rebinding) is refused once
    connected, before the request is sent; without the connection's check it would have been downloaded."""
    port = urllib.parse.urlsplit(server).port
    with pytest.raises(PrivateAddress, match=r"127\.0\.0\.1 is on a private network or this machine \(127\.0\.0\.1\)"):
        download(f"{server}/files/cockatoo.mp4", tmp_path, MEDIA_SUFFIXES, peer_check=public_peer)
    with pytest.raises(PrivateAddress, match="on a private network"):  # before the TLS handshake (this server has none)
        download(f"https://127.0.0.1:{port}/files/cockatoo.mp4", tmp_path, MEDIA_SUFFIXES, peer_check=public_peer)
    _rebinding(monkeypatch, "media.example")
    address = f"http://media.example:{port}/files/cockatoo.mp4"
    public_only(address)  # the name's check passes
    with pytest.raises(PrivateAddress, match=r"media\.example is on a private network or this machine"):
        download(address, tmp_path, MEDIA_SUFFIXES, check=public_only, peer_check=public_peer)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    [got] = download(address, tmp_path, MEDIA_SUFFIXES, check=public_only)  # the hole the connection's check closes
    assert got.path.read_bytes() == (MEDIA / "video" / "cockatoo.mp4").read_bytes()  # type: ignore[union-attr]
    # Through a proxy (here the test's server, on this machine) the connection reaches the proxy, whose policy
    # decides: it is not refused for its address (this one answers a proxy request with 404).
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", server)
    with pytest.raises(DownloadError, match="the server answered 404"):
        download("http://93.184.215.14/talk.mp4", tmp_path, MEDIA_SUFFIXES, check=public_only, peer_check=public_peer)


def test_a_pages_video_is_checked_by_the_address_its_connection_reached(server: str, tmp_path: Path,  # noqa: F811
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """yt-dlp's connections for a page's video are checked as a file's own are: the page (at an address the check
    trusts) names its video at a name that resolves, once connected to, to another address of this machine
    (DNS rebinding); that connection is refused before its request is sent, and nothing is saved. Without the
    connection's check, the video would have been downloaded from there."""

    with serving(tmp_path / "elsewhere", host="127.0.0.2") as other:
        port = urllib.parse.urlsplit(other).port
        _resolving(monkeypatch, "media.example", "127.0.0.2")
        page = f"{server}/page/media.example:{port}/files/cockatoo.mp4"

        def the_page_only(address: str, host: str) -> None:
            if address != "127.0.0.1":  # the page's server: every other connection must reach a public address
                public_peer(address, host)

        with pytest.raises(PrivateAddress, match=r"127\.0\.0\.2 is on a private network or this machine"):
            download(page, tmp_path / "checked", MEDIA_SUFFIXES, peer_check=the_page_only)
        assert not [p for p in (tmp_path / "checked").rglob("*") if p.is_file()]
        [got] = download(page, tmp_path / "unchecked", MEDIA_SUFFIXES)  # the hole the connection's check closes
        assert got.path.read_bytes() == (MEDIA / "video" / "cockatoo.mp4").read_bytes()  # type: ignore[union-attr]


def test_a_streams_parts_are_checked_by_the_address_their_connections_reached(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A page's HLS stream, fetched part by part by yt-dlp itself: its playlist lies at the address the check trusts,
    its parts at a name that reaches another address of this machine. Their connections are refused, and nothing
    is left behind (no part, fragment or state file). Without the check the stream is saved as one video."""
    import shutil
    import subprocess

    from mediaindex.media.ffmpeg_bin import ffmpeg_exe
    from mediaindex.media.probe import probe

    _resolving(monkeypatch, "media.example", "127.0.0.2")
    with serving(tmp_path / "trusted") as trusted, serving(tmp_path / "parts", host="127.0.0.2") as parts:
        port = urllib.parse.urlsplit(parts).port
        subprocess.run([ffmpeg_exe(), "-v", "error", "-nostdin", "-t", "4", "-i", str(MEDIA / "video" / "cockatoo.mp4"),
                        "-c", "copy", "-f", "hls", "-hls_time", "2", "-hls_list_size", "0",
                        "-hls_base_url", f"http://media.example:{port}/files/",
                        str(tmp_path / "parts" / "files" / "bird.m3u8")], check=True)
        shutil.move(tmp_path / "parts" / "files" / "bird.m3u8", tmp_path / "trusted" / "files" / "bird.m3u8")
        page = f"{trusted}/page/{trusted.removeprefix('http://')}/files/bird.m3u8"

        def the_playlist_only(address: str, host: str) -> None:
            if address != "127.0.0.1":
                public_peer(address, host)

        with pytest.raises(PrivateAddress, match=r"127\.0\.0\.2 is on a private network or this machine"):
            download(page, tmp_path / "checked", MEDIA_SUFFIXES, peer_check=the_playlist_only)
        assert not [p for p in (tmp_path / "checked").rglob("*") if p.is_file()]
        [got] = download(page, tmp_path / "unchecked", MEDIA_SUFFIXES)
    assert got.path.suffix == ".mp4" and 3.5 < probe(got.path).duration < 4.5  # type: ignore[union-attr]


def test_where_connections_are_checked_no_stream_goes_to_another_program(server: str, tmp_path: Path) -> None:  # noqa: F811
    """yt-dlp hands some streams to another program (ffmpeg for HLS, rtmpdump for RTMP), whose connections no
    check here sees. Where connections are checked, an HLS stream is fetched by yt-dlp itself, and a stream only
    another program fetches is refused with the reason; elsewhere yt-dlp's own choice stands."""
    import yt_dlp

    from mediaindex.media.download import other_program, page_options

    hls = {"protocol": "m3u8", "url": "https://media.example/bird.m3u8"}
    for in_process, hls_by in ((False, "FFmpeg"), (True, None)):
        with yt_dlp.YoutubeDL(page_options(tmp_path, lambda status: None, 5, in_process)) as loader:
            assert other_program(hls, loader.params) == hls_by
            assert other_program({**hls, "is_live": True}, loader.params) == "FFmpeg"  # yt-dlp's choice, always
            assert other_program({"protocol": "rtmp", "url": "rtmp://media.example/live"}, loader.params) == "Rtmp"
            assert other_program({"protocol": "https", "url": "https://media.example/a.mp4"}, loader.params) is None
    with pytest.raises(DownloadError, match=r"would be fetched by another program \(Rtmp\), whose connections cannot "
                                            r"be checked"):
        download(f"{server}/live", tmp_path, MEDIA_SUFFIXES, peer_check=lambda address, host: None)
    with pytest.raises(DownloadError) as unchecked:  # without checks, yt-dlp tries rtmpdump, not installed here
        download(f"{server}/live", tmp_path, MEDIA_SUFFIXES)
    assert "another program" not in str(unchecked.value)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_a_thread_that_hands_its_connections_gives_each_once_made(server: str,  # noqa: F811
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """In a thread that hands its connections (`peers.handing`), each is given to the caller once connected and is
    closed when refused; other threads, and the thread afterwards, connect as before. The proxies the environment
    names are known by the addresses their connections reach."""
    import socket
    import threading

    from mediaindex.media.peers import handing, proxy_addresses

    parts = urllib.parse.urlsplit(server)
    target = (str(parts.hostname), int(parts.port or 80))
    given: list[socket.socket] = []

    def refuse(sock: socket.socket) -> None:
        given.append(sock)
        raise PrivateAddress(f"{sock.getpeername()[0]} refused")

    with handing(refuse), pytest.raises(PrivateAddress, match=r"127\.0\.0\.1 refused"):
        socket.create_connection(target, timeout=5)
    [sock] = given
    assert sock.fileno() == -1  # closed
    elsewhere: list[BaseException] = []

    def connect_alone() -> None:
        try:
            socket.create_connection(target, timeout=5).close()
        except BaseException as exc:  # noqa: BLE001 (what the thread met is asserted on)
            elsewhere.append(exc)

    with handing(refuse):
        thread = threading.Thread(target=connect_alone)
        thread.start()
        thread.join(10)
    assert elsewhere == [] and len(given) == 1  # another thread's connection is not handed
    socket.create_connection(target, timeout=5).close()  # and after the block, none is
    assert len(given) == 1
    for name in ("no_proxy", "NO_PROXY", "http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", server)
    monkeypatch.setenv("all_proxy", "socks5://127.0.0.9")
    assert proxy_addresses() == {target, ("127.0.0.9", 1080)}


def test_a_server_that_downloads_from_public_addresses_refuses_a_rebound_name(
        sample: Sample, tmp_path: Path, cache_dir: Path, server: str,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    _rebinding(monkeypatch, "media.example")
    address = f"http://media.example:{urllib.parse.urlsplit(server).port}/files/cockatoo.mp4"
    with _client(sample, tmp_path, cache_dir, fetch_urls="public") as client:
        r = client.post("/ingest", json={"urls": [address]})
        assert r.status_code == 202, r.text  # its name passes as public
        job = wait_for_job(client, r.json()["id"])
        downloads = client.app.state.api.settings.download_dir  # type: ignore[attr-defined]
    assert job["state"] == "failed", job
    [entry] = job["files"]
    assert entry["state"] == "skipped" and "media.example is on a private network or this machine" in entry["reason"]
    assert [p for p in downloads.rglob("*") if p.is_file()] == []


def test_every_address_on_the_way_is_checked(server: str, tmp_path: Path) -> None:  # noqa: F811
    """A redirect to an address the check refuses is not followed; a page whose video lies at a refused address
    gives nothing; what the check lets through downloads as before."""
    asked: list[str] = []

    def no_files(url: str) -> None:
        asked.append(urllib.parse.urlsplit(url).path)
        if url.startswith(f"{server}/files/"):
            raise PrivateAddress(f"refused {url}")

    with pytest.raises(DownloadError, match="refused .*/files/cockatoo.mp4"):
        download(f"{server}/moved.mp4", tmp_path, MEDIA_SUFFIXES, check=no_files)
    assert asked == ["/moved.mp4", "/files/cockatoo.mp4"]
    with pytest.raises(DownloadError, match="refused .*/files/cockatoo.mp4"):
        download(f"{server}/watch?v=cockatoo", tmp_path, MEDIA_SUFFIXES, check=no_files)
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    [got] = download(f"{server}/moved.mp4", tmp_path, MEDIA_SUFFIXES, check=lambda url: None)
    assert got.path.name == "cockatoo.mp4" and got.fetched
