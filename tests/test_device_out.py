"""``out`` on every :class:`~maxaccel.host.device.Device` operation, as numpy's: the result's
bits written into it and it returned, strided or not, sharing memory with the input on every
route, and an ``out`` that does not fit refused before anything is sent.

On the compiled board (the NiteFury's core), as it is and with frames of 512 bytes: then the
routes that write their results into ``out`` as they come (Max's and Min's passes, MaxPool's
tiles) go in several requests, and results written too early would overwrite input still to
be read.
"""

import dataclasses
import math

import numpy as np
import pytest

from maxaccel.contract.dtypes import FORMATS, DType
from maxaccel.contract.wire import Command
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import random_values

F16, F32, I64 = FORMATS[DType.FLOAT16], FORMATS[DType.FLOAT], FORMATS[DType.INT64]


@dataclasses.dataclass(frozen=True)
class Case:
    """One operation on one route: ``call(device, inputs, out)`` against ``want(inputs)``
    (a tuple of results) for inputs of ``shapes`` in ``fmt``; the first input is the one an
    overlapping ``out`` shares memory with."""

    name: str
    call: object
    want: object
    shapes: tuple
    fmt: object = F32
    route: object = None     # the route ``last_max_pool_route`` names after the call

    def __str__(self):
        return self.name


#: A pool the unit takes in batches of tiles of several shapes in frames of 512 bytes.
POOL = dict(kernel_shape=[2, 3], pads=[0, 1, 1, 1])


def _pool(**kwargs):
    return (lambda d, xs, out: d.max_pool(*xs, **POOL, out=out, **kwargs),
            lambda xs: _results(reference.max_pool(
                *xs, **POOL, return_indices=kwargs.get("return_indices", False))))


def _results(got):
    return got if isinstance(got, tuple) else (got,)


CASES = [
    Case("max-same-shape", lambda d, xs, out: d.max(*xs, out=out),
         lambda xs: (reference.max(*xs),), ((6, 10), (6, 10), (6, 10))),
    Case("max-one-operand", lambda d, xs, out: d.max(*xs, out=out),
         lambda xs: (reference.max(*xs),), ((2, 3, 4),), F16),
    Case("max-broadcast", lambda d, xs, out: d.max(*xs, out=out),
         lambda xs: (reference.max(*xs),), ((16, 12), (12,), (16, 1))),
    Case("min-broadcast", lambda d, xs, out: d.min(*xs, out=out),
         lambda xs: (reference.min(*xs),), ((6, 4, 12), (1, 12)), F16),
    Case("reduce_max-runs", lambda d, xs, out: d.reduce_max(*xs, axes=[2], out=out),
         lambda xs: (reference.reduce_max(*xs, axes=[2]),), ((2, 3, 4),)),
    Case("reduce_min-channels-last", lambda d, xs, out: d.reduce_min(*xs, axes=[1, 2], out=out),
         lambda xs: (reference.reduce_min(*xs, axes=[1, 2]),), ((1, 3, 3, 4),), F16),
    Case("reduce_max-no-axes-noop", lambda d, xs, out: d.reduce_max(
        *xs, axes=[], noop_with_empty_axes=True, out=out),
         lambda xs: (reference.reduce_max(*xs, axes=[], noop_with_empty_axes=True),),
         ((2, 5),)),
    Case("reduce_min-all", lambda d, xs, out: d.reduce_min(*xs, keepdims=False, out=out),
         lambda xs: (reference.reduce_min(*xs, keepdims=False),), ((3, 4),), I64),
    Case("arg_max", lambda d, xs, out: d.arg_max(*xs, axis=1, out=out),
         lambda xs: (reference.arg_max(*xs, axis=1),), ((2, 3, 4),), I64),
    Case("arg_min-last", lambda d, xs, out: d.arg_min(*xs, axis=2, select_last_index=True,
                                                      out=out),
         lambda xs: (reference.arg_min(*xs, axis=2, select_last_index=True),), ((2, 3, 5),)),
    Case("global_max_pool", lambda d, xs, out: d.global_max_pool(*xs, out=out),
         lambda xs: (reference.global_max_pool(*xs),), ((1, 2, 3, 4),)),
    Case("global_max_pool-channels-last",
         lambda d, xs, out: d.global_max_pool(*xs, channels_last=True, out=out),
         lambda xs: (reference.reduce_max(*xs, axes=[1, 2]),), ((1, 3, 4, 2),), F16),
    Case("max_pool-MAX_POOL", *_pool(), ((1, 1, 6, 40),), route=Command.MAX_POOL),
    Case("max_pool-MAX_POOL-indices", *_pool(return_indices=True), ((1, 1, 6, 40),),
         route=Command.MAX_POOL),
    Case("max_pool-REDUCE-indices", *_pool(return_indices=True, route=Command.REDUCE),
         ((1, 1, 6, 40),), route=Command.REDUCE),
]


@pytest.fixture(scope="module", params=["frames-1MiB", "frames-512B"])
def device(request, compiled_device):
    if request.param == "frames-1MiB":
        yield compiled_device
        return
    from maxaccel.host.device import open_device
    with open_device("verilator", max_frame_bytes=512) as dev:
        yield dev


def inputs_of(case, seed, edge_fraction=0.3):
    rng = np.random.default_rng(seed)
    return [random_values(rng, case.fmt, shape, edge_fraction) for shape in case.shapes]


def as_out(rooms):
    """numpy's ``out`` for ``rooms``: the one array, or a tuple of them."""
    return rooms[0] if len(rooms) == 1 else tuple(rooms)


