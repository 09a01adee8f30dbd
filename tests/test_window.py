# amaranth: UnusedElaboratable=no
# (test_parameters builds units only to inspect them or to see the constructor refuse.)

"""WindowMaxPool: windowed max pooling with indices, checked bit-exactly against a plain oracle
of the unit's own interface (per-axis size, pad_begin, out, kernel, stride, dilation), with
random stalls on both sides, exact cycle counts and the status outputs.

The oracle works on order keys: for each window it gathers the in-range taps, takes the largest
key (NaNs all given the canonical NaN's key) and the smallest flat index holding it, which is
the first element in row-major window order.
"""

import itertools

import ml_dtypes
import numpy as np
import pytest
from cycle_exact import feed_a_beat_a_cycle

from maxaccel.hdl.window import WindowMaxPool
from maxaccel.hdl.window_serial import SerialWindowMaxPool
from maxaccel.contract.dtypes import FORMATS, format_of
from maxaccel.contract.pooling import WINDOW_FIELDS
from maxaccel.sim import reference
from maxaccel.sim.streams import STALL_PATTERNS, Stalls, run_streams, shared_design
from maxaccel.sim.values import edge_bits, random_values

from window_model import UNIT, Axis, _rng, axis, oracle

ALL_DTYPES = [f.numpy_dtype for f in FORMATS.values()]
FLOATS = [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32),
          np.dtype(np.float64)]
NO_STALLS = Stalls()


def configure(dut, dtype, axes):
    def setup(ctx):
        ctx.set(dut.dtype, format_of(dtype).dtype)
        for a, given in enumerate(axes):
            for name in WINDOW_FIELDS:
                ctx.set(getattr(dut.config[a], name), getattr(given, name))
    return setup


def step_edges(axes, settle):
    """With no stalls and only the innermost axis adding virtual steps, the edge at which each
    step of the innermost axis (real or virtual) is taken: {(image, outer..., x): edge}. A
    row's virtual steps overlap the next row's first steps when they can (the input is always
    there), so a row then costs ``size`` cycles; the stream's last row's tail follows it."""
    inner = axes[-1]
    row = inner.size + (0 if inner.overlaps else inner.extra)
    rows = int(np.prod([a.size for a in axes[:-1]]))
    return lambda image, outer_row, x: settle + 1 + (image * rows + outer_row) * row + x


def pack_lanes(x, axes, rng):
    """The images of ``x`` (``N x C x spatial``) as a unit takes them: ``8 / itemsize`` images
    to a lane (filler images of random values completing the last lane), a beat per spatial
    step. Returns (beats as 64-bit integers, the images, ``lanes x per_lane x spatial``)."""
    fmt = format_of(x.dtype)
    per_lane = 8 // fmt.nbytes
    spatial = tuple(a.size for a in axes)
    images = x.reshape((-1,) + spatial)
    filler = -len(images) % per_lane
    if filler:
        images = np.concatenate([images, random_values(rng, x.dtype, (filler,) + spatial,
                                                       edge_fraction=0.3)])
    lanes = images.reshape((-1, per_lane, int(np.prod(spatial))))
    bits = reference.bits_of(lanes).astype(np.uint64)
    shifts = (8 * fmt.nbytes * np.arange(per_lane, dtype=np.uint64))[None, :, None]
    words = np.bitwise_or.reduce(bits << shifts, axis=1)
    return [int(w) for w in words.reshape(-1)], images


def unpack_lanes(received, fmt):
    """(values, indices) of the unit's output beats, element by element: ``beats x per_lane``,
    element ``e``'s index from slot ``e * itemsize``."""
    per_lane = 8 // fmt.nbytes
    data = np.array([int(b.data) for b in received], dtype=np.uint64)
    mask = np.uint64((1 << fmt.bits) - 1) if fmt.bits < 64 else ~np.uint64(0)
    values = np.stack([(data >> np.uint64(8 * fmt.nbytes * e)) & mask
                       for e in range(per_lane)], axis=1)
    index = np.array([[int(b.index[e * fmt.nbytes]) for e in range(per_lane)]
                      for b in received], dtype=np.int64).reshape(-1, per_lane)
    return reference.from_bits(values.astype(fmt.uint_dtype), fmt), index


