"""The maxaccel wire protocol: frames, commands, status codes (see ``docs/protocol.md``).

Pure Python: the host uses it to talk to a board, and the gateware imports its constants so
both ends agree by construction.
"""

import enum
import struct
import zlib
from dataclasses import dataclass

__all__ = [
    "MAGIC", "VERSION", "HEADER_SIZE", "TRAILER_SIZE", "FRAME_OVERHEAD", "CRC_ALGORITHM",
    "Command", "Status", "Frame", "Identity", "PARAMETERS", "COUNTERS", "COUNTER_NAMES",
    "crc32", "encode_frame", "FrameParser",
]

MAGIC = b"MX"
VERSION = 1
HEADER_SIZE = 12
TRAILER_SIZE = 5
FRAME_OVERHEAD = HEADER_SIZE + TRAILER_SIZE
#: Name of the CRC in ``amaranth.lib.crc.catalog``; the host computes the same CRC with zlib.
CRC_ALGORITHM = "CRC32_ISO_HDLC"
#: Largest payload a frame may declare; a header claiming more is treated as garbage.
MAX_PAYLOAD = 1 << 30

_HEADER = struct.Struct("<2sBBI")


class Command(enum.IntEnum):
    """Request codes (a reply echoes its request's)."""

    IDENTIFY = 0x01
    REDUCE = 0x02
    POOL_CHANNELS_LAST = 0x03
    LOAD = 0x04
    MAX = 0x05
    COUNTERS = 0x06


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


@dataclass(frozen=True)
class Identity:
    """What ``IDENTIFY`` reports: the device's protocol version, datapath and capacities.

    Attributes
    ----------
    version : int
        Protocol version.
    lanes : int
        64-bit lanes per datapath beat (8 * lanes bytes per cycle).
    dtypes : frozenset of int
        Supported ONNX element type codes.
    replay_depth : int
        Beats the broadcast replay buffer holds.
    max_dims : int
        Outer dimensions a ``MAX`` pass enumerates.
    max_operands : int
        Replayed operands a ``MAX`` pass folds.
    pool_channels : int
        Channels ``POOL_CHANNELS_LAST`` can hold (for 8-byte elements; more for smaller ones,
        see ``docs/architecture.md``).
    clock_hz : int
        Core clock frequency.
    frame_timeout_cycles : int
        Idle cycles after which the device abandons a partial frame.
    """

    version: int
    lanes: int
    dtypes: frozenset
    replay_depth: int
    max_dims: int
    max_operands: int
    pool_channels: int
    clock_hz: int
    frame_timeout_cycles: int

    STRUCT = struct.Struct("<BBIIBBIII")

    def encode(self):
        bitmap = sum(1 << int(code) for code in self.dtypes)
        return self.STRUCT.pack(self.version, self.lanes, bitmap, self.replay_depth,
                                self.max_dims, self.max_operands, self.pool_channels,
                                self.clock_hz, self.frame_timeout_cycles)

    @classmethod
    def decode(cls, payload):
        if len(payload) != cls.STRUCT.size:
            raise ValueError(f"IDENTIFY reply of {len(payload)} bytes, expected {cls.STRUCT.size}")
        (version, lanes, bitmap, depth, max_dims, max_operands, channels, clock,
         timeout) = cls.STRUCT.unpack(payload)
        dtypes = frozenset(code for code in range(32) if bitmap >> code & 1)
        return cls(version, lanes, dtypes, depth, max_dims, max_operands, channels, clock,
                   timeout)


#: Parameter blocks at the start of a request's payload, by command (all little-endian).
PARAMETERS = {
    #: dtype, runs, run length R (elements).
    Command.REDUCE: struct.Struct("<BII"),
    #: dtype, images, pixels per image, channels.
    Command.POOL_CHANNELS_LAST: struct.Struct("<BIII"),
    #: dtype, base (beat address in the replay buffer), rows, row length (elements).
    Command.LOAD: struct.Struct("<BIII"),
}

#: ``COUNTERS`` reply: UART framing errors, UART overruns, frame check failures, header check
#: failures, frame timeouts (u32 each, wrapping).
COUNTERS = struct.Struct("<IIIII")
COUNTER_NAMES = ("uart_framing_errors", "uart_overruns", "frame_check_failures",
                 "header_check_failures", "frame_timeouts")


def crc32(data, value=0):
    """CRC-32/ISO-HDLC of ``data`` (``amaranth.lib.crc.catalog.CRC32_ISO_HDLC``), resumable."""
    return zlib.crc32(data, value)


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


def encode_frame(code, seq, payload=b"", status=0):
    """The bytes of one frame (see ``docs/protocol.md``)."""
    payload = bytes(payload)
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes exceeds the protocol's {MAX_PAYLOAD}")
    header = _HEADER.pack(MAGIC, int(code), seq & 0xFF, len(payload))
    trailer_status = bytes([int(status)])
    return b"".join([
        header, struct.pack("<I", crc32(header)),
        payload,
        trailer_status, struct.pack("<I", crc32(trailer_status, crc32(payload))),
    ])


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
