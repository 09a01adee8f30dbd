"""A user's design around :class:`~maxaccel.hdl.WindowMaxPool`: a 1-D max pool (kernel 3,
stride 2, one element of padding at each end) of eight uint8 channels sampled together, one
8-byte lane per time step, with the index of each window's maximum: ONNX MaxPool with its
Indices, per channel. Built for uint8 alone, the pool's shape fixed.

Run with ``pytest examples/library/test_window_max_pool.py``.
"""

import numpy as np
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import DType
from maxaccel.hdl import WindowMaxPool
from maxaccel.sim import reference
from maxaccel.sim.streams import Stalls, run_streams

STEPS, KERNEL, STRIDE, PAD = 16, 3, 2, 1
OUT = (STEPS + 2 * PAD - KERNEL) // STRIDE + 1


class Decimator(wiring.Component):
    """``samples`` in (8 uint8 channels a beat), ``pooled`` out: each window's maxima and,
    per channel, the step the maximum came from."""

    def __init__(self):
        self._pool = WindowMaxPool(max_rank=1, max_extent=KERNEL, dim_bits=8, index_bits=8,
                                   dtype=DType.UINT8)
        super().__init__({"samples": In(self._pool.i.signature.flip()),
                          "pooled": Out(self._pool.o.signature)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.pool = pool = self._pool
        wiring.connect(m, wiring.flipped(self.samples), pool.i)
        wiring.connect(m, pool.o, wiring.flipped(self.pooled))
        axis = pool.config[0]
        m.d.comb += [axis.size.eq(STEPS), axis.pad.eq(PAD), axis.out.eq(OUT),
                     axis.kernel.eq(KERNEL), axis.stride.eq(STRIDE), axis.dilation.eq(1)]
        return m


def test_each_window_gives_its_maximum_and_where_it_was():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 8, (2, STEPS, 8), dtype=np.uint8)      # two signals, ties included
    dut = Decimator()
    beats = [{"data": int.from_bytes(step.tobytes(), "little")} for signal in x for step in signal]
    run = run_streams(dut, sources={dut.samples: beats}, sinks={"pooled": (dut.pooled, 2 * OUT)},
                      stalls=Stalls(idle=0.2, backpressure=0.3, seed=3))
    got = np.array([np.frombuffer(int(b.data).to_bytes(8, "little"), np.uint8)
                    for b in run.received["pooled"]]).reshape(2, OUT, 8)
    index = np.array([[int(i) for i in b.index] for b in run.received["pooled"]])
    # The reference pools N x C x W tensors: the channels become C.
    y, flat = reference.max_pool(x.transpose(0, 2, 1), [KERNEL], strides=[STRIDE],
                                 pads=[PAD, PAD], return_indices=True)
    assert np.array_equal(got, y.transpose(0, 2, 1))
    # ONNX's Indices are flat over the whole tensor; the unit's are steps in the signal.
    assert np.array_equal(index.reshape(2, OUT, 8), (flat % STEPS).transpose(0, 2, 1))
