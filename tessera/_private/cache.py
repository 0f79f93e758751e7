"""Where tessera keeps its caches (`TESSERA_CACHE`, else the user cache directory), the one
atomic write of a file, and the one size-bounded directory of entries evicted least recently
used first."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TypeVar

T = TypeVar("T")


def cache_dir(*parts: str) -> Path:
    root = os.environ.get("TESSERA_CACHE")
    if not root:
        import platformdirs

        root = platformdirs.user_cache_dir("tessera")
    path = Path(root, *parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def atomic_file(path: Path, *, durable: bool = True) -> Iterator[BinaryIO]:
    """A handle on a temporary file beside `path`, fsynced and renamed onto `path` when the
    block ends: readers never see half a file, and a failure leaves `path` as it was. The
    temporary name carries the writer's pid, so a later write clears those of dead writers
    (a killed process cannot clean up after itself). `durable=False` skips the fsync, for a
    file its writer removes before it exits (another process may still read it whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp",
                               dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        _sync_directory(path.parent)  # the new name survives a crash too


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    with atomic_file(path, durable=durable) as handle:
        handle.write(data)


def _remove_stale_temporaries(path: Path) -> None:
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = leftover.name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            leftover.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def directory_bytes(entry: Path) -> int:
    """The bytes of the files directly in `entry`."""
    total = 0
    for file in entry.iterdir():
        with contextlib.suppress(OSError):
            total += file.stat().st_size
    return total


def remove_entry(entry: Path) -> bool:
    """Rename `entry` aside, so no reader finds half of it, then delete it. False where it
    was gone or could not be moved."""
    gone = entry.with_name(f".{entry.name}.{os.getpid()}.gone")
    try:
        entry.rename(gone)
    except OSError:
        return False
    shutil.rmtree(gone, ignore_errors=True)
    return True


@dataclass(frozen=True)
class DirectoryLRU:
    """A cache directory of entries, each a directory named by its key, bounded in bytes.

    An entry is published by renaming a finished directory into place, so a reader never sees
    half of one. Each use touches the entry's `stamp` file, and eviction removes the least
    recently used entries first, until the cache holds at most its bound (`limit_variable`
    in MB, else `default_mb`), together with the unfinished directories of writers that
    died. `measure` gives an entry's bytes and `remove` removes one, or answers False where
    it must stay (an entry a process holds)."""

    root: Path
    stamp: str
    limit_variable: str
    default_mb: float
    measure: Callable[[Path], int] = field(default=directory_bytes)
    remove: Callable[[Path], bool] = field(default=remove_entry)

    def limit_bytes(self) -> int:
        raw = os.environ.get(self.limit_variable, "")
        try:
            megabytes = float(raw) if raw else self.default_mb
        except ValueError:
            megabytes = self.default_mb
        return int(megabytes * 1024 * 1024)

    def publish(self, key: str, write: Callable[[Path], T], *, durable: bool = True) -> T:
        """`write(directory)` into a fresh directory, then renamed to the entry `key`; if
        another writer published `key` first, theirs stays and this one goes. With
        `durable`, every file is fsynced before the rename and the rename after it, so an
        entry a crash leaves is whole. What `write` returned."""
        fresh = Path(tempfile.mkdtemp(prefix=f".{key}.{os.getpid()}.", dir=self.root))
        try:
            result = write(fresh)
            if durable:
                _sync_tree(fresh)
            try:
                fresh.rename(self.root / key)
            except OSError:  # another writer published it first
                shutil.rmtree(fresh, ignore_errors=True)
            else:
                if durable:
                    _sync_directory(self.root)
        except BaseException:
            shutil.rmtree(fresh, ignore_errors=True)
            raise
        return result

    def touch(self, entry: Path) -> None:
        """Mark `entry` as just used: the last to go."""
        with contextlib.suppress(OSError):
            os.utime(entry / self.stamp)

    def evict(self, limit: int | None = None, keep: Path | None = None) -> list[str]:
        """Remove entries, least recently used first, until the cache holds at most `limit`
        bytes (None: the configured bound), passing over `keep` and those `remove` refuses;
        and the unfinished directories of writers that died. The names removed."""
        limit = self.limit_bytes() if limit is None else limit
        removed = []
        entries = []
        for path in sorted(self.root.iterdir()):
            if path.name.startswith("."):  # .KEY.PID.*: being written, or being removed
                pid = path.name.split(".")[2] if path.name.count(".") > 1 else ""
                if pid.isdigit() and not _alive(int(pid)):
                    shutil.rmtree(path, ignore_errors=True)
                    removed.append(path.name)
                continue
            try:
                entries.append(((path / self.stamp).stat().st_mtime, path.name,
                                self.measure(path)))
            except OSError:
                continue
        total = sum(size for _, _, size in entries)
        for _, name, size in sorted(entries):
            if total <= limit:
                break
            if (keep is None or self.root / name != keep) and self.remove(self.root / name):
                removed.append(name)
                total -= size
        return removed


def _sync_tree(directory: Path) -> None:
    for folder, _, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _sync_directory(Path(folder))


def _sync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # a platform without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
