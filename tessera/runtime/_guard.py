"""The numeric guard: each partition not on the reference runs once on random inputs of its
shapes and is compared with the reference on the same inputs. A backend that fails or
disagrees gives that partition back, and placement is redone without it there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tessera import backends
from tessera.backends import Compiled
from tessera.errors import TesseraError

if TYPE_CHECKING:
    import numpy as np
    import onnx

RTOL, ATOL = 1e-3, 1e-4


def random_inputs(compiled: Compiled, seed: int = 0) -> dict[str, np.ndarray] | None:
    """Inputs of the partition's shapes, or None when some shape is not static."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in compiled.inputs:
        if spec.shape is None or not all(isinstance(d, int) for d in spec.shape):
            return None
        shape = tuple(int(d) for d in spec.shape)  # type: ignore[arg-type]
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            feeds[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[spec.name] = rng.integers(0, 2, shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[spec.name] = rng.integers(0, 2, shape).astype(bool)
        elif dtype.kind == "V":  # ml_dtypes: bfloat16, float8, int4, ...
            feeds[spec.name] = rng.integers(-1, 2, shape).astype(np.float32).astype(dtype)
        else:
            return None
    return feeds


def check_partition(submodel: onnx.ModelProto, compiled: Compiled) -> str | None:
    """Why `compiled` cannot be trusted with `submodel`, or None."""
    import numpy as np

    feeds = random_inputs(compiled)
    if feeds is None:
        return None
    try:
        expected = backends.get("reference").compile(submodel).run(feeds)
    except (TesseraError, Exception):  # the reference cannot judge these inputs
        return None
    try:
        got = compiled.run(feeds)
    except TesseraError as err:
        return f"numeric guard: {compiled.backend} failed on random inputs: {_line(err)}"
    for name, want in expected.items():
        have = got.get(name)
        if have is None or np.shape(have) != np.shape(want):
            return f"numeric guard: {compiled.backend} output {name!r} has the wrong shape"
        if not _close(np.asarray(have), np.asarray(want)):
            return (f"numeric guard: {compiled.backend} output {name!r} differs from the "
                    f"reference beyond rtol {RTOL}, atol {ATOL}")
    return None


def _close(have: Any, want: Any) -> bool:
    import numpy as np

    if want.dtype.kind in "OUSV" or have.dtype.kind in "OUSV":
        return bool(np.array_equal(have.astype(object), want.astype(object)))
    if have.dtype != want.dtype:
        return False
    if want.dtype.kind in "biu":
        return bool(np.array_equal(have, want))
    with np.errstate(all="ignore"):
        return bool(np.allclose(have.astype(np.float64), want.astype(np.float64), rtol=RTOL,
                                atol=ATOL, equal_nan=True))


def _line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
