"""OffloadSession's pools between onnxruntime's NCHWc nodes (``device_ops.with_blocked_pools``):
the device takes onnxruntime's NCHWc tensors as they lie, with the plain pool's bits, only where
onnxruntime lays the model out so, and the caller's options come back as they were given."""

import functools
import gc
import inspect
import pathlib

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from maxaccel import bench
from maxaccel.contract.pooling import resolve_max_pool
from maxaccel.host import device_ops
from maxaccel.host.offload import OffloadSession
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import random_values

BLOCK = device_ops.nchwc_block()
needs_nchwc = pytest.mark.skipif(BLOCK is None,
                                 reason="onnxruntime has no NCHWc layout on this machine")
POOL = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
SQUEEZENET = str(pathlib.Path(__file__).parents[1] / "examples" / "squeezenet1_1.onnx")


def conv_pool_model(channels=16):
    """x (1 x 8 x 11 x 13) -> Conv -> Relu -> MaxPool 3x3 stride 2 -> Conv -> GlobalMaxPool ->
    y, the MaxPool's result an output too ("pooled", 1 x channels x 6 x 7)."""
    rng = np.random.default_rng(3)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("w1", (channels, 8, 3, 3)),
                                   ("w2", (channels, channels, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["pooled"], **POOL),
             helper.make_node("Conv", ["pooled", "w2"], ["c2"]),
             helper.make_node("GlobalMaxPool", ["c2"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv_pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 11, 13])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 1, 1]),
         helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, channels, 6, 7])],
        weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


class Recording:
    """The golden model, recording each pool call's input shape."""

    def __init__(self):
        self.seen = []

    def __getattr__(self, name):
        return getattr(reference, name)

    def max_pool(self, x, *args, **kwargs):
        self.seen.append(("max_pool", x.shape))
        return reference.max_pool(x, *args, **kwargs)

    def global_max_pool(self, x, *args, **kwargs):
        self.seen.append(("global_max_pool", x.shape))
        return reference.global_max_pool(x, *args, **kwargs)

    def reduce_max(self, x, *args, **kwargs):
        self.seen.append(("reduce_max", x.shape))
        return reference.reduce_max(x, *args, **kwargs)


class Writing(Recording):
    """The golden model, its MaxPool writing into ``out`` when given one (as
    :meth:`~maxaccel.host.device.Device.max_pool` does), each ``out`` kept."""

    def __init__(self):
        super().__init__()
        self.outs = []

    def max_pool(self, x, *args, out=None, **kwargs):
        y = super().max_pool(x, *args, **kwargs)
        if out is None:
            return y
        self.outs.append(out)
        out.view(np.uint32)[...] = y.view(np.uint32)
        return out


PLAIN_CALLS = [("max_pool", (1, 16, 11, 13)), ("global_max_pool", (1, 16, 6, 7))]


def feeds(seed=0):
    return {"x": np.random.default_rng(seed).standard_normal((1, 8, 11, 13)).astype(np.float32)}


