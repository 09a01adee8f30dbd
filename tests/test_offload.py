"""OffloadSession: ONNX models with their max-family nodes on the (fake) board.

The ONNX backend node tests for Max, ReduceMax and GlobalMaxPool come from the onnx package: the
installed wheel ships their generators (``onnx.backend.test.case.node``) rather than the
``data/node/*/model.onnx`` files, so the cases (model, inputs, expected outputs) are generated in
memory exactly as onnx writes those files. All 27 shipped cases agree with the semantics
contract (no NaN or signed-zero tie in their data), so each is checked against both its shipped
output and the golden model. The shipped cases cover the latest version of each operator (Max-13,
ReduceMax-18 and -20, GlobalMaxPool-22); every older version is checked below on models built
here, with edge values, against the golden model.
"""

import warnings

import numpy as np
import onnx
import pytest
from device_checks import (CASES, MAXPOOL_CASES, PYTORCH_CASES, check_maxpool_case,
                           check_node_case, check_pytorch_case)
from onnx_models import mixed_model, single_node_model
from fake_board import FakeBoard
from onnx import TensorProto, helper

from maxaccel.host.device import Device
from maxaccel.contract.dtypes import DType, format_of
from maxaccel.host.offload import OffloadSession
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import random_values


@pytest.fixture(scope="module")
def device():
    with Device(FakeBoard()) as dev:
        yield dev


def test_every_shipped_case_is_found():
    assert len([n for n in CASES if n.startswith("test_max")]) == 14
    assert len([n for n in CASES if n.startswith("test_reduce_max")]) == 11
    assert len([n for n in CASES if n.startswith("test_globalmaxpool")]) == 2
    assert len([n for n in CASES if n.startswith("test_reduce_min")]) == 10
    assert len([n for n in CASES if n.startswith("test_min")]) == 14
    assert len([n for n in CASES if n.startswith("test_argmax")]) == 16
    assert len([n for n in CASES if n.startswith("test_argmin")]) == 16
    assert {"test_reduce_min_bool_inputs", "test_reduce_min_empty_set"} <= set(CASES)
    assert {"test_reduce_max_bool_inputs", "test_reduce_max_empty_set",
            "test_reduce_max_empty_set_bool"} <= set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_onnx_backend_node_case(device, name):
    check_node_case(device, name)


def test_every_pytorch_case_is_found():
    assert sorted(PYTORCH_CASES) == ["test_operator_max", "test_operator_min"]


@pytest.mark.parametrize("name", sorted(PYTORCH_CASES))
def test_pytorch_converted_case(device, name):
    check_pytorch_case(device, name)


def check_on_device(device, model, feeds):
    session = OffloadSession(model, device=device)
    got = session.run(None, feeds)
    assert [where for _, _, where in session.last_run] == ["device"]
    for value, want in zip(got, OffloadSession(model, device=reference).run(None, feeds)):
        assert_same_bits(value, want)


def edge_tensor(dtype, shape, seed):
    return random_values(np.random.default_rng(seed), dtype, shape, edge_fraction=0.5)


MAX_VERSIONS = [  # opset, element type, shapes (1 and 6: same shape only)
    (1, TensorProto.FLOAT, [(3, 4), (3, 4)]),
    (6, TensorProto.DOUBLE, [(3, 4), (3, 4), (3, 4)]),
    (8, TensorProto.FLOAT16, [(2, 3, 4), (3, 1), ()]),
    (12, TensorProto.INT32, [(5, 1), (1, 6)]),
    (12, TensorProto.UINT8, [(7,)]),
    (13, TensorProto.BFLOAT16, [(2, 1, 3), (4, 1), (1, 3), (2, 4, 3)]),
    (13, TensorProto.INT64, [(0, 3), (1, 3)]),
]


