"""Saved artifacts: one `.tess` file (a zip) holding the plan, the config, the source model,
every partition's ONNX submodel, the backends' compiled caches and a manifest that records
versions and a SHA-256 for every entry.

- Weights are stored once: each initializer of 1 KiB or more goes to `tensors/<sha256>`,
  and the ONNX files refer to it by that name, so partitions share the source's weights.
- With the flow option link-params=false those tensors go instead to one file beside the
  artifact, `<artifact>.weights`: concatenated, each aligned, their offsets, lengths and
  SHA-256s in the manifest.
- Loading reads no weight into memory: tensors are hashed in pieces, then copied in pieces
  into a weights entry of the cache (`tessera.ir._weights`, found there on the next load),
  and the ONNX entries come back as skeletons referring to it. A loaded decoder's peak
  memory is then its compiled form's, not the source model's weights twice over.
- Writing goes to temporary files beside the targets, then renames (the weights file first,
  then the artifact that names it): no half-written file is ever visible.
- Loading checks every checksum, never runs code from the file (no pickle, no shared
  libraries) and never measures.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
import warnings
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tessera import backends
from tessera._private.cache import atomic_file
from tessera._private.version import __version__
from tessera.backends import CacheFormat
from tessera.config import CompilationConfig
from tessera.errors import ArtifactError
from tessera.ir import extract_submodel
from tessera.ir._weights import (
    FILE,
    Weights,
    directory_of,
    mark,
    refer,
    reference,
    refers,
    store,
)
from tessera.placement.record._costdb import machine
from tessera.runtime._executor import widens_float16

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from tessera.backends import Compiled, ThreadPolicy
    from tessera.ir import Model
    from tessera.placement import Plan

FORMAT, VERSION = "tessera-artifact", 1
MANIFEST = "manifest.json"
_SHARED_BYTES = 1024  # initializers at least this big are stored once, by content
_CHUNK = 16 << 20  # bytes hashed at a time
_ALIGNMENT = 64  # of each tensor in a weights file: any dtype's views stay aligned
Blob = bytes | memoryview  # a tensor's bytes, or a view of the model's weights file


class Saved(Protocol):
    """A compiled model as an artifact saves it (`CompiledModel`)."""

    model: Model
    config: CompilationConfig
    plan: Plan
    parts: list[Compiled]
    policy: ThreadPolicy


class FallbackWarning(UserWarning):
    """An artifact's partitions were re-placed because their backend is missing or changed."""


# -- writing -------------------------------------------------------------------------------
def save(compiled: Saved, path: Path) -> Path:
    if path.is_dir():
        raise ArtifactError(f"{path} is a directory; give a file name such as model.tess")
    entries: dict[str, Blob] = {}
    tensors: dict[str, Blob] = {}
    entries["model.onnx"] = _externalize(compiled.model.proto, tensors)
    partitions = []
    for i, (part, built) in enumerate(zip(compiled.plan.partitions, compiled.parts,
                                          strict=True)):
        name = f"partitions/{i:03d}.onnx"
        # a lower-precision partition keeps its prepared form: loading quantizes nothing
        submodel = built.prepared_form() or extract_submodel(
            compiled.model, compiled.model.node_set(part.nodes),
            widen_float16=widens_float16(compiled.plan))
        entries[name] = _externalize(submodel, tensors)
        backend = backends.get(built.backend)
        record: dict[str, Any] = {"target": str(part.target), "built_as": str(built.target),
                                  "device": None if part.device is None else str(part.device),
                                  "submodel": name, "cache": None, "cache_format": None}
        try:
            cache = backend.export_cache(built)
        except Exception as err:  # a cache is an optimisation: the artifact stays valid
            warnings.warn(f"{built.backend} could not export its compiled cache for partition "
                          f"{i}; it will be recompiled on load ({type(err).__name__}: {err})",
                          stacklevel=3)
            cache = None
        if cache is not None:
            record["cache"] = f"caches/{i:03d}.{built.backend}"
            record["cache_format"] = backend.cache_format
            entries[record["cache"]] = (_externalize_bytes(cache, tensors)
                                        if backend.cache_format == CacheFormat.ONNX else cache)
        partitions.append(record)
    linked = compiled.config.options.link_params
    if linked:
        entries.update(tensors)
    entries["plan.json"] = compiled.plan.to_json().encode()
    entries["config.json"] = compiled.config.to_json().encode()
    used = compiled.plan.kinds
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "tessera": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "backends": {name: backends.get(name).is_available().version for name in used},
        "thread_policy": compiled.policy.name,
        "partitions": partitions,
        "files": {name: _sha(data) for name, data in sorted(entries.items())},
    }
    layout = None if linked else _weights_layout(f"{path.name}.weights", tensors)
    if layout is not None:
        manifest["weights"] = layout
    manifest["checksum"] = _sha(_canonical(manifest))
    entries = {MANIFEST: json.dumps(manifest, indent=1).encode(), **entries}
    if layout is None:
        with atomic_file(path) as handle:
            _write_zip(handle, entries)
    else:
        _write_beside(path, entries, tensors, layout)
    return path