def check_window_pool(x, axes, *, stalls, dut=None, exact=None, spare=2, per_axis=False,
                      serial_products=False, unit=WindowMaxPool, indices=True):
    """Stream ``x`` through a WindowMaxPool configured with ``axes``, its images packed into
    lanes (:func:`pack_lanes`); compare every element with the oracle.

    Unless ``dut`` is given, the unit is built for ``axes``: its line and plane buffers hold
    ``spare`` entries more than the rows need (0: exactly full), its kernel extent is the
    largest of ``axes`` on every axis, or (``per_axis``) each axis's own, its products
    ``serial_products`` or not, of class ``unit``.
    ``exact``: with no stalls, assert the edge of every output from :func:`step_edges` (only
    when no outer axis adds virtual steps, or only the next one, overlapped: see below).
    ``indices``: compare the indices too (not for a unit of none).
    """
    fmt = format_of(x.dtype)
    rank = len(axes)
    extents = tuple((a.kernel - 1) * a.dilation + 1 for a in axes)
    products = {"serial_products": serial_products} if unit is WindowMaxPool else {}
    dut = dut or shared_design(unit, max_rank=rank,
                               max_extent=extents if per_axis else max(extents),
                               max_columns=axes[-1].out + spare,
                               max_plane=int(np.prod([a.out for a in axes[1:]])) + spare,
                               **products)
    axes = (UNIT,) * (dut.max_rank - rank) + tuple(axes)
    words, images = pack_lanes(x, axes, _rng("filler", x.shape, str(x.dtype)))
    per_lane = 8 // fmt.nbytes
    values, oracle_indices = oracle(images, axes)
    outputs = len(values) // per_lane
    beats = [{"data": w} for w in words]

    def status(ctx):
        assert ctx.get(dut.config_error) == 0, "config_error"
        assert ctx.get(dut.capacity_error) == 0, "capacity_error"
        assert ctx.get(dut.empty_window) == 0, "empty_window"
        assert ctx.get(dut.idle) == 1, "idle"

    # The serial unit is still updating with the last lane's elements when its last window
    # has left (if that lane lies beyond every window), and a wide window's first result
    # comes after many lanes' updates.
    lane = dut.lane_cycles(per_lane, 0) if isinstance(dut, SerialWindowMaxPool) else 0
    run = run_streams(dut, sources={dut.i: beats}, sinks={"o": (dut.o, outputs)},
                      stalls=stalls, setup=configure(dut, x.dtype, axes), check=status,
                      drain_cycles=32 + lane, timeout=20_000 + 100 * lane)
    got, got_index = unpack_lanes(run.received["o"], fmt)
    # oracle: image-major; the unit: lane, position, element.
    per_image = outputs * per_lane // len(images)
    order = lambda v: v.reshape(-1, per_lane, per_image).transpose(0, 2, 1).reshape(-1)
    what = f"{x.dtype} {x.shape} {axes}"
    reference.assert_same_bits(got.reshape(-1), order(values), what=what)
    if indices:
        np.testing.assert_array_equal(got_index.reshape(-1), order(oracle_indices),
                                      err_msg=what)
    if exact is not None and stalls == NO_STALLS:
        # The axis next to the innermost may add virtual steps if they overlap the next
        # image's first rows: a virtual row is then taken as the next image's row is, except
        # after the stream's last row, where it follows the last real row's last item, an item
        # a cycle (its rows of ``out`` items).
        assert all(a.extra == 0 for a in axes[:-2])
        assert all(a.extra == 0 or a.overlaps for a in axes[-2:-1])
        edge = step_edges(axes, dut.settle)
        outer = axes[:-1]
        sizes = [a.size for a in outer]
        rows = int(np.prod(sizes))
        lanes = len(words) // (rows * axes[-1].size)
        expected = []
        for lane in range(lanes):
            for position in itertools.product(*(range(a.out) for a in axes)):
                last = [a.taps(o)[-1] for a, o in zip(axes, position)]
                # Row-major, the last outer tap possibly beyond its axis (a virtual row).
                outer_row = sum(t * int(np.prod(sizes[a + 1:])) for a, t in enumerate(last[:-1]))
                if lane * rows + outer_row < lanes * rows:
                    at = edge(lane, outer_row, last[-1])
                else:
                    beyond = lane * rows + outer_row - lanes * rows
                    at = (edge(lanes - 1, rows - 1, axes[-1].end) + 1
                          + beyond * axes[-1].out + position[-1])
                expected.append(at + dut.latency)
        assert run.arrivals["o"] == expected
    return run


stall_params = pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
#: Every value and geometry test runs on both units.
unit_params = pytest.mark.parametrize("unit", [WindowMaxPool, SerialWindowMaxPool],
                                      ids=["pipelined", "serial"])
#: The serial unit's widest windows take minutes through Amaranth's simulator.
SERIAL_SLOW = pytest.mark.slow(reason="the serial unit: 81 to 169 window updates an element "
                                      "through Amaranth's simulator")


def unit_cases(cases, slow_for_serial):
    """``(unit, case)`` parameters: every case on both units, the serial unit's
    ``slow_for_serial`` ones behind the slow gate."""
    return [pytest.param(unit, case, id=f"{name}-{case}",
                         marks=[SERIAL_SLOW] if unit is SerialWindowMaxPool
                         and case in slow_for_serial else [])
            for unit, name in [(WindowMaxPool, "pipelined"), (SerialWindowMaxPool, "serial")]
            for case in cases]


# --- values ------------------------------------------------------------------------------------

RESNET = (axis(5, 3, 2, pads=(1, 1)), axis(6, 3, 2, pads=(1, 1)))   # the ResNet stem's pool


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@unit_params
def test_every_dtype(dtype, unit):
    # Each dtype meets one stall pattern (every pattern meets several dtypes).
    index = ALL_DTYPES.index(dtype)
    stalls = STALL_PATTERNS[index % len(STALL_PATTERNS)]
    x = random_values(_rng("dtype", str(dtype)), dtype, (2, 1, 5, 6), edge_fraction=0.3)
    check_window_pool(x, RESNET, stalls=stalls, unit=unit)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@unit_params
def test_nan_at_every_window_position(dtype, unit):
    # 3 x 3 windows, stride 3: image k has a NaN at window position k of every window (quiet,
    # signalling, negative, with payloads, in turn), images 9.. a second NaN later in the
    # window, so the first one's index must come out; the last image has none.
    fmt = format_of(dtype)
    nans = [b for b in reference.bits_of(edge_bits(fmt))[reference.is_nan(edge_bits(fmt))]]
    rng = _rng("nan", str(dtype))
    images = 9 + 8 + 1
    x = rng.standard_normal((images, 1, 6, 6)).astype(dtype)
    bits = reference.bits_of(x).copy()
    for image in range(17):
        first = image % 9
        for wy, wx in itertools.product(range(2), range(2)):
            y, xx = divmod(first, 3)
            bits[image, 0, 3 * wy + y, 3 * wx + xx] = nans[(image + wy + wx) % len(nans)]
            if image >= 9:
                later = first + 1 + (image - 9) % (8 - first) if first < 8 else None
                if later is not None:
                    y, xx = divmod(later, 3)
                    bits[image, 0, 3 * wy + y, 3 * wx + xx] = nans[(image + 1) % len(nans)]
    x = reference.from_bits(bits, fmt)
    stalls = STALL_PATTERNS[FLOATS.index(np.dtype(dtype))]
    check_window_pool(x, (axis(6, 3, 3), axis(6, 3, 3)), stalls=stalls, unit=unit)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@unit_params
def test_signed_zeros_and_ties(dtype, unit):
    # Windows of ±0 in every order (a 3-tap 1-D window over 8 patterns x 3 positions), then
    # windows of equal values: +0 wins over -0 wherever it stands, and the first of equal
    # keys gives the index.
    fmt = format_of(dtype)
    patterns = [[(p >> k) & 1 for k in range(3)] for p in range(8)]
    zeros = np.array([fmt.sign_mask if negative else 0 for p in patterns for negative in p],
                     dtype=fmt.uint_dtype)
    ones = reference.bits_of(np.array([1.5, -2.0, 1.5, 1.5, -2.0, -2.0], dtype=dtype))
    bits = np.concatenate([zeros, ones]).reshape(1, 1, -1)
    x = reference.from_bits(bits, fmt)
    stalls = STALL_PATTERNS[(FLOATS.index(np.dtype(dtype)) + 1) % 4]
    check_window_pool(x, (axis(30, 3, 3),), stalls=stalls, unit=unit)
    # Overlapping windows.
    check_window_pool(x, (axis(30, 3, 1, pads=(2, 2)),), stalls=NO_STALLS, unit=unit)


