"""The embedded vector store as several processes share it: one holds it, the others read through the holder.

Opening decides, before any file of the store is opened, whether this process may hold it (the lease,
`index/lease.py`). The holder opens the store, serves its reads to other processes (`index/read_service.py`)
and records where (`index/holder.py`). Any other process:
- a reader (search, stats, ask, transcript, the API) reads through the holder, and when the holder ends,
  takes the lease and opens the store itself (or reads through whoever took it), then repeats the read;
- a writer (ingest, optimize) waits until the holder has finished, or is refused at once (`Access.wait`).
A reader that is asked to write takes the lease if it is free, else it is refused plainly.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mediaindex.errors import IndexBusyError, MediaIndexError
from mediaindex.index.filters import SearchFilters
from mediaindex.index.holder import Holder, clear_holder, read_holder, record_holder
from mediaindex.index.lease import IndexLease, WaitingWriter, writer_waiting
from mediaindex.index.read_service import HolderGone, ReadClient, ReadServer
from mediaindex.index.store import Retriever, ScoredHit, VectorStore
from mediaindex.segments import Segment

log = logging.getLogger(__name__)

POLL = 0.25  # seconds between looks at the lease and the holder's record
READER_PATIENCE = 60.0  # seconds a reader waits for a holder to answer (it may still be opening the store)
ATTEMPTS = 3  # reads repeated when the holder ends during one


@dataclass(frozen=True)
class Access:
    """How a process opens an index that another process may hold."""

    write: bool = False  # a writer never reads through another process: it waits for the lease
    wait: bool = True  # a writer waits for the holder to finish; False: it is refused at once
    on_wait: Callable[[Holder | None], None] | None = None  # told whom a writer waits for (each new holder)


READ = Access()
WRITE = Access(write=True)


def _who(holder: Holder | None) -> str:
    return holder.describe() if holder else "another process"


class SharedStore(VectorStore):
    def __init__(self, index_dir: Path, open_owned: Callable[[], VectorStore], access: Access = READ) -> None:
        self.dir = index_dir
        self._open_owned = open_owned
        self._url: str | None = None
        self._lease: IndexLease | None = None
        self._owned: VectorStore | None = None
        self._server: ReadServer | None = None
        self._client: ReadClient | None = None
        self.through: Holder | None = None  # the process this one reads through, while it does
        self._closed = False
        self._switch = threading.Lock()  # one change of role at a time (a server's threads share this store)
        self.dims: dict[str, int] = {}
        if access.write:
            self._own(self._wait_for_lease(access))
        else:
            self._attach()

    # -- roles -----------------------------------------------------------------------------------

    @property
    def holds(self) -> bool:
        """Whether this process holds the store (else it reads through the process that does)."""
        return self._owned is not None

    def _wait_for_lease(self, access: Access) -> IndexLease:
        lease = IndexLease.try_take(self.dir)
        if lease is not None:
            return lease
        holder = read_holder(self.dir)
        if not access.wait or (holder is not None and holder.pid == os.getpid()):  # never wait for itself
            raise IndexBusyError(f"the index at {self.dir} is held by {_who(holder)}; try again when it has "
                                 "finished")
        waiting = WaitingWriter(self.dir)
        try:
            told: int | None = -1
            while (lease := IndexLease.try_take(self.dir)) is None:
                holder = read_holder(self.dir)
                pid = holder.pid if holder else None
                if pid != told and (holder is not None or told == -1) and access.on_wait is not None:
                    access.on_wait(holder)  # a holder's record goes a moment before its lease: not a new holder
                told = pid
                time.sleep(POLL)
            return lease
        finally:
            waiting.done()

    def _attach(self) -> None:
        """Hold the store if no process does, else read through the one that does."""
        deadline = time.monotonic() + READER_PATIENCE
        while True:
            # A writer that waits goes first: this reader then reads through it.
            lease = None if writer_waiting(self.dir) else IndexLease.try_take(self.dir)
            if lease is not None:
                self._own(lease)
                return
            holder = read_holder(self.dir)
            if holder is not None and holder.socket and holder.key:
                try:
                    self._client = ReadClient(holder.socket, bytes.fromhex(holder.key))
                    self.dims, self.through = dict(self._client.dims), holder
                    return
                except (HolderGone, ValueError):
                    pass  # it is ending, or a new holder has not recorded itself yet
            if time.monotonic() > deadline:
                raise IndexBusyError(f"the index at {self.dir} is held by {_who(holder)}, which does not answer "
                                     "reads; try again when it has finished")
            time.sleep(POLL)

    def _own(self, lease: IndexLease) -> None:
        try:
            store = self._open_owned()
        except BaseException:
            lease.release()
            raise
        try:
            self._server = ReadServer(store, self.dir)
        except OSError as exc:  # this process still works; others are told the holder does not answer
            log.warning("reads from other processes cannot be served: %s", exc)
        self._lease, self._owned, self.dims, self.through = lease, store, dict(store.dims), None
        self._record()

    def _record(self) -> None:
        server = self._server
        record_holder(self.dir, url=self._url, socket=server.address if server else None,
                      key=server.key.hex() if server else None)

    def _reattach(self, stale: ReadClient | None) -> None:
        with self._switch:
            if self._closed:
                raise MediaIndexError("the index was closed")
            if self._owned is None and self._client is stale:  # no other thread has switched already
                if stale is not None:
                    stale.close()
                self._client = None
                self._attach()

    def advertise(self, url: str) -> None:
        """Record where the server holding this index answers HTTP (also when it holds it later)."""
        self._url = url
        if self._owned is not None:
            self._record()

    # -- reading ---------------------------------------------------------------------------------

    def _read(self, method: str, *args: Any, **kwargs: Any) -> Any:
        for _ in range(ATTEMPTS):
            owned, client = self._owned, self._client
            if owned is not None:
                return getattr(owned, method)(*args, **kwargs)
            if client is not None:
                try:
                    return client.call(method, *args, **kwargs)
                except HolderGone as exc:
                    log.info("the process holding the index stopped answering (%s): looking again", exc)
            self._reattach(client)
        raise IndexBusyError(f"the processes holding the index at {self.dir} kept ending during the request; "
                             "try again")

    def query(
        self, retrievers: list[Retriever], limit: int, filters: SearchFilters | None = None,
        candidates: int = 100, rrf_k: int = 60, with_vectors: list[str] | None = None,
    ) -> list[ScoredHit]:
        return self._read("query", retrievers, limit, filters, candidates=candidates, rrf_k=rrf_k,
                          with_vectors=with_vectors)

    def count(self, filters: SearchFilters | None = None) -> int:
        return self._read("count", filters)

    def segments_of(self, video_id: str, modality: str | None = None) -> list[dict[str, Any]]:
        return self._read("segments_of", video_id, modality)

    def stats(self) -> dict[str, Any]:
        return self._read("stats")

    # -- writing ---------------------------------------------------------------------------------

    def _writable(self) -> VectorStore:
        with self._switch:
            if self._closed:
                raise MediaIndexError("the index was closed")
            if self._owned is None:
                lease = IndexLease.try_take(self.dir)
                if lease is None:
                    # No path: a server shows this message to its clients.
                    raise IndexBusyError(f"the index is being written by {_who(read_holder(self.dir))}: it can "
                                         "only be read here until that has finished; try again then")
                if self._client is not None:
                    self._client.close()
                    self._client = None
                self._own(lease)
        assert self._owned is not None
        return self._owned

    def upsert(self, segments: list[Segment], vectors: np.ndarray) -> None:
        self._writable().upsert(segments, vectors)

    def delete_video(self, video_id: str) -> None:
        self._writable().delete_video(video_id)

    def set_source(self, video_id: str, source: str) -> None:
        self._writable().set_source(video_id, source)

    def set_metadata(self, video_id: str, values: dict[str, Any]) -> None:
        self._writable().set_metadata(video_id, values)

    def delete_other_videos(self, keep: list[str]) -> None:
        self._writable().delete_other_videos(keep)

    def optimize(self) -> bool:
        return self._writable().optimize()

    # -- the end -----------------------------------------------------------------------------------

    def close(self) -> None:
        with self._switch:
            self._closed = True
            server, owned, lease, client = self._server, self._owned, self._lease, self._client
            self._server = self._owned = self._lease = self._client = None
        if client is not None:
            client.close()
        try:
            if server is not None:
                server.close()  # waits for the reads in progress: none runs on a closed store
        finally:
            try:
                if owned is not None:
                    clear_holder(self.dir)
                    owned.close()
            finally:
                if lease is not None:
                    lease.release()

    def __getattr__(self, name: str) -> Any:
        # The engine's own attributes (a test's or a benchmark's look inside) exist where this process holds it.
        owned = self.__dict__.get("_owned")
        if owned is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(owned, name)
