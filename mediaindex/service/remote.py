"""The archive through the `mediaindex serve` that holds the index: the same calls as a local `Archive`.

The embedded vector store admits one process, so while a server holds an index a second process cannot
open it. The server records its address in the index folder (`index/holder.py`); the commands find it
there and send their request over HTTP: a search is answered at once, an ingest, summary or question
becomes one of the server's jobs, followed here until it ends. An API key, when the server needs one,
comes from $MEDIAINDEX_API_KEY.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mediaindex.config import Settings
from mediaindex.errors import MediaIndexError
from mediaindex.index.filters import SearchFilters
from mediaindex.index.holder import Holder, read_holder
from mediaindex.index.naming import files_named
from mediaindex.media.download import is_url
from mediaindex.pipeline.inputs import read_manifest
from mediaindex.service.archive import JobOutcome

KEY_ENV = "MEDIAINDEX_API_KEY"
ENDED = ("done", "failed", "cancelled")
API_MAX_LIMIT = 100  # the server's own cap on hits per search


@dataclass(frozen=True)
class ListedFile:
    """An indexed file as the server's GET /videos lists it (the fields a listing shows of a VideoRecord)."""

    video_id: str
    source: str
    segments: int
    duration: float | None = None
    language: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class RemoteError(MediaIndexError):
    """The server holding the index refused or could not be reached; the message says which and why."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status of a refusal


class Remote:
    """HTTP requests to the server that holds an index (its address recorded in the index folder)."""

    def __init__(self, holder: Holder, timeout: float = 30.0) -> None:
        assert holder.url
        self.holder, self.url, self.timeout = holder, holder.url.rstrip("/"), timeout
        self.key = os.environ.get(KEY_ENV) or None

    def request(self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None) -> Any:
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None}, doseq=True)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}{path}{'?' + query if query else ''}", data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.key:
            req.add_header("Authorization", f"Bearer {self.key}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310  (the server's own address)
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("message") or exc.reason
            except (ValueError, AttributeError):
                message = exc.reason
            hint = f" (set ${KEY_ENV} to a key from `mediaindex keys create`)" if exc.code == 401 else ""
            raise RemoteError(f"the server holding the index ({self.url}) answered {exc.code}: {message}{hint}",
                              exc.code) from exc
        except (urllib.error.URLError, OSError) as exc:
            raise RemoteError(f"the index is held by {self.holder.describe()}, which does not answer ({exc}); "
                              "try again when it is up, or stop it") from exc

    def wait(self, job_id: str, on_change: Callable[[dict], None] | None = None, poll: float = 0.5) -> dict:
        """Follow a job until it ends; `on_change` sees each new state of it."""
        last = None
        while True:
            job = self.request("GET", f"/jobs/{job_id}")
            seen = (job["state"], json.dumps(job.get("counts"), sort_keys=True))
            if seen != last and on_change:
                on_change(job)
            last = seen
            if job["state"] in ENDED:
                return job
            time.sleep(poll)


def remote_for(settings: Settings) -> Remote | None:
    """The server that holds this index, if one is running and has said where it answers."""
    holder = read_holder(Path(settings.index_dir))
    return Remote(holder) if holder is not None and holder.url and holder.pid != os.getpid() else None


class RemoteArchive:
    """The calls of `Archive` that a server answers: a search at once; an ingest, summary or question as one of
    the server's jobs, followed here until it ends. What the server does not take is refused with a message
    that says what it takes."""

    remote = True

    def __init__(self, server: Remote) -> None:
        self.server = server
        self.holder = server.holder

    def __enter__(self) -> RemoteArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        pass  # nothing is held here: the server holds the index

    def close(self) -> None:
        pass

    def search(self, query: str | None, limit: int = 10, filters: SearchFilters | None = None, *,
               mode: str = "hybrid", moments: bool = True, min_confidence: str | None = None) -> list[dict[str, Any]]:
        """Moments as the server's /search gives them (JSON, with its play and page URLs)."""
        return self.moments(query, limit, filters, mode=mode, moments=moments, min_confidence=min_confidence)

    def moments(self, query: str | None, limit: int = 10, filters: SearchFilters | None = None, *,
                mode: str = "hybrid", moments: bool = True, min_confidence: str | None = None,
                picture: Any = None) -> list[dict[str, Any]]:
        params = self._search_params(query, limit, filters, mode, moments and picture is None, min_confidence)
        return self.server.request("GET", "/search", params=params)["hits"]

    def file_moments(self, query: str | None, limit: int = 10, filters: SearchFilters | None = None, *,
                     mode: str = "hybrid", min_confidence: str | None = None, per_file: int = 3) -> list[dict[str, Any]]:
        """The files that hold a match, as the server's /search/files gives them."""
        params = self._search_params(query, limit, filters, mode, True, min_confidence)
        return self.server.request("GET", "/search/files", params={**params, "per_file": per_file})["files"]

    def _search_params(self, query: str | None, limit: int, filters: SearchFilters | None, mode: str, plain: bool,
                       min_confidence: str | None) -> dict[str, Any]:
        f = filters or SearchFilters()
        if not plain or mode != "hybrid" or (f.modalities and len(f.modalities) > 1):
            raise RemoteError(f"the index is held by {self.holder.describe()}: through it, search takes a text "
                              "query with its filters (one --modality), --limit, --min-confidence and --by-file; "
                              "not --image, --segments or --mode")
        return {"q": query or "", "limit": min(limit, API_MAX_LIMIT), "video_id": f.video_id,
                "modality": f.modalities[0] if f.modalities else None, "language": f.language, "speaker": f.speaker,
                "under": f.source_prefix, "from_seconds": f.start, "to_seconds": f.end,
                "where": [f"{k}={v}" for k, v in f.metadata], "min_confidence": min_confidence or "low"}

    def ingest(self, paths: list[Path], summaries: bool | None, on_job: Callable[[str], None] | None = None, *,
               manifests: Sequence[Path] = (), include: Sequence[str] = (), exclude: Sequence[str] = (),
               reindex: bool = False, given: Sequence[tuple[str, dict[str, Any]]] = ()) -> dict[str, Any]:
        """An ingest job on the server for these paths, the entries of these manifest files (read here, with
        their metadata) and the `given` (path, metadata) entries; every file must lie in the server's media roots.
        Followed to its end."""
        rows = [row for manifest in manifests for row in read_manifest(Path(manifest))] + list(given)
        entries = [{"path": p if is_url(p) else str(Path(p).expanduser().absolute()), "metadata": meta}
                   for p, meta in rows]
        job = self.server.request("POST", "/ingest", body={
            "paths": [str(Path(p).expanduser().absolute()) for p in paths], "manifest": entries,
            "include": list(include), "exclude": list(exclude), "summaries": summaries,
            "reindex": reindex})
        if on_job:
            on_job(job["id"])
        return self._wait(job["id"])

    def summarize(self, video: str, recompute: bool = False, on_event: Any = None) -> JobOutcome:
        body = {"video_id": self.video_id(video), "recompute": bool(recompute)}
        return self._follow(self.server.request("POST", "/summarize", body=body))

    def ask(self, question: str, video: str | None = None, on_event: Any = None,
            where: tuple[tuple[str, str], ...] = ()) -> JobOutcome:
        body = {"question": question, "video_id": self.video_id(video) if video else None, "where": dict(where)}
        return self._follow(self.server.request("POST", "/ask", body=body))

    def files(self) -> list[ListedFile]:
        """The server's indexed files, by path."""
        return [ListedFile(v["video_id"], v["source"], v.get("segments") or 0, v.get("duration"), v.get("language"),
                           v.get("metadata") or {}) for v in self.server.request("GET", "/videos")]

    def remove(self, video_ids: Sequence[str]) -> list[ListedFile]:
        """Take these files out of the server's index; an id it no longer holds is passed over."""
        removed = []
        for video_id in video_ids:
            try:
                v = self.server.request("DELETE", f"/videos/{urllib.parse.quote(video_id)}")
            except RemoteError as exc:
                if exc.status == 404:
                    continue
                raise
            removed.append(ListedFile(v["video_id"], v["source"], v.get("segments") or 0))
        return removed

    def video_id(self, video: str) -> str:
        """A video id from an id, its start, a path or a file name, as the local command accepts."""
        found, _ = files_named(self.files(), video)
        if len(found) != 1:
            raise RemoteError(f"no video {video!r} in the index (neither a video id nor an ingested path)")
        return found[0].video_id

    def _wait(self, job_id: str, poll: float = 0.5) -> dict[str, Any]:
        """The server's job once it has ended. Ctrl-C while waiting asks the server to stop it too (an ingest at
        its next file, a summary or question before its next model call), then goes on as Ctrl-C."""
        try:
            return self.server.wait(job_id, poll=poll)
        except KeyboardInterrupt:
            # A job that ended meanwhile, or a server gone: nothing is left to stop.
            with contextlib.suppress(MediaIndexError):
                self.server.request("DELETE", f"/jobs/{job_id}")
            raise

    def _follow(self, job: dict[str, Any]) -> JobOutcome:
        job = self._wait(job["id"], poll=1.0)
        result = job.get("result") or {}
        return JobOutcome(job["id"], job.get("kind") or "", job["state"], job.get("error"), result.get("output"),
                          result.get("markdown"))


def connect(settings: Settings) -> RemoteArchive | None:
    """The server that holds this index, as an archive, if one is running and has said where it answers."""
    server = remote_for(settings)
    return RemoteArchive(server) if server is not None else None
