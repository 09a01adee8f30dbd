"""Windowed MaxPool geometry: ONNX attributes resolved into explicit per-axis windows.

One definition of where every MaxPool window lies, shared by the golden model
(``maxaccel.sim.reference.max_pool``) and the host driver's planner, so both refuse the same
attributes with the same messages and put every window in the same place. Pure Python and
numpy; never imports amaranth.

The rules (ONNX MaxPool-22, with the corners the spec leaves open decided; ``docs/semantics.md``
section "Windowed MaxPool" is the contract):

* ``extent = (kernel - 1) * dilation + 1`` along each spatial axis.
* ``auto_pad="NOTSET"``: explicit ``pads`` ``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]``;
  ``out = floor((size + pad_begin + pad_end - extent) / stride) + 1``, or with ``ceil_mode``
  ``ceil(...) + 1`` and then one less if that last window would start in the right padding
  (``(out - 1) * stride >= size + pad_begin``; the opset-22 rule, also PyTorch's and
  onnxruntime's). The formula must give at least one window (before that drop: an empty input
  with no left padding may have none); in ``ceil_mode`` the last window may reach past the
  padded input, as in PyTorch, and what lies past it is padding.
* ``auto_pad="VALID"``: no padding, ``out = floor((size - extent) / stride) + 1``. The spec's
  ``ceil_mode`` formula ``ceil((size - extent + 1) / stride)`` is the same number, so
  ``ceil_mode`` changes nothing here.
* ``auto_pad="SAME_UPPER"`` / ``"SAME_LOWER"``: ``out = ceil(size / stride)`` (the spec's
  ``floor((size - 1) / stride) + 1`` is the same number, so again ``ceil_mode`` changes nothing);
  total padding ``max(0, (out - 1) * stride + extent - size)`` with the *dilated* extent, split
  evenly, the odd one at the end (UPPER) or the beginning (LOWER). The ``max(0, ...)`` decides the
  case the spec leaves open, a kernel extent smaller than the stride, as TensorFlow does.
* Window ``o`` along an axis reads input coordinates ``o * stride - pad_begin + t * dilation``
  for ``t`` in ``range(kernel)``; those outside ``[0, size)`` are padding and never contribute.
  A window may hold padding only (e.g. size 2, kernel 2, dilation 3, pads ``[1, 1]``): its value
  is the least element of the dtype and its index -1.
"""

import math
import operator
from dataclasses import dataclass, replace

import numpy as np

from maxaccel.contract.checks import MAX_DTYPES, check_dtype, check_flag, shape_text, to_native
from maxaccel.contract.dtypes import decode_elements, encode_elements

__all__ = ["AUTO_PADS", "MAX_POOL_DTYPES", "PoolAxis", "PoolGeometry", "resolve_max_pool",
           "check_max_pool", "WINDOW_RANK", "WINDOW_FIELDS", "window_config", "window_geometry",
           "interleave_group_images", "separate_group_images", "encode_window_reply",
           "decode_window_reply", "serial_window_cycles"]

#: Accepted values of ``auto_pad``.
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
#: Element types accepted by ``max_pool``: every numeric type. ONNX MaxPool-22 lists float16,
#: bfloat16, float32, float64, int8 and uint8; the others cost nothing on the order keys.
MAX_POOL_DTYPES = MAX_DTYPES


def kernel_extent(kernel, dilation):
    """Span of a window of ``kernel`` taps ``dilation`` apart, in input coordinates."""
    return (kernel - 1) * dilation + 1


