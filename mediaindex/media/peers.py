"""Connections a library opens on its own (yt-dlp's, for a web page and its videos), checked by the address each
reached, as `download` checks a file's own connections.

A name checked before a request (`public_only`) can resolve to another address when the library connects (DNS
rebinding): the page's video at a public name then reaches this machine or a private network. While `checking`
is active in a thread, every connection that thread makes is checked once made, before a byte is sent on it: the
library's connections are made with `socket.socket.connect`, whatever it builds them with (urllib3, http.client,
its own). A connection to a proxy the environment names reaches the proxy, whose own policy decides. Processes the
library starts (ffmpeg, for a stream's parts) are not covered: their addresses are checked by name before.
"""

from __future__ import annotations

import socket
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

PeerCheck = Callable[[str, str], None]  # (address a connection reached, host it was for); raises to refuse it

_active = threading.local()  # this thread's check, while `checking` runs
_installed = threading.Lock()
_connect: Callable[[socket.socket, Any], None] | None = None  # socket.socket.connect before `_install`


def _checked_connect(sock: socket.socket, address: Any) -> None:
    assert _connect is not None
    _connect(sock, address)
    check: Callable[[socket.socket], None] | None = getattr(_active, "check", None)
    if check is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        check(sock)


def _install() -> None:
    """Route `socket.socket.connect` through the thread's check, once per process (a thread without one connects
    as before)."""
    global _connect
    with _installed:
        if _connect is None:
            _connect = socket.socket.connect
            socket.socket.connect = _checked_connect  # type: ignore[method-assign, assignment]


def proxy_addresses() -> set[tuple[str, int]]:
    """The (address, port) pairs of the proxies the environment names (http_proxy, https_proxy, all_proxy)."""
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


@contextmanager
def checking(peer_check: PeerCheck | None, refused: list[BaseException] | None = None) -> Iterator[None]:
    """While active, each connection this thread makes is given to `peer_check` once made (its address as the
    host: the name it was made for is the library's), and closed if refused; nothing is checked without one. Each
    refusal is also added to `refused`: a library may report an error of its own in place of the one raised to it."""
    if peer_check is None:
        yield
        return
    _install()
    proxies = proxy_addresses()

    def check(sock: socket.socket) -> None:
        address, port = sock.getpeername()[:2]
        if (str(address), int(port)) in proxies:
            return
        try:
            peer_check(str(address), str(address))
        except BaseException as exc:
            sock.close()
            if refused is not None:
                refused.append(exc)
            raise

    before = getattr(_active, "check", None)
    _active.check = check
    try:
        yield
    finally:
        _active.check = before
