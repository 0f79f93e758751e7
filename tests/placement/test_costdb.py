"""The cost database: persistence, concurrent writers, JSON-lines export/import that never
overwrites newer records, and records of other machines used only when asked."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from tessera.errors import TesseraError
from tessera.ir import NodeSet
from tessera.placement import CostDB
from tessera.placement.measure import FunctionMeasurer
from tessera.placement.record import Cost, Record
from tessera.placement.record._costdb import fingerprint
from tessera.placement.search import SupportTable, place_collage
from tessera.target import Target

from .context import context


def _writer(path: str, worker: int) -> None:
    db = CostDB(path)
    for i in range(150):
        db.put("onnxruntime:k", f"s{worker}-{i}", "fp", Cost(float(i), 0.1, 5))


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "c.sqlite")
    CostDB(path)
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_writer, args=(path, w)) for w in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    assert CostDB(path).describe()["records"] == 300


def test_export_import_round_trip_keeps_newer_records(tmp_path: Path) -> None:
    a, b = CostDB(tmp_path / "a.sqlite"), CostDB(tmp_path / "b.sqlite")
    a.put("ort:1", "s", "fp", Cost(1.0, 0.1, 5), measured_at=100.0)
    a.put("ort:1", "t", "fp", Cost.failed("no kernel"), measured_at=100.0)
    assert a.export(tmp_path / "r.jsonl") == 2
    b.put("ort:1", "s", "fp", Cost(9.0, 0.1, 5), measured_at=200.0)  # newer: stays
    assert b.import_(tmp_path / "r.jsonl") == 1
    assert b.get("ort:1", "s", "fp") == Cost(9.0, 0.1, 5)
    assert b.get("ort:1", "t", "fp") == Cost.failed("no kernel")
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert [Record.from_json(line) for line in lines] == list(a.records())


def test_a_bad_records_file_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"tuning_key": "x"}\n')
    with pytest.raises(TesseraError, match=r"bad.jsonl:1: not a tessera cost record"):
        CostDB(tmp_path / "c.sqlite").import_(tmp_path / "bad.jsonl")


def test_other_machines_records_are_used_only_when_asked(tmp_path: Path) -> None:
    from tessera import zoo
    from tessera.ir import load_model

    model = load_model(zoo.export("mlp", 1))
    config = __import__("tessera").CompilationConfig.create(["onnxruntime"])
    table = SupportTable.build(model, config)
    db = CostDB(tmp_path / "c.sqlite")
    calls: list[NodeSet] = []

    def synthetic(m: object, mask: NodeSet, target: Target) -> Cost:  # SYNTHETIC costs
        calls.append(mask)
        return Cost(float(bin(mask).count("1")) ** 0.5, 0.0, 1)

    SYNTHETIC = FunctionMeasurer(synthetic)
    place_collage(context(model, config, db=db, measurer=SYNTHETIC), table)
    first = len(calls)
    foreign = CostDB(tmp_path / "foreign.sqlite")
    foreign.put_many(Record(r.tuning_key, r.structure, "another machine", r.cost,
                            r.measured_at) for r in db.records())
    calls.clear()
    place_collage(context(model, config, db=foreign, measurer=SYNTHETIC), table)
    assert len(calls) == first  # not used by default: measured again
    assert {r.fingerprint for r in foreign.records()} == {
        "another machine", fingerprint("onnxruntime", _ort_version())}
    calls.clear()
    fresh = CostDB(tmp_path / "foreign2.sqlite")
    fresh.put_many(r for r in foreign.records() if r.fingerprint == "another machine")
    trusting = __import__("tessera").CompilationConfig.create(["onnxruntime"],
                                                                foreign_costs=True)
    plan, _ = place_collage(context(model, trusting, db=fresh, measurer=SYNTHETIC), table)
    assert calls == [] and plan.stats.measuring is not None
    assert plan.stats.measuring.measurements == 0


def _ort_version() -> str | None:
    from tessera import backends

    return backends.get("onnxruntime").is_available().version


def test_a_schema_1_database_is_migrated_into_its_own_tables(tmp_path: Path) -> None:
    """Schema 1 kept end-to-end latencies and chain overheads as cost rows under made-up
    tuning keys; opening it moves them into their own tables and keeps every real cost."""
    import sqlite3

    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE costs (tuning_key TEXT NOT NULL, structure TEXT NOT NULL, "
                   "fingerprint TEXT NOT NULL, ms REAL, spread REAL NOT NULL, samples INTEGER "
                   "NOT NULL, invalid TEXT, measured_at REAL NOT NULL, PRIMARY KEY "
                   "(tuning_key, structure, fingerprint))")
        db.execute("CREATE TABLE plans (key TEXT PRIMARY KEY, plan TEXT NOT NULL, "
                   "saved_at REAL NOT NULL)")
        db.executemany("INSERT INTO costs VALUES (?, ?, ?, ?, 0.0, 1, ?, 1.0)", [
            ("onnxruntime:abc", "s1", "m; onnxruntime 1", 0.5, None),
            ("torch:def", "s2", "m; torch 2", None, "cannot run"),
            ("plan:0123", "s3", "m; end-to-end", 7.5, None),
            ("overhead:onnxruntime,torch", "per-partition", "m; chain", 0.25, None)])
        db.execute("PRAGMA user_version=1")
    migrated = CostDB(path)
    assert [(r.tuning_key, r.cost.ms, r.cost.invalid) for r in migrated.records()] == [
        ("onnxruntime:abc", 0.5, None), ("torch:def", None, "cannot run")]
    assert migrated.get_latency("0123", "s3", "m; end-to-end") == 7.5
    assert migrated.get_overhead("onnxruntime,torch", "m; chain") == 0.25
    assert migrated.describe()["latencies"] == migrated.describe()["overheads"] == 1
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2


def test_a_fault_survives_the_database(tmp_path: Path) -> None:
    db = CostDB(tmp_path / "c.sqlite")
    db.put("k", "s", "f", Cost.failed("hung: no result within 3 s", "hung"))
    assert db.get("k", "s", "f") == Cost(None, 0.0, 0, "hung: no result within 3 s", "hung")
