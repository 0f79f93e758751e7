"""Warm caches of compiled partitions. A backend that can keep a cheaper-to-reload form of a
partition (OpenVINO IR, an ONNX file for ONNX Runtime) leaves it in `TESSERA_CACHE/compiled`
under a key of everything the partition computes with; a later compile of the same model on
the same backend version reloads it. Entries are published by renaming a finished directory,
so a reader never sees half of one; the least recently used go once the cache passes
`TESSERA_COMPILE_CACHE_MB` (default 4096). An int8 partition's entry holds its int8 form, so a
later compile quantizes nothing; calibration data enters the key where the form depends on it."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from tessera import backends
from tessera._private.cache import DirectoryLRU, cache_dir
from tessera._private.version import __version__
from tessera.backends import Backend, Compiled
from tessera.backends._quantize import calibration_digest
from tessera.errors import CompileError
from tessera.ir import Model, NodeSet, members
from tessera.placement.record._costdb import machine
from tessera.target import Target

if TYPE_CHECKING:
    import onnx

    from tessera.backends import Calibration

_DONE = "entry.json"  # written last: an entry without it is not finished


def compile_partition(model: Model, mask: NodeSet, submodel: onnx.ModelProto,
                      target: Target, *, calibration: Calibration | None = None,
                      device: Target | None = None) -> Compiled:
    """The partition `mask` of `model` (extracted as `submodel`) compiled on `target` for
    the device target `device`, through the warm cache where its backend has one. The key
    is `target` as given, so the caller specialises it for the device first
    (`ThreadPolicy.apply`). `calibration`: sample inputs of `submodel`, for a target that
    quantizes with them."""
    backend = backends.get(target.kind.name)
    target = backend.for_device(target, device)  # already so where the caller did it
    if not backend.warm_cache:
        return backend.compile(submodel, target, check=False, calibration=calibration,
                               device=device)
    try:
        cache = _lru(cache_dir("compiled"))
    except OSError:  # no cache directory to write: compile without one
        return backend.compile(submodel, target, check=False, calibration=calibration,
                               device=device)
    key = partition_key(model, mask, target, calibration, submodel)
    entry = cache.root / key
    if (entry / _DONE).is_file():
        try:
            compiled = backend.compile_warm(submodel, target, entry, reuse=True, check=False,
                                            device=device)
        except CompileError:  # damaged, or written by another build: compile it afresh
            shutil.rmtree(entry, ignore_errors=True)
        else:
            cache.touch(entry)
            return compiled
    try:
        return _compile_and_publish(backend, submodel, target, cache, key, calibration, device)
    except (CompileError, OSError):
        # the cache's own writes may be what failed (a full disk): never blame the backend
        # for them; a compile that fails without the cache is the real error
        return backend.compile(submodel, target, check=False, calibration=calibration,
                               device=device)


def _compile_and_publish(backend: Backend, submodel: onnx.ModelProto, target: Target,
                         cache: DirectoryLRU, key: str, calibration: Calibration | None,
                         device: Target | None) -> Compiled:
    def write(fresh: Path) -> Compiled:
        compiled = backend.compile_warm(submodel, target, fresh, reuse=False, check=False,
                                        calibration=calibration, device=device)
        (fresh / _DONE).write_text(json.dumps({"target": str(target),
                                               "nodes": len(submodel.graph.node)}))
        return compiled

    compiled = cache.publish(key, write)  # fsynced: a later run reloads it as it is
    cache.evict()
    return compiled


def partition_key(model: Model, mask: NodeSet, target: Target,
                  calibration: Calibration | None = None,
                  submodel: onnx.ModelProto | None = None) -> str:
    flow = model.dataflow
    backend = backends.get(target.kind.name)
    version = backend.is_available().version
    inputs, outputs = flow.boundary(mask)
    # ONNX Runtime's optimized models hold layout choices for this CPU. What an entry holds is
    # compiled code or a converted model, never a runtime setting (a session's threads, a
    # device's -num-cores): those are applied when the entry is loaded, so the key is the
    # target's code key and a partition on one core reuses the entry of the same on many
    payload = [__version__, machine(), target.codegen_key(), version, model.content_digest,
               model.structural_hash(mask), [flow.names[i] for i in members(mask)],
               list(inputs), list(outputs)]
    if submodel is not None:  # the types its boundary crosses in (float16 may be widened)
        payload.append([v.type.tensor_type.elem_type
                        for v in (*submodel.graph.input, *submodel.graph.output)])
    if backend.calibrated(target):  # a static int8 form is fixed by its calibration data
        payload.append(calibration_digest(calibration))
    return hashlib.sha1(json.dumps(payload).encode(), usedforsecurity=False).hexdigest()


def evict(root: Path, limit: int) -> list[str]:
    """Remove the least recently used entries until the cache holds at most `limit` bytes,
    and the unfinished directories of writers that died. The names removed."""
    return _lru(root).evict(limit)


def _lru(root: Path) -> DirectoryLRU:
    return DirectoryLRU(root, _DONE, "TESSERA_COMPILE_CACHE_MB", 4096)
