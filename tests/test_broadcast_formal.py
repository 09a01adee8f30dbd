"""Bounded proof (SymbiYosys + z3) that BroadcastMax's address generator walks the replay buffer
as a plainly written nested loop would, and frames the output rows as the loop does.

The plain model: for each outer index ``(i_0, .., i_{D-1})`` (outermost first), each beat ``b``
of a row, each replayed operand ``k``, the buffer address read is::

    base[k] + sum_d i_d * stride[k][d] + (0 if splat[k] else b)      (mod 2**addr_bits)

with ``stride`` in beats (0 along a broadcast dimension). The unit is configured, as the host
does (:func:`maxaccel.host.plan.plan_broadcast`), with the per-dimension *steps* derived from
those strides (``BroadcastMax``'s docstring: ``stride[d] - sum over d' > d of (counts[d'] - 1) *
stride[d']``), so the proof covers that relation too. Every configuration the docstring allows
is free (counts, row length, last beat's bytes, operand count, streamed or not, bases, splat
flags, strides), and so are ``output.ready`` and ``streamed.valid`` every cycle (stalls on both
sides, which is what the generator's run-ahead queue has to survive).

What is checked, for every input sequence of ``DEPTH`` cycles after a ``RUN``:

* each read of the buffer (the queue's head leaving, at the memory's read ports: a slot reads
  operands 2p and 2p + 1 together) is at the model's next addresses, in order, and no read
  comes after the model's last;
* each output beat's ``first``, ``last`` and ``nbytes`` are the model's, no beat comes after
  the pass's last, and ``busy`` falls in the cycle after the last beat is taken and not before.

The harness reaches into the elaborated unit for two things a port does not show: its address
queue (submodule ``queue``: the read handshake) and its buffer (submodule ``buffer``: the read
port's address).
"""

import pytest
from amaranth.hdl import Array, Assert, Assume, Elaboratable, Module, Mux, Signal
from formal import prove

from maxaccel.hdl.broadcast import BroadcastMax, BroadcastOp
from maxaccel.hdl.lane import LANE_BYTES

pytestmark = pytest.mark.formal

LANES, DEPTH_BEATS, MAX_DIMS, MAX_OPERANDS, MAX_COUNT = 1, 16, 2, 2, 2
#: Cycles covered from the RUN: reads start in the second, and the largest pass (2 x 2 rows of
#: 2 beats of one slot of two operands) reads 8 times, so every read is inside the bound. Output
#: beats come ``BroadcastMax.LATENCY`` (14) cycles after the RUN, past the bound: their framing
#: asserts hold vacuously here (18 cycles did not finish in 5 minutes) and the exact-cycle
#: simulation tests of tests/test_broadcast.py cover them.
DEPTH = 12


