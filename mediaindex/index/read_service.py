"""Reads of the vector store served by the process that holds it, to other processes on the same machine.

The holder of an embedded index (an ingest, a search, `serve`) listens on a Unix socket (mode 0600) that
accepts only clients that know a random key (recorded in the 0600 `holder.json`); each request names one
of the store's read methods and gets its value, or the error it raised, back. The answers come from the
holder's live store, so a reader sees each file's segments all or not at all, as the holder's own
searches do, and never opens a file of the store. Nothing but the read methods can be called.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import secrets
import shutil
import socket
import tempfile
import threading
from multiprocessing.connection import Client, Connection, Listener, answer_challenge, deliver_challenge
from pathlib import Path
from typing import Any

from mediaindex.errors import IndexBusyError, MediaIndexError
from mediaindex.index.store import VectorStore

log = logging.getLogger(__name__)

SOCKET_FILE = "holder.sock"
READS = frozenset({"query", "count", "segments_of", "stats", "dims"})
# Linux limits a Unix socket's path to 107 bytes; a longer index path gets a private temporary folder.
MAX_SOCKET_PATH = 100
ANSWER_WAIT = 300.0  # seconds a reader waits for one answer (a holder busy with a large write is slow)
GREETING_WAIT = 30.0  # seconds a reader waits for a holder to greet it


class HolderGone(MediaIndexError):
    """The process that served the reads stopped answering (it finished, or was stopped)."""


class ReadServer:
    """Serves `store`'s read methods on a Unix socket until `close`."""

    def __init__(self, store: VectorStore, index_dir: Path) -> None:
        self.store = store
        self.key = secrets.token_bytes(32)
        self._private_dir: str | None = None
        address = index_dir / SOCKET_FILE
        if len(str(address)) > MAX_SOCKET_PATH:
            self._private_dir = tempfile.mkdtemp(prefix="mediaindex-")  # 0700
            address = Path(self._private_dir) / SOCKET_FILE
        # Only the lease holder gets here, so a socket file left by a killed holder is stale.
        address.unlink(missing_ok=True)
        self.address = str(address)
        # The key is checked in each connection's own thread: a client that stalls there holds up no other.
        self._listener = Listener(self.address, family="AF_UNIX", backlog=64)  # many readers may arrive at once
        os.chmod(self.address, 0o600)
        self._closed = threading.Event()
        self._idle = threading.Condition()  # `close` waits on it until no answer is being computed
        self._busy = 0
        self._thread = threading.Thread(target=self._accept, name="index-reads", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn = self._listener.accept()
            except OSError:  # the listener was closed
                if self._closed.is_set():
                    return
                continue
            if self._closed.is_set():  # the knock of `close`, or a reader too late
                conn.close()
                return
            threading.Thread(target=self._serve, args=(conn,), name="index-reader", daemon=True).start()

    def _serve(self, conn: Connection) -> None:
        with conn:
            try:
                deliver_challenge(conn, self.key)
                answer_challenge(conn, self.key)
            except Exception as exc:  # a client with a wrong key, or one that hung up during the handshake
                log.debug("a reader was refused: %s", exc)
                return
            while True:
                try:
                    method, args, kwargs = conn.recv()
                except (EOFError, OSError):
                    return
                except Exception as exc:  # a request that does not unpickle
                    log.debug("a reader sent a bad request: %s", exc)
                    return
                try:
                    conn.send(self._answer(method, args, kwargs))
                except (OSError, ValueError):  # the reader went away
                    return

    def _answer(self, method: Any, args: Any, kwargs: Any) -> tuple[str, Any]:
        with self._idle:
            if self._closed.is_set():
                return ("ended", None)
            self._busy += 1
        try:
            return self._compute(method, args, kwargs)
        finally:
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def _compute(self, method: Any, args: Any, kwargs: Any) -> tuple[str, Any]:
        if method not in READS:
            return ("error", MediaIndexError(f"{method!r} cannot be asked of the process holding the index"))
        try:
            value = dict(self.store.dims) if method == "dims" else getattr(self.store, method)(*args, **kwargs)
            return ("ok", value)
        except Exception as exc:
            try:  # the reader raises the same error, when it survives the trip
                pickle.loads(pickle.dumps(exc))
                return ("error", exc)
            except Exception:
                return ("error", MediaIndexError(str(exc) or type(exc).__name__))

    def close(self, patience: float = 60.0) -> None:
        """Stop answering and wait for the answers in progress; a request that arrives later is told the
        holder ended."""
        with self._idle:
            self._closed.set()
            self._idle.wait_for(lambda: self._busy == 0, timeout=patience)
        # Closing a socket does not wake a thread blocked in accept() on it: a connection does.
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as knock:
            knock.settimeout(1.0)
            knock.connect(self.address)
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._listener.close()  # also removes the socket file
        if self._private_dir:
            shutil.rmtree(self._private_dir, ignore_errors=True)


class ReadClient:
    """One connection to the holder's read service; `call` raises HolderGone when the holder stops answering."""

    def __init__(self, address: str, key: bytes) -> None:
        try:
            self._conn = Client(address, family="AF_UNIX")
        except OSError as exc:  # gone, or not yet listening
            raise HolderGone(str(exc)) from exc
        try:  # as Client(authkey=...) does, but never waiting for ever on a holder that does not answer
            if not self._conn.poll(GREETING_WAIT):
                raise HolderGone(f"no answer within {GREETING_WAIT:.0f} s")
            answer_challenge(self._conn, key)
            deliver_challenge(self._conn, key)
        except HolderGone:
            self._conn.close()
            raise
        except Exception as exc:  # it went away, or a new holder with another key answers there
            self._conn.close()
            raise HolderGone(str(exc) or type(exc).__name__) from exc
        self._lock = threading.Lock()  # one request at a time on this connection
        self.dims: dict[str, int] = self.call("dims")

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            try:
                self._conn.send((method, args, kwargs))
                if not self._conn.poll(ANSWER_WAIT):
                    raise IndexBusyError(f"the process holding the index did not answer within {ANSWER_WAIT:.0f} s; "
                                         "try again later")
                status, value = self._conn.recv()
            except (EOFError, OSError) as exc:
                raise HolderGone(str(exc) or type(exc).__name__) from exc
        if status == "ended":
            raise HolderGone("it closed the index")
        if status == "error":
            raise value
        return value

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.close()
