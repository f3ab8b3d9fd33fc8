"""Ray processes left behind by a driver that was killed (SIGKILL, OOM): found and ended before a new start.

A local Ray started by `ensure_ray` runs its GCS, raylet and workers as processes of their own; when the driver
dies without shutting Ray down they linger (for about 30 s, the time Ray takes to notice), holding memory, cores
and models. Every process of a local Ray carries its driver's mark in the environment (`OWNER_VARIABLE`: the
driver's pid and start time, so a reused pid is not taken for it); a new start ends the processes whose driver is
gone. Workers rename themselves, which can overwrite the environment the kernel shows, and outlive the raylet
that started them: they are found by the session folder they write their output to, which holds the driver's
mark too. Only processes that are Ray's (by their command line) are ended. Linux only (it reads /proc); elsewhere nothing is done.

A watchdog (`watchdog.py`) ends them as soon as their driver dies; the reaping at the next start is for a watchdog
that was killed too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

OWNER_VARIABLE = "MEDIAINDEX_RAY_OWNER"
PROC = Path("/proc")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); None if it is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return fields[19] if fields[0] != "Z" else None  # a zombie is dead


def owner_mark(pid: int | None = None) -> str:
    pid = pid or os.getpid()
    return f"{pid}:{_start_time(pid)}"


def _alive(mark: str) -> bool:
    pid, _, started = mark.partition(":")
    return pid.isdigit() and _start_time(int(pid)) == started


def owner_of(pid: int) -> str | None:
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or another user's
        return None
    prefix = f"{OWNER_VARIABLE}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None


# What the command lines of Ray's own processes hold: workers rename themselves "ray::<actor or task>".
_RAY_COMMANDS = (b"ray::", b"/ray/core/src/ray/", b"/ray/_private/", b"/ray/dashboard/", b"default_worker.py",
                 b"raylet", b"gcs_server")


def _is_ray(pid: int) -> bool:
    try:
        cmdline = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False
    return _start_time(pid) is not None and any(part in cmdline for part in _RAY_COMMANDS)


def _parent(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


SESSION_OWNER_FILE = "mediaindex-owner"  # in a Ray session folder: the mark of the driver that started it
_SESSION = re.compile(r"^(.*/session_[^/]+)/logs/")


def mark_session(temp_dir: Path, pid: int | None = None) -> None:
    """Write the driver's mark into the session folder Ray made for it (`session_<date>_<pid>`): its workers
    write their output there, which finds them whatever they renamed themselves to."""
    pid = pid or os.getpid()
    sessions = sorted((temp_dir / "ray").glob(f"session_*_{pid}"), key=lambda p: p.stat().st_mtime)
    if sessions:
        (sessions[-1] / SESSION_OWNER_FILE).write_text(owner_mark(pid))


def _session_owner(pid: int, owners: dict[str, str | None]) -> str | None:
    """The mark of the Ray session whose files (logs) the process holds open, if the session is one of ours."""
    try:
        fds = os.listdir(PROC / str(pid) / "fd")
    except OSError:
        return None
    for fd in fds:
        try:
            match = _SESSION.match(os.readlink(PROC / str(pid) / "fd" / fd))
        except OSError:
            continue
        if match:
            session = match[1]
            if session not in owners:
                try:
                    owners[session] = (Path(session) / SESSION_OWNER_FILE).read_text().strip()
                except OSError:
                    owners[session] = None
            return owners[session]
    return None


def _marked(select: Callable[[str], bool]) -> list[int]:
    """This user's Ray processes whose mark `select` picks, with all their descendants (workers rename
    themselves, which can overwrite the environment the kernel shows: they are found as the raylet's children)."""
    if not PROC.is_dir():
        return []
    me, uid = os.getpid(), os.getuid()
    pids = []
    for entry in PROC.iterdir():
        try:
            if entry.name.isdigit() and int(entry.name) != me and entry.stat().st_uid == uid:
                pids.append(int(entry.name))
        except OSError:
            continue
    children: dict[int, list[int]] = {}
    for pid in pids:
        parent = _parent(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    owners: dict[str, str | None] = {}
    todo = [pid for pid in pids if _is_ray(pid) and any(
        mark is not None and select(mark) for mark in (owner_of(pid), _session_owner(pid, owners)))]
    while todo:
        pid = todo.pop()
        if pid not in found and pid != me:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return sorted(found)


def orphans() -> list[int]:
    """The processes of local Ray instances whose driver is no longer running."""
    return _marked(lambda mark: not _alive(mark))


def marked_by(mark: str) -> list[int]:
    """The processes of the local Ray whose driver had this mark (running or not)."""
    return _marked(lambda m: m == mark)


def started_by(pid: int) -> list[int]:
    """The processes of the local Ray that process `pid` started."""
    return _marked(lambda mark: mark.startswith(f"{pid}:"))


def reap_orphans(grace: float = 10.0) -> int:
    """End the processes of killed drivers' Ray instances and wait until they are gone; returns how many."""
    pids = orphans()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace
    while any(_start_time(pid) is not None for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pids:
        log.info("ended %d Ray processes left by a driver that was killed", len(pids))
    return len(pids)


def mark_as_owner() -> str:
    """Mark the processes of the Ray this process is about to start: they inherit the environment. Call
    `unmark` once it started, so that other children of this process do not carry the mark."""
    os.environ[OWNER_VARIABLE] = owner_mark()
    return os.environ[OWNER_VARIABLE]


def unmark() -> None:
    os.environ.pop(OWNER_VARIABLE, None)
