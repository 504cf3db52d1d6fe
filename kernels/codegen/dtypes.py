"""ONNX element types as the generated CUDA code sees them: storage type and compute type."""
from __future__ import annotations

from onnx import TensorProto as T

# onnx dtype -> (C storage type, C compute type, bytes)
_TYPES = {
    T.FLOAT: ("float", "float", 4),
    T.FLOAT16: ("__half", "float", 2),
    T.BFLOAT16: ("__nv_bfloat16", "float", 2),
    T.INT64: ("long long", "long long", 8),
    T.INT32: ("int", "long long", 4),
    T.INT16: ("short", "long long", 2),
    T.UINT16: ("unsigned short", "long long", 2),
    T.INT8: ("signed char", "long long", 1),
    T.UINT8: ("unsigned char", "long long", 1),
    T.FLOAT8E4M3FN: ("plus_fp8e4m3", "float", 1),
    T.FLOAT8E5M2: ("plus_fp8e5m2", "float", 1),
    T.INT4: ("plus_int4", "long long", 0),          # packed: loads only (plus_load_int4)
    T.UINT4: ("plus_uint4", "long long", 0),
    T.BOOL: ("bool", "bool", 1),
}
FLOATS = {T.FLOAT, T.FLOAT16, T.BFLOAT16}
PACKED = {T.INT4, T.UINT4}
INT8 = {T.INT8, T.UINT8}


class UnsupportedDtype(ValueError):
    pass


def _entry(dtype: int):
    try:
        return _TYPES[dtype]
    except KeyError:
        name = T.DataType.Name(dtype) if dtype in T.DataType.values() else str(dtype)
        raise UnsupportedDtype(f"element type {name} has no kernel support") from None


def storage(dtype: int) -> str:
    return _entry(dtype)[0]


def compute(dtype: int) -> str:
    return _entry(dtype)[1]


def itemsize(dtype: int) -> int:
    return _entry(dtype)[2]


def load(dtype: int, ptr: str, index: str) -> str:
    """C expression loading element `index` of a tensor at `ptr`, in its compute type."""
    st, ct, _ = _entry(dtype)
    if dtype in PACKED:
        return f"plus_load_{st[5:]}({ptr}, {index})"
    raw = f"plus_load<{st}>({ptr}, {index})"
    if ct == "float" and st != "float":
        return f"plus_f({raw})"
    if ct == "long long" and st != "long long":
        return f"(long long){raw}"
    return raw


def store(dtype: int, ptr: str, index: str, value: str) -> str:
    st, ct, _ = _entry(dtype)
    if dtype in PACKED:
        raise UnsupportedDtype(f"element type {T.DataType.Name(dtype)} is packed two per byte: kernels read it, "
                               "never write it")
    if st == ct:
        return f"plus_store<{st}>({ptr}, {index}, {value});"
    return f"plus_store<{st}>({ptr}, {index}, plus_cvt<{st}>({value}));"


def convert(value: str, from_ct: str, to_ct: str) -> str:
    """Convert a compute-type expression between compute types (float / long long / bool)."""
    if from_ct == to_ct:
        return value
    if to_ct == "bool":
        return f"(({value}) != 0)"
    return f"(({to_ct})({value}))"