@pytest.mark.parametrize("dtype, kernel", [(np.float32, 5), (np.float16, 13),
                                           (ml_dtypes.bfloat16, 9), (np.float64, 4)], ids=str)
@unit_params
def test_nan_at_every_tap_of_a_wide_window(dtype, kernel, unit):
    # 1-D windows of ``kernel`` taps, stride ``kernel``, on a unit of that extent: image k has
    # a NaN at tap k % kernel of every window (every NaN kind in turn), images kernel.. also a
    # second NaN later in the window, so the first one's index must come out; the last image
    # has none. Then the same windows overlapping (stride 1, padding on both sides).
    fmt = format_of(dtype)
    nans = [b for b in reference.bits_of(edge_bits(fmt))[reference.is_nan(edge_bits(fmt))]]
    rng = _rng("wide nan", str(dtype), kernel)
    images, windows = 2 * kernel, 2
    x = rng.standard_normal((images + 1, 1, windows * kernel)).astype(dtype)
    bits = reference.bits_of(x).copy()
    for image in range(images):
        first = image % kernel
        for w in range(windows):
            bits[image, 0, w * kernel + first] = nans[(image + w) % len(nans)]
            if image >= kernel and first < kernel - 1:
                later = first + 1 + (image + w) % (kernel - 1 - first)
                bits[image, 0, w * kernel + later] = nans[(image + 1) % len(nans)]
    x = reference.from_bits(bits, fmt)
    stalls = STALL_PATTERNS[kernel % len(STALL_PATTERNS)]
    check_window_pool(x, (axis(windows * kernel, kernel, kernel),), stalls=stalls, unit=unit)
    half = kernel // 2
    check_window_pool(x[:kernel + 2], (axis(windows * kernel, kernel, 1, pads=(half, half)),),
               stalls=STALL_PATTERNS[(kernel + 1) % len(STALL_PATTERNS)], unit=unit)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=str)
@unit_params
def test_signed_zeros_and_ties_in_wide_windows(dtype, unit):
    # Windows of five ±0 in every order (32 patterns), then windows of equal values; on a
    # unit of extent 5, then the same windows in 2-D (5 x 5 taps: a pattern per row).
    fmt = format_of(dtype)
    patterns = [[(p >> k) & 1 for k in range(5)] for p in range(32)]
    zeros = np.array([fmt.sign_mask if negative else 0 for p in patterns for negative in p],
                     dtype=fmt.uint_dtype)
    ones = reference.bits_of(np.array([1.5, -2.0, 1.5, 1.5, -2.0] * 2, dtype=dtype))
    bits = np.concatenate([zeros, ones]).reshape(1, 1, -1)
    x = reference.from_bits(bits, fmt)
    check_window_pool(x, (axis(170, 5, 5),), stalls=STALL_PATTERNS[1], unit=unit)
    # Overlapping windows.
    check_window_pool(x, (axis(170, 5, 1, pads=(4, 4)),), stalls=NO_STALLS, unit=unit)
    planes = reference.from_bits(zeros.reshape(1, 1, 32, 5)[..., ::-1].copy(), fmt)
    check_window_pool(planes, (axis(32, 5, 3, pads=(1, 0)), axis(5, 5, 1, pads=(2, 2))),
               stalls=STALL_PATTERNS[2], per_axis=True, unit=unit)


@unit_params
def test_integer_ties_with_the_padding_key(unit):
    # The least uint8 and int8 values have key 0, like padding: padding must still not win.
    for dtype in (np.uint8, np.int8):
        least = np.iinfo(dtype).min
        x = np.full((2, 1, 4, 5), least, dtype=dtype)
        x[1, 0, 2, 3] = least + 1
        check_window_pool(x, (axis(4, 3, 2, pads=(2, 1), ceil=True), axis(5, 3, 1, pads=(1, 2))),
                   stalls=STALL_PATTERNS[3], unit=unit)


# --- geometry ----------------------------------------------------------------------------------

