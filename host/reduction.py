"""ReduceMax, ReduceMin and GlobalMaxPool through ``REDUCE`` and ``POOL_CHANNELS_LAST``: the
reduction route.

Plan, then run, as ``host/pool_window.py`` does for ``MAX_POOL``:

:func:`plan_reduction`
    Lays a reduction out as *rows*: ``count x length x width`` elements in C order whose
    maxima over ``length`` are the result (``count x width``).

    * ``REDUCE``: the reduced axes moved innermost (a numpy transpose on the host: memory,
      not link), so the reduction is ``count`` contiguous runs of ``length`` elements
      (``width`` 1).
    * ``POOL_CHANNELS_LAST``: a reduction over one block of adjacent axes with kept axes after
      it (the spatial axes of ``N x D1..Dn x C``) is ``images x pixels x channels`` in memory
      as it lies (:func:`maxaccel.host.plan.plan_channels_last`), no transpose, when a pixel's
      channels fit the unit and half a frame (more channels take ``REDUCE``). A minimum takes
      the same route: both blocks have the ``minimum`` select.

:func:`reduce_rows`
    The one loop of both commands: as many whole rows a request as a frame of
    ``max_frame_bytes`` holds; a row longer than a frame goes in pieces whose maxima (minima)
    are reduced again, the same way.

:func:`arg_rows`
    ArgMax and ArgMin through ``REDUCE`` with its ``arg`` select: each row one run, the
    device's byte offset of each run's first extreme back as a position;
    ``select_last_index`` is the first extreme of the run reversed (a view here, one copy on
    the way to the link). A row longer than a frame goes in pieces whose extremes are sent
    again as runs of their own: the first extreme of those is in the first piece that holds
    one, so the tie rule carries over.

Pure numpy; never imports amaranth.
"""

import math
from dataclasses import dataclass

import numpy as np

from maxaccel.contract.dtypes import decode_elements
from maxaccel.contract.wire import PARAMETERS, WINDOW_INDEX_BYTES, Capacities, Command
from maxaccel.host.link import request_payload
from maxaccel.host.plan import plan_channels_last

__all__ = ["ReductionPlan", "plan_reduction", "reduce_by_plan", "reduce_rows", "arg_rows",
           "store_bits"]

#: The parameter block's fields of a request of ``count`` rows of ``length`` elements of
#: ``width`` (the reduced axis is ``length``), per command.
_ROW_FIELDS = {
    Command.REDUCE: lambda count, length, width: {"runs": count, "run_length": length},
    Command.POOL_CHANNELS_LAST: lambda count, length, width: {
        "images": count, "pixels": length, "channels": width},
}


def store_bits(out, values):
    """Copy ``values`` into ``out`` bit for bit (through unsigned views: NaN payloads kept)."""
    unsigned = f"=u{out.dtype.itemsize}"
    out.view(unsigned)[...] = values.view(unsigned)


@dataclass(frozen=True)
class ReductionPlan:
    """A reduction as rows of ``REDUCE`` or ``POOL_CHANNELS_LAST`` requests.

    Attributes
    ----------
    command : Command
        ``REDUCE`` or ``POOL_CHANNELS_LAST``.
    minimum : bool
        The rows' minima, not their maxima.
    order : tuple of int
        The input's axes in the order the rows lay them out (kept axes, then reduced ones,
        for ``REDUCE``; the input's own order for ``POOL_CHANNELS_LAST``).
    rows : (int, int, int)
        ``(count, length, width)``: the input, in ``order``, as ``count`` rows of ``length``
        elements of ``width``, reduced over ``length``.
    output_shape : tuple of int
    """

    command: Command
    order: tuple
    rows: tuple
    output_shape: tuple
    minimum: bool = False

    @property
    def output_elements(self):
        return math.prod(self.output_shape)


