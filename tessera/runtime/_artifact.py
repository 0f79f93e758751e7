"""Saved artifacts: one `.tess` file (a zip) holding the plan, the config, the source model,
every partition's ONNX submodel, the backends' compiled caches and a manifest that records
versions and a SHA-256 for every entry.

- Weights are stored once: each initializer of 1 KiB or more goes to `tensors/<sha256>`,
  and the ONNX files refer to it by that name, so partitions share the source's weights.
- Writing goes to a temporary file beside the target, then a rename: no half-written file.
- Loading checks every checksum, never runs code from the file (no pickle, no shared
  libraries) and never measures.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tessera import __version__, backends
from tessera._private.cache import atomic_file
from tessera.backends._threads import ThreadPolicy, core_budget
from tessera.config import CompilationConfig
from tessera.errors import ArtifactError, TesseraError
from tessera.target import Target

if TYPE_CHECKING:
    import onnx

    from tessera.backends import Compiled
    from tessera.ir import Model
    from tessera.placement import Plan
    from tessera.runtime._compiled import CompiledModel

FORMAT, VERSION = "tessera-artifact", 1
MANIFEST = "manifest.json"
_SHARED_BYTES = 1024  # initializers at least this big are stored once, by content


class FallbackWarning(UserWarning):
    """An artifact's partitions were re-placed because their backend is missing or changed."""


# -- writing -------------------------------------------------------------------------------
def save(compiled: CompiledModel, path: Path) -> Path:
    from tessera.placement._costdb import machine
    from tessera.runtime._compiled import submodel_of

    if path.is_dir():
        raise ArtifactError(f"{path} is a directory; give a file name such as model.tess")
    entries: dict[str, bytes] = {}
    tensors: dict[str, bytes] = {}
    entries["model.onnx"] = _externalize(compiled.model.proto, tensors)
    partitions = []
    for i, (part, built) in enumerate(zip(compiled.plan.partitions, compiled.parts,
                                          strict=True)):
        name = f"partitions/{i:03d}.onnx"
        entries[name] = _externalize(submodel_of(compiled.model, part.nodes), tensors)
        backend = backends.get(built.backend)
        record: dict[str, Any] = {"target": part.target, "built_as": str(built.target),
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
                                        if backend.cache_format == "onnx" else cache)
        partitions.append(record)
    entries.update(tensors)
    entries["plan.json"] = compiled.plan.to_json().encode()
    entries["config.json"] = compiled.config.to_json().encode()
    used = sorted({Target(p.target).kind.name for p in compiled.plan.partitions})
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
    manifest["checksum"] = _sha(_canonical(manifest))
    _write_zip(path, {MANIFEST: json.dumps(manifest, indent=1).encode(), **entries})
    return path


def _write_zip(path: Path, entries: dict[str, bytes]) -> None:
    with atomic_file(path) as handle, zipfile.ZipFile(handle, "w") as archive:
        for name, data in entries.items():
            # weights barely compress: store them; compress the rest
            method = zipfile.ZIP_STORED if name.startswith("tensors/") else zipfile.ZIP_DEFLATED
            archive.writestr(name, data, compress_type=method)


def _externalize(model: onnx.ModelProto, tensors: dict[str, bytes]) -> bytes:
    import onnx
    from onnx import numpy_helper

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for tensor in copy.graph.initializer:
        if tensor.data_type == onnx.TensorProto.STRING:
            continue
        if not tensor.HasField("raw_data"):
            if _inline_size(tensor) < _SHARED_BYTES:
                continue
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor), tensor.name))
        data = tensor.raw_data
        if len(data) < _SHARED_BYTES:
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


def _externalize_bytes(data: bytes, tensors: dict[str, bytes]) -> bytes:
    import onnx

    return _externalize(onnx.load_from_string(data), tensors)


def _inline_size(tensor: onnx.TensorProto) -> int:
    return 4 * max(len(tensor.float_data), len(tensor.int32_data), len(tensor.int64_data) * 2,
                   len(tensor.double_data) * 2)


# -- reading -------------------------------------------------------------------------------
@dataclass
class Artifact:
    """An artifact's verified contents."""

    path: Path
    manifest: dict[str, Any]
    files: dict[str, bytes]

    def model(self, name: str) -> onnx.ModelProto:
        return _internalize(self.files[name], self.files, f"{self.path}:{name}")

    @property
    def plan(self) -> Plan:
        from tessera.placement import Plan

        return Plan.from_json(self.files["plan.json"].decode())

    @property
    def config(self) -> CompilationConfig:
        return CompilationConfig.from_json(self.files["config.json"].decode())


def read(path: str | os.PathLike[str]) -> Artifact:
    """The artifact at `path`, every entry checked against the manifest."""
    where = Path(path)
    if not where.is_file():
        raise ArtifactError(f"no artifact at {where}; save one with `tessera compile ... -o "
                            f"{where.name}` or CompiledModel.save")
    try:
        with zipfile.ZipFile(where) as archive:
            files = {name: archive.read(name) for name in archive.namelist()}
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise ArtifactError(f"{where} is not a tessera artifact (not a readable zip: {err}); "
                            "recompile the model") from None
    try:
        manifest = json.loads(files.pop(MANIFEST))
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
    listed = manifest.get("files", {})
    for name in sorted(set(listed) | set(files)):
        if name not in files:
            raise ArtifactError(f"{where}: entry {name} is missing; the file is damaged")
        if name not in listed or _sha(files[name]) != listed[name]:
            raise ArtifactError(f"{where}: entry {name} fails its SHA-256 check; the file is "
                                "damaged or was edited: recompile the model")
    return Artifact(where, manifest, files)


