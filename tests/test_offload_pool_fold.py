"""A MaxPool read only by a GlobalMaxPool, or by a ReduceMax over every spatial axis, is folded
into that reduction: one device call on the part of the pool's input its windows read, with
the bits of the pool followed by the reduction (NaN absorbing, +0 above -0), on every route a
session takes (one session, partitions, onnxruntime's NCHWc tensors, a board)."""

import numpy as np
import pytest
from fake_board import FakeBoard
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from maxaccel.contract.pooling import resolve_max_pool
from maxaccel.contract.wire import Command
from maxaccel.host import device_ops
from maxaccel.host.device import Device
from maxaccel.host.offload import OffloadSession
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import random_values

F32 = TensorProto.FLOAT


class Recording:
    """The golden model, recording the name and input shape of each call."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        operation = getattr(reference, name)

        def recorded(x, *args, **kwargs):
            self.calls.append((name, x.shape))
            return operation(x, *args, **kwargs)
        return recorded


def pool_then_reduce(shape, pool, reduction="GlobalMaxPool", elem_type=F32, opset=18,
                     axes=None, keepdims=1, extra_outputs=(), axes_input=None, **reduce_kw):
    """x -> MaxPool(**pool) -> reduction -> y; ``axes`` a constant input (opset 18) or
    attribute (before); ``axes_input`` a graph input of the axes instead; ``extra_outputs``
    more graph outputs (the pool's result, say)."""
    initializers, inputs = [], [helper.make_tensor_value_info("x", elem_type, shape)]
    reduce_inputs, attributes = ["pooled"], dict(reduce_kw)
    if reduction in ("ReduceMax", "ReduceMin"):
        attributes["keepdims"] = keepdims
        if axes_input is not None:
            reduce_inputs.append(axes_input)
            inputs.append(helper.make_tensor_value_info(axes_input, TensorProto.INT64, [None]))
        elif axes is not None and opset >= 18:
            reduce_inputs.append("axes")
            initializers.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        elif axes is not None:
            attributes["axes"] = axes
    pool_outputs = ["pooled", "indices"] if "indices" in extra_outputs else ["pooled"]
    nodes = [helper.make_node("MaxPool", ["x"], pool_outputs, name="pool", **pool),
             helper.make_node(reduction, reduce_inputs, ["y"], name="reduce", **attributes)]
    outputs = [helper.make_tensor_value_info("y", elem_type, None)]
    for name in extra_outputs:
        outputs.append(helper.make_tensor_value_info(
            name, TensorProto.INT64 if name == "indices" else elem_type, None))
    graph = helper.make_graph(nodes, "pool_then_reduce", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=10)


def unfused(x, pool, reduction="GlobalMaxPool", axes=None, keepdims=1):
    """The golden model's pool, then its reduction: what the folded step must give."""
    pooled = reference.max_pool(x, **pool)
    if reduction == "GlobalMaxPool":
        return reference.global_max_pool(pooled)
    return reference.reduce_max(pooled, axes=axes, keepdims=keepdims)


TWO_BY_TWO = dict(kernel_shape=[2, 2], strides=[2, 2])


@pytest.mark.parametrize("reduction, axes, keepdims, opset", [
    ("GlobalMaxPool", None, 1, 18),
    ("ReduceMax", [2, 3], 0, 18),
    ("ReduceMax", [-1, 1, -2], 1, 18),
    ("ReduceMax", [3, 2], 1, 13),
    ("ReduceMax", None, 0, 18),    # every axis
])
@pytest.mark.parametrize("one_session", [True, False])
def test_a_pool_read_only_by_a_global_reduction_is_one_device_call(reduction, axes, keepdims,
                                                                  opset, one_session):
    model = pool_then_reduce([2, 3, 9, 7], TWO_BY_TWO, reduction, axes=axes,
                             keepdims=keepdims, opset=opset)
    device = Recording()
    session = OffloadSession(model, device=device, one_session=one_session)
    assert session.placements == [("pool", "MaxPool", "device"),
                                  ("reduce", reduction, "device")]
    x = random_values(np.random.default_rng(0), np.float32, (2, 3, 9, 7), edge_fraction=0.5)
    got, = session.run(None, {"x": x})
    # The 2x2 windows read rows 0-7 and columns 0-5: one call, on that part of x.
    name = "global_max_pool" if reduction == "GlobalMaxPool" else "reduce_max"
    assert device.calls == [(name, (2, 3, 8, 6))]
    assert [s.name for s in session.last_steps if s.where == "device"] == ["reduce"]
    assert_same_bits(got, unfused(x, TWO_BY_TWO, reduction, axes, keepdims))


@pytest.mark.parametrize("why, model", [
    ("the pool's result is an output", pool_then_reduce([1, 2, 6, 6], TWO_BY_TWO,
                                                        extra_outputs=["pooled"])),
    ("Indices are read", pool_then_reduce([1, 2, 6, 6], TWO_BY_TWO,
                                          extra_outputs=["indices"])),
    ("a spatial axis is kept", pool_then_reduce([1, 2, 6, 6], TWO_BY_TWO, "ReduceMax",
                                                axes=[1, 3])),
    ("the axes are known only at run time",
     pool_then_reduce([1, 2, 6, 6], TWO_BY_TWO, "ReduceMax", axes_input="axes")),
    ("no axes and noop_with_empty_axes", pool_then_reduce([1, 2, 6, 6], TWO_BY_TWO, "ReduceMax",
                                                          noop_with_empty_axes=1)),
    ("a minimum of maxima", pool_then_reduce([1, 2, 6, 6], TWO_BY_TWO, "ReduceMin",
                                             axes=[2, 3])),
])
def test_a_pool_whose_result_is_needed_otherwise_is_not_folded(why, model):
    device = Recording()
    session = OffloadSession(model, device=device)
    x = random_values(np.random.default_rng(1), np.float32, (1, 2, 6, 6), edge_fraction=0.5)
    feeds = {"x": x}
    if "axes" in [i.name for i in model.graph.input]:
        feeds["axes"] = np.array([2, 3], np.int64)
    results = session.run(None, feeds)
    assert [name for name, _ in device.calls][0] == "max_pool", why
    assert len(device.calls) == 2, why
    pooled = reference.max_pool(x, **TWO_BY_TWO)
    if why == "the pool's result is an output":
        assert_same_bits(results[1], pooled)


def test_a_nan_the_windows_do_not_read_is_not_in_the_result():
    """Rows and columns no window reads hold NaN, and +0 above channel 0's -0 maximum: the
    result is each channel's maximum of what the windows read, as the pool then the
    reduction (-0, and the canonical NaN of a signalling one read)."""
    pool = dict(kernel_shape=[3, 2], strides=[3, 3], pads=[0, 1, 0, 0])
    x = np.full((1, 2, 11, 10), -1.0, np.float32)
    geometry = resolve_max_pool(x.shape, **pool)
    rows, columns = (np.setdiff1d(np.arange(n), np.arange(n)[part])
                     for n, part in zip(x.shape[2:], geometry.covered()))
    assert rows.size and columns.size    # rows 9-10, columns 1, 4 and 7 read by no window
    x[:, :, rows, :] = np.float32(np.nan)
    x[:, 0, :, columns] = 0.0
    x[:, 1, :, columns] = np.inf
    x[0, 0, 0, 0] = -0.0
    x[0, 1, 3, 3] = np.uint32(0x7FA00001).view(np.float32)   # a signalling NaN that is read
    for one_session in (True, False):
        got, = OffloadSession(pool_then_reduce(list(x.shape), pool), device=reference,
                              one_session=one_session).run(None, {"x": x})
        want = unfused(x, pool)
        assert_same_bits(got, want)
        assert got.view(np.uint32).reshape(-1).tolist() == [0x80000000, 0x7FC00000]


def test_a_nan_or_a_signed_zero_at_every_read_position():
    """One NaN (of any payload), or +0 among -0s, at each position some window reads: the
    folded step gives the canonical NaN, or +0, as the pool then the reduction."""
    pool = dict(kernel_shape=[2, 3], strides=[1, 2], dilations=[2, 1], ceil_mode=1)
    shape = (1, 1, 6, 7)
    session = OffloadSession(pool_then_reduce(list(shape), pool), device=reference)
    covered = resolve_max_pool(shape, **pool).covered()
    rows, columns = (np.arange(n)[part] for n, part in zip(shape[2:], covered))
    for value in (0x7FC00000, 0xFF800001, 0x7F800001, 0x00000000):
        for i in rows:
            for j in columns:
                x = np.full(shape, -0.0 if value == 0 else -3.5, np.float32)
                x[0, 0, i, j] = np.uint32(value).view(np.float32)
                got, = session.run(None, {"x": x})
                assert_same_bits(got, unfused(x, pool))


@st.composite
def pool_cases(draw):
    rank = draw(st.integers(1, 3))
    kernel = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    strides = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    dilations = draw(st.lists(st.integers(1, 2), min_size=rank, max_size=rank))
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    sizes = [draw(st.integers(e, e + 5)) for e in extents]
    pool = dict(kernel_shape=kernel, strides=strides, dilations=dilations)
    auto_pad = draw(st.sampled_from(["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]))
    if auto_pad == "NOTSET":
        pool["pads"] = [draw(st.integers(0, e - 1)) for e in extents * 2]
        pool["ceil_mode"] = draw(st.integers(0, 1))
    else:
        pool["auto_pad"] = auto_pad
    dtype = draw(st.sampled_from([np.float32, np.float16, np.float64, np.int8, np.uint8]))
    return [draw(st.integers(1, 2)), draw(st.integers(1, 3))] + sizes, pool, dtype


@settings(max_examples=60, deadline=None)
@given(pool_cases(), st.integers(0, 2**32 - 1))
def test_the_folded_step_has_the_bits_of_the_pool_then_the_reduction(case, seed):
    """Any geometry (strides past the window, dilation gaps, padding, ceil_mode, auto_pad),
    any element type the pool takes, edge values: the same bits."""
    shape, pool, dtype = case
    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    reduction = "GlobalMaxPool" if np.dtype(dtype).kind == "f" else "ReduceMax"
    spatial = list(range(2, len(shape)))
    model = pool_then_reduce(shape, pool, reduction, elem_type, axes=spatial)
    x = random_values(np.random.default_rng(seed), dtype, tuple(shape), edge_fraction=0.5)
    got, = OffloadSession(model, device=reference).run(None, {"x": x})
    assert_same_bits(got, unfused(x, pool, reduction, spatial))


needs_nchwc = pytest.mark.skipif(device_ops.nchwc_block() is None,
                                 reason="onnxruntime has no NCHWc layout on this machine")


def conv_pool_global_model(channels=16, size=(11, 9)):
    """x -> Conv 1x1 -> MaxPool 2x2 stride 2 -> GlobalMaxPool -> y: the pool's input in
    onnxruntime's NCHWc layout."""
    rng = np.random.default_rng(5)
    weights = numpy_helper.from_array(
        rng.standard_normal((channels, 8, 1, 1)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("MaxPool", ["c"], ["pooled"], name="pool", **TWO_BY_TWO),
             helper.make_node("GlobalMaxPool", ["pooled"], ["y"], name="reduce")]
    graph = helper.make_graph(
        nodes, "conv_pool_global", [helper.make_tensor_value_info("x", F32, [1, 8, *size])],
        [helper.make_tensor_value_info("y", F32, [1, channels, 1, 1])], [weights])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@needs_nchwc
def test_onnxruntimes_nchwc_tensor_is_cut_as_it_lies():
    """The folded GlobalMaxPool takes the Conv's NCHWc tensor (N x C/B x H x W x B) cut to
    the rows and columns the windows read: a value beyond them, the largest, is left out."""
    block = device_ops.nchwc_block()
    model = conv_pool_global_model()
    x = np.random.default_rng(6).standard_normal((1, 8, 11, 9)).astype(np.float32)
    x[:, :, 10, :] = 1e4     # the last row, no window reads it
    x[:, :, :, 8] = -1e4     # the last column, idem (and its negative too)
    device = Recording()
    session = OffloadSession(model, device=device)
    got, = session.run(None, {"x": x})
    assert device.calls == [("reduce_max", (1, 16 // block, 10, 8, block))]
    want, = OffloadSession(model, device=reference, one_session=False).run(None, {"x": x})
    assert_same_bits(got, want)
    conv = np.einsum("oc,nchw->nohw", numpy_helper.to_array(model.graph.initializer[0])[:, :, 0,
                                                                                         0], x)
    np.testing.assert_allclose(got.reshape(-1), conv[0, :, :10, :8].max(axis=(1, 2)),
                               rtol=1e-5)


def test_a_board_runs_the_folded_step_as_one_command():
    """On a board, the folded step is one reduction command (no MAX_POOL), of the part the
    windows read (a strided view of the input), with the golden model's bits."""
    model = pool_then_reduce([2, 3, 9, 7], TWO_BY_TWO)
    x = random_values(np.random.default_rng(7), np.float32, (2, 3, 9, 7), edge_fraction=0.5)
    x[:, :, 8, :] = np.inf     # the last row: no window reads it
    with Device(FakeBoard()) as device:
        session = OffloadSession(model, device=device)
        board = device.link.transport
        since = len(board.log)
        got, = session.run(None, {"x": x})
        commands = [code for code, _ in board.log[since:]]
    assert Command.MAX_POOL not in commands and len(commands) == 1
    assert_same_bits(got, unfused(x, TWO_BY_TWO))


def test_a_core_for_a_model_whose_pool_is_folded_needs_no_pooling_unit():
    """The core chosen for a model plans its steps as the session runs them: a MaxPool folded
    into a GlobalMaxPool is one reduction, so the windowed unit is left out."""
    from maxaccel.host.model_core import choose_core
    choice = choose_core("icebreaker", [("folded", pool_then_reduce([1, 8, 32, 32],
                                                                    TWO_BY_TWO))])
    assert "window" not in choice.core["units"]
    assert [(n.node, n.op) for n in choice.nodes] == [("reduce", "GlobalMaxPool")]
