"""Windowed MaxPool in the golden model (reference.max_pool) and its geometry (contract/pooling.py).

Checked four ways: hand-worked vectors for every corner the contract decides; an independent
scalar model (the opset-22 formulas transcribed with Fractions, one loop per window, Python
values decoded from the bits) on a seeded corpus of random configurations with edge values;
onnxruntime where it agrees with the contract; every MaxPool case of the ONNX backend tests.
And every argument error.
"""

import itertools
import math
from fractions import Fraction

import numpy as np
import onnxruntime
import pytest
from backend_cases import maxpool_cases
from pool_configs import random_config, random_configs
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from scalar_model import (CANONICAL_NAN, NUMERIC_DTYPES, decode, dtype_id, from_ints,
                            scalar_lowest, to_ints)

from maxaccel.contract.pooling import PoolAxis, resolve_max_pool
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import random_values

# --- an independent scalar model ----------------------------------------------------------------


def spec_axis(size, kernel, stride, dilation, pad_begin, pad_end, ceil_mode, auto_pad):
    """(pad_begin, out_size) of one axis by the MaxPool-22 text, with the contract's decisions
    (SAME's total padding at least 0, ceil_mode's drop rule). None if there is no window."""
    extent = dilation * (kernel - 1) + 1
    if auto_pad == "NOTSET":
        q = Fraction(size + pad_begin + pad_end - extent, stride) + 1
        out = math.ceil(q) if ceil_mode else math.floor(q)
        if out < 1:
            return None
        if ceil_mode and (out - 1) * stride >= size + pad_begin:
            out -= 1
        return pad_begin, out
    if auto_pad == "VALID":
        if ceil_mode:
            out = math.ceil(Fraction(size - extent + 1, stride))
        else:
            out = math.floor(Fraction(size - extent, stride)) + 1
        return (0, out) if out >= 1 else None
    if ceil_mode:
        out = math.ceil(Fraction(size, stride))
    else:
        out = math.floor(Fraction(size - 1, stride)) + 1
    pad = max(0, (out - 1) * stride + extent - size)
    return (pad // 2 if auto_pad == "SAME_UPPER" else pad - pad // 2), out


def order_of(bits, name):
    """A Python value ordering elements as the contract does; every NaN the greatest."""
    is_nan, value = decode(bits, name)
    if is_nan:
        return (1, 0, 0)
    if isinstance(value, float):
        return (0, value, math.copysign(1.0, value))   # -0 below +0
    return (0, value, 0)


def scalar_max_pool(x, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode=False,
                    auto_pad="NOTSET", storage_order=0):
    """(y, indices), or None when the attributes give no window."""
    name = np.dtype(x.dtype).name
    n_batch, channels, *spatial = x.shape
    rank = len(spatial)
    strides = strides or [1] * rank
    dilations = dilations or [1] * rank
    pads = pads or [0] * (2 * rank)
    axes = [spec_axis(spatial[i], kernel_shape[i], strides[i], dilations[i], pads[i],
                      pads[rank + i], ceil_mode, auto_pad) for i in range(rank)]
    if None in axes:
        return None
    out_shape = (n_batch, channels) + tuple(out for _, out in axes)
    bits = to_ints(x)
    values, indices = [], []
    for n, c, *window in itertools.product(*(range(k) for k in out_shape)):
        best = best_bits = best_at = None
        for taps in itertools.product(*(range(k) for k in kernel_shape)):
            at = [window[i] * strides[i] - axes[i][0] + taps[i] * dilations[i]
                  for i in range(rank)]
            if not all(0 <= a < s for a, s in zip(at, spatial)):
                continue
            flat = n * channels + c
            for a, s in zip(at, spatial):
                flat = flat * s + a
            element = bits[flat]
            if best is None or order_of(element, name) > best:
                best, best_bits, best_at = order_of(element, name), element, at
        if best is None:
            values.append(scalar_lowest(name))
            indices.append(-1)
            continue
        values.append(CANONICAL_NAN[name] if best[0] else best_bits)
        spatial_index, scale = 0, 1
        if storage_order == 0:
            for a, s in reversed(list(zip(best_at, spatial))):
                spatial_index, scale = spatial_index + a * scale, scale * s
        else:
            for a, s in zip(best_at, spatial):
                spatial_index, scale = spatial_index + a * scale, scale * s
        indices.append((n * channels + c) * math.prod(spatial) + spatial_index)
    return (from_ints(values, out_shape, x.dtype),
            np.array(indices, dtype=np.int64).reshape(out_shape))


def check_against_scalar(x, **attributes):
    expected = scalar_max_pool(x, **attributes)
    if expected is None:
        with pytest.raises(ValueError, match="has no window along spatial axis"):
            reference.max_pool(x, **attributes)
        return False
    y, indices = reference.max_pool(x, **attributes, return_indices=True)
    what = f"max_pool {x.shape} {x.dtype} {attributes}"
    assert_same_bits(y, expected[0], what)
    assert_same_bits(indices, expected[1], what + " Indices")
    assert_same_bits(reference.max_pool(x, **attributes), expected[0], what + " without Indices")
    return True


# --- (a) hand-worked vectors --------------------------------------------------------------------


def pool1d(values, dtype=np.float32, **attributes):
    x = np.array(values, dtype=dtype).reshape(1, 1, -1)
    y, indices = reference.max_pool(x, **attributes, return_indices=True)
    return y.reshape(-1), indices.reshape(-1).tolist()


def f32(*patterns):
    return np.array(patterns, dtype=np.uint32).view(np.float32)


def test_spec_examples_hand_worked():
    x = np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5)
    y, i = reference.max_pool(x, [2, 2], strides=[2, 2], return_indices=True)
    assert y.tolist() == [[[[7, 9], [17, 19]]]] and i.tolist() == [[[[6, 8], [16, 18]]]]
    y, i = reference.max_pool(x, [2, 2], strides=[2, 2], storage_order=1, return_indices=True)
    assert i.tolist() == [[[[6, 16], [8, 18]]]]          # the ONNX case's column-major Indices
    y = reference.max_pool(x, [3, 3], strides=[2, 2], auto_pad="SAME_UPPER")
    assert y.tolist() == [[[[7, 9, 10], [17, 19, 20], [22, 24, 25]]]]
    x = np.array([[[[1, 2], [3, 4]]]], dtype=np.float32)
    assert reference.max_pool(x, [1, 1], strides=[2, 2], ceil_mode=True).tolist() == [[[[1]]]]


