"""OffloadSession as one onnxruntime session whose device steps are custom operators
(``maxaccel.host.device_ops``): the partitioned session's bits, the device's own errors, the
steps in the plan's order, and the models it leaves to the partitions, saying why."""

import gc
import os
import pathlib
import subprocess
import sys
import weakref

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

from fake_board import FakeBoard
from maxaccel.contract.dtypes import DType
from maxaccel.bench import models
from maxaccel.host import device_ops
from maxaccel import bench
from maxaccel.host.device import Device
from maxaccel.host.offload import OffloadSession
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import random_values
from onnx_models import bfloat16_model, mixed_model, single_node_model

FEEDS = {"a": np.array([[[np.nan, -0.0, 1, 2]] * 3] * 2, np.float32),
         "b": np.array([0.0, -0.0, np.nan], np.float32).reshape(1, 3, 1),
         "flip": np.array(True)}


def test_the_mixed_model_runs_as_one_session_with_the_partitions_bits():
    one = OffloadSession(mixed_model(), device=reference)
    partitions = OffloadSession(mixed_model(), device=reference, one_session=False)
    assert one.one_session_refusal is None
    assert partitions.one_session_refusal == "one_session=False"
    rng = np.random.default_rng(7)
    for flip in (False, True):
        feeds = dict(FEEDS, a=random_values(rng, np.float32, (2, 3, 4)), flip=np.array(flip))
        feeds["a"][0, 0, :2] = np.array([0xFFC00001, 0x80000000], np.uint32).view(np.float32)
        for got, want in zip(one.run(None, feeds), partitions.run(None, feeds)):
            assert_same_bits(got, want)
        assert one.last_run == partitions.last_run == one.placements
        assert [(s.name, s.where, s.nodes) for s in one.last_steps] == \
            [(s.name, s.where, s.nodes) for s in partitions.last_steps]
        assert all(s.seconds > 0 for s in one.last_steps)


