"""MaxPool through MAX_POOL in tiles (host/pool_window.py): any output width, any image size.

A pool wider than the pooling unit's line buffers (``window_columns`` outputs of the innermost
axis, ``window_plane`` of a plane) or larger than a frame is cut into tiles of the output grid,
each with its halo of input, each an exact ``MAX_POOL`` of its own. Checked here:

* the tiles of one axis (:func:`axis_tiles`) read exactly the input elements the whole axis's
  windows read, with the unit's own window rule (``window_geometry``) applied to each tile;
* the plan: every batch's parameter block passes the wire contract's rules, the halo is what
  the arithmetic says, and the largest tiles that fit are taken;
* bit for bit against the golden model on the fake board (random pools, forced tile lengths
  down to one output, tile edges in the padding, ceil_mode, SAME_*, dilations, strides above
  the kernel, NaN and signed-zero ties, Indices in both storage orders), on the simulated
  gateware (``sim``, tiny tensors: its ``window_columns`` is 16) and on the compiled board
  (``verilator``, window_columns 64: rows of 67 to 150 outputs, forced one-column tiles and
  tile edges in the padding, float32/float16/uint8/int8 with edge values).

The compiled board's cycles for the MaxPool classes of ``maxaccel bench --ratios`` are asserted
in ``tests/test_pool_classes.py``.
"""

import functools
import math
from itertools import product

import ml_dtypes
import numpy as np
import pytest
from fake_board import CountingBoard, FakeBoard
from boards import COMPILED_WINDOW, SMALL_WINDOW
from pool_configs import random_config

from maxaccel.contract.dtypes import format_of
from maxaccel.contract.pooling import resolve_max_pool, window_geometry
from maxaccel.contract.wire import (PARAMETERS, WINDOW_INDEX_BYTES, WINDOW_NARROW_FIELDS,
                                    Command, problems, window_fields)
from maxaccel.host.device import Device
from maxaccel.host.pool_window import axis_tiles, max_pool_by_window, plan_window_pool
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import random_values

# A fake board whose unit holds very little, so that small pools tile in every direction.
SMALL = SMALL_WINDOW


def random_axis(rng):
    """A resolved axis with windows that are not all padding (any pads, ceil_mode, auto_pad)."""
    while True:
        shape, attributes = random_config(rng, 1, max_size=20)
        try:
            (axis,) = resolve_max_pool(shape, **attributes).axes
        except ValueError:
            continue
        if not axis.empty_windows().any():
            return axis


def tile_axis(tile, axis):
    """The tile as the unit sees it: a ``MAX_POOL`` axis of its own (window_geometry)."""
    config = [dict(size=1, pad=0, out=1, kernel=1, stride=1, dilation=1)] * 2 + [dict(
        size=tile.size, pad=tile.pad, out=tile.out, kernel=axis.kernel, stride=axis.stride,
        dilation=axis.dilation)]
    return window_geometry(config).axes[-1]


def test_axis_tiles_read_what_the_whole_axis_reads():
    """For random axes and every tile length: the tiles cover the outputs once, in order; each
    tile's windows, by the unit's rule (taps ``o * stride - pad + j * dilation`` of the tile,
    outside ``0 .. size - 1`` padding), read the same input elements as the whole axis's
    windows; only tiles whose first window starts in the left padding have a pad, and a tile
    sends the span of its windows clipped to the image."""
    rng = np.random.default_rng(27)
    for _ in range(300):
        axis = random_axis(rng)
        taps, inside = axis.taps(), axis.inside()
        for length in range(1, axis.out_size + 1):
            tiles = axis_tiles(axis, length)
            assert [t.out_start for t in tiles] == list(range(0, axis.out_size, length))
            assert tiles[-1].out_stop == axis.out_size
            for tile in tiles:
                assert 0 <= tile.in_start < tile.in_stop <= axis.size
                part = tile_axis(tile, axis)
                mine = slice(tile.out_start, tile.out_stop)
                assert np.array_equal(part.inside(), inside[mine])
                assert np.array_equal(np.where(part.inside(), part.taps() + tile.in_start, -1),
                                      np.where(inside[mine], taps[mine], -1))
                assert tile.pad == max(0, axis.pad_begin - tile.out_start * axis.stride)
                # The tile's input is the span of its windows clipped to the image: exactly
                # what they read where its first (last) window starts (ends) inside it.
                read = taps[mine][inside[mine]]
                assert tile.in_start <= read.min() and read.max() < tile.in_stop
                if taps[tile.out_start, 0] >= 0:
                    assert read.min() == tile.in_start
                if taps[tile.out_stop - 1, -1] < axis.size:
                    assert read.max() == tile.in_stop - 1


