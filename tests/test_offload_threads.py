"""OffloadSession's onnxruntime sessions (its CPU partitions, or its one session with device
operators) and onnxruntime's thread pools: the caller's SessionOptions reach every session, the
pools sleep while the device works, unless the caller says otherwise, and the results keep their bits either way; the
built-in benchmark models run as onnxruntime runs them."""

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from maxaccel import bench
from maxaccel.bench import models
from maxaccel.host import device_ops
from maxaccel.host.offload import NO_SPINNING, SPINNING, OffloadSession
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from onnx_models import bfloat16_model, mixed_model

INTRA, INTER = SPINNING
#: onnxruntime's entry that stops its pools spinning when a run returns: the session never
#: sets it.
STOP_SPINNING_AFTER_RUN = "session.force_spinning_stop"


def entry(options, key):
    """A session config entry, or None if never set (onnxruntime raises for those)."""
    try:
        return options.get_session_config_entry(key)
    except RuntimeError:
        return None


@pytest.fixture
def made(monkeypatch):
    """The onnxruntime sessions made from now on (``onnxruntime.InferenceSession`` recorded),
    but those made only to have onnxruntime write an optimized model file."""
    sessions = []
    make = onnxruntime.InferenceSession

    def recording(*args, **kwargs):
        session = make(*args, **kwargs)
        if not session.get_session_options().optimized_model_filepath:
            sessions.append(session)
        return session
    monkeypatch.setattr(onnxruntime, "InferenceSession", recording)
    return sessions


def partition_options(made, one_session):
    """The options of the last onnxruntime sessions made (``made``), those of the mixed
    model: its two partitions, or its one session (made after any probe of onnxruntime)."""
    count = 1 if one_session else 2
    assert len(made) >= count
    return [session.get_session_options() for session in made[-count:]]


def pools(options):
    """The thread-pool entries of ``options``: intra-op and inter-op spinning, and whether
    spinning stops when a run returns."""
    return entry(options, INTRA), entry(options, INTER), entry(options, STOP_SPINNING_AFTER_RUN)


#: What the session sets on options that set none: the partitions' pools sleep between
#: hand-overs; the one session's pool is left as onnxruntime has it.
POOLS = {True: (None, None, None), False: (NO_SPINNING, NO_SPINNING, None)}


@pytest.mark.parametrize("one_session", [True, False])
def test_the_callers_options_reach_every_partition_with_the_pools_as_documented(
        one_session, made):
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    options.enable_mem_pattern = False
    options.add_session_config_entry("session.disable_prepacking", "1")
    session = OffloadSession(mixed_model(), options, device=reference, one_session=one_session)
    assert (session.one_session_refusal is None) == one_session
    for given in partition_options(made, one_session):
        assert given.intra_op_num_threads == 2 and not given.enable_mem_pattern
        assert entry(given, "session.disable_prepacking") == "1"
        assert pools(given) == POOLS[one_session]
    assert session.get_session_options() is options


@pytest.mark.parametrize("one_session", [True, False])
def test_a_spinning_setting_the_caller_made_is_kept(one_session, made):
    options = onnxruntime.SessionOptions()
    options.add_session_config_entry(INTRA, "1")
    options.add_session_config_entry(STOP_SPINNING_AFTER_RUN, "0")
    session = OffloadSession(mixed_model(), options, device=reference, one_session=one_session)
    for given in partition_options(made, one_session):
        assert pools(given) == ("1", POOLS[one_session][1], "0")


@pytest.mark.parametrize("one_session", [True, False])
def test_without_options_the_pools_are_set_the_same_way(one_session, made):
    session = OffloadSession(mixed_model(), device=reference, one_session=one_session)
    for given in partition_options(made, one_session):
        assert pools(given) == POOLS[one_session]


