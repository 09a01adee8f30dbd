"""The golden model (maxaccel.sim.reference) and the test values (maxaccel.sim.values).

Checked four ways: literal vectors worked out by hand from the ONNX and SONNX texts; an
independent scalar model (one Python int per element, decoded with struct or by hand, explicit
rules for NaN and signed zeros) on edge values, random tensors and hypothesis-drawn cases;
algebraic laws that must hold bit for bit; and every error path.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from maxaccel.contract.dtypes import format_of
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import edge_bits, random_values

from scalar_model import (F16, BF16, F32, F64, FLOAT_DTYPES, INT_DTYPES, NUMERIC_DTYPES,
                          ALL_DTYPES, dtype_id, CANONICAL_NAN, NEGATIVE_INFINITY, HALF_FIELDS,
                          decode, to_ints, from_ints, scalar_broadcast_max, scalar_reduce_max,
                          bits_array, tensors, FLOAT_FORMATS, check_variadic_property,
                          check_reduction_property)


def test_spec_max_example():
    # spec/000 Max-13 "default" example.
    data_0 = np.array([3, 2, 1], dtype=F32)
    data_1 = np.array([1, 4, 4], dtype=F32)
    data_2 = np.array([2, 5, 3], dtype=F32)
    assert_same_bits(reference.max(data_0, data_1, data_2), np.array([3, 5, 4], dtype=F32))
    assert_same_bits(reference.max(data_0), data_0)
    assert_same_bits(reference.max(data_0, data_1), np.array([3, 4, 4], dtype=F32))


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_spec_max_all_numeric_types(dtype):
    # spec/000 "_max_all_numeric_types".
    result = reference.max(np.array([3, 2, 1], dtype=dtype), np.array([1, 4, 4], dtype=dtype))
    assert_same_bits(result, np.array([3, 4, 4], dtype=dtype))


def test_spec_max_broadcasting():
    # Multidirectional broadcasting (spec/000 and spec/003 R2), worked by hand.
    column = np.array([[1], [5], [-3]], dtype=np.int32)          # 3 x 1
    row = np.array([0, 2, 4, -7], dtype=np.int32)                 # 4
    scalar = np.array(3, dtype=np.int32)                          # rank 0
    expected = np.array([[3, 3, 4, 3], [5, 5, 5, 5], [3, 3, 4, 3]], dtype=np.int32)
    assert_same_bits(reference.max(column, row, scalar), expected)
    assert_same_bits(reference.max(np.zeros((2, 0, 3), np.uint8), np.ones((1, 3), np.uint8)),
                     np.zeros((2, 0, 3), np.uint8))


REDUCE_DATA = [[[5, 1], [20, 2]], [[30, 1], [40, 2]], [[55, 1], [60, 2]]]


def test_spec_reduce_max_examples():
    # spec/001 ReduceMax-13 examples.
    data = np.array(REDUCE_DATA, dtype=F32)
    assert_same_bits(reference.reduce_max(data, axes=[1], keepdims=0),
                     np.array([[20, 2], [40, 2], [60, 2]], dtype=F32))
    assert_same_bits(reference.reduce_max(data, axes=[1], keepdims=1),
                     np.array([[[20, 2]], [[40, 2]], [[60, 2]]], dtype=F32))
    assert_same_bits(reference.reduce_max(data, keepdims=1), np.array([[[60]]], dtype=F32))
    assert_same_bits(reference.reduce_max(data, axes=[-2], keepdims=1),
                     np.array([[[20, 2]], [[40, 2]], [[60, 2]]], dtype=F32))
    assert_same_bits(reference.reduce_max(data, axes=[0, 2], keepdims=0),
                     np.array([55, 60], dtype=F32))
    assert_same_bits(reference.reduce_max(data, keepdims=0), np.array(60, dtype=F32))


def test_spec_reduce_max_18_and_20():
    # onnx.defs ReduceMax-18/20: empty set -> -inf / minimum; bool False < True; noop.
    empty = np.zeros((2, 0, 4), dtype=F32)
    assert_same_bits(reference.reduce_max(empty, axes=[1]),
                     bits_array([0xFF80_0000] * 8, F32).reshape(2, 1, 4))
    assert_same_bits(reference.reduce_max(empty, axes=[0], keepdims=0), np.zeros((0, 4), F32))
    assert_same_bits(reference.reduce_max(np.zeros((0,), np.int16)), np.array([-32768], np.int16))
    assert_same_bits(reference.reduce_max(np.zeros((3, 0), np.uint64), axes=1, keepdims=0),
                     np.zeros(3, np.uint64))
    assert_same_bits(reference.reduce_max(np.zeros((0,), np.bool_)), np.array([False]))
    booleans = np.array([[True, True], [True, False], [False, True], [False, False]])
    assert_same_bits(reference.reduce_max(booleans, axes=[1]),
                     np.array([[True], [True], [True], [False]]))
    data = np.array(REDUCE_DATA, dtype=F32)
    for empty_axes in (None, [], (), np.array([], dtype=np.int64)):
        assert_same_bits(reference.reduce_max(data, axes=empty_axes, noop_with_empty_axes=True),
                         data)
        assert_same_bits(reference.reduce_max(data, axes=empty_axes, keepdims=0),
                         np.array(60, dtype=F32))
    # Rank 0 is valid: reducing all (no) axes gives the element back.
    assert_same_bits(reference.reduce_max(np.array(-7, np.int8)), np.array(-7, np.int8))


def test_noop_passes_bits_through():
    # The ONNX identity takes no max, so NaN payloads and -0 come out as they went in.
    data = bits_array([0x7F80_0001, 0xFFC0_1234, 0x8000_0000], F32)
    assert_same_bits(reference.reduce_max(data, axes=[], noop_with_empty_axes=True), data)
    assert_same_bits(reference.reduce_max(data, axes=[0]), bits_array([0x7FC0_0000], F32))


def test_spec_global_max_pool():
    # onnx "globalmaxpool_precomputed" and hand-worked 3-D and 5-D cases.
    x = np.array([[[[1, 2, 3], [4, 5, 6], [7, 8, 9]]]], dtype=F32)
    assert_same_bits(reference.global_max_pool(x), np.array([[[[9]]]], dtype=F32))
    x3 = np.array([[[1, -2, 0.5], [-1, -4, -3]], [[0, 0, 0], [8, 9, -9]]], dtype=F16)  # 2x2x3
    assert_same_bits(reference.global_max_pool(x3),
                     np.array([[[1], [-1]], [[0], [9]]], dtype=F16))
    x5 = np.arange(48, dtype=F64).reshape(2, 3, 2, 2, 2) * -1.0    # channel k holds -8k..-8k-7
    expected = np.array([-0.0, -8, -16, -24, -32, -40], dtype=F64).reshape(2, 3, 1, 1, 1)
    assert_same_bits(reference.global_max_pool(x5), expected)      # 0 * -1.0 is -0: kept
    assert_same_bits(reference.global_max_pool(np.zeros((1, 2, 3, 0), dtype=BF16)),
                     bits_array([0xFF80, 0xFF80], BF16).reshape(1, 2, 1, 1))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_spec_sonnx_order_and_nan(dtype):
    # spec/004: Inf > positives > 0 > -0 > negatives > -Inf; NaN absorbing; spec/003 R1/R2.
    name = np.dtype(dtype).name
    nbits = 8 * np.dtype(dtype).itemsize
    sign = 1 << (nbits - 1)
    positive_zero, negative_zero = 0, sign
    nan = CANONICAL_NAN[name]
    infinity = NEGATIVE_INFINITY[name] & ~sign
    one = int(np.array(1.0, dtype=dtype).view(f"u{nbits // 8}"))
    ascending = [infinity | sign, one | sign, 1 | sign, negative_zero, positive_zero, 1, one,
                 infinity]
    for i, low in enumerate(ascending):
        for high in ascending[i + 1:]:
            for a, b in ((low, high), (high, low)):
                assert_same_bits(reference.max(bits_array([a], dtype), bits_array([b], dtype)),
                                 bits_array([high], dtype), f"max({a:#x}, {b:#x})")
    assert_same_bits(reference.max(bits_array([negative_zero], dtype),
                                   bits_array([negative_zero], dtype)),
                     bits_array([negative_zero], dtype))
    signalling = infinity | 1
    negative_quiet = nan | sign | 1
    for weird_nan in (nan, signalling, negative_quiet, signalling | sign):
        for other in ascending:
            for pair in ((weird_nan, other), (other, weird_nan)):
                arrays = [bits_array([v], dtype) for v in pair]
                assert_same_bits(reference.max(*arrays), bits_array([nan], dtype))
        assert_same_bits(reference.max(bits_array([weird_nan], dtype)), bits_array([nan], dtype))
    # Position does not matter: NaN first, middle or last of a reduction, or one of many inputs.
    for position in range(4):
        values = [one, negative_zero, infinity, positive_zero]
        values[position] = signalling
        data = bits_array(values, dtype)
        assert_same_bits(reference.reduce_max(data), bits_array([nan], dtype))
        assert_same_bits(reference.global_max_pool(data.reshape(1, 1, 4)),
                         bits_array([nan], dtype).reshape(1, 1, 1))
        assert_same_bits(reference.max(*data.reshape(4, 1)), bits_array([nan], dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_sign_of_zero(dtype):
    p, n = np.array([0.0], dtype), np.array([-0.0], dtype)
    assert_same_bits(reference.max(p, n), p)
    assert_same_bits(reference.max(n, p), p)
    assert_same_bits(reference.max(n, n), n)
    assert_same_bits(reference.max(n), n)
    assert_same_bits(reference.max(n, np.array(-np.inf, dtype)), n)
    for zeros, expected in (([-0.0, -0.0, -0.0], n), ([-0.0, 0.0, -0.0], p), ([0.0, -0.0], p),
                            ([-0.0, -1.0, -np.inf], n)):
        assert_same_bits(reference.reduce_max(np.array(zeros, dtype)), expected)
        assert_same_bits(reference.global_max_pool(np.array(zeros, dtype).reshape(1, 1, -1)),
                         expected.reshape(1, 1, 1))


# --- (b) the golden model against the scalar model ----------------------------------------------


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_max_every_pair_of_edge_values(dtype):
    edges = edge_bits(dtype)
    a, b = np.repeat(edges, len(edges)), np.tile(edges, len(edges))
    assert_same_bits(reference.max(a, b), scalar_broadcast_max(a, b), "max(a, b)")
    pairs = np.stack([a, b], axis=1)
    assert_same_bits(reference.reduce_max(pairs, axes=[1], keepdims=False),
                     scalar_broadcast_max(a, b), "reduce_max([a, b])")


def test_reduce_max_bool_every_pair():
    edges = edge_bits(np.bool_)
    pairs = np.stack([np.repeat(edges, 2), np.tile(edges, 2)], axis=1)
    assert_same_bits(reference.reduce_max(pairs, axes=[-1]),
                     scalar_reduce_max(pairs, [-1], True, False))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_random_tensors(dtype):
    rng = np.random.default_rng(sum(map(ord, np.dtype(dtype).name)))
    data = random_values(rng, dtype, (3, 4, 5), edge_fraction=0.1)
    for axes in (None, [0], [1], [-1], [0, 2], [2, 1, 0]):
        for keepdims in (True, False):
            assert_same_bits(reference.reduce_max(data, axes, keepdims),
                             scalar_reduce_max(data, axes, keepdims, False), f"axes={axes}")
    if dtype is np.bool_:
        return
    arrays = [random_values(rng, dtype, shape) for shape in [(4, 1, 6), (1, 3, 6), (6,), ()]]
    assert_same_bits(reference.max(*arrays), scalar_broadcast_max(*arrays))
    if dtype in FLOAT_DTYPES:
        x = random_values(rng, dtype, (2, 3, 2, 3), edge_fraction=0.05)
        assert_same_bits(reference.global_max_pool(x), scalar_reduce_max(x, [2, 3], True, False))


@settings(max_examples=500)
@given(st.data())
def test_max_property(data):
    check_variadic_property(data, reference.max, scalar_broadcast_max)


@settings(max_examples=500)
@given(st.data())
def test_reduce_max_property(data):
    check_reduction_property(data, reference.reduce_max, scalar_reduce_max)


@settings(max_examples=300)
@given(st.data())
def test_global_max_pool_property(data):
    fmt = data.draw(st.sampled_from(FLOAT_FORMATS), label="format")
    shape = data.draw(hnp.array_shapes(min_dims=3, max_dims=5, min_side=0, max_side=3))
    x = data.draw(tensors(fmt, shape), label="x")
    assert_same_bits(reference.global_max_pool(x),
                     scalar_reduce_max(x, list(range(2, len(shape))), True, False))


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_agrees_with_numpy_where_numpy_is_exact(dtype):
    # Without NaNs and without zeros, numpy's maximum is an independent exact oracle.
    rng = np.random.default_rng(7)
    a, b = (random_values(rng, dtype, (3, 200)) for _ in range(2))
    keep = ~(reference.is_nan(a) | reference.is_nan(b))
    a, b = a[keep], b[keep]
    if dtype in FLOAT_DTYPES:
        keep = (a != 0) & (b != 0)
        a, b = a[keep], b[keep]
    assert a.size > 300
    assert_same_bits(reference.max(a, b), np.maximum(a, b))
    assert_same_bits(reference.reduce_max(a, keepdims=False), np.max(a))


# --- helpers: order keys, NaN detection, bit views ----------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_order_key_and_is_nan(dtype):
    name = np.dtype(dtype).name
    edges = edge_bits(dtype)
    ints = to_ints(edges)
    nan = [decode(v, name)[0] for v in ints]
    np.testing.assert_array_equal(reference.is_nan(edges), nan)
    # Keys sort the non-NaN values as the scalar model does; -0 just below +0.
    numbers = [(decode(v, name)[1], v) for v, is_nan in zip(ints, nan) if not is_nan]
    keys = reference.order_key(bits_array([v for _, v in numbers], dtype) if dtype is not np.bool_
                               else np.array([v for _, v in numbers], dtype=bool))
    by_key = [v for _, v in sorted(zip(keys.tolist(), (v for _, v in numbers)))]
    by_value = [v for _, v in sorted(numbers, key=lambda nv: (nv[0], math.copysign(1, nv[0])))]
    assert by_key == by_value
    assert keys.dtype == np.dtype(f"u{np.dtype(dtype).itemsize}")
    # order_key is a bijection; from_order_key inverts it, canonicalising NaN.
    back = reference.from_order_key(reference.order_key(edges), dtype)
    assert_same_bits(back, reference.canonicalize_nans(edges))
    expected = [CANONICAL_NAN[name] if is_nan else v for v, is_nan in zip(ints, nan)]
    assert_same_bits(reference.canonicalize_nans(edges), from_ints(expected, edges.shape, dtype))
    assert_same_bits(reference.from_bits(reference.bits_of(edges), dtype), edges)


def test_big_endian_inputs():
    big = bits_array([0x7F80_0001, 0x0000_0000, 0x3F80_0000], F32).astype(">f4")
    little = np.array([1.0, -0.0, 2.0], dtype=F32)
    assert_same_bits(reference.max(big, little), bits_array([0x7FC0_0000, 0, 0x4000_0000], F32))
    np.testing.assert_array_equal(reference.is_nan(big), [True, False, False])


# --- (c) algebraic laws, bit for bit ------------------------------------------------------------


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_algebraic_laws(dtype):
    edges = edge_bits(dtype)
    n = len(edges)
    a, b = np.repeat(edges, n), np.tile(edges, n)
    assert_same_bits(reference.max(a, b), reference.max(b, a), "commutativity")
    x = edges[:, None, None]
    y = edges[None, :, None]
    z = edges[None, None, :]
    left = reference.max(reference.max(x, y), z)
    assert_same_bits(left, reference.max(x, reference.max(y, z)), "associativity")
    assert_same_bits(left, reference.max(x, y, z), "variadic")
    assert_same_bits(left, reference.max(z, x, y), "variadic, permuted")
    stacked = np.stack(np.broadcast_arrays(x, y, z))
    assert_same_bits(left, reference.reduce_max(stacked, axes=[0], keepdims=False), "reduction")
    canonical = reference.canonicalize_nans(edges)
    assert_same_bits(reference.max(edges, edges), canonical, "idempotence")
    assert_same_bits(reference.max(edges), canonical, "one input")
    lowest = reference.reduce_max(np.zeros((0,), dtype))
    assert_same_bits(reference.max(edges, lowest), canonical, "max(x, lowest) == x")
    ab = reference.max(a, b)
    assert_same_bits(reference.max(ab, b), ab, "absorption")
    # Without NaN the result is one of the operands, bit for bit.
    no_nan = ~(reference.is_nan(a) | reference.is_nan(b))
    result_bits, a_bits, b_bits = (to_ints(v[no_nan]) for v in (ab, a, b))
    assert all(r in (p, q) for r, p, q in zip(result_bits, a_bits, b_bits))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_reduction_laws(dtype):
    rng = np.random.default_rng(11)
    data = random_values(rng, dtype, (3, 4, 6), edge_fraction=0.05)
    whole = reference.reduce_max(data, axes=[1, 2])
    assert_same_bits(reference.reduce_max(reference.reduce_max(data, axes=[2]), axes=[1]), whole,
                     "reduce in steps")
    for _ in range(3):
        shuffled = data[:, rng.permutation(4)][:, :, rng.permutation(6)]
        assert_same_bits(reference.reduce_max(shuffled, axes=[1, 2]), whole, "order-free")
    assert_same_bits(reference.reduce_max(data, axes=[1, 2], keepdims=False),
                     whole.reshape(3), "keepdims only reshapes")
    if dtype is not np.bool_:
        assert_same_bits(reference.reduce_max(data, axes=[1], keepdims=False),
                         reference.max(*np.moveaxis(data, 1, 0)), "reduce_max == variadic max")
    if dtype in FLOAT_DTYPES:
        assert_same_bits(reference.global_max_pool(data[None]), whole[None], "GlobalMaxPool")


# --- (d) errors ---------------------------------------------------------------------------------


def test_max_errors():
    with pytest.raises(TypeError, match=r"at least one input"):
        reference.max()
    with pytest.raises(TypeError, match=r"same dtype, got float32, float64, float32"):
        reference.max(np.zeros(2, F32), np.zeros(2, F64), np.zeros(2, F32))
    with pytest.raises(TypeError, match=r"does not accept bool; accepted: float16, bfloat16"):
        reference.max(np.zeros(2, bool))
    with pytest.raises(TypeError, match=r"unsupported dtype complex64; supported: float16"):
        reference.max(np.zeros(2, np.complex64))
    with pytest.raises(TypeError, match=r"unsupported dtype <U1"):
        reference.max(np.array(["a"]))
    with pytest.raises(ValueError, match=r"do not broadcast: \(2, 3\), \(4,\), \(\)"):
        reference.max(np.zeros((2, 3), F16), np.zeros(4, F16), np.zeros((), F16))


def test_reduce_max_errors():
    x = np.zeros((2, 3, 4), F32)
    with pytest.raises(ValueError, match=r"axis 3 is out of range for a tensor of rank 3 "
                                         r"\(accepted: \[-3, 2\]\)"):
        reference.reduce_max(x, axes=[0, 3])
    with pytest.raises(ValueError, match=r"axis -4 is out of range for a tensor of rank 3"):
        reference.reduce_max(x, axes=(-4,))
    with pytest.raises(ValueError, match=r"axis 0 is out of range for a tensor of rank 0"):
        reference.reduce_max(np.zeros((), F32), axes=[0])
    with pytest.raises(ValueError, match=r"axes \[1, -2\] name axis 1 more than once"):
        reference.reduce_max(x, axes=np.array([1, -2]))
    with pytest.raises(ValueError, match=r"axes \[2, 2\] name axis 2 more than once"):
        reference.reduce_max(x, axes=[2, 2])
    with pytest.raises(TypeError, match=r"axes must be integers, got 0.5"):
        reference.reduce_max(x, axes=[0.5])
    with pytest.raises(TypeError, match=r"axes must be integers, got an array of float64"):
        reference.reduce_max(x, axes=np.array([1.0]))
    with pytest.raises(TypeError, match=r"axes must be integers, got True"):
        reference.reduce_max(x, axes=[True])
    with pytest.raises(ValueError, match=r"axes must be one-dimensional"):
        reference.reduce_max(x, axes=np.array([[0]]))
    with pytest.raises(ValueError, match=r"keepdims must be a bool or 0/1, got 2"):
        reference.reduce_max(x, axes=[0], keepdims=2)
    with pytest.raises(ValueError, match=r"noop_with_empty_axes must be a bool or 0/1"):
        reference.reduce_max(x, noop_with_empty_axes="yes")
    with pytest.raises(TypeError, match=r"unsupported dtype complex128; supported:"):
        reference.reduce_max(np.zeros(2, np.complex128))


def test_global_max_pool_errors():
    with pytest.raises(ValueError, match=r"rank >= 3 .* got rank 2 with shape \(2, 3\)"):
        reference.global_max_pool(np.zeros((2, 3), F32))
    with pytest.raises(ValueError, match=r"got rank 0 with shape \(\)"):
        reference.global_max_pool(np.zeros((), F32))
    for dtype in (np.int32, np.uint8, np.bool_):
        with pytest.raises(TypeError, match=r"float types only\) does not accept "
                                            rf"{np.dtype(dtype).name}; accepted: float16, "
                                            r"bfloat16, float32, float64; for integer"):
            reference.global_max_pool(np.zeros((1, 1, 2), dtype))


def test_assert_same_bits_reports():
    with pytest.raises(AssertionError, match=r"out: dtype float32 != expected float64"):
        assert_same_bits(np.zeros(2, F32), np.zeros(2, F64), "out")
    with pytest.raises(AssertionError, match=r"shape \(2,\) != expected \(1, 2\)"):
        assert_same_bits(np.zeros(2, F32), np.zeros((1, 2), F32))
    with pytest.raises(AssertionError, match=r"1 of 3 elements differ; first at index \(2,\): "
                                             r"got 0x0000 .*expected 0x8000"):
        assert_same_bits(np.zeros(3, F16), np.array([0, 0, -0.0], F16))
    with pytest.raises(AssertionError, match=r"first at index \(0, 1\): got 0x7fc00000 .*"
                                             r"expected 0x7fc00001"):
        assert_same_bits(bits_array([[0, 0x7FC0_0000]], F32), bits_array([[0, 0x7FC0_0001]], F32))
    assert_same_bits(np.float32(np.nan), bits_array(0x7FC0_0000, F32))


def test_values_errors():
    with pytest.raises(ValueError, match=r"edge_fraction must be within \[0, 1\], got 1.5"):
        random_values(np.random.default_rng(0), F32, 3, edge_fraction=1.5)
    with pytest.raises(TypeError, match=r"unsupported dtype complex64"):
        edge_bits(np.complex64)


# --- the test values themselves -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_float_edge_values_cover_every_class(dtype):
    name = np.dtype(dtype).name
    ints = to_ints(edge_bits(dtype))
    assert len(set(ints)) == len(ints)
    exponent_bits, mantissa_bits = HALF_FIELDS.get(name, {"float32": (8, 23),
                                                          "float64": (11, 52)}.get(name))
    nbits = 1 + exponent_bits + mantissa_bits
    classes = set()
    for v in ints:
        sign = v >> (nbits - 1)
        exponent = (v >> mantissa_bits) & ((1 << exponent_bits) - 1)
        mantissa = v & ((1 << mantissa_bits) - 1)
        quiet = mantissa >> (mantissa_bits - 1)
        if exponent == (1 << exponent_bits) - 1:
            kind = "inf" if mantissa == 0 else ("qnan" if quiet else "snan")
        elif exponent == 0:
            kind = "zero" if mantissa == 0 else "subnormal"
        else:
            kind = "normal"
        classes.add((sign, kind))
    assert classes == {(s, k) for s in (0, 1)
                       for k in ("inf", "qnan", "snan", "zero", "subnormal", "normal")}
    assert CANONICAL_NAN[name] in ints and 1 in ints and (1 << mantissa_bits) - 1 in ints


@pytest.mark.parametrize("dtype", INT_DTYPES + [np.bool_], ids=dtype_id)
def test_integer_edge_values(dtype):
    edges = edge_bits(dtype)
    assert edges.dtype == np.dtype(dtype)
    if dtype is np.bool_:
        assert edges.tolist() == [False, True]
        return
    info = np.iinfo(dtype)
    expected = {info.min, info.min + 1, info.max - 1, info.max, 0, 1}
    if info.min < 0:
        expected.add(-1)
    assert expected <= set(edges.tolist())


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_random_values(dtype):
    fmt = format_of(dtype)
    first = random_values(np.random.default_rng(5), fmt, (40, 50))
    again = random_values(np.random.default_rng(5), fmt.dtype, (40, 50))
    assert first.dtype == np.dtype(dtype) and first.shape == (40, 50)
    assert_same_bits(first, again, "same seed, same values")
    edges = set(to_ints(edge_bits(dtype)))
    edge_share = np.mean([v in edges for v in to_ints(first)])
    if dtype is not np.bool_ and np.dtype(dtype).itemsize > 1:
        assert 0.15 < edge_share < 0.35
    assert set(to_ints(random_values(np.random.default_rng(6), dtype, 300, 1.0))) <= edges
    assert random_values(np.random.default_rng(6), dtype, ()).shape == ()
    if dtype is np.bool_:
        assert set(to_ints(first)) == {0, 1}


def test_random_floats_reach_every_class():
    # Bit patterns, not float draws: NaNs of both signs and subnormals turn up without edges.
    x = random_values(np.random.default_rng(1), F16, 20000, edge_fraction=0.0)
    bits = np.array(to_ints(x))
    exponent = (bits >> 10) & 0x1F
    assert np.any((exponent == 0x1F) & (bits & 0x3FF != 0) & (bits >> 15 == 1))
    assert np.any((exponent == 0) & (bits & 0x3FF != 0))
    assert len(set(to_ints(x))) > 10000
