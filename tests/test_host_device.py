"""The host driver's tensor API against the golden model, on the fake board.

Every result is compared bit for bit with ``maxaccel.sim.reference``; the fake board computes
with the golden model too, but only after the host's planning, encoding, parameter blocks,
replay-buffer addressing and decoding, so any mistake there shows as wrong bits.
"""

import dataclasses
import math

import numpy as np
import pytest
from boards import SMALL_WINDOW
from device_checks import REDUCTIONS, check_edge_digest
from fake_board import CountingBoard, FakeBoard

from maxaccel.host.device import Device
from maxaccel.contract.dtypes import FORMATS, DType
from maxaccel.contract.wire import COUNTER_NAMES, FRAME_OVERHEAD, PARAMETERS, VERSION, Command
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import edge_bits, random_values

ALL = list(FORMATS.values())
NUMERIC = [f for f in ALL if f.kind != "bool"]
FLOATS = [f for f in ALL if f.is_float]


def ids(formats):
    return [str(f.numpy_dtype) for f in formats]


def make_device(**board):
    return Device(FakeBoard(**board))


def tiny_device():
    """Capacities so small that almost everything must be tiled, split or grouped."""
    return Device(FakeBoard(lanes=1, replay_depth=8, max_dims=1, max_operands=1),
                  max_frame_bytes=64)


def open_virtual_board(kind="sim"):
    from maxaccel.host.device import open_device
    return open_device(kind)


#: The corpus on Amaranth's simulator repeats, at about 1/100 of the speed, what the compiled
#: board runs of the same gateware; CI runs the digest there (test_edge_corpus_on_the_virtual_
#: board) and ``--slow`` the whole corpus.
SIMULATED_CORPUS = pytest.param("sim", marks=pytest.mark.slow(
    reason="the whole corpus in Amaranth's simulator, about 5 min of CPU (the compiled board "
           "runs it in CI)"))


@pytest.fixture(scope="module", params=["fake", SIMULATED_CORPUS, "verilator"])
def device(request):
    """The fake board, the virtual board (the real gateware in Amaranth's simulator; slow,
    behind ``--slow``) and the same gateware compiled with Verilator."""
    with (make_device() if request.param == "fake" else open_virtual_board(request.param)) \
            as dev:
        yield dev


@pytest.fixture(scope="module")
def fake_device():
    with make_device() as dev:
        yield dev




@pytest.mark.parametrize("fmt", ALL, ids=ids(ALL))
def test_reduce_max_matches_the_golden_model(device, fmt):
    rng = np.random.default_rng(int(fmt.dtype))
    for shape, axes, keepdims, noop in REDUCTIONS:
        data = random_values(rng, fmt, shape, edge_fraction=0.2)
        got = device.reduce_max(data, axes=axes, keepdims=keepdims, noop_with_empty_axes=noop)
        want = reference.reduce_max(data, axes=axes, keepdims=keepdims,
                                    noop_with_empty_axes=noop)
        assert_same_bits(got, want, f"reduce_max {shape} axes={axes} keepdims={keepdims}")


@pytest.mark.parametrize("fmt", ALL, ids=ids(ALL))
def test_reduce_min_matches_the_golden_model(device, fmt):
    """ReduceMin through REDUCE's minimum select: the same shapes as ReduceMax's, empty
    reductions (+inf, the integer maximum, True) and noops included."""
    rng = np.random.default_rng(50 + int(fmt.dtype))
    for shape, axes, keepdims, noop in REDUCTIONS:
        data = random_values(rng, fmt, shape, edge_fraction=0.2)
        got = device.reduce_min(data, axes=axes, keepdims=keepdims, noop_with_empty_axes=noop)
        want = reference.reduce_min(data, axes=axes, keepdims=keepdims,
                                    noop_with_empty_axes=noop)
        assert_same_bits(got, want, f"reduce_min {shape} axes={axes} keepdims={keepdims}")


#: (shape, axis, keepdims) of the ArgMax/ArgMin corpus, each with and without
#: select_last_index; an empty axis whose result is empty too.
ARGS = [((3, 4, 5), 0, True), ((3, 4, 5), 1, False), ((3, 4, 5), 2, True),
        ((3, 4, 5), -1, False), ((7,), 0, False), ((1, 9), 1, True), ((40, 3), 0, False),
        ((2, 0, 3), 0, True)]


@pytest.mark.parametrize("fmt", ALL, ids=ids(ALL))
def test_arg_max_and_arg_min_match_the_golden_model(device, fmt):
    """ArgMax and ArgMin through REDUCE's arg select: every axis, keepdims, first and last,
    edge values (NaNs, signed zeros, infinities, extremes) and ties (a few distinct values)."""
    rng = np.random.default_rng(70 + int(fmt.dtype))
    for shape, axis, keepdims in ARGS:
        for data in (random_values(rng, fmt, shape, edge_fraction=0.3),
                     rng.choice(random_values(rng, fmt, 3, edge_fraction=0.5), size=shape)):
            for name in ("arg_max", "arg_min"):
                for last in (False, True):
                    got = getattr(device, name)(data, axis=axis, keepdims=keepdims,
                                                select_last_index=last)
                    want = getattr(reference, name)(data, axis=axis, keepdims=keepdims,
                                                    select_last_index=last)
                    assert got.dtype == np.int64 and got.shape == want.shape
                    assert np.array_equal(got, want), (name, shape, axis, last, data)


