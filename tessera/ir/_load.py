"""Load an ONNX model: read, guard external data, detect cycles, check, clean up, infer
shapes."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from tessera.errors import ModelError
from tessera.ir import _dtypes as dtypes
from tessera.ir import _filememo
from tessera.ir._constant import constant_tensor
from tessera.ir._fold import fold_constants, initializers_not_inputs
from tessera.ir._graph import topological_order
from tessera.ir._light import weights_as_inputs
from tessera.ir._verify import verify_model

if TYPE_CHECKING:
    import onnx

MIN_OPSET = 7


class ReadModel(NamedTuple):
    proto: onnx.ModelProto
    base: Path | None  # the directory external data may use
    digest: str | None  # sha1 of the bytes read (None for a ModelProto)
    file: tuple[Path, os.stat_result] | None  # the file read, as stat'ed while reading it
    checked: bool  # an earlier load of this unchanged file passed every check


def read_model(source: Any) -> ReadModel:
    """A ModelProto from a path, bytes or ModelProto, with what its compiled caches are keyed
    on. A file that an earlier load checked is not hashed again (see `_filememo`)."""
    import hashlib

    import onnx
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    if isinstance(source, onnx.ModelProto):
        return ReadModel(source, None, None, None, False)
    file, remembered = None, None
    if isinstance(source, bytes | bytearray | memoryview):
        data, base = bytes(source), None
    elif isinstance(source, str | os.PathLike):
        path = Path(source)
        try:
            with path.open("rb") as handle:
                before = os.fstat(handle.fileno())
                data = handle.read()
                after = os.fstat(handle.fileno())
        except OSError as err:
            raise ModelError(f"cannot read model file {str(path)!r}: {err.strerror}") from None
        base = path.resolve().parent
        if _filememo.stat_key(before) == _filememo.stat_key(after):  # not written meanwhile
            file = (path, after)
            remembered = _filememo.recall(path, after)
    else:
        raise ModelError(
            f"cannot load a model from {type(source).__name__}; pass a path, bytes or ModelProto"
        )
    if not data:
        raise ModelError("the model is empty (0 bytes)")
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise ModelError(
            f"the model is unreadable or truncated (not a valid ONNX protobuf): {err}"
        ) from None
    if not model.HasField("graph"):
        raise ModelError("the model has no graph; the file is not an ONNX model or is truncated")
    digest = remembered or hashlib.sha1(data, usedforsecurity=False).hexdigest()
    return ReadModel(model, base, digest, file, remembered is not None)


def check_text(model: onnx.ModelProto) -> None:
    """ONNX strings are UTF-8; protobuf hands back bytes for those that are not, which would
    fail deep inside onnx.checker (as a UnicodeDecodeError) or later as a node's name."""
    found = _invalid_text(model, ())
    if found is not None:
        path, value = found
        where = "".join(f".{name}" + (f"[{k}]" if k >= 0 else "") for name, k in path)
        raise ModelError(
            f"the model's field {where[1:]} is not valid UTF-8 ({value[:40]!r}), as ONNX "
            "requires of every string; re-export the model, or set that field to text "
            "(onnx.load, assign a str, onnx.save)")


_Path = tuple[tuple[str, int], ...]  # (field, index in it, or -1 for a singular field)


def _invalid_text(message: Any, path: _Path) -> tuple[_Path, bytes] | None:
    """The first string field holding bytes, and its path. Bytes fields (weights) are never
    read: this walks the structure only (10 ms for BERT-base)."""
    for field in message.DESCRIPTOR.fields:
        if field.type == field.TYPE_STRING:
            value = getattr(message, field.name)
            for k, item in enumerate(value) if field.is_repeated else ((-1, value),):
                if isinstance(item, bytes):
                    return (*path, (field.name, k)), item
        elif field.type == field.TYPE_MESSAGE:
            if field.is_repeated:
                children = enumerate(getattr(message, field.name))
            elif message.HasField(field.name):
                children = enumerate((getattr(message, field.name),), -1)
            else:
                continue
            for k, child in children:
                found = _invalid_text(child, (*path, (field.name, k)))
                if found is not None:
                    return found
    return None


def has_external_data(model: onnx.ModelProto) -> bool:
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in _get_all_tensors(model))


