"""Where a loaded model's weights live: the weights cache.

`load_model` moves every weight of `INLINE_BYTES` or more (but the small integer tables that
shapes and indices are made of) into one file, `weights.bin`, in an entry of the weights
cache (`TESSERA_CACHE/weights/KEY`). The model's initializers keep ONNX external-data
references into it (`_external`), so its proto is a skeleton of a few hundred KB: a
submodel or a candidate copies references, never weights, and the measuring worker is sent
the skeleton's path and a node mask.

An entry's key is its weights' content (the digests of the files they came from, or of the
weights themselves) and layout, so a later load of the same model reuses it without writing
anything. An entry is published by renaming a finished directory; a process using an entry
holds a shared lock on it, and eviction (least recently used first, once the cache passes
`TESSERA_WEIGHTS_CACHE_MB`, default 8192) passes over locked entries. Where no cache
directory can be written, a private temporary directory stands in, removed with the model."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import mmap
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tessera._private.cache import DirectoryLRU, atomic_write_bytes, cache_dir, remove_entry
from tessera._private.version import __version__
from tessera.errors import ModelError
from tessera.ir import _dtypes as dtypes
from tessera.ir._external import (
    FILE,
    NAMES,
    directory_of,
    inline,
    inline_tensor,
    is_external,
    mark,
    refer,
    reference,
    refers,
    staged,
    stays_inline,
    weights_as_feeds,
)

try:
    import fcntl
except ImportError:  # no advisory locks here: entries are then evicted by age alone
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    import numpy as np
    import onnx

_LOCK, _DONE = "lock", "done"
_PAGE, _ALIGN, _PAGE_FROM = 4096, 64, 64 << 10  # tensors of 64 KiB or more start on a page
_CHUNK = 16 << 20


class Weights:
    """A model's weights file, mapped for reading while the model lives, and the shared
    lock that keeps its cache entry from eviction meanwhile. Files written beside it for
    this process (the skeletons the worker reads) go when it goes."""

    def __init__(self, directory: Path, lock: int | None, *, temporary: bool = False
                 ) -> None:
        self.directory = directory
        self.key = directory.name
        self._map: mmap.mmap | None = None
        self._guard = threading.Lock()
        self._written: list[Path] = []
        self._finalizer = weakref.finalize(self, _release, lock, self._written,
                                           directory if temporary else None)

    @property
    def path(self) -> Path:
        return self.directory / FILE

    @functools.cached_property
    def size(self) -> int:
        """The bytes of the weights file."""
        return self.path.stat().st_size

    def view(self, offset: int, length: int) -> memoryview:
        """Bytes of the file, read-only and without a copy."""
        with self._guard:
            if self._map is None:
                with self.path.open("rb") as handle:
                    self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        if offset < 0 or offset + length > len(self._map):
            raise ModelError(f"the weights file {str(self.path)!r} holds {len(self._map)} "
                             f"bytes, too few for bytes {offset} to {offset + length}; it "
                             "was damaged: clear TESSERA_CACHE/weights and load again")
        return memoryview(self._map)[offset:offset + length]

    def array(self, tensor: onnx.TensorProto) -> np.ndarray:
        """The tensor's value: a read-only view of the file for one kept here, else its own
        (inline) value."""
        import numpy as np
        from onnx import helper, numpy_helper

        spot = reference(tensor)
        if spot is None:
            return numpy_helper.to_array(tensor)
        offset, length = spot
        dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
        if tensor.data_type in dtypes.SUB_BYTE_BITS:  # packed: let onnx unpack a copy
            return numpy_helper.to_array(inline_tensor(tensor, self.view(offset, length)))
        return np.frombuffer(self.view(offset, length), dtype=dtype).reshape(
            tuple(tensor.dims))

    def inline_tensor(self, tensor: onnx.TensorProto) -> onnx.TensorProto:
        """The tensor holding its own bytes (a copy, for one kept here)."""
        spot = reference(tensor)
        return tensor if spot is None else inline_tensor(tensor, self.view(*spot))

    def skeleton(self, proto: onnx.ModelProto) -> Path:
        """`proto` written beside the weights (its references resolve there), under a name
        of this process's own; removed when these weights are released."""
        path = self.directory / f"model.{os.getpid()}.{next(NAMES)}.onnx"
        atomic_write_bytes(path, proto.SerializeToString(), durable=False)
        self._written.append(path)
        return path

    def close(self) -> None:
        self._finalizer()


