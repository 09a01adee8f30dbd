"""Exhaustive check of the comparator lane for the 16-bit float formats: every ordered pair.

For float16 and bfloat16, every one of the 2^32 ordered pairs (a, b) of 16-bit patterns goes
through :class:`~maxaccel.hdl.lane.LaneMax`, compiled with Verilator
(:func:`maxaccel.sim.verilator.compile_model`, harness ``lane_harness.cpp``: four pairs per
cycle, the pipeline full), and its result is compared bit for bit with the golden model,
:func:`maxaccel.sim.reference.max` (with ``--minimum``, the lane's minimum select against
:func:`maxaccel.sim.reference.min`). NaN results must be the canonical NaN and the sign of zero
must match: there is no tolerance anywhere.

Run it (not part of the test suite; its run time is in ``docs/benchmarks.md``)::

    python -m maxaccel.sim.exhaustive                      # float16 and bfloat16, latency 2
    python -m maxaccel.sim.exhaustive --dtype bfloat16 --latency 3 --jobs 2
    python -m maxaccel.sim.exhaustive --minimum            # the minimum select

Exit status 0 when every pair agrees, 1 on any mismatch (the first ones are printed).
"""

import argparse
import ctypes
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from maxaccel.contract.dtypes import format_of

__all__ = ["LaneModel", "check_rows", "check_format", "main"]

PATTERNS = 1 << 16


class LaneModel:
    """:class:`~maxaccel.hdl.lane.LaneMax` at ``latency``, compiled; :meth:`pairs` runs it."""

    def __init__(self, latency=2):
        from maxaccel.hdl.lane import LaneMax
        from maxaccel.sim.verilator import compile_model, require_verilator
        if latency not in (1, 2, 3):
            raise ValueError(f"the exhaustive check clocks the lane: latency 1, 2 or 3, not "
                             f"{latency!r}")
        require_verilator()
        self.latency = latency
        self._library = compile_model(LaneMax(latency=latency), "lane_harness.cpp",
                                      name=f"lane{latency}", top="maxaccel_lane",
                                      recipe=f"{LaneMax.__module__}.LaneMax(latency={latency})")
        self._library.maxaccel_lane_pairs.argtypes = [
            ctypes.c_uint8, ctypes.c_uint8, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32,
            ctypes.c_void_p]
        self._library.maxaccel_lane_pairs.restype = None

    def pairs(self, fmt, a_first, a_count, minimum=False):
        """``max(a, b)`` bits (``min(a, b)`` with ``minimum``) for a in ``[a_first, a_first +
        a_count)`` and every b: an array of shape (a_count, 65536) of uint16 (the call
        releases the GIL)."""
        out = np.empty((a_count, PATTERNS), np.uint16)
        self._library.maxaccel_lane_pairs(int(fmt.dtype), int(minimum), self.latency, a_first,
                                          a_count, out.ctypes.data)
        return out


def check_rows(fmt, a_first, got, golden=None, minimum=False):
    """Mismatches between ``got`` (rows of :meth:`LaneModel.pairs` from ``a_first``) and the
    golden model (``reference.max``, or ``reference.min`` for a ``minimum``): a list of
    ``(a, b, got, expected)`` bit patterns, at most 10."""
    from maxaccel.sim import reference
    if golden is None:
        golden = reference.min if minimum else reference.max
    a = np.arange(a_first, a_first + len(got), dtype=np.uint16)[:, None].view(fmt.numpy_dtype)
    b = np.arange(PATTERNS, dtype=np.uint16)[None, :].view(fmt.numpy_dtype)
    expected = golden(a, b).view(np.uint16)
    rows, columns = np.nonzero(got != expected)
    return [(a_first + int(r), int(c), int(got[r, c]), int(expected[r, c]))
            for r, c in zip(rows[:10], columns[:10])]


def check_format(fmt, model, *, rows_per_chunk=256, jobs=1, a_range=(0, PATTERNS),
                 progress=None, golden=None, minimum=False):
    """Every pair with a in ``a_range`` (default: all 2^32), the lane's maximum or, with
    ``minimum``, its minimum; returns ``(pairs_checked, mismatches)``. ``jobs`` threads run the
    compiled lane and the golden model side by side."""
    starts = range(a_range[0], a_range[1], rows_per_chunk)

    def chunk(start):
        count = min(rows_per_chunk, a_range[1] - start)
        return count, check_rows(fmt, start, model.pairs(fmt, start, count, minimum), golden,
                                 minimum)

    checked, mismatches = 0, []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for count, found in pool.map(chunk, starts):
            checked += count * PATTERNS
            mismatches += found
            if progress is not None:
                progress(checked, (a_range[1] - a_range[0]) * PATTERNS, len(mismatches))
    return checked, mismatches


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m maxaccel.sim.exhaustive",
        description="Every ordered pair of 16-bit operands through the compiled comparator "
                    "lane, against the golden model.")
    parser.add_argument("--dtype", nargs="+", default=["float16", "bfloat16"],
                        choices=["float16", "bfloat16"])
    parser.add_argument("--latency", type=int, default=2, choices=[1, 2, 3])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="threads (default: one per core)")
    parser.add_argument("--minimum", action="store_true",
                        help="the lane's minimum select, against reference.min")
    args = parser.parse_args(argv)
    operation = "min" if args.minimum else "max"
    import ml_dtypes  # noqa: F401  (bfloat16 as a numpy dtype)

    started = time.monotonic()
    model = LaneModel(args.latency)
    print(f"LaneMax latency {args.latency} compiled or loaded in "
          f"{time.monotonic() - started:.1f} s", flush=True)
    failed = False
    for name in args.dtype:
        fmt = format_of(np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name))
        began = time.monotonic()

        def progress(done, total, bad):
            if done % (1 << 28) == 0 or done == total:
                print(f"  {name}: {done:>10} of {total} pairs, {bad} mismatches, "
                      f"{time.monotonic() - began:.0f} s", flush=True)

        checked, mismatches = check_format(fmt, model, jobs=args.jobs, progress=progress,
                                           minimum=args.minimum)
        elapsed = time.monotonic() - began
        print(f"{name} {operation}: {checked} ordered pairs checked in {elapsed:.0f} s "
              f"({checked / elapsed / 1e6:.1f} M pairs/s): {len(mismatches)} mismatches",
              flush=True)
        for a, b, got, want in mismatches:
            print(f"  {operation}(0x{a:04x}, 0x{b:04x}): lane 0x{got:04x}, golden model "
                  f"0x{want:04x}")
        failed |= bool(mismatches)
    print(f"total {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