def _write_zip(handle: Any, entries: dict[str, Blob]) -> None:
    with zipfile.ZipFile(handle, "w") as archive:
        for name, data in entries.items():
            # weights barely compress: store them; compress the rest
            method = zipfile.ZIP_STORED if name.startswith("tensors/") else zipfile.ZIP_DEFLATED
            archive.writestr(name, data, compress_type=method)


def _weights_layout(file: str, tensors: Mapping[str, Blob]) -> dict[str, Any]:
    """Where each tensor goes in the weights file: what the manifest records of it. A
    tensor's name is `tensors/<its SHA-256>`."""
    index, end = {}, 0
    for name, data in tensors.items():
        offset = -(-end // _ALIGNMENT) * _ALIGNMENT
        index[name] = {"offset": offset, "length": len(data),
                       "sha256": name.removeprefix("tensors/")}
        end = offset + len(data)
    return {"file": file, "size": end, "alignment": _ALIGNMENT, "tensors": index}


def _write_beside(path: Path, entries: dict[str, Blob], tensors: Mapping[str, Blob],
                  layout: dict[str, Any]) -> None:
    """The artifact and its weights file, each through a temporary file; the weights file is
    renamed into place first, so the artifact never names weights that are not there yet."""
    import io

    archive = io.BytesIO()  # without its weights the archive is small: built before any file
    _write_zip(archive, entries)
    with atomic_file(path) as handle:
        handle.write(archive.getbuffer())
        with atomic_file(path.with_name(layout["file"])) as weights:
            position = 0
            for name, data in tensors.items():
                offset = layout["tensors"][name]["offset"]
                weights.write(bytes(offset - position))
                weights.write(data)
                position = offset + len(data)


def _externalize(model: onnx.ModelProto, tensors: dict[str, Blob], *,
                 owned: bool = False) -> bytes:
    """`model` serialised with each initializer of at least `_SHARED_BYTES` moved into
    `tensors`, by content. `model` itself is left as it is unless `owned`; its weights are
    never copied but once, into `tensors` (a 0.5B decoder's int8 form: 0.5 GB, not 1.5)."""
    import onnx
    from onnx import numpy_helper

    stored = _stored(model)
    copy = model if owned else _bare_copy(model)
    mark(copy, None)  # the artifact holds the weights itself
    for source, tensor in zip(model.graph.initializer, copy.graph.initializer, strict=True):
        spot = reference(tensor)
        if spot is not None and stored is not None:  # in the model's weights file
            data: Blob = stored[spot[0]:spot[0] + spot[1]]
        else:
            if tensor.data_type == onnx.TensorProto.STRING:
                continue
            if not source.HasField("raw_data"):
                if _inline_size(tensor) < _SHARED_BYTES:
                    continue
                tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor),
                                                        tensor.name))
            data = (tensor if tensor.HasField("raw_data") else source).raw_data
        if len(data) < _SHARED_BYTES:
            if not tensor.HasField("raw_data") and isinstance(data, bytes):
                tensor.raw_data = data  # small: kept in the serialised model
            continue
        name = f"tensors/{_sha(data)}"
        tensors.setdefault(name, data)
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        del tensor.external_data[:]
        for key, value in (("location", name), ("length", str(len(data)))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
    return bytes(copy.SerializeToString())


def _bare_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` without its initializers' raw bytes: `_externalize` reads each
    from `model` when it takes it, where `CopyFrom` would copy them all first."""
    import onnx

    copy = onnx.ModelProto()
    _fields_but(model, copy, "graph")
    _fields_but(model.graph, copy.graph, "initializer")
    for tensor in model.graph.initializer:
        _fields_but(tensor, copy.graph.initializer.add(), "raw_data")
    return copy


def _fields_but(source: Any, target: Any, skipped: str) -> None:
    """Every field of `source` set on `target`, but `skipped`."""
    for field_, value in source.ListFields():
        if field_.name == skipped:
            continue
        if field_.is_repeated:
            getattr(target, field_.name).extend(value)
        elif field_.message_type is not None:
            getattr(target, field_.name).CopyFrom(value)
        else:
            setattr(target, field_.name, value)


def _stored(model: onnx.ModelProto) -> memoryview | None:
    """The model's weights file, mapped (its tensors are written from views of it)."""
    import mmap

    directory = directory_of(model)
    if directory is None or not refers(model):  # a form holding its weights (int8)
        return None
    try:
        with (directory / FILE).open("rb") as handle:
            return memoryview(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
    except (OSError, ValueError) as err:
        raise ArtifactError(f"cannot read the model's weights from {str(directory)!r}: "
                            f"{err}; compile the model again") from None


def _externalize_bytes(data: bytes, tensors: dict[str, Blob]) -> bytes:
    import onnx

    return _externalize(onnx.load_from_string(data), tensors, owned=True)


def _inline_size(tensor: onnx.TensorProto) -> int:
    return 4 * max(len(tensor.float_data), len(tensor.int32_data), len(tensor.int64_data) * 2,
                   len(tensor.double_data) * 2)


# -- reading -------------------------------------------------------------------------------
@dataclass
class Artifact:
    """An artifact's verified contents. `files` holds its entries but the weights: those
    stay where they are (`sources`: by tensor name, the file, offset and length of their
    bytes, in the zip itself or in a weights file beside it), read into a weights entry
    (`tessera.ir._weights`) once, on the first `model`. `weights` are the tensors of a
    weights file kept beside it (link-params=false), as views of that file memory-mapped."""

    path: Path
    manifest: dict[str, Any]
    files: dict[str, bytes]
    weights: Mapping[str, np.ndarray] = field(default_factory=dict)
    sources: Mapping[str, tuple[Path, int, int]] = field(default_factory=dict)
    _held: tuple[Weights | None, dict[str, tuple[int, int] | bytes]] | None = field(
        default=None, init=False, repr=False)

    def model(self, name: str) -> onnx.ModelProto:
        """The ONNX entry `name`: a skeleton whose weights refer to the weights entry of
        this artifact's tensors (`held`), so none is read into memory here."""
        import onnx

        where = f"{self.path}:{name}"
        try:
            proto = onnx.load_from_string(self.files[name])
        except Exception as err:
            raise ArtifactError(f"{where} is not a valid ONNX model: {err}") from None
        held, slots = self._entry()
        pointed = False
        for tensor in proto.graph.initializer:
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                continue
            location = {e.key: e.value for e in tensor.external_data}.get("location", "")
            slot = slots.get(location)
            if isinstance(slot, tuple):
                refer(tensor, *slot)
                pointed = True
                continue
            content = slot if slot is not None else self.files.get(location,
                                                                     self.weights.get(location))
            if content is None:  # never read a path outside the artifact
                raise ArtifactError(f"{where}: weight {tensor.name!r} refers to {location!r}, "
                                    "which the artifact does not contain")
            tensor.raw_data = content if isinstance(content, bytes) else content.tobytes()
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
        if pointed and held is not None:
            mark(proto, held.directory)
        return proto

    @property
    def held(self) -> Weights | None:
        """The weights entry the skeletons of `model` refer to, locked while this lives;
        None before the first `model`, or when no tensor is large enough to keep apart."""
        return self._held[0] if self._held is not None else None

    def _entry(self) -> tuple[Weights | None, dict[str, tuple[int, int] | bytes]]:
        """The weights entry of every tensor in `sources` (found in the cache, or copied
        there from the artifact in pieces) and where each tensor is in it: (offset, length),
        or its bytes for one small enough to stay in a proto."""
        if self._held is None:
            self._held = _weights_entry(self.path.parent, self.sources)
        return self._held

    @property
    def plan(self) -> Plan:
        from tessera.placement import Plan

        return Plan.from_json(self.files["plan.json"].decode())

    @property
    def config(self) -> CompilationConfig:
        return CompilationConfig.from_json(self.files["config.json"].decode())


def read(path: str | os.PathLike[str]) -> Artifact:
    """The artifact at `path`, every entry checked against the manifest. Entries are hashed
    in pieces; the weights stored in the zip are not read into memory (`Artifact.sources`)."""
    where = Path(path)
    if not where.is_file():
        raise ArtifactError(f"no artifact at {where}; save one with `tessera compile ... -o "
                            f"{where.name}` or CompiledModel.save")
    try:
        with zipfile.ZipFile(where) as archive:
            manifest = _manifest(where, archive)
            listed = manifest.get("files", {})
            files, sources, found = {}, {}, {}
            for info in archive.infolist():
                if info.filename == MANIFEST:
                    continue
                if info.filename.startswith("tensors/") and \
                        info.compress_type == zipfile.ZIP_STORED:
                    found[info.filename] = _streamed_sha(archive, info)
                    sources[info.filename] = (where, _data_offset(where, info), info.file_size)
                else:
                    files[info.filename] = archive.read(info)
                    found[info.filename] = _sha(files[info.filename])
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise ArtifactError(f"{where} is not a tessera artifact (not a readable zip: {err}); "
                            "recompile the model") from None
    for name in sorted(set(listed) | set(found)):
        if name not in found:
            raise ArtifactError(f"{where}: entry {name} is missing; the file is damaged")
        if name not in listed or found[name] != listed[name]:
            raise ArtifactError(f"{where}: entry {name} fails its SHA-256 check; the file is "
                                "damaged or was edited: recompile the model")
    weights: dict[str, np.ndarray] = {}
    if "weights" in manifest:
        weights = _map_weights(where, manifest["weights"])
        beside = where.parent / manifest["weights"]["file"]
        for tensor, entry in manifest["weights"]["tensors"].items():
            sources[tensor] = (beside, int(entry["offset"]), int(entry["length"]))
    return Artifact(where, manifest, files, weights, sources)


