"""Element-wise Max and Min through ``LOAD`` and ``MAX`` passes: the broadcast route.

A Min is a Max with the ``MAX`` block's ``minimum`` set (``REDUCE``'s, on a board without the
broadcast unit): the passes, their plans and their costs are the same.

The words (operand, pass, streamed and replayed operand, slot, tile) are those of
``host/plan.py``'s docstring. Plan, then run, as ``host/pool_window.py`` does for ``MAX_POOL``:

* Operands of the same shape are *folded*: one pass streams them all, their rows of one beat
  interleaved (:func:`maxaccel.host.plan.plan_fold`: a beat per cycle, every input once on
  the link), up to ``MAX_STREAMED`` operands a pass.
* With broadcasting, :func:`maxaccel.host.plan.plan_max_pass` gives the pass (the streamed
  operand, the replayed ones and their slots) or the tiles of the output when it does not fit
  the device (buffer, outer dimensions, counts, a frame); each tile is planned again. A
  replayed operand that a tile shares with the one before (broadcast along the tiled axis) is
  not loaded again. More operands than one pass takes are folded in groups, each group's
  result an operand of the next.
* On a board without the broadcast unit, operands are expanded on the host and the Max of k
  operands is a ``REDUCE`` of k-element runs, their elements interleaved.

Pure numpy; never imports amaranth.
"""

import itertools

import numpy as np

from maxaccel.contract.dtypes import decode_elements
from maxaccel.contract.wire import MAX_STREAMED, PARAMETERS, Command, MaxParameters
from maxaccel.host.link import request_payload
from maxaccel.host.plan import OutputTiles, plan_fold, plan_max_pass
from maxaccel.host.reduction import reduce_rows, store_bits

__all__ = ["Operand", "MaxPasses", "expands_on_host", "operands_per_pass"]

_tokens = itertools.count()


def operands_per_pass(identity):
    """The most operands of a broadcasting Max one ``MAX`` pass takes on a device: the
    replayed ones the unit folds (no more than its buffer has beats) and the streamed one;
    more are folded in groups of this many, each group's result an operand of the next."""
    return min(identity.max_operands, identity.replay_depth) + 1


def expands_on_host(shapes, shape, identity):
    """Whether a Max of operands of ``shapes`` to ``shape`` has its operands expanded on the
    host (a board without the broadcast unit, operands that broadcast): then each crosses the
    link at the output's size."""
    return identity.replay_depth == 0 and any(tuple(s) != tuple(shape) for s in shapes)


class Operand:
    """A Max operand aligned to the output's rank, with a key naming the data it holds (so a
    replayed operand's slice already in the buffer is not loaded again)."""

    __slots__ = ("array", "key")

    def __init__(self, array, key):
        self.array = array
        self.key = key

    @classmethod
    def new(cls, array, rank):
        array = array.reshape((1,) * (rank - array.ndim) + array.shape)
        return cls(array, (next(_tokens), (0,) * rank, array.shape))

    def sliced(self, axis, start, stop):
        """The operand for output indices ``start:stop`` along ``axis``."""
        if self.array.shape[axis] == 1:  # broadcast along the axis: the same data
            return self
        token, origin, _ = self.key
        index = (slice(None),) * axis + (slice(start, stop),)
        array = self.array[index]
        origin = origin[:axis] + (origin[axis] + start,) + origin[axis + 1:]
        return Operand(array, (token, origin, array.shape))


