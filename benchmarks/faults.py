"""Fault and attack run against the real CLI and server: bad media, SIGKILLs during ingest, `index reset` and
serve, every file of an index truncated and garbled in turn, a full disk, hostile HTTP requests. Prints what was
tried and what went wrong; the last lines should read zero where they say so.

    python benchmarks/faults.py                     # about 40-60 minutes on 2 busy cores
    python benchmarks/faults.py --parts reset,corrupt --json benchmarks/out/faults.json

Everything runs in a temporary folder: broken media and damaged index copies are made there from the real
sample media, the CLI and `serve` run as separate processes (as a user runs them), and every kill is a SIGKILL.
The full-disk part mounts a small tmpfs (root only; it reports itself skipped otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
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


def _job_files(jobs_db: Path, job: str | None) -> dict[str, int]:
    """The job's files by state, and `working`: stage calls in progress."""
    if job is None or not jobs_db.exists():
        return {}
    with sqlite3.connect(jobs_db) as db:
        out = dict(db.execute("SELECT state, COUNT(*) FROM job_files WHERE job_id = ? GROUP BY state", (job,)))
        out["working"] = db.execute("SELECT COALESCE(SUM(working), 0) FROM job_files WHERE job_id = ?",
                                    (job,)).fetchone()[0]
        runner = db.execute("SELECT runner FROM jobs WHERE id = ?", (job,)).fetchone()
        out["runner_pid"] = int(str(runner[0]).split(":")[0]) if runner and runner[0] else 0
    return out


def _stage_working(jobs_db: Path, job: str | None, pid: int) -> bool:
    """A stage of the run `pid` works on a file (a killed run's count stays until the next run settles it)."""
    files = _job_files(jobs_db, job)
    return bool(files.get("working")) and files.get("runner_pid") == pid


def run_ingest_kills(base: Path, kills: int, seed: int = 0) -> dict:
    """Four kills in a row on one job before any file can finish (at a random moment of start-up, or the moment
    a stage starts on a file), then kills a random moment after a stage started on a file; a job that finishes
    is followed, after a reset, by a new one. Then the last job is resumed to the end."""
    files = [MEDIA / g for g in GOOD]
    env = make_env(base, "kill-index")
    jobs_db = Path(env["MEDIAINDEX_INDEX_DIR"]) / "jobs.db"
    log = base / "kill-stderr.txt"
    rng = random.Random(seed)
    job: str | None = None
    jobs: list[str] = []
    history: list[dict] = []
    nothing_while_open = 0
    tries = 0
    while sum(1 for h in history if h["run"] == "killed") < kills and tries < 3 * kills:
        tries += 1
        early = len(history) < 4
        args = ["ingest", "--resume", job] if job else ["ingest", *map(str, files)]
        with open(log, "w") as err:
            proc = subprocess.Popen([sys.executable, "-m", "mediaindex", *args], env=env, cwd=ROOT,
                                    stdout=subprocess.DEVNULL, stderr=err)
        if job is None:
            job = _job_id(log, 120)
            jobs.append(str(job))
        if early:  # start-up and model loading, at the latest the moment a stage starts on a file
            began, limit = time.monotonic(), rng.uniform(0.5, 5.0)
            while proc.poll() is None and time.monotonic() - began < limit and not _stage_working(jobs_db, job, proc.pid):
                time.sleep(0.02)
            delay = round(time.monotonic() - began, 1)
        else:  # a random moment after a stage started work on a file
            began = time.monotonic()
            while proc.poll() is None and not _stage_working(jobs_db, job, proc.pid) and time.monotonic() - began < 600:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 20.0))  # some kills find files finished, others none
            delay = round(time.monotonic() - began, 1)
        killed = proc.poll() is None
        if killed:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        counts = _job_files(jobs_db, job)
        said = log.read_text(errors="replace")
        if "nothing to index" in said and (counts.get("pending", 0) + counts.get("running", 0)) > 0:
            nothing_while_open += 1
        history.append({"job": job, "after_s": delay, "run": "killed" if killed else "finished before the kill",
                        "done_at_kill": counts.get("done", 0), "early": early})
        if not killed and not counts.get("pending") and not counts.get("running"):
            cli(["index", "reset", "--yes"], env)  # the job is done: the next kills need work in flight
            job = None
        time.sleep(1)
    early_runs = [h for h in history if h["early"]]
    shown = cli(["jobs", "--json"], env)
    interrupted = sum(1 for j in json.loads(shown.stdout or "[]") if j["state"] == "interrupted")
    final = cli(["ingest", "--resume", job], env) if job else cli(["ingest", *map(str, files)], env)
    job = job or next((line.split()[1] for line in final.stderr.splitlines()
                       if line.startswith("job ") and len(line.split()) == 2), jobs[-1])
    with sqlite3.connect(jobs_db) as db:
        # A kill charges nothing: every attempt recorded is the one that finished its file.
        charged = db.execute("SELECT COALESCE(SUM(attempts), 0) - SUM(state = 'done') FROM job_files").fetchone()[0]
        states = dict(db.execute("SELECT state, COUNT(*) FROM job_files WHERE job_id = ? GROUP BY state", (job,)))
        gave_up = db.execute("SELECT COUNT(*) FROM job_files WHERE reason LIKE 'gave up%'").fetchone()[0]
    health = index_health(Path(env["MEDIAINDEX_INDEX_DIR"]), files)
    final_lines = final.stderr.splitlines()
    nothing_while_open += int(any("nothing to index" in line for line in final_lines) and health["files_lost"] > 0)
    return {"kills": sum(1 for h in history if h["run"] == "killed"), "jobs": len(jobs),
            "early_kills_in_a_row_on_one_job": sum(1 for h in early_runs if h["run"] == "killed"
                                                   and h["done_at_kill"] == 0 and h["job"] == jobs[0]),
            "history": history, "job": job, "attempts_charged_by_kills": charged,
            "shown_interrupted_after_kills": interrupted, "final_exit_code": final.returncode,
            "final_tail": final_lines[-3:], "file_states": states, "gave_up": gave_up,
            "nothing_to_index_while_missing": nothing_while_open,
            "tracebacks": final.stderr.count("Traceback") + shown.stderr.count("Traceback"), **health}


