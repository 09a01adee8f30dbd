"""Packing: dense link bytes to row-aligned beats and back (``hdl/beat.py``'s rows).

* :class:`RowPacker` -- dense little-endian link bytes to row-aligned beats
  (:func:`~maxaccel.hdl.beat.beat_layout`), empty rows included.
* :class:`RowUnpacker` -- row-aligned beats back to dense bytes.

The link carries elements densely; inside the device every row starts at byte 0 of a beat.
"""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .beat import beat_layout
from .lane import LANE_BYTES
from .kit import Checked
from .linkword import check_link_bytes, link_signature, word_fields

__all__ = ["RowPacker", "RowUnpacker"]


class RowPacker(Checked, wiring.Component):
    """Packs dense little-endian link bytes into row-aligned beats.

    After ``start``, ``rows`` rows of ``row_bytes`` bytes each are taken from ``i`` and sent as
    beats of :func:`~maxaccel.hdl.beat.beat_layout`: a row's first byte starts a beat at byte 0
    of lane 0, a beat is sent when it is full or the row ends. A row of 0 bytes is one beat with
    ``nbytes == 0`` and ``first = last = 1`` (taking no byte). Padding bytes (``nbytes`` and up)
    are left over from earlier beats: don't-care, as the layout says.

    Bytes are gathered in a register of their own; a completed beat moves to the output
    register at once if that is empty, else it waits in the gathering register (which then
    stops taking bytes). So ``i.ready`` depends on registers only, never combinationally on
    ``o.ready``: the units' ready paths end here instead of running on to the link. It also
    means the units behind the packer see their input change once per beat rather than once per
    byte, which keeps the Python simulation of the whole core fast.

    Parameters
    ----------
    lanes : int
        64-bit lanes per beat.
    link_bytes : int
        Bytes per transfer of ``i`` at most; at most the ``8 * lanes`` bytes of a beat.

    Ports
    -----
    start : In(1)
        Strobe: begin a command with the given ``rows`` and ``row_bytes`` (only while ``idle``).
    rows, row_bytes : In(32)
        Sampled with ``start``.
    i : In(link_signature(link_bytes))
        Bytes; ``ready`` only while a row byte is wanted and the gathering register is free.
        A word must carry at most ``limit`` bytes.
    limit : Out(range(1, link_bytes + 1))
        The most bytes the next word may carry (from registers): ``link_bytes``, or near a
        row's end up to the row's end or the beat boundary before it.
    o : Out(stream.Signature(beat_layout(lanes)))
        Beats, from a register.
    idle : Out(1)
        All rows sent and the last beat taken.

    Latency and throughput
    ----------------------
    A beat is valid the cycle after its last byte was taken, later if the output register is
    still full then (a completed beat waits, and the input stalls, until it is free). One word
    per cycle with a sink that takes a beat every cycle; an empty row takes one cycle. A word
    may carry bytes of two beats of a row (``limit`` is ``link_bytes`` inside a row), but near
    the row's end ``limit`` stops at the beat boundary, so a row whose last bytes straddle a
    beat boundary costs one transfer more.
    """

    @classmethod
    def check_parameters(cls, lanes, link_bytes=1):
        check_link_bytes(link_bytes, lanes=lanes)

    def __init__(self, lanes, link_bytes=1):
        self.lanes = lanes
        self.link_bytes = link_bytes
        super().__init__({
            "start": In(1),
            "rows": In(32),
            "row_bytes": In(32),
            "i": In(link_signature(link_bytes)),
            "limit": Out(range(1, link_bytes + 1)),
            "o": Out(stream.Signature(beat_layout(lanes))),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        width = self.link_bytes
        beat_bytes = LANE_BYTES * self.lanes
        rows_left = Signal(32)
        row_bytes = Signal(32)
        bytes_left = Signal(32)
        position = Signal(range(beat_bytes))
        row_start = Signal()
        # Registered conditions, to keep the wide compares off the byte path.
        active = Signal()              # rows_left != 0
        empty_rows = Signal()          # row_bytes == 0
        row_ends_soon = Signal()       # bytes_left <= width: the row ends within a word
        tail = Signal(range(width + 1))   # bytes_left, when row_ends_soon
        short_rows = Signal()          # row_bytes <= width

        chunk, count = word_fields(self.i.payload, width)
        if width == 1:
            m.d.comb += self.limit.eq(1)
        else:
            # A word may run on into the next beat of its row, but not past the row's end.
            to_beat_end = beat_bytes - position
            m.d.comb += self.limit.eq(Mux(row_ends_soon,
                                          Mux(tail < to_beat_end, tail, to_beat_end), width))

        # The word's bytes in place at `position` in the beat being gathered; on a wide link
        # the bytes beyond the beat (`spill`) start the next one.
        gather = Signal(8 * beat_bytes)
        gathered = Signal(8 * beat_bytes)
        shifted = Signal(8 * (beat_bytes + width - 1))
        byte_enable = Signal(beat_bytes)
        spill = shifted[8 * beat_bytes:]
        m.d.comb += [
            shifted.eq(chunk << (position * 8)),
            byte_enable.eq(((Const(1, width + 1) << count) - 1) << position),
        ]
        for b in range(beat_bytes):
            m.d.comb += gathered.word_select(b, 8).eq(
                Mux(byte_enable[b], shifted.word_select(b, 8), gather.word_select(b, 8)))
        # A completed beat waiting for the output register: in `gather` itself on a byte link
        # (which then takes no byte), in a register of its own on a wide one (where `gather`
        # already holds the next beat's first bytes).
        waiting = Signal()
        waiting_data = gather if width == 1 else Signal(8 * beat_bytes)
        waiting_nbytes = Signal.like(self.o.payload.nbytes)
        waiting_first = Signal()
        waiting_last = Signal()

        m.d.comb += [
            self.i.ready.eq(active & ~empty_rows & ~waiting),
            self.idle.eq(~active & ~waiting & ~self.o.valid),
        ]

        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(waiting & (~self.o.valid | self.o.ready)):
            m.d.sync += [
                self.o.valid.eq(1),
                self.o.payload.data.eq(waiting_data),
                self.o.payload.nbytes.eq(waiting_nbytes),
                self.o.payload.first.eq(waiting_first),
                self.o.payload.last.eq(waiting_last),
                waiting.eq(0),
            ]

        # A completed beat goes to the output register if that is empty or being emptied, else
        # waits.
        def complete(data, nbytes, first, last):
            with m.If(~self.o.valid | self.o.ready):
                m.d.sync += [
                    self.o.valid.eq(1),
                    self.o.payload.data.eq(data),
                    self.o.payload.nbytes.eq(nbytes),
                    self.o.payload.first.eq(first),
                    self.o.payload.last.eq(last),
                ]
            with m.Else():
                m.d.sync += [
                    waiting.eq(1),
                    waiting_nbytes.eq(nbytes),
                    waiting_first.eq(first),
                    waiting_last.eq(last),
                ]
                if width > 1:
                    m.d.sync += waiting_data.eq(data)

        def next_row():
            m.d.sync += [rows_left.eq(rows_left - 1), active.eq(rows_left != 1)]

        def row_left(value, ends_soon):
            m.d.sync += [bytes_left.eq(value), row_ends_soon.eq(ends_soon),
                         tail.eq(value[:len(tail)])]

        with m.If(active & empty_rows & ~waiting):
            complete(gather, 0, 1, 1)
            next_row()
        with m.If(self.i.valid & self.i.ready):
            row_ends = row_ends_soon & (tail == count)
            end = position + count
            beat_done = end >= beat_bytes
            m.d.sync += gather.eq(gathered)
            with m.If(row_ends | beat_done):
                complete(gathered, Mux(beat_done, beat_bytes, end), row_start, row_ends)
                m.d.sync += [position.eq(Mux(row_ends, 0, end - beat_bytes)),
                             row_start.eq(row_ends)]
                if width > 1:
                    m.d.sync += gather.eq(spill)
            with m.Else():
                m.d.sync += position.eq(end)
            with m.If(row_ends):
                row_left(row_bytes, short_rows)
                next_row()
            with m.Else():
                row_left(bytes_left - count, bytes_left - count <= width)

        with m.If(self.start):
            m.d.sync += [
                rows_left.eq(self.rows),
                active.eq(self.rows != 0),
                row_bytes.eq(self.row_bytes),
                empty_rows.eq(self.row_bytes == 0),
                short_rows.eq(self.row_bytes <= width),
                position.eq(0),
                row_start.eq(1),
            ]
            row_left(self.row_bytes, self.row_bytes <= width)
        return m


class RowUnpacker(Checked, wiring.Component):
    """Sends the valid bytes of each beat (bytes ``0 .. nbytes - 1``) as a dense link stream.

    Empty beats (``nbytes == 0``) are taken and produce nothing. Besides the beat being sent the
    unpacker holds one spare beat, so ``i.ready`` (the spare is free) depends on registers only,
    never combinationally on ``o.ready``, and beats still follow one another without a gap. An
    empty beat takes an input cycle of its own, so one that comes right after a beat of a single
    word leaves a one-cycle gap in ``o``.

    Parameters
    ----------
    lanes : int
        64-bit lanes per beat.
    link_bytes : int
        Bytes per transfer of ``o`` at most; at most the ``8 * lanes`` bytes of a beat.

    Ports
    -----
    i : In(stream.Signature(beat_layout(lanes)))
        Beats; ``first``/``last`` are ignored.
    o : Out(link_signature(link_bytes))
        Bytes, from a register: ``link_bytes`` per word but at a beat's end.
    idle : Out(1)
        No beat held.

    Latency and throughput
    ----------------------
    A beat's first word is valid the cycle after the beat is taken, or right after its
    predecessor's last word; one word per cycle.
    """

    @classmethod
    def check_parameters(cls, lanes, link_bytes=1):
        check_link_bytes(link_bytes, lanes=lanes)

    def __init__(self, lanes, link_bytes=1):
        self.lanes = lanes
        self.link_bytes = link_bytes
        super().__init__({
            "i": In(stream.Signature(beat_layout(lanes))),
            "o": Out(link_signature(link_bytes)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        width = self.link_bytes
        beat_bytes = LANE_BYTES * self.lanes
        holding = Signal()
        data = Signal(8 * beat_bytes)
        last_position = Signal(range(beat_bytes))     # nbytes - 1 of the beat being sent
        position = Signal(range(beat_bytes))
        spare = Signal(beat_layout(self.lanes))
        spare_full = Signal()

        words_left = last_position - position          # after this word's first byte
        if width == 1:
            last_word = position == last_position
            m.d.comb += self.o.payload.eq(data.word_select(position, 8))
        else:
            last_word = words_left < width
            m.d.comb += [
                self.o.payload.data.as_value().eq(data >> (position * 8)),
                self.o.payload.count.eq(Mux(last_word, words_left + 1, width)),
            ]
        finishing = self.o.ready & last_word
        free = ~holding | finishing            # the current beat is done (or there is none)
        incoming = self.i.valid & self.i.ready & (self.i.payload.nbytes != 0)
        m.d.comb += [
            self.o.valid.eq(holding),
            self.i.ready.eq(~spare_full),
            self.idle.eq(~holding & ~spare_full),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += position.eq(position + width)
        with m.If(free):
            with m.If(spare_full):
                m.d.sync += [holding.eq(1), data.eq(spare.data),
                             last_position.eq(spare.nbytes - 1), position.eq(0),
                             spare_full.eq(0)]
            with m.Elif(incoming):
                m.d.sync += [holding.eq(1), data.eq(self.i.payload.data),
                             last_position.eq(self.i.payload.nbytes - 1), position.eq(0)]
            with m.Else():
                m.d.sync += holding.eq(0)
        with m.Elif(incoming):
            m.d.sync += [spare.eq(self.i.payload), spare_full.eq(1)]
        return m
