"""bench/overhead.py: its table says which direction is better, marks the goals, and its
paired differences are taken round by round. Timings are never asserted."""

from __future__ import annotations

from typing import Any

from bench import overhead
from bench._rounds import Measured


def _timed(ms: float) -> dict[str, Any]:
    return Measured(ms, ms, ms, 10, (ms,)).to_dict()


def _result() -> dict[str, Any]:
    single = [{"model": "mlp", "backend": "onnxruntime", "native defaults": _timed(0.020),
               "own call": _timed(0.019), "tessera": _timed(0.021), "over_own_us": 2.0,
               "speed_vs_native": 0.95},
              {"model": "mlp", "backend": "openvino", "native defaults": _timed(0.070),
               "own call": _timed(0.070), "tessera": _timed(0.075), "over_own_us": 5.0,
               "speed_vs_native": 0.93}]
    mixed = [{"model": "mlp", "k": 2, "targets": "onnxruntime/openvino",
              "tessera": _timed(0.1), "parts_sum_ms": 0.09, "over_us": 10.0,
              "per_partition_us": 5.0}]
    return {"command": "python -m bench.overhead", "commit": "abc1234", "machine": "x86_64",
            "rounds": 3, "seconds": 0.5, "single": single, "mixed": mixed}


def test_the_table_names_its_command_directions_and_goals() -> None:
    table = overhead.markdown(_result())
    assert "Command: `python -m bench.overhead` at commit `abc1234`" in table
    assert "tessera over own call, us (lower is better)" in table
    assert "speed vs native defaults (higher is faster)" in table
    lines = [line for line in table.splitlines() if line.startswith("| mlp |")]
    assert lines[0] == ("| mlp | onnxruntime | 0.0200 | 0.0190 | 0.0210 | 2.00 | 0.95x | ✓ |")
    assert lines[1].endswith("| 5.00 | 0.93x | ✗ |")  # over the 3 us goal
    assert lines[2] == "| mlp | 2 | onnxruntime/openvino | 0.1000 | 0.0900 | 10.00 | 5.00 |"


def test_overhead_is_paired_round_by_round_against_the_sum_of_the_parts() -> None:
    mine = Measured(0.1, 0.1, 0.2, 30, (0.1, 0.2, 0.15))
    parts = [Measured(0.05, 0.04, 0.1, 30, (0.04, 0.1, 0.05)),
             Measured(0.05, 0.05, 0.09, 30, (0.05, 0.09, 0.05))]
    assert overhead.over_us(mine, parts) == 10.0  # rounds: 10, 10, 50 us
    assert overhead.over_us(mine, parts[0]) == 100.0  # rounds: 60, 100, 100 us


def test_a_table_names_the_cpu_and_the_instruction_sets_that_decide_precision() -> None:
    import platform

    from bench._rounds import cpu, machine

    info = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
            "flags\t\t: fpu sse avx2 avx512f avx512_vnni amx_int8 amx_bf16\n\n"
            "processor\t: 1\nmodel name\t: other\n")
    assert cpu(info) == ("Intel(R) Xeon(R) Platinum 8480+ "
                         "(avx2 avx512f avx512_vnni amx_int8 amx_bf16)")
    assert cpu("model name\t: Cortex\nFeatures\t: neon\n") == "Cortex"
    assert machine().endswith(f"Python {platform.python_version()}")
    assert " cores, " in machine()
