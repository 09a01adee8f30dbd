"""The XDMA adapters: AXI4-Stream words to the core's bytes and back, under stalls, and the
core answering requests through them."""

import random

import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from maxaccel.boards.xdma import BytesToWords, CoreOverAXIStream, WordsToBytes
from maxaccel.hdl.linkword import link_signature
from maxaccel.contract.dtypes import format_of
from maxaccel.contract.wire import PARAMETERS, Command, FrameParser, Status, encode_frame
from maxaccel.sim import reference
from maxaccel.sim.streams import (STALL_PATTERNS, bytes_from_words, run_streams,
                                  shared_design, words_from_bytes)
from maxaccel.sim.values import random_values

WIDTH = 8
WORD = data.StructLayout({"tdata": 8 * WIDTH, "tkeep": WIDTH, "tlast": 1})


def connect_words(m, words, axis, *, into_axis):
    """A lib.stream of WORD structs as an AXI4-Stream (so run_streams can drive it)."""
    if into_axis:
        m.d.comb += [axis.tvalid.eq(words.valid), words.ready.eq(axis.tready),
                     axis.tdata.eq(words.payload.tdata), axis.tkeep.eq(words.payload.tkeep),
                     axis.tlast.eq(words.payload.tlast)]
    else:
        m.d.comb += [words.valid.eq(axis.tvalid), axis.tready.eq(words.ready),
                     words.payload.tdata.eq(axis.tdata), words.payload.tkeep.eq(axis.tkeep),
                     words.payload.tlast.eq(axis.tlast)]