# ---- 3. an index: built once, reset under SIGKILL, damaged file by file, filled to a full disk -------------

SMALL = ["audio/jfk.flac", "audio/LJ002-0020.wav"]
QUERY = "ask what you can do for your country"


def build_index(base: Path, name: str) -> tuple[dict[str, str], dict]:
    """An index of the small files, made by the CLI; returns its environment and its stats."""
    env = make_env(base, name)
    done = cli(["ingest", *[str(MEDIA / f) for f in SMALL]], env)
    if done.returncode != 0:
        raise RuntimeError(f"the base index could not be built: {done.stderr[-2000:]}")
    stats = json.loads(cli(["index", "stats", "--json"], env).stdout)
    return env, stats


def copy_index(src: Path, dst: Path) -> None:
    """A copy that keeps the engine's sparse files sparse (a plain copy writes every hole)."""
    subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dst)], check=True)


def looks_clear(result: subprocess.CompletedProcess[str]) -> bool:
    """A refusal a user can act on: an error line, no traceback, an exit code of our own (not a signal)."""
    return (0 < result.returncode < 128 and "error:" in result.stderr and "Traceback" not in result.stderr
            and "Traceback" not in result.stdout)


def _catalog_agrees(env: dict[str, str]) -> dict:
    """Open as an ingest does (finishing a stopped reset, repairing): catalog and vectors must agree."""
    from mediaindex.config import load_settings
    from mediaindex.index.filters import SearchFilters
    from mediaindex.index.index import open_index
    from mediaindex.models.text_embed import load_text_embedder

    settings = load_settings("cpu", index_dir=Path(env["MEDIAINDEX_INDEX_DIR"]))
    embedder = load_text_embedder(settings.embed)
    with open_index(settings, embedder.dim, embedder.name, repair=True) as index:
        records = index.catalog.all()
        unreadable = [r.source for r in records if index.store.count(SearchFilters(video_id=r.video_id)) != r.segments]
        return {"files": len(records), "points": index.store.count(), "unreadable": unreadable}


