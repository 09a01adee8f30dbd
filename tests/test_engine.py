"""The command engine: frames built with ``maxaccel.contract.wire`` through the real core.

Results are checked bit-exactly against the golden model; every status code, garbage, corrupted
and truncated frames and back-to-back requests go through the virtual board (the core in
Amaranth's simulator); backpressure and idle input go through ``run_streams``; the engine's
building blocks (packer, unpacker, multiplier, frame receiver) have their own stream tests.
"""

import itertools
import random
import struct

import ml_dtypes
import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from maxaccel.hdl.beat import beat_layout
from maxaccel.hdl.kit import SaturatingMultiplier, at_least
from maxaccel.hdl.framing import FrameReceiver
from maxaccel.hdl.packing import RowPacker, RowUnpacker
from maxaccel.hdl.linkword import WordSplitter, link_signature
from maxaccel.hdl.top import Core
from maxaccel.contract.dtypes import FORMATS, DType, format_of
from maxaccel.contract.pooling import (encode_window_reply, interleave_group_images,
                                       resolve_max_pool)
from maxaccel.host.plan import plan_broadcast, plan_fold
from maxaccel.host.pool_window import max_pool_by_window, plan_window_pool
from maxaccel.contract.wire import (COUNTERS, COUNTER_NAMES, Capacities, Command, DATA_COMMANDS,
                                    FrameParser, Identity, MAX_COUNT, MAX_PAYLOAD, MaxParameters,
                                    PARAMETERS, Status, crc32, encode_frame, parameter_block,
                                    WINDOW_FIELD_MAX, MAGIC, quantities, request_verdict)
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.streams import (STALL_PATTERNS, beats_from_rows, bytes_from_words,
                                  rows_from_beats, run_streams, shared_design,
                                  words_from_bytes)
from maxaccel.sim.values import edge_bits, random_values
from maxaccel.sim.virtual_board import CORE_DEFAULTS, VirtualBoard

from boards import SMALL_CORE, small_compiled_board

BOARD = SMALL_CORE
LANES = BOARD["lanes"]
TIMEOUT_CYCLES = BOARD["frame_timeout_cycles"]
FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64]
INTEGERS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
            np.bool_]


def dtype_name(dtype):
    return np.dtype(dtype).name


def open_board(kind):
    """The board of ``BOARD`` (2 lanes, a byte link, small buffers: tiles and chained passes
    at small sizes) simulated (``sim``) or compiled with Verilator (``compiled``: the same
    core, the same bytes in the same cycles, about a hundred times faster), or the default
    compiled board (``verilator``: the NiteFury's core, 4 lanes and its 32-byte link word, so
    the engine's cycle counts are checked at a byte and at 32 bytes; the model is the one
    ``open_device("verilator")`` builds for other tests)."""
    if kind == "sim":
        return VirtualBoard(**BOARD)
    from maxaccel.sim.verilator_board import VerilatorBoard
    return small_compiled_board() if kind == "compiled" else VerilatorBoard()


def parameters_of(board):
    """The :class:`~maxaccel.hdl.top.Core` parameters ``board`` was opened with."""
    if isinstance(board, VirtualBoard) or board.link_bytes == CORE_DEFAULTS["link_bytes"]:
        return BOARD
    from maxaccel.sim.verilator_board import VERILATOR_DEFAULTS
    return VERILATOR_DEFAULTS


#: The boards every test of the engine runs on. ``BOARD``'s core runs compiled in CI, and in
#: Amaranth's simulator too with ``--slow``: the two answer with the same bytes in the
#: same cycles (``tests/test_verilator_board.py``), and simulated the engine's tests took
#: about 230 s of CPU, compiled 4. The simulated board still runs the tests that take a
#: ``kind`` and the core's own tests under stalls below.
BOARD_KINDS = [pytest.param("sim", marks=pytest.mark.slow(
    reason="the engine's tests in Amaranth's simulator, about 230 s of CPU")),
    "compiled", "verilator"]


@pytest.fixture(scope="module", params=BOARD_KINDS)
def board(request):
    """One board for the module of each of :data:`BOARD_KINDS` (building the simulator costs
    a fraction of a second, the compiled models come from the cache)."""
    with open_board(request.param) as board:
        yield board


@pytest.fixture
def clean_board(board):
    """The shared board, checked to be idle and empty before and after the test."""
    assert board.settle(timeout_cycles=20 * TIMEOUT_CYCLES)
    board.reset_input()
    yield board
    assert board.settle(timeout_cycles=20 * TIMEOUT_CYCLES)
    assert board.in_waiting == 0, "the board sent bytes nobody expected"


# ---- requests and replies ----------------------------------------------------------------------

def replies(board, count, *, limit=1 << 20, timeout_cycles=100_000):
    """Read until ``count`` frames came or the board is quiescent; return every frame."""
    parser, frames = FrameParser(), []
    while len(frames) < count:
        data = board.read(limit, timeout_cycles=timeout_cycles)
        if not data:
            break
        frames += parser.feed(data)
    assert parser.pending() == 0, "a partial frame was left over"
    assert parser.skipped_bytes == 0 and parser.header_errors == 0 and parser.frame_errors == 0
    return frames


def exchange(board, code, payload=b"", seq=1):
    """Send one request, return its one reply (checking code, sequence number, frame check)."""
    board.write(encode_frame(code, seq, payload))
    frames = replies(board, 1)
    assert len(frames) == 1, f"expected one reply, got {frames}"
    (frame,) = frames
    assert (frame.code, frame.seq, frame.intact) == (code, seq, True)
    return frame


def expect_status(frame, status, length=0):
    assert Status(frame.status) == status, f"status {Status(frame.status)!r}, expected {status!r}"
    assert len(frame.payload) == length


def expect_refusal(board, code, payload, status):
    """The contract's verdict and the engine's answer are both ``status`` (no payload)."""
    assert request_verdict(code, payload, board.identity) == status
    expect_status(exchange(board, code, payload), status)


def reduce_payload(x, minimum=0):
    fmt = format_of(x.dtype)
    runs, run_length = x.shape
    return PARAMETERS[Command.REDUCE].pack(dtype=fmt.dtype, runs=runs, run_length=run_length,
                                           minimum=minimum) + x.tobytes()


def pool_payload(x, minimum=0):
    """``x`` is ``N x C x D...``; the request carries it channels-last (its minima with
    ``minimum``)."""
    fmt = format_of(x.dtype)
    images, channels = x.shape[:2]
    pixels = int(np.prod(x.shape[2:]))
    channels_last = np.moveaxis(x.reshape(images, channels, pixels), 1, 2)
    return (PARAMETERS[Command.POOL_CHANNELS_LAST].pack(fmt.dtype, images, pixels, channels,
                                                        minimum)
            + np.ascontiguousarray(channels_last).tobytes())


def max_payload(identity, plan, dtype, streamed=None, minimum=False):
    """The ``MAX`` request of a plan (the host's ``MaxParameters``, a Min's with ``minimum``),
    with its streamed operand."""
    block = MaxParameters.from_plan(plan, dtype, minimum).encode(identity.max_dims,
                                                                 identity.max_operands)
    return block + (b"" if streamed is None else np.ascontiguousarray(streamed).tobytes())


def device_max(board, *arrays, seq=10, minimum=False):
    """Max (with ``minimum``, Min) of ``arrays`` on the board: a LOAD per replayed operand,
    then MAX."""
    identity = board.identity
    fmt = format_of(arrays[0].dtype)
    plan = plan_broadcast([a.shape for a in arrays], fmt.nbytes, lanes=identity.lanes,
                          depth=identity.replay_depth, max_dims=identity.max_dims,
                          max_operands=identity.max_operands)
    for operand in plan.replayed:
        rows = int(np.prod(operand.groups[:-1]))
        payload = (PARAMETERS[Command.LOAD].pack(fmt.dtype, operand.base, rows,
                                                 operand.groups[-1])
                   + np.ascontiguousarray(arrays[operand.index]).tobytes())
        expect_status(exchange(board, Command.LOAD, payload, seq), Status.OK)
        seq += 1
    streamed = arrays[plan.streamed.index] if plan.streamed else None
    frame = exchange(board, Command.MAX,
                     max_payload(identity, plan, fmt.dtype, streamed, minimum), seq)
    expect_status(frame, Status.OK, int(np.prod(plan.output_shape)) * fmt.nbytes)
    return np.frombuffer(frame.payload, fmt.numpy_dtype).reshape(plan.output_shape)


# ---- IDENTIFY and COUNTERS ---------------------------------------------------------------------

def test_identify_reports_the_gateware(clean_board):
    frame = exchange(clean_board, Command.IDENTIFY, seq=200)
    expect_status(frame, Status.OK, Identity.STRUCT.size)
    identity = Identity.decode(frame.payload)
    assert identity == clean_board.identity
    made = parameters_of(clean_board)
    assert identity.lanes == made["lanes"]
    assert identity.dtypes == frozenset(int(code) for code in FORMATS)
    assert ((identity.replay_depth, identity.max_dims, identity.max_operands)
            == (made["replay_depth"], made["max_dims"], made["max_operands"]))
    assert identity.pool_channels >= made["pool_channels"]
    assert identity.frame_timeout_cycles == made["frame_timeout_cycles"]


