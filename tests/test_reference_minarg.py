"""The golden model's minimum side and positions: Min, ReduceMin, ArgMax and ArgMin.

Checked the way ``test_reference.py`` checks the max family: literal vectors worked out by hand;
an independent scalar model (the elements decoded to Python numbers by ``test_reference.decode``,
explicit rules for NaN and signed zeros) on every pair of edge values, seeded random tensors and
hypothesis-drawn cases; identities that hold bit for bit (order-reversing bijections: the sign
flip of a float, the bitwise NOT of an integer); every ONNX backend node case of the four
operators in the installed onnx and the PyTorch-operator Min case, against their shipped outputs;
every operator version (Min 1-13, ReduceMin 1-20, ArgMax/ArgMin 1-13) as a one-node model against
onnx.reference on data where it is exact; and every error path.
"""

import math

import numpy as np
import pytest
from backend_cases import generated_node_cases, pytorch_cases
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import helper
from scalar_model import (ALL_DTYPES, BF16, CANONICAL_NAN, F16, F32, F64, FLOAT_DTYPES,
                            INT_DTYPES, NEGATIVE_INFINITY, NUMERIC_DTYPES, SIGNED,
                            bits_array, check_reduction_property, check_variadic_property,
                            decode, dtype_id, scalar_broadcast_max, scalar_reduce_max, tensors,
                            to_ints)

from maxaccel.contract.dtypes import FORMATS, format_of
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import edge_bits, random_values

# --- the scalar model's minimum side and positions ------------------------------------------------
# Literal constants, not taken from contract.dtypes.

POSITIVE_INFINITY = {name: bits & ~(1 << (8 * np.dtype(name).itemsize - 1))
                     for name, bits in NEGATIVE_INFINITY.items()}


def scalar_greatest(name):
    """Bits of the greatest element: the value of an empty ReduceMin."""
    if name in POSITIVE_INFINITY:
        return POSITIVE_INFINITY[name]
    if name == "bool":
        return 1
    nbits = 8 * np.dtype(name).itemsize
    return (1 << (nbits - 1)) - 1 if name in SIGNED else (1 << nbits) - 1


def scalar_min(a, b, name):
    """min of two elements (bits as ints) by the contract's explicit rules."""
    a_nan, a_value = decode(a, name)
    b_nan, b_value = decode(b, name)
    if a_nan or b_nan:
        return CANONICAL_NAN[name]
    if a_value < b_value:
        return a
    if b_value < a_value:
        return b
    if isinstance(a_value, float) and a_value == 0.0:
        # +0 and -0 are equal as numbers; +0 only if both are +0.
        return a if math.copysign(1.0, a_value) < 0 else b
    return a


def scalar_min_of(*arrays):
    return scalar_broadcast_max(*arrays, pick=scalar_min, empty=scalar_greatest)


def scalar_reduce_min(data, axes, keepdims, noop_with_empty_axes=False):
    return scalar_reduce_max(data, axes, keepdims, noop_with_empty_axes, pick=scalar_min,
                             empty=scalar_greatest)


def scalar_rank(bits, name, minimum):
    """How extreme an element is for ArgMax (ArgMin with ``minimum``): a greater rank wins.

    A NaN outranks everything on both sides; equal numbers are told apart only by the sign of
    zero (``+0`` above ``-0`` for ArgMax, below for ArgMin).
    """
    nan, value = decode(bits, name)
    if nan:
        return (1, 0, 0)
    sign = math.copysign(1.0, value) if isinstance(value, float) else 0
    return (0, -value, -sign) if minimum else (0, value, sign)