def run_reset_kills(base: Path, kills: int, seed: int = 0) -> dict:
    """SIGKILL `index reset` at random points (half while it deletes), then look at the index as a user does."""
    env0, stats0 = build_index(base, "reset-base")
    source = Path(env0["MEDIAINDEX_INDEX_DIR"])
    rng = random.Random(seed)
    outcomes: dict[str, int] = {}
    problems: list[str] = []
    started = time.perf_counter()
    killed = finished = 0
    copy_index(source, base / "reset-timing")
    began = time.perf_counter()
    timing = subprocess.run([sys.executable, "-m", "mediaindex", "index", "reset", "--yes"], cwd=ROOT,
                            env={**env0, "MEDIAINDEX_INDEX_DIR": str(base / "reset-timing")}, capture_output=True)
    one_run = time.perf_counter() - began  # a whole reset, start-up included
    assert timing.returncode == 0 and not (base / "reset-timing" / "qdrant").exists(), timing.stderr
    i = 0
    while killed < kills and i < 4 * kills:
        i += 1
        env = make_env(base, f"reset-{i}")
        index_dir = Path(env["MEDIAINDEX_INDEX_DIR"])
        copy_index(source, index_dir)
        proc = subprocess.Popen([sys.executable, "-m", "mediaindex", "index", "reset", "--yes"], env=env, cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if i % 2:  # anywhere in the run, start-up included
            time.sleep(rng.uniform(0.0, one_run))
        else:  # once deleting has begun (the marker is the reset's first write): a few milliseconds in
            deadline = time.monotonic() + 60
            while not (index_dir / "reset.pending").exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.0002)
            time.sleep(rng.uniform(0.0, 0.004))
        if proc.poll() is None:
            proc.kill()
            killed += 1
        else:
            finished += 1
        proc.wait()
        stats = cli(["index", "stats", "--json"], env)
        search = cli(["search", QUERY, "--json"], env)
        if stats.returncode == 0:
            got = json.loads(stats.stdout)
            whole = got["files"] == stats0["files"] and got["points"] == stats0["points"]
            state = "old index" if whole else "MIXED"
            if whole and (search.returncode != 0 or not json.loads(search.stdout or "[]")):
                state = "old stats but search failed or empty"
        elif looks_clear(stats) and looks_clear(search) and "no index" in stats.stderr:
            state = "no index"
        else:
            state = "UNCLEAR"
        agrees = _catalog_agrees(env)
        if agrees["unreadable"] or (agrees["files"], agrees["points"]) not in ((0, 0), (stats0["files"], stats0["points"])):
            state += " / catalog and vectors disagree"
        outcomes[state] = outcomes.get(state, 0) + 1
        if state not in ("old index", "no index"):
            problems.append(f"kill {i}: {state}: stats exit {stats.returncode} {stats.stderr[-300:]}; search exit "
                            f"{search.returncode} {search.stdout[-300:]} {search.stderr[-300:]}")
    # After the last kill, an ingest must index the files again (never "already indexed" for a reset index).
    again = cli(["ingest", *[str(MEDIA / f) for f in SMALL]], env)
    reindexed = again.returncode == 0 and "already indexed" not in again.stderr
    after = json.loads(cli(["index", "stats", "--json"], env).stdout or "{}")
    return {"reset_kills": killed, "finished_before_the_kill": finished, "outcomes": outcomes, "problems": problems,
            "ingest_after_last_kill_ok": reindexed and after.get("files") == stats0["files"],
            "seconds": round(time.perf_counter() - started, 1)}


PROBE = """
import json, sys
from pathlib import Path
from typer.testing import CliRunner
from mediaindex.cli.app import app
from mediaindex.errors import MediaIndexError
out = {}
for name, args in (("stats", ["index", "stats", "--json"]), ("search", ["search", sys.argv[1], "--json"])):
    r = CliRunner().invoke(app, args)
    exc = r.exception if r.exception is not None and not isinstance(r.exception, SystemExit) else None
    out[name] = {"code": r.exit_code, "stdout": r.stdout[-4000:], "stderr": r.stderr[-1000:],
                 "clear_error": isinstance(exc, MediaIndexError), "exception": repr(exc) if exc else None}
print(json.dumps(out))
"""


def _classify(probe: subprocess.CompletedProcess[str], stats0: dict, hits0: list) -> str:
    """ok (as before), clear (an error naming the fix), or what went wrong."""
    if probe.returncode != 0:
        return f"crash (exit {probe.returncode})"
    got = json.loads(probe.stdout.strip().splitlines()[-1])
    verdicts = []
    for name in ("stats", "search"):
        r = got[name]
        if r["exception"] and not r["clear_error"]:
            verdicts.append("traceback")
        elif r["code"] != 0 or r["clear_error"]:
            text = r["stderr"] + r["stdout"] + (r["exception"] or "")
            fix = any(w in text for w in ("index reset", "backup", "free some space", "Free some space"))
            verdicts.append("clear" if fix or "no index" in text else "error without a fix")
        else:
            body = json.loads(r["stdout"] or "null")
            same = (body.get("files"), body.get("points")) == (stats0["files"], stats0["points"]) \
                if name == "stats" else [h["source"] for h in body][:3] == [h["source"] for h in hits0][:3]
            verdicts.append("ok" if same else "silently different")
    for bad in ("crash", "traceback", "silently different", "error without a fix"):
        if any(v.startswith(bad) for v in verdicts):
            return bad
    return "clear" if "clear" in verdicts else "ok"


