"""tessera's ONNX → torch converter table. Each entry maps one ONNX op (with the schema
versions it handles) to a function on torch tensors, plus a check that turns the attribute
and dtype cases it does not handle into a reason. The torch backend's `supports()` is exactly
this table."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F

from tessera._private.registry import Registry
from tessera.ir import _dtypes as dtypes

Tensor = torch.Tensor

# ONNX TensorProto data types the converter handles, and their torch dtypes.
DTYPES: dict[int, torch.dtype] = {
    dtypes.FLOAT: torch.float32, dtypes.UINT8: torch.uint8, dtypes.INT8: torch.int8,
    dtypes.INT16: torch.int16, dtypes.INT32: torch.int32, dtypes.INT64: torch.int64,
    dtypes.BOOL: torch.bool, dtypes.FLOAT16: torch.float16, dtypes.DOUBLE: torch.float64,
}
# float16 arithmetic on torch's CPU rounds differently from the reference: float16 is only
# claimed by ops that move data (ANY), not by ops that compute.
FLOATS = frozenset({dtypes.FLOAT, dtypes.DOUBLE})
INTS = frozenset({dtypes.UINT8, dtypes.INT8, dtypes.INT16, dtypes.INT32, dtypes.INT64})
NUMERIC = FLOATS | INTS


class Ctx:
    """What a converter sees of its node: attributes, the schema version, static inputs."""

    def __init__(self, op: str, version: int, attrs: dict[str, Any],
                 static: dict[int, list[Any]], out_types: list[int]) -> None:
        self.op = op
        self.version = version
        self.attrs = attrs
        self.static = static  # input index -> its value as a Python list (known at build time)
        self.out_types = out_types

    def get(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def ints(self, index: int, value: Tensor | None) -> list[int] | None:
        found = self._values(index, value)
        return None if found is None else [int(v) for v in found]

    def floats(self, index: int, value: Tensor | None) -> list[float] | None:
        found = self._values(index, value)
        return None if found is None else [float(v) for v in found]

    def _values(self, index: int, value: Tensor | None) -> list[Any] | None:
        """Input `index`'s values, flat: known statically where they are (no tensor read)."""
        if value is None:
            return None
        if index in self.static:
            return list(_flat(self.static[index]))
        return list(value.reshape(-1).tolist())


def _flat(value: Any) -> list[Any]:
    if isinstance(value, list):
        return [x for v in value for x in _flat(v)]
    return [value]


Check = Callable[[Ctx, list[int], list[int | None]], str | None]  # (ctx, in types, in ranks)


@dataclass(frozen=True)
class OpDef:
    fn: Callable[..., Any]
    dtypes: frozenset[int] = NUMERIC  # allowed types of input 0 (and of same-typed inputs)
    check: Check | None = None
    since: int = 1  # the lowest schema version the converter implements


OPS: Registry[OpDef] = Registry("torch converter")


def op(*names: str, dtypes: frozenset[int] = NUMERIC, check: Check | None = None,
       since: int = 1) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            OPS.register(name, OpDef(fn, dtypes, check, since))
        return fn
    return add


def _torch_dtype(onnx_type: int) -> torch.dtype:
    return DTYPES[onnx_type]


# -- elementwise --------------------------------------------------------------------------
_UNARY: dict[str, Callable[[Tensor], Tensor]] = {
    "Abs": torch.abs, "Neg": torch.neg, "Sign": torch.sign,
}
_UNARY_FLOAT: dict[str, Callable[[Tensor], Tensor]] = {
    "Exp": torch.exp, "Log": torch.log, "Sqrt": torch.sqrt, "Reciprocal": torch.reciprocal,
    "Sin": torch.sin, "Cos": torch.cos, "Tan": torch.tan, "Asin": torch.asin,
    "Acos": torch.acos, "Atan": torch.atan, "Sinh": torch.sinh, "Cosh": torch.cosh,
    "Asinh": torch.asinh, "Acosh": torch.acosh, "Atanh": torch.atanh, "Tanh": torch.tanh,
    "Sigmoid": torch.sigmoid, "Erf": torch.erf, "Floor": torch.floor, "Ceil": torch.ceil,
    "Round": torch.round, "Relu": torch.relu, "Softplus": F.softplus, "Softsign": F.softsign,
    "Mish": F.mish,
}


def _unary(fn: Callable[[Tensor], Tensor]) -> Callable[..., Tensor]:
    return lambda ctx, x: fn(x)


for _name, _fn in _UNARY.items():
    op(_name, dtypes=FLOATS | dtypes.SIGNED_INTEGERS)(_unary(_fn))
for _name, _fn in _UNARY_FLOAT.items():
    op(_name, dtypes=FLOATS if _name != "Relu" else FLOATS | dtypes.SIGNED_INTEGERS)(
        _unary(_fn))


