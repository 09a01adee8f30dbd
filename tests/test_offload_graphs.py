"""OffloadSession on whole graphs: CPU partitions on onnxruntime, max-family nodes inside
If/Loop/Scan bodies and model-local functions, Transposes folded into channels-last pooling,
onnxruntime's API and its (lack of) strictness."""

import functools

import numpy as np
import onnx
import onnxruntime
import pytest
from fake_board import FakeBoard
from onnx import TensorProto, helper, numpy_helper

from maxaccel.host.device import Device
from maxaccel.contract.dtypes import DType
from maxaccel.host.offload import OffloadSession
from maxaccel.contract.wire import Command
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits

F32 = TensorProto.FLOAT


@pytest.fixture(scope="module")
def device():
    with Device(FakeBoard()) as dev:
        yield dev


def f32(bits):
    return np.array(bits, np.uint32).view(np.float32)


def bits(array):
    return np.asarray(array).view(np.uint32).reshape(-1).tolist()


def make_model(nodes, inputs, outputs, opset=18, initializers=(), functions=(), **kwargs):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(f.domain, 1)
                                                  for f in functions]
    return helper.make_model(graph, opset_imports=imports, functions=list(functions),
                             ir_version=10, **kwargs)


def vi(name, shape, element=F32):
    return helper.make_tensor_value_info(name, element, shape)


# The example: Max(a, b) with a = [+0, a negative NaN with payload 1], b = [-0, 1].
# numpy's rules pass -0 and the NaN through; the contract gives +0 and the canonical NaN.
A = f32([0x00000000, 0xFFC00001])
B = f32([0x80000000, 0x3F800000])
CONTRACT = [0x00000000, 0x7FC00000]


def test_max_in_the_branches_of_an_if(device):
    then_branch = helper.make_graph([helper.make_node("Max", ["a", "b"], ["out"])], "then", [],
                                    [vi("out", [2])])
    # else: ReduceMax over a [2, 2] stack of b and a (axis 0), and GlobalMaxPool of it.
    else_branch = helper.make_graph(
        [helper.make_node("Concat", ["a", "b"], ["ab"], axis=0),
         helper.make_node("Reshape", ["ab", "shape"], ["stacked"]),
         helper.make_node("ReduceMax", ["stacked", "axis0"], ["out"], keepdims=0),
         helper.make_node("Unsqueeze", ["stacked", "axis0"], ["pool_in"]),
         helper.make_node("GlobalMaxPool", ["pool_in"], ["pooled"]),
         helper.make_node("Identity", ["pooled"], ["unused"])],
        "else", [], [vi("out", [2])])
    model = make_model(
        [helper.make_node("If", ["flag"], ["y"], name="if", then_branch=then_branch,
                          else_branch=else_branch)],
        [vi("a", [2]), vi("b", [2]), vi("flag", [], TensorProto.BOOL)], [vi("y", [2])],
        initializers=[numpy_helper.from_array(np.array([2, 2], np.int64), "shape"),
                      numpy_helper.from_array(np.array([0], np.int64), "axis0")])
    for dev in (device, reference):
        session = OffloadSession(model, device=dev)
        assert session.placements == [("if", "If", "onnx.reference")]
        for flag in (True, False):
            (y,) = session.run(None, {"a": A, "b": B, "flag": np.array(flag)})
            assert bits(y) == CONTRACT
    board = device.link.transport
    assert {code for code, _ in board.log} >= {Command.REDUCE}


