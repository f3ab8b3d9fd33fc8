"""Connections a library opens on its own (yt-dlp's, for a web page and its videos), each handed to its caller
once made, as `download` makes a file's own: to be checked by the address it reached, and kept, so that a stopped
download shuts it whatever it waits for.

A name checked before a request (`public_only`) can resolve to another address when the library connects (DNS
rebinding): the page's video at a public name then reaches this machine or a private network. And a library's
transfer notices a stop only between the bytes it reads. While `handing` is active in a thread, every connection
that thread makes is given to the caller once connected, before a byte is sent on it: the library's connections
are made with `socket.socket.connect`, whatever it builds them with (urllib3, http.client, its own). Processes the
library starts (ffmpeg, for a live stream) are not covered: a download that checks its connections refuses to
hand a transfer to one (`download.other_program`).
"""

from __future__ import annotations

import socket
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Made = Callable[[socket.socket], None]  # a connection just made; raises to refuse it

_active = threading.local()  # this thread's `Made`, while `handing` runs
_installed = threading.Lock()
_connect: Callable[[socket.socket, Any], None] | None = None  # socket.socket.connect before `_install`


def _connect_and_hand(sock: socket.socket, address: Any) -> None:
    assert _connect is not None
    _connect(sock, address)
    made: Made | None = getattr(_active, "made", None)
    if made is not None and sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
        made(sock)


def _install() -> None:
    """Route `socket.socket.connect` through the thread's `Made`, once per process (a thread without one connects
    as before)."""
    global _connect
    with _installed:
        if _connect is None:
            _connect = socket.socket.connect
            socket.socket.connect = _connect_and_hand  # type: ignore[method-assign, assignment]


@contextmanager
def handing(made: Made) -> Iterator[None]:
    """While active, each TCP connection this thread makes is given to `made` once connected; one `made` refuses
    (raises) is closed."""
    _install()

    def checked(sock: socket.socket) -> None:
        try:
            made(sock)
        except BaseException:
            sock.close()
            raise

    before = getattr(_active, "made", None)
    _active.made = checked
    try:
        yield
    finally:
        _active.made = before


def proxy_addresses() -> set[tuple[str, int]]:
    """The (address, port) pairs of the proxies the environment names (http_proxy, https_proxy, all_proxy): a
    connection to one reaches the proxy, whose own policy decides."""
    out: set[tuple[str, int]] = set()
    for scheme, proxy in urllib.request.getproxies().items():
        if scheme == "no":
            continue
        parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if not parts.hostname:
            continue
        try:
            port = parts.port or (443 if parts.scheme == "https" else 1080 if parts.scheme.startswith("socks") else 80)
            found = socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP)
        except (OSError, ValueError, UnicodeError):
            continue  # a proxy that cannot be found: connections to it fail on their own
        out |= {(str(info[4][0]), port) for info in found}
    return out
