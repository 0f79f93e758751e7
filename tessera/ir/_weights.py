"""Where a loaded model's weights live, and how submodels refer to them.

`load_model` moves every weight of `INLINE_BYTES` or more (but the small integer tables that
shapes and indices are made of) into one file, `weights.bin`, in an entry of the weights
cache (`TESSERA_CACHE/weights/KEY`). The model's initializers keep ONNX external-data
references into it (location, offset, length), so its proto is a skeleton of a few hundred
KB: a submodel or a candidate copies references, never weights, and the measuring worker is
sent the skeleton's path and a node mask. The proto names its entry in the metadata_props
entry `METADATA_KEY`, which every copy and submodel keeps: ONNX Runtime and OpenVINO read
the file from there (OpenVINO maps it), and `inline` loads the weights of one submodel for
a backend that needs them in memory.

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
import itertools
import json
import mmap
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tessera._private.cache import _alive, atomic_write_bytes, cache_dir
from tessera._private.version import __version__
from tessera.errors import ModelError
from tessera.ir import _dtypes as dtypes

try:
    import fcntl
except ImportError:  # no advisory locks here: entries are then evicted by age alone
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    import numpy as np
    import onnx

INLINE_BYTES = 1024  # smaller weights stay in the proto, as ONNX Runtime saves them
STRUCTURAL_ELEMENTS = 4096  # integer tables up to this size stay: shapes, axes, indices
FILE = "weights.bin"
METADATA_KEY = "tessera.weights"
_LOCK, _DONE = "lock", "done"
_PAGE, _ALIGN, _PAGE_FROM = 4096, 64, 64 << 10  # tensors of 64 KiB or more start on a page
_CHUNK = 16 << 20
_DEFAULT_LIMIT_MB = 8192
_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data")
_names = itertools.count()


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
            return numpy_helper.to_array(_inline_tensor(tensor, self.view(offset, length)))
        return np.frombuffer(self.view(offset, length), dtype=dtype).reshape(
            tuple(tensor.dims))

    def inline_tensor(self, tensor: onnx.TensorProto) -> onnx.TensorProto:
        """The tensor holding its own bytes (a copy, for one kept here)."""
        spot = reference(tensor)
        return tensor if spot is None else _inline_tensor(tensor, self.view(*spot))

    def skeleton(self, proto: onnx.ModelProto) -> Path:
        """`proto` written beside the weights (its references resolve there), under a name
        of this process's own; removed when these weights are released."""
        path = self.directory / f"model.{os.getpid()}.{next(_names)}.onnx"
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


# -- what stays in the proto -----------------------------------------------------------------
def is_external(tensor: onnx.TensorProto) -> bool:
    return tensor.data_location == 1  # onnx.TensorProto.EXTERNAL


def reference(tensor: onnx.TensorProto) -> tuple[int, int] | None:
    """(offset, length) of a tensor kept in a weights file, or None."""
    if not is_external(tensor):
        return None
    info = {e.key: e.value for e in tensor.external_data}
    if info.get("location") != FILE:
        return None
    return int(info.get("offset", "0")), int(info.get("length", "0"))


def stays_inline(data_type: int, dims: Sequence[int], nbytes: int) -> bool:
    """Whether a weight stays in the proto: small ones, strings, and the integer tables of
    shapes and indices (support checks and probes read those as constants)."""
    elements = 1
    for d in dims:
        elements *= d
    return (nbytes < INLINE_BYTES or data_type in (dtypes.STRING, dtypes.UNDEFINED)
            or (data_type in dtypes.INTEGER_TYPES and elements <= STRUCTURAL_ELEMENTS))


# -- the proto's mark: where its references resolve ------------------------------------------
def directory_of(proto: onnx.ModelProto) -> Path | None:
    """The directory of the weights `proto` refers to, or None."""
    for prop in proto.metadata_props:
        if prop.key == METADATA_KEY:
            return Path(prop.value)
    return None


def mark(proto: onnx.ModelProto, directory: Path | None) -> None:
    """Name (or with None, stop naming) the directory of `proto`'s weights."""
    kept = [p for p in proto.metadata_props if p.key != METADATA_KEY]
    if directory is None and len(kept) == len(proto.metadata_props):
        return
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    if directory is not None:
        entry = proto.metadata_props.add()
        entry.key, entry.value = METADATA_KEY, str(directory)


