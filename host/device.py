"""The tensor API of a board: ``open_device(url)`` and :class:`Device`.

A :class:`Device` takes numpy arrays, plans the work for the capacities the board reports with
``IDENTIFY``, sends it as protocol commands and returns numpy arrays with exactly the bits of
the golden model (``maxaccel.sim.reference``). Inputs are checked with the golden model's own
checks (:mod:`maxaccel.contract.checks`) before anything is sent.

How each operator is planned:

``reduce_max``
    The reduced axes are moved innermost (a numpy transpose on the host: memory, not link), so
    the reduction is ``runs`` contiguous runs of ``R`` elements: ``REDUCE`` commands of whole
    runs, each frame at most ``max_frame_bytes``. A run longer than that is reduced in pieces
    whose partial maxima are reduced again on the device.
    A reduction over one block of adjacent axes with kept axes after it (ReduceMax over the
    spatial axes of ``N x D1..Dn x C``) is instead ``images x pixels x channels`` in memory as it
    is: ``POOL_CHANNELS_LAST`` commands (:func:`maxaccel.host.plan.plan_channels_last`), no
    transpose, when a pixel's channels fit the unit (more channels take the ``REDUCE`` route);
    images beyond a frame go in pieces of pixels whose maxima are pooled again.
``global_max_pool``
    ``N x C x D1..Dn`` is ``N*C`` runs of ``prod(D)`` elements: the same ``REDUCE`` path. With
    ``channels_last=True``, ``N x D1..Dn x C`` goes to the channels-last pooling unit.
``max``
    Operands of the same shape: folded by the broadcast unit, ``MAX`` with S streamed
    operands whose rows of one beat are interleaved (:func:`maxaccel.host.plan.plan_fold`: a
    beat per cycle, every input once on the link); on a board without that unit their elements
    interleaved, a ``REDUCE`` of runs of as many elements as operands. With broadcasting,
    :func:`maxaccel.host.plan.plan_broadcast` coalesces the broadcast, picks the operand that
    streams and places the others in the replay buffer: ``LOAD`` each replayed operand, then
    one ``MAX`` pass with the streamed one. A pass that does not fit the device (buffer, outer
    dimensions, counts) or whose output exceeds ``max_frame_bytes`` is tiled along the output's
    outer axes; an operand that a tile shares with the previous one (broadcast along the tiled
    axis) is not loaded again. More operands than one pass folds are folded in groups.

Every tensor crosses the link once where the capacities allow: broadcasting and reductions
happen on the device, encoding and decoding are vectorised numpy.
"""

import contextlib
import itertools
import math

import numpy as np

from maxaccel.contract.checks import check_global_max_pool, check_max, check_reduce_max
from maxaccel.contract.dtypes import FORMATS, decode_elements, encode_elements
from maxaccel.contract.pooling import check_max_pool
from maxaccel.host.link import Link, LinkError
from maxaccel.host.plan import plan_broadcast, plan_channels_last, plan_fold
from maxaccel.host.pool_reduce import max_pool_by_reduce, plan_reduce_pool
from maxaccel.host.pool_window import max_pool_by_window, plan_window_pool
from maxaccel.contract.progress import TransferProgress, log
from maxaccel.contract.wire import (COUNTER_NAMES, COUNTERS, MAX_COUNT, MAX_STREAMED, PARAMETERS,
                                    VERSION, Capacities, Command, Identity, MaxParameters)
from maxaccel.host.transport import open_transport

__all__ = ["Device", "open_device", "plan_max_pool"]


def plan_max_pool(geometry, fmt, identity, max_frame_bytes, indices=True):
    """The route of a MaxPool on a device and its plan, as :meth:`Device.max_pool` takes it.

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
        a group, or padding sent, can make it cost more); otherwise ``(Command.REDUCE,
        plan_reduce_pool(...))``.
    """
    window = plan_window_pool(geometry, fmt, identity, max_frame_bytes, indices=indices)
    if window is not None and not window.filler_images() and not window.padding_elements():
        return Command.MAX_POOL, window
    plan = plan_reduce_pool(geometry)
    if window is not None and window.wire_elements() <= plan.sent_elements + plan.output_elements:
        return Command.MAX_POOL, window
    return Command.REDUCE, plan


_tokens = itertools.count()


