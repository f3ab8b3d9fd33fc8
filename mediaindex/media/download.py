"""Media given by its web address (http, https): downloaded once into a folder, then indexed as a file.

A file's address lands at `<folder>/<host>/<the address's path>`, so that one address always names one file and
two addresses never share one; an ingest of the same address again finds the file there and downloads it only when
the server's copy differs in size. Bytes arrive in a hidden `.part` file that is renamed when complete: a download
cut short, refused or interrupted leaves nothing a later ingest would take for media; where the server can send the
file from a byte on, the part is kept with the version it belongs to, and the next download of that version asks
for the rest alone. A web page (a video site's
watch page, a page with a video in it) is handed to yt-dlp, which finds the page's video and saves it as
`<folder>/<host>/<title> [<id>].<ext>`, sound and picture joined by the bundled ffmpeg, the page's own subtitles
beside it; a page of several videos (a playlist, a channel) gives each of them so, up to a limit.

A server that downloads the addresses its clients give checks each address it is about to read (`check`: e.g.
`public_only`, which refuses hosts on private networks and the server's own): the address given, every redirect of
a file's download, and each request yt-dlp makes for a page (the address it reads and where it ended up). The
connections are checked once made too (`peer_check`: e.g. `public_peer`), against the address they reached, a
file's own and those yt-dlp makes for a page and its videos (`peers`): a name that resolved to a public address
when it was checked and to a private one when it was connected to (DNS rebinding) is refused before a byte of the
request is sent. A connection through a proxy reaches the proxy, whose own policy decides.
"""

from __future__ import annotations

import http.client
import ipaddress
import mimetypes
import os
import re
import shutil
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from email.message import Message
from glob import escape as glob_escape
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from mediaindex.media.peers import handing, proxy_addresses

SCHEMES = ("http", "https")
CHUNK_BYTES = 1 << 20
TIMEOUT_S = 30.0  # without a byte for this long, a download has failed
STOP_POLL_S = 0.25  # how often a download asks whether its caller stopped it, whatever it waits for
MARGIN_BYTES = 64 * 1024**2  # left free beside a download (the index writes on the same disk)
MAX_NAME_BYTES = 200  # a path part longer than this is cut (file systems take 255 bytes)
MAX_PAGE_VIDEOS = 100  # the videos taken from one page (a playlist, a channel): ingest.max_page_videos
_UNSAFE = re.compile(r"[\x00-\x1f\x7f/\\:*?\"<>|]")
_TYPE_SUFFIXES = {"audio/mpeg": ".mp3", "audio/mp4": ".m4a", "audio/x-m4a": ".m4a", "audio/wav": ".wav",
                  "audio/x-wav": ".wav", "audio/flac": ".flac", "audio/ogg": ".ogg", "video/ogg": ".ogv",
                  "video/quicktime": ".mov", "video/x-matroska": ".mkv", "video/x-msvideo": ".avi",
                  "video/mp2t": ".ts", "video/x-flv": ".flv"}
_PLAYLISTS = ("application/vnd.apple.mpegurl", "application/x-mpegurl", "audio/mpegurl", "audio/x-mpegurl",
              "application/dash+xml")


class DownloadError(Exception):
    """Why an address gave no media file; said to the user beside the address."""


class PrivateAddress(DownloadError):
    """An address on this machine or a private network, where only public ones are downloaded from."""


class DownloadStopped(DownloadError):
    """The caller stopped the download (`stopped`): while it connected, waited for an answer or received bytes."""


# The metadata key under which a downloaded file keeps the address it came from (searchable as any manifest column).
SOURCE_URL = "source_url"


@dataclass(frozen=True)
class Downloaded:
    url: str  # the address given, or a page's video's own (of a playlist, for one)
    path: Path
    fetched: bool  # False: the file was there already (as the server has it, for a file's address)

    def metadata(self, given: dict[str, Any] | None = None) -> dict[str, Any]:
        """The file's metadata: where it came from, under what it was given with (a manifest row's own
        `source_url` wins)."""
        return {SOURCE_URL: self.url, **(given or {})}