def refers(proto: onnx.ModelProto) -> bool:
    """Whether any initializer of `proto` is kept in a weights file."""
    return directory_of(proto) is not None and any(
        reference(t) is not None for t in proto.graph.initializer)


def inline(proto: onnx.ModelProto) -> onnx.ModelProto:
    """`proto` itself when it holds every weight, else a copy that does (its weights read
    from the file) and names no weights directory: for a backend that needs the weights in
    memory, or a model handed to someone else."""
    import onnx

    directory = directory_of(proto)
    if directory is None:
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    mark(copy, None)
    if not any(reference(t) is not None for t in copy.graph.initializer):
        return copy
    path = directory / FILE
    try:
        with path.open("rb") as handle, \
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            for tensor in copy.graph.initializer:
                spot = reference(tensor)
                if spot is not None:
                    tensor.CopyFrom(_inline_tensor(tensor, mapped[spot[0]:spot[0] + spot[1]]))
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot read the model's weights from {str(path)!r}: {err}; load "
                         "the model again") from None
    return copy


def weights_as_feeds(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """`proto` with the weights it keeps in a weights file turned into graph inputs, and
    their values as copy-on-write views of the file (a page is copied only if written):
    for an interpreter that takes weights as arrays, with none of them copied. `proto`
    itself and no values when it refers to no weights file."""
    import numpy as np
    import onnx
    from onnx import helper

    directory = directory_of(proto)
    kept = [t for t in proto.graph.initializer if reference(t) is not None]
    if directory is None or not kept:
        return proto, {}
    light = onnx.ModelProto()
    light.CopyFrom(proto)
    mark(light, None)
    stays = [t for t in light.graph.initializer if reference(t) is None]
    del light.graph.initializer[:]
    light.graph.initializer.extend(stays)
    inputs = {v.name for v in light.graph.input}
    light.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                             for t in kept if t.name not in inputs)
    path = directory / FILE
    try:
        with path.open("rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot read the model's weights from {str(path)!r}: {err}; load "
                         "the model again") from None
    values = {}
    for tensor in kept:
        offset, length = reference(tensor) or (0, 0)
        if tensor.data_type in dtypes.SUB_BYTE_BITS:  # packed: onnx unpacks a copy
            from onnx import numpy_helper

            values[tensor.name] = numpy_helper.to_array(
                _inline_tensor(tensor, mapped[offset:offset + length]))
            continue
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
        values[tensor.name] = np.frombuffer(mapped, dtype, length // dtype.itemsize,
                                            offset).reshape(tuple(tensor.dims))
    return light, values


def _inline_tensor(tensor: onnx.TensorProto, data: bytes | memoryview) -> onnx.TensorProto:
    import onnx

    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    del copy.external_data[:]
    copy.data_location = onnx.TensorProto.DEFAULT
    copy.raw_data = bytes(data)
    return copy