@pytest.mark.parametrize("name", sorted(models.BUILT_IN))
def test_the_built_in_models_give_the_partitions_bits(name):
    _, model, feeds = bench.load_model(name)
    one = OffloadSession(model, device=reference)
    assert one.one_session_refusal is None
    partitions = OffloadSession(model, device=reference, one_session=False)
    if name == "resnet18":   # onnxruntime fuses and lays out a 49-node graph otherwise
        for got, want in zip(one.run(None, feeds), partitions.run(None, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    else:
        for got, want in zip(one.run(None, feeds), partitions.run(None, feeds)):
            assert_same_bits(got, want)
    assert one.last_run == partitions.last_run


def test_a_device_error_is_raised_as_itself_and_the_session_runs_on():
    class Failing:
        """The golden model, but its second max fails as a device would."""

        def __init__(self):
            self.calls = 0

        def __getattr__(self, name):
            return getattr(reference, name)

        def max(self, *arrays):
            self.calls += 1
            if self.calls == 2:
                raise ConnectionError("the board stopped answering")
            return reference.max(*arrays)
    session = OffloadSession(mixed_model(), device=Failing())
    session.run(None, FEEDS)
    with pytest.raises(ConnectionError, match="stopped answering"):
        session.run(None, FEEDS)
    for got, want in zip(session.run(None, FEEDS),
                         OffloadSession(mixed_model(), device=reference).run(None, FEEDS)):
        assert_same_bits(got, want)


def test_one_output_asked_for():
    session = OffloadSession(mixed_model(), device=reference)
    (m,) = session.run(["m"], FEEDS)
    assert_same_bits(m, reference.max(FEEDS["a"], FEEDS["b"]))
    # onnxruntime runs the whole graph, as the partitions do.
    assert session.last_run == session.placements


def test_two_sessions_on_one_options_object_each_get_their_operators():
    options = onnxruntime.SessionOptions()
    first = OffloadSession(mixed_model(), options, device=reference)
    _, model, feeds = bench.load_model("kws")
    second = OffloadSession(model, options, device=reference)
    assert first.one_session_refusal is second.one_session_refusal is None
    want = OffloadSession(mixed_model(), device=reference, one_session=False).run(None, FEEDS)
    for got, expected in zip(first.run(None, FEEDS), want):
        assert_same_bits(got, expected)
    second.run(None, feeds)


def test_a_dropped_session_is_not_kept_alive_by_its_operators():
    """onnxruntime keeps the kernels' calls; they hold the session weakly."""
    session = OffloadSession(mixed_model(), device=reference)
    assert session.one_session_refusal is None
    session.run(None, FEEDS)    # every kernel's call resolved
    dropped = weakref.ref(session)
    del session
    gc.collect()
    assert dropped() is None


#: A fresh process's OffloadSession of the mixed model (``case``: onnxruntime changed first):
#: prints its one_session_refusal, after checking its bits are the partitions'.
FRESH_PROCESS = """
import sys
import onnxruntime
case = sys.argv[1]
if case == "old onnxruntime":
    onnxruntime.__version__ = "1.15.1"
elif case == "registration refused":
    def refuse(self, path):
        raise onnxruntime.capi.onnxruntime_pybind11_state.Fail("refused")
    onnxruntime.SessionOptions.register_custom_ops_library = refuse
import numpy as np
from maxaccel.host.offload import OffloadSession
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from onnx_models import mixed_model
feeds = {"a": np.array([[[np.nan, -0.0, 1, 2]] * 3] * 2, np.float32),
         "b": np.array([0.0, -0.0, np.nan], np.float32).reshape(1, 3, 1),
         "flip": np.array(True)}
session = OffloadSession(mixed_model(), device=reference)
want = OffloadSession(mixed_model(), device=reference, one_session=False).run(None, feeds)
for got, expected in zip(session.run(None, feeds), want):
    assert_same_bits(got, expected)
print(session.one_session_refusal)
"""


def refusal_in_a_fresh_process(case=""):
    """The one_session_refusal of :data:`FRESH_PROCESS` run in a new interpreter, in this
    process's environment (its variables as the test set them)."""
    tests = str(pathlib.Path(__file__).parent)
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [tests] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    result = subprocess.run([sys.executable, "-c", FRESH_PROCESS, case], capture_output=True,
                            text=True, env=environment)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_models_it_leaves_to_the_partitions_say_why(monkeypatch, tmp_path):
    session = OffloadSession(bfloat16_model(), device=reference)
    assert "no bfloat16 arrays" in session.one_session_refusal
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "cpu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    cpu_only = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                 ir_version=10)
    assert OffloadSession(cpu_only, device=reference).one_session_refusal.startswith(
        "no device step")
    # A new process with no compiler and nothing cached: the partitions, with the reason.
    monkeypatch.setenv("MAXACCEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    assert refusal_in_a_fresh_process() == \
        "the device operators are unavailable: no C compiler (cc, gcc or clang) on PATH"


@pytest.mark.parametrize("case", ["unwritable cache", "old onnxruntime", "registration refused"])
def test_operators_that_cannot_be_built_loaded_or_registered_leave_the_partitions(
        case, monkeypatch, tmp_path):
    """A fresh process whose cache directory cannot be made (a file where it should be), whose
    onnxruntime serves an OrtApi older than the kernels ask for, or whose registration
    onnxruntime refuses: the session runs as partitions, the reason in one_session_refusal,
    and nothing is raised from the constructor."""
    if case == "unwritable cache":
        blocked = tmp_path / "a file"
        blocked.write_text("")
        monkeypatch.setenv("MAXACCEL_CACHE_DIR", str(blocked))
        reason = "cannot build the operators' library"
    elif case == "old onnxruntime":
        reason = f"onnxruntime 1.15.1 serves OrtApi 15; the device operators need " \
                 f"{device_ops.API_VERSION}"
    else:
        reason = "onnxruntime does not register them: refused"
    refusal = refusal_in_a_fresh_process(case)
    assert refusal.startswith("the device operators are unavailable: ")
    assert reason in refusal


def test_the_running_onnxruntime_is_checked_against_the_kernels_api_version():
    device_ops.check_onnxruntime()
    device_ops.check_onnxruntime(f"1.{device_ops.API_VERSION}.0")
    for version in (f"1.{device_ops.API_VERSION - 1}.3", "unknown"):
        with pytest.raises(device_ops.OperatorsUnavailable, match=version):
            device_ops.check_onnxruntime(version)


def test_bfloat16_between_onnxruntime_and_the_device():
    """A bfloat16 Max between Casts: the partitions cannot hand bfloat16 over (onnxruntime's
    Python API has no numpy type for it), the one session's operators can."""
    import ml_dtypes
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
         helper.make_node("Cast", ["y"], ["yb"], to=TensorProto.BFLOAT16),
         helper.make_node("Max", ["xb", "yb"], ["m"]),
         helper.make_node("Cast", ["m"], ["z"], to=TensorProto.FLOAT)], "bf16_inside",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [6]) for n in "xy"],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [6])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    x = np.array([np.nan, -0.0, 1, 2, 0.0, -np.inf], np.float32)
    y = np.array([1, 0.0, np.nan, -3, -0.0, -np.inf], np.float32)
    session = OffloadSession(model, device=reference)
    assert session.one_session_refusal is None
    (z,) = session.run(None, {"x": x, "y": y})
    want = reference.max(x.astype(ml_dtypes.bfloat16), y.astype(ml_dtypes.bfloat16))
    assert_same_bits(z, want.astype(np.float32))
    assert session.last_run[2] == ("Max_2", "Max", "device")


