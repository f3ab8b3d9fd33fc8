"""Fault and attack run against the real CLI and server: bad media, SIGKILLs during ingest and serve, hostile
HTTP requests. Prints what was tried and what went wrong; the last lines should read zero where they say so.

    python benchmarks/faults.py                     # about 5-10 minutes on 2 cores
    python benchmarks/faults.py --kills 5 --json benchmarks/out/faults.json

Everything runs in a temporary folder: broken media are made there from the real sample media, the CLI
and `serve` run as separate processes (as a user runs them), and every kill is a SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from a checkout


def _find_media() -> Path:
    """$MEDIAINDEX_MEDIA_DIR, else `shared/media` beside the checkout or above it (as the tests find it)."""
    if os.environ.get("MEDIAINDEX_MEDIA_DIR"):
        return Path(os.environ["MEDIAINDEX_MEDIA_DIR"]).resolve()
    return next((p / "shared" / "media" for p in ROOT.parents if (p / "shared" / "media").is_dir()),
                ROOT.parent / "shared" / "media").resolve()


MEDIA = _find_media()
GOOD = ["audio/jfk.flac", "audio/english.wav", "audio/LJ002-0020.wav", "audio/LJ002-0035.wav",
        "audio/2412-153948-0000.flac", "video/testvideo.mp4"]
LABELS = ("indexed ", "failed ", "skipped ", "summarised ", "unchanged ", "left out ")  # one per file line


def _split(line: str) -> tuple[str, str]:
    """'skipped    /a/b.mp4: why' -> ('skipped', '/a/b.mp4: why')."""
    label = next(lb for lb in LABELS if line.startswith(lb))
    return label.strip(), line[len(label):].lstrip()


def cli(args: list[str], env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mediaindex", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)


def make_env(base: Path, name: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env["MEDIAINDEX_INDEX_DIR"] = str(base / name)
    temp = Path(tempfile.mkdtemp(prefix="mf"))  # Ray's socket paths must stay short
    env["MEDIAINDEX_TEMP_DIR"] = str(temp)
    for var in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE", "MEDIAINDEX_API_KEY"):
        env.pop(var, None)
    return env


# ---- 1. bad inputs --------------------------------------------------------------------------------

def make_bad_inputs(folder: Path) -> dict[str, str]:
    """Broken variants of real media, and entries that are not files: name -> kind."""
    folder.mkdir(parents=True)
    video = (MEDIA / "video/testvideo.mp4").read_bytes()
    flac = (MEDIA / "audio/jfk.flac").read_bytes()
    wav = (MEDIA / "audio/english.wav").read_bytes()
    png = (MEDIA / "images/CLIP.png").read_bytes()
    corrupt = bytearray(video)
    corrupt[len(corrupt) // 3: len(corrupt) // 3 + 20_000] = bytes(20_000)
    lying_wav = bytearray(wav)
    lying_wav[4:8] = (2**31).to_bytes(4, "little")  # a RIFF size far past the end
    files = {
        "empty.mp4": (b"", "zero bytes"),
        "truncated.mp4": (video[: len(video) // 10], "truncated video"),
        "random.mp4": (os.urandom(200_000), "random bytes"),
        "text.wav": (b"this is not audio\n" * 100, "text named as audio"),
        "header-only.flac": (flac[:100], "audio header only"),
        "corrupt-middle.mp4": (bytes(corrupt), "video with a zeroed stretch"),
        "picture.mp4": (png, "a picture named as video"),
        "lying-size.wav": (bytes(lying_wav), "wav whose header lies about its size"),
        "garbage.mp3": (b"ID3" + os.urandom(50_000), "mp3 tag then garbage"),
        "notes.txt": (b"notes", "unsupported type"),
        ".hidden.mp4": (video[:1000], "hidden file"),
        "new\nline.mp4": (video[:5000], "a newline in the name"),
        "esc\x1b[31m.wav": (wav[:3000], "a terminal escape in the name"),
    }
    kinds = {}
    for name, (data, kind) in files.items():
        (folder / name).write_bytes(data)
        kinds[name] = kind
    (folder / "dangling.mp4").symlink_to(folder / "deleted.mp4")
    kinds["dangling.mp4"] = "dangling symlink"
    (folder / "loop.mp4").symlink_to(folder / "loop.mp4")
    kinds["loop.mp4"] = "symlink loop"
    (folder / "back-up").symlink_to(folder)
    kinds["back-up"] = "folder symlink loop"
    os.mkfifo(folder / "pipe.wav")
    kinds["pipe.wav"] = "named pipe"
    shutil.copy(MEDIA / "video/video_with_failing_audio.mp4", folder / "failing-audio.mp4")
    kinds["failing-audio.mp4"] = "video whose audio fails to decode"
    (folder / "good.flac").symlink_to(MEDIA / "audio/jfk.flac")
    (folder / "same-again.flac").symlink_to(MEDIA / "audio/jfk.flac")
    kinds["same-again.flac"] = "the same file twice"
    return kinds


def run_bad_inputs(base: Path) -> dict:
    from mediaindex.pipeline.discover import shown

    folder = base / "bad"
    kinds = make_bad_inputs(folder)
    env = make_env(base, "bad-index")
    started = time.perf_counter()
    result = cli(["ingest", str(folder), "--verbose"], env)  # -v: the files that are not media get their line too
    lines = [line for line in result.stderr.splitlines() if line.startswith(LABELS)]
    per_entry: dict[str, int] = {}
    outcomes: dict[str, list[str]] = {}
    for entry in os.listdir(folder):
        # A link to good media is indexed, and reported, as the file it leads to.
        target = folder / entry

        def about(name: str) -> list[str]:
            return [line for line in lines if _split(line)[1].startswith(name + ":")]

        mine = about(shown(target)) or (about(shown(target.resolve())) if target.is_symlink() and target.exists()
                                        else [])
        per_entry[entry] = len(mine)
        outcomes[kinds.get(entry, "good media (a link)")] = [
            _split(line)[0] + ": " + line.split(": ", 1)[-1][:100] for line in mine]
    unreported = [e for e, n in per_entry.items() if n == 0]
    doubled = [e for e, n in per_entry.items() if n > 1]
    return {
        "bad_input_kinds": len(kinds), "entries": len(per_entry), "entries_without_a_line": len(unreported),
        "entries_with_several_lines": len(doubled), "unreported": unreported, "doubled": doubled,
        "tracebacks": result.stderr.count("Traceback"), "exit_code": result.returncode,
        "good_indexed": sum(1 for line in lines if line.startswith("indexed ") and str(MEDIA / "audio/jfk.flac") in line),
        "raw_control_characters": int("\x1b[31m" in result.stderr), "outcomes": outcomes,
        "seconds": round(time.perf_counter() - started, 1),
    }


# ---- 2. SIGKILL during CLI ingest, then resume ------------------------------------------------------

def _job_id(stderr_file: Path, wait: float) -> str | None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        for line in stderr_file.read_text(errors="replace").splitlines():
            if line.startswith("job "):
                return line.split()[1]
        time.sleep(0.2)
    return None


def index_health(index_dir: Path, sources: list[Path]) -> dict:
    """Files lost (a good file not in the catalog) and duplicates (a source twice, segments of no file)."""
    from mediaindex.config import load_settings
    from mediaindex.index.filters import SearchFilters
    from mediaindex.index.index import open_index
    from mediaindex.models.text_embed import load_text_embedder

    settings = load_settings("cpu", index_dir=index_dir)
    embedder = load_text_embedder(settings.embed)
    with open_index(settings, embedder.dim, embedder.name, must_exist=True) as index:
        records = index.catalog.all()
        by_source: dict[str, int] = {}
        for r in records:
            by_source[r.source] = by_source.get(r.source, 0) + 1
        per_video = sum(index.store.count(SearchFilters(video_id=r.video_id)) for r in records)
        orphans = index.store.count() - per_video
        lost = [str(s) for s in sources if str(s.resolve()) not in by_source]
        return {"files_lost": len(lost), "lost": lost,
                "duplicates": sum(n - 1 for n in by_source.values()) + max(0, orphans),
                "segments": index.store.count()}


def run_ingest_kills(base: Path, kills: int) -> dict:
    files = [MEDIA / g for g in GOOD]
    env = make_env(base, "kill-index")
    log = base / "kill-stderr.txt"
    job, history = None, []
    # Early kills (before any file can finish) and later ones (files in flight and finished).
    delays = [3.0 + 9.0 * i for i in range(kills)]
    for delay in delays:
        args = ["ingest", "--resume", job] if job else ["ingest", *map(str, files)]
        with open(log, "w") as err:
            proc = subprocess.Popen([sys.executable, "-m", "mediaindex", *args], env=env, cwd=ROOT,
                                    stdout=subprocess.DEVNULL, stderr=err)
        job = job or _job_id(log, 60)
        time.sleep(delay)
        state = "finished before the kill" if proc.poll() is not None else "killed"
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        history.append({"after_s": delay, "run": state})
        time.sleep(2)
    final = cli(["ingest", "--resume", job], env) if job else None
    jobs_db = Path(env["MEDIAINDEX_INDEX_DIR"]) / "jobs.db"
    with sqlite3.connect(jobs_db) as db:
        states = dict(db.execute("SELECT state, COUNT(*) FROM job_files WHERE job_id = ? GROUP BY state", (job,)))
        gave_up = db.execute("SELECT COUNT(*) FROM job_files WHERE job_id = ? AND reason LIKE 'gave up%'",
                             (job,)).fetchone()[0]
    health = index_health(Path(env["MEDIAINDEX_INDEX_DIR"]), files)
    return {"kills": sum(1 for h in history if h["run"] == "killed"), "history": history, "job": job,
            "final_exit_code": final.returncode if final else None, "file_states": states,
            "gave_up": gave_up, **health}


# ---- 3. the server: hostile requests and SIGKILL during a job ------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(env: dict[str, str], port: int, root: Path, log: Path) -> subprocess.Popen:
    import httpx

    with open(log, "a") as out:
        proc = subprocess.Popen([sys.executable, "-m", "mediaindex", "serve", "--port", str(port), "--media-root",
                                 str(root)], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=5).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise RuntimeError("serve did not become ready")


def attacks(index_name: str) -> list[tuple[str, str, dict]]:
    """(method, target, options) — traversal, hidden and private files, bad ranges, bodies and keys."""
    out: list[tuple[str, str, dict]] = []
    for target in ["%2e%2e/secret.txt", "%2E%2E/%2E%2E/%2E%2E/etc/passwd", "media/..%2f..%2fsecret.txt",
                   "media%2f%2e%2e%2f%2e%2e%2fsecret.txt", "..%5c..%5csecret.txt", "%2fetc%2fpasswd", "/etc/passwd",
                   "%252e%252e/secret.txt", "media%00.wav", "media", "nothing.wav", ".env", ".ssh/id_rsa",
                   ".ssh/looks-like.wav", "media/.private/hidden.wav", "notes.txt", "link-to-catalog.wav",
                   f"{index_name}/catalog.db", f"{index_name}/jobs.db", f"{index_name}/api_keys.db",
                   f"{index_name}/holder.json", f"{index_name}/schema.json", f"{index_name}/qdrant",
                   f"{index_name}/thumbs"]:
        out.append(("GET", f"/files/{target}", {}))
    for target in ["%2e%2e/%2e%2e/catalog.db", "/etc/passwd", "../jobs.db", ".x.jpg"]:
        out.append(("GET", f"/thumbs/{target}", {}))
    for rng in ["bytes=abc", "bytes=99999999-", "items=0-1", "bytes=5-1", "bytes=" + ",".join(["0-1"] * 200)]:
        out.append(("GET", "/files/media/talk.flac", {"headers": {"Range": rng}}))
    for paths in [[".env"], [f"{index_name}/jobs.db"], ["../secret.txt"], ["/etc/passwd"], ["link-to-catalog.wav"],
                  [".ssh"], ["media/.private/hidden.wav"]]:
        out.append(("POST", "/ingest", {"json": {"paths": paths}}))
    out += [
        ("POST", "/search", {"content": b'{"q": ', "headers": {"content-type": "application/json"}}),
        ("POST", "/search", {"content": (b" " * 100_000 for _ in range(30)), "headers": {"content-type": "application/json"}}),
        ("POST", "/search/image", {"content": b"\x89PNG\r\n\x1a\n broken", "headers": {"content-type": "image/png"}}),
        ("POST", "/ingest/upload?filename=../../x.wav", {"content": b"RIFF"}),
        ("POST", "/ingest/upload?filename=.env", {"content": b"SECRET"}),
        ("DELETE", "/jobs/000000000000", {}),
        ("GET", "/health/ready", {"key": False}),
        ("GET", "/search?q=%00", {}),
    ]
    out += [("GET", "/videos", {"key": f"mik_guess{i}_wrong"}) for i in range(15)]
    # Over-long paths and names: a 422 with a short message, never the file system's error as a 500.
    deep = "/".join(["d" * 250] * 16) + "/" + "x" * 74 + ".wav"  # fits alone, not below a media root
    for path in ["a" * 10_000, "x" * 300 + ".wav", "é" * 200 + ".wav", deep]:
        out.append(("POST", "/ingest", {"json": {"paths": [path]}}))
        out.append(("GET", f"/files/{path}", {}))
        out.append(("GET", f"/thumbs/{path}", {}))
    out.append(("POST", "/ingest/upload?filename=" + "z" * 300 + ".wav", {"content": b"RIFF"}))
    return out


def tool_attacks(model: str) -> list[dict]:
    """Chat requests whose tools and tool_choice cannot go together: each must be a 400 in OpenAI's shape."""
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    base = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return [{**base, **extra} for extra in [
        {"tools": [weather], "tool_choice": {"type": "function", "function": {"name": "does_not_exist"}}},
        {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"tool_choice": "required"},
        {"tools": [], "tool_choice": "auto"},
        {"tools": [weather, weather], "tool_choice": "required"},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
        {"tools": [weather], "tool_choice": "sometimes"},
        {"tools": [weather], "tool_choice": {"type": "function"}},
    ]]


