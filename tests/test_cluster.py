"""``maxaccel.cluster.BoardPool`` on a local Ray cluster of virtual boards (``sim``).

One Ray instance for the module (its start-up is most of the cost), one pool of three boards
for the runs, the shards and a killed actor, and one pool of two for timeouts, drops and the
error when no board is left. Every result is compared bit for bit with one board's (the
compiled board, ``open_device("verilator")``: the same bits as a ``sim`` board's, without
simulating the four runs in Amaranth's simulator on the test's own core) or with the golden
model.
"""

import importlib.util
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import ray
from onnx import TensorProto, helper

from maxaccel.cluster import BOARD_RESOURCE, BoardPool, NoBoardLeft
from maxaccel.host import OffloadSession, open_device
from maxaccel.sim import reference


def _model():
    """Max with a broadcast row (device), ReduceMax (device), Neg (onnxruntime)."""
    graph = helper.make_graph(
        [helper.make_node("Max", ["x", "w"], ["m"]),
         helper.make_node("ReduceMax", ["m"], ["r"], axes=[1], keepdims=0),
         helper.make_node("Neg", ["r"], ["y"])],
        "pool_test",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)


MODEL = _model().SerializeToString()


def _feeds(count, seed=0):
    """Distinct feeds (a misplaced or repeated result shows), with NaN and signed zeros."""
    rng = np.random.default_rng(seed)
    feeds = []
    for index in range(count):
        x = rng.standard_normal((2, 6)).astype(np.float32)
        w = rng.standard_normal(6).astype(np.float32)
        x[index % 2, index % 6] = [np.nan, -0.0, 0.0][index % 3]
        w[(index + 1) % 6] = -0.0
        feeds.append({"x": x, "w": w})
    return feeds


FEEDS = _feeds(4)


@pytest.fixture(scope="module")
def expected():
    """The outputs of one board (not a pool) for :data:`FEEDS`."""
    with open_device("verilator", progress=None) as device:
        session = OffloadSession(MODEL, device=device)
        return [session.run(None, feeds) for feeds in FEEDS]


