"""The golden model: bit-exact ONNX Max, ReduceMax, GlobalMaxPool, MaxPool, Min, ReduceMin,
ArgMax and ArgMin on numpy arrays.

Every other path of maxaccel (gateware, virtual board, real board, ONNX offload) is checked
against this module bit for bit. It is written on *integer views of the bits*, never with numpy
float comparisons, because numpy's float ``maximum`` breaks ``±0`` ties by operand position and
passes NaN payloads through (see ``docs/semantics.md``).

The order (IEEE 754-2019 ``maximum``)::

    -inf < finite negatives < -0 < +0 < finite positives < +inf      (subnormals are ordinary)

* NaN is absorbing: if any element that takes part in a max is NaN, the result is NaN, and that
  NaN is the canonical quiet NaN of the format (sign 0, exponent all ones, mantissa MSB only:
  f16 ``0x7E00``, bf16 ``0x7FC0``, f32 ``0x7FC00000``, f64 ``0x7FF8000000000000``). Signalling
  NaNs, negative NaNs and NaN payloads never come out. This holds for a max of one input and a
  reduction of one element too.
* Integers: numeric order, signed or unsigned per dtype. bool: ``False < True``.
* A reduction over an empty set yields the least element: ``-inf``, the integer minimum, or
  ``False``.
* The one place bits pass through untouched is ``reduce_max(..., noop_with_empty_axes=True)`` (and
  ``reduce_min``) with no axes, which ONNX defines as the identity (no max is taken).

How it works: each element is mapped to an unsigned *order key* of the same width whose integer
order is the order above (:func:`order_key`), every NaN is given the greatest key, the integer
maximum is taken with numpy, and the winning key is mapped back to bits (:func:`from_order_key`),
canonicalising NaN. Reductions start from the key of the least element, so empty reductions need
no special case.

The minimum side mirrors it (IEEE 754-2019 ``minimum``): ``min`` and ``reduce_min`` take the
integer maximum of the *complemented* order keys, NaN again given the greatest key, so NaN is
absorbing and canonical, ``-0 < +0``, and an empty reduction yields the greatest element
(``+inf``, the integer maximum, ``True``). ``arg_max`` and ``arg_min`` return the position of the
greatest of those keys (the first, or the last with ``select_last_index``), so a NaN is the
extreme of both: the index of the first (last) NaN, else of the first (last) maximum (minimum)
key, ``-0`` and ``+0`` distinct.

Dtypes accepted (ONNX type constraints, except where noted):

=====================  ==========================================================
``max``                float16, bfloat16, float32, float64, (u)int8/16/32/64 (Max-13);
                       not bool
``reduce_max``         all of the above and bool (ReduceMax-20); int16 and uint16 are
                       accepted although ONNX ReduceMax does not list them
``global_max_pool``    float16, bfloat16, float32, float64 only (GlobalMaxPool-22)
``max_pool``           every numeric dtype, as ``max`` (MaxPool-22 lists float16,
                       bfloat16, float32, float64, int8, uint8); not bool
``min``                as ``max`` (Min-13)
``reduce_min``         as ``reduce_max`` (ReduceMin-20 has bool)
``arg_max``,           all of the above and bool (ArgMax-13 / ArgMin-13 list no bool);
``arg_min``            int64 out
=====================  ==========================================================

``max_pool`` takes its window geometry from :mod:`maxaccel.contract.pooling` (shared with the
device planner) and pools one spatial axis at a time on the order keys, innermost first, keeping
the first maximum in row-major window order (the tie rule of ``docs/semantics.md``).

Results are always new arrays (never views of an input, never numpy scalars) of the input's
dtype in native byte order (int64 for ``arg_max`` and ``arg_min``).
"""

import numpy as np

from maxaccel.contract.checks import (GLOBAL_MAX_POOL_DTYPES, MAX_DTYPES, REDUCE_MAX_DTYPES,
                                      check_arg, check_global_max_pool, check_max,
                                      check_reduce_max, shape_text, to_native)
from maxaccel.contract.dtypes import FORMATS, Format, format_of
from maxaccel.contract.pooling import MAX_POOL_DTYPES, check_max_pool