GEOMETRY = {
    # name: (dtype, N x C, axes)
    "1d-k2s2": (np.float32, 3, (axis(9, 2, 2),)),
    "1d-k3s1-pads": (np.int16, 2, (axis(7, 3, 1, pads=(1, 2)),)),
    "1d-dilated": (np.float16, 2, (axis(11, 3, 2, dilation=2, pads=(2, 1)),)),
    "1d-ceil": (np.uint8, 3, (axis(8, 3, 2, ceil=True),)),
    "1d-ceil-drop": (np.int32, 1, (axis(6, 2, 3, pads=(0, 2), ceil=True),)),
    "1d-kernel1": (np.float64, 2, (axis(5, 1, 2),)),
    "1d-stride-beyond-kernel": (np.int8, 2, (axis(10, 2, 4, pads=(1, 0)),)),
    "2d-2x2s2": (np.float32, 2, (axis(4, 2, 2), axis(6, 2, 2))),
    "2d-asymmetric": (ml_dtypes.bfloat16, 2, (axis(5, 3, 2, pads=(0, 2)),
                                               axis(4, 2, 1, pads=(1, 0)))),
    "2d-ceil": (np.float16, 1, (axis(5, 2, 2, ceil=True), axis(7, 3, 2, pads=(1, 1),
                                                                  ceil=True))),
    "2d-dilated": (np.int64, 1, (axis(6, 2, 1, dilation=3, pads=(1, 1)),
                                 axis(7, 2, 2, dilation=2, pads=(0, 1)))),
    "2d-one-element-rows": (np.float32, 2, (axis(6, 3, 1, pads=(1, 1)), axis(1, 1, 1))),
    "2d-one-column": (np.uint16, 2, (axis(5, 2, 1, pads=(1, 0)), axis(3, 3, 1))),
    "3d-2x2x2": (np.float32, 2, (axis(4, 2, 2), axis(3, 2, 1), axis(4, 2, 2))),
    "3d-pads-dilation": (np.int32, 1, (axis(3, 2, 1, pads=(1, 1)),
                                       axis(4, 2, 2, dilation=2, pads=(1, 0), ceil=True),
                                       axis(5, 3, 2, pads=(1, 1)))),
    "3d-ceil": (np.uint64, 1, (axis(3, 2, 2, ceil=True), axis(3, 2, 2, ceil=True),
                               axis(3, 2, 2, ceil=True))),
    # Kernel extents above 3: the SPP / SPPF classes, 1-D k4 s4, dilations, strides beyond
    # the kernel, and 3-D with a narrower outermost axis (``per_axis`` below).
    "1d-k4s4": (np.float32, 3, (axis(17, 4, 4),)),
    "1d-k13-dilated": (np.int16, 2, (axis(20, 4, 2, dilation=4, pads=(3, 5)),)),
    "1d-k5-stride-beyond-kernel": (np.uint8, 3, (axis(23, 5, 7, pads=(2, 0)),)),
    "2d-5x5s1p2": (np.float32, 2, (axis(6, 5, 1, pads=(2, 2)), axis(7, 5, 1, pads=(2, 2)))),
    "2d-9x9s1p4": (np.float16, 1, (axis(9, 9, 1, pads=(4, 4)), axis(9, 9, 1, pads=(4, 4)))),
    "2d-13x13s1p6": (np.int8, 1, (axis(13, 13, 1, pads=(6, 6)),
                                  axis(13, 13, 1, pads=(6, 6)))),
    "2d-7x5-dilated-ceil": (ml_dtypes.bfloat16, 1, (axis(11, 4, 3, dilation=2, pads=(1, 2),
                                                         ceil=True),
                                                    axis(9, 5, 2, pads=(3, 1), ceil=True))),
    "3d-3x5x5": (np.float32, 1, (axis(3, 3, 1, pads=(1, 1)), axis(5, 5, 1, pads=(2, 2)),
                                 axis(6, 5, 2, pads=(2, 2)))),
}
#: Geometry cases whose unit is built with each axis's own extent.
PER_AXIS = {"2d-7x5-dilated-ceil", "3d-3x5x5"}


@pytest.mark.parametrize("unit, case",
                         unit_cases(list(GEOMETRY), {"2d-9x9s1p4", "2d-13x13s1p6"}))
def test_geometry(case, unit):
    # Values from a small range, so that ties (and the tie rule) are everywhere.
    dtype, images, axes = GEOMETRY[case]
    stalls = STALL_PATTERNS[list(GEOMETRY).index(case) % len(STALL_PATTERNS)]
    rng = _rng("geometry", case)
    shape = (images, 1) + tuple(a.size for a in axes)
    x = rng.integers(0, 4, size=shape).astype(dtype)
    check_window_pool(x, axes, stalls=stalls, spare=2 * (list(GEOMETRY).index(case) % 2),
               per_axis=case in PER_AXIS, unit=unit)


def test_rows_beyond_the_line_buffers_without_taps_across_them():
    # Rows of more outputs than the line buffers hold, on a rank-2 unit of 4 columns: a 1-D
    # pool, and a 2-D pool with kernel 1 across the rows, need no line buffer.
    dut = WindowMaxPool(max_rank=2, max_extent=4, max_columns=4)
    x = random_values(_rng("long rows"), np.float32, (2, 1, 21), edge_fraction=0.2)
    check_window_pool(x, (axis(21, 4, 4, pads=(0, 3)),), stalls=STALL_PATTERNS[1], dut=dut)
    dut = WindowMaxPool(max_rank=2, max_extent=4, max_columns=4)
    x = random_values(_rng("long rows 2"), np.int8, (1, 2, 3, 11), edge_fraction=0.2)
    check_window_pool(x, (axis(3, 1, 2), axis(11, 4, 1, pads=(1, 2))), stalls=STALL_PATTERNS[2],
               dut=dut)


def test_rank_below_capacity():
    # A 1-D and a 2-D pool on a rank-3 unit: outer unit axes.
    dut = WindowMaxPool(max_rank=3, max_extent=3, max_columns=4, max_plane=8)
    x = random_values(_rng("rank"), np.float32, (2, 1, 7), edge_fraction=0.2)
    check_window_pool(x, (axis(7, 3, 2, pads=(1, 1)),), stalls=STALL_PATTERNS[2], dut=dut)
    dut = WindowMaxPool(max_rank=3, max_extent=3, max_columns=4, max_plane=8)
    x = random_values(_rng("rank2"), np.int8, (1, 2, 3, 5), edge_fraction=0.2)
    check_window_pool(x, (axis(3, 2, 1), axis(5, 3, 2, pads=(1, 1))), stalls=STALL_PATTERNS[3],
               dut=dut)


# --- cycles ------------------------------------------------------------------------------------

CYCLE_CASES = {
    # Every output's arrival edge, exactly, with no stalls: one element per cycle, plus one
    # cycle per virtual step of the innermost axis.
    "resnet-stem": (np.float32, 2, (axis(4, 3, 2, pads=(1, 1)), axis(6, 3, 2, pads=(1, 1)))),
    "2x2s2": (np.int8, 2, (axis(4, 2, 2), axis(4, 2, 2))),
    "right-padding-virtual-steps": (np.float16, 2, (axis(3, 2, 1), axis(5, 3, 1, pads=(0, 2)))),
    "3d": (np.uint8, 1, (axis(3, 2, 1), axis(3, 2, 1), axis(4, 3, 1, dilation=2, pads=(2, 2)))),
    "1d-wide-extent": (np.int32, 3, (axis(9, 3, 2, dilation=3, pads=(3, 3)),)),
    "1d-k4s4": (np.float32, 2, (axis(16, 4, 4),)),
    "1d-k13s1p6": (np.float16, 2, (axis(15, 13, 1, pads=(6, 6)),)),
    "2d-5x5s1": (np.int8, 1, (axis(7, 5, 1, pads=(2, 0)), axis(8, 5, 1, pads=(2, 2)))),
    # Both passes' virtual steps overlapped (SPP's shape): the images' rows back to back.
    "2d-5x5s1p2": (np.float64, 3, (axis(6, 5, 1, pads=(2, 2)), axis(8, 5, 1, pads=(2, 2)))),
    # Tails that may not overlap (longer than the next image's first gap, as long as the
    # image), and one that may (ceil mode's last window in the padding).
    "1d-tail-beyond-the-first-gap": (np.float32, 2, (axis(5, 3, 1, pads=(1, 2)),)),
    "1d-tail-as-long-as-the-row": (np.int16, 2, (axis(3, 5, 1, pads=(1, 3)),)),
    "1d-ceil-overlapped": (np.uint16, 2, (axis(7, 3, 2, pads=(0, 1), ceil=True),)),
}


