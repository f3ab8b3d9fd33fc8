"""Commands run beside a `mediaindex serve` that holds the index go through that server.

The embedded vector store admits one process, so while a server holds an index a second process cannot
open it. The server records its address in the index folder (`index/holder.py`); the commands find it
there and send their request over HTTP: a search is answered at once, an ingest, summary or question
becomes one of the server's jobs, followed here until it ends. An API key, when the server needs one,
comes from $MEDIAINDEX_API_KEY.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mediaindex.config import Settings
from mediaindex.errors import MediaIndexError
from mediaindex.index.holder import Holder, read_holder

KEY_ENV = "MEDIAINDEX_API_KEY"
ENDED = ("done", "failed", "cancelled")


class RemoteError(MediaIndexError):
    """The server holding the index refused or could not be reached; the message says which and why."""


class Remote:
    def __init__(self, holder: Holder, timeout: float = 30.0) -> None:
        assert holder.url
        self.holder, self.url, self.timeout = holder, holder.url.rstrip("/"), timeout
        self.key = os.environ.get(KEY_ENV) or None

    def request(self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None) -> Any:
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
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
            raise RemoteError(f"the server holding the index ({self.url}) answered {exc.code}: {message}{hint}") from exc
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
