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
    "MAX_COUNT", "MaxOperand", "MaxParameters", "crc32", "encode_frame", "FrameParser",
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

#: Largest outer count, and largest row length in beats, of a ``MAX`` pass (protocol version 1;
#: the ``BroadcastMax`` unit's ``max_count``).
MAX_COUNT = 65535


@dataclass(frozen=True)
class MaxOperand:
    """One replayed operand of a ``MAX`` pass (see :class:`MaxParameters`).

    Attributes
    ----------
    base : int
        Replay-buffer address (in beats) of the operand's first stored row.
    splat : bool
        The operand stores one beat per row (loaded with row length 1) and its element 0 is
        replicated across the output row.
    steps : tuple of int
        One per outer dimension, outermost first: the change of the operand's row address when
        counter d advances and the counters inside it wrap, ``stride[d] - sum over e > d of
        (counts[e] - 1) * stride[e]`` (``stride`` in beats, 0 along broadcast dimensions). May
        be negative; the device takes it modulo ``2**addr_bits``.
    """

    base: int
    splat: bool
    steps: tuple


@dataclass(frozen=True)
class MaxParameters:
    """The parameter block of a ``MAX`` request: one ``BroadcastMax`` pass.

    The output of the pass is ``prod(counts)`` rows of ``row_length`` elements, enumerated by
    ``len(counts)`` outer counters (outermost first, C order). Each output element is the max of
    the streamed operand's element (if ``streamed``) and, for every replayed operand k, the
    element at the operand's current row address (``base`` + the sum of ``steps`` taken so far,
    modulo ``2**addr_bits``) + the element's beat within the row (beat 0 and element 0 for a
    ``splat`` operand). Replayed operands must have been written by ``LOAD`` before; the
    buffer keeps its contents across commands until they are overwritten.

    Layout (little-endian, fixed width for a device reporting ``max_dims`` = D and
    ``max_operands`` = K; size ``8 + 4*D + K*(8 + 4*D)`` bytes; :meth:`layout` as a
    ``struct.Struct``)::

        offset        size  field
        0             1     dtype: ONNX element type code
        1             1     operands: M, the number of replayed operands (0 .. K)
        2             1     streamed: 1 if the request data carries the streamed operand, else 0
        3             1     reserved, 0
        4             4     row_length: elements per output row (>= 1), u32
        8             4*D   counts[D]: outer counts, outermost first, each >= 1 (1 where unused),
                            u32 each
        8+4D+s*(8+4D) slot s = 0 .. K-1 (slots M .. K-1 are all zero):
                      4       base: replay-buffer beat address, u32
                      4       splat: 0 or 1, u32
                      4*D     steps[D]: row-address steps, i32 each (two's complement; the
                              device may read them as u32 and keep the low addr_bits)

    The request data after the block is the streamed operand (``prod(counts) * row_length``
    elements, dense, C order) when ``streamed`` is 1, nothing otherwise; the reply payload is the
    output, ``prod(counts) * row_length`` elements, dense (the device drops the padding of each
    row's last beat). At least one operand is required (``M >= 1`` or ``streamed``).

    The device answers ``BAD_LENGTH`` if the payload is not the block plus the streamed data,
    ``UNSUPPORTED_DTYPE`` for a dtype it lacks, ``BAD_PARAMETER`` for ``M > K``, no operand, a
    zero count or row length or a flag other than 0/1, and ``TOO_LARGE`` for a count or a row
    of more than :data:`MAX_COUNT` (beats).

    Attributes
    ----------
    dtype : int
    row_length : int
    counts : tuple of int
        Exactly D entries.
    streamed : bool
    operands : tuple of MaxOperand
        The replayed operands, in slot order (M of them).
    """

    dtype: int
    row_length: int
    counts: tuple
    streamed: bool
    operands: tuple = ()

    @staticmethod
    def layout(max_dims, max_operands):
        """The block as a ``struct.Struct`` of ``B``, ``I`` and ``x`` codes only (the gateware
        parses it field by field): head, ``max_dims`` counts, then per slot base, splat and
        ``max_dims`` steps (as u32: the two's complement bytes of the i32 steps)."""
        return struct.Struct("<BBBxI" + f"{max_dims}I" + f"II{max_dims}I" * max_operands)

    @classmethod
    def size(cls, max_dims, max_operands):
        """Bytes of the block for a device with these capacities."""
        return cls.layout(max_dims, max_operands).size

    @classmethod
    def from_plan(cls, plan, dtype):
        """The block for a fitting :class:`maxaccel.host.plan.BroadcastPlan`."""
        return cls(int(dtype), plan.row_elements, tuple(plan.counts),
                   plan.streamed is not None,
                   tuple(MaxOperand(o.base, o.splat, tuple(o.steps)) for o in plan.replayed))

    def encode(self, max_dims, max_operands):
        """The block's bytes for a device with ``max_dims`` and ``max_operands``.

        Raises
        ------
        ValueError
            If the pass has more dimensions or operands than the device.
        """
        if len(self.counts) != max_dims:
            raise ValueError(f"MAX pass with {len(self.counts)} outer counts for a device with "
                             f"max_dims={max_dims}")
        if len(self.operands) > max_operands:
            raise ValueError(f"MAX pass with {len(self.operands)} replayed operands for a device "
                             f"with max_operands={max_operands}")
        values = [self.dtype, len(self.operands), int(self.streamed), self.row_length,
                  *self.counts]
        for operand in self.operands:
            if len(operand.steps) != max_dims:
                raise ValueError(f"MAX operand with {len(operand.steps)} steps for a device with "
                                 f"max_dims={max_dims}")
            values += [operand.base, int(operand.splat), *(s % (1 << 32) for s in operand.steps)]
        values += [0] * ((max_operands - len(self.operands)) * (2 + max_dims))
        return self.layout(max_dims, max_operands).pack(*values)

    @classmethod
    def decode(cls, payload, max_dims, max_operands):
        """Split a ``MAX`` request payload into its block and the streamed data.

        Returns
        -------
        (MaxParameters, bytes)

        Raises
        ------
        ValueError
            If the payload is shorter than the block, or a reserved byte, operand count or flag
            is out of range (a device answers ``BAD_LENGTH`` or ``BAD_PARAMETER``).
        """
        layout = cls.layout(max_dims, max_operands)
        if len(payload) < layout.size:
            raise ValueError(f"MAX payload of {len(payload)} bytes is shorter than its "
                             f"{layout.size}-byte parameter block")
        values = layout.unpack_from(payload)
        dtype, count, streamed, row_length = values[:4]
        if payload[3] or count > max_operands or streamed > 1:
            raise ValueError(f"MAX parameter block out of range: {count} operands (at most "
                             f"{max_operands}), streamed={streamed}, reserved={payload[3]}")
        counts = values[4:4 + max_dims]
        operands = []
        for slot in range(count):
            start = 4 + max_dims + slot * (2 + max_dims)
            base, splat = values[start:start + 2]
            if splat > 1:
                raise ValueError(f"MAX operand {slot} has splat={splat}, not 0 or 1")
            steps = tuple(s - (1 << 32) if s >> 31 else s
                          for s in values[start + 2:start + 2 + max_dims])
            operands.append(MaxOperand(base, bool(splat), steps))
        return (cls(dtype, row_length, tuple(counts), bool(streamed), tuple(operands)),
                bytes(payload[layout.size:]))


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