@pytest.mark.parametrize("case", CYCLE_CASES)
def test_exact_cycles(case):
    dtype, images, axes = CYCLE_CASES[case]
    x = random_values(_rng("cycles", case), dtype, (images, 1) + tuple(a.size for a in axes),
                      edge_fraction=0.2)
    check_window_pool(x, axes, stalls=NO_STALLS, exact=True)


@pytest.mark.parametrize("unit, stalls", unit_cases(STALL_PATTERNS, STALL_PATTERNS[:3]))
def test_overlapped_tails_under_stalls(stalls, unit):
    # SPP-shaped pools (stride 1, symmetric pads: every tail may overlap the next row's or
    # image's first steps) on edge values (NaN payloads, ±0, infinities, subnormals, extremes),
    # images back to back under random stalls on both sides: a tail overlaps when the next
    # element is there at its first item and is virtual when not, so both happen here.
    rng = _rng("overlap stalls", str(stalls))
    for dtype, shape, axes in [
            (np.float32, (3, 1, 6, 7), (axis(6, 5, 1, pads=(2, 2)), axis(7, 5, 1, pads=(2, 2)))),
            (np.float16, (5, 1, 9, 9), (axis(9, 9, 1, pads=(4, 4)), axis(9, 9, 1, pads=(4, 4)))),
            (ml_dtypes.bfloat16, (4, 2, 13), (axis(13, 13, 1, pads=(6, 6)),)),
            (np.int8, (9, 1, 11), (axis(11, 5, 1, pads=(2, 2)),)),
            (np.float64, (3, 1, 4, 3, 5), (axis(4, 3, 1, pads=(1, 1)), axis(3, 3, 1, pads=(1, 1)),
                                           axis(5, 3, 1, pads=(1, 1))))]:
        x = random_values(rng, dtype, shape, edge_fraction=0.5)
        check_window_pool(x, axes, stalls=stalls, unit=unit)


def test_overlapped_tails_cost_no_cycles():
    # 5x5 stride 1 pad 2 on 6 x 8, three float64 lanes, no stalls: every row and every image
    # follows the one before with no gap: elements at edges SETTLE + 1 .. SETTLE + 144. The
    # last row's 2 virtual steps follow (the last window of the row ends at the second, the
    # middle pass takes its item), then the middle pass's 2 virtual rows of 8 items, an item a
    # cycle (the last window ends at the last). Without the
    # overlap each row cost 8 + 2 and each image 2 rows of 8 more: 3 * (6 * 10 + 16) = 228.
    dtype, images, axes = CYCLE_CASES["2d-5x5s1p2"]
    x = random_values(_rng("overlap"), dtype, (images, 1, 6, 8), edge_fraction=0.2)
    run = check_window_pool(x, axes, stalls=NO_STALLS, exact=True)
    latency = WindowMaxPool(max_rank=2, max_extent=5).latency
    assert run.arrivals["o"][-1] == WindowMaxPool.SETTLE + 1 + 144 + 1 + 2 * 8 + latency
    assert len(run.arrivals["o"]) == 3 * 6 * 8


def test_latency_formula():
    # 3 + per axis 2 + 2 * max(1, ceil(log2(extent))), plus 1 for each of the outer axes.
    for rank, extent, latency in [(1, 1, 7), (1, 3, 9), (2, 2, 12), (3, 3, 23), (3, 4, 23),
                                  (3, 5, 29), (2, 9, 24), (1, 13, 13), (1, 16, 13),
                                  (1, 17, 15), (3, (3, 13, 13), 31), (3, (1, 5, 13), 27),
                                  (2, (13, 2), 18)]:
        assert WindowMaxPool(max_rank=rank, max_extent=extent).latency == latency


# --- status ------------------------------------------------------------------------------------


def _status_only(dut, axes, dtype, beats, outputs, expect, stalls=NO_STALLS):
    def status(ctx):
        for name, value in expect.items():
            assert ctx.get(getattr(dut, name)) == value, name
    # The serial unit's settle and lanes are long: the status is read after them.
    drain = (dut.settle + len(beats) * dut.lane_cycles(8, 0)
             if isinstance(dut, SerialWindowMaxPool) else 0)
    return run_streams(dut, sources={dut.i: beats}, sinks={"o": (dut.o, outputs)},
                       stalls=stalls, setup=configure(dut, dtype, axes), check=status,
                       drain_cycles=32 + drain)


@pytest.mark.parametrize("axes, error", [
    ((axis(4, 3, 1), axis(4, 3, 1)), 0),
    ((axis(4, 3, 1), axis(4, 4, 1)), 1),                       # extent 4 > 3
    ((axis(4, 3, 1), axis(9, 2, 1, dilation=3)), 1),           # extent 4 > 3
    ((axis(4, 3, 1), Axis(4, 0, 1, 0, 1, 1)), 1),              # kernel 0
    ((axis(4, 3, 1), Axis(4, 0, 1, 2, 0, 1)), 1),              # stride 0
    ((axis(4, 3, 1), Axis(4, 0, 1, 2, 1, 0)), 1),              # dilation 0
    ((axis(4, 3, 1), Axis(0, 0, 1, 2, 1, 1)), 1),              # size 0
    ((axis(4, 3, 1), Axis(4, 0, 0, 2, 1, 1)), 1),              # out 0
    ((axis(4, 3, 1), Axis(4, 2, 2, 2, 1, 1)), 1),              # first window all padding
    ((axis(4, 3, 1), Axis(40, 9, 3, 2, 30, 1)), 1),            # a pad far beyond the extent
    ((axis(4, 3, 1), axis(7, 1, 1)), 1),                       # 7 columns > max_columns
    ((axis(4, 1, 1), axis(9, 3, 1)), 0),                       # no line buffer needed
    ((Axis(4, 0, 4, 4464, 1, 1), axis(4, 3, 1)), 1),           # a kernel far beyond the extent
])
@unit_params
def test_config_error(axes, error, unit):
    dut = unit(max_rank=2, max_extent=3, max_columns=6)
    _status_only(dut, axes, np.float32, [], 0, {"config_error": error, "idle": 1})