def test_a_model_left_to_the_partitions_gets_pools_that_sleep(monkeypatch):
    """Refused before the one session is made (bfloat16 graph inputs), or by onnxruntime when
    it is: the partitions' pools sleep."""
    options = onnxruntime.SessionOptions()
    assert OffloadSession(bfloat16_model(), options, device=reference).one_session_refusal
    assert pools(options) == POOLS[False]
    make = onnxruntime.InferenceSession

    def refusing_the_one_session(model, *args, **kwargs):
        if isinstance(model, bytes) and any(
                node.domain.startswith(device_ops.DOMAIN)
                for node in onnx.ModelProto.FromString(model).graph.node):
            raise RuntimeError("refused")
        return make(model, *args, **kwargs)
    monkeypatch.setattr(onnxruntime, "InferenceSession", refusing_the_one_session)
    made = []
    recording = onnxruntime.InferenceSession

    def recorded(*args, **kwargs):
        made.append(recording(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr(onnxruntime, "InferenceSession", recorded)
    options = onnxruntime.SessionOptions()
    session = OffloadSession(mixed_model(), options, device=reference)
    assert session.one_session_refusal.startswith("onnxruntime does not load the model")
    for given in partition_options(made, False):
        assert pools(given) == POOLS[False]


def test_a_model_without_device_steps_is_left_as_onnxruntime_runs_it(made):
    """One partition and nothing between: no hand-over, so onnxruntime's own pools."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "cpu_only",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    options = onnxruntime.SessionOptions()
    session = OffloadSession(model, options, device=reference)
    assert session.one_session_refusal.startswith("no device step")
    (engine,) = made
    assert entry(engine.get_session_options(), INTRA) is None
    assert entry(options, INTRA) is None and entry(options, INTER) is None


@pytest.mark.parametrize("spinning", ["0", "1"])
def test_the_bits_do_not_depend_on_the_pools(spinning):
    """NaN payloads and signed zeros through the mixed model, pools spinning or not, with
    two threads: the same bits as the golden model's single-threaded session."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 3, 4)).astype(np.float32)
    a[0, 0, :2] = np.array([0xFFC00001, 0x80000000], np.uint32).view(np.float32)
    b = np.array([0.0, -0.0, np.nan], np.float32).reshape(1, 3, 1)
    feeds = {"a": a, "b": b, "flip": np.array(True)}
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry(INTRA, spinning)
    got = OffloadSession(mixed_model(), options, device=reference).run(None, feeds)
    want = OffloadSession(mixed_model(), bench._single_thread_options(),
                          device=reference).run(None, feeds)
    for value, expected in zip(got, want):
        assert_same_bits(value, expected)


@pytest.mark.parametrize("name", sorted(models.BUILT_IN))
def test_the_built_in_models_run_as_onnxruntime_runs_them(name):
    description, model, feeds = bench.load_model(name)
    assert description == models.BUILT_IN[name][0]
    session = OffloadSession(model, device=reference)
    on_device = [op for _, op, where in session.placements if where == "device"]
    assert "MaxPool" in on_device
    got = session.run(None, feeds)
    want = onnxruntime.InferenceSession(model.SerializeToString()).run(None, feeds)
    for value, expected in zip(got, want):
        np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-5)


#: Runs each thread makes (every other one with a bad feed).
TURNS = 100


def axes_input_model():
    """Relu, then ReduceMax-18 over the axes the feed ``axes`` names, then Neg: a device step
    between two partitions whose failure depends on a feed the session's checks let through
    (an axis out of range)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("ReduceMax", ["r", "axes"], ["m"], keepdims=1),
         helper.make_node("Neg", ["m"], ["y"])], "axes_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


@pytest.mark.parametrize("one_session, parallel", [(False, False), (True, False), (True, True)],
                         ids=["partitions", "one session", "one session, parallel executor"])
def test_threads_sharing_a_session_each_get_their_own_results_and_errors(one_session, parallel):
    """Four threads run one session at once, each alternating good feeds (its own data, its
    own axis) and bad ones (an axis out of range that names the thread): each gets exactly
    the golden model's result of its own feeds, and the device's error naming its own axis;
    as partitions, as one session, and as one session on onnxruntime's parallel executor
    (whose kernels run on its own threads)."""
    import re
    import threading
    options = onnxruntime.SessionOptions()
    if parallel:
        options.execution_mode = onnxruntime.ExecutionMode.ORT_PARALLEL
    session = OffloadSession(axes_input_model(), options, device=reference,
                             one_session=one_session)
    assert (session.one_session_refusal is None) == one_session
    outcomes = {t: [] for t in range(4)}
    start = threading.Barrier(4)

    def work(thread):
        rng = np.random.default_rng(thread)
        start.wait()
        for turn in range(TURNS):
            x = rng.standard_normal((2, 3, 4)).astype(np.float32)
            if turn % 2:
                bad = 10 + thread
                try:
                    session.run(None, {"x": x, "axes": np.array([bad], np.int64)})
                    outcomes[thread].append(("no error", bad))
                except Exception as error:  # noqa: BLE001 (checked below: the device's own)
                    # its type and text: the exception itself would keep the session alive
                    outcomes[thread].append(("error", bad, type(error), str(error)))
            else:
                axis = (thread + turn) % 3
                got = session.run(None, {"x": x, "axes": np.array([axis], np.int64)})
                want = -reference.reduce_max(np.maximum(x, 0), axes=[axis])
                outcomes[thread].append(("result", got[0], want))
    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for thread, seen in outcomes.items():
        assert len(seen) == TURNS
        for outcome in seen:
            if outcome[0] == "result":
                assert_same_bits(outcome[1], outcome[2])
            else:
                assert outcome[0] == "error", outcome
                assert issubclass(outcome[2], ValueError), outcome
                text = outcome[3]
                assert re.search(rf"\baxis {outcome[1]}\b", text), outcome
                others = {10 + t for t in range(4)} - {outcome[1]}
                assert not any(re.search(rf"\b{o}\b", text) for o in others), outcome
