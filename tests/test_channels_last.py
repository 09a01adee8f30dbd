"""The channels-last entry of the host: ReduceMax over the spatial axes of ``N x D1..Dn x C``
and ``global_max_pool(x, channels_last=True)`` reach ``POOL_CHANNELS_LAST`` (the gateware's
``ChannelsLastPool``) with no transpose, bit for bit the golden model's."""

import numpy as np
import pytest
from fake_board import FakeBoard

from maxaccel.host.device import Device
from maxaccel.contract.dtypes import FORMATS, DType
from maxaccel.host.plan import plan_channels_last
from maxaccel.contract.wire import Command, Status
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import random_values


@pytest.mark.parametrize("shape, axes, expected", [
    ((2, 4, 5, 3), (1, 2), (2, 20, 3)),          # NHWC, spatial axes
    ((2, 4, 5, 3), (-3, -2), (2, 20, 3)),        # negative axes
    ((1, 4, 5, 3), (1, 2), (1, 20, 3)),
    ((6, 3), (0,), (1, 6, 3)),                   # reduce the outer axis of a matrix
    ((2, 1, 4, 1, 3), (2,), (2, 4, 3)),          # size-1 axes do not break a block
    ((2, 4, 1, 3), (1, 2), (2, 4, 3)),
    ((2, 4, 5, 3), (1, 2, 3), None),             # innermost: contiguous runs already
    ((2, 4, 5, 3), (2, 3), None),
    ((2, 4, 5, 3), (1, 3), None),                # not one block
    ((2, 4, 5, 3), (0, 2), None),
    ((2, 4, 0, 3), (1, 2), None),                # empty: nothing to send
    ((2, 4, 5, 1), (1, 2), None),                # one channel: innermost once size 1 drops
])
def test_plan_channels_last(shape, axes, expected):
    assert plan_channels_last(shape, axes) == expected


def edge_nhwc(dtype, shape, seed):
    return random_values(np.random.default_rng(seed), dtype, shape, edge_fraction=0.5)


def commands(board, since):
    return [code for code, _ in board.log[since:]]


@pytest.mark.parametrize("dtype", [FORMATS[d].numpy_dtype for d in (
    DType.FLOAT, DType.FLOAT16, DType.BFLOAT16, DType.DOUBLE, DType.INT8, DType.UINT16,
    DType.INT64, DType.BOOL)])
def test_reduce_max_over_spatial_axes_is_one_pooling_command(dtype):
    x = edge_nhwc(dtype, (2, 3, 4, 5), 1)
    with Device(FakeBoard()) as dev:
        board = dev.link.transport
        for keepdims in (True, False):
            since = len(board.log)
            got = dev.reduce_max(x, axes=[1, 2], keepdims=keepdims)
            assert commands(board, since) == [Command.POOL_CHANNELS_LAST]
            assert_same_bits(got, reference.reduce_max(x, axes=[1, 2], keepdims=keepdims))


def test_nan_payloads_and_signed_zeros_per_channel():
    """Channel 0: +0 after -0; channel 1: -0 after +0; channel 2: a negative NaN with a payload
    among numbers; channel 3: a signalling NaN; channel 4: -inf only."""
    f32 = np.float32
    bits = np.array([
        [0x80000000, 0x00000000, 0x3F800000, 0x7F800001, 0xFF800000],
        [0x00000000, 0x80000000, 0xFFC00001, 0x3F800000, 0xFF800000],
        [0x80000000, 0x80000000, 0x40000000, 0x40000000, 0xFF800000],
    ], np.uint32)
    x = bits.view(f32).reshape(1, 3, 1, 5)          # N x H x W x C
    with Device(FakeBoard()) as dev:
        got = dev.global_max_pool(x, channels_last=True)
    assert got.shape == (1, 1, 1, 5)
    assert got.view(np.uint32).reshape(-1).tolist() == [
        0x00000000, 0x00000000, 0x7FC00000, 0x7FC00000, 0xFF800000]
    assert_same_bits(got.reshape(1, 5, 1, 1),
                     reference.global_max_pool(x.transpose(0, 3, 1, 2)))


def test_images_beyond_a_frame_go_in_pieces_of_pixels():
    x = edge_nhwc(np.float32, (3, 7, 9, 8), 2)       # 8 float32 channels: 32-byte pixels
    want = reference.reduce_max(x, axes=[1, 2])
    # pool_channels=4: the unit holds 32 bytes a pixel; 256-byte frames hold 8 pixels.
    with Device(FakeBoard(pool_channels=4), max_frame_bytes=256) as dev:
        board = dev.link.transport
        got = dev.reduce_max(x, axes=[1, 2])
        log = commands(board, 1)
    assert_same_bits(got, want)
    assert all(status == Status.OK for _, status in board.log)
    # 3 images of 63 pixels in pieces of 8 pixels (8 per image), then the 3 x 8 maxima, one
    # image (256 bytes) per frame.
    assert log == [Command.POOL_CHANNELS_LAST] * (3 * 8 + 3)


def test_more_channels_than_the_unit_holds_take_the_reduce_route():
    """Splitting them into groups would copy the tensor as a transpose does, in more frames."""
    x = edge_nhwc(np.float32, (3, 7, 9, 9), 3)       # 36-byte pixels, the unit holds 32
    with Device(FakeBoard(pool_channels=4), max_frame_bytes=256) as dev:
        board = dev.link.transport
        got = dev.reduce_max(x, axes=[1, 2])
        assert set(commands(board, 1)) == {Command.REDUCE}
    assert_same_bits(got, reference.reduce_max(x, axes=[1, 2]))


def test_global_max_pool_channels_last_matches_channels_first():
    x = edge_nhwc(np.float16, (2, 3, 2, 4, 6), 3)    # N x D x H x W x C
    with Device(FakeBoard()) as dev:
        got = dev.global_max_pool(x, channels_last=True)
        first = dev.global_max_pool(np.moveaxis(x, -1, 1))
    assert got.shape == (2, 1, 1, 1, 6)
    assert_same_bits(got.reshape(first.shape), first)


def test_a_core_without_the_pooling_unit_reduces_runs():
    x = edge_nhwc(np.float32, (2, 3, 4, 5), 4)
    with Device(FakeBoard(pool_channels=0)) as dev:
        board = dev.link.transport
        since = len(board.log)
        got = dev.reduce_max(x, axes=[1, 2])
        assert commands(board, since) == [Command.REDUCE]
    assert_same_bits(got, reference.reduce_max(x, axes=[1, 2]))


def test_channels_last_on_the_virtual_board():
    """The real ChannelsLastPool in Amaranth's simulator: a tiny NHWC tensor with a NaN
    payload and a -0/+0 tie."""
    from maxaccel.host.device import open_device
    x = edge_nhwc(np.float32, (1, 2, 2, 3), 5)
    x[0, 1, 0, 0] = np.uint32(0xFFC00001).view(np.float32)
    x[0, :, :, 1] = -0.0
    x[0, 1, 1, 1] = 0.0
    with open_device("sim") as dev:
        got = dev.global_max_pool(x, channels_last=True)
    assert_same_bits(got, reference.reduce_max(x, axes=[1, 2]))
    assert got.view(np.uint32)[0, 0, 0, :2].tolist() == [0x7FC00000, 0x00000000]