def _release(lock: int | None, written: list[Path], temporary: Path | None) -> None:
    for path in written:
        with contextlib.suppress(OSError):
            path.unlink()
    if lock is not None:
        with contextlib.suppress(OSError):
            os.close(lock)  # releases the shared lock
    if temporary is not None:
        shutil.rmtree(temporary, ignore_errors=True)


# -- moving a model's weights into an entry --------------------------------------------------
@dataclass(frozen=True)
class _Slot:
    index: int  # in graph.initializer
    offset: int  # in the weights file
    length: int
    source: tuple[Path, int] | None  # a file of the user's and the offset there, or None


def store(proto: onnx.ModelProto, base: Path | None, material: str | None
          ) -> Weights | None:
    """Move `proto`'s large initializers into a weights entry (found in the cache, or
    written), leaving references in their place, and mark `proto` with the entry. Large
    weights may be inline or external data of the user's in `base` (already checked to stay
    inside it); small external ones are read into the proto. `material` names the bytes
    the weights came from (digests of the files read); None hashes the weights themselves.
    None when no weight is large enough to move."""
    tensors = list(proto.graph.initializer)
    sizes = [_size(t, base) for t in tensors]
    movable = [i for i, t in enumerate(tensors) if _movable(t) and not stays_inline(
        t.data_type, list(t.dims), sizes[i])]
    for i, tensor in enumerate(tensors):  # small external ones come in
        if is_external(tensor) and i not in movable:
            assert base is not None
            tensor.CopyFrom(inline_tensor(tensor, _read_external(tensor, base)))
    if not movable:
        mark(proto, None)
        return None
    if base is not None and base == directory_of(proto) and all(
            reference(tensors[i]) is not None for i in movable):
        found = _open(base)  # a loaded model's skeleton: its entry serves as it is
        if found is not None:
            return found
    slots, end = _layout(tensors, movable, sizes, base)
    digest = hashlib.sha1(usedforsecurity=False)
    digest.update(json.dumps([__version__, material, end, [
        (tensors[s.index].name, tensors[s.index].data_type, list(tensors[s.index].dims),
         s.offset, s.length) for s in slots]]).encode())
    if material is None:
        for slot in slots:
            for chunk in _chunks(tensors[slot.index], slot):
                digest.update(chunk)
    key = digest.hexdigest()
    weights = _entry(key, tensors, slots, end)
    for slot in slots:
        _point(tensors[slot.index], slot)
    mark(proto, weights.directory)
    return weights


def _movable(tensor: onnx.TensorProto) -> bool:
    """Whether the tensor's bytes can live in a file as ONNX raw data: raw or external
    data, or typed fields of a type whole bytes hold."""
    if is_external(tensor) or tensor.HasField("raw_data"):
        return True
    return tensor.data_type not in dtypes.SUB_BYTE_BITS and tensor.data_type not in (
        dtypes.STRING, dtypes.UNDEFINED)


def _size(tensor: onnx.TensorProto, base: Path | None) -> int:
    if is_external(tensor):
        info = {e.key: e.value for e in tensor.external_data}
        if "length" in info:
            return int(info["length"])
        assert base is not None
        return max(0, int((base / info.get("location", "")).stat().st_size) - int(
            info.get("offset", "0")))
    if tensor.HasField("raw_data"):
        return _raw_length(tensor)
    if not _movable(tensor):
        return len(tensor.raw_data)
    return len(_typed_bytes(tensor))