@pytest.mark.parametrize("op_type", ["Max", "Min"])
@pytest.mark.parametrize("opset, element, shapes", MAX_VERSIONS)
def test_max_and_min_every_opset_version(device, op_type, opset, element, shapes):
    """Max and Min (the same inputs at every version) on edge values, placed on the device,
    bit for bit against the golden model."""
    names = [f"x{i}" for i in range(len(shapes))]
    dtype = helper.tensor_dtype_to_np_dtype(element)
    out_shape = list(np.broadcast_shapes(*shapes))
    model = single_node_model(op_type, opset, [(n, element, list(s)) for n, s in
                                             zip(names, shapes)], [("y", element, out_shape)])
    check_on_device(device, model, {n: edge_tensor(dtype, s, i)
                                    for i, (n, s) in enumerate(zip(names, shapes))})


REDUCE_VERSIONS = [  # opset, element type, shape, axes, keepdims, noop
    (1, TensorProto.FLOAT, (3, 4, 5), [1], 1, None),
    (1, TensorProto.DOUBLE, (3, 4, 5), None, 0, None),
    (11, TensorProto.FLOAT16, (3, 4, 5), [-1, 0], 1, None),
    (12, TensorProto.INT8, (6, 7), [0], 0, None),
    (12, TensorProto.UINT8, (6, 0), [1], 1, None),
    (13, TensorProto.BFLOAT16, (2, 3, 4), [-2], 0, None),
    (18, TensorProto.FLOAT, (3, 4, 5), [0, 2], 1, 0),
    (18, TensorProto.FLOAT, (3, 4, 5), [], 0, 0),       # empty axes: reduce all
    (18, TensorProto.FLOAT, (3, 4, 5), [], 1, 1),       # empty axes + noop: identity
    (18, TensorProto.INT64, (3, 4), None, 0, 1),        # no axes input + noop: identity
    (20, TensorProto.BOOL, (4, 5), [1], 1, 0),
    (20, TensorProto.BOOL, (2, 0, 3), [1], 0, 0),
]


@pytest.mark.parametrize("op_type", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("opset, element, shape, axes, keepdims, noop", REDUCE_VERSIONS)
def test_reductions_every_opset_version(device, op_type, opset, element, shape, axes, keepdims,
                                        noop):
    """ReduceMax and ReduceMin (the same attributes and inputs at every version) on edge
    values, placed on the device, bit for bit against the golden model."""
    dtype = helper.tensor_dtype_to_np_dtype(element)
    attributes = {"keepdims": keepdims}
    initializers = []
    if opset >= 18:
        attributes["noop_with_empty_axes"] = noop
        if axes is not None:
            initializers = [("axes", np.array(axes, np.int64))]
    elif axes is not None:
        attributes["axes"] = axes
    data = edge_tensor(dtype, shape, opset)
    golden = reference.reduce_min if op_type == "ReduceMin" else reference.reduce_max
    reduced = golden(data, axes, keepdims, noop or False)
    model = single_node_model(op_type, opset, [("data", element, list(shape))],
                              [("reduced", element, list(reduced.shape))], initializers,
                              **attributes)
    check_on_device(device, model, {"data": data})


@pytest.mark.parametrize("op_type, want", [("ReduceMin", [1.0, 2.0]), ("ReduceMax", [3.0, 5.0])])
@pytest.mark.parametrize("opset", [13, 18, 20])
def test_axes_named_twice_are_reduced_once_as_onnxruntime_does(device, op_type, want, opset):
    """``axes=[1, -1]`` on a rank-2 input (an attribute before opset 18, the axes input from
    18): the session reduces axis 1 once, onnxruntime's result, on the device."""
    axes, attributes = [1, -1], {"keepdims": 0}
    initializers = [("axes", np.array(axes, np.int64))] if opset >= 18 else []
    if opset < 18:
        attributes["axes"] = axes
    model = single_node_model(op_type, opset, [("data", TensorProto.FLOAT, [2, 2])],
                              [("reduced", TensorProto.FLOAT, [2])], initializers, **attributes)
    data = np.array([[3, 1], [2, 5]], np.float32)
    session = OffloadSession(model, device=device)
    (got,) = session.run(None, {"data": data})
    assert [where for _, _, where in session.last_run] == ["device"]
    assert_same_bits(got, np.array(want, np.float32))
    import onnxruntime
    (theirs,) = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"data": data})
    assert_same_bits(got, theirs)


