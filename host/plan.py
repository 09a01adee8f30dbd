"""Planning element-wise Max for the device's ``BroadcastMax`` unit: passes and their tiles.

The words, used with these meanings only (in this module, ``host/max_passes.py`` and the wire
contract's ``MaxParameters``):

operand
    One input of the Max, in the caller's order (:attr:`OperandPlan.index`).
pass
    One ``MAX`` request: the unit walks the output once, row by row.
streamed operand
    An operand sent in the ``MAX`` request's own data, one element per output element, so it
    has the output's shape. A broadcast pass streams at most one
    (:attr:`BroadcastPlan.streamed`); a *fold* of same-shape operands streams them all,
    interleaved row by row (the block's ``streamed`` field counts them: :func:`plan_fold`).
replayed operand
    An operand written into the replay buffer by ``LOAD`` requests before the pass and read
    back (replayed) for every output row it broadcasts over (:attr:`BroadcastPlan.replayed`).
slot
    A replayed operand's position among the pass's replayed operands: the block's
    ``slot[k]`` fields, the unit's ``config.operand[k]`` (:attr:`OperandPlan.slot`).
splat
    A replayed operand broadcast along the row: one stored beat per row, its element 0
    replicated by the device.
tile
    A piece of the output along one axis that is a pass (or tiles) of its own, when the whole
    output does not fit one pass (:class:`OutputTiles`).

:func:`plan_broadcast` turns the operand shapes of a Max into what the unit needs (see
``docs/architecture.md``, "Element-wise Max with broadcasting"):

1. The output shape, by numpy's broadcasting rules.
2. Coalesced dimensions: output axes of size 1 are dropped, and adjacent axes are merged when
   every operand is either full on both or broadcast on both. The last coalesced dimension is
   the *row* (sent as beat-aligned beats), the others are the *outer* counts.
3. The streamed operand (the first operand with the full output shape, if any: it never needs
   on-chip memory) and the replayed ones, with their slots and places in the replay buffer,
   their strides in beats along each outer dimension (0 where broadcast) and whether they are
   splat.
4. Whether it fits the unit's capacity, by the wire contract's own status rules; if not,
   :class:`CapacityError` lists every problem with sizes (or, with ``check=False``, the plan
   carries ``problems``).

:func:`plan_max_pass` is what the driver asks: the pass of a Max on a device, or the
:class:`OutputTiles` to cut its output into when it does not fit (buffer, outer dimensions,
counts, a frame). The unit-level views of a plan that only the gateware tests need (the unit's
``config``, the beats it stores and emits, its cycles) are in the tests' ``broadcast_model.py``.
This module never imports amaranth.
"""

import math
from dataclasses import dataclass, field, replace

import numpy as np


from maxaccel.contract.dtypes import DType
from maxaccel.contract import wire
from maxaccel.contract.wire import LANE_BYTES, MAX_COUNT, Capacities, Command, MaxParameters