def nan_diagonal(rng, fmt, n):
    """An n x n matrix of ``fmt``'s edge numbers whose row i holds a NaN (of every kind in turn)
    at position i only."""
    edges = edge_bits(fmt)
    nans = edges[reference.is_nan(edges)]
    matrix = rng.choice(edges[~reference.is_nan(edges)], size=(n, n))
    matrix[np.arange(n), np.arange(n)] = nans[np.arange(n) % len(nans)]
    return matrix


@pytest.mark.parametrize("fmt", FLOATS, ids=ids(FLOATS))
def test_arg_nan_at_every_position_and_signed_zeros(device, fmt):
    """A NaN is the extreme of ArgMax and ArgMin at any position (every kind in turn), before
    or after infinities; -0 and +0 are distinct, first and last."""
    matrix = nan_diagonal(np.random.default_rng(360 + int(fmt.dtype)), fmt, 11)
    twice = np.concatenate([matrix, matrix], axis=1)
    for name in ("arg_max", "arg_min"):
        assert np.array_equal(getattr(device, name)(matrix, axis=1, keepdims=False),
                              np.arange(11))
        assert np.array_equal(getattr(device, name)(twice, axis=1, keepdims=False,
                                                    select_last_index=True), np.arange(11) + 11)
    zeros = reference.from_bits(np.array([fmt.sign_mask, 0, fmt.sign_mask, 0],
                                         fmt.uint_dtype), fmt)
    assert device.arg_max(zeros).tolist() == [1]
    assert device.arg_max(zeros, select_last_index=True).tolist() == [3]
    assert device.arg_min(zeros).tolist() == [0]
    assert device.arg_min(zeros, select_last_index=True).tolist() == [2]


def test_arg_rows_longer_than_a_frame_go_in_pieces():
    """Rows of more bytes than a frame: each piece's position, then the pieces' extremes sent
    as a run of their own (and so on), with ties across pieces going to the first piece (the
    last with select_last_index), and NaNs in late pieces."""
    rng = np.random.default_rng(14)
    fmt = FORMATS[DType.FLOAT]
    data = rng.choice(np.array([1.0, 2.0, -0.0, 0.0], np.float32), size=(3, 200))
    data[1, [37, 150]] = np.nan
    data[2] = 0.0
    with tiny_device() as dev:
        board = dev.link.transport
        for name in ("arg_max", "arg_min"):
            for last in (False, True):
                board.requests.clear()
                got = getattr(dev, name)(data, axis=1, select_last_index=last)
                assert np.array_equal(got, getattr(reference, name)(data, axis=1,
                                                                    select_last_index=last))
                assert len(board.requests) > 3 * 200 * fmt.nbytes // 64
                assert {PARAMETERS[code].unpack(payload)["arg"]
                        for code, payload in board.requests} == {1}


@pytest.mark.parametrize("fmt", FLOATS, ids=ids(FLOATS))
def test_reduce_min_nan_at_every_position_signed_zeros_and_infinities(device, fmt):
    matrix = nan_diagonal(np.random.default_rng(350 + int(fmt.dtype)), fmt, 11)
    got = device.reduce_min(matrix, axes=[1], keepdims=False)
    assert_same_bits(got, reference.reduce_min(matrix, axes=[1], keepdims=False))
    assert (reference.bits_of(got) == fmt.canonical_nan).all()
    pos, neg = (np.array([v], fmt.numpy_dtype) for v in (0.0, -0.0))
    for a, b in [(pos, neg), (neg, pos), (neg, neg)]:
        assert_same_bits(device.reduce_min(np.concatenate([a, b])), neg)
    assert_same_bits(device.reduce_min(np.concatenate([pos, pos])), pos)
    infinity = np.array([np.inf, -np.inf], fmt.numpy_dtype)
    assert_same_bits(device.reduce_min(infinity), infinity[1:])
    empty = np.zeros((3, 0), fmt.numpy_dtype)
    assert_same_bits(device.reduce_min(empty, axes=[1], keepdims=False),
                     np.repeat(infinity[:1], 3))


BROADCASTS = [
    [(5,)],
    [()],
    [(2, 3), (3,)],
    [(3, 1), (1, 4)],                          # nothing streams: every operand replayed
    [(2, 1, 4), (3, 1), (1,)],
    [(4, 1, 3), (1, 5, 1), (5, 3), ()],
    [(2, 3, 4, 5), (3, 1, 5), (1, 4, 1), (5,), (2, 1, 1, 1)],
    [(1,), (1, 1)],
    [(6, 1, 7), (1, 8, 7)],
    [(33,), (33,), (33,), (1,), (33,)],
    [(0, 3), (1, 3)],                          # empty outputs
    [(3, 0), (3, 1), ()],
]


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("fmt", NUMERIC, ids=ids(NUMERIC))
def test_max_and_min_with_broadcasting_match_the_golden_model(device, fmt, name):
    rng = np.random.default_rng(100 + int(fmt.dtype))
    for shapes in BROADCASTS:
        arrays = [random_values(rng, fmt, s, edge_fraction=0.3) for s in shapes]
        assert_same_bits(getattr(device, name)(*arrays), getattr(reference, name)(*arrays),
                         f"{name} {shapes}")


@pytest.mark.parametrize("fmt", FLOATS, ids=ids(FLOATS))
def test_global_max_pool_matches_the_golden_model(device, fmt):
    rng = np.random.default_rng(200 + int(fmt.dtype))
    for shape in [(1, 3, 5, 5), (2, 2, 3), (2, 3, 2, 2, 2), (1, 2, 0, 4), (0, 3, 4)]:
        x = random_values(rng, fmt, shape, edge_fraction=0.1)
        assert_same_bits(device.global_max_pool(x), reference.global_max_pool(x),
                         f"global_max_pool {shape}")


