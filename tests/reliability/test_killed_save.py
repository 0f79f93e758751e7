"""A save killed mid-write leaves the old artifact or none, never half of one; the next save
clears what the killed one left behind. The child writes slowly (a sleep after each zip
entry, like a slow disk), so the kill lands inside the write for certain."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tessera
from tessera import zoo

_SAVER = """
import sys, time, zipfile, tessera
from tessera import zoo
path, first_whole = sys.argv[1], sys.argv[2] == "1"
compiled = tessera.compile(zoo.export("mlp", 1), "onnxruntime")
if first_whole:
    compiled.save(path)
real = zipfile.ZipFile.writestr
def slow(self, *args, **kwargs):
    real(self, *args, **kwargs)
    print("writing", flush=True)
    time.sleep(0.5)
zipfile.ZipFile.writestr = slow
compiled.save(path)
"""


@pytest.fixture(autouse=True)
def _private_cost_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_COST_DB", str(tmp_path / "costs.sqlite"))


@pytest.mark.parametrize("had_one", [True, False], ids=["old-artifact-kept", "none-left"])
def test_a_save_killed_mid_write_leaves_the_old_artifact_or_none(tmp_path: Path,
                                                                 had_one: bool) -> None:
    zoo.export("mlp", 1)
    path = tmp_path / "model.tess"
    saver = subprocess.Popen([sys.executable, "-c", _SAVER, str(path), "1" if had_one else "0"],
                             stdout=subprocess.PIPE, text=True)
    assert saver.stdout is not None
    assert saver.stdout.readline().strip() == "writing"  # inside the zip, mid-save
    time.sleep(0.1)
    saver.send_signal(signal.SIGKILL)
    saver.wait(timeout=60)
    leftovers = list(tmp_path.glob(".model.tess.*.tmp"))
    assert leftovers, "the kill landed inside the write"
    if had_one:
        assert str(tessera.load(path).plan.partitions[0].target).startswith("onnxruntime")
    else:
        assert not path.exists()
    tessera.compile(zoo.export("mlp", 1), "onnxruntime").save(path)
    assert not [p for p in leftovers if p.exists()], "the next save clears a killed one's temp"
    assert str(tessera.load(path).plan.partitions[0].target).startswith("onnxruntime")