def _same_types(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    known = [t for t in types if t]
    return None if len(set(known)) <= 1 else "inputs of different types"


@op("Add", check=_same_types)
def _add(ctx: Ctx, a: Tensor, b: Tensor) -> Tensor:
    return a + b


@op("Sub", check=_same_types)
def _sub(ctx: Ctx, a: Tensor, b: Tensor) -> Tensor:
    return a - b


@op("Mul", check=_same_types)
def _mul(ctx: Ctx, a: Tensor, b: Tensor) -> Tensor:
    return a * b


@op("Div", check=_same_types)
def _div(ctx: Ctx, a: Tensor, b: Tensor) -> Tensor:
    if a.dtype.is_floating_point:
        return a / b
    return torch.div(a, b, rounding_mode="trunc")


@op("Pow", dtypes=FLOATS | frozenset({dtypes.INT32, dtypes.INT64}))
def _pow(ctx: Ctx, a: Tensor, b: Tensor) -> Tensor:
    return torch.pow(a, b.to(a.dtype)).to(a.dtype)


@op("Mod", check=_same_types)
def _mod(ctx: Ctx, a: Tensor, b: Tensor) -> Tensor:
    return torch.fmod(a, b) if ctx.get("fmod", 0) else torch.remainder(a, b)


def _variadic(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[..., Tensor]:
    def run(ctx: Ctx, *xs: Tensor) -> Tensor:
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out
    return run


op("Max", check=_same_types, since=8)(_variadic(torch.maximum))
op("Min", check=_same_types, since=8)(_variadic(torch.minimum))
op("Sum", dtypes=FLOATS, check=_same_types, since=8)(_variadic(torch.add))


@op("Mean", dtypes=FLOATS, check=_same_types, since=8)
def _mean(ctx: Ctx, *xs: Tensor) -> Tensor:
    return _variadic(torch.add)(ctx, *xs) / len(xs)


_COMPARE: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "Equal": torch.eq, "Less": torch.lt, "Greater": torch.gt, "LessOrEqual": torch.le,
    "GreaterOrEqual": torch.ge,
}


def _binary(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[..., Tensor]:
    return lambda ctx, a, b: fn(a, b)


for _name, _binary_fn in _COMPARE.items():
    op(_name, dtypes=NUMERIC | frozenset({dtypes.BOOL}), check=_same_types)(_binary(_binary_fn))
_LOGIC: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "And": torch.logical_and, "Or": torch.logical_or, "Xor": torch.logical_xor,
}
for _name, _binary_fn in _LOGIC.items():
    op(_name, dtypes=frozenset({dtypes.BOOL}))(_binary(_binary_fn))
op("Not", dtypes=frozenset({dtypes.BOOL}))(lambda ctx, x: torch.logical_not(x))
op("IsNaN", dtypes=FLOATS)(lambda ctx, x: torch.isnan(x))


@op("IsInf", dtypes=FLOATS)
def _isinf(ctx: Ctx, x: Tensor) -> Tensor:
    pos, neg = ctx.get("detect_positive", 1), ctx.get("detect_negative", 1)
    return (torch.isposinf(x) & bool(pos)) | (torch.isneginf(x) & bool(neg))


@op("Where", dtypes=frozenset({dtypes.BOOL}))
def _where(ctx: Ctx, cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return torch.where(cond, a, b)


# -- activations --------------------------------------------------------------------------
op("LeakyRelu", dtypes=FLOATS)(lambda ctx, x: F.leaky_relu(x, ctx.get("alpha", 0.01)))
op("Elu", dtypes=FLOATS)(lambda ctx, x: F.elu(x, ctx.get("alpha", 1.0)))
op("Celu", dtypes=frozenset({dtypes.FLOAT}))(lambda ctx, x: F.celu(x, ctx.get("alpha", 1.0)))
op("ThresholdedRelu", dtypes=FLOATS)(
    lambda ctx, x: torch.where(x > ctx.get("alpha", 1.0), x, torch.zeros_like(x)))


@op("Selu", dtypes=FLOATS)
def _selu(ctx: Ctx, x: Tensor) -> Tensor:
    alpha = ctx.get("alpha", 1.67326319217681884765625)
    gamma = ctx.get("gamma", 1.05070102214813232421875)
    return gamma * torch.where(x > 0, x, alpha * (torch.exp(x) - 1))


@op("HardSigmoid", dtypes=FLOATS)
def _hard_sigmoid(ctx: Ctx, x: Tensor) -> Tensor:
    return torch.clamp(ctx.get("alpha", 0.2) * x + ctx.get("beta", 0.5), 0, 1)


op("HardSwish", dtypes=FLOATS)(lambda ctx, x: x * torch.clamp(x / 6 + 0.5, 0, 1))


@op("Gelu", dtypes=FLOATS)
def _gelu(ctx: Ctx, x: Tensor) -> Tensor:
    return F.gelu(x, approximate=ctx.get("approximate", "none"))


@op("PRelu", dtypes=FLOATS)
def _prelu(ctx: Ctx, x: Tensor, slope: Tensor) -> Tensor:
    return torch.where(x < 0, x * slope, x)


@op("Clip", dtypes=NUMERIC)
def _clip(ctx: Ctx, x: Tensor, low: Tensor | None = None, high: Tensor | None = None) -> Tensor:
    if ctx.version < 11:
        low_v, high_v = ctx.get("min"), ctx.get("max")
        return torch.clamp(x, low_v, high_v)
    if low is not None:
        x = torch.maximum(x, low.to(x.dtype))
    if high is not None:
        x = torch.minimum(x, high.to(x.dtype))
    return x


def _softmax_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    return None if ranks[0] is not None else "unknown rank"


def _softmax(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def run(ctx: Ctx, x: Tensor) -> Tensor:
        if ctx.version >= 13:
            return fn(x, dim=ctx.get("axis", -1))
        axis = ctx.get("axis", 1) % max(x.dim(), 1)  # before 13: flatten to 2-D at axis
        flat = x.reshape(math.prod(x.shape[:axis]), -1)
        return fn(flat, dim=1).reshape(x.shape)
    return run


op("Softmax", dtypes=FLOATS, check=_softmax_check)(_softmax(torch.softmax))
op("LogSoftmax", dtypes=FLOATS, check=_softmax_check)(_softmax(torch.log_softmax))


# -- linear algebra and convolution --------------------------------------------------------
# float16 matmul accumulates differently in torch than in the reference: not claimed
op("MatMul", dtypes=frozenset({dtypes.FLOAT, dtypes.DOUBLE, dtypes.INT32, dtypes.INT64}))(
    lambda ctx, a, b: torch.matmul(a, b))


@op("Gemm", dtypes=FLOATS)
def _gemm(ctx: Ctx, a: Tensor, b: Tensor, c: Tensor | None = None) -> Tensor:
    a = a.t() if ctx.get("transA", 0) else a
    b = b.t() if ctx.get("transB", 0) else b
    out = ctx.get("alpha", 1.0) * (a @ b)
    if c is not None:
        out = out + ctx.get("beta", 1.0) * c
    return out


def _einsum_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    return None if "..." not in ctx.get("equation", "") else "ellipsis in the equation"


@op("Einsum", dtypes=FLOATS, check=_einsum_check)
def _einsum(ctx: Ctx, *xs: Tensor) -> Tensor:
    return torch.einsum(ctx.get("equation").replace(" ", ""), *xs)


def _spatial(ctx: Ctx, rank: int) -> tuple[list[int], list[int], list[int]]:
    n = rank - 2
    return (ctx.get("strides", [1] * n), ctx.get("dilations", [1] * n),
            ctx.get("pads", [0] * (2 * n)))


def _same_pads(ctx: Ctx, shape: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
               dilations: Sequence[int]) -> list[int]:
    """Explicit begin..., end... pads for auto_pad SAME_UPPER / SAME_LOWER."""
    begins, ends = [], []
    for size, k, s, d in zip(shape, kernel, strides, dilations, strict=True):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        if ctx.get("auto_pad") == "SAME_UPPER":
            begins.append(small)
            ends.append(large)
        else:
            begins.append(large)
            ends.append(small)
    return begins + ends


def _resolve_pads(ctx: Ctx, x: Tensor, kernel: Sequence[int], strides: Sequence[int],
                  dilations: Sequence[int], pads: list[int]) -> list[int]:
    auto = ctx.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return _same_pads(ctx, x.shape[2:], kernel, strides, dilations)
    if auto == "VALID":
        return [0] * len(pads)
    return pads


def _torch_pad(pads: list[int]) -> list[int]:
    """ONNX begin..., end... to F.pad's last-dim-first (begin, end) pairs."""
    n = len(pads) // 2
    out: list[int] = []
    for i in reversed(range(n)):
        out += [pads[i], pads[i + n]]
    return out


def _spatial_rank(ranks: list[int | None], what: str) -> str | None:
    return None if ranks[0] in (3, 4, 5) else f"only 1-D, 2-D and 3-D {what}"


def _conv_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    return _spatial_rank(ranks, "convolutions")


_CONV = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}


@op("Conv", dtypes=FLOATS, check=_conv_check)
def _conv(ctx: Ctx, x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    strides, dilations, pads = _spatial(ctx, x.dim())
    pads = _resolve_pads(ctx, x, w.shape[2:], strides, dilations, pads)
    n = len(pads) // 2
    if pads[:n] == pads[n:]:
        return _CONV[x.dim()](x, w, b, strides, pads[:n], dilations, ctx.get("group", 1))
    x = F.pad(x, _torch_pad(pads))
    return _CONV[x.dim()](x, w, b, strides, 0, dilations, ctx.get("group", 1))


def _conv_transpose_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    pads = ctx.get("pads")
    if "output_shape" in ctx.attrs or ctx.get("auto_pad", "NOTSET") != "NOTSET":
        return "output_shape and auto_pad are not handled"
    if pads and pads[: len(pads) // 2] != pads[len(pads) // 2:]:
        return "asymmetric pads are not handled"
    return _spatial_rank(ranks, "transposed convolutions")


_CONV_T = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}


@op("ConvTranspose", dtypes=FLOATS, check=_conv_transpose_check)
def _conv_transpose(ctx: Ctx, x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    strides, dilations, pads = _spatial(ctx, x.dim())
    n = x.dim() - 2
    return _CONV_T[x.dim()](x, w, b, strides, pads[:n],
                            ctx.get("output_padding", [0] * n), ctx.get("group", 1), dilations)


def _pool_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    if ranks[0] not in (3, 4, 5):
        return "only 1-D, 2-D and 3-D pooling"
    if len(ctx.out_types) > 1:
        return "the Indices output is not handled"
    if ctx.get("storage_order", 0):
        return "storage_order=1 is not handled"
    pads = ctx.get("pads")
    n = len(pads or []) // 2
    if ctx.op == "AveragePool":
        if ctx.get("auto_pad", "NOTSET") != "NOTSET":
            return "AveragePool auto_pad is not handled"
        if pads and pads[:n] != pads[n:]:
            return "asymmetric AveragePool pads are not handled"
        if pads and any(2 * p > k for p, k in zip(pads[:n], ctx.get("kernel_shape"),
                                                  strict=False)):
            return "AveragePool pads larger than half the kernel"
        if ctx.get("dilations") and any(d != 1 for d in ctx.get("dilations")):
            return "AveragePool dilations are not handled"
        if ctx.get("ceil_mode", 0):
            return "AveragePool ceil_mode is not handled"
    elif ctx.get("ceil_mode", 0) and ctx.get("auto_pad", "NOTSET") != "NOTSET":
        return "ceil_mode with auto_pad is not handled"
    return None


_MAX_POOL = {3: F.max_pool1d, 4: F.max_pool2d, 5: F.max_pool3d}
_AVG_POOL = {3: F.avg_pool1d, 4: F.avg_pool2d, 5: F.avg_pool3d}


@op("MaxPool", dtypes=FLOATS | frozenset({dtypes.UINT8, dtypes.INT8}), check=_pool_check)
def _max_pool(ctx: Ctx, x: Tensor) -> Tensor:
    kernel = ctx.get("kernel_shape")
    strides, dilations, pads = _spatial(ctx, x.dim())
    strides = ctx.get("strides", [1] * len(kernel))
    pads = _resolve_pads(ctx, x, kernel, strides, dilations, pads)
    n = len(kernel)
    symmetric = pads[:n] == pads[n:] and all(2 * p <= k for p, k in zip(pads[:n], kernel,
                                                                          strict=True))
    dtype = x.dtype
    if not dtype.is_floating_point:
        x = x.float()
    if not symmetric:
        x = F.pad(x, _torch_pad(pads), value=-math.inf)
        pads = [0] * (2 * n)
    out = _MAX_POOL[x.dim()](x, kernel, strides, pads[:n], dilations,
                             ceil_mode=bool(ctx.get("ceil_mode", 0)))
    return out.to(dtype)


@op("AveragePool", dtypes=FLOATS, check=_pool_check)
def _avg_pool(ctx: Ctx, x: Tensor) -> Tensor:
    kernel = ctx.get("kernel_shape")
    n = len(kernel)
    pads = ctx.get("pads", [0] * (2 * n))
    strides = ctx.get("strides", [1] * n)
    return _AVG_POOL[x.dim()](x, kernel, strides, pads[:n],
                              count_include_pad=bool(ctx.get("count_include_pad", 0)))


op("GlobalAveragePool", dtypes=FLOATS)(
    lambda ctx, x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True))
op("GlobalMaxPool", dtypes=FLOATS)(
    lambda ctx, x: x.amax(dim=tuple(range(2, x.dim())), keepdim=True))


# -- normalisation ------------------------------------------------------------------------
def _bn_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    if ctx.get("training_mode", 0) or len(ctx.out_types) > 1:
        return "training mode is not handled"
    return None


@op("BatchNormalization", dtypes=FLOATS, check=_bn_check, since=9)
def _batch_norm(ctx: Ctx, x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor,
                var: Tensor) -> Tensor:
    return F.batch_norm(x, mean.to(x.dtype), var.to(x.dtype), scale, bias, False, 0.0,
                        ctx.get("epsilon", 1e-5))


@op("InstanceNormalization", dtypes=FLOATS)
def _instance_norm(ctx: Ctx, x: Tensor, scale: Tensor, bias: Tensor) -> Tensor:
    return F.instance_norm(x, weight=scale, bias=bias, eps=ctx.get("epsilon", 1e-5))


def _layer_norm_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    if len(ctx.out_types) > 1:
        return "the Mean and InvStdDev outputs are not handled"
    if ctx.get("stash_type", dtypes.FLOAT) != dtypes.FLOAT:
        return "stash_type other than float is not handled"
    return None if ranks[0] is not None else "unknown rank"


@op("LayerNormalization", dtypes=FLOATS, check=_layer_norm_check)
def _layer_norm(ctx: Ctx, x: Tensor, scale: Tensor, bias: Tensor | None = None) -> Tensor:
    axis = ctx.get("axis", -1) % x.dim()
    shape = x.shape[axis:]
    dtype = x.dtype
    out = F.layer_norm(x.float(), shape, scale.float().expand(shape),
                       None if bias is None else bias.float().expand(shape),
                       ctx.get("epsilon", 1e-5))
    return out.to(dtype)


# -- reductions ---------------------------------------------------------------------------
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduce_axes(ctx: Ctx, x: Tensor, axes_input: Tensor | None) -> tuple[int, ...] | None:
    if ctx.version >= _AXES_INPUT_SINCE.get(ctx.op, 18):
        axes = ctx.ints(1, axes_input)
    else:
        axes = ctx.get("axes")
    if not axes:
        return None if not ctx.get("noop_with_empty_axes", 0) else ()
    return tuple(a % max(x.dim(), 1) for a in axes)


def _reduction(fn: Callable[[Tensor, tuple[int, ...], bool], Tensor]) -> Callable[..., Tensor]:
    def run(ctx: Ctx, x: Tensor, axes_input: Tensor | None = None) -> Tensor:
        axes = _reduce_axes(ctx, x, axes_input)
        keep = bool(ctx.get("keepdims", 1))
        if axes == ():
            return x
        if axes is None:
            axes = tuple(range(x.dim()))
        if x.numel() == 0 or not axes:
            return fn(x, axes, keep)
        return fn(x, axes, keep)
    return run


def _extreme(name: str, empty: float) -> Callable[[Tensor, tuple[int, ...], bool], Tensor]:
    def run(x: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
        if not axes:
            return x
        if any(x.shape[a] == 0 for a in axes):  # ONNX: the identity of the reduction
            shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keep else \
                [d for i, d in enumerate(x.shape) if i not in axes]
            return torch.full(shape, empty, dtype=x.dtype, device=x.device)
        return getattr(x, name)(dim=axes, keepdim=keep)
    return run


_amax = _extreme("amax", -math.inf)
_amin = _extreme("amin", math.inf)


def _prod(x: Tensor, axes: tuple[int, ...], keep: bool) -> Tensor:
    for axis in sorted(axes, reverse=True):
        x = x.prod(dim=axis, keepdim=keep)
    return x


def _nonempty(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    return None if ranks[0] else "a rank-0 or unknown-rank input"


op("ReduceSum", check=_nonempty)(_reduction(lambda x, a, k: x.sum(dim=a, keepdim=k)))
op("ReduceMean", dtypes=FLOATS, check=_nonempty)(
    _reduction(lambda x, a, k: x.mean(dim=a, keepdim=k)))
op("ReduceMax", dtypes=FLOATS | frozenset({dtypes.INT32, dtypes.INT64}), check=_nonempty)(
    _reduction(_amax))
op("ReduceMin", dtypes=FLOATS | frozenset({dtypes.INT32, dtypes.INT64}), check=_nonempty)(
    _reduction(_amin))
op("ReduceProd", check=_nonempty)(_reduction(_prod))
op("ReduceL1", dtypes=FLOATS, check=_nonempty)(
    _reduction(lambda x, a, k: x.abs().sum(dim=a, keepdim=k)))
op("ReduceL2", dtypes=FLOATS, check=_nonempty)(
    _reduction(lambda x, a, k: x.square().sum(dim=a, keepdim=k).sqrt()))
op("ReduceSumSquare", dtypes=FLOATS, check=_nonempty)(
    _reduction(lambda x, a, k: x.square().sum(dim=a, keepdim=k)))
op("ReduceLogSum", dtypes=FLOATS, check=_nonempty)(
    _reduction(lambda x, a, k: x.sum(dim=a, keepdim=k).log()))
op("ReduceLogSumExp", dtypes=FLOATS, check=_nonempty)(
    _reduction(lambda x, a, k: torch.logsumexp(x, dim=a, keepdim=k)))


def _arg_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    return "select_last_index=1 is not handled" if ctx.get("select_last_index", 0) else None


@op("ArgMax", dtypes=FLOATS | frozenset({dtypes.INT32, dtypes.INT64}), check=_arg_check)
def _argmax(ctx: Ctx, x: Tensor) -> Tensor:
    return torch.argmax(x, dim=ctx.get("axis", 0), keepdim=bool(ctx.get("keepdims", 1)))


@op("ArgMin", dtypes=FLOATS | frozenset({dtypes.INT32, dtypes.INT64}), check=_arg_check)
def _argmin(ctx: Ctx, x: Tensor) -> Tensor:
    return torch.argmin(x, dim=ctx.get("axis", 0), keepdim=bool(ctx.get("keepdims", 1)))


@op("CumSum", dtypes=FLOATS | frozenset({dtypes.INT32, dtypes.INT64}))
def _cumsum(ctx: Ctx, x: Tensor, axis: Tensor) -> Tensor:
    dim = ctx.ints(1, axis)[0]  # type: ignore[index]
    if ctx.get("reverse", 0):
        x = x.flip(dim)
    out = torch.cumsum(x, dim)
    if ctx.get("exclusive", 0):
        out = out - x
    return out.flip(dim) if ctx.get("reverse", 0) else out


# -- shapes and data movement --------------------------------------------------------------
ANY = NUMERIC | frozenset({dtypes.BOOL, dtypes.FLOAT16})


@op("Identity", dtypes=ANY)
def _identity(ctx: Ctx, x: Tensor) -> Tensor:
    return x


def _dropout_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    if len(ranks) > 2:
        return "the training_mode input is not handled (training is random)"
    return "the mask output is not handled" if len(ctx.out_types) > 1 else None


@op("Dropout", dtypes=FLOATS, check=_dropout_check)
def _dropout(ctx: Ctx, x: Tensor, ratio: Tensor | None = None,
             training: Tensor | None = None) -> Tensor:
    if training is not None and bool(ctx.ints(2, training)[0]):  # type: ignore[index]
        raise ValueError("Dropout in training mode is not deterministic")
    return x


@op("Reshape", dtypes=ANY, since=5)
def _reshape(ctx: Ctx, x: Tensor, shape: Tensor) -> Tensor:
    dims = ctx.ints(1, shape) or []
    if not ctx.get("allowzero", 0):
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


@op("Flatten", dtypes=ANY)
def _flatten(ctx: Ctx, x: Tensor) -> Tensor:
    axis = ctx.get("axis", 1)
    axis = axis + x.dim() if axis < 0 else axis
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@op("Transpose", dtypes=ANY)
def _transpose(ctx: Ctx, x: Tensor) -> Tensor:
    return x.permute(ctx.get("perm", list(reversed(range(x.dim())))))


def _axes(ctx: Ctx, index: int, value: Tensor | None) -> list[int] | None:
    return ctx.ints(index, value) if ctx.version >= 13 else ctx.get("axes")


@op("Squeeze", dtypes=ANY)
def _squeeze(ctx: Ctx, x: Tensor, axes_input: Tensor | None = None) -> Tensor:
    axes = _axes(ctx, 1, axes_input)
    if axes is None:
        return x.reshape([d for d in x.shape if d != 1])
    drop = {a % x.dim() for a in axes}
    return x.reshape([d for i, d in enumerate(x.shape) if i not in drop])


@op("Unsqueeze", dtypes=ANY)
def _unsqueeze(ctx: Ctx, x: Tensor, axes_input: Tensor | None = None) -> Tensor:
    axes = _axes(ctx, 1, axes_input) or []
    rank = x.dim() + len(axes)
    shape = list(x.shape)
    for axis in sorted(a % rank for a in axes):
        shape.insert(axis, 1)
    return x.reshape(shape)


@op("Concat", dtypes=ANY)
def _concat(ctx: Ctx, *xs: Tensor) -> Tensor:
    return torch.cat(xs, dim=ctx.get("axis"))


@op("Split", dtypes=ANY)
def _split(ctx: Ctx, x: Tensor, split: Tensor | None = None) -> tuple[Tensor, ...]:
    axis = ctx.get("axis", 0)
    sizes = ctx.ints(1, split) if ctx.version >= 13 else ctx.get("split")
    count = len(ctx.out_types)
    if not sizes:
        size = x.shape[axis]
        chunk = -(-size // count)
        sizes = [min(chunk, size - i * chunk) for i in range(count)]
    return tuple(torch.split(x, list(sizes), dim=axis))


@op("Slice", dtypes=ANY, since=10)
def _slice(ctx: Ctx, x: Tensor, starts: Tensor, ends: Tensor, axes: Tensor | None = None,
           steps: Tensor | None = None) -> Tensor:
    begin, end = ctx.ints(1, starts) or [], ctx.ints(2, ends) or []
    dims = ctx.ints(3, axes) or list(range(len(begin)))
    step = ctx.ints(4, steps) or [1] * len(begin)
    for b, e, axis, s in zip(begin, end, dims, step, strict=True):
        size = x.shape[axis]
        indices = range(size)[slice(b, e, s)]
        if s > 0:
            x = x.narrow(axis, indices.start, len(indices)) if s == 1 else \
                x.index_select(axis, torch.arange(indices.start, indices.start + s * len(indices),
                                                  s, device=x.device))
        else:
            x = x.index_select(axis, torch.tensor(list(indices), dtype=torch.long,
                                                  device=x.device))
    return x


def _positive(index: Tensor, size: int) -> Tensor:
    return torch.where(index < 0, index + size, index).long()


@op("Gather", dtypes=ANY)
def _gather(ctx: Ctx, x: Tensor, index: Tensor) -> Tensor:
    axis = ctx.get("axis", 0) % x.dim()
    flat = _positive(index, x.shape[axis]).reshape(-1)
    out = x.index_select(axis, flat)
    return out.reshape((*x.shape[:axis], *index.shape, *x.shape[axis + 1:]))


@op("GatherElements", dtypes=ANY)
def _gather_elements(ctx: Ctx, x: Tensor, index: Tensor) -> Tensor:
    axis = ctx.get("axis", 0) % x.dim()
    return torch.gather(x, axis, _positive(index, x.shape[axis]))


@op("Expand", dtypes=ANY, since=8)
def _expand(ctx: Ctx, x: Tensor, shape: Tensor) -> Tensor:
    target = torch.broadcast_shapes(tuple(x.shape), tuple(ctx.ints(1, shape) or []))
    return x.expand(target)


@op("Tile", dtypes=ANY, since=6)
def _tile(ctx: Ctx, x: Tensor, repeats: Tensor) -> Tensor:
    return x.repeat(ctx.ints(1, repeats) or [])


@op("Shape", dtypes=ANY)
def _shape(ctx: Ctx, x: Tensor) -> Tensor:
    dims = list(x.shape)[slice(ctx.get("start", 0), ctx.get("end"))]
    return torch.tensor(dims, dtype=torch.int64, device=x.device)


op("Size", dtypes=ANY)(lambda ctx, x: torch.tensor(x.numel(), dtype=torch.int64,
                                                    device=x.device))


def _cast_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    to = ctx.get("to")
    if to not in DTYPES:
        return f"cast to ONNX type {to} is not handled"
    if types and types[0] in FLOATS and to in INTS:
        return "float to integer casts differ across backends on out-of-range values"
    return None


@op("Cast", dtypes=ANY, check=_cast_check, since=6)
def _cast(ctx: Ctx, x: Tensor) -> Tensor:
    return x.to(_torch_dtype(ctx.get("to")))


def _cast_like_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    if len(types) > 1 and types[1] not in DTYPES:
        return "cast to this type is not handled"
    if types and len(types) > 1 and types[0] in FLOATS and types[1] in INTS:
        return "float to integer casts differ across backends on out-of-range values"
    return None


op("CastLike", dtypes=ANY, check=_cast_like_check)(lambda ctx, x, like: x.to(like.dtype))


def _constant_of_shape_check(ctx: Ctx, types: list[int], ranks: list[int | None]
                             ) -> str | None:
    value = ctx.get("value")
    if value is not None and getattr(value, "data_type", dtypes.FLOAT) not in DTYPES:
        return "this value type is not handled"
    return None


@op("ConstantOfShape", dtypes=frozenset({dtypes.INT64}), check=_constant_of_shape_check)
def _constant_of_shape(ctx: Ctx, shape: Tensor) -> Tensor:
    value = ctx.get("value")
    dims = ctx.ints(0, shape) or []
    if value is None:
        return torch.zeros(dims, dtype=torch.float32, device=shape.device)
    return value.reshape(()).to(shape.device).expand(dims).clone()


@op("Range", dtypes=FLOATS | frozenset({dtypes.INT16, dtypes.INT32, dtypes.INT64}))
def _range(ctx: Ctx, start: Tensor, limit: Tensor, delta: Tensor) -> Tensor:
    count = max(math.ceil((limit.item() - start.item()) / delta.item()), 0)
    return start + torch.arange(count, dtype=start.dtype, device=start.device) * delta


def _trilu(ctx: Ctx, x: Tensor, k: Tensor | None = None) -> Tensor:
    offset = (ctx.ints(1, k) or [0])[0]
    return torch.triu(x, offset) if ctx.get("upper", 1) else torch.tril(x, offset)


op("Trilu", dtypes=ANY)(_trilu)


def _pad_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    if ctx.get("mode", "constant") == "wrap":
        return "wrap mode is not handled"
    if ctx.version < 11:
        return "Pad before opset 11 is not handled"
    return None


@op("Pad", dtypes=FLOATS | frozenset({dtypes.INT32, dtypes.INT64}), check=_pad_check)
def _pad(ctx: Ctx, x: Tensor, pads: Tensor, value: Tensor | None = None,
         axes: Tensor | None = None) -> Tensor:
    amounts = ctx.ints(1, pads) or []
    rank = x.dim()
    dims = [a % rank for a in (ctx.ints(3, axes) or list(range(rank)))]
    full = [0] * (2 * rank)
    n = len(dims)
    for i, axis in enumerate(dims):
        full[axis], full[axis + rank] = amounts[i], amounts[i + n]
    mode = ctx.get("mode", "constant")
    torch_pads = _torch_pad(full)
    if mode == "constant":
        fill = 0.0 if value is None else float(value.reshape(-1)[0].item()) \
            if value.numel() else 0.0
        return F.pad(x, torch_pads, value=fill)
    if any(p < 0 for p in torch_pads):
        raise ValueError("negative pads with reflect or edge mode")
    moving = [i for i in range(rank) if full[i] or full[i + rank]]
    torch_mode = "reflect" if mode == "reflect" else "replicate"
    # torch pads only trailing dims in these modes: move the padded dims last
    order = [i for i in range(rank) if i not in moving] + moving
    y = x.permute(order)
    lead = y.shape[: rank - len(moving)]
    y = y.reshape(1, math.prod(lead), *y.shape[rank - len(moving):])
    pairs: list[int] = []
    for axis in reversed(moving):
        pairs += [full[axis], full[axis + rank]]
    if y.dtype.is_floating_point:
        y = F.pad(y, pairs, mode=torch_mode)
    else:
        y = F.pad(y.double(), pairs, mode=torch_mode).to(x.dtype)
    y = y.reshape(*lead, *y.shape[2:])
    return y.permute([order.index(i) for i in range(rank)])


def _resize_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    mode = ctx.get("mode", "nearest")
    transform = ctx.get("coordinate_transformation_mode", "half_pixel")
    if ctx.version < 11:
        return "Resize before opset 11 is not handled"
    if ranks[0] not in (3, 4, 5):
        return "only 3-D to 5-D inputs"
    if ctx.get("antialias", 0) or ctx.get("axes") or ctx.get("keep_aspect_ratio_policy",
                                                             "stretch") != "stretch":
        return "antialias, axes and keep_aspect_ratio_policy are not handled"
    if mode == "nearest":
        if transform == "asymmetric" and ctx.get("nearest_mode", "round_prefer_floor") == "floor":
            return None
        return "nearest only with asymmetric coordinates and floor rounding"
    if mode == "linear" and transform == "half_pixel":
        return None
    return f"mode {mode} with {transform} coordinates is not handled"


@op("Resize", dtypes=FLOATS, check=_resize_check)
def _resize(ctx: Ctx, x: Tensor, roi: Tensor | None = None, scales: Tensor | None = None,
            sizes: Tensor | None = None) -> Tensor:
    size_list = ctx.ints(3, sizes) if sizes is not None and sizes.numel() else None
    scale_list = ctx.floats(2, scales) if scales is not None and scales.numel() else None
    if size_list is None:
        assert scale_list is not None
        if scale_list[:2] != [1.0, 1.0]:
            raise ValueError("Resize of the batch or channel dimension")
        size_list = [math.floor(d * s) for d, s in zip(x.shape, scale_list, strict=True)]
    if list(size_list[:2]) != list(x.shape[:2]):
        raise ValueError("Resize of the batch or channel dimension")
    spatial = size_list[2:]
    mode = ctx.get("mode", "nearest")
    transform = ctx.get("coordinate_transformation_mode", "half_pixel")
    if mode == "nearest":
        scale_factor = list(scale_list[2:]) if scale_list else None
        if scale_factor is not None:
            return F.interpolate(x, scale_factor=scale_factor, mode="nearest")
        return F.interpolate(x, size=spatial, mode="nearest")
    del transform  # the check admits half_pixel only, which is torch's align_corners=False
    torch_mode = {3: "linear", 4: "bilinear", 5: "trilinear"}[x.dim()]
    if scale_list is None:
        return F.interpolate(x, size=spatial, mode=torch_mode, align_corners=False)
    return F.interpolate(x, scale_factor=scale_list[2:], mode=torch_mode, align_corners=False)


@op("DepthToSpace", dtypes=FLOATS)
def _depth_to_space(ctx: Ctx, x: Tensor) -> Tensor:
    b = ctx.get("blocksize")
    n, c, h, w = x.shape
    if ctx.get("mode", "DCR") == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    return None if ctx.get("mode", "DCR") == "DCR" else "only DCR mode"


@op("SpaceToDepth", dtypes=FLOATS, check=_space_to_depth_check)
def _space_to_depth(ctx: Ctx, x: Tensor) -> Tensor:
    b = ctx.get("blocksize")
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


def _topk_check(ctx: Ctx, types: list[int], ranks: list[int | None]) -> str | None:
    return None if ctx.get("sorted", 1) else "unsorted TopK is not handled"


@op("TopK", dtypes=FLOATS | frozenset({dtypes.INT32, dtypes.INT64}), check=_topk_check, since=10)
def _topk(ctx: Ctx, x: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    count = (ctx.ints(1, k) or [0])[0]
    axis = ctx.get("axis", -1)
    # a stable sort: among equal values the lower index comes first, as ONNX requires
    values, indices = torch.sort(x, dim=axis, descending=bool(ctx.get("largest", 1)),
                                 stable=True)
    return values.narrow(axis, 0, count), indices.narrow(axis, 0, count)


@op("OneHot", dtypes=frozenset({dtypes.INT32, dtypes.INT64}) | FLOATS)
def _one_hot(ctx: Ctx, indices: Tensor, depth: Tensor, values: Tensor) -> Tensor:
    size = int(ctx.floats(1, depth)[0])  # type: ignore[index]
    index = indices.long()
    index = torch.where(index < 0, index + size, index)
    hot = F.one_hot(index.clamp(0, size - 1), size) * ((index >= 0) & (index < size)
                                                         ).unsqueeze(-1)
    axis = ctx.get("axis", -1) % (indices.dim() + 1)
    hot = hot.movedim(-1, axis)
    return torch.where(hot.bool(), values[1], values[0])
