"""What an earlier load learnt of a model file, kept while the file is unchanged: the digest of
its bytes, and that its weights passed the size checks. For GPT-2-small (650 MB) hashing and
checking cost 0.7 s of a warm compile.

A file counts as unchanged while its device, inode, size, and modification and change times
(in ns) are. As in git's index, a file modified within the last few seconds is not remembered:
a second write in the same clock tick would leave every one of those the same."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from tessera._private.cache import atomic_write_bytes, cache_dir

SETTLED_S = 3.0  # a file younger than this may still be written within its mtime's tick
# the time now in ns since the epoch, as file times are: a file's age is told by it
WallClock = Callable[[], int]


def stat_key(stat: os.stat_result) -> list[int]:
    return [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


def recall(path: Path, stat: os.stat_result) -> str | None:
    """The digest remembered for `path` as it was when stat'ed, or None."""
    try:
        entry = json.loads(_entry(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("stat") != stat_key(stat):
        return None
    digest = entry.get("digest")
    return digest if isinstance(digest, str) else None


def remember(path: Path, stat: os.stat_result, digest: str,
             clock: WallClock = time.time_ns) -> bool:
    """Keep `digest` for `path` after a load that checked it fully; whether it is kept. Best
    effort: a cache that cannot be written costs the next load its hashing, nothing else."""
    if clock() - max(stat.st_mtime_ns, stat.st_ctime_ns) < SETTLED_S * 1e9:
        return False
    try:
        atomic_write_bytes(_entry(path), json.dumps(
            {"path": str(path), "stat": stat_key(stat), "digest": digest}).encode())
    except OSError:
        return False
    return True


def _entry(path: Path) -> Path:
    name = hashlib.sha1(str(path.resolve()).encode(), usedforsecurity=False).hexdigest()
    return cache_dir("files") / f"{name}.json"