@pytest.fixture(scope="module")
def ray_cluster():
    # num_cpus=1: the boards' actors reserve no CPU (num_cpus=0), so this bounds only Ray's own
    # workers; two pools of boards fit the board resource at once.
    ray.init(num_cpus=1, resources={BOARD_RESOURCE: 6}, include_dashboard=False,
             logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


def _same_outputs(got, want):
    assert len(got) == len(want)
    for run, (outputs, reference_outputs) in enumerate(zip(got, want)):
        assert len(outputs) == len(reference_outputs)
        for output, wanted in zip(outputs, reference_outputs):
            reference.assert_same_bits(output, wanted, f"run {run}")


def test_bad_arguments_are_refused_before_ray_starts(monkeypatch):
    def no_ray(*args, **kwargs):
        raise AssertionError("ray.init called for arguments that are refused")
    monkeypatch.setattr(ray, "init", no_ray)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(ValueError, match="at least one board"):
        BoardPool([])
    with pytest.raises(TypeError, match="list of device URLs"):
        BoardPool("sim")
    with pytest.raises(ValueError, match="unknown device URL 'nope://x'"):
        BoardPool(["sim", "nope://x"])
    with pytest.raises(ValueError, match="listed twice"):
        BoardPool(["xdma:///dev/xdma0", "xdma:///dev/xdma0"])
    with pytest.raises(ValueError, match="'#' must be followed by a Ray node"):
        BoardPool(["sim#"])
    with pytest.raises(ValueError, match="positive"):
        BoardPool(["sim"], timeout_s=0)
    with pytest.raises(ValueError, match="2 values for 1 boards"):
        BoardPool(["sim"], timeout_s=[1, 2])
    with pytest.raises(ValueError, match="restarts"):
        BoardPool(["sim"], restarts=-1)
    from maxaccel.cluster.__main__ import main
    with pytest.raises(SystemExit) as caught:
        main(["bench", "--device", "nope://x"])
    assert caught.value.code == 2


def test_three_sim_boards(ray_cluster, expected):
    """One pool of three ``sim`` boards for every check that needs three boards (in one test,
    so that ``pytest -n`` opens its simulators once)."""
    with BoardPool(["sim"] * 3, timeout_s=300) as pool:
        _runs_are_one_boards_outputs_in_order(pool, expected)
        _bad_feeds_are_refused_before_anything_is_sent(pool)
        for dtype in ("float32", "int16"):
            _shards_combine_to_the_golden_models_bits(pool, dtype)
        _a_killed_actor_costs_no_result(pool, expected)


def _runs_are_one_boards_outputs_in_order(pool, expected):
    before = [b.runs for b in pool.boards]
    _same_outputs(pool.run(MODEL, FEEDS), expected)
    done = [b.runs - n for b, n in zip(pool.boards, before)]
    assert sum(done) == len(FEEDS) and all(done), done     # spread: every board took runs
    assert sorted({board for board, _ in pool.last_calls}) == [0, 1, 2]
    assert all(cycles > 0 for _, cycles in pool.last_calls)  # sim boards count their cycles
    # Names as OffloadSession.run's: only y.
    (only_y,) = pool.run(onnx.load_from_string(MODEL), FEEDS[:1], output_names=["y"])
    reference.assert_same_bits(only_y[0], expected[0][1], "y")
    # One session per model on each board, made at its first run and reused (the ModelProto
    # above is the same model as the bytes).
    sessions = ray.get([b.actor.__ray_call__.remote(lambda actor: list(actor.sessions))
                        for b in pool.boards])
    assert all(len(keys) == 1 for keys in sessions) and len({k[0] for k in sessions}) == 1


def _bad_feeds_are_refused_before_anything_is_sent(pool):
    before = [(b.runs, b.failures) for b in pool.boards]
    good = FEEDS[0]
    with pytest.raises(ValueError, match=r"feeds 1: missing input\(s\) 'w'"):
        pool.run(MODEL, [good, {"x": good["x"]}])
    with pytest.raises(TypeError, match="feeds 0: input 'x' must be float32, got float64"):
        pool.run(MODEL, [{"x": good["x"].astype(np.float64), "w": good["w"]}])
    with pytest.raises(ValueError, match="size 6 along axis 1"):
        pool.run(MODEL, [{"x": np.zeros((2, 5), np.float32), "w": good["w"]}])
    with pytest.raises(TypeError, match="list of feeds dicts"):
        pool.run(MODEL, good)
    with pytest.raises(ValueError, match="unknown output"):
        pool.run(MODEL, [good], output_names=["nope"])
    with pytest.raises(ValueError, match="not a valid ONNX model"):
        pool.run(b"not a model", [good])
    with pytest.raises(TypeError, match="same dtype"):
        pool.max(np.zeros(3, np.float32), np.zeros(3, np.float16))
    with pytest.raises(ValueError):
        pool.reduce_max(np.zeros((2, 3), np.float32), axes=[2])
    with pytest.raises(TypeError, match=r"min\(\) inputs must all have the same dtype"):
        pool.min(np.zeros(3, np.float32), np.zeros(3, np.float16))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        pool.reduce_min(np.zeros((2, 3), np.float32), axes=[2])
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        pool.arg_max(np.zeros((2, 3), np.float32), axis=2)
    with pytest.raises(ValueError, match="no position to return"):
        pool.arg_min(np.zeros((2, 0), np.float32), axis=1)
    assert [(b.runs, b.failures) for b in pool.boards] == before


def _awkward(shape, dtype, rng):
    """Random values with NaN, both zeros, infinities and subnormals where the dtype has them."""
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(shape).astype(dtype)
        flat = x.reshape(-1)
        specials = [np.nan, -0.0, 0.0, np.inf, -np.inf, np.finfo(dtype).smallest_subnormal]
        count = min(flat.size, len(specials))
        flat[rng.choice(flat.size, count, replace=False)] = specials[:count]
        return x
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _shards_combine_to_the_golden_models_bits(pool, dtype):
    rng = np.random.default_rng(1)
    x = _awkward((9, 4), dtype, rng)                # cut along axis 0, the longest
    before = sum(b.runs for b in pool.boards)
    # Axis 0 reduced: partial maxima combined on the host; axis 1 reduced: slices joined.
    for axes, keepdims in [(None, True), ([0], False), ([1], True)]:
        got = pool.reduce_max(x, axes=axes, keepdims=keepdims)
        reference.assert_same_bits(got, reference.reduce_max(x, axes=axes, keepdims=keepdims),
                                   f"reduce_max axes={axes}")
    assert sum(b.runs for b in pool.boards) - before == 9     # three slices each time
    # ReduceMin: the partial minima combined the same way, -0 below +0.
    got = pool.reduce_min(x, axes=[0], keepdims=False)
    reference.assert_same_bits(got, reference.reduce_min(x, axes=[0], keepdims=False),
                               "reduce_min axes=[0]")
    # ArgMax and ArgMin: positions of the slices picked among on the host (axis 0, with ties
    # in two slices, first and last), or slices joined (axis 1).
    ties = np.zeros((9, 4), dtype)
    ties[[2, 7]] = 1
    for data in (x, ties):
        for axis, last in [(0, False), (0, True), (1, False)]:
            for name in ("arg_max", "arg_min"):
                got = getattr(pool, name)(data, axis=axis, keepdims=axis == 1,
                                          select_last_index=last)
                want = getattr(reference, name)(data, axis=axis, keepdims=axis == 1,
                                                select_last_index=last)
                assert got.dtype == np.int64 and np.array_equal(got, want), (name, axis, last)
    # Max and Min with broadcasting: the output cut along axis 0, the row operand sent whole.
    y, row = _awkward((9, 4), dtype, rng), _awkward((1, 4), dtype, rng)
    reference.assert_same_bits(pool.max(x, y, row), reference.max(x, y, row), "max")
    reference.assert_same_bits(pool.min(x, y, row), reference.min(x, y, row), "min")
    column = _awkward((9, 1), dtype, rng)
    reference.assert_same_bits(pool.max(row, column, pieces=2), reference.max(row, column),
                               "max of a row and a column")


def _a_killed_actor_costs_no_result(pool, expected):
    """``ray.kill`` a board's actor while a map is under way: its call goes to the others, the
    sim board gets a new actor, and every result comes back once, as one board's."""
    feeds = FEEDS * 2                                # 8 runs: every board is busy when killed
    victim = pool.boards[1]
    first = victim.actor
    before = [(b.runs, b.failures, b.restarts) for b in pool.boards]

    def kill_after_first_result():
        deadline = time.monotonic() + 120
        while sum(b.runs for b in pool.boards) == sum(r for r, _, _ in before):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        ray.kill(first)

    killer = threading.Thread(target=kill_after_first_result)
    killer.start()
    try:
        got = pool.run(MODEL, feeds)
    finally:
        killer.join()
    _same_outputs(got, expected * 2)
    runs = [b.runs - r for b, (r, _, _) in zip(pool.boards, before)]
    assert sum(runs) == len(feeds)                   # each result taken exactly once
    assert victim.failures == before[1][1] + 1
    assert victim.restarts == before[1][2] + 1 and victim.actor is not first
    assert not victim.dropped
    assert any("ActorDiedError" in event for event in victim.events), victim.events
    # The new actor serves runs again.
    _same_outputs(pool.run(MODEL, FEEDS[:3]), expected[:3])


def test_a_board_that_does_not_open_is_named(ray_cluster):
    with pytest.raises(RuntimeError, match=r"boards that did not open: serial:///dev/ttyNOPE0: "
                                           r"TransportError: cannot open serial port"):
        BoardPool(["serial:///dev/ttyNOPE0"])
    with pytest.raises(ValueError, match="offers 6 'maxaccel_board' resources and the pool has "
                                         "7 boards"):
        BoardPool(["sim"] * 7)


def test_timeouts_drops_and_no_board_left(ray_cluster):
    x = _awkward((4, 64), "float32", np.random.default_rng(2))
    # Board 0 must answer within 50 ms: no reduction on the Python-simulated board does, so it
    # times out, gets a new actor (restarts=1), times out again and is dropped; board 1 (the
    # compiled board, quick to open) does every piece.
    with BoardPool(["sim", "verilator"], timeout_s=[0.05, 300], restarts=1) as pool:
        slow, good = pool.boards
        got = pool.reduce_max(x, axes=[1], pieces=4)
        reference.assert_same_bits(got, reference.reduce_max(x, axes=[1]), "reduce_max")
        assert slow.dropped and slow.runs == 0 and slow.failures == 2 and slow.restarts == 1
        assert "no answer within 0.05 s" in slow.events[0] and slow.events[-1] == "dropped"
        assert good.runs == 4 and not good.dropped
        # A killed board that may not restart is dropped; with none left, the error names
        # each board and what happened to it.
        pool.restarts = 0
        ray.kill(good.actor)
        with pytest.raises(NoBoardLeft) as caught:
            pool.max(x, x)
        message = str(caught.value)
        assert "no board left in the pool, 1 of 1 calls not done" in message
        assert "sim: dropped, 0 calls done, 2 failed, 1 restarts (call 0: no answer within " \
               "0.05 s; restart 1; call " in message
        assert "verilator: dropped, 4 calls done, 1 failed, 0 restarts (call 0: " \
               "ActorDiedError" in message
        assert caught.value.boards == pool.boards


def test_scaling_is_counted_in_device_cycles(ray_cluster):
    """The benchmark on compiled boards: the same requests cost the same cycles however they
    are spread, so two boards share one board's cycles and halve the makespan."""
    from maxaccel.cluster import format_scaling, measure_scaling
    results = measure_scaling((1, 2), "verilator", elements=4096, batch=4)
    one = {r.workload: r for r in results if r.boards == 1}
    two = {r.workload: r for r in results if r.boards == 2}
    assert set(one) == set(two) == {"run", "shard"}
    assert all(r.elements == 4 * 4096 for r in results)
    # run: four identical requests, the same cycles on any board; two boards take two each in
    # device time, whichever simulated board happened to finish first here.
    request = one["run"].call_cycles[0]
    assert one["run"].call_cycles == two["run"].call_cycles == [request] * 4
    assert one["run"].makespan == 4 * request and two["run"].makespan == 2 * request
    assert sum(two["run"].board_cycles) == 4 * request
    assert all(c % request == 0 for c in two["run"].board_cycles)
    # shard: one tensor in two slices; each slice costs more than half (its own request).
    assert one["shard"].makespan / 2 < two["shard"].makespan < one["shard"].makespan
    table = format_scaling(results)
    assert "| run | 2 | 16384 |" in table and "| shard | 1 | 16384 |" in table
    with pytest.raises(ValueError, match="counts no device cycles"):
        measure_scaling((1,), "xdma:///dev/xdma0")


EXAMPLE = Path(__file__).parent.parent / "docs" / "examples" / "serve_boards.py"


def test_the_serve_example_parses_and_builds_its_application():
    """The Ray Serve example compiles; where ``ray[serve]`` is installed (not by the test
    extra: it brings some forty packages), it imports and builds a deployment per board with
    the board resource (:func:`test_the_serve_example_serves_requests` runs it)."""
    compile(EXAMPLE.read_text(), str(EXAMPLE), "exec")
    pytest.importorskip("ray.serve")
    spec = importlib.util.spec_from_file_location("serve_boards", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    app = example.build(["sim", "serial:///dev/ttyUSB0#10.0.0.11"])
    boards = app._bound_deployment.init_args
    assert [b._bound_deployment.name for b in boards] == ["board-0", "board-1"]
    options = [b._bound_deployment.ray_actor_options for b in boards]
    assert options[0]["resources"] == {BOARD_RESOURCE: 1}
    assert options[1]["resources"] == {BOARD_RESOURCE: 1, "node:10.0.0.11": 0.001}


@pytest.mark.slow(reason="Ray Serve serving requests, about 45 s")
def test_the_serve_example_serves_requests():
    """The Ray Serve example run as a script: it serves two requests on a local cluster."""
    pytest.importorskip("ray.serve")
    subprocess.run([sys.executable, str(EXAMPLE), "--requests", "2"], check=True, timeout=600)