def _raw_length(tensor: onnx.TensorProto) -> int:
    """The length of a tensor's raw data from its type and shape, where they fix it: reading
    `raw_data` copies the bytes (0.6 s of a 1.9 s warm compile of GPT-2-small). `_chunks`
    checks it against the bytes wherever they are read."""
    import onnx

    count = int(math.prod(tensor.dims))
    bits = dtypes.SUB_BYTE_BITS.get(tensor.data_type)
    if bits is not None:
        return (count * bits + 7) // 8
    try:
        return count * int(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize)
    except (KeyError, ValueError, TypeError):  # a type numpy has no fixed width for
        return len(tensor.raw_data)


def _layout(tensors: list[onnx.TensorProto], movable: list[int], sizes: list[int],
            base: Path | None) -> tuple[list[_Slot], int]:
    slots = []
    end = 0
    for i in movable:
        tensor = tensors[i]
        source = None
        length = sizes[i]
        if is_external(tensor):
            assert base is not None
            info = {e.key: e.value for e in tensor.external_data}
            source = (base / info["location"], int(info.get("offset", "0")))
        elif not tensor.HasField("raw_data"):
            length = len(_typed_bytes(tensor))
        align = _PAGE if length >= _PAGE_FROM else _ALIGN
        end += -end % align
        slots.append(_Slot(i, end, length, source))
        end += length
    return slots, end


def _typed_bytes(tensor: onnx.TensorProto) -> bytes:
    from onnx import numpy_helper

    return bytes(numpy_helper.to_array(tensor).tobytes())


def _chunks(tensor: onnx.TensorProto, slot: _Slot) -> Iterator[bytes | memoryview]:
    """The slot's bytes, in pieces of at most `_CHUNK` (a user's file is never read whole)."""
    if slot.source is None:
        data = tensor.raw_data if tensor.HasField("raw_data") else _typed_bytes(tensor)
        if len(data) != slot.length:
            raise ModelError(f"initializer {tensor.name!r} holds {len(data)} bytes of raw "
                             f"data, but its type and shape {list(tensor.dims)} need "
                             f"{slot.length}; fix the tensor in the exporter")
        view = memoryview(data)
        for start in range(0, len(view), _CHUNK):
            yield view[start:start + _CHUNK]
        return
    path, offset = slot.source
    with path.open("rb") as handle:
        handle.seek(offset)
        left = slot.length
        while left:
            chunk = handle.read(min(left, _CHUNK))
            if not chunk:
                raise ModelError(f"external data file {path.name!r} of tensor "
                                 f"{tensor.name!r} ends before its {slot.length} bytes")
            left -= len(chunk)
            yield chunk


def _read_external(tensor: onnx.TensorProto, base: Path) -> bytes:
    from onnx.external_data_helper import ExternalDataInfo

    info = ExternalDataInfo(tensor)
    with (base / info.location).open("rb") as handle:
        handle.seek(int(info.offset or 0))
        return handle.read(-1 if info.length is None else int(info.length))


def _point(tensor: onnx.TensorProto, slot: _Slot) -> None:
    """The tensor, now a reference to its slot of the weights file."""
    refer(tensor, slot.offset, slot.length)


def _entry(key: str, tensors: list[onnx.TensorProto], slots: list[_Slot], end: int
           ) -> Weights:
    """The cache entry `key`, locked: found, or else written and published."""
    try:
        cache = _cache()
    except OSError:
        return _temporary(tensors, slots, end)
    found = _open(cache.root / key)
    if found is not None:
        return found
    try:
        cache.publish(key, lambda directory: _write(directory, tensors, slots, end))
    except OSError:  # a full disk or a read-only cache: this process keeps its own copy
        return _temporary(tensors, slots, end)
    found = _open(cache.root / key)
    if found is None:  # evicted the moment it was published: keep a private copy
        return _temporary(tensors, slots, end)
    cache.evict(keep=cache.root / key)
    return found


def _open(entry: Path) -> Weights | None:
    """The finished entry, with a shared lock on it; None if there is none."""
    try:
        lock = os.open(entry / _LOCK, os.O_RDONLY)
    except OSError:
        return None
    if fcntl is not None:
        fcntl.flock(lock, fcntl.LOCK_SH)  # waits out an eviction in progress
    if not (entry / _DONE).is_file():  # removed meanwhile
        os.close(lock)
        return None
    _lru(entry.parent).touch(entry)
    return Weights(entry, lock)