@pytest.mark.parametrize("one_session", [True, False])
def test_a_device_given_after_a_run_takes_every_device_step(one_session):
    """Each step's call is worked out once per device: one set after a run is the one used."""
    session = OffloadSession(mixed_model(), device=reference, one_session=one_session)
    first = session.run(None, FEEDS)
    counted = bench._TimedDevice(reference)
    session.device = counted
    for got, want in zip(session.run(None, FEEDS), first):
        assert_same_bits(got, want)
    assert counted.calls == sum(where == "device" for _, _, where in session.last_run) == 3


class WithoutArgMax:
    """A device with the max family's required calls and no ``arg_max``."""

    max, reduce_max, global_max_pool = reference.max, reference.reduce_max, \
        reference.global_max_pool


@pytest.mark.parametrize("one_session", [True, False])
def test_a_device_lacking_a_steps_call_fails_with_its_own_error(one_session):
    """Working out a step's call fails (here: no ``arg_max``): run raises that error itself,
    from the one session as from the partitions, not as onnxruntime's."""
    model = single_node_model("ArgMax", 13, [("x", TensorProto.FLOAT, [2, 3])],
                              [("i", TensorProto.INT64, [1, 3])])
    session = OffloadSession(model, device=WithoutArgMax(), one_session=one_session)
    assert (session.one_session_refusal is None) == one_session
    with pytest.raises(AttributeError, match="arg_max"):
        session.run(None, {"x": np.zeros((2, 3), np.float32)})