@needs_nchwc
def test_onnxruntime_lays_a_tensor_out_in_blocks_of_channels():
    """``nchwc_block``'s claim for a tensor of several images and channels not a multiple of
    the block: ``N x C'/B x H x W x B``, the padding channels zero."""
    graph = helper.make_graph(
        [helper.make_node("ReorderInput", ["x"], ["y"], domain=device_ops.NCHWC_DOMAIN)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 20, 5, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid(device_ops.NCHWC_DOMAIN, 1)])
    model.ir_version = 8
    x = np.random.default_rng(1).standard_normal((2, 20, 5, 7)).astype(np.float32)
    y = onnxruntime.InferenceSession(model.SerializeToString(),
                                     providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    padded = -(-20 // BLOCK) * BLOCK
    assert y.shape == (2, padded, 5, 7)
    blocks = y.reshape(2, padded // BLOCK, 5, 7, BLOCK)
    lanes = np.moveaxis(blocks, -1, 2).reshape(2, padded, 5, 7)
    assert_same_bits(lanes[:, :20], x)
    assert not lanes[:, 20:].any()


def run_beside_the_partitions(device, channels, runs):
    """``conv_pool_model(channels)`` on ``device`` in one session, ``runs`` times, each run's
    outputs and record those of the partitions on the golden model."""
    one = OffloadSession(conv_pool_model(channels), device=device)
    plain = OffloadSession(conv_pool_model(channels), device=reference, one_session=False)
    for seed in range(runs):
        for got, want in zip(one.run(None, feeds(seed)), plain.run(None, feeds(seed))):
            assert_same_bits(got, want)
        assert one.last_run == plain.last_run


@needs_nchwc
@pytest.mark.parametrize("channels", [16, 32])
def test_pools_between_nchwc_nodes_take_the_tensors_as_they_lie(channels):
    device = Recording()
    run_beside_the_partitions(device, channels, 3)
    # N * C'/B images of B channels, sent channels-first; then the B channels of each pixel.
    assert device.seen[-2:] == [("max_pool", (channels // BLOCK, BLOCK, 11, 13)),
                                ("reduce_max", (1, channels // BLOCK, 6, 7, BLOCK))]


def blocked_pools(device, dtype, block):
    """The kernels' calls of ``conv_pool_model``'s two pools on NCHWc tensors of ``block``
    (:func:`~maxaccel.host.device_ops.blocked_pool`), as the one session makes them: the
    MaxPool written into onnxruntime's output by a device whose ``max_pool`` takes ``out``."""
    output_dims = None
    if "out" in inspect.signature(device.max_pool).parameters:
        def output_dims(dims):
            return resolve_max_pool(dims, **POOL).output_shape
    pool = functools.partial(device.max_pool, **POOL)
    return (device_ops.blocked_pool(pool, dtype, block, output_dims=output_dims),
            device_ops.blocked_pool(device.reduce_max, dtype, block, True))


@pytest.mark.parametrize("device", [reference, Writing()], ids=["returned", "written into out"])
@pytest.mark.parametrize("block", [4, 8, 16])
def test_a_blocked_pool_has_the_plain_pools_bits(block, device):
    """NaN payloads, signed zeros, infinities and subnormals in every position of the windows,
    over several images and blocks of channels, whatever block this machine has; the pool's
    result returned, or written into the output by a device that takes ``out``."""
    x = random_values(np.random.default_rng(block), np.float32, (2, 32, 9, 10),
                      edge_fraction=0.5)
    blocked = np.ascontiguousarray(
        np.moveaxis(x.reshape(2, 32 // block, block, 9, 10), 2, -1)).reshape(x.shape)
    pool, global_pool = blocked_pools(device, x.dtype, block)
    for call, want in ((pool, reference.max_pool(x, **POOL)),
                       (global_pool, reference.global_max_pool(x))):
        rooms = {}  # the kernel's room, as the C kernel hands it out: new arrays

        def room(index, dims):
            rooms[index] = np.empty(dims, x.dtype)
            return memoryview(rooms[index]).cast("B")
        (got,) = call([(blocked, None, blocked.shape)], room)
        if got is None:     # written through the room
            got = rooms[0]
        elif isinstance(got, tuple):  # (onnxruntime's dims, the items in C order)
            dims, items = got
            got = np.ascontiguousarray(items).reshape(dims)
        assert got.shape == want.shape
        lanes = got.reshape(2, 32 // block, *got.shape[2:], block)
        assert_same_bits(np.moveaxis(lanes, -1, 2).reshape(want.shape), want)


@needs_nchwc
@pytest.mark.parametrize("channels", [16, 32])
def test_a_device_that_takes_out_writes_the_pool_into_onnxruntimes_output(channels):
    """A device whose MaxPool takes ``out`` gets onnxruntime's NCHWc output seen as the pooled
    images (a strided view over the kernel's room): its bits are the plain pool's, and it is
    the same array as the last run's exactly when the tensor lies where it lay."""
    device = Writing()
    run_beside_the_partitions(device, channels, 4)
    assert len(device.outs) == 4

    def address(out):
        return out.__array_interface__["data"][0]
    pairs = list(zip(device.outs, device.outs[1:]))
    assert [a is b for a, b in pairs] == [address(a) == address(b) for a, b in pairs]
    out = device.outs[0]
    assert out.shape == (channels // BLOCK, BLOCK, 6, 7) and not out.flags.c_contiguous
    assert isinstance(out.base, memoryview) and out.flags.writeable


def test_a_pool_in_onnx_layout_writes_into_onnxruntimes_output_too():
    """Below NCHWc (``ORT_ENABLE_EXTENDED``) a device whose MaxPool takes ``out`` gets
    onnxruntime's output itself, in ONNX layout: the pool's bits are the partitions', and the
    array is the last run's exactly when the tensor lies where it lay."""
    def options():
        given = onnxruntime.SessionOptions()
        given.graph_optimization_level = \
            onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        return given
    device = Writing()
    one = OffloadSession(conv_pool_model(), options(), device=device)
    plain = OffloadSession(conv_pool_model(), options(), device=reference, one_session=False)
    for seed in range(4):
        for got, want in zip(one.run(None, feeds(seed)), plain.run(None, feeds(seed))):
            assert_same_bits(got, want)
    assert device.seen[0] == PLAIN_CALLS[0] and len(device.outs) == 4
    pairs = list(zip(device.outs, device.outs[1:]))
    assert [a is b for a, b in pairs] == [
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0] for a, b in pairs]
    out = device.outs[0]
    assert out.shape == (1, 16, 6, 7) and out.flags.c_contiguous and out.flags.writeable
    assert isinstance(out.base, memoryview)


@pytest.mark.parametrize("level", ["ORT_ENABLE_EXTENDED", "ORT_ENABLE_LAYOUT"])
def test_the_optimization_level_decides(level):
    """onnxruntime lays Convs out NCHWc from ``ORT_ENABLE_LAYOUT`` on; below, no pool is
    optimized for it."""
    levels = onnxruntime.GraphOptimizationLevel
    if not hasattr(levels, level):
        pytest.skip(f"no {level} in this onnxruntime")
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = getattr(levels, level)
    device = Recording()
    one = OffloadSession(conv_pool_model(), options, device=device)
    assert one.one_session_refusal is None
    one.run(None, feeds())
    if level == "ORT_ENABLE_EXTENDED" or BLOCK is None:
        assert device.seen == PLAIN_CALLS
    else:
        assert device.seen[0] == ("max_pool", (16 // BLOCK, BLOCK, 11, 13))


def test_a_pool_onnxruntime_would_reorder_for_stays_in_onnx_layout():
    """A lone pool, and a pool after a node onnxruntime keeps in ONNX layout: in NCHWc
    onnxruntime would convert the tensor for the pool alone, both ways (6x the host's time for
    a lone 1 x 64 x 112 x 112 pool), so the pools take the tensors as ONNX lays them out."""
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], **POOL),
             helper.make_node("Sigmoid", ["p"], ["s"]),
             helper.make_node("GlobalMaxPool", ["s"], ["y"])]
    graph = helper.make_graph(
        nodes, "lone", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    device = Recording()
    one = OffloadSession(model, device=device)
    x = np.random.default_rng(2).standard_normal((1, 64, 12, 12)).astype(np.float32)
    (y,) = one.run(None, {"x": x})
    assert one.one_session_refusal is None
    assert device.seen == [("max_pool", (1, 64, 12, 12)), ("global_max_pool", (1, 64, 6, 6))]
    want = OffloadSession(model, device=reference, one_session=False).run(None, {"x": x})
    assert_same_bits(y, want[0])


def test_a_blocked_model_onnxruntime_refuses_leaves_the_pools_in_onnx_layout(monkeypatch):
    make = onnxruntime.InferenceSession

    def refusing_nchwc(model, *args, **kwargs):
        if isinstance(model, bytes) and any(
                node.domain == device_ops.NCHWC_DOMAIN
                for node in onnx.ModelProto.FromString(model).graph.node):
            raise RuntimeError("refused")
        return make(model, *args, **kwargs)
    monkeypatch.setattr(onnxruntime, "InferenceSession", refusing_nchwc)
    device = Recording()
    one = OffloadSession(conv_pool_model(), device=device)
    assert one.one_session_refusal is None
    for got, want in zip(one.run(None, feeds()),
                         OffloadSession(conv_pool_model(), device=reference,
                                        one_session=False).run(None, feeds())):
        assert_same_bits(got, want)
    assert device.seen == PLAIN_CALLS


def test_the_callers_options_come_back_as_given(tmp_path):
    """The model is optimized once with the caller's options (a session made and dropped):
    its file, log level and profiling are theirs again afterwards, and only the session they
    made writes a profile and the optimized model."""
    options = onnxruntime.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.log_severity_level = 2
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "profile")
    one = OffloadSession(conv_pool_model(), options, device=reference)
    assert options.optimized_model_filepath == str(tmp_path / "optimized.onnx")
    assert options.log_severity_level == 2 and options.enable_profiling
    one.run(None, feeds())
    del one
    gc.collect()
    assert (tmp_path / "optimized.onnx").exists()
    assert len(list(tmp_path.glob("profile*"))) == 1


def test_the_callers_options_come_back_when_onnxruntime_fails_to_optimize(monkeypatch):
    made = onnxruntime.InferenceSession

    def failing_to_optimize(model, options=None, *args, **kwargs):
        if options is not None and options.optimized_model_filepath.endswith("optimized.onnx"):
            raise RuntimeError("no room to write the optimized model")
        return made(model, options, *args, **kwargs)
    monkeypatch.setattr(onnxruntime, "InferenceSession", failing_to_optimize)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 1
    device = Recording()
    one = OffloadSession(conv_pool_model(), options, device=device)
    assert options.optimized_model_filepath == "" and options.log_severity_level == 1
    assert not options.enable_profiling
    one.run(None, feeds())
    assert device.seen == PLAIN_CALLS


@needs_nchwc
def test_a_loop_body_with_values_named_as_the_main_graphs():
    """onnxruntime names the values it makes per graph: the control model's Loop body and main
    graph both get a ``reorder_token_0``, which the saved model may not have twice."""
    _, model, control_feeds = bench.load_model("control")
    device = Recording()
    one = OffloadSession(model, device=device)
    plain = OffloadSession(model, device=reference, one_session=False)
    for got, want in zip(one.run(None, control_feeds), plain.run(None, control_feeds)):
        assert_same_bits(got, want)
    assert device.seen[0] == ("max_pool", (64 // BLOCK, BLOCK, 112, 112))


@pytest.mark.parametrize("name", ["resnet18", SQUEEZENET, "audio"])
def test_the_one_session_gives_onnxruntimes_own_bits(name):
    """Random normal inputs (no NaN or signed-zero tie for the contract to decide otherwise):
    the whole model's bits, as onnxruntime alone gives them, because onnxruntime lays the one
    session out as it lays out the whole model (ResNet-18 was 4e-5 apart with reorders around
    its pool, and is as partitions)."""
    _, model, model_feeds = bench.load_model(name)
    want = onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, model_feeds)
    for got, expected in zip(OffloadSession(model, device=reference).run(None, model_feeds),
                             want):
        assert_same_bits(got, expected)
