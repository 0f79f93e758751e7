"""`import tessera` stays light: no backend library (nor onnx) is imported."""

import subprocess
import sys

HEAVY = ("onnxruntime", "openvino", "torch", "tvm", "iree", "onnx", "onnx_ir")


def test_import_tessera_loads_no_backend_library() -> None:
    code = (
        "import sys, tessera\n"
        "tessera.Target('openvino'); tessera.CompilationConfig.create('cpu-all')\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_errors_hierarchy() -> None:
    from tessera import errors

    assert issubclass(errors.TargetError, errors.TesseraError)
    assert issubclass(errors.TargetError, ValueError)
    assert issubclass(errors.ConfigError, errors.TesseraError)
    for name in ("ModelError", "CompileError", "ExecutionError", "InputError", "PartitionError"):
        assert issubclass(getattr(errors, name), errors.TesseraError)
