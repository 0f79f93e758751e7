"""Table-driven: valid target strings and their canonical forms; invalid ones and their errors."""

import pytest

from tessera import Target
from tessera.errors import TargetError

A100 = ("cuda -arch=sm_80 -max-shared-memory-per-block=49152 -registers-per-block=65536 "
        "-l2-cache-size-bytes=41943040 -host=\"cpu -mcpu=znver2 -mtriple=x86_64-linux-gnu\"")

VALID = [
    ("cpu", "cpu"),
    ("llvm", "cpu"),
    ("  cpu  ", "cpu"),
    ("cpu -mcpu=skylake", "cpu -mcpu=skylake"),
    ("llvm -mcpu=skylake", "cpu -mcpu=skylake"),
    ("cpu -mcpu skylake", "cpu -mcpu=skylake"),
    ("cpu --mcpu=skylake", "cpu -mcpu=skylake"),
    ("cpu -mattr=+avx2,+fma", "cpu -mattr=+avx2,+fma"),
    ("cpu -mattr=+avx2", "cpu -mattr=+avx2"),
    ("cpu -num-cores=4 -mcpu=skylake", "cpu -mcpu=skylake -num-cores=4"),
    ("cpu -num_cores=4", "cpu -num-cores=4"),
    ("cpu -num-cores 4", "cpu -num-cores=4"),
    ("cpu -mtriple=aarch64-linux-gnu -mcpu=cortex-a72",
     "cpu -mcpu=cortex-a72 -mtriple=aarch64-linux-gnu"),
    ("cpu -mcpu='sky lake'", 'cpu -mcpu="sky lake"'),
    ('cpu -mcpu="sky lake"', 'cpu -mcpu="sky lake"'),
    ("cpu -mcpu=sky\\ lake", 'cpu -mcpu="sky lake"'),
    ("cpu -mcpu='a\"b'", 'cpu -mcpu="a\\"b"'),
    ("cpu -mcpu=\"it's\"", "cpu -mcpu=\"it's\""),
    ("cpu -mcpu=''", 'cpu -mcpu=""'),
    ("cpu -keys=cpu", "cpu"),
    ("cpu -keys=cpu,x86", 'cpu -keys="cpu,x86"'),
    ("cpu -mcpu=a,openvino", 'cpu -mcpu="a,openvino"'),
    ("cuda", "cuda"),
    ("cuda -arch=sm_80", "cuda -arch=sm_80"),
    ("cuda -arch=sm_90a", "cuda -arch=sm_90a"),
    ("cuda -arch=sm_80 -max-threads-per-block=512", "cuda -arch=sm_80 -max-threads-per-block=512"),
    ("cuda -max-threads-per-block=1024", "cuda"),
    ("cuda -arch sm_80 -max-threads-per-block 512", "cuda -arch=sm_80 -max-threads-per-block=512"),
    ("cuda -max-threads-per-block=512 -arch=sm_80", "cuda -arch=sm_80 -max-threads-per-block=512"),
    ("cuda -arch=sm_80 -host=llvm", "cuda -arch=sm_80 -host=cpu"),
    ('cuda -arch=sm_80 -host="cpu -mcpu=skylake"', 'cuda -arch=sm_80 -host="cpu -mcpu=skylake"'),
    ("onnxruntime", "onnxruntime"),
    ("ort", "onnxruntime"),
    ("onnxruntime -device=cpu", "onnxruntime"),
    ("onnxruntime -device=cuda", "onnxruntime -device=cuda"),
    ("onnxruntime -opt-level=basic -num-threads=2", "onnxruntime -opt-level=basic -num-threads=2"),
    ("onnxruntime -spinning", "onnxruntime -spinning"),
    ("onnxruntime -spinning=true", "onnxruntime -spinning"),
    ("onnxruntime -spinning true", "onnxruntime -spinning"),
    ("onnxruntime -spinning=off", "onnxruntime -spinning=false"),
    ("onnxruntime -spinning -num-threads 2", "onnxruntime -num-threads=2 -spinning"),
    ("openvino -precision=bf16", "openvino -precision=bf16"),
    ("ov -num-streams=2 -num-threads=4", "openvino -num-threads=4 -num-streams=2"),
    ("openvino -cache-dir='/tmp/ov cache'", 'openvino -cache-dir="/tmp/ov cache"'),
    ("torch -compile", "torch -compile"),
    ("pytorch -compile=1 -compile-mode=max-autotune", "torch -compile -compile-mode=max-autotune"),
    ("iree -opt-level=O3", "iree -opt-level=O3"),
    ("tvm -opt-level=2 -mcpu=skylake", "tvm -opt-level=2 -mcpu=skylake"),
    ("tvm -opt-level=3", "tvm"),
    ("reference", "reference"),
    ("tensorrt -precision=fp16", "tensorrt -precision=fp16"),
    ("trt -workspace-bytes=1024", "tensorrt -workspace-bytes=1024"),
    ("nvidia/a100", A100),
    ("nvidia/a100 -max-threads-per-block=512",
     A100.replace("-max-shared", "-max-threads-per-block=512 -max-shared")),
    ("aws/c5.2xlarge", "cpu -mcpu=skylake-avx512 -mattr=+avx2,+fma,+avx512f,+avx512bw "
                       "-mtriple=x86_64-linux-gnu -num-cores=4"),
    ("ov-cpu", 'composite -devices="openvino;cpu" -host=cpu'),
    ('composite -devices="onnxruntime;cpu -mcpu=skylake"',
     'composite -devices="onnxruntime;cpu -mcpu=skylake"'),
    ('{"kind": "cuda", "arch": "sm_80"}', "cuda -arch=sm_80"),
    ('{"tag": "nvidia/t4", "max-threads-per-block": 256}',
     "cuda -arch=sm_75 -max-threads-per-block=256 -max-shared-memory-per-block=49152 "
     "-registers-per-block=65536 -l2-cache-size-bytes=4194304"),
]


