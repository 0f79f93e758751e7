"""The one atomic write: a reader sees the old file or the whole new one, a failed write leaves
the old file as it was, and nothing temporary stays behind, whether it fsyncs or not."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest

from tessera._private.cache import atomic_file, atomic_write_bytes


@pytest.mark.parametrize("durable", [True, False])
def test_the_new_bytes_replace_the_old_whole(tmp_path: Path, durable: bool) -> None:
    path = tmp_path / "entry.onnx"
    path.write_bytes(b"old")
    with mock.patch("os.fsync", wraps=os.fsync) as fsync:
        atomic_write_bytes(path, b"new" * 1000, durable=durable)
    assert path.read_bytes() == b"new" * 1000
    assert fsync.called is durable
    assert [p.name for p in tmp_path.iterdir()] == ["entry.onnx"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "entry.onnx"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_file(path, durable=False) as handle:
        handle.write(b"half")
        raise RuntimeError("the writer fails midway")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["entry.onnx"]
