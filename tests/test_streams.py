"""run_streams on a shared design: a kept simulator, reset between runs, answers as a new one."""

import pytest
from amaranth.hdl import Module
from amaranth.lib import fifo, stream, wiring

from maxaccel.sim import streams
from maxaccel.sim.streams import (STALL_PATTERNS, Stalls, StreamTimeout, run_streams,
                                  shared_design)


class Queue(wiring.Component):
    """A stream through a FIFO of ``depth`` bytes (a memory, so a reset must clear it too),
    counting the bytes it took in ``taken`` (a register)."""

    def __init__(self, depth):
        self.depth = depth
        super().__init__({"i": wiring.In(stream.Signature(8)),
                          "o": wiring.Out(stream.Signature(8)),
                          "taken": wiring.Out(8)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue = queue = fifo.SyncFIFOBuffered(width=8, depth=self.depth)
        wiring.connect(m, wiring.flipped(self.i), queue.w_stream)
        wiring.connect(m, queue.r_stream, wiring.flipped(self.o))
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += self.taken.eq(self.taken + 1)
        return m


def _observed(dut, data, stalls):
    seen = {}

    def check(ctx):
        seen["taken"] = ctx.get(dut.taken)

    run = run_streams(dut, sources={dut.i: data}, sinks={"o": (dut.o, len(data))},
                      stalls=stalls, check=check)
    return run.received["o"], run.cycles, run.arrivals, seen["taken"]


def test_a_shared_design_is_made_once_per_argument_list():
    made = []

    def factory(*args, **kwargs):
        made.append((args, kwargs))
        return object()

    assert shared_design(factory, 4) is shared_design(factory, 4)
    assert shared_design(factory, 4) is not shared_design(factory, 5)
    assert shared_design(factory, 4, depth=6) is shared_design(factory, 4, depth=6)
    assert made == [((4,), {}), ((5,), {}), ((4,), {"depth": 6})]


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
def test_a_kept_simulator_answers_as_a_new_one(stalls):
    """The same bytes, cycles and register values as a new simulator of a new design, after
    runs that left bytes in the FIFO and a count in the register (a failed run included)."""
    data = list(range(3, 40, 3))
    shared = shared_design(Queue, 8)
    with pytest.raises(AssertionError, match="beyond the expected"):
        run_streams(shared, sources={shared.i: [7, 8, 9]}, sinks={"o": (shared.o, 1)})
    with pytest.raises(StreamTimeout):     # never taken: stopped with the FIFO full
        run_streams(shared, sources={shared.i: list(range(20))}, sinks={"o": (shared.o, 1)},
                    stalls=Stalls(backpressure=1.0), timeout=30)
    kept = streams._BENCHES[id(shared)]
    assert _observed(shared, data, stalls) == _observed(Queue(8), data, stalls)
    assert _observed(shared, data[:4], stalls) == _observed(Queue(8), data[:4], stalls)
    assert streams._BENCHES[id(shared)] is kept


def test_designs_made_by_hand_get_a_new_simulator_each_run():
    dut = Queue(4)
    _observed(dut, [1, 2], STALL_PATTERNS[0])
    assert id(dut) not in streams._BENCHES
