"""Tests marked `beside` run in a second pytest process, side by side with the rest of the session.

They spend their time waiting on processes they start (CLI runs, servers, Ray nodes), which leaves one of two
cores idle; run in a child pytest, at the lowest priority, they wait while the session works. The child runs them
for real with the suite's own fixtures and writes each of their reports as it is made; the session reports them
as its own in place of running them (they are moved to the end of the session, so their reports are usually
there when it reaches them). Where every selected test is marked, or none is, nothing changes. This module is a
pytest plugin: the suite's conftest loads it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator
from pathlib import Path

import pytest

MARK = "beside"
CHILD_REPORTS = "MEDIAINDEX_TEST_BESIDE_REPORTS"  # set in the child: where it writes its reports
TIMEOUT_S = 1800  # a hung child, not a slow one: on a slow, busy machine its tests have run near 15 minutes


class _Child:
    def __init__(self, nodeids: list[str], rootdir: Path) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="mediaindex-beside-"))
        self.reports, self.log = self.folder / "reports.jsonl", self.folder / "output.txt"
        self.read: dict[str, list[dict]] = {}
        self.offset = 0
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *nodeids]
        with self.log.open("w") as out:
            # Its own session: stopping it stops the servers and Ray nodes its tests started too. The lowest
            # priority: the session's torch tests slow down manyfold when a core they wait for is taken.
            self.proc = subprocess.Popen(cmd, cwd=rootdir, env={**os.environ, CHILD_REPORTS: str(self.reports)},
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=lambda: os.nice(19))
        self.began = time.monotonic()
        self.waited = 0.0  # how long the session waited for reports of tests it had nothing else to do beside

    def _take_new(self) -> None:
        if not self.reports.is_file():
            return
        with self.reports.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for the next read
        self.offset += len(complete)
        for line in complete.splitlines():
            entry = json.loads(line)
            self.read.setdefault(entry["nodeid"], []).append(entry)

    def reports_of(self, nodeid: str) -> list[dict] | None:
        """The child's serialized reports of one test once its teardown is reported; None if the child ended
        without them."""
        while True:
            ended = self.proc.poll() is not None  # asked before reading: what it wrote before it ended is read
            self._take_new()
            entries = self.read.get(nodeid, [])
            if any(e["when"] == "teardown" for e in entries):
                return entries
            if ended:
                return None
            if time.monotonic() - self.began > TIMEOUT_S:
                self.stop()
                return None
            time.sleep(0.2)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-8000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


_marked: list[str] = []  # node ids of the marked tests this session hands to the child
_start_at: str | None = None  # the test before which the child starts
_rootdir = Path()  # where the node ids are relative to
_child: _Child | None = None
_summary: list[str] = []  # said at the end of the session


def arrange(session: pytest.Session) -> None:
    """After collection: where unmarked tests run too, move the marked ones to the end of the session and note
    where the first of them stood; the child starts there (so it does not overlap the tests that ran before
    them, such as the engine's, whose many small torch ops slow down manyfold when a core they wait for is
    taken)."""
    global _marked, _start_at, _rootdir
    if os.environ.get(CHILD_REPORTS) or _marked:
        return
    items = session.items
    first = next((i for i, item in enumerate(items) if item.get_closest_marker(MARK)), None)
    if first is None or all(item.get_closest_marker(MARK) for item in items):
        return
    marked = [item for item in items if item.get_closest_marker(MARK)]
    rest = [item for item in items if not item.get_closest_marker(MARK)]
    after = next((item for item in items[first:] if not item.get_closest_marker(MARK)), marked[0])
    _marked, _start_at, _rootdir = [item.nodeid for item in marked], after.nodeid, session.config.rootpath
    items[:] = rest + marked


def _started() -> _Child:
    global _child
    if _child is None:
        _child = _Child(_marked, _rootdir)
    return _child


def report_in_place(item: pytest.Item) -> bool:
    """Start the child where its tests stood; report a marked test from the child's reports instead of running
    it. False where the test runs here."""
    if item.nodeid == _start_at:
        _started()
    if item.nodeid not in _marked:
        return False
    child = _started()
    config = item.config
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    began = time.monotonic()
    entries = child.reports_of(item.nodeid)
    child.waited += time.monotonic() - began
    if entries is None:
        entries = [{"nodeid": item.nodeid, "when": "call", "report": None}]
    for entry in entries:
        if entry["report"] is None:
            report = pytest.TestReport(item.nodeid, item.location, {}, "failed",
                                       "the pytest process beside the session ended (exit code "
                                       f"{child.proc.poll()}) without reporting this test:\n{child.output()}",
                                       "call")
        else:
            report = config.hook.pytest_report_from_serializable(config=config, data=_tuples(entry["report"]))
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _tuples(data: dict) -> dict:
    """JSON gave lists where a report holds tuples (a skip's location and reason, the test's location)."""
    data = dict(data)
    for key in ("location", "longrepr"):
        if isinstance(data.get(key), list):
            data[key] = tuple(data[key])
    data["user_properties"] = [tuple(p) for p in data.get("user_properties", [])]
    return data


def write_report(config: pytest.Config, report: pytest.TestReport) -> None:
    """In the child: append one report for the session beside it."""
    path = os.environ.get(CHILD_REPORTS)
    if not path:
        return
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    with open(path, "a") as f:
        f.write(json.dumps({"nodeid": report.nodeid, "when": report.when, "report": data}) + "\n")


def stop() -> None:
    global _child, _marked, _start_at
    if _child is not None:
        _child.close()
        _summary.append(f"{len(_marked)} tests ran beside the session for {time.monotonic() - _child.began:.0f} s; "
                        f"it waited {_child.waited:.0f} s for their reports at its end")
    _child, _marked, _start_at = None, [], None


# The plugin's hooks.


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARK}: mostly waits on processes it starts; runs in a second pytest "
                                       "process beside the session (tests/beside.py)")


def pytest_collection_finish(session: pytest.Session) -> None:
    arrange(session)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    return True if report_in_place(item) else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, pytest.TestReport,
                                                                                    pytest.TestReport]:
    report = yield
    write_report(item.config, report)
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in _summary:
        terminalreporter.write_line(f"beside: {line}")
