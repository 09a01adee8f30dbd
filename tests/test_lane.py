"""LaneMax in Amaranth's simulator against the golden model, bit for bit, for every dtype.

One simulator per latency serves every test: :class:`LaneBench` keeps it running and feeds it
a new pair of lanes every cycle (with any dtype per cycle), so each test costs cycles rather than
simulator start-ups. Each result is checked against the inputs of exactly ``latency`` cycles
before, which checks the latency and the one-pair-per-cycle throughput along with the values.
"""

import functools
import gc
from collections import deque

import numpy as np
import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator
from hypothesis import given, settings
from hypothesis import strategies as st

from maxaccel.boards.resources import MuxedPerDtypeLane
from maxaccel.hdl.lane import LANE_BYTES, LaneMax
from maxaccel.contract.dtypes import DType, FORMATS
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import edge_bits

LATENCIES = (0, 1, 2, 3)
ALL_FORMATS = list(FORMATS.values())
FORMAT_IDS = [f.dtype.name for f in ALL_FORMATS]


def clocked(dut):
    """``dut`` in a design with a ``sync`` domain even when it has no registers (latency 0)."""
    m = Module()
    m.domains.sync = ClockDomain()
    m.submodules.dut = dut
    return m


class LaneBench:
    """A running simulation of one ``LaneMax`` that computes batches of lanes on demand.

    A background testbench drives one queued ``(dtype, a, b)`` per cycle (idle cycles with
    arbitrary operands in between batches) and records the result ``latency`` cycles later.
    """

    def __init__(self, latency, make_lane=None):
        self.latency = latency
        self.dut = make_lane() if make_lane else LaneMax(latency=latency)
        self.pending = deque()
        self.done = {}
        self.cycles = 0
        self._next_tag = 0
        self.sim = Simulator(clocked(self.dut))
        self.sim.add_clock(1e-6)
        self.sim.add_testbench(self._drive, background=True)

    async def _drive(self, ctx):
        in_flight = deque()
        idle_word = 0x0123_4567_89AB_CDEF
        while True:
            if self.pending:
                tag, dtype, a, b = self.pending.popleft()
            else:
                tag, dtype, a, b = None, DType.FLOAT, idle_word, ~idle_word & (2**64 - 1)
                idle_word = (idle_word * 0x9E37_79B9_7F4A_7C15 + 1) % 2**64
            ctx.set(self.dut.dtype, dtype)
            ctx.set(self.dut.a, a)
            ctx.set(self.dut.b, b)
            in_flight.append(tag)
            # The result now on the port belongs to the operands of `latency` cycles ago.
            if len(in_flight) > self.latency:
                done_tag = in_flight.popleft()
                if done_tag is not None:
                    self.done[done_tag] = ctx.get(self.dut.result)
            await ctx.tick()
            self.cycles += 1

    def run(self, dtypes, a_words, b_words):
        """Results of ``max(a, b)`` for each triple, fed back to back, one per cycle."""
        tags = []
        for dtype, a, b in zip(dtypes, a_words, b_words, strict=True):
            tags.append(self._next_tag)
            self.pending.append((self._next_tag, int(dtype), int(a), int(b)))
            self._next_tag += 1
        while tags and tags[-1] not in self.done:
            self.sim.advance()
        return [self.done.pop(tag) for tag in tags]


@functools.cache
def bench(latency):
    return LaneBench(latency)


# --- packing and the golden model ---------------------------------------------------------


def pack(elements, fmt):
    """Lane words (uint64) holding ``elements`` (a 1-D array of ``fmt``), little-endian."""
    raw = np.ascontiguousarray(elements).view(np.uint8)
    assert raw.size % LANE_BYTES == 0
    return raw.view("<u8")


def unpack(words, fmt):
    """The elements of lane words as an array of ``fmt``'s dtype (raw bytes, even for bool)."""
    return np.array(words, dtype="<u8").view(fmt.numpy_dtype)


def golden_max(a, b):
    if a.dtype == np.bool_:  # ONNX Max has no bool; ReduceMax-20 does and uses the same order
        return reference.reduce_max(np.stack([a, b]), axes=[0], keepdims=False)
    return reference.max(a, b)


def check_lane_pairs(latency, fmt, a, b, what, bench=bench):
    """Run element arrays ``a`` and ``b`` (whole lanes of ``fmt``) through the lane, compare."""
    a_words, b_words = pack(a, fmt), pack(b, fmt)
    words = bench(latency).run([fmt.dtype] * len(a_words), a_words, b_words)
    assert_same_bits(unpack(words, fmt), golden_max(a, b), f"{what} latency={latency}")


# --- edge values: every ordered pair ------------------------------------------------------


def edge_pairs(fmt):
    """Every ordered pair of edge values as element arrays ``a``, ``b`` filling whole lanes."""
    edges = edge_bits(fmt)
    a, b = np.repeat(edges, len(edges)), np.tile(edges, len(edges))
    padding = -len(a) % (LANE_BYTES // fmt.nbytes)
    return (np.concatenate([a, np.resize(edges, padding)]),
            np.concatenate([b, np.resize(edges[::-1], padding)]))


@pytest.mark.parametrize("latency", LATENCIES)
@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=FORMAT_IDS)
def test_every_pair_of_edge_values(fmt, latency):
    check_lane_pairs(latency, fmt, *edge_pairs(fmt), f"{fmt.dtype.name} edge pairs")