def test_padding_never_contributes():
    y, i = pool1d([-5.0, -7.0], kernel_shape=[3], pads=[1, 1])
    assert y.tolist() == [-5.0, -5.0] and i == [0, 0]
    y, i = pool1d([-np.inf, -np.inf, -np.inf], kernel_shape=[2], pads=[1, 1])
    assert y.tolist() == [-np.inf] * 4 and i == [0, 0, 1, 2]   # real -inf, never index -1
    y, i = pool1d([-128, -128], dtype=np.int8, kernel_shape=[3], pads=[2, 2])
    assert y.tolist() == [-128] * 4 and i == [0, 0, 0, 1]


def test_window_of_padding_only():
    """Size 2, kernel 2, dilation 3, pads [1, 1]: the window reads -1 and 2, both padding."""
    y, i = pool1d([1.0, 2.0], kernel_shape=[2], dilations=[3], pads=[1, 1])
    assert_same_bits(y, f32(0xFF800000))
    assert i == [-1]
    y, i = pool1d([5, 6], dtype=np.uint8, kernel_shape=[2], dilations=[3], pads=[1, 1])
    assert y.tolist() == [0] and i == [-1]
    y, i = pool1d([5, 6], dtype=np.int16, kernel_shape=[2], dilations=[3], pads=[1, 1])
    assert y.tolist() == [-32768] and i == [-1]
    # floor mode, right padding as long as the window: windows 1 and 2 hold padding only
    y, i = pool1d([3.0], kernel_shape=[1], pads=[0, 2])
    assert y.tolist() == [3.0, -np.inf, -np.inf] and i == [0, -1, -1]
    geometry = resolve_max_pool((1, 1, 1), [1], pads=[0, 2])
    assert geometry.has_empty_windows()
    assert geometry.axes[0].empty_windows().tolist() == [False, True, True]
    # 2-D: empty along one axis is enough
    x = np.ones((1, 1, 2, 3), dtype=np.float32)
    y, i = reference.max_pool(x, [2, 1], dilations=[3, 1], pads=[1, 0, 1, 0],
                              return_indices=True)
    assert y.tolist() == [[[[-np.inf] * 3]]] and i.tolist() == [[[[-1] * 3]]]