def scalar_arg(data, axis, keepdims, select_last_index, minimum):
    """ArgMax / ArgMin element by element: a scan keeping the first (or last) greatest rank."""
    data = np.asarray(data)
    name = np.dtype(data.dtype).name
    moved = np.moveaxis(data, axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    result = []
    for row in rows:
        ranks = [scalar_rank(v, name, minimum) for v in to_ints(row)]
        best = 0
        for i, rank in enumerate(ranks):
            if rank > ranks[best] or (select_last_index and rank == ranks[best]):
                best = i
        result.append(best)
    shape = list(moved.shape[:-1])
    if keepdims:
        shape.insert(axis % data.ndim, 1)
    return np.array(result, dtype=np.int64).reshape(shape)


def negated(values):
    """``values`` with every element's order reversed exactly: floats with the sign bit flipped
    (NaNs stay NaN), integers and bool bitwise NOT (``~x == -x - 1``, no overflow)."""
    fmt = format_of(values.dtype)
    if fmt.kind == "bool":
        return ~values
    flip = fmt.sign_mask if fmt.is_float else (1 << fmt.bits) - 1
    return reference.from_bits(reference.bits_of(values) ^ np.array(flip, fmt.uint_dtype), fmt)


# --- (a) literal vectors --------------------------------------------------------------------------


def test_min_examples():
    # onnx.defs Min-13 examples, worked by hand.
    data_0 = np.array([3, 2, 1], dtype=F32)
    data_1 = np.array([1, 4, 4], dtype=F32)
    data_2 = np.array([2, 5, 0], dtype=F32)
    assert_same_bits(reference.min(data_0, data_1, data_2), np.array([1, 2, 0], dtype=F32))
    assert_same_bits(reference.min(data_0), data_0)
    assert_same_bits(reference.minimum(data_0, data_1), np.array([1, 2, 1], dtype=F32))
    column = np.array([[1], [5], [-3]], dtype=np.int32)
    row = np.array([0, 2, 4, -7], dtype=np.int32)
    expected = np.array([[0, 1, 1, -7], [0, 2, 3, -7], [-3, -3, -3, -7]], dtype=np.int32)
    assert_same_bits(reference.min(column, row, np.array(3, np.int32)), expected)


def test_reduce_min_examples():
    # onnx.defs ReduceMin examples and the opset-18/20 rules.
    data = np.array([[[5, 1], [20, 2]], [[30, 1], [40, 2]], [[55, 1], [60, 2]]], dtype=F32)
    assert_same_bits(reference.reduce_min(data, axes=[1], keepdims=0),
                     np.array([[5, 1], [30, 1], [55, 1]], dtype=F32))
    assert_same_bits(reference.reduce_min(data, axes=[-2]),
                     np.array([[[5, 1]], [[30, 1]], [[55, 1]]], dtype=F32))
    assert_same_bits(reference.reduce_min(data, keepdims=0), np.array(1, dtype=F32))
    assert_same_bits(reference.reduce_min(np.zeros((2, 0, 4), F32), axes=[1]),
                     bits_array([0x7F80_0000] * 8, F32).reshape(2, 1, 4))
    assert_same_bits(reference.reduce_min(np.zeros((0,), np.int8)), np.array([127], np.int8))
    assert_same_bits(reference.reduce_min(np.zeros((0, 2), np.uint64), axes=0, keepdims=0),
                     np.full(2, 2**64 - 1, np.uint64))
    assert_same_bits(reference.reduce_min(np.zeros((0,), np.bool_)), np.array([True]))
    booleans = np.array([[True, True], [True, False], [False, True], [False, False]])
    assert_same_bits(reference.reduce_min(booleans, axes=[1]),
                     np.array([[True], [False], [False], [False]]))
    weird = bits_array([0x7F80_0001, 0xFFC0_1234, 0x8000_0000], F32)
    assert_same_bits(reference.reduce_min(weird, axes=[], noop_with_empty_axes=True), weird)


def test_arg_examples():
    # onnx.defs ArgMax/ArgMin examples: [[2, 1], [3, 10]] and their select_last_index twins.
    data = np.array([[2, 1], [3, 10]], dtype=F32)
    assert_same_bits(reference.arg_max(data), np.array([[1, 1]], np.int64))
    assert_same_bits(reference.arg_max(data, axis=1, keepdims=0), np.array([0, 1], np.int64))
    assert_same_bits(reference.arg_min(data, axis=-1), np.array([[1], [0]], np.int64))
    ties = np.array([[2, 2], [3, 10]], dtype=F32)
    assert_same_bits(reference.arg_max(ties, axis=1, select_last_index=1),
                     np.array([[1], [1]], np.int64))
    assert_same_bits(reference.arg_min(ties, axis=1, select_last_index=True),
                     np.array([[1], [0]], np.int64))
    assert_same_bits(reference.arg_min(ties, axis=1), np.array([[0], [0]], np.int64))
    # rank 1 without keepdims: a rank-0 array, not a numpy scalar
    result = reference.arg_max(np.array([1, 7, 7], np.int8), keepdims=False)
    assert isinstance(result, np.ndarray) and result.shape == () and result.dtype == np.int64
    assert result.item() == 1


# --- (b) NaN, signed zeros, ties and integer extremes ---------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_nan_at_every_position(dtype):
    """A NaN of any sign or payload, at each position of a row of ordinary values, ±0 ties and
    infinities: Min and ReduceMin give the canonical NaN, ArgMax and ArgMin its index; with two
    NaNs the first, or the last with select_last_index."""
    name = np.dtype(dtype).name
    edges = edge_bits(dtype)
    nans = edges[reference.is_nan(edges)]
    assert len(nans) >= 8        # quiet and signalling, both signs, several payloads
    row = np.array([1.0, -0.0, np.inf, 0.0, -np.inf, -2.0], dtype)
    canonical = bits_array([CANONICAL_NAN[name]], dtype)
    for nan in nans:
        for position in range(len(row)):
            x = row.copy()
            x[position] = nan
            assert_same_bits(reference.reduce_min(x), canonical)
            assert_same_bits(reference.min(*x.reshape(-1, 1)), canonical)
            for arg in (reference.arg_max, reference.arg_min):
                for last in (False, True):
                    assert arg(x, select_last_index=last).tolist() == [position]
            for later in range(position + 1, len(row)):
                y = x.copy()
                y[later] = nans[-1]
                for arg in (reference.arg_max, reference.arg_min):
                    assert arg(y).tolist() == [position]
                    assert arg(y, select_last_index=True).tolist() == [later]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_signed_zeros_both_ways(dtype):
    p, n = np.array([0.0], dtype), np.array([-0.0], dtype)
    assert_same_bits(reference.min(p, n), n)
    assert_same_bits(reference.min(n, p), n)
    assert_same_bits(reference.min(p, p), p)
    assert_same_bits(reference.min(p, np.array(np.inf, dtype)), p)
    for zeros, expected in (([0.0, 0.0, 0.0], p), ([0.0, -0.0, 0.0], n), ([-0.0, 0.0], n),
                            ([0.0, 1.0, np.inf], p)):
        assert_same_bits(reference.reduce_min(np.array(zeros, dtype)), expected)
    both = [(np.array([-0.0, 0.0, -0.0, 0.0], dtype), 1, 3, 0, 2),
            (np.array([0.0, -0.0, 0.0, -0.0], dtype), 0, 2, 1, 3)]
    for x, max_first, max_last, min_first, min_last in both:
        assert reference.arg_max(x).tolist() == [max_first]
        assert reference.arg_max(x, select_last_index=True).tolist() == [max_last]
        assert reference.arg_min(x).tolist() == [min_first]
        assert reference.arg_min(x, select_last_index=True).tolist() == [min_last]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_ties_first_and_last(dtype):
    """Each edge value three times in a row of values it beats (by the scalar model's rank):
    the first of the three, or the last with select_last_index, for ArgMax and ArgMin."""
    name = np.dtype(dtype).name
    edges = edge_bits(dtype)
    ints = to_ints(edges)
    for minimum, arg in ((False, reference.arg_max), (True, reference.arg_min)):
        for i, bits in enumerate(ints):
            rank = scalar_rank(bits, name, minimum)
            below = [j for j, b in enumerate(ints) if scalar_rank(b, name, minimum) < rank][:3]
            row = edges[below[:1] + [i] + below[1:2] + [i, i] + below[2:]]
            positions = [k for k, b in enumerate(to_ints(row)) if b == bits]
            assert arg(row).item() == positions[0], (arg.__name__, hex(bits))
            assert arg(row, select_last_index=True).item() == positions[-1], hex(bits)


@pytest.mark.parametrize("dtype", INT_DTYPES + [np.bool_], ids=dtype_id)
def test_integer_extremes(dtype):
    info = np.iinfo(dtype) if dtype is not np.bool_ else None
    low, high = (info.min, info.max) if info else (False, True)
    x = np.array([high, low, high, low, high], dtype)
    assert reference.arg_max(x).tolist() == [0]
    assert reference.arg_max(x, select_last_index=True).tolist() == [4]
    assert reference.arg_min(x).tolist() == [1]
    assert reference.arg_min(x, select_last_index=True).tolist() == [3]
    assert_same_bits(reference.reduce_min(x), np.array([low], dtype))
    assert_same_bits(reference.reduce_max(x), np.array([high], dtype))
    assert_same_bits(reference.reduce_min(x[:0]), np.array([high], dtype))
    if dtype is not np.bool_:
        assert_same_bits(reference.min(x, np.roll(x, 1)),
                         np.array([high, low, low, low, low], dtype))
        near = np.array([high - 1, high, low + 1, low], dtype)
        assert reference.arg_max(near).item() == 1 and reference.arg_min(near).item() == 3


def test_uint64_and_int8_extremes_are_not_floats():
    # 2**64 - 1 and 2**64 - 2 are the same float64; the model must still tell them apart.
    x = np.array([2**64 - 2, 2**64 - 1, 2**64 - 2], np.uint64)
    assert reference.arg_max(x).item() == 1
    assert reference.arg_min(x, select_last_index=True).item() == 2
    assert_same_bits(reference.min(x, np.array(2**64 - 1, np.uint64)), x)
    big = np.array([2**63 - 1, 2**63 - 2, -2**63, -2**63 + 1], np.int64)
    assert reference.arg_max(big).item() == 0 and reference.arg_min(big).item() == 2
    assert_same_bits(reference.reduce_min(big), np.array([-2**63], np.int64))
    assert reference.arg_min(np.array([-127, -128, 127], np.int8)).item() == 1


# --- (c) the scalar model on edge values and random tensors ---------------------------------------


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_min_every_pair_of_edge_values(dtype):
    edges = edge_bits(dtype)
    a, b = np.repeat(edges, len(edges)), np.tile(edges, len(edges))
    expected = scalar_min_of(a, b)
    assert_same_bits(reference.min(a, b), expected, "min(a, b)")
    pairs = np.stack([a, b], axis=1)
    assert_same_bits(reference.reduce_min(pairs, axes=[1], keepdims=False), expected,
                     "reduce_min([a, b])")
    for minimum, arg in ((False, reference.arg_max), (True, reference.arg_min)):
        for last in (False, True):
            np.testing.assert_array_equal(arg(pairs, axis=1, select_last_index=last),
                                          scalar_arg(pairs, 1, True, last, minimum))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_random_tensors(dtype):
    rng = np.random.default_rng(29 + sum(map(ord, np.dtype(dtype).name)))
    data = random_values(rng, dtype, (3, 4, 5), edge_fraction=0.1)
    for axes in (None, [0], [-1], [0, 2]):
        for keepdims in (True, False):
            assert_same_bits(reference.reduce_min(data, axes, keepdims),
                             scalar_reduce_min(data, axes, keepdims), f"axes={axes}")
    for axis in range(-3, 3):
        for keepdims in (True, False):
            for last in (False, True):
                for minimum, arg in ((False, reference.arg_max), (True, reference.arg_min)):
                    assert_same_bits(arg(data, axis, keepdims, last),
                                     scalar_arg(data, axis, keepdims, last, minimum),
                                     f"{arg.__name__} axis={axis}")
    if dtype is not np.bool_:
        arrays = [random_values(rng, dtype, shape) for shape in [(4, 1, 6), (1, 3, 6), (6,), ()]]
        assert_same_bits(reference.min(*arrays), scalar_min_of(*arrays))


@settings(max_examples=300)
@given(st.data())
def test_min_property(data):
    check_variadic_property(data, reference.min, scalar_min_of)


@settings(max_examples=300)
@given(st.data())
def test_reduce_min_property(data):
    check_reduction_property(data, reference.reduce_min, scalar_reduce_min)


@settings(max_examples=300)
@given(st.data())
def test_arg_property(data):
    fmt = data.draw(st.sampled_from(list(FORMATS.values())), label="format")
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4))
    # Few distinct values, so ties (and several NaNs in a row) are common.
    pool = data.draw(st.lists(tensors(fmt, ()), min_size=1, max_size=4), label="values")
    choice = data.draw(hnp.arrays(np.intp, shape, elements=st.integers(0, len(pool) - 1)))
    x = np.stack(pool)[choice]
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    keepdims = data.draw(st.booleans(), label="keepdims")
    last = data.draw(st.booleans(), label="select_last_index")
    minimum = data.draw(st.booleans(), label="minimum")
    arg = reference.arg_min if minimum else reference.arg_max
    assert_same_bits(arg(x, axis, keepdims, last), scalar_arg(x, axis, keepdims, last, minimum))


