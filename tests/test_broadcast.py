# amaranth: UnusedElaboratable=no
"""BroadcastMax against the golden model: broadcast shapes, every dtype, stalls, exact cycles.

Each simulation runs a *batch* of passes (LOADs then a RUN per case) through a small harness
that carries each RUN's ``config`` in the command payload and holds it while the unit is busy,
as the command engine does. Batching amortises elaboration; every case is still checked on its
own, bit for bit, with its own framing.
"""

from types import SimpleNamespace

import numpy as np
import pytest
from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from maxaccel.hdl.beat import beat_layout
from maxaccel.hdl.broadcast import BroadcastMax, BroadcastOp
from maxaccel.contract.dtypes import FORMATS, DType, format_of
from maxaccel.host.plan import plan_broadcast
from broadcast_model import (load_commands, pack_operand, run_cycles, slots, unit_config,
                             unpack_output)
from maxaccel.sim import reference
from maxaccel.sim.streams import (STALL_PATTERNS, Stalls, lanes_to_bytes, run_streams,
                                  shared_design)
from maxaccel.sim.values import edge_bits, random_values

MAX_DTYPES = [f for f in FORMATS.values() if f.kind != "bool"]
FLOATS = [f for f in FORMATS.values() if f.is_float]
STALL_IDS = [str(s) for s in STALL_PATTERNS]