@pytest.mark.parametrize("one_session", [True, False])
@pytest.mark.parametrize("shape", [(0, 3, 8, 8), (1, 0, 8, 8), (2, 0, 4)])
def test_a_pool_of_no_images_gives_the_empty_result(device, shape, one_session):
    """MaxPool (and its Indices) of a tensor with N = 0 or C = 0 through the session: the
    golden model's empty result."""
    kernel = [2] * (len(shape) - 2)
    y, indices = reference.max_pool(np.zeros(shape, np.float32), kernel, return_indices=True)
    dims = [None] * len(shape)
    model = single_node_model("MaxPool", 12, [("x", TensorProto.FLOAT, dims)],
                              [("y", TensorProto.FLOAT, dims), ("i", TensorProto.INT64, dims)],
                              kernel_shape=kernel)
    session = OffloadSession(model, device=device, one_session=one_session)
    got = session.run(None, {"x": np.zeros(shape, np.float32)})
    assert [where for _, _, where in session.last_run] == ["device"]
    assert_same_bits(got[0], y)
    assert got[1].shape == indices.shape and got[1].dtype == np.int64


ARG_VERSIONS = [  # opset, element type, shape, attributes (1: axis >= 0; 12: select_last)
    (1, TensorProto.FLOAT, (3, 4), {}),
    (1, TensorProto.DOUBLE, (2, 3, 5), {"axis": 2, "keepdims": 0}),
    (11, TensorProto.FLOAT16, (4, 6), {"axis": -1}),
    (11, TensorProto.INT32, (5, 3), {"axis": -2, "keepdims": 0}),
    (12, TensorProto.UINT8, (3, 7), {"axis": 1, "select_last_index": 1}),
    (12, TensorProto.INT64, (6, 2), {"select_last_index": 1, "keepdims": 0}),
    (13, TensorProto.BFLOAT16, (2, 5, 3), {"axis": 1, "select_last_index": 1}),
    (13, TensorProto.UINT64, (9,), {"keepdims": 0}),
    (13, TensorProto.FLOAT, (0, 3), {"axis": 1}),                  # empty, with an empty result
]


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset, element, shape, attributes", ARG_VERSIONS)
def test_positions_every_opset_version(device, op_type, opset, element, shape, attributes):
    """ArgMax and ArgMin (axis, keepdims, select_last_index from 12) on edge values with ties
    (a few distinct values), placed on the device, bit for bit against the golden model."""
    dtype = helper.tensor_dtype_to_np_dtype(element)
    rng = np.random.default_rng(opset)
    data = rng.choice(edge_tensor(dtype, (4,), opset), size=shape)
    golden = reference.arg_min if op_type == "ArgMin" else reference.arg_max
    found = golden(data, attributes.get("axis", 0), attributes.get("keepdims", 1),
                   attributes.get("select_last_index", 0))
    model = single_node_model(op_type, opset, [("data", element, list(shape))],
                              [("found", TensorProto.INT64, list(found.shape))], **attributes)
    check_on_device(device, model, {"data": data})


@pytest.mark.parametrize("opset, element, shape", [
    (1, TensorProto.FLOAT, (2, 3, 4, 4)),
    (1, TensorProto.DOUBLE, (1, 2, 5)),
    (1, TensorProto.FLOAT16, (1, 2, 2, 2, 2)),
    (22, TensorProto.BFLOAT16, (2, 3, 3, 3)),
    (22, TensorProto.FLOAT, (1, 2, 0, 3)),
])
def test_global_max_pool_every_opset_version(device, opset, element, shape):
    dtype = helper.tensor_dtype_to_np_dtype(element)
    model = single_node_model("GlobalMaxPool", opset, [("x", element, list(shape))],
                              [("y", element, list(shape[:2]) + [1] * (len(shape) - 2))])
    check_on_device(device, model, {"x": edge_tensor(dtype, shape, opset)})


