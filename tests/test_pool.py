# amaranth: UnusedElaboratable=no
# (test_parameters builds pools only to inspect them or to see the constructor refuse.)

"""ChannelsLastPool: GlobalMaxPool (and, with its minimum select, ReduceMin over the spatial axes)
of channels-last pixel rows, checked bit-exactly against the golden model, with every stall
pattern, exact cycle counts and the status outputs."""

import zlib

import ml_dtypes
import numpy as np
import pytest
from cycle_exact import feed_a_beat_a_cycle

from maxaccel.hdl.pool import ChannelsLastPool
from maxaccel.contract.dtypes import FORMATS, format_of
from maxaccel.sim import reference
from maxaccel.sim.streams import (STALL_PATTERNS, Stalls, beats_from_rows, lanes_to_bytes,
                                  rows_from_beats, run_streams, shared_design)
from maxaccel.sim.values import edge_bits, random_values

FLOATS = [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32),
          np.dtype(np.float64)]
ALL_DTYPES = [f.numpy_dtype for f in FORMATS.values()]


def pixel_rows(x):
    """The channels-last rows of an ``N x C x D1..Dn`` tensor: one row of C elements per pixel,
    pixels of an image in C order of the spatial axes, images one after another."""
    n, c = x.shape[:2]
    pixels = x.reshape(n, c, int(np.prod(x.shape[2:]))).transpose(0, 2, 1)
    return [np.ascontiguousarray(pixels[i, p]).tobytes()
            for i in range(n) for p in range(pixels.shape[1])]


def golden(x, minimum=False):
    """GlobalMaxPool for the float dtypes ONNX allows; reduce_max over the spatial axes else;
    with ``minimum``, reduce_min over the spatial axes."""
    spatial = tuple(range(2, x.ndim))
    if minimum:
        return reference.reduce_min(x, axes=spatial, keepdims=True)
    if format_of(x.dtype).is_float:
        return reference.global_max_pool(x)
    return reference.reduce_max(x, axes=spatial, keepdims=True)


def configure(dut, dtype, pixels, channels, minimum=False):
    """The ``setup`` for :func:`run_streams`: the unit's dtype, pixels, channels and minimum
    select."""
    def setup(ctx):
        ctx.set(dut.dtype, format_of(dtype).dtype)
        ctx.set(dut.minimum, int(minimum))
        ctx.set(dut.pixels, pixels)
        ctx.set(dut.channels, channels)
    return setup


def check_pool(x, *, lanes, max_channels, stalls, rows=None, channels=None, pixels=None,
               expect_row_error=False, minimum=False):
    """Stream ``x`` channels-last through a ChannelsLastPool; compare with the golden model
    (the maxima, or with ``minimum`` the minima, in the same cycles).

    ``rows``, ``channels`` and ``pixels`` override what is derived from ``x`` (malformed input);
    then only the framing and the status are checked, not the values.
    """
    fmt = format_of(x.dtype)
    n, c = x.shape[:2]
    p = int(np.prod(x.shape[2:]))
    dut = shared_design(ChannelsLastPool, lanes, max_channels)
    assert c * fmt.nbytes <= dut.capacity_bytes
    rows = pixel_rows(x) if rows is None else rows
    pixels = p if pixels is None else pixels
    beats = beats_from_rows(rows, lanes)
    # Each image's output is framed as its last pixel's row: those input beats, in order.
    row_starts = np.cumsum([0] + [len(beats_from_rows([r], lanes)) for r in rows])
    last_pixel_beats = [index for image in range(len(rows) // pixels)
                        for index in range(row_starts[(image + 1) * pixels - 1],
                                           row_starts[(image + 1) * pixels])]

    setup = configure(dut, x.dtype, pixels, c if channels is None else channels, minimum)

    def status(ctx):
        assert ctx.get(dut.row_error) == expect_row_error, "row_error"
        assert ctx.get(dut.config_error) == 0, "config_error"
        assert ctx.get(dut.idle) == 1, "idle"

    run = run_streams(dut, sources={dut.i: beats},
                      sinks={"o": (dut.o, len(last_pixel_beats))},
                      stalls=stalls, setup=setup, check=status)
    received = run.received["o"]
    assert [(b.nbytes, b.first, b.last) for b in received] == [
        (beats[i]["nbytes"], beats[i]["first"], beats[i]["last"]) for i in last_pixel_beats]
    if stalls.idle == 0 and stalls.backpressure == 0:
        # One beat in per cycle from edge 1, and every output beat exactly LATENCY edges after
        # its input beat: no bubble anywhere, whatever the row length or pixel count.
        assert ChannelsLastPool.LATENCY == 7
        assert run.arrivals["o"] == [i + 1 + ChannelsLastPool.LATENCY for i in last_pixel_beats]
        assert run.cycles["o"] == len(beats) + ChannelsLastPool.LATENCY
    if not expect_row_error:
        got = np.frombuffer(b"".join(rows_from_beats(received)), dtype=x.dtype)
        reference.assert_same_bits(got.reshape((n, c) + (1,) * (x.ndim - 2)),
                                   golden(x, minimum), what=f"{x.dtype} {x.shape} lanes={lanes}"
                                   + (" minimum" if minimum else ""))
    return run


def from_bits(bits, dtype):
    dtype = np.dtype(dtype)
    return np.asarray(bits, dtype=f"u{dtype.itemsize}").view(dtype)


stall_params = pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)


