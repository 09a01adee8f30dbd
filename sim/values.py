"""Test values: the edge cases of every element format, and random tensors mixed with them.

Used by every gateware test, the golden-model tests and the benchmarks. numpy only.
"""

import numpy as np

from maxaccel.contract.dtypes import Format, format_of

__all__ = ["edge_bits", "random_values"]


def _as_format(fmt):
    return fmt if isinstance(fmt, Format) else format_of(fmt)


def _float_edges(fmt):
    sign = fmt.sign_mask
    mantissa_bits = fmt.mantissa_bits
    quiet = 1 << (mantissa_bits - 1)
    mantissa_all = (1 << mantissa_bits) - 1
    infinity = ((1 << fmt.exponent_bits) - 1) << mantissa_bits
    one = ((1 << (fmt.exponent_bits - 1)) - 1) << mantissa_bits
    magnitudes = [
        0,                                   # zero
        1,                                   # least subnormal
        2,
        mantissa_all,                        # greatest subnormal
        1 << mantissa_bits,                  # least normal
        (1 << mantissa_bits) | 1,
        one - 1,                             # just below 1
        one,                                 # 1
        one + 1,                             # just above 1
        infinity - 1,                        # greatest finite
        infinity,                            # infinity
        infinity | quiet,                    # canonical quiet NaN
        infinity | quiet | 1,                # quiet NaN with a payload
        infinity | mantissa_all,             # quiet NaN, all payload bits
        infinity | 1,                        # signalling NaN, least payload
        infinity | (quiet >> 1),             # signalling NaN, top payload bit
        infinity | (quiet - 1),              # signalling NaN, all payload bits
    ]
    patterns = [m for m in magnitudes] + [sign | m for m in magnitudes]
    ordinary = np.array([1.5, -2.0, 0.1, -3.25, 100.0, -0.5], dtype=np.float64)
    patterns += [int(b) for b in ordinary.astype(fmt.numpy_dtype).view(fmt.uint_dtype)]
    return patterns


def _integer_edges(fmt):
    if fmt.kind == "bool":
        return [0, 1]
    mask = (1 << fmt.bits) - 1
    if fmt.kind == "signed":
        lo, hi = -(1 << (fmt.bits - 1)), (1 << (fmt.bits - 1)) - 1
        numbers = [lo, lo + 1, -2, -1, 0, 1, 2, hi - 1, hi, 100, -100]
    else:
        half = 1 << (fmt.bits - 1)
        numbers = [0, 1, 2, half - 1, half, half + 1, mask - 1, mask, 100]
    return [n & mask for n in numbers]


def edge_bits(fmt):
    """The edge values of a format, as an array of its dtype (no two with the same bits).

    Parameters
    ----------
    fmt : Format, numpy dtype, DType or ONNX code
        The element format (anything ``format_of`` accepts).

    Returns
    -------
    numpy.ndarray
        One-dimensional, of ``fmt``'s dtype. Floats: both signs of zero, least/greatest
        subnormal, least normal, the neighbours of 1, greatest finite, infinity, quiet NaNs
        (canonical, with a payload, all payload bits) and signalling NaNs (least payload, top
        payload bit, all payload bits), plus a few ordinary values. Signed integers: minimum,
        minimum+1, -2, -1, 0, 1, 2, maximum-1, maximum, ±100. Unsigned: 0, 1, 2, the values
        around the top bit, maximum-1, maximum, 100. bool: False, True.
    """
    fmt = _as_format(fmt)
    patterns = _float_edges(fmt) if fmt.is_float else _integer_edges(fmt)
    bits = np.array(list(dict.fromkeys(patterns)), dtype=fmt.uint_dtype)
    if fmt.kind == "bool":
        return bits != 0
    return bits.view(fmt.numpy_dtype)


def random_values(rng, fmt, shape, edge_fraction=0.25):
    """Random tensor: uniformly random bit patterns, a fraction of them replaced by edge values.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of randomness (the result depends only on its state and the arguments).
    fmt : Format, numpy dtype, DType or ONNX code
        The element format.
    shape : int or tuple of int
        Shape of the result (``()`` for a rank-0 tensor).
    edge_fraction : float
        Probability, per element, of an edge value from :func:`edge_bits` instead of a random
        pattern. Note that about half the float edge values are NaNs: for long reductions a
        smaller fraction keeps NaN from deciding every result.

    Returns
    -------
    numpy.ndarray
        New array of ``fmt``'s dtype and the given shape. Random float patterns include every
        class (NaNs of both signs and any payload, infinities, subnormals, zeros) at their
        natural rates.
    """
    fmt = _as_format(fmt)
    if not 0.0 <= edge_fraction <= 1.0:
        raise ValueError(f"edge_fraction must be within [0, 1], got {edge_fraction}")
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    top = 1 if fmt.kind == "bool" else np.iinfo(fmt.uint_dtype).max
    bits = rng.integers(0, top, size=shape, dtype=fmt.uint_dtype, endpoint=True)
    edges = edge_bits(fmt)
    edges = edges.astype(np.uint8) if fmt.kind == "bool" else edges.view(fmt.uint_dtype)
    use_edge = rng.random(shape) < edge_fraction
    bits[use_edge] = rng.choice(edges, size=int(np.count_nonzero(use_edge)))
    if fmt.kind == "bool":
        return np.asarray(bits != 0)
    return bits.view(fmt.numpy_dtype)
