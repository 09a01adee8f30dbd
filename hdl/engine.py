"""The command engine: wire-protocol frames in, datapath commands, reply frames out.

The engine speaks the protocol of ``docs/protocol.md`` on a pair of byte streams, so it is the
same behind a UART, a PCIe stream or a simulator. Everything the protocol fixes (magic, command
and status codes, parameter blocks, the CRC, the ``IDENTIFY`` and ``COUNTERS`` replies) comes from
:mod:`maxaccel.host.protocol`, so host and gateware agree by construction.

Building blocks, each a component with stream interfaces:

* :class:`FrameReceiver` -- hunts for the magic, checks the header CRC before trusting the
  length, streams the payload out while checking the frame CRC, reports the outcome (intact, or
  timed out when bytes stopped arriving mid-frame).
* :class:`FrameTransmitter` -- builds a reply frame: header with its CRC, payload from a stream
  (or zero padding), status byte and frame CRC.
* :class:`RowPacker` -- dense little-endian link bytes to row-aligned beats
  (:func:`~maxaccel.hdl.beat.beat_layout`), empty rows included.
* :class:`RowUnpacker` -- row-aligned beats back to dense bytes.
* :class:`SaturatingMultiplier` -- the bit-serial multiplier that checks request lengths and
  capacities without a wide multiplier.
* :class:`CommandEngine` -- the whole engine: receiver, parameter parsing and checks, packer,
  routing to the datapath units, unpacker, transmitter.

See ``docs/architecture.md``, "Command engine".
"""

import struct

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from maxaccel.host.dtypes import FORMATS, DType
from maxaccel.host.protocol import (COUNTERS, HEADER_SIZE, MAGIC, MAX_PAYLOAD,
                                    PARAMETERS, TRAILER_SIZE, VERSION, Command, Identity,
                                    MaxParameters, Status)

from .beat import beat_layout
from .broadcast import BroadcastOp
from .kit import refuse
from .lane import LANE_BITS, LANE_BYTES
from .linkword import (WordCRC, WordSplitter, check_link_bytes, link_signature, one_byte,
                       word_fields)

__all__ = ["header_layout", "trailer_layout", "FrameReceiver",
           "FrameTransmitter", "RowPacker", "RowUnpacker", "SaturatingMultiplier",
           "CommandEngine"]

#: What a frame header carries: command code, sequence number, payload length.
header_layout = data.StructLayout({"command": 8, "seq": 8, "length": 32})
#: Outcome of a received frame: the frame check passed, or bytes stopped arriving mid-frame.
trailer_layout = data.StructLayout({"intact": 1, "timeout": 1})


def _fields(parameter_struct):
    """``(offset, size)`` of each field of a ``struct.Struct`` of ``B``, ``I`` and ``x`` codes."""
    fields, offset, count = [], 0, ""
    for code in parameter_struct.format.lstrip("<"):
        if code.isdigit():
            count += code
            continue
        repeat, count = int(count or 1), ""
        size = struct.calcsize("<" + code)
        for _ in range(repeat):
            if code != "x":
                fields.append((offset, size))
            offset += size
    assert offset == parameter_struct.size
    return fields