@dataclass(frozen=True)
class PoolAxis:
    """The windows along one spatial axis.

    Attributes
    ----------
    size : int
        Input length along the axis.
    kernel, stride, dilation : int
        The attributes for this axis (all >= 1).
    pad_begin, pad_end : int
        The padding actually used (resolved from ``pads`` or ``auto_pad``), >= 0.
    out_size : int
        Number of windows (output length).
    """

    size: int
    kernel: int
    stride: int
    dilation: int
    pad_begin: int
    pad_end: int
    out_size: int

    @property
    def extent(self):
        """Span of one window in input coordinates: ``(kernel - 1) * dilation + 1``."""
        return kernel_extent(self.kernel, self.dilation)

    @property
    def reach_end(self):
        """How far the last window reaches past the input's end (``pad_end`` or, in
        ``ceil_mode``, up to ``stride - 1`` more; 0 if it ends inside)."""
        if self.out_size == 0:
            return 0
        return max(0, (self.out_size - 1) * self.stride - self.pad_begin + self.extent - self.size)

    def starts(self):
        """Input coordinate of each window's first tap (negative inside the left padding)."""
        return np.arange(self.out_size, dtype=np.int64) * self.stride - self.pad_begin

    def taps(self):
        """``(out_size, kernel)`` int64 array: the input coordinate of every tap of every window.

        Coordinates outside ``[0, size)`` are padding (see :meth:`inside`).
        """
        offsets = np.arange(self.kernel, dtype=np.int64) * self.dilation
        return self.starts()[:, None] + offsets[None, :]

    def inside(self):
        """``(out_size, kernel)`` bool array: which taps read an input element."""
        taps = self.taps()
        return (taps >= 0) & (taps < self.size)

    def empty_windows(self):
        """Bool array of ``out_size``: windows with no input element along this axis."""
        return ~self.inside().any(axis=1)

    def reads_twice(self):
        """Whether some input element of this axis lies in more than one window."""
        taps = self.taps()[self.inside()]
        return taps.size != np.unique(taps).size

    def covered(self):
        """The input coordinates some window reads, ascending: a ``slice`` where they are one
        run (windows no further apart than their extent, without dilation gaps), else an int64
        array. The rest of the axis is read by no window."""
        read = np.unique(self.taps()[self.inside()])
        if read.size == 0 or read[-1] - read[0] + 1 == read.size:
            start = int(read[0]) if read.size else 0
            return slice(start, start + read.size)
        return read


@dataclass(frozen=True)
class PoolGeometry:
    """Every window of one MaxPool, and how Indices are numbered.

    Attributes
    ----------
    input_shape : tuple of int
        ``N x C x D1 x ... x Dn``.
    axes : tuple of PoolAxis
        One per spatial axis, in order.
    storage_order : int
        0: Indices row-major over the spatial axes; 1: column-major (first spatial axis fastest).
        Either way the ``N`` and ``C`` offset is ``(n * C + c) * D1 * ... * Dn``, as onnxruntime
        and ``onnx.reference`` number them.
    """

    input_shape: tuple
    axes: tuple
    storage_order: int

    @property
    def spatial_shape(self):
        return tuple(a.size for a in self.axes)

    @property
    def output_shape(self):
        return tuple(self.input_shape[:2]) + tuple(a.out_size for a in self.axes)

    @property
    def pads(self):
        """The resolved padding in ONNX order ``[x1_begin, ..., xn_begin, x1_end, ..., xn_end]``."""
        return [a.pad_begin for a in self.axes] + [a.pad_end for a in self.axes]

    @property
    def channel_stride(self):
        """Indices step from one (batch, channel) to the next: the spatial element count."""
        return int(np.prod(self.spatial_shape, dtype=np.int64))

    def index_multipliers(self):
        """Per spatial axis, the Indices step of one input coordinate along that axis.

        The Indices of element ``(n, c, i1, ..., in)`` are
        ``(n * C + c) * channel_stride + sum(i_k * index_multipliers()[k])``.
        """
        sizes = self.spatial_shape
        if self.storage_order == 0:
            return tuple(int(np.prod(sizes[k + 1:], dtype=np.int64)) for k in range(len(sizes)))
        return tuple(int(np.prod(sizes[:k], dtype=np.int64)) for k in range(len(sizes)))

    def indices(self, channel, coordinates):
        """ONNX Indices of elements, as int64: the one definition of their numbering.

        Parameters
        ----------
        channel : int or array of int
            ``n * C + c`` of each element.
        coordinates : sequence of int arrays
            One per spatial axis: each element's input coordinate along it (broadcastable
            with ``channel``).
        """
        result = np.asarray(channel, dtype=np.int64) * self.channel_stride
        for coordinate, multiplier in zip(coordinates, self.index_multipliers()):
            result = result + np.asarray(coordinate, dtype=np.int64) * multiplier
        return result

    def has_empty_windows(self):
        """Whether some window holds padding only (its value is the least element, index -1)."""
        return any(a.empty_windows().any() for a in self.axes)

    def reads_twice(self):
        """Whether some input element lies in more than one window (windows overlap)."""
        return any(a.reads_twice() for a in self.axes)

    def covered(self):
        """Per spatial axis, the input coordinates some window reads (:meth:`PoolAxis.covered`):
        the max of every window's maximum is the maximum of that part of the input (the
        least element if it is empty, as an all-padding window's value)."""
        return tuple(a.covered() for a in self.axes)


