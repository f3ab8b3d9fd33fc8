"""Who holds an index: the process that has it open for writing records itself in the index directory.

The embedded vector store admits one process at a time. When another one is refused, this record says
which process holds the index (its pid and command) and, for `mediaindex serve`, the address where it
answers, so that a command can go through that server instead of failing. A record whose process is
gone is ignored.
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
        sub = next((a for a in argv[1:] if not a.startswith("-")), "")
        return f"mediaindex {sub}".strip()
    return name


def record_holder(index_dir: Path, url: str | None = None, command: str | None = None) -> None:
    holder = Holder(os.getpid(), command or this_command(), url)
    tmp = index_dir / f".{HOLDER_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(asdict(holder)))
    os.replace(tmp, index_dir / HOLDER_FILE)  # readers see the old record or the new one, never half


def read_holder(index_dir: Path) -> Holder | None:
    """The live process recorded as holding this index, if any."""
    try:
        data = json.loads((index_dir / HOLDER_FILE).read_text())
        holder = Holder(int(data["pid"]), str(data["command"]), data.get("url") or None)
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
