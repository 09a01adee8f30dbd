"""The frames of the wire protocol: magic, version, command and status codes, the CRC, the
``COUNTERS`` reply, and the host's frame encoder and parser (``docs/protocol.md``, "Frames").
"""

import enum
import struct
from dataclasses import dataclass

from isal.isal_zlib import crc32 as _crc32

__all__ = ["MAGIC", "VERSION", "HEADER_SIZE", "TRAILER_SIZE", "FRAME_OVERHEAD", "CRC_ALGORITHM",
           "MAX_PAYLOAD", "PAYLOAD_ALIGN", "Command", "Status", "COUNTERS", "COUNTER_NAMES",
           "crc32", "Frame", "payload_in_frame", "encode_frame", "FrameParser"]

MAGIC = b"MX"
#: Protocol version, reported by ``IDENTIFY``. 2: parameter blocks padded to
#: :data:`PAYLOAD_ALIGN`, ``MAX``'s ``streamed`` a count (the fold). 3: ``MAX_POOL`` and the
#: pooling unit's capacities in ``IDENTIFY``. 4: parameter blocks padded to 32
#: (:data:`PAYLOAD_ALIGN`, the NiteFury's 32-byte link word), and ``window_lanes`` counts the
#: pooling unit's 64-bit lanes (a ``MAX_POOL`` group of up to ``8 * window_lanes / itemsize``
#: images). 5: ``window_extent`` is the kernel extent of the two inner axes and
#: ``window_extent_outer`` (a byte appended to ``IDENTIFY``) that of a 3-D pool's outermost
#: axis, so a board sizes its plane buffers apart from its line buffers. 6: ``REDUCE``'s
#: ``minimum`` byte (a run's minimum; a version-5 core takes that byte for padding and would
#: answer a ReduceMin with the maximum). 7: ``MAX``'s ``minimum`` byte (element-wise Min; a
#: version-6 core refuses a 1 there, its ``reserved`` byte) and ``POOL_CHANNELS_LAST``'s (a
#: ReduceMin over the spatial axes of ``N x D1..Dn x C``; padding to a version-6 core). 8:
#: ``REDUCE``'s ``arg`` byte (ArgMax and ArgMin: each run's position; padding to a version-7
#: core, which would answer with the runs' extremes). 9: ``reduce_lanes`` (a byte appended to
#: ``IDENTIFY``): a core may be built without the run reducer, and then answers ``REDUCE``
#: with ``BAD_COMMAND``. 10: ``window_extent_outer`` 0 is a pooling unit of two axes, which
#: answers ``TOO_LARGE`` to an outermost axis of more than one element or output (a version-9
#: core of extent 1 there pools it), and a ``MAX_POOL`` axis field above ``WINDOW_FIELD_MAX``
#: is ``BAD_PARAMETER`` (a version-9 core answers ``TOO_LARGE``, or ``BAD_PARAMETER`` for a
#: first window of padding only): a core holds every axis field in 16 bits and one. 11:
#: ``window_field_max`` (two bytes appended to ``IDENTIFY``), the largest axis field the
#: unit holds, and ``window_indices`` (a byte after it): a core made for a model may hold
#: narrower fields (a larger one is ``BAD_PARAMETER``) and may give no Indices (``TOO_LARGE``
#: when asked); a version-10 core holds 65 535 and gives them.
VERSION = 11
HEADER_SIZE = 12
TRAILER_SIZE = 5
FRAME_OVERHEAD = HEADER_SIZE + TRAILER_SIZE
#: Name of the CRC in ``amaranth.lib.crc.catalog``; the host computes the same CRC
#: with ISA-L (:func:`crc32`).
CRC_ALGORITHM = "CRC32_ISO_HDLC"
#: Largest payload a frame may declare; a header claiming more is treated as garbage.
MAX_PAYLOAD = 1 << 30

_HEADER = struct.Struct("<2sBBI")