def plan_reduction(shape, axes, keepdims, itemsize, identity, max_frame_bytes, minimum=False):
    """The rows of a Max (with ``minimum``, a Min) over ``axes`` (non-empty, non-negative) of a
    tensor of ``shape``.

    Parameters
    ----------
    shape : tuple of int
    axes : tuple of int
    keepdims : bool
    itemsize : int
        Bytes per element.
    identity : Identity
        The device's ``IDENTIFY`` (its pooling unit's capacity).
    max_frame_bytes : int
    minimum : bool
        A minimum (either command's ``minimum`` select; the same route as the maximum's).

    Returns
    -------
    ReductionPlan
    """
    kept = [i for i in range(len(shape)) if i not in axes]
    if keepdims:
        output_shape = tuple(1 if i in axes else n for i, n in enumerate(shape))
    else:
        output_shape = tuple(shape[i] for i in kept)
    pooling = plan_channels_last(shape, axes)
    pool_row_bytes = min(Capacities.of(identity).pool_capacity_bytes, max_frame_bytes // 2)
    if pooling is not None and pooling[2] * itemsize <= pool_row_bytes:
        return ReductionPlan(Command.POOL_CHANNELS_LAST, tuple(range(len(shape))), pooling,
                             output_shape, minimum)
    # More channels than the unit holds: splitting them into groups would copy the tensor on
    # the host as a transpose does, in more and smaller frames; so REDUCE.
    rows = (math.prod(shape[i] for i in kept), math.prod(shape[i] for i in axes), 1)
    return ReductionPlan(Command.REDUCE, tuple(kept) + tuple(axes), rows, output_shape, minimum)


def reduce_by_plan(values, fmt, plan, max_frame_bytes, request):
    """Run a :class:`ReductionPlan`: the maxima (minima) of ``values``, shaped
    ``plan.output_shape``.

    ``request(command, payload)`` sends one request and returns its reply payload."""
    rows = values.transpose(plan.order).reshape(plan.rows)
    return reduce_rows(rows, fmt, plan.command, max_frame_bytes, request,
                       minimum=plan.minimum).reshape(plan.output_shape)


def reduce_rows(rows, fmt, command, max_frame_bytes, request, minimum=False):
    """Max (with ``minimum``, Min) over axis 1 of ``rows`` (``count x length x width``) through
    ``command`` (``REDUCE`` with ``width`` 1, or ``POOL_CHANNELS_LAST``): requests of as many
    whole rows as a frame of ``max_frame_bytes`` holds; rows longer than a frame in pieces
    whose maxima (minima) are reduced again. Returns a new ``count x width`` array.

    ``request(command, payload)`` sends one request and returns its reply payload; both
    commands' blocks have the ``minimum`` select."""
    block = PARAMETERS[command]
    count, length, width = rows.shape
    out = np.empty((count, width), fmt.numpy_dtype)
    if count == 0:
        return out
    select = {"minimum": 1} if minimum else {}

    def reduced(chunk):
        fields = dict(_ROW_FIELDS[command](*chunk.shape), **select)
        reply = request(command, request_payload(block.pack(dtype=fmt.dtype, **fields),
                                                 chunk, fmt))
        return decode_elements(reply, fmt, (len(chunk), width))

    row_bytes = length * width * fmt.nbytes
    if row_bytes <= max_frame_bytes:
        for rows_in_frame in _whole_rows(count, max(row_bytes, fmt.nbytes), max_frame_bytes):
            store_bits(out[rows_in_frame], reduced(rows[rows_in_frame]))
        return out
    # Rows longer than a frame: reduce pieces of each, then reduce the pieces' maxima (minima).
    piece = max_frame_bytes // (width * fmt.nbytes)
    pieces = -(-length // piece)
    partial = np.empty((count, pieces, width), fmt.numpy_dtype)
    for row in range(count):
        for index in range(pieces):
            chunk = rows[row:row + 1, index * piece:(index + 1) * piece]
            store_bits(partial[row, index:index + 1], reduced(chunk))
    return reduce_rows(partial, fmt, command, max_frame_bytes, request, minimum)


def _whole_rows(count, row_bytes, max_frame_bytes):
    """Slices of ``count`` rows of ``row_bytes`` (at most ``max_frame_bytes``): as many whole
    rows as a frame holds, in order."""
    step = max(1, max_frame_bytes // row_bytes)
    return [slice(start, start + step) for start in range(0, count, step)]


def arg_rows(rows, fmt, max_frame_bytes, request, minimum=False, last=False):
    """ArgMax (with ``minimum``, ArgMin) along axis 1 of ``rows`` (``count x length``, length
    at least 1) through ``REDUCE`` with ``arg`` 1: the position of each row's first extreme
    (the last with ``last``; a NaN is the extreme either way), as a new int64 array of
    ``count``.

    Requests of as many whole rows as a frame of ``max_frame_bytes`` holds; a row longer than
    a frame goes in pieces, whose extremes (picked on the host by the device's offsets) are
    one run of a second request. ``request(command, payload)`` sends one request and returns
    its reply payload."""
    block = PARAMETERS[Command.REDUCE]
    count, length = rows.shape
    if last:
        rows = rows[:, ::-1]
    out = np.empty(count, np.int64)
    select = {"minimum": 1} if minimum else {}

    def positions(chunk):
        reply = request(Command.REDUCE, request_payload(
            block.pack(dtype=fmt.dtype, runs=len(chunk), run_length=chunk.shape[1], arg=1,
                       **select), chunk, fmt))
        offsets = np.frombuffer(reply, f"<u{WINDOW_INDEX_BYTES}")
        return offsets.astype(np.int64) // fmt.nbytes

    row_bytes = length * fmt.nbytes
    if row_bytes <= max_frame_bytes:
        for rows_in_frame in _whole_rows(count, row_bytes, max_frame_bytes):
            out[rows_in_frame] = positions(rows[rows_in_frame])
    else:
        piece = max_frame_bytes // fmt.nbytes
        starts = np.arange(0, length, piece)
        for row in range(count):
            found = np.concatenate([positions(rows[row:row + 1, start:start + piece])
                                    for start in starts]) + starts
            best = arg_rows(rows[row:row + 1][:, found], fmt, max_frame_bytes, request,
                            minimum)
            out[row] = found[best[0]]
    return length - 1 - out if last else out