# --- (d) identities that hold bit for bit ---------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_min_is_max_of_the_reversed_order(dtype):
    """``min(a, b) == -max(-a, -b)`` with ``-`` an exact order reversal (sign flip, bitwise NOT),
    wherever no operand is NaN; where one is, both sides are NaN. ArgMin is ArgMax of the
    reversed values everywhere, NaN included (a flipped NaN is still a NaN, still the extreme)."""
    edges = edge_bits(dtype)
    a, b = np.repeat(edges, len(edges)), np.tile(edges, len(edges))
    pairs = np.stack([a, b], axis=1)
    mirrored = negated(reference.reduce_max(negated(pairs), axes=[1]))
    nan = reference.is_nan(mirrored)
    assert_same_bits(reference.reduce_min(pairs, axes=[1])[~nan], mirrored[~nan])
    assert (reference.is_nan(a) | reference.is_nan(b)).tolist() == nan[:, 0].tolist()
    if dtype is not np.bool_:
        no_nan = ~nan[:, 0]
        assert_same_bits(reference.min(a, b)[no_nan], negated(reference.max(negated(a),
                                                                               negated(b)))[no_nan])
    for last in (False, True):
        assert_same_bits(reference.arg_min(pairs, axis=1, select_last_index=last),
                         reference.arg_max(negated(pairs), axis=1, select_last_index=last))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_arg_points_at_the_reduction(dtype):
    """The element an arg operator points at is the reduction's result (NaN canonicalised), and
    reduce_min is the variadic min of the slices: the four operators agree on one order."""
    rng = np.random.default_rng(290)
    data = random_values(rng, dtype, (4, 6, 5), edge_fraction=0.05)
    for axis in range(3):
        for last in (False, True):
            for arg, reduce in ((reference.arg_max, reference.reduce_max),
                                (reference.arg_min, reference.reduce_min)):
                chosen = np.take_along_axis(data, arg(data, axis, select_last_index=last), axis)
                assert_same_bits(reference.canonicalize_nans(chosen), reduce(data, [axis]))
        if dtype is not np.bool_:
            assert_same_bits(reference.reduce_min(data, axes=[axis], keepdims=False),
                             reference.min(*np.moveaxis(data, axis, 0)), "reduce_min == min")


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_min_laws(dtype):
    edges = edge_bits(dtype)
    a, b = np.repeat(edges, len(edges)), np.tile(edges, len(edges))
    assert_same_bits(reference.min(a, b), reference.min(b, a), "commutativity")
    x, y, z = edges[:, None, None], edges[None, :, None], edges[None, None, :]
    left = reference.min(reference.min(x, y), z)
    assert_same_bits(left, reference.min(x, reference.min(y, z)), "associativity")
    assert_same_bits(left, reference.min(z, x, y), "variadic, permuted")
    canonical = reference.canonicalize_nans(edges)
    assert_same_bits(reference.min(edges, edges), canonical, "idempotence")
    greatest = reference.reduce_min(np.zeros((0,), dtype))
    assert_same_bits(reference.min(edges, greatest), canonical, "min(x, greatest) == x")
    # Without NaN, min and max of a pair are its two operands.
    no_nan = ~(reference.is_nan(a) | reference.is_nan(b))
    low, high = (to_ints(f(a, b)[no_nan]) for f in (reference.min, reference.max))
    assert all(sorted((p, q)) == sorted((lo, hi)) for p, q, lo, hi in
               zip(to_ints(a[no_nan]), to_ints(b[no_nan]), low, high))


