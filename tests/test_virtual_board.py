"""The virtual board as a byte transport, at the core's byte streams and at the UART pins."""

import time

import numpy as np
import pytest

from maxaccel.hdl.top import UARTTop
from maxaccel.contract.dtypes import format_of
from maxaccel.contract.wire import (COUNTER_NAMES, COUNTERS, PARAMETERS, Command, FrameParser,
                                    Identity, MaxOperand, MaxParameters, Status, encode_frame)
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import random_values
from maxaccel.sim.virtual_board import VirtualBoard


def reduce_request(seq, x):
    fmt = format_of(x.dtype)
    payload = PARAMETERS[Command.REDUCE].pack(fmt.dtype, *x.shape, 0) + x.tobytes()
    return encode_frame(Command.REDUCE, seq, payload)


def reduce_reply(seq, x):
    return encode_frame(Command.REDUCE, seq,
                        reference.reduce_max(x, axes=[1], keepdims=False).tobytes())


@pytest.fixture(scope="module")
def board():
    with VirtualBoard(lanes=1, frame_timeout_cycles=200) as board:
        yield board


def test_write_then_read_in_pieces(board):
    x = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    request = reduce_request(1, x)
    assert board.write(request[:10]) == 10
    assert board.write(request[10:]) == len(request) - 10
    expected = reduce_reply(1, x)
    assert board.read(5) == expected[:5]
    assert board.read(100) == expected[5:]     # fewer than asked: the board went quiescent


def test_read_returns_early_when_quiescent(board):
    cycles = board.cycles
    assert board.read(10) == b""
    assert board.cycles - cycles < 10


def test_read_limits(board):
    # A frame cut short (in its parameter block, so no reply starts) keeps the gateware busy
    # until its frame timeout: the cycle limit and the wall-clock limit both end a read first.
    board.write(reduce_request(2, np.zeros((2, 2), np.uint8))[:15])
    cycles = board.cycles
    assert board.read(1, timeout_cycles=50) == b""
    assert board.cycles - cycles == 50
    assert board.read(1, timeout=0) == b""             # no simulated time at all
    assert board.cycles - cycles == 50
    assert board.read(1, timeout=20 / board.clock_hz) == b""   # simulated seconds
    assert board.cycles - cycles == 70
    board.wall_timeout = 0
    assert board.read(1) == b""
    board.wall_timeout = None
    frames = FrameParser().feed(board.read(100))
    assert [(f.seq, f.status) for f in frames] == [(2, Status.TIMEOUT)]


def test_reset_input_discards_unread_bytes(board):
    board.write(encode_frame(Command.IDENTIFY, 3) + encode_frame(Command.IDENTIFY, 4))
    assert board.read(1) == b"M"
    board.run(200)
    assert board.in_waiting > 0
    board.reset_input()
    assert board.in_waiting == 0
    board.write(encode_frame(Command.IDENTIFY, 5))
    (frame,) = FrameParser().feed(board.read(1000))
    assert (frame.seq, frame.status) == (5, Status.OK)


def test_closed_board_refuses():
    board = VirtualBoard(lanes=1)
    board.close()
    with pytest.raises(ValueError, match="closed"):
        board.write(b"x")
    with pytest.raises(ValueError, match="closed"):
        board.read(1)


def test_speed_figures(board):
    """Throughput of the byte-stream mode (printed with ``-s``); a sanity floor only."""
    x = np.arange(2000, dtype=np.uint8).reshape(20, 100)
    request = reduce_request(6, x)
    start, cycles = time.perf_counter(), board.cycles
    board.write(request)
    reply = board.read(1000)
    elapsed, cycles = time.perf_counter() - start, board.cycles - cycles
    assert reply == reduce_reply(6, x)
    assert cycles < len(request) + 200        # a byte per cycle, plus the checks and the reply
    print(f"\nvirtual board (lanes=1): {len(request) / elapsed:.0f} request bytes/s, "
          f"{cycles / elapsed:.0f} cycles/s")