class RoundTrip(wiring.Component):
    """Link -> BytesToWords -> WordsToBytes -> link, flushing whenever nothing arrives."""

    def __init__(self, link_bytes):
        self.link_bytes = link_bytes
        super().__init__({"i": In(link_signature(link_bytes)),
                          "o": Out(link_signature(link_bytes))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.pack = pack = BytesToWords(WIDTH, self.link_bytes)
        m.submodules.unpack = unpack = WordsToBytes(WIDTH, self.link_bytes)
        wiring.connect(m, wiring.flipped(self.i), pack.i)
        wiring.connect(m, pack.axis, unpack.axis)
        wiring.connect(m, unpack.o, wiring.flipped(self.o))
        m.d.comb += pack.flush.eq(1)
        return m


class Unpack(wiring.Component):
    def __init__(self, link_bytes):
        self.link_bytes = link_bytes
        super().__init__({"words": In(stream.Signature(WORD)),
                          "o": Out(link_signature(link_bytes))})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain()      # the word link's adapter is combinational
        m.submodules.unpack = unpack = WordsToBytes(WIDTH, self.link_bytes)
        connect_words(m, self.words, unpack.axis, into_axis=True)
        wiring.connect(m, unpack.o, wiring.flipped(self.o))
        return m


class OverWords(wiring.Component):
    """CoreOverAXIStream with its AXI sides as lib.streams of WORD."""
    h2c: In(stream.Signature(WORD))
    c2h: Out(stream.Signature(WORD))

    def __init__(self, link_bytes, **core):
        self.dut = CoreOverAXIStream(WIDTH, link_bytes, **core)
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        connect_words(m, self.h2c, dut.h2c, into_axis=True)
        connect_words(m, self.c2h, dut.c2h, into_axis=False)
        return m


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
@pytest.mark.parametrize("length", [1, 7, 8, 9, 16, 61])
@pytest.mark.parametrize("link_bytes", [1, WIDTH, 2 * WIDTH])
def test_bytes_survive_words_both_ways(stalls, length, link_bytes):
    """Link transfers of random sizes (1 to a link word) in, the same bytes out, none left
    over (paired words: the reply's last word, with tlast, is not held for a partner)."""
    payload = bytes(int(b) for b in np.random.default_rng(length).integers(0, 256, length))
    dut = shared_design(RoundTrip, link_bytes)
    run = run_streams(dut, sources={dut.i: words_from_bytes(payload, link_bytes,
                                                            random.Random(length))},
                      sinks={"o": (dut.o, lambda got: len(bytes_from_words(got)) >= length)},
                      stalls=stalls)
    assert bytes_from_words(run.received["o"]) == payload


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
@pytest.mark.parametrize("link_bytes", [1, WIDTH, 2 * WIDTH])
def test_only_kept_bytes_leave_in_order(stalls, link_bytes):
    """Any tkeep on a byte link; on a word link the XDMA's tkeep (bytes from 0 up, or none),
    with tlast at random (the end of a host write) and on the last word. Paired words: a word
    with bytes missing or tlast goes alone, and no link word has a gap."""
    rng = random.Random(stalls.seed)
    words, expected = [], []
    for index in range(30):
        tdata = rng.getrandbits(64)
        if link_bytes == 1:
            tkeep = rng.choice([0xFF, 0x01, 0x80, 0xA5, 0x00, 0x0F, rng.getrandbits(8)])
        else:
            tkeep = (1 << rng.choice([8, 8, 8, 0, 1, 5, 7])) - 1
        words.append({"tdata": tdata, "tkeep": tkeep,
                      "tlast": index == 29 or rng.random() < 0.2})
        expected += [tdata >> (8 * k) & 0xFF for k in range(8) if tkeep >> k & 1]
    dut = Unpack(link_bytes)
    run = run_streams(dut, sources={dut.words: words},
                      sinks={"o": (dut.o, lambda got: len(bytes_from_words(got))
                                   >= len(expected))},
                      stalls=stalls)
    assert bytes_from_words(run.received["o"]) == bytes(expected)


@pytest.mark.parametrize("length", [5, 8, 13, 16, 23])
@pytest.mark.parametrize("link_bytes", [1, WIDTH, 2 * WIDTH])
def test_a_reply_ends_with_tlast_and_partial_tkeep(length, link_bytes):
    """Every word full but the last, which carries tlast (the C2H channel's rule), whatever
    sizes the link transfers had."""
    dut = BytesToWords(WIDTH, link_bytes)
    payload = bytes(range(1, length + 1))
    transfers = words_from_bytes(payload, link_bytes, random.Random(length))
    words = []

    async def bench(ctx):
        ctx.set(dut.axis.tready, 1)
        for transfer in transfers:                 # back to back, flush low
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, transfer)
            taken = False
            while not taken:
                _, _, taken, tvalid, tdata, tkeep, tlast = await ctx.tick().sample(
                    dut.i.ready, dut.axis.tvalid, dut.axis.tdata, dut.axis.tkeep,
                    dut.axis.tlast)
                if tvalid:
                    words.append((tdata, tkeep, tlast))
        ctx.set(dut.i.valid, 0)
        ctx.set(dut.flush, 1)
        for _ in range(5):
            _, _, tvalid, tdata, tkeep, tlast = await ctx.tick().sample(
                dut.axis.tvalid, dut.axis.tdata, dut.axis.tkeep, dut.axis.tlast)
            if tvalid:
                words.append((tdata, tkeep, tlast))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    full, rest = divmod(length, WIDTH)     # whatever the link word, AXI words of WIDTH
    expected_keeps = [0xFF] * full
    if rest:
        expected_keeps.append((1 << rest) - 1)
    assert [keep for _, keep, _ in words] == expected_keeps
    assert [last for _, _, last in words] == [0] * (len(words) - 1) + [1]
    got = b"".join(tdata.to_bytes(8, "little")[:bin(keep).count("1")]
                   for tdata, keep, _ in words)
    assert got == payload


def request_words(frames):
    stream_bytes = b"".join(frames)
    words = []
    for start in range(0, len(stream_bytes), WIDTH):
        chunk = stream_bytes[start:start + WIDTH]
        words.append({"tdata": int.from_bytes(chunk, "little"),
                      "tkeep": (1 << len(chunk)) - 1, "tlast": start + WIDTH >= len(stream_bytes)})
    return words


@pytest.mark.parametrize("stalls", STALL_PATTERNS[::3], ids=str)
@pytest.mark.parametrize("command", ["IDENTIFY", "REDUCE"])
@pytest.mark.parametrize("link_bytes", [1, WIDTH, 2 * WIDTH])
def test_the_core_answers_through_the_xdma_streams(stalls, command, link_bytes):
    """One request in words, its reply out in words ending with tlast (the core going idle
    flushes the last, partial word)."""
    dut = shared_design(OverWords, link_bytes, lanes=max(1, link_bytes // 8), replay_depth=8,
                        max_dims=1, max_operands=1, pool_channels=1, clock_hz=125_000_000,
                        frame_timeout_cycles=10_000)
    if command == "IDENTIFY":
        request = encode_frame(Command.IDENTIFY, 1)
        reply = encode_frame(Command.IDENTIFY, 1, dut.dut.identity.encode())
    else:
        x = random_values(np.random.default_rng(1), format_of(np.float32), (2, 5),
                          edge_fraction=0.5)
        request = encode_frame(Command.REDUCE, 2, PARAMETERS[Command.REDUCE].pack(
            dtype=format_of(x.dtype).dtype, runs=2, run_length=5) + x.tobytes())
        reply = encode_frame(Command.REDUCE, 2,
                             reference.reduce_max(x, axes=[1], keepdims=False).tobytes())
    run = run_streams(dut, sources={dut.h2c: request_words([request])},
                      sinks={"c2h": (dut.c2h, -(-len(reply) // WIDTH))}, stalls=stalls)
    words = run.received["c2h"]
    got = b"".join(w.tdata.to_bytes(8, "little")[:bin(w.tkeep).count("1")] for w in words)
    (frame,) = FrameParser().feed(got)
    assert Status(frame.status) == Status.OK and got == reply
    assert [w.tlast for w in words] == [0] * (len(words) - 1) + [1]


def test_paired_words_keep_the_axi_side_at_a_word_a_cycle():
    """Two AXI words to a link word (H2C) and back (C2H) without bubbles on the AXI side:
    with nothing stalled, 20 full words go in 20 cycles (plus the one the first waits in the
    register) and 10 full link words come out as 20 AXI words on consecutive cycles."""
    words = [{"tdata": random.Random(k).getrandbits(64), "tkeep": 0xFF, "tlast": k == 19}
             for k in range(20)]
    pair = Unpack(2 * WIDTH)
    split = BytesToWords(WIDTH, 2 * WIDTH)
    got, sent = [], []

    async def pairing(ctx):
        ctx.set(pair.o.ready, 1)
        for word in words:
            ctx.set(pair.words.valid, 1)
            ctx.set(pair.words.payload, word)
            _, _, o_valid, o_payload = await ctx.tick().sample(pair.o.valid, pair.o.payload)
            if o_valid:
                got.append(o_payload)
        ctx.set(pair.words.valid, 0)
        _, _, o_valid, o_payload = await ctx.tick().sample(pair.o.valid, pair.o.payload)
        if o_valid:
            got.append(o_payload)

    async def splitting(ctx):
        ctx.set(split.axis.tready, 1)
        payload = b"".join(w["tdata"].to_bytes(8, "little") for w in words)
        transfers = [{"data": list(payload[k:k + 2 * WIDTH]), "count": 2 * WIDTH}
                     for k in range(0, len(payload), 2 * WIDTH)]
        cycles, index = 0, 0
        while index < len(transfers) or len(sent) < len(words):
            ctx.set(split.flush, index == len(transfers))
            ctx.set(split.i.valid, index < len(transfers))
            if index < len(transfers):
                ctx.set(split.i.payload, transfers[index])
            _, _, ready, tvalid = await ctx.tick().sample(split.i.ready, split.axis.tvalid)
            index += index < len(transfers) and ready
            if tvalid:
                sent.append(cycles)
            cycles += 1
            assert cycles < 100

    for dut, bench in ((pair, pairing), (split, splitting)):
        sim = Simulator(dut)
        sim.add_clock(1e-8)
        sim.add_testbench(bench)
        sim.run()
    assert [w.count for w in got] == [2 * WIDTH] * 10
    assert bytes_from_words(got) == b"".join(w["tdata"].to_bytes(8, "little") for w in words)
    assert sent == list(range(sent[0], sent[0] + 20))