def test_agrees_with_numpy_where_numpy_is_exact():
    # Without NaNs and zeros numpy's minimum, min, argmax and argmin are exact oracles; integer
    # dtypes need no filter.
    rng = np.random.default_rng(17)
    for dtype in NUMERIC_DTYPES:
        a, b = (random_values(rng, dtype, (400,)) for _ in range(2))
        keep = ~(reference.is_nan(a) | reference.is_nan(b))
        a, b = a[keep], b[keep]
        if dtype in FLOAT_DTYPES:
            keep = (a != 0) & (b != 0)
            a, b = a[keep], b[keep]
        assert a.size > 100
        assert_same_bits(reference.min(a, b), np.minimum(a, b))
        assert_same_bits(reference.reduce_min(a, keepdims=False), np.min(a))
        assert reference.arg_max(a).item() == np.argmax(a)
        assert reference.arg_min(a).item() == np.argmin(a)


def test_big_endian_inputs():
    big = bits_array([0x7F80_0001, 0x0000_0000, 0x8000_0000], F32).astype(">f4")
    little = np.array([1.0, -0.0, 2.0], dtype=F32)
    assert_same_bits(reference.min(big, little), bits_array([0x7FC0_0000, 0x8000_0000,
                                                              0x8000_0000], F32))
    assert reference.arg_min(big[1:]).item() == 1
    assert reference.arg_max(big).item() == 0