def test_halo_of_a_wide_stem():
    """3x3 stride 2 pads 1 on 147 columns (an Inception stem), two tiles of 37 outputs: inputs
    0..73 and 73..146, one column crossing twice (cost 148 / 147)."""
    axis = resolve_max_pool((1, 1, 147), [3], [2], [1, 1]).axes[0]
    first, second = axis_tiles(axis, 37)
    assert (first.in_start, first.in_stop, first.pad, first.out) == (0, 74, 1, 37)
    assert (second.in_start, second.in_stop, second.pad, second.out) == (73, 147, 0, 37)


def small_identity(**board):
    return FakeBoard(**dict(SMALL, **board)).identity


def check_tile_plan(plan, geometry, fmt, identity, max_frame_bytes):
    """Every batch passes the wire contract; the tiles cover each output once; the elements
    sent are each tile's input."""
    covered = np.zeros(tuple(a.out_size for a in geometry.axes), np.int64)
    for batch in plan.batches:
        for tiles in batch.tiles:
            assert tuple((t.size, t.pad, t.out) for t in tiles) == \
                tuple((t.size, t.pad, t.out) for t in batch.tiles[0])
            covered[tuple(slice(t.out_start, t.out_stop) for t in tiles)] += 1
        fields = dict(batch.fields, groups=batch.groups_per_request, indices=int(plan.indices),
                      reserved=0)
        data = batch.groups_per_request * batch.group * batch.image * fmt.nbytes
        reply = batch.groups_per_request * batch.group * batch.image_out * (
            fmt.nbytes + WINDOW_INDEX_BYTES * plan.indices)
        assert not problems(Command.MAX_POOL, fields, identity, data_length=data)
        assert data <= max_frame_bytes and reply <= max_frame_bytes
        assert batch.groups * batch.group >= len(batch.tiles) * plan.images
    assert (covered == 1).all()


@pytest.mark.parametrize("shape, attributes, tiles, elements", [
    # 3 columns a tile at most (window_columns 3) with a kernel of 2 across rows: 10 outputs
    # -> 4 tiles reading columns 0..3, 2..6, 5..9 and 8..9, on both rows.
    ((1, 2, 2, 10), dict(kernel_shape=[2, 3], pads=[0, 1, 0, 1]), (3, 3, 3, 1),
     2 * (4 + 5 + 5 + 2)),
    # kernel == stride: no halo at all.
    ((1, 2, 2, 12), dict(kernel_shape=[2, 2], strides=[2, 2]), (3, 3), 24),
    # A 1-D pool needs no line buffer, so no tiling whatever its length; nor a kernel of 1
    # across rows.
    ((1, 2, 10), dict(kernel_shape=[3], pads=[1, 1]), (10,), 10),
    ((1, 2, 3, 12), dict(kernel_shape=[1, 2], strides=[1, 2]), (18,), 36),
    # the plane (6 outputs) bounds a 3-D pool's rows: 3 x (2 x 3) a tile, the outer axis whole.
    ((1, 2, 3, 4, 6), dict(kernel_shape=[3, 1, 1], pads=[1, 0, 0, 1, 0, 0]), (18,) * 4, 72),
])
def test_the_plan_takes_the_largest_tiles_that_fit(shape, attributes, tiles, elements):
    fmt = format_of(np.float32)
    identity = small_identity()
    geometry = resolve_max_pool(shape, **attributes)
    plan = plan_window_pool(geometry, fmt, identity, 1 << 20)
    check_tile_plan(plan, geometry, fmt, identity, 1 << 20)
    sizes = sorted((math.prod(t.out for t in tile) for b in plan.batches for tile in b.tiles),
                   reverse=True)
    assert tuple(sizes) == tiles
    assert sum(len(b.tiles) * b.image for b in plan.batches) == elements


def test_a_pool_the_unit_cannot_take_in_any_tile_has_no_plan():
    fmt = format_of(np.float32)
    identity = small_identity()
    # extent 5 > window_extent 3, whatever the tiling; 4 spatial axes; a window of padding only
    for shape, attributes in [((1, 1, 20), dict(kernel_shape=[5])),
                              ((1, 1, 2, 2, 2, 2), dict(kernel_shape=[1, 1, 1, 1])),
                              ((1, 1, 2), dict(kernel_shape=[2], dilations=[3], pads=[1, 1]))]:
        assert plan_window_pool(resolve_max_pool(shape, **attributes), fmt, identity,
                                1 << 20) is None
    # an image row larger than a frame: tiles of fewer columns
    geometry = resolve_max_pool((1, 4, 40), [2], [2])
    plan = plan_window_pool(geometry, fmt, identity, 64)
    check_tile_plan(plan, geometry, fmt, identity, 64)


