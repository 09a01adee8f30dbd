"""Planning element-wise Max with broadcasting for the device's ``BroadcastMax`` unit.

:func:`plan_broadcast` turns the operand shapes of a Max into what the unit needs (see
``docs/architecture.md``, "Element-wise Max with broadcasting"):

1. The output shape, by numpy's broadcasting rules.
2. Coalesced dimensions: output axes of size 1 are dropped, and adjacent axes are merged when
   every operand is either full on both or broadcast on both. The last coalesced dimension is
   the *row* (sent as beat-aligned beats), the others are the *outer* counts.
3. The streamed operand (the first operand with the full output shape, if any: it never needs
   on-chip memory) and the replayed ones, with their place in the replay buffer, their strides
   in beats along each outer dimension (0 where broadcast) and whether they are *splat*
   (broadcast along the row: one stored beat per row, element 0 replicated on the device).
4. Whether it fits the unit's capacity; if not, :class:`CapacityError` lists every problem
   with sizes, so the host driver can tile (or, with ``check=False``, the plan carries
   ``problems`` for the driver to inspect).

:func:`pack_operand` lays an operand out row-aligned for ``LOAD`` or for the streamed input, and
:func:`unpack_output` turns the unit's output beats back into the output array. Both are
vectorised numpy. This module never imports amaranth.
"""

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["BroadcastError", "CapacityError", "OperandPlan", "BroadcastPlan",
           "broadcast_shape", "plan_broadcast", "pack_operand", "unpack_output",
           "plan_channels_last"]

LANE_BYTES = 8


class BroadcastError(ValueError):
    """The operand shapes do not broadcast together."""


class CapacityError(ValueError):
    """A plan exceeds the unit's capacity.

    Attributes
    ----------
    problems : list of str
        One sentence per exceeded limit, with the sizes involved.
    plan : BroadcastPlan
        The plan that does not fit, for a driver that tiles.
    """

    def __init__(self, problems, plan=None):
        self.problems = list(problems)
        self.plan = plan
        super().__init__("; ".join(self.problems))


def _shape_text(shape):
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def broadcast_shape(shapes):
    """The numpy broadcast of ``shapes``.

    Raises
    ------
    BroadcastError
        Naming the operands and the axis whose sizes disagree.
    """
    shapes = [tuple(int(s) for s in shape) for shape in shapes]
    if not shapes:
        raise BroadcastError("Max needs at least one operand")
    for index, shape in enumerate(shapes):
        if any(s < 0 for s in shape):
            raise BroadcastError(f"operand {index} has a negative size: {_shape_text(shape)}")
    rank = max(len(shape) for shape in shapes)
    output = []
    for axis in range(-rank, 0):
        sizes = {i: shape[axis] for i, shape in enumerate(shapes) if len(shape) >= -axis}
        other = {s for s in sizes.values() if s != 1}
        if len(other) > 1:
            listing = ", ".join(f"operand {i} {_shape_text(shapes[i])}" for i in sizes
                                if sizes[i] != 1)
            raise BroadcastError(
                f"shapes do not broadcast: axis {axis} has sizes "
                f"{', '.join(str(s) for s in sorted(other))} ({listing})")
        output.append(other.pop() if other else 1)
    return tuple(output)


@dataclass(frozen=True)
class OperandPlan:
    """How one operand reaches the unit.

    Attributes
    ----------
    index : int
        Position of the operand in the caller's list.
    shape : tuple of int
        The operand's shape.
    streamed : bool
        Sent on the ``streamed`` input (full output shape) instead of being replayed.
    slot : int or None
        Replayed operands: position k in ``config.operand``.
    groups : tuple of int
        The operand's size along each coalesced dimension (the output's count, or 1 where it
        is broadcast); ``array.reshape(groups)`` is its stored order.
    splat : bool
        Broadcast along the row: one stored beat per row, element 0 replicated.
    row_beats : int
        Beats each stored row takes (1 for a splat operand).
    beats : int
        Beats the operand takes in the buffer or on the stream.
    base : int or None
        Replayed operands: buffer address of its first beat.
    strides : tuple of int
        Replayed operands: beats between consecutive indices of each outer dimension,
        outermost first, padded to ``max_dims`` (0 along broadcast and unused dimensions).
    steps : tuple of int
        Replayed operands: the row-address change when outer counter d advances and those
        inside it wrap, ``strides[d] - sum((counts[e] - 1) * strides[e] for e > d)``; may be
        negative (the device takes it modulo ``2**addr_bits``).
    """

    index: int
    shape: tuple
    streamed: bool
    groups: tuple
    splat: bool
    row_beats: int
    beats: int
    slot: int = None
    base: int = None
    strides: tuple = ()
    steps: tuple = ()