def test_max_in_a_loop_body_nested_in_an_if():
    """Loop-carried Max(v, b) twice, and a ReduceMax as a scan output; the Loop inside an If
    branch: the device reaches every level."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Max", ["v_in", "b"], ["v_out"]),
         helper.make_node("ReduceMax", ["v_out"], ["peak"], keepdims=1)],
        "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL),
                 vi("v_in", [2])],
        [vi("cond_out", [], TensorProto.BOOL), vi("v_out", [2]), vi("peak", [1])])
    loop = helper.make_node("Loop", ["trips", "go", "a"], ["v", "peaks"], body=body)
    branch = helper.make_graph([loop], "then", [], [vi("v", [2]), vi("peaks", [2, 1])])
    model = make_model(
        [helper.make_node("If", ["flag"], ["v", "peaks"], name="if", then_branch=branch,
                          else_branch=branch)],
        [vi("a", [2]), vi("b", [2]), vi("flag", [], TensorProto.BOOL)],
        [vi("v", [2]), vi("peaks", [2, 1])],
        initializers=[numpy_helper.from_array(np.array(2, np.int64), "trips"),
                      numpy_helper.from_array(np.array(True), "go")])
    with Device(FakeBoard()) as dev:
        session = OffloadSession(model, device=dev)
        v, peaks = session.run(None, {"a": A, "b": B, "flag": np.array(True)})
        board = dev.link.transport
        codes = [code for code, _ in board.log]
        assert (codes.count(Command.MAX), codes.count(Command.REDUCE)) == (2, 2)  # 2 Max, 2 ReduceMax
    assert bits(v) == CONTRACT
    assert bits(peaks) == [0x7FC00000, 0x7FC00000]


def test_max_in_a_scan_body(device):
    """A running Max over the rows of a [3, 2] tensor: -0 then +0 then -0 in column 0 (the
    result must be +0), a NaN with a payload in column 1 (canonical NaN from then on)."""
    body = helper.make_graph(
        [helper.make_node("Max", ["state_in", "row"], ["state_out"]),
         helper.make_node("Identity", ["state_out"], ["seen"])],
        "body", [vi("state_in", [2]), vi("row", [2])], [vi("state_out", [2]), vi("seen", [2])])
    model = make_model(
        [helper.make_node("Scan", ["init", "rows"], ["final", "history"], name="scan",
                          body=body, num_scan_inputs=1)],
        [vi("init", [2]), vi("rows", [3, 2])], [vi("final", [2]), vi("history", [3, 2])])
    rows = f32([[0x80000000, 0x3F800000], [0x00000000, 0xFFC00001], [0x80000000, 0x40000000]])
    init = f32([0x80000000, 0xFF800000])
    for dev in (device, reference):
        session = OffloadSession(model, device=dev)
        final, history = session.run(None, {"init": init, "rows": rows})
        assert session.last_run == [("scan", "Scan", "onnx.reference")]
        assert bits(final) == [0x00000000, 0x7FC00000]
        assert bits(history) == [0x80000000, 0x3F800000, 0x00000000, 0x7FC00000,
                                 0x00000000, 0x7FC00000]


def test_max_in_a_local_function_runs_on_the_device(device):
    """A model-local function holding a Max is inlined: its Max is a device node; a function
    without a max-family node stays a function (onnxruntime runs it)."""
    maxed = helper.make_function("local", "Clamp", ["x", "lo"], ["y"],
                                 [helper.make_node("Max", ["x", "lo"], ["y"])],
                                 [helper.make_opsetid("", 18)])
    double = helper.make_function("local", "Double", ["x"], ["y"],
                                  [helper.make_node("Add", ["x", "x"], ["y"])],
                                  [helper.make_opsetid("", 18)])
    model = make_model(
        [helper.make_node("Clamp", ["a", "b"], ["m"], domain="local", name="clamp"),
         helper.make_node("Double", ["m"], ["y"], domain="local", name="double")],
        [vi("a", [2]), vi("b", [2])], [vi("m", [2]), vi("y", [2])],
        functions=[maxed, double])
    session = OffloadSession(model, device=device)
    places = session.placements
    assert [(op, where) for _, op, where in places] == [("Max", "device"),
                                                       ("Double", "onnxruntime")]
    m, y = session.run(None, {"a": A, "b": B})
    assert bits(m) == CONTRACT
    assert bits(y) == [0x00000000, 0x7FC00000]
    # Called from an If branch: inlined there, run by onnx.reference with Max on the device.
    branch = helper.make_graph([helper.make_node("Clamp", ["a", "b"], ["out"], domain="local")],
                               "then", [], [vi("out", [2])])
    model = make_model([helper.make_node("If", ["flag"], ["y"], name="if", then_branch=branch,
                                         else_branch=branch)],
                       [vi("a", [2]), vi("b", [2]), vi("flag", [], TensorProto.BOOL)],
                       [vi("y", [2])], functions=[maxed])
    session = OffloadSession(model, device=device)
    assert session.placements == [("if", "If", "onnx.reference")]
    (y,) = session.run(None, {"a": A, "b": B, "flag": np.array(True)})
    assert bits(y) == CONTRACT


def test_a_max_family_node_of_a_dtype_the_device_lacks_uses_the_golden_model_in_a_subgraph():
    then_branch = helper.make_graph([helper.make_node("Max", ["a", "b"], ["out"])], "then", [],
                                    [vi("out", [2], TensorProto.DOUBLE)])
    model = make_model(
        [helper.make_node("If", ["flag"], ["y"], then_branch=then_branch,
                          else_branch=then_branch)],
        [vi("a", [2], TensorProto.DOUBLE), vi("b", [2], TensorProto.DOUBLE),
         vi("flag", [], TensorProto.BOOL)], [vi("y", [2], TensorProto.DOUBLE)])
    a = np.array([0x0000000000000000, 0xFFF8000000000001], np.uint64).view(np.float64)
    b = np.array([0x8000000000000000, 0x3FF0000000000000], np.uint64).view(np.float64)
    with Device(FakeBoard(dtypes=[DType.FLOAT])) as dev:
        (y,) = OffloadSession(model, device=dev).run(None, {"a": a, "b": b,
                                                           "flag": np.array(True)})
        assert [code for code, _ in dev.link.transport.log] == [Command.IDENTIFY]
    assert y.view(np.uint64).tolist() == [0, 0x7FF8000000000000]


def cnn_model():
    """Conv, Relu, a windowed MaxPool, a Transpose to NHWC; ReduceMax over (1, 2) of the NHWC
    tensor, a Transpose back to NCHW feeding GlobalMaxPool; Flatten, Concat, Gemm."""
    rng = np.random.default_rng(0)
    weights = {
        "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "bias": rng.standard_normal(4).astype(np.float32),
        "wg": rng.standard_normal((3, 8)).astype(np.float32),
        "bg": np.zeros(3, np.float32),
        "spatial": np.array([1, 2], np.int64),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "bias"], ["conv"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu"),
        helper.make_node("MaxPool", ["relu"], ["pooled"], name="maxpool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Transpose", ["pooled"], ["nhwc"], name="to_nhwc", perm=[0, 2, 3, 1]),
        helper.make_node("ReduceMax", ["nhwc", "spatial"], ["channel_max"], name="reduce",
                         keepdims=0),
        helper.make_node("Transpose", ["nhwc"], ["nchw"], name="to_nchw", perm=[0, 3, 1, 2]),
        helper.make_node("GlobalMaxPool", ["nchw"], ["global"], name="global_pool"),
        helper.make_node("Flatten", ["global"], ["flat"], name="flatten"),
        helper.make_node("Concat", ["channel_max", "flat"], ["features"], name="concat",
                         axis=1),
        helper.make_node("Gemm", ["features", "wg", "bg"], ["logits"], name="gemm", transB=1),
    ]
    return make_model(
        nodes, [vi("x", ["batch", 3, 8, 8])],
        [vi("logits", ["batch", 3]), vi("channel_max", ["batch", 4]),
         vi("global", ["batch", 4, 1, 1])],
        initializers=[numpy_helper.from_array(v, n) for n, v in weights.items()])


def test_a_cnn_shaped_model(device):
    model = cnn_model()
    session = OffloadSession(model, device=device)
    assert session.placements == [
        ("conv", "Conv", "onnxruntime"), ("relu", "Relu", "onnxruntime"),
        ("maxpool", "MaxPool", "device"), ("to_nhwc", "Transpose", "onnxruntime"),
        ("reduce", "ReduceMax", "device"),
        ("to_nchw", "Transpose", "device"), ("global_pool", "GlobalMaxPool", "device"),
        ("flatten", "Flatten", "onnxruntime"), ("concat", "Concat", "onnxruntime"),
        ("gemm", "Gemm", "onnxruntime")]
    assert [s.name for s in session.last_steps] == []
    runtime = onnxruntime.InferenceSession(model.SerializeToString())
    golden = OffloadSession(model, device=reference)
    board = device.link.transport
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    since = len(board.log)
    got = session.run(None, {"x": x})
    # The 2x2 stride-2 MaxPool is one MAX_POOL on the pooling unit (each element once); both
    # reductions on the channels-last unit; no transpose crossed the link.
    assert [code for code, _ in board.log[since:]] == [Command.MAX_POOL] \
        + [Command.POOL_CHANNELS_LAST] * 2
    assert [s.name for s in session.last_steps] == ["partition 0", "maxpool", "partition 1",
                                                    "reduce", "global_pool", "partition 2"]
    for value, want in zip(got, runtime.run(None, {"x": x})):
        np.testing.assert_allclose(value, want, rtol=1e-5)
    # With a NaN (payload) and signed zeros in the data, the max-family nodes keep the
    # contract: the same bits as the golden model's session, where onnxruntime differs.
    x[0, :, 2:4, 2:4] = f32(0xFFC00001)
    x[1] = -0.0
    got = session.run(None, {"x": x})
    for value, want in zip(got, golden.run(None, {"x": x})):
        assert_same_bits(value, want)
    assert bits(got[1][0]) == [0x7FC00000] * 4


def onnxruntime_script(session_class, path):
    """Code written for onnxruntime.InferenceSession, unchanged but for the class."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    sess = session_class(path, sess_options=options, providers=["CPUExecutionProvider"])
    first = sess.get_inputs()[0]
    assert first.type == "tensor(float)"
    shape = [d if isinstance(d, int) else 2 for d in first.shape]
    output = sess.get_outputs()[0].name
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    (logits,) = sess.run([output], {first.name: x}, None)
    run_options = onnxruntime.RunOptions()
    everything = sess.run(None, {first.name: x}, run_options)
    meta = sess.get_modelmeta()
    described = ([(i.name, i.type, i.shape) for i in sess.get_inputs()],
                 [(o.name, o.type, o.shape) for o in sess.get_outputs()],
                 meta.producer_name, meta.graph_name, meta.custom_metadata_map,
                 sess.get_providers(), sess.get_session_options().intra_op_num_threads)
    return logits, everything, described