@pytest.mark.parametrize("axes, error", [
    ((axis(5, 3, 1), axis(13, 13, 1)), 0),
    ((axis(5, 3, 1), axis(13, 5, 1, dilation=3)), 0),          # extent 13
    ((axis(5, 3, 1), axis(14, 14, 1)), 1),                     # extent 14 > 13
    ((axis(5, 3, 1), axis(15, 2, 1, dilation=13)), 1),         # extent 14 > 13
    ((axis(5, 4, 1), axis(13, 13, 1)), 1),                     # extent 4 > 3 on the outer axis
    ((axis(5, 2, 1, dilation=2), axis(3, 1, 1)), 0),           # extent 3
])
def test_config_error_per_axis_extents(axes, error):
    dut = WindowMaxPool(max_rank=2, max_extent=(3, 13), max_columns=16)
    _status_only(dut, axes, np.float32, [], 0, {"config_error": error, "idle": 1})


@unit_params
def test_capacity_error(unit):
    # 3 x 4 output columns in the plane buffers of a rank-3 unit that holds 8: flagged; the
    # same pool with no taps along the outer axis needs no plane buffer and is not.
    x = np.zeros((1, 1, 2, 3, 4), dtype=np.int8)
    for kernel, expect in [(2, 1), (1, 0)]:
        dut = unit(max_rank=3, max_extent=2, max_columns=4, max_plane=8)
        axes = (axis(2, kernel, 1), axis(3, 1, 1), axis(4, 1, 1))
        outputs = int(np.prod([a.out for a in axes]))
        _status_only(dut, axes, np.int8, [{"data": 0}] * x.size, outputs,
                     {"capacity_error": expect, "config_error": 0, "idle": 1})


@unit_params
def test_empty_window_flagged(unit):
    # Input 2, kernel 2, dilation 3, pads 1 and 1: window 0 has taps at -1 and 2, both padding.
    dut = unit(max_rank=1, max_extent=4)
    axes = (Axis(2, 1, 1, 2, 1, 3),)
    _status_only(dut, axes, np.float32, [{"data": 0}, {"data": 0}], 1,
                 {"empty_window": 1, "config_error": 0, "idle": 1})


def _clear_mid_image(dut, stalls, seed, cycles, idle_pattern, **run):
    """Five elements of a 3x4 float32 image, a ``clear``, then the whole image, under
    ``stalls``: the outputs are the image's alone. ``cycles(beats)`` bounds the feed;
    ``idle_pattern(idle, last_out)`` checks ``idle`` edge by edge (``last_out``: the edge
    the last output was taken)."""
    axes = (axis(3, 3, 2, pads=(1, 1)), axis(4, 3, 3))
    x = random_values(_rng(seed), np.float32, (1, 1, 3, 4), edge_fraction=0.2)
    values, indices = oracle(x, axes)
    beats = [{"data": int(b)} for b in reference.bits_of(x).reshape(-1)]

    async def clear_then_pool(ctx):
        assert ctx.get(dut.idle) == 0
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        payloads, idle, last_out = await feed_a_beat_a_cycle(ctx, dut, beats,
                                                             cycles(len(beats)))
        idle_pattern(idle, last_out)
        got = reference.from_bits(np.array([int(p.data) & 0xFFFF_FFFF for p in payloads],
                                           dtype=np.uint32), format_of(np.float32))
        reference.assert_same_bits(got, values)
        assert [int(p.index[0]) for p in payloads] == list(indices)

    run_streams(dut, sources={dut.i: beats[:5]}, sinks={"o": (dut.o, 0)}, stalls=stalls,
                setup=configure(dut, np.float32, axes), check=clear_then_pool, **run)


@pytest.mark.parametrize("serial_products", [False, True], ids=["parallel", "serial"])
@stall_params
def test_clear_abandons_partial_image(stalls, serial_products):
    # One output column: the last outputs come one at a time, so idle sees every stage.
    dut = shared_design(WindowMaxPool, max_rank=2, max_extent=3, max_columns=4,
                        serial_products=serial_products)

    def idle_pattern(idle, last_out):
        # Not idle while the configuration settles; idle until the first element is taken
        # (at edge settle + 1), then not until the last output is taken.
        settle = dut.settle
        assert idle == ([0] * settle + [1] + [0] * (last_out - settle - 1)
                        + [1] * (len(idle) - last_out))
    _clear_mid_image(dut, stalls, "clear", lambda beats: beats + dut.settle + dut.latency + 10,
                     idle_pattern)


def _run_bench_and_check(dut, bench, received, values, indices, dtype):
    """Run ``bench`` on ``dut`` (it fills ``received`` with ``(data, index)`` of each output,
    element 0 of the lane) and compare them with the oracle's ``values`` and ``indices``."""
    from amaranth.sim import Simulator
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    fmt = format_of(dtype)
    assert [index for _, index in received] == list(indices)
    mask = (1 << fmt.bits) - 1
    got = reference.from_bits(np.array([d & mask for d, _ in received], dtype=fmt.uint_dtype),
                              fmt)
    reference.assert_same_bits(got, values)


def test_clear_drops_results_in_flight():
    # A window's result is inside the compare tree (the sink not ready) when ``clear`` comes:
    # the pipeline's valid flags are cleared with it, so after the clear exactly the next
    # image's outputs come out (the flags were once reset-less registers: the stale result
    # then came out first, before the new image's).
    dut = WindowMaxPool(max_rank=1, max_extent=5)
    axes = (axis(6, 2, 2),)
    x = random_values(_rng("clear in flight"), np.float64, (1, 1, 6), edge_fraction=0.2)
    values, indices = oracle(x, axes)
    beats = [int(b) for b in reference.bits_of(x).reshape(-1)]
    received = []

    async def bench(ctx):
        configure(dut, np.float64, axes)(ctx)
        await ctx.tick().repeat(WindowMaxPool.SETTLE)
        for beat in beats[:4]:                   # windows 0 and 1 end, the sink not ready
            ctx.set(dut.i.payload.data, beat)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)
        await ctx.tick().repeat(3)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        await ctx.tick().repeat(WindowMaxPool.SETTLE)
        payloads, _, _ = await feed_a_beat_a_cycle(
            ctx, dut, [{"data": beat} for beat in beats], len(beats) + dut.latency + 21)
        received.extend((int(p.data), int(p.index[0])) for p in payloads)

    _run_bench_and_check(dut, bench, received, values, indices, np.float64)