@dataclass(frozen=True)
class Missed:
    """A video of a page of several that gave no file, or the videos past the limit."""

    url: str
    reason: str


Progress = Callable[[int, int | None], None]  # (bytes so far, bytes in all if the server said)
Check = Callable[[str], None]  # raises DownloadError for an address that must not be read
Stopped = Callable[[], bool]  # whether the caller wants the download stopped (a cancelled job)
PeerCheck = Callable[[str, str], None]  # (address a connection reached, host it was for); raises DownloadError


def public_only(url: str) -> None:
    """Refuse an address whose host is, or resolves to, anything but a public internet address: this machine,
    a private or link-local network (a cloud's metadata service), a shared or reserved range."""
    host = urllib.parse.urlsplit(url).hostname
    if not host:
        raise DownloadError("not a web address of a file (http:// or https:// with a host)")
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except (socket.gaierror, UnicodeError) as exc:
        raise DownloadError(f"cannot reach {host} ({getattr(exc, 'strerror', None) or exc})") from exc
    for address in sorted(found):
        public_peer(str(address), host)


def public_peer(address: str, host: str) -> None:
    """Refuse an IP address (`host`'s) that is not a public internet address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if not ip.is_global or ip.is_multicast:
        raise PrivateAddress(f"{host} is on a private network or this machine ({ip}); this server downloads "
                             "from public addresses only (api.fetch_urls)")


class _Connections:
    """The connections of one download: each checked by the address it reached (`peer_check`; one through a proxy
    reaches the proxy, whose policy decides) before anything is sent on it, and kept, so that a stop shuts them
    whatever they wait for (the connection, the server's answer, the next bytes)."""

    def __init__(self, peer_check: PeerCheck | None) -> None:
        self.peer_check = peer_check
        self.shut = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def handlers(self) -> list[urllib.request.BaseHandler]:
        return [_HTTP(self), _HTTPS(self)]

    def kind(self, base: type[http.client.HTTPConnection], checked: bool) -> type[http.client.HTTPConnection]:
        """`base` whose connections are made through `made`."""
        connections = self

        class Kept(base):  # type: ignore[misc, valid-type]
            def __init__(self, host: str, *args: Any, **kwargs: Any) -> None:
                super().__init__(host, *args, **kwargs)
                create: Callable[..., socket.socket] = self._create_connection  # type: ignore[has-type]
                self._create_connection = lambda address, *more, **options: connections.made(
                    create(address, *more, **options), str(address[0]), checked)

        return Kept

    def made(self, sock: socket.socket, host: str, checked: bool) -> socket.socket:
        with self._lock:
            self._sockets.append(sock)
            if self.shut.is_set():  # stopped while it connected
                _shut(sock)
        if checked and self.peer_check is not None:
            try:
                self.peer_check(str(sock.getpeername()[0]), host)
            except BaseException:
                sock.close()
                raise
        return sock

    def shut_all(self) -> None:
        with self._lock:
            self.shut.set()
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    """Ends the connection: a read or a wait on it returns or raises at once."""
    with suppress(OSError):  # it ended meanwhile
        sock.shutdown(socket.SHUT_RDWR)


def _proxied(request: urllib.request.Request) -> bool:
    return request.has_proxy() or bool(getattr(request, "_tunnel_host", None))


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, connections: _Connections) -> None:
        super().__init__()
        self.connections = connections

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self.connections.kind(http.client.HTTPConnection, checked=not _proxied(req)), req)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, connections: _Connections) -> None:
        super().__init__()
        self.connections = connections

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        options: dict[str, Any] = {"context": getattr(self, "_context", None)}
        if hasattr(self, "_check_hostname"):  # Python 3.11's handler passes it on
            options["check_hostname"] = self._check_hostname
        kind = self.connections.kind(http.client.HTTPSConnection, checked=not _proxied(req))
        return self.do_open(kind, req, **options)


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects followed only to addresses the check lets through."""

    def __init__(self, check: Check) -> None:
        self.check = check

    def redirect_request(self, req: urllib.request.Request, fp: object, code: int, msg: str, headers: Message,
                         newurl: str) -> urllib.request.Request | None:
        self.check(newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)  # type: ignore[arg-type]


def is_url(text: str) -> bool:
    """Whether an input names a web address rather than a path ("http://…", "HTTPS://…")."""
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.lower() in SCHEMES


_ADDRESS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def other_scheme(text: str) -> str | None:
    """The scheme of an address this module does not download from ("ftp" of "ftp://…", "rtsp", "s3"); None for a
    web address or anything else. Taken as a path, such an address would be "not found" without saying why."""
    found = _ADDRESS.match(text)
    return found[1].lower() if found and found[1].lower() not in SCHEMES else None


def web_address(text: str) -> str:
    """`text` if it is a web address this module downloads from; ValueError says what one looks like."""
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError as exc:
        raise ValueError(f"not a web address ({exc})") from exc
    if parts.scheme.lower() not in SCHEMES or not parts.hostname or any(c.isspace() for c in text):
        raise ValueError("not a web address: give http:// or https:// with a host, e.g. https://example.org/talk.mp4")
    return text


WebAddress = Annotated[str, Field(min_length=1, max_length=2048), AfterValidator(web_address)]


def download(url: str, folder: Path, media_suffixes: Collection[str], progress: Progress | None = None,
             timeout: float = TIMEOUT_S, check: Check | None = None,
             max_videos: int = MAX_PAGE_VIDEOS, stopped: Stopped | None = None,
             peer_check: PeerCheck | None = None) -> list[Downloaded | Missed]:
    """The media file at `url`, or the videos of the page there (a playlist's first `max_videos`), each
    downloaded into `folder` unless it is there already; DownloadError says why the address gives none, a Missed
    why one video of several gave none. `check` is asked about every address read on the way (see the module's
    notes), and `peer_check` about every connection made (yt-dlp's for a page too). A download asks `stopped` a
    few times a second, while it connects, waits for the server's answer or for bytes, and ends with
    DownloadStopped when it says so (a page's video too: its connections are shut)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in SCHEMES or not parts.hostname:
        raise DownloadError("not a web address of a file (http:// or https:// with a host)")
    if check is not None:
        check(url)
    connections = _Connections(peer_check)
    opener = urllib.request.build_opener(*([_CheckedRedirects(check)] if check is not None else []),
                                         *connections.handlers())
    request = urllib.request.Request(url, headers={"User-Agent": "mediaindex", "Accept-Encoding": "identity"})
    with _watched(stopped, connections):
        return _download_file(url, parts, opener, request, folder, media_suffixes, progress, timeout, check,
                              max_videos, connections)


def _download_file(url: str, parts: urllib.parse.SplitResult, opener: urllib.request.OpenerDirector,
                   request: urllib.request.Request, folder: Path, media_suffixes: Collection[str],
                   progress: Progress | None, timeout: float, check: Check | None, max_videos: int,
                   connections: _Connections) -> list[Downloaded | Missed]:
    """`download`'s work once its opener is made, its `connections` made through it."""
    shut = connections.shut  # set: the caller stopped it and its connections were shut
    try:
        response = opener.open(request, timeout=timeout)
    except (OSError, ValueError) as exc:  # urllib's errors, HTTPError among them, are OSErrors
        if shut.is_set():
            raise DownloadStopped("stopped before the server answered") from exc
        raise DownloadError(_open_failure(exc, parts.hostname)) from exc
    with response:
        headers: Message = response.headers
        kind = headers.get_content_type()
        if kind in ("text/html", "application/xhtml+xml"):
            response.close()
            return _from_page(url, folder / _host_folder(parts), progress, check, max_videos, connections)
        if kind in _PLAYLISTS or parts.path.lower().endswith((".m3u8", ".mpd")):
            raise DownloadError("a streaming playlist (HLS or DASH), not a media file: save the stream as one "
                                "file first (ffmpeg -i ADDRESS -c copy talk.mp4), then ingest that")
        target = folder / _place(response.geturl(), headers, kind, media_suffixes)
        total = _length(headers)
        if total is not None and target.is_file() and target.stat().st_size == total:
            return [Downloaded(url, target, fetched=False)]
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # read-only, or a file downloaded earlier where this address needs a folder
            raise DownloadError(f"cannot make the folder {target.parent} ({exc.strerror or exc})") from exc
        if total is not None and (free := shutil.disk_usage(target.parent).free) < total + MARGIN_BYTES:
            raise DownloadError(f"it is {_mb(total)} and the disk holding {target.parent} has {_mb(free)} free")
        version = _version(headers, total)
        part = target.with_name(f".{target.name}.part")
        if version is not None and total is not None and _kept_version(part) == version and part.is_file() \
                and 0 < (start := part.stat().st_size) < total:
            response.close()  # an earlier download of this version stopped part way: it goes on from there
            response = _open_range(opener, request, start, version, timeout, parts.hostname)
            if response.status == 206 and response.headers.get("Content-Range") != f"bytes {start}-{total - 1}/{total}":
                response.close()
                part.unlink(missing_ok=True)
                raise DownloadError("the server sent another part of the file than was asked for: an ingest of "
                                    "this address again downloads it whole")
            if response.status != 206:  # the file changed since: it comes whole, as it is now
                total = _length(response.headers)
                version = _version(response.headers, total)
        _receive(response, part, target, total, version, progress, shut)
    return [Downloaded(url, target, fetched=True)]


def _open_failure(exc: OSError | ValueError, host: str | None) -> str:
    """Why an address could not be opened, in words."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"the server answered {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        reason = exc.reason.strerror if isinstance(exc.reason, OSError) and exc.reason.strerror else exc.reason
        return f"cannot reach {host} ({reason})"
    return f"cannot reach {host} ({exc})"


@contextmanager
def _watched(stopped: Stopped | None, connections: _Connections) -> Iterator[None]:
    """While the block runs, a thread of its own asks `stopped` a few times a second and shuts the download's
    connections once it says so."""
    if stopped is None:
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.wait(STOP_POLL_S):
            if stopped():
                connections.shut_all()
                return

    watcher = threading.Thread(target=watch, name="download-stop", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def _version(headers: Message, total: int | None) -> str | None:
    """What names this version of a file, when its server can send it from a byte on (None: it cannot, or does not
    say which version it sends): its ETag, else its modification time, with its length."""
    validator = headers.get("ETag") or headers.get("Last-Modified")
    if headers.get("Accept-Ranges", "").lower() != "bytes" or not validator or total is None:
        return None
    return f"{validator}\n{total}"


def _kept_version(part: Path) -> str | None:
    try:
        return part.with_name(part.name + ".version").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _open_range(opener: urllib.request.OpenerDirector, request: urllib.request.Request, start: int, version: str,
                timeout: float, host: str | None) -> http.client.HTTPResponse:
    """The file from byte `start` on, if it is still the version that was being downloaded (If-Range: else the
    server sends the whole file again, with 200)."""
    ranged = urllib.request.Request(request.full_url, headers={**request.headers, "Range": f"bytes={start}-",
                                                               "If-Range": version.split("\n", 1)[0]})
    try:
        return opener.open(ranged, timeout=timeout)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise DownloadError(f"cannot reach {host} again ({exc})") from exc


def _receive(response: http.client.HTTPResponse, part: Path, target: Path, total: int | None, version: str | None,
             progress: Progress | None, closed: threading.Event) -> None:
    """The response's body into `target`, through a hidden part file renamed once every byte is there. A part
    file of a version its server can resume (`version`) is kept when the transfer stops, with the version beside
    it, and a response that resumes it (206) is appended to it; otherwise what a failed transfer wrote is deleted.
    `closed`: the caller stopped the transfer (DownloadStopped, whatever the read that ended said)."""
    resumed = response.status == 206
    done = part.stat().st_size if resumed else 0
    kept = part.with_name(part.name + ".version")
    complete = False
    try:
        if version is not None and not resumed:
            kept.write_text(version, encoding="utf-8")
        with part.open("ab" if resumed else "wb") as out:
            while (chunk := response.read1(CHUNK_BYTES)) and not closed.is_set():  # what has arrived so far
                out.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
            if closed.is_set():
                raise DownloadStopped(f"stopped after {_mb(done)}")
            out.flush()
            os.fsync(out.fileno())
        if total is not None and done < total:
            raise DownloadError(f"the transfer ended after {_mb(done)} of {_mb(total)}{_goes_on(version)}")
        if done == 0:
            raise DownloadError("the server sent no bytes")
        os.replace(part, target)
        complete = True
    except (OSError, http.client.HTTPException) as exc:
        if closed.is_set():  # the read that the stop cut short
            raise DownloadStopped(f"stopped after {_mb(done)}") from exc
        raise DownloadError(_transfer_failure(exc, done, total) + _goes_on(version)) from exc
    finally:
        if complete or version is None or not part.is_file() or part.stat().st_size == 0:
            part.unlink(missing_ok=True)
            kept.unlink(missing_ok=True)


def _transfer_failure(exc: OSError | http.client.HTTPException, done: int, total: int | None) -> str:
    """Why a transfer that had `done` bytes ended, in words."""
    if isinstance(exc, TimeoutError):
        return f"the transfer stalled after {_mb(done)}"
    if isinstance(exc, http.client.IncompleteRead):
        return f"the transfer ended after {_mb(done + len(exc.partial))}" + (f" of {_mb(total)}" if total is not None else "")
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
    return f"the transfer failed after {_mb(done)} ({reason})"


def _goes_on(version: str | None) -> str:
    return "; an ingest of this address again goes on from there" if version is not None else ""


def _place(url: str, headers: Message, kind: str, media_suffixes: Collection[str]) -> Path:
    """Where an address's file goes below the download folder: its host (and port), then its path's parts, the
    last one named as the server names the file when it says (Content-Disposition), with a media suffix."""
    parts = urllib.parse.urlsplit(url)
    folders = [_safe(urllib.parse.unquote(p)) for p in parts.path.split("/")[:-1]]
    folders = [f for f in folders if f]
    name = _safe(headers.get_filename() or "") or _safe(urllib.parse.unquote(parts.path.rsplit("/", 1)[-1]))
    suffix = os.path.splitext(name)[1].lower()
    if suffix not in media_suffixes:
        guessed = _TYPE_SUFFIXES.get(kind) or mimetypes.guess_extension(kind) or ""
        if guessed.lower() not in media_suffixes:
            shown = f"“{name}”, " if name else ""
            raise DownloadError(f"not a media file ({shown}{kind}); the types indexed are audio and video")
        name = f"{name or 'media'}{guessed}"
    return Path(_host_folder(parts), *folders, name)


def _host_folder(parts: urllib.parse.SplitResult) -> str:
    """A host (and port) as the name of its folder."""
    host = parts.hostname or "host"
    return _safe(f"{host}_{parts.port}" if parts.port else host)


class _Quiet:
    """yt-dlp's logger: its messages are not the user's (what went wrong comes back as the exception)."""

    def debug(self, message: str) -> None: ...
    def info(self, message: str) -> None: ...
    def warning(self, message: str) -> None: ...
    def error(self, message: str) -> None: ...


def page_options(folder: Path, hook: Callable[[dict], None], max_videos: int,
                 in_process: bool = False) -> dict[str, Any]:
    """How yt-dlp saves a page's videos into `folder`. A playlist's videos are listed, not opened, until each is
    saved (`extract_flat`), and no further than the limit and one more, which tells that there are more. The
    chapters a site gives a video (a watch page's) are written into the saved file, whose chapter markers the index
    reads; a video without them is left as it came. With `in_process` (a download whose connections are checked),
    yt-dlp fetches an HLS stream's parts itself rather than handing the stream to ffmpeg (`other_program`)."""
    from mediaindex.media.ffmpeg_bin import ffmpeg_exe

    return {**({"hls_prefer_native": True} if in_process else {}),
            "outtmpl": str(folder / "%(title).120B [%(id)s].%(ext)s"), "noplaylist": True, "logger": _Quiet(),
            "quiet": True, "noprogress": True, "ffmpeg_location": ffmpeg_exe(), "progress_hooks": [hook],
            "socket_timeout": TIMEOUT_S, "extract_flat": "in_playlist", "playlistend": max_videos + 1,
            "postprocessors": [{"key": "FFmpegMetadata", "add_chapters": True, "add_metadata": False,
                                "add_infojson": False}]}


def _from_page(url: str, folder: Path, progress: Progress | None, check: Check | None,
               max_videos: int, connections: _Connections) -> list[Downloaded | Missed]:
    """The videos of a web page, by yt-dlp (which knows the pages of video sites, a playlist's or a channel's
    among them, and finds <video> elements in others): the first `max_videos`, each saved once."""
    import yt_dlp

    def hook(status: dict) -> None:
        if progress is not None and status.get("status") == "downloading":
            progress(int(status.get("downloaded_bytes") or 0), status.get("total_bytes"))

    def checked(loader: yt_dlp.YoutubeDL) -> yt_dlp.YoutubeDL:
        """Every request the loader makes, for the page and for its media, checked before it is sent and where
        it ended after its redirects."""
        if check is not None:
            send = loader.urlopen

            def urlopen(request: Any) -> Any:
                check(getattr(request, "url", None) or getattr(request, "full_url", None) or str(request))
                response = send(request)
                if (ended := getattr(response, "url", None)) and ended != url:
                    try:
                        check(ended)
                    except DownloadError:
                        response.close()
                        raise
                return response

            loader.urlopen = urlopen
        return loader

    in_process = connections.peer_check is not None  # every transfer made by connections that are checked
    options = page_options(folder, hook, max_videos, in_process)
    # The page's own subtitles (not the site's automatic captions: speech is transcribed here), saved beside the
    # video as "<title> [<id>].<language>.vtt", the name they are read with it by (media.subtitles); a track that
    # cannot be had costs that track alone.
    subtitles = {**options, "skip_download": True, "writesubtitles": True, "subtitleslangs": ["all", "-live_chat"],
                 "subtitlesformat": "vtt/srt/ass/ttml/best", "ignoreerrors": True, "progress_hooks": []}
    # yt-dlp's connections are the download's too (`peers`): checked by the address each reached (one to a proxy
    # reaches the proxy), and shut when the caller stops the download.
    proxies = proxy_addresses() if in_process else set()
    refused: list[BaseException] = []  # connections refused, which yt-dlp reports as errors of its own

    def made(sock: socket.socket) -> None:
        address, port = sock.getpeername()[:2]
        try:
            connections.made(sock, str(address), checked=(str(address), int(port)) not in proxies)
        except BaseException as exc:
            refused.append(exc)
            raise

    try:
        with handing(made), checked(yt_dlp.YoutubeDL(options)) as loader:
            info = loader.extract_info(url, download=False)
            if info is None:
                raise DownloadError("a web page with no video found in it: give the address of the media file itself")
            if info.get("_type") not in ("playlist", "multi_video"):
                return [_save_video(loader, info, url, folder, check, subtitles, checked, in_process)]
            entries = [e for e in info.get("entries") or [] if e]
            if not entries:
                raise DownloadError("a web page of no videos: give the address of a page with one")
            out: list[Downloaded | Missed] = []
            for entry in entries[:max_videos]:
                address = next((a for a in (entry.get("url"), entry.get("webpage_url")) if a and is_url(a)), url)
                refused.clear()
                try:
                    video = loader.process_ie_result(entry, download=False)
                    out.append(_save_video(loader, video, address, folder, check, subtitles, checked, in_process))
                except (DownloadError, yt_dlp.utils.YoutubeDLError, OSError) as exc:
                    if connections.shut.is_set():
                        raise
                    out.append(Missed(address, _page_reason(refused[-1] if refused else exc, yt_dlp)))
            if len(entries) > max_videos:
                out.append(Missed(url, f"the page's videos after the first {max_videos} are left out "
                                       "(ingest.max_page_videos)"))
            return out
    except (DownloadError, yt_dlp.utils.YoutubeDLError, OSError) as exc:
        if connections.shut.is_set():
            raise DownloadStopped("stopped while it fetched the page or its video") from exc
        if isinstance(exc, DownloadError):
            raise
        if refused:  # the refusal says why
            raise refused[-1] from exc
        raise DownloadError(_page_reason(exc, yt_dlp)) from exc


def other_program(chosen: dict, params: dict) -> str | None:
    """The program yt-dlp would hand a format's transfer to (ffmpeg, rtmpdump, ...), whose connections are not
    this process's; None where yt-dlp fetches it itself (a file, or a stream part by part)."""
    from yt_dlp.downloader import get_suitable_downloader
    from yt_dlp.downloader.external import ExternalFD
    from yt_dlp.downloader.fragment import FragmentFD
    from yt_dlp.downloader.http import HttpFD

    downloader = get_suitable_downloader(chosen, params)
    if issubclass(downloader, HttpFD | FragmentFD) and not issubclass(downloader, ExternalFD):
        return None
    return downloader.__name__.removesuffix("FD")


def _save_video(loader: Any, info: dict, url: str, folder: Path, check: Check | None, subtitles: dict,
                checked: Callable[[Any], Any], in_process: bool = False) -> Downloaded:
    """One video of a page, saved with its subtitles unless it is there already; `in_process`: only where yt-dlp
    fetches it itself."""
    import yt_dlp

    for chosen in (info.get("requested_formats") or [info]) if in_process else ():
        if program := other_program(chosen, loader.params):
            raise DownloadError(f"its stream would be fetched by another program ({program}), whose connections "
                                "cannot be checked by the address they reach; this server downloads from public "
                                "addresses only (api.fetch_urls)")
    if check is not None:  # media fetched by ffmpeg (a stream's parts) is not read through the loader
        for chosen in info.get("requested_formats") or [info]:
            for address in (chosen.get("url"), chosen.get("manifest_url")):
                if address:
                    check(address)
    target = Path(loader.prepare_filename(info))
    if target.is_file():
        return Downloaded(url, target, fetched=False)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        done = loader.process_ie_result(info, download=True)
        saved = [Path(d["filepath"]) for d in done.get("requested_downloads") or [] if d.get("filepath")]
        if info.get("subtitles"):
            with checked(yt_dlp.YoutubeDL(subtitles)) as subtitle_loader:
                subtitle_loader.process_ie_result(info, download=True)
        return Downloaded(url, saved[0] if saved else target, fetched=True)
    finally:
        if not target.is_file():  # what an interrupted or failed download left: parts, a stream's fragments and state
            for pattern in ("*.part", "*.part-Frag*", "*.ytdl"):
                for left in folder.glob(glob_escape(target.stem) + pattern):
                    left.unlink(missing_ok=True)


def _page_reason(exc: BaseException, yt_dlp: Any) -> str:
    """Why a page's video gave no file, as the user is told."""
    if isinstance(exc, DownloadError):
        return str(exc)
    cause = exc.exc_info[1] if isinstance(exc, yt_dlp.utils.DownloadError) and exc.exc_info else exc
    if isinstance(cause, yt_dlp.utils.UnsupportedError):
        return "a web page with no video found in it: give the address of the media file itself"
    if isinstance(exc, OSError):
        return f"the page's video could not be saved ({exc.strerror or exc})"
    reason = str(exc).removeprefix("ERROR: ").strip() or type(exc).__name__
    return f"the page's video could not be saved ({reason})"


def _safe(part: str) -> str:
    """One path part as a file name: no separators or control characters, not hidden, not "." or "..", short."""
    part = _UNSAFE.sub("_", part).strip().lstrip(".")
    while len(part.encode()) > MAX_NAME_BYTES:
        stem, suffix = os.path.splitext(part)
        part = stem[:-1] + suffix
    return part


def _length(headers: Message) -> int | None:
    try:
        value = int(headers.get("Content-Length", ""))
    except ValueError:
        return None
    return value if value >= 0 else None


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 100_000 else f"{size:,} bytes"
