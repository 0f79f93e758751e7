"""The cost database survives corruption, old layouts and concurrent writers."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tessera.errors import CacheWarning, TesseraError
from tessera.placement import CostDB
from tessera.placement.record import Cost
from tessera.placement.record._costdb import SCHEMA_VERSION


def test_a_corrupt_file_is_moved_aside_and_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "costs.sqlite"
    path.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.warns(CacheWarning, match="unreadable"):
        db = CostDB(path)
    db.put("k", "s", "f", Cost(1.5, 0.1, 5))
    assert db.get("k", "s", "f") == Cost(1.5, 0.1, 5)
    kept = [p for p in tmp_path.iterdir() if p.name.endswith(".bad")]
    assert len(kept) == 1 and kept[0].read_bytes().startswith(b"this is not sqlite")


def test_a_truncated_database_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "costs.sqlite"
    db = CostDB(path)
    db.put_many([])
    for i in range(200):
        db.put(f"k{i}", "s", "f", Cost(float(i), 0.0, 1))
    data = path.read_bytes()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(data[: len(data) // 3])
    with pytest.warns(CacheWarning):
        again = CostDB(path)
    again.put("k", "s", "f", Cost(2.0, 0.0, 1))
    assert again.get("k", "s", "f") == Cost(2.0, 0.0, 1)


def test_an_older_layout_is_rebuilt_and_the_version_stored(tmp_path: Path) -> None:
    path = tmp_path / "costs.sqlite"
    with sqlite3.connect(path) as old:
        old.execute("CREATE TABLE costs (key TEXT, ms REAL)")
        old.execute("INSERT INTO costs VALUES ('a', 1.0)")
    with pytest.warns(CacheWarning, match="older layout"):
        db = CostDB(path)
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.put("k", "s", "f", Cost(1.0, 0.0, 1))
    assert db.get("k", "s", "f") is not None


def test_a_newer_schema_is_left_alone_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "costs.sqlite"
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(TesseraError, match="newer than this tessera"):
        CostDB(path)


_WRITER = """
import sys
from tessera.placement import CostDB
from tessera.placement.record import Cost
db = CostDB(sys.argv[1])
worker = sys.argv[2]
for i in range(150):
    db.put(f"target-{worker}", f"structure-{i}", "machine", Cost(float(i), 0.0, 3))
    if i % 10 == 0:
        db.get(f"target-{worker}", f"structure-{i}", "machine")
"""


def test_four_processes_writing_at_once_lose_no_entries(tmp_path: Path) -> None:
    path = tmp_path / "costs.sqlite"
    CostDB(path)
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(w)])
               for w in range(4)]
    assert [w.wait(timeout=300) for w in writers] == [0, 0, 0, 0]
    records = list(CostDB(path).records())
    assert len(records) == 4 * 150
    assert {r.tuning_key for r in records} == {f"target-{w}" for w in range(4)}


_COMPILER = """
import json, sys
import tessera
from tessera import zoo
compiled = tessera.compile(zoo.export("mlp", 1), sys.argv[1], partitioner="collage")
target = str(compiled.plan.partitions[0].target)
print(json.dumps({"target": target, "measured": compiled.plan.stats.measuring.measurements}))
"""


def test_four_processes_compiling_at_once_lose_no_entries(tmp_path: Path) -> None:
    import json
    import os

    from tessera import zoo
    from tessera.target import Target

    zoo.export("mlp", 1)
    path = tmp_path / "costs.sqlite"
    env = {**os.environ, "TESSERA_COST_DB": str(path)}
    levels = ["disable", "basic", "extended", "all"]  # four tuning keys: no shared records
    compilers = [subprocess.Popen([sys.executable, "-c", _COMPILER,
                                   f"onnxruntime -opt-level={level}"],
                                  stdout=subprocess.PIPE, text=True, env=env) for level in levels]
    results = [json.loads(c.communicate(timeout=600)[0].strip().splitlines()[-1])
               for c in compilers]
    assert [c.returncode for c in compilers] == [0, 0, 0, 0]
    records = list(CostDB(path).records())
    for level, result in zip(levels, results, strict=True):
        target = Target(f"onnxruntime -opt-level={level}")
        # with the one-thread choice Collage measures for small partitions
        keys = {target.tuning_key(), target.with_attrs(num_threads=1).tuning_key()}
        mine = [r for r in records if r.tuning_key in keys]
        assert result["measured"] > 0 and len(mine) == result["measured"], (level, result)