def test_an_onnxruntime_script_runs_unchanged(device, tmp_path):
    model = cnn_model()
    model.producer_name = "maxaccel tests"
    helper.set_model_props(model, {"purpose": "drop-in"})
    path = str(tmp_path / "cnn.onnx")
    onnx.save(model, path)
    logits, everything, described = onnxruntime_script(
        functools.partial(OffloadSession, device=device), path)
    want_logits, want_everything, want_described = onnxruntime_script(
        onnxruntime.InferenceSession, path)
    assert described == want_described
    np.testing.assert_allclose(logits, want_logits, rtol=1e-5)
    for value, want in zip(everything, want_everything):
        np.testing.assert_allclose(value, want, rtol=1e-5)
    # bytes and a ModelProto work as well as a path
    for source in (model.SerializeToString(), model):
        assert OffloadSession(source, None, None, device=device).get_inputs()[0].name == "x"


def test_no_stricter_than_onnxruntime(device):
    """Outputs declared without a shape (onnx.checker refuses them), nodes out of topological
    order and IR version 14: onnxruntime runs such a model, so does the session."""
    nodes = [helper.make_node("Relu", ["m"], ["y"], name="relu"),
             helper.make_node("Max", ["a", "b"], ["m"], name="max")]
    model = make_model(nodes, [vi("a", [2]), vi("b", [2])],
                       [helper.make_tensor_value_info("y", F32, None)])
    with pytest.raises(onnx.checker.ValidationError, match="shape"):
        onnx.checker.check_model(model)
    onnxruntime.InferenceSession(model.SerializeToString())  # accepted
    model.ir_version = 14
    session = OffloadSession(model, device=device)
    assert session.placements == [("max", "Max", "device"), ("relu", "Relu", "onnxruntime")]
    (y,) = session.run(None, {"a": A, "b": B})
    assert bits(y) == CONTRACT
    # Still refused: what onnxruntime refuses too.
    model.graph.node[0].input[0] = "nowhere"
    with pytest.raises(ValueError, match="not a valid ONNX model: .*nowhere"):
        OffloadSession(model, device=device)


