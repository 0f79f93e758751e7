"""The loaded form of an unchanged model file: its skeleton, kept in its weights entry. A
later load of the same file with the same options parses that skeleton (a few hundred KB)
instead of reading, parsing and cleaning up the whole file: for GPT-2-small (650 MB) that
was 0.9 s of a 2.3 s warm compile.

A file is unchanged as `_filememo` tells it (its stat, as git's index does), so the file is
not even read. The skeleton is found through a pointer in the files cache named by the
file's digest, the load's options and the code that loads (tessera's ir, onnx's version):
a change to any of them is a miss, and a miss is a full load. The skeleton lives and is
evicted with its weights entry, so it never outlives the weights it refers to."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from tessera._private.cache import atomic_write_bytes, cache_dir
from tessera._private.version import __version__
from tessera.ir import _filememo, _weights
from tessera.ir._external import directory_of

if TYPE_CHECKING:
    import onnx

    from tessera.ir._weights import Weights


class Recalled(NamedTuple):
    proto: onnx.ModelProto
    digest: str  # of the file's bytes, as `_filememo` remembers them
    weights: Weights


def recall(source: object, require_static: bool, verify: bool) -> Recalled | None:
    """The loaded skeleton of the file `source` names, where an earlier load with the same
    options left one and the file is unchanged since; None otherwise (never an error: the
    full load that follows reports what is wrong)."""
    if not isinstance(source, str | os.PathLike):
        return None
    path = Path(source)
    try:
        digest = _filememo.recall(path, path.stat())
    except (OSError, ValueError):
        return None
    if digest is None:
        return None
    key = _key(digest, require_static, verify)
    try:
        entry = json.loads(_pointer(key).read_text()).get("weights")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(entry, str) or not entry.isalnum():
        return None
    weights = _weights.open_entry(entry)
    if weights is None:  # evicted with its skeleton
        return None
    proto = _parse(weights.directory / _skeleton_name(key))
    if proto is None or directory_of(proto) != weights.directory:
        weights.close()
        return None
    return Recalled(proto, digest, weights)


def remember(path: Path, digest: str, require_static: bool, verify: bool,
             proto: onnx.ModelProto, weights: Weights) -> None:
    """Keep `proto`, the loaded form of the file at `path` (whose bytes hash to `digest`,
    already remembered by `_filememo`), beside its weights. Best effort, as `_filememo`."""
    if weights.directory.parent != _weights.cache_root():  # a private entry: gone with it
        return
    key = _key(digest, require_static, verify)
    with contextlib.suppress(OSError):
        atomic_write_bytes(weights.directory / _skeleton_name(key), proto.SerializeToString())
        atomic_write_bytes(_pointer(key), json.dumps(
            {"path": str(path), "weights": weights.key}).encode())


def _parse(path: Path) -> onnx.ModelProto | None:
    import onnx
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    try:
        proto = onnx.ModelProto()
        proto.ParseFromString(path.read_bytes())
    except (OSError, DecodeError, ValueError, RuntimeError):
        return None
    return proto if proto.HasField("graph") else None


def _key(digest: str, require_static: bool, verify: bool) -> str:
    material = json.dumps([__version__, _code(), digest, require_static, verify])
    return hashlib.sha1(material.encode(), usedforsecurity=False).hexdigest()


def _skeleton_name(key: str) -> str:
    return f"loaded.{key}.onnx"


def _pointer(key: str) -> Path:
    return cache_dir("files") / f"loaded.{key}.json"


@functools.cache
def _code() -> str:
    """A digest of what loading runs: tessera's ir sources and onnx's version (its shape
    inference and version converter)."""
    import onnx

    here = Path(__file__).parent
    digest = hashlib.sha1(onnx.__version__.encode(), usedforsecurity=False)
    for source in sorted([*here.glob("*.py"), here.parent / "config" / "_shapes.py"]):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()