class Harness(wiring.Component):
    """Holds each RUN's config, taken from the command payload, while the unit is busy."""

    def __init__(self, unit):
        self.unit = unit
        beat = beat_layout(unit.lanes)
        super().__init__({
            "command": In(stream.Signature(data.StructLayout({
                "command": unit.command_layout, "config": unit.config_layout}))),
            "load": In(stream.Signature(beat)),
            "streamed": In(stream.Signature(beat)),
            "output": Out(stream.Signature(beat)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = unit = self.unit
        held = Signal(unit.config_layout)
        taken = self.command.valid & unit.command.ready
        m.d.comb += [
            unit.command.valid.eq(self.command.valid),
            unit.command.payload.eq(self.command.payload.command),
            self.command.ready.eq(unit.command.ready),
            unit.config.eq(Mux(taken, self.command.payload.config.as_value(), held.as_value())),
            self.busy.eq(unit.busy),
        ]
        with m.If(taken):
            m.d.sync += held.eq(self.command.payload.config)
        wiring.connect(m, wiring.flipped(self.load), unit.load)
        wiring.connect(m, wiring.flipped(self.streamed), unit.streamed)
        wiring.connect(m, unit.output, wiring.flipped(self.output))
        return m


def beat_payloads(beats, row_beats, last_nbytes):
    """Payloads of ``beats`` (uint8, one row per beat) framed as rows of ``row_beats`` beats."""
    payloads = []
    for index, beat in enumerate(beats):
        position = index % row_beats
        last = position == row_beats - 1
        payloads.append({
            "data": [int(lane) for lane in beat.view("<u8")],
            "nbytes": last_nbytes if last else beats.shape[1],
            "first": position == 0,
            "last": last,
        })
    return payloads


def _harness(lanes, depth, max_dims, max_operands, **limits):
    return Harness(BroadcastMax(lanes, depth, max_dims, max_operands, **limits))


class Batch:
    """Cases to run one after the other in one simulation of one unit."""

    def __init__(self, lanes, depth=256, max_dims=3, max_operands=5, *, fill=True, **limits):
        self.harness = shared_design(_harness, lanes, depth, max_dims, max_operands, **limits)
        self.unit = self.harness.unit
        # A splat operand's rows are loaded as the engine sends them, element 0 then junk, with
        # ``fill`` set (the unit repeats the element); else already repeated, as stored.
        self.fill = fill
        self.cases = []
        self.commands, self.loads, self.streamed = [], [], []

    def add(self, arrays, what="", minimum=False):
        """A pass of ``arrays`` (the Max, or with ``minimum`` the Min); returns its plan."""
        arrays = [np.asarray(a) for a in arrays]
        fmt = format_of(arrays[0].dtype)
        plan = plan_broadcast([a.shape for a in arrays], fmt.nbytes, **self.unit.limits)
        config = unit_config(plan, fmt.dtype, minimum)
        for index, base, beats in load_commands(plan):
            operand = plan.operands[index]
            stored = pack_operand(plan, index, arrays[index])
            fill = self.fill and operand.splat
            if fill:
                stored = stored.copy()
                stored[:, fmt.nbytes:] = 0xA5
            self.commands.append({"command": {"op": BroadcastOp.LOAD, "base": base,
                                              "count": beats, "fill": fill}, "config": config})
            self.loads += beat_payloads(stored, operand.row_beats, plan.beat_bytes)
        self.commands.append({"command": {"op": BroadcastOp.RUN, "base": 0, "count": 0},
                              "config": config})
        if plan.streamed is not None:
            self.streamed += beat_payloads(
                pack_operand(plan, plan.streamed.index, arrays[plan.streamed.index]),
                plan.row_beats, plan.last_nbytes)
        shapes = ", ".join(str(a.shape) for a in arrays)
        self.cases.append((arrays, plan, minimum,
                           f"{_name(minimum)} {what} {fmt.numpy_dtype} [{shapes}]",
                           lambda raw: unpack_output(plan, raw, arrays[0].dtype)))
        return plan

    def add_fold(self, arrays, what="fold", minimum=False):
        """A fold: S >= 2 same-shape ``(rows, row_length)`` operands, rows of at most one beat,
        streamed interleaved row by row (``streamed`` = S, nothing replayed); the Max, or with
        ``minimum`` the Min."""
        arrays = [np.asarray(a) for a in arrays]
        fmt = format_of(arrays[0].dtype)
        rows, row_length = arrays[0].shape
        unit = self.unit
        beat_bytes = 8 * unit.lanes
        row_bytes = row_length * fmt.nbytes
        assert row_bytes <= beat_bytes
        fold = SimpleNamespace(output_beats=rows, row_beats=1, last_nbytes=row_bytes,
                               beat_bytes=beat_bytes)
        config = {"dtype": int(fmt.dtype), "minimum": int(minimum), "operands": 0,
                  "streamed": len(arrays),
                  "row_beats": 1, "last_nbytes": row_bytes,
                  "counts": [1] * (unit.max_dims - 1) + [rows],
                  "operand": [{"base": 0, "splat": 0, "steps": [0] * unit.max_dims}] *
                  unit.max_operands}
        self.commands.append({"command": {"op": BroadcastOp.RUN, "base": 0, "count": 0},
                              "config": config})
        interleaved = np.stack(arrays, axis=1).reshape(rows * len(arrays), row_length)
        beats = np.zeros((len(interleaved), beat_bytes), np.uint8)
        beats[:, :row_bytes] = interleaved.view(np.uint8).reshape(len(interleaved), row_bytes)
        self.streamed += beat_payloads(beats, 1, row_bytes)

        def unpack(raw):
            return raw.reshape(rows, beat_bytes)[:, :row_bytes].copy().view(
                arrays[0].dtype).reshape(rows, row_length)
        self.cases.append((arrays, fold, minimum,
                           f"{_name(minimum)} {what} {fmt.numpy_dtype} S={len(arrays)}", unpack))
        return fold

    def run(self, stalls=Stalls()):
        h = self.harness
        sources = {h.command: self.commands}
        if self.loads:
            sources[h.load] = self.loads
        if self.streamed:
            sources[h.streamed] = self.streamed
        total = sum(case[1].output_beats for case in self.cases)

        def idle_at_end(ctx):
            assert not ctx.get(h.busy), "the unit is still busy after its last output beat"

        run = run_streams(h, sources=sources, sinks={"output": (h.output, total)},
                          stalls=stalls, check=idle_at_end, timeout=5_000)
        received = run.received["output"]
        start = 0
        for arrays, plan, minimum, what, unpack in self.cases:
            beats = received[start:start + plan.output_beats]
            start += plan.output_beats
            for position, beat in enumerate(beats):
                in_row = position % plan.row_beats
                last = in_row == plan.row_beats - 1
                expected = (in_row == 0, last, plan.last_nbytes if last else plan.beat_bytes)
                got = (bool(beat.first), bool(beat.last), int(beat.nbytes))
                assert got == expected, f"{what}: beat {position} (first, last, nbytes) " \
                                        f"{got} != {expected}"
            raw = np.frombuffer(b"".join(lanes_to_bytes(b.data) for b in beats), np.uint8)
            actual = unpack(raw)
            extreme = reference.min if minimum else reference.max
            reference.assert_same_bits(actual, extreme(*arrays), what)
        return run


def _name(minimum):
    return "Min" if minimum else "Max"


def random_shapes(rng, max_elements=36):
    """1..5 operand shapes that broadcast: size-1 dims anywhere, scalars, biases, same shapes."""
    while True:
        rank = int(rng.integers(0, 5))
        full = tuple(int(s) for s in rng.integers(1, 5, size=rank))
        shapes = []
        for _ in range(int(rng.integers(1, 6))):
            style = rng.choice(["full", "scalar", "bias", "trailing", "ones"])
            if style == "full":
                shape = full
            elif style == "scalar":
                shape = () if rng.random() < 0.5 else (1,) * int(rng.integers(1, rank + 2))
            elif style == "bias":
                shape = full[-1:]
            else:
                keep = int(rng.integers(0, rank + 1))
                shape = tuple(s if rng.random() < 0.5 else 1 for s in full[rank - keep:])
            shapes.append(shape)
        elements = int(np.prod(np.broadcast_shapes(*shapes)))
        if 0 < elements <= max_elements:
            return shapes


def random_case(rng, fmt):
    shapes = random_shapes(rng)
    edge_fraction = float(rng.choice([0.05, 0.25]))
    return [random_values(rng, fmt, shape, edge_fraction=edge_fraction) for shape in shapes]


def finite(rng, fmt, shape):
    """Random values without NaN."""
    values = random_values(rng, fmt, shape, edge_fraction=0.3)
    if fmt.is_float:
        nan = reference.is_nan(values)
        values[nan] = np.asarray(1.5, fmt.numpy_dtype)
    return values


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=STALL_IDS)
@pytest.mark.parametrize("lanes", [1, 2])
def test_random_broadcast(lanes, stalls):
    rng = np.random.default_rng([lanes, stalls.seed])
    batch = Batch(lanes)
    for index in range(40):
        # Max and Min alternate, so each pass runs behind one of the other mode, and each
        # dtype comes both ways.
        fmt = MAX_DTYPES[index % len(MAX_DTYPES)]
        minimum = (index + index // len(MAX_DTYPES)) % 2 == 1
        batch.add(random_case(rng, fmt), f"case {index}", minimum)
    batch.run(stalls)


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=STALL_IDS)
def test_random_broadcast_four_lanes(stalls):
    rng = np.random.default_rng([4, stalls.seed])
    batch = Batch(4)
    for index in range(12):
        fmt = MAX_DTYPES[(index + 3 * stalls.seed) % len(MAX_DTYPES)]
        batch.add(random_case(rng, fmt), f"case {index}", minimum=index % 2 == 1)
    batch.run(stalls)


# Shape sets that cover each way an operand reaches the unit.
SHAPE_SETS = [
    [(2, 3), (3,), (2, 1), ()],        # streamed, bias, splat column, scalar
    [(3, 1), (1, 4)],                  # memory only, mutual broadcasting
    [(2, 1, 3), (1, 2, 1), (2, 2, 3)],  # size-1 dims in the middle
    [(5,), (5,), (5,)],                # same shapes: one streams, two replayed
]


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=STALL_IDS)
def test_nan_in_every_position(stalls):
    rng = np.random.default_rng(100 + stalls.seed)
    batch = Batch(2)
    for fmt in FLOATS:
        nans = edge_bits(fmt)[reference.is_nan(edge_bits(fmt))]
        for shapes in SHAPE_SETS:
            for position in range(len(shapes)):
                arrays = [finite(rng, fmt, shape) for shape in shapes]
                target = arrays[position]
                where = rng.random(target.shape) < 0.5
                where.flat[rng.integers(target.size)] = True
                target[where] = rng.choice(nans, size=int(where.sum()))
                for minimum in (False, True):
                    batch.add(arrays, f"NaN in operand {position}", minimum)
    batch.run(stalls)


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=STALL_IDS)
def test_signed_zero_ties(stalls):
    batch = Batch(2)
    for fmt in FLOATS:
        zero = np.zeros((), fmt.numpy_dtype)
        plus, minus = zero, -zero
        alternating = np.array([plus, minus, plus, minus, minus, plus], fmt.numpy_dtype)
        for first, second in [(plus, minus), (minus, plus)]:
            full = np.full((2, 3), first, fmt.numpy_dtype)
            for shapes_and_values in [
                [full, np.full((3,), second, fmt.numpy_dtype)],           # streamed vs bias
                [np.full((3,), second, fmt.numpy_dtype), full],
                [np.full((2, 1), first, fmt.numpy_dtype), np.full((1, 3), second,
                                                                  fmt.numpy_dtype)],
                [np.full((4,), first, fmt.numpy_dtype), np.full((4,), second, fmt.numpy_dtype),
                 np.full((), first, fmt.numpy_dtype)],
                [alternating, alternating[::-1].copy()],
                [alternating.reshape(2, 3), np.full((2, 1), second, fmt.numpy_dtype)],
            ]:
                for minimum in (False, True):
                    batch.add(shapes_and_values, f"±0 ({first!r}, {second!r})", minimum)
    batch.run(stalls)


