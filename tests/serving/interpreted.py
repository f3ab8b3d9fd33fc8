"""The Triton kernel tests under the interpreter, in one child pytest started with TRITON_INTERPRET=1.

The interpreter must be chosen before triton is first imported, and other tests of a session may import it first,
so the kernel tests of `SELECTION` run in a child process; one child for all of them, so that its start (torch,
transformers, triton, the suite's imports) is paid once. It starts as soon as the session has collected a test
that reads its outcome, at the lowest priority: it then runs on the core that the rest of the suite leaves idle
while it waits for servers, Ray and child processes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

SELECTION = {"test_triton_decode.py": "test_triton_decode", "test_grouped_experts.py": "triton_fused"}
HERE = Path(__file__).resolve().parent
TIMEOUT_S = 540


@dataclass(frozen=True)
class InterpretedRun:
    outcomes: dict[str, dict[str, str]]  # module file name -> test id -> passed / failed / error / skipped
    output: str  # the child's output tail, for failure messages


class _Child:
    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="mediaindex-interpreted-"))
        self.report, self.log = self.folder / "junit.xml", self.folder / "output.txt"
        cmd = [sys.executable, "-m", "pytest", *(str(HERE / name) for name in SELECTION), "-q", "-p",
               "no:cacheprovider", "-rs", "-k", " or ".join(SELECTION.values()), f"--junitxml={self.report}"]
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(cmd, cwd=HERE.parents[1], env={**os.environ, "TRITON_INTERPRET": "1"},
                                         stdout=out, stderr=subprocess.STDOUT, preexec_fn=lambda: os.nice(19))
        self.run: InterpretedRun | None = None

    def result(self) -> InterpretedRun:
        if self.run is None:
            self.proc.wait(TIMEOUT_S)
            output = self.log.read_text(errors="replace")[-8000:]
            assert self.report.is_file(), output
            outcomes: dict[str, dict[str, str]] = {name: {} for name in SELECTION}
            for case in ElementTree.parse(self.report).iter("testcase"):
                module = case.get("classname", "").rsplit(".", 1)[-1] + ".py"
                kinds = {child.tag for child in case} & {"failure", "error", "skipped"}
                outcome = ({"failure": "failed", "error": "error", "skipped": "skipped"}[kinds.pop()] if kinds
                           else "passed")
                outcomes.setdefault(module, {})[case.get("name", "")] = outcome
            self.run = InterpretedRun(outcomes, output)
        return self.run

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_child: _Child | None = None


def start() -> None:
    """Start the child now (once a session)."""
    global _child
    if _child is None:
        _child = _Child()


def result() -> InterpretedRun:
    """The child's outcomes, waiting for it to end (starting it if nothing did)."""
    start()
    assert _child is not None
    return _child.result()


def stop() -> None:
    """End the child if it still runs (a session stopped early) and remove its files."""
    global _child
    if _child is not None:
        _child.stop()
        _child = None
