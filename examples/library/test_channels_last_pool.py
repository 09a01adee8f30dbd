"""A user's design around :class:`~maxaccel.hdl.ChannelsLastPool`: the global max pool of a
camera's feature maps as a convolution layer streams them, pixel after pixel, each pixel its 6
int8 channels (one 8-byte beat); a 4 x 4 image gives one row of 6 maxima as its last pixel
streams in, with no read-out phase. Built for int8 alone, image size fixed.

Run with ``pytest examples/library/test_channels_last_pool.py``.
"""

import numpy as np
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import DType
from maxaccel.hdl import ChannelsLastPool, beat_layout
from maxaccel.sim.streams import Stalls, beats_from_rows, rows_from_beats, run_streams

PIXELS, CHANNELS = 16, 6


class ImagePeaks(wiring.Component):
    """Per image of ``PIXELS`` pixels of ``CHANNELS`` int8 channels, its channels' maxima."""

    pixels: In(stream.Signature(beat_layout(1)))
    peaks: Out(stream.Signature(beat_layout(1)))
    malformed: Out(1)

    def elaborate(self, platform):
        m = Module()
        # Accumulators for one 8-byte entry: eight int8 channels.
        m.submodules.pool = pool = ChannelsLastPool(1, 1, dtype=DType.INT8)
        wiring.connect(m, wiring.flipped(self.pixels), pool.i)
        wiring.connect(m, pool.o, wiring.flipped(self.peaks))
        m.d.comb += [pool.pixels.eq(PIXELS), pool.channels.eq(CHANNELS),
                     self.malformed.eq(pool.row_error | pool.config_error)]
        return m


def test_each_image_gives_its_channels_maxima():
    rng = np.random.default_rng(2)
    images = rng.integers(-128, 128, (3, PIXELS, CHANNELS), dtype=np.int8)
    pixels = [pixel.tobytes() for image in images for pixel in image]
    dut = ImagePeaks()

    def well_formed(ctx):
        assert not ctx.get(dut.malformed)

    run = run_streams(dut, sources={dut.pixels: beats_from_rows(pixels, 1)},
                      sinks={"peaks": (dut.peaks, len(images))},
                      stalls=Stalls(idle=0.2, backpressure=0.3, seed=2), check=well_formed)
    peaks = [np.frombuffer(row, np.int8) for row in rows_from_beats(run.received["peaks"])]
    assert np.array_equal(np.array(peaks), images.max(axis=1))
