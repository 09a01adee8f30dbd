"""Pools with kernel extents above 3 through the pooling unit: SPP / SPPF blocks
(5x5, 9x9, 13x13 at stride 1), 1-D k4 s4 audio pools, dilations, and 3-D pools whose outermost
axis the unit holds narrower (``window_extent_outer``). Bit-exact against the golden model,
Indices and ties included, on the simulated board (tiny shapes, boards built with the extent
given in the URL) and on the compiled board (the NiteFury's core, extents 13 and 3), where
the device cycles of each SPP class are asserted exactly against the link-bound time: the
cycles of a ReduceMax that moves as many bytes as the larger of the pool's input and reply.
"""


import numpy as np
import pytest

from maxaccel.contract.wire import Command
from maxaccel.host.device import open_device
from maxaccel.bench.cycles import cycle_counter
from maxaccel.sim import reference
from maxaccel.sim.values import random_values
from maxaccel.contract.dtypes import format_of


def _check(device, x, route, values_only=False, **attributes):
    """Pool ``x`` on ``device`` with Indices (and without, with ``values_only``), compare with
    the golden model bit for bit, and check the route taken."""
    y, indices = device.max_pool(x, **attributes, return_indices=True)
    assert device.last_max_pool_route == route, attributes
    want_y, want_indices = reference.max_pool(x, **attributes, return_indices=True)
    reference.assert_same_bits(y, want_y, f"{x.shape} {attributes}")
    np.testing.assert_array_equal(indices, want_indices, err_msg=f"{x.shape} {attributes}")
    if values_only:
        reference.assert_same_bits(device.max_pool(x, **attributes), want_y)


def _ties(rng, dtype, shape):
    """Values from a few, with ±0 among them: ties everywhere, and the sign of zero to keep."""
    fmt = format_of(dtype)
    pool = random_values(rng, fmt, (6,), edge_fraction=0.5)
    if fmt.kind == "f":
        pool[:2] = np.array([0.0, -0.0], dtype=pool.dtype)
    return rng.choice(pool, size=shape)


# --- simulated board: tiny shapes, the extent a URL parameter ----------------------------------

SIM_CASES = {
    # URL -> [(dtype, shape, attributes, route)]; the Python simulator takes a byte a cycle at
    # a few hundred cycles a second with these units, so the shapes are tiny.
    "sim?window_extent=5&window_extent_outer=3": [
        (np.float32, (1, 2, 5, 6), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
         Command.MAX_POOL),                                                 # SPPF
        (np.uint8, (1, 4, 13), dict(kernel_shape=[4], strides=[4]), Command.MAX_POOL),
        (np.float16, (1, 2, 6, 7), dict(kernel_shape=[3, 2], dilations=[2, 4],
                                        strides=[1, 2], pads=[1, 0, 2, 3]),
         Command.MAX_POOL),                                                 # extents 5 and 5
        (np.float32, (1, 1, 3, 3, 4), dict(kernel_shape=[3, 3, 3], pads=[1] * 6),
         Command.MAX_POOL),
        # The outermost of three axes holds 3: a 5 there goes through REDUCE, still exact.
        (np.float32, (1, 1, 5, 2, 2), dict(kernel_shape=[5, 1, 1], pads=[2, 0, 0, 2, 0, 0]),
         Command.REDUCE),
    ],
    "sim?window_extent=13&lanes=1": [
        (np.int8, (1, 1, 13, 13), dict(kernel_shape=[13, 13], pads=[6, 6, 6, 6]),
         Command.MAX_POOL),                                                 # SPP 13
        (np.float32, (1, 1, 3, 14), dict(kernel_shape=[1, 14]), Command.REDUCE),  # 14 > 13
    ],
}