def run_tiled(x, attributes, tile_outputs=None, max_frame_bytes=1 << 20, send_padding=None,
              **board):
    """MaxPool of ``x`` through MAX_POOL on a small fake board, tiled as asked (sending the
    padding as ``send_padding`` says); checked bit for bit (values and Indices) against the
    golden model. Returns the blocks sent."""
    fake = CountingBoard(**dict(SMALL, **board))
    fmt = format_of(x.dtype)
    geometry = resolve_max_pool(x.shape, **attributes)
    plan = plan_window_pool(geometry, fmt, fake.identity, max_frame_bytes, tile_outputs,
                            send_padding)
    assert plan is not None, f"{x.shape} {attributes} {tile_outputs}"
    check_tile_plan(plan, geometry, fmt, fake.identity, max_frame_bytes)
    with Device(fake) as device:
        request = lambda payload: device.link.request(Command.MAX_POOL, payload)   # noqa: E731
        y, indices = max_pool_by_window(x, fmt, plan, request, True)
        plain = max_pool_by_window(x, fmt, plan, request, False)
    want_y, want_indices = reference.max_pool(x, **attributes, return_indices=True)
    what = f"{x.shape} {x.dtype} {attributes} tiles {tile_outputs} sending {send_padding}"
    assert_same_bits(y, want_y, what)
    assert_same_bits(plain, want_y, what)
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(indices, want_indices, err_msg=what)
    return fake.blocks


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int8, np.float64])
def test_random_pools_in_random_tiles(dtype):
    """Random pools (pads, ceil_mode, auto_pad, dilations, strides above the kernel, both
    storage orders) in random tile lengths (one output up to the whole axis), edge values at
    a third of the positions (NaN payloads, ±0, infinities, integer extremes)."""
    rng = np.random.default_rng(np.dtype(dtype).num)
    fmt = format_of(dtype)
    identity = FakeBoard(**dict(SMALL, window_columns=64, window_plane=1024)).identity
    done = 0
    while done < 60:
        rank = int(rng.integers(1, 4))
        shape, attributes = random_config(rng, rank, max_size=9)
        try:
            geometry = resolve_max_pool(shape, **attributes)
        except ValueError:
            continue
        if plan_window_pool(geometry, fmt, identity, 1 << 20) is None:
            continue       # beyond the unit in any tile (extent, padding-only windows)
        tiles = [int(rng.integers(1, a.out_size + 1)) for a in geometry.axes]
        x = random_values(rng, fmt, shape, edge_fraction=0.3)
        run_tiled(x, attributes, tiles, window_columns=64, window_plane=1024)
        done += 1


@pytest.mark.parametrize("spatial, attributes", [
    ((11,), dict(kernel_shape=[3], strides=[2], pads=[2, 2], ceil_mode=True)),
    ((11,), dict(kernel_shape=[2], strides=[3], ceil_mode=True)),          # stride > kernel
    ((10,), dict(kernel_shape=[3], auto_pad="SAME_UPPER")),
    ((10,), dict(kernel_shape=[2], strides=[3], auto_pad="SAME_LOWER")),
    ((13,), dict(kernel_shape=[2], dilations=[2], pads=[2, 1])),           # extent 3
    ((5, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], storage_order=1)),
    ((4, 3, 9), dict(kernel_shape=[2, 2, 3], strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 2],
                     ceil_mode=True)),
])
def test_every_tile_length(spatial, attributes):
    """Every tile length of the innermost axis, from tiles of one output (the halo of a whole
    window each) to the whole row; with left pads of 2 the second tile of length 1 starts in
    the padding too, and the last tiles reach into the right padding or ceil_mode's."""
    rng = np.random.default_rng(7)
    x = random_values(rng, format_of(np.float32), (1, 3) + spatial, edge_fraction=0.4)
    geometry = resolve_max_pool(x.shape, **attributes)
    for length in range(1, geometry.axes[-1].out_size + 1):
        tiles = [a.out_size for a in geometry.axes[:-1]] + [length]
        run_tiled(x, attributes, tiles, window_columns=64, window_plane=1024)


def test_ties_and_nans_across_tile_edges():
    """±0 ties and NaNs on the columns two tiles share: the first in row-major window order
    wins (the smallest index), canonical NaN out, whatever tile the column is sent in."""
    x = np.full((1, 2, 3, 9), -0.0, np.float32)
    x[..., 1::2] = 0.0                       # +0 on the odd columns, -0 on the even
    x[0, 1, 1, 4] = np.uint32(0xFFC00001).view(np.float32)     # a NaN on a shared column
    attributes = dict(kernel_shape=[3, 3], strides=[1, 2], pads=[1, 1, 1, 1])
    for length in (1, 2, 3):
        blocks = run_tiled(x, attributes, [3, length], window_columns=64)
        # a request per tile configuration (first, inner, last), plain and with Indices
        assert len(blocks) == 2 * {1: 3, 2: 3, 3: 2}[length]
    y = reference.max_pool(x, **attributes)
    assert reference.bits_of(y)[0, 1, 1, 2] == 0x7FC00000


