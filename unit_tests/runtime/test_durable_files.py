"""The order of syncs that makes a file survive a power cut: the data before the name, the
name (its directory) before the function returns. The power-cut file system test shows the
effect with real processes; this shows the calls."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime import durable_files


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths fsynced, in order."""
    calls: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    return calls


def test_write_atomically_syncs_the_data_then_the_directory(
    tmp_path: Path, synced: list[str]
) -> None:
    target = tmp_path / "cluster.json"
    target.write_text("old")
    durable_files.write_atomically(target, b"new", 0o600)
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o600
    assert synced == [str(tmp_path / ".cluster.json.tmp"), str(tmp_path)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.json"]


def test_make_directories_syncs_each_new_level_into_its_parent(
    tmp_path: Path, synced: list[str]
) -> None:
    durable_files.make_directories(tmp_path / "a" / "b" / "c")
    assert (tmp_path / "a" / "b" / "c").is_dir()
    assert synced == [str(tmp_path), str(tmp_path / "a"), str(tmp_path / "a" / "b")]
    synced.clear()
    durable_files.make_directories(tmp_path / "a" / "b")
    assert synced == []


def test_create_if_missing_keeps_an_existing_file(tmp_path: Path, synced: list[str]) -> None:
    secret = tmp_path / "secret"
    assert durable_files.create_if_missing(secret, b"first", 0o600)
    assert not durable_files.create_if_missing(secret, b"second", 0o600)
    assert secret.read_bytes() == b"first"
    assert synced == [str(tmp_path / ".secret.tmp"), str(tmp_path)]
