"""The one size-bounded directory cache the weights and the compiled partitions share:
entries go least recently used first until the bound holds, an entry `remove` refuses (one a
process holds) and `keep` stay, unfinished directories of dead writers go, and publishing is
all or nothing, fsynced where the entry must survive."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest

from tessera._private.cache import DirectoryLRU


def _entry(root: Path, name: str, size: int, used: float) -> Path:
    entry = root / name
    entry.mkdir()
    (entry / "data").write_bytes(b"x" * size)
    (entry / "stamp").write_text("")
    os.utime(entry / "stamp", (used, used))
    return entry


def _cache(root: Path, remove: Callable[[Path], bool] | None = None) -> DirectoryLRU:
    if remove is None:
        return DirectoryLRU(root, "stamp", "TESSERA_TEST_LRU_MB", 1)
    return DirectoryLRU(root, "stamp", "TESSERA_TEST_LRU_MB", 1, remove=remove)


def test_the_least_recently_used_go_first_until_the_bound_holds(tmp_path: Path) -> None:
    for used, name in enumerate(["c", "a", "d", "b"]):  # c is the least recently used
        _entry(tmp_path, name, 100, 1000.0 + used)
    removed = _cache(tmp_path).evict(limit=250)
    assert removed == ["c", "a"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "d"]


def test_a_touched_entry_becomes_the_last_to_go(tmp_path: Path) -> None:
    old = _entry(tmp_path, "old", 100, 1000.0)
    _entry(tmp_path, "new", 100, 2000.0)
    cache = _cache(tmp_path)
    cache.touch(old)
    assert cache.evict(limit=100) == ["new"]


def test_kept_and_refused_entries_stay_and_others_go_in_their_place(tmp_path: Path) -> None:
    entries = [_entry(tmp_path, f"e{i}", 100, 1000.0 + i) for i in range(4)]
    refused = {entries[1]}
    cache = _cache(tmp_path, remove=lambda entry: entry not in refused and _gone(entry))
    assert cache.evict(limit=200, keep=entries[0]) == ["e2", "e3"]
    assert entries[0].is_dir() and entries[1].is_dir()


def _gone(entry: Path) -> bool:
    shutil.rmtree(entry)
    return True


def test_the_bound_comes_from_the_environment_in_megabytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _cache(tmp_path)
    assert cache.limit_bytes() == 1 << 20
    monkeypatch.setenv("TESSERA_TEST_LRU_MB", "0.5")
    assert cache.limit_bytes() == 1 << 19
    monkeypatch.setenv("TESSERA_TEST_LRU_MB", "lots")
    assert cache.limit_bytes() == 1 << 20  # unreadable: the default
    _entry(tmp_path, "big", 600_000, 1000.0)
    assert cache.evict() == []
    monkeypatch.setenv("TESSERA_TEST_LRU_MB", "0.5")
    assert cache.evict() == ["big"]


def test_unfinished_directories_of_dead_writers_go_and_live_ones_stay(tmp_path: Path) -> None:
    dead = tmp_path / ".k1.999999999.abc"
    alive = tmp_path / f".k2.{os.getpid()}.abc"
    dead.mkdir()
    alive.mkdir()
    assert _cache(tmp_path).evict(limit=0) == [dead.name]
    assert alive.is_dir()


def test_a_published_entry_appears_whole_and_is_fsynced(tmp_path: Path) -> None:
    cache = _cache(tmp_path)

    def write(directory: Path) -> str:
        (directory / "data").write_bytes(b"abc")
        (directory / "stamp").write_text("")
        return "built"

    with mock.patch("os.fsync", wraps=os.fsync) as fsync:
        assert cache.publish("key", write) == "built"
    assert sorted(p.name for p in (tmp_path / "key").iterdir()) == ["data", "stamp"]
    assert fsync.call_count >= 3  # both files, the entry and the cache directory
    assert [p.name for p in tmp_path.iterdir()] == ["key"]
    with mock.patch("os.fsync", wraps=os.fsync) as fsync:
        cache.publish("other", write, durable=False)
    assert not fsync.called


def test_the_first_publisher_wins_and_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.publish("key", lambda d: (d / "data").write_bytes(b"first"))
    cache.publish("key", lambda d: (d / "data").write_bytes(b"second"))
    assert (tmp_path / "key" / "data").read_bytes() == b"first"

    def failing(directory: Path) -> None:
        (directory / "data").write_bytes(b"half")
        raise RuntimeError("the writer fails midway")

    with pytest.raises(RuntimeError):
        cache.publish("broken", failing)
    assert [p.name for p in tmp_path.iterdir()] == ["key"]
