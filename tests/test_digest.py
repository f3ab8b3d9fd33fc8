"""Digests of weight files: read in full until a file has settled and matched, then trusted while it is unchanged;
any change to the file, even one that puts its modification time back, makes the next check read it again."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from mediaindex.serving import digest
from tests.conftest import media


@pytest.fixture
def weights(tmp_path: Path) -> tuple[Path, str]:
    """A real file (a sample recording stands in for weights), settled: last written a minute ago."""
    path = tmp_path / "model.bin"
    shutil.copyfile(media("audio/jfk.flac"), path)
    past = os.stat(path).st_mtime_ns - 60 * 10**9
    os.utime(path, ns=(past, past))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files each check read in full (the real hash runs)."""
    seen: list[Path] = []
    real = digest.file_sha256

    def counted(path: Path) -> str:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(digest, "file_sha256", counted)
    return seen


def _note(path: Path) -> Path:
    return path.with_name(f".{path.name}.sha256")


def test_a_settled_file_is_read_once_then_trusted_while_unchanged(weights: tuple[Path, str], reads: list[Path]) -> None:
    path, sha = weights
    assert digest.has_sha256(path, sha) and reads == [path]
    assert json.loads(_note(path).read_text())["sha256"] == sha
    assert digest.has_sha256(path, sha) and digest.has_sha256(path, sha) and reads == [path]
    # Another digest is never taken from the note: the file is read and refused.
    assert not digest.has_sha256(path, "0" * 64) and reads == [path, path]


def test_a_file_just_written_is_read_at_every_check(tmp_path: Path, reads: list[Path]) -> None:
    path = tmp_path / "model.bin"
    shutil.copyfile(media("audio/jfk.flac"), path)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest.has_sha256(path, sha) and digest.has_sha256(path, sha)
    assert reads == [path, path] and not _note(path).exists()


@pytest.mark.parametrize("change", ["truncated", "a bit flipped, times put back", "replaced by a renamed file"])
def test_any_change_after_the_note_is_found(weights: tuple[Path, str], reads: list[Path], change: str) -> None:
    path, sha = weights
    assert digest.has_sha256(path, sha) and _note(path).is_file()
    data, before = path.read_bytes(), os.stat(path)
    if change == "truncated":
        path.write_bytes(data[:-4096])
    elif change == "a bit flipped, times put back":
        flipped = bytearray(data)
        flipped[len(flipped) // 2] ^= 0x01
        path.write_bytes(bytes(flipped))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # same size, same mtime: ctime differs
    else:
        other = path.with_name("other.bin")
        other.write_bytes(bytes(reversed(data)))
        os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
        os.replace(other, path)
    assert not digest.has_sha256(path, sha)
    assert reads == [path, path]


def test_a_damaged_or_unwritable_note_costs_a_full_read_never_an_error(weights: tuple[Path, str],
                                                                        reads: list[Path]) -> None:
    path, sha = weights
    _note(path).write_text("{not json")
    assert digest.has_sha256(path, sha) and json.loads(_note(path).read_text())["sha256"] == sha  # written afresh
    _note(path).unlink()
    _note(path).mkdir()  # the note cannot be written where a folder stands
    assert digest.has_sha256(path, sha) and digest.has_sha256(path, sha)
    assert reads == [path] * 3 and not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_missing_or_unreadable_file_has_no_digest(tmp_path: Path) -> None:
    assert not digest.has_sha256(tmp_path / "absent.bin", "0" * 64)
    assert not digest.has_sha256(tmp_path, "0" * 64)  # a folder where the file should be
