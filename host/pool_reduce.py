"""Windowed MaxPool through the ``REDUCE`` command: the route for a core without a pooling unit.

A reduce-only core (the iCE40 build, ``Core(units=("reduce",))``) folds contiguous runs of R
elements. MaxPool maps onto it by reordering on the host: each window's *input* elements (padding
is never sent) become one run, and windows with the same number of input elements form one
``REDUCE`` of runs of that length. Interior windows all hold ``prod(kernel_shape)`` elements; the
windows at the edges, cut by the padding, and the ``ceil_mode`` windows hold fewer and go in
their own groups. A window of padding only is a run of length 0, whose ``REDUCE`` result is the
empty-set value (``-inf``, the integer minimum), which is the contract's value for it.

What it costs on the link: every element is sent once per window it lies in. Where windows do
not overlap (``PoolGeometry.reads_twice()`` is False: stride >= extent, or dilated windows that
interleave without sharing) each input element crosses at most once (elements in no window, e.g.
stride > extent, not at all). Where they overlap the input is sent about
``prod(kernel / stride)`` times: 2.25x for 3x3 stride 2 (ResNet's stem), 9x for 3x3 stride 1
(:attr:`ReducePoolPlan.sent_elements` gives the exact count).

Indices: ``REDUCE`` returns values only. :func:`max_pool_by_reduce` locates each window's winner on
the host by comparing its run, bit for bit, with the maximum the device returned: the first
element whose bits equal it, or for a NaN maximum the first NaN. That is the contract's tie rule
(the first element, in row-major window order, whose order key equals the maximum: equal keys
are equal bits except for NaNs, which all share the greatest key). It is memory work on the
host, no extra link traffic.

Where it is used: ``Device.max_pool`` (host/device.py) takes this route when the pooling unit
cannot take the pool (``plan_window_pool`` gives no plan: no unit, a kernel above its extent) or
when this route moves fewer elements (a plan whose groups carry filler images);
``Device.max_pool(..., route=Command.REDUCE)`` takes it whatever the planner would choose, and
``maxaccel bench --pool-routes`` times it that way against ``MAX_POOL``.

Pure numpy; never imports amaranth.
"""

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from maxaccel.contract.checks import to_native

__all__ = ["ReduceGroup", "ReducePoolPlan", "plan_reduce_pool", "max_pool_by_reduce"]


@dataclass(frozen=True)
class ReduceGroup:
    """The windows whose runs have one length: one ``REDUCE`` (per frame) of runs of ``length``.

    Attributes
    ----------
    length : int
        Input elements per window (the run length R; 0 for windows of padding only).
    windows : numpy.ndarray
        int64, ``(m,)``: each window's row-major flat position among the spatial outputs.
    sources : numpy.ndarray
        int64, ``(m, length)``: for each window, the row-major flat spatial offsets of its input
        elements, in row-major window order (the order of the contract's tie rule).
    """

    length: int
    windows: np.ndarray
    sources: np.ndarray


@dataclass(frozen=True)
class ReducePoolPlan:
    """A MaxPool as ``REDUCE`` commands, one group per run length.

    Attributes
    ----------
    geometry : PoolGeometry
    groups : tuple of ReduceGroup
        Sorted by length; every spatial output in exactly one group.
    """

    geometry: object
    groups: tuple

    @property
    def channels(self):
        """``N * C``: every group's runs are repeated once per (batch, channel)."""
        return self.geometry.input_shape[0] * self.geometry.input_shape[1]

    @property
    def sent_elements(self):
        """Elements sent on the link (runs times their length, over all channels)."""
        return self.channels * sum(g.sources.size for g in self.groups)

    @property
    def input_elements(self):
        return self.channels * self.geometry.channel_stride

    @property
    def output_elements(self):
        return math.prod(self.geometry.output_shape)

    @property
    def each_element_once(self):
        """Whether no input element is sent twice (the windows do not overlap)."""
        return not self.geometry.reads_twice()


def _axis_classes(pool_axis):
    """The windows of one axis by how many input elements they hold: (count, windows, coords)."""
    taps, inside = pool_axis.taps(), pool_axis.inside()
    counts = inside.sum(axis=1)
    classes = []
    for count in np.unique(counts):
        windows = np.flatnonzero(counts == count)
        coordinates = taps[windows][inside[windows]].reshape(len(windows), int(count))
        classes.append((int(count), windows, coordinates))
    return classes