__all__ = [
    "max", "reduce_max", "global_max_pool", "max_pool", "pool_windows",
    "min", "minimum", "reduce_min", "arg_max", "arg_min",
    "assert_same_bits", "bits_of", "from_bits", "order_key", "from_order_key", "is_nan",
    "canonicalize_nans", "MAX_DTYPES", "REDUCE_MAX_DTYPES", "GLOBAL_MAX_POOL_DTYPES",
    "MAX_POOL_DTYPES",
]

# --- bit-level helpers --------------------------------------------------------------------------


def _as_format(fmt_or_dtype):
    return fmt_or_dtype if isinstance(fmt_or_dtype, Format) else format_of(fmt_or_dtype)


def bits_of(values):
    """The raw bits of ``values`` as an unsigned integer array of the same width (a new array).

    bool elements come out as 0 or 1.
    """
    values, fmt = to_native(values)
    if fmt.kind == "bool":
        return values.astype(np.uint8)
    return values.view(fmt.uint_dtype).copy()


def from_bits(bits, fmt):
    """An array of ``fmt``'s dtype holding ``bits`` (unsigned integers, truncated to the width).

    ``fmt`` is a :class:`~maxaccel.contract.dtypes.Format` or anything ``format_of`` accepts.
    """
    fmt = _as_format(fmt)
    bits = np.asarray(bits).astype(fmt.uint_dtype)
    if fmt.kind == "bool":
        return np.asarray(bits != 0)
    return bits.view(fmt.numpy_dtype)


def _nan_mask(bits, fmt):
    if not fmt.is_float:
        return np.zeros(np.shape(bits), dtype=bool)
    magnitude = bits & fmt.uint_dtype.type(fmt.sign_mask - 1)
    infinity = fmt.uint_dtype.type(((1 << fmt.exponent_bits) - 1) << fmt.mantissa_bits)
    return np.asarray(magnitude > infinity)


def is_nan(values):
    """Boolean array: which elements are NaN (any sign, quiet or signalling), decided on bits.

    All False for integer and bool dtypes.
    """
    values, fmt = to_native(values)
    return _nan_mask(bits_of(values), fmt)


def _key_from_bits(bits, fmt):
    sign = fmt.uint_dtype.type(fmt.sign_mask)
    if fmt.kind == "signed":
        return np.asarray(bits ^ sign)
    if fmt.is_float:
        negative = (bits & sign) != 0
        return np.where(negative, ~bits, bits | sign)
    return np.array(bits)


def _bits_from_key(keys, fmt):
    sign = fmt.uint_dtype.type(fmt.sign_mask)
    if fmt.kind == "signed":
        return np.asarray(keys ^ sign)
    if fmt.is_float:
        was_positive = (keys & sign) != 0
        return np.where(was_positive, keys & ~sign, ~keys)
    return np.array(keys)


def order_key(values):
    """Unsigned order keys of ``values``: ``a < b`` in the contract's order iff ``key(a) < key(b)``.

    Same width as the element (``Format.uint_dtype``; uint8 for bool). The mapping is a
    bijection on bit patterns:

    * unsigned integers and bool: the bits as they are;
    * signed integers: the bits with the sign bit flipped;
    * floats: negative (sign bit set) -> all bits inverted; positive -> sign bit set. This is
      IEEE 754 ``totalOrder``: ``-0 < +0``, and NaNs sit outside ``[-inf, +inf]`` (positive NaNs
      above ``+inf``, negative NaNs below ``-inf``), ordered by payload.

    The keys alone do not make NaN absorbing; :func:`max` and :func:`reduce_max` first give every
    NaN (see :func:`is_nan`) the greatest key.
    """
    values, fmt = to_native(values)
    return _key_from_bits(bits_of(values), fmt)


def from_order_key(keys, fmt):
    """Inverse of :func:`order_key`, except that a NaN result is the canonical NaN of ``fmt``.

    ``keys`` are unsigned integers of ``fmt``'s width; returns an array of ``fmt``'s dtype.
    """
    fmt = _as_format(fmt)
    bits = _bits_from_key(np.asarray(keys).astype(fmt.uint_dtype), fmt)
    if fmt.is_float:
        bits = np.where(_nan_mask(bits, fmt), fmt.uint_dtype.type(fmt.canonical_nan), bits)
    return from_bits(bits, fmt)