def test_parameters():
    dut = WindowMaxPool(max_rank=2, max_extent=5, max_columns=32, max_plane=99)
    assert dut.limits == {"max_rank": 2, "max_extent": 5, "extents": (5, 5), "max_columns": 32,
                          "max_plane": 1, "dim_bits": 16, "index_bits": 32}
    dut = WindowMaxPool(max_rank=3, max_extent=(3, 13, 13))
    assert (dut.max_extent, dut.extents) == (13, (3, 13, 13))
    for bad in [dict(max_rank=0), dict(max_rank=4), dict(max_extent=0), dict(max_columns=0),
                dict(index_bits=1.5), dict(max_rank=True), dict(max_extent=(3, 3)),
                dict(max_extent=(3, 0, 3)), dict(max_extent=(3, 3, True)),
                dict(max_extent=[3, 3.0, 3])]:
        with pytest.raises(ValueError):
            WindowMaxPool(**bad)


def _random_axis(rng, size_limit):
    """A random axis whose windows all hold an element: pads below the extent, and a window
    that would start in the right padding dropped (as ceil mode does)."""
    while True:
        size = int(rng.integers(1, size_limit + 1))
        kernel, stride, dilation = (int(v) for v in rng.integers(1, 4, size=3))
        extent = (kernel - 1) * dilation + 1
        if extent > 4:
            continue
        pads = tuple(int(p) for p in rng.integers(0, extent, size=2))
        if size + pads[0] + pads[1] < extent:
            continue
        a = axis(size, kernel, stride, dilation, pads, ceil=bool(rng.integers(0, 2)))
        if all(any(0 <= p < size for p in a.taps(o)) for o in range(a.out)):
            return a


@pytest.mark.parametrize("seed", [*range(6), *(pytest.param(seed, marks=pytest.mark.slow(
    reason="18 more random geometries through Amaranth's simulator")) for seed in range(6, 24))])
@unit_params
def test_random_geometry(seed, unit):
    # Random rank, geometry, dtype and stalls; values with ties and edge values.
    rng = _rng("random", seed)
    rank = int(rng.integers(1, 4))
    axes = tuple(_random_axis(rng, {1: 30, 2: 10, 3: 5}[rank]) for _ in range(rank))
    dtype = ALL_DTYPES[seed % len(ALL_DTYPES)]
    shape = (int(rng.integers(1, 4)), 1) + tuple(a.size for a in axes)
    x = random_values(rng, dtype, shape, edge_fraction=0.3)
    if seed % 2:
        x = rng.choice(x.reshape(-1)[:3], size=shape)          # few distinct values: ties
    check_window_pool(x, axes, stalls=Stalls(rng.random() * 0.6, rng.random() * 0.6, seed),
               spare=int(rng.integers(0, 3)), unit=unit)


# --- serial products ---------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["resnet-stem", "3d", "1d-k13s1p6", "2d-5x5s1p2",
                                  "1d-tail-beyond-the-first-gap", "1d-ceil-overlapped"])
def test_serial_products_give_the_same_outputs_at_the_same_edges_after_a_longer_settle(case):
    # The configuration's products one after another: every value and index as the oracle's,
    # every output at the edge the parallel unit gives it (``exact``) moved by the longer
    # settle: 7 x rank - 1 products of 18 cycles (16-bit fields), and 2 cycles more.
    dtype, images, axes = CYCLE_CASES[case]
    x = random_values(_rng("serial cycles", case), dtype,
                      (images, 1) + tuple(a.size for a in axes), edge_fraction=0.3)
    check_window_pool(x, axes, stalls=NO_STALLS, exact=True, serial_products=True)
    rank = len(axes)
    assert WindowMaxPool(max_rank=rank, serial_products=True).settle == \
        WindowMaxPool.SETTLE + (7 * rank - 1) * 18 + 2


def test_serial_products_with_fields_narrower_than_the_reach():
    # 2-bit configuration fields on a unit of extent 5: a window's reach (up to 4) is wider
    # than a field, and is still a factor of the serial products.
    dut = WindowMaxPool(max_rank=1, max_extent=5, dim_bits=2, index_bits=8,
                        serial_products=True)
    assert dut.settle == WindowMaxPool.SETTLE + 6 * (3 + 2) + 2
    x = random_values(_rng("narrow fields"), np.float32, (2, 1, 3), edge_fraction=0.4)
    check_window_pool(x, (axis(3, 3, 1, dilation=2, pads=(2, 2)),), stalls=STALL_PATTERNS[1],
                      dut=dut)


@stall_params
def test_serial_products_under_stalls(stalls):
    # Geometries whose products are all different (dilations, pads, strides above the
    # kernel, several images), edge values, stalls on both sides.
    rng = _rng("serial stalls", str(stalls))
    for case in ("2d-dilated", "3d-pads-dilation", "1d-k5-stride-beyond-kernel",
                 "2d-7x5-dilated-ceil"):
        dtype, images, axes = GEOMETRY[case]
        x = random_values(rng, dtype, (images, 2) + tuple(a.size for a in axes),
                          edge_fraction=0.5)
        check_window_pool(x, axes, stalls=stalls, serial_products=True,
                          per_axis=case in PER_AXIS)