def plan_reduce_pool(geometry):
    """Plan a MaxPool of ``geometry`` (from :func:`maxaccel.contract.pooling.resolve_max_pool`) as
    ``REDUCE`` runs: vectorised numpy, one group per run length.

    Returns
    -------
    ReducePoolPlan
    """
    axes = geometry.axes
    rank = len(axes)
    input_strides = [math.prod(a.size for a in axes[i + 1:]) for i in range(rank)]
    output_strides = [math.prod(a.out_size for a in axes[i + 1:]) for i in range(rank)]
    by_length = defaultdict(list)
    # A window's input elements are the product of its per-axis ones, so windows with the same
    # per-axis counts share one layout and are built together.
    for combination in itertools.product(*(_axis_classes(a) for a in axes)):
        counts = [count for count, _, _ in combination]
        grids = np.meshgrid(*(windows for _, windows, _ in combination), indexing="ij")
        windows = sum(g.astype(np.int64) * s for g, s in zip(grids, output_strides))
        sources = np.zeros((1,) * (2 * rank), dtype=np.int64)
        for i, (count, axis_windows, coordinates) in enumerate(combination):
            shape = [1] * (2 * rank)
            shape[i], shape[rank + i] = len(axis_windows), count
            sources = sources + coordinates.reshape(shape) * input_strides[i]
        count = math.prod(len(w) for _, w, _ in combination)
        length = math.prod(counts)
        full = [len(w) for _, w, _ in combination] + counts
        by_length[length].append((np.reshape(windows, -1),
                                  np.broadcast_to(sources, full).reshape(count, length)))
    groups = tuple(
        ReduceGroup(length, np.concatenate([w for w, _ in parts]),
                    np.concatenate([s for _, s in parts]))
        for length, parts in sorted(by_length.items()))
    return ReducePoolPlan(geometry, groups)


def max_pool_by_reduce(x, plan, reduce_runs, return_indices=False):
    """Run a :class:`ReducePoolPlan` with a ``REDUCE``-like function.

    Parameters
    ----------
    x : numpy.ndarray
        The input (already checked; see :func:`maxaccel.contract.pooling.check_max_pool`).
    plan : ReducePoolPlan
    reduce_runs : callable
        ``reduce_runs(rows)`` with ``rows`` of shape ``(runs, R)`` returns the ``(runs,)``
        maxima: the device's ``REDUCE`` (:func:`maxaccel.host.reduction.reduce_rows`), or in
        tests the golden ``reduce_max(rows, axes=1, keepdims=False)``.
    return_indices : bool
        Also return the Indices, located on the host (see the module docstring).

    Returns
    -------
    numpy.ndarray or (numpy.ndarray, numpy.ndarray)
        As :func:`maxaccel.sim.reference.max_pool`.
    """
    values, fmt = to_native(x)
    geometry = plan.geometry
    channels = plan.channels
    spatial_outputs = math.prod(a.out_size for a in geometry.axes)
    flat = values.reshape(channels, geometry.channel_stride)
    y = np.empty((channels, spatial_outputs), dtype=fmt.numpy_dtype)
    indices = np.full((channels, spatial_outputs), -1, dtype=np.int64)
    for group in plan.groups:
        if channels == 0 or group.windows.size == 0:
            continue
        rows = flat[:, group.sources].reshape(channels * len(group.windows), group.length)
        maxima = np.asarray(reduce_runs(rows)).reshape(channels, -1)
        y[:, group.windows] = maxima
        if return_indices and group.length:
            indices[:, group.windows] = _locate(rows, maxima.reshape(-1), group, geometry, fmt,
                                                channels)
    y = y.reshape(geometry.output_shape)
    if not return_indices:
        return y
    return y, indices.reshape(geometry.output_shape)


def _locate(rows, maxima, group, geometry, fmt, channels):
    """Indices of each run's first element equal in bits to its maximum (first NaN for NaN)."""
    unsigned = fmt.uint_dtype
    match = rows.view(unsigned) == maxima.view(unsigned)[:, None]
    if fmt.is_float:
        with np.errstate(invalid="ignore"):   # ml_dtypes' bfloat16 isnan warns on NaN
            match = np.where(np.isnan(maxima)[:, None], np.isnan(rows), match)
    first = match.argmax(axis=1).reshape(channels, -1)                # (channels, m)
    offsets = np.take_along_axis(group.sources[None, :, :], first[:, :, None], axis=2)[..., 0]
    coordinates = np.unravel_index(offsets, geometry.spatial_shape)
    channel = np.arange(channels, dtype=np.int64)[:, None]
    return geometry.indices(channel, coordinates)
