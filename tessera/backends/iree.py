"""IREE backend: ONNX imported by iree-base-compiler's ONNX importer, compiled for llvm-cpu
(or cuda) by iree-compile, and run by the IREE runtime. Support is probed: the importer and
the compiler's input conversion decide, per kind of node."""

from __future__ import annotations

import functools
import io
import threading
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tessera.backends import _deviations as dev
from tessera.backends._availability import library_availability
from tessera.backends._probe import ProbedBackend
from tessera.backends._protocol import BACKENDS, Compiled, NativeRunner
from tessera.backends._threads import threads_attr
from tessera.errors import BackendUnavailableError, CompileError
from tessera.ir import _dtypes as dtypes
from tessera.target import AttrSpec, AttrType, Availability, Target, register_kind

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np
    import onnx


KIND = register_kind(
    "iree",
    serves=("cpu", "cuda"),
    doc="IREE compiler and runtime (llvm-cpu; cuda when present).",
    availability=library_availability("iree.compiler", ("iree-base-compiler",), "iree"),
    attrs=(
        AttrSpec("opt-level", AttrType.STR, "O2", "compiler optimisation level",
                 choices=("O0", "O1", "O2", "O3")),
        AttrSpec("cpu-features", AttrType.STR, "host", "llvm-cpu target CPU ('host': this one)"),
        AttrSpec("mattr", AttrType.STR_LIST, doc="llvm-cpu target CPU features, e.g. +avx2,+fma "
                 "(unset: those of the target CPU)"),
        AttrSpec("mtriple", AttrType.STR, doc="llvm-cpu target triple, e.g. x86_64-linux-gnu "
                 "(unset: this machine's)"),
        threads_attr("task-system workers"),
    ),
)

_ENTRY = "tessera_main"
_FLAGS_LOCK = threading.Lock()
_task_flags: list[str] = []


def import_onnx(model: onnx.ModelProto) -> bytes:
    """The model as MLIR bytecode in the torch-mlir ONNX dialect, entry point `_ENTRY`."""
    import onnx as onnx_module
    from iree.compiler import ir
    from iree.compiler.extras import onnx_importer

    # the importer needs every value's type: infer them (this also copies the model)
    renamed = onnx_module.shape_inference.infer_shapes(model, data_prop=True)
    renamed.graph.name = _ENTRY
    context = ir.Context()
    info = onnx_importer.ModelInfo(renamed)
    module = info.create_module(context=context).operation
    importer = onnx_importer.NodeImporter.define_function(info.main_graph, module)
    importer.import_all()
    module.verify()
    buffer = io.BytesIO()
    module.write_bytecode(buffer)
    return buffer.getvalue()


def compiler_flags(target: Target) -> list[str]:
    """iree-compile's flags for `target`: a cpu device target's -mcpu, -mattr and -mtriple
    arrive here as `cpu-features`, `mattr` and `mtriple` (`Backend.for_device`)."""
    flags = [f"--iree-opt-level={target.attrs['opt-level']}"]
    if target.device_type == "cpu":
        triple = target.attrs.get("mtriple")
        cpu = target.attrs["cpu-features"]
        if triple is not None and cpu == "host":  # another machine's triple: not this CPU
            cpu = "generic"
        flags += [f"--iree-llvmcpu-target-cpu={cpu}"]
        if target.attrs.get("mattr"):
            flags += [f"--iree-llvmcpu-target-cpu-features={','.join(target.attrs['mattr'])}"]
        if triple is not None:
            flags += [f"--iree-llvmcpu-target-triple={triple}"]
    return flags


def _probe(model: onnx.ModelProto, target: Target) -> None:
    import iree.compiler as compiler

    compiler.compile_str(import_onnx(model), target_backends=[_target_backend(target)],
                         extra_args=["--compile-to=input", "--iree-input-type=onnx",
                                     *compiler_flags(target)])


def _target_backend(target: Target) -> str:
    return "cuda" if target.device_type == "cuda" else "llvm-cpu"


@functools.cache
def _driver_for(device: str, threads: int) -> str:
    """IREE's task system is configured once per process: one worker count wins. One thread
    means the synchronous driver, which has no pool at all."""
    if device == "cuda":
        return "cuda"
    if threads == 1:
        return "local-sync"
    import iree.runtime as runtime

    with _FLAGS_LOCK:
        if threads and not _task_flags:
            _task_flags.append(f"--task_topology_group_count={threads}")
            runtime.flags.parse_flags(*_task_flags)
    return "local-task"


UNSIGNED_INTEGERS = dtypes.UNSIGNED_INTEGERS