SENDINGS = [(False, False), (True, False), (False, True), (True, True)]
LOWEST_TEST_DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.uint8, np.int8,
                      np.int16, np.uint64]


def lowest_at_the_edges(rng, fmt, shape):
    """Edge values (NaN payloads, ±0, infinities, integer extremes) where the first and last
    two rows and columns of every image, and the whole of image 1, are mostly the lowest value
    of the order (``-inf``, the integer minimum): windows at the edges whose input elements
    all tie with the padding, and some holding a NaN, ``-0`` or ``+0`` beside it."""
    x = random_values(rng, fmt, shape, edge_fraction=0.5)
    bits = x.view(fmt.uint_dtype)
    lowest = rng.random(shape) < 0.8
    edges = np.zeros(shape, bool)
    edges[..., :2] = edges[..., -2:] = True
    if len(shape) > 3:
        edges[..., :2, :] = edges[..., -2:, :] = True
    edges[:, 1] = True
    bits[edges & lowest] = fmt.lowest
    return x


@pytest.mark.parametrize("dtype", LOWEST_TEST_DTYPES)
def test_sent_padding_is_the_lowest_value_and_never_wins(dtype):
    """Tiles that send their padding (the lowest value of the order) instead of leaving it to
    the unit, at the begin, the end or both of each axis, in every tile length: the golden
    model's values and Indices, in every dtype family, where the edge windows hold only the
    lowest value (its first input element is the winner, not a padded position), a NaN, ``-0``
    beside ``-inf`` (``-0`` wins) or ``+0`` beside the unsigned minimum; dilations whose first
    tap inside the image is not the window's second."""
    rng = np.random.default_rng(np.dtype(dtype).num + 1000)
    fmt = format_of(dtype)
    for spatial, attributes in [
            ((3, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
            ((4, 10), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
                           ceil_mode=True, storage_order=1)),
            ((11,), dict(kernel_shape=[3], dilations=[2], pads=[3, 3])),      # extent 5
            ((2, 3, 7), dict(kernel_shape=[2, 2, 3], pads=[1, 1, 2, 1, 0, 2])),
    ]:
        x = lowest_at_the_edges(rng, fmt, (1, 3) + spatial)
        geometry = resolve_max_pool(x.shape, **attributes)
        for sends in product(SENDINGS, repeat=len(spatial)):
            tiles = [int(rng.integers(1, a.out_size + 1)) for a in geometry.axes]
            blocks = run_tiled(x, attributes, tiles, send_padding=sends, window_columns=64,
                               window_plane=1024, window_extent=5)
            # padding sent: no tile leaves a left pad to the unit where its begin's is sent
            names = [window_fields(3 - len(spatial) + k) for k in range(len(spatial))]
            for k, (begin, _) in enumerate(sends):
                assert not begin or all(b[names[k]["pad"]] == 0 for b in blocks)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float32, np.float16])
def test_a_wrong_padding_value_or_index_fails_these_checks(monkeypatch, dtype):
    """Negative controls of the check above: padding sent as 0, as ``-0``, as a NaN or as the
    value just above the lowest, or a padded position kept as the index, each fails it."""
    import maxaccel.host.pool_window as pool_window
    fmt = format_of(dtype)
    x = lowest_at_the_edges(np.random.default_rng(4), fmt, (1, 3, 3, 9))
    attributes = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    run = functools.partial(run_tiled, x, attributes, [3, 3], send_padding=[(True, True)] * 2,
                            window_columns=64)
    run()
    above = fmt.lowest - 1 if fmt.is_float else fmt.lowest + 1     # -max finite, min + 1
    wrong = {0, above} | ({fmt.sign_mask, fmt.canonical_nan} if fmt.is_float else set())
    for bits in wrong - {fmt.lowest}:
        monkeypatch.setattr(pool_window, "_padding_bits", lambda fmt, bits=bits: bits)
        with pytest.raises(AssertionError):
            run()
    monkeypatch.undo()
    monkeypatch.setattr(pool_window, "_first_input_where_padding_won",
                        lambda geometry, where: where)
    with pytest.raises(AssertionError):
        run()


