"""An independent scalar model of the golden model's semantics (one Python int per element,
decoded with struct or by hand, explicit rules for NaN and signed zeros), the dtypes and bit
constants the reference tests share, and hypothesis strategies and property checks of the
variadic and reducing operators."""

import itertools
import math
import struct

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from maxaccel.contract.dtypes import FORMATS
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import edge_bits

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64
FLOAT_DTYPES = [F16, BF16, F32, F64]
INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES
ALL_DTYPES = NUMERIC_DTYPES + [np.bool_]


def dtype_id(dtype):
    return np.dtype(dtype).name


# --- an independent scalar model ----------------------------------------------------------------
# Written from the contract, not from the golden model: elements are Python ints holding the bits;
# floats are decoded to Python floats (struct for f32/f64, by hand for f16/bf16); the constants are
# literals, not taken from host/dtypes.

CANONICAL_NAN = {"float16": 0x7E00, "bfloat16": 0x7FC0, "float32": 0x7FC0_0000,
                 "float64": 0x7FF8_0000_0000_0000}
NEGATIVE_INFINITY = {"float16": 0xFC00, "bfloat16": 0xFF80, "float32": 0xFF80_0000,
                     "float64": 0xFFF0_0000_0000_0000}
HALF_FIELDS = {"float16": (5, 10), "bfloat16": (8, 7)}   # exponent bits, mantissa bits
SIGNED = {"int8", "int16", "int32", "int64"}


def decode(bits, name):
    """(is_nan, value) of one element: value is a Python float, int or bool."""
    if name == "float32":
        value = struct.unpack("<f", bits.to_bytes(4, "little"))[0]
        return math.isnan(value), value
    if name == "float64":
        value = struct.unpack("<d", bits.to_bytes(8, "little"))[0]
        return math.isnan(value), value
    if name in HALF_FIELDS:
        exponent_bits, mantissa_bits = HALF_FIELDS[name]
        sign = -1.0 if bits >> 15 else 1.0
        exponent = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1)
        mantissa = bits & ((1 << mantissa_bits) - 1)
        bias = (1 << (exponent_bits - 1)) - 1
        if exponent == (1 << exponent_bits) - 1:
            return mantissa != 0, sign * math.inf
        if exponent == 0:
            magnitude = math.ldexp(mantissa, 1 - bias - mantissa_bits)
        else:
            magnitude = math.ldexp(mantissa | 1 << mantissa_bits, exponent - bias - mantissa_bits)
        return False, math.copysign(magnitude, sign)
    if name == "bool":
        return False, bits != 0
    nbytes = np.dtype(name).itemsize
    return False, int.from_bytes(bits.to_bytes(nbytes, "little"), "little", signed=name in SIGNED)


def scalar_max(a, b, name):
    """max of two elements (bits as ints) by the contract's explicit rules."""
    a_nan, a_value = decode(a, name)
    b_nan, b_value = decode(b, name)
    if a_nan or b_nan:
        return CANONICAL_NAN[name]
    if a_value > b_value:
        return a
    if b_value > a_value:
        return b
    if isinstance(a_value, float) and a_value == 0.0:
        # +0 and -0 are equal as numbers; -0 only if both are -0.
        return a if math.copysign(1.0, a_value) > 0 else b
    return a


def scalar_lowest(name):
    if name in NEGATIVE_INFINITY:
        return NEGATIVE_INFINITY[name]
    if name in SIGNED:
        return 1 << (8 * np.dtype(name).itemsize - 1)
    return 0


def to_ints(array):
    """Flat list of the elements' bits as Python ints."""
    array = np.asarray(array)
    return np.ascontiguousarray(array).reshape(-1).view(f"u{array.dtype.itemsize}").tolist()


def from_ints(ints, shape, dtype):
    dtype = np.dtype(dtype)
    return np.array(ints, dtype=f"u{dtype.itemsize}").reshape(shape).view(dtype)


def flat_index(index, shape):
    flat = 0
    for i, n in zip(index, shape):
        flat = flat * n + i
    return flat


def scalar_broadcast_max(*arrays, pick=scalar_max, empty=scalar_lowest):
    """Element-wise ``pick`` (a two-element rule such as :func:`scalar_max`) of broadcast inputs,
    starting from ``empty(name)``."""
    name = np.dtype(arrays[0].dtype).name
    shapes = [a.shape for a in arrays]
    rank = max(len(s) for s in shapes)
    padded = [(1,) * (rank - len(s)) + s for s in shapes]
    out_shape = []
    for sizes in zip(*padded):
        sizes_not_one = {n for n in sizes if n != 1}
        assert len(sizes_not_one) <= 1, shapes
        out_shape.append(sizes_not_one.pop() if sizes_not_one else 1)
    ints = [to_ints(a) for a in arrays]
    result = []
    for index in itertools.product(*(range(n) for n in out_shape)):
        acc = empty(name)
        for values, shape in zip(ints, padded):
            source = tuple(0 if n == 1 else i for i, n in zip(index, shape))
            acc = pick(acc, values[flat_index(source, shape)], name)
        result.append(acc)
    return from_ints(result, tuple(out_shape), arrays[0].dtype)