def canonicalize_nans(values):
    """A copy of ``values`` with every NaN replaced by the canonical quiet NaN of its format."""
    values, fmt = to_native(values)
    bits = bits_of(values)
    if fmt.is_float:
        bits[_nan_mask(bits, fmt)] = fmt.canonical_nan
    return from_bits(bits, fmt)


def _extreme_keys(values, fmt, minimum=False):
    """Keys whose integer maximum is the extreme the operator wants, NaN absorbing.

    For the maximum side (``minimum=False``) these are the order keys; for the minimum side they
    are the order keys complemented, so the least value has the greatest key and the one
    comparator, an unsigned maximum, serves both. Either way every NaN is then given the greatest
    key (all ones), so it wins every comparison. :func:`_from_extreme_keys` maps them back.
    """
    bits = bits_of(values)
    keys = _key_from_bits(bits, fmt)
    if minimum:
        np.invert(keys, out=keys)   # in place: ``~`` of a rank-0 array is a numpy scalar
    if fmt.is_float:
        keys[_nan_mask(bits, fmt)] = np.iinfo(fmt.uint_dtype).max
    return keys


def _from_extreme_keys(keys, fmt, minimum=False):
    """Values of the keys :func:`_extreme_keys` made, a NaN as the canonical quiet NaN.

    On the minimum side a NaN's key (all ones) complements to the order key 0, whose bits are a
    NaN too, so :func:`from_order_key` canonicalises it like any other.
    """
    keys = np.asarray(keys).astype(fmt.uint_dtype)
    return from_order_key(~keys if minimum else keys, fmt)


def _least_key(fmt, minimum=False):
    """The least of the keys :func:`_extreme_keys` gives: the start of every reduction.

    The key of ``Format.lowest`` for the maximum side, the complemented key of the greatest
    element for the minimum side, so an empty reduction yields -inf / +inf, the integer minimum /
    maximum, False / True without a special case.
    """
    if minimum:
        return ~_key_from_bits(np.array(fmt.greatest, dtype=fmt.uint_dtype), fmt)[()]
    return _key_from_bits(np.array(fmt.lowest, dtype=fmt.uint_dtype), fmt)[()]


# Input checks (dtype sets, axes, flags, broadcasting) live in maxaccel.contract.checks, shared with
# the host driver so both refuse the same inputs with the same messages.


# --- the operators ------------------------------------------------------------------------------


def _elementwise_extreme(natives, fmt, shape, minimum):
    """Max (or, with ``minimum``, Min) of checked, broadcastable inputs, on their extreme keys."""
    result = np.empty(shape, dtype=fmt.uint_dtype)
    result[...] = _extreme_keys(natives[0], fmt, minimum)
    for values in natives[1:]:
        np.maximum(result, _extreme_keys(values, fmt, minimum), out=result)
    return _from_extreme_keys(result, fmt, minimum)


def _reduce_extreme(values, fmt, axes, keepdims, noop_with_empty_axes, minimum):
    """ReduceMax (or, with ``minimum``, ReduceMin) of checked arguments, on the extreme keys."""
    if not axes:
        if noop_with_empty_axes:
            return values.copy()
        axes = tuple(range(values.ndim))
    if keepdims:
        shape = tuple(1 if i in axes else n for i, n in enumerate(values.shape))
    else:
        shape = tuple(n for i, n in enumerate(values.shape) if i not in axes)
    keys = np.maximum.reduce(_extreme_keys(values, fmt, minimum), axis=axes, keepdims=keepdims,
                             initial=_least_key(fmt, minimum))
    return _from_extreme_keys(np.asarray(keys).reshape(shape), fmt, minimum)


def max(*arrays):  # noqa: A001 - the ONNX operator's name, as in the public API
    """ONNX ``Max``: the element-wise maximum of one or more tensors, with numpy broadcasting.

    Parameters
    ----------
    *arrays : array_like
        One or more tensors of the same dtype (float16, bfloat16, float32, float64, int8..int64,
        uint8..uint64; not bool, as in ONNX Max-13). Their shapes must be mutually broadcastable
        (ONNX multidirectional broadcasting, same as numpy); rank-0 tensors are allowed.

    Returns
    -------
    numpy.ndarray
        New array of the common dtype and the broadcast shape. Order and NaN rules as in the
        module docstring: ``max(+0, -0) == max(-0, +0) == +0``, any NaN operand gives the
        canonical quiet NaN (also with a single input).

    Raises
    ------
    TypeError
        No input; an unsupported dtype (the message lists the accepted ones); inputs of
        different dtypes (the message names them).
    ValueError
        Shapes that do not broadcast (the message names every input shape).
    """
    natives, fmt, shape = check_max(arrays)
    return _elementwise_extreme(natives, fmt, shape, minimum=False)