@pytest.mark.parametrize("url", SIM_CASES)
def test_wide_pools_on_the_simulated_board(url):
    rng = np.random.default_rng(len(url))
    with open_device(url) as device:
        for index, (dtype, shape, attributes, route) in enumerate(SIM_CASES[url]):
            _check(device, _ties(rng, dtype, shape), route, values_only=index == 0,
                   **attributes)


@pytest.mark.slow(reason="about 22 s of Amaranth simulation, kept out of CI's 20 minutes: the "
                         "85F's routes are checked on its IDENTIFY (test_pool_classes) and its "
                         "unit's logic at the NiteFury's extents on both virtual boards")
def test_the_ulx3s_85f_core_on_the_simulated_board():
    """The ULX3S 85F's core as its bitstream has it (``boards/targets.py``: 2 lanes, one window
    lane, extents 13 / 3, 64 columns, 1024-output planes), simulated behind the host: SPP
    13x13 and a 3x3x3 pool through its unit, a 3-D pool of outermost extent 5 through
    ``REDUCE``; tiny images (a few thousand cycles each)."""
    from maxaccel.boards.targets import TARGETS
    from maxaccel.host.device import Device
    from maxaccel.host.transport import SimTransport
    target = TARGETS["ulx3s_85f"]
    rng = np.random.default_rng(85)
    with Device(SimTransport("sim", lanes=target.lanes, **target.core)) as device:
        identity = device.identity
        assert (identity.lanes, identity.window_lanes, identity.window_extent,
                identity.window_extent_outer) == (2, 1, 13, 3)
        for dtype, shape, attributes, route in [
                (np.int8, (1, 2, 3, 4), _spp(13), Command.MAX_POOL),
                (np.float32, (1, 1, 3, 3, 4), dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2],
                                                   pads=[1] * 6), Command.MAX_POOL),
                (np.float16, (1, 1, 5, 2, 2), dict(kernel_shape=[5, 1, 1],
                                                   pads=[2, 0, 0, 2, 0, 0]), Command.REDUCE)]:
            _check(device, _ties(rng, dtype, shape), route, **attributes)


def test_the_engine_refuses_extents_beyond_each_axis_capacity():
    """Raw MAX_POOL requests: the engine's checks (the contract's rules, in gateware) take
    extent 5 on the inner axes and refuse it on the outermost (TOO_LARGE), as the contract's
    verdict says."""
    from maxaccel.contract.pooling import resolve_max_pool, window_config
    from maxaccel.contract.wire import PARAMETERS, Status, request_verdict, window_fields
    from maxaccel.host.link import DeviceError
    with open_device("sim?window_extent=5&window_extent_outer=3&lanes=1") as device:
        for kernel, status in [([1, 5, 5], Status.OK), ([5, 1, 1], Status.TOO_LARGE),
                               ([3, 5, 1], Status.OK), ([1, 1, 6], Status.TOO_LARGE)]:
            geometry = resolve_max_pool((1, 1, 5, 5, 6), kernel)
            fields = {window_fields(axis)[name]: value
                      for axis, values in enumerate(window_config(geometry))
                      for name, value in values.items()}
            payload = PARAMETERS[Command.MAX_POOL].pack(
                **fields, dtype=format_of(np.int8).dtype, group=1, groups=1,
                indices=0) + bytes(150)
            assert request_verdict(Command.MAX_POOL, payload, device.identity) == status
            if status == Status.OK:
                reply = device.link.request(Command.MAX_POOL, payload)
                assert len(reply) == np.prod(geometry.output_shape)
            else:
                with pytest.raises(DeviceError, match=status.name):
                    device.link.request(Command.MAX_POOL, payload)


# --- compiled board: the SPP classes at full size, cycles asserted ----------------------------

