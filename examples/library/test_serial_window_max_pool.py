"""A user's design around :class:`~maxaccel.hdl.SerialWindowMaxPool`: 2 x 2 max pooling, stride
2, of 8 x 8 float32 frames from two cameras sampled together (one 8-byte lane per pixel, the
two frames side by side), with the index of each maximum: ONNX MaxPool with its Indices, for a
small FPGA whose input comes far slower than its clock. Built for float32 alone, the pool's
shape fixed.

Run with ``pytest examples/library/test_serial_window_max_pool.py``.
"""

import numpy as np
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from maxaccel.hdl import SerialWindowMaxPool
from maxaccel.sim import reference
from maxaccel.sim.streams import Stalls, run_streams
from maxaccel.sim.values import random_values

SIDE, KERNEL = 8, 2
OUT = SIDE // KERNEL


class FramePooler(wiring.Component):
    """``pixels`` in (a pixel of each camera a beat, row-major), ``pooled`` out: per window
    the two frames' maxima and where in its frame each came from."""

    def __init__(self):
        self._pool = SerialWindowMaxPool(max_rank=2, max_extent=KERNEL, max_columns=OUT,
                                         dim_bits=4, index_bits=8, dtype="float32")
        super().__init__({"pixels": In(self._pool.i.signature.flip()),
                          "pooled": Out(self._pool.o.signature)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.pool = pool = self._pool
        wiring.connect(m, wiring.flipped(self.pixels), pool.i)
        wiring.connect(m, pool.o, wiring.flipped(self.pooled))
        for axis in pool.config:
            m.d.comb += [axis.size.eq(SIDE), axis.pad.eq(0), axis.out.eq(OUT),
                         axis.kernel.eq(KERNEL), axis.stride.eq(KERNEL), axis.dilation.eq(1)]
        return m


def test_each_window_gives_its_maximum_and_where_it_was():
    # Two frames with NaNs of several payloads, signed zeros and infinities among the values.
    x = random_values(np.random.default_rng(5), np.float32, (2, SIDE, SIDE), edge_fraction=0.3)
    bits = reference.bits_of(x).astype(np.uint64)
    beats = [{"data": int(bits[0, r, c] | bits[1, r, c] << np.uint64(32))}
             for r in range(SIDE) for c in range(SIDE)]
    dut = FramePooler()
    run = run_streams(dut, sources={dut.pixels: beats}, sinks={"pooled": (dut.pooled, OUT * OUT)},
                      stalls=Stalls(idle=0.3, backpressure=0.3, seed=5))
    data = np.array([int(b.data) for b in run.received["pooled"]], dtype=np.uint64)
    got = np.stack([data & np.uint64(0xFFFF_FFFF), data >> np.uint64(32)]).astype(np.uint32)
    index = np.array([[int(b.index[0]), int(b.index[4])] for b in run.received["pooled"]]).T
    y, flat = reference.max_pool(x[:, None], [KERNEL, KERNEL], strides=[KERNEL, KERNEL],
                                 return_indices=True)
    # The same bits as the reference: NaN payloads and the sign of zero included.
    reference.assert_same_bits(reference.from_bits(got.reshape(2, 1, OUT, OUT), np.float32), y)
    # ONNX's Indices are flat over the whole tensor; the unit's are pixels of the frame.
    assert np.array_equal(index.reshape(2, 1, OUT, OUT), flat % (SIDE * SIDE))