# --- values --------------------------------------------------------------------------------------


@stall_params
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_every_dtype(dtype, stalls):
    # C = 5 of 8-byte elements is max_channels; for the others not a multiple of a beat.
    rng = np.random.default_rng(zlib.crc32(str(dtype).encode()))
    x = random_values(rng, dtype, (2, 5, 2, 3), edge_fraction=0.1)
    # Maxima and minima alternate over the stall patterns: both for every dtype.
    check_pool(x, lanes=2, max_channels=5, stalls=stalls, minimum=stalls.seed % 2 == 0)


@stall_params
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_nan_at_every_pixel_and_channel(dtype, stalls):
    # Image i has one NaN (of varying sign, payload, quietness) at pixel i // C, channel i % C;
    # the last image has none.
    fmt = format_of(dtype)
    nans = [b for b in edge_bits(fmt).view(fmt.uint_dtype)
            if reference.is_nan(from_bits(b, dtype))]
    c, d = 3, (3,)
    p = int(np.prod(d))
    rng = np.random.default_rng(1)
    finite = rng.standard_normal((c * p + 1, c) + d).astype(dtype)
    bits = finite.view(fmt.uint_dtype).copy()
    for image in range(c * p):
        bits[image, image % c, image // c] = nans[image % len(nans)]
    x = bits.view(dtype)
    check_pool(x, lanes=1, max_channels=c, stalls=stalls, minimum=stalls.seed % 2 == 0)


@stall_params
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_signed_zero_ties(dtype, stalls):
    # Channel c, pixel p holds -0 if bit p of c is set, else +0: every order of ±0 over 3 pixels.
    fmt = format_of(dtype)
    negative = np.array([[(ch >> p) & 1 for p in range(3)] for ch in range(8)], dtype=bool)
    bits = np.where(negative, fmt.sign_mask, 0).astype(fmt.uint_dtype)
    x = np.stack([bits, bits[::-1]]).reshape(2, 8, 1, 3).view(dtype)
    for minimum in (False, True):
        check_pool(x, lanes=2, max_channels=8, stalls=stalls, minimum=minimum)


@stall_params
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_infinities(dtype, stalls):
    # Image 0: -inf everywhere. Image 1: -inf but one finite lowest value and one +inf.
    x = np.full((2, 3, 2, 2), -np.inf, dtype=dtype)
    x[1, 0, 1, 1] = ml_dtypes.finfo(dtype).min
    x[1, 2, 0, 1] = np.inf
    check_pool(x, lanes=1, max_channels=3, stalls=stalls, minimum=stalls.seed % 2 == 0)


@stall_params
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_subnormals(dtype, stalls):
    fmt = format_of(dtype)
    rng = np.random.default_rng(7)
    shape = (3, 4, 5)
    magnitude = rng.integers(0, 1 << fmt.mantissa_bits, size=shape, dtype=np.uint64)
    sign = rng.integers(0, 2, size=shape, dtype=np.uint64) << (fmt.bits - 1)
    bits = magnitude | sign
    bits[2] |= fmt.sign_mask                  # an image of negative subnormals and -0
    bits[1, 1] |= fmt.sign_mask               # a channel where -0 beats negative subnormals
    bits[1, 1, 0] = fmt.sign_mask
    x = bits.astype(fmt.uint_dtype).view(dtype)
    check_pool(x, lanes=2, max_channels=4, stalls=stalls, minimum=stalls.seed % 2 == 0)


# --- shapes and the accumulator hazard --------------------------------------------------------


SHAPE_CASES = {
    # name: (dtype, shape, lanes, max_channels)
    "one-channel": (np.float32, (3, 1, 5), 4, 1),
    "channels-not-multiple-lanes1": (np.float16, (2, 7, 3), 1, 2),
    "channels-not-multiple-lanes4": (np.float32, (2, 11, 2, 2), 4, 6),
    "max-channels-f64": (np.float64, (2, 6, 2, 2), 4, 6),
    "full-capacity-f64": (np.float64, (2, 8, 2, 2), 4, 6),
    "full-capacity-f16": (np.float16, (2, 16, 2, 2), 2, 3),
    "full-capacity-u8": (np.uint8, (2, 32, 3), 2, 3),
    "one-memory-entry": (np.float64, (3, 4, 2, 3), 4, 4),
    "one-pixel": (np.float32, (4, 6, 1, 1), 2, 3),
    "one-pixel-one-beat": (np.int8, (12, 3, 1), 1, 1),
    "one-beat-pixels": (np.float32, (3, 3, 4, 5), 2, 2),
    "one-beat-pixels-lanes1": (ml_dtypes.bfloat16, (3, 4, 2, 2, 3), 1, 1),
    "many-images": (np.int16, (8, 5, 2), 1, 2),
    "long-rows": (np.float64, (2, 12, 3), 1, 12),
    "zero-channels": (np.float32, (2, 0, 3), 1, 1),
    "spatial-rank-3": (np.int64, (2, 2, 2, 2, 2), 2, 2),
}


@stall_params
@pytest.mark.parametrize("case", SHAPE_CASES)
def test_shapes(case, stalls):
    dtype, shape, lanes, max_channels = SHAPE_CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    x = random_values(rng, dtype, shape, edge_fraction=0.05)
    check_pool(x, lanes=lanes, max_channels=max_channels, stalls=stalls)


@stall_params
@pytest.mark.parametrize("order", ["descending", "alternating"])
def test_one_beat_pixels_running_max(order, stalls):
    # One-beat pixels whose running maximum changes at every pixel, then holds: each beat
    # needs the value the previous beat is writing in the same cycle (the forwarding path).
    pixels = 12
    values = np.arange(pixels, dtype=np.int32)
    values = values[::-1] if order == "descending" else np.where(values % 2, values, -values)
    x = np.stack([values + 100 * ch for ch in range(2)])[None].repeat(3, axis=0)
    x[1] = -x[1]
    x[2, :, pixels // 2:] += 1000
    for minimum in (False, True):
        check_pool(x.astype(np.int32), lanes=1, max_channels=2, stalls=stalls, minimum=minimum)


@pytest.mark.parametrize("beats_per_pixel", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("stalls", [Stalls(0.0, 0.0, 11), Stalls(0.3, 0.0, 12),
                                    Stalls(0.6, 0.2, 13), Stalls(0.2, 0.5, 14)], ids=str)
def test_every_update_distance(beats_per_pixel, stalls):
    # An entry's next update comes beats_per_pixel beats later, plus whatever gaps the stalls
    # leave: 1 (merged before the loop), 2 (the loop's own result), 3 and 4 (forwarded) and 5
    # or more (from memory) all occur. Each channel of each image is a shuffled ramp, so its
    # maximum sits at a random pixel of either parity, and a lost or stale update shows.
    channels = max(2, 2 * beats_per_pixel - 1)      # int32, one lane: 2 channels a beat
    images, pixels = 4, 9
    rng = np.random.default_rng(beats_per_pixel)
    ramp = np.arange(pixels) * 1000
    x = np.stack([rng.permutation(ramp) * rng.choice([-1, 1])
                  for _ in range(images * channels)]).reshape(images, channels, pixels)
    x = (x + rng.integers(-500, 500, size=x.shape)).astype(np.int32)
    check_pool(x, lanes=1, max_channels=beats_per_pixel, stalls=stalls,
               minimum=(beats_per_pixel + stalls.seed) % 2 == 1)


# --- status ----------------------------------------------------------------------------------


@stall_params
@pytest.mark.parametrize("fault", ["short-row", "long-rows"])
def test_row_length_error(fault, stalls):
    # The unit keeps going: one output row per image, framed as its last pixel's row.
    rng = np.random.default_rng(3)
    x = random_values(rng, np.float32, (2, 6, 3), edge_fraction=0.0)
    rows = pixel_rows(x)
    channels = None
    if fault == "short-row":
        rows[4] = rows[4][:-4]            # image 1, pixel 1: 5 channels instead of 6
    else:
        channels = 5                      # configured one channel short of every row
    check_pool(x, lanes=2, max_channels=3, stalls=stalls, rows=rows, channels=channels,
               expect_row_error=True)


@stall_params
def test_partial_middle_beat_error(stalls):
    # Rows of 20 bytes split as 12 + 8: a partial beat before the last. Counted as full beats
    # they would make 16 + 8 = 24 bytes, the configured 6 channels: only the framing is wrong.
    lanes = 2
    dut = ChannelsLastPool(lanes, 3)
    rows = [r[:20] for r in pixel_rows(np.zeros((2, 6, 3), dtype=np.float32))]
    beats = []
    for row in rows:
        for index, chunk in enumerate([row[:12], row[12:]]):
            data = chunk.ljust(16, b"\0")
            beats.append({"data": [int.from_bytes(data[:8], "little"),
                                   int.from_bytes(data[8:], "little")],
                          "nbytes": len(chunk), "first": index == 0, "last": index == 1})

    setup = configure(dut, np.float32, 3, 6)
    run = _run_status_only(dut, beats, 4, stalls, setup,
                           {"row_error": 1, "config_error": 0, "idle": 1})
    assert [b.nbytes for b in run.received["o"]] == [12, 8] * 2


@stall_params
def test_missing_first_error(stalls):
    lanes = 2
    dut = ChannelsLastPool(lanes, 3)
    beats = beats_from_rows(pixel_rows(np.ones((2, 6, 3), dtype=np.float32)), lanes)
    beats[2] = dict(beats[2], first=False)       # image 0, pixel 1: its first beat (of 2)

    setup = configure(dut, np.float32, 3, 6)
    run = _run_status_only(dut, beats, 4, stalls, setup,
                           {"row_error": 1, "config_error": 0, "idle": 1})
    # The unit frames its output by its own beat count, so the output stays well formed.
    assert len(rows_from_beats(run.received["o"])) == 2


@stall_params
def test_rows_beyond_capacity(stalls):
    # 3 x f64 per pixel into 2 entries of 1 lane: both errors, the stream still flows and each
    # image still gives one row framed as its last pixel's (3 beats).
    lanes = 1
    dut = ChannelsLastPool(lanes, 2)
    beats = beats_from_rows(pixel_rows(np.ones((3, 3, 2), dtype=np.float64)), lanes)

    setup = configure(dut, np.float64, 2, 3)
    run = _run_status_only(dut, beats, 9, stalls, setup,
                           {"row_error": 1, "config_error": 1, "idle": 1})
    assert [(b.nbytes, b.first, b.last) for b in run.received["o"]] == \
        [(8, 1, 0), (8, 0, 0), (8, 0, 1)] * 3


def _run_status_only(dut, beats, out_count, stalls, setup, expect):
    def status(ctx):
        for name, value in expect.items():
            assert ctx.get(getattr(dut, name)) == value, name
    return run_streams(dut, sources={dut.i: beats}, sinks={"o": (dut.o, out_count)},
                       stalls=stalls, setup=setup, check=status)


@pytest.mark.parametrize("config, error", [
    ((np.float64, 1, 6), 0),      # 5 rounded up to 2 lanes x 3 entries: 48 bytes
    ((np.float64, 1, 7), 1),      # one channel beyond
    ((np.float32, 1, 12), 0),
    ((np.float32, 1, 13), 1),
    ((np.uint8, 1, 48), 0),
    ((np.uint8, 1, 49), 1),
    ((np.float32, 0, 1), 1),      # P = 0 is the host's job
])
def test_config_error(config, error):
    dtype, pixels, channels = config
    dut = ChannelsLastPool(2, 5)
    assert dut.capacity(dtype) == 48 // np.dtype(dtype).itemsize

    setup = configure(dut, dtype, pixels, channels)
    _run_status_only(dut, [], 0, Stalls(), setup,
                     {"config_error": error, "row_error": 0, "idle": 1})


@stall_params
def test_clear_abandons_partial_image(stalls):
    """A partial, malformed image, then ``clear``, then a whole image: only that one counts."""
    lanes = 1
    dut = ChannelsLastPool(lanes, 4)
    rng = np.random.default_rng(5)
    x = random_values(rng, np.float16, (2, 3, 2, 2), edge_fraction=0.1)
    rows = pixel_rows(x)
    first_image, second_image = rows[:4], rows[4:]
    aborted = beats_from_rows(first_image[:2] + [first_image[2][:2]], lanes)
    beats = beats_from_rows(second_image, lanes)

    setup = configure(dut, np.float16, 4, 3)

    async def clear_then_pool(ctx):
        assert ctx.get(dut.idle) == 0 and ctx.get(dut.row_error) == 1
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        assert ctx.get(dut.idle) == 1 and ctx.get(dut.row_error) == 0
        # The second image, one beat a cycle, the output always ready; idle, sampled at each
        # edge, must be low from the edge after the first beat in to the last beat out.
        received, idle, last_out = await feed_a_beat_a_cycle(ctx, dut, beats, len(beats) + 10)
        assert last_out == len(beats) + ChannelsLastPool.LATENCY
        assert idle == [1] + [0] * (last_out - 1) + [1] * (len(idle) - last_out)
        got = np.frombuffer(b"".join(lanes_to_bytes(p.data)[:p.nbytes] for p in received),
                            dtype=np.float16).reshape(1, 3, 1, 1)
        reference.assert_same_bits(got, golden(x[1:]))
        assert ctx.get(dut.idle) == 1 and ctx.get(dut.row_error) == 0

    run_streams(dut, sources={dut.i: aborted}, sinks={"o": (dut.o, 0)}, stalls=stalls,
                setup=setup, check=clear_then_pool)


def test_parameters():
    pool = ChannelsLastPool(4, 10)
    assert (pool.depth, pool.capacity_bytes) == (3, 96)
    assert [pool.capacity(t) for t in (np.float64, np.float32, ml_dtypes.bfloat16, np.int8)] \
        == [12, 24, 48, 96]
    for bad in [dict(lanes=0, max_channels=1), dict(lanes=1, max_channels=0),
                dict(lanes=1.5, max_channels=1)]:
        with pytest.raises(ValueError):
            ChannelsLastPool(**bad)
