"""Where tessera keeps its caches: `TESSERA_CACHE`, else the user cache directory."""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


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