# --- (e) errors -----------------------------------------------------------------------------------


def test_min_errors():
    with pytest.raises(TypeError, match=r"^min\(\) needs at least one input tensor \(ONNX Min "):
        reference.min()
    with pytest.raises(TypeError, match=r"^min\(\) inputs must all have the same dtype, got "
                                        r"float32, float64"):
        reference.min(np.zeros(2, F32), np.zeros(2, F64))
    with pytest.raises(TypeError, match=r"^min\(\) \(ONNX Min\) does not accept bool; accepted: "
                                        r"float16, bfloat16"):
        reference.min(np.zeros(2, bool))
    with pytest.raises(ValueError, match=r"^min\(\) input shapes do not broadcast: \(2, 3\), "
                                         r"\(4,\)"):
        reference.min(np.zeros((2, 3), F16), np.zeros(4, F16))
    with pytest.raises(TypeError, match=r"unsupported dtype complex64"):
        reference.min(np.zeros(2, np.complex64))


def test_reduce_min_errors():
    x = np.zeros((2, 3, 4), BF16)
    with pytest.raises(ValueError, match=r"axis 3 is out of range for a tensor of rank 3"):
        reference.reduce_min(x, axes=[0, 3])
    with pytest.raises(ValueError, match=r"axes \[1, -2\] name axis 1 more than once"):
        reference.reduce_min(x, axes=[1, -2])
    with pytest.raises(ValueError, match=r"keepdims must be a bool or 0/1, got 2"):
        reference.reduce_min(x, keepdims=2)
    with pytest.raises(TypeError, match=r"unsupported dtype complex128"):
        reference.reduce_min(np.zeros(2, np.complex128))