# Found by the node suite (docs/coverage.md): IREE compiles these and computes something else.
DEVIATIONS = (
    dev.Deviation(("*",), "unsigned integers come back as signed types, and divisions of them "
                  "are signed", dev.any_type(UNSIGNED_INTEGERS)),
    dev.Deviation(("*",), "float8 tensors convert with other rounding and saturation",
                  dev.any_type(dev.FLOAT8)),
    dev.Deviation(("BitShift",), "shifts of signed integers differ from ONNX",
                  dev.any_type(dev.SIGNED_INTEGERS)),
    dev.Deviation(("Resize",), "align_corners with scales uses another output length",
                  dev.resize_align_corners_with_scales),
    dev.Deviation(("QLinearMatMul",), "float16 scales give other results",
                  dev.any_type(frozenset({dtypes.FLOAT16}))),
)


class IreeBackend(ProbedBackend):
    kind = KIND
    dynamic_shapes = False  # compiles for the shapes it is given
    in_all, rank, colour = True, 40, "#2ca02c"
    probe_label = "IREE"
    probe_attrs = ("cpu-features", "mattr", "mtriple")
    # a cpu device target's code-generation attributes, as llvm-cpu's own
    device_attrs = MappingProxyType({"mcpu": "cpu-features", "mattr": "mattr",
                                     "mtriple": "mtriple"})
    _probe = staticmethod(_probe)
    deviations = DEVIATIONS

    def device_available(self, target: Target) -> Availability:
        found = super().device_available(target)
        if not found.ok or target.device_type == "cpu":
            return found
        import iree.runtime as runtime

        return found if "cuda" in runtime.query_available_drivers() else Availability(
            False, "the IREE runtime here has no cuda driver")

    native_import = True

    def native_runner(self, model: bytes) -> NativeRunner:
        """IREE's documented route: iree-import-onnx, iree-compile for this CPU, the
        runtime's local-task driver."""
        import subprocess
        import sys
        import tempfile

        import iree.compiler as compiler
        import iree.runtime as runtime
        import onnx as onnx_module

        graph = onnx_module.load_from_string(model).graph
        weights = {t.name for t in graph.initializer}
        inputs = [i.name for i in graph.input if i.name not in weights]
        with tempfile.TemporaryDirectory() as tmp:
            source = f"{tmp}/model.onnx"
            with open(source, "wb") as handle:
                handle.write(model)
            subprocess.run([sys.executable, "-m", "iree.compiler.tools.import_onnx", source,
                            "-o", f"{tmp}/model.mlir"], check=True, capture_output=True)
            vmfb = compiler.compile_file(f"{tmp}/model.mlir", target_backends=["llvm-cpu"],
                                         extra_args=["--iree-llvmcpu-target-cpu=host"])
        module = runtime.load_vm_flatbuffer(vmfb, driver="local-task")
        function = getattr(module, graph.name)  # the importer names it after the graph

        def run(feeds: Mapping[str, np.ndarray]) -> list[Any]:
            results = function(*(feeds[name] for name in inputs))
            if not isinstance(results, (tuple, list)):
                results = (results,)
            return [value.to_host() for value in results]
        return run

    def _compile(self, submodel: onnx.ModelProto, target: Target) -> Compiled:
        import iree.compiler as compiler
        import iree.runtime as runtime

        unranked = [v.name for v in (*submodel.graph.input, *submodel.graph.output)
                    if not v.type.tensor_type.HasField("shape")]
        if unranked:  # the importer takes an unranked value for a scalar
            raise CompileError(f"IREE needs the rank of every partition input and output; "
                               f"unknown for {', '.join(unranked[:4])}: fix the model's input "
                               "shapes (--input-shape) or let another backend take these nodes")
        backend = _target_backend(target)
        if backend == "cuda" and "cuda" not in runtime.query_available_drivers():
            raise BackendUnavailableError("the IREE runtime here has no cuda driver")
        vmfb = compiler.compile_str(import_onnx(submodel), target_backends=[backend],
                                    extra_args=["--iree-input-type=onnx",
                                                *compiler_flags(target)])
        driver = _driver_for(target.device_type, target.attrs["num-threads"])
        module = runtime.load_vm_flatbuffer(vmfb, driver=driver)
        return _IreeCompiled(self.name, submodel, target, getattr(module, _ENTRY))


class _IreeCompiled(Compiled):
    thread_safe = False  # one VM (and its registers) per compiled module
    def __init__(self, backend: str, model: onnx.ModelProto, target: Target, function: Any):
        super().__init__(backend, model, target)
        self.function = function
        self._names = [o.name for o in self.outputs]

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import numpy as np

        results = self.function(*(feeds[s.name] for s in self.inputs))
        if not isinstance(results, (tuple, list)):
            results = (results,)
        return {name: np.asarray(value.to_host()) for name, value in
                zip(self._names, results, strict=True)}


BACKEND = BACKENDS.register("iree", IreeBackend())
