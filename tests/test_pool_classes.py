"""The MaxPool classes of ``maxaccel bench --ratios`` (``bench/pools.py``: ``POOL_CLASSES``) on
the default compiled board (the NiteFury's core: 4 lanes, 32-byte link words, kernel extent 13
on the inner axes and 3 on the outermost, window_columns 64, window_plane 1024): their exact
device cycles, their route, and the ratio to the link-bound time (a ReduceMax of the larger of
the pool's input and output bytes, Indices included: ``PoolClass.link_bytes``), every result
checked bit for bit by the bench itself. The cycles asserted are those of the bench file
docs/benchmarks.md quotes (``maxaccel.bench.pools.RATIOS_FILE``): a change that costs a cycle fails here
until that file is measured again.

Cycles are deterministic: a change that costs a cycle fails here.
"""

import math
import pathlib

import numpy as np
import pytest
from boards import COMPILED_WINDOW
from fake_board import FakeBoard

from maxaccel.contract.dtypes import format_of
from maxaccel.contract.pooling import resolve_max_pool
from maxaccel.contract.rules import _window_extents
from maxaccel.contract.wire import Command
from maxaccel.host.device import plan_max_pool
from maxaccel.bench.pools import POOL_CLASSES, RATIOS_FILE, load_ratio_tables, \
    measure_pool_ratios
from maxaccel.host.pool_window import plan_window_pool

# (class name, dtype) -> (route, device cycles of the pool, device cycles of the ReduceMax of
# its link bytes): the figures docs/benchmarks.md's MaxPool table quotes (maxaccel.bench.pools.RATIOS_FILE,
# written by maxaccel.bench.pools.RATIOS_COMMAND), asserted here against the compiled board.
POOL_CYCLES = {(r.operation, r.dtype): (r.route, r.cycles, r.reduce_cycles)
               for r in load_ratio_tables(pathlib.Path(__file__).parent.parent / RATIOS_FILE)[1]}

# The cells nearest 1.1 of the link-bound time (docs/benchmarks.md): the stride-1 SPP kernels
# of extent 5 to 13 (pads 2 to 6) in uint8 are small requests (8 and 4 groups of 32 images),
# and the tails of the request's last row and image (p + p * W steps: the unit overlaps every
# other tail with the next row's or image's first steps) and the request's fixed cost are
# 1.04-1.10 of their link-bound time. They were 1.11-1.16 until the command engine's fixed cost
# was cut (parameter blocks 8 bytes a cycle, the checks' products on two multipliers). (Indices
# in float16 and uint8 were 1.12 and 1.22 until the reply FIFO: WindowLanes; 80 uint8 channels
# 1.24 until edge tiles could send their padding and share groups: pool_window.)
SPP_CLASSES = [pool.name for pool in POOL_CLASSES if pool.where == "SPP / SPPF blocks"]

CLASSES = {pool.name: pool for pool in POOL_CLASSES}
COMPILED = COMPILED_WINDOW


def test_the_table_covers_every_class_and_dtype():
    from maxaccel.bench.pools import POOL_DTYPES
    assert set(POOL_CYCLES) == {(name, d) for name in CLASSES for d in POOL_DTYPES}


@pytest.mark.parametrize("name, dtype", list(POOL_CYCLES))
def test_a_class_goes_through_the_unit_whenever_a_tiling_fits(name, dtype):
    """The route of each cell as the planner decides it (on a fake board with the compiled
    board's capacities): MAX_POOL exactly when some tiling fits the unit; REDUCE only for
    kernel extents above its window_extent (window_extent_outer on a 3-D pool's outermost
    axis)."""
    pool = CLASSES[name]
    board = FakeBoard(**COMPILED)
    geometry = resolve_max_pool(pool.shape, **pool.attributes)
    plan = plan_window_pool(geometry, format_of(np.dtype(dtype)), board.identity, 1 << 20)
    route = POOL_CYCLES[name, dtype][0]
    assert (plan is not None) == (route == "MAX_POOL")
    # The contract's extent per axis (outermost first); a pool of fewer axes takes the inner ones.
    limits = _window_extents(board.identity)[-len(geometry.axes):]
    assert (route == "REDUCE") == any(a.extent > limit for a, limit in zip(geometry.axes, limits))


#: The classes' routes on each ULX3S, from the host's planner on the board's own IDENTIFY: the
#: 85F's unit (one window lane, extents 13 / 3) takes every class, the 25F has no unit.
ULX3S_ROUTES = {"ulx3s_85f": Command.MAX_POOL, "ulx3s": Command.REDUCE}