@functools.cache
def muxed_bench(latency):
    return LaneBench(latency, MuxedPerDtypeLane)


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=FORMAT_IDS)
def test_resource_baseline_muxed_lane_is_correct(fmt):
    """The per-dtype comparators docs/resources.md compares the lane with are right too."""
    check_lane_pairs(0, fmt, *edge_pairs(fmt), f"MuxedPerDtypeLane {fmt.dtype.name}",
                bench=muxed_bench)


def test_edge_pairs_cover_the_contract():
    """The edge values include what the contract singles out, so the test above checks it."""
    for fmt in ALL_FORMATS:
        bits = set(int(x) for x in reference.bits_of(edge_bits(fmt)))
        if fmt.is_float:
            infinity = fmt.lowest & ~fmt.sign_mask
            assert {0, fmt.sign_mask, infinity, fmt.lowest, fmt.canonical_nan} <= bits
            assert any(b & ~fmt.sign_mask > infinity and b & fmt.sign_mask for b in bits)
            assert any(infinity < b < fmt.canonical_nan for b in bits)  # signalling
            assert any(0 < b < 1 << fmt.mantissa_bits for b in bits)  # subnormal
        else:
            assert {0, fmt.lowest} <= bits


# --- random lanes (hypothesis) ------------------------------------------------------------


@st.composite
def element_bits(draw, fmt):
    """One element's bits: a random pattern or an edge value."""
    if fmt.kind == "bool":
        return draw(st.integers(0, 1))
    edges = [int(x) for x in reference.bits_of(edge_bits(fmt))]
    return draw(st.one_of(st.integers(0, 2**fmt.bits - 1), st.sampled_from(edges)))


@st.composite
def lane_pair(draw, fmt):
    """Two lanes of ``fmt`` as element bit lists; some elements tied or differing in sign only."""
    per_lane = LANE_BYTES // fmt.nbytes
    a = [draw(element_bits(fmt)) for _ in range(per_lane)]
    b = []
    for x in a:
        relation = draw(st.sampled_from(["independent", "independent", "equal", "other sign"]))
        if relation == "equal":
            b.append(x)
        elif relation == "other sign" and fmt.kind != "bool":
            b.append(x ^ fmt.sign_mask)
        else:
            b.append(draw(element_bits(fmt)))
    return a, b


def to_array(bits, fmt):
    return reference.from_bits(np.array(bits, dtype=fmt.uint_dtype), fmt)


@pytest.mark.parametrize("latency", LATENCIES)
@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=FORMAT_IDS)
@settings(max_examples=25)
@given(data=st.data())
def test_random_lanes(fmt, latency, data):
    pairs = data.draw(st.lists(lane_pair(fmt), min_size=1, max_size=24))
    a = to_array([x for pair in pairs for x in pair[0]], fmt)
    b = to_array([x for pair in pairs for x in pair[1]], fmt)
    check_lane_pairs(latency, fmt, a, b, f"{fmt.dtype.name} random lanes")


@pytest.mark.parametrize("latency", LATENCIES)
@settings(max_examples=50)
@given(data=st.data())
def test_dtype_changes_every_cycle(latency, data):
    """The dtype travels with its operands through the pipeline: a new dtype every cycle."""
    formats = data.draw(st.lists(st.sampled_from(ALL_FORMATS), min_size=1, max_size=32))
    pairs = [data.draw(lane_pair(fmt)) for fmt in formats]
    a_words = [int(pack(to_array(a, fmt), fmt)[0]) for fmt, (a, _) in zip(formats, pairs)]
    b_words = [int(pack(to_array(b, fmt), fmt)[0]) for fmt, (_, b) in zip(formats, pairs)]
    words = bench(latency).run([fmt.dtype for fmt in formats], a_words, b_words)
    for cycle, (fmt, (a, b), word) in enumerate(zip(formats, pairs, words)):
        assert_same_bits(unpack([word], fmt), golden_max(to_array(a, fmt), to_array(b, fmt)),
                         f"cycle {cycle} {fmt.dtype.name} latency={latency}")


# --- timing -------------------------------------------------------------------------------


@pytest.mark.parametrize("latency", LATENCIES)
def test_result_appears_exactly_latency_cycles_later(latency):
    """Drive the ports directly: the result of cycle k is on the port in cycle k + latency and
    the operands change every cycle (throughput one pair per cycle)."""
    fmt = FORMATS[DType.INT32]
    rng = np.random.default_rng(latency)
    a = rng.integers(-2**31, 2**31, size=16).astype(np.int32)
    b = rng.integers(-2**31, 2**31, size=16).astype(np.int32)
    a_words, b_words = pack(a, fmt), pack(b, fmt)
    expected = [int(w) for w in pack(golden_max(a, b), fmt)]
    dut = LaneMax(latency=latency)
    seen = []

    async def testbench(ctx):
        ctx.set(dut.dtype, fmt.dtype)
        for cycle in range(len(a_words) + latency):
            if cycle < len(a_words):
                ctx.set(dut.a, int(a_words[cycle]))
                ctx.set(dut.b, int(b_words[cycle]))
            seen.append(ctx.get(dut.result))
            await ctx.tick()

    sim = Simulator(clocked(dut))
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    assert seen[latency:] == expected
    assert expected[0] not in seen[:latency]


# The half-built component warns as unused when collected; collect it inside the test.
@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("latency", [-1, max(LATENCIES) + 1, 1.5])
def test_rejects_other_latencies(latency):
    with pytest.raises(ValueError, match="latency") as excinfo:
        LaneMax(latency=latency)
    del excinfo
    gc.collect()
