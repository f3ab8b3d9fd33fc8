"""A watchdog beside each driver that starts a local Ray: when the driver ends, however it ends (SIGKILL, the OOM
killer, a crash), the Ray processes it started end with it.

Ray ties its GCS and raylet to the driver (PR_SET_PDEATHSIG), but not the processes the raylet starts: workers
and the dashboard and runtime-env agents outlive a killed driver (the agents by minutes). The watchdog is a small
process of its own session that holds the read end of a pipe whose write end only the driver holds; the kernel
closes it when the driver dies, and the watchdog then ends every process that carries the driver's mark
(`orphans.py`) and exits. A driver that shuts Ray down itself leaves nothing to end. Linux only (it reads /proc).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mediaindex.workers.orphans import OWNER_VARIABLE, PROC, marked_by

log = logging.getLogger(__name__)
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the mediaindex package
SETTLE_S = 0.3  # a raylet dying as its driver dies may still be starting a worker: look again after this
GIVE_UP_S = 30.0
# mark -> its watchdog and the write end of its pipe, held for this process's lifetime (the watchdog is never waited
# for: it outlives this process)
_held: dict[str, tuple[subprocess.Popen, int]] = {}


def start_watchdog(mark: str) -> None:
    """Start the watchdog for the Ray processes that carry `mark` (this process's), once per mark: a Ray started
    again by the same process carries the same mark."""
    if not PROC.is_dir() or mark in _held:
        return
    read, write = os.pipe()  # not inheritable: Ray's processes never hold the write end
    env = {k: v for k, v in os.environ.items() if k != OWNER_VARIABLE}  # it is not one of the processes it ends
    # It imports this very package, wherever this process found it.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "mediaindex.workers.watchdog", mark], stdin=read,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                start_new_session=True)  # a Ctrl-C or a kill of the driver's group spares it
    except OSError as exc:  # Ray still starts; the next run's reaping ends what a killed run leaves
        log.warning("the watchdog of this run's Ray processes could not be started: %s", exc)
        os.close(write)
        return
    finally:
        os.close(read)
    _held[mark] = (proc, write)


def end_marked(mark: str) -> int:
    """End every process that carries `mark`, looking again until none is left; returns how many were ended."""
    ended: set[int] = set()
    deadline = time.monotonic() + GIVE_UP_S
    quiet = 0
    while quiet < 2 and time.monotonic() < deadline:
        pids = [pid for pid in marked_by(mark) if pid not in ended]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        ended.update(pids)
        quiet = 0 if pids else quiet + 1
        time.sleep(SETTLE_S)
    return len(ended)


def watch(mark: str) -> None:
    """Wait until the driver is gone (the pipe on stdin reaches its end), then end its Ray processes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    end_marked(mark)


if __name__ == "__main__":
    watch(sys.argv[1])