RATE_PACE_S = 0.12  # below the server's default rate limit (10 requests a second per key)


def paced(client, method: str, target: str, **options):  # httpx.Client -> httpx.Response
    """A request that waits out a 429 (Retry-After) rather than counting the rate limit as its answer."""
    for _ in range(5):
        r = client.request(method, target, **options)
        if r.status_code != 429:
            return r
        time.sleep(float(r.headers.get("Retry-After", "1")))
    return r


def run_server(base: Path) -> dict:
    import httpx

    root = base / "home"  # like a home folder given as the media root: secrets and the index inside it
    (root / "media" / ".private").mkdir(parents=True)
    shutil.copy(MEDIA / "audio/jfk.flac", root / "media" / "talk.flac")
    shutil.copy(MEDIA / "audio/english.wav", root / "media" / "second.wav")
    shutil.copy(MEDIA / "audio/LJ002-0020.wav", root / "media" / "third.wav")
    shutil.copy(MEDIA / "audio/english.wav", root / "media" / ".private" / "hidden.wav")
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_rsa").write_text("-----BEGIN PRIVATE KEY----- faults")
    shutil.copy(MEDIA / "audio/LJ002-0035.wav", root / ".ssh" / "looks-like.wav")
    (root / ".env").write_text("SECRET_TOKEN=faults")
    (root / "notes.txt").write_text("private notes")
    env = make_env(root, "idx")
    index_dir = Path(env["MEDIAINDEX_INDEX_DIR"])
    index_dir.mkdir()
    (root / "link-to-catalog.wav").symlink_to(index_dir / "catalog.db")
    key = cli(["keys", "create", "faults"], env).stdout.strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = root.parent / "serve.log"
    proc = start_serve(env, port, root, log)
    secrets = [b"PRIVATE KEY", b"SECRET_TOKEN", b"SQLite format", b"private notes"]
    folders = {str(index_dir), str(root), env["MEDIAINDEX_TEMP_DIR"], tempfile.gettempdir() + "/", str(Path.home())}
    sent = server_errors = leaked = tool_misanswers = upload_leaks = 0
    statuses: dict[int, int] = {}
    leaks: list[str] = []
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            for method, target, options in attacks(index_dir.name):
                opts = dict(options)
                presented = opts.pop("key", key)
                headers = {**opts.pop("headers", {}), **({"X-API-Key": presented} if presented else {})}
                r = client.request(method, target, headers=headers, **opts)
                time.sleep(RATE_PACE_S)
                sent += 1
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                server_errors += r.status_code >= 500 and r.status_code not in (501, 503)
                body = r.content
                # Secrets count anywhere; server folders in errors and in what anyone may read without a key (a
                # key holder's own job record lists the files it ingests, by design).
                public = r.status_code >= 400 or not presented
                found = [s.decode() for s in secrets if s in body] + [
                    f for f in folders if public and f.encode() in body]
                if found:
                    leaked += 1
                    leaks.append(f"{method} {target}: {found}")
            model = paced(client, "GET", "/v1/models", headers={"X-API-Key": key}).json()["data"][0]["id"]
            for body in tool_attacks(model):
                r = paced(client, "POST", "/v1/chat/completions", json=body, headers={"X-API-Key": key})
                sent += 1
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                server_errors += r.status_code >= 500
                tool_misanswers += r.status_code != 400 or not {"message", "type"} <= set(r.json().get("error") or {})
            # An upload is shown by its name: its job's record never names the index folder (other bytes than
            # the media root's files, which are checked for loss below).
            r = paced(client, "POST", "/ingest/upload?filename=upload%20name.flac",
                      content=(MEDIA / "audio/2412-153948-0000.flac").read_bytes(), headers={"X-API-Key": key})
            upload_job = r.json()["id"]
            for answer in (r, paced(client, "GET", f"/jobs/{upload_job}", headers={"X-API-Key": key}),
                           paced(client, "GET", "/jobs", headers={"X-API-Key": key})):
                sent += 1
                upload_leaks += str(index_dir) in answer.text or "uploads/" in answer.text
            # A job in flight when the server is SIGKILLed: a restarted server resumes it.
            job = client.post("/ingest", json={"paths": ["media"]}, headers={"X-API-Key": key}).json()["id"]
            time.sleep(6)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        time.sleep(2)
        proc = start_serve(env, port, root, log)
        deadline = time.monotonic() + 600
        state = {"state": "unknown", "counts": {}}
        with httpx.Client(base_url=url, timeout=60, headers={"X-API-Key": key}) as client:
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    state = client.get(f"/jobs/{job}").json()
                except httpx.TransportError as exc:  # the restarted server went away: a finding, not a crash here
                    state = {"state": f"server gone ({exc})", "counts": {}}
                    time.sleep(1)
                    continue
                if state["state"] in ("done", "failed", "cancelled"):
                    break
                time.sleep(1)
        restarted_exit = proc.poll()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    health = index_health(index_dir, [root / "media" / n for n in ("talk.flac", "second.wav", "third.wav")])
    return {"requests": sent, "server_errors": server_errors, "leaked_paths_or_secrets": leaked, "leaks": leaks,
            "tool_choice_not_400": tool_misanswers, "upload_answers_naming_the_index": upload_leaks,
            "statuses": dict(sorted(statuses.items())), "serve_kills": 1, "resumed_job_state": state["state"],
            "restarted_server_exit": restarted_exit, "serve_log_tail": log.read_text(errors="replace")[-3000:],
            "resumed_job_counts": state["counts"], **{f"after_serve_kill_{k}": v for k, v in health.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=3, help="SIGKILLs of a CLI ingest, each followed by --resume")
    parser.add_argument("--json", type=Path, help="Also write the results here")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary folder (logs, indexes)")
    parser.add_argument("--parts", default="bad,kills,server", help="Which parts to run (comma-separated)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="mediaindex-faults-"))
    started = time.perf_counter()
    try:
        parts = set(args.parts.split(","))
        bad = run_bad_inputs(base) if "bad" in parts else {}
        killed = run_ingest_kills(base, args.kills) if "kills" in parts else {}
        served = run_server(base) if "server" in parts else {}
    finally:
        if args.keep:
            print(f"kept {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    results = {"machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
               "seconds": round(time.perf_counter() - started), "bad_inputs": bad, "ingest_kills": killed,
               "server": served}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2), file=sys.stderr)
    def n(part: dict, *keys: str) -> int:
        return sum(int(part.get(k) or 0) for k in keys)

    summary = [
        ("bad-input kinds tried", n(bad, "bad_input_kinds")),
        ("folder entries without exactly one line", n(bad, "entries_without_a_line", "entries_with_several_lines")),
        ("tracebacks shown", n(bad, "tracebacks")),
        ("faults injected (SIGKILL)", n(killed, "kills") + n(served, "serve_kills")),
        ("files lost", n(killed, "files_lost") + n(served, "after_serve_kill_files_lost")),
        ("files given up after kills", n(killed, "gave_up")),
        ("duplicates", n(killed, "duplicates") + n(served, "after_serve_kill_duplicates")),
        ("hostile requests sent", n(served, "requests")),
        ("5xx seen", n(served, "server_errors")),
        ("leaked paths or secrets", n(served, "leaked_paths_or_secrets", "upload_answers_naming_the_index")),
        ("bad tool_choice not a 400", n(served, "tool_choice_not_400")),
    ]
    for name, value in summary:
        print(f"{name:42s} {value}")


if __name__ == "__main__":
    main()