def reduce_max(data, axes=None, keepdims=True, noop_with_empty_axes=False):
    """ONNX ``ReduceMax`` (opset 18/20 semantics; the older attribute forms are special cases).

    Parameters
    ----------
    data : array_like
        Tensor of any supported dtype, bool included (ReduceMax-20: ``False < True``); int16 and
        uint16 are accepted too. Any rank, rank 0 included; zero-size dimensions are allowed.
    axes : None, int, sequence of int or 1-D integer array
        Axes to reduce, each in ``[-r, r-1]`` for rank ``r``, no axis twice (after negative
        axes are resolved). ``None`` or empty means "no axes given": see
        ``noop_with_empty_axes``.
    keepdims : bool or 0/1
        Keep reduced axes as size-1 dimensions (default, as in ONNX) or drop them.
    noop_with_empty_axes : bool or 0/1
        With no axes given: False (default) reduces over all axes; True returns a copy of
        ``data`` with its bits untouched (the ONNX identity: NaN payloads pass through).

    Returns
    -------
    numpy.ndarray
        New array of ``data``'s dtype. A reduction over an empty set of elements (a reduced axis
        of size 0) yields ``-inf``, the integer minimum or ``False``; a NaN anywhere in a reduced
        set yields the canonical quiet NaN, whatever its position.

    Raises
    ------
    TypeError
        Unsupported dtype; non-integer axes; a bad ``axes`` container.
    ValueError
        An axis out of range (the message names the axis and the rank); an axis named twice;
        ``keepdims`` or ``noop_with_empty_axes`` other than a bool or 0/1.
    """
    values, fmt, axes, keepdims, noop_with_empty_axes = check_reduce_max(
        data, axes, keepdims, noop_with_empty_axes)
    return _reduce_extreme(values, fmt, axes, keepdims, noop_with_empty_axes, minimum=False)


def global_max_pool(x):
    """ONNX ``GlobalMaxPool``: the maximum over all spatial positions of each (batch, channel).

    Parameters
    ----------
    x : array_like
        Tensor ``N x C x D1 x ... x Dn`` with ``n >= 1`` (rank >= 3), of dtype float16, bfloat16,
        float32 or float64. ONNX GlobalMaxPool is defined for float tensors only (bfloat16 from
        opset 22), so integer and bool tensors are refused; for them use
        ``reduce_max(x, axes=range(2, x.ndim))``, which gives what an integer GlobalMaxPool would.

    Returns
    -------
    numpy.ndarray
        New array ``N x C x 1 x ... x 1`` of ``x``'s dtype (same rank as ``x``). A channel with no
        spatial elements (some ``Di == 0``) yields ``-inf``; a channel containing any NaN yields
        the canonical quiet NaN; ``±0`` ties give ``+0`` unless every element is ``-0``.

    Raises
    ------
    TypeError
        Not a float dtype (the message lists the accepted ones).
    ValueError
        Rank below 3 (the message names the shape).
    """
    values, _ = check_global_max_pool(x)
    return reduce_max(values, axes=tuple(range(2, values.ndim)), keepdims=True)


# --- the minimum side and the positions ---------------------------------------------------------
# Min and ReduceMin are Max and ReduceMax on complemented keys; ArgMax and ArgMin are the position
# of the greatest extreme key. The input rules are the max family's (contract.checks), the
# messages naming the min-family operator.

def min(*arrays):  # noqa: A001 - the ONNX operator's name, as in the public API
    """ONNX ``Min``: the element-wise minimum of one or more tensors, with numpy broadcasting.

    Takes what :func:`max` takes (one or more tensors of one numeric dtype, not bool, as in ONNX
    Min-13; mutually broadcastable shapes, rank 0 allowed) and raises what it raises, the
    messages naming ``min()``.

    Returns
    -------
    numpy.ndarray
        New array of the common dtype and the broadcast shape: the IEEE 754-2019 ``minimum``,
        ``min(+0, -0) == min(-0, +0) == -0``; any NaN operand gives the canonical quiet NaN (also
        with a single input); integers in numeric order.
    """
    natives, fmt, shape = check_max(arrays, name="min")
    return _elementwise_extreme(natives, fmt, shape, minimum=True)