def _int_list(value, name, count, minimum, what):
    """``value`` as a list of ``count`` Python ints >= ``minimum``; errors name the attribute."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a sequence of integers, got {value!r}")
    items = list(value)
    checked = []
    for item in items:
        if isinstance(item, (bool, np.bool_)):
            raise TypeError(f"{name} must be integers, got {item!r} in {items!r}")
        try:
            checked.append(operator.index(item))
        except TypeError:
            raise TypeError(f"{name} must be integers, got {item!r} in {items!r}") from None
    if len(checked) != count:
        raise ValueError(f"{name} needs {count} values ({what}), got {len(checked)}: {checked}")
    bad = [v for v in checked if v < minimum]
    if bad:
        raise ValueError(f"{name} values must be >= {minimum}, got {checked}")
    return checked


def resolve_max_pool(input_shape, kernel_shape, strides=None, pads=None, dilations=None,
                     ceil_mode=False, auto_pad="NOTSET", storage_order=0):
    """Resolve MaxPool attributes for an input shape into explicit windows.

    Parameters
    ----------
    input_shape : sequence of int
        ``N x C x D1 x ... x Dn``, ``n >= 1``.
    kernel_shape, strides, pads, dilations, ceil_mode, auto_pad, storage_order
        The ONNX attributes, as :func:`maxaccel.sim.reference.max_pool` takes them; ``None``
        means the ONNX default (strides and dilations 1, pads 0).

    Returns
    -------
    PoolGeometry

    Raises
    ------
    TypeError
        An attribute of the wrong type (the message names the attribute).
    ValueError
        Rank below 3; an attribute of the wrong length or out of range; ``auto_pad`` not one of
        :data:`AUTO_PADS`; non-zero ``pads`` with ``auto_pad`` other than NOTSET; a window
        larger than the (padded) input along some axis. Each message names the attribute.
    """
    input_shape = tuple(int(n) for n in input_shape)
    if len(input_shape) < 3:
        raise ValueError(
            f"max_pool() needs a tensor of rank >= 3 (N x C x D1 ... Dn), "
            f"got rank {len(input_shape)} with shape {shape_text(input_shape)}"
        )
    rank = len(input_shape) - 2
    per_axis = f"one per spatial axis of the input {shape_text(input_shape)}"
    if kernel_shape is None:
        raise TypeError("max_pool() needs kernel_shape (ONNX MaxPool requires it)")
    kernel = _int_list(kernel_shape, "kernel_shape", rank, 1, per_axis)
    stride = [1] * rank if strides is None else _int_list(strides, "strides", rank, 1, per_axis)
    dilation = ([1] * rank if dilations is None
                else _int_list(dilations, "dilations", rank, 1, per_axis))
    both_ends = f"begin and end of each spatial axis of {shape_text(input_shape)}"
    pad = [0] * (2 * rank) if pads is None else _int_list(pads, "pads", 2 * rank, 0, both_ends)
    ceil_mode = check_flag(ceil_mode, "ceil_mode")
    if isinstance(storage_order, (bool, np.bool_)) or storage_order not in (0, 1):
        raise ValueError(f"storage_order must be 0 (row-major) or 1 (column-major), "
                         f"got {storage_order!r}")
    if not isinstance(auto_pad, str) or auto_pad not in AUTO_PADS:
        raise ValueError(f"auto_pad must be one of {', '.join(AUTO_PADS)}, got {auto_pad!r}")
    if auto_pad != "NOTSET" and any(pad):
        raise ValueError(f"pads {pad} cannot be used with auto_pad={auto_pad} "
                         f"(ONNX: explicit pads only with auto_pad=NOTSET)")

    axes = []
    for i in range(rank):
        size, k, s, d = input_shape[2 + i], kernel[i], stride[i], dilation[i]
        extent = kernel_extent(k, d)
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-size // s)
            total = max(0, (out - 1) * s + extent - size)
            begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            axes.append(PoolAxis(size, k, s, d, begin, total - begin, out))
            continue
        begin, end = pad[i], pad[rank + i]
        use_ceil = ceil_mode and auto_pad == "NOTSET"   # VALID: ceil and floor agree
        span = size + begin + end - extent
        out = (-(-span // s) if use_ceil else span // s) + 1
        if out < 1:
            padding = f" + pads {begin} + {end}" if auto_pad == "NOTSET" else ""
            raise ValueError(
                f"max_pool() has no window along spatial axis {i} (tensor axis {2 + i}): "
                f"input {size}{padding} = {size + begin + end} is too short for the window "
                f"extent {extent} = (kernel_shape {k} - 1) * dilations {d} + 1"
                f"{' with auto_pad=VALID' if auto_pad == 'VALID' else ''}"
                f"{' with ceil_mode and strides ' + str(s) if use_ceil else ''}"
            )
        if use_ceil and (out - 1) * s >= size + begin:
            out -= 1                                # the last window would start in the padding
        axes.append(PoolAxis(size, k, s, d, begin, end, out))
    return PoolGeometry(input_shape, tuple(axes), int(storage_order))


def check_max_pool(x, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode=False,
                   auto_pad="NOTSET", storage_order=0, return_indices=False):
    """Check the arguments of ``max_pool`` (the public API's signature).

    Returns
    -------
    (numpy.ndarray, Format, PoolGeometry, bool)
        ``x`` in native byte order, its format, the resolved windows, ``return_indices``.

    Raises
    ------
    TypeError, ValueError
        As :func:`resolve_max_pool`; TypeError for an unsupported dtype (bool) naming the
        accepted ones; ValueError for ``return_indices`` other than a bool or 0/1.
    """
    values, fmt = to_native(x)
    check_dtype(fmt, MAX_POOL_DTYPES, "max_pool() (ONNX MaxPool)")
    geometry = resolve_max_pool(values.shape, kernel_shape, strides, pads, dilations, ceil_mode,
                                auto_pad, storage_order)
    return values, fmt, geometry, check_flag(return_indices, "return_indices")


# ---- The device's view of a pool: what the MAX_POOL command's parameter block carries.

#: Spatial axes of a ``MAX_POOL`` configuration (the protocol's, and the pooling unit's
#: ``max_rank``); a pool of lower rank is given with unit outer axes.
WINDOW_RANK = 3
#: The fields of one axis of a ``MAX_POOL`` configuration, in block order: the input length,
#: the padding at the beginning, the output length, kernel, stride and dilation. The padding at
#: the end, ``auto_pad`` and ``ceil_mode`` are all implied by the output length.
WINDOW_FIELDS = ("size", "pad", "out", "kernel", "stride", "dilation")


def serial_window_cycles(extents, elements, leaving):
    """Cycles a windowed unit that updates one window at a time
    (:class:`~maxaccel.hdl.window_serial.SerialWindowMaxPool`) spends on one lane of
    ``elements`` images side by side, whose element is the last of ``leaving`` windows, with a
    sink always ready: three to take it, a read and a write for each combination of its axes'
    candidate windows (the product of ``extents``) and element, and ``2 * elements + 2`` per
    window that leaves."""
    return 3 + 2 * math.prod(extents) * elements + leaving * (2 * elements + 2)


def window_config(geometry):
    """The ``MAX_POOL`` configuration of a pool: :data:`WINDOW_RANK` dicts of
    :data:`WINDOW_FIELDS`, outermost first (unit axes in front of a pool of lower rank), or
    ``None`` for a pool of more spatial axes."""
    axes = geometry.axes
    if len(axes) > WINDOW_RANK:
        return None
    unit = dict(size=1, pad=0, out=1, kernel=1, stride=1, dilation=1)
    return tuple([unit] * (WINDOW_RANK - len(axes)) + [
        dict(size=a.size, pad=a.pad_begin, out=a.out_size, kernel=a.kernel, stride=a.stride,
             dilation=a.dilation) for a in axes])


def window_geometry(config, images=1):
    """The :class:`PoolGeometry` of ``images`` images (channels of one batch item) pooled as a
    ``MAX_POOL`` configuration says (the inverse of :func:`window_config`): window ``o`` of an
    axis has taps ``o * stride - pad + j * dilation``, ``j < kernel``; the padding at the end is
    what the last window reaches past the input (0 if it ends inside)."""
    axes = []
    for axis in config:
        unpadded = PoolAxis(axis["size"], axis["kernel"], axis["stride"], axis["dilation"],
                            axis["pad"], 0, axis["out"])
        axes.append(replace(unpadded, pad_end=unpadded.reach_end))
    return PoolGeometry((1, images) + tuple(a.size for a in axes), tuple(axes), 0)


# ---- The data of a MAX_POOL request and its reply (docs/protocol.md). The unit pools ``group``
# images side by side: the request sends each group's images interleaved element by element,
# and each output row of the reply is the group's ``group`` values, then (with Indices) their
# ``group`` indices, each a little-endian unsigned integer of ``WINDOW_INDEX_BYTES`` bytes:
# the output's flat position in its image.

def interleave_group_images(images, group):
    """``groups x elements x group``: ``images`` (``groups * group`` images, each flattened or
    not) in the order a ``MAX_POOL`` request sends them, a group's images interleaved element by
    element. A view where numpy can make one."""
    images = np.asarray(images)
    return images.reshape(len(images) // group, group, -1).transpose(0, 2, 1)


def separate_group_images(interleaved):
    """The inverse of :func:`interleave_group_images`: ``groups * group x elements``."""
    groups, elements, group = interleaved.shape
    return interleaved.transpose(0, 2, 1).reshape(groups * group, elements)


def _index_dtype():
    # Deferred: the wire contract (contract/blocks.py) imports this module for the window
    # fields.
    from maxaccel.contract.wire import WINDOW_INDEX_BYTES
    return np.dtype(f"<u{WINDOW_INDEX_BYTES}")


def encode_window_reply(values, indices, fmt, group):
    """The data of a ``MAX_POOL`` reply.

    Parameters
    ----------
    values : numpy.ndarray
        ``images x outputs`` (``images`` a multiple of ``group``), native byte order.
    indices : numpy.ndarray or None
        ``images x outputs``: each output's flat position in its image; None for a reply
        without Indices.
    fmt : Format
    group : int

    Returns
    -------
    bytes
    """
    rows = np.frombuffer(encode_elements(interleave_group_images(values, group), fmt),
                         np.uint8).reshape(len(values) // group, values.shape[1], -1)
    if indices is None:
        return rows.tobytes()
    positions = np.ascontiguousarray(interleave_group_images(indices, group),
                                     _index_dtype())
    return np.concatenate([rows, positions.view(np.uint8)], axis=2).tobytes()


def decode_window_reply(reply, fmt, group, outputs, indices):
    """Values and Indices of a ``MAX_POOL`` reply (the inverse of :func:`encode_window_reply`).

    Parameters
    ----------
    reply : bytes
        The reply's data: ``groups`` groups of ``outputs`` output rows.
    fmt : Format
    group, outputs : int
        Images per group, outputs per image.
    indices : bool
        Whether the reply carries Indices.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray or None)
        ``images x outputs`` values, and int64 flat positions in the image (None without
        Indices).
    """
    index_dtype = _index_dtype()
    value_bytes = group * fmt.nbytes
    row_bytes = value_bytes + group * index_dtype.itemsize * bool(indices)
    rows = np.frombuffer(reply, np.uint8).reshape(-1, outputs, row_bytes)
    values = decode_elements(rows[..., :value_bytes].tobytes(), fmt, rows.shape[:2] + (group,))
    if not indices:
        return separate_group_images(values), None
    positions = rows[..., value_bytes:].copy().view(index_dtype).astype(np.int64)
    return separate_group_images(values), separate_group_images(positions)
