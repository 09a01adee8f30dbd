"""Bit-exact comparison of results: :func:`assert_bits_equal`."""

import numpy as np

from maxaccel.contract.dtypes import format_of, supported_dtype_names
from maxaccel.sim.reference import assert_same_bits

__all__ = ["assert_bits_equal"]


def assert_bits_equal(actual, expected):
    """Assert that ``actual`` and ``expected`` have the same dtype, shape and every bit.

    This is the contract maxaccel keeps on every path: ``-0.0`` and ``+0.0`` differ, and so do
    two NaNs of different sign or payload. ``numpy.testing.assert_array_equal`` passes both.

    Parameters
    ----------
    actual, expected : numpy.ndarray, numpy scalar, or a tuple or list of them
        Arrays of a dtype maxaccel supports (float16, bfloat16, float32, float64, the signed
        and unsigned integers of 8 to 64 bits, bool); a numpy scalar counts as a rank-0
        array. Byte order is part of the dtype (``>f4`` and ``<f4`` differ). Tuples and lists
        of arrays (a ``(y, indices)`` pair of ``max_pool``, the outputs of a session's
        ``run``) are compared item by item; a tuple and a list of the same arrays are equal.

    Raises
    ------
    AssertionError
        A different dtype, shape or number of items, or differing bits. For bits the message
        says how many elements differ and names the first (in C order) with both values and
        their bits in hex; for an item of a sequence it starts with ``item i:``.
    TypeError
        An argument that is not a numpy array (a Python float has no width: give it a dtype
        with ``numpy.asarray(x, dtype)``), or a dtype maxaccel does not support.

    Examples
    --------
    >>> import numpy as np
    >>> from maxaccel.testing import assert_bits_equal
    >>> assert_bits_equal(np.float32([1.0, np.nan]), np.float32([1.0, np.nan]))
    >>> np.testing.assert_array_equal(np.float32([-0.0]), np.float32([0.0]))   # passes
    >>> assert_bits_equal(np.float32([1.0, -0.0]), np.float32([1.0, 0.0]))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    AssertionError: 1 of 2 elements differ; first at index (1,): got 0x80000000 (...), ...
    """
    __tracebackhide__ = True    # pytest shows the caller's line, not this function's
    actual_items, expected_items = _is_sequence(actual), _is_sequence(expected)
    if not actual_items:
        _checked(actual, "actual", "")
    if not expected_items:
        _checked(expected, "expected", "")
    if actual_items != expected_items:
        raise AssertionError(f"got {_kind(actual)}, expected {_kind(expected)}")
    if not actual_items:
        _assert_array_bits(actual, expected, "")
        return
    if len(actual) != len(expected):
        raise AssertionError(f"got {_kind(actual)}, expected {_kind(expected)}")
    for index, (got, want) in enumerate(zip(actual, expected)):
        _assert_array_bits(got, want, f"item {index}")


def _is_sequence(value):
    """Whether ``value`` is a tuple or list of arrays (a list of numbers is not: it is refused
    as an array without a dtype)."""
    return (isinstance(value, (tuple, list))
            and all(isinstance(item, (np.ndarray, np.generic)) for item in value))


def _kind(value):
    """What ``value`` is, for the message of a mismatch of sequence against array."""
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} item{'s' * (len(value) != 1)}"
    return "one array"


def _checked(value, role, what):
    """``value`` as an array, if it is a numpy array or scalar of a supported dtype."""
    where = f"{what}: " if what else ""
    if not isinstance(value, (np.ndarray, np.generic)):
        raise TypeError(f"{where}{role} is a {type(value).__name__}, not a numpy array (or a "
                        f"tuple or list of them); "
                        f"give it a dtype with numpy.asarray(value, dtype)")
    try:
        format_of(value.dtype)
    except TypeError:
        raise TypeError(f"{where}{role} has dtype {value.dtype}, which maxaccel does not "
                        f"support; supported: {supported_dtype_names()}") from None
    return np.asarray(value)


def _assert_array_bits(actual, expected, what):
    __tracebackhide__ = True
    assert_same_bits(_checked(actual, "actual", what), _checked(expected, "expected", what), what)
