"""Link words (``hdl/linkword.py``): the CRC over a variable number of bytes per cycle against
the host's ``crc32``, the splitter under stalls with a limit that changes every cycle, and the
width checks."""

import random

import pytest
from amaranth.lib import stream
from amaranth.sim import Simulator

from maxaccel.hdl.linkword import (LINK_WIDTHS, SerialCRC, WordCRC, WordSplitter, link_signature,
                                   word_layout)
from maxaccel.contract.wire import crc32
from maxaccel.sim.streams import bytes_from_words, words_from_bytes


def _ends_with_its_crc(added):
    return len(added) >= 4 and crc32(added[:-4]) == int.from_bytes(added[-4:], "little")


def _simulate(dut, testbench):
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


@pytest.mark.parametrize("width", [1, 4, 16, 32])
def test_word_crc_matches_the_protocol_crc(width):
    """Random counts per cycle, 0 included, and restarts: after every cycle the register holds
    the CRC of the bytes added since the last start, and ``match_detected`` says whether they
    end with their own CRC."""
    rng = random.Random(width)
    dut = WordCRC(width)
    messages = [bytes(rng.choices(range(256), k=n)) for n in (0, 1, width, 3 * width + 1, 57)]
    messages += [m + crc32(m).to_bytes(4, "little") for m in messages[1:]]   # with their CRC
    checked = []

    async def testbench(ctx):
        for message in messages:
            added, position, start = b"", 0, True
            while position < len(message) or start:
                count = min(rng.randint(0, width), len(message) - position)
                chunk = message[position:position + count].ljust(width, bytes([rng.randrange(256)]))
                ctx.set(dut.start, start)
                ctx.set(dut.count, count)
                for k in range(width):
                    ctx.set(dut.data[k], chunk[k])
                await ctx.tick()
                start, position = False, position + count
                added += message[position - count:position]
                assert ctx.get(dut.crc) == crc32(added), (message.hex(), added.hex())
            assert ctx.get(dut.match_detected) == _ends_with_its_crc(added)
            checked.append(message)

    _simulate(dut, testbench)
    assert checked == messages


def test_serial_crc_matches_the_protocol_crc():
    """A byte at a time with random gaps, restarts with and without a first byte: ``busy`` is
    high exactly the seven cycles after each byte added, and whenever it is low after a byte
    the register holds the CRC of the bytes added since the last start (a start without a byte
    takes effect with the next one), ``match_detected`` whether they end with their own
    CRC."""
    rng = random.Random(5)
    dut = SerialCRC()
    messages = [bytes(rng.choices(range(256), k=n)) for n in (0, 1, 2, 5, 23)]
    messages += [m + crc32(m).to_bytes(4, "little") for m in messages[1:]]
    checked = []

    async def testbench(ctx):
        for message in messages:
            with_first = bool(message) and rng.random() < 0.5
            ctx.set(dut.start, 1)
            if with_first:
                ctx.set(dut.count, 1)
                ctx.set(dut.data[0], message[0])
            await ctx.tick()
            ctx.set(dut.start, 0)
            added = message[:1] if with_first else b""
            for byte in message[len(added):]:
                for _ in range(7 if added else 0):
                    assert ctx.get(dut.busy)
                    ctx.set(dut.count, 0)
                    await ctx.tick()
                assert not ctx.get(dut.busy)
                assert not added or ctx.get(dut.crc) == crc32(added)
                for _ in range(rng.choice([0, 0, 1, 3])):       # a gap between bytes
                    ctx.set(dut.count, 0)
                    await ctx.tick()
                    assert not added or ctx.get(dut.crc) == crc32(added)
                ctx.set(dut.count, 1)
                ctx.set(dut.data[0], byte)
                await ctx.tick()
                added += bytes([byte])
            ctx.set(dut.count, 0)
            for _ in range(7 if added else 0):
                assert ctx.get(dut.busy)
                await ctx.tick()
            assert not ctx.get(dut.busy)
            if added:
                assert ctx.get(dut.crc) == crc32(added)
                assert ctx.get(dut.match_detected) == _ends_with_its_crc(added)
            checked.append(message)

    _simulate(dut, testbench)
    assert checked == messages


@pytest.mark.parametrize("width", [2, 8, 16, 32])
@pytest.mark.parametrize("seed", [1, 2])
def test_word_splitter_passes_every_byte_once_in_order(width, seed):
    """Random idle input, random backpressure and a random ``limit`` every cycle: the bytes
    come out in order, none lost or repeated, no piece above the limit or empty, and nothing is
    left once the input is used up."""
    rng = random.Random(seed * 100 + width)
    data = bytes(rng.choices(range(256), k=40 * width))
    words = words_from_bytes(data, width, rng)
    dut = WordSplitter(width)
    pieces = []

    async def testbench(ctx):
        index, cycles = 0, 0
        while len(bytes_from_words(pieces)) < len(data):
            cycles += 1
            assert cycles < 50 * len(words), "the splitter stopped passing bytes on"
            offering = index < len(words) and rng.random() > 0.3
            if offering:
                ctx.set(dut.i.payload, words[index])
            ctx.set(dut.i.valid, offering)
            limit = rng.randint(1, width)
            ctx.set(dut.limit, limit)
            ctx.set(dut.o.ready, rng.random() > 0.3)
            _, _, i_ready, o_valid, o_ready, piece = await ctx.tick().sample(
                dut.i.ready, dut.o.valid, dut.o.ready, dut.o.payload)
            if offering and i_ready:
                index += 1
            if o_valid and o_ready:
                assert 1 <= piece.count <= limit
                pieces.append(piece)
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.o.ready, 1)
        for _ in range(4):
            _, _, o_valid = await ctx.tick().sample(dut.o.valid)
            assert not o_valid, "a byte beyond the input"
        assert index == len(words), "words left in the source"

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    assert bytes_from_words(pieces) == data


def test_a_word_used_up_at_once_goes_straight_through():
    """With ``limit`` at the width, each word goes out in the cycle it comes: one per cycle."""
    width = 8
    rng = random.Random(5)
    data = bytes(rng.choices(range(256), k=10 * width))
    words = words_from_bytes(data, width, rng)
    dut = WordSplitter(width)

    async def testbench(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.valid, 1)
        out = []
        for word in words:
            ctx.set(dut.i.payload, word)
            _, _, i_ready, o_valid, piece = await ctx.tick().sample(
                dut.i.ready, dut.o.valid, dut.o.payload)
            assert i_ready and o_valid
            out.append(piece)
        assert bytes_from_words(out) == data

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


def test_link_signature():
    assert link_signature(1) == stream.Signature(8)
    for width in LINK_WIDTHS[1:]:
        assert link_signature(width) == stream.Signature(word_layout(width))
    for bad in (0, 3, 64, "8", None):
        with pytest.raises(ValueError, match=r"link_bytes must be one of 1, 2, 4, 8, 16, 32, not"):
            link_signature(bad)
    with pytest.raises(ValueError, match=r"link_bytes must be one of"):
        WordSplitter(3)