@dataclass(frozen=True)
class BroadcastPlan:
    """A Max of broadcast operands, planned for one ``BroadcastMax`` pass.

    Attributes
    ----------
    output_shape : tuple of int
    itemsize : int
        Bytes per element.
    lanes, depth, max_dims, max_operands, max_count : int
        The unit's limits the plan was made for.
    dims : tuple of int
        Coalesced output dimensions, outermost first; the last is the row (``(1,)`` for a
        scalar output, ``()`` for an empty one).
    counts : tuple of int
        Outer counts padded at the front with 1 to ``max_dims`` (unpadded when there are too
        many dims).
    row_elements, row_beats, last_nbytes : int
        Output row length in elements and in beats, and the valid bytes of its last beat.
    operands : tuple of OperandPlan
        In the caller's order.
    output_beats : int
        Beats the unit emits (and the streamed operand sends).
    memory_beats : int
        Buffer beats the replayed operands take.
    problems : tuple of str
        Exceeded limits; empty when the plan fits.
    """

    output_shape: tuple
    itemsize: int
    lanes: int
    depth: int
    max_dims: int
    max_operands: int
    max_count: int
    dims: tuple
    counts: tuple
    row_elements: int
    row_beats: int
    last_nbytes: int
    operands: tuple
    output_beats: int
    memory_beats: int
    problems: tuple = field(default=())

    @property
    def empty(self):
        """The output has no element: nothing to send to the device."""
        return math.prod(self.output_shape) == 0

    @property
    def fits(self):
        return not self.problems

    @property
    def beat_bytes(self):
        return LANE_BYTES * self.lanes

    @property
    def addr_bits(self):
        """Width of a buffer address, as the unit has it."""
        return (self.depth - 1).bit_length()

    @property
    def streamed(self):
        """The streamed :class:`OperandPlan`, or None."""
        return next((o for o in self.operands if o.streamed), None)

    @property
    def replayed(self):
        """The replayed :class:`OperandPlan` s, in slot order (none for an empty output)."""
        return tuple(o for o in self.operands if o.slot is not None)

    @property
    def loads(self):
        """``(operand index, base, beats)`` of each ``LOAD`` command the pass needs."""
        return [(o.index, o.base, o.beats) for o in self.replayed]

    @property
    def cycles(self):
        """Cycles of the ``RUN`` pass without stalls, from accepting the command to the
        last output beat (one replayed beat is read per cycle; the first output beat is valid
        12 cycles after the command is accepted, ``BroadcastMax`` latency)."""
        return 12 + self.output_beats * max(len(self.replayed), 1)

    def config(self, dtype):
        """The unit's ``config`` value for this pass, as nested dicts and lists of ints.

        Parameters
        ----------
        dtype : int
            ONNX element type code.

        Raises
        ------
        CapacityError
            If the plan does not fit.
        ValueError
            If the output is empty (there is nothing to run).
        """
        if not self.fits:
            raise CapacityError(self.problems, self)
        if self.empty:
            raise ValueError("the output is empty: there is nothing to run")
        modulus = 1 << self.addr_bits
        operand = [{"base": 0, "splat": 0, "steps": [0] * self.max_dims}
                   for _ in range(self.max_operands)]
        for o in self.replayed:
            operand[o.slot] = {"base": o.base, "splat": int(o.splat),
                               "steps": [s % modulus for s in o.steps]}
        return {
            "dtype": int(dtype),
            "operands": len(self.replayed),
            "streamed": int(self.streamed is not None),
            "row_beats": self.row_beats,
            "last_nbytes": self.last_nbytes,
            "counts": list(self.counts),
            "operand": operand,
        }


