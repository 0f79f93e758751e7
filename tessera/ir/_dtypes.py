"""ONNX tensor element types (the values of `onnx.TensorProto.DataType`) by name, and the
groups tessera reasons about. Plain ints, so that importing this never imports onnx."""

from __future__ import annotations

UNDEFINED = 0
FLOAT = 1
UINT8 = 2
INT8 = 3
UINT16 = 4
INT16 = 5
INT32 = 6
INT64 = 7
STRING = 8
BOOL = 9
FLOAT16 = 10
DOUBLE = 11
UINT32 = 12
UINT64 = 13
COMPLEX64 = 14
COMPLEX128 = 15
BFLOAT16 = 16
FLOAT8E4M3FN = 17
FLOAT8E4M3FNUZ = 18
FLOAT8E5M2 = 19
FLOAT8E5M2FNUZ = 20
UINT4 = 21
INT4 = 22
FLOAT4E2M1 = 23
FLOAT8E8M0 = 24
UINT2 = 25
INT2 = 26

SIGNED_INTEGERS = frozenset({INT8, INT16, INT32, INT64})
UNSIGNED_INTEGERS = frozenset({UINT8, UINT16, UINT32, UINT64})
# integers of whole bytes and bool: what shapes, axes and indices are made of
INTEGER_TYPES = SIGNED_INTEGERS | UNSIGNED_INTEGERS | {BOOL}
FLOAT8 = frozenset({FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, FLOAT8E8M0})
MINIFLOATS = FLOAT8 | {FLOAT4E2M1}  # floats narrower than 16 bits
COMPLEX = frozenset({COMPLEX64, COMPLEX128})
# types packed several to a byte, and their width in bits
SUB_BYTE_BITS = {UINT4: 4, INT4: 4, FLOAT4E2M1: 4, UINT2: 2, INT2: 2}