def test_the_planner_sends_padding_only_to_save_zero_images():
    """On the compiled board's capacities (a fake board): 80 uint8 images of 128 x 128, 3x3
    stride 1 pads 1, in tiles of 64 output columns, would fill 2.5 groups of 32 in each
    configuration of a row's first and last tile; the plan sends both columns of padding
    (66 a tile instead of 65) so that both tiles are one configuration and no zero image is
    sent, fewer elements on the link than the same grid leaving the padding to the unit. No
    other class of the MaxPool table, in any dtype, with or without Indices, sends padding
    (none has zero images to save), and with 64 channels (two whole groups) the peak picking
    sends none either."""
    from maxaccel.bench.pools import POOL_CLASSES, POOL_DTYPES
    identity = FakeBoard(**COMPILED_WINDOW).identity
    fmt = format_of(np.uint8)
    geometry = resolve_max_pool((1, 80, 128, 128), [3, 3], pads=[1, 1, 1, 1])
    plan = plan_window_pool(geometry, fmt, identity, 1 << 20)
    check_tile_plan(plan, geometry, fmt, identity, 1 << 20)
    assert plan.filler_images() == 0
    assert {tiles[-1].sent_pad for b in plan.batches for tiles in b.tiles} == {(1, 0), (0, 1)}
    assert {tiles[-1].size for b in plan.batches for tiles in b.tiles} == {66}
    assert {tiles[0].sent_pad for b in plan.batches for tiles in b.tiles} == {(0, 0)}
    assert plan.padding_elements() == 80 * 2 * 130          # two columns of two row tiles
    rows = [b.tiles[0][0].out for b in plan.batches]
    unit_pads = plan_window_pool(geometry, fmt, identity, 1 << 20, [rows[0], 64])
    assert unit_pads.filler_images() == 4 * 16
    assert plan.wire_elements() < unit_pads.wire_elements()
    for pool, dtype, indices in product(POOL_CLASSES, POOL_DTYPES, (True, False)):
        for channels in {pool.shape[1], 64}:
            if (pool.name, dtype, channels) == ("3x3 s1 p1, 80x128x128", "uint8", 80):
                continue
            shape = (1, channels) + pool.shape[2:]
            plan = plan_window_pool(resolve_max_pool(shape, **pool.attributes),
                                    format_of(np.dtype(dtype)), identity, 1 << 20,
                                    indices=indices)
            assert plan.padding_elements() == 0, (pool.name, dtype, channels, indices)