def test_signed_zero_and_ties():
    y, i = pool1d(f32(0x80000000, 0, 0, 0x80000000), kernel_shape=[2])
    assert_same_bits(y, f32(0, 0, 0))
    assert i == [1, 1, 2]                        # +0 wins over -0; first of equal keys
    y, i = pool1d(f32(0x80000000, 0x80000000), kernel_shape=[2])
    assert_same_bits(y, f32(0x80000000))
    assert i == [0]
    y, i = pool1d([3.0, 1.0, 3.0, 3.0], kernel_shape=[4])
    assert i == [0]
    x = np.array([[[[1, 9], [9, 9]]]], dtype=np.uint8)
    for order in (0, 1):
        _, i = reference.max_pool(x, [2, 2], storage_order=order, return_indices=True)
        assert i.tolist() == [[[[1 if order == 0 else 2]]]]   # (0, 1) in both numberings


def test_nan_window():
    y, i = pool1d(f32(0x3F800000, 0xFF800001, 0x7FC00123, 0x40000000), kernel_shape=[2])
    assert_same_bits(y, f32(0x7FC00000, 0x7FC00000, 0x7FC00000))
    assert i == [1, 1, 2]                        # the first NaN, whatever its sign or payload


def test_same_lower_upper_and_dilation():
    # size 10, kernel 3, dilation 2 (extent 5): total padding 4 -> [2, 2]; output 10
    geometry = resolve_max_pool((1, 1, 10), [3], dilations=[2], auto_pad="SAME_UPPER")
    assert geometry.pads == [2, 2] and geometry.output_shape == (1, 1, 10)
    # size 5, kernel 2, stride 1: total 1, the odd one at the end (UPPER) or beginning (LOWER)
    assert resolve_max_pool((1, 1, 5), [2], auto_pad="SAME_UPPER").pads == [0, 1]
    assert resolve_max_pool((1, 1, 5), [2], auto_pad="SAME_LOWER").pads == [1, 0]
    y, i = pool1d([1, 5, 2, 4, 3], kernel_shape=[2], auto_pad="SAME_LOWER")
    assert y.tolist() == [1, 5, 5, 4, 4] and i == [0, 1, 1, 3, 3]


def test_same_with_extent_below_stride():
    """size 7, kernel 1, stride 4: (out - 1) * stride + extent - size = -2, padding 0."""
    for auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        geometry = resolve_max_pool((1, 1, 7), [1], strides=[4], auto_pad=auto_pad)
        assert geometry.pads == [0, 0] and geometry.output_shape == (1, 1, 2)
        assert pool1d([1, 2, 3, 4, 5, 6, 7], kernel_shape=[1], strides=[4],
                      auto_pad=auto_pad)[1] == [0, 4]


def test_ceil_mode():
    # size 5, kernel 2, stride 2: the third window reads 4 and the padding past the end
    y, i = pool1d([1, 2, 3, 4, 5], kernel_shape=[2], strides=[2], ceil_mode=True)
    assert y.tolist() == [2, 4, 5] and i == [1, 3, 4]
    # VALID and SAME: ceil_mode changes nothing
    for auto_pad in ("VALID", "SAME_UPPER", "SAME_LOWER"):
        for size, k, s, d in itertools.product(range(1, 9), range(1, 4), range(1, 4), (1, 2)):
            if auto_pad == "VALID" and (k - 1) * d + 1 > size:
                continue
            args = ((1, 1, size), [k], [s], None, [d])
            assert (resolve_max_pool(*args, ceil_mode=True, auto_pad=auto_pad)
                    == resolve_max_pool(*args, ceil_mode=False, auto_pad=auto_pad))
    # the drop rule: size 2, kernel 2, stride 2, pads [0, 1]: ceil gives 2 windows, the second
    # would start at 2 (the right padding), so there is one
    assert resolve_max_pool((1, 1, 2), [2], [2], [0, 1], ceil_mode=True).output_shape[2] == 1
    # a window larger than the padded input: one window (PyTorch gives one too)
    y, i = pool1d([1, 2], kernel_shape=[3], strides=[2], ceil_mode=True)
    assert y.tolist() == [2] and i == [1]
    with pytest.raises(ValueError, match="has no window"):
        pool1d([1, 2], kernel_shape=[3], strides=[2])