@contextlib.contextmanager
def staged(proto: onnx.ModelProto) -> Iterator[Path | None]:
    """A file holding `proto` beside its weights, for a library that resolves external data
    only from a model's path (OpenVINO); removed when the block ends. None when `proto`
    refers to no weights file (then pass it as bytes)."""
    directory = directory_of(proto)
    if directory is None or not refers(proto):
        yield None
        return
    path = directory / f"part.{os.getpid()}.{threading.get_ident()}.{next(_names)}.onnx"
    atomic_write_bytes(path, proto.SerializeToString(), durable=False)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


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
            tensor.CopyFrom(_inline_tensor(tensor, _read_external(tensor, base)))
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
    if tensor.HasField("raw_data") or not _movable(tensor):
        return len(tensor.raw_data)
    return len(_typed_bytes(tensor))


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
    import onnx

    tensor.ClearField("raw_data")
    for field in _TYPED_FIELDS:
        tensor.ClearField(field)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", FILE), ("offset", str(slot.offset)),
                       ("length", str(slot.length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def _entry(key: str, tensors: list[onnx.TensorProto], slots: list[_Slot], end: int
           ) -> Weights:
    """The cache entry `key`, locked: found, or else written and published."""
    try:
        root = cache_dir("weights")
    except OSError:
        return _temporary(tensors, slots, end)
    found = _open(root / key)
    if found is not None:
        return found
    try:
        _publish(root, key, tensors, slots, end)
    except OSError:  # a full disk or a read-only cache: this process keeps its own copy
        return _temporary(tensors, slots, end)
    found = _open(root / key)
    if found is None:  # evicted the moment it was published: keep a private copy
        return _temporary(tensors, slots, end)
    evict(root, _limit_bytes(), keep=root / key)
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
    with contextlib.suppress(OSError):
        os.utime(entry / _LOCK)  # used: the last to go
    return Weights(entry, lock)


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
        return _open(cache_dir("weights") / key)
    except OSError:
        return None


def adopt(key: str, data: bytes) -> Weights:
    """The cache entry `key` made here from `data`, the bytes of its weights file as another
    machine holds them (a machine that measures candidates of a model loaded elsewhere),
    locked; found instead where it is here already."""
    found = held(key)
    if found is not None:
        return found
    root = cache_dir("weights")

    def write(directory: Path) -> None:
        with (directory / FILE).open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        (directory / _LOCK).write_bytes(b"")
        (directory / _DONE).write_text(json.dumps({"bytes": len(data), "received": True}))

    _published(root, key, write)
    return attach(root / key)


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
        handle.flush()
        os.fsync(handle.fileno())  # the entry is only named once its bytes are on disk
    (directory / _LOCK).write_bytes(b"")
    (directory / _DONE).write_text(json.dumps({"bytes": end, "tensors": len(slots)}))


def _publish(root: Path, key: str, tensors: list[onnx.TensorProto], slots: list[_Slot],
             end: int) -> None:
    _published(root, key, lambda directory: _write(directory, tensors, slots, end))


def _published(root: Path, key: str, write: Callable[[Path], None]) -> None:
    """`write` the entry in a directory of its own and rename it into place: a reader never
    sees half an entry, and a failure leaves nothing behind."""
    fresh = Path(tempfile.mkdtemp(prefix=f".{key}.{os.getpid()}.", dir=root))
    try:
        write(fresh)
        try:
            fresh.rename(root / key)
        except OSError:  # another process published it first
            shutil.rmtree(fresh, ignore_errors=True)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise


def _temporary(tensors: list[onnx.TensorProto], slots: list[_Slot], end: int) -> Weights:
    fresh = Path(tempfile.mkdtemp(prefix="tessera-weights-"))
    try:
        _write(fresh, tensors, slots, end)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    return Weights(fresh, None, temporary=True)


def evict(root: Path, limit: int, keep: Path | None = None) -> list[str]:
    """Remove entries, least recently used first, until the cache holds at most `limit`
    bytes, passing over those a process holds (and `keep`); and the unfinished
    directories of writers that died. The names removed."""
    removed = []
    entries = []
    for path in sorted(root.iterdir()):
        if path.name.startswith("."):
            parts = path.name.split(".")
            if len(parts) > 2 and parts[2].isdigit() and not _alive(int(parts[2])):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path.name)
            continue
        try:
            used = (path / _LOCK).stat().st_mtime
            size = (path / FILE).stat().st_size
        except OSError:
            continue
        entries.append((used, path.name, size))
    total = sum(size for _, _, size in entries)
    for _, name, size in sorted(entries):
        if total <= limit:
            break
        if (keep is None or root / name != keep) and _remove(root / name):
            removed.append(name)
            total -= size
    return removed


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
        gone = entry.with_name(f".{entry.name}.{os.getpid()}.gone")
        try:
            entry.rename(gone)
        except OSError:
            return False
    finally:
        os.close(lock)
    shutil.rmtree(gone, ignore_errors=True)
    return True


def _limit_bytes() -> int:
    raw = os.environ.get("TESSERA_WEIGHTS_CACHE_MB", "")
    try:
        megabytes = float(raw) if raw else _DEFAULT_LIMIT_MB
    except ValueError:
        megabytes = _DEFAULT_LIMIT_MB
    return int(megabytes * 1024 * 1024)


__all__ = ["FILE", "INLINE_BYTES", "METADATA_KEY", "Weights", "adopt", "attach", "directory_of",
           "evict", "held", "inline", "is_external", "mark", "reference", "refers", "staged",
           "stays_inline", "store", "weights_as_feeds"]
