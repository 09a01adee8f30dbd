"""A user's design around :class:`~maxaccel.hdl.BroadcastMax`: a floor under a stream of
int16 rows, ``max(x, floor)`` with ``floor`` one row broadcast over all of them (numpy
broadcasting, done by the unit: the floor is loaded once into its replay buffer and read back
for every row). Built for int16 alone.

Run with ``pytest examples/library/test_broadcast_max.py``.
"""

import numpy as np
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import DType
from maxaccel.hdl import BroadcastMax, BroadcastOp
from maxaccel.sim.streams import Stalls, run_streams

ROWS = 12


class Floor(wiring.Component):
    """``commands``: a ``LOAD`` of the floor row from ``floor``, then a ``RUN`` that takes
    ``ROWS`` rows of 4 int16 from ``rows`` and gives ``max(row, floor)`` on ``floored``."""

    def __init__(self):
        self._unit = BroadcastMax(1, 4, 1, 1, max_count=ROWS, dtype=DType.INT16)
        unit = self._unit
        super().__init__({"commands": In(unit.command.signature.flip()),
                          "floor": In(unit.load.signature.flip()),
                          "rows": In(unit.streamed.signature.flip()),
                          "floored": Out(unit.output.signature)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = unit = self._unit
        wiring.connect(m, wiring.flipped(self.commands), unit.command)
        wiring.connect(m, wiring.flipped(self.floor), unit.load)
        wiring.connect(m, wiring.flipped(self.rows), unit.streamed)
        wiring.connect(m, unit.output, wiring.flipped(self.floored))
        # One pass: ROWS output rows of one beat; the streamed operand, and one replayed
        # operand at address 0 whose row address steps by 0 (broadcast along the rows).
        config = unit.config
        m.d.comb += [config.operands.eq(1), config.streamed.eq(1), config.row_beats.eq(1),
                     config.last_nbytes.eq(8), config.counts[0].eq(ROWS),
                     config.operand[0].base.eq(0), config.operand[0].steps[0].eq(0)]
        return m


def beat(values):
    return {"data": [int.from_bytes(values.tobytes(), "little")], "nbytes": 8,
            "first": 1, "last": 1}


def test_every_row_is_floored():
    rng = np.random.default_rng(4)
    x = rng.integers(-1000, 1000, (ROWS, 4), dtype=np.int16)
    floor = np.array([-500, 0, 250, -1000], np.int16)
    dut = Floor()
    run = run_streams(
        dut,
        sources={dut.commands: [{"op": BroadcastOp.LOAD, "base": 0, "count": 1},
                                {"op": BroadcastOp.RUN}],
                 dut.floor: [beat(floor)],
                 dut.rows: [beat(row) for row in x]},
        sinks={"floored": (dut.floored, ROWS)},
        stalls=Stalls(idle=0.2, backpressure=0.3, seed=4))
    got = np.array([np.frombuffer(int(b.data[0]).to_bytes(8, "little"), np.int16)
                    for b in run.received["floored"]])
    assert np.array_equal(got, np.maximum(x, floor))