def test_indices_count_batch_and_channel():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5)
    _, i = reference.max_pool(x, [4, 5], return_indices=True)
    assert i.reshape(-1).tolist() == [20 * k + 19 for k in range(6)]
    _, i = reference.max_pool(x, [4, 5], storage_order=1, return_indices=True)
    assert i.reshape(-1).tolist() == [20 * k + 19 for k in range(6)]   # (3, 4): 3 + 4 * 4
    x = np.arange(2 * 2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 2, 3, 4, 5)
    _, i = reference.max_pool(x, [1, 1, 1], return_indices=True, storage_order=1)
    d, h, w = np.meshgrid(range(3), range(4), range(5), indexing="ij")
    spatial = (d + 3 * h + 12 * w).reshape(-1)
    assert i.reshape(4, 60).tolist() == [(60 * k + spatial).tolist() for k in range(4)]


def test_geometry():
    geometry = resolve_max_pool((1, 64, 112, 112), [3, 3], [2, 2], [1, 1, 1, 1])
    assert geometry.output_shape == (1, 64, 56, 56)
    axis = geometry.axes[0]
    assert axis == PoolAxis(112, 3, 2, 1, 1, 1, 56)
    assert axis.extent == 3 and axis.reach_end == 0 and geometry.reads_twice()
    assert axis.taps()[:2].tolist() == [[-1, 0, 1], [1, 2, 3]]
    assert geometry.index_multipliers() == (112, 1) and geometry.channel_stride == 112 * 112
    assert not geometry.has_empty_windows()
    two = resolve_max_pool((1, 1, 8, 9), [2, 3], [2, 3], storage_order=1)
    assert not two.reads_twice() and two.index_multipliers() == (1, 8)
    assert resolve_max_pool((1, 1, 5), [2], [2], ceil_mode=True).axes[0].reach_end == 1
    # dilation 2, stride 1: windows interleave without sharing elements... except they do
    assert resolve_max_pool((1, 1, 6), [2], [1], dilations=[2]).reads_twice()
    assert not resolve_max_pool((1, 1, 8), [2], [4], dilations=[2]).reads_twice()
    # the PyTorch-converted backend cases
    assert resolve_max_pool((1, 1, 1000, 1000), [60, 80], [10, 10], [10, 20, 10, 20],
                            [10, 10]).output_shape == (1, 1, 43, 25)
    assert resolve_max_pool((1, 1, 220000), [200], [10], [100, 100],
                            [10]).output_shape == (1, 1, 21821)


# --- (b) the scalar model on a seeded corpus ----------------------------------------------------


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_random_configs_against_scalar_model(dtype):
    rng = np.random.default_rng(17 + np.dtype(dtype).num)
    checked = 0
    for shape, attributes in random_configs(rng, {1: 40, 2: 30, 3: 12}):
        x = random_values(rng, dtype, shape, edge_fraction=0.3)
        checked += check_against_scalar(x, **attributes)
    assert checked > 60


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int8, np.uint8],
                         ids=dtype_id)