@pytest.fixture(scope="module")
def bitstream_identities():
    """board -> the IDENTIFY of its bitstream's Core (``maxaccel.boards.build.uart_top``),
    for the boards of :data:`ULX3S_ROUTES`; each design elaborated (seconds), as a build
    would."""
    from amaranth.hdl import Fragment

    from maxaccel.boards.build import uart_top
    from maxaccel.boards.targets import TARGETS
    identities = {}
    for board in ULX3S_ROUTES:
        target = TARGETS[board]
        top = uart_top(target, target.lanes, target.clock_mhz)
        Fragment.get(top, platform=None).prepare()
        identities[board] = top.identity
    return identities


@pytest.mark.parametrize("board", list(ULX3S_ROUTES))
def test_every_class_on_each_ulx3s_takes_the_route_its_identity_gives(bitstream_identities,
                                                                       board):
    """Each class and dtype as :meth:`~maxaccel.host.device.Device.max_pool` routes it
    (``plan_max_pool``, frames of a megabyte as over the serial link) on the IDENTIFY of the
    board's bitstream (its target's Core): on the 85F through ``MAX_POOL``, the wide ones in
    tiles of at most 64 output columns, with at most 1% more elements on the link than the
    pool's input and output; on the 25F through ``REDUCE``."""
    identity = bitstream_identities[board]
    for name, dtype in POOL_CYCLES:
        pool = CLASSES[name]
        geometry = resolve_max_pool(pool.shape, **pool.attributes)
        route, plan = plan_max_pool(geometry, format_of(np.dtype(dtype)), identity, 1 << 20,
                                    indices=pool.return_indices)
        assert route == ULX3S_ROUTES[board], (name, dtype)
        if route == Command.MAX_POOL:
            elements = math.prod(geometry.input_shape) + math.prod(geometry.output_shape)
            assert plan.wire_elements() <= 1.01 * elements, (name, dtype)
            wide = len(geometry.axes) > 1 and geometry.output_shape[-1] > identity.window_columns
            assert (sum(len(b.tiles) for b in plan.batches) > 1) == wide, (name, dtype)


@pytest.fixture
def default_board(compiled_device):
    """The default compiled board, its capacities checked to be the table's."""
    assert {k: getattr(compiled_device.identity, k) for k in COMPILED} == COMPILED
    return compiled_device


def check_cell(device, name, dtype):
    (ratio,) = measure_pool_ratios(device, [CLASSES[name]], dtypes=(dtype,))
    assert (ratio.route, ratio.cycles, ratio.reduce_cycles) == POOL_CYCLES[name, dtype]
    if ratio.route == "MAX_POOL":
        assert ratio.ratio <= 1.1


@pytest.mark.parametrize("name", list(CLASSES))
def test_float32_cycles_of_every_class(default_board, name):
    check_cell(default_board, name, "float32")


@pytest.mark.parametrize("name", SPP_CLASSES)
def test_uint8_cycles_of_the_spp_classes(default_board, name):
    """The cells nearest 1.1 (small requests, a second of CPU each), in every run."""
    check_cell(default_board, name, "uint8")


@pytest.mark.slow(reason="22 cells of the compiled board, minutes of CPU (the float32 column "
                         "and uint8's SPP cells run in CI)")
@pytest.mark.parametrize("name, dtype", [k for k in POOL_CYCLES if k[1] != "float32"
                                         and not (k[1] == "uint8" and k[0] in SPP_CLASSES)])
def test_float16_and_uint8_cycles_of_every_class(default_board, name, dtype):
    check_cell(default_board, name, dtype)


def test_the_unit_beats_reduce_for_every_class_it_takes(default_board):
    """The route decision, measured: every class the pooling unit takes (on 8 channels,
    tiled where wider than its 64 columns) costs fewer device cycles through MAX_POOL than
    through REDUCE, the route it falls back to."""
    ratios = measure_pool_ratios(default_board, POOL_CLASSES, dtypes=("float32",),
                                 both_routes=True, channels=8)
    taken = [r for r in ratios if r.route == "MAX_POOL"]
    assert {r.operation for r in taken} == {
        CLASSES[name].with_channels(8).name for (name, d), (route, *_) in POOL_CYCLES.items()
        if d == "float32" and route == "MAX_POOL"}
    for r in taken:
        assert r.cycles < r.reduce_route_cycles, r
