"""Global max pooling of channels-last data, as an upstream streaming layer produces it.

Channel-first GlobalMaxPool is a plain run reduction (``N*C`` runs of ``prod(D)`` elements, see
:mod:`maxaccel.hdl.reduce`). A streaming layer upstream, though, emits one *pixel* after another,
each pixel a row of its ``C`` channels; :class:`ChannelsLastPool` pools that order directly,
keeping one running maximum per channel in on-chip memory, so the tensor never needs to be
transposed.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from maxaccel.host.dtypes import DType, format_of

from .beat import beat_layout
from .lane import (ELEMENT_SIZES, LANE_BITS, LANE_BYTES, FromKey, KeyMax, LaneDecode, LaneFormat,
                   ToKey)

__all__ = ["ChannelsLastPool"]


class ChannelsLastPool(wiring.Component):
    """GlobalMaxPool of channels-last pixels: one running maximum per channel, in block RAM.

    An image of ``P`` pixels of ``C`` channels arrives as ``P`` rows (see
    :func:`~maxaccel.hdl.beat.beat_layout`), one per pixel, each the pixel's ``C`` elements in
    channel order: ``ceil(C * itemsize / (8 * lanes))`` beats. For beat ``k`` of a pixel the
    unit keeps ``acc[k]``, ``lanes`` lanes of running maxima (as order keys, see
    :mod:`maxaccel.hdl.lane`). The first pixel of an image sets it, every later pixel takes the
    lane-wise maximum with it (NaN absorbing and canonical, ``+0`` over ``-0``, exactly as
    :class:`~maxaccel.hdl.lane.LaneMax`), and the last pixel's updated beats go to the output
    instead of back to memory. So each image yields one output row of ``C`` elements (the
    tensor's ``N x C x 1 ... x 1`` result for that image) as its last pixel streams in, with no
    read-out phase: images follow one another without limit and without a gap. Padding bytes of
    a beat (``nbytes`` and up) are don't-care in and out.

    Parameters
    ----------
    lanes : int
        64-bit lanes per beat (8 * ``lanes`` bytes).
    max_channels : int
        Channels of 8-byte elements the accumulator memory must hold. The memory has
        ``depth = ceil(max_channels / lanes)`` entries of ``lanes`` lanes, ``capacity_bytes =
        8 * lanes * depth`` bytes, which is ``capacity_bytes / itemsize`` channels of any dtype:
        at least ``max_channels`` of float64/(u)int64, twice that of float32/(u)int32, four times
        of float16/bfloat16/(u)int16, eight times of (u)int8/bool (see :meth:`capacity`).
    pixel_bits : int
        Width of the ``pixels`` port (default 32: up to ``2**32 - 1`` pixels per image).

    Ports
    -----
    i : In(stream.Signature(beat_layout(lanes)))
        Pixel rows, ``P`` per image, images back to back. Every beat but a row's last must be
        full; ``first`` must mark each row's first beat (the unit counts beats itself and reports
        rows that disagree, see ``row_error``).
    o : Out(stream.Signature(beat_layout(lanes)))
        One row per image: the per-channel maxima, framed exactly as the image's last pixel
        row (same number of beats, same ``nbytes`` per beat, ``first``/``last`` set).
    dtype : In(DType)
        Element type. Every dtype works (the unit only takes maxima): the float types ONNX
        GlobalMaxPool allows, the integers and bool, which give what ``reduce_max`` over the
        spatial axes gives.
    pixels : In(pixel_bits)
        Pixels per image, ``P = prod(D1 .. Dn) >= 1``. ``P = 0`` (an empty spatial extent) is the
        host's job: every channel is then the empty-set value (``-inf``, the integer minimum or
        False) and nothing needs the device; the unit flags it as ``config_error``.
    channels : In(range(capacity_bytes + 1))
        Channels per pixel, ``C``; only checked against the row framing (``row_error``). The
        datapath follows the framing, so ``C = 0`` works: one empty beat per pixel and per image.
    clear : In(1)
        Strobe, one cycle, for the start of a command: abandons a partial image (the next pixel
        is the first of an image), drops an output beat not yet taken, clears ``row_error``.
        ``i.ready`` is low while it is high.

    dtype, pixels and channels are static while an image is in flight; change them only while
    ``idle`` is high.

    Status
    ------
    idle : Out(1)
        No partial image and no beat in flight: the unit is between images.
    row_error : Out(1)
        Sticky until ``clear``: some pixel row was malformed: its byte count was not
        ``channels * itemsize``, or a beat other than its last was not full, or ``first`` did
        not mark exactly its first beat, or it was longer than the memory (those beats are not
        stored). The unit keeps streaming (it never blocks on bad data
        and still sends exactly one row per ``P`` rows in) but the results are unspecified.
    config_error : Out(1)
        Combinational: ``pixels == 0``, or ``channels * itemsize > capacity_bytes``.

    Attributes
    ----------
    depth : int
        Accumulator entries, ``ceil(max_channels / lanes)``.
    capacity_bytes : int
        ``8 * lanes * depth``: the longest pixel row the accumulators hold.
    LATENCY : int
        3, see below.

    Latency and throughput
    ----------------------
    ``LATENCY = 3``: an input beat of an image's last pixel taken at clock edge ``t`` is the
    output beat a ready sink takes at edge ``t + 3``. Stage A keys the beat
    (:class:`~maxaccel.hdl.lane.ToKey`) and reads its accumulator entry; stage B takes the
    larger key (:class:`~maxaccel.hdl.lane.KeyMax`) and writes it back, or, on the last pixel,
    passes it to stage C, which maps it back to values (:class:`~maxaccel.hdl.lane.FromKey`)
    into the output register. So with no stalls an image of ``B`` beats in total is all in by
    edge ``B`` and its result row's last beat is out at edge ``B + 3``.

    One beat is accepted per cycle in steady state, whatever the dtype, row length or number of
    pixels, one-beat pixels included: there the same entry is read, updated and read again on
    consecutive cycles, and the key being written is forwarded to the next beat. Backpressure on
    ``o`` stalls the input only while a last-pixel beat waits for stage C (``i.ready`` depends
    combinationally on ``o.ready``; ``o.valid`` and ``o.payload`` are registered). The
    read-modify-write loop is one cycle long: memory data, the forwarding mux, one
    :class:`~maxaccel.hdl.lane.KeyMax` (byte compares, a prefix tree, a select), memory write
    data.
    """

    LATENCY = 3

    def __init__(self, lanes, max_channels, *, pixel_bits=32):
        if not isinstance(lanes, int) or lanes < 1:
            raise ValueError(f"lanes must be a positive integer, not {lanes!r}")
        if not isinstance(max_channels, int) or max_channels < 1:
            raise ValueError(f"max_channels must be a positive integer, not {max_channels!r}")
        if not isinstance(pixel_bits, int) or pixel_bits < 1:
            raise ValueError(f"pixel_bits must be a positive integer, not {pixel_bits!r}")
        self.lanes = lanes
        self.max_channels = max_channels
        self.pixel_bits = pixel_bits
        self.beat_bytes = LANE_BYTES * lanes
        self.depth = -(-max_channels // lanes)
        self.capacity_bytes = self.beat_bytes * self.depth
        layout = beat_layout(lanes)
        super().__init__({
            "i": In(stream.Signature(layout)),
            "o": Out(stream.Signature(layout)),
            "dtype": In(DType),
            "pixels": In(pixel_bits),
            "channels": In(range(self.capacity_bytes + 1)),
            "clear": In(1),
            "idle": Out(1),
            "row_error": Out(1),
            "config_error": Out(1),
        })

    def capacity(self, dtype):
        """Channels of ``dtype`` (anything :func:`~maxaccel.host.dtypes.format_of` takes) the
        accumulators hold."""
        return self.capacity_bytes // format_of(dtype).nbytes

    def elaborate(self, platform):
        m = Module()
        lanes, depth, beat_bytes = self.lanes, self.depth, self.beat_bytes

        def lane_of(value, lane):
            return value[LANE_BITS * lane:LANE_BITS * (lane + 1)]

        m.submodules.decode = decode = LaneDecode()
        m.d.comb += decode.dtype.eq(self.dtype)
        row_bytes_expected = Signal(range(8 * self.capacity_bytes + 1))
        for k, size in enumerate(ELEMENT_SIZES):
            with m.If(decode.format.size[k]):
                m.d.comb += row_bytes_expected.eq(self.channels * size)
        m.d.comb += self.config_error.eq(
            (self.pixels == 0) | (row_bytes_expected > self.capacity_bytes))

        # The accumulators hold order keys (see maxaccel.hdl.lane): the loop is then only a
        # key compare and a select; values are keyed on entry and mapped back on exit.
        m.submodules.accumulators = memory = Memory(
            shape=LANE_BITS * lanes, depth=depth, init=[])
        read = memory.read_port()              # synchronous, not transparent
        write = memory.write_port()

        # --- Stage A: position of the incoming beat; its keys; memory read on acceptance. ---
        beat = self.i.payload
        accept = Signal()
        m.d.comb += accept.eq(self.i.valid & self.i.ready)
        beat_index = Signal(range(depth + 1))  # saturates at depth (a row too long: row_error)
        pixel_index = Signal(self.pixel_bits)
        first_pixel = Signal()
        last_pixel = Signal()
        m.d.comb += [
            first_pixel.eq(pixel_index == 0),
            last_pixel.eq(pixel_index + 1 == self.pixels),
        ]

        with m.If(accept):
            with m.If(beat.last):
                m.d.sync += beat_index.eq(0)
                m.d.sync += pixel_index.eq(Mux(last_pixel, 0, pixel_index + 1))
            with m.Elif(beat_index != depth):
                m.d.sync += beat_index.eq(beat_index + 1)
            row_bytes = beat_index * beat_bytes + beat.nbytes
            with m.If((beat.first != (beat_index == 0))
                      | (beat_index == depth)
                      | (~beat.last & (beat.nbytes != beat_bytes))
                      | (beat.last & (row_bytes != row_bytes_expected))):
                m.d.sync += self.row_error.eq(1)

        beat_key = Signal(LANE_BITS * lanes)
        for lane in range(lanes):
            to_key = m.submodules[f"to_key{lane}"] = ToKey()
            m.d.comb += [
                to_key.format.eq(decode.format),
                to_key.value.eq(beat.data[lane]),
                lane_of(beat_key, lane).eq(to_key.key),
            ]

        m.d.comb += [
            read.en.eq(accept),
            read.addr.eq(Mux(beat_index != depth, beat_index, 0)),
        ]

        # --- Stage B: the beat and its accumulator entry; max, then to memory or stage C. ---
        b_valid = Signal()
        b_key = Signal(LANE_BITS * lanes)
        b_format = Signal(LaneFormat)
        b_nbytes = Signal.like(beat.nbytes)
        b_first = Signal()
        b_last = Signal()
        b_index = Signal.like(beat_index)
        b_first_pixel = Signal()
        b_last_pixel = Signal()
        # The memory is not transparent: if stage B writes the entry stage A reads in the same
        # cycle (one-beat pixels), the read returns the old value and the written one is used.
        b_forward = Signal()
        b_forwarded = Signal(LANE_BITS * lanes)

        # The first pixel of an image meets key 0, below every key: max(x, 0) = x.
        accumulator = Mux(b_first_pixel, 0, Mux(b_forward, b_forwarded, read.data))
        result = Signal(LANE_BITS * lanes)
        for lane in range(lanes):
            key_max = m.submodules[f"key_max{lane}"] = KeyMax()
            m.d.comb += [
                key_max.size.eq(b_format.size),
                key_max.a.eq(lane_of(b_key, lane)),
                key_max.b.eq(lane_of(accumulator, lane)),
                lane_of(result, lane).eq(key_max.result),
            ]

        # --- Stage C: a last pixel's result keys, mapped back to values into the output. ----
        c_valid = Signal()
        c_key = Signal(LANE_BITS * lanes)
        c_format = Signal(LaneFormat)
        c_nbytes = Signal.like(beat.nbytes)
        c_first = Signal()
        c_last = Signal()

        b_done = Signal()
        c_done = Signal()
        m.d.comb += [
            c_done.eq(c_valid & (~self.o.valid | self.o.ready)),
            b_done.eq(b_valid & (~b_last_pixel | ~c_valid | c_done)),
            self.i.ready.eq(~self.clear & (~b_valid | b_done)),
            write.en.eq(b_done & ~b_last_pixel & (b_index != depth)),
            write.addr.eq(b_index),
            write.data.eq(result),
        ]

        with m.If(b_done):
            m.d.sync += b_valid.eq(0)
        with m.If(accept):
            m.d.sync += [
                b_valid.eq(1),
                b_key.eq(beat_key),
                b_format.eq(decode.format),
                b_nbytes.eq(beat.nbytes),
                b_first.eq(beat_index == 0),
                b_last.eq(beat.last),
                b_index.eq(beat_index),
                b_first_pixel.eq(first_pixel),
                b_last_pixel.eq(last_pixel),
                b_forward.eq(write.en & (b_index == beat_index)),
                b_forwarded.eq(result),
            ]

        with m.If(c_done):
            m.d.sync += c_valid.eq(0)
        with m.If(b_done & b_last_pixel):
            m.d.sync += [
                c_valid.eq(1),
                c_key.eq(result),
                c_format.eq(b_format),
                c_nbytes.eq(b_nbytes),
                c_first.eq(b_first),
                c_last.eq(b_last),
            ]

        output = Signal(LANE_BITS * lanes)
        for lane in range(lanes):
            from_key = m.submodules[f"from_key{lane}"] = FromKey()
            m.d.comb += [
                from_key.format.eq(c_format),
                from_key.key.eq(lane_of(c_key, lane)),
                lane_of(output, lane).eq(from_key.value),
            ]

        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(c_done):
            m.d.sync += [
                self.o.valid.eq(1),
                self.o.payload.data.eq(output),
                self.o.payload.nbytes.eq(c_nbytes),
                self.o.payload.first.eq(c_first),
                self.o.payload.last.eq(c_last),
            ]

        m.d.comb += self.idle.eq(~b_valid & ~c_valid & ~self.o.valid
                                 & (pixel_index == 0) & (beat_index == 0))

        with m.If(self.clear):
            m.d.sync += [
                beat_index.eq(0),
                pixel_index.eq(0),
                b_valid.eq(0),
                c_valid.eq(0),
                self.o.valid.eq(0),
                self.row_error.eq(0),
            ]
        return m