#: The name IEEE 754-2019 gives the operation; the same function as :func:`min`.
minimum = min


def reduce_min(data, axes=None, keepdims=True, noop_with_empty_axes=False):
    """ONNX ``ReduceMin`` (opset 18/20 semantics; the older attribute forms are special cases).

    Takes what :func:`reduce_max` takes (any dtype, bool included as in ReduceMin-20; the same
    ``axes``, ``keepdims`` and ``noop_with_empty_axes``) and raises what it raises, the messages
    naming ``reduce_min()``.

    Returns
    -------
    numpy.ndarray
        New array of ``data``'s dtype: the IEEE 754-2019 ``minimum`` of each reduced set (``-0``
        below ``+0``). An empty set yields ``+inf``, the integer maximum or ``True``; a NaN
        anywhere in a reduced set yields the canonical quiet NaN, whatever its position. With no
        axes and ``noop_with_empty_axes`` a copy of ``data``, its bits untouched.
    """
    values, fmt, axes, keepdims, noop_with_empty_axes = check_reduce_max(
        data, axes, keepdims, noop_with_empty_axes, name="reduce_min")
    return _reduce_extreme(values, fmt, axes, keepdims, noop_with_empty_axes, minimum=True)


def _arg_extreme(data, axis, keepdims, select_last_index, minimum, name):
    """ArgMax (or, with ``minimum``, ArgMin): the position of the greatest extreme key."""
    values, fmt, axis, keepdims, select_last_index, shape = check_arg(
        data, axis, keepdims, select_last_index, name)
    length = values.shape[axis]
    if length == 0:
        return np.zeros(shape, dtype=np.int64)   # an empty result: nothing to search
    keys = _extreme_keys(values, fmt, minimum)
    if select_last_index:
        keys = np.flip(keys, axis)
    # np.argmax on unsigned keys: integer comparisons, the first greatest key.
    positions = np.argmax(keys, axis=axis, keepdims=keepdims)
    if select_last_index:
        positions = (length - 1) - positions
    return np.array(positions, dtype=np.int64).reshape(shape)


def arg_max(data, axis=0, keepdims=True, select_last_index=False):
    """ONNX ``ArgMax`` (opsets 1 to 13): the position of the maximum along one axis.

    Parameters
    ----------
    data : array_like
        Tensor of any supported dtype (bool too, beyond ONNX ArgMax-13: ``False < True``), rank
        at least 1.
    axis : int
        The axis searched, in ``[-r, r-1]`` (default 0).
    keepdims : bool or 0/1
        Keep the searched axis as a size-1 dimension (default, as in ONNX) or drop it.
    select_last_index : bool or 0/1
        On ties, the last position instead of the first (ONNX ArgMax-12 on).

    Returns
    -------
    numpy.ndarray
        New int64 array: for each position of the other axes, the index along ``axis`` of the
        first (with ``select_last_index`` the last) element whose order key is the greatest. A
        NaN is the greatest element: with any NaN the index is that of the first (last) NaN,
        whatever its sign or payload; ``+0`` is above ``-0``, so ``[-0, +0]`` gives 1.

    Raises
    ------
    TypeError
        Unsupported dtype; ``axis`` not an integer.
    ValueError
        ``axis`` out of range (a rank-0 tensor has none); ``keepdims`` or ``select_last_index``
        other than a bool or 0/1; an empty ``axis`` while the result would have elements.
    """
    return _arg_extreme(data, axis, keepdims, select_last_index, minimum=False, name="arg_max")


def arg_min(data, axis=0, keepdims=True, select_last_index=False):
    """ONNX ``ArgMin`` (opsets 1 to 13): the position of the minimum along one axis.

    As :func:`arg_max` with the order reversed, except for NaN: a NaN is still the extreme, so
    with any NaN the index is that of the first (with ``select_last_index`` the last) NaN, as
    ``reduce_min`` of the same elements is NaN. ``-0`` is below ``+0``, so ``[+0, -0]`` gives 1.
    """
    return _arg_extreme(data, axis, keepdims, select_last_index, minimum=True, name="arg_min")