@pytest.mark.parametrize("fmt", FLOATS, ids=ids(FLOATS))
def test_nan_at_every_position_gives_the_canonical_nan(device, fmt):
    rng = np.random.default_rng(300 + int(fmt.dtype))
    n = 19
    matrix = nan_diagonal(rng, fmt, n)
    edges = edge_bits(fmt)
    nans = edges[reference.is_nan(edges)]
    numbers = edges[~reference.is_nan(edges)]
    got = device.reduce_max(matrix, axes=[1], keepdims=False)
    assert_same_bits(got, reference.reduce_max(matrix, axes=[1], keepdims=False))
    assert (reference.bits_of(got) == fmt.canonical_nan).all()
    # Max and Min of k operands: operand j holds the NaN at positions p with p % k == j.
    for k in range(1, 6):
        operands = [rng.choice(numbers, size=n) for _ in range(k)]
        for j, operand in enumerate(operands):
            operand[np.arange(n) % k == j] = nans[j % len(nans)]
        for name in ("max", "min"):
            got = getattr(device, name)(*operands)
            assert_same_bits(got, getattr(reference, name)(*operands), f"{name} of {k}")
            assert (reference.bits_of(got) == fmt.canonical_nan).all()


@pytest.mark.parametrize("fmt", FLOATS, ids=ids(FLOATS))
def test_signed_zeros_and_extremes(device, fmt):
    pos, neg = (np.array([v], fmt.numpy_dtype) for v in (0.0, -0.0))
    for a, b, want in [(pos, neg, pos), (neg, pos, pos), (neg, neg, neg)]:
        assert_same_bits(device.max(a, b), want)
        assert_same_bits(device.reduce_max(np.concatenate([a, b])), want)
    for a, b, want in [(pos, neg, neg), (neg, pos, neg), (pos, pos, pos)]:
        assert_same_bits(device.min(a, b), want)
        assert_same_bits(device.min(a, b, a), want)
    infinity = np.array([np.inf, -np.inf], fmt.numpy_dtype)
    assert_same_bits(device.min(infinity, infinity[::-1].copy()), infinity[[1, 1]])
    assert_same_bits(device.max(infinity, infinity[::-1].copy()), infinity[[0, 0]])
    lowest = np.array([fmt.lowest], fmt.uint_dtype).view(fmt.numpy_dtype)
    empty = np.zeros((3, 0), fmt.numpy_dtype)
    assert_same_bits(device.reduce_max(empty, axes=[1], keepdims=False),
                     np.repeat(lowest, 3))


@pytest.mark.parametrize("fmt", [FORMATS[DType.FLOAT], FORMATS[DType.BFLOAT16],
                                 FORMATS[DType.UINT8], FORMATS[DType.INT64],
                                 FORMATS[DType.BOOL]],
                         ids=["float32", "bfloat16", "uint8", "int64", "bool"])
def test_tiny_device_tiles_splits_and_groups(fmt):
    """Buffer of 8 beats, one outer dimension, one replayed operand, 64-byte frames."""
    rng = np.random.default_rng(400 + int(fmt.dtype))
    with tiny_device() as dev:
        board = dev.link.transport
        if fmt.kind != "bool":
            for shapes in BROADCASTS + [[(5, 6, 7), (6, 1), (1, 7), (5, 1, 1)],
                                        [(40, 3), (1, 3)], [(3, 40), (3, 1)]]:
                arrays = [random_values(rng, fmt, s, edge_fraction=0.2) for s in shapes]
                assert_same_bits(dev.max(*arrays), reference.max(*arrays), f"max {shapes}")
                assert_same_bits(dev.min(*arrays), reference.min(*arrays), f"min {shapes}")
        for shape, axes, keepdims, noop in REDUCTIONS + [((100, 3), [0], False, False)]:
            data = random_values(rng, fmt, shape, edge_fraction=0.05)
            assert_same_bits(dev.reduce_max(data, axes, keepdims, noop),
                             reference.reduce_max(data, axes, keepdims, noop))
        # Runs longer than a 64-byte frame are reduced in pieces, whose maxima are reduced
        # again on the device.
        data = random_values(rng, fmt, (3, 100), edge_fraction=0.01)
        board.log.clear()
        assert_same_bits(dev.reduce_max(data, [1]), reference.reduce_max(data, [1]))
        assert len(board.log) > 3 * math.ceil(100 * fmt.nbytes / 64)
        # ReduceMin the same way: chunks of whole runs, and pieces whose minima are reduced
        # again, every request a REDUCE with its minimum select set.
        for shape, axes, keepdims, noop in REDUCTIONS + [((100, 3), [0], False, False)]:
            data = random_values(rng, fmt, shape, edge_fraction=0.05)
            assert_same_bits(dev.reduce_min(data, axes, keepdims, noop),
                             reference.reduce_min(data, axes, keepdims, noop))
        data = random_values(rng, fmt, (3, 100), edge_fraction=0.01)
        board.requests.clear()
        assert_same_bits(dev.reduce_min(data, [1]), reference.reduce_min(data, [1]))
        assert len(board.requests) > 3 * math.ceil(100 * fmt.nbytes / 64)
        assert minimum_flags(board.requests, Command.REDUCE) == {1}


def minimum_flags(requests, command):
    """The ``minimum`` flags of ``requests`` (a board's ``(code, payload)`` log), every one of
    them checked to be a ``command``."""
    assert {code for code, _ in requests} == {command}
    return {PARAMETERS[command].unpack(payload)["minimum"] for _, payload in requests}