class AddressesAgainstLoops(Elaboratable):
    def __init__(self, break_steps=False):
        self.unit = BroadcastMax(LANES, DEPTH_BEATS, MAX_DIMS, MAX_OPERANDS, max_count=MAX_COUNT)
        self.break_steps = break_steps      # negative control: configure strides as steps
        self.latency = DEPTH - 1
        self.ready = Signal()
        self.streamed_valid = Signal()
        self.free = [self.ready, self.streamed_valid]

    def ports(self):
        return self.free

    def elaborate(self, platform):
        m = Module()
        unit = self.unit
        inner = unit.elaborate(platform)
        unit._MustUse__silence = True       # elaborated here, as `inner`
        m.submodules.unit = inner
        queue = inner._named_submodules["queue"][0]
        read_ports = inner._named_submodules["buffer"][0].read_ports
        addr_bits = unit.addr_bits
        config = unit.config

        # Any configuration the unit documents, fixed for the pass: a free input in the first
        # cycle, held from then on.
        first = Signal(init=1)
        m.d.sync += first.eq(0)
        count = iter(range(1000))

        def AnyConst(shape):
            n = next(count)
            free, held, value = (Signal(shape, name=f"{kind}{n}")
                                 for kind in ("free", "held", "constant"))
            self.free.append(free)
            m.d.comb += value.eq(Mux(first, free, held))
            m.d.sync += held.eq(value)
            return value

        operands = AnyConst(range(MAX_OPERANDS + 1))
        streamed = AnyConst(1)
        row_beats = AnyConst(range(MAX_COUNT + 1))
        last_nbytes = AnyConst(range(LANE_BYTES * LANES + 1))
        counts = [AnyConst(range(MAX_COUNT + 1)) for _ in range(MAX_DIMS)]
        bases = [AnyConst(addr_bits) for _ in range(MAX_OPERANDS)]
        splats = [AnyConst(1) for _ in range(MAX_OPERANDS)]
        strides = [[AnyConst(addr_bits) for _ in range(MAX_DIMS)] for _ in range(MAX_OPERANDS)]
        m.d.comb += [
            Assume((operands >= 1) | streamed),
            Assume(operands <= MAX_OPERANDS),
            Assume((row_beats >= 1) & (row_beats <= MAX_COUNT)),
            Assume((last_nbytes >= 1) & (last_nbytes <= LANE_BYTES * LANES)),
            *[Assume((count >= 1) & (count <= MAX_COUNT)) for count in counts],
            config.operands.eq(operands),
            config.streamed.eq(streamed),
            config.row_beats.eq(row_beats),
            config.last_nbytes.eq(last_nbytes),
            *[config.counts[d].eq(counts[d]) for d in range(MAX_DIMS)],
        ]
        for k in range(MAX_OPERANDS):
            m.d.comb += [config.operand[k].base.eq(bases[k]),
                         config.operand[k].splat.eq(splats[k])]
            for d in range(MAX_DIMS):
                step = strides[k][d] - sum((counts[e] - 1) * strides[k][e]
                                           for e in range(d + 1, MAX_DIMS))
                m.d.comb += config.operand[k].steps[d].eq(
                    strides[k][d] if self.break_steps else step[:addr_bits])

        # One RUN, at the first cycle; no LOAD. The pipeline's stalls are free.
        started = Signal()
        m.d.comb += [
            unit.command.valid.eq(~started),
            unit.command.payload.op.eq(BroadcastOp.RUN),
            unit.load.valid.eq(0),
            unit.streamed.valid.eq(self.streamed_valid),
            unit.output.ready.eq(self.ready),
        ]
        with m.If(unit.command.valid & unit.command.ready):
            m.d.sync += started.eq(1)

        # The plain loops: reads in (outer indices, beat, slot) order, a slot being the pair of
        # operands (2p, 2p + 1) the unit's READ_PORTS read ports fetch together.
        ports = BroadcastMax.READ_PORTS
        slots = Mux(operands == 0, 1, (operands + ports - 1) // ports)
        rows = counts[0] * counts[1]
        index = [Signal(range(MAX_COUNT), name=f"index{d}") for d in range(MAX_DIMS)]
        beat, slot = Signal(range(MAX_COUNT)), Signal(range(MAX_OPERANDS))
        reads, outputs = Signal(8), Signal(8)

        def address(k):
            """The plain loop's address of operand ``k`` (a Value) at the current position."""
            return (Array(bases)[k]
                    + sum(index[d] * Array(s[d] for s in strides)[k] for d in range(MAX_DIMS))
                    + Mux(Array(splats)[k], 0, beat))[:addr_bits]

        dequeue = queue.r_en & queue.r_rdy
        with m.If(dequeue):
            m.d.comb += Assert(reads < rows * row_beats * slots)
            for port, read_port in enumerate(read_ports):
                k = slot * ports + port
                with m.If(k < operands):
                    m.d.comb += Assert(read_port.addr == address(k))
            m.d.sync += reads.eq(reads + 1)
            last_slot, last_beat = slot == slots - 1, beat == row_beats - 1
            m.d.sync += slot.eq(Mux(last_slot, 0, slot + 1))
            with m.If(last_slot):
                m.d.sync += beat.eq(Mux(last_beat, 0, beat + 1))
                with m.If(last_beat):
                    inner_ends = index[1] == counts[1] - 1
                    m.d.sync += index[1].eq(Mux(inner_ends, 0, index[1] + 1))
                    with m.If(inner_ends):
                        m.d.sync += index[0].eq(index[0] + 1)

        # The output rows: framing, count, and busy falling after the last beat.
        out_beat = Signal(range(MAX_COUNT))
        taken = unit.output.valid & unit.output.ready
        total = rows * row_beats
        with m.If(taken):
            row_last = out_beat == row_beats - 1
            m.d.comb += [
                Assert(outputs < total),
                Assert(unit.output.payload.first == (out_beat == 0)),
                Assert(unit.output.payload.last == row_last),
                Assert(unit.output.payload.nbytes == Mux(row_last, last_nbytes,
                                                         LANE_BYTES * LANES)),
            ]
            m.d.sync += [outputs.eq(outputs + 1), out_beat.eq(Mux(row_last, 0, out_beat + 1))]
        with m.If(started):
            m.d.comb += Assert(unit.busy == (outputs != total))
        return m


def test_address_generator_walks_the_plain_loops(tmp_path):
    passed, seconds, log = prove(AddressesAgainstLoops(), tmp_path, mode="bmc", depth=DEPTH,
                                 solver="yices")
    assert passed, f"counterexample, see {tmp_path}/top\n{log[-3000:]}"
    print(f"BroadcastMax addresses and framing, {DEPTH} cycles: proved in {seconds:.1f} s")


def test_the_loop_check_finds_wrong_steps(tmp_path):
    """Negative control: strides given where the unit wants steps must fail."""
    passed, _, _ = prove(AddressesAgainstLoops(break_steps=True), tmp_path, mode="bmc",
                         depth=DEPTH, solver="yices")
    assert not passed, "strides passed as steps were 'proved' right: the check checks nothing"