def test_nan_and_signed_zero_at_every_window_position(dtype):
    """A 3x3 window (and a dilated one): each position in turn holds the special value."""
    fmt_bits = np.dtype(dtype).itemsize * 8
    is_float = np.dtype(dtype).kind == "f"
    for dilation, position in itertools.product((1, 2), range(9)):
        extent = 2 * dilation + 1
        base = np.full((1, 1, extent, extent), -3 if is_float else 1, dtype=dtype)
        x = base.copy()
        r, c = divmod(position, 3)
        bits = x.view(f"u{fmt_bits // 8}")
        if is_float:
            nan = {16: 0xFC01, 32: 0x7F800001, 64: 0xFFF8000000000123}[fmt_bits]
            bits[0, 0, r * dilation, c * dilation] = nan
            y, i = reference.max_pool(x, [3, 3], dilations=[dilation] * 2, return_indices=True)
            assert y.view(bits.dtype).item() == CANONICAL_NAN[np.dtype(dtype).name]
            assert i.item() == r * dilation * extent + c * dilation
            x = np.full_like(base, 0).view(bits.dtype)
            x |= np.array(1 << (fmt_bits - 1), dtype=bits.dtype)      # every element -0
            x[0, 0, r * dilation, c * dilation] = 0                   # one +0
            x = x.view(dtype)
        else:
            x[0, 0, r * dilation, c * dilation] = np.iinfo(dtype).max
        check_against_scalar(x, kernel_shape=[3, 3], dilations=[dilation] * 2)
        y, i = reference.max_pool(x, [3, 3], dilations=[dilation] * 2, return_indices=True)
        assert i.item() == r * dilation * extent + c * dilation
        check_against_scalar(x, kernel_shape=[3, 3], dilations=[dilation] * 2, pads=[1] * 4,
                             storage_order=1)