def test_reduce_min_takes_the_pooling_unit_as_reduce_max_does():
    """A reduction over the spatial axes of N x H x W x C runs on the channels-last pooling
    unit, its minimum select set for a ReduceMin: no transpose, the same requests."""
    rng = np.random.default_rng(7)
    x = random_values(rng, FORMATS[DType.FLOAT], (2, 3, 4, 5), edge_fraction=0.2)
    with make_device() as dev:
        board = dev.link.transport
        requests = {}
        for name in ("reduce_max", "reduce_min"):
            board.requests.clear()
            assert_same_bits(getattr(dev, name)(x, axes=[1, 2]),
                             getattr(reference, name)(x, axes=[1, 2]), name)
            requests[name] = list(board.requests)
    for name, minimum in [("reduce_max", 0), ("reduce_min", 1)]:
        assert minimum_flags(requests[name], Command.POOL_CHANNELS_LAST) == {minimum}
    assert len(requests["reduce_min"]) == len(requests["reduce_max"])


def cycles_of(dev, name, *args, **kwargs):
    """The device cycles of ``dev.<name>(*args, **kwargs)`` on a virtual board, its result
    checked bit for bit against the golden model's ``name``."""
    board = dev.link.transport.board
    start = board.cycles
    got = getattr(dev, name)(*args, **kwargs)
    cycles = board.cycles - start
    assert_same_bits(got, getattr(reference, name)(*args, **kwargs),
                     f"{dev.url} {name} {[np.shape(a) for a in args]} {kwargs}")
    return cycles


@pytest.mark.parametrize("kind, shape", [("sim", (3, 2, 5)), ("verilator", (64, 3, 700)),
                                         ("verilator", (8, 60, 200))])
def test_reduce_min_takes_exactly_the_cycles_of_reduce_max(kind, shape):
    """The real gateware: the same requests with the minimum select take the same cycles,
    request for request; a tiny tensor in Amaranth's simulator, larger ones compiled (runs
    longer than a frame's worth of beats, NaNs, signed zeros and infinities among them). Axis
    1 is the spatial axis of an N x W x C tensor: the channels-last pooling unit where its
    channels fit (5 and 200 channels; 700 float32 do not, so REDUCE)."""
    rng = np.random.default_rng(11)
    fmt = FORMATS[DType.FLOAT]
    x = random_values(rng, fmt, shape, edge_fraction=0.05)
    with open_virtual_board(kind) as dev:
        cycles = {(name, str(axes)): cycles_of(dev, name, x, axes=axes, keepdims=False)
                  for name in ("reduce_max", "reduce_min") for axes in ([2], [0, 2], None, [1])}
    for axes in ([2], [0, 2], None, [1]):
        assert cycles["reduce_min", str(axes)] == cycles["reduce_max", str(axes)], cycles
    print(kind, shape, cycles)


@pytest.mark.parametrize("kind, shape", [("sim", (3, 2, 5)), ("verilator", (64, 3, 700)),
                                         ("verilator", (2, 3, 33333))])
def test_arg_takes_exactly_the_cycles_of_reduce_max(kind, shape):
    """The real gateware: ArgMax and ArgMin, first and last, take the cycles of the ReduceMax
    over the same innermost axis (float32: a reply of 4 bytes a run either way), runs longer
    than a frame's worth of beats among them."""
    rng = np.random.default_rng(15)
    x = random_values(rng, FORMATS[DType.FLOAT], shape, edge_fraction=0.05)
    with open_virtual_board(kind) as dev:
        maximum = cycles_of(dev, "reduce_max", x, axes=[2], keepdims=False)
        cycles = {(name, last): cycles_of(dev, name, x, axis=2, keepdims=False,
                                          select_last_index=last)
                  for name in ("arg_max", "arg_min") for last in (False, True)}
    assert set(cycles.values()) == {maximum}, (maximum, cycles)


@pytest.mark.parametrize("kind, shapes", [
    ("sim", [(2, 5), (5,)]),
    ("verilator", [(64, 3, 700), (3, 1), (64, 3, 700)]),
    ("verilator", [(40, 333), (40, 333), (40, 333)]),
], ids=["sim broadcast", "verilator broadcast", "verilator fold"])
def test_min_takes_exactly_the_cycles_of_max(kind, shapes):
    """The real gateware: a Min's requests (broadcast passes with LOADs; a fold of same-shape
    operands) take the cycles of the same Max's, request for request, with NaNs, signed zeros
    and infinities among the values."""
    rng = np.random.default_rng(12)
    fmt = FORMATS[DType.FLOAT]
    arrays = [random_values(rng, fmt, shape, edge_fraction=0.05) for shape in shapes]
    with open_virtual_board(kind) as dev:
        cycles = {name: cycles_of(dev, name, *arrays) for name in ("max", "min")}
    assert cycles["min"] == cycles["max"], cycles
    print(kind, shapes, cycles)


def test_min_on_a_board_without_the_broadcast_unit_takes_reduce_with_its_minimum():
    """A core without the broadcast unit (the iCE40's) runs Min as Max: operands expanded on
    the host, a REDUCE of interleaved k-element runs, its minimum select set."""
    rng = np.random.default_rng(13)
    fmt = FORMATS[DType.FLOAT16]
    arrays = [random_values(rng, fmt, s, edge_fraction=0.3) for s in [(4, 6), (6,), (4, 1)]]
    with make_device(replay_depth=0, max_dims=0, max_operands=0) as dev:
        board = dev.link.transport
        board.requests.clear()
        assert_same_bits(dev.min(*arrays), reference.min(*arrays))
        assert minimum_flags(board.requests, Command.REDUCE) == {1}