def pool_cycles(device, x, return_indices=False, **attributes):
    """(device cycles of the pool, cycles of its link-bound: a ReduceMax that moves as many
    bytes as the larger of the pool's input and reply, Indices included), the pool checked
    against the golden model and its route the unit's."""
    board = cycle_counter(device)
    start = board.cycles
    got = device.max_pool(x, **attributes, return_indices=return_indices)
    cycles = board.cycles - start
    assert device.last_max_pool_route == Command.MAX_POOL
    want = reference.max_pool(x, **attributes, return_indices=return_indices)
    if return_indices:
        reference.assert_same_bits(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        out_bytes = want[0].nbytes + want[0].size * 4
    else:
        reference.assert_same_bits(got, want)
        out_bytes = want.nbytes
    flat = random_values(np.random.default_rng(0), format_of(x.dtype),
                         (max(x.nbytes, out_bytes) // x.itemsize,))
    start = board.cycles
    reference.assert_same_bits(device.reduce_max(flat), reference.reduce_max(flat))
    return cycles, board.cycles - start


def _spp(kernel):
    return dict(kernel_shape=[kernel, kernel], pads=[kernel // 2] * 4)


#: The SPP, SPPF and 1-D k4 classes of the MaxPool table (bench/pools.py POOL_CLASSES): name ->
#: (float32 input shape, attributes).
SPP_CASES = {
    "SPPF 5x5 s1 p2 on 1x256x13x13": ((1, 256, 13, 13), _spp(5)),
    "SPP 9x9 s1 p4 on 1x256x13x13": ((1, 256, 13, 13), _spp(9)),
    "SPP 13x13 s1 p6 on 1x256x13x13": ((1, 256, 13, 13), _spp(13)),
    "SPPF 5x5 s1 p2 on 1x128x20x20": ((1, 128, 20, 20), _spp(5)),
    "SPP 9x9 s1 p4 on 1x128x20x20": ((1, 128, 20, 20), _spp(9)),
    "SPP 13x13 s1 p6 on 1x128x20x20": ((1, 128, 20, 20), _spp(13)),
    "1-D k4 s4 on 1x64x996": ((1, 64, 996), dict(kernel_shape=[4], strides=[4])),
}

#: (case, Indices) -> (pool cycles, link-bound cycles) on the compiled board (the NiteFury's
#: core: 4 lanes, 32-byte link words, kernel extent 13 on the inner axes). Cycles are
#: deterministic: a change that costs a cycle fails here.
SPP_CYCLES = {
    ("SPPF 5x5 s1 p2 on 1x256x13x13", False): (5543, 5481),       # 1.01x
    ("SPP 9x9 s1 p4 on 1x256x13x13", False): (5571, 5481),        # 1.02x
    ("SPP 13x13 s1 p6 on 1x256x13x13", False): (5599, 5481),      # 1.02x
    ("SPPF 5x5 s1 p2 on 1x128x20x20", False): (6552, 6473),       # 1.01x
    ("SPP 9x9 s1 p4 on 1x128x20x20", False): (6594, 6473),        # 1.02x
    ("SPP 13x13 s1 p6 on 1x128x20x20", False): (6636, 6473),      # 1.03x
    ("1-D k4 s4 on 1x64x996", False): (8076, 8041),               # 1.00x
    ("SPP 13x13 s1 p6 on 1x256x13x13", True): (11009, 10890),     # 1.01x
    ("SPPF 5x5 s1 p2 on 1x128x20x20", True): (12954, 12874),      # 1.01x
    ("1-D k4 s4 on 1x64x996", True): (8079, 8041),                # 1.00x
}


@pytest.mark.parametrize("case, indices", list(SPP_CYCLES), ids=str)
def test_spp_classes_through_the_unit_on_the_compiled_board(compiled_device, case, indices):
    identity = compiled_device.identity
    assert (identity.window_extent, identity.window_extent_outer) == (13, 3)
    shape, attributes = SPP_CASES[case]
    x = random_values(np.random.default_rng(len(case)), format_of(np.float32), shape,
                      edge_fraction=0.1)
    assert pool_cycles(compiled_device, x, indices, **attributes) == SPP_CYCLES[case, indices]