@pytest.mark.parametrize("kind", ["sim", "verilator"])
def test_counters_count_link_errors(kind):
    with open_board(kind) as board:
        def counters():
            frame = exchange(board, Command.COUNTERS, seq=77)
            expect_status(frame, Status.OK, COUNTERS.size)
            return dict(zip(COUNTER_NAMES, COUNTERS.unpack(frame.payload)))

        assert counters() == dict.fromkeys(COUNTER_NAMES, 0)
        # A corrupted header (ignored), a corrupted payload (CRC_ERROR), a truncated frame.
        bad_header = bytearray(encode_frame(Command.IDENTIFY, 1))
        bad_header[3] ^= 0x10
        board.write(bad_header)
        assert board.read(1) == b""
        bad_payload = bytearray(encode_frame(Command.COUNTERS, 2))
        bad_payload[12] ^= 1       # the status byte of the request's trailer
        board.write(bad_payload)
        expect_status(replies(board, 1)[0], Status.CRC_ERROR)
        truncated = encode_frame(Command.REDUCE, 3, reduce_payload(np.zeros((2, 3), np.int8)))
        board.write(truncated[:-3])
        expect_status(replies(board, 1)[0], Status.TIMEOUT, 2)
        assert counters() == {"uart_framing_errors": 0, "uart_overruns": 0,
                              "frame_check_failures": 1, "header_check_failures": 1,
                              "frame_timeouts": 1}


