"""Random inputs of a compiled partition's shapes: what the numeric guard and the cost
measurements run on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from tessera.backends._input_check import TensorSpec


class HasInputs(Protocol):
    """A compiled partition or a whole compiled plan."""

    @property
    def inputs(self) -> Sequence[TensorSpec]: ...


def random_inputs(compiled: HasInputs, seed: int = 0,
                  shapes: Mapping[str, Sequence[int]] | None = None
                  ) -> dict[str, np.ndarray] | None:
    """Inputs of the partition's (or plan's) shapes, or None when some shape is not
    static. `shapes` gives the shape of an input whose spec has symbolic dimensions (as a
    profile point fixes them)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in compiled.inputs:
        dims = spec.shape
        if (dims is None or not all(isinstance(d, int) for d in dims)) and shapes:
            dims = tuple(shapes[spec.name]) if spec.name in shapes else dims
        if dims is None or not all(isinstance(d, int) for d in dims):
            return None
        shape = tuple(int(d) for d in dims)  # type: ignore[arg-type]
        dtype = np.dtype(spec.dtype)
        if dtype in (np.float32, np.float64):  # drawn in its own type: half the time
            feeds[spec.name] = rng.standard_normal(shape, dtype=dtype)
        elif dtype.kind == "f":
            feeds[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":  # ones: valid ids and indices, and never a zero divisor
            # (an integer division by zero traps with SIGFPE in compiled backends)
            feeds[spec.name] = np.ones(shape, dtype)
        elif dtype.kind == "b":
            feeds[spec.name] = rng.integers(0, 2, shape).astype(bool)
        elif dtype.kind == "V":  # ml_dtypes: bfloat16, float8, int4, ...
            feeds[spec.name] = rng.integers(-1, 2, shape).astype(np.float32).astype(dtype)
        else:
            return None
    return feeds


def shapes_at(compiled: HasInputs, sizes: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
    """The shape of each input with its symbolic dimensions at `sizes` (a profile point);
    an input with a dimension `sizes` does not give, or of unknown rank, is left out."""
    shapes = {}
    for spec in compiled.inputs:
        if spec.shape is None:
            continue
        dims = [d if isinstance(d, int) else sizes.get(d) if isinstance(d, str) else None
                for d in spec.shape]
        if all(isinstance(d, int) for d in dims):
            shapes[spec.name] = tuple(int(d) for d in dims)  # type: ignore[arg-type]
    return shapes