#: Every data command's parameter block is padded (with bytes the device ignores) so that the
#: request data after it starts this many bytes, or a multiple, from the frame's start: on a
#: link of up to this many bytes a cycle (32 behind the NiteFury's XDMA and on the compiled
#: virtual board) a frame that starts on a link word puts its first data byte on one too, and
#: a row of one beat is one word (``docs/protocol.md``, "Alignment").
PAYLOAD_ALIGN = 32


class Command(enum.IntEnum):
    """Request codes (a reply echoes its request's)."""

    IDENTIFY = 0x01
    REDUCE = 0x02
    POOL_CHANNELS_LAST = 0x03
    LOAD = 0x04
    MAX = 0x05
    COUNTERS = 0x06
    MAX_POOL = 0x07


class Status(enum.IntEnum):
    """Outcome of a request, in the reply's trailer."""

    OK = 0
    CRC_ERROR = 1
    BAD_COMMAND = 2
    BAD_LENGTH = 3
    UNSUPPORTED_DTYPE = 4
    TOO_LARGE = 5
    TIMEOUT = 6
    BAD_PARAMETER = 7



#: ``COUNTERS`` reply: UART framing errors, UART overruns, frame check failures, header check
#: failures, frame timeouts (u32 each, wrapping).
COUNTERS = struct.Struct("<IIIII")
COUNTER_NAMES = ("uart_framing_errors", "uart_overruns", "frame_check_failures",
                 "header_check_failures", "frame_timeouts")


def crc32(data, value=0):
    """CRC-32/ISO-HDLC of ``data`` (``amaranth.lib.crc.catalog.CRC32_ISO_HDLC``), resumable."""
    return _crc32(data, value)


@dataclass(frozen=True)
class Frame:
    """A decoded frame.

    Attributes
    ----------
    code : int
        Command code.
    seq : int
        Sequence number, 0..255.
    payload : bytes
    status : int
        Trailer status; 0 in requests.
    intact : bool
        Whether the frame check passed. A frame whose header check passed but whose frame
        check failed is still delivered (with ``intact=False``) so the receiver can answer it
        with ``CRC_ERROR``.
    """

    code: int
    seq: int
    payload: bytes
    status: int = 0
    intact: bool = True


class _PayloadFrame(bytearray):
    """The frame a :func:`payload_in_frame` view lies in: room for the header before the
    payload and the trailer after it, filled in by :func:`encode_frame`."""

    check = None        # the payload's CRC, once known
    sent = False        # handed out by encode_frame before


def payload_in_frame(length):
    """A writable byte view of ``length`` bytes for a request's payload, inside the frame that
    will carry it: :func:`encode_frame` of the view fills the frame's header and trailer in
    around it instead of copying it, so a tensor's bytes are copied once, from the tensor into
    the frame. Anything else sees a bytes-like payload."""
    if length > MAX_PAYLOAD:
        raise ValueError(f"payload of {length} bytes exceeds the protocol's {MAX_PAYLOAD}")
    return memoryview(_PayloadFrame(HEADER_SIZE + length + TRAILER_SIZE))[
        HEADER_SIZE:HEADER_SIZE + length]


def _frame_around(payload, code, seq, status):
    """:func:`encode_frame` of a :func:`payload_in_frame` view: its frame, filled in."""
    frame = payload.obj
    # A frame handed to a transport before may still be in its driver (a transfer our wait
    # gave up on): a later attempt's header goes into a copy.
    filled = bytearray(frame) if frame.sent else frame
    frame.sent = True
    if frame.check is None:
        frame.check = crc32(payload)
    filled[:HEADER_SIZE] = _head(code, seq, len(payload))
    filled[HEADER_SIZE + len(payload):] = _tail(status, frame.check)
    return filled


def _head(code, seq, length):
    """A frame's header and its check."""
    header = _HEADER.pack(MAGIC, int(code), seq & 0xFF, length)
    return header + struct.pack("<I", crc32(header))