@pytest.mark.parametrize(("text", "canonical"), VALID)
def test_valid_string_has_canonical_form(text: str, canonical: str) -> None:
    target = Target(text)
    assert str(target) == canonical
    assert Target(canonical) == target  # the canonical form parses back
    assert str(Target(canonical)) == canonical  # and is a fixpoint


INVALID = [
    ("", "empty target string"),
    ("   ", "empty target string"),
    ("cpux", "unknown target kind or tag 'cpux'"),
    ("cdua", "did you mean 'cuda'"),
    ("nvidia/a1000", "'nvidia/a100'"),
    ("cpu -mcup=skylake", "did you mean '-mcpu'"),
    ("cuda -arhc=sm_80", "unknown option '-arhc'"),
    ("cuda -max-threads-per-block=abc", "expected an integer, got 'abc'"),
    ("cuda -max-threads-per-block=1.5", "expected an integer, got '1.5'"),
    ("cuda -max-threads-per-block=0", "below the minimum 1"),
    ("cuda -arch=sm80", "'sm80' is not a CUDA compute capability"),
    ("cuda -arch=compute_80", "'compute_80' is not a CUDA compute capability"),
    ("onnxruntime -spinning=maybe", "expected a boolean"),
    ("onnxruntime -opt-level=fast", "'fast' is not one of disable, basic, extended, all"),
    ("onnxruntime -opt-level=bsic", "did you mean 'basic'"),
    ("cpu -mcpu=a -mcpu=b", "option '-mcpu' is given more than once"),
    ("cpu -num-cores=2 -num_cores=3", "option '-num-cores' is given more than once"),
    ("cpu -host=cpu -host=cpu", "option '-host' is given more than once"),
    ("cpu -mcpu='skylake", "mismatched quote"),
    ('cpu -mcpu="skylake', "mismatched quote"),
    ("cpu mcpu=skylake", "token 'mcpu=skylake' in 'cpu mcpu=skylake' does not start with a dash"),
    ("cpu -mcpu=skylake avx2", "token 'avx2'"),
    ("-mcpu=skylake", "starts with the option '-mcpu=skylake'"),
    ("openvino -device=cuda", "backend 'openvino' cannot serve device 'cuda'"),
    ("tensorrt -device=cpu", "backend 'tensorrt' cannot serve device 'cpu'"),
    ("reference -device=cuda", "it serves: cpu"),
    ("cuda -arch", "option '-arch' in 'cuda -arch' needs a value"),
    ("cpu -mattr=avx2", "-mattr item 'avx2' must start with '+' or '-'"),
    ("cpu -mattr=+avx2,,+fma", "a list item is empty"),
    ("cuda -host=openvino", "the host must be a CPU device target"),
    ("cpu -host=cuda", "the host must be a CPU device target such as 'cpu'"),
    ("cpu -host=cpu -target-host=cpu", "option '-target-host' is given more than once"),
    ("composite -devices=cpu -accelerators=cpu", "option '-devices' is given more than once"),
    ("cpu -=3", "bad option name '-=3'"),
    ("cpu -mcpu=x\\", "trailing backslash"),
    ("composite", "needs at least one target in -devices"),
    ('composite -devices="ov-cpu"', "composite targets do not nest"),
    ("tvm -opt-level=7", "not an optimisation level between 0 and 3"),
    ("openvino -num-threads=true", "expected an integer, got 'true'"),
    ('{"kind": "cuda", "arch": 80}', "expected a string, got 80"),
    ('{"kind": "cuda", "max-threads-per-block": true}', "got the boolean True"),
    ('{"arch": "sm_80"}', "needs a 'kind' or a 'tag'"),
    ('{"kind": "cuda",', "invalid target JSON"),
    ('{"kind": "cuda", "max_threads_per_block": 1, "max-threads-per-block": 2}',
     "given more than once"),
    ('{"kind": "cuda", "host": "onnxruntime"}', "the host must be a CPU device target"),
    ('{"kind": "cpu", "host": "cpu", "target_host": "cpu"}', "the host is given more than once"),
    ('{"kind": "composite", "devices": ["cpu"], "accelerators": ["cpu"]}',
     "attribute 'devices' is given more than once (as 'accelerators' too)"),
    ('[1, 2]', "unknown target kind or tag '[1,'"),
    ('{"tag": "cpu"}', "a kind goes in 'kind', not 'tag'"),
    ('{"kind": "nvidia/a100"}', "it is a tag: use {'tag': ...}"),
    ('{"tag": "nvidia/a10"}', "did you mean 'nvidia/a10g' or 'nvidia/a100'"),
]


@pytest.mark.parametrize(("text", "fragment"), INVALID)
def test_invalid_string_raises_target_error(text: str, fragment: str) -> None:
    with pytest.raises(TargetError) as info:
        Target(text)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("text", [text for text, _ in INVALID if not text.startswith("{")])
def test_messages_name_the_offending_text(text: str) -> None:
    with pytest.raises(TargetError) as info:
        Target(text)
    message = str(info.value)
    assert repr(text) in message or repr(text.strip()) in message, message


def test_tables_are_large_enough() -> None:
    assert len(VALID) >= 40
    assert len(INVALID) >= 30


def test_non_string_inputs_are_rejected() -> None:
    with pytest.raises(TargetError, match="cannot build a Target from int"):
        Target(5)  # type: ignore[arg-type]
