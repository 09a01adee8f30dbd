"""Input checks shared by the golden model and the host driver: one message per mistake.

``maxaccel.sim.reference`` (the golden model) and :class:`maxaccel.host.device.Device` refuse
the same inputs with the same exceptions and messages, and the driver does so before anything is
sent to a board. Pure numpy; never imports amaranth.

Each ``check_*`` function takes the operator's arguments as the public API does and returns them
normalised: native-byte-order arrays with their :class:`~maxaccel.contract.dtypes.Format`, sorted
non-negative axes, bools.
"""

import operator

import numpy as np

from maxaccel.contract.dtypes import FORMATS, format_of

__all__ = [
    "MAX_DTYPES", "REDUCE_MAX_DTYPES", "GLOBAL_MAX_POOL_DTYPES",
    "to_native", "shape_text", "check_dtype", "normalize_axes", "check_flag",
    "check_max", "check_reduce_max", "check_global_max_pool",
]

#: Element types accepted by ``max`` (ONNX Max-13: every numeric type, no bool).
MAX_DTYPES = frozenset(d for d, f in FORMATS.items() if f.kind != "bool")
#: Element types accepted by ``reduce_max`` (ReduceMax-20 plus int16/uint16).
REDUCE_MAX_DTYPES = frozenset(FORMATS)
#: Element types accepted by ``global_max_pool`` (ONNX GlobalMaxPool-22: floats only).
GLOBAL_MAX_POOL_DTYPES = frozenset(d for d, f in FORMATS.items() if f.is_float)


def to_native(array):
    """``array`` as a native-byte-order ndarray of its supported dtype (bits untouched).

    Returns
    -------
    (numpy.ndarray, Format)

    Raises
    ------
    TypeError
        If the dtype is not supported (the message lists the supported ones).
    """
    array = np.asarray(array)
    fmt = format_of(array.dtype)
    if array.dtype.byteorder == ">":
        # Swap bytes as integers: a float cast could touch NaN payloads.
        swapped = array.view(fmt.uint_dtype.newbyteorder(">")).astype(fmt.uint_dtype)
        return swapped.view(fmt.numpy_dtype), fmt
    return array, fmt


def shape_text(shape):
    """A shape as Python prints a tuple of ints: ``(2, 3)``, ``(4,)``, ``()``."""
    return str(tuple(int(n) for n in shape))


def _accepted_names(dtypes):
    return ", ".join(str(FORMATS[d].numpy_dtype) for d in FORMATS if d in dtypes)


def check_dtype(fmt, allowed, operator_name, hint=""):
    """Raise TypeError naming the operator and the accepted dtypes if ``fmt`` is not allowed."""
    if fmt.dtype not in allowed:
        raise TypeError(
            f"{operator_name} does not accept {fmt.numpy_dtype}; "
            f"accepted: {_accepted_names(allowed)}{hint}"
        )


def normalize_axes(axes, rank):
    """``axes`` (None, int, sequence or integer array) as a sorted tuple of non-negative axes.

    None stays None. Raises TypeError for non-integers, ValueError for an axis out of
    ``[-rank, rank-1]`` or named twice.
    """
    if axes is None:
        return None
    if isinstance(axes, np.ndarray):
        if axes.ndim > 1:
            raise ValueError(f"axes must be one-dimensional, got an array of shape {axes.shape}")
        if axes.size and not np.issubdtype(axes.dtype, np.integer):
            raise TypeError(f"axes must be integers, got an array of {axes.dtype}")
        axes = axes.reshape(-1).tolist()
    elif isinstance(axes, (int, np.integer)) and not isinstance(axes, (bool, np.bool_)):
        axes = [axes]
    try:
        axes = list(axes)
    except TypeError:
        raise TypeError(f"axes must be None, an integer or a sequence of integers, got {axes!r}") \
            from None
    checked = []
    for axis in axes:
        if isinstance(axis, (bool, np.bool_)):
            raise TypeError(f"axes must be integers, got {axis!r}")
        try:
            checked.append(operator.index(axis))
        except TypeError:
            raise TypeError(f"axes must be integers, got {axis!r}") from None
    normalized = []
    for axis in checked:
        if not -rank <= axis < rank:
            accepted = f"accepted: [{-rank}, {rank - 1}]" if rank else "a rank-0 tensor has no axes"
            raise ValueError(
                f"axis {axis} is out of range for a tensor of rank {rank} ({accepted})"
            )
        normalized.append(axis % rank)
    repeated = sorted({a for a in normalized if normalized.count(a) > 1})
    if repeated:
        raise ValueError(
            f"axes {checked} name axis {', '.join(map(str, repeated))} more than once "
            f"(rank {rank})"
        )
    return tuple(sorted(normalized))


def check_flag(value, name):
    """``value`` as a bool; ValueError unless it is a bool or 0/1."""
    if isinstance(value, (bool, np.bool_)) or value in (0, 1):
        return bool(value)
    raise ValueError(f"{name} must be a bool or 0/1, got {value!r}")


