"""The numeric guard: each partition not on the reference runs once on random inputs of its
shapes and is compared with the reference on the same inputs. A backend that fails or
disagrees gives that partition back, and placement is redone without it there."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tessera import backends
from tessera.backends import Compiled
from tessera.backends._inputs import random_inputs
from tessera.errors import TesseraError

if TYPE_CHECKING:
    import onnx

RTOL, ATOL = 1e-3, 1e-4


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
