"""Global max pooling of channels-last data, as an upstream streaming layer produces it.

Channel-first GlobalMaxPool is a plain run reduction (``N*C`` runs of ``prod(D)`` elements, see
:mod:`maxaccel.hdl.reduce`). A streaming layer upstream, though, emits one *pixel* after another,
each pixel a row of its ``C`` channels; :class:`ChannelsLastPool` pools that order directly,
keeping one running maximum per channel in on-chip memory, so the tensor never needs to be
transposed.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import DType, format_of

from .beat import beat_layout
from .lane import ELEMENT_SIZES, LANE_BITS, LANE_BYTES, LaneFormat
from .kit import (Stall, Unit, UnitSignature, check_dtype, decode_format, from_key, key_max,
                  lane_of, register, to_keys)

__all__ = ["ChannelsLastPool"]


class ChannelsLastPool(Unit):
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
    dtype : DType, optional
        A static element type: no ``dtype`` port, and the other formats' logic folds away.

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
        Element type (only without the ``dtype`` parameter). Every dtype works: the float types ONNX GlobalMaxPool allows, the
        integers and bool, which give what ``reduce_max`` over the spatial axes gives.
    minimum : In(1)
        0: the per-channel maxima; 1: the minima (``reduce_min`` over the spatial axes:
        :class:`~maxaccel.hdl.lane.ToKey`'s minimum keys, the same pipeline and cycles).
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

    dtype, minimum, pixels and channels are static while an image is in flight; change them only
    while ``idle`` is high.

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
        Registered, two cycles behind the configuration: ``pixels == 0``, or
        ``channels * itemsize > capacity_bytes``.

    Attributes
    ----------
    depth : int
        Accumulator entries, ``ceil(max_channels / lanes)``.
    capacity_bytes : int
        ``8 * lanes * depth``: the longest pixel row the accumulators hold.
    LATENCY : int
        7, see below.

    Latency and throughput
    ----------------------
    ``LATENCY = 7``: an input beat of an image's last pixel taken at clock edge ``t`` is the
    output beat a ready sink takes at edge ``t + 7``. Stages 1-2 key the beat
    (:class:`~maxaccel.hdl.lane.ToKey` in two steps); stages 2-4 merge its key with the
    previous beat's when both update the same entry (``KeyMax(latency=2)``), while the entry's
    last complete update is read from memory and forwarded; stages 4-6 are the loop, a bare
    ``KeyMax(latency=2)`` of that update and the merged key, whose result goes back to memory;
    stage 7 maps a last pixel's result back to values (:class:`~maxaccel.hdl.lane.FromKey`)
    into the output register. So with no stalls an image of ``B`` beats in total is all in by
    edge ``B`` and its result row's last beat is out at edge ``B + 7``.

    One beat is accepted per cycle in steady state, whatever the dtype, row length or number of
    pixels, one-beat pixels included. The loop takes two cycles, yet an entry may be updated by
    consecutive beats (one-beat pixels): the beat in the loop takes the latest update of its
    entry made at least two beats earlier (the loop's own result, or one forwarded from a beat
    three ahead, or the memory, whose read is transparent to the write of the same cycle), and
    a beat that is one behind another of the same entry merges that beat's key before the loop,
    so each result is the maximum of every pixel so far whatever gaps the input leaves. Every
    stage moves with one enable, a register that is high unless the *skid* register behind the
    output register holds a result: a result that finds the output register waiting goes to
    the skid, and the unit stalls until the output register is taken. So ``i.ready`` is a
    register (with ``~clear``), never a function of ``o.ready``, and ``o.valid`` and
    ``o.payload`` are registered.
    """

    LATENCY = 7

    class Signature(UnitSignature):
        """:class:`ChannelsLastPool`'s signature: ``ChannelsLastPool.Signature(lanes,
        max_channels, *, pixel_bits=32, dtype=None)``, the unit's parameters, each checked
        (``ValueError``); without ``dtype`` a ``dtype`` port. Its :attr:`stall`: ``i.ready``
        is registered (a skid register behind the output register)."""

        stall = Stall("i", "o", registered=True)

        def __init__(self, lanes, max_channels, *, pixel_bits=32, dtype=None):
            dtype = self.check_parameters(lanes, max_channels, pixel_bits=pixel_bits,
                                          dtype=dtype)
            layout = beat_layout(lanes)
            capacity_bytes = LANE_BYTES * lanes * -(-max_channels // lanes)
            members = {
                "i": In(stream.Signature(layout)),
                "o": Out(stream.Signature(layout)),
            }
            if dtype is None:
                members["dtype"] = In(DType)
            members.update({
                "minimum": In(1),
                "pixels": In(pixel_bits),
                "channels": In(range(capacity_bytes + 1)),
                "clear": In(1),
                "idle": Out(1),
                "row_error": Out(1),
                "config_error": Out(1),
            })
            super().__init__(members, lanes=lanes, max_channels=max_channels,
                             pixel_bits=pixel_bits, dtype=dtype)

        @property
        def capacity_bytes(self):
            """The longest pixel row the accumulators hold, in bytes."""
            return LANE_BYTES * self.lanes * -(-self.max_channels // self.lanes)

        @classmethod
        def check_parameters(cls, lanes, max_channels, *, pixel_bits=32, dtype=None):
            """The static element type; ``ValueError`` unless ``lanes``, ``max_channels`` and
            ``pixel_bits`` are positive integers and ``dtype`` is ``None`` or a dtype."""
            for name, value in [("lanes", lanes), ("max_channels", max_channels),
                                ("pixel_bits", pixel_bits)]:
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ValueError(f"{name} must be a positive integer, not {value!r}")
            return check_dtype(dtype, "ChannelsLastPool")

    def __init__(self, lanes, max_channels, *, pixel_bits=32, dtype=None):
        super().__init__(lanes, max_channels, pixel_bits=pixel_bits, dtype=dtype)
        self.beat_bytes = LANE_BYTES * lanes
        self.depth = -(-max_channels // lanes)
        self.capacity_bytes = self.signature.capacity_bytes

    def capacity(self, dtype):
        """Channels of ``dtype`` (anything :func:`~maxaccel.contract.dtypes.format_of` takes) the
        accumulators hold."""
        return self.capacity_bytes // format_of(dtype).nbytes

    def elaborate(self, platform):
        m = Module()
        lanes, depth, beat_bytes = self.lanes, self.depth, self.beat_bytes

        # The registered decode: every stage that needs the format runs at least a cycle after
        # acceptance. The configuration check reads it too, and is registered twice more.
        fmt = decode_format(m, self.dtype)
        # The same, unregistered (for stage 1's tag); a static element type's is a constant.
        decoded = fmt if self.signature.dtype is not None else m.submodules.decode.format
        row_bytes_configured = Signal(range(8 * self.capacity_bytes + 1))
        for k, size in enumerate(ELEMENT_SIZES):
            with m.If(fmt.size[k]):
                m.d.comb += row_bytes_configured.eq(self.channels * size)
        row_bytes_expected = register(m, 1, row_bytes_configured, "row_bytes_expected")
        m.d.sync += self.config_error.eq(
            (self.pixels == 0) | (row_bytes_expected > self.capacity_bytes))

        # One enable for every stage, a register: high unless the skid register behind the
        # output register holds a beat (stage 7), so that it reaches every stage without logic
        # in front of its fanout and ``o.ready`` only steers the two output registers.
        advance = Signal(init=1)
        accept = Signal()
        m.d.comb += [
            self.i.ready.eq(advance & ~self.clear),
            accept.eq(self.i.valid & self.i.ready),
        ]

        # --- Stage 0: the beat's place in its row and image; row framing checks. -------------
        beat = self.i.payload
        beat_index = Signal(range(depth + 1))  # saturates at depth (a row too long: row_error)
        # The pixel count runs down, so that the last pixel is a zero test, not a compare.
        first_pixel = Signal(init=1)
        second_pixel = Signal()
        pixels_after = Signal(self.pixel_bits)  # pixels of the image after this one
        last_pixel = Signal()
        m.d.comb += last_pixel.eq(Mux(first_pixel, self.pixels == 1, pixels_after == 0))
        with m.If(accept):
            with m.If(beat.last):
                m.d.sync += [
                    beat_index.eq(0),
                    first_pixel.eq(last_pixel),
                    second_pixel.eq(first_pixel & ~last_pixel),
                    pixels_after.eq(Mux(first_pixel, self.pixels - 2, pixels_after - 1)),
                ]
            with m.Elif(beat_index != depth):
                m.d.sync += beat_index.eq(beat_index + 1)

        # What travels with a beat through stages 1 to 6.
        tag_layout = data.StructLayout({
            "valid": 1,
            "entry": range(depth + 1),       # depth: beyond the memory, not stored
            "first_pixel": 1, "second_pixel": 1, "last_pixel": 1,
            "nbytes": range(beat_bytes + 1), "first": 1, "last": 1,
            # The beat's format and minimum select: each stage reads its own copy, not all of
            # them ``fmt``.
            "format": LaneFormat,
            "minimum": 1,
        })
        entering = Signal(tag_layout)
        m.d.comb += [
            entering.valid.eq(accept),
            entering.entry.eq(beat_index),
            entering.first_pixel.eq(first_pixel),
            entering.second_pixel.eq(second_pixel),
            entering.last_pixel.eq(last_pixel),
            entering.nbytes.eq(beat.nbytes),
            entering.first.eq(beat.first),
            entering.last.eq(beat.last),
            entering.format.eq(decoded),
            entering.minimum.eq(self.minimum),
        ]
        tags = [entering]
        for stage in range(1, 7):
            tag = Signal(tag_layout, name=f"tag_{stage}")
            with m.If(advance):
                m.d.sync += tag.eq(tags[-1])
            tags.append(tag)

        # The framing checks, in stages 1 to 3 (row_error is only status).
        checked = tags[1]
        misframed = register(m, advance, (checked.first != (checked.entry == 0))
                             | (checked.entry == depth)
                             | (~checked.last & (checked.nbytes != beat_bytes)), "misframed")
        row_bytes = register(m, advance, checked.entry * beat_bytes + checked.nbytes,
                             "row_bytes")
        misframed_3 = register(
            m, advance, misframed | tags[2].last & (row_bytes != row_bytes_expected),
            "misframed_3")
        with m.If(tags[3].valid & misframed_3):
            m.d.sync += self.row_error.eq(1)

        def same_entry(later, earlier):
            """The beats now in stages ``later`` and ``earlier`` (> later) update one entry."""
            return tags[earlier].valid & (tags[later].entry == tags[earlier].entry)

        # --- Stages 1-2: order keys (NaN tests, then keys), each registered. -----------------
        keys = Signal(LANE_BITS * lanes)
        # The key stage reads the format in stage 1: half the lanes read the registered decode,
        # half stage 1's copy (two registers, each with half the fanout).
        key_formats = [fmt if j < lanes // 2 else tags[1].format for j in range(lanes)]
        m.d.comb += keys.eq(Cat(to_keys(m, advance, key_formats, list(beat.data),
                                        minimum=tags[1].minimum)))
        keys_3 = register(m, advance, keys, "keys_3")  # the key of the beat in stage 3

        # --- Stages 2-4: each beat's key merged with the previous beat's if both update the
        # same entry (one-beat pixels): that beat's update is still in the loop when this beat
        # enters it, so it would be lost; taking its key here keeps every result complete.
        combine = register(m, advance, same_entry(1, 2) & ~tags[1].first_pixel, "combine")
        merged = _lanes_key_max(m, "merge", advance, tags[2].format.size, keys_3, keys,
                                ~combine)

        # --- Stages 2-4: the entry's last complete update, from memory or forwarded. ----------
        # The loop (stages 4-6) writes a result in stage 6; the beat in stage 4 needs the latest
        # result of its entry at least two beats ahead: two ahead is in stage 6 now; three
        # ahead is written too late for this beat's memory read (issued in stage 2), so it is
        # forwarded into `prior` in stage 3; four ahead is written in the cycle of that read,
        # which is transparent to it; the memory has the rest.
        m.submodules.accumulators = memory = Memory(
            shape=LANE_BITS * lanes, depth=depth, init=[])
        write = memory.write_port()
        read = memory.read_port(transparent_for=(write,))
        # The read runs every cycle, so its wide data register needs no enable: while the unit
        # stalls it reads again the entry of the beat in stage 3, which nothing writes then.
        read_entry = Mux(advance, tags[2].entry, tags[3].entry)
        m.d.comb += read.addr.eq(Mux(read_entry != depth, read_entry, 0))
        result = Signal(LANE_BITS * lanes)         # stage 6: the loop's output register
        from_3 = register(m, advance, same_entry(2, 5), "from_3_ahead")
        prior = register(m, advance, Mux(from_3, result, read.data), "prior")
        from_2 = register(m, advance, same_entry(3, 5), "from_2_ahead")
        # Pixel 0 has no prior; pixel 1 neither when its key merged pixel 0's.
        has_prior = register(m, advance, register(
            m, advance, ~tags[2].first_pixel & ~(tags[2].second_pixel & combine), "has_prior_3"),
            "has_prior")

        # --- Stages 4-6: the loop, max(prior, merged key), two cycles. -----------------------
        m.d.comb += result.eq(_lanes_key_max(m, "loop", advance, tags[4].format.size,
                                             Mux(from_2, result, prior), merged, ~has_prior))
        m.d.comb += [
            write.en.eq(advance & tags[6].valid & (tags[6].entry != depth)),
            write.addr.eq(tags[6].entry),
            write.data.eq(result),
        ]

        # --- Stage 7: a last pixel's result keys, mapped back to values, are the output. -----
        output = Cat(from_key(m, f"from_key{j}", tags[6].format, lane_of(result, j),
                              tags[6].minimum) for j in range(lanes))
        # The beat goes into the output register if that is free or being taken, else into
        # the skid register (empty whenever the pipeline advances), which refills the output
        # register when it is taken.
        arriving = Signal(self.o.payload.shape())
        arriving_valid = Signal()
        skid = Signal(self.o.payload.shape())
        skid_valid = Signal()
        m.d.comb += [
            arriving_valid.eq(advance & tags[6].valid & tags[6].last_pixel),
            arriving.data.eq(output),
            arriving.nbytes.eq(tags[6].nbytes),
            arriving.first.eq(tags[6].first),
            arriving.last.eq(tags[6].last),
        ]
        output_free = ~self.o.valid | self.o.ready
        with m.If(output_free):
            m.d.sync += [
                self.o.valid.eq(skid_valid | arriving_valid),
                self.o.payload.eq(Mux(skid_valid, skid.as_value(), arriving.as_value())),
                skid_valid.eq(0),
            ]
        with m.Elif(arriving_valid):
            m.d.sync += [skid_valid.eq(1), skid.eq(arriving)]
        m.d.sync += advance.eq(output_free | ~(skid_valid | arriving_valid))

        m.d.comb += self.idle.eq(~Cat(tag.valid for tag in tags[1:]).any() & ~self.o.valid
                                 & ~skid_valid & first_pixel & (beat_index == 0))

        with m.If(self.clear):
            m.d.sync += [
                beat_index.eq(0),
                first_pixel.eq(1),
                second_pixel.eq(0),
                self.o.valid.eq(0),
                skid_valid.eq(0),
                advance.eq(1),
                self.row_error.eq(0),
            ]
            m.d.sync += [tag.valid.eq(0) for tag in tags[1:]]
        return m


def _lanes_key_max(m, name, enable, size, a, b, take_b):
    """:func:`~maxaccel.hdl.reduce._key_max` of each 64-bit lane of ``a`` and ``b``."""
    return Cat(key_max(m, f"{name}{j}", enable, size, lane_of(a, j), lane_of(b, j), take_b=take_b)
               for j in range(len(a) // LANE_BITS))