# ---- results against the golden model ----------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + INTEGERS, ids=dtype_name)
def test_reduce_matches_the_golden_model(clean_board, dtype):
    fmt = format_of(dtype)
    rng = np.random.default_rng(fmt.dtype)
    beat = 8 * clean_board.identity.lanes
    # Runs shorter than, equal to and longer than a beat, by the dtype's element size.
    for runs, run_length in [(3, 5), (2, beat // fmt.nbytes), (1, 2 * beat // fmt.nbytes + 1)]:
        x = random_values(rng, fmt, (runs, run_length))
        frame = exchange(clean_board, Command.REDUCE, reduce_payload(x), seq=runs)
        expect_status(frame, Status.OK, runs * fmt.nbytes)
        assert_same_bits(np.frombuffer(frame.payload, fmt.numpy_dtype),
                         reference.reduce_max(x, axes=[1], keepdims=False),
                         f"REDUCE {runs} x {run_length} {fmt.numpy_dtype}")


@pytest.mark.parametrize("shape", [(4, 0), (0, 3), (0, 0), (1, 1)])
def test_reduce_edge_shapes(clean_board, shape):
    """Empty runs give the empty-set value; no runs give an empty reply."""
    for dtype in (np.float32, np.int16, np.bool_):
        fmt = format_of(dtype)
        x = random_values(np.random.default_rng(1), fmt, shape)
        frame = exchange(clean_board, Command.REDUCE, reduce_payload(x))
        expect_status(frame, Status.OK, shape[0] * fmt.nbytes)
        assert_same_bits(np.frombuffer(frame.payload, fmt.numpy_dtype),
                         reference.reduce_max(x, axes=[1], keepdims=False))


def _minimum_runs(fmt, rng, beat):
    """Tiny REDUCE runs that decide a minimum at their edges: for floats a NaN (each pattern
    of the format in turn) first, last and inside, -0 among +0 and +0 among -0 both ways,
    -inf and +inf, subnormals; for integers and bool the extremes; random values around
    them. A run longer than a beat, so the accumulator folds beats too."""
    edges = edge_bits(fmt)
    nans = reference.bits_of(edges[reference.is_nan(edges)]).astype(fmt.uint_dtype)
    length = max(3, beat // fmt.nbytes + 1)
    runs = [random_values(rng, fmt, length) for _ in range(4)]
    bits = [reference.bits_of(run).astype(fmt.uint_dtype) for run in runs]
    if fmt.is_float:
        for k, position in enumerate((0, length - 1, length // 2)):
            bits[k][position] = nans[k % len(nans)]
        bits.append(np.full(length, fmt.sign_mask, fmt.uint_dtype))        # -0 ...
        bits[-1][length // 2] = 0                                          # ... +0 among them
        bits.append(np.zeros(length, fmt.uint_dtype))                       # +0 ...
        bits[-1][-1] = fmt.sign_mask                                       # ... -0 last
        infinity = ((1 << fmt.exponent_bits) - 1) << fmt.mantissa_bits
        bits.append(np.array([infinity, 1, fmt.sign_mask | infinity, fmt.sign_mask | 1],
                             fmt.uint_dtype))                              # ±inf, ±subnormal
        bits.append(np.array([1, fmt.sign_mask | 1, 2], fmt.uint_dtype))   # subnormals
    else:
        bits.append(np.full(length, fmt.greatest, fmt.uint_dtype))
        bits.append(np.array([fmt.greatest, fmt.lowest, fmt.greatest], fmt.uint_dtype))
    return [reference.from_bits(b, fmt) for b in bits]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64,
                                   np.int8, np.uint16, np.int64, np.uint64, np.bool_],
                         ids=dtype_name)
def test_reduce_minimum_matches_the_golden_model(clean_board, dtype):
    """REDUCE with ``minimum`` 1 is ReduceMin, bit for bit, on edge-valued runs and empty
    runs; each request takes exactly the cycles of the same request's maximum."""
    fmt = format_of(dtype)
    rng = np.random.default_rng(300 + fmt.dtype)
    beat = 8 * clean_board.identity.lanes
    requests = [np.stack([run]) for run in _minimum_runs(fmt, rng, beat)]
    requests.append(random_values(rng, fmt, (3, 0)))              # empty runs
    for index, x in enumerate(requests):
        cycles, results = [], []
        for minimum in (0, 1):
            start = clean_board.cycles
            frame = exchange(clean_board, Command.REDUCE, reduce_payload(x, minimum), seq=index)
            cycles.append(clean_board.cycles - start)
            expect_status(frame, Status.OK, x.shape[0] * fmt.nbytes)
            results.append(np.frombuffer(frame.payload, fmt.numpy_dtype))
        what = f"REDUCE {x.shape} {fmt.numpy_dtype} {reference.bits_of(x).tolist()}"
        assert_same_bits(results[0], reference.reduce_max(x, axes=[1], keepdims=False), what)
        assert_same_bits(results[1], reference.reduce_min(x, axes=[1], keepdims=False),
                         what + " minimum")
        assert cycles[1] == cycles[0], f"{what}: {cycles[1]} cycles, the maximum {cycles[0]}"


def arg_payload(x, minimum=0):
    fmt = format_of(x.dtype)
    runs, run_length = x.shape
    return PARAMETERS[Command.REDUCE].pack(dtype=fmt.dtype, runs=runs, run_length=run_length,
                                           minimum=minimum, arg=1) + x.tobytes()


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64,
                                   np.int8, np.uint16, np.int64, np.uint64, np.bool_],
                         ids=dtype_name)
def test_arg_matches_the_golden_model_in_the_cycles_of_reduce(clean_board, dtype):
    """REDUCE with ``arg`` 1 is ArgMax, with ``minimum`` 1 ArgMin: each run's byte offset of
    the golden model's first position (a NaN first, last or inside; -0 and +0 distinct; ties
    at both ends of a beat), for runs of one element up to more than a beat, several runs a
    request; each request takes the cycles of the maximum of the same runs when their replies
    are as long."""
    fmt = format_of(dtype)
    rng = np.random.default_rng(500 + fmt.dtype)
    beat = 8 * clean_board.identity.lanes
    runs = _minimum_runs(fmt, rng, beat)
    length = len(runs[0])
    ties = reference.bits_of(random_values(rng, fmt, length)).astype(fmt.uint_dtype)
    ties[[1, length - 1]] = fmt.greatest
    runs.append(reference.from_bits(ties, fmt))
    requests = [np.stack([run]) for run in runs]
    requests += [np.stack(runs[:4]), random_values(rng, fmt, (5, 1)),
                 random_values(rng, fmt, (2, 2 * beat // fmt.nbytes + 3), edge_fraction=0.3)]
    for index, x in enumerate(requests):
        what = f"REDUCE arg {x.shape} {fmt.numpy_dtype} {reference.bits_of(x).tolist()}"
        for minimum in (0, 1):
            start = clean_board.cycles
            frame = exchange(clean_board, Command.REDUCE, arg_payload(x, minimum), seq=index)
            cycles = clean_board.cycles - start
            expect_status(frame, Status.OK, 4 * x.shape[0])
            find = reference.arg_min if minimum else reference.arg_max
            np.testing.assert_array_equal(np.frombuffer(frame.payload, "<u4"),
                                          find(x, axis=1, keepdims=False) * fmt.nbytes,
                                          what + f" minimum {minimum}")
            if fmt.nbytes == 4:
                start = clean_board.cycles
                exchange(clean_board, Command.REDUCE, reduce_payload(x, minimum), seq=index)
                assert cycles == clean_board.cycles - start, what


@pytest.mark.parametrize("dtype", FLOATS + [np.int8, np.uint16, np.int32, np.uint64, np.bool_],
                         ids=dtype_name)
def test_pool_channels_last_matches_the_golden_model(clean_board, dtype):
    fmt = format_of(dtype)
    rng = np.random.default_rng(100 + fmt.dtype)
    capacity = clean_board.identity.pool_channels * 8 // fmt.nbytes
    for shape in [(2, 3, 2, 2), (1, capacity, 3), (2, 1, 1, 1, 2)]:
        x = random_values(rng, fmt, shape)
        cycles = []
        for minimum in (0, 1):
            start = clean_board.cycles
            frame = exchange(clean_board, Command.POOL_CHANNELS_LAST, pool_payload(x, minimum))
            cycles.append(clean_board.cycles - start)
            expect_status(frame, Status.OK, shape[0] * shape[1] * fmt.nbytes)
            spatial = tuple(range(2, x.ndim))
            expected = (reference.reduce_min(x, axes=spatial) if minimum
                        else reference.global_max_pool(x) if fmt.is_float
                        else reference.reduce_max(x, axes=spatial))
            assert_same_bits(np.frombuffer(frame.payload, fmt.numpy_dtype).reshape(
                expected.shape), expected, f"POOL {shape} {fmt.numpy_dtype} minimum={minimum}")
        assert cycles[1] == cycles[0], f"POOL {shape}: minimum {cycles[1]}, maximum {cycles[0]}"


MAX_CASES = [
    [(3, 5), (3, 5)],              # streamed + one replayed
    [(3, 5), (5,), (3, 1)],        # streamed, a broadcast row, a splat column
    [(2, 1, 4), (3, 1), (1, 3, 4)],  # nothing of the full shape: all replayed
    [(7,)],                        # a single operand (NaNs made canonical)
    [(), (2, 3)],                  # a scalar
]


def device_fold(board, *arrays, seq=10, minimum=False):
    """Max (with ``minimum``, Min) of same-shape 1-D ``arrays`` on the board: the ``MAX``
    requests of their fold, each checked OK, the replies joined."""
    fmt = format_of(arrays[0].dtype)
    got = []
    for fold, payload in fold_requests(board.identity, arrays, minimum):
        frame = exchange(board, Command.MAX, payload, seq=seq)
        expect_status(frame, Status.OK, fold.rows * fold.row_length * fmt.nbytes)
        got.append(np.frombuffer(frame.payload, fmt.numpy_dtype))
    return np.concatenate(got)


def fold_requests(identity, arrays, minimum=False):
    """The ``MAX`` requests of a fold of same-shape 1-D ``arrays`` (the host's plan_fold), a
    Min's with ``minimum``."""
    fmt = format_of(arrays[0].dtype)
    for fold in plan_fold(arrays[0].size, len(arrays), fmt.nbytes, identity.lanes, 1 << 20):
        block = fold.parameters(fmt.dtype, len(arrays), identity.max_dims, minimum).encode(
            identity.max_dims, identity.max_operands)
        yield fold, block + fold.interleave(arrays).tobytes()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16,
                                   np.int8, np.uint32, np.int64], ids=dtype_name)
def test_fold_matches_the_golden_model(clean_board, dtype):
    """MAX with S >= 2 streamed operands interleaved by row: rows of one beat and a shorter
    last row, NaNs and signed zeros anywhere."""
    fmt = format_of(dtype)
    rng = np.random.default_rng(300 + fmt.dtype)
    per_beat = 8 * clean_board.identity.lanes // fmt.nbytes
    for count, elements in [(2, 2 * per_beat + 1), (3, per_beat), (5, 3)]:
        arrays = [random_values(rng, fmt, (elements,), edge_fraction=0.3) for _ in range(count)]
        assert_same_bits(device_fold(clean_board, *arrays, seq=count), reference.max(*arrays),
                         f"fold of {count} x {elements} {fmt.numpy_dtype}")


@pytest.mark.parametrize("count", [2, 3])
def test_fold_takes_one_link_word_per_beat(clean_board, count):
    """Cycles per element, exactly: one more output row of a fold (S beats of input) costs S
    link words on the board's link, one cycle each (the data starts on a word: the block is
    padded), so a float32 fold at 16 bytes a cycle is S / 4 cycles per output element. (Both
    sizes have counts of the same bit length: the checks' bit-serial products cost the same.)"""
    identity, link = clean_board.identity, clean_board.link_bytes
    beat = 8 * identity.lanes
    rows = 8
    cycles = []
    for n in (2 * rows, 3 * rows):
        arrays = [np.arange(n * beat // 4, dtype=np.float32) + k for k in range(count)]
        ((_, payload),) = fold_requests(identity, arrays)
        start = clean_board.cycles
        expect_status(exchange(clean_board, Command.MAX, payload), Status.OK, n * beat)
        cycles.append(clean_board.cycles - start)
    assert cycles[1] - cycles[0] == rows * count * -(-beat // link)


POOLS = [   # (spatial shape, MaxPool attributes)
    ((5, 6), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((7,), dict(kernel_shape=[2], strides=[2], ceil_mode=True)),
    ((3, 4, 5), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], dilations=[1, 1, 2],
                     pads=[0, 1, 1, 1, 1, 0])),
]


def device_max_pool(board, x, attributes, return_indices, seq=0):
    """MaxPool of ``x`` through the board's MAX_POOL, as the host plans and packs it."""
    fmt = format_of(x.dtype)
    geometry = resolve_max_pool(x.shape, **attributes)
    plan = plan_window_pool(geometry, fmt, board.identity, 1 << 20)
    assert plan is not None, f"{x.shape} {attributes} does not fit {board.identity}"

    def request(payload):
        frame = exchange(board, Command.MAX_POOL, payload, seq=seq)
        fields = PARAMETERS[Command.MAX_POOL].unpack(payload)
        expect_status(frame, Status.OK, quantities(
            Command.MAX_POOL, fields, Capacities.of(board.identity), fmt.nbytes)["reply_bytes"])
        return frame.payload
    return max_pool_by_window(x, fmt, plan, request, return_indices)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16,
                                   np.int8, np.uint8, np.int64], ids=dtype_name)
def test_max_pool_matches_the_golden_model(clean_board, dtype):
    """MAX_POOL through the whole core: groups of images side by side (and a last group filled
    up with zero images), NaNs, signed zeros and integer extremes, values and Indices."""
    fmt = format_of(dtype)
    rng = np.random.default_rng(400 + fmt.dtype)
    for (spatial, attributes), indices in zip(POOLS, (True, False, True)):
        x = random_values(rng, fmt, (1, 3) + spatial, edge_fraction=0.3)
        got = device_max_pool(clean_board, x, attributes, indices)
        want = reference.max_pool(x, **attributes, return_indices=indices)
        what = f"MAX_POOL {spatial} {attributes} {fmt.numpy_dtype}"
        if indices:
            assert_same_bits(got[0], want[0], what)
            np.testing.assert_array_equal(got[1], want[1], err_msg=what)
        else:
            assert_same_bits(got, want, what)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.float64], ids=str)
def test_max_pool_takes_one_link_word_per_group_element(clean_board, dtype):
    """Cycles per element, exactly: one more group of images (as many as the pooling unit's
    lanes hold) costs one row of ``group`` elements per spatial element, each row
    ``ceil(group * itemsize / link_bytes)`` link words at a word per cycle, whatever the
    element size (3 x 3 stride 2 on an even size, so the units add no bubble). The reply (a
    quarter of the bytes) goes out meanwhile."""
    identity, link = clean_board.identity, clean_board.link_bytes
    itemsize = np.dtype(dtype).itemsize
    group = Capacities.of(identity).window_bytes // itemsize
    attributes = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cycles = []
    for groups in (2, 3):
        x = (np.arange(groups * group * 48) % 101).astype(dtype).reshape(1, groups * group, 6, 8)
        start = clean_board.cycles
        device_max_pool(clean_board, x, attributes, False)
        cycles.append(clean_board.cycles - start)
    assert cycles[1] - cycles[0] == 48 * -(-group * itemsize // link)


@pytest.mark.parametrize("kind", ["sim", "verilator"])
def test_a_fresh_core_answers_every_command_before_its_first_max_pool(kind):
    """The window units are clocked only during MAX_POOL: a core that has never pooled (its
    units still settling from reset) must not make other commands wait for them."""
    with open_board(kind) as board:
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        frame = exchange(board, Command.REDUCE, reduce_payload(x))
        expect_status(frame, Status.OK, 3 * 4)
        assert np.frombuffer(frame.payload, "<f4").tolist() == [3.0, 7.0, 11.0]


def test_max_pool_window_of_padding_only_is_refused_after_the_data(clean_board):
    """A window of padding only past the first (which the rules refuse up front) is found by
    the units: the reply has its full length and the status BAD_PARAMETER, as the contract's
    late rule says; the next request is answered normally."""
    block = PARAMETERS[Command.MAX_POOL]
    fields = dict(dtype=int(DType.FLOAT), group=1, groups=1, indices=0)
    for axis in range(3):
        fields.update({f"axis[{axis}].{name}": 1 for name in ("size", "out", "kernel",
                                                              "stride", "dilation")})
    # Input 4, kernel 2, dilation 2, stride 5, pad 0: window 1 has taps 5 and 7.
    fields.update({"axis[2].size": 4, "axis[2].out": 2, "axis[2].kernel": 2,
                   "axis[2].stride": 5, "axis[2].dilation": 2})
    payload = block.pack(**fields) + np.arange(4, dtype="<f4").tobytes()
    assert request_verdict(Command.MAX_POOL, payload, clean_board.identity) \
        == Status.BAD_PARAMETER
    expect_status(exchange(clean_board, Command.MAX_POOL, payload), Status.BAD_PARAMETER, 2 * 4)
    fields["axis[2].out"] = 1
    payload = block.pack(**fields) + np.arange(4, dtype="<f4").tobytes()
    frame = exchange(clean_board, Command.MAX_POOL, payload, seq=1)
    expect_status(frame, Status.OK, 4)
    assert np.frombuffer(frame.payload, "<f4").tolist() == [2.0]


def test_reduce_of_one_beat_runs_takes_one_link_word_per_run(clean_board):
    """REDUCE's data starts on a link word too: a run of one beat is one word, one cycle."""
    link, beat = clean_board.link_bytes, 8 * clean_board.identity.lanes
    cycles = []
    for runs in (16, 32 - 8):
        x = np.arange(runs * beat // 4, dtype=np.float32).reshape(runs, beat // 4)
        start = clean_board.cycles
        expect_status(exchange(clean_board, Command.REDUCE, reduce_payload(x)), Status.OK,
                      runs * 4)
        cycles.append(clean_board.cycles - start)
    assert cycles[1] - cycles[0] == 8 * -(-beat // link)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16,
                                   np.int8, np.uint32, np.int64], ids=dtype_name)
def test_load_and_max_match_the_golden_model(clean_board, dtype):
    fmt = format_of(dtype)
    rng = np.random.default_rng(200 + fmt.dtype)
    for shapes in MAX_CASES:
        arrays = [random_values(rng, fmt, shape) for shape in shapes]
        assert_same_bits(device_max(clean_board, *arrays), reference.max(*arrays),
                         f"MAX {shapes} {fmt.numpy_dtype}")


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.int8,
                                   np.uint64], ids=dtype_name)
