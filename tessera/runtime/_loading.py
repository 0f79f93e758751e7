"""Loading an artifact: every partition rebuilt from its saved compiled cache (on the machine
that saved it) or its submodel, without measuring. A partition whose backend is missing or
changed is an ArtifactError, or with `allow_fallback` placed again on what is here."""

from __future__ import annotations

import os
import warnings
from typing import Any

from tessera import backends
from tessera.backends import CacheFormat, Compiled
from tessera.backends._threads import ThreadPolicy, core_budget
from tessera.errors import ArtifactError, TesseraError
from tessera.ir import Model, extract_submodel, load_model
from tessera.placement import Partition, replace_lost
from tessera.placement.record._costdb import machine
from tessera.placement.search import assign_devices
from tessera.runtime._artifact import Artifact, FallbackWarning, read
from tessera.runtime._compiled import CompiledModel, assemble
from tessera.runtime._executor import widens_float16


def load(path: str | os.PathLike[str], *, allow_fallback: bool = False) -> CompiledModel:
    """The compiled model saved at `path`, rebuilt without measuring. A partition whose
    backend is missing here, or installed in another version, is an ArtifactError; with
    `allow_fallback` those partitions are re-placed on the remaining targets (greedy, with
    the reference fallback) and a FallbackWarning says so."""
    artifact = read(path)
    manifest = artifact.manifest
    # symbolic dimensions stay: the loaded model runs every shape its profile allows
    model = load_model(artifact.model("model.onnx"), require_static=False)
    plan, config = artifact.plan, artifact.config
    plan = assign_devices(plan, config)  # an artifact saved before device targets has none
    problems = _backend_problems(manifest)
    records = manifest["partitions"]
    if problems:
        detail = "; ".join(f"{name}: {why}" for name, why in problems.items())
        if not allow_fallback:
            raise ArtifactError(
                f"{artifact.path} cannot be loaded as saved: {detail}. Install the saved "
                "versions, recompile, or load with allow_fallback=True (CLI: "
                "--allow-fallback) to re-place those partitions")
        plan = assign_devices(replace_lost(model, config, plan, sorted(problems)), config)
        warnings.warn(f"{artifact.path}: {detail}; re-placed those partitions without them",
                      FallbackWarning, stacklevel=2)
        records = [None] * len(plan.partitions)
    policy = ThreadPolicy(manifest.get("thread_policy", "shared"), core_budget())
    if len(plan.partitions) != len(manifest["partitions"]):
        policy = ThreadPolicy.for_partitions(len(plan.partitions), config.options.threads)
    same_machine = manifest.get("machine") == machine()
    widen = widens_float16(plan)
    built = [_build(artifact, model, part, record, same_machine, policy, widen)
             for part, record in zip(plan.partitions, records, strict=True)]
    compiled = assemble(model, config, plan, [b for b, _ in built], policy)
    compiled.sources = [how for _, how in built]
    compiled.keeps.append(artifact.held)  # the weights entry its submodels refer to
    return compiled


def _build(artifact: Artifact, model: Model, part: Partition, record: dict[str, Any] | None,
           same_machine: bool, policy: ThreadPolicy, widen: bool) -> tuple[Compiled, str]:
    """The partition built for its device target, and from what: 'cache', 'submodel' or
    're-placed'."""
    device = part.device
    target = policy.apply(part.target, device)
    backend = backends.get(target.kind.name)
    if record is None:
        return backend.compile(extract_submodel(model, model.node_set(part.nodes),
                                                widen_float16=widen), target,
                               check=False, device=device), "re-placed"
    submodel = artifact.model(record["submodel"])
    cache = record.get("cache")
    if cache and same_machine and record.get("built_as") == str(target):
        # an ONNX cache (its format read back from JSON as text) keeps its weights in the
        # artifact's weights entry, where the backend reads them: inlined, they would be
        # held three times while the session is made
        data = (artifact.model(cache).SerializeToString()
                if record.get("cache_format") == CacheFormat.ONNX else artifact.files[cache])
        try:
            return backend.compile_cached(submodel, target, data, device=device), "cache"
        except TesseraError:
            pass  # a stale cache is only slower: compile the submodel instead
    return backend.compile(submodel, target, check=False, device=device), "submodel"


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


__all__ = ["load"]