def check_results(case, got, rooms, want):
    """``got`` is ``rooms`` (one array, or their tuple), holding ``want``'s bits."""
    got = _results(got)
    assert len(got) == len(rooms) == len(want)
    for result, room, expected in zip(got, rooms, want):
        assert result is room, case.name
        assert_same_bits(room, expected, case.name)


def strided(rng, shape, dtype):
    """A view of ``shape`` in a larger array of random bits (every other element of each
    axis, the axes reversed in memory): ``(view, the larger array, where it is not the
    view)``."""
    whole = rng.integers(0, 256, (2 * math.prod(shape) + 8) * np.dtype(dtype).itemsize,
                         np.uint8).view(dtype)
    outside = np.ones(whole.shape, bool)
    span = 2 * math.prod(shape)
    view = whole[:span:2].reshape(shape[::-1]).T
    outside[:span:2] = False
    return view, whole, outside


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_out_gets_the_results_bits(device, case, layout):
    """The golden model's bits land in ``out`` (contiguous, or a strided view into a larger
    array whose other elements stay as they were), and ``out`` is what is returned."""
    xs = inputs_of(case, len(case.name))
    want = case.want(xs)
    rng = np.random.default_rng(3)
    rooms, wholes = [], []
    for expected in want:
        if layout == "contiguous":
            rooms.append(np.empty_like(expected))
        else:
            view, whole, outside = strided(rng, expected.shape, expected.dtype)
            rooms.append(view)
            wholes.append((whole, whole.copy(), outside))
    got = case.call(device, xs, as_out(rooms))
    check_results(case, got, rooms, want)
    for whole, before, outside in wholes:
        assert_same_bits(whole[outside], before[outside], f"{case.name}: outside out")
    if case.route is not None:
        assert device.last_max_pool_route == case.route


def overlapping(case, kind, seed):
    """Inputs whose first one and ``out`` for the first result lie in one buffer of the
    case's dtype: both contiguous from its start (``same-start``), ``out`` from the middle
    of the input (``half-ahead``: what is written lands on input not yet read), or ``out`` a
    strided view starting one element after the input along every axis longer than one
    (``shifted-view``)."""
    xs = inputs_of(case, seed, edge_fraction=0.05)  # few NaNs: each result shows its inputs
    first, shape = xs[0], case.want(xs)[0].shape
    rng = np.random.default_rng(seed + 1)
    if kind != "shifted-view":
        start = first.size // 2 if kind == "half-ahead" else 0
        size = max(first.size, start + math.prod(shape))
        buffer = random_values(rng, case.fmt, (size,), edge_fraction=0.05)
        x = buffer[:first.size].reshape(first.shape)
        room = buffer[start:start + math.prod(shape)].reshape(shape)
    else:
        padded = (1,) * (first.ndim - len(shape)) + shape
        shifts = [int(n > 1) for n in first.shape]
        buffer = random_values(rng, case.fmt, tuple(
            max(a, b + s) for a, b, s in zip(first.shape, padded, shifts)), edge_fraction=0.05)
        x = buffer[tuple(slice(0, n) for n in first.shape)]
        room = buffer[tuple(slice(s, s + n) for s, n in zip(shifts, padded))].reshape(shape)
    x[...] = first
    return [x] + xs[1:], room


@pytest.mark.parametrize("kind", ["same-start", "half-ahead", "shifted-view"])
@pytest.mark.parametrize("case", [c for c in CASES if not c.name.startswith("arg_")
                                  or c.fmt is I64], ids=str)
def test_out_sharing_memory_with_the_input(device, case, kind):
    """``out`` in the input's own memory: the golden model's bits of the input as it was,
    as numpy's ``out`` gives, on every route, whatever the route reads after it writes."""
    xs, room = overlapping(case, kind, 40 + len(kind))
    assert np.shares_memory(room, xs[0])
    want = case.want([x.copy() for x in xs])
    rooms = [room] + [np.empty_like(w) for w in want[1:]]
    got = case.call(device, xs, as_out(rooms))
    check_results(case, got, rooms, want)


def bad_outs(case, want):
    """``(out, exception, words of its message)`` that do not fit ``want`` (the results)."""
    first = want[0]
    other = np.float64 if first.dtype != np.float64 else np.float32
    dtype_words = "positions must be int64" if case.name.startswith("arg_") else \
        f"must be {first.dtype}"
    read_only = np.empty_like(first)
    read_only.flags.writeable = False
    bad = [(first.tolist(), TypeError, "numpy.ndarray, not"),
           (np.empty(first.shape, other), TypeError, dtype_words),
           (np.empty(first.shape, first.dtype.newbyteorder(">")), TypeError,
            "native byte order"),
           (np.empty(first.shape + (2,), first.dtype), ValueError, "shape"),
           (read_only, ValueError, "read-only"),
           ((np.empty_like(first),) * (len(want) + 1), ValueError, "tuple of")]
    if len(want) > 1:
        bad.append(((np.empty_like(first), np.empty(want[1].shape, np.int32)), TypeError,
                    "positions must be int64"))
    return bad


@pytest.mark.parametrize("case", CASES, ids=str)
def test_bad_out_is_refused_before_anything_is_sent(compiled_device, case):
    """Wrong shape or dtype, foreign byte order, read-only, not an array, a tuple of the
    wrong length: a TypeError or ValueError naming it, and not one byte sent."""
    xs = inputs_of(case, 7)
    want = case.want(xs)
    link = compiled_device.link
    requests, written = link.requests, link.bytes_written
    for out, error, words in bad_outs(case, want):
        with pytest.raises(error, match=words):
            case.call(compiled_device, xs, out)
    assert (link.requests, link.bytes_written) == (requests, written)