def _pool_axis(keys, inside, winners, axis, pool_axis, lowest):
    """One separable pass of :func:`max_pool`: the windows of one spatial axis.

    ``keys`` (order keys, NaN greatest), ``inside`` (the element is not padding) and
    ``winners`` (for each axis already pooled, the coordinate the winning key came from) all have
    the same shape. Returns them with ``axis`` replaced by the window axis. Taps are visited in
    increasing coordinate order and a tap replaces the best so far only if it is inside and either
    nothing inside was seen yet or its key is strictly greater: the first maximum wins.
    """
    shape = list(keys.shape)
    shape[axis] = pool_axis.out_size
    best = np.full(shape, lowest, dtype=keys.dtype)
    best_inside = np.zeros(shape, dtype=bool)
    track = winners is not None
    best_winners = [np.full(shape, -1, dtype=np.int64) for _ in winners] if track else []
    best_coordinate = np.full(shape, -1, dtype=np.int64)
    if pool_axis.size == 0:
        return best, best_inside, (best_winners + [best_coordinate] if track else None)
    taps, tap_inside = pool_axis.taps(), pool_axis.inside()
    view = [1] * len(shape)
    view[axis] = pool_axis.out_size
    for t in range(pool_axis.kernel):
        coordinate = np.clip(taps[:, t], 0, pool_axis.size - 1)
        key = np.take(keys, coordinate, axis=axis)
        here = np.take(inside, coordinate, axis=axis) & tap_inside[:, t].reshape(view)
        take = here & (~best_inside | (key > best))
        best = np.where(take, key, best)
        best_inside |= take
        if track:
            for mine, theirs in zip(best_winners, winners):
                np.copyto(mine, np.take(theirs, coordinate, axis=axis), where=take)
            np.copyto(best_coordinate, np.broadcast_to(taps[:, t].reshape(view), shape),
                      where=take)
    return best, best_inside, (best_winners + [best_coordinate] if track else None)


def max_pool(x, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode=False,
             auto_pad="NOTSET", storage_order=0, return_indices=False):
    """ONNX ``MaxPool`` (opsets 1 to 22): the maximum over each window, and optionally Indices.

    Parameters
    ----------
    x : array_like
        Tensor ``N x C x D1 x ... x Dn`` (``n >= 1``; ONNX models use 1 to 3) of any numeric
        dtype: float16, bfloat16, float32, float64 and (u)int8 as in MaxPool-22, and the other
        integer widths too. Not bool.
    kernel_shape : sequence of int
        Window size per spatial axis (required), each >= 1.
    strides, dilations : sequence of int, optional
        Per spatial axis, each >= 1; default 1.
    pads : sequence of int, optional
        ``[x1_begin, ..., xn_begin, x1_end, ..., xn_end]``, each >= 0; default 0. Only with
        ``auto_pad="NOTSET"`` (all-zero pads are accepted with the others).
    ceil_mode : bool or 0/1
        Output size by ceil instead of floor; a last window that would start in the right
        padding is dropped. No effect with ``auto_pad`` VALID or SAME_* (their sizes agree).
    auto_pad : str
        ``"NOTSET"`` (explicit ``pads``), ``"VALID"`` (no padding), ``"SAME_UPPER"`` or
        ``"SAME_LOWER"`` (``out = ceil(size / stride)``, padding from the dilated window).
    storage_order : 0 or 1
        How Indices number the spatial position: 0 row-major, 1 column-major (first spatial
        axis fastest). It does not change which element is chosen.
    return_indices : bool or 0/1
        Also return the ONNX ``Indices`` output.

    Returns
    -------
    numpy.ndarray or (numpy.ndarray, numpy.ndarray)
        ``y`` of ``x``'s dtype and shape ``N x C x O1 x ... x On``: the IEEE 754-2019 maximum of
        each window's input elements (padding never takes part): canonical quiet NaN if any
        is NaN, ``+0`` over ``-0``. With ``return_indices``, also int64 Indices of the same
        shape: ``(n * C + c) * D1 * ... * Dn`` plus the winner's spatial offset (row-major, or
        column-major with ``storage_order=1``). The winner is the first element, in row-major
        order of the window, whose order key equals the maximum (for a NaN window: the first
        NaN). A window holding padding only yields the least element of the dtype (``-inf``,
        the integer minimum) and index -1.

    Raises
    ------
    TypeError
        Unsupported dtype (bool); an attribute of the wrong type (the message names it).
    ValueError
        Rank below 3; an attribute of the wrong length or range; ``pads`` with ``auto_pad``;
        a window that does not fit the padded input. Messages name the attribute.
    """
    values, fmt, geometry, return_indices = check_max_pool(
        x, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad, storage_order,
        return_indices)
    return pool_windows(values, fmt, geometry, return_indices)


