"""search, ingest, summarize and ask sent to the `serve` that holds the index (see remote.py)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from mediaindex.cli.remote import Remote, RemoteError
from mediaindex.pipeline.discover import shown

API_MAX_LIMIT = 100  # the server's own cap on hits per search


def remote_search(server: Remote, query: str, limit: int, video: str | None, modality: str | None,
                  language: str | None, speaker: str | None = None, min_confidence: str = "low") -> list[dict]:
    params = {"q": query, "limit": min(limit, API_MAX_LIMIT), "video_id": video, "modality": modality,
              "language": language, "speaker": speaker, "min_confidence": min_confidence}
    return server.request("GET", "/search", params=params)["hits"]


def _fail(console: Console, message: str) -> int:
    console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return 2


def remote_ingest(server: Remote, paths: list[Path], summaries: bool | None, console: Console,
                  verbose: bool = False) -> int:
    """An ingest job on the server for these paths (they must lie in its media roots); exit code as ingest's."""
    try:
        job = server.request("POST", "/ingest", body={
            "paths": [str(Path(p).expanduser().absolute()) for p in paths], "summaries": summaries})
        console.print(f"job {job['id']} (on the server)", highlight=False)
        job = server.wait(job["id"])
    except RemoteError as exc:
        return _fail(console, str(exc))
    for line in job_lines(job, verbose):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    counts = job.get("counts") or {}
    return 0 if counts.get("done") else 1


def job_lines(job: dict, verbose: bool = False) -> list[str]:
    """A server's ingest job in the words of a local ingest: one line per file, then the counts."""
    from mediaindex.cli.progress import summary_line
    from mediaindex.pipeline.discover import NOT_MEDIA

    lines: list[str] = []
    tally = {"indexed": 0, "unchanged": 0, "skipped": 0, "failed": 0, "left out": 0}
    for f in job["files"]:
        state, reason = f["state"], f.get("reason") or ""
        if state == "done":
            label = "unchanged" if reason == "already indexed" else "indexed"
        elif state == "skipped" and reason.startswith(NOT_MEDIA):
            label = "left out"
        else:
            label = state
        tally[label] = tally.get(label, 0) + 1
        if label != "left out" or verbose:
            lines.append(f"{label:<10} {shown(f['path'])}" + (f": {shown(reason)}" if reason else ""))
    done = summary_line(tally["indexed"], None, 0, tally["unchanged"], tally["skipped"], tally["failed"],
                        tally["left out"], job["id"], verbose)
    state = "" if job["state"] == "done" else f" ({job['state']})"
    return [*lines, done + state]


def _video_id(server: Remote, video: str) -> str:
    """A video id from an id, a path or a file name, as the local command accepts."""
    videos = server.request("GET", "/videos")
    ids = {v["video_id"] for v in videos}
    if video in ids:
        return video
    path = str(Path(video).expanduser().absolute())
    for v in videos:
        if v["source"] == path or Path(v["source"]).name == video:
            return v["video_id"]
    raise RemoteError(f"no video {video!r} in the index (neither a video id nor an ingested path)")


def remote_agent_job(server: Remote, kind: str, args: dict, as_json: bool, console: Console) -> int:
    """A summarize or ask job on the server, followed to its end; prints what the local command prints."""
    try:
        if kind == "summarize":
            body = {"video_id": _video_id(server, args["video"]), "recompute": bool(args.get("recompute"))}
            job = server.request("POST", "/summarize", body=body)
        else:
            video = _video_id(server, args["video"]) if args.get("video") else None
            job = server.request("POST", "/ask", body={"question": args["question"], "video_id": video})
        job = server.wait(job["id"], poll=1.0)
    except RemoteError as exc:
        return _fail(console, str(exc))
    if job["state"] != "done":
        return _fail(console, f"{kind} job {job['id']} {job['state']}: {job.get('error')}") - 1
    result = job["result"]
    if as_json:
        print(json.dumps({"job_id": job["id"], **result["output"]}, ensure_ascii=False, indent=2))
    else:
        print(result["markdown"])
        console.print(f"job {job['id']} (on the server)", highlight=False)
    return 0
