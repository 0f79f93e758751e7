"""Faster implementations of ops onnx.reference computes one element at a time, with the same
meaning, for the reference backend (the oracle's second voter). Its MaxPool loops in Python
over every output element where strides or dilations are not 1: 0.6 of ResNet-50's 0.9 s
per image. Here each is numpy over strided windows; tests/oracle/test_reference_fast.py
checks them against onnx.reference's own on generated shapes and attributes."""

from __future__ import annotations

from typing import Any


def _pool_geometry(spatial: tuple[int, ...], kernel: list[int], strides: list[int],
                   dilations: list[int], pads: list[int], ceil_mode: bool, auto_pad: str
                   ) -> tuple[list[int], list[tuple[int, int]]]:
    """Each spatial axis's output size and (begin, end) padding, as onnx.reference's
    MaxPool computes them (its `_max_pool`)."""
    import math

    rank = len(kernel)
    padding = [(pads[i], pads[i + rank]) for i in range(rank)]
    out = []
    for i, size in enumerate(spatial):
        reach = (kernel[i] - 1) * dilations[i] + 1
        span = (size + sum(padding[i]) - reach) / strides[i] + 1
        n = int(math.ceil(span) if ceil_mode else math.floor(span))
        if ceil_mode and (n - 1) * strides[i] >= size + padding[i][0]:
            n -= 1
        out.append(n)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        for i, size in enumerate(spatial):
            out[i] = int(math.ceil(size / strides[i]) if auto_pad == "SAME_UPPER"
                         else math.floor(size / strides[i]))
            total = (out[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size
            padding[i] = (total // 2, total - total // 2)
    elif auto_pad == "VALID":
        for i, size in enumerate(spatial):
            reach = (kernel[i] - 1) * dilations[i] + 1
            out[i] = math.ceil((size - reach + 1) / strides[i])
    return out, padding


def max_pool(x: Any, kernel: list[int], strides: list[int] | None, dilations: list[int] | None,
             pads: list[int] | None, ceil_mode: bool, auto_pad: str) -> Any:
    """MaxPool's one output: each window's largest element that lies inside `x`, 0 where
    none does (as onnx.reference leaves it)."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    rank = len(kernel)
    strides = list(strides or [1] * rank)
    dilations = list(dilations or [1] * rank)
    out, padding = _pool_geometry(tuple(x.shape[2:]), kernel, strides, dilations,
                                  list(pads or [0] * (2 * rank)), ceil_mode, auto_pad)
    if min(out, default=1) <= 0:
        return np.zeros(x.shape[:2] + tuple(max(n, 0) for n in out), dtype=x.dtype)
    lowest = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
    widths, reach = [(0, 0), (0, 0)], []
    for i, size in enumerate(x.shape[2:]):
        r = (kernel[i] - 1) * dilations[i] + 1
        need = (out[i] - 1) * strides[i] + r  # from the first window's start
        begin = padding[i][0]
        widths.append((max(begin, 0), max(need - begin - size, 0)))
        reach.append(r)
    padded = np.pad(x, widths, constant_values=lowest)
    inside = np.pad(np.ones(x.shape[2:], dtype=bool), widths[2:], constant_values=False)
    # a negative begin padding drops the first elements instead
    start = tuple(slice(max(-padding[i][0], 0), None) for i in range(rank))
    padded, inside = padded[(slice(None), slice(None), *start)], inside[start]
    axes = tuple(range(2, 2 + rank))
    picks: tuple[Any, ...] = (Ellipsis, *(slice(None, (out[i] - 1) * strides[i] + 1, strides[i])
                         for i in range(rank)), *(slice(None, None, d) for d in dilations))
    windows = sliding_window_view(padded, reach, axis=axes)[picks]
    found = windows.max(axis=tuple(range(-rank, 0)))
    covered = sliding_window_view(inside, reach)[picks[1:]].any(axis=tuple(range(-rank, 0)))
    return np.where(covered, found, np.zeros((), dtype=x.dtype)).astype(x.dtype, copy=False)


def fast_ops() -> list[type]:
    """The faster implementations (`new_ops` of the reference backend's evaluator)."""
    import numpy as np
    from onnx.reference.ops.op_max_pool import MaxPool as Original

    class MaxPool(Original):
        op_domain = ""

        def _run(  # type: ignore[override]
                self, x: Any, auto_pad: Any = None, ceil_mode: Any = None,
                dilations: Any = None, kernel_shape: Any = None, pads: Any = None,
                storage_order: Any = None, strides: Any = None) -> tuple[Any, ...]:
            indices = len([o for o in self.onnx_node.output if o]) > 1
            nan = np.issubdtype(x.dtype, np.floating) and bool(np.isnan(x).any())
            # unit strides and dilations take onnx.reference's other path (`CommonPool`),
            # whose windows and output sizes are its own: it keeps them
            unit = all(v == 1 for v in [*(strides or []), *(dilations or [])])
            if indices or nan or unit or not 3 <= x.ndim <= 5:
                return super()._run(  # type: ignore[no-any-return,no-untyped-call]
                    x, auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations,
                    kernel_shape=kernel_shape, pads=pads, storage_order=storage_order,
                    strides=strides)
            return (max_pool(x, list(kernel_shape), strides, dilations, pads,
                             bool(ceil_mode), auto_pad or "NOTSET"),)

    return [MaxPool]


__all__ = ["fast_ops", "max_pool"]