def open_entry(key: str) -> Weights | None:
    """The cache's finished entry `key`, locked while the result lives; None if there is
    none."""
    return _open(cache_root() / key)


def cache_root() -> Path:
    return _cache().root


def attach(directory: Path) -> Weights:
    """The weights entry at `directory`, locked while the result lives (the measuring
    worker's view of its compiling process's weights)."""
    found = _open(directory)
    if found is None:
        raise ModelError(f"the weights directory {str(directory)!r} is gone or unfinished; "
                         "load the model again")
    return found


def held(key: str) -> Weights | None:
    """This machine's cache entry `key` (another machine's entry of the same weights has
    the same key), locked; None when it has none."""
    try:
        return _open(_cache().root / key)
    except OSError:
        return None


def adopt(key: str, data: bytes) -> Weights:
    """The cache entry `key` made here from `data`, the bytes of its weights file as another
    machine holds them (a machine that measures candidates of a model loaded elsewhere),
    locked; found instead where it is here already."""
    found = held(key)
    if found is not None:
        return found
    cache = _cache()

    def write(directory: Path) -> None:
        (directory / FILE).write_bytes(data)
        (directory / _LOCK).write_bytes(b"")
        (directory / _DONE).write_text(json.dumps({"bytes": len(data), "received": True}))

    cache.publish(key, write)
    return attach(cache.root / key)


def _write(directory: Path, tensors: list[onnx.TensorProto], slots: list[_Slot],
           end: int) -> None:
    with (directory / FILE).open("wb") as handle:
        position = 0
        for slot in slots:
            handle.write(bytes(slot.offset - position))
            for chunk in _chunks(tensors[slot.index], slot):
                handle.write(chunk)
            position = slot.offset + slot.length
        handle.write(bytes(end - position))
    (directory / _LOCK).write_bytes(b"")
    (directory / _DONE).write_text(json.dumps({"bytes": end, "tensors": len(slots)}))


def _temporary(tensors: list[onnx.TensorProto], slots: list[_Slot], end: int) -> Weights:
    """A private copy, removed with the model: nothing to keep across a crash, no fsync."""
    try:
        fresh = Path(tempfile.mkdtemp(prefix="tessera-weights-"))
    except OSError as err:
        raise _no_room(end, err) from None
    try:
        _write(fresh, tensors, slots, end)
    except OSError as err:
        shutil.rmtree(fresh, ignore_errors=True)
        raise _no_room(end, err) from None
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    return Weights(fresh, None, temporary=True)


def _no_room(size: int, err: OSError) -> ModelError:
    return ModelError(f"the model's weights ({size / 2**20:.0f} MiB) could not be written to "
                      f"the weights cache nor to {tempfile.gettempdir()} ({err.strerror or err}"
                      "): free disk space there, or set TESSERA_CACHE to a directory on a "
                      "disk with room")


def evict(root: Path, limit: int, keep: Path | None = None) -> list[str]:
    """Remove entries, least recently used first, until the cache holds at most `limit`
    bytes, passing over those a process holds (and `keep`); and the unfinished
    directories of writers that died. The names removed."""
    return _lru(root).evict(limit, keep)


def _cache() -> DirectoryLRU:
    return _lru(cache_dir("weights"))


def _lru(root: Path) -> DirectoryLRU:
    # the lock file is touched on each use; an entry's size is its weights file
    return DirectoryLRU(root, _LOCK, "TESSERA_WEIGHTS_CACHE_MB", 8192,
                        measure=lambda entry: (entry / FILE).stat().st_size,
                        remove=_remove)


def _remove(entry: Path) -> bool:
    """Remove an entry no process holds; False if one does."""
    try:
        lock = os.open(entry / _LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        if fcntl is not None:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False
        return remove_entry(entry)
    finally:
        os.close(lock)


# the proto's side (`_external`) is imported from here too, by the layers above
__all__ = ["FILE", "Weights", "adopt", "attach", "directory_of", "evict", "held", "inline",
           "mark", "refer", "reference", "refers", "staged", "store",
           "weights_as_feeds"]