def test_a_partition_onnxruntime_cannot_load_runs_on_onnx_reference(device):
    """onnxruntime has no double Erf: that partition runs on onnx.reference, and says so."""
    model = make_model(
        [helper.make_node("Erf", ["x"], ["e"], name="erf"),
         helper.make_node("ReduceMax", ["e"], ["y"], name="reduce", keepdims=0)],
        [vi("x", [3], TensorProto.DOUBLE)], [vi("y", [], TensorProto.DOUBLE)], opset=13)
    session = OffloadSession(model, device=device)
    assert session.placements == [("erf", "Erf", "onnx.reference"),
                                  ("reduce", "ReduceMax", "device")]
    assert "Erf" in session.fallbacks["partition 0"]
    (y,) = session.run(None, {"x": np.array([-1.0, 0.5, 2.0])})
    assert y == pytest.approx(0.9953222650189527)


def test_partition_inputs_shape_inference_cannot_type_are_typed_from_the_first_run(device):
    """onnxruntime's own operators (its ``com.microsoft`` domain) are unknown to ONNX shape
    inference: a partition reading what follows one (here the Max of a Gelu) has inputs of no
    inferred type, so no one session; the partitions run, typed from the first run's
    tensors. Gelu keeps +0 and NaN, so the bits are the contract's Max's, negated."""
    model = make_model([helper.make_node("Gelu", ["a"], ["g"], name="gelu",
                                         domain="com.microsoft"),
                        helper.make_node("Max", ["g", "b"], ["m"], name="max"),
                        helper.make_node("Neg", ["m"], ["y"], name="neg")],
                       [vi("a", [2]), vi("b", [2])], [vi("y", [2])])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    assert not onnx.shape_inference.infer_shapes(model).graph.value_info
    session = OffloadSession(model, device=device)
    assert session.one_session_refusal == \
        "shape inference could not type every partition's inputs"
    placements = [("gelu", "Gelu", "onnxruntime"), ("max", "Max", "device"),
                  ("neg", "Neg", "onnxruntime")]
    assert session.placements == placements
    for _ in range(2):
        (y,) = session.run(None, {"a": A, "b": B})
        assert bits(y) == [0x80000000, 0xFFC00000]
        assert session.last_run == placements