def test_frames_without_indices_hold_more_groups():
    """A reply without Indices is 1 byte an output for uint8 instead of 5: planned without
    them (as :meth:`Device.max_pool` does when none are asked), the 80-channel peak picking on
    the compiled board's capacities and 1 MiB frames goes in whole columns of 128 rows (one
    configuration, 66 x 128 a tile) and 2 requests of up to 3 groups, where the plan with
    Indices needs rows in two tiles and 10 requests of one group. A plan without Indices is
    refused for a call that asks for them; both give the golden model's bits."""
    identity = FakeBoard(**COMPILED_WINDOW).identity
    fmt = format_of(np.uint8)
    geometry = resolve_max_pool((1, 80, 128, 128), [3, 3], pads=[1, 1, 1, 1])

    def requests(plan):
        return sum(-(-b.groups // b.groups_per_request) for b in plan.batches)

    with_indices = plan_window_pool(geometry, fmt, identity, 1 << 20)
    plain = plan_window_pool(geometry, fmt, identity, 1 << 20, indices=False)
    assert (with_indices.indices, plain.indices) == (True, False)
    assert requests(with_indices) == 10 and len(with_indices.batches) == 2
    assert requests(plain) == 2
    ((tiles, *_),) = [b.tiles for b in plain.batches]
    assert [(t.size, t.pad, t.out) for t in tiles] == [(128, 1, 128), (66, 0, 64)]
    check_tile_plan(plain, geometry, fmt, identity, 1 << 20)
    x = lowest_at_the_edges(np.random.default_rng(8), fmt, (1, 5, 3, 8))
    attributes = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    fake = FakeBoard(**SMALL)
    with Device(fake) as device:
        request = lambda payload: device.link.request(Command.MAX_POOL, payload)   # noqa: E731
        plan = plan_window_pool(resolve_max_pool(x.shape, **attributes), fmt, fake.identity,
                                1 << 20, indices=False)
        assert_same_bits(max_pool_by_window(x, fmt, plan, request, False),
                         reference.max_pool(x, **attributes))
        with pytest.raises(ValueError, match="Indices"):
            max_pool_by_window(x, fmt, plan, request, True)


def test_the_device_tiles_a_wide_pool_and_still_sends_each_output_once():
    """Through :meth:`Device.max_pool`: 40 output columns on a unit of 3 go through MAX_POOL
    (not REDUCE), in tiles whose requests together send the input plus the halo."""
    fake = CountingBoard(**SMALL)
    rng = np.random.default_rng(5)
    x = random_values(rng, format_of(np.float16), (1, 4, 2, 40), edge_fraction=0.2)
    attributes = dict(kernel_shape=[2, 3], strides=[1, 1], pads=[0, 1, 1, 1])
    with Device(fake) as device:
        y, indices = device.max_pool(x, **attributes, return_indices=True)
        assert device.last_max_pool_route == Command.MAX_POOL
    want = reference.max_pool(x, **attributes, return_indices=True)
    assert_same_bits(y, want[0])
    np.testing.assert_array_equal(indices, want[1])
    inner = window_fields(2)
    assert max(b[inner["out"]] for b in fake.blocks) <= SMALL["window_columns"]
    sent = sum(b["groups"] * b["group"] * b[inner["size"]] * b[window_fields(1)["size"]]
               for b in fake.blocks)
    # 14 tiles of 3 outputs (the last of 1): 5 columns each, 40 + 2 * 13 halo columns
    assert sent == 4 * 2 * (40 + 2 * 13)


def test_a_unit_made_for_small_images_without_indices_still_pools_every_image():
    """On a unit of fields up to 15 without Indices (``window_field_max``, ``window_indices``
    0): a 1 x 3 x 40 x 33 image pools through ``MAX_POOL`` in tiles of at most 15 elements and
    outputs an axis, with the golden model's bits; asked for Indices it goes through
    ``REDUCE`` (exact too), and on a core without the run reducer that is a ``ValueError``
    naming ``window_indices``, before anything is sent."""
    x = random_values(np.random.default_rng(11), format_of(np.float32), (1, 3, 40, 33),
                      edge_fraction=0.3)
    attributes = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    narrow = dict(SMALL, window_columns=64, window_field_max=15, window_indices=0)
    fake = CountingBoard(**narrow)
    with Device(fake) as device:
        assert_same_bits(device.max_pool(x, **attributes), reference.max_pool(x, **attributes))
        assert device.last_max_pool_route == Command.MAX_POOL
        assert max(b[name] for b in fake.blocks for name in WINDOW_NARROW_FIELDS) <= 15
        y, indices = device.max_pool(x, **attributes, return_indices=True)
        assert device.last_max_pool_route == Command.REDUCE
    want = reference.max_pool(x, **attributes, return_indices=True)
    assert_same_bits(y, want[0])
    np.testing.assert_array_equal(indices, want[1])
    without_reducer = FakeBoard(**narrow, reduce_lanes=0)
    with Device(without_reducer) as device:
        sent = len(without_reducer.requests)
        with pytest.raises(ValueError, match="window_indices is 0"):
            device.max_pool(x, **attributes, return_indices=True)
        assert len(without_reducer.requests) == sent


def test_tiles_through_the_simulated_gateware():
    """The same bits through the Amaranth-simulated core (``sim``: window_columns 16): a row
    of 20 outputs in two tiles, with Indices, edge values and a ceil_mode tail."""
    from maxaccel.host import open_device
    rng = np.random.default_rng(3)
    with open_device("sim") as device:
        assert device.identity.window_columns == 16
        for dtype, spatial, attributes in [
                (np.float32, (2, 20), dict(kernel_shape=[2, 3], pads=[0, 1, 1, 1])),
                (np.uint8, (39,), dict(kernel_shape=[3], strides=[2], pads=[1, 0],
                                       ceil_mode=True))]:
            x = random_values(rng, format_of(dtype), (1, 2) + spatial, edge_fraction=0.3)
            y, indices = device.max_pool(x, **attributes, return_indices=True)
            assert device.last_max_pool_route == Command.MAX_POOL
            want = reference.max_pool(x, **attributes, return_indices=True)
            assert_same_bits(y, want[0])
            np.testing.assert_array_equal(indices, want[1])


def test_sent_padding_through_the_simulated_gateware():
    """On the Amaranth-simulated core (``sim``: window_columns 16, groups of 16 bytes), a row
    of 32 outputs in two tiles, on 20 uint8 and 12 float16 images: the planner sends the
    padding (one configuration, no group of zero images per tile), and the unit's results
    are the golden model's, Indices included, with the lowest value at the edges (windows
    whose every element ties with the padding), NaN, ±0."""
    from maxaccel.host import open_device
    rng = np.random.default_rng(31)
    attributes = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    with open_device("sim") as device:
        for dtype, channels in [(np.uint8, 20), (np.float16, 12)]:
            fmt = format_of(dtype)
            x = lowest_at_the_edges(rng, fmt, (1, channels, 2, 32))
            plan = plan_window_pool(resolve_max_pool(x.shape, **attributes), fmt,
                                    device.identity, device.max_frame_bytes)
            assert plan.padding_elements() > 0 and plan.filler_images() < channels
            y, indices = device.max_pool(x, **attributes, return_indices=True)
            assert device.last_max_pool_route == Command.MAX_POOL
            want = reference.max_pool(x, **attributes, return_indices=True)
            assert_same_bits(y, want[0])
            np.testing.assert_array_equal(indices, want[1])


def test_tile_lengths_are_checked():
    geometry = resolve_max_pool((1, 1, 4, 4), [2, 2])
    for bad in ([1], [0, 1], [1, 2, 3]):
        with pytest.raises(ValueError, match="tile_outputs"):
            plan_window_pool(geometry, format_of(np.float32), small_identity(), 1 << 20, bad)


def test_random_pools_as_the_planner_tiles_them():
    """Random pools through :meth:`Device.max_pool` on a unit of 3 columns and a 6-output
    plane, behind frames of 256 bytes: the planner's own tiling (and its route decision)
    gives the golden model's bits, Indices included, and every MAX_POOL block it sends fits."""
    rng = np.random.default_rng(2027)
    fake = CountingBoard(**SMALL)
    routes = set()
    with Device(fake, max_frame_bytes=256) as device:
        done = 0
        while done < 150:
            shape, attributes = random_config(rng, int(rng.integers(1, 4)), max_size=10)
            try:
                want = reference.max_pool(np.zeros(shape, np.float32), **attributes)
            except ValueError:
                continue
            x = random_values(rng, format_of(np.float32), shape, edge_fraction=0.3)
            want = reference.max_pool(x, **attributes, return_indices=True)
            y, indices = device.max_pool(x, **attributes, return_indices=True)
            assert_same_bits(y, want[0], f"{shape} {attributes}")
            np.testing.assert_array_equal(indices, want[1], err_msg=f"{shape} {attributes}")
            routes.add(device.last_max_pool_route)
            done += 1
    assert routes == {Command.MAX_POOL, Command.REDUCE}
    # Rows longer than the line buffers only where no line buffer is used (a kernel of 1 across
    # rows, which 1-D pools have).
    middle, inner = window_fields(1), window_fields(2)
    assert fake.blocks and all(
        b[inner["out"]] <= SMALL["window_columns"] or b[middle["kernel"]] == 1 for b in fake.blocks)
    assert any(b[inner["out"]] > SMALL["window_columns"] for b in fake.blocks)


# ---- The compiled board (window_columns 64): the same cases through the real gateware.

VERILATOR_POOLS = [
    # (spatial shape, attributes, tile lengths per axis or None for the planner's own)
    ((5, 150), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), None),           # 3 tiles of 50
    ((4, 147), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=True),
     None),
    ((3, 140), dict(kernel_shape=[3, 2], strides=[1, 2], auto_pad="SAME_UPPER"), None),
    ((3, 141), dict(kernel_shape=[2, 3], strides=[2, 1], auto_pad="SAME_LOWER",
                    storage_order=1), None),
    # 1-D rows go whole (no line buffer); forced tiles check the halo arithmetic on them.
    ((131,), dict(kernel_shape=[2], dilations=[2], pads=[2, 1], strides=[1]), [50]),
    ((200,), dict(kernel_shape=[2], strides=[3], ceil_mode=True), None),   # stride > kernel
    ((3, 17), dict(kernel_shape=[3, 3], strides=[1, 2], pads=[2, 2, 2, 2]), [4, 1]),
    ((2, 3, 12), dict(kernel_shape=[2, 2, 3], strides=[1, 1, 2], pads=[1, 0, 1, 0, 1, 2],
                      ceil_mode=True), [2, 3, 1]),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int8])