def test_a_clear_while_the_serial_products_are_computed_starts_them_over():
    # The products of one configuration half computed, then another configuration and
    # ``clear`` (as the engine starts a request): the products are the new configuration's.
    dut = WindowMaxPool(max_rank=2, max_extent=3, max_columns=8, serial_products=True)
    before = (axis(7, 2, 1, dilation=2), axis(8, 3, 3, pads=(2, 1)))
    axes = (axis(5, 3, 2, pads=(1, 1)), axis(6, 3, 2, pads=(1, 1)))
    x = random_values(_rng("clear in products"), np.float32, (1, 1, 5, 6), edge_fraction=0.3)
    values, indices = oracle(x, axes)
    beats = [{"data": int(b)} for b in reference.bits_of(x).reshape(-1)]
    received = []

    async def bench(ctx):
        configure(dut, np.float32, before)(ctx)
        await ctx.tick().repeat(dut.settle // 2)
        assert not ctx.get(dut.i.ready)
        configure(dut, np.float32, axes)(ctx)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        payloads, idle, _ = await feed_a_beat_a_cycle(
            ctx, dut, beats, len(beats) + dut.settle + dut.latency + 10)
        assert idle[:dut.settle + 1] == [0] * dut.settle + [1]
        received.extend((int(p.data), int(p.index[0])) for p in payloads)

    _run_bench_and_check(dut, bench, received, values, indices, np.float32)


# --- the serial unit ---------------------------------------------------------------------------
# Its values, indices and geometry are tested with the pipelined unit's above (``unit``); here
# what is its own: the cycles, the status, a clear, the parameters.

def serial_arrivals(dut, axes, lanes, per_lane):
    """The edges at which a :class:`SerialWindowMaxPool` with an always-ready sink and input
    gives its outputs: a lane taken at ``settle + 1``, then each after the previous one's
    :meth:`~SerialWindowMaxPool.lane_cycles`; a window leaves after the lane at its last element
    (row-major, the last tap clipped to the image), the ``k``-th of that lane ``2 + updates +
    k * (2 * elements + 2)`` edges after it was taken."""
    sizes = [a.size for a in axes]
    positions = list(itertools.product(*(range(s) for s in sizes)))
    closing = {}
    for window in itertools.product(*(range(a.out) for a in axes)):
        last = tuple(min(a.taps(o)[-1], a.size - 1) for a, o in zip(axes, window))
        closing.setdefault(positions.index(last), []).append(window)
    updates = 2 * int(np.prod(dut.extents)) * per_lane
    arrivals, taken = [], dut.settle + 1
    for lane in range(lanes):
        for position in range(len(positions)):
            leaving = len(closing.get(position, []))
            arrivals += [taken + 2 + updates + k * (2 * per_lane + 2)
                         for k in range(1, leaving + 1)]
            taken += dut.lane_cycles(per_lane, leaving)
    return arrivals


@pytest.mark.parametrize("case", ["resnet-stem", "2x2s2", "3d", "1d-wide-extent",
                                  "1d-ceil-overlapped"])
def test_serial_exact_cycles(case):
    dtype, images, axes = CYCLE_CASES[case]
    x = random_values(_rng("serial cycles", case), dtype,
                      (images, 1) + tuple(a.size for a in axes), edge_fraction=0.3)
    run = check_window_pool(x, axes, stalls=NO_STALLS, unit=SerialWindowMaxPool)
    per_lane = 8 // format_of(dtype).nbytes
    lanes = -(-images // per_lane)
    dut = shared_design(SerialWindowMaxPool, max_rank=len(axes),
                        max_extent=max((a.kernel - 1) * a.dilation + 1 for a in axes),
                        max_columns=axes[-1].out + 2,
                        max_plane=int(np.prod([a.out for a in axes[1:]])) + 2)
    assert run.arrivals["o"] == serial_arrivals(dut, axes, lanes, per_lane)


@pytest.mark.parametrize("case", ["resnet-stem", "3d"])
def test_a_serial_unit_without_indices_gives_the_same_maxima_at_the_same_edges(case):
    """``index_bits=0``: no indices kept, and the same values at the same edges as with
    them (the cycle formula of :meth:`SerialWindowMaxPool.lane_cycles`)."""
    dtype, images, axes = CYCLE_CASES[case]
    x = random_values(_rng("serial without indices", case), dtype,
                      (images, 1) + tuple(a.size for a in axes), edge_fraction=0.3)
    dut = shared_design(SerialWindowMaxPool, max_rank=len(axes),
                        max_extent=max((a.kernel - 1) * a.dilation + 1 for a in axes),
                        max_columns=axes[-1].out + 2,
                        max_plane=int(np.prod([a.out for a in axes[1:]])) + 2, index_bits=0)
    assert dut.o.payload.index.shape().size == 0
    run = check_window_pool(x, axes, stalls=NO_STALLS, dut=dut, indices=False)
    per_lane = 8 // format_of(dtype).nbytes
    assert run.arrivals["o"] == serial_arrivals(dut, axes, -(-images // per_lane), per_lane)


@stall_params
def test_serial_clear_abandons_partial_image(stalls):
    dut = shared_design(SerialWindowMaxPool, max_rank=2, max_extent=3, max_columns=4)

    def idle_pattern(idle, last_out):
        # Not idle while the RAM is marked unwritten; idle until the first lane is taken,
        # then not until the last output is taken and the last lane (beyond every window of
        # the innermost axis) updated.
        assert idle[:dut.settle + 1] == [0] * dut.settle + [1]
        assert idle[dut.settle + 1:last_out] == [0] * (last_out - dut.settle - 1)
        after = idle[last_out:]
        assert after == sorted(after) and after[-1] == 1
    _clear_mid_image(dut, stalls, "serial clear",
                     lambda beats: dut.settle + beats * dut.lane_cycles(2, 2) + 10, idle_pattern,
                     drain_cycles=8 * dut.lane_cycles(2, 0))


def test_serial_parameters():
    dut = SerialWindowMaxPool(max_rank=2, max_extent=5, max_columns=32, max_plane=99)
    assert dut.limits == {"max_rank": 2, "max_extent": 5, "extents": (5, 5), "max_columns": 32,
                          "max_plane": 1, "dim_bits": 16, "index_bits": 32}
    # The ring holds every window open at once: 5 rows of 32 (and 5 more), for 8 elements.
    assert dut.ring == 256 and dut.settle == 8 * 256 + 1
    assert SerialWindowMaxPool(max_rank=3, max_extent=(1, 3, 3), max_columns=64,
                               dtype="float32").ring == 256
    for bad in [dict(max_rank=0), dict(max_rank=4), dict(max_extent=0), dict(max_columns=0),
                dict(max_extent=(3, 3)), dict(serial_products=True), dict(dtype="float8")]:
        with pytest.raises(ValueError):
            SerialWindowMaxPool(**bad)