def pool_windows(values, fmt, geometry, return_indices=False):
    """:func:`max_pool` of checked arguments: ``values`` (native byte order, of ``fmt``) pooled
    over the windows of a resolved :class:`~maxaccel.contract.pooling.PoolGeometry` (which
    may have been made from a device's window configuration, see
    :func:`~maxaccel.contract.pooling.window_geometry`)."""
    keys = _extreme_keys(values, fmt)
    inside = np.ones(keys.shape, dtype=bool)
    winners = [] if return_indices else None
    # Innermost axis first: the outer passes then pick the first slab holding the maximum, so
    # the winner is the first maximum in row-major order of the window.
    for i in reversed(range(len(geometry.axes))):
        keys, inside, winners = _pool_axis(keys, inside, winners, 2 + i, geometry.axes[i],
                                           _least_key(fmt))
    y = from_order_key(keys, fmt)
    if not return_indices:
        return y
    winners.reverse()   # one coordinate per spatial axis, in axis order
    n, c = geometry.input_shape[:2]
    channel = np.arange(n * c, dtype=np.int64).reshape((n, c) + (1,) * len(geometry.axes))
    indices = geometry.indices(channel, winners)
    return y, np.where(inside, indices, np.int64(-1))


# --- checking results ---------------------------------------------------------------------------


def _element_text(bits_value, dtype):
    """``0x...`` and, for numbers, the value numpy prints (for messages)."""
    dtype = np.dtype(dtype).newbyteorder("=")
    text = f"0x{int(bits_value):0{2 * dtype.itemsize}x}"
    try:
        value = np.array(bits_value, dtype=f"u{dtype.itemsize}").view(dtype)[()]
        return f"{text} ({value!r})"
    except (TypeError, ValueError):
        return text


def assert_same_bits(actual, expected, what=""):
    """Assert that ``actual`` and ``expected`` have the same dtype, shape and every bit.

    Parameters
    ----------
    actual, expected : array_like
        Compared as numpy arrays (a numpy scalar counts as a rank-0 array). Byte order is part of
        the dtype: ``>f4`` and ``<f4`` differ.
    what : str
        What is being compared, for the message.

    Raises
    ------
    AssertionError
        On a different dtype or shape, or on differing bits; the message names the first
        differing index, both values in hex, and how many elements differ.
    """
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    prefix = f"{what}: " if what else ""
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{prefix}dtype {actual.dtype} != expected {expected.dtype}")
    if actual.shape != expected.shape:
        raise AssertionError(
            f"{prefix}shape {shape_text(actual.shape)} != expected {shape_text(expected.shape)}"
        )
    itemsize = actual.dtype.itemsize
    if itemsize not in (1, 2, 4, 8):
        raise AssertionError(f"{prefix}cannot compare bits of dtype {actual.dtype}")
    unsigned = np.dtype(f"u{itemsize}")
    if actual.dtype.byteorder == ">":
        unsigned = unsigned.newbyteorder(">")
    actual_bits = actual.view(unsigned)
    expected_bits = expected.view(unsigned)
    differ = actual_bits != expected_bits
    if differ.any():
        index = tuple(int(i) for i in np.argwhere(differ)[0])
        raise AssertionError(
            f"{prefix}{int(differ.sum())} of {differ.size} elements differ; first at index "
            f"{index}: got {_element_text(actual_bits[index], actual.dtype)}, "
            f"expected {_element_text(expected_bits[index], expected.dtype)}"
        )


# The dtype table must not silently grow a format the model cannot handle.
assert {f.bits for f in FORMATS.values()} <= {8, 16, 32, 64}
