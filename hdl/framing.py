"""Framing: request frames in, reply frames out (``docs/protocol.md``, "Frames").

* :class:`FrameReceiver` -- hunts for the magic, checks the header CRC before trusting the
  length, streams the payload out while checking the frame CRC, reports the outcome (intact, or
  timed out when bytes stopped arriving mid-frame).
* :class:`FrameTransmitter` -- builds a reply frame: header with its CRC, payload from a stream
  (or zero padding), status byte and frame CRC.

The frame layout (magic, header and trailer sizes, the CRC, ``MAX_PAYLOAD``) comes from
:mod:`maxaccel.contract.wire`.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.wire import HEADER_SIZE, MAGIC, MAX_PAYLOAD, TRAILER_SIZE

from .kit import Checked
from .linkword import (SerialCRC, WordCRC, WordSplitter, check_link_bytes, link_signature,
                       one_byte, word_fields)

__all__ = ["header_layout", "trailer_layout", "FrameReceiver", "FrameTransmitter"]

#: What a frame header carries: command code, sequence number, payload length.
header_layout = data.StructLayout({"command": 8, "seq": 8, "length": 32})
#: Outcome of a received frame: the frame check passed, or bytes stopped arriving mid-frame.
trailer_layout = data.StructLayout({"intact": 1, "timeout": 1})


def _check_serial_crc(serial_crc, link_bytes):
    if serial_crc not in (False, True):
        raise ValueError(f"serial_crc must be True or False (or 1 or 0), not {serial_crc!r}")
    if serial_crc and link_bytes != 1:
        raise ValueError(f"serial_crc takes a link of one byte per cycle, not {link_bytes}")


class FrameReceiver(Checked, wiring.Component):
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
    serial_crc : bool
        The frame check a bit a cycle (:class:`~maxaccel.hdl.linkword.SerialCRC`, a link of
        one byte per cycle only): each byte it takes (header, payload, trailer) then costs
        eight cycles, for a link that brings one no faster (a UART).

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
    ``trailer`` one cycle after the trailer's last byte. With ``serial_crc``: a byte every
    eight cycles inside a frame, a header check of 97 cycles, ``trailer`` eight cycles after
    the trailer's last byte.
    """

    @classmethod
    def check_parameters(cls, timeout_cycles, link_bytes=1, serial_crc=False):
        if not isinstance(timeout_cycles, int) or timeout_cycles < 1:
            raise ValueError(f"timeout_cycles must be a positive integer, not "
                             f"{timeout_cycles!r}")
        check_link_bytes(link_bytes)
        _check_serial_crc(serial_crc, link_bytes)

    def __init__(self, timeout_cycles, link_bytes=1, serial_crc=False):
        self.timeout_cycles = timeout_cycles
        self.link_bytes = link_bytes
        self.serial_crc = serial_crc
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
        m.submodules.crc = check = SerialCRC() if self.serial_crc else WordCRC(width)
        crc_busy = check.busy if self.serial_crc else Const(0)

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
            source_valid, source_bytes = self.i.valid & ~crc_busy, self.i.payload
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
                m.d.comb += check.data[0].eq(window.word_select(index, 8))
                with m.If(~crc_busy):
                    m.d.comb += [check.start.eq(index == 0), check.count.eq(1)]
                    m.d.sync += index.eq(index + 1)
                    with m.If(index == HEADER_SIZE - 1):
                        m.next = "VERDICT"
            with m.State("VERDICT"):
                accepted = check.match_detected & (length <= MAX_PAYLOAD)
                with m.If(~crc_busy & accepted):
                    m.next = "HEADER"
                with m.Elif(~crc_busy):
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
                m.d.comb += self.trailer.valid.eq(~crc_busy)
                with m.If(self.trailer.valid & self.trailer.ready):
                    m.d.sync += fill.eq(0)
                    with m.If(~check.match_detected & ~timed_out):
                        m.d.sync += self.frame_check_failures.eq(self.frame_check_failures + 1)
                    m.next = "HUNT"
        return m


class FrameTransmitter(Checked, wiring.Component):
    """Sends one reply frame per ``start`` transfer.

    The header (magic, command, sequence number, length, header CRC) goes out first; then
    ``length`` payload bytes taken from ``payload``, or zero bytes while ``pad`` is high; then
    the status byte taken from ``status`` and the frame CRC of payload and status. Header,
    status and CRC go a byte per transfer, the payload in the words it comes in.

    Parameters
    ----------
    link_bytes : int
        Bytes per cycle of ``payload`` and ``o`` (:data:`~maxaccel.hdl.linkword.LINK_WIDTHS`).
    serial_crc : bool
        The CRCs a bit a cycle (:class:`~maxaccel.hdl.linkword.SerialCRC`, a link of one byte
        per cycle only): a byte every eight cycles, for a link that takes one no faster.

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
    words takes ``ceil(L / link_bytes) + 17`` cycles (with ``serial_crc``, ``8 * L + 80``:
    seven more after each of the ``L + 9`` bytes the CRC takes).
    The first header byte is valid the cycle after ``start`` is taken.
    """

    @classmethod
    def check_parameters(cls, link_bytes=1, serial_crc=False):
        check_link_bytes(link_bytes)
        _check_serial_crc(serial_crc, link_bytes)

    def __init__(self, link_bytes=1, serial_crc=False):
        self.link_bytes = link_bytes
        self.serial_crc = serial_crc
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
        m.submodules.crc = frame_check = SerialCRC() if self.serial_crc else WordCRC(width)
        # No byte goes out while the serial CRC still takes the last one in.
        ready = self.o.ready & ~frame_check.busy if self.serial_crc else self.o.ready
        out_valid = Signal()

        header = Signal(64)
        remaining = Signal(32)
        index = Signal(range(HEADER_SIZE))
        sent = Signal()
        sent_count = Signal(range(width + 1))     # bytes sent this cycle
        out_bytes, out_count = word_fields(self.o.payload, width)
        m.d.comb += [
            self.o.valid.eq(out_valid & ~frame_check.busy if self.serial_crc else out_valid),
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
                    out_valid.eq(1),
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
                    m.d.comb += out_valid.eq(1)
                    if width > 1:
                        m.d.comb += self.o.payload.count.eq(
                            Mux(remaining < width, remaining[:len(sent_count)], width))
                with m.Else():
                    m.d.comb += [
                        out_valid.eq(self.payload.valid),
                        self.o.payload.eq(self.payload.payload),
                        self.payload.ready.eq(ready),
                    ]
                m.d.comb += frame_check.count.eq(sent_count)
                with m.If(sent):
                    m.d.sync += remaining.eq(remaining - sent_count)
                    with m.If(remaining == sent_count):
                        m.next = "STATUS"
            with m.State("STATUS"):
                m.d.comb += [
                    out_valid.eq(self.status.valid),
                    self.status.ready.eq(ready),
                    frame_check.count.eq(sent),
                ]
                send_byte(self.status.payload)
                with m.If(sent):
                    m.d.sync += index.eq(0)
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += out_valid.eq(1)
                send_byte(frame_check.crc.word_select(index[:2], 8))
                with m.If(sent):
                    m.d.sync += index.eq(index + 1)
                    with m.If(index == 3):
                        m.next = "IDLE"
        return m