def run_corruption(base: Path, only: int = 0) -> dict:
    """Every file of an index, truncated and garbled in turn: each must give the old answers or a clear error;
    and an ingest must never take a file whose segments cannot be read for indexed."""
    env0, stats0 = build_index(base, "corrupt-base")
    source = Path(env0["MEDIAINDEX_INDEX_DIR"])
    hits0 = json.loads(cli(["search", QUERY, "--json"], env0).stdout)
    files = sorted(p.relative_to(source) for p in source.rglob("*") if p.is_file() and not p.name.startswith("."))
    if only:  # a quick run: an even sample
        files = files[:: max(1, len(files) // only)][:only]
    outcomes: dict[str, int] = {}
    problems: list[str] = []
    ingest_trusts_unreadable = 0
    started = time.perf_counter()
    for rel in files:
        for how in ("truncated", "garbled"):
            env = make_env(base, "corrupt-case")
            index_dir = Path(env["MEDIAINDEX_INDEX_DIR"])
            shutil.rmtree(index_dir, ignore_errors=True)
            copy_index(source, index_dir)
            target = index_dir / rel
            data = bytearray(target.read_bytes())
            if how == "truncated":
                del data[len(data) // 2:]
            elif data:
                step = max(1, len(data) // 97)
                for k in range(0, len(data), step):
                    data[k] ^= 0xA5
            else:
                data = bytearray(b"garbage\0" * 16)
            target.write_bytes(bytes(data))
            probe = subprocess.run([sys.executable, "-c", PROBE, QUERY], capture_output=True, text=True, env=env,
                                   cwd=ROOT, timeout=600)
            verdict = _classify(probe, stats0, hits0)
            if verdict == "ok" or verdict == "clear":
                try:  # opened as an ingest opens it: what the catalog calls indexed must be readable
                    agrees = _agrees_in_child(env)
                    ingest_trusts_unreadable += agrees
                except RuntimeError as exc:
                    problems.append(f"{rel} {how}: opening as ingest: {exc}")
            outcomes[verdict] = outcomes.get(verdict, 0) + 1
            if verdict not in ("ok", "clear"):
                problems.append(f"{rel} {how}: {verdict}: {probe.stdout[-400:]} {probe.stderr[-400:]}")
    return {"index_files": len(files), "cases": 2 * len(files), "outcomes": outcomes, "problems": problems[:40],
            "ingest_would_trust_unreadable": ingest_trusts_unreadable,
            "seconds": round(time.perf_counter() - started, 1)}


AGREES = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from faults import _catalog_agrees
from mediaindex.errors import MediaIndexError
import os
try:
    print(json.dumps(_catalog_agrees(dict(os.environ))))
except MediaIndexError as exc:
    print(json.dumps({"refused": str(exc)}))
"""


def _agrees_in_child(env: dict[str, str]) -> int:
    """1 when an ingest's open of this index would keep a file whose segments cannot be read, else 0."""
    done = subprocess.run([sys.executable, "-c", AGREES, str(ROOT / "benchmarks")], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr[-300:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return int(bool(result.get("unreadable")))


def run_full_disk(base: Path) -> dict:
    """Ingest onto a small filesystem that fills up: a clear error, nothing lost, and once space is freed the
    index opens and the ingest completes."""
    disk = base / "small-disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400m", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        return {"skipped": "needs root to mount a tmpfs"}
    try:
        env = make_env(base, "unused")
        env["MEDIAINDEX_INDEX_DIR"] = str(disk / "index")
        first = cli(["ingest", str(MEDIA / SMALL[0])], env)
        filler = disk / "filler"
        with open(filler, "wb") as f:
            f.write(b"\0" * max(0, shutil.disk_usage(disk).free - 8 * 1024**2))
        full = {name: cli(args, env) for name, args in (
            ("ingest", ["ingest", str(MEDIA / SMALL[1])]), ("search", ["search", QUERY, "--json"]),
            ("stats", ["index", "stats", "--json"]))}
        filler.unlink()
        stats_after = cli(["index", "stats", "--json"], env)
        second = cli(["ingest", str(MEDIA / SMALL[1])], env)
        final = json.loads(cli(["index", "stats", "--json"], env).stdout or "{}")
        return {
            "first_ingest_exit": first.returncode,
            "while_full": {n: {"exit": r.returncode, "clear": looks_clear(r), "says_free_space": "MB free" in r.stderr,
                               "message": r.stderr.strip().splitlines()[-1][:300] if r.stderr.strip() else ""}
                           for n, r in full.items()},
            "unclear_while_full": sum(1 for r in full.values() if not (looks_clear(r) and "MB free" in r.stderr)),
            "opens_after_freeing": stats_after.returncode == 0,
            "files_after_freeing_and_ingesting": final.get("files"),
            "second_ingest_exit": second.returncode,
        }
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


# ---- 4. the server: hostile requests and SIGKILL during a job ------------------------------------------

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
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs of a CLI ingest, each followed by --resume")
    parser.add_argument("--reset-kills", type=int, default=20, help="SIGKILLs of `index reset`")
    parser.add_argument("--corrupt-files", type=int, default=0,
                        help="Damage only this many of the index's files (an even sample; default: every file)")
    parser.add_argument("--json", type=Path, help="Also write the results here")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary folder (logs, indexes)")
    parser.add_argument("--parts", default="bad,kills,reset,corrupt,disk,server",
                        help="Which parts to run (comma-separated)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="mediaindex-faults-"))
    started = time.perf_counter()
    try:
        parts = set(args.parts.split(","))
        bad = run_bad_inputs(base) if "bad" in parts else {}
        killed = run_ingest_kills(base, args.kills) if "kills" in parts else {}
        resets = run_reset_kills(base, args.reset_kills) if "reset" in parts else {}
        corrupt = run_corruption(base, args.corrupt_files) if "corrupt" in parts else {}
        disk = run_full_disk(base) if "disk" in parts else {}
        served = run_server(base) if "server" in parts else {}
    finally:
        if args.keep:
            print(f"kept {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    results = {"machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
               "seconds": round(time.perf_counter() - started), "bad_inputs": bad, "ingest_kills": killed,
               "reset_kills": resets, "corruption": corrupt, "full_disk": disk, "server": served}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2), file=sys.stderr)
    def n(part: dict, *keys: str) -> int:
        return sum(int(part.get(k) or 0) for k in keys)

    def bad_outcomes(part: dict, good: tuple[str, ...]) -> int:
        return sum(v for k, v in (part.get("outcomes") or {}).items() if k not in good)

    summary = [
        ("bad-input kinds tried", n(bad, "bad_input_kinds")),
        ("folder entries without exactly one line", n(bad, "entries_without_a_line", "entries_with_several_lines")),
        ("tracebacks shown", n(bad, "tracebacks") + n(killed, "tracebacks")),
        ("faults injected (SIGKILL)", n(killed, "kills") + n(served, "serve_kills") + n(resets, "reset_kills")),
        ("ingest kills", n(killed, "kills")),
        ("  of them in a row on one job before any file finished", n(killed, "early_kills_in_a_row_on_one_job")),
        ("files lost", n(killed, "files_lost") + n(served, "after_serve_kill_files_lost")),
        ("files given up after kills", n(killed, "gave_up")),
        ("attempts charged by kills", n(killed, "attempts_charged_by_kills")),
        ("'nothing to index' while files missing", n(killed, "nothing_to_index_while_missing")),
        ("`index reset` kills", n(resets, "reset_kills")),
        ("resets leaving neither old nor empty index", bad_outcomes(resets, ("old index", "no index"))),
        ("damaged-index cases (file x truncate/garble)", n(corrupt, "cases")),
        ("  answered as before", (corrupt.get("outcomes") or {}).get("ok", 0)),
        ("  clear error naming the fix", (corrupt.get("outcomes") or {}).get("clear", 0)),
        ("  traceback, crash or silent difference", bad_outcomes(corrupt, ("ok", "clear"))),
        ("  ingest would trust unreadable data", n(corrupt, "ingest_would_trust_unreadable")),
        ("full disk: unclear errors", n(disk, "unclear_while_full")),
        ("full disk: index opens after freeing", int(bool(disk.get("opens_after_freeing")))),
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
