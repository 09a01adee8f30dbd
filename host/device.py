"""The tensor API of a board: ``open_device(url)`` and :class:`Device`.

A :class:`Device` takes numpy arrays, plans the work for the capacities the board reports with
``IDENTIFY``, sends it as protocol commands and returns numpy arrays with exactly the bits of
the golden model (``maxaccel.sim.reference``). Inputs are checked with the golden model's own
checks (:mod:`maxaccel.contract.checks`) before anything is sent.

``Device`` holds the connection (the link, ``IDENTIFY``, the counters), the public operations
and progress; each operation is planned and run by its route's module, plan first, then the
requests:

``reduce_max``, ``reduce_min``, ``global_max_pool``
    ``host/reduction.py``: contiguous runs through ``REDUCE`` once the reduced axes are
    innermost, or pixels of channels through ``POOL_CHANNELS_LAST`` as the tensor lies in
    memory (``channels_last=True``, or a ReduceMax or ReduceMin over the spatial axes of
    ``N x D1..Dn x C``); rows longer than a frame in pieces reduced again. A ReduceMin takes
    ReduceMax's route, its block's ``minimum`` set.
``max``, ``min``
    ``host/max_passes.py`` with the planner of ``host/plan.py``: same-shape operands folded in
    ``MAX`` passes that stream them all; broadcast operands as a pass that streams one and
    replays the others from the buffer (``LOAD``), the output tiled when it does not fit the
    device; on a board without the broadcast unit, a ``REDUCE`` of interleaved elements.
``arg_max``, ``arg_min``
    ``host/reduction.py``: each line along the axis one ``REDUCE`` run with ``arg`` set (the
    axis made innermost on the host), the device's offsets back as positions;
    ``select_last_index`` by reversing the runs; lines longer than a frame in pieces whose
    extremes are sent again.
``max_pool``
    ``host/pool_window.py`` (``MAX_POOL``, tiles with their halo) or ``host/pool_reduce.py``
    (each window a ``REDUCE`` run), as :func:`plan_max_pool` chooses.

Every tensor crosses the link once where the capacities allow: broadcasting and reductions
happen on the device, encoding and decoding are vectorised numpy.
"""

import contextlib
import functools
import math
import threading
import time

import numpy as np

from maxaccel.contract.checks import (check_arg, check_global_max_pool, check_max, check_out,
                                     check_reduce_max)
from maxaccel.contract.dtypes import FORMATS, DType
from maxaccel.contract.pooling import check_max_pool
from maxaccel.contract.progress import TransferProgress, log
from maxaccel.contract.wire import (COUNTER_NAMES, COUNTERS, VERSION, WINDOW_INDEX_BYTES, Command,
                                   Identity)
from maxaccel.host.link import Link, LinkError
from maxaccel.host.max_passes import MaxPasses, Operand
from maxaccel.host.pool_reduce import max_pool_by_reduce, plan_reduce_pool
from maxaccel.host.pool_window import max_pool_by_window, plan_window_pool
from maxaccel.host.reduction import (arg_rows, plan_reduction, reduce_by_plan, reduce_rows,
                                     store_bits)
from maxaccel.host.transport import open_transport

__all__ = ["Device", "open_device", "plan_max_pool", "max_pool_link_elements",
           "DEFAULT_FRAME_BYTES"]

#: A device's largest tensor payload of one command unless its transport says otherwise.
DEFAULT_FRAME_BYTES = 1 << 20