def test_single_operand_canonicalises_nan():
    """Max and Min of one operand (it is full, so it streams) still canonicalise its NaNs."""
    batch = Batch(1)
    for fmt in FLOATS:
        for minimum in (False, True):
            batch.add([edge_bits(fmt)], "alone", minimum)
            batch.add([edge_bits(fmt)[:1].reshape(())], "scalar alone", minimum)
    batch.run()


@pytest.mark.parametrize("fill", [True, False], ids=["filled by the unit", "filled by the host"])
def test_every_dtype_splat(fill):
    """A splat operand's element fills its beat, for every element size."""
    rng = np.random.default_rng(7)
    batch = Batch(2, fill=fill)
    for fmt in MAX_DTYPES:
        batch.add([finite(rng, fmt, (3, 9)), finite(rng, fmt, (3, 1))], "splat")
        batch.add([finite(rng, fmt, (1, 9)), finite(rng, fmt, (3, 1))], "splat, memory only")
    batch.run()


def run_arrivals(lanes, arrays, **limits):
    """Edges at which each output beat of one case arrived, and the edge its RUN was taken."""
    batch = Batch(lanes, **limits)
    plan = batch.add(arrays)
    run = batch.run()
    # LOAD of n beats: accepted at one edge, n beats at the next n; the next command follows.
    run_taken = 1 + sum(1 + beats for _, _, beats in load_commands(plan))
    return plan, run_taken, run.arrivals["output"]


