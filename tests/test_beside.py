"""The `beside` plugin (tests/beside.py): marked tests run in a second process and their outcomes (passed,
failed with its message, skipped with its reason, or lost with a crashed child) are the session's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

_MARKED = '''
import os, time
import pytest
pytestmark = pytest.mark.beside

def test_waits():
    time.sleep(0.5)
    open("marked.pid", "w").write(str(os.getpid()))

def test_fails():
    assert 1 == 2, "one is not two"

def test_skips():
    pytest.skip("nothing to do here")

@pytest.mark.parametrize("word", ["two words", "one"])
def test_params(word):
    assert word
'''

_PLAIN = '''
import os

def test_plain():
    open("plain.pid", "w").write(str(os.getpid()))
'''

_CRASHES = '''
import os
import pytest
pytestmark = pytest.mark.beside

def test_ends_its_process():
    os._exit(3)

def test_after_the_end():
    pass
'''


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MEDIAINDEX_TEST_BESIDE_REPORTS", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", *args],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def _project(tmp_path: Path, **modules: str) -> Path:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.beside"]\n')
    for name, text in modules.items():
        (tmp_path / f"{name}.py").write_text(text)
    return tmp_path


def test_marked_tests_run_in_another_process_and_report_as_the_sessions_own(tmp_path: Path) -> None:
    folder = _project(tmp_path, test_a_marked=_MARKED, test_b_plain=_PLAIN)
    done = _pytest(folder)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "1 failed, 4 passed, 1 skipped" in out, out
    assert "test_a_marked.py::test_fails FAILED" in out and "AssertionError: one is not two" in out, out
    assert "SKIPPED [1] test_a_marked.py:14: nothing to do here" in out, out
    assert "test_a_marked.py::test_params[two words] PASSED" in out, out
    # The unmarked test ran first (the marked ones go to the end), in the session's own process.
    assert out.index("test_b_plain.py::test_plain PASSED") < out.index("test_a_marked.py::test_waits PASSED")
    assert (folder / "marked.pid").read_text() != (folder / "plain.pid").read_text()


def test_run_alone_marked_tests_run_in_the_session(tmp_path: Path) -> None:
    folder = _project(tmp_path, test_a_marked=_MARKED)
    done = _pytest(folder, "-k", "waits")
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
    assert (folder / "marked.pid").is_file()


def test_a_child_that_ends_early_fails_the_tests_it_did_not_report(tmp_path: Path) -> None:
    folder = _project(tmp_path, test_a_crashes=_CRASHES, test_b_plain=_PLAIN)
    done = _pytest(folder)
    assert done.returncode == 1 and "2 failed, 1 passed" in done.stdout, done.stdout + done.stderr
    assert done.stdout.count("ended (exit code 3) without reporting this test") == 2, done.stdout