@pytest.mark.parametrize("version", [5, 6, 7, 8, 9, 10])
def test_a_core_of_another_protocol_version_is_refused_at_open(version):
    """A version-5 core takes REDUCE's minimum byte for padding and would answer a ReduceMin
    with the maximum; a version-6 core refuses MAX's minimum byte; a version-7 core takes
    REDUCE's arg byte for padding and would answer an ArgMax with the maximum; a version-8
    core's IDENTIFY has no reduce_lanes byte (one byte shorter); a version-9 core answers a
    window field above WINDOW_FIELD_MAX with TOO_LARGE where the contract now says
    BAD_PARAMETER; a version-10 core's IDENTIFY has neither window_field_max nor
    window_indices (three bytes shorter): the driver refuses to talk to any of them at all
    (IDENTIFY only), naming the version."""
    board = FakeBoard()
    board.identity = dataclasses.replace(board.identity, version=version)
    with pytest.raises(RuntimeError,
                       match=f"speaks protocol version {version}; this driver speaks "
                             f"{VERSION}$"):
        Device(board)
    assert {code for code, _ in board.requests} == {Command.IDENTIFY}


def test_replayed_operand_shared_by_tiles_is_loaded_once():
    rng = np.random.default_rng(5)
    big = random_values(rng, np.float32, (256, 64))
    row = random_values(rng, np.float32, (1, 64))
    with Device(FakeBoard(), max_frame_bytes=4096) as dev:
        board = dev.link.transport
        board.log.clear()
        assert_same_bits(dev.max(big, row), reference.max(big, row))
        commands = [code for code, _ in board.log]
        assert commands.count(Command.LOAD) == 1
        assert commands.count(Command.MAX) == big.nbytes // 4096


def test_a_column_that_fills_the_buffer_is_cut_into_slices_and_the_row_loaded_once():
    """max(a, row, col) whose column alone (a beat per row) fills the buffer: tiled along the
    rows, each tile one LOAD of the column's slice and one MAX; the row, the same in every
    tile, is loaded once (tiling along the row, as the innermost axis would, reloaded the
    whole column for every slice of the row: 10 to 13 times the cycles of a ReduceMax)."""
    rng = np.random.default_rng(13)
    arrays = [random_values(rng, np.float32, s) for s in [(128, 64), (1, 64), (128, 1)]]
    with make_device(lanes=2, replay_depth=64, max_dims=4, max_operands=4) as dev:
        board = dev.link.transport
        board.log.clear()
        assert_same_bits(dev.max(*arrays), reference.max(*arrays))
        commands = [code for code, _ in board.log]
    # The row is 16 beats, so a tile takes 48 rows of the column: 3 tiles.
    assert commands == [Command.LOAD] + [Command.LOAD, Command.MAX] * 3


def test_more_operands_than_a_pass_folds():
    rng = np.random.default_rng(6)
    arrays = [random_values(rng, np.int16, s) for s in [(4, 5)] * 6 + [(5,), (4, 1), ()]]
    with make_device(max_operands=2) as dev:
        assert_same_bits(dev.max(*arrays), reference.max(*arrays))


EFFICIENCY_CASES = [
    ("reduce all", np.float32, [(1024,)], lambda d, x: d.reduce_max(x)),
    ("reduce rows", np.float16, [(64, 64)], lambda d, x: d.reduce_max(x, axes=[1])),
    ("reduce leading axis", np.uint8, [(64, 64)], lambda d, x: d.reduce_max(x, axes=[0])),
    ("reduce 1 MiB+", np.float64, [(300, 500)], lambda d, x: d.reduce_max(x, axes=[0, 1])),
    ("pool", np.float32, [(2, 4, 16, 16)], lambda d, x: d.global_max_pool(x)),
    ("max same shape", np.float32, [(32, 32), (32, 32)], lambda d, *x: d.max(*x)),
    ("max broadcast", np.int32, [(64, 16), (1, 16), (64, 1)], lambda d, *x: d.max(*x)),
    ("max 3 MiB", np.float32, [(768, 1024), (1024,)], lambda d, *x: d.max(*x)),
]


@pytest.mark.parametrize("name, dtype, shapes, operation", EFFICIENCY_CASES,
                         ids=[c[0] for c in EFFICIENCY_CASES])
def test_link_efficiency_is_at_least_95_percent_from_4_kib(fake_device, name, dtype,
                                                           shapes, operation):
    rng = np.random.default_rng(7)
    arrays = [random_values(rng, dtype, s, edge_fraction=0.01) for s in shapes]
    assert max(a.nbytes for a in arrays) >= 4096
    link = fake_device.link
    before = link.bytes_written + link.bytes_read
    result = operation(fake_device, *arrays)
    wire = link.bytes_written + link.bytes_read - before
    assert_same_bits(result, operation(reference, *arrays))
    payload = sum(a.nbytes for a in arrays) + result.nbytes
    assert payload / wire >= 0.95, f"{name}: {payload} payload bytes in {wire} wire bytes"


@pytest.mark.parametrize("shapes", [[(256, 512), (1, 512)], [(4, 64, 512), (4, 1, 512)],
                                    [(8, 2048), (8, 1), (1, 2048)]])
def test_operands_larger_than_the_buffer_are_loaded_once(shapes):
    """Replayed operands beyond a 1 KiB buffer are tiled along their own axes: still >= 95%."""
    rng = np.random.default_rng(12)
    arrays = [random_values(rng, np.float32, s, edge_fraction=0.01) for s in shapes]
    with make_device(lanes=2, replay_depth=64, max_dims=4, max_operands=4) as dev:
        before = dev.link.bytes_written + dev.link.bytes_read
        result = dev.max(*arrays)
        wire = dev.link.bytes_written + dev.link.bytes_read - before
    assert_same_bits(result, reference.max(*arrays))
    payload = sum(a.nbytes for a in arrays) + result.nbytes
    assert payload / wire >= 0.95, f"{payload} payload bytes in {wire} wire bytes"