__all__ = ["BroadcastError", "CapacityError", "OperandPlan", "BroadcastPlan", "OutputTiles",
           "broadcast_shape", "plan_broadcast", "plan_max_pass", "plan_channels_last",
           "FoldPass", "plan_fold"]


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
        The streamed operand (sent with the ``MAX`` request) rather than a replayed one.
    slot : int or None
        Replayed operands: the slot k (the block's ``slot[k]``).
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
    def limits(self):
        """The unit's limits the plan was made for, as keyword arguments of
        :func:`plan_broadcast`."""
        return dict(lanes=self.lanes, depth=self.depth, max_dims=self.max_dims,
                    max_operands=self.max_operands, max_count=self.max_count)

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


def plan_broadcast(shapes, itemsize, lanes, depth, max_dims, max_operands,
                   max_count=MAX_COUNT, *, check=True):
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

    dims, patterns = _coalesced(shapes, output_shape)
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

    operands, base = _operand_plans(shapes, dims, patterns, counts, row_beats)
    replayed = [o for o in operands if not o.streamed]
    if len(replayed) > max_operands:
        problems.append(f"{len(replayed)} operands must be replayed from memory (only one, of "
                        f"the full output shape, can stream) but the unit folds at most "
                        f"{max_operands} per pass")

    plan = BroadcastPlan(output_shape, itemsize, **limits, dims=tuple(dims), counts=counts,
                         row_elements=row_elements, row_beats=row_beats,
                         last_nbytes=last_nbytes, operands=tuple(operands),
                         output_beats=math.prod(outer) * row_beats, memory_beats=base)
    problems += _request_problems(plan, encodable=not problems)
    plan = replace(plan, problems=tuple(problems))
    if check and problems:
        raise CapacityError(problems, plan)
    return plan


def _coalesced(shapes, output_shape):
    """``(dims, patterns)`` of the output: axes of size 1 dropped, neighbours with the same
    full/broadcast pattern over all operands merged; ``patterns[d][i]`` says whether operand
    ``i`` is full along ``dims[d]``."""
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
    return dims, patterns


def _operand_plans(shapes, dims, patterns, counts, row_beats):
    """``(operands, memory beats)``: each operand's :class:`OperandPlan` (the first of the full
    output shape streams, the others are replayed from memory, one after another) and the
    beats the replayed ones take."""
    outer = dims[:-1]
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
    return operands, base


#: A dtype code of each element size, for asking the status rules about a plan's requests (the
#: rules depend on the size only).
_DTYPE_OF_SIZE = {1: DType.UINT8, 2: DType.UINT16, 4: DType.UINT32, 8: DType.UINT64}


def _request_problems(plan, encodable):
    """Why the device would refuse the requests of ``plan`` (its ``LOAD`` s, then its ``MAX``
    if the pass can be encoded at all): the wire contract's status rules, each with the
    plan's sizes. The rules are the device's own (:func:`maxaccel.contract.wire.problems`), so
    a plan fits exactly when the device accepts what it sends."""
    capacities = Capacities.limits(lanes=plan.lanes, replay_depth=plan.depth,
                                   max_dims=plan.max_dims, max_operands=plan.max_operands,
                                   max_count=plan.max_count)
    dtype = _DTYPE_OF_SIZE[plan.itemsize]
    found = []
    sizes = ", ".join(f"operand {o.index} {_shape_text(o.shape)}: {o.beats} beats"
                      for o in plan.replayed)
    for o in plan.replayed:
        rows, row_length = math.prod(o.groups[:-1]), o.groups[-1]
        fields = {"dtype": dtype, "base": o.base, "rows": rows, "row_length": row_length}
        for problem in wire.problems(Command.LOAD, fields, capacities,
                                     data_length=rows * row_length * plan.itemsize):
            found.append(f"{problem.description}: the replayed operands need "
                         f"{plan.memory_beats} beats of {plan.beat_bytes} bytes ({sizes}) but "
                         f"the buffer holds {plan.depth}")
            break
        if found:
            break
    if encodable:
        fields = MaxParameters.from_plan(plan, dtype).fields(plan.max_dims, plan.max_operands)
        streamed_bytes = math.prod(plan.output_shape) * plan.itemsize if plan.streamed else 0
        for problem in wire.problems(Command.MAX, fields, capacities,
                                     data_length=streamed_bytes):
            found.append(f"{problem.description}: the MAX pass over "
                         f"{_shape_text(plan.output_shape)} has outer counts "
                         f"{_shape_text(plan.dims[:-1])} and rows of "
                         f"{plan.row_elements} elements in {plan.row_beats} beats; the unit's "
                         f"count limit is {plan.max_count}")
    return found


@dataclass(frozen=True)
class OutputTiles:
    """A Max whose output does not fit one pass, cut along output axis ``axis`` into tiles of
    ``size`` (the last one shorter), each planned again (:func:`plan_max_pass`)."""

    axis: int
    size: int


def plan_max_pass(shapes, itemsize, identity, max_frame_bytes):
    """The pass of a Max of operands of ``shapes`` (aligned to the output's rank) on a device,
    or the tiles to cut its output into.

    Parameters
    ----------
    shapes : sequence of tuple of int
        One per operand, each of the output's rank.
    itemsize : int
    identity : Identity
        The device's ``IDENTIFY`` (its broadcast unit's limits).
    max_frame_bytes : int
        Largest reply payload: the pass's output must fit one.

    Returns
    -------
    BroadcastPlan or OutputTiles
        The plan when it fits the unit and the output a frame.
    """
    plan = plan_broadcast(shapes, itemsize, identity.lanes, identity.replay_depth,
                          identity.max_dims, identity.max_operands, MAX_COUNT, check=False)
    if plan.fits and math.prod(plan.output_shape) * itemsize <= max_frame_bytes:
        return plan
    return OutputTiles(*_tiling(plan, shapes, max_frame_bytes))


def _tiling(plan, shapes, max_frame_bytes):
    """``(axis, size)``: how to tile the output of ``plan`` (operands of ``shapes``), a pass
    that does not fit."""
    shape, depth = plan.output_shape, plan.depth
    if plan.streamed is None and len(plan.replayed) > plan.max_operands:
        # No operand has the full shape: tile until the largest one has.
        largest = max(shapes, key=math.prod)
        for axis, (n, m) in enumerate(zip(shape, largest)):
            if n > 1 and m == 1:
                return axis, 1
    spanned = [a for a, n in enumerate(shape) if n > 1 and any(
        shapes[o.index][a] > 1 for o in plan.replayed)]
    if plan.memory_beats > depth and spanned:
        # The replayed operands overflow the buffer: tile along the innermost axis they
        # span, so each tile's slice is loaded once and replayed for every outer row.
        # (Tiling an outer axis first would reload the same slices for every tile.)
        # As few tiles as fit: the operands broadcast along the axis keep their beats in
        # every tile (loaded once), the others' shrink with the tile. If those alone fill
        # the buffer (a column of a beat per row, tiled along the row), the next axis out
        # they span: a column is then cut into slices and the row loaded once.
        def fixed_beats(axis):
            return sum(o.beats for o in plan.replayed if shapes[o.index][axis] == 1)
        axis = next((a for a in reversed(spanned) if fixed_beats(a) < depth), spanned[-1])
        fixed = fixed_beats(axis)
        if fixed >= depth:
            # They need tiling along another axis too (recursively): the others' slices
            # take half the buffer, the rest is for the slices of those.
            pieces = max(2, -(-(plan.memory_beats - fixed) // max(1, depth // 2)))
            return axis, max(1, shape[axis] // pieces)
        pieces = max(2, -(-(plan.memory_beats - fixed) // (depth - fixed)))
        while pieces < shape[axis] and not _tile_fits(plan, shapes, axis,
                                                      -(-shape[axis] // pieces)):
            pieces += 1
        return axis, -(-shape[axis] // pieces)
    axis = next(a for a, n in enumerate(shape) if n > 1)
    output_bytes = math.prod(shape) * plan.itemsize
    pieces = max(2, -(-output_bytes // max_frame_bytes), -(-plan.memory_beats // depth),
                 -(-max(plan.dims[:-1] + (plan.row_beats,)) // plan.max_count))
    if len(plan.dims) - 1 > plan.max_dims:
        pieces = shape[axis]
    return axis, max(1, shape[axis] // pieces)


def _tile_fits(plan, shapes, axis, size):
    """Whether the replayed operands of a tile of ``size`` along ``axis`` fit the buffer."""
    tiled = [s[:axis] + (min(size, s[axis]),) + s[axis + 1:] for s in shapes]
    tile = plan_broadcast(tiled, plan.itemsize, **plan.limits, check=False)
    return tile.memory_beats <= plan.depth


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


@dataclass(frozen=True)
class FoldPass:
    """One ``MAX`` request of a fold (:func:`plan_fold`): output elements ``start`` to
    ``start + rows * row_length``, as ``rows`` rows of ``row_length`` elements, each sent as
    the S operands' rows one after another.

    Attributes
    ----------
    start, rows, row_length : int
    """

    start: int
    rows: int
    row_length: int

    def parameters(self, dtype, streamed_count, max_dims, minimum=False):
        """The pass's :class:`~maxaccel.contract.wire.MaxParameters`, streaming
        ``streamed_count`` operands (the block's ``streamed`` field, S); a Min's with
        ``minimum``."""
        counts = (1,) * (max_dims - 1) + (self.rows,)
        return MaxParameters(int(dtype), self.row_length, counts, streamed_count,
                             minimum=bool(minimum))

    def interleave(self, flats):
        """The request data: the operands' (1-D, C order) rows interleaved, shape
        ``(rows, S, row_length)``."""
        stop = self.start + self.rows * self.row_length
        return np.stack([f[self.start:stop].reshape(self.rows, self.row_length)
                         for f in flats], axis=1)


def plan_fold(elements, operands, itemsize, lanes, max_frame_bytes, max_count=MAX_COUNT):
    """The ``MAX`` passes of an element-wise Max of ``operands`` same-shape operands of
    ``elements`` elements each, folded by the device: every pass streams them all (S >= 2).

    Rows are one beat (``8 * lanes // itemsize`` elements), so the device takes a beat per
    cycle; a pass carries as many rows as a frame of ``max_frame_bytes`` of data holds (at
    most ``max_count``); the elements left over after the last whole row form one shorter row.

    Returns
    -------
    list of FoldPass
    """
    row = LANE_BYTES * lanes // itemsize
    per_pass = max(1, min(max_count, max_frame_bytes // (operands * row * itemsize)))
    whole = elements // row
    passes = [FoldPass(start * row, min(per_pass, whole - start), row)
              for start in range(0, whole, per_pass)]
    if elements % row:
        passes.append(FoldPass(whole * row, 1, elements % row))
    return passes