@pytest.mark.parametrize("flip", [False, True])
def test_model_mixing_device_and_cpu_nodes(device, flip):
    model = mixed_model()
    rng = np.random.default_rng(int(flip))
    feeds = {"a": random_values(rng, np.float32, (2, 3, 4)),
             "b": random_values(rng, np.float32, (1, 3, 1)), "flip": np.array(flip)}
    session = OffloadSession(model, device=device)
    got = session.run(None, feeds)
    # Two CPU partitions: the If and the Reshape need only the first two device nodes.
    expected_places = [("max", "Max", "device"), ("pool", "GlobalMaxPool", "device"),
                       ("if", "If", "onnxruntime"), ("reshape", "Reshape", "onnxruntime"),
                       ("reduce", "ReduceMax", "device"), ("relu", "Relu", "onnxruntime"),
                       ("add", "Add", "onnxruntime")]
    assert session.placements == session.last_run == expected_places
    assert [(s.name, s.where, s.nodes) for s in session.last_steps] == [
        ("max", "device", ("max",)), ("pool", "device", ("pool",)),
        ("partition 0", "onnxruntime", ("if", "reshape")),
        ("reduce", "device", ("reduce",)), ("partition 1", "onnxruntime", ("relu", "add"))]
    assert all(s.seconds > 0 for s in session.last_steps)
    golden = OffloadSession(model, device=reference).run(None, feeds)
    for value, want in zip(got, golden):
        assert_same_bits(value, want)
    (m,) = session.run(["m"], feeds)
    assert_same_bits(m, reference.max(feeds["a"], feeds["b"]))


def test_unsupported_dtype_falls_back_to_the_golden_model_on_the_cpu():
    model = single_node_model("Max", 13, [("x", TensorProto.DOUBLE, [3]),
                                          ("y", TensorProto.DOUBLE, [3])],
                              [("z", TensorProto.DOUBLE, [3])])
    feeds = {"x": np.array([np.nan, -0.0, 1]), "y": np.array([1, 0.0, -np.inf])}
    with Device(FakeBoard(dtypes=[DType.FLOAT])) as dev:
        session = OffloadSession(model, device=dev)
        (z,) = session.run(None, feeds)
        assert session.last_run == [("Max_0", "Max", "golden")]
    assert_same_bits(z, reference.max(feeds["x"], feeds["y"]))


def test_invalid_model_is_refused_before_anything_is_sent(device, tmp_path):
    board = device.link.transport
    received = board.bytes_received
    broken = single_node_model("Max", 13, [("x", TensorProto.FLOAT, [3])],
                               [("y", TensorProto.FLOAT, [3])])
    broken.graph.node[0].input[0] = "nowhere"
    with pytest.raises(ValueError, match=r"not a valid ONNX model: .*nowhere"):
        OffloadSession(broken, device=device)
    with pytest.raises(ValueError, match=r"not a valid ONNX model"):
        OffloadSession(b"definitely not protobuf \xff\xff", device=device)
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"\x00\x01garbage")
    with pytest.raises(ValueError, match=r"not a valid ONNX model: cannot parse"):
        OffloadSession(path, device=device)
    with pytest.raises(FileNotFoundError, match=r"no ONNX model at"):
        OffloadSession(tmp_path / "missing.onnx", device=device)
    with pytest.raises(TypeError, match=r"takes an onnx.ModelProto, a path or bytes"):
        OffloadSession(42, device=device)
    assert board.bytes_received == received