def test_min_matches_the_golden_model_in_the_cycles_of_max(clean_board, dtype):
    """MAX with ``minimum`` 1 is ONNX Min, bit for bit (NaN absorbing, -0 below +0), for the
    broadcast passes and the fold; each request takes exactly the cycles of its maximum."""
    fmt = format_of(dtype)
    rng = np.random.default_rng(400 + fmt.dtype)
    per_beat = 8 * clean_board.identity.lanes // fmt.nbytes
    cases = [("pass", [random_values(rng, fmt, shape, edge_fraction=0.4) for shape in shapes])
             for shapes in MAX_CASES[:3]]
    cases.append(("fold", [random_values(rng, fmt, (per_beat + 1,), edge_fraction=0.4)
                           for _ in range(3)]))
    if fmt.is_float:
        zeros = np.array([0.0, -0.0, 0.0, -0.0], fmt.numpy_dtype)
        cases.append(("pass", [zeros, zeros[::-1].copy()]))
    for route, arrays in cases:
        results, cycles = [], []
        for minimum in (False, True):
            start = clean_board.cycles
            device_call = device_fold if route == "fold" else device_max
            results.append(device_call(clean_board, *arrays, minimum=minimum))
            cycles.append(clean_board.cycles - start)
        what = f"{route} of {[a.shape for a in arrays]} {fmt.numpy_dtype}"
        assert_same_bits(results[0], reference.max(*arrays), "Max " + what)
        assert_same_bits(results[1], reference.min(*arrays), "Min " + what)
        assert cycles[1] == cycles[0], f"Min {what}: {cycles[1]} cycles, the Max {cycles[0]}"


# ---- refused requests: every status ------------------------------------------------------------

def reduce_block(dtype, runs, run_length, minimum=0, arg=0):
    return PARAMETERS[Command.REDUCE].pack(dtype=dtype, runs=runs, run_length=run_length,
                                           minimum=minimum, arg=arg)


def test_bad_command(clean_board):
    for code in (0x00, max(Command) + 1, 0xFF):
        expect_status(exchange(clean_board, code, b"anything at all"), Status.BAD_COMMAND)


@pytest.mark.parametrize("code, payload", [
    (Command.IDENTIFY, b"\0"),
    (Command.COUNTERS, b"12345"),
    (Command.REDUCE, b""),
    (Command.REDUCE, reduce_block(DType.FLOAT, 1, 1)[:-1]),      # block cut short
    (Command.REDUCE, reduce_block(DType.FLOAT, 2, 3) + bytes(23)),  # one byte short
    (Command.REDUCE, reduce_block(DType.FLOAT, 2, 3) + bytes(25)),  # one byte too many
    (Command.REDUCE, reduce_block(DType.INT8, 1 << 16, 1 << 16) + bytes(4)),  # product wraps
    (Command.POOL_CHANNELS_LAST, PARAMETERS[Command.POOL_CHANNELS_LAST].pack(
        DType.INT16, 2, 3, 2) + bytes(22)),
    (Command.LOAD, PARAMETERS[Command.LOAD].pack(DType.UINT8, 0, 2, 3) + bytes(7)),
], ids=lambda v: v.name if isinstance(v, Command) else f"{len(v)}B")
def test_bad_length(clean_board, code, payload):
    expect_refusal(clean_board, code, payload, Status.BAD_LENGTH)


@pytest.mark.parametrize("dtype", [0, 8, 14, 15, 17, 255])
def test_unsupported_dtype(clean_board, dtype):
    expect_refusal(clean_board, Command.REDUCE, reduce_block(dtype, 1, 1) + b"\0",
                   Status.UNSUPPORTED_DTYPE)
    pool = PARAMETERS[Command.POOL_CHANNELS_LAST].pack(dtype, 1, 1, 1) + b"\0"
    expect_refusal(clean_board, Command.POOL_CHANNELS_LAST, pool, Status.UNSUPPORTED_DTYPE)


def max_block(identity, *, dtype=DType.FLOAT, operands=1, streamed=1, row_length=2,
              counts=None, bases=None, splats=None, minimum=0):
    """A raw ``MAX`` block, out-of-range values allowed (only the data is left out); counts
    not given are 1."""
    fields = dict(dtype=dtype, operands=operands, streamed=streamed, minimum=minimum,
                  row_length=row_length)
    counts = list(counts or [])
    fields.update((f"counts[{d}]", count)
                  for d, count in enumerate(counts + [1] * (identity.max_dims - len(counts))))
    fields.update((f"slot[{k}].base", base) for k, base in (bases or {}).items())
    fields.update((f"slot[{k}].splat", splat) for k, splat in (splats or {}).items())
    return MaxParameters.layout(identity.max_dims, identity.max_operands).pack(**fields)


def test_bad_parameter(clean_board):
    identity = clean_board.identity
    pool = PARAMETERS[Command.POOL_CHANNELS_LAST]
    load = PARAMETERS[Command.LOAD]
    requests = [
        (Command.POOL_CHANNELS_LAST, pool.pack(DType.FLOAT, 1, 0, 3)),
        (Command.POOL_CHANNELS_LAST, pool.pack(DType.FLOAT, 2, 3, 0)),
        (Command.POOL_CHANNELS_LAST, pool.pack(DType.FLOAT, 1, 1, 1, 2) + bytes(4)),
        (Command.LOAD, load.pack(DType.FLOAT, 0, 4, 0)),
        (Command.MAX, max_block(identity, row_length=0)),
        (Command.MAX, max_block(identity, operands=0, streamed=0)),
        (Command.MAX, max_block(identity, streamed=2)),
        (Command.MAX, max_block(identity, counts=[1, 0, 1])),
        (Command.MAX, max_block(identity, operands=2, splats={1: 2})),
        (Command.MAX, max_block(identity, operands=identity.max_operands + 1)),
        (Command.MAX, max_block(identity, minimum=2)),
        (Command.MAX, max_block(identity, minimum=0x81)),
        (Command.REDUCE, reduce_block(DType.FLOAT, 1, 1, minimum=2) + bytes(4)),
        (Command.REDUCE, reduce_block(DType.INT8, 2, 1, minimum=0x81) + bytes(2)),
        (Command.REDUCE, reduce_block(DType.FLOAT, 1, 1, minimum=2, arg=1) + bytes(4)),
        (Command.REDUCE, reduce_block(DType.FLOAT, 1, 1, arg=2) + bytes(4)),
        (Command.REDUCE, reduce_block(DType.FLOAT, 1, 1, arg=0x80) + bytes(4)),
        (Command.REDUCE, reduce_block(DType.FLOAT, 3, 0, arg=1)),     # no position to give
        (Command.REDUCE, reduce_block(DType.INT8, 0, 0, arg=1)),
    ]
    for code, payload in requests:
        expect_refusal(clean_board, code, payload, Status.BAD_PARAMETER)