def test_link_efficiency_on_the_virtual_board():
    """The real gateware's capacities (a 1 KiB replay buffer by default): still >= 95%."""
    rng = np.random.default_rng(10)
    a = random_values(rng, np.float32, (32, 32), edge_fraction=0.01)
    row = random_values(rng, np.float32, (1, 32), edge_fraction=0.01)
    with open_virtual_board() as dev:
        for arrays, operation in [((a,), lambda d, x: d.reduce_max(x, axes=[1])),
                                  ((a, row), lambda d, *x: d.max(*x))]:
            before = dev.link.bytes_written + dev.link.bytes_read
            result = operation(dev, *arrays)
            wire = dev.link.bytes_written + dev.link.bytes_read - before
            assert_same_bits(result, operation(reference, *arrays))
            assert (sum(x.nbytes for x in arrays) + result.nbytes) / wire >= 0.95


def test_link_bytes_are_exactly_payload_and_framing(fake_device):
    x = np.arange(1024, dtype=np.float32)
    link = fake_device.link
    before = link.bytes_written + link.bytes_read
    fake_device.reduce_max(x)
    parameters = PARAMETERS[Command.REDUCE].size
    assert link.bytes_written + link.bytes_read - before == \
        x.nbytes + parameters + 4 + 2 * FRAME_OVERHEAD


def test_large_requests_are_split_and_report_progress():
    seen = []
    x = np.random.default_rng(8).standard_normal((3, 1 << 17)).astype(np.float32)  # 1.5 MiB
    with Device(FakeBoard(), max_frame_bytes=1 << 18, progress=lambda d, t: seen.append((d, t))
                ) as dev:
        board = dev.link.transport
        board.log.clear()
        assert_same_bits(dev.reduce_max(x, axes=[1]), reference.reduce_max(x, axes=[1]))
        assert len(board.log) >= 6
    done = [d for d, _ in seen]
    assert done == sorted(done) and seen[-1][0] == seen[-1][1] == x.nbytes + 3 * 4


def test_results_are_new_native_arrays(fake_device):
    x = np.arange(12, dtype=">f4").reshape(3, 4)
    for result in [fake_device.reduce_max(x, axes=[1]), fake_device.max(x, x),
                   fake_device.reduce_max(x, noop_with_empty_axes=True)]:
        assert result.dtype == np.dtype("float32") and result.flags.writeable
        assert not np.shares_memory(result, x)
    assert_same_bits(fake_device.max(x, x[:1]), reference.max(x, x[:1]))


BAD_INPUTS = [
    ("max", (), {}),
    ("max", (np.zeros(2, np.float32), np.zeros(2, np.float64)), {}),
    ("max", (np.zeros(2, bool), np.zeros(2, bool)), {}),
    ("max", (np.zeros((2, 3), np.float32), np.zeros(4, np.float32)), {}),
    ("max", (np.zeros(2, np.complex64),), {}),
    ("reduce_max", (np.zeros((2, 3, 4)),), {"axes": 3}),
    ("reduce_max", (np.zeros((2, 3, 4)),), {"axes": [1, -2]}),
    ("reduce_max", (np.zeros((2, 3)),), {"axes": [0.5]}),
    ("reduce_max", (np.zeros((2, 3)),), {"keepdims": 2}),
    ("reduce_max", (np.zeros(3, np.complex128),), {}),
    ("reduce_min", (np.zeros((2, 3, 4)),), {"axes": 3}),
    ("reduce_min", (np.zeros((2, 3, 4)),), {"axes": [1, -2]}),
    ("reduce_min", (np.zeros((2, 3)),), {"keepdims": 2}),
    ("reduce_min", (np.zeros(3, np.complex128),), {}),
    ("global_max_pool", (np.zeros((2, 3), np.float32),), {}),
    ("global_max_pool", (np.zeros((1, 2, 3), np.int32),), {}),
]


@pytest.mark.parametrize("operator_name, args, kwargs", BAD_INPUTS)
def test_bad_input_is_refused_before_anything_is_sent(fake_device, operator_name, args,
                                                      kwargs):
    board = fake_device.link.transport
    received = board.bytes_received
    with pytest.raises((TypeError, ValueError)) as expected:
        getattr(reference, operator_name)(*args, **kwargs)
    with pytest.raises(expected.type) as got:
        getattr(fake_device, operator_name)(*args, **kwargs)
    assert str(got.value) == str(expected.value)
    assert board.bytes_received == received


def test_dtype_the_device_lacks_is_refused_before_sending():
    with make_device(dtypes=[DType.FLOAT, DType.INT8]) as dev:
        received = dev.link.transport.bytes_received
        with pytest.raises(TypeError, match=r"max\(\): the device at 'FakeBoard' does not "
                                            r"support float64; it supports: float32, int8"):
            dev.max(np.zeros(3), np.ones(3))
        assert dev.link.transport.bytes_received == received
        assert_same_bits(dev.max(np.int8([1, -3])), np.int8([1, -3]))


def test_identity_counters_and_life_cycle():
    board = FakeBoard(lanes=2, replay_depth=64, max_dims=2, max_operands=4)
    with Device(board) as dev:
        assert (dev.identity.lanes, dev.identity.replay_depth, dev.identity.max_dims,
                dev.identity.max_operands) == (2, 64, 2, 4)
        assert set(dev.counters()) == set(COUNTER_NAMES)
        assert "2 lanes" in repr(dev)
    assert board.closed
    with pytest.raises(ValueError, match="is closed"):
        dev.reduce_max(np.zeros(3))
    dev.close()  # idempotent


