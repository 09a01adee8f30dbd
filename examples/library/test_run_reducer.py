"""A user's design around :class:`~maxaccel.hdl.RunReducer`: the peak of each row of uint16
samples, a row of any length (rows packed into 8-byte beats, ``first``/``last`` marking a
row), for a sensor front end. Built for uint16 alone; its ``peak`` stream carries 16 bits.

Run with ``pytest examples/library/test_run_reducer.py``.
"""

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import DType
from maxaccel.hdl import RunReducer, beat_layout
from maxaccel.sim.streams import Stalls, beats_from_rows, run_streams


class RowPeak(wiring.Component):
    """The largest sample of each row: ``rows`` in, one ``peak`` per row out."""

    rows: In(stream.Signature(beat_layout(1)))
    peak: Out(stream.Signature(16))

    def elaborate(self, platform):
        m = Module()
        m.submodules.reducer = reducer = RunReducer(1, "shallow", dtype=DType.UINT16)
        wiring.connect(m, wiring.flipped(self.rows), reducer.i)
        m.d.comb += [self.peak.valid.eq(reducer.o.valid),
                     self.peak.payload.eq(reducer.o.payload[:16]),
                     reducer.o.ready.eq(self.peak.ready)]
        return m


@pytest.mark.parametrize("stalls", [Stalls(), Stalls(idle=0.3, backpressure=0.5, seed=1)])
def test_each_row_gives_its_peak(stalls):
    rng = np.random.default_rng(1)
    rows = [rng.integers(0, 1 << 16, n, dtype=np.uint16) for n in (1, 4, 5, 9, 0, 17)]
    dut = RowPeak()
    run = run_streams(dut, sources={dut.rows: beats_from_rows([r.tobytes() for r in rows], 1)},
                      sinks={"peak": (dut.peak, len(rows))}, stalls=stalls)
    # An empty row's maximum is the empty set's: the least uint16.
    assert [int(p) for p in run.received["peak"]] == [int(r.max(initial=0)) for r in rows]