def _internalize(data: bytes, files: dict[str, bytes], where: str) -> onnx.ModelProto:
    import onnx

    try:
        model = onnx.load_from_string(data)
    except Exception as err:
        raise ArtifactError(f"{where} is not a valid ONNX model: {err}") from None
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = {e.key: e.value for e in tensor.external_data}.get("location", "")
        if location not in files:  # never read a path outside the artifact
            raise ArtifactError(f"{where}: weight {tensor.name!r} refers to {location!r}, "
                                "which the artifact does not contain")
        tensor.raw_data = files[location]
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
    return model


# -- loading -------------------------------------------------------------------------------
def load(path: str | os.PathLike[str], *, allow_fallback: bool = False) -> CompiledModel:
    """The compiled model saved at `path`, rebuilt without measuring. A partition whose
    backend is missing here, or installed in another version, is an ArtifactError; with
    `allow_fallback` those partitions are re-placed on the remaining targets (greedy, with
    the reference fallback) and a FallbackWarning says so."""
    from tessera.ir import load_model
    from tessera.placement._costdb import machine
    from tessera.runtime._compiled import CompiledModel

    artifact = read(path)
    manifest = artifact.manifest
    model = load_model(artifact.model("model.onnx"))
    plan, config = artifact.plan, artifact.config
    problems = _backend_problems(manifest)
    records = manifest["partitions"]
    if problems:
        detail = "; ".join(f"{name}: {why}" for name, why in problems.items())
        if not allow_fallback:
            raise ArtifactError(
                f"{artifact.path} cannot be loaded as saved: {detail}. Install the saved "
                "versions, recompile, or load with allow_fallback=True (CLI: "
                "--allow-fallback) to re-place those partitions")
        plan = _replace_partitions(model, config, plan, set(problems))
        warnings.warn(f"{artifact.path}: {detail}; re-placed those partitions without them",
                      FallbackWarning, stacklevel=2)
        records = [None] * len(plan.partitions)
    policy = ThreadPolicy(manifest.get("thread_policy", "shared"), core_budget())
    if len(plan.partitions) != len(manifest["partitions"]):
        policy = ThreadPolicy.for_partitions(len(plan.partitions), config.options.threads)
    same_machine = manifest.get("machine") == machine()
    built = [_build(artifact, model, part.target, part.nodes, record, same_machine, policy)
             for part, record in zip(plan.partitions, records, strict=True)]
    compiled = CompiledModel(model, config, plan, [b for b, _ in built], policy)
    compiled.sources = [how for _, how in built]
    return compiled


def _build(artifact: Artifact, model: Model, target_text: str, nodes: tuple[str, ...],
           record: dict[str, Any] | None, same_machine: bool, policy: ThreadPolicy
           ) -> tuple[Compiled, str]:
    """The partition built, and from what: 'cache', 'submodel' or 're-placed'."""
    from tessera.runtime._compiled import submodel_of

    target = policy.apply(Target(target_text))
    backend = backends.get(target.kind.name)
    if record is None:
        return backend.compile(submodel_of(model, nodes), target, check=False), "re-placed"
    submodel = artifact.model(record["submodel"])
    cache = record.get("cache")
    if cache and same_machine and record.get("built_as") == str(target):
        data = artifact.files[cache]
        if record.get("cache_format") == "onnx":
            data = artifact.model(cache).SerializeToString()
        try:
            return backend.compile_cached(submodel, target, data), "cache"
        except TesseraError:
            pass  # a stale cache is only slower: compile the submodel instead
    return backend.compile(submodel, target, check=False), "submodel"


def _backend_problems(manifest: dict[str, Any]) -> dict[str, str]:
    problems = {}
    for name, saved in manifest.get("backends", {}).items():
        try:
            availability = backends.get(name).is_available()
        except TesseraError as err:
            problems[name] = str(err)
            continue
        if not availability.ok:
            problems[name] = f"saved with {name} {saved}, not available here " \
                             f"({availability.reason})"
        elif availability.version != saved:
            problems[name] = f"saved with {name} {saved}, installed {availability.version}"
    return problems


def _replace_partitions(model: Model, config: CompilationConfig, plan: Plan,
                        lost: set[str]) -> Plan:
    from tessera.placement import SupportTable, place_greedy, resolve_pins

    kept = [p for p in plan.partitions if Target(p.target).kind.name not in lost]
    remaining = [str(t) for t in config.priority if t.kind.name not in lost] or ["reference"]
    fallback_config = CompilationConfig.create(
        remaining, config.host,
        **{**config.options.to_dict(), "fallback": True, "partitioner": "greedy"})
    pins = {node: p.target for p in kept for node in p.nodes}
    table = SupportTable.build(model, fallback_config, None,
                               resolve_pins(model.dataflow, pins or None))
    placed = place_greedy(model, table, 1)
    return replace(placed, stats={**placed.stats, "fallback_from": sorted(lost)})


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _canonical(manifest: dict[str, Any]) -> bytes:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


__all__ = ["Artifact", "FallbackWarning", "load", "read", "save"]
