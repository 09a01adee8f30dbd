"""A windowed pooling unit's axes and a Python oracle of its outputs, for the window unit's
tests and the window lanes'."""

import itertools
import zlib
from dataclasses import dataclass

import numpy as np

from maxaccel.contract.dtypes import format_of
from maxaccel.sim import reference


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


@dataclass(frozen=True)
class Axis:
    """One spatial axis as the unit is given it."""

    size: int
    pad: int
    out: int
    kernel: int = 1
    stride: int = 1
    dilation: int = 1

    @property
    def end(self):
        """The last tap of the last window (may lie in the right padding)."""
        return (self.out - 1) * self.stride - self.pad + (self.kernel - 1) * self.dilation

    @property
    def extra(self):
        """Virtual steps the unit adds per image of this axis."""
        return max(0, self.end - self.size + 1)

    @property
    def overlaps(self):
        """The virtual steps take the next image's first steps instead when it is there: none
        of its windows ends during them (its first ends ``(kernel - 1) * dilation - pad``
        steps after its first) and it is longer than they are."""
        first_gap = (self.kernel - 1) * self.dilation - self.pad
        return 0 < self.extra <= first_gap and self.extra < self.size

    def taps(self, o):
        return [o * self.stride - self.pad + j * self.dilation for j in range(self.kernel)]


UNIT = Axis(1, 0, 1)


def axis(size, kernel, stride=1, dilation=1, pads=(0, 0), ceil=False):
    """An Axis from ONNX-style attributes (explicit pads, ceil_mode): the output length by the
    spec's formula, a ceil-mode window starting in the right padding dropped."""
    extent = (kernel - 1) * dilation + 1
    span = size + pads[0] + pads[1] - extent
    out = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (out - 1) * stride >= size + pads[0]:
        out -= 1
    return Axis(size, pads[0], out, kernel, stride, dilation)


def canonical_keys(x):
    """Order keys with every NaN at the canonical NaN's key."""
    return reference.order_key(reference.canonicalize_nans(x)).astype(np.uint64)


def oracle(x, axes):
    """(values, indices) of the pool of ``x`` (``N x C x spatial``) over ``axes``."""
    fmt = format_of(x.dtype)
    images = x.reshape((-1,) + tuple(a.size for a in axes))
    keys = canonical_keys(images)
    outs = tuple(a.out for a in axes)
    out_keys = np.zeros((len(images),) + outs, dtype=np.uint64)
    out_index = np.zeros((len(images),) + outs, dtype=np.int64)
    for position in itertools.product(*(range(n) for n in outs)):
        taps = [[p for p in a.taps(o) if 0 <= p < a.size] for a, o in zip(axes, position)]
        assert all(taps), f"window {position} holds only padding"
        flat = np.ravel_multi_index(np.ix_(*taps), tuple(a.size for a in axes)).reshape(-1)
        window = keys.reshape(len(images), -1)[:, flat]
        first = np.argmax(window, axis=1)          # the first maximum in row-major order
        out_keys[(slice(None),) + position] = window[np.arange(len(images)), first]
        out_index[(slice(None),) + position] = flat[first]
    values = reference.from_order_key(out_keys.astype(fmt.uint_dtype), fmt)
    return values.reshape(-1), out_index.reshape(-1)