def plan_broadcast(shapes, itemsize, lanes, depth, max_dims, max_operands, max_count=65535, *,
                   check=True):
    """Plan the Max of operands of ``shapes`` for a ``BroadcastMax`` unit.

    Parameters
    ----------
    shapes : sequence of tuple of int
        Operand shapes, in the caller's order.
    itemsize : int
        Bytes per element (1, 2, 4 or 8).
    lanes, depth, max_dims, max_operands, max_count : int
        The unit's limits (``BroadcastMax.limits``).
    check : bool
        Raise :class:`CapacityError` if the plan does not fit (default); otherwise return it
        with ``problems`` set.

    Returns
    -------
    BroadcastPlan

    Raises
    ------
    BroadcastError
        The shapes do not broadcast.
    CapacityError
        With ``check``, when the plan exceeds a limit; every problem is listed.
    """
    if itemsize not in (1, 2, 4, 8):
        raise ValueError(f"itemsize must be 1, 2, 4 or 8 bytes, not {itemsize!r}")
    shapes = [tuple(int(s) for s in shape) for shape in shapes]
    output_shape = broadcast_shape(shapes)
    beat_bytes = LANE_BYTES * lanes
    limits = dict(lanes=lanes, depth=depth, max_dims=max_dims, max_operands=max_operands,
                  max_count=max_count)

    if math.prod(output_shape) == 0:
        operands = tuple(OperandPlan(i, s, False, (), False, 0, 0) for i, s in enumerate(shapes))
        return BroadcastPlan(output_shape, itemsize, **limits, dims=(), counts=(),
                             row_elements=0, row_beats=0, last_nbytes=0, operands=operands,
                             output_beats=0, memory_beats=0)

    # Coalesce: drop axes of output size 1, merge neighbours with the same full/broadcast
    # pattern over all operands.
    rank = len(output_shape)
    aligned = [(1,) * (rank - len(s)) + s for s in shapes]
    dims, patterns = [], []
    for axis, size in enumerate(output_shape):
        if size == 1:
            continue
        pattern = tuple(a[axis] != 1 for a in aligned)
        if patterns and patterns[-1] == pattern:
            dims[-1] *= size
        else:
            dims.append(size)
            patterns.append(pattern)
    if not dims:  # a scalar output: one row of one element, every operand full
        dims, patterns = [1], [(True,) * len(shapes)]

    row_elements = dims[-1]
    row_bytes = row_elements * itemsize
    row_beats = -(-row_bytes // beat_bytes)
    last_nbytes = row_bytes - (row_beats - 1) * beat_bytes
    outer = dims[:-1]
    problems = []
    if len(outer) > max_dims:
        problems.append(
            f"after coalescing, the output {_shape_text(output_shape)} has {len(outer)} outer "
            f"dimensions {_shape_text(tuple(outer))} but the unit walks at most {max_dims}")
        counts = tuple(outer)
    else:
        counts = (1,) * (max_dims - len(outer)) + tuple(outer)
    too_large = [c for c in outer if c > max_count]
    if too_large:
        problems.append(f"outer dimension(s) {', '.join(map(str, too_large))} exceed the unit's "
                        f"count limit {max_count}")
    if row_beats > max_count:
        problems.append(f"a row of {row_elements} elements takes {row_beats} beats, more than "
                        f"the unit's count limit {max_count}")

    streamed_index = next((i for i, p in enumerate(zip(*patterns)) if all(p)), None)
    operands, slot, base = [], 0, 0
    for i, shape in enumerate(shapes):
        pattern = [p[i] for p in patterns]
        groups = tuple(d if full else 1 for d, full in zip(dims, pattern))
        splat = not pattern[-1]
        stored_row_beats = 1 if splat else row_beats
        if i == streamed_index:
            operands.append(OperandPlan(i, shape, True, groups, False, row_beats,
                                        math.prod(outer) * row_beats))
            continue
        strides = []
        stride = stored_row_beats
        for count, full in zip(reversed(outer), reversed(pattern[:-1])):
            strides.insert(0, stride if full else 0)
            stride *= count if full else 1
        strides = [0] * (len(counts) - len(strides)) + strides
        steps = [strides[d] - sum((counts[e] - 1) * strides[e] for e in range(d + 1, len(counts)))
                 for d in range(len(counts))]
        operands.append(OperandPlan(i, shape, False, groups, splat, stored_row_beats, stride,
                                    slot=slot, base=base, strides=tuple(strides),
                                    steps=tuple(steps)))
        slot += 1
        base += stride

    replayed = [o for o in operands if not o.streamed]
    if len(replayed) > max_operands:
        problems.append(f"{len(replayed)} operands must be replayed from memory (only one, of "
                        f"the full output shape, can stream) but the unit folds at most "
                        f"{max_operands} per pass")
    if base > depth:
        sizes = ", ".join(f"operand {o.index} {_shape_text(o.shape)}: {o.beats} beats"
                          for o in replayed)
        problems.append(f"the replayed operands need {base} beats of {beat_bytes} bytes "
                        f"({sizes}) but the buffer holds {depth}")

    plan = BroadcastPlan(output_shape, itemsize, **limits, dims=tuple(dims), counts=counts,
                         row_elements=row_elements, row_beats=row_beats,
                         last_nbytes=last_nbytes, operands=tuple(operands),
                         output_beats=math.prod(outer) * row_beats, memory_beats=base,
                         problems=tuple(problems))
    if check and problems:
        raise CapacityError(problems, plan)
    return plan


def plan_channels_last(shape, axes):
    """``(images, pixels, channels)`` when reducing ``axes`` of a C-order tensor of ``shape`` is
    a channels-last pooling, else None.

    It is one when the reduced axes of size > 1 are one block of adjacent axes with kept axes
    of size > 1 after it: in memory the tensor is then ``images`` (the axes before the block) of
    ``pixels`` (the block) rows of ``channels`` (the axes after) elements, the layout
    ``POOL_CHANNELS_LAST`` takes, and the result (``images x channels``) is already in the
    output's order. Any other reduction is contiguous runs once the reduced axes are moved
    innermost (``REDUCE``). An empty tensor is never a pooling (nothing to send).
    """
    shape = tuple(int(n) for n in shape)
    axes = {a % len(shape) for a in axes} if shape else set()
    if math.prod(shape) == 0:
        return None
    significant = [(n, a in axes) for a, n in enumerate(shape) if n > 1]
    reduced = [k for k, (_, is_reduced) in enumerate(significant) if is_reduced]
    if not reduced or reduced[-1] - reduced[0] + 1 != len(reduced) \
            or reduced[-1] == len(significant) - 1:
        return None
    first, last = reduced[0], reduced[-1] + 1
    sizes = [n for n, _ in significant]
    return math.prod(sizes[:first]), math.prod(sizes[first:last]), math.prod(sizes[last:])


def _little_endian(array):
    array = np.asarray(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return np.asarray(array, order="C")  # not ascontiguousarray: it makes rank 0 rank 1


def pack_operand(plan, index, array):
    """Operand ``index`` laid out row-aligned, as the unit stores or streams it.

    Parameters
    ----------
    plan : BroadcastPlan
    index : int
        Position of the operand in the caller's list.
    array : numpy.ndarray
        The operand, of the planned shape and itemsize.

    Returns
    -------
    numpy.ndarray
        ``uint8`` of shape ``(beats, 8 * lanes)``: beat i is the i-th ``LOAD`` (or ``streamed``)
        beat, lane j in bytes ``8*j .. 8*j+7``; padding bytes are zero. A splat operand's beat
        (one per row) holds the row's element repeated across the whole beat.
    """
    operand = plan.operands[index]
    array = _little_endian(array)
    if array.shape != operand.shape:
        raise ValueError(f"operand {index} has shape {_shape_text(array.shape)}, "
                         f"the plan expects {_shape_text(operand.shape)}")
    if array.dtype.itemsize != plan.itemsize:
        raise ValueError(f"operand {index} has {array.dtype.itemsize}-byte elements, "
                         f"the plan expects {plan.itemsize}")
    if plan.empty:
        return np.zeros((0, plan.beat_bytes), np.uint8)
    row_length = operand.groups[-1]
    rows = array.reshape(-1, row_length).view(np.uint8)
    if operand.splat:
        # The unit replays the stored beat for every beat of the row as it is: the element
        # fills it.
        return np.tile(rows, plan.beat_bytes // plan.itemsize)
    padded = np.zeros((rows.shape[0], operand.row_beats * plan.beat_bytes), np.uint8)
    padded[:, :rows.shape[1]] = rows
    return padded.reshape(-1, plan.beat_bytes)


def unpack_output(plan, beats, dtype):
    """The output array from the unit's output beats.

    Parameters
    ----------
    plan : BroadcastPlan
    beats : numpy.ndarray or bytes
        ``plan.output_beats`` beats of ``8 * lanes`` bytes, in order (any shape of ``uint8``).
    dtype : numpy.dtype
        Element type of the output.

    Returns
    -------
    numpy.ndarray
        Of ``plan.output_shape``.
    """
    dtype = np.dtype(dtype)
    if dtype.itemsize != plan.itemsize:
        raise ValueError(f"{dtype} has {dtype.itemsize}-byte elements, the plan expects "
                         f"{plan.itemsize}")
    beats = np.frombuffer(beats, np.uint8) if isinstance(beats, (bytes, bytearray)) else beats
    beats = np.asarray(beats, np.uint8).reshape(-1)
    if beats.size != plan.output_beats * plan.beat_bytes:
        raise ValueError(f"expected {plan.output_beats} beats of {plan.beat_bytes} bytes, "
                         f"got {beats.size} bytes")
    if plan.empty:
        return np.zeros(plan.output_shape, dtype)
    rows = beats.reshape(-1, plan.row_beats * plan.beat_bytes)
    elements = np.ascontiguousarray(rows[:, :plan.row_elements * plan.itemsize])
    little = dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype
    return elements.view(little).reshape(plan.output_shape).astype(dtype, copy=False)
