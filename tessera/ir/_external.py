"""How a proto refers to weights kept in a file: ONNX external-data references (location,
offset, length) into `FILE`, and the metadata entry `METADATA_KEY` naming the directory they
resolve in, which every copy and submodel keeps. ONNX Runtime and OpenVINO read the file from
there; `inline` and `weights_as_feeds` give the weights to a backend that needs them in
memory or as arrays. Which weights move into the file at all is `stays_inline`'s rule."""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tessera._private.cache import atomic_write_bytes
from tessera.errors import ModelError
from tessera.ir import _dtypes as dtypes

if TYPE_CHECKING:
    import numpy as np
    import onnx

INLINE_BYTES = 1024  # smaller weights stay in the proto, as ONNX Runtime saves them
STRUCTURAL_ELEMENTS = 4096  # integer tables up to this size stay: shapes, axes, indices
FILE = "weights.bin"
METADATA_KEY = "tessera.weights"
NAMES = itertools.count()  # this process's files beside the weights are named apart


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


def refer(tensor: onnx.TensorProto, offset: int, length: int, location: str = FILE) -> None:
    """Make `tensor` a reference to `length` bytes at `offset` of `location` (by default the
    weights file), its own bytes dropped."""
    import onnx

    tensor.ClearField("raw_data")
    for field in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
        tensor.ClearField(field)
    tensor.data_location = onnx.TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


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
    kept = [t for t in copy.graph.initializer if reference(t) is not None]
    for tensor, read in zip(kept, inline_weights_of(proto, kept), strict=True):
        tensor.CopyFrom(read)
    return copy


def inline_weights_of(proto: onnx.ModelProto, tensors: Sequence[onnx.TensorProto]
                      ) -> Iterator[onnx.TensorProto]:
    """Each of `proto`'s `tensors` holding its bytes (read from the weights file where it
    refers there), one at a time: a few of a large model's weights without a copy of all."""
    directory = directory_of(proto)
    if directory is None or not any(reference(t) is not None for t in tensors):
        yield from tensors
        return
    path = directory / FILE
    try:
        with path.open("rb") as handle, \
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            for tensor in tensors:
                spot = reference(tensor)
                yield tensor if spot is None else \
                    inline_tensor(tensor, mapped[spot[0]:spot[0] + spot[1]])
    except (OSError, ValueError) as err:
        raise ModelError(f"cannot read the model's weights from {str(path)!r}: {err}; load "
                         "the model again") from None


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
                inline_tensor(tensor, mapped[offset:offset + length]))
            continue
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
        values[tensor.name] = np.frombuffer(mapped, dtype, length // dtype.itemsize,
                                            offset).reshape(tuple(tensor.dims))
    return light, values


def inline_tensor(tensor: onnx.TensorProto, data: bytes | memoryview) -> onnx.TensorProto:
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
    path = directory / f"part.{os.getpid()}.{threading.get_ident()}.{next(NAMES)}.onnx"
    atomic_write_bytes(path, proto.SerializeToString(), durable=False)
    try:
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


__all__ = ["FILE", "INLINE_BYTES", "METADATA_KEY", "NAMES", "directory_of", "inline",
           "inline_tensor", "is_external", "mark", "refer", "reference", "refers", "staged",
           "stays_inline", "weights_as_feeds"]