def test_gateware_at_the_uart_pins():
    """IDENTIFY, COUNTERS, REDUCE, POOL and a LOAD + MAX through UARTTop with real bit timing."""
    divisor = 4
    with VirtualBoard(lanes=1, uart=True, divisor=divisor, replay_depth=8, max_dims=2,
                      max_operands=2, pool_channels=4) as board:
        assert board.divisor == divisor
        start, cycles = time.perf_counter(), board.cycles
        rng = np.random.default_rng(11)
        fmt = format_of(np.float16)
        x = random_values(rng, fmt, (3, 5))
        pooled = random_values(rng, fmt, (1, 3, 2, 2))
        pool_payload = (PARAMETERS[Command.POOL_CHANNELS_LAST].pack(fmt.dtype, 1, 4, 3)
                        + np.ascontiguousarray(np.moveaxis(pooled.reshape(1, 3, 4), 1, 2))
                        .tobytes())
        requests = (encode_frame(Command.IDENTIFY, 1) + reduce_request(2, x)
                    + encode_frame(Command.POOL_CHANNELS_LAST, 3, pool_payload))
        # A LOAD of a row [a, b, c] and a MAX of a streamed 2 x 3 operand with it.
        row = random_values(rng, fmt, (3,))
        streamed = random_values(rng, fmt, (2, 3))
        requests += encode_frame(Command.LOAD, 4, PARAMETERS[Command.LOAD].pack(
            fmt.dtype, 0, 1, 3) + row.tobytes())
        block = board_max_block(board.identity, fmt.dtype, row_length=3, counts=[1, 2])
        requests += encode_frame(Command.MAX, 5, block + streamed.tobytes())
        requests += encode_frame(Command.COUNTERS, 6)
        board.write(requests)
        frames = FrameParser().feed(board.read(10_000))
        elapsed, cycles = time.perf_counter() - start, board.cycles - cycles
        assert [(f.code, f.seq, f.status, f.intact) for f in frames] == [
            (Command.IDENTIFY, 1, 0, True), (Command.REDUCE, 2, 0, True),
            (Command.POOL_CHANNELS_LAST, 3, 0, True), (Command.LOAD, 4, 0, True),
            (Command.MAX, 5, 0, True), (Command.COUNTERS, 6, 0, True)]
        identity = Identity.decode(frames[0].payload)
        assert identity == board.identity and identity.lanes == 1
        assert_same_bits(np.frombuffer(frames[1].payload, fmt.numpy_dtype),
                         reference.reduce_max(x, axes=[1], keepdims=False))
        assert_same_bits(np.frombuffer(frames[2].payload, fmt.numpy_dtype).reshape(1, 3, 1, 1),
                         reference.global_max_pool(pooled))
        assert_same_bits(np.frombuffer(frames[4].payload, fmt.numpy_dtype).reshape(2, 3),
                         reference.max(streamed, row))
        assert dict(zip(COUNTER_NAMES, COUNTERS.unpack(frames[5].payload))) == dict.fromkeys(
            COUNTER_NAMES, 0)
        # At least 10 bit periods per byte each way (requests and replies overlap partly).
        assert cycles >= 10 * divisor * len(requests)
        print(f"\nvirtual board at the UART pins (divisor {divisor}): "
              f"{len(requests) / elapsed:.0f} request bytes/s, {cycles / elapsed:.0f} cycles/s")


def board_max_block(identity, dtype, *, row_length, counts):
    """A MAX block: the streamed operand and operand 0, a row replayed from base 0 for every
    row of the output (steps 0)."""
    replayed = MaxOperand(base=0, splat=False, steps=(0,) * identity.max_dims)
    return MaxParameters(dtype, row_length, tuple(counts), True, (replayed,)).encode(
        identity.max_dims, identity.max_operands)


def test_uart_top_refuses_a_divisor_below_4():
    with pytest.raises(ValueError, match="at least 4"):
        UARTTop(1_000_000, 400_000)
