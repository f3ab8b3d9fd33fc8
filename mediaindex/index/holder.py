"""Who holds an index: the process that has its vector store open records itself in the index directory.

The embedded vector store admits one process at a time (`index/lease.py` decides which). The holder
records its pid and command, where it answers other processes' reads (a Unix socket and the key that
opens it, `index/read_service.py`) and, for `mediaindex serve`, the HTTP address where it answers, so
that another command can read through it, go through that server, or say plainly whom it waits for.
A record whose process is gone is ignored. The record holds a key: only its owner may read it (0600).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

HOLDER_FILE = "holder.json"


@dataclass(frozen=True)
class Holder:
    pid: int
    command: str
    url: str | None = None  # where a `serve` holding the index answers
    socket: str | None = None  # where the holder answers reads of the vector store
    key: str | None = None  # hex authentication key for that socket

    def describe(self) -> str:
        where = f", answering at {self.url}" if self.url else ""
        return f"`{self.command}` (pid {self.pid}{where})"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def this_command() -> str:
    """`mediaindex SUBCOMMAND` for the CLI, else the program's name (never its arguments: they hold paths)."""
    argv = [a for a in sys.argv if a]
    name = Path(argv[0]).name if argv and argv[0] != "-c" else f"{Path(sys.executable).name} -c"
    if name in ("__main__.py", "mediaindex"):
        words = [a for a in argv[1:] if not a.startswith("-")]
        sub = words[0] if words else ""
        if sub == "index" and len(words) > 1 and words[1].isalpha():  # `index stats`: name the subcommand
            sub = f"index {words[1]}"
        return f"mediaindex {sub}".strip()
    return name


def record_holder(index_dir: Path, url: str | None = None, command: str | None = None,
                  socket: str | None = None, key: str | None = None) -> None:
    holder = Holder(os.getpid(), command or this_command(), url, socket, key)
    record = {k: v for k, v in asdict(holder).items() if v is not None}
    tmp = index_dir / f".{HOLDER_FILE}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(record))
    os.replace(tmp, index_dir / HOLDER_FILE)  # readers see the old record or the new one, never half


def read_holder(index_dir: Path) -> Holder | None:
    """The live process recorded as holding this index, if any."""
    try:
        data = json.loads((index_dir / HOLDER_FILE).read_text())
        holder = Holder(int(data["pid"]), str(data["command"]), data.get("url") or None,
                        data.get("socket") or None, data.get("key") or None)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return holder if holder.pid == os.getpid() or _alive(holder.pid) else None


def clear_holder(index_dir: Path) -> None:
    """Remove the record if this process wrote it."""
    path = index_dir / HOLDER_FILE
    try:
        if int(json.loads(path.read_text())["pid"]) == os.getpid():
            path.unlink()
    except (OSError, ValueError, KeyError, TypeError):
        pass