@functools.lru_cache(maxsize=256)
def plan_max_pool(geometry, fmt, identity, max_frame_bytes, indices=True):
    """The route of a MaxPool on a device and its plan, as :meth:`Device.max_pool` takes it.

    Made once per pool, element format, core and frame size (the plans are frozen): choosing a
    tiling weighs every candidate against the core's capacities, milliseconds of Python for a
    pool a NiteFury runs in a fraction of one, and a model pools the same shapes every run.

    Parameters
    ----------
    geometry : PoolGeometry
        The pool (:func:`~maxaccel.contract.pooling.resolve_max_pool`).
    fmt : Format
    identity : Identity
        The device's ``IDENTIFY``.
    max_frame_bytes : int
        Largest request or reply payload.
    indices : bool
        Whether the reply carries Indices (frames are sized for the reply asked for).

    Returns
    -------
    tuple
        ``(Command.MAX_POOL, plan_window_pool(...))`` when the pooling unit takes the pool in
        some tiling and that costs the link no more than ``REDUCE`` would (zero images filling
        a group, or padding sent, can make it cost more) or the core has no run reducer;
        otherwise ``(Command.REDUCE, plan_reduce_pool(...))``.
    """
    window = plan_window_pool(geometry, fmt, identity, max_frame_bytes, indices=indices)
    if window is not None and (not identity.reduce_lanes or not window.filler_images()
                               and not window.padding_elements()):
        return Command.MAX_POOL, window
    plan = plan_reduce_pool(geometry)
    if window is not None and window.wire_elements() <= max_pool_link_elements(Command.REDUCE,
                                                                                 plan):
        return Command.MAX_POOL, window
    return Command.REDUCE, plan


def max_pool_link_elements(route, plan):
    """Elements a MaxPool puts on the link, both ways, through ``route`` with its ``plan``
    (:func:`plan_max_pool`'s result): values only, each padding element or overlapping
    window's element as often as it is sent."""
    if route == Command.MAX_POOL:
        return plan.wire_elements()
    return plan.sent_elements + plan.output_elements


#: The element type of positions (ArgMax's, ArgMin's, MaxPool's Indices): ONNX's int64.
_POSITIONS = FORMATS[DType.INT64]


def _written(out, results, inputs, name, compute):
    """An operation's results, written into numpy's ``out`` (:class:`Device`'s Notes).

    Parameters
    ----------
    out : None, numpy.ndarray or tuple
        None (new arrays), the array the first result is written into, or a tuple of one
        array (or None) per result.
    results : list of (tuple, Format or None)
        Each result's shape and format; None for positions (int64).
    inputs : list of numpy.ndarray
        The arrays the operation reads.
    name : str
        The operation, for messages (``"max()"``).
    compute : callable
        ``compute(*rooms)`` runs the operation and returns its results (a tuple), each written
        into its room (an array, or None: a new one) where the route can, else new.

    Returns
    -------
    tuple
        The results, each its ``out`` array where one was given.

    Raises
    ------
    TypeError, ValueError
        An ``out`` that does not fit, before ``compute`` is called (so before anything is
        sent).
    """
    if out is None:     # the common case, kept short: an offloaded model calls this often
        return compute(*[None] * len(results))
    rooms = _rooms(out, results, name)
    shared = False
    for room in rooms:
        if room is not None:
            for array in inputs:
                shared = shared or np.may_share_memory(room, array)
    # As numpy: made apart, then copied when out may share memory with an input (a route
    # writing into out as it goes would overwrite input it still reads).
    computed = compute(*[None] * len(rooms)) if shared else compute(*rooms)
    got = []
    for room, result in zip(rooms, computed):
        if room is None:
            got.append(result)
            continue
        if result is not room:
            store_bits(room, result)
        got.append(room)
    return tuple(got)


def _rooms(out, results, name):
    """``out`` (:func:`_written`) as one checked array or None per result."""
    if type(out) is not tuple:
        out = (out,) + (None,) * (len(results) - 1)
    elif len(out) != len(results):
        raise ValueError(f"{name}: out must be a tuple of {len(results)} (one array or None "
                         f"per result), got {len(out)}")
    for room, (shape, fmt) in zip(out, results):
        if room is None:
            continue
        if fmt is None:
            if isinstance(room, np.ndarray) and room.dtype != _POSITIONS.numpy_dtype:
                raise TypeError(f"{name}: out for positions must be int64 (native byte "
                                f"order), got {room.dtype.str}")
            fmt = _POSITIONS
        check_out(room, shape, fmt, name)
    return out


def open_device(url="sim", **options):
    """Open the board at ``url`` and identify it.

    Parameters
    ----------
    url : str
        ``"sim"`` (the virtual board), ``"serial://PORT?baud=N"`` or ``"xdma:///dev/xdma0"``.
    **options
        Passed to :class:`Device` (``timeout_s``, ``attempts``, ``silent_attempts``,
        ``max_frame_bytes``, ``progress``).

    Raises
    ------
    ValueError
        A URL of no accepted form.
    maxaccel.host.transport.TransportError
        The port or device files could not be opened.
    maxaccel.host.link.LinkError
        The board does not answer ``IDENTIFY``.
    """
    transport = open_transport(url)
    try:
        return Device(transport, url=url, **options)
    except BaseException:
        transport.close()
        raise


