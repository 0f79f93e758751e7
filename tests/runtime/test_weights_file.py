"""The weights file kept beside an artifact (link-params=false): any set of tensors round trips
through its layout, the file and the memory map, each aligned and checked."""

from __future__ import annotations

import hashlib
import itertools
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.errors import ArtifactError
from tessera.runtime._artifact import _map_weights, _weights_layout, _write_beside


def _named(blobs: list[bytes]) -> dict[str, bytes]:
    return {f"tensors/{hashlib.sha256(b).hexdigest()}": b for b in blobs}


@settings(max_examples=40, deadline=None)
@given(blobs=st.lists(st.binary(min_size=0, max_size=300), max_size=8))
def test_tensors_round_trip_through_the_weights_file(blobs: list[bytes]) -> None:
    tensors = _named(blobs)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.tess"
        layout = _weights_layout("m.tess.weights", tensors)
        _write_beside(path, {"a.json": b"{}"}, tensors, layout)
        with zipfile.ZipFile(path) as archive:
            assert archive.read("a.json") == b"{}"
        weights = Path(folder) / "m.tess.weights"
        assert weights.stat().st_size == layout["size"]
        views = _map_weights(path, layout)
        assert {name: bytes(view) for name, view in views.items()} == tensors
        spans = sorted((e["offset"], e["offset"] + e["length"])
                       for e in layout["tensors"].values())
        assert all(start % 64 == 0 for start, _ in spans)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
        # views of the mapped file (numpy hands back empty slices as plain arrays)
        assert all(isinstance(view, np.memmap) for view in views.values() if len(view))
        assert sorted(p.name for p in Path(folder).iterdir()) == ["m.tess", "m.tess.weights"]


def test_a_tensor_outside_the_file_is_damage(tmp_path: Path) -> None:
    tensors = _named([b"x" * 100])
    layout = _weights_layout("m.tess.weights", tensors)
    _write_beside(tmp_path / "m.tess", {}, tensors, layout)
    (entry,) = layout["tensors"].values()
    entry["offset"] = 50  # reaches past the end of the file
    with pytest.raises(ArtifactError, match="fails its SHA-256 check"):
        _map_weights(tmp_path / "m.tess", layout)
    entry["offset"] = -10
    with pytest.raises(ArtifactError, match="fails its SHA-256 check"):
        _map_weights(tmp_path / "m.tess", layout)
