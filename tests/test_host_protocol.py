"""The MAX parameter block and the frame parser's helpers used by the link layer."""

import struct

import pytest

from maxaccel.contract.dtypes import DType
from maxaccel.host.plan import plan_broadcast
from maxaccel.contract.wire import (HEADER_SIZE, PAYLOAD_ALIGN, FrameParser, MaxOperand,
                                    MaxParameters, encode_frame, Command)


def test_max_block_layout_is_fixed_width_little_endian():
    block = MaxParameters(DType.FLOAT16, 300, (1, 5, 7), True,
                          (MaxOperand(16, False, (0, 3, -2)), MaxOperand(2, True, (1, 0, 0))))
    data = block.encode(max_dims=3, max_operands=4)
    fields = 8 + 12 + 4 * (8 + 12)
    # Padded with zeros so that the data after it starts on PAYLOAD_ALIGN.
    assert len(data) == MaxParameters.size(3, 4) == 128 - HEADER_SIZE > fields
    assert data[:8] == bytes([DType.FLOAT16, 2, 1, 0]) + struct.pack("<I", 300)
    assert struct.unpack_from("<3I", data, 8) == (1, 5, 7)
    assert struct.unpack_from("<IBxxx3i", data, 20) == (16, 0, 0, 3, -2)
    assert struct.unpack_from("<IBxxx3i", data, 40) == (2, 1, 1, 0, 0)
    assert data[60:] == bytes(len(data) - 60)  # unused slots, padding
    decoded, rest = MaxParameters.decode(data + b"tail", 3, 4)
    assert decoded == block and rest == b"tail"


def test_max_block_from_a_plan():
    plan = plan_broadcast([(4, 5, 6), (5, 1), (1, 6)], itemsize=4, lanes=2, depth=64,
                          max_dims=2, max_operands=3)
    block = MaxParameters.from_plan(plan, DType.FLOAT)
    assert block.streamed and block.row_length == 6 and block.counts == plan.counts
    assert [o.base for o in block.operands] == [o.base for o in plan.replayed]
    assert [o.splat for o in block.operands] == [True, False]
    assert [o.steps for o in block.operands] == [o.steps for o in plan.replayed]
    assert MaxParameters.decode(block.encode(2, 3), 2, 3)[0] == block


@pytest.mark.parametrize("change, message", [
    (lambda b: b.encode(4, 4), "3 outer counts for a device with max_dims=4"),
    (lambda b: b.encode(3, 1), "2 replayed operands for a device with max_operands=1"),
])
def test_max_block_refuses_a_device_it_does_not_fit(change, message):
    block = MaxParameters(DType.INT8, 1, (1, 1, 1), False,
                          (MaxOperand(0, False, (0, 0, 0)), MaxOperand(1, False, (0, 0, 0))))
    with pytest.raises(ValueError, match=message):
        change(block)


def test_max_block_decode_rejects_bad_blocks():
    good = MaxParameters(DType.INT8, 1, (1,), True, ()).encode(1, 1)
    # 24 bytes of fields, padded so that the data starts 64 bytes into the frame.
    assert len(good) == MaxParameters.size(1, 1) == 52 and (HEADER_SIZE + 52) % PAYLOAD_ALIGN == 0
    assert good[24:] == bytes(28)
    with pytest.raises(ValueError, match="shorter than its 52-byte parameter block"):
        MaxParameters.decode(good[:-1], 1, 1)
    # M > K, S >= 2 with a replayed operand, a minimum flag of 2, splat
    for offset, value in [(1, 2), (2, 2), (3, 2), (16, 2)]:
        bad = bytearray(good)
        bad[offset] = value
        if offset in (2, 16):
            bad[1] = 1
        with pytest.raises(ValueError):
            MaxParameters.decode(bytes(bad), 1, 1)


def test_parser_reports_what_it_waits_for():
    frame = encode_frame(Command.REDUCE, 3, b"x" * 10)
    parser = FrameParser()
    assert parser.wanted() == 12 and parser.partial() is None
    parser.feed(b"junk" + frame[:5])
    assert parser.wanted() == 7 and parser.partial() is None
    parser.feed(frame[5:20])
    assert parser.wanted() == len(frame) - 20
    assert parser.partial() == (Command.REDUCE, 3, 10)
    assert len(parser.feed(frame[20:])) == 1 and parser.wanted() == 12