def load_external_data(model: onnx.ModelProto, base: Path | None, *,
                       keep_initializers: bool = False) -> None:
    """Check every external tensor's location, refusing those that leave the model's
    directory, and load their data; with `keep_initializers`, the graph's initializers stay
    references (the weights store moves them, `_weights.store`)."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors, load_external_data_for_tensor

    kept = len(model.graph.initializer) if keep_initializers else 0  # the first yielded
    for index, tensor in enumerate(_get_all_tensors(model)):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location", "")
        if base is None:
            raise ModelError(
                f"tensor {tensor.name!r} stores its data in {location!r}, but the model was not "
                "loaded from a file; load it from its path"
            )
        target = (base / location).resolve()
        if not location or os.path.isabs(location) or not target.is_relative_to(base):
            raise ModelError(
                f"tensor {tensor.name!r} points its external data at {location!r}, outside the "
                f"model's directory {str(base)!r}; refusing to read it"
            )
        if not target.is_file():
            raise ModelError(
                f"external data file {location!r} of tensor {tensor.name!r} is missing"
            )
        if index < kept:
            continue
        try:
            load_external_data_for_tensor(tensor, str(base))
        except (OSError, ValueError) as err:
            raise ModelError(
                f"cannot read external data of tensor {tensor.name!r}: {err}"
            ) from None
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def external_digest(model: onnx.ModelProto, base: Path, digest: str | None,
                    clock: _filememo.WallClock = time.time_ns) -> str:
    """A digest of what a model with external data computes with: the model file's bytes
    and every data file its initializers name (each remembered while unchanged, as the
    model file is)."""
    import hashlib

    import onnx

    locations = sorted({e.value for t in model.graph.initializer
                        if t.data_location == onnx.TensorProto.EXTERNAL
                        for e in t.external_data if e.key == "location"})
    combined = hashlib.sha1(usedforsecurity=False)
    combined.update((digest or "").encode())
    for location in locations:
        path = base / location
        stat = path.stat()
        known = _filememo.recall(path, stat)
        if known is None:
            found = hashlib.sha1(usedforsecurity=False)
            with path.open("rb") as handle:
                while chunk := handle.read(16 << 20):
                    found.update(chunk)
            known = found.hexdigest()
            if _filememo.stat_key(path.stat()) == _filememo.stat_key(stat):
                _filememo.remember(path, stat, known, clock)
        combined.update(f"\x00{location}\x00{known}".encode())
    return combined.hexdigest()


def upgrade_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """Models older than MIN_OPSET are converted up to it, as ONNX Runtime users expect old
    models to load; a model the converter cannot take is reported by check_opset."""
    import onnx

    versions = {op.domain: op.version for op in model.opset_import}
    version = versions.get("", versions.get("ai.onnx"))
    if version is None or version >= MIN_OPSET:
        return model
    try:
        return onnx.version_converter.convert_version(model, MIN_OPSET)
    except Exception:  # check_opset then names the problem
        return model


def check_opset(model: onnx.ModelProto) -> int:
    import onnx

    newest = onnx.defs.onnx_opset_version()
    versions = {op.domain: op.version for op in model.opset_import}
    version = versions.get("", versions.get("ai.onnx"))
    if version is None:  # only other domains (ai.onnx.ml): no ONNX op to judge by version
        return int(newest)
    if not MIN_OPSET <= version <= newest:
        raise ModelError(
            f"unsupported opset {version}: tessera supports ai.onnx opsets {MIN_OPSET} to "
            f"{newest}, and onnx.version_converter could not convert it"
        )
    return int(version)


def check_acyclic(model: onnx.ModelProto) -> None:
    """Reject cycles before the checker, which only says 'not topologically sorted'."""
    topological_order(model.graph.node)


def set_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> None:
    inputs = {value.name: value for value in model.graph.input}
    del model.graph.value_info[:]  # inferred for the old shapes; inference redoes it
    for name, dims in shapes.items():
        if name not in inputs:
            raise ModelError(f"--input-shape names {name!r}, which is not a model input "
                             f"(inputs: {', '.join(inputs)})")
        shape = inputs[name].type.tensor_type.shape
        if shape.dim and len(shape.dim) != len(dims):
            raise ModelError(f"input {name!r} has rank {len(shape.dim)}, but --input-shape gives "
                             f"{len(dims)} dims")
        del shape.dim[:]
        for size in dims:
            if int(size) < 0:
                raise ModelError(f"input {name!r}: dimension {size} is negative")
            shape.dim.add().dim_value = int(size)


def name_unknown_dims(model: onnx.ModelProto) -> None:
    """Give each input dimension with neither a size nor a name the name `input.axis`, so
    that a shape profile and an error can name it."""
    initializers = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value") and not dim.dim_param:
                dim.dim_param = f"{value.name}.{axis}"


def with_input_sizes(model: onnx.ModelProto, sizes: Mapping[str, int]) -> onnx.ModelProto:
    """A copy of `model` whose input and output dimensions named in `sizes` have those
    sizes, its inferred shapes cleared (shape inference fills them again)."""
    import onnx

    copy = onnx.ModelProto()
    graph = model.graph
    copy.CopyFrom(onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import,
                                  producer_name=model.producer_name,
                                  metadata_props=model.metadata_props))
    copy.graph.name = graph.name
    copy.graph.node.extend(graph.node)
    copy.graph.input.extend(graph.input)
    copy.graph.output.extend(graph.output)
    copy.graph.initializer.extend(graph.initializer)
    copy.graph.sparse_initializer.extend(graph.sparse_initializer)
    copy.functions.extend(model.functions)  # model-local ones: regions kept whole
    del copy.graph.value_info[:]
    for value in (*copy.graph.input, *copy.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in sizes:
                size = int(sizes[dim.dim_param])
                dim.Clear()
                dim.dim_value = size
    return copy


MAX_DIM = 2**31 - 1  # what ONNX Runtime and OpenVINO index with
MAX_ELEMENTS = 2**34  # 64 GiB of float32: beyond any tensor this machine class can hold


def check_declared_sizes(model: onnx.ModelProto) -> None:
    """Refuse absurd declared sizes before anything allocates a tensor of that shape."""
    graph = model.graph
    declared = [(v.name, [d.dim_value for d in v.type.tensor_type.shape.dim
                          if d.HasField("dim_value")])
                for v in (*graph.input, *graph.output, *graph.value_info)]
    declared += [(t.name, list(t.dims)) for t in graph.initializer]
    for name, dims in declared:
        too_big = [d for d in dims if d > MAX_DIM]
        elements = 1
        for d in dims:
            elements *= max(d, 1)
        if too_big or elements > MAX_ELEMENTS:
            raise ModelError(
                f"tensor {name!r} declares dimension(s) {dims}: "
                f"{'a dimension above 2^31-1' if too_big else f'{elements} elements'} is "
                "beyond what any backend can allocate; fix the model's shapes")


def check_static_inputs(model: onnx.ModelProto) -> None:
    initializers = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        shape = value.type.tensor_type.shape
        dynamic = [d.dim_param or "?" for d in shape.dim if not d.HasField("dim_value")]
        if dynamic or not value.type.tensor_type.HasField("shape"):
            example = ",".join(str(d.dim_value) if d.HasField("dim_value") else "1"
                               for d in shape.dim)
            raise ModelError(
                f"input {value.name!r} has a dynamic shape ({', '.join(dynamic) or 'unknown'}); "
                f"fix it with --input-shape {value.name}={example}"
            )


def check_and_infer(model: onnx.ModelProto, *, weights_checked: bool = False,
                    base: Path | None = None) -> onnx.ModelProto:
    """onnx.checker and shape inference, run on a copy whose weights are graph inputs of the
    same type and shape (for BERT-base that spares serialising 440 MB twice); the inferred
    types are then written into `model`. The weights' sizes are checked apart, unless an
    earlier load of the same file did (`weights_checked`)."""
    import onnx

    light, weights = weights_as_inputs(model)
    try:
        onnx.checker.check_model(light)
    except onnx.checker.ValidationError as err:
        raise ModelError(f"the model fails onnx.checker: {_first_lines(str(err))}") from None
    if not weights_checked:
        _check_tensor_sizes(weights, base)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, check_type=True, strict_mode=True,
                                                     data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError) as err:
        if not _inside_a_function_body(str(err)):
            raise ModelError(f"shape inference failed: {_first_lines(str(err))}") from None
        # onnx's own function bodies fail strict inference (MeanVarianceNormalization with
        # its default axes), and runtimes never expand them: what it could infer is kept
        inferred = onnx.shape_inference.infer_shapes(light, check_type=True,
                                                     strict_mode=False, data_prop=True)
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    return model


_FAILED_IN = re.compile(r"Inference error\(s\): \(op_type:(\w+)")


def _inside_a_function_body(message: str) -> bool:
    """Whether strict inference failed inside the body of an op onnx defines as a function
    (an error nested in the op's own), not on the model's nodes themselves."""
    import onnx

    found = _FAILED_IN.findall(message)
    if len(found) < 2:
        return False
    try:
        schema: Any = onnx.defs.get_schema(found[0])
    except onnx.defs.SchemaError:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


# strings, complex and packed types: their sizes are not counted here
_NOT_COUNTED = frozenset({dtypes.UNDEFINED, dtypes.STRING, *dtypes.COMPLEX, *dtypes.SUB_BYTE_BITS})


def _check_tensor_sizes(weights: list[Any], base: Path | None = None) -> None:
    """What onnx.checker would say of the weights left out of its copy (and of external
    data: that its file holds the bytes its shape needs)."""
    import numpy as np
    import onnx

    for tensor in weights:
        if tensor.data_type in _NOT_COUNTED:
            continue
        elements = int(np.prod(tensor.dims, dtype=np.int64)) if tensor.dims else 1
        external = tensor.data_location == onnx.TensorProto.EXTERNAL
        if tensor.HasField("raw_data") or external:
            try:
                itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
                                    ).itemsize
            except (KeyError, TypeError, ValueError):
                continue
            held = _external_size(tensor, base) if external else len(tensor.raw_data)
            needed, unit = elements * itemsize, "bytes"
        else:
            held = max(len(tensor.float_data), len(tensor.int32_data), len(tensor.int64_data),
                       len(tensor.double_data), len(tensor.uint64_data))
            needed, unit = elements, "values"
        if held != needed:
            raise ModelError(f"the model fails onnx.checker: initializer {tensor.name!r} "
                             f"holds {held} {unit}, but its declared shape "
                             f"{list(tensor.dims)} needs {needed}")


def _external_size(tensor: onnx.TensorProto, base: Path | None) -> int:
    """The bytes an external tensor's file holds for it (its `length`, cut at the file's end)."""
    info = {entry.key: entry.value for entry in tensor.external_data}
    offset = int(info.get("offset", "0") or 0)
    try:
        available = (base / info.get("location", "")).stat().st_size - offset \
            if base is not None else None
    except OSError:
        available = None
    length = int(info["length"]) if info.get("length") else available
    if length is None:
        return 0
    return min(length, available) if available is not None else length


def _first_lines(text: str) -> str:
    return " ".join(line.strip() for line in text.strip().splitlines()[:4])


def simplify(model: onnx.ModelProto, *, verify: bool = False, base: Path | None = None
             ) -> onnx.ModelProto:
    """Cleanups every backend does anyway, done once before placement: Constant nodes become
    initializers and pass-through Identity nodes go. Neither changes a value; both spare the
    placement search source nodes that only multiply its states (MobileNetV2 exports 70
    Constant nodes for its 170 real ones). With `verify`, the IR verifier runs after each
    pass on a model that passed it before the first (an input that does not is reported by
    the checks after cleanup, in their own words). `base` is where external data resolves,
    for the weights constant folding reads."""
    verify = verify and _verifies(model)
    initializers_not_inputs(model)
    for name, cleanup in _CLEANUPS:
        cleanup(model, base)
        if verify:
            verify_model(model, when=f"after the graph cleanup {name!r}")
    return model


def _verifies(model: onnx.ModelProto) -> bool:
    try:
        verify_model(model)
    except ModelError:
        return False
    return True


def _fold_constant_nodes(graph: onnx.GraphProto) -> None:
    kept = []
    for node in graph.node:
        tensor = constant_tensor(node)
        if tensor is None:
            kept.append(node)
        else:
            graph.initializer.append(tensor)
    if len(kept) != len(graph.node):
        del graph.node[:]
        graph.node.extend(kept)


def _drop_identities(graph: onnx.GraphProto) -> None:
    """Consumers of an Identity read its input instead; Identities that produce a graph
    output stay (the output's name is part of the model's interface)."""
    outputs = {value.name for value in graph.output}
    rename: dict[str, str] = {}
    kept = []
    for node in graph.node:
        if node.op_type == "Identity" and node.domain in ("", "ai.onnx") and \
                node.output[0] not in outputs and node.input and node.input[0]:
            rename[node.output[0]] = rename.get(node.input[0], node.input[0])
        else:
            kept.append(node)
    if not rename:
        return
    del graph.node[:]
    graph.node.extend(kept)
    _rename_inputs(graph, rename)
    removed = set(rename)
    alive = [v for v in graph.value_info if v.name not in removed]
    del graph.value_info[:]
    graph.value_info.extend(alive)


def _rename_inputs(graph: onnx.GraphProto, rename: Mapping[str, str]) -> None:
    """Also inside subgraphs, which may read outer values by name."""
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in rename:
                node.input[k] = rename[name]
        for attr in node.attribute:
            for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
                _rename_inputs(sub, rename)


def _fold_constant_nodes_of(model: onnx.ModelProto, base: Path | None) -> None:
    _fold_constant_nodes(model.graph)


def _drop_identities_of(model: onnx.ModelProto, base: Path | None) -> None:
    _drop_identities(model.graph)


def _fold_constants(model: onnx.ModelProto, base: Path | None) -> None:
    fold_constants(model, base)


_CLEANUPS = (("Constant nodes to initializers", _fold_constant_nodes_of),
             ("drop pass-through Identity nodes", _drop_identities_of),
             ("fold nodes of constant inputs", _fold_constants))
