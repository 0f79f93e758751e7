"""`import tessera` stays light: no backend library (nor onnx) is imported."""

import subprocess
import sys

HEAVY = ("onnxruntime", "openvino", "torch", "tvm", "iree", "onnx", "onnx_ir", "ray")


def test_import_tessera_loads_no_backend_library() -> None:
    code = (
        "import sys, tessera\n"
        "tessera.Target('openvino'); tessera.CompilationConfig.create('cpu-all')\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_measuring_through_ray_loads_no_ray_until_it_measures() -> None:
    code = (
        "import sys, tessera, tessera.placement\n"
        "from tessera.placement._driver import measurer_for\n"
        "try:\n"
        "    config = tessera.CompilationConfig.create('onnxruntime', measure='ray',\n"
        "                                              measure_on='tessera.machine=c6i')\n"
        "    measurer_for(config)\n"
        "except tessera.errors.ConfigError:\n"
        "    pass  # no Ray installed here\n"
        "print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_measure_ray_without_ray_installed_says_how_to_install_it() -> None:
    code = (
        "import sys\n"
        "sys.modules['ray'] = None  # as if it were not installed\n"
        "import tessera\n"
        "try:\n"
        "    tessera.CompilationConfig.create('onnxruntime', measure='ray')\n"
        "except tessera.errors.ConfigError as err:\n"
        "    print(err)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'tessera[ray]'" in out.stdout


def test_errors_hierarchy() -> None:
    from tessera import errors

    assert issubclass(errors.TargetError, errors.TesseraError)
    assert issubclass(errors.TargetError, ValueError)
    assert issubclass(errors.ConfigError, errors.TesseraError)
    for name in ("ModelError", "CompileError", "ExecutionError", "InputError", "PartitionError"):
        assert issubclass(getattr(errors, name), errors.TesseraError)