class MaxPasses:
    """The Max (or Min) of one public call, as requests to a device.

    Parameters
    ----------
    identity : Identity
        The device's ``IDENTIFY``.
    max_frame_bytes : int
    request : callable(command, payload) -> bytes
        Sends one request, returns its reply payload.
    minimum : bool
        Every pass computes the element-wise minimum (ONNX ``Min``) instead.

    The object remembers what it loaded into the replay buffer (an operand's slice by base
    address), for the tiles of this call only.
    """

    def __init__(self, identity, max_frame_bytes, request, minimum=False):
        self.identity = identity
        self.max_frame_bytes = max_frame_bytes
        self.request = request
        self.minimum = bool(minimum)
        self._loaded = {}

    def max_into(self, operands, out, fmt):
        """Write the Max (Min) of ``operands`` (:class:`Operand` s aligned to ``out``'s rank)
        into ``out``."""
        identity = self.identity
        if expands_on_host([o.array.shape for o in operands], out.shape, identity):
            # A board built without the broadcast unit: expand the operands here (more bytes
            # on the link) and take the same-shape path below.
            operands = [Operand.new(np.broadcast_to(o.array, out.shape), out.ndim)
                        for o in operands]
        if all(o.array.shape == out.shape for o in operands):
            if len(operands) > 1 and identity.replay_depth:
                self._fold_into(operands, out, fmt)
                return
            # No broadcasting and no broadcast unit (or one operand): the Max of k operands
            # is a reduction of k-element runs, their elements interleaved (host memory, not
            # link); the reducer yields one result per cycle.
            stacked = np.stack([o.array for o in operands], axis=-1)
            rows = stacked.reshape(out.size, len(operands), 1)
            store_bits(out, reduce_rows(rows, fmt, Command.REDUCE, self.max_frame_bytes,
                                        self.request, self.minimum).reshape(out.shape))
            return
        group = operands_per_pass(identity)
        while len(operands) > group:
            # More operands than one pass takes: fold a group, then use its result.
            first = operands[:group]
            partial = np.empty(np.broadcast_shapes(*(o.array.shape for o in first)), out.dtype)
            self.max_into(first, partial, fmt)
            operands = [Operand.new(partial, out.ndim)] + operands[group:]
        plan = plan_max_pass([o.array.shape for o in operands], fmt.nbytes, identity,
                             self.max_frame_bytes)
        if not isinstance(plan, OutputTiles):
            self._run_pass(plan, operands, out, fmt)
            return
        axis = plan.axis
        for start in range(0, out.shape[axis], plan.size):
            stop = min(start + plan.size, out.shape[axis])
            tile = out[(slice(None),) * axis + (slice(start, stop),)]
            self.max_into([o.sliced(axis, start, stop) for o in operands], tile, fmt)

    def _fold_into(self, operands, out, fmt):
        """Same-shape operands folded by the broadcast unit: passes streaming them all, their
        rows of one beat interleaved, up to ``MAX_STREAMED`` operands a pass."""
        while len(operands) > MAX_STREAMED:
            partial = np.empty(out.shape, out.dtype)
            self._fold_into(operands[:MAX_STREAMED], partial, fmt)
            operands = [Operand.new(partial, out.ndim)] + operands[MAX_STREAMED:]
        identity = self.identity
        flats = [np.ascontiguousarray(o.array).reshape(-1) for o in operands]
        flat_out = out.reshape(-1) if out.flags.c_contiguous else np.empty(out.size, out.dtype)
        for fold in plan_fold(out.size, len(flats), fmt.nbytes, identity.lanes,
                              self.max_frame_bytes):
            block = fold.parameters(fmt.dtype, len(flats), identity.max_dims,
                                    self.minimum).encode(identity.max_dims, identity.max_operands)
            reply = self.request(Command.MAX,
                                 request_payload(block, fold.interleave(flats), fmt))
            elements = fold.rows * fold.row_length
            store_bits(flat_out[fold.start:fold.start + elements],
                       decode_elements(reply, fmt, (elements,)))
        if not out.flags.c_contiguous:
            store_bits(out, flat_out.reshape(out.shape))

    def _run_pass(self, plan, operands, out, fmt):
        """``LOAD`` the pass's replayed operands, then the ``MAX`` request with its streamed
        one."""
        identity = self.identity
        try:
            for replayed in plan.replayed:
                self._load(replayed, operands[replayed.index], fmt)
            block = MaxParameters.from_plan(plan, fmt.dtype, self.minimum).encode(
                identity.max_dims, identity.max_operands)
            streamed = plan.streamed
            reply = self.request(Command.MAX, request_payload(
                block, operands[streamed.index].array, fmt) if streamed else block)
        except BaseException:
            self._loaded.clear()  # the buffer's contents are unknown now
            raise
        store_bits(out, decode_elements(reply, fmt, out.shape))

    def _load(self, replayed, operand, fmt):
        """``LOAD`` a replayed operand (its :class:`~maxaccel.host.plan.OperandPlan` and its
        :class:`Operand`) unless the buffer already holds it there."""
        key = (operand.key, replayed.row_beats, replayed.beats)
        if self._loaded.get(replayed.base) == key:
            return
        for base, (_, _, beats) in list(self._loaded.items()):
            if base < replayed.base + replayed.beats and replayed.base < base + beats:
                del self._loaded[base]
        rows = np.ascontiguousarray(operand.array).reshape(-1, replayed.groups[-1])
        row_length = rows.shape[1]
        step = max(1, self.max_frame_bytes // (row_length * fmt.nbytes))
        block = PARAMETERS[Command.LOAD]
        for start in range(0, len(rows), step):
            chunk = rows[start:start + step]
            self.request(Command.LOAD, request_payload(block.pack(
                fmt.dtype, replayed.base + start * replayed.row_beats, len(chunk), row_length),
                chunk, fmt))
        self._loaded[replayed.base] = key