@pytest.mark.parametrize("one_session", [True, False])
def test_each_element_type_is_routed_for_itself(one_session):
    """A float32 and a float64 Max on a board of float32 alone: the device takes the first,
    the golden model the second, and a step's call is worked out again for another type."""
    graph = helper.make_graph(
        [helper.make_node("Max", ["x", "y"], ["m32"], name="max32"),
         helper.make_node("Cast", ["x"], ["x64"], to=TensorProto.DOUBLE, name="cast"),
         helper.make_node("Max", ["x64", "z"], ["m64"], name="max64")], "two_types",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("z", TensorProto.DOUBLE, [3])],
        [helper.make_tensor_value_info("m32", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("m64", TensorProto.DOUBLE, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    feeds = {"x": np.array([np.nan, -0.0, 1], np.float32),
             "y": np.array([1, 0.0, -np.inf], np.float32),
             "z": np.array([-0.0, 0.0, np.nan])}
    with Device(FakeBoard(dtypes=[DType.FLOAT])) as dev:
        session = OffloadSession(model, device=dev, one_session=one_session)
        m32, m64 = session.run(None, feeds)
        assert [where for name, _, where in session.last_run if name != "cast"] == \
            ["device", "golden"]
        session.run(None, feeds)    # each step's call made once, for its element type
        assert [where for name, _, where in session.last_run if name != "cast"] == \
            ["device", "golden"]
    assert_same_bits(m32, reference.max(feeds["x"], feeds["y"]))
    assert_same_bits(m64, reference.max(feeds["x"].astype(np.float64), feeds["z"]))


class Viewing:
    """The golden model as a device whose results come back as ``view(result)``."""

    def __init__(self, view):
        self.view = view

    def __getattr__(self, name):
        call = getattr(reference, name)
        return lambda *args, **kwargs: self.view(call(*args, **kwargs))


def transposed_view(result):
    """``result`` as a view whose last two axes are transposed (as a pool's on NCHWc
    tensors)."""
    return np.swapaxes(np.ascontiguousarray(np.swapaxes(result, -1, -2)), -1, -2)


@pytest.mark.parametrize("layout", ["fortran", "reversed", "every other", "broadcast",
                                    "last two axes swapped"])
def test_a_device_result_of_any_strides_reaches_onnxruntime(layout):
    """The kernel copies a result as its strides say (a device may hand back a view)."""
    contiguous = []

    def strided(result):
        if layout == "fortran":
            result = np.asfortranarray(result)
        elif layout == "reversed":
            result = np.flip(np.flip(result).copy())
        elif layout == "every other":
            result = np.repeat(result, 2, axis=-1)[..., ::2]
        elif layout == "last two axes swapped":
            result = transposed_view(result)
        else:   # the first axis as a zero stride
            result = np.broadcast_to(result[:1], result.shape)
        contiguous.append(result.flags.c_contiguous)
        return result

    one = OffloadSession(mixed_model(), device=Viewing(strided))
    assert one.one_session_refusal is None
    want = OffloadSession(mixed_model(), device=reference, one_session=False).run(None, FEEDS)
    for got, expected in zip(one.run(None, FEEDS), want):
        assert_same_bits(got, expected)
    # A result whose last two axes hold one item between them stays contiguous swapped.
    assert contiguous and not (all if layout == "last two axes swapped" else any)(contiguous)


def max_model(shape):
    graph = helper.make_graph(
        [helper.make_node("Max", ["x", "y"], ["m"], name="max")], "max",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name in "xy"],
        [helper.make_tensor_value_info("m", TensorProto.FLOAT, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


@pytest.mark.parametrize("rows, columns", [(1, 4), (4, 8), (9, 8), (13, 16), (7, 6), (5, 1)])
def test_a_transposed_result_reaches_onnxruntime_with_every_bit(rows, columns):
    """A result whose last two axes are a transposed view (as a pool's on NCHWc tensors: the
    kernel copies it 4 x 4 items at a time where it can), of edge values: NaN payloads, signed
    zeros, infinities, subnormals."""
    shape = [2, 3, rows, columns]
    session = OffloadSession(max_model(shape), device=Viewing(transposed_view))
    assert session.one_session_refusal is None
    rng = np.random.default_rng(rows * 100 + columns)
    feeds = {name: random_values(rng, np.float32, shape, edge_fraction=0.5) for name in "xy"}
    (got,) = session.run(None, feeds)
    assert_same_bits(got, reference.max(feeds["x"], feeds["y"]))


def test_a_kernel_hands_the_device_the_same_arrays_while_its_tensors_lie_where_they_lay():
    """The kernel keeps what it made of its inputs while onnxruntime's tensors lie at the same
    place with the same dims (its memory plan puts them there run after run): the device gets
    the same arrays, which read what lies there now; other places or dims, new arrays."""
    class Recording:
        def __init__(self):
            self.seen = []

        def __getattr__(self, name):
            return getattr(reference, name)

        def max(self, *arrays):
            self.seen.append(arrays)
            return reference.max(*arrays)

    device = Recording()
    session = OffloadSession(max_model(["n", 4]), device=device)
    assert session.one_session_refusal is None
    rng = np.random.default_rng(5)
    feeds = {name: random_values(rng, np.float32, (3, 4), edge_fraction=0.5) for name in "xy"}
    runs = []
    for change in ("none", "values in place", "none", "new arrays", "other dims"):
        if change == "values in place":
            feeds["x"][...] = random_values(rng, np.float32, (3, 4), edge_fraction=0.5)
        elif change == "new arrays":
            feeds = {name: a.copy() for name, a in feeds.items()}
        elif change == "other dims":
            feeds = {name: random_values(rng, np.float32, (5, 4), edge_fraction=0.5)
                     for name in "xy"}
        (got,) = session.run(None, feeds)
        assert_same_bits(got, reference.max(feeds["x"], feeds["y"]))
        runs.append(device.seen[-1])
    same = [all(a is b for a, b in zip(runs[i], runs[i + 1])) for i in range(len(runs) - 1)]
    assert same == [True, True, False, False]
    assert not any(a.flags.writeable for a in runs[-1])


def test_a_kernels_room_is_onnxruntimes_output_handed_out_while_its_call_runs():
    """A call may write an output itself: ``room(index, dims)`` hands out onnxruntime's output
    as a writable memoryview (the same object again for the same tensor), and a result of None
    leaves what was written there. Handed out only during the call; a None for an output never
    handed out, an index past the kernel's rooms, a negative size or other dims for an output
    already handed out are errors that name it, and the kernel goes on working after them."""
    session = OffloadSession(max_model([3, 4]), device=reference)
    assert session.one_session_refusal is None
    mode, rooms = ["write"], []

    def resolve(key):
        def call(inputs, room):
            x, y = device_ops.arrays_of(inputs)
            rooms.append(room)
            if mode[0] == "no room":
                return (None,)
            if mode[0] == "index":
                room(8, x.shape)
            if mode[0] == "dims":
                room(0, (3, -4))
            if mode[0] == "other dims":     # onnxruntime's own error, through its status
                room(0, x.shape)
                room(0, (12,))
            view = room(0, x.shape)
            assert room(0, x.shape) is view    # the same tensor: the same object
            np.ndarray(x.shape, x.dtype, view)[...] = reference.max(x, y)
            return (None,)
        return call
    device_ops._loaded.maxaccel_set_python(device_ops._register, resolve)
    try:
        rng = np.random.default_rng(9)
        for fault, words in [("write", None), ("no room", "None for an output it was not handed"),
                             ("index", "index 8 is not one of the first 8 outputs"),
                             ("dims", "a negative size"),
                             ("other dims", "onnxruntime: .* has shape"), ("write", None)]:
            mode[0] = fault
            feeds = {name: random_values(rng, np.float32, (3, 4), edge_fraction=0.5)
                     for name in "xy"}
            if words is None:
                (got,) = session.run(None, feeds)
                assert_same_bits(got, reference.max(feeds["x"], feeds["y"]))
            else:
                with pytest.raises(Exception, match=words):
                    session.run(None, feeds)
    finally:
        device_ops._loaded.maxaccel_set_python(device_ops._register, device_ops._resolve)
    with pytest.raises(RuntimeError, match="only while its kernel's call runs"):
        rooms[0](0, (3, 4))