@pytest.mark.parametrize("spatial, attributes, tiles", VERILATOR_POOLS)
def test_tiles_through_the_compiled_gateware(compiled_device, dtype, spatial, attributes, tiles):
    """Wide pools (more outputs than the unit's 64 columns) and forced tiles (one output
    column, edges in the padding) on the compiled board, edge values at 40% of the positions
    (NaN payloads, ±0 ties, infinities, integer extremes): the golden model's bits and
    Indices."""
    rng = np.random.default_rng(len(spatial) * 100 + spatial[-1])
    fmt = format_of(dtype)
    x = random_values(rng, fmt, (1, 6) + spatial, edge_fraction=0.4)
    want_y, want_indices = reference.max_pool(x, **attributes, return_indices=True)
    what = f"{x.shape} {fmt.numpy_dtype} {attributes} tiles {tiles}"
    # MAX_POOL as the planner tiles the pool (or as forced), whatever route Device.max_pool
    # would take (with 6 images in groups of 8, 16 or 32, REDUCE moves fewer elements for the
    # stride-3 pool: it never sends the samples no window reads).
    plan = plan_window_pool(resolve_max_pool(x.shape, **attributes), fmt,
                            compiled_device.identity, compiled_device.max_frame_bytes, tiles)
    tiled = sum(len(b.tiles) for b in plan.batches) > 1
    assert tiles is not None or len(spatial) == 1 or tiled, what
    request = lambda p: compiled_device.link.request(Command.MAX_POOL, p)     # noqa: E731
    y, indices = max_pool_by_window(x, fmt, plan, request, True)
    assert_same_bits(y, want_y, what)
    np.testing.assert_array_equal(indices, want_indices, err_msg=what)
    assert_same_bits(max_pool_by_window(x, fmt, plan, request, False), want_y, what)