def _manifest(where: Path, archive: zipfile.ZipFile) -> dict[str, Any]:
    """The artifact's manifest, checked: format, version and its own checksum."""
    try:
        manifest: dict[str, Any] = json.loads(archive.read(MANIFEST))
    except (KeyError, ValueError):
        raise ArtifactError(f"{where} has no readable {MANIFEST}; it is not a tessera "
                            "artifact or it is damaged: recompile the model") from None
    if manifest.get("format") != FORMAT:
        raise ArtifactError(f"{where} is not a tessera artifact (format "
                            f"{manifest.get('format')!r})")
    if manifest.get("version") != VERSION:
        raise ArtifactError(f"{where} has artifact format version {manifest.get('version')}; "
                            f"this tessera ({__version__}) reads version {VERSION}: recompile "
                            "the model with this tessera")
    claimed = manifest.pop("checksum", None)
    if claimed != _sha(_canonical(manifest)):
        raise ArtifactError(f"{where}: the manifest's checksum does not match; the file is "
                            "damaged: recompile the model")
    return manifest


def _streamed_sha(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> str:
    digest = hashlib.sha256()
    with archive.open(info) as entry:
        while chunk := entry.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _data_offset(where: Path, info: zipfile.ZipInfo) -> int:
    """Where a stored entry's bytes start in the zip: after its local header, whose name
    and extra field lengths may differ from the central directory's."""
    with where.open("rb") as handle:
        handle.seek(info.header_offset)
        header = handle.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"entry {info.filename} has no local header")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    return int(info.header_offset) + 30 + int(name_length) + int(extra_length)