def test_arg_errors():
    x = np.zeros((2, 3), np.uint16)
    for arg in (reference.arg_max, reference.arg_min):
        with pytest.raises(ValueError, match=r"axis 2 is out of range for a tensor of rank 2 "
                                             r"\(accepted: \[-2, 1\]\)"):
            arg(x, axis=2)
        with pytest.raises(ValueError, match=r"axis 0 is out of range for a tensor of rank 0 "
                                             r"\(a rank-0 tensor has no axes\)"):
            arg(np.zeros((), F32))
        for axis in (None, [0], 0.0, True):
            with pytest.raises(TypeError, match=r"axis must be an integer, got"):
                arg(x, axis=axis)
        with pytest.raises(ValueError, match=r"select_last_index must be a bool or 0/1, got 2"):
            arg(x, select_last_index=2)
        with pytest.raises(ValueError, match=r"keepdims must be a bool or 0/1"):
            arg(x, keepdims="no")
        with pytest.raises(ValueError, match=rf"{arg.__name__}\(\) has no position to return: "
                                             r"axis 1 of the input \(2, 0\) is empty"):
            arg(np.zeros((2, 0), F32), axis=1)
        with pytest.raises(TypeError, match=r"unsupported dtype complex64"):
            arg(np.zeros(2, np.complex64))
        # an empty axis is fine when the result is empty too
        assert arg(np.zeros((0, 0), F32), axis=1).shape == (0, 1)
        assert arg(np.zeros((0, 3), F32), axis=1, keepdims=False).shape == (0,)


