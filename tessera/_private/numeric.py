"""Agreement of outputs with the reference: one rule for the numeric guard, `tessera run
--check` and the benchmarks. Floats agree within rtol/atol (NaN equal to NaN); integers,
booleans and strings must be equal; dtypes and shapes must match."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RTOL, ATOL = 1e-3, 1e-4


@dataclass(frozen=True)
class Agreement:
    ok: bool
    max_abs_error: float  # over the float outputs; inf where an exact output differs
    why: str = ""  # the first disagreement, naming the output

    def __bool__(self) -> bool:
        return self.ok


def agree(got: Mapping[str, Any], want: Mapping[str, Any], *, rtol: float = RTOL,
          atol: float = ATOL, scaled: bool = False) -> Agreement:
    """Whether `got` matches `want` output by output. With `scaled`, atol grows with the
    largest magnitude of each expected output (logits of large models)."""
    import numpy as np

    worst = 0.0
    for name, expected in want.items():
        have = got.get(name)
        if have is None:
            if expected is None:  # an empty optional on both sides
                continue
            return Agreement(False, float("inf"), f"output {name!r} is missing")
        if isinstance(expected, list | tuple) or isinstance(have, list | tuple):
            verdict = _agree_sequence(name, have, expected, rtol, atol, scaled)
            if not verdict:
                return verdict
            worst = max(worst, verdict.max_abs_error)
            continue
        have, expected = np.asarray(have), np.asarray(expected)
        if have.shape != expected.shape:
            return Agreement(False, float("inf"), f"output {name!r} has shape "
                             f"{list(have.shape)}, the reference {list(expected.shape)}")
        if have.dtype != expected.dtype and have.dtype.name != expected.dtype.name:
            return Agreement(False, float("inf"), f"output {name!r} has dtype {have.dtype}, "
                             f"the reference {expected.dtype}")
        if expected.dtype.kind not in "fc":
            if not np.array_equal(have.astype(object), expected.astype(object)):
                return Agreement(False, float("inf"), f"output {name!r} differs from the "
                                 "reference")
            continue
        wide, exact = have.astype(np.float64), expected.astype(np.float64)
        with np.errstate(all="ignore"):
            diff = np.abs(wide - exact)
            error = float(np.max(np.where(np.isnan(diff), 0.0, diff), initial=0.0))
            limit = atol * max(1.0, float(np.nanmax(np.abs(exact), initial=0.0))) \
                if scaled else atol
            close = bool(np.allclose(wide, exact, rtol=rtol, atol=limit, equal_nan=True))
        worst = max(worst, error)
        if not close:
            return Agreement(False, worst, f"output {name!r} differs from the reference "
                             f"beyond rtol {rtol:g}, atol {limit:g} (max abs error "
                             f"{error:.3g})")
    return Agreement(True, worst)


def _agree_sequence(name: str, have: Any, expected: Any, rtol: float, atol: float,
                    scaled: bool) -> Agreement:
    """A sequence output, element by element."""
    if not isinstance(have, list | tuple) or not isinstance(expected, list | tuple):
        return Agreement(False, float("inf"), f"output {name!r} is a sequence on one side "
                                              "and a tensor on the other")
    if len(have) != len(expected):
        return Agreement(False, float("inf"), f"output {name!r} has {len(have)} elements, "
                                              f"the reference {len(expected)}")
    worst = 0.0
    for index, (h, e) in enumerate(zip(have, expected, strict=True)):
        verdict = agree({name: h}, {name: e}, rtol=rtol, atol=atol, scaled=scaled)
        if not verdict:
            return Agreement(False, verdict.max_abs_error, f"{verdict.why} (element {index})")
        worst = max(worst, verdict.max_abs_error)
    return Agreement(True, worst)


__all__ = ["ATOL", "RTOL", "Agreement", "agree"]