def test_large_tensors_go_in_few_large_frames():
    """A 4 MiB tensor goes through in as few frames as the frame limit and the replay buffer
    allow, not one per row or element: the request sequence is exact."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 1 << 18)).astype(np.float32)  # 4 MiB
    board = FakeBoard()          # 4 lanes, a replay buffer of 512 beats (16 KiB)
    with Device(board) as dev:
        start = len(board.log)
        assert_same_bits(dev.reduce_max(x, axes=[0]), reference.reduce_max(x, axes=[0]))
        reduce_codes = [code for code, _ in board.log[start:]]
        start = len(board.log)
        assert_same_bits(dev.max(x, x[:1]), reference.max(x, x[:1]))
        max_codes = [code for code, _ in board.log[start:]]
    # ReduceMax: 4 MiB in frames of at most 1 MiB of tensor data.
    assert reduce_codes == [Command.REDUCE] * 4
    # Max with a broadcast row: the 1 MiB row fills the 16 KiB buffer 64 times, so 64 tiles
    # along the row, each one LOAD of the row's slice and one MAX streaming the 4 rows of x.
    assert max_codes == [Command.LOAD, Command.MAX] * 64


@pytest.mark.parametrize("kind", ["sim", "verilator"])
def test_edge_corpus_on_the_virtual_board(kind):
    """A digest of the corpus above through the real gateware, every dtype (the whole corpus
    runs there too: on the compiled board always, on the simulated one marked slow)."""
    with open_virtual_board(kind) as dev:
        check_edge_digest(dev)





# ---- windowed MaxPool through REDUCE -------------------------------------------------------------

POOLS = [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),           # ResNet's stem
    dict(kernel_shape=[2, 2], strides=[2, 2]),                                # VGG: no overlap
    dict(kernel_shape=[2], dilations=[3], pads=[1, 1]),                        # padding-only windows
    dict(kernel_shape=[3, 2], auto_pad="SAME_LOWER", storage_order=1),
    dict(kernel_shape=[2, 2, 2], strides=[1, 2, 1], ceil_mode=True, pads=[0, 1, 0, 1, 0, 0]),
]


def pool_input(rng, fmt, rank):
    shape = {1: (2, 3, 2), 2: (1, 2, 5, 6), 3: (1, 2, 3, 4, 3)}[rank]
    return random_values(rng, fmt, shape, edge_fraction=0.5)


@pytest.mark.parametrize("pool", POOLS, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
def test_max_pool_matches_the_golden_model(device, pool):
    """Every dtype MaxPool takes, edge values (NaN payloads, ±0, infinities, integer extremes)
    at half the positions, values compared as bits and Indices exactly."""
    rng = np.random.default_rng(len(str(pool)))
    for fmt in ALL:
        if fmt.kind == "bool":
            continue
        x = pool_input(rng, fmt, len(pool["kernel_shape"]))
        y, indices = device.max_pool(x, **pool, return_indices=True)
        y_ref, indices_ref = reference.max_pool(x, **pool, return_indices=True)
        assert_same_bits(y, y_ref, str(fmt))
        assert indices.dtype == np.int64 and np.array_equal(indices, indices_ref), str(fmt)
        assert_same_bits(device.max_pool(x, **pool), y_ref, str(fmt))


def strided_room(rng, shape, fmt):
    """A view of ``shape`` in a larger array (every other element of its last axis, its first
    two axes swapped in memory), filled with random bits: ``(room, the larger array, where
    the larger array is not the room)``."""
    n, c, *spatial = shape
    whole = random_values(rng, fmt, (c, n, *spatial[:-1], 2 * spatial[-1] + 1))
    outside = np.ones(whole.shape, bool)
    np.swapaxes(outside, 0, 1)[..., 1::2] = False
    return np.swapaxes(whole, 0, 1)[..., 1::2], whole, outside


@pytest.mark.parametrize("route", [None, Command.REDUCE], ids=["planned", "REDUCE"])
@pytest.mark.parametrize("pool", POOLS, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
def test_max_pool_writes_into_out_as_it_lies(device, pool, route):
    """``out``, a strided view into a larger array: the result's bits land in it (and are
    returned as it), Indices as without it, every other element of the larger array is left
    as it was; through the route the planner takes and through ``REDUCE``."""
    rng = np.random.default_rng(len(str(pool)) + 1)
    for fmt in ALL:
        if fmt.kind == "bool":
            continue
        x = pool_input(rng, fmt, len(pool["kernel_shape"]))
        y_ref, indices_ref = reference.max_pool(x, **pool, return_indices=True)
        for indices in (False, True):
            out, whole, outside = strided_room(rng, y_ref.shape, fmt)
            before = whole.copy()
            got = device.max_pool(x, **pool, return_indices=indices, route=route, out=out)
            y = got[0] if indices else got
            assert y is out
            assert_same_bits(out, y_ref, str(fmt))
            if indices:
                assert np.array_equal(got[1], indices_ref), str(fmt)
            assert_same_bits(whole[outside], before[outside], f"{fmt}: outside out")


def test_max_pool_writes_each_tile_into_out():
    """A pool the unit takes in 14 tiles of output columns: each tile's maxima go into
    ``out`` (a strided view), the bits the golden model's."""
    rng = np.random.default_rng(5)
    fmt = FORMATS[DType.FLOAT16]
    x = random_values(rng, fmt, (1, 4, 2, 40), edge_fraction=0.3)
    attributes = dict(kernel_shape=[2, 3], strides=[1, 1], pads=[0, 1, 1, 1])
    want = reference.max_pool(x, **attributes)
    out, *_ = strided_room(rng, want.shape, fmt)
    with Device(FakeBoard(**SMALL_WINDOW)) as device:
        assert device.max_pool(x, **attributes, out=out) is out
        assert device.last_max_pool_route == Command.MAX_POOL
    assert_same_bits(out, want)