def test_feeds_are_checked_against_the_graph(device):
    session = OffloadSession(mixed_model(), device=device)
    board = device.link.transport
    received = board.bytes_received
    good = {"a": np.zeros((2, 3, 4), np.float32), "b": np.zeros((1, 3, 1), np.float32),
            "flip": np.array(True)}
    for feeds, error, message in [
        ({**good, "c": good["a"]}, ValueError, r"unknown input\(s\) 'c'; the model's inputs: "
                                               r"a: float32 \[batch, 3, 4\]"),
        ({"a": good["a"]}, ValueError, r"missing input\(s\) 'b', 'flip'"),
        ({**good, "a": good["a"].astype(np.float64)}, TypeError,
         r"input 'a' must be float32, got float64"),
        ({**good, "b": np.zeros((3, 1), np.float32)}, ValueError,
         r"input 'b' must have rank 3"),
        ({**good, "b": np.zeros((1, 2, 1), np.float32)}, ValueError,
         r"input 'b' must have size 3 along axis 1"),
        ([good["a"]], TypeError, r"input_feed must be a dict"),
    ]:
        with pytest.raises(error, match=message):
            session.run(None, feeds)
    with pytest.raises(ValueError, match=r"unknown output\(s\) 'nope'"):
        session.run(["nope"], good)
    assert board.bytes_received == received


