"""The exhaustive 16-bit check's machinery, on slices of the pair space that hold the hard cases
(both zeros, subnormals, infinities, every NaN class): the full 2^32 pairs per format run as a
documented command (``python -m maxaccel.sim.exhaustive``, see docs/benchmarks.md)."""


import ml_dtypes
import numpy as np
import pytest

from maxaccel.contract.dtypes import format_of
from maxaccel.sim import reference
from maxaccel.sim.exhaustive import LaneModel, check_format

FORMATS = [format_of(np.dtype(np.float16)), format_of(np.dtype(ml_dtypes.bfloat16))]
# a ranges: +0 and the smallest subnormals, the largest finites through +inf into the NaNs,
# -0 and the negative subnormals, and the negative NaNs up to 0xFFFF.
SLICES = [(0x0000, 0x0008), (0x7BF8, 0x7C08), (0x7F78, 0x7F88), (0x7FF8, 0x8008),
          (0xFBF8, 0xFC08), (0xFFF8, 0x10000)]


@pytest.fixture(scope="module")
def lane():
    return LaneModel(latency=2)


@pytest.mark.parametrize("minimum", [False, True], ids=["max", "min"])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: str(f.numpy_dtype))
def test_lane_agrees_with_the_golden_model_on_the_hard_slices(lane, fmt, minimum):
    for a_range in SLICES:
        checked, mismatches = check_format(fmt, lane, rows_per_chunk=8, a_range=a_range,
                                           minimum=minimum)
        assert checked == (a_range[1] - a_range[0]) * 65536
        assert mismatches == [], f"{fmt.numpy_dtype} a in {a_range}"


def test_the_minimum_is_not_the_maximum(lane):
    """The select reaches the compiled lane: its minimum fails the maximum's golden model."""
    fmt = FORMATS[0]
    _, mismatches = check_format(fmt, lane, rows_per_chunk=8, a_range=(0x7FF8, 0x8008),
                                 minimum=True, golden=reference.max)
    assert mismatches


@pytest.mark.slow(reason="every 2^32 pair of a format, minutes a format")
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: str(f.numpy_dtype))
def test_lane_minimum_on_every_pair(lane, fmt):
    """The minimum select on all 2^32 ordered pairs (the maximum's run is documented in
    docs/benchmarks.md, ``python -m maxaccel.sim.exhaustive``)."""
    checked, mismatches = check_format(fmt, lane, jobs=2, minimum=True)
    assert checked == 1 << 32
    assert mismatches == [], f"{fmt.numpy_dtype}: {mismatches}"


def test_a_wrong_golden_model_is_caught(lane):
    """numpy's maximum orders -0 and +0 as equal and keeps NaN payloads: the check must see it."""
    fmt = FORMATS[0]
    _, mismatches = check_format(fmt, lane, rows_per_chunk=8, a_range=(0x7FF8, 0x8008),
                                 golden=np.maximum)
    assert mismatches
    a, b, got, want = mismatches[0]
    assert got != want