@pytest.mark.parametrize("lanes", [1, 2])
def test_throughput_streamed_and_replayed(lanes):
    rng = np.random.default_rng(9)
    fmt = format_of(np.float32)
    arrays = [finite(rng, fmt, (6, 20)), finite(rng, fmt, (20,))]
    plan, run_taken, arrivals = run_arrivals(lanes, arrays)
    assert len(plan.replayed) == 1 and plan.streamed is not None
    # One output beat per cycle; the first is offered LATENCY cycles after the RUN is accepted.
    assert arrivals == [run_taken + BroadcastMax.LATENCY + 1 + i
                        for i in range(plan.output_beats)]
    assert arrivals[-1] - run_taken == run_cycles(plan)


@pytest.mark.parametrize("shapes, cycles", [
    ([(40,)], 1), ([(1, 24), (5, 1)], 1), ([(3, 8), (8,), (3, 1)], 1),
    ([(1, 8), (2, 1), (1, 1)], 2), ([(2, 8), (8,), (2, 1), (1,), (2, 8)], 2),
    ([(2, 8), (8,), (2, 1), (1,), (1, 8), (2, 1)], 3)],
    ids=["streamed", "two replayed", "streamed+two", "three replayed", "streamed+four",
         "streamed+five"])
def test_throughput_replayed_operands(shapes, cycles):
    rng = np.random.default_rng(10)
    fmt = format_of(np.int32)
    arrays = [finite(rng, fmt, shape) for shape in shapes]
    plan, run_taken, arrivals = run_arrivals(1, arrays)
    assert slots(plan) == cycles
    # Two replayed beats read per cycle: an output beat every ``ceil(M / 2)`` cycles.
    assert arrivals == [run_taken + BroadcastMax.LATENCY + cycles * (i + 1)
                        for i in range(plan.output_beats)]
    assert arrivals[-1] - run_taken == run_cycles(plan)


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=STALL_IDS)
def test_fold_of_streamed_operands(stalls):
    """S same-shape streamed operands, rows of one beat or less: each S beats fold into one,
    for every dtype, NaNs and signed zeros in any position, between ordinary passes."""
    rng = np.random.default_rng(14)
    batch = Batch(2, max_dims=2, max_operands=2)
    for index, fmt in enumerate(MAX_DTYPES):
        per_beat = 16 // fmt.nbytes
        count = [2, 3, 5][index % 3]
        row_length = per_beat if index % 2 else max(1, per_beat - 1)
        batch.add_fold([random_values(rng, fmt, (3, row_length), edge_fraction=0.3)
                        for _ in range(count)], minimum=(index + stalls.seed) % 2 == 0)
        if index % 4 == 0:
            batch.add([finite(rng, fmt, (2, 5)), finite(rng, fmt, (5,))], "between folds",
                      minimum=index % 8 == 4)
    batch.run(stalls)