def test_symbolic_dimensions_are_not_checked_across_inputs_as_in_onnxruntime():
    """onnxruntime does not require two inputs sharing a dim_param to agree (exporters reuse
    names for unrelated sizes); neither does the session: no stricter check."""
    import onnxruntime
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["rx"], keepdims=0),
         helper.make_node("Relu", ["y"], ["ry"])], "independent",
        [helper.make_tensor_value_info("x", f32, ["n", 2]),
         helper.make_tensor_value_info("y", f32, ["n", 2])],
        [helper.make_tensor_value_info("rx", f32, []),
         helper.make_tensor_value_info("ry", f32, ["n", 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    feeds = {"x": np.zeros((3, 2), np.float32), "y": np.ones((4, 2), np.float32)}
    expected = onnxruntime.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = OffloadSession(model, device=reference).run(None, feeds)
    for value, want in zip(got, expected):
        assert_same_bits(value, want)


def test_the_example_model_runs_on_the_device(device):
    import pathlib
    path = pathlib.Path(__file__).parents[1] / "examples" / "max_family.onnx"
    model = onnx.load(path)
    assert model.ir_version == 10
    session = OffloadSession(path, device=device)
    rng = np.random.default_rng(0)
    feeds = {s.name: random_values(rng, format_of(s.dtype), s.shape)
             for s in session.get_inputs()}
    got = session.run(None, feeds)
    assert {op for _, op, where in session.last_run if where == "device"} == \
        {"Max", "ReduceMax", "GlobalMaxPool", "MaxPool"}
    assert {where for _, _, where in session.last_run} == {"device", "onnxruntime"}
    for value, want in zip(got, OffloadSession(path, device=reference).run(None, feeds)):
        assert_same_bits(value, want)


@pytest.fixture(scope="module", params=["sim", "verilator"])
def virtual_board(request):
    if request.param == "verilator":
        yield request.getfixturevalue("compiled_device")
        return
    from maxaccel.host.device import open_device
    with open_device(request.param) as dev:
        yield dev


def test_onnx_backend_node_cases_on_the_virtual_board(virtual_board):
    """The same shipped cases through the real gateware, simulated behind the byte protocol
    (Amaranth's simulator and Verilator)."""
    for name, case in sorted(CASES.items()):
        session = OffloadSession(case.model, device=virtual_board)
        input_names = [i.name for i in case.model.graph.input]
        for inputs, expected in case.data_sets:
            got = session.run(None, dict(zip(input_names, inputs)))
            assert session.last_run[0][2] == "device"
            for value, shipped in zip(got, expected):
                assert_same_bits(value, shipped, name)
    for name in sorted(PYTORCH_CASES):
        check_pytorch_case(virtual_board, name)


# ---- windowed MaxPool: the 28 backend cases (19 generated, 9 PyTorch-converted) ---------------

#: The cases small enough for Amaranth's simulator (the rest run on the compiled board).
SMALL_MAXPOOL_CASES = sorted(name for name, (_, data_sets) in MAXPOOL_CASES.items()
                             if all(inputs[0].size <= 64 for inputs, _ in data_sets))


@pytest.mark.parametrize("name", sorted(MAXPOOL_CASES))
def test_onnx_backend_maxpool_case(device, name):
    check_maxpool_case(device, name)


def test_onnx_backend_maxpool_cases_on_the_virtual_board(virtual_board):
    names = sorted(MAXPOOL_CASES) if virtual_board.url.startswith("verilator") \
        else SMALL_MAXPOOL_CASES
    assert len(names) >= 5
    for name in names:
        check_maxpool_case(virtual_board, name)


def test_a_device_url_is_opened_by_the_session_and_closed_with_it():
    """``device="sim"`` was accepted, then ``run`` failed with an AttributeError."""
    model = single_node_model("ReduceMax", 13, [("x", TensorProto.FLOAT, [2, 3])],
                              [("y", TensorProto.FLOAT, [2, 1])], axes=[1])
    x = np.float32([[1, np.nan, 2], [-0.0, 0.0, -1]])
    with OffloadSession(model, device="sim") as session:
        device = session.device
        assert device.url == "sim"
        (y,) = session.run(None, {"x": x})
        assert session.last_run == [("ReduceMax_0", "ReduceMax", "device")]
    assert_same_bits(y, reference.reduce_max(x, axes=[1]))
    with pytest.raises(ValueError, match="closed"):
        device.reduce_max(x)
    with pytest.raises(ValueError, match="unknown device URL 'nowhere://'"):
        OffloadSession(model, device="nowhere://")
    with pytest.raises(TypeError, match="device must be a Device .*not int"):
        OffloadSession(model, device=3)


@pytest.mark.parametrize("dtype", ["float32", "int16", "float64"])
def test_big_endian_feeds_are_accepted_as_onnxruntime_accepts_them(device, dtype):
    """onnxruntime takes a non-native array (and reads its bytes as native ones); the
    session takes it with its values."""
    element = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = single_node_model("Max", 13, [("a", element, [4]), ("b", element, [4])],
                              [("y", element, [4])])
    a = np.array([1, -2, 3, 100], dtype=np.dtype(dtype).newbyteorder(">"))
    b = np.array([0, 5, -3, 7], dtype=dtype)
    (y,) = OffloadSession(model, device=device).run(None, {"a": a, "b": b})
    assert y.dtype == np.dtype(dtype) and y.tolist() == [1, 5, 3, 100]


def test_a_model_onnxruntime_refuses_at_load_is_refused_at_construction(device):
    """A bool Max passes onnx.checker but breaks Max's type constraint: onnxruntime refuses
    it at load, so the session does, before anything runs."""
    model = single_node_model("Max", 13, [("a", TensorProto.BOOL, [2]),
                                          ("b", TensorProto.BOOL, [2])],
                              [("y", TensorProto.BOOL, [2])])
    received = device.link.transport.bytes_received
    with pytest.raises(ValueError, match=r"not a valid ONNX model: .*tensor\(bool\).*"
                                         r"onnxruntime: .*INVALID_GRAPH"):
        OffloadSession(model, device=device)
    assert device.link.transport.bytes_received == received


def test_onnxruntime_warns_about_providers_once_per_session(device):
    """A provider onnxruntime lacks: its warning once for the model, not once per CPU
    partition (the mixed model has two)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = OffloadSession(mixed_model(), providers=["NoSuchExecutionProvider",
                                                           "CPUExecutionProvider"],
                                 device=device)
    session.run(None, {"a": np.zeros((2, 3, 4), np.float32), "b": np.zeros((1, 3, 1), np.float32),
                       "flip": np.array(False)})
    assert [s.name for s in session.last_steps
            if s.name.startswith("partition")] == ["partition 0", "partition 1"]
    texts = [str(w.message) for w in caught if "NoSuchExecutionProvider" in str(w.message)]
    assert len(texts) == 1, texts