# --- (f) the ONNX backend node cases --------------------------------------------------------------

OPERATORS = {"Min": "test_min", "ReduceMin": "test_reduce_min", "ArgMax": "test_argmax",
             "ArgMin": "test_argmin"}


def backend_cases():
    """The installed onnx's generated node cases of the four operators (as ``tests/test_offload.py``
    reads Max's) and the shipped PyTorch-operator and -converted cases of one of them (as
    ``tests/test_reference_maxpool.py`` reads MaxPool's): only ``test_operator_min``."""
    return {**generated_node_cases(["min", "reducemin", "argmax", "argmin"], OPERATORS.values()),
            **pytorch_cases(OPERATORS)}


BACKEND_CASES = backend_cases()


def test_every_backend_case_is_found():
    names = set(BACKEND_CASES)
    counts = {op: sum(n.startswith(prefix + "_") for n in names)
              for op, prefix in OPERATORS.items()}
    assert counts == {"Min": 14, "ReduceMin": 10, "ArgMax": 16, "ArgMin": 16}
    assert {"test_reduce_min_empty_set", "test_reduce_min_bool_inputs",
            "test_operator_min"} <= names
    assert len(names) == 57


def run_node(model, inputs):
    """The model's one node on the golden model, its attributes and inputs as ONNX gives them
    (ReduceMin's axes an attribute before opset 18, an optional input from 18)."""
    node = model.graph.node[0]
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Min":
        return reference.min(*inputs)
    if node.op_type == "ReduceMin":
        axes = inputs[1] if len(inputs) > 1 else attributes.pop("axes", None)
        return reference.reduce_min(inputs[0], axes, **attributes)
    arg = {"ArgMax": reference.arg_max, "ArgMin": reference.arg_min}[node.op_type]
    return arg(inputs[0], **attributes)