@st.composite
def pool_cases(draw):
    rank = draw(st.integers(1, 3))
    dtype = draw(st.sampled_from(NUMERIC_DTYPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shape, attributes = random_config(rng, rank, max_size={1: 8, 2: 5, 3: 3}[rank])
    edge_fraction = draw(st.sampled_from([0.0, 0.3, 1.0]))
    return random_values(rng, dtype, shape, edge_fraction), attributes


@settings(max_examples=60, deadline=None)
@given(pool_cases())
def test_max_pool_property(case):
    x, attributes = case
    check_against_scalar(x, **attributes)


def test_big_endian_and_views():
    rng = np.random.default_rng(5)
    x = random_values(rng, np.float32, (2, 3, 7, 6))
    y, i = reference.max_pool(x, [3, 2], [2, 1], [1, 0, 1, 1], return_indices=True)
    y2, i2 = reference.max_pool(x.astype(">f4"), [3, 2], [2, 1], [1, 0, 1, 1],
                                return_indices=True)
    assert_same_bits(y2, y)
    assert_same_bits(i2, i)
    y3 = reference.max_pool(np.asfortranarray(x)[:, :, ::-1][:, :, ::-1], [3, 2], [2, 1],
                            [1, 0, 1, 1])
    assert_same_bits(y3, y)


def test_large_backend_geometries():
    """The backend suite's largest geometries (4 800 taps a window, 220 000 elements): the
    shape, and sampled windows against their taps gathered directly."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1, 1000, 1000)).astype(np.float32)
    y, _ = reference.max_pool(x, [60, 80], [10, 10], [10, 20, 10, 20], [10, 10],
                              return_indices=True)
    assert y.shape == (1, 1, 43, 25)
    for oh, ow in [(0, 0), (21, 12), (42, 24), (5, 17)]:
        rows = [r for r in range(oh * 10 - 10, oh * 10 - 10 + 600, 10) if 0 <= r < 1000]
        columns = [c for c in range(ow * 10 - 20, ow * 10 - 20 + 800, 10) if 0 <= c < 1000]
        assert y[0, 0, oh, ow] == x[0, 0][np.ix_(rows, columns)].max()
    x1 = rng.standard_normal((1, 1, 220000)).astype(np.float32)
    y1, _ = reference.max_pool(x1, [200], [10], [100, 100], [10], return_indices=True)
    assert y1.shape == (1, 1, (220000 + 200 - 1990 - 1) // 10 + 1)
    assert y1[0, 0, 500] == x1[0, 0, 5000 - 100:5000 - 100 + 2000:10].max()


# --- (c) onnxruntime where it agrees with the contract ------------------------------------------

ONNX_TYPE = {"float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT,
             "float64": TensorProto.DOUBLE, "int8": TensorProto.INT8, "uint8": TensorProto.UINT8}


def maxpool_model(x, opset=22, indices=True, **attributes):
    outputs = ["y", "i"] if indices else ["y"]
    node = helper.make_node("MaxPool", ["x"], outputs,
                            **{k: v for k, v in attributes.items() if v is not None})
    infos = [helper.make_tensor_value_info("y", ONNX_TYPE[x.dtype.name], None)]
    if indices:
        infos.append(helper.make_tensor_value_info("i", TensorProto.INT64, None))
    graph = helper.make_graph(
        [node], "maxpool", [helper.make_tensor_value_info("x", ONNX_TYPE[x.dtype.name],
                                                          list(x.shape))], infos)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def onnxruntime_agrees(shape, attributes):
    """Where onnxruntime is a valid oracle (measured; see docs/semantics.md): it refuses a pad
    >= kernel, gets SAME wrong with dilation or an extent below the stride, gives VALID a
    ceil_mode window, and returns the lowest float for a window of padding only."""
    rank = len(shape) - 2
    kernel = attributes["kernel_shape"]
    dilations = attributes.get("dilations") or [1] * rank
    strides = attributes.get("strides") or [1] * rank
    pads = attributes.get("pads") or [0] * (2 * rank)
    auto_pad = attributes["auto_pad"]
    if any(p >= kernel[i % rank] for i, p in enumerate(pads)):
        return False
    if auto_pad.startswith("SAME") and any(
            d != 1 or (k - 1) * d + 1 < s for k, d, s in zip(kernel, dilations, strides)):
        return False
    if auto_pad == "VALID" and attributes["ceil_mode"]:
        return False
    try:
        return not resolve_max_pool(shape, **attributes).has_empty_windows()
    except ValueError:
        return False


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "uint8"])
def test_against_onnxruntime(dtype):
    rng = np.random.default_rng(22)
    checked = 0
    for rank in (1, 2, 3, 1, 2):
        for _ in range(25):
            shape, attributes = random_config(rng, rank, max_size=7)
            if not onnxruntime_agrees(shape, attributes):
                continue
            # floats: no NaN and no zero (so no signed-zero tie); integers: anything
            count = math.prod(shape)
            if np.dtype(dtype).kind == "f":
                x = ((rng.permutation(count) + 1) * rng.choice([-1, 1], count)).astype(dtype)
                x = np.where(np.abs(x) > 2000, x / 7, x).astype(dtype)
            else:
                x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, count, endpoint=True,
                                 dtype=dtype)
            x = x.reshape(shape)
            session = onnxruntime.InferenceSession(
                maxpool_model(x, **attributes).SerializeToString(),
                providers=["CPUExecutionProvider"])
            got_y, got_i = session.run(None, {"x": x})
            y, i = reference.max_pool(x, **attributes, return_indices=True)
            assert_same_bits(got_y, y, f"onnxruntime {shape} {attributes}")
            # no NaN and no zero: onnxruntime's tie rule (first strictly greater) is ours
            assert_same_bits(got_i, i, f"onnxruntime Indices {shape} {attributes}")
            checked += 1
    assert checked >= 40


# --- (d) the ONNX backend test cases ------------------------------------------------------------


BACKEND_CASES = maxpool_cases()


def test_every_backend_case_is_found():
    assert len(BACKEND_CASES) == 28
    assert sum(n.startswith("test_maxpool") for n in BACKEND_CASES) == 19


def node_attributes(model):
    node = model.graph.node[0]
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if "auto_pad" in attributes:
        attributes["auto_pad"] = attributes["auto_pad"].decode()
    return attributes, len(node.output) == 2 and node.output[1] != ""


@pytest.mark.parametrize("name", sorted(BACKEND_CASES))
def test_onnx_backend_case(name):
    model, data_sets = BACKEND_CASES[name]
    attributes, with_indices = node_attributes(model)
    for inputs, expected in data_sets:
        got = reference.max_pool(inputs[0], **attributes, return_indices=True)
        assert_same_bits(got[0], expected[0], f"{name} Y")
        if with_indices:
            assert_same_bits(got[1], expected[1], f"{name} Indices")


# --- (e) errors ---------------------------------------------------------------------------------


def test_max_pool_errors():
    x = np.zeros((1, 2, 5, 5), dtype=np.float32)
    cases = [
        (dict(kernel_shape=None), TypeError, r"needs kernel_shape"),
        (dict(kernel_shape=[2]), ValueError,
         r"kernel_shape needs 2 values \(one per spatial axis of the input \(1, 2, 5, 5\)\), "
         r"got 1: \[2\]"),
        (dict(kernel_shape=[2, 0]), ValueError, r"kernel_shape values must be >= 1, got \[2, 0\]"),
        (dict(kernel_shape=[2, 2.5]), TypeError, r"kernel_shape must be integers, got 2.5"),
        (dict(kernel_shape=2), TypeError, r"kernel_shape must be a sequence of integers, got 2"),
        (dict(kernel_shape=[2, True]), TypeError, r"kernel_shape must be integers, got True"),
        (dict(kernel_shape=[2, 2], strides=[1, 0]), ValueError, r"strides values must be >= 1"),
        (dict(kernel_shape=[2, 2], strides=[1]), ValueError, r"strides needs 2 values"),
        (dict(kernel_shape=[2, 2], dilations=[0, 1]), ValueError,
         r"dilations values must be >= 1"),
        (dict(kernel_shape=[2, 2], pads=[1, 1]), ValueError,
         r"pads needs 4 values \(begin and end of each spatial axis"),
        (dict(kernel_shape=[2, 2], pads=[0, 0, -1, 0]), ValueError, r"pads values must be >= 0"),
        (dict(kernel_shape=[2, 2], auto_pad="SAME"), ValueError,
         r"auto_pad must be one of NOTSET, SAME_UPPER, SAME_LOWER, VALID, got 'SAME'"),
        (dict(kernel_shape=[2, 2], auto_pad=b"VALID"), ValueError, r"auto_pad must be one of"),
        (dict(kernel_shape=[2, 2], auto_pad="VALID", pads=[1, 0, 0, 0]), ValueError,
         r"pads \[1, 0, 0, 0\] cannot be used with auto_pad=VALID"),
        (dict(kernel_shape=[2, 2], ceil_mode=2), ValueError, r"ceil_mode must be a bool or 0/1"),
        (dict(kernel_shape=[2, 2], storage_order=2), ValueError,
         r"storage_order must be 0 \(row-major\) or 1 \(column-major\), got 2"),
        (dict(kernel_shape=[2, 2], return_indices="yes"), ValueError,
         r"return_indices must be a bool or 0/1"),
        (dict(kernel_shape=[2, 6]), ValueError,
         r"has no window along spatial axis 1 \(tensor axis 3\): input 5 \+ pads 0 \+ 0 = 5 is "
         r"too short for the window extent 6 = \(kernel_shape 6 - 1\) \* dilations 1 \+ 1"),
        (dict(kernel_shape=[3, 2], dilations=[3, 1], auto_pad="VALID"), ValueError,
         r"spatial axis 0 .* extent 7 = \(kernel_shape 3 - 1\) \* dilations 3 \+ 1 with "
         r"auto_pad=VALID"),
    ]
    for attributes, error, message in cases:
        with pytest.raises(error, match=message):
            reference.max_pool(x, **attributes)
    assert reference.max_pool(x, [2, 2], auto_pad="VALID", pads=[0, 0, 0, 0]).shape == (1, 2, 4, 4)
    with pytest.raises(ValueError, match=r"rank >= 3 .* got rank 2 with shape \(5, 5\)"):
        reference.max_pool(x[0, 0], [2, 2])
    with pytest.raises(TypeError, match=r"max_pool\(\) \(ONNX MaxPool\) does not accept bool"):
        reference.max_pool(x.astype(bool), [2, 2])
    with pytest.raises(TypeError, match=r"unsupported dtype complex64"):
        reference.max_pool(x.astype(np.complex64), [2, 2])


def test_zero_size_inputs():
    y, i = reference.max_pool(np.zeros((0, 3, 4), np.float32), [2], return_indices=True)
    assert y.shape == i.shape == (0, 3, 3)
    y = reference.max_pool(np.zeros((1, 1, 0), np.float32), [2], auto_pad="SAME_UPPER")
    assert y.shape == (1, 1, 0)
    y, i = reference.max_pool(np.zeros((1, 1, 0), np.float32), [1], pads=[0, 1],
                              return_indices=True)
    assert y.tolist() == [[[-np.inf]]] and i.tolist() == [[[-1]]]