def scalar_reduce_max(data, axes, keepdims, noop_with_empty_axes, pick=scalar_max,
                      empty=scalar_lowest):
    """ReduceMax element by element; with ``pick`` and ``empty`` any reduction of that shape."""
    name = np.dtype(data.dtype).name
    shape, rank = data.shape, data.ndim
    if axes is None or len(axes) == 0:
        if noop_with_empty_axes:
            return data.copy()
        axes = range(rank)
    reduced = {int(a) % rank for a in axes}
    if keepdims:
        out_shape = tuple(1 if k in reduced else n for k, n in enumerate(shape))
    else:
        out_shape = tuple(n for k, n in enumerate(shape) if k not in reduced)
    acc = {index: empty(name) for index in itertools.product(*(range(n) for n in out_shape))}
    for value, index in zip(to_ints(data), itertools.product(*(range(n) for n in shape))):
        if keepdims:
            key = tuple(0 if k in reduced else i for k, i in enumerate(index))
        else:
            key = tuple(i for k, i in enumerate(index) if k not in reduced)
        acc[key] = pick(acc[key], value, name)
    return from_ints(list(acc.values()), out_shape, data.dtype)


def bits_array(values, dtype):
    """Array of ``dtype`` from a list of bit patterns (ints)."""
    return np.array(values, dtype=f"u{np.dtype(dtype).itemsize}").view(dtype)


# --- (a) literal vectors from the spec texts ----------------------------------------------------


def bit_patterns(fmt):
    """Hypothesis strategy: bit patterns of a format, edge values mixed with arbitrary ones."""
    if fmt.kind == "bool":
        return st.integers(0, 1)
    edges = [int(v) for v in edge_bits(fmt).view(fmt.uint_dtype)]
    return st.one_of(st.sampled_from(edges), st.integers(0, (1 << fmt.bits) - 1))


def tensors(fmt, shape):
    return hnp.arrays(fmt.uint_dtype, shape, elements=bit_patterns(fmt)).map(
        lambda bits: bits.view(fmt.numpy_dtype))


NUMERIC_FORMATS = [f for f in FORMATS.values() if f.kind != "bool"]
FLOAT_FORMATS = [f for f in FORMATS.values() if f.is_float]


def check_variadic_property(data, operator, scalar):
    """Draw 1 to 4 broadcastable tensors of one numeric format and check ``operator`` (max or
    min) against the scalar model ``scalar``: bits, a new array, inputs left untouched."""
    fmt = data.draw(st.sampled_from(NUMERIC_FORMATS), label="format")
    count = data.draw(st.integers(1, 4), label="inputs")
    shapes = data.draw(hnp.mutually_broadcastable_shapes(
        num_shapes=count, min_dims=0, max_dims=4, min_side=0, max_side=3), label="shapes")
    arrays = [data.draw(tensors(fmt, shape)) for shape in shapes.input_shapes]
    copies = [a.copy() for a in arrays]
    result = operator(*arrays)
    assert isinstance(result, np.ndarray)
    assert_same_bits(result, scalar(*arrays))
    for array, copy in zip(arrays, copies):
        assert_same_bits(array, copy, "input left untouched")
        assert not np.shares_memory(result, array)


def check_reduction_property(data, operator, scalar):
    """Draw a tensor of any format, rank 0 to 4 with empty axes, and axes in every container,
    and check ``operator`` (reduce_max or reduce_min) against the scalar model ``scalar``."""
    fmt = data.draw(st.sampled_from(list(FORMATS.values())), label="format")
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))
    x = data.draw(tensors(fmt, shape), label="data")
    rank = len(shape)
    if data.draw(st.booleans(), label="axes given"):
        axes = data.draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank)
                         if rank else st.just([]), label="axes")
        axes = [a - rank if data.draw(st.booleans()) else a for a in axes]
        container = data.draw(st.sampled_from(["list", "tuple", "array"]))
        axes = {"list": list, "tuple": tuple,
                "array": lambda a: np.array(a, dtype=np.int64)}[container](axes)
    else:
        axes = None
    keepdims = data.draw(st.sampled_from([True, False, 1, 0]), label="keepdims")
    noop = data.draw(st.booleans(), label="noop_with_empty_axes")
    result = operator(x, axes, keepdims, noop)
    assert isinstance(result, np.ndarray)
    assert not np.shares_memory(result, x)
    assert_same_bits(result, scalar(x, axes, keepdims, noop))