def test_reduce_min_with_a_folded_transpose_and_in_an_if_body(device):
    """ReduceMin takes the max family's routes: a Transpose feeding it over known axes is folded
    into its device step (the untransposed tensor reduced over the mapped axes), and one in an
    If body runs on the device from onnx.reference. -0 below +0 and NaN absorbing, as the
    golden model gives them."""
    then_branch = helper.make_graph(
        [helper.make_node("ReduceMin", ["x", "axes"], ["branch_out"], keepdims=0)], "then", [],
        [vi("branch_out", [2, 3])])
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["per_channel"], ["branch_out"])], "else", [],
        [vi("branch_out", [2, 3])])
    nodes = [
        helper.make_node("Transpose", ["x"], ["nchw"], name="to_nchw", perm=[0, 3, 1, 2]),
        helper.make_node("ReduceMin", ["nchw", "spatial"], ["per_channel"], name="reduce_min",
                         keepdims=0),
        helper.make_node("If", ["flip"], ["chosen"], name="if", then_branch=then_branch,
                         else_branch=else_branch),
    ]
    model = make_model(
        nodes, [vi("x", [2, 4, 5, 3]), vi("flip", [], TensorProto.BOOL)],
        [vi("per_channel", [2, 3]), vi("chosen", [2, 3])],
        initializers=[numpy_helper.from_array(np.array([2, 3], np.int64), "spatial"),
                      numpy_helper.from_array(np.array([1, 2], np.int64), "axes")])
    session = OffloadSession(model, device=device)
    assert session.placements == [("to_nchw", "Transpose", "device"),
                                  ("reduce_min", "ReduceMin", "device"),
                                  ("if", "If", "onnx.reference")]
    golden = OffloadSession(model, device=reference)
    x = np.random.default_rng(3).standard_normal((2, 4, 5, 3)).astype(np.float32)
    x[0, :, :, 0] = np.abs(x[0, :, :, 0])
    x[0, 1, 2, 0] = -0.0      # the least of a channel of +0 and positives
    x[0, 0, 0, 0] = 0.0
    x[1, 3, 4, 2] = f32([0xFFC00001])[0]   # a NaN with a payload: the canonical NaN out
    for flip in (True, False):
        feeds = {"x": x, "flip": np.array(flip)}
        got = session.run(None, feeds)
        for value, want in zip(got, golden.run(None, feeds)):
            assert_same_bits(value, want)
    assert bits(got[0])[0] == 0x80000000 and bits(got[0])[5] == 0x7FC00000