@pytest.mark.parametrize("count", [2, 3, 7])
def test_throughput_fold(count):
    """A fold takes one streamed beat per cycle: an output beat every S cycles."""
    rng = np.random.default_rng(15)
    batch = Batch(1, max_dims=2, max_operands=2)
    batch.add_fold([finite(rng, format_of(np.float32), (6, 2)) for _ in range(count)])
    arrivals = batch.run().arrivals["output"]
    run_taken = 1
    assert arrivals == [run_taken + BroadcastMax.LATENCY + count * (i + 1) for i in range(6)]


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=STALL_IDS)
def test_at_the_limits(stalls):
    """A buffer filled to its last beat (odd depth: steps wrap modulo 2**addr_bits), counters
    at their largest count, max_dims outer dimensions, max_operands replayed operands."""
    rng = np.random.default_rng(11)
    batch = Batch(1, depth=27, max_dims=2, max_operands=3, max_count=3)
    fmt = format_of(np.uint16)
    # Output (3, 3, 12), rows of 3 beats; no operand is full, each takes 9 beats.
    shapes = [(3, 1, 12), (3, 3, 1), (1, 3, 12)]
    plan = batch.add([finite(rng, fmt, s) for s in shapes], "three replayed")
    assert (plan.memory_beats, plan.counts, plan.row_beats) == (27, (3, 3), 3)
    assert [o.splat for o in plan.replayed] == [False, True, False]
    batch.add([finite(rng, fmt, (3, 3, 12)), finite(rng, fmt, (3, 1, 12)),
               finite(rng, fmt, (1, 3, 1))], "streamed", minimum=True)
    batch.add([finite(rng, fmt, (1, 3, 12)), finite(rng, fmt, (3, 1, 12))], "memory only")
    batch.run(stalls)


def test_load_of_nothing_and_idle():
    """A LOAD of zero beats completes at once; the unit is idle and ready before and after."""
    batch = Batch(1)
    config = unit_config(plan_broadcast([(2,)], 4, **batch.unit.limits), DType.FLOAT)
    batch.commands.append({"command": {"op": BroadcastOp.LOAD, "base": 3, "count": 0},
                           "config": config})
    batch.add([np.array([1.0, -0.0], np.float32), np.array([0.0, -1.0], np.float32)])
    batch.run()


def test_limits_are_attributes():
    unit = BroadcastMax(2, 300, 4, 3, max_count=1000)
    assert unit.limits == {"lanes": 2, "depth": 300, "max_dims": 4, "max_operands": 3,
                           "max_count": 1000}
    assert unit.addr_bits == 9
    assert unit.config_layout.members["counts"].length == 4
    assert unit.config_layout.members["operand"].length == 3
    with pytest.raises(ValueError, match="depth must be an integer >= 2"):
        BroadcastMax(1, 1, 2, 2)
    with pytest.raises(ValueError, match="max_operands"):
        BroadcastMax(1, 16, 2, 0)