def _tail(status, payload_check):
    """A frame's trailer: its status byte and the frame check (``payload_check`` is the
    payload's CRC)."""
    status = bytes([int(status)])
    return status + struct.pack("<I", crc32(status, payload_check))


def encode_frame(code, seq, payload=b"", status=0):
    """The bytes of one frame (see ``docs/protocol.md``); a ``payload`` made by
    :func:`payload_in_frame` is not copied: its frame is filled in around it."""
    if (isinstance(payload, memoryview) and isinstance(payload.obj, _PayloadFrame)
            and payload.nbytes == len(payload.obj) - FRAME_OVERHEAD):
        return _frame_around(payload, code, seq, status)
    payload = bytes(payload)
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes exceeds the protocol's {MAX_PAYLOAD}")
    return b"".join([_head(code, seq, len(payload)), payload, _tail(status, crc32(payload))])


class FrameParser:
    """Incremental frame decoder that resynchronises after garbage.

    Feed it bytes as they arrive; it returns the frames completed so far. Bytes that are not
    part of a frame with a valid header are skipped and counted in ``skipped_bytes``; headers
    that fail their check are counted in ``header_errors``, frames whose frame check fails in
    ``frame_errors``.
    """

    def __init__(self):
        self._buffer = bytearray()
        self.skipped_bytes = 0
        self.header_errors = 0
        self.frame_errors = 0

    def pending(self):
        """Bytes held for an incomplete frame."""
        return len(self._buffer)

    def wanted(self):
        """Bytes still needed before the frame being received can complete (at least 1)."""
        if len(self._buffer) < HEADER_SIZE:
            return HEADER_SIZE - len(self._buffer)
        # feed() leaves only a frame start whose header passed its check at the front.
        (length,) = struct.unpack_from("<I", self._buffer, 4)
        return HEADER_SIZE + length + TRAILER_SIZE - len(self._buffer)

    def partial(self):
        """``(code, seq, length)`` of a frame whose header has arrived but not its end, or None.

        A device uses it to answer an abandoned frame with ``TIMEOUT``.
        """
        if len(self._buffer) < HEADER_SIZE:
            return None
        _, code, seq, length = _HEADER.unpack_from(self._buffer, 0)
        return code, seq, length

    def reset(self):
        """Drop any partial frame (after a timeout)."""
        self.skipped_bytes += len(self._buffer)
        self._buffer.clear()

    def feed(self, data):
        """Add received bytes; return the list of :class:`Frame` completed by them."""
        self._buffer += data
        frames = []
        while True:
            start = self._buffer.find(MAGIC)
            if start < 0:
                # Keep a trailing first magic byte: it may start the next frame.
                keep = 1 if self._buffer[-1:] == MAGIC[:1] else 0
                self.skipped_bytes += len(self._buffer) - keep
                del self._buffer[:len(self._buffer) - keep]
                return frames
            if start:
                self.skipped_bytes += start
                del self._buffer[:start]
            if len(self._buffer) < HEADER_SIZE:
                return frames
            header = bytes(self._buffer[:8])
            (check,) = struct.unpack_from("<I", self._buffer, 8)
            _, code, seq, length = _HEADER.unpack(header)
            if check != crc32(header) or length > MAX_PAYLOAD:
                # Not a frame start: skip this magic and hunt for the next.
                self.header_errors += 1
                self.skipped_bytes += 1
                del self._buffer[:1]
                continue
            end = HEADER_SIZE + length + TRAILER_SIZE
            if len(self._buffer) < end:
                return frames
            payload = bytes(self._buffer[HEADER_SIZE:HEADER_SIZE + length])
            status = self._buffer[HEADER_SIZE + length]
            (frame_check,) = struct.unpack_from("<I", self._buffer, end - 4)
            intact = frame_check == crc32(bytes([status]), crc32(payload))
            if not intact:
                self.frame_errors += 1
            frames.append(Frame(code, seq, payload, status, intact))
            del self._buffer[:end]