def _weights_entry(base: Path, sources: Mapping[str, tuple[Path, int, int]]
                   ) -> tuple[Weights | None, dict[str, tuple[int, int] | bytes]]:
    """Every tensor of `sources` moved, in pieces, into one weights entry (`_weights.store`:
    found in the cache when the same tensors were loaded before); where each one went."""
    import onnx

    if not sources:
        return None, {}
    bundle = onnx.ModelProto()
    for name, (file, offset, length) in sources.items():
        tensor = bundle.graph.initializer.add()
        tensor.name, tensor.data_type = name, onnx.TensorProto.UINT8
        tensor.dims.append(length)
        refer(tensor, offset, length, file.name)
    # tensors are named by their SHA-256: their names are what the entry holds
    held = store(bundle, base, f"artifact tensors {_sha(json.dumps(list(sources)).encode())}")
    return held, {t.name: reference(t) or t.raw_data for t in bundle.graph.initializer}


def _map_weights(where: Path, layout: Any) -> dict[str, np.ndarray]:
    """The tensors of the weights file beside `where`, memory-mapped, each checked against
    its SHA-256 (hashing reads the pages through the map: nothing is copied)."""
    import numpy as np

    damaged = (f"{where}: its manifest's weights entry is malformed; the artifact is damaged: "
               "recompile the model")
    try:
        name, size, tensors = layout["file"], int(layout["size"]), dict(layout["tensors"])
    except (KeyError, TypeError, ValueError):
        raise ArtifactError(damaged) from None
    if not isinstance(name, str) or Path(name).name != name or name in (".", ".."):
        raise ArtifactError(damaged)  # only ever a file beside the artifact
    file = where.parent / name
    fix = (f"put the {name} saved with it beside {where.name}, or recompile and save again "
           "(link-params=true keeps the weights inside the artifact)")
    if not file.is_file():
        raise ArtifactError(f"{where} keeps its weights in {file} (saved with "
                            f"link-params=false), which is missing: {fix}")
    if file.stat().st_size != size:
        raise ArtifactError(f"weights file {file} holds {file.stat().st_size} bytes, but "
                            f"{where.name} expects {size}: it is damaged or from another "
                            f"save: {fix}")
    try:
        mapped = np.memmap(file, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
    except (OSError, ValueError) as err:
        raise ArtifactError(f"cannot map weights file {file}: {err}") from None
    views = {}
    for tensor, entry in tensors.items():  # in file order
        try:
            offset, length, sha = int(entry["offset"]), int(entry["length"]), entry["sha256"]
        except (KeyError, TypeError, ValueError):
            raise ArtifactError(damaged) from None
        view = mapped[max(offset, 0):offset + length]
        if offset < 0 or len(view) != length or \
                hashlib.sha256(view.data).hexdigest() != sha:
            raise ArtifactError(f"weights file {file}: tensor {tensor} (bytes {offset} to "
                                f"{offset + length}) fails its SHA-256 check; the file is "
                                f"damaged or from another save: {fix}")
        views[tensor] = view
    return views


def _sha(data: Blob) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(manifest: dict[str, Any]) -> bytes:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


__all__ = ["Artifact", "FallbackWarning", "read", "save"]