def open_device(url="sim", **options):
    """Open the board at ``url`` and identify it.

    Parameters
    ----------
    url : str
        ``"sim"`` (the virtual board), ``"serial://PORT?baud=N"`` or ``"xdma:///dev/xdma0"``.
    **options
        Passed to :class:`Device` (``timeout_s``, ``attempts``, ``max_frame_bytes``,
        ``progress``).

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


def _store(out, values):
    """Copy ``values`` into ``out`` bit for bit (through unsigned views: NaN payloads kept)."""
    unsigned = f"=u{out.dtype.itemsize}"
    out.view(unsigned)[...] = values.view(unsigned)


class _Operand:
    """A Max operand aligned to the output's rank, with a key naming the data it holds."""

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
        return _Operand(array, (token, origin, array.shape))


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
    attempts : int
        Sends per command before :class:`~maxaccel.host.link.LinkError` (default 4).
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
        The command the last :meth:`max_pool` ran through (``MAX_POOL`` or ``REDUCE``).
    """

    def __init__(self, transport, *, url=None, timeout_s=None, attempts=4,
                 max_frame_bytes=None, progress="auto"):
        self.url = url or type(transport).__name__
        if isinstance(progress, str) and progress == "auto":
            progress = TransferProgress(self.url)
        self.link = Link(transport, timeout_s=timeout_s, attempts=attempts,
                         frame_timeout_s=0.05)
        if max_frame_bytes is None:
            max_frame_bytes = getattr(transport, "max_frame_bytes", None) or 1 << 20
        self.max_frame_bytes = max(64, int(max_frame_bytes))
        self.progress = progress
        self._loaded = {}
        self._closed = False
        self.last_max_pool_route = None
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
        self.identity = Identity.decode(reply)
        if self.identity.version != VERSION:
            raise RuntimeError(f"the device at {self.url!r} speaks protocol version "
                               f"{self.identity.version}; this driver speaks {VERSION}")
        if self.identity.clock_hz:
            self.link.frame_timeout_s = (self.identity.frame_timeout_cycles
                                         / self.identity.clock_hz)
        self.link.on_bytes = self._moved
        self._progress_done = self._progress_total = 0

    # --- life cycle ----------------------------------------------------------------------------

    def close(self):
        """Release the transport (idempotent)."""
        if not self._closed:
            self._closed = True
            self.link.transport.close()

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
        return dict(zip(COUNTER_NAMES, COUNTERS.unpack(self._request(Command.COUNTERS))))

    # --- operators -----------------------------------------------------------------------------

    def max(self, *arrays):
        """ONNX ``Max`` on the device: as :func:`maxaccel.sim.reference.max`, bit for bit."""
        natives, fmt, shape = check_max(arrays)
        self._check_supported(fmt, "max()")
        out = np.empty(shape, fmt.numpy_dtype)
        if out.size:
            operands = [_Operand.new(values, len(shape)) for values in natives]
            total = sum(values.nbytes for values in natives) + out.nbytes
            with self._operation(total):
                self._max_into(operands, out, fmt)
        return out

    def reduce_max(self, data, axes=None, keepdims=True, noop_with_empty_axes=False):
        """ONNX ``ReduceMax`` on the device: as :func:`maxaccel.sim.reference.reduce_max`.

        A reduction over adjacent axes with kept axes after them (the spatial axes of an
        ``N x D1..Dn x C`` tensor, say) runs on the channels-last pooling unit, with no
        transpose anywhere; any other reduction runs as contiguous runs (``REDUCE``)."""
        values, fmt, axes, keepdims, noop_with_empty_axes = check_reduce_max(
            data, axes, keepdims, noop_with_empty_axes)
        self._check_supported(fmt, "reduce_max()")
        if not axes:
            if noop_with_empty_axes:
                return values.copy()
            axes = tuple(range(values.ndim))
        return self._reduce(values, fmt, axes, keepdims)

    def global_max_pool(self, x, channels_last=False):
        """ONNX ``GlobalMaxPool`` on the device: as
        :func:`maxaccel.sim.reference.global_max_pool`.

        With ``channels_last``, ``x`` is ``N x D1..Dn x C`` (as a streaming layer or an NHWC
        exporter lays it out) and the result ``N x 1..1 x C``: the channels-last pooling unit
        reduces it as it is, the same bits as ``global_max_pool`` of the channels-first
        transpose."""
        values, fmt = check_global_max_pool(x)
        self._check_supported(fmt, "global_max_pool()")
        if channels_last:
            return self._reduce(values, fmt, tuple(range(1, values.ndim - 1)), True)
        images, channels = values.shape[:2]
        runs = images * channels
        with self._operation(values.nbytes + runs * fmt.nbytes):
            result = self._reduce_runs(values, runs, math.prod(values.shape[2:]), fmt)
        return result.reshape((images, channels) + (1,) * (values.ndim - 2))

    def max_pool(self, x, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode=False,
                 auto_pad="NOTSET", storage_order=0, return_indices=False):
        """ONNX ``MaxPool`` on the device: as :func:`maxaccel.sim.reference.max_pool`, bit for
        bit, ``(y, indices)`` with ``return_indices``.

        On a core with the windowed pooling unit the pool streams through ``MAX_POOL``
        (``host/pool_window.py``): each input element crosses the link once, each output once,
        and the device sends each maximum's index; a pool wider than the unit's line buffers
        or larger than a frame goes in tiles of the output, each with its halo of input. A
        pool the unit cannot take in any tiling (a kernel extent above its ``window_extent``,
        more than 3 spatial axes, a window of padding only), or that would cost the link more
        that way (groups of images filled up with zero images, padding sent), runs through
        ``REDUCE``, which every core has (``host/pool_reduce.py``): each window's input
        elements, padding never sent, are one run, windows with as many elements one request.
        Where windows overlap an element then crosses the link once per window it lies in
        (2.25x the input for 3x3 stride 2), and ``Indices`` are located on the host in the
        runs the device reduced, by the contract's tie rule. :attr:`last_max_pool_route`
        says which route the last call took.
        """
        values, fmt, geometry, return_indices = check_max_pool(
            x, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad, storage_order,
            return_indices)
        self._check_supported(fmt, "max_pool()")
        route, plan = plan_max_pool(geometry, fmt, self.identity, self.max_frame_bytes,
                                    indices=return_indices)
        if route == Command.MAX_POOL:
            window = plan
            self.last_max_pool_route = Command.MAX_POOL
            with self._operation(window.wire_elements() * fmt.nbytes):
                return max_pool_by_window(
                    values, fmt, window,
                    lambda payload: self._request(Command.MAX_POOL, payload),
                    return_indices)
        return self._max_pool_by_reduce(values, fmt, plan, return_indices)

    def _max_pool_by_reduce(self, values, fmt, plan, return_indices):
        """A MaxPool through ``REDUCE`` (:func:`~maxaccel.host.pool_reduce.plan_reduce_pool`'s
        ``plan``): the route :meth:`max_pool` falls back to, and that ``maxaccel bench`` times
        against ``MAX_POOL``."""
        self.last_max_pool_route = Command.REDUCE
        with self._operation((plan.sent_elements + plan.output_elements) * fmt.nbytes):
            return max_pool_by_reduce(
                values, plan, lambda rows: self._reduce_runs(rows, *rows.shape, fmt),
                return_indices)

    # --- planning ------------------------------------------------------------------------------

    def _check_supported(self, fmt, operator_name):
        if fmt.dtype not in self.identity.dtypes:
            names = ", ".join(str(f.numpy_dtype) for d, f in FORMATS.items()
                              if d in self.identity.dtypes)
            raise TypeError(f"{operator_name}: the device at {self.url!r} does not support "
                            f"{fmt.numpy_dtype}; it supports: {names}")

    def _reduce(self, values, fmt, axes, keepdims):
        """Max of ``values`` over the (non-empty, non-negative) ``axes``."""
        kept = [i for i in range(values.ndim) if i not in axes]
        if keepdims:
            shape = tuple(1 if i in axes else n for i, n in enumerate(values.shape))
        else:
            shape = tuple(values.shape[i] for i in kept)
        runs = math.prod(values.shape[i] for i in kept)
        pooling = plan_channels_last(values.shape, axes)
        if pooling is not None and pooling[2] * fmt.nbytes > self._pool_row_bytes():
            # More channels than the unit holds: splitting them into groups would copy the
            # tensor on the host as a transpose does, in more and smaller frames.
            pooling = None
        with self._operation(values.nbytes + runs * fmt.nbytes):
            if pooling is not None:
                images, pixels, channels = pooling
                return self._pool_rows(values.reshape(images, pixels, channels),
                                       fmt).reshape(shape)
            length = math.prod(values.shape[i] for i in axes)
            moved = values.transpose(kept + list(axes))
            return self._reduce_runs(moved, runs, length, fmt).reshape(shape)

    def _pool_row_bytes(self):
        """Largest pixel row ``POOL_CHANNELS_LAST`` takes: what the unit holds (``IDENTIFY``),
        and at most half a frame, so pieces of pixels always shrink (0 without the unit)."""
        return min(Capacities.of(self.identity).pool_capacity_bytes, self.max_frame_bytes // 2)

    def _pool_rows(self, rows, fmt):
        """Max over the pixels of ``rows`` (``images x pixels x channels``, a pixel row within
        :meth:`_pool_row_bytes`): ``POOL_CHANNELS_LAST`` commands of whole images, at most a
        frame each; an image larger than a frame goes in pieces of pixels whose maxima are
        pooled again. Returns ``images x channels``."""
        images, pixels, channels = rows.shape
        out = np.empty((images, channels), fmt.numpy_dtype)
        parameters = PARAMETERS[Command.POOL_CHANNELS_LAST]
        image_bytes = pixels * channels * fmt.nbytes
        if image_bytes <= self.max_frame_bytes:
            step = self.max_frame_bytes // image_bytes
            for start in range(0, images, step):
                chunk = rows[start:start + step]
                reply = self._request(Command.POOL_CHANNELS_LAST, parameters.pack(
                    fmt.dtype, len(chunk), pixels, channels) + encode_elements(chunk, fmt))
                _store(out[start:start + len(chunk)], decode_elements(reply, fmt,
                                                              (len(chunk), channels)))
            return out
        # Images larger than a frame: pool pieces of pixels, then pool the pieces' maxima.
        piece = self.max_frame_bytes // (channels * fmt.nbytes)
        pieces = -(-pixels // piece)
        partial = np.empty((images, pieces, channels), fmt.numpy_dtype)
        for image in range(images):
            for index in range(pieces):
                chunk = rows[image, index * piece:(index + 1) * piece]
                reply = self._request(Command.POOL_CHANNELS_LAST, parameters.pack(
                    fmt.dtype, 1, len(chunk), channels) + encode_elements(chunk, fmt))
                _store(partial[image, index], decode_elements(reply, fmt, (channels,)))
        return self._pool_rows(partial, fmt)

    def _reduce_runs(self, values, runs, length, fmt):
        """Max of each of ``runs`` runs of ``length`` elements: ``values`` in C order is the runs
        one after another. Returns a new 1-D array of ``runs`` elements."""
        out = np.empty(runs, fmt.numpy_dtype)
        if runs == 0:
            return out
        parameters = PARAMETERS[Command.REDUCE]
        rows = np.ascontiguousarray(values).reshape(runs, length)
        run_bytes = length * fmt.nbytes
        if run_bytes <= self.max_frame_bytes:
            step = max(1, self.max_frame_bytes // max(run_bytes, fmt.nbytes))
            for start in range(0, runs, step):
                chunk = rows[start:start + step]
                reply = self._request(Command.REDUCE, parameters.pack(
                    fmt.dtype, len(chunk), length) + encode_elements(chunk, fmt))
                _store(out[start:start + len(chunk)],
                       decode_elements(reply, fmt, (len(chunk),)))
            return out
        # Runs longer than a frame: reduce pieces, then reduce the pieces' maxima.
        piece = self.max_frame_bytes // fmt.nbytes
        pieces = -(-length // piece)
        partial = np.empty((runs, pieces), fmt.numpy_dtype)
        for run in range(runs):
            for index in range(pieces):
                chunk = rows[run, index * piece:(index + 1) * piece]
                reply = self._request(Command.REDUCE, parameters.pack(
                    fmt.dtype, 1, len(chunk)) + encode_elements(chunk, fmt))
                _store(partial[run, index:index + 1], decode_elements(reply, fmt, (1,)))
        return self._reduce_runs(partial, runs, pieces, fmt)

    def _max_into(self, operands, out, fmt):
        """Write the Max of ``operands`` (aligned to ``out``'s rank) into ``out``."""
        identity = self.identity
        if identity.replay_depth == 0 and any(o.array.shape != out.shape for o in operands):
            # A board built without the broadcast unit: expand the operands here (more bytes
            # on the link) and take the same-shape path below.
            operands = [_Operand.new(np.broadcast_to(o.array, out.shape), out.ndim)
                        for o in operands]
        if all(o.array.shape == out.shape for o in operands):
            if len(operands) > 1 and identity.replay_depth:
                self._fold_into(operands, out, fmt)
                return
            # No broadcasting and no broadcast unit (or one operand): the Max of k operands
            # is a reduction of k-element runs, their elements interleaved (host memory, not
            # link); the reducer yields one result per cycle.
            stacked = np.stack([o.array for o in operands], axis=-1)
            _store(out, self._reduce_runs(stacked, out.size, len(operands), fmt)
                   .reshape(out.shape))
            return
        fold = min(identity.max_operands, identity.replay_depth) + 1
        while len(operands) > fold:
            # More operands than one pass folds: fold a group, then use its result.
            group = operands[:fold]
            partial = np.empty(np.broadcast_shapes(*(o.array.shape for o in group)), out.dtype)
            self._max_into(group, partial, fmt)
            operands = [_Operand.new(partial, out.ndim)] + operands[fold:]
        plan = plan_broadcast([o.array.shape for o in operands], fmt.nbytes, identity.lanes,
                              identity.replay_depth, identity.max_dims, identity.max_operands,
                              MAX_COUNT, check=False)
        if plan.fits and out.nbytes <= self.max_frame_bytes:
            self._run_pass(plan, operands, out, fmt)
            return
        axis, size = self._split(plan, operands, out)
        for start in range(0, out.shape[axis], size):
            stop = min(start + size, out.shape[axis])
            tile = out[(slice(None),) * axis + (slice(start, stop),)]
            self._max_into([o.sliced(axis, start, stop) for o in operands], tile, fmt)

    def _fold_into(self, operands, out, fmt):
        """Same-shape operands folded by the broadcast unit (``MAX`` with S streamed operands,
        their rows of one beat interleaved): a beat per cycle, each input crossing the link
        once, up to ``MAX_STREAMED`` operands a pass."""
        while len(operands) > MAX_STREAMED:
            partial = np.empty(out.shape, out.dtype)
            self._fold_into(operands[:MAX_STREAMED], partial, fmt)
            operands = [_Operand.new(partial, out.ndim)] + operands[MAX_STREAMED:]
        identity = self.identity
        flats = [np.ascontiguousarray(o.array).reshape(-1) for o in operands]
        flat_out = out.reshape(-1) if out.flags.c_contiguous else np.empty(out.size, out.dtype)
        for fold in plan_fold(out.size, len(flats), fmt.nbytes, identity.lanes,
                              self.max_frame_bytes):
            block = fold.parameters(fmt.dtype, len(flats), identity.max_dims).encode(
                identity.max_dims, identity.max_operands)
            reply = self._request(Command.MAX,
                                  block + encode_elements(fold.interleave(flats), fmt))
            elements = fold.rows * fold.row_length
            _store(flat_out[fold.start:fold.start + elements],
                   decode_elements(reply, fmt, (elements,)))
        if not out.flags.c_contiguous:
            _store(out, flat_out.reshape(out.shape))

    def _split(self, plan, operands, out):
        """``(axis, size)``: tile ``out`` along ``axis`` in pieces of ``size``."""
        shape = out.shape
        if plan.streamed is None and len(plan.replayed) > self.identity.max_operands:
            # No operand has the full shape: tile until the largest one has.
            largest = max(operands, key=lambda o: o.array.size)
            for axis, (n, m) in enumerate(zip(shape, largest.array.shape)):
                if n > 1 and m == 1:
                    return axis, 1
        spanned = [a for a, n in enumerate(shape) if n > 1 and any(
            operands[o.index].array.shape[a] > 1 for o in plan.replayed)]
        if plan.memory_beats > self.identity.replay_depth and spanned:
            # The replayed operands overflow the buffer: tile along the innermost axis they
            # span, so each tile's slice is loaded once and replayed for every outer row.
            # (Tiling an outer axis first would reload the same slices for every tile.)
            # As few tiles as fit: the operands broadcast along the axis keep their beats in
            # every tile (loaded once), the others' shrink with the tile. If those alone fill
            # the buffer (a column of a beat per row, tiled along the row), the next axis out
            # they span: a column is then cut into slices and the row loaded once.
            depth = self.identity.replay_depth

            def fixed_beats(axis):
                return sum(o.beats for o in plan.replayed
                           if operands[o.index].array.shape[axis] == 1)
            axis = next((a for a in reversed(spanned) if fixed_beats(a) < depth), spanned[-1])
            fixed = fixed_beats(axis)
            if fixed >= depth:
                # They need tiling along another axis too (recursively): the others' slices
                # take half the buffer, the rest is for the slices of those.
                pieces = max(2, -(-(plan.memory_beats - fixed) // max(1, depth // 2)))
                return axis, max(1, shape[axis] // pieces)
            pieces = max(2, -(-(plan.memory_beats - fixed) // (depth - fixed)))
            while pieces < shape[axis] and not self._tile_fits(operands, axis,
                                                               -(-shape[axis] // pieces)):
                pieces += 1
            return axis, -(-shape[axis] // pieces)
        axis = next(a for a, n in enumerate(shape) if n > 1)
        pieces = max(2, -(-out.nbytes // self.max_frame_bytes),
                     -(-plan.memory_beats // self.identity.replay_depth),
                     -(-max(plan.dims[:-1] + (plan.row_beats,)) // MAX_COUNT))
        if len(plan.dims) - 1 > self.identity.max_dims:
            pieces = shape[axis]
        return axis, max(1, shape[axis] // pieces)

    def _tile_fits(self, operands, axis, size):
        """Whether the replayed operands of a tile of ``size`` along ``axis`` fit the buffer."""
        identity = self.identity
        shapes = [o.array.shape[:axis] + (min(size, o.array.shape[axis]),)
                  + o.array.shape[axis + 1:] for o in operands]
        plan = plan_broadcast(shapes, operands[0].array.dtype.itemsize, identity.lanes,
                              identity.replay_depth, identity.max_dims, identity.max_operands,
                              MAX_COUNT, check=False)
        return plan.memory_beats <= identity.replay_depth

    def _run_pass(self, plan, operands, out, fmt):
        identity = self.identity
        try:
            for o in plan.replayed:
                self._load(o, operands[o.index], fmt)
            parameters = MaxParameters.from_plan(plan, fmt.dtype).encode(identity.max_dims,
                                                                         identity.max_operands)
            streamed = plan.streamed
            data = encode_elements(operands[streamed.index].array, fmt) if streamed else b""
            reply = self._request(Command.MAX, parameters + data)
        except BaseException:
            self._loaded.clear()  # the buffer's contents are unknown now
            raise
        _store(out, decode_elements(reply, fmt, out.shape))

    def _load(self, o, operand, fmt):
        """``LOAD`` replayed operand ``o`` unless the buffer already holds it there."""
        key = (operand.key, o.row_beats, o.beats)
        if self._loaded.get(o.base) == key:
            return
        for base, (_, _, beats) in list(self._loaded.items()):
            if base < o.base + o.beats and o.base < base + beats:
                del self._loaded[base]
        rows = np.ascontiguousarray(operand.array).reshape(-1, o.groups[-1])
        row_length = rows.shape[1]
        row_beats = o.row_beats
        step = max(1, self.max_frame_bytes // (row_length * fmt.nbytes))
        parameters = PARAMETERS[Command.LOAD]
        for start in range(0, len(rows), step):
            chunk = rows[start:start + step]
            self._request(Command.LOAD, parameters.pack(
                fmt.dtype, o.base + start * row_beats, len(chunk), row_length)
                + encode_elements(chunk, fmt))
        self._loaded[o.base] = key

    # --- link ----------------------------------------------------------------------------------

    def _request(self, command, payload=b""):
        if self._closed:
            raise ValueError(f"the device at {self.url!r} is closed")
        return self.link.request(command, payload)

    @contextlib.contextmanager
    def _operation(self, total_bytes):
        """One public call: progress over ``total_bytes`` tensor bytes, a fresh buffer view."""
        self._loaded.clear()
        self._progress_done, self._progress_total = 0, total_bytes
        warning = getattr(self.link.transport, "slow_warning", lambda n: None)(total_bytes)
        if warning:
            log.warning(warning)
        try:
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

    def _moved(self, count):
        if self.progress is not None and self._progress_total:
            self._progress_done += count
            self.progress(min(self._progress_done, self._progress_total), self._progress_total)