def check_out(out, shape, fmt, name):
    """Check ``out``, the array an operator writes its result into (numpy's ``out``): an
    ndarray of the result's ``shape`` and ``fmt``'s dtype in native byte order, writeable,
    strided or not. Raises TypeError or ValueError naming the problem (before anything is
    sent to a device)."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name}: out must be a numpy.ndarray, not {type(out).__name__}")
    if out.dtype != fmt.numpy_dtype:
        raise TypeError(f"{name}: out must be {fmt.numpy_dtype} (native byte order) like the "
                        f"input, got {out.dtype.str}")
    if out.shape != tuple(shape):
        raise ValueError(f"{name}: out must have the result's shape {shape_text(shape)}, "
                         f"got {shape_text(out.shape)}")
    if not out.flags.writeable:
        raise ValueError(f"{name}: out is read-only")
    return out


def _onnx_name(name):
    """The ONNX operator a function of the public API stands for: ``reduce_min`` -> ReduceMin."""
    return "".join(word.capitalize() for word in name.split("_"))


def check_max(arrays, name="max"):
    """Check the inputs of ``max(*arrays)``, or of its twin ``min`` (``name``, which the
    messages name; the rules are the same).

    Returns
    -------
    (list of numpy.ndarray, Format, tuple)
        The inputs in native byte order, their common format, the broadcast output shape.

    Raises
    ------
    TypeError
        No input; an unsupported dtype (the message lists the accepted ones); inputs of
        different dtypes (the message names them).
    ValueError
        Shapes that do not broadcast (the message names every input shape).
    """
    onnx = _onnx_name(name)
    if not arrays:
        raise TypeError(f"{name}() needs at least one input tensor (ONNX {onnx} takes 1 to "
                        f"2^31-1)")
    natives = [to_native(a) for a in arrays]
    formats = [fmt for _, fmt in natives]
    if any(fmt != formats[0] for fmt in formats):
        names = ", ".join(str(fmt.numpy_dtype) for fmt in formats)
        raise TypeError(f"{name}() inputs must all have the same dtype, got {names}")
    fmt = formats[0]
    check_dtype(fmt, MAX_DTYPES, f"{name}() (ONNX {onnx})")
    shapes = [values.shape for values, _ in natives]
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        raise ValueError(
            f"{name}() input shapes do not broadcast: {', '.join(map(shape_text, shapes))}"
        ) from None
    return [values for values, _ in natives], fmt, shape


def check_reduce_max(data, axes, keepdims, noop_with_empty_axes, name="reduce_max"):
    """Check the arguments of ``reduce_max``, or of its twin ``reduce_min`` (``name``, which
    the messages name; the rules are the same).

    Returns
    -------
    (numpy.ndarray, Format, tuple or None, bool, bool)
        ``data`` in native byte order, its format, the sorted non-negative axes (None or empty
        when no axes are given), ``keepdims`` and ``noop_with_empty_axes`` as bools.
    """
    values, fmt = to_native(data)
    check_dtype(fmt, REDUCE_MAX_DTYPES, f"{name}() (ONNX {_onnx_name(name)})")
    axes = normalize_axes(axes, values.ndim)
    keepdims = check_flag(keepdims, "keepdims")
    noop_with_empty_axes = check_flag(noop_with_empty_axes, "noop_with_empty_axes")
    return values, fmt, axes, keepdims, noop_with_empty_axes


def check_arg(data, axis, keepdims, select_last_index, name):
    """Check the arguments of ``arg_max`` / ``arg_min`` (``name``, which the messages name).

    Returns
    -------
    (numpy.ndarray, Format, int, bool, bool, tuple)
        ``data`` in native byte order, its format, the non-negative axis, ``keepdims`` and
        ``select_last_index`` as bools, and the result's shape.

    Raises
    ------
    TypeError
        Unsupported dtype; ``axis`` not an integer.
    ValueError
        ``axis`` out of range; a flag other than a bool or 0/1; an empty ``axis`` while the
        result would have elements (there is no position to return).
    """
    values, fmt = to_native(data)
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an integer, got {axis!r}")
    (axis,) = normalize_axes(axis, values.ndim)
    keepdims = check_flag(keepdims, "keepdims")
    select_last_index = check_flag(select_last_index, "select_last_index")
    shape = values.shape[:axis] + ((1,) if keepdims else ()) + values.shape[axis + 1:]
    if values.shape[axis] == 0 and 0 not in shape:
        raise ValueError(f"{name}() has no position to return: axis {axis} of the input "
                         f"{shape_text(values.shape)} is empty")
    return values, fmt, axis, keepdims, select_last_index, shape


def check_global_max_pool(x):
    """Check the input of ``global_max_pool``: a float tensor of rank >= 3.

    Returns
    -------
    (numpy.ndarray, Format)
    """
    values, fmt = to_native(x)
    check_dtype(
        fmt, GLOBAL_MAX_POOL_DTYPES, "global_max_pool() (ONNX GlobalMaxPool, float types only)",
        hint="; for integer tensors use reduce_max(x, axes=range(2, x.ndim))",
    )
    if values.ndim < 3:
        raise ValueError(
            f"global_max_pool() needs a tensor of rank >= 3 (N x C x D1 ... Dn), "
            f"got rank {values.ndim} with shape {shape_text(values.shape)}"
        )
    return values, fmt
