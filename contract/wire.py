"""The maxaccel wire protocol: frames, commands, status codes (see ``docs/protocol.md``).

Pure Python: the host uses it to talk to a board, and the gateware imports its constants so
both ends agree by construction.
"""

import enum
import struct
import zlib
from dataclasses import dataclass

from .dtypes import FORMATS, format_of
from .pooling import WINDOW_FIELDS, WINDOW_RANK, window_geometry

__all__ = [
    "MAGIC", "VERSION", "HEADER_SIZE", "TRAILER_SIZE", "FRAME_OVERHEAD", "CRC_ALGORITHM",
    "Command", "Status", "Frame", "Identity", "PARAMETERS", "COUNTERS", "COUNTER_NAMES",
    "MAX_COUNT", "MAX_STREAMED", "MaxOperand", "MaxParameters", "crc32", "encode_frame",
    "FrameParser",
    "LANE_BYTES", "PAYLOAD_ALIGN", "Field", "ParameterBlock", "parameter_block", "Capacities",
    "Rule", "CommandRules", "RULES", "STATUS_ORDER", "DATA_COMMANDS", "command_rules", "Problem",
    "quantities", "problems", "verdict", "request_verdict", "rules_markdown",
    "WINDOW_FIELD_MAX", "WINDOW_IMAGE_MAX", "WINDOW_INDEX_BYTES", "window_fields",
    "late_problems", "takes",
]