@pytest.mark.parametrize("name", sorted(BACKEND_CASES))
def test_onnx_backend_case(name):
    model, data_sets = BACKEND_CASES[name]
    assert data_sets
    for inputs, (expected,) in data_sets:
        assert_same_bits(run_node(model, inputs), expected, name)


# Every operator version, as models, on data where onnx.reference is exact (no NaN, no zero, so
# no signed-zero tie; integers): checks that ``run_node`` reads each version's attributes and
# defaults (ReduceMin's axes attribute before 18, ArgMax's missing select_last_index before 12).
VERSIONS = [  # op, opset, dtype, input shapes, attributes, axes input (opset >= 18)
    ("Min", 1, F32, [(3, 4), (3, 4)], {}, None),
    ("Min", 6, F64, [(3, 4), (3, 4), (3, 4)], {}, None),
    ("Min", 8, F16, [(2, 3, 4), (3, 1), ()], {}, None),
    ("Min", 12, np.uint64, [(5, 1), (1, 6)], {}, None),
    ("Min", 13, np.int8, [(7,)], {}, None),
    ("ReduceMin", 1, F32, [(3, 4, 5)], {"axes": [1]}, None),
    ("ReduceMin", 11, F64, [(3, 4, 5)], {"axes": [-1, 0], "keepdims": 0}, None),
    ("ReduceMin", 12, np.int8, [(6, 7)], {"axes": [0]}, None),
    ("ReduceMin", 13, np.uint8, [(6, 7)], {}, None),
    ("ReduceMin", 18, np.int64, [(3, 4, 5)], {"keepdims": 0}, [2, 0]),
    ("ReduceMin", 18, F32, [(3, 4)], {"noop_with_empty_axes": 1}, []),
    ("ReduceMin", 20, np.bool_, [(4, 5)], {}, [1]),
    ("ArgMax", 1, F32, [(3, 4, 5)], {}, None),
    ("ArgMin", 1, np.int32, [(3, 4, 5)], {"axis": 2, "keepdims": 0}, None),
    ("ArgMax", 11, F64, [(3, 4)], {"axis": -1}, None),
    ("ArgMin", 12, np.uint64, [(6, 5)], {"axis": 0, "select_last_index": 1}, None),
    ("ArgMax", 13, F16, [(4, 6)], {"axis": 1, "keepdims": 0, "select_last_index": 1}, None),
]


def nonzero_values(rng, dtype, shape):
    """Values without NaN or zero, drawn from few distinct ones so ties are common."""
    if dtype is np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        pool = np.array([info.min, info.max, 1, 2, info.max - 1], dtype=dtype)
    else:
        pool = np.array([-np.inf, np.inf, -1.5, 2.0, 1e-3, -7.0], dtype=dtype)
    return pool[rng.integers(0, len(pool), size=shape)]


@pytest.mark.parametrize("op, opset, dtype, shapes, attributes, axes", VERSIONS,
                         ids=[f"{v[0]}-{v[1]}-{np.dtype(v[2]).name}" for v in VERSIONS])
def test_every_operator_version(op, opset, dtype, shapes, attributes, axes):
    from onnx import TensorProto
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(opset)
    element = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    names = [f"x{i}" for i in range(len(shapes))]
    inputs = [nonzero_values(rng, dtype, s) for s in shapes]
    infos = [helper.make_tensor_value_info(n, element, s) for n, s in zip(names, shapes)]
    if axes is not None:
        names.append("axes")
        inputs.append(np.array(axes, np.int64))
        infos.append(helper.make_tensor_value_info("axes", TensorProto.INT64, [len(axes)]))
    out_element = TensorProto.INT64 if op.startswith("Arg") else element
    node = helper.make_node(op, names, ["y"], **attributes)
    graph = helper.make_graph([node], op, infos,
                              [helper.make_tensor_value_info("y", out_element, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=10)
    (expected,) = ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))
    assert_same_bits(run_node(model, inputs), np.asarray(expected).astype(
        np.int64 if op.startswith("Arg") else dtype), f"{op}-{opset}")