def test_too_large(clean_board):
    identity = clean_board.identity
    pool, load = PARAMETERS[Command.POOL_CHANNELS_LAST], PARAMETERS[Command.LOAD]
    channels = identity.pool_channels * 8 // 2 + 1     # one int16 channel too many
    depth = identity.replay_depth
    beat = 8 * identity.lanes
    requests = [
        (Command.POOL_CHANNELS_LAST, pool.pack(DType.INT16, 1, 1, channels) + bytes(2 * channels)),
        (Command.LOAD, load.pack(DType.UINT8, depth - 1, 2, 1) + bytes(2)),
        (Command.LOAD, load.pack(DType.UINT8, 0, 1, beat * depth + 1) + bytes(beat * depth + 1)),
        (Command.REDUCE, reduce_block(DType.INT16, MAX_PAYLOAD // 2 + 1, 0)),  # reply too long
        (Command.REDUCE, reduce_block(DType.INT8, MAX_PAYLOAD // 4 + 1, 1, arg=1)),  # reply
        (Command.MAX, max_block(identity, bases={0: depth})),
        (Command.MAX, max_block(identity, counts=[1, MAX_COUNT + 1, 1])),
        (Command.MAX, max_block(identity, row_length=MAX_COUNT * beat + 1)),   # row in beats
        (Command.MAX, max_block(identity, counts=[1 << 12, 1 << 12, 1 << 12])),  # reply
    ]
    for code, payload in requests:
        expect_refusal(clean_board, code, payload, Status.TOO_LARGE)
    # At the limits, the same requests are accepted.
    frame = exchange(clean_board, Command.LOAD, load.pack(DType.UINT8, depth - 1, 1, 1) + b"\1")
    expect_status(frame, Status.OK)
    x = np.arange(channels - 1, dtype=np.int16).reshape(1, -1, 1)
    frame = exchange(clean_board, Command.POOL_CHANNELS_LAST, pool_payload(x))
    expect_status(frame, Status.OK, 2 * (channels - 1))


# ---- damaged input -----------------------------------------------------------------------------

def _random_request(rng, identity):
    """A request whose fields sit on and around the edges the status rules test."""
    beat = 8 * identity.lanes
    edges = [0, 1, 2, 3, identity.replay_depth - 1, identity.replay_depth, identity.max_operands,
             identity.max_operands + 1, MAX_COUNT, MAX_COUNT + 1, beat * MAX_COUNT + 1,
             identity.pool_channels * 8 + 1, 1 << 16, (1 << 32) - 1,
             identity.window_lanes, identity.window_lanes + 1, 8 * identity.window_lanes,
             8 * identity.window_lanes + 1, identity.window_extent + 1,
             identity.window_columns + 1, identity.window_plane + 1, WINDOW_FIELD_MAX + 1]
    code = DATA_COMMANDS[rng.integers(len(DATA_COMMANDS))]
    block = parameter_block(code, identity.max_dims, identity.max_operands)
    fields = {name: int(rng.choice(edges[:4] if rng.random() < 0.7 else edges))
              % (1 << 8 * block[name].size) for name in block.names}
    fields["dtype"] = int(rng.choice([DType.FLOAT, DType.INT8, DType.DOUBLE, DType.BFLOAT16, 0, 8]))
    for flag in ("reserved", "minimum", "arg"):
        if flag in fields and rng.random() < 0.8:
            fields[flag] = int(rng.random() < 0.5) if flag != "reserved" else 0
    payload = block.pack(**{n: v - (1 << 32) if block[n].signed and v >> 31 else v
                            for n, v in fields.items()})
    # The data the parameters describe (when small), or a few bytes off.
    itemsize = format_of(fields["dtype"]).nbytes if fields["dtype"] in FORMATS else 1
    try:
        expected = quantities(code, fields, Capacities.of(identity), itemsize)["data_bytes"]
    except KeyError:
        expected = 0
    length = expected if expected <= 4096 else 0
    length = max(0, length + int(rng.choice([0, 0, 0, -1, 1])))
    return code, payload + bytes(length)


def test_status_answers_follow_the_contract(board):
    """Seeded random requests around every rule's edges: the engine answers what the
    contract's ``verdict`` says (the same function the fake board and the planner use). The
    compiled board (two multipliers side by side for the checks' products) takes many more."""
    rng = np.random.default_rng(15)
    seen = set()
    for seq in range(48 if isinstance(board, VirtualBoard) else 1000):
        code, payload = _random_request(rng, board.identity)
        status = request_verdict(code, payload, board.identity)
        frame = exchange(board, code, payload, seq % 256)
        assert Status(frame.status) == status, (code, payload[:64].hex(), len(payload))
        seen.add(status)
    assert {Status.OK, Status.BAD_PARAMETER, Status.TOO_LARGE, Status.BAD_LENGTH,
            Status.UNSUPPORTED_DTYPE} <= seen


def test_the_window_rules_answer_as_the_contract(board):
    """``MAX_POOL`` with one axis's kernel, dilation and pad on and around the core's extent
    limits (0 and 2**32 - 1 included), or its size, out or stride around WINDOW_FIELD_MAX:
    the engine answers the contract's verdict (the kernel extent, the first window of padding
    only, the capacities that bind only with an extent above 1, the fields it holds
    narrowed). The simulated board takes a sample."""
    identity = board.identity
    if not identity.window_lanes:
        pytest.skip("a core without the windowed pooling unit")
    block = PARAMETERS[Command.MAX_POOL]
    limits = (identity.window_extent_outer,) + (identity.window_extent,) * 2
    cases = []
    for axis, limit in enumerate(limits):
        kernels = (0, 1, 2, limit, limit + 1, (1 << 32) - 1)
        for kernel, dilation, pad in itertools.product(kernels, (0, 1, 2, (1 << 32) - 1),
                                                       (0, 1, 2, limit)):
            fields = {name: 1 for name in block.names}
            fields.update({f"axis[{a}].pad": 0 for a in range(3)})
            fields.update(dtype=DType.FLOAT, reserved=0, indices=0, groups=1,
                          **{f"axis[{axis}].kernel": kernel, f"axis[{axis}].dilation": dilation,
                             f"axis[{axis}].pad": pad})
            cases.append(block.pack(**fields) + bytes(4))
        # The fields the engine holds narrowed, around WINDOW_FIELD_MAX, beside a bad kernel.
        for name, value, kernel in itertools.product(
                ("size", "out", "stride"), (0, 2, WINDOW_FIELD_MAX, WINDOW_FIELD_MAX + 1,
                                            (1 << 16) + 2, (1 << 32) - 1), (1, limit + 1)):
            fields = {name: 1 for name in block.names}
            fields.update({f"axis[{a}].pad": 0 for a in range(3)})
            fields.update(dtype=DType.FLOAT, reserved=0, indices=0, groups=1,
                          **{f"axis[{axis}].{name}": value, f"axis[{axis}].kernel": kernel})
            cases.append(block.pack(**fields) + bytes(4))
    if isinstance(board, VirtualBoard):
        cases = random.Random(3).sample(cases, 24)
    for seq, payload in enumerate(cases):
        status = request_verdict(Command.MAX_POOL, payload, identity)
        frame = exchange(board, Command.MAX_POOL, payload, seq % 256)
        assert Status(frame.status) == status, payload.hex()


def _serial_pool_requests(core, indices, requests, seed):
    """On a simulated core of one serial float32 window lane of two axes (``core`` over it),
    a 2 x (4 x 5) pool of kernel 2 x 3 stride 2 (``indices`` as given) with each of
    ``requests``' field changes: each reply's status is the contract's verdict. Returns the
    core's identity, the pool's images and ``(changes, status, frame)`` per request."""
    board = VirtualBoard(**dict(BOARD, units=("window",), dtype="float32",
                                window_extent_outer=0, window_serial=True, window_lanes=1,
                                window_columns=8, window_plane=1, **core))
    block = PARAMETERS[Command.MAX_POOL]
    x = random_values(np.random.default_rng(seed), format_of(np.float32), (2, 4, 5),
                      edge_fraction=0.4)
    base = dict(dict.fromkeys(block.names, 1), dtype=DType.FLOAT, reserved=0,
                indices=indices, groups=1, group=2, **{f"axis[{a}].pad": 0 for a in range(3)},
                **{"axis[1].size": 4, "axis[1].out": 2, "axis[1].kernel": 2,
                   "axis[1].stride": 2, "axis[2].size": 5, "axis[2].out": 2,
                   "axis[2].kernel": 3, "axis[2].stride": 2})
    results = []
    for seq, changes in enumerate(requests):
        payload = block.pack(**dict(base, **changes)) + interleave_group_images(
            x.reshape(2, -1), 2).tobytes()
        status = request_verdict(Command.MAX_POOL, payload, board.identity)
        frame = exchange(board, Command.MAX_POOL, payload, seq)
        assert Status(frame.status) == status, changes
        results.append((changes, status, frame))
    return board.identity, x, results


def test_a_core_of_two_window_axes_answers_as_the_contract():
    """A core whose pooling unit has the two inner axes alone (``window_extent_outer`` 0, one
    serial lane of float32, simulated): requests whose outermost axis holds more than one
    element or output, or a kernel there, get the contract's verdict (``TOO_LARGE``, or a
    ``BAD_PARAMETER`` first), and a 2-D pool among them pools as the golden model does."""
    identity, x, results = _serial_pool_requests(
        {}, 1, [{}, {"axis[0].size": 2}, {"axis[0].out": 2}, {"axis[0].kernel": 2},
                {"axis[0].size": 3, "axis[0].pad": 1}, {"axis[0].stride": 0},
                {"axis[0].stride": 5}, {"axis[0].size": (1 << 32) - 1}], seed=2)
    assert identity.window_extent_outer == 0
    for changes, status, frame in results:
        if not changes or changes == {"axis[0].stride": 5}:
            assert status == Status.OK
            want, indices = reference.max_pool(x[None], kernel_shape=[2, 3], strides=[2, 2],
                                               return_indices=True)
            # ONNX's Indices count across the channels, the reply's within each image.
            assert frame.payload == encode_window_reply(
                want.reshape(2, -1), indices.reshape(2, -1) % 20, format_of(np.float32), 2)
        else:
            assert status != Status.OK


def test_a_core_made_for_small_images_without_indices_answers_as_the_contract():
    """A core whose pooling unit holds axis fields up to 15 and gives no Indices
    (``window_field_max`` 15, ``window_indices`` 0; one serial lane of float32, simulated):
    fields above 15 (in the low byte, and in a higher one), Indices asked, and both, get the
    contract's verdicts, and a pool within both pools as the golden model does, its reply
    values only."""
    identity, x, results = _serial_pool_requests(
        dict(window_field_max=15, window_indices=False), 0,
        [{}, {"indices": 1}, {"axis[2].stride": 16}, {"axis[1].stride": 258},
         {"axis[2].size": 16}, {"indices": 1, "axis[1].pad": 1 << 20}, {"axis[1].stride": 15}],
        seed=3)
    assert (identity.window_field_max, identity.window_indices) == (15, 0)
    for changes, status, frame in results:
        if not changes:
            assert status == Status.OK
            want = reference.max_pool(x[None], kernel_shape=[2, 3], strides=[2, 2])
            assert frame.payload == encode_window_reply(want.reshape(2, -1), None,
                                                        format_of(np.float32), 2)
        else:
            assert status != Status.OK
    assert {status for _, status, _ in results} == {Status.OK, Status.BAD_PARAMETER,
                                                    Status.TOO_LARGE}


def test_a_core_whose_crcs_go_a_bit_a_cycle_answers_as_one_whose_go_a_byte():
    """``serial_crc`` (simulated): garbage with a false magic, IDENTIFY, a REDUCE, a MAX_POOL
    with indices, a frame with a corrupted data byte, a frame with a corrupted header and
    COUNTERS get the very bytes the core with byte-wide CRCs sends, written all at once (the
    receiver stalls for its CRC) and a byte at a time; and each byte in and out took longer."""
    x = random_values(np.random.default_rng(4), format_of(np.float32), (1, 2, 4, 4),
                      edge_fraction=0.4)
    pool = PARAMETERS[Command.MAX_POOL].pack(**dict(
        dict.fromkeys(PARAMETERS[Command.MAX_POOL].names, 1), dtype=DType.FLOAT, reserved=0,
        indices=1, groups=1, group=2, **{f"axis[{a}].pad": 0 for a in range(3)},
        **{f"axis[{a}].{n}": v for a in (1, 2) for n, v in (("size", 4), ("out", 2),
                                                              ("kernel", 2), ("stride", 2))}))
    corrupted = bytearray(encode_frame(Command.REDUCE, 4, reduce_payload(x[0, 0])))
    corrupted[30] ^= 0x10
    broken_header = bytearray(encode_frame(Command.IDENTIFY, 5))
    broken_header[6] ^= 0x01
    stream_in = (b"\x00\x4d" + MAGIC + bytes(10) + encode_frame(Command.IDENTIFY, 1)
                 + encode_frame(Command.REDUCE, 2, reduce_payload(x[0, 0]))
                 + encode_frame(Command.MAX_POOL, 3, pool + interleave_group_images(
                     x.reshape(2, -1), 2).tobytes())
                 + bytes(corrupted) + bytes(broken_header) + encode_frame(Command.COUNTERS, 6))
    gaps = random.Random(8)
    answers, cycles = [], []
    for serial, spaced in ((False, False), (True, False), (True, True)):
        board = VirtualBoard(**dict(BOARD, serial_crc=serial))
        if spaced:        # a byte, then 0 to 12 cycles without one (a slow link)
            for byte in stream_in:
                board.write(bytes([byte]))
                board.run(gaps.randrange(13))
        else:
            board.write(stream_in)
        answers.append(replies(board, 5))
        cycles.append(board.cycles)
    assert [f.code for f in answers[0]] == [Command.IDENTIFY, Command.REDUCE, Command.MAX_POOL,
                                            Command.REDUCE, Command.COUNTERS]
    assert Status(answers[0][3].status) == Status.CRC_ERROR
    assert answers[1] == answers[0] and answers[2] == answers[0]
    assert cycles[1] > cycles[0] + 7 * len(stream_in)


def test_corrupted_payload_gives_crc_error_with_the_declared_length(clean_board):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    frame = bytearray(encode_frame(Command.REDUCE, 5, reduce_payload(x)))
    frame[30] ^= 0x04                                   # a data byte
    clean_board.write(frame)
    (reply,) = replies(clean_board, 1)
    assert (reply.code, reply.seq, reply.intact) == (Command.REDUCE, 5, True)
    expect_status(reply, Status.CRC_ERROR, 3 * 4)       # the reply had started: full length
    # A corrupted parameter block (here: a BAD_LENGTH) still reports CRC_ERROR.
    frame = bytearray(encode_frame(Command.REDUCE, 6, reduce_payload(x)))
    frame[13] ^= 0x01                                   # runs = 2 instead of 3
    clean_board.write(frame)
    expect_status(replies(clean_board, 1)[0], Status.CRC_ERROR)
    # And the next request is answered normally.
    expect_status(exchange(clean_board, Command.IDENTIFY, seq=7), Status.OK, Identity.STRUCT.size)


def test_corrupted_header_is_ignored_and_the_next_frame_answered(clean_board):
    x = np.arange(6, dtype=np.int8).reshape(2, 3)
    good = encode_frame(Command.REDUCE, 9, reduce_payload(x))
    for position in range(12):
        bad = bytearray(encode_frame(Command.IDENTIFY, 8))
        bad[position] ^= 0x40
        clean_board.write(bytes(bad) + good)
        frames = replies(clean_board, 2)
        assert [(f.code, f.seq, f.status) for f in frames] == [(Command.REDUCE, 9, Status.OK)], (
            f"header byte {position} corrupted")
        assert frames[0].payload == bytes([2, 5])


def test_truncated_frame_times_out_and_the_next_frame_is_answered(clean_board):
    x = np.arange(40, dtype=np.int16).reshape(4, 10)
    request = encode_frame(Command.REDUCE, 11, reduce_payload(x))
    for cut in (14, 40, len(request) - 1):
        clean_board.write(request[:cut])
        (reply,) = replies(clean_board, 1)
        assert (reply.code, reply.seq) == (Command.REDUCE, 11)
        # Cut in the parameter block: no reply had started; later: padded to its length.
        cut_in_block = cut < 12 + PARAMETERS[Command.REDUCE].size
        expect_status(reply, Status.TIMEOUT, 0 if cut_in_block else 4 * 2)
        clean_board.write(encode_frame(Command.REDUCE, 12, reduce_payload(x)))
        (reply,) = replies(clean_board, 1)
        expect_status(reply, Status.OK, 8)
        assert_same_bits(np.frombuffer(reply.payload, np.int16), x.max(axis=1))

    # A truncated LOAD, MAX or POOL_CHANNELS_LAST leaves its unit usable.
    arrays = [np.arange(8, dtype=np.float32).reshape(2, 4), np.float32([5, 1, 7, 0])]
    load = PARAMETERS[Command.LOAD].pack(DType.FLOAT, 0, 1, 4) + arrays[1].tobytes()
    clean_board.write(encode_frame(Command.LOAD, 13, load)[:-10])
    expect_status(replies(clean_board, 1)[0], Status.TIMEOUT)
    assert_same_bits(device_max(clean_board, *arrays), reference.max(*arrays))
    identity = clean_board.identity
    plan = plan_broadcast([a.shape for a in arrays], 4, lanes=identity.lanes,
                          depth=identity.replay_depth, max_dims=identity.max_dims,
                          max_operands=identity.max_operands)
    request = encode_frame(Command.MAX, 14, max_payload(identity, plan, DType.FLOAT, arrays[0]))
    clean_board.write(request[:-12])                      # cut inside the streamed operand
    expect_status(replies(clean_board, 1)[0], Status.TIMEOUT, 8 * 4)
    assert_same_bits(device_max(clean_board, *arrays), reference.max(*arrays))
    pixels = random_values(np.random.default_rng(2), format_of(np.float64), (1, 3, 5))
    request = encode_frame(Command.POOL_CHANNELS_LAST, 15, pool_payload(pixels))
    clean_board.write(request[:-30])                      # cut inside a pixel
    expect_status(replies(clean_board, 1)[0], Status.TIMEOUT, 3 * 8)
    frame = exchange(clean_board, Command.POOL_CHANNELS_LAST, pool_payload(pixels))
    assert_same_bits(np.frombuffer(frame.payload, np.float64).reshape(1, 3, 1),
                     reference.global_max_pool(pixels))


def test_truncated_header_is_forgotten(clean_board):
    clean_board.write(encode_frame(Command.IDENTIFY, 1)[:7])
    assert clean_board.read(1) == b""
    expect_status(exchange(clean_board, Command.IDENTIFY, seq=2), Status.OK, Identity.STRUCT.size)


def test_garbage_before_and_between_frames(clean_board):
    rng = random.Random(5)
    x = np.arange(10, dtype=np.uint8).reshape(2, 5)
    stream, expected = b"", []
    for seq in range(6):
        garbage = bytes(rng.choices(range(256), k=rng.randrange(0, 40)))
        # False magics, one followed by a header-sized run of bytes that hides the real frame.
        garbage += b"MX" * rng.randrange(3) + b"M"
        frame = encode_frame(Command.REDUCE, seq, reduce_payload(x + seq))
        stream += garbage + (b"MX" + frame[:6] if seq == 3 else b"") + frame
        expected.append((Command.REDUCE, seq, Status.OK, bytes([4 + seq, 9 + seq])))
    clean_board.write(stream + b"MXMX")
    frames = replies(clean_board, 6)
    assert [(f.code, f.seq, f.status, f.payload) for f in frames] == expected


def test_back_to_back_requests(clean_board):
    rng = np.random.default_rng(7)
    requests, expected = b"", []
    for seq in range(8):
        x = random_values(rng, format_of(np.float16), (2, seq + 1))
        requests += encode_frame(Command.REDUCE, seq, reduce_payload(x))
        expected.append(reference.reduce_max(x, axes=[1], keepdims=False))
    requests += encode_frame(Command.IDENTIFY, 99)
    clean_board.write(requests)
    frames = replies(clean_board, 9)
    assert [(f.seq, f.status) for f in frames] == [(seq, 0) for seq in range(8)] + [(99, 0)]
    for frame, result in zip(frames, expected):
        assert_same_bits(np.frombuffer(frame.payload, np.float16), result)


# ---- the core under stalls (run_streams) -------------------------------------------------------

@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
@pytest.mark.parametrize("link_bytes", [1, 16, 32])
def test_core_under_idle_input_and_backpressure(link_bytes, stalls):
    """Exact reply bytes, whatever the input gaps, the split of the input into link words and
    the output backpressure (32 bytes: the NiteFury's link word, on a core of 4 lanes)."""
    core = shared_design(Core, **{k: v for k, v in BOARD.items()
                                  if k not in ("frame_timeout_cycles", "lanes")},
                         lanes=max(LANES, link_bytes // 8), frame_timeout_cycles=10_000,
                         link_bytes=link_bytes)
    x = random_values(np.random.default_rng(3), format_of(np.float32), (3, 7))
    pooled = random_values(np.random.default_rng(4), format_of(np.int8), (2, 5, 3))
    request = (b"\x13MX" + encode_frame(Command.REDUCE, 1, reduce_payload(x))
               + encode_frame(Command.POOL_CHANNELS_LAST, 2, pool_payload(pooled))
               + encode_frame(Command.IDENTIFY, 3) + encode_frame(0x42, 4))
    expected = (encode_frame(Command.REDUCE, 1,
                             reference.reduce_max(x, axes=[1], keepdims=False).tobytes())
                + encode_frame(Command.POOL_CHANNELS_LAST, 2,
                               reference.reduce_max(pooled, axes=[2], keepdims=False).tobytes())
                + encode_frame(Command.IDENTIFY, 3, core.identity.encode())
                + encode_frame(0x42, 4, status=Status.BAD_COMMAND))
    words = words_from_bytes(request, link_bytes, random.Random(stalls.seed))
    run = run_streams(core, sources={core.i: words},
                      sinks={"o": (core.o, lambda words: len(bytes_from_words(words))
                                   >= len(expected))},
                      stalls=stalls, timeout=5000)
    assert bytes_from_words(run.received["o"]) == expected


# ---- building blocks ---------------------------------------------------------------------------

class StartedPacker(wiring.Component):
    """A RowPacker started with fixed ``rows`` and ``row_bytes`` in its first cycle; on a wide
    link a WordSplitter in front of it cuts the words to its ``limit``, as in the receiver."""

    def __init__(self, lanes, rows, row_bytes, link_bytes=1):
        self.packer = RowPacker(lanes, link_bytes)
        self.rows, self.row_bytes = rows, row_bytes
        super().__init__({"i": In(link_signature(link_bytes)),
                          "o": Out(stream.Signature(beat_layout(lanes)))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.packer = packer = self.packer
        starting = Signal(init=1)
        m.d.sync += starting.eq(0)
        m.d.comb += [packer.start.eq(starting), packer.rows.eq(self.rows),
                     packer.row_bytes.eq(self.row_bytes)]
        if packer.link_bytes == 1:
            wiring.connect(m, wiring.flipped(self.i), packer.i)
        else:
            m.submodules.splitter = splitter = WordSplitter(packer.link_bytes)
            wiring.connect(m, wiring.flipped(self.i), splitter.i)
            wiring.connect(m, splitter.o, packer.i)
            m.d.comb += splitter.limit.eq(packer.limit)
        wiring.connect(m, packer.o, wiring.flipped(self.o))
        return m


#: Link widths the building blocks are tested with, per lane count (up to a beat).
LINK_WIDTHS = {1: [1, 4, 8], 2: [1, 4, 16]}


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
@pytest.mark.parametrize("lanes, link_bytes",
                         [(lanes, w) for lanes, widths in LINK_WIDTHS.items() for w in widths])
@pytest.mark.parametrize("rows, row_bytes", [(3, 5), (3, 0), (2, 16), (2, 17), (0, 9), (5, 1),
                                             (2, 45)])
def test_row_packer(lanes, link_bytes, rows, row_bytes, stalls):
    rng = random.Random(rows * 100 + row_bytes)
    data = [bytes(rng.choices(range(256), k=row_bytes)) for _ in range(rows)]
    expected = beats_from_rows(data, lanes)
    words = words_from_bytes(b"".join(data), link_bytes, rng)
    dut = StartedPacker(lanes, rows, row_bytes, link_bytes)
    run = run_streams(dut, sources={dut.i: words},
                      sinks={"o": (dut.o, len(expected))}, stalls=stalls,
                      check=lambda ctx: assert_idle(ctx, dut.packer))
    received = run.received["o"]
    assert rows_from_beats(received) == data
    assert [(b.nbytes, b.first, b.last) for b in received] == [
        (b["nbytes"], b["first"], b["last"]) for b in expected]
    if stalls.idle == stalls.backpressure == 0 and rows and row_bytes:
        assert run.cycles["o"] == packer_cycles(rows, row_bytes, lanes, link_bytes, words)


def packer_cycles(rows, row_bytes, lanes, link_bytes, words):
    """Edge at which a ready sink takes a started packer's last beat (no stalls): a transfer
    per cycle from the first edge on, the last beat in the output register at the edge of the
    last transfer. A transfer is a piece of a word: up to the word's end, and near a row's end
    (``link_bytes`` or fewer bytes left) up to the row's end or the beat boundary before it."""
    beat = 8 * lanes
    counts = [1] * (rows * row_bytes) if link_bytes == 1 else [w["count"] for w in words]
    transfers, position, left = 0, 0, row_bytes
    for available in counts:
        while available:
            piece = (min(available, left, beat - position) if left <= link_bytes
                     else available)
            transfers += 1
            available -= piece
            left -= piece
            position = 0 if left == 0 else (position + piece) % beat
            left = left or row_bytes
    return 1 + transfers + 1


def assert_idle(ctx, unit):
    assert ctx.get(unit.idle), f"{type(unit).__name__} not idle at the end"


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
@pytest.mark.parametrize("lanes, link_bytes",
                         [(lanes, w) for lanes, widths in LINK_WIDTHS.items() for w in widths])
def test_row_unpacker(lanes, link_bytes, stalls):
    rng = random.Random(lanes)
    sizes = (5, 0, 8 * lanes, 8 * lanes + 3, 1, 0, 8 * lanes - 1)
    rows = [bytes(rng.choices(range(256), k=n)) for n in sizes]
    dut = RowUnpacker(lanes, link_bytes)
    data = b"".join(rows)
    run = run_streams(dut, sources={dut.i: beats_from_rows(rows, lanes)},
                      sinks={"o": (dut.o, lambda words: len(bytes_from_words(words)) >= len(data))},
                      stalls=stalls, check=lambda ctx: assert_idle(ctx, dut))
    assert bytes_from_words(run.received["o"]) == data
    if stalls.idle == stalls.backpressure == 0:
        # The first word the cycle after the first beat, then one word per cycle: beats follow
        # one another without a gap, except that an empty beat right after a one-word beat
        # (with more to come) costs a cycle.
        words = [-(-len(row[k:k + 8 * lanes]) // link_bytes)
                 for row in rows for k in range(0, max(len(row), 1), 8 * lanes)]
        gaps = sum(1 for before, empty in zip(words[:-2], words[1:-1])
                   if empty == 0 and before == 1)
        assert run.cycles["o"] == sum(words) + gaps + 1


@pytest.mark.parametrize("digit_bits", [1, 2])
def test_saturating_multiplier(digit_bits):
    rng = random.Random(9)
    cases = [(0, 0, 0), (1, 1, 0), (0xFFFFFFFF, 1, 0), (1 << 16, 1 << 16, 0),
             ((1 << 16) - 1, (1 << 16) + 1, 0), (0x12345, 0, 1), (5, 7, 1),
             (0xFFFFFFFF, 0xFFFFFFFF, 0),
             # at the edge of 2**32 through either bit of a two-bit digit
             (1 << 31, 2, 0), (1 << 31, 1, 0), (3 << 30, 1, 0), (1 << 30, 3, 0), (1 << 31, 3, 0),
             (0x55555555, 3, 0), (0x55555556, 3, 0), (1, 2, 1), (1, 1 << 31, 0),
             (2, 1 << 31, 0)]
    cases += [(rng.getrandbits(rng.randrange(33)), rng.getrandbits(rng.randrange(33)),
               rng.random() < 0.1) for _ in range(40)]
    dut = SaturatingMultiplier(32, digit_bits)
    results = []

    async def testbench(ctx):
        for a, b, a_overflow in cases:
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            ctx.set(dut.a_overflow, a_overflow)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            cycles = 0
            while ctx.get(dut.busy):
                await ctx.tick()
                cycles += 1
            results.append((ctx.get(dut.product), ctx.get(dut.overflow), cycles))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    for (a, b, a_overflow), (product, overflow, cycles) in zip(cases, results):
        exact = a * b
        should_overflow = exact >= 1 << 32 or (a_overflow and b != 0)
        assert overflow == should_overflow, (a, b, a_overflow)
        if not should_overflow:
            assert product == exact, (a, b)
        assert cycles == -(-b.bit_length() // digit_bits)


@pytest.mark.parametrize("width, limits, values", [
    # every value of 7 bits against every limit from 0 to beyond the width
    (7, range(0, 131), range(1 << 7)),
    # wide values against the constants the checks compare with, at and around each
    (40, [1, 2, 9, 65, 1 << 16, (1 << 16) + 1, (1 << 30) + 1, (1 << 32) - 1, 1 << 32,
          (1 << 36) - 1, 3 << 34, (1 << 40) - 1],
     sorted({v for k in (0, 1, 2, 8, 9, 16, 30, 32, 34, 35, 36, 39, 40)
             for v in ((1 << k) - 2, (1 << k) - 1, 1 << k, (1 << k) + 1, 3 << max(k - 2, 0))
             if 0 <= v < 1 << 40} | {0x5555555555, 0xAAAAAAAAAA, 0x0FFFF0000})),
], ids=["7-bit, every limit", "40-bit, the checks' limits"])
def test_at_least_is_the_comparison_it_replaces(width, limits, values):
    m = Module()
    value = Signal(width)
    outputs = [Signal(name=f"at_least_{limit}") for limit in limits]
    m.d.comb += [out.eq(at_least(value, limit)) for out, limit in zip(outputs, limits)]
    wrong = []

    async def testbench(ctx):
        for v in values:
            ctx.set(value, v)
            wrong.extend((v, limit) for out, limit in zip(outputs, limits)
                         if ctx.get(out) != (v >= limit))

    sim = Simulator(m)
    sim.add_testbench(testbench)
    sim.run()
    assert not wrong, wrong[:10]


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
@pytest.mark.parametrize("link_bytes", [1, 4, 16])
def test_frame_receiver_hunts_checks_and_times_out(link_bytes, stalls):
    """Headers that pass their check come out, with their payload and the frame check result."""
    rng = random.Random(stalls.seed)
    frames = [encode_frame(3, 1, b"abc"), encode_frame(4, 2), encode_frame(5, 3, bytes(range(20)))]
    damaged = bytearray(encode_frame(6, 4, b"xyz"))
    damaged[13] ^= 1                                     # payload: frame check fails
    false_header = bytearray(encode_frame(7, 5, b"hidden"))
    false_header[6] ^= 1                                 # header: ignored
    too_long = struct.pack("<2sBBI", b"MX", 8, 6, MAX_PAYLOAD + 1)
    too_long += struct.pack("<I", crc32(too_long))       # passes its CRC but claims too much
    stream_bytes = (bytes(rng.choices(range(256), k=30)) + frames[0] + b"MXMX" + frames[1]
                    + bytes(false_header) + too_long + bytes(damaged)
                    + b"M" + frames[2][:11] + frames[2] + encode_frame(9, 7, b"cut")[:14])
    expected = [(3, 1, b"abc", 1), (4, 2, b"", 1), (6, 4, b"xxz", 0), (5, 3, bytes(range(20)), 1),
                (9, 7, b"cu", None)]
    timeout = 40
    payload = b"".join(e[2] for e in expected)
    dut = FrameReceiver(timeout, link_bytes)
    run = run_streams(dut, sources={dut.i: words_from_bytes(stream_bytes, link_bytes, rng)},
                      sinks={"header": (dut.header, len(expected)),
                             "payload": (dut.payload, lambda words: len(bytes_from_words(words))
                                         >= len(payload)),
                             "trailer": (dut.trailer, len(expected))},
                      stalls=stalls, drain_cycles=2 * timeout,
                      check=lambda ctx: check_receiver_counters(ctx, dut))
    assert [(h.command, h.seq, h.length) for h in run.received["header"]] == [
        (3, 1, 3), (4, 2, 0), (6, 4, 3), (5, 3, 20), (9, 7, 3)]
    assert bytes_from_words(run.received["payload"]) == payload
    outcomes = [(t.intact, t.timeout) for t in run.received["trailer"]]
    assert outcomes == [(1, 0), (1, 0), (0, 0), (1, 0), (0, 1)]


def check_receiver_counters(ctx, dut):
    # Header check failures: the two "MX" before frame 1, the false header, the too-long
    # header, the cut copy of frame 2's header, and any "MX" the random garbage happens to hold.
    assert ctx.get(dut.frame_check_failures) == 1
    assert ctx.get(dut.frame_timeouts) == 1
    assert ctx.get(dut.header_check_failures) >= 5
    assert ctx.get(dut.hunting)


def test_every_data_command_is_routed_to_a_unit_the_engine_configures():
    """A data command of the contract reaches the engine through one line of ROUTES: a unit
    port whose adapter configures the unit from the block, an input stream of that unit, and a
    result stream the unit drives (or none). A command added to the contract without a route,
    or a route naming a stream the unit does not have, fails here before any simulation."""
    from maxaccel.hdl.routing import ADAPTERS, ROUTES

    assert set(ROUTES) == set(DATA_COMMANDS)
    signatures, _ = Core.unit_signatures(**CORE_DEFAULTS)    # nothing is built
    for code, route in ROUTES.items():
        assert callable(ADAPTERS[route.unit].configure), code
        members = signatures[route.unit].members
        assert members[route.into].flow == In and "ready" in members[route.into].signature.members
        if route.results is not None:
            assert members[route.results].flow == Out
