"""The parameter blocks of the data commands: their fields, the ``MAX`` block that depends on
the device, and the ``MAX_POOL`` block's window fields (``docs/protocol.md``, "Commands")."""

import struct
from dataclasses import dataclass

from .frames import HEADER_SIZE, PAYLOAD_ALIGN, Command, Status
from .pooling import WINDOW_FIELDS, WINDOW_RANK

__all__ = ["Field", "ParameterBlock", "parameter_block", "PARAMETERS", "MAX_COUNT",
           "MAX_STREAMED", "LANE_BYTES", "MaxOperand", "MaxParameters", "window_fields",
           "WINDOW_FIELD_MAX", "WINDOW_INDEX_BYTES", "WINDOW_IMAGE_MAX"]


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
        """The block's bytes from values in field order, or by name; missing fields (names not
        given, or trailing fields after the values given: a flag added to a block, such as a
        ``minimum``) are 0."""
        if named:
            unknown = set(named) - set(self.names)
            if values or unknown:
                raise TypeError(f"pack() takes values in order or by name; unknown: {unknown}")
            values = [named.get(name, 0) for name in self.names]
        if len(values) > len(self.names):
            raise TypeError(f"pack() takes at most {len(self.names)} values, got {len(values)}")
        return self.struct.pack(*values, *[0] * (len(self.names) - len(values)))

    def unpack(self, payload):
        """``{name: value}`` of the block at the start of ``payload`` (which may be longer)."""
        return dict(zip(self.names, self.struct.unpack_from(payload)))


def _max_block(max_dims, max_operands):
    return ParameterBlock(
        [("dtype", 1), ("operands", 1), ("streamed", 1), ("minimum", 1), ("row_length", 4)]
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


#: Largest value of a ``MAX_POOL`` axis field a device may hold (the pooling unit's 16-bit
#: configuration): ``IDENTIFY``'s ``window_field_max`` is at most this.
WINDOW_FIELD_MAX = (1 << 16) - 1
#: Bytes of one index in a ``MAX_POOL`` reply and of one offset in a ``REDUCE`` reply with
#: ``arg`` (u32), and the largest image an index can number.
WINDOW_INDEX_BYTES = 4
WINDOW_IMAGE_MAX = (1 << 8 * WINDOW_INDEX_BYTES) - 1

#: Parameter blocks of the commands whose block does not depend on the device (the ``MAX``
#: block does: :func:`parameter_block`).
PARAMETERS = {
    # REDUCE's ``minimum`` (0: each run's maximum, 1: its minimum) and ``arg`` (1: each run's
    # position, not its extreme) sit in bytes the block's alignment padding would fill
    # otherwise: they do not change the block's size, and a maximum's request has zeros there.
    Command.REDUCE: ParameterBlock([("dtype", 1), ("runs", 4), ("run_length", 4),
                                    ("minimum", 1), ("arg", 1)]),
    # POOL_CHANNELS_LAST's ``minimum`` (the per-channel minima) likewise, protocol 7.
    Command.POOL_CHANNELS_LAST: ParameterBlock(
        [("dtype", 1), ("images", 4), ("pixels", 4), ("channels", 4), ("minimum", 1)]),
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
    ``len(counts)`` outer counters (outermost first, C order). Each output element is the max
    (with ``minimum``, the min: ONNX ``Min``, IEEE 754-2019 ``minimum``) of
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
        3             1     minimum: 0, each output element the maximum; 1, the minimum
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
    ``UNSUPPORTED_DTYPE`` for a dtype it lacks, ``BAD_PARAMETER`` for ``M > K``, a minimum flag
    other than 0/1, no operand,
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
    minimum : bool
        The pass computes the element-wise minimum instead of the maximum.
    """

    dtype: int
    row_length: int
    counts: tuple
    streamed: int
    operands: tuple = ()
    minimum: bool = False

    @staticmethod
    def layout(max_dims, max_operands):
        """The block as a :class:`ParameterBlock` (:func:`parameter_block` of ``MAX``)."""
        return _max_block(max_dims, max_operands)

    @classmethod
    def size(cls, max_dims, max_operands):
        """Bytes of the block for a device with these capacities."""
        return cls.layout(max_dims, max_operands).size

    @classmethod
    def from_plan(cls, plan, dtype, minimum=False):
        """The block for a fitting :class:`maxaccel.host.plan.BroadcastPlan` (a Min's with
        ``minimum``)."""
        return cls(int(dtype), plan.row_elements, tuple(plan.counts),
                   plan.streamed is not None,
                   tuple(MaxOperand(o.base, o.splat, tuple(o.steps)) for o in plan.replayed),
                   bool(minimum))

    def fields(self, max_dims, max_operands):
        """The block's fields by name for a device with ``max_dims`` and ``max_operands`` (every
        field of :meth:`layout`; the unused slots' are 0): what :meth:`encode` packs, and what
        the status rules (``problems``) take.

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
        fields = dict.fromkeys(self.layout(max_dims, max_operands).names, 0)
        fields.update({"dtype": self.dtype, "operands": len(self.operands),
                       "streamed": int(self.streamed), "row_length": self.row_length,
                       "minimum": int(self.minimum)})
        fields.update((f"counts[{d}]", count) for d, count in enumerate(self.counts))
        for k, operand in enumerate(self.operands):
            if len(operand.steps) != max_dims:
                raise ValueError(f"MAX operand with {len(operand.steps)} steps for a device with "
                                 f"max_dims={max_dims}")
            fields[f"slot[{k}].base"] = operand.base
            fields[f"slot[{k}].splat"] = int(operand.splat)
            fields.update((f"slot[{k}].steps[{d}]", step) for d, step in enumerate(operand.steps))
        return fields

    def encode(self, max_dims, max_operands):
        """The block's bytes for a device with ``max_dims`` and ``max_operands`` (the
        :meth:`fields`, packed; raises as it does)."""
        return self.layout(max_dims, max_operands).pack(**self.fields(max_dims, max_operands))

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
        from .rules import Capacities, problems   # the rules are made of these blocks
        block = cls.layout(max_dims, max_operands)
        if len(payload) < block.size:
            raise ValueError(f"MAX payload of {len(payload)} bytes is shorter than its "
                             f"{block.size}-byte parameter block")
        fields = block.unpack(payload)
        # A device that takes MAX at all: one with a replay buffer (``takes``).
        capacities = Capacities.limits(lanes=1, replay_depth=1, max_dims=max_dims,
                                       max_operands=max_operands)
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
                    fields["streamed"], operands, bool(fields["minimum"])),
                bytes(payload[block.size:]))