def test_a_wide_pool_takes_the_unit_on_the_compiled_board(compiled_device):
    """Device.max_pool of a pool wider than the unit (150 outputs a row, 3x3 stride 1, the
    heat-map peak picking's shape scaled down): MAX_POOL, not REDUCE."""
    x = random_values(np.random.default_rng(9), format_of(np.float16), (1, 6, 5, 150),
                      edge_fraction=0.4)
    attributes = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y, indices = compiled_device.max_pool(x, **attributes, return_indices=True)
    assert compiled_device.last_max_pool_route == Command.MAX_POOL
    want = reference.max_pool(x, **attributes, return_indices=True)
    assert_same_bits(y, want[0])
    np.testing.assert_array_equal(indices, want[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int8])
def test_sent_padding_through_the_compiled_gateware(compiled_device, dtype):
    """On the compiled board (groups of 32 bytes): a row of 128 outputs, 3x3 stride 1 pads 1
    (the peak picking's pool) on as many images as fill 1.5 groups, which the planner pools
    in two tiles that send their padding (3 groups instead of 4); and forced tiles sending
    the padding at either end of both axes, stride 2 and pads of 2. Values and Indices are
    the golden model's with the lowest value, NaN and ±0 at the edges."""
    fmt = format_of(dtype)
    rng = np.random.default_rng(fmt.dtype + 77)
    channels = 48 // fmt.nbytes
    x = lowest_at_the_edges(rng, fmt, (1, channels, 3, 128))
    attributes = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    plan = plan_window_pool(resolve_max_pool(x.shape, **attributes), fmt,
                            compiled_device.identity, compiled_device.max_frame_bytes)
    assert plan.padding_elements() > 0 and [b.groups for b in plan.batches] == [3]
    y, indices = compiled_device.max_pool(x, **attributes, return_indices=True)
    assert compiled_device.last_max_pool_route == Command.MAX_POOL
    want = reference.max_pool(x, **attributes, return_indices=True)
    assert_same_bits(y, want[0])
    np.testing.assert_array_equal(indices, want[1])
    x = lowest_at_the_edges(rng, fmt, (1, 6, 5, 17))
    attributes = dict(kernel_shape=[3, 3], strides=[1, 2], pads=[2, 2, 2, 2])
    want = reference.max_pool(x, **attributes, return_indices=True)
    request = lambda p: compiled_device.link.request(Command.MAX_POOL, p)     # noqa: E731
    for sends in [((True, True), (True, True)), ((True, False), (False, True)),
                  ((False, True), (True, False))]:
        plan = plan_window_pool(resolve_max_pool(x.shape, **attributes), fmt,
                                compiled_device.identity, compiled_device.max_frame_bytes,
                                [3, 2], sends)
        y, indices = max_pool_by_window(x, fmt, plan, request, True)
        assert_same_bits(y, want[0], str(sends))
        np.testing.assert_array_equal(indices, want[1], err_msg=str(sends))
        assert_same_bits(max_pool_by_window(x, fmt, plan, request, False), want[0], str(sends))


def test_a_device_plans_a_pool_once_for_every_call_of_its_shape(monkeypatch):
    """Choosing a tiling is made once per pool, format, core and frame size
    (``plan_max_pool``), not on every call: a model pools the same shapes every run. Each
    call still pools its own input, bit for bit."""
    from maxaccel.host import device as device_module
    device_module.plan_max_pool.cache_clear()
    plans = []
    planner = device_module.plan_window_pool
    monkeypatch.setattr(device_module, "plan_window_pool",
                        lambda *args, **kwargs: plans.append(args) or planner(*args, **kwargs))
    rng = np.random.default_rng(7)
    with Device(FakeBoard()) as dev:
        for shape in [(1, 3, 11, 9)] * 3 + [(1, 3, 11, 10)] * 2:
            x = rng.standard_normal(shape).astype(np.float32)
            x[0, 1, 2, 3] = np.nan
            got = dev.max_pool(x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
            assert dev.last_max_pool_route == Command.MAX_POOL
            assert_same_bits(got, reference.max_pool(x, kernel_shape=[3, 3], strides=[2, 2],
                                                     pads=[1, 1, 1, 1]))
    assert [args[0].input_shape for args in plans] == [(1, 3, 11, 9), (1, 3, 11, 10)]
    device_module.plan_max_pool.cache_clear()