class FrameReceiver(wiring.Component):
    """Finds and checks request frames in a link stream.

    Hunting: the last 12 bytes received sit in a window; whenever the window starts with the
    magic, the receiver runs the 12 bytes through its CRC (12 cycles, the input stalled) and
    accepts the header only if the header check passes and the length is at most
    ``MAX_PAYLOAD``. Otherwise it counts a header check failure and slides on by one byte, so a
    false magic (in garbage or in a lost frame's payload) never hides a real frame that starts
    inside its 12 bytes. A header, once offered on ``header`` and taken, is trusted: exactly
    ``length`` payload bytes follow on ``payload`` and then the 5 trailer bytes are checked.

    Header, hunting and trailer go a byte per cycle; the payload goes up to ``link_bytes``
    bytes per cycle. On a wider link a word the receiver has only partly used (a frame's
    header and payload share a word) is held in a register and used up first; a word used up
    in the cycle it arrives is never held, so on a link of one byte per cycle the payload is
    passed through combinationally.

    Parameters
    ----------
    timeout_cycles : int
        Cycles without a byte while the receiver waits for one inside a frame (after the
        header was taken, before the trailer's last byte) after which it abandons the frame.
    link_bytes : int
        Bytes per cycle of ``i`` and ``payload`` (:data:`~maxaccel.hdl.linkword.LINK_WIDTHS`).

    Ports
    -----
    i : In(link_signature(link_bytes))
        Link bytes.
    header : Out(stream.Signature(header_layout))
        One transfer per accepted header: ``command``, ``seq``, ``length``. The receiver waits
        for it to be taken before it passes the payload on.
    payload : Out(link_signature(link_bytes))
        The ``length`` payload bytes, fewer if the frame times out. Each word carries as many
        bytes as the receiver has, at most ``payload_limit``.
    payload_limit : In(range(1, link_bytes + 1))
        The most bytes the consumer takes in one transfer (ignored on a one-byte link).
    trailer : Out(stream.Signature(trailer_layout))
        One transfer per accepted header, after its last payload byte: ``intact`` if the frame
        check passed; ``timeout`` (and not ``intact``) if the frame was abandoned. The receiver
        hunts again once it is taken.
    header_check_failures, frame_check_failures, frame_timeouts : Out(32)
        Wrapping counters.
    hunting : Out(1)
        Waiting for a header with nothing to check: no frame in progress.

    Latency and throughput
    ----------------------
    One byte per cycle while hunting, ``link_bytes`` inside the payload; a header check stalls
    the input 13 cycles. ``header`` is valid 13 cycles after the header's last byte was taken,
    ``trailer`` one cycle after the trailer's last byte.
    """

    def __init__(self, timeout_cycles, link_bytes=1):
        if not isinstance(timeout_cycles, int) or timeout_cycles < 1:
            refuse(self, f"timeout_cycles must be a positive integer, not {timeout_cycles!r}")
        check_link_bytes(link_bytes, unit=self)
        self.timeout_cycles = timeout_cycles
        self.link_bytes = link_bytes
        super().__init__({
            "i": In(link_signature(link_bytes)),
            "header": Out(stream.Signature(header_layout)),
            "payload": Out(link_signature(link_bytes)),
            "payload_limit": In(range(1, link_bytes + 1), init=link_bytes),
            "trailer": Out(stream.Signature(trailer_layout)),
            "header_check_failures": Out(32),
            "frame_check_failures": Out(32),
            "frame_timeouts": Out(32),
            "hunting": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        width = self.link_bytes
        m.submodules.crc = check = WordCRC(width)

        window = Signal(8 * HEADER_SIZE)
        fill = Signal(range(HEADER_SIZE + 1))
        checked = Signal()          # the window's current start was checked already
        index = Signal(range(HEADER_SIZE))
        remaining = Signal(32)
        trailer_left = Signal(range(TRAILER_SIZE + 1))
        idle_cycles = Signal(range(self.timeout_cycles + 1))
        timed_out = Signal()

        # The bytes the current state may use (`source_bytes`, from byte 0, `source_valid`), and
        # how many it takes (`take`, 0 if none); `wanting` says the state waits for a byte (for
        # the timeout). On a wide link a WordSplitter gives out at most `limit` bytes at a time.
        take = Signal(range(width + 1))
        wanting = Signal()
        limit = Signal(range(1, width + 1), init=1)
        holding = 0     # bytes taken from `i`, not yet used
        if width == 1:
            source_valid, source_bytes = self.i.valid, self.i.payload
            m.d.comb += self.i.ready.eq(take != 0)
        else:
            m.submodules.splitter = splitter = WordSplitter(width)
            wiring.connect(m, wiring.flipped(self.i), splitter.i)
            source_valid = splitter.o.valid
            source_bytes = splitter.o.payload.data.as_value()
            holding = splitter.holding
            m.d.comb += [splitter.limit.eq(limit), splitter.o.ready.eq(take != 0)]
        byte = source_bytes[:8]

        magic = int.from_bytes(MAGIC, "little")
        candidate = (fill == HEADER_SIZE) & (window[:16] == magic) & ~checked
        length = window[32:64]
        m.d.comb += [
            self.header.payload.command.eq(window[16:24]),
            self.header.payload.seq.eq(window[24:32]),
            self.header.payload.length.eq(length),
            self.trailer.payload.intact.eq(check.match_detected & ~timed_out),
            self.trailer.payload.timeout.eq(timed_out),
            check.data.as_value().eq(source_bytes),
        ]

        def take_bytes(count):
            m.d.comb += take.eq(Mux(source_valid, count, 0))

        def wait_for_byte():
            # Inside a frame: count the cycles in which a byte is wanted and none comes.
            with m.If(take != 0):
                m.d.sync += idle_cycles.eq(0)
            with m.Elif(wanting):
                m.d.sync += idle_cycles.eq(idle_cycles + 1)
                with m.If(idle_cycles == self.timeout_cycles - 1):
                    m.d.sync += [
                        timed_out.eq(1),
                        self.frame_timeouts.eq(self.frame_timeouts + 1),
                    ]
                    m.next = "RESULT"

        with m.FSM():
            with m.State("HUNT"):
                m.d.comb += self.hunting.eq(~candidate & ~holding)
                with m.If(candidate):
                    m.d.sync += index.eq(0)
                    m.next = "CHECK"
                with m.Else():
                    take_bytes(1)
                with m.If(take != 0):
                    m.d.sync += [
                        window.eq(Cat(window[8:], byte)),
                        fill.eq(Mux(fill == HEADER_SIZE, HEADER_SIZE, fill + 1)),
                        checked.eq(0),
                    ]
            with m.State("CHECK"):
                m.d.comb += [
                    check.start.eq(index == 0),
                    check.count.eq(1),
                    check.data[0].eq(window.word_select(index, 8)),
                ]
                m.d.sync += index.eq(index + 1)
                with m.If(index == HEADER_SIZE - 1):
                    m.next = "VERDICT"
            with m.State("VERDICT"):
                with m.If(check.match_detected & (length <= MAX_PAYLOAD)):
                    m.next = "HEADER"
                with m.Else():
                    m.d.sync += [
                        checked.eq(1),
                        self.header_check_failures.eq(self.header_check_failures + 1),
                    ]
                    m.next = "HUNT"
            with m.State("HEADER"):
                m.d.comb += self.header.valid.eq(1)
                with m.If(self.header.ready):
                    m.d.comb += check.start.eq(1)
                    m.d.sync += [
                        remaining.eq(length),
                        trailer_left.eq(TRAILER_SIZE),
                        idle_cycles.eq(0),
                        timed_out.eq(0),
                    ]
                    with m.If(length == 0):
                        m.next = "TRAILER"
                    with m.Else():
                        m.next = "PAYLOAD"
            with m.State("PAYLOAD"):
                m.d.comb += [
                    self.payload.valid.eq(source_valid),
                    wanting.eq(self.payload.ready),
                    check.count.eq(take),
                ]
                if width == 1:
                    m.d.comb += self.payload.payload.eq(byte)
                    offered = 1
                else:
                    # At most what the consumer takes and what is left of the frame.
                    capped = Mux(remaining < width, remaining[:len(limit)], width)
                    m.d.comb += [
                        limit.eq(Mux(capped < self.payload_limit, capped, self.payload_limit)),
                        self.payload.payload.data.as_value().eq(source_bytes),
                        self.payload.payload.count.eq(splitter.o.payload.count),
                    ]
                    offered = splitter.o.payload.count
                with m.If(self.payload.ready):
                    take_bytes(offered)
                with m.If(take != 0):
                    m.d.sync += remaining.eq(remaining - take)
                    with m.If(remaining == take):
                        m.next = "TRAILER"
                wait_for_byte()
            with m.State("TRAILER"):
                take_bytes(1)
                m.d.comb += [wanting.eq(1), check.count.eq(take)]
                with m.If(take != 0):
                    m.d.sync += trailer_left.eq(trailer_left - 1)
                    with m.If(trailer_left == 1):
                        m.next = "RESULT"
                wait_for_byte()
            with m.State("RESULT"):
                m.d.comb += self.trailer.valid.eq(1)
                with m.If(self.trailer.ready):
                    m.d.sync += fill.eq(0)
                    with m.If(~check.match_detected & ~timed_out):
                        m.d.sync += self.frame_check_failures.eq(self.frame_check_failures + 1)
                    m.next = "HUNT"
        return m


class FrameTransmitter(wiring.Component):
    """Sends one reply frame per ``start`` transfer.

    The header (magic, command, sequence number, length, header CRC) goes out first; then
    ``length`` payload bytes taken from ``payload``, or zero bytes while ``pad`` is high; then
    the status byte taken from ``status`` and the frame CRC of payload and status. Header,
    status and CRC go a byte per transfer, the payload in the words it comes in.

    Parameters
    ----------
    link_bytes : int
        Bytes per cycle of ``payload`` and ``o`` (:data:`~maxaccel.hdl.linkword.LINK_WIDTHS`).

    Ports
    -----
    start : In(stream.Signature(header_layout))
        A reply to send; taken only when the previous reply is completely sent.
    payload : In(link_signature(link_bytes))
        Payload bytes; passed through combinationally to ``o`` (``payload.ready`` is
        ``o.ready`` in the payload phase). Its words must not run past ``length``.
    pad : In(1)
        In the payload phase, send zero bytes instead of taking them from ``payload`` (the reply
        of an abandoned request is padded to its declared length).
    status : In(stream.Signature(8))
        The trailer's status, taken when the payload is complete.
    o : Out(link_signature(link_bytes))
        Frame bytes.
    idle : Out(1)
        No reply in progress.

    Latency and throughput
    ----------------------
    One transfer per cycle while ``o.ready`` is high: a reply of ``L`` payload bytes in full
    words takes ``ceil(L / link_bytes) + 17`` cycles. The first header byte is valid the cycle
    after ``start`` is taken.
    """

    def __init__(self, link_bytes=1):
        check_link_bytes(link_bytes, unit=self)
        self.link_bytes = link_bytes
        super().__init__({
            "start": In(stream.Signature(header_layout)),
            "payload": In(link_signature(link_bytes)),
            "pad": In(1),
            "status": In(stream.Signature(8)),
            "o": Out(link_signature(link_bytes)),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        width = self.link_bytes
        m.submodules.crc = frame_check = WordCRC(width)

        header = Signal(64)
        remaining = Signal(32)
        index = Signal(range(HEADER_SIZE))
        sent = Signal()
        sent_count = Signal(range(width + 1))     # bytes sent this cycle
        out_bytes, out_count = word_fields(self.o.payload, width)
        m.d.comb += [
            sent.eq(self.o.valid & self.o.ready),
            sent_count.eq(Mux(sent, out_count, 0)),
            frame_check.data.as_value().eq(out_bytes),
        ]

        def send_byte(value):
            m.d.comb += one_byte(self.o.payload, width, value)

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += [self.idle.eq(1), self.start.ready.eq(1)]
                with m.If(self.start.valid):
                    reply = self.start.payload
                    m.d.sync += [
                        header.eq(Cat(Const(int.from_bytes(MAGIC, "little"), 16),
                                      reply.command, reply.seq, reply.length)),
                        remaining.eq(reply.length),
                        index.eq(0),
                    ]
                    m.next = "HEADER"
            with m.State("HEADER"):
                m.d.comb += [
                    self.o.valid.eq(1),
                    frame_check.start.eq(sent & ((index == 0) | (index == HEADER_SIZE - 1))),
                    frame_check.count.eq(sent & (index < 8)),
                ]
                send_byte(Mux(index < 8, header.word_select(index[:3], 8),
                              frame_check.crc.word_select(index[:2], 8)))
                with m.If(sent):
                    m.d.sync += index.eq(index + 1)
                    with m.If(index == HEADER_SIZE - 1):
                        with m.If(remaining == 0):
                            m.next = "STATUS"
                        with m.Else():
                            m.next = "PAYLOAD"
            with m.State("PAYLOAD"):
                with m.If(self.pad):
                    m.d.comb += self.o.valid.eq(1)
                    if width > 1:
                        m.d.comb += self.o.payload.count.eq(
                            Mux(remaining < width, remaining[:len(sent_count)], width))
                with m.Else():
                    m.d.comb += [
                        self.o.valid.eq(self.payload.valid),
                        self.o.payload.eq(self.payload.payload),
                        self.payload.ready.eq(self.o.ready),
                    ]
                m.d.comb += frame_check.count.eq(sent_count)
                with m.If(sent):
                    m.d.sync += remaining.eq(remaining - sent_count)
                    with m.If(remaining == sent_count):
                        m.next = "STATUS"
            with m.State("STATUS"):
                m.d.comb += [
                    self.o.valid.eq(self.status.valid),
                    self.status.ready.eq(self.o.ready),
                    frame_check.count.eq(sent),
                ]
                send_byte(self.status.payload)
                with m.If(sent):
                    m.d.sync += index.eq(0)
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += self.o.valid.eq(1)
                send_byte(frame_check.crc.word_select(index[:2], 8))
                with m.If(sent):
                    m.d.sync += index.eq(index + 1)
                    with m.If(index == 3):
                        m.next = "IDLE"
        return m


class RowPacker(wiring.Component):
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

    def __init__(self, lanes, link_bytes=1):
        check_link_bytes(link_bytes, lanes=lanes, unit=self)
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


class RowUnpacker(wiring.Component):
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

    def __init__(self, lanes, link_bytes=1):
        check_link_bytes(link_bytes, lanes=lanes, unit=self)
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


class SaturatingMultiplier(wiring.Component):
    """``a * b`` for checking lengths: bit-serial, saturating at ``2**width``.

    Shift and add over the bits of ``b``, least significant first: while bits of ``b`` remain,
    ``p += a`` if the bit is set, then ``a`` doubles. The whole unit is one ``width + 1``-bit
    adder and three registers, and it stops as soon as no bit of ``b`` is left, so small factors
    (the usual counts) take a few cycles. ``overflow`` is set when the product is
    ``2**width`` or more; ``a_overflow`` says ``a`` stands for such a value. A product of 0 is
    exact whatever ``a`` was. Chaining ``product``/``overflow`` into ``a``/``a_overflow``
    multiplies any number of factors, saturating.

    Parameters
    ----------
    width : int
        Width of ``a``, ``b`` and ``product``.

    Ports
    -----
    start : In(1)
        Strobe: sample ``a``, ``a_overflow``, ``b`` and begin.
    a, b : In(width)
    a_overflow : In(1)
    product : Out(width), overflow : Out(1)
        Valid while ``busy`` is low after a ``start``.
    busy : Out(1)

    Latency
    -------
    ``busy`` is high for ``b.bit_length()`` cycles from the cycle after ``start`` (0 to
    ``width``).
    """

    def __init__(self, width=32):
        self.width = width
        super().__init__({
            "start": In(1),
            "a": In(width),
            "a_overflow": In(1),
            "b": In(width),
            "product": Out(width),
            "overflow": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        width = self.width
        multiplicand = Signal(width)
        multiplicand_overflow = Signal()      # the doubled multiplicand is 2**width or more
        multiplier = Signal(width)
        total = Signal(width + 1)
        m.d.comb += [
            total.eq(self.product + multiplicand),
            self.busy.eq(multiplier != 0),
        ]
        with m.If(self.busy):
            m.d.sync += [
                multiplicand.eq(multiplicand << 1),
                multiplier.eq(multiplier >> 1),
            ]
            with m.If(multiplicand[-1]):
                m.d.sync += multiplicand_overflow.eq(1)
            with m.If(multiplier[0]):
                m.d.sync += self.product.eq(total[:width])
                with m.If(total[width] | multiplicand_overflow):
                    m.d.sync += self.overflow.eq(1)
        with m.If(self.start):
            m.d.sync += [
                multiplicand.eq(self.a),
                multiplicand_overflow.eq(self.a_overflow),
                multiplier.eq(self.b),
                self.product.eq(0),
                self.overflow.eq(0),
            ]
        return m


#: Parameter-block field names, in block order, of the data commands with a fixed block.
_FIELD_NAMES = {
    Command.REDUCE: ("dtype", "runs", "run_length"),
    Command.POOL_CHANNELS_LAST: ("dtype", "images", "pixels", "channels"),
    Command.LOAD: ("dtype", "base", "rows", "row_length"),
}
_DATA_COMMANDS = (Command.REDUCE, Command.POOL_CHANNELS_LAST, Command.LOAD, Command.MAX)


class CommandEngine(wiring.Component):
    """Request frames in, datapath commands, reply frames out (``docs/protocol.md``).

    The engine is transport-agnostic: a byte stream in, a byte stream out. It drives three
    datapath units through ports wired up by :class:`~maxaccel.hdl.top.Core`; it takes the
    units themselves (not elaborated here) only to read their capacities and layouts.

    A request goes through these phases (states of the control FSM):

    1. **Header.** :class:`FrameReceiver` hunts for a header that passes its check.
    2. **Parameters.** The command's parameter block (``PARAMETERS`` of
       :mod:`maxaccel.host.protocol`, ``MaxParameters.layout`` for ``MAX``) is shifted into a
       register. A payload shorter than the block is ``BAD_LENGTH``, an unknown command
       ``BAD_COMMAND``; both are decided from the header.
    3. **Checks.** The data length and reply length the parameters imply are computed with a
       bit-serial :class:`SaturatingMultiplier` (one cycle per significant bit of the second
       factor, 1 to ``max_dims`` products per command), then one cycle decides the status, in
       this priority:
       ``UNSUPPORTED_DTYPE``, ``BAD_PARAMETER`` (a zero dimension where none is allowed:
       ``POOL_CHANNELS_LAST`` pixels or channels, a ``LOAD`` or ``MAX`` row length, a ``MAX``
       count; for ``MAX`` also more operands than ``max_operands``, none at all, a flag other
       than 0/1, a reserved byte other than 0), ``TOO_LARGE`` (beyond a capacity: the pooling
       channels, the replay buffer's depth for a ``LOAD`` or a ``MAX`` operand's base, the
       ``MAX`` count limit ``max_count`` for a count or a row in beats, or a reply above
       ``MAX_PAYLOAD``), ``BAD_LENGTH`` (the payload is not the block plus the data the
       parameters imply). The input is stalled meanwhile.
    4. **Streaming.** If the command is accepted, the reply header (with the length the
       parameters imply) is sent at once, the unit is started, the remaining payload is repacked
       into beats by :class:`RowPacker` and the unit's results are serialised by
       :class:`RowUnpacker` into the reply payload while the request is still arriving.
       A refused command's remaining payload is drained and discarded.
    5. **Trailer.** When the request's trailer has been checked, the reply's status is decided:
       ``TIMEOUT`` if the request stopped arriving (its reply, if started, is padded with zero
       bytes to its declared length, and the packer, the unpacker and the units are reset by
       ``abort``), else ``CRC_ERROR`` if the frame check failed, else the status of step 3. A
       reply that had not started has an empty payload unless it is an ``IDENTIFY`` or
       ``COUNTERS`` reply with status ``OK``. After a ``LOAD`` the status waits for the last
       beat to be written.
    6. The engine waits for the reply's last byte, then hunts for the next header.

    One request is handled at a time; every request whose header passes its check gets exactly
    one reply, whatever its content, and no input stops the engine from hunting again.

    Parameters
    ----------
    reducer : RunReducer
    pool : ChannelsLastPool
    broadcast : BroadcastMax
        The units; they must have the same ``lanes``, a power of two.
    clock_hz : int
        Clock frequency reported by ``IDENTIFY``.
    frame_timeout_cycles : int, optional
        Idle cycles after which a partial request is abandoned; default ``clock_hz // 100``
        (10 ms).
    link_bytes : int
        Bytes per cycle of ``i`` and ``o`` (:data:`~maxaccel.hdl.linkword.LINK_WIDTHS`, at
        most ``8 * lanes``): 1 behind a UART, more behind a wide stream such as PCIe or the
        compiled virtual board.

    Attributes
    ----------
    identity : Identity
        What ``IDENTIFY`` reports.
    max_parameters : struct.Struct
        The ``MAX`` parameter block of this engine (``MaxParameters.layout(max_dims,
        max_operands)``).

    Ports
    -----
    i : In(link_signature(link_bytes))
        Request bytes from the link.
    o : Out(link_signature(link_bytes))
        Reply bytes to the link.
    uart_framing_errors, uart_overruns : In(32)
        Link error counters reported by ``COUNTERS`` (tie to 0 without a UART).
    abort : Out(1)
        One-cycle reset strobe for the units when a started request is abandoned.
    reduce_active, pool_active, broadcast_active : Out(1)
        The current command is the unit's (registered): a clock enable for the unit, which
        holds still between its commands (and costs the simulator little meanwhile).
    idle : Out(1)
        No request or reply in progress and no header candidate pending: without new input
        the engine will never send another byte.
    dtype : Out(DType)
        Element type of the current command, for every unit.
    reduce : Out(stream.Signature(beat_layout(lanes)))
        Rows for ``reducer.i``.
    reduce_result : In(stream.Signature(64))
        From ``reducer.o``.
    pool : Out(stream.Signature(beat_layout(lanes)))
        Pixel rows for ``pool.i``.
    pool_result : In(stream.Signature(beat_layout(lanes)))
        From ``pool.o``.
    pool_pixels, pool_channels, pool_clear : Out
        For the pool's ports of the same names.
    broadcast_command : Out(stream.Signature(broadcast.command_layout))
    broadcast_config : Out(broadcast.config_layout)
    broadcast_load, broadcast_streamed : Out(stream.Signature(beat_layout(lanes)))
    broadcast_output : In(stream.Signature(beat_layout(lanes)))
    broadcast_busy : In(1)
        For the broadcast unit's ports of the same names.

    Latency and throughput
    ----------------------
    ``link_bytes`` link bytes per cycle in and out for the data, whatever the command and
    dtype (the units take a beat of ``8 * lanes`` bytes per cycle, so they are never the
    bottleneck); headers, parameter blocks, trailers and word replies go a byte per cycle. A
    payload row that does not start on a link word boundary costs a word per beat more. Per
    request the input stalls 15 cycles at the header (its check and the handshake), and a
    data command's checks stall it once more after the parameter block: about 9 cycles plus,
    per product, 3 plus the bit length of its second factor (measured: 17 cycles for a REDUCE,
    24 for a LOAD, 30 for a POOL_CHANNELS_LAST, 29 for a MAX with 4 dimensions, all with small
    factors). The reply header's first byte goes out in the cycle the first data byte is taken.
    A unit's result bytes follow the beat that completes them by the unit's latency plus 2
    cycles (packer and unpacker registers). The reply trailer starts 3 to 8 cycles after the
    request's last byte, or right after the reply's last payload byte if that is later (an
    output beat's bytes leave one per cycle, so a MAX reply trails its request by about
    ``8 * lanes`` cycles).
    """

    def __init__(self, *, reducer, pool, broadcast, clock_hz, frame_timeout_cycles=None,
                 link_bytes=1):
        lanes = reducer.lanes
        if pool.lanes != lanes or broadcast.lanes != lanes:
            refuse(self, f"the units must have the same lanes, not {reducer.lanes}, "
                         f"{pool.lanes}, {broadcast.lanes}")
        if frame_timeout_cycles is None:
            frame_timeout_cycles = max(clock_hz // 100, 1)
        check_link_bytes(link_bytes, lanes=lanes, unit=self)
        self.lanes = lanes
        self.link_bytes = link_bytes
        self.pool_capacity_bytes = pool.capacity_bytes
        self.depth = broadcast.depth
        self.max_dims = broadcast.max_dims
        self.max_operands = broadcast.max_operands
        self.max_count = broadcast.max_count
        self.command_layout = broadcast.command_layout
        self.config_layout = broadcast.config_layout
        self.clock_hz = clock_hz
        self.frame_timeout_cycles = frame_timeout_cycles
        self.max_parameters = MaxParameters.layout(self.max_dims, self.max_operands)
        self.identity = Identity(
            version=VERSION, lanes=lanes, dtypes=frozenset(int(code) for code in FORMATS),
            replay_depth=self.depth, max_dims=self.max_dims, max_operands=self.max_operands,
            pool_channels=pool.capacity_bytes // 8, clock_hz=clock_hz,
            frame_timeout_cycles=frame_timeout_cycles)
        beat = beat_layout(lanes)
        super().__init__({
            "i": In(link_signature(link_bytes)),
            "o": Out(link_signature(link_bytes)),
            "uart_framing_errors": In(32),
            "uart_overruns": In(32),
            "abort": Out(1),
            "idle": Out(1),
            "reduce_active": Out(1),
            "pool_active": Out(1),
            "broadcast_active": Out(1),
            "dtype": Out(DType),
            "reduce": Out(stream.Signature(beat)),
            "reduce_result": In(stream.Signature(LANE_BITS)),
            "pool": Out(stream.Signature(beat)),
            "pool_result": In(stream.Signature(beat)),
            "pool_pixels": Out(pool.pixel_bits),
            "pool_channels": Out(range(pool.capacity_bytes + 1)),
            "pool_clear": Out(1),
            "broadcast_command": Out(stream.Signature(broadcast.command_layout)),
            "broadcast_config": Out(broadcast.config_layout),
            "broadcast_load": Out(stream.Signature(beat)),
            "broadcast_streamed": Out(stream.Signature(beat)),
            "broadcast_output": In(stream.Signature(beat)),
            "broadcast_busy": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes, max_dims, max_operands = self.lanes, self.max_dims, self.max_operands
        beat_bytes = LANE_BYTES * lanes
        if beat_bytes & (beat_bytes - 1):
            raise ValueError(f"lanes must be a power of two, not {lanes}")

        width = self.link_bytes
        m.submodules.receiver = receiver = FrameReceiver(self.frame_timeout_cycles, width)
        m.submodules.transmitter = transmitter = FrameTransmitter(width)
        m.submodules.multiplier = multiplier = SaturatingMultiplier(32)
        packer, unpacker = RowPacker(lanes, width), RowUnpacker(lanes, width)
        m.submodules.packer = ResetInserter(self.abort)(packer)
        m.submodules.unpacker = ResetInserter(self.abort)(unpacker)

        # ---- Parameter block: a shift register; the bytes of a block of N bytes end up in
        # the top N bytes, so every field of every command is a fixed slice.
        structs = {command: PARAMETERS[command] for command in _FIELD_NAMES}
        structs[Command.MAX] = self.max_parameters
        block_bytes = max(s.size for s in structs.values())
        block = Signal(8 * block_bytes)

        def fields(command):
            start = block_bytes - structs[command].size
            return [block[8 * (start + offset):8 * (start + offset + size)]
                    for offset, size in _fields(structs[command])]

        reduce_fields = dict(zip(_FIELD_NAMES[Command.REDUCE], fields(Command.REDUCE)))
        pool_fields = dict(zip(_FIELD_NAMES[Command.POOL_CHANNELS_LAST],
                               fields(Command.POOL_CHANNELS_LAST)))
        load_fields = dict(zip(_FIELD_NAMES[Command.LOAD], fields(Command.LOAD)))
        max_list = fields(Command.MAX)
        max_fields = {"dtype": max_list[0], "operands": max_list[1], "streamed": max_list[2],
                      "row_length": max_list[3], "counts": max_list[4:4 + max_dims],
                      "operand": []}
        for k in range(max_operands):
            entry = max_list[4 + max_dims + k * (2 + max_dims):][:2 + max_dims]
            max_fields["operand"].append({"base": entry[0], "splat": entry[1],
                                          "steps": entry[2:]})
        by_command = {Command.REDUCE: reduce_fields, Command.POOL_CHANNELS_LAST: pool_fields,
                      Command.LOAD: load_fields, Command.MAX: max_fields}
        row_length_field = {Command.REDUCE: "run_length", Command.POOL_CHANNELS_LAST: "channels",
                            Command.LOAD: "row_length", Command.MAX: "row_length"}

        # ---- Request state.
        command = Signal(8)
        seq = Signal(8)
        length = Signal(32)
        needed = Signal(range(block_bytes + 1))
        received = Signal(range(block_bytes + 1))
        status = Signal(8)
        final = Signal(8)
        pad = Signal()

        # Element type and row geometry, registered one after the other in the checks (every
        # step of the checks is a register, to keep them off the critical path).
        dtype = Signal(8)
        supported = Signal()
        shift = Signal(2)          # log2(itemsize)
        with m.Switch(dtype):
            for fmt in FORMATS.values():
                with m.Case(fmt.dtype):
                    m.d.sync += [supported.eq(1), shift.eq(fmt.nbytes.bit_length() - 1)]
            with m.Default():
                m.d.sync += [supported.eq(0), shift.eq(0)]
        row_elements = Signal(32)
        row_bytes = Signal(35)
        row_beats = Signal(32)
        last_nbytes = Signal(range(beat_bytes + 1))
        m.d.comb += self.dtype.eq(dtype)
        m.d.sync += [
            self.reduce_active.eq(command == Command.REDUCE),
            self.pool_active.eq(command == Command.POOL_CHANNELS_LAST),
            self.broadcast_active.eq((command == Command.LOAD) | (command == Command.MAX)),
        ]

        # Products (value, overflow) of the checks.
        products = {name: (Signal(32, name=f"{name}_product"), Signal(name=f"{name}_overflow"))
                    for name in ("rows", "data", "reply", "beats")}
        accumulator, accumulator_overflow = Signal(32), Signal()
        m.d.comb += [multiplier.a.eq(accumulator), multiplier.a_overflow.eq(accumulator_overflow)]

        reply_length = Signal(32)
        packer_rows = Signal(32)
        packer_row_bytes = Signal(32)
        m.d.comb += [packer.rows.eq(packer_rows), packer.row_bytes.eq(packer_row_bytes)]

        # ---- The programs of the checks: load a factor, multiply by one, save the product.
        programs = {
            Command.REDUCE: [("load", reduce_fields["runs"]), ("mul", reduce_fields["run_length"]),
                             ("save", "data")],
            Command.POOL_CHANNELS_LAST: [
                ("load", pool_fields["images"]), ("mul", pool_fields["pixels"]), ("save", "rows"),
                ("mul", pool_fields["channels"]), ("save", "data"),
                ("load", pool_fields["images"]), ("mul", pool_fields["channels"]),
                ("save", "reply")],
            Command.LOAD: [("load", load_fields["rows"]), ("mul", load_fields["row_length"]),
                           ("save", "data"), ("load", load_fields["rows"]), ("mul", row_beats),
                           ("save", "beats")],
            Command.MAX: [("load", max_fields["counts"][0])]
                         + [("mul", count) for count in max_fields["counts"][1:]]
                         + [("save", "rows"), ("mul", max_fields["row_length"]),
                            ("save", "data")],
        }

        # The comb logic is split over three fragments so that the Python simulator, which
        # re-runs a fragment's whole comb logic whenever one of its inputs changes, re-runs
        # only the small stream routing for every byte: `checks` (verdicts and unit
        # configuration) changes only while a parameter block comes in, `m` (the control FSM)
        # only between phases.
        m.submodules.checks = checks = Module()
        m.submodules.streams = streams = Module()

        # ---- Verdicts, in priority order, per data command (first true condition wins). The
        # products are scaled to bytes into registers (state SCALE) before the verdict.
        payload_data = Signal(32)          # bytes after the parameter block
        data_bytes, reply_bytes, runs_bytes = Signal(35), Signal(35), Signal(35)
        data_overflow = products["data"][1]
        reply_overflow = products["reply"][1]

        def length_wrong(expected_overflow, expected):
            return expected_overflow | (expected != payload_data)

        beats, beats_overflow = products["beats"]
        rows = products["rows"][0]
        max_streamed = max_fields["streamed"]
        max_operand_count = max_fields["operands"]
        max_reserved = block[8 * (block_bytes - self.max_parameters.size + 3):][:8]
        verdicts = {
            Command.REDUCE: [
                (runs_bytes > MAX_PAYLOAD, Status.TOO_LARGE),
                (length_wrong(data_overflow, data_bytes), Status.BAD_LENGTH),
            ],
            Command.POOL_CHANNELS_LAST: [
                ((pool_fields["pixels"] == 0) | (pool_fields["channels"] == 0),
                 Status.BAD_PARAMETER),
                ((row_bytes > self.pool_capacity_bytes) | reply_overflow
                 | (reply_bytes > MAX_PAYLOAD), Status.TOO_LARGE),
                (length_wrong(data_overflow, data_bytes), Status.BAD_LENGTH),
            ],
            Command.LOAD: [
                (load_fields["row_length"] == 0, Status.BAD_PARAMETER),
                (beats_overflow | (load_fields["base"] + beats > self.depth), Status.TOO_LARGE),
                (length_wrong(data_overflow, data_bytes), Status.BAD_LENGTH),
            ],
            Command.MAX: [
                ((max_operand_count > max_operands) | (max_reserved != 0)
                 | (max_streamed > 1) | ((max_operand_count == 0) & (max_streamed == 0))
                 | (max_fields["row_length"] == 0)
                 | Cat(count == 0 for count in max_fields["counts"]).any()
                 | Cat((k < max_operand_count) & (operand["splat"] > 1)
                       for k, operand in enumerate(max_fields["operand"])).any(),
                 Status.BAD_PARAMETER),
                (Cat(count > self.max_count for count in max_fields["counts"]).any()
                 | (row_beats > self.max_count)
                 | Cat((k < max_operand_count) & (operand["base"] >= self.depth)
                       for k, operand in enumerate(max_fields["operand"])).any()
                 | data_overflow | (data_bytes > MAX_PAYLOAD), Status.TOO_LARGE),
                (length_wrong(0, Mux(max_streamed[0], data_bytes, 0)), Status.BAD_LENGTH),
            ],
        }
        verdict = Signal(8)
        with checks.Switch(command):
            for code, conditions in verdicts.items():
                with checks.Case(code):
                    with checks.If(~supported):
                        checks.d.comb += verdict.eq(Status.UNSUPPORTED_DTYPE)
                    for condition, outcome in conditions:
                        with checks.Elif(condition):
                            checks.d.comb += verdict.eq(outcome)

        # ---- Unit configuration: slices of the block and the registered geometry.
        checks.d.comb += [
            self.pool_pixels.eq(pool_fields["pixels"]),
            self.pool_channels.eq(pool_fields["channels"]),
        ]
        config = self.broadcast_config
        checks.d.comb += [
            config.dtype.eq(dtype),
            config.operands.eq(max_operand_count),
            config.streamed.eq(max_streamed[0]),
            config.row_beats.eq(row_beats),
            config.last_nbytes.eq(last_nbytes),
        ]
        for d in range(max_dims):
            checks.d.comb += config.counts[d].eq(max_fields["counts"][d])
        for k, operand in enumerate(max_fields["operand"]):
            checks.d.comb += [
                config.operand[k].base.eq(operand["base"]),
                config.operand[k].splat.eq(operand["splat"][0]),
            ]
            for d in range(max_dims):
                checks.d.comb += config.operand[k].steps[d].eq(operand["steps"][d])
        with checks.If(command == Command.LOAD):
            checks.d.comb += self.broadcast_command.payload.op.eq(BroadcastOp.LOAD)
        with checks.Else():
            checks.d.comb += self.broadcast_command.payload.op.eq(BroadcastOp.RUN)
        checks.d.comb += [
            self.broadcast_command.payload.base.eq(load_fields["base"]),
            self.broadcast_command.payload.count.eq(beats),
            # Rows of one element are a splat operand's: stored repeated across their beat.
            self.broadcast_command.payload.fill.eq(load_fields["row_length"] == 1),
        ]

        # ---- Reply payload sources: a word shifted out (IDENTIFY, COUNTERS) or the unpacker.
        identity_bytes = self.identity.encode()
        counters = Cat(self.uart_framing_errors, self.uart_overruns,
                       receiver.frame_check_failures, receiver.header_check_failures,
                       receiver.frame_timeouts)
        assert len(counters) == 8 * COUNTERS.size
        reply_word = Signal(8 * max(len(identity_bytes), COUNTERS.size))
        word_reply = Signal()
        m.d.sync += word_reply.eq((command == Command.IDENTIFY) | (command == Command.COUNTERS))
        with streams.If(word_reply):
            streams.d.comb += [transmitter.payload.valid.eq(1),
                               *one_byte(transmitter.payload.payload, width, reply_word[:8])]
        with streams.Else():
            wiring.connect(streams, unpacker.o, transmitter.payload)
        with m.If(word_reply & transmitter.payload.ready):
            m.d.sync += reply_word.eq(reply_word >> 8)
        streams.d.comb += transmitter.pad.eq(pad)

        # ---- Routing between packer, units and unpacker by command, selected by one-hot
        # registers (not by decoding `command` on the way).
        selected = {code: Signal(name=f"route_{code.name.lower()}") for code in _DATA_COMMANDS}
        m.d.sync += [flag.eq(command == code) for code, flag in selected.items()]
        to_unit = {Command.REDUCE: self.reduce, Command.POOL_CHANNELS_LAST: self.pool,
                   Command.LOAD: self.broadcast_load, Command.MAX: self.broadcast_streamed}
        from_unit = {Command.POOL_CHANNELS_LAST: self.pool_result,
                     Command.MAX: self.broadcast_output}
        for code, port in to_unit.items():
            streams.d.comb += port.payload.eq(packer.o.payload)
            with streams.If(selected[code]):
                streams.d.comb += [port.valid.eq(packer.o.valid),
                                   packer.o.ready.eq(port.ready)]
        with streams.If(selected[Command.REDUCE]):
            streams.d.comb += [
                unpacker.i.valid.eq(self.reduce_result.valid),
                unpacker.i.payload.data[0].eq(self.reduce_result.payload),
                unpacker.i.payload.nbytes.eq(Const(1, 4) << shift),
                unpacker.i.payload.first.eq(1),
                unpacker.i.payload.last.eq(1),
                self.reduce_result.ready.eq(unpacker.i.ready),
            ]
        for code, port in from_unit.items():
            with streams.If(selected[code]):
                streams.d.comb += [
                    unpacker.i.valid.eq(port.valid),
                    unpacker.i.payload.eq(port.payload),
                    port.ready.eq(unpacker.i.ready),
                ]

        wiring.connect(streams, wiring.flipped(self.i), receiver.i)
        wiring.connect(streams, transmitter.o, wiring.flipped(self.o))

        # Request payload: into the parameter block, to the packer, or discarded, by phase.
        taking_parameters, streaming, draining = Signal(), Signal(), Signal()
        streams.d.comb += [
            receiver.payload.ready.eq(taking_parameters | draining
                                      | (streaming & packer.i.ready)),
            receiver.payload_limit.eq(Mux(taking_parameters, 1,
                                          Mux(streaming, packer.limit, width))),
            packer.i.valid.eq(streaming & receiver.payload.valid),
            packer.i.payload.eq(receiver.payload.payload),
        ]
        parameter_byte = word_fields(receiver.payload.payload, width)[0][:8]

        # ---- The control FSM.
        def take_trailer(then):
            """Accept the receiver's trailer and decide the final status."""
            m.d.comb += receiver.trailer.ready.eq(1)
            with m.If(receiver.trailer.valid):
                outcome = receiver.trailer.payload
                m.d.sync += final.eq(Mux(outcome.timeout, Status.TIMEOUT,
                                         Mux(outcome.intact, status, Status.CRC_ERROR)))
                then(outcome)

        def to_reply(outcome):
            m.next = "REPLY"

        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += receiver.header.ready.eq(1)
                m.d.sync += pad.eq(0)
                with m.If(receiver.header.valid):
                    header = receiver.header.payload
                    m.d.sync += [
                        command.eq(header.command),
                        seq.eq(header.seq),
                        length.eq(header.length),
                        received.eq(0),
                        status.eq(Status.OK),
                        needed.eq(0),
                    ]
                    m.next = "DRAIN"
                    with m.Switch(header.command):
                        with m.Case(Command.IDENTIFY, Command.COUNTERS):
                            with m.If(header.length != 0):
                                m.d.sync += status.eq(Status.BAD_LENGTH)
                        for code, s in structs.items():
                            with m.Case(code):
                                m.d.sync += needed.eq(s.size)
                                with m.If(header.length < s.size):
                                    m.d.sync += status.eq(Status.BAD_LENGTH)
                                with m.Else():
                                    m.next = "PARAMS"
                        with m.Default():
                            m.d.sync += status.eq(Status.BAD_COMMAND)

            with m.State("PARAMS"):
                m.d.comb += taking_parameters.eq(1)
                with m.If(receiver.payload.valid):
                    m.d.sync += [
                        block.eq(Cat(block[8:], parameter_byte)),
                        received.eq(received + 1),
                    ]
                    with m.If(received == needed - 1):
                        m.next = "GEOMETRY_DTYPE"
                take_trailer(to_reply)   # only a timeout ends a frame here

            with m.State("GEOMETRY_DTYPE"):
                with m.Switch(command):
                    for code, f in by_command.items():
                        with m.Case(code):
                            m.d.sync += [dtype.eq(f["dtype"]),
                                         row_elements.eq(f[row_length_field[code]])]
                m.d.sync += payload_data.eq(length - needed)
                m.next = "GEOMETRY_SHIFT"
            with m.State("GEOMETRY_SHIFT"):
                m.next = "GEOMETRY_ROW"    # the dtype's decode is registered meanwhile
            with m.State("GEOMETRY_ROW"):
                m.d.sync += row_bytes.eq(row_elements << shift)
                m.next = "GEOMETRY_BEATS"
            with m.State("GEOMETRY_BEATS"):
                log_beat = beat_bytes.bit_length() - 1
                m.d.sync += [
                    row_beats.eq((row_bytes + beat_bytes - 1) >> log_beat),
                    last_nbytes.eq(((row_bytes - 1) & (beat_bytes - 1)) + 1),
                ]
                with m.Switch(command):
                    for code in _DATA_COMMANDS:
                        with m.Case(code):
                            m.next = f"{code.name}_0"

            for code, program in programs.items():
                for step, (op, operand) in enumerate(program):
                    following = (f"{code.name}_{step + 1}" if step + 1 < len(program)
                                 else "SCALE")
                    if op == "load":
                        with m.State(f"{code.name}_{step}"):
                            m.d.sync += [accumulator.eq(operand), accumulator_overflow.eq(0)]
                            m.next = following
                    elif op == "save":
                        with m.State(f"{code.name}_{step}"):
                            value, overflow = products[operand]
                            m.d.sync += [value.eq(accumulator),
                                         overflow.eq(accumulator_overflow)]
                            m.next = following
                    else:
                        with m.State(f"{code.name}_{step}"):
                            m.d.comb += [multiplier.start.eq(1), multiplier.b.eq(operand)]
                            m.next = f"{code.name}_{step}_WAIT"
                        with m.State(f"{code.name}_{step}_WAIT"):
                            with m.If(~multiplier.busy):
                                m.d.sync += [accumulator.eq(multiplier.product),
                                             accumulator_overflow.eq(multiplier.overflow)]
                                m.next = following

            with m.State("SCALE"):
                m.d.sync += [
                    data_bytes.eq(products["data"][0] << shift),
                    reply_bytes.eq(products["reply"][0] << shift),
                    runs_bytes.eq(reduce_fields["runs"] << shift),
                ]
                m.next = "VALIDATE"

            with m.State("VALIDATE"):
                m.d.sync += status.eq(verdict)
                with m.Switch(command):
                    with m.Case(Command.REDUCE):
                        m.d.sync += [
                            reply_length.eq(runs_bytes),
                            packer_rows.eq(reduce_fields["runs"]),
                        ]
                    with m.Case(Command.POOL_CHANNELS_LAST):
                        m.d.sync += [reply_length.eq(reply_bytes), packer_rows.eq(rows)]
                    with m.Case(Command.LOAD):
                        m.d.sync += [reply_length.eq(0), packer_rows.eq(load_fields["rows"])]
                    with m.Case(Command.MAX):
                        m.d.sync += [reply_length.eq(data_bytes),
                                     packer_rows.eq(Mux(max_streamed[0], rows, 0))]
                m.d.sync += packer_row_bytes.eq(row_bytes)
                m.next = "DECIDE"

            with m.State("DECIDE"):
                with m.If(status == Status.OK):
                    m.next = "START"
                with m.Else():
                    m.next = "DRAIN"

            with m.State("START"):
                m.d.comb += [
                    transmitter.start.valid.eq(1),
                    transmitter.start.payload.command.eq(command),
                    transmitter.start.payload.seq.eq(seq),
                    transmitter.start.payload.length.eq(reply_length),
                ]
                with m.If(transmitter.start.ready):
                    m.d.comb += [
                        packer.start.eq(1),
                        self.pool_clear.eq(command == Command.POOL_CHANNELS_LAST),
                    ]
                    with m.If((command == Command.LOAD) | (command == Command.MAX)):
                        m.next = "COMMAND"
                    with m.Else():
                        m.next = "STREAM"

            with m.State("COMMAND"):
                m.d.comb += [streaming.eq(1), self.broadcast_command.valid.eq(1)]
                with m.If(self.broadcast_command.ready):
                    m.next = "STREAM"

            with m.State("STREAM"):
                m.d.comb += streaming.eq(1)

                def streamed_outcome(outcome):
                    with m.If(outcome.timeout):
                        m.next = "ABORT"
                    with m.Else():
                        m.next = "SETTLE"
                take_trailer(streamed_outcome)

            with m.State("SETTLE"):
                # A LOAD is done when its last beat is written.
                with m.If(packer.idle & ~self.broadcast_busy):
                    m.next = "STATUS"

            with m.State("ABORT"):
                m.d.comb += self.abort.eq(1)
                m.d.sync += pad.eq(1)
                m.next = "STATUS"

            with m.State("DRAIN"):
                m.d.comb += draining.eq(1)
                take_trailer(to_reply)

            with m.State("REPLY"):
                ok = final == Status.OK
                m.d.comb += [
                    transmitter.start.valid.eq(1),
                    transmitter.start.payload.command.eq(command),
                    transmitter.start.payload.seq.eq(seq),
                ]
                with m.If(ok & (command == Command.IDENTIFY)):
                    m.d.comb += transmitter.start.payload.length.eq(len(identity_bytes))
                with m.If(ok & (command == Command.COUNTERS)):
                    m.d.comb += transmitter.start.payload.length.eq(COUNTERS.size)
                with m.If(transmitter.start.ready):
                    with m.If(command == Command.IDENTIFY):
                        m.d.sync += reply_word.eq(int.from_bytes(identity_bytes, "little"))
                    with m.Else():
                        m.d.sync += reply_word.eq(counters)
                    m.next = "STATUS"

            with m.State("STATUS"):
                m.d.comb += [
                    transmitter.status.valid.eq(1),
                    transmitter.status.payload.eq(final),
                ]
                with m.If(transmitter.status.ready):
                    m.next = "FINISH"

            with m.State("FINISH"):
                with m.If(transmitter.idle):
                    m.next = "IDLE"

        m.d.comb += self.idle.eq(fsm.ongoing("IDLE") & receiver.hunting & transmitter.idle)
        return m