class Device:
    """A board speaking the maxaccel protocol, as a numpy API.

    Parameters
    ----------
    transport : maxaccel.host.transport.Transport
        The byte pipe (see :func:`maxaccel.host.transport.open_transport`). The device owns it
        and closes it in :meth:`close`.
    url : str, optional
        For messages.
    timeout_s : float, optional
        How long to wait for a reply's next byte (default: the transport's).
    attempts, silent_attempts : int
        The link's retry budget (:class:`~maxaccel.host.link.Link`): at most ``attempts``
        sends of one request (default 16) on a line that damages frames but carries the
        device's answers, and at most ``silent_attempts`` sends in a row that hear no frame
        (default 4: an absent board is reported after four reply timeouts).
    max_frame_bytes : int, optional
        Largest tensor payload of one command (default: the transport's ``max_frame_bytes``
        if it has one, 8 MiB behind XDMA where the transfer size is the throughput, else
        1 MiB): big requests are split into several commands, which bounds a retry's cost and
        paces progress reports.
    progress : callable, "auto" or None
        ``progress(done_bytes, total_bytes)``, called as bytes move during an operation and
        once with ``done == total`` at its end. ``"auto"`` (default): a bar with rate and ETA
        on stderr for operations longer than a second, when stderr is a terminal
        (:class:`maxaccel.contract.progress.TransferProgress`); None: nothing.

    Attributes
    ----------
    identity : maxaccel.contract.wire.Identity
        What the board reported at open.
    link : maxaccel.host.link.Link
        Byte counters and retry statistics.
    last_max_pool_route : Command or None
        The command the last :meth:`max_pool` of the calling thread ran through (``MAX_POOL``
        or ``REDUCE``).

    Notes
    -----
    A device may be shared between threads. Each operation (all the requests it makes, their
    retries included) holds the link alone; a call from another thread waits its turn. The
    wait is bounded as the link is: while the operation holding the link moves bytes, a
    waiter waits; when that operation has moved nothing for twice the reply timeout (plus a
    second), the waiter gets a :class:`TimeoutError` naming the device. Ctrl-C while waiting
    raises the same one-line ``KeyboardInterrupt`` as during a request (nothing was sent, so
    the device has nothing to drop). :meth:`close` waits, bounded the same way, for the
    operation in progress. Calling the device from inside its own operation (a ``progress``
    callback) is refused with a ``RuntimeError``.

    Every operation takes ``out`` (keyword-only), as numpy's: an array of the result's shape
    and dtype (the input's; int64 for positions) in native byte order, writeable, strided or
    not, that the result is written into and returned as (:meth:`max_pool` with
    ``return_indices`` takes a tuple of two, either None). An ``out`` that does not fit is
    refused (``TypeError`` or ``ValueError`` naming the problem) before anything is sent. An
    ``out`` that may share memory with an input gets, as numpy's does, the result made apart
    and then copied in; otherwise the routes that can write into it as they go do
    (:meth:`max`, :meth:`min`, :meth:`max_pool` through ``MAX_POOL``).
    """

    def __init__(self, transport, *, url=None, timeout_s=None, attempts=16, silent_attempts=4,
                 max_frame_bytes=None, progress="auto"):
        self.url = url or type(transport).__name__
        if isinstance(progress, str) and progress == "auto":
            progress = TransferProgress(self.url)
        self.link = Link(transport, timeout_s=timeout_s, attempts=attempts,
                         silent_attempts=silent_attempts, frame_timeout_s=0.05)
        if max_frame_bytes is None:
            max_frame_bytes = getattr(transport, "max_frame_bytes", None) or DEFAULT_FRAME_BYTES
        self.max_frame_bytes = max(64, int(max_frame_bytes))
        self._noisy_frame_bytes = None      # the frames a noisy line shrank requests to
        self.progress = progress
        self._closed = False
        self._turn = threading.Lock()       # held by the one operation using the link
        self._holder = None                 # that operation's thread
        self._per_thread = threading.local()
        try:
            reply = self.link.request(Command.IDENTIFY)
        except LinkError as error:
            tried = getattr(transport, "describe", lambda: "")()
            if error.heard:
                hint = (f"the device at {self.url!r} sent {error.heard} bytes but no reply: "
                        f"it is busy (still answering an earlier request, e.g. an interrupted "
                        f"client's: try again), or the baud rate is wrong")
            else:
                hint = (f"no answer from the device at {self.url!r}: is it a maxaccel board, "
                        f"programmed and powered?")
            raise LinkError(Command.IDENTIFY, error.attempts, error.last_failure,
                            hint=hint + (f"; {tried}" if tried else ""),
                            heard=error.heard) from None
        # The version first: another version's IDENTIFY may be of another length.
        if reply[:1] != bytes([VERSION]):
            raise RuntimeError(f"the device at {self.url!r} speaks protocol version "
                               f"{reply[0] if reply else 'none'}; this driver speaks "
                               f"{VERSION}")
        self.identity = Identity.decode(reply)
        if self.identity.clock_hz:
            self.link.frame_timeout_s = (self.identity.frame_timeout_cycles
                                         / self.identity.clock_hz)
        self.link.on_bytes = self._moved
        self._progress_done = self._progress_total = 0

    # --- life cycle ----------------------------------------------------------------------------

    def close(self):
        """Release the transport (idempotent). An operation in progress in another thread is
        waited for (bounded as a waiting operation is), then the transport is closed."""
        if self._closed:
            return
        try:
            held = self._holder != threading.get_ident() and self._wait_turn()
        except TimeoutError:
            held = False     # the operation holding the link is stuck: close under it
        try:
            if not self._closed:
                self._closed = True
                self.link.transport.close()
        finally:
            if held:
                self._release_turn()

    @property
    def last_max_pool_route(self):
        return getattr(self._per_thread, "max_pool_route", None)

    @last_max_pool_route.setter
    def last_max_pool_route(self, route):
        self._per_thread.max_pool_route = route

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        i = self.identity
        return (f"<Device {self.url} protocol v{i.version}, {i.lanes} lanes, replay buffer "
                f"{i.replay_depth} beats, {i.max_operands} operands x {i.max_dims} dims>")

    def counters(self):
        """The board's link error counters, as a dict (``COUNTER_NAMES`` keys)."""
        with self._operation(0):
            reply = self._request(Command.COUNTERS)
        return dict(zip(COUNTER_NAMES, COUNTERS.unpack(reply)))

    # --- operators -----------------------------------------------------------------------------

    def max(self, *arrays, out=None):
        """ONNX ``Max`` on the device: as :func:`maxaccel.sim.reference.max`, bit for bit;
        ``out`` as numpy's (the class's Notes)."""
        return self._elementwise(arrays, "max", out)

    def min(self, *arrays, out=None):
        """ONNX ``Min`` on the device: as :func:`maxaccel.sim.reference.min`, bit for bit
        (IEEE 754-2019 ``minimum``: NaN absorbing, ``-0`` below ``+0``); ``out`` as numpy's.

        :meth:`max`'s passes with the ``MAX`` block's ``minimum`` set, so the same cycles and
        bytes on the link; takes and refuses what :meth:`max` does, before anything is
        sent."""
        return self._elementwise(arrays, "min", out)

    def _elementwise(self, arrays, name, out):
        """Max or Min (``name``) of ``arrays`` through :class:`MaxPasses`, into ``out``: each
        pass's results go straight into it."""
        natives, fmt, shape = check_max(arrays, name=name)
        self._check_supported(fmt, f"{name}()")
        if not self.identity.replay_depth or len(natives) == 1:
            self._check_reducer(f"{name}()", "an element-wise " + name.title()
                                + (" of one operand" if len(natives) == 1
                                   else " without the broadcast unit"))

        def compute(room):
            y = np.empty(shape, fmt.numpy_dtype) if room is None else room
            if y.size:
                operands = [Operand.new(values, len(shape)) for values in natives]
                total = sum(values.nbytes for values in natives) + y.nbytes
                self._run(total, lambda frame_bytes: MaxPasses(
                    self.identity, frame_bytes, self._request,
                    minimum=name == "min").max_into(operands, y, fmt))
            return (y,)
        return _written(out, [(shape, fmt)], natives, f"{name}()", compute)[0]

    def reduce_max(self, data, axes=None, keepdims=True, noop_with_empty_axes=False, *,
                   out=None):
        """ONNX ``ReduceMax`` on the device: as :func:`maxaccel.sim.reference.reduce_max`;
        ``out`` as numpy's.

        A reduction over adjacent axes with kept axes after them (the spatial axes of an
        ``N x D1..Dn x C`` tensor, say) runs on the channels-last pooling unit, with no
        transpose anywhere; any other reduction runs as contiguous runs (``REDUCE``)."""
        return self._reduction(data, axes, keepdims, noop_with_empty_axes, "reduce_max", out)

    def reduce_min(self, data, axes=None, keepdims=True, noop_with_empty_axes=False, *,
                   out=None):
        """ONNX ``ReduceMin`` on the device: as :func:`maxaccel.sim.reference.reduce_min`, bit
        for bit (IEEE 754-2019 ``minimum``: NaN absorbing, ``-0`` below ``+0``; an empty set
        gives ``+inf``, the integer maximum, ``True``); ``out`` as numpy's.

        :meth:`reduce_max`'s route (the channels-last pooling unit for the spatial axes of
        ``N x D1..Dn x C``, else contiguous runs through ``REDUCE``) with the command's
        ``minimum`` select, in the same cycles; takes and refuses what :meth:`reduce_max`
        does, before anything is sent."""
        return self._reduction(data, axes, keepdims, noop_with_empty_axes, "reduce_min", out)

    def _reduction(self, data, axes, keepdims, noop_with_empty_axes, name, out):
        values, fmt, axes, keepdims, noop_with_empty_axes = check_reduce_max(
            data, axes, keepdims, noop_with_empty_axes, name=name)
        self._check_supported(fmt, f"{name}()")
        if not axes and noop_with_empty_axes:
            return _written(out, [(values.shape, fmt)], [values], f"{name}()",
                           lambda room: (values.copy() if room is None else values,))[0]
        return self._reduce(values, fmt, axes or tuple(range(values.ndim)), keepdims,
                            name == "reduce_min", out, f"{name}()")

    def arg_max(self, data, axis=0, keepdims=True, select_last_index=False, *, out=None):
        """ONNX ``ArgMax`` on the device: as :func:`maxaccel.sim.reference.arg_max`, bit for
        bit (int64; the first NaN if there is one, else the first maximum, ``+0`` above
        ``-0``; the last with ``select_last_index``); ``out`` as numpy's (int64).

        The axis is made innermost (a numpy transpose on the host: memory, not link) and each
        line along it is one ``REDUCE`` run with the block's ``arg`` set: each element crosses
        the link once, and each run's position comes back as a u32 (``host/reduction.py``)."""
        return self._arg(data, axis, keepdims, select_last_index, "arg_max", out)

    def arg_min(self, data, axis=0, keepdims=True, select_last_index=False, *, out=None):
        """ONNX ``ArgMin`` on the device: as :func:`maxaccel.sim.reference.arg_min`, bit for
        bit (a NaN is still the extreme, so the first NaN if there is one, else the first
        minimum, ``-0`` below ``+0``); :meth:`arg_max`'s route with the block's ``minimum``
        select too, in the same cycles."""
        return self._arg(data, axis, keepdims, select_last_index, "arg_min", out)

    def _arg(self, data, axis, keepdims, select_last_index, name, out):
        values, fmt, axis, keepdims, select_last_index, shape = check_arg(
            data, axis, keepdims, select_last_index, name)
        self._check_supported(fmt, f"{name}()")
        self._check_reducer(f"{name}()", "an arg reduction")

        def compute(room):
            if not math.prod(shape):
                return (np.empty(shape, np.int64),)
            rows = np.moveaxis(values, axis, -1).reshape(-1, values.shape[axis])
            positions = self._run(
                values.nbytes + len(rows) * WINDOW_INDEX_BYTES,
                lambda frame_bytes: arg_rows(rows, fmt, frame_bytes, self._request,
                                             minimum=name == "arg_min", last=select_last_index))
            return (positions.reshape(shape),)
        return _written(out, [(shape, None)], [values], f"{name}()", compute)[0]

    def global_max_pool(self, x, channels_last=False, *, out=None):
        """ONNX ``GlobalMaxPool`` on the device: as
        :func:`maxaccel.sim.reference.global_max_pool`.

        With ``channels_last``, ``x`` is ``N x D1..Dn x C`` (as a streaming layer or an NHWC
        exporter lays it out) and the result ``N x 1..1 x C``: the channels-last pooling unit
        reduces it as it is, the same bits as ``global_max_pool`` of the channels-first
        transpose. ``out`` as numpy's."""
        values, fmt = check_global_max_pool(x)
        self._check_supported(fmt, "global_max_pool()")
        spatial = range(1, values.ndim - 1) if channels_last else range(2, values.ndim)
        return self._reduce(values, fmt, tuple(spatial), True, False, out, "global_max_pool()")

    def max_pool(self, x, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode=False,
                 auto_pad="NOTSET", storage_order=0, return_indices=False, *, route=None,
                 out=None):
        """ONNX ``MaxPool`` on the device: as :func:`maxaccel.sim.reference.max_pool`, bit for
        bit, ``(y, indices)`` with ``return_indices``.

        On a core with the windowed pooling unit the pool streams through ``MAX_POOL``
        (``host/pool_window.py``): each input element crosses the link once, each output once,
        and the device sends each maximum's index; a pool wider than the unit's line buffers
        or larger than a frame goes in tiles of the output, each with its halo of input. A
        pool the unit cannot take in any tiling (a kernel extent above its ``window_extent``,
        more than 3 spatial axes, a window of padding only), or that would cost the link more
        that way (groups of images filled up with zero images, padding sent), runs through
        ``REDUCE`` (``host/pool_reduce.py``; a core without the run reducer refuses it, a
        ``ValueError`` before anything is sent): each window's input
        elements, padding never sent, are one run, windows with as many elements one request.
        Where windows overlap an element then crosses the link once per window it lies in
        (2.25x the input for 3x3 stride 2), and ``Indices`` are located on the host in the
        runs the device reduced, by the contract's tie rule. :attr:`last_max_pool_route`
        says which route the last call took; ``route=Command.REDUCE`` takes the ``REDUCE``
        route whatever the planner would choose (to compare the two: ``maxaccel bench
        --pool-routes``).

        ``out``, as numpy's (the class's Notes): the array ``y`` is written into, or with
        ``return_indices`` a tuple of the arrays ``y`` and ``indices`` are written into (either
        None). Through ``MAX_POOL`` each tile's maxima go straight into ``y``'s array (an
        :class:`~maxaccel.host.offload.OffloadSession` hands onnxruntime's own output this way,
        so that the reply lands where onnxruntime wants it).

        A pool with no images (``N`` or ``C`` is 0) returns its empty result without a
        request, and :attr:`last_max_pool_route` is then None.
        """
        values, fmt, geometry, return_indices = check_max_pool(
            x, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad, storage_order,
            return_indices)
        self._check_supported(fmt, "max_pool()")
        if route not in (None, Command.REDUCE):
            raise ValueError(f"max_pool(route=...) takes None (the planner's choice) or "
                             f"Command.REDUCE, not {route!r}")
        shape = geometry.output_shape
        results = [(shape, fmt)] + [(shape, None)] * return_indices

        def compute(room, indices_room=None):
            if 0 in shape:
                self.last_max_pool_route = None
                return np.empty(shape, values.dtype), np.empty(shape, np.int64)
            got = self._max_pool_routed(values, fmt, geometry, return_indices, route, room)
            return got if return_indices else (got,)
        got = _written(out, results, [values], "max_pool()", compute)
        return got if return_indices else got[0]

    def _max_pool_routed(self, values, fmt, geometry, return_indices, route, out):
        """:meth:`max_pool` of checked ``values`` through the route ``route`` names, or the
        planner's choice (None)."""
        if route == Command.REDUCE:
            forced = (Command.REDUCE, plan_reduce_pool(geometry))
            planned = lambda frame_bytes: forced     # noqa: E731
        else:
            planned = lambda frame_bytes: plan_max_pool(     # noqa: E731
                geometry, fmt, self.identity, frame_bytes, indices=return_indices)

        def pool(frame_bytes):
            route, plan = planned(frame_bytes)
            if route == Command.REDUCE:
                return self._max_pool_by_reduce(values, fmt, plan, return_indices,
                                                frame_bytes)
            self.last_max_pool_route = Command.MAX_POOL
            return max_pool_by_window(values, fmt, plan,
                                      lambda payload: self._request(Command.MAX_POOL, payload),
                                      return_indices, out)
        route, plan = planned(self.frame_bytes)
        if route == Command.REDUCE:
            if not self.identity.window_lanes:
                need = "a pool without the windowed pooling unit"
            elif return_indices and not self.identity.window_indices:
                need = ("a pool with Indices, which this core's windowed pooling unit does not "
                        "give (IDENTIFY's window_indices is 0)")
            else:
                need = ("this pool, which the windowed pooling unit does not take (IDENTIFY's "
                        "window capacities)")
            self._check_reducer("max_pool()", need)
        return self._run(max_pool_link_elements(route, plan) * fmt.nbytes, pool)

    def _max_pool_by_reduce(self, values, fmt, plan, return_indices, frame_bytes):
        """A MaxPool through ``REDUCE`` (:func:`~maxaccel.host.pool_reduce.plan_reduce_pool`'s
        ``plan``) in frames of at most ``frame_bytes``: the route :meth:`max_pool` falls back
        to (new arrays: :func:`_written` copies them into ``out``)."""
        self.last_max_pool_route = Command.REDUCE
        return max_pool_by_reduce(
            values, plan, lambda rows: reduce_rows(
                rows[..., np.newaxis], fmt, Command.REDUCE, frame_bytes, self._request)[:, 0],
            return_indices)

    # --- checks and the reduction route -------------------------------------------------------

    def _check_supported(self, fmt, operator_name):
        if fmt.dtype not in self.identity.dtypes:
            names = ", ".join(str(f.numpy_dtype) for d, f in FORMATS.items()
                              if d in self.identity.dtypes)
            raise TypeError(f"{operator_name}: the device at {self.url!r} does not support "
                            f"{fmt.numpy_dtype}; it supports: {names}")

    def _check_reducer(self, operator_name, need):
        """``ValueError`` before anything is sent when ``need`` (what the call asks of the
        device) takes ``REDUCE`` and the core has no run reducer."""
        if not self.identity.reduce_lanes:
            raise ValueError(
                f"{operator_name}: {need} runs through REDUCE, and the core at {self.url!r} "
                f"has no run reducer (IDENTIFY's reduce_lanes is 0: a core built for models "
                f"whose max-family nodes its other units serve); run it on a core built with "
                f"units including reduce")

    def _reduce(self, values, fmt, axes, keepdims, minimum, out, name):
        """Max (with ``minimum``, Min) of ``values`` over the (non-empty, non-negative)
        ``axes`` (``host/reduction.py``), into ``out`` (``name`` the operation's, for its
        messages)."""
        planned = functools.lru_cache(None)(lambda frame_bytes: plan_reduction(
            values.shape, axes, keepdims, fmt.nbytes, self.identity, frame_bytes, minimum))
        plan = planned(self.frame_bytes)
        if plan.command == Command.REDUCE:
            self._check_reducer(name, "a reduction the channels-last pooling unit does not "
                                "take (the spatial axes of N x D1..Dn x C)"
                                if self.identity.pool_channels else "a reduction without the "
                                "channels-last pooling unit")

        def compute(room):
            return (self._run(values.nbytes + plan.output_elements * fmt.nbytes,
                              lambda frame_bytes: reduce_by_plan(
                                  values, fmt, planned(frame_bytes), frame_bytes,
                                  self._request)),)
        return _written(out, [(plan.output_shape, fmt)], [values], name, compute)[0]

    # --- link ----------------------------------------------------------------------------------

    def _request(self, command, payload=b""):
        if self._holder != threading.get_ident():
            raise RuntimeError("a request outside an operation holding the link")
        if self._closed:
            raise ValueError(f"the device at {self.url!r} is closed")
        return self.link.request(command, payload)

    #: How often a thread waiting for the link looks at whether the operation holding it
    #: still moves bytes.
    WAIT_SLICE_S = 0.05

    #: The smallest tensor payload a noisy line shrinks requests to: at 0.2% of the bytes
    #: damaged each way, about half the attempts of a frame this long meet no fault.
    NOISY_FRAME_BYTES = 256

    @property
    def frame_bytes(self):
        """The largest tensor payload an operation sends in one request now:
        ``max_frame_bytes``, or less after a noisy line made requests of that size fail
        (each operation without a retry doubles it again, up to ``max_frame_bytes``)."""
        if self._noisy_frame_bytes is None:
            return self.max_frame_bytes
        return min(self._noisy_frame_bytes, self.max_frame_bytes)

    def _run(self, total_bytes, work):
        """One public call holding the link, progress over ``total_bytes``: ``work(frame_bytes)``
        (the operation in requests of at most ``frame_bytes`` of tensor data). When the link
        gives up on a line that carried the device's frames, damaged (``LinkError.noisy``), on a
        request with a payload above twice :data:`NOISY_FRAME_BYTES`, the whole operation runs
        again in frames a quarter as long as that payload (at least :data:`NOISY_FRAME_BYTES`):
        every request is idempotent and the operation's result is written anew."""
        with self._operation(total_bytes):
            frame_bytes = self.frame_bytes
            while True:
                retries = self.link.retries
                self._progress_done = 0
                try:
                    result = work(frame_bytes)
                except LinkError as error:
                    if not error.noisy or error.payload_bytes <= 2 * self.NOISY_FRAME_BYTES:
                        raise
                    frame_bytes = self._noisy_frame_bytes = max(
                        self.NOISY_FRAME_BYTES, min(frame_bytes, error.payload_bytes) // 4)
                    log.debug(f"{self.url}: {error}; the operation runs again in frames of at "
                              f"most {frame_bytes} bytes")
                    continue
                if self.link.retries == retries and self._noisy_frame_bytes is not None:
                    grown = 2 * frame_bytes
                    self._noisy_frame_bytes = grown if grown < self.max_frame_bytes else None
                return result

    def _wait_turn(self):
        """Take the link for the calling thread's operation; True once taken.

        Raises
        ------
        RuntimeError
            Called from inside this thread's own operation.
        TimeoutError
            The operation holding the link moved no byte for twice the reply timeout plus a
            second.
        """
        if self._holder == threading.get_ident():
            raise RuntimeError(f"the device at {self.url!r} was called from inside one of its "
                               f"own operations (a progress callback?); call it afterwards")
        while not self._turn.acquire(timeout=self.WAIT_SLICE_S):
            silent_s = time.monotonic() - self.link.last_activity
            if silent_s > 2 * self.link.timeout_s + 1.0:
                raise TimeoutError(
                    f"the device at {self.url!r} is busy: another thread's operation has "
                    f"held its link for {silent_s:.1f} s without moving a byte")
        self._holder = threading.get_ident()
        return True

    def _release_turn(self):
        self._holder = None
        self._turn.release()

    @contextlib.contextmanager
    def _operation(self, total_bytes):
        """One public call, holding the link: progress over ``total_bytes`` tensor bytes."""
        try:
            self._wait_turn()
        except KeyboardInterrupt:
            raise KeyboardInterrupt(f"interrupted while waiting for the device at "
                                    f"{self.url!r} (another thread's operation held it); "
                                    f"nothing was sent") from None
        try:
            if self._closed:
                raise ValueError(f"the device at {self.url!r} is closed")
            self._progress_done, self._progress_total = 0, total_bytes
            warning = getattr(self.link.transport, "slow_warning", lambda n: None)(total_bytes)
            if warning:
                log.warning(warning)
            yield
            if self.progress is not None and total_bytes:
                self.progress(total_bytes, total_bytes)
        except KeyboardInterrupt:
            # One short traceback for the caller instead of the simulator's or the port's.
            raise KeyboardInterrupt(f"interrupted; the device at {self.url!r} drops the "
                                    f"request and answers the next one") from None
        finally:
            self._progress_total = 0
            close = getattr(self.progress, "close", None)
            if close is not None:
                close()
            self._release_turn()

    def _moved(self, count):
        if self.progress is not None and self._progress_total:
            self._progress_done += count
            self.progress(min(self._progress_done, self._progress_total), self._progress_total)