@pytest.mark.parametrize("route", [None, Command.REDUCE], ids=["planned", "REDUCE"])
def test_max_pool_into_out_that_overlaps_its_input(route):
    """``out`` sharing memory with ``x`` (``x`` itself, and a shifted view of the same
    buffer), as numpy's ``out``: the golden model's bits, through a plan of several batches
    of tiles on the MAX_POOL route (later tiles read input earlier ones would overwrite) and
    through REDUCE."""
    rng = np.random.default_rng(17)
    fmt = FORMATS[DType.FLOAT]
    for shape, attributes, view in [
            ((1, 3, 9, 30), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), lambda b: b),
            ((1, 2, 10, 31), dict(kernel_shape=[2, 2]), lambda b: b[:, :, 1:, 1:]),
            ((2, 2, 12, 34), dict(kernel_shape=[2, 2]), lambda b: b[:, :, :-1, :-1])]:
        buffer = random_values(rng, fmt, shape, edge_fraction=0.2)
        x = buffer
        want = reference.max_pool(x, **attributes, return_indices=True)
        board = CountingBoard(**SMALL_WINDOW)
        with Device(board, max_frame_bytes=512) as device:
            for indices in (False, True):
                x = buffer.copy()
                out = view(x)
                got = device.max_pool(x, **attributes, return_indices=indices, route=route,
                                      out=out)
                assert (got[0] if indices else got) is out
                assert_same_bits(out, want[0], f"{shape} {attributes}")
                if indices:
                    np.testing.assert_array_equal(got[1], want[1])
                assert device.last_max_pool_route == (route or Command.MAX_POOL)
        if route is None:
            assert len({tuple(sorted(b.items())) for b in board.blocks}) > 1


@pytest.mark.parametrize("route", [None, Command.REDUCE], ids=["planned", "REDUCE"])
def test_max_pool_of_no_images_is_empty(route):
    """N = 0 or C = 0: the empty result (and empty Indices) of the golden model's shape,
    into ``out`` too, without a request."""
    board = FakeBoard()
    with Device(board) as device:
        sent = len(board.log)
        for shape, kernel in [((0, 3, 8, 8), [2, 2]), ((1, 0, 8, 8), [3, 3]),
                              ((2, 0, 4), [2]), ((0, 0, 5, 5, 5), [2, 2, 2])]:
            x = np.zeros(shape, np.float32)
            y_ref, indices_ref = reference.max_pool(x, kernel, return_indices=True)
            y, indices = device.max_pool(x, kernel, return_indices=True, route=route)
            assert y.shape == y_ref.shape and y.dtype == y_ref.dtype
            assert indices.shape == indices_ref.shape and indices.dtype == np.int64
            assert device.last_max_pool_route is None
            out = np.empty(y_ref.shape, np.float32)
            assert device.max_pool(x, kernel, route=route, out=out) is out
        assert len(board.log) == sent


def test_max_pool_refuses_an_out_that_does_not_fit_before_sending():
    board = FakeBoard()
    with Device(board) as dev:
        sent = len(board.log)
        x = np.zeros((1, 2, 4, 4), np.float32)
        for out, error, words in [
                ([[0.0]], TypeError, "numpy.ndarray, not list"),
                (np.zeros((1, 2, 2, 2), np.float64), TypeError, "float32"),
                (np.zeros((1, 2, 2, 2), ">f4"), TypeError, "native byte order"),
                (np.zeros((1, 2, 3, 2), np.float32), ValueError, r"\(1, 2, 2, 2\)"),
                (np.zeros((1, 2, 2, 2), np.float32)[...], None, None)]:
            if error is None:
                out.flags.writeable = False
                error, words = ValueError, "read-only"
            with pytest.raises(error, match=words):
                dev.max_pool(x, [2, 2], strides=[2, 2], out=out)
        assert len(board.log) == sent


def test_max_pool_nan_at_every_window_position(fake_device):
    """A NaN at each of the 9 positions of a 3x3 window: the canonical NaN out and the index
    of the NaN, whatever else the window holds (±0 ties elsewhere)."""
    for position in range(9):
        x = np.full((1, 1, 3, 3), -0.0, np.float32)
        x[0, 0, 1, 1] = 0.0
        x.reshape(-1)[position] = np.uint32(0xFFC00001).view(np.float32)
        y, indices = fake_device.max_pool(x, [3, 3], return_indices=True)
        assert reference.bits_of(y).item() == 0x7FC00000
        assert indices.item() == position


def test_max_pool_refuses_bad_arguments_before_sending():
    board = FakeBoard()
    with Device(board) as dev:
        sent = len(board.log)
        x = np.zeros((1, 1, 4, 4), np.float32)
        with pytest.raises(ValueError, match="kernel_shape"):
            dev.max_pool(x, [0, 2])
        with pytest.raises(ValueError, match="pads"):
            dev.max_pool(x, [2, 2], pads=[1, 1, 1], )
        with pytest.raises(TypeError, match="bool"):
            dev.max_pool(np.zeros((1, 1, 4), np.bool_), [2])
        assert len(board.log) == sent