MAGIC = b"MX"
#: Protocol version, reported by ``IDENTIFY``. 2: parameter blocks padded to
#: :data:`PAYLOAD_ALIGN`, ``MAX``'s ``streamed`` a count (the fold). 3: ``MAX_POOL`` and the
#: pooling unit's capacities in ``IDENTIFY``. 4: parameter blocks padded to 32
#: (:data:`PAYLOAD_ALIGN`, the NiteFury's 32-byte link word), and ``window_lanes`` counts the
#: pooling unit's 64-bit lanes (a ``MAX_POOL`` group of up to ``8 * window_lanes / itemsize``
#: images). 5: ``window_extent`` is the kernel extent of the two inner axes and
#: ``window_extent_outer`` (a byte appended to ``IDENTIFY``) that of a 3-D pool's outermost
#: axis, so a board sizes its plane buffers apart from its line buffers.
VERSION = 5
HEADER_SIZE = 12
TRAILER_SIZE = 5
FRAME_OVERHEAD = HEADER_SIZE + TRAILER_SIZE
#: Name of the CRC in ``amaranth.lib.crc.catalog``; the host computes the same CRC with zlib.
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
    window_lanes : int
        64-bit lanes of the windowed pooling unit (``MAX_POOL``), at most ``lanes``; 0 without
        the unit. It pools a beat of up to ``8 * window_lanes`` bytes a cycle: one element of
        each of ``8 * window_lanes / itemsize`` images.
    window_extent : int
        Largest kernel extent ``(kernel - 1) * dilation + 1`` of a ``MAX_POOL`` axis but the
        outermost of three (so of every axis of a 1-D or 2-D pool).
    window_columns : int
        Largest output length of the innermost axis (the line buffers' depth), when the middle
        axis's kernel extent is above 1 (a 1-D pool, or rows pooled only along themselves,
        need no line buffer).
    window_plane : int
        Largest output plane of the two inner axes (the plane buffers' depth), when the
        outermost axis's kernel extent is above 1.
    window_extent_outer : int
        Largest kernel extent of the outermost of three ``MAX_POOL`` axes (a 3-D pool's first).
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
    window_lanes: int = 0
    window_extent: int = 0
    window_columns: int = 0
    window_plane: int = 0
    window_extent_outer: int = 0

    STRUCT = struct.Struct("<BBIIBBIIIBBIIB")

    def encode(self):
        bitmap = sum(1 << int(code) for code in self.dtypes)
        return self.STRUCT.pack(self.version, self.lanes, bitmap, self.replay_depth,
                                self.max_dims, self.max_operands, self.pool_channels,
                                self.clock_hz, self.frame_timeout_cycles, self.window_lanes,
                                self.window_extent, self.window_columns, self.window_plane,
                                self.window_extent_outer)

    @classmethod
    def decode(cls, payload):
        if len(payload) != cls.STRUCT.size:
            raise ValueError(f"IDENTIFY reply of {len(payload)} bytes, expected {cls.STRUCT.size}")
        (version, lanes, bitmap, *rest) = cls.STRUCT.unpack(payload)
        dtypes = frozenset(code for code in range(32) if bitmap >> code & 1)
        return cls(version, lanes, dtypes, *rest)


@dataclass(frozen=True)
class Field:
    """One integer field of a parameter block, little-endian.

    Attributes
    ----------
    name : str
        ``"runs"``, ``"counts[2]"``, ``"slot[1].steps[0]"``: the name the engine, the encoder
        and the status rules use.
    offset, size : int
        Position and width in bytes (1 or 4).
    signed : bool
        Two's complement (the device may read it as unsigned and keep the low bits).
    """

    name: str
    offset: int
    size: int
    signed: bool = False

    @property
    def code(self):
        """The field's ``struct`` code."""
        return {(1, False): "B", (4, False): "I", (4, True): "i"}[self.size, self.signed]


class ParameterBlock:
    """A parameter block: named integer fields at fixed offsets, the start of a request payload.

    Parameters
    ----------
    fields : sequence of (name, size) or (name, size, signed)
        In block order; offsets follow from the sizes.

    A block with fields is padded after them so that ``HEADER_SIZE + size`` is a multiple of
    :data:`PAYLOAD_ALIGN` (the data after it starts on a link word); the padding bytes are sent
    as zeros and ignored by the device.

    Attributes
    ----------
    size : int
        Bytes of the block on the wire, padding included.
    fields_size : int
        Bytes of its fields (the device stores only these).
    """

    def __init__(self, fields):
        self.fields, offset = [], 0
        for name, size, *signed in fields:
            self.fields.append(Field(name, offset, size, bool(signed and signed[0])))
            offset += size
        self.fields_size = offset
        padding = (-(HEADER_SIZE + offset)) % PAYLOAD_ALIGN if fields else 0
        self.size = offset + padding
        self.names = tuple(f.name for f in self.fields)
        self._by_name = {f.name: f for f in self.fields}
        self.struct = struct.Struct("<" + "".join(f.code for f in self.fields)
                                    + f"{padding}x")
        assert self.struct.size == self.size

    def __getitem__(self, name):
        return self._by_name[name]

    def pack(self, *values, **named):
        """The block's bytes from values in field order, or by name (missing names are 0)."""
        if named:
            unknown = set(named) - set(self.names)
            if values or unknown:
                raise TypeError(f"pack() takes values in order or by name; unknown: {unknown}")
            values = [named.get(name, 0) for name in self.names]
        return self.struct.pack(*values)

    def unpack(self, payload):
        """``{name: value}`` of the block at the start of ``payload`` (which may be longer)."""
        return dict(zip(self.names, self.struct.unpack_from(payload)))


def _max_block(max_dims, max_operands):
    return ParameterBlock(
        [("dtype", 1), ("operands", 1), ("streamed", 1), ("reserved", 1), ("row_length", 4)]
        + [(f"counts[{d}]", 4) for d in range(max_dims)]
        + [field for k in range(max_operands) for field in (
            [(f"slot[{k}].base", 4), (f"slot[{k}].splat", 4)]
            + [(f"slot[{k}].steps[{d}]", 4, True) for d in range(max_dims)])])


#: Most streamed operands one ``MAX`` pass folds (its ``streamed`` field is a byte).
MAX_STREAMED = (1 << 8 * _max_block(1, 1)["streamed"].size) - 1

def window_fields(axis):
    """The field names of spatial axis ``axis`` (0 outermost) of a ``MAX_POOL`` block, by
    :data:`~maxaccel.contract.pooling.WINDOW_FIELDS` name: ``{"size": "axis[0].size", ...}``."""
    return {name: f"axis[{axis}].{name}" for name in WINDOW_FIELDS}


#: Largest value of a ``MAX_POOL`` axis field (the pooling unit's 16-bit configuration).
WINDOW_FIELD_MAX = (1 << 16) - 1
#: Bytes of one index in a ``MAX_POOL`` reply (u32), and the largest image it can number.
WINDOW_INDEX_BYTES = 4
WINDOW_IMAGE_MAX = (1 << 8 * WINDOW_INDEX_BYTES) - 1

#: Parameter blocks of the commands whose block does not depend on the device (the ``MAX``
#: block does: :func:`parameter_block`).
PARAMETERS = {
    Command.REDUCE: ParameterBlock([("dtype", 1), ("runs", 4), ("run_length", 4)]),
    Command.POOL_CHANNELS_LAST: ParameterBlock(
        [("dtype", 1), ("images", 4), ("pixels", 4), ("channels", 4)]),
    Command.LOAD: ParameterBlock([("dtype", 1), ("base", 4), ("rows", 4), ("row_length", 4)]),
    Command.MAX_POOL: ParameterBlock(
        [("dtype", 1), ("group", 1), ("indices", 1), ("reserved", 1), ("groups", 4)]
        + [(field, 4) for axis in range(WINDOW_RANK) for field in window_fields(axis).values()]),
}

#: Largest outer count, and largest row length in beats, of a ``MAX`` pass (fixed by the
#: protocol; the ``BroadcastMax`` unit's ``max_count``).
MAX_COUNT = 65535

#: Bytes of one datapath lane; a beat is ``LANE_BYTES * lanes`` bytes (``IDENTIFY``'s lanes).
LANE_BYTES = 8


def parameter_block(command, max_dims=0, max_operands=0):
    """The parameter block of ``command`` on a device with these ``MAX`` capacities (an empty
    block for a command without parameters)."""
    if command == Command.MAX:
        return _max_block(max_dims, max_operands)
    return PARAMETERS.get(command, ParameterBlock([]))


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
    the streamed operands' elements (if ``streamed``) and, for every replayed operand k, the
    element at the operand's current row address (``base`` + the sum of ``steps`` taken so far,
    modulo ``2**addr_bits``) + the element's beat within the row (beat 0 and element 0 for a
    ``splat`` operand). Replayed operands must have been written by ``LOAD`` before; the
    buffer keeps its contents across commands until they are overwritten.

    Layout (little-endian, fixed width for a device reporting ``max_dims`` = D and
    ``max_operands`` = K: ``8 + 4*D + K*(8 + 4*D)`` bytes of fields, then zero padding to
    :data:`PAYLOAD_ALIGN`; :meth:`layout` as a :class:`ParameterBlock`)::

        offset        size  field
        0             1     dtype: ONNX element type code
        1             1     operands: M, the number of replayed operands (0 .. K)
        2             1     streamed: S, streamed operands (0 .. MAX_STREAMED = 255)
        3             1     reserved, 0
        4             4     row_length: elements per output row (>= 1), u32
        8             4*D   counts[D]: outer counts, outermost first, each >= 1 (1 where unused),
                            u32 each
        8+4D+s*(8+4D) slot s = 0 .. K-1 (slots M .. K-1 are all zero):
                      4       base: replay-buffer beat address, u32
                      4       splat: 0 or 1, u32
                      4*D     steps[D]: row-address steps, i32 each (two's complement; the
                              device may read them as u32 and keep the low addr_bits)

    The request data after the block is the streamed operands: with S = 1 the one streamed
    operand (``prod(counts) * row_length`` elements, dense, C order); with S >= 2 (the
    element-wise fold of same-shape operands, no replayed operand, a row of at most one beat)
    the S operands interleaved row by row, each output row's S input rows one after another
    (``prod(counts) * S * row_length`` elements), so the device folds S consecutive beats into
    one output beat at a beat per cycle. The reply payload is the output, ``prod(counts) *
    row_length`` elements, dense (the device drops the padding of each row's last beat). At
    least one operand is required (``M >= 1`` or ``S >= 1``).

    The device answers ``BAD_LENGTH`` if the payload is not the block plus the streamed data,
    ``UNSUPPORTED_DTYPE`` for a dtype it lacks, ``BAD_PARAMETER`` for ``M > K``, no operand,
    ``S >= 2`` with ``M >= 1``, a zero count or row length or a splat flag other than 0/1,
    and ``TOO_LARGE`` for a count or a row of more than :data:`MAX_COUNT` (beats) or
    ``S >= 2`` with a row of more than one beat (:data:`RULES`).

    Attributes
    ----------
    dtype : int
    row_length : int
    counts : tuple of int
        Exactly D entries.
    streamed : int
        S, the number of streamed operands (a bool is 0 or 1).
    operands : tuple of MaxOperand
        The replayed operands, in slot order (M of them).
    """

    dtype: int
    row_length: int
    counts: tuple
    streamed: int
    operands: tuple = ()

    @staticmethod
    def layout(max_dims, max_operands):
        """The block as a :class:`ParameterBlock` (:func:`parameter_block` of ``MAX``)."""
        return _max_block(max_dims, max_operands)

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
        fields = {"dtype": self.dtype, "operands": len(self.operands),
                  "streamed": int(self.streamed), "row_length": self.row_length}
        fields.update((f"counts[{d}]", count) for d, count in enumerate(self.counts))
        for k, operand in enumerate(self.operands):
            if len(operand.steps) != max_dims:
                raise ValueError(f"MAX operand with {len(operand.steps)} steps for a device with "
                                 f"max_dims={max_dims}")
            fields[f"slot[{k}].base"] = operand.base
            fields[f"slot[{k}].splat"] = int(operand.splat)
            fields.update((f"slot[{k}].steps[{d}]", step) for d, step in enumerate(operand.steps))
        return self.layout(max_dims, max_operands).pack(**fields)

    @classmethod
    def decode(cls, payload, max_dims, max_operands):
        """Split a ``MAX`` request payload into its block and the streamed data.

        Returns
        -------
        (MaxParameters, bytes)

        Raises
        ------
        ValueError
            If the payload is shorter than the block, or the block breaks a ``BAD_PARAMETER``
            rule of :data:`RULES` (a device answers ``BAD_LENGTH`` or ``BAD_PARAMETER``).
        """
        block = cls.layout(max_dims, max_operands)
        if len(payload) < block.size:
            raise ValueError(f"MAX payload of {len(payload)} bytes is shorter than its "
                             f"{block.size}-byte parameter block")
        fields = block.unpack(payload)
        capacities = Capacities.limits(lanes=1, max_dims=max_dims, max_operands=max_operands)
        refused = [problem for problem in problems(Command.MAX, fields, capacities)
                   if problem.status == Status.BAD_PARAMETER]
        if refused:
            raise ValueError(f"MAX parameter block out of range: "
                             f"{'; '.join(p.description for p in refused)}")
        operands = tuple(
            MaxOperand(fields[f"slot[{k}].base"], bool(fields[f"slot[{k}].splat"]),
                       tuple(fields[f"slot[{k}].steps[{d}]"] for d in range(max_dims)))
            for k in range(fields["operands"]))
        return (cls(fields["dtype"], fields["row_length"],
                    tuple(fields[f"counts[{d}]"] for d in range(max_dims)),
                    fields["streamed"], operands),
                bytes(payload[block.size:]))


# ---- What a device answers: the status rules, as data.
#
# Each data command's request is described by quantities derived from its fields -- products
# of fields (element or beat counts) and their sizes in bytes -- and by rules, predicates over
# the fields, the quantities and the device's capacities, each with the status it gives. The
# predicates use only comparisons, ``+``, ``&``, ``|`` and the two helpers of ``ops`` (``any``
# and ``mux``), so the same function is evaluated on Python integers by :func:`problems` (the
# host, the fake board, the tests' oracle) and on Amaranth values by the command engine, which
# thereby derives its checks from this table. A product that overflows in the engine saturates
# to a value above every bound a rule compares it with, so unbounded Python integers and the
# engine's saturating products give the same verdicts.


class Capacities:
    """The limits the status rules compare with: a view of what ``IDENTIFY`` reports (an
    :class:`Identity`), with the protocol's constants.

    Every attribute of the identity (``lanes``, ``replay_depth``, ``max_dims``,
    ``max_operands``, ``pool_channels``, the ``window_*`` capacities, ...) reads through.

    Parameters
    ----------
    identity : Identity
    max_count : int, optional
        :data:`MAX_COUNT`, which the protocol fixes; a broadcast unit built with another
        ``max_count`` (for experiments) is checked with its own.

    Attributes
    ----------
    max_payload : int
        :data:`MAX_PAYLOAD`.
    window_field_max, window_image_max : int
        :data:`WINDOW_FIELD_MAX`, :data:`WINDOW_IMAGE_MAX`.
    """

    max_payload = MAX_PAYLOAD
    window_field_max = WINDOW_FIELD_MAX
    window_image_max = WINDOW_IMAGE_MAX

    def __init__(self, identity, *, max_count=MAX_COUNT):
        self.identity = identity
        self.max_count = max_count

    def __getattr__(self, name):
        if name == "identity":        # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.identity, name)

    @classmethod
    def of(cls, identity):
        """The capacities of a device that reported ``identity``."""
        return cls(identity)

    @classmethod
    def limits(cls, *, lanes, replay_depth=0, max_dims=1, max_operands=1, pool_channels=0,
               max_count=MAX_COUNT, **window):
        """The capacities of a device known by its limits alone (what a plan was made for),
        every dtype supported; ``window`` takes the ``window_*`` capacities of
        :class:`Identity`."""
        identity = Identity(VERSION, lanes, frozenset(FORMATS), replay_depth, max_dims,
                            max_operands, pool_channels, clock_hz=0, frame_timeout_cycles=0,
                            **window)
        return cls(identity, max_count=max_count)

    @property
    def beat_bytes(self):
        return LANE_BYTES * self.lanes

    @property
    def window_bytes(self):
        """Bytes of a beat the windowed pooling unit takes (a ``MAX_POOL`` group's row)."""
        return LANE_BYTES * self.window_lanes

    @property
    def pool_capacity_bytes(self):
        """Bytes of one pixel the pooling unit holds (``pool_channels`` channels of
        :data:`LANE_BYTES`)."""
        return LANE_BYTES * self.pool_channels


@dataclass(frozen=True)
class Rule:
    """One reason to refuse a request: ``status`` when ``refuses(f, q, cap, ops)`` is true."""

    status: Status
    description: str
    refuses: object


@dataclass(frozen=True)
class CommandRules:
    """How a data command's request is checked and what it moves.

    Attributes
    ----------
    row : str
        The field that holds the row length in elements (each row of the request data starts
        a beat inside the device).
    products : tuple of (name, tuple of str)
        Quantities computed in this order as the product of fields, ``"row_beats"`` or earlier
        products (a single factor is an alias). The engine's bit-serial multiplier runs them in
        this order, so a product whose first factor is the one just computed chains.
    data, reply : str or None
        The products that count the elements of the request data and of the reply (``None``:
        none); ``data_bytes``/``reply_bytes`` are these times the element size.
    request_rows : str
        The product or field that counts the rows of the request data.
    rules : tuple of Rule
        In the order of their statuses' priority (:data:`STATUS_ORDER`).
    indices : str or None
        The product that counts the Indices in the reply (:data:`WINDOW_INDEX_BYTES` each,
        added to ``reply_bytes``).
    late : tuple of (Status, str)
        What the unit itself finds while the data streams, given as the reply's status (the
        reply's data is then unspecified): :func:`late_problems` decides it on Python
        integers; the engine takes it from the unit.
    """

    row: str
    products: tuple
    data: object
    reply: object
    request_rows: str
    rules: tuple
    indices: object = None
    late: tuple = ()


#: The order in which a data command's checks decide (the first status whose rule refuses).
#: Before them: ``BAD_COMMAND`` for an unknown code and ``BAD_LENGTH`` for a payload shorter
#: than the block, both decided from the header; after them, on the trailer, ``TIMEOUT`` and
#: ``CRC_ERROR``.
STATUS_ORDER = (Status.UNSUPPORTED_DTYPE, Status.BAD_PARAMETER, Status.TOO_LARGE,
                Status.BAD_LENGTH)


def _length_rule(data):
    return Rule(Status.BAD_LENGTH, f"the data after the block is not {data}",
                lambda f, q, cap, ops: q["data_bytes"] != q["payload_data"])


def _reply_rule():
    return Rule(Status.TOO_LARGE, "the reply is above MAX_PAYLOAD",
                lambda f, q, cap, ops: q["reply_bytes"] > cap.max_payload)


def _max_rules():
    dims = lambda cap: range(cap.max_dims)          # noqa: E731
    slots = lambda cap: range(cap.max_operands)     # noqa: E731
    return (
        Rule(Status.BAD_PARAMETER, "more replayed operands than max_operands",
             lambda f, q, cap, ops: f["operands"] > cap.max_operands),
        Rule(Status.BAD_PARAMETER, "a reserved byte is not 0",
             lambda f, q, cap, ops: f["reserved"] != 0),
        Rule(Status.BAD_PARAMETER, "several streamed operands with a replayed one",
             lambda f, q, cap, ops: (f["streamed"] > 1) & (f["operands"] != 0)),
        Rule(Status.BAD_PARAMETER, "no operand (none replayed and none streamed)",
             lambda f, q, cap, ops: (f["operands"] == 0) & (f["streamed"] == 0)),
        Rule(Status.BAD_PARAMETER, "a row length of 0",
             lambda f, q, cap, ops: f["row_length"] == 0),
        Rule(Status.BAD_PARAMETER, "an outer count of 0",
             lambda f, q, cap, ops: ops.any(f[f"counts[{d}]"] == 0 for d in dims(cap))),
        Rule(Status.BAD_PARAMETER, "an operand's splat flag is not 0 or 1",
             lambda f, q, cap, ops: ops.any((f["operands"] > k) & (f[f"slot[{k}].splat"] > 1)
                                            for k in slots(cap))),
        Rule(Status.TOO_LARGE, "an outer count above MAX_COUNT",
             lambda f, q, cap, ops: ops.any(f[f"counts[{d}]"] > cap.max_count
                                            for d in dims(cap))),
        Rule(Status.TOO_LARGE, "a row of more than MAX_COUNT beats",
             lambda f, q, cap, ops: q["row_beats"] > cap.max_count),
        Rule(Status.TOO_LARGE, "several streamed operands with a row of more than one beat",
             lambda f, q, cap, ops: (f["streamed"] > 1) & (q["row_beats"] > 1)),
        Rule(Status.TOO_LARGE, "an operand's base at or beyond the replay buffer's depth",
             lambda f, q, cap, ops: ops.any(
                 (f["operands"] > k) & (f[f"slot[{k}].base"] >= cap.replay_depth)
                 for k in slots(cap))),
        _reply_rule(),
        _length_rule("prod(counts) x streamed x row_length elements"),
    )


#: The data commands' checks (``IDENTIFY`` and ``COUNTERS`` take no parameters and no data: a
#: payload with them is ``BAD_LENGTH``).
RULES = {
    Command.REDUCE: CommandRules(
        row="run_length", products=(("data", ("runs", "run_length")), ("reply", ("runs",))),
        data="data", reply="reply", request_rows="runs",
        rules=(_reply_rule(), _length_rule("runs x run_length elements"))),
    Command.POOL_CHANNELS_LAST: CommandRules(
        row="channels",
        products=(("rows", ("images", "pixels")), ("data", ("rows", "channels")),
                  ("reply", ("images", "channels"))),
        data="data", reply="reply", request_rows="rows",
        rules=(
            Rule(Status.BAD_PARAMETER, "pixels or channels of 0",
                 lambda f, q, cap, ops: (f["pixels"] == 0) | (f["channels"] == 0)),
            Rule(Status.TOO_LARGE, "a pixel (channels x itemsize bytes) beyond the pooling "
                 "capacity", lambda f, q, cap, ops: q["row_bytes"] > cap.pool_capacity_bytes),
            _reply_rule(),
            _length_rule("images x pixels x channels elements"))),
    Command.LOAD: CommandRules(
        row="row_length",
        products=(("data", ("rows", "row_length")), ("beats", ("rows", "row_beats"))),
        data="data", reply=None, request_rows="rows",
        rules=(
            Rule(Status.BAD_PARAMETER, "a row length of 0",
                 lambda f, q, cap, ops: f["row_length"] == 0),
            Rule(Status.TOO_LARGE, "base + the rows' beats beyond the replay buffer's depth",
                 lambda f, q, cap, ops: f["base"] + q["beats"] > cap.replay_depth),
            _length_rule("rows x row_length elements"))),
}


def _window_extents(capacities):
    """The largest kernel extent of each ``MAX_POOL`` axis (entry 0 the outermost)."""
    return ((capacities.window_extent_outer,)
            + (capacities.window_extent,) * (WINDOW_RANK - 1))


def _max_pool_rules():
    axes = [window_fields(axis) for axis in range(WINDOW_RANK)]
    inner, outer = axes[-1], axes[0]
    span = [f"span[{axis}]" for axis in range(WINDOW_RANK)]   # kernel x dilation
    positive = ("size", "out", "kernel", "stride", "dilation")
    return CommandRules(
        row="group",
        products=(("image", tuple(a["size"] for a in axes)), ("rows", ("image", "groups")),
                  ("data", ("rows", "group")),
                  ("image_out", tuple(a["out"] for a in axes)),
                  ("reply", ("image_out", "groups", "group")),
                  ("reply_indices", ("reply", "indices")),
                  ("plane", (axes[1]["out"], axes[2]["out"])),
                  *((span[k], (a["kernel"], a["dilation"])) for k, a in enumerate(axes))),
        data="data", reply="reply", indices="reply_indices", request_rows="rows",
        rules=(
            Rule(Status.BAD_PARAMETER, "a reserved byte is not 0",
                 lambda f, q, cap, ops: f["reserved"] != 0),
            Rule(Status.BAD_PARAMETER, "an indices flag other than 0 or 1",
                 lambda f, q, cap, ops: f["indices"] > 1),
            Rule(Status.BAD_PARAMETER, "a group of 0 images",
                 lambda f, q, cap, ops: f["group"] == 0),
            Rule(Status.BAD_PARAMETER, "an axis's size, out, kernel, stride or dilation of 0",
                 lambda f, q, cap, ops: ops.any(f[a[name]] == 0 for a in axes
                                                for name in positive)),
            Rule(Status.BAD_PARAMETER, "a first window of padding only ((kernel - 1) x "
                 "dilation < pad)",
                 lambda f, q, cap, ops: ops.any(q[s] < f[a["pad"]] + f[a["dilation"]]
                                                for s, a in zip(span, axes))),
            Rule(Status.TOO_LARGE, "a group wider than the pooling unit's lanes (group x "
                 "itemsize above 8 x window_lanes bytes)",
                 lambda f, q, cap, ops: q["row_bytes"] > cap.window_bytes),
            Rule(Status.TOO_LARGE, "an axis field above WINDOW_FIELD_MAX",
                 lambda f, q, cap, ops: ops.any(f[name] > cap.window_field_max
                                                for a in axes for name in a.values())),
            Rule(Status.TOO_LARGE, "a kernel extent above window_extent (an axis but the "
                 "outermost) or window_extent_outer (the outermost)",
                 lambda f, q, cap, ops: ops.any(
                     q[s] + 1 > limit + f[a["dilation"]]
                     for s, a, limit in zip(span, axes, _window_extents(cap)))),
            Rule(Status.TOO_LARGE, "an innermost output length above window_columns with a "
                 "middle kernel extent above 1",
                 lambda f, q, cap, ops: (f[inner["out"]] > cap.window_columns)
                 & (q[span[1]] > f[axes[1]["dilation"]])),
            Rule(Status.TOO_LARGE, "an output plane above window_plane with an outermost "
                 "kernel extent above 1",
                 lambda f, q, cap, ops: (q["plane"] > cap.window_plane)
                 & (q[span[0]] > f[outer["dilation"]])),
            Rule(Status.TOO_LARGE, "an image of more than WINDOW_IMAGE_MAX elements",
                 lambda f, q, cap, ops: q["image"] > cap.window_image_max),
            _reply_rule(),
            _length_rule("groups x group x prod(size) elements")),
        late=((Status.BAD_PARAMETER, "a window of padding only (found by the unit while the "
                                     "data streams; the reply's data is unspecified)"),))


RULES[Command.MAX_POOL] = _max_pool_rules()


def _max_command_rules(max_dims):
    counts = tuple(f"counts[{d}]" for d in range(max_dims))
    return CommandRules(
        row="row_length",
        products=(("rows", counts), ("streamed_rows", ("rows", "streamed")),
                  ("data", ("streamed_rows", "row_length")), ("reply", ("rows", "row_length"))),
        data="data", reply="reply", request_rows="streamed_rows", rules=_max_rules())


def _check_rules(command, spec, block):
    """The table's own consistency: names resolve one way, statuses come in priority order."""
    products = [name for name, _ in spec.products]
    assert not set(products) & set(block.names), f"{command!r}: a product named like a field"
    for index, (name, factors) in enumerate(spec.products):
        for factor in factors[1:]:    # only a first factor may be an earlier product
            assert factor in block.names or factor == "row_beats", (command, name, factor)
        assert factors[0] in block.names or factors[0] in products[:index] \
            or factors[0] == "row_beats", (command, name)
    order = [STATUS_ORDER.index(rule.status) for rule in spec.rules]
    assert order == sorted(order), f"{command!r}: rules out of priority order"


def command_rules(command, max_dims=0):
    """The :class:`CommandRules` of a data command (``MAX``'s depend on ``max_dims``), or
    ``None`` for ``IDENTIFY``, ``COUNTERS`` and unknown codes."""
    if command == Command.MAX:
        return _max_command_rules(max_dims)
    return RULES.get(command)


#: The data commands, in code order.
DATA_COMMANDS = (Command.REDUCE, Command.POOL_CHANNELS_LAST, Command.LOAD, Command.MAX,
                 Command.MAX_POOL)

for _command in DATA_COMMANDS:
    _check_rules(_command, command_rules(_command, 2), parameter_block(_command, 2, 2))


class _PythonOps:
    any = staticmethod(lambda conditions: any(conditions))
    mux = staticmethod(lambda condition, a, b: a if condition else b)


@dataclass(frozen=True)
class Problem:
    """A rule a request breaks: its status and what it says."""

    status: Status
    description: str


def quantities(command, fields, capacities, itemsize, data_length=0):
    """The derived quantities of a data request, on Python integers (unbounded).

    ``row_bytes``, ``row_beats``, the products of :class:`CommandRules`, ``data_bytes``,
    ``reply_bytes`` and ``payload_data`` (``data_length``, the bytes after the block).
    """
    spec = command_rules(command, capacities.max_dims)
    q = {"payload_data": data_length}
    q["row_bytes"] = fields[spec.row] * itemsize
    q["row_beats"] = -(-q["row_bytes"] // capacities.beat_bytes)
    for name, factors in spec.products:
        value = 1
        for factor in factors:
            value *= q[factor] if factor in q else fields[factor]
        q[name] = value
    q["data_bytes"] = q[spec.data] * itemsize if spec.data else 0
    q["reply_bytes"] = q[spec.reply] * itemsize if spec.reply else 0
    if spec.indices:
        q["reply_bytes"] += q[spec.indices] * WINDOW_INDEX_BYTES
    return q


def takes(command, capacities):
    """Whether a device takes ``command`` at all: ``MAX_POOL`` only with the windowed pooling
    unit (``window_lanes`` above 0); without it the code is unknown (``BAD_COMMAND``), so a
    small core spends nothing on the command's block."""
    return command != Command.MAX_POOL or capacities.window_lanes > 0


def problems(command, fields, capacities, *, data_length=0, dtypes=None):
    """Every rule a request breaks, in priority order (empty: the device answers ``OK``).

    Parameters
    ----------
    command : int
    fields : dict
        ``{field name: value}`` of the parameter block (``ParameterBlock.unpack``); ignored for
        commands without one.
    capacities : Capacities or Identity
    data_length : int
        Bytes of the payload after the parameter block.
    dtypes : collection of int, optional
        The supported dtype codes (default: ``capacities.dtypes`` of an Identity, else all of
        :data:`~maxaccel.contract.dtypes.FORMATS`).
    """
    if isinstance(capacities, Identity):
        dtypes = capacities.dtypes if dtypes is None else dtypes
        capacities = Capacities.of(capacities)
    dtypes = {int(code) for code in FORMATS} if dtypes is None else set(dtypes)
    if command in (Command.IDENTIFY, Command.COUNTERS):
        return [Problem(Status.BAD_LENGTH, "the command takes no payload")] if data_length \
            else []
    spec = command_rules(command, capacities.max_dims)
    if spec is None or not takes(command, capacities):
        return [Problem(Status.BAD_COMMAND, f"unknown command code {command}")]
    if fields["dtype"] not in dtypes:
        return [Problem(Status.UNSUPPORTED_DTYPE, f"dtype code {fields['dtype']} is not one the "
                                                  f"device supports")]
    itemsize = format_of(fields["dtype"]).nbytes
    q = quantities(command, fields, capacities, itemsize, data_length)
    return [Problem(rule.status, rule.description) for rule in spec.rules
            if rule.refuses(fields, q, capacities, _PythonOps)]


def rules_markdown():
    """The status rules as the Markdown table ``docs/protocol.md`` shows (a test keeps the two
    equal): one row per data command, one column per status, in priority order."""
    statuses = STATUS_ORDER[1:]
    lines = ["| command | " + " | ".join(f"`{s.name}`" for s in statuses) + " |",
             "|---|" + "---|" * len(statuses)]
    for command in DATA_COMMANDS:
        spec = command_rules(command, 1)
        cells = ["; ".join(r.description for r in spec.rules if r.status == s) or "(none)"
                 for s in statuses]
        lines.append(f"| `{command.name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def late_problems(command, fields):
    """What the unit finds while an accepted request's data streams (:attr:`CommandRules.late`):
    for ``MAX_POOL``, a window of padding only."""
    spec = command_rules(command)
    if spec is None or not spec.late:
        return []
    config = [{name: fields[field] for name, field in window_fields(axis).items()}
              for axis in range(WINDOW_RANK)]
    if window_geometry(config).has_empty_windows():
        return [Problem(*spec.late[0])]
    return []


def verdict(command, fields, identity, *, data_length=0):
    """The status a device with ``identity`` answers for an intact request frame.

    The single statement of the status rules and their order for the host, the fake board and
    the tests; the command engine derives its checks from the same :data:`RULES`, and takes
    the late statuses (:func:`late_problems`) from its units.
    """
    found = (problems(command, fields, identity, data_length=data_length)
             or late_problems(command, fields))
    return found[0].status if found else Status.OK


def request_verdict(command, payload, identity):
    """:func:`verdict` of a whole request payload: its block parsed, a short one refused."""
    block = parameter_block(command, identity.max_dims, identity.max_operands)
    if not takes(command, identity):
        return Status.BAD_COMMAND
    if command_rules(command, identity.max_dims) is not None and len(payload) < block.size:
        return Status.BAD_LENGTH
    fields = block.unpack(payload) if block.size else {}
    return verdict(command, fields, identity, data_length=len(payload) - block.size)


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
