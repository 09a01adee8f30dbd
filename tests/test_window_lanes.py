# amaranth: UnusedElaboratable=no
# (test_refuses_too_many_lanes builds units only to see the constructor refuse.)

"""WindowLanes: MAX_POOL's unit, WindowMaxPool units side by side fed from the engine's beats.

Groups of images interleaved element by element go in a beat per group element, a unit per
64-bit lane pooling the images whose elements its lane holds; each output position comes out as
a beat of the group's maxima, then (with indices) their u32 indices in as many beats as they
fill. Checked against test_window's oracle, with random stalls on both sides, every element
size, groups narrower than the units, and exact throughput (a beat per cycle in; with indices,
a beat per cycle out once the reply FIFO holds results, and clear emptying it).
"""

import numpy as np
import pytest
from amaranth.sim import Simulator

from maxaccel.contract.dtypes import DType, format_of
from maxaccel.contract.pooling import WINDOW_FIELDS, decode_window_reply
from maxaccel.contract.wire import WINDOW_INDEX_BYTES
from maxaccel.hdl.window import WindowMaxPool
from maxaccel.hdl.window_lanes import WindowLanes
from maxaccel.sim import reference
from maxaccel.sim.streams import STALL_PATTERNS, Stalls, run_streams, shared_design
from maxaccel.sim.values import random_values
from window_model import UNIT, _rng, axis, oracle

LANES = 2                   # 16-byte beats
RESNET = (axis(5, 3, 2, pads=(1, 1)), axis(6, 3, 2, pads=(1, 1)))


def _unit(window_lanes=LANES):
    return shared_design(WindowLanes, LANES, window_lanes, max_extent=3, max_columns=8,
                         max_plane=16)


def check_window_lanes(dut, x, axes, *, group, indices, stalls):
    """Stream the images of ``x`` (``images x spatial``, images a multiple of ``group``) through
    ``dut`` and compare every beat with the oracle."""
    fmt = format_of(x.dtype)
    axes = (UNIT,) * (3 - len(axes)) + tuple(axes)
    images = x.shape[0]
    bits = reference.bits_of(x).reshape(images // group, group, -1)
    beats = []
    for g in range(images // group):
        for e in range(bits.shape[2]):
            word = b"".join(int(bits[g, j, e]).to_bytes(fmt.nbytes, "little")
                            for j in range(group))
            # The bytes after the group are garbage the unit must not send back.
            word += bytes(range(0xA0, 0xA0 + 16 - len(word)))
            beats.append({"data": [int.from_bytes(word[8 * k:8 * k + 8], "little")
                                   for k in range(LANES)],
                          "nbytes": group * fmt.nbytes, "first": 1, "last": 1})
    values, index = oracle(x, axes)
    index_beats = -(-WINDOW_INDEX_BYTES * group // (8 * LANES)) if indices else 0
    outputs = len(values) // group * (1 + index_beats)

    def setup(ctx):
        if "dtype" in dut.signature.members:     # else the unit's static element type
            ctx.set(dut.dtype, fmt.dtype)
        ctx.set(dut.group, group)
        ctx.set(dut.indices, int(indices))
        for a, given in enumerate(axes):
            for name in WINDOW_FIELDS:
                ctx.set(getattr(dut.config[a], name), getattr(given, name))

    def status(ctx):
        assert ctx.get(dut.error) == 0
        assert ctx.get(dut.idle) == 1

    # Serial units take many cycles a beat: the status is read once the last beat is done.
    lane = dut.units[0].lane_cycles(8, 0) if dut.serial else 0
    run = run_streams(dut, sources={dut.i: beats}, sinks={"o": (dut.o, outputs)},
                      stalls=stalls, setup=setup, check=status, drain_cycles=32 + lane,
                      timeout=20_000 + 100 * lane)
    got = run.received["o"]
    per_image = len(values) // images
    want_values = values.reshape(images // group, group, per_image)
    want_index = index.reshape(images // group, group, per_image)
    step = 1 + index_beats

    def raw(beat):
        return b"".join(int(beat.data[k]).to_bytes(8, "little") for k in range(LANES))

    for n, beat in enumerate(got[::step]):
        g, position = divmod(n, per_image)
        assert beat.nbytes == group * fmt.nbytes and beat.first and beat.last
        reply_row = raw(beat)[:beat.nbytes]
        if indices:
            row = got[step * n + 1:step * (n + 1)]
            index_bytes = WINDOW_INDEX_BYTES * group
            assert [b.nbytes for b in row] == [min(8 * LANES, index_bytes - 8 * LANES * k)
                                               for k in range(index_beats)]
            assert [(b.first, b.last) for b in row] == [(k == 0, k == index_beats - 1)
                                                        for k in range(index_beats)]
            reply_row += b"".join(raw(b)[:b.nbytes] for b in row)
        # One output row of one group, read as the host reads a MAX_POOL reply.
        got_values, got_index = decode_window_reply(reply_row, fmt, group, 1, indices)
        reference.assert_same_bits(got_values[:, 0], want_values[g, :, position],
                                   what=f"output {n}")
        if indices:
            np.testing.assert_array_equal(got_index[:, 0], want_index[g, :, position])
    return run


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
@pytest.mark.parametrize("dtype, group", [(np.float32, 4), (np.float16, 8), (np.int8, 16),
                                          (np.float64, 2), (np.float16, 3), (np.uint8, 9),
                                          (np.int8, 1)], ids=str)
def test_groups_of_images(dtype, group, stalls):
    # Full beats of every element size (16 int8 images: four beats of indices), and groups
    # that end inside a lane or leave the second lane empty.
    x = random_values(_rng("lanes", str(dtype), group), np.dtype(dtype), (2 * group, 5, 6),
                      edge_fraction=0.3)
    check_window_lanes(_unit(), x, RESNET, group=group, indices=True, stalls=stalls)


@pytest.mark.parametrize("dtype, group", [(np.int8, 8), (np.float32, 2), (np.float64, 1)],
                         ids=str)
def test_fewer_units_than_lanes(dtype, group):
    # One unit behind a 2-lane beat (the Arty's): groups of up to 8 bytes.
    x = random_values(_rng("one unit", str(dtype)), np.dtype(dtype), (group, 5, 6),
                      edge_fraction=0.3)
    check_window_lanes(_unit(1), x, RESNET, group=group, indices=True, stalls=STALL_PATTERNS[1])


def _model_core_unit():
    """The unit of the core built for SqueezeNet 1.1 and ResNet-18 (docs/boards.md, "Built for
    a model"): one window lane behind a 2-lane beat, extent 3 on the inner axes and 1 on the
    outermost (no plane buffers), here with 8 columns."""
    return shared_design(WindowLanes, LANES, 1, max_extent=3, max_extent_outer=1,
                         max_columns=8, max_plane=1)


SQUEEZENET = (axis(7, 3, 2, ceil=True), axis(8, 3, 2, ceil=True))


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
@pytest.mark.parametrize("dtype, group, axes", [
    (np.float32, 2, SQUEEZENET), (np.float16, 4, RESNET), (np.uint8, 8, SQUEEZENET),
    (np.float64, 1, RESNET),
    # A 3-D pool whose outermost kernel is 1 (stride 2 over its planes) needs no plane buffer.
    (np.int8, 8, (axis(3, 1, 2), axis(4, 3, 2, pads=(1, 1)), axis(5, 3, 1, ceil=True))),
], ids=str)
def test_the_model_core_s_unit_without_plane_buffers(dtype, group, axes, stalls):
    x = random_values(_rng("model core", str(dtype), len(axes)), np.dtype(dtype),
                      (group,) + tuple(a.size for a in axes), edge_fraction=0.3)
    check_window_lanes(_model_core_unit(), x, axes, group=group, indices=True, stalls=stalls)


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
@pytest.mark.parametrize("dtype, group, indices", [
    (np.float32, 2, True), (np.float32, 4, False), (np.float16, 8, True), (np.uint8, 16, True),
    (np.float64, 1, False)], ids=str)
def test_serial_units(dtype, group, indices, stalls):
    # The units that update one window at a time, no reply FIFO: each result held until its
    # reply (values, then indices) is sent, under stalls on both sides; the model core's
    # capacities (extent 1 on the outermost axis).
    dut = shared_design(WindowLanes, LANES, LANES, max_extent=3, max_extent_outer=1,
                        max_columns=8, max_plane=1, serial=True)
    assert dut.reply_depth == 0
    x = random_values(_rng("serial lanes", str(dtype), group), np.dtype(dtype),
                      (2 * group, 5, 6), edge_fraction=0.3)
    check_window_lanes(dut, x, RESNET, group=group, indices=indices, stalls=stalls)


def test_serial_units_of_one_element_type():
    dut = shared_design(WindowLanes, LANES, 1, max_extent=3, max_extent_outer=1, max_columns=8,
                        max_plane=1, dtype=DType.FLOAT, serial=True)
    x = random_values(_rng("serial one type"), np.dtype(np.float32), (2, 7, 8),
                      edge_fraction=0.4)
    check_window_lanes(dut, x, SQUEEZENET, group=2, indices=True, stalls=STALL_PATTERNS[3])


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
def test_serial_units_of_narrow_fields_without_indices(stalls):
    """``field_max=15`` (4-bit configuration fields) and ``with_indices=False``: the values
    of a request with indices 0, under stalls, as a unit of full fields with indices gives
    them; ``IDENTIFY`` reports both."""
    dut = shared_design(WindowLanes, LANES, 1, max_extent=3, max_extent_outer=0, max_columns=8,
                        max_plane=1, dtype=DType.FLOAT, serial=True, field_max=15,
                        with_indices=False)
    assert (dut.limits["window_field_max"], dut.limits["window_indices"]) == (15, 0)
    assert dut.units[0].dim_bits == 4 and dut.units[0].index_bits == 0
    x = random_values(_rng("serial narrow"), np.dtype(np.float32), (2, 5, 6),
                      edge_fraction=0.4)
    check_window_lanes(dut, x, RESNET, group=2, indices=False, stalls=stalls)


def test_narrow_fields_hold_the_extent():
    with pytest.raises(ValueError, match="field_max must be an integer from 3"):
        WindowLanes(2, 1, field_max=1 << 16)
    with pytest.raises(ValueError, match="below the kernel extent 5"):
        WindowLanes(2, 1, max_extent=5, field_max=3)
    with pytest.raises(ValueError, match="with_indices must be"):
        WindowLanes(2, 1, with_indices=2)


def test_serial_refuses_serial_products():
    with pytest.raises(ValueError, match="serial_products"):
        WindowLanes(2, 1, serial=True, serial_products=True)
    with pytest.raises(ValueError, match="serial must be"):
        WindowLanes(2, 1, serial=2)


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
@pytest.mark.parametrize("axes", [SQUEEZENET, RESNET], ids=["squeezenet", "resnet"])
def test_a_unit_of_one_element_type(axes, stalls):
    # The model core's unit built for float32 alone (a core of one dtype): no dtype port, the
    # same bits and indices, NaN payloads and zero signs included.
    dut = shared_design(WindowLanes, LANES, 1, max_extent=3, max_extent_outer=1, max_columns=8,
                        max_plane=1, dtype=DType.FLOAT)
    assert "dtype" not in dut.signature.members
    x = random_values(_rng("one type", axes[0].size), np.dtype(np.float32),
                      (2,) + tuple(a.size for a in axes), edge_fraction=0.4)
    check_window_lanes(dut, x, axes, group=2, indices=True, stalls=stalls)


def test_a_unit_of_one_element_type_takes_a_beat_per_cycle():
    axes = (axis(6, 3, 2, pads=(1, 1)), axis(8, 3, 2, pads=(1, 1)))
    x = random_values(_rng("rate", "one type"), np.dtype(np.float32), (8, 6, 8))
    dut = WindowLanes(LANES, LANES, max_extent=3, max_columns=8, max_plane=16, dtype=DType.FLOAT)
    run = check_window_lanes(dut, x, axes, group=4, indices=False, stalls=Stalls())
    assert run.cycles["o"] == WindowMaxPool.SETTLE + 1 + 95 + dut.latency


@pytest.mark.parametrize("indices", [False, True])
def test_three_axes_without_and_with_indices(indices):
    axes = (axis(3, 2, 1, pads=(0, 1)), axis(4, 3, 2, pads=(1, 1), ceil=True),
            axis(5, 2, 2, dilation=2, pads=(1, 0)))
    x = random_values(_rng("3d", indices), np.dtype(np.float32), (4, 3, 4, 5), edge_fraction=0.3)
    check_window_lanes(_unit(), x, axes, group=4, indices=indices, stalls=STALL_PATTERNS[3])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.float64], ids=str)
def test_a_beat_per_cycle(dtype):
    # No stalls, no virtual steps (the ResNet stem on an even size), two full beats of images
    # of every element size: beat b is taken at edge SETTLE + 1 + b, so the last output (its
    # window ends at the last beat, 95) arrives exactly the unit's latency later; one bubble
    # anywhere would delay it.
    axes = (axis(6, 3, 2, pads=(1, 1)), axis(8, 3, 2, pads=(1, 1)))
    group = 8 * LANES // np.dtype(dtype).itemsize
    x = random_values(_rng("rate", str(dtype)), np.dtype(dtype), (2 * group, 6, 8))
    dut = _unit()
    run = check_window_lanes(dut, x, axes, group=group, indices=False, stalls=Stalls())
    assert run.cycles["o"] == WindowMaxPool.SETTLE + 1 + 95 + dut.latency


def test_tails_overlap_across_groups():
    # SPP's shape (5x5 stride 1 pad 2, here on 6 x 8) in three groups of images with no
    # stalls: every row's and every group's tail overlaps the next one's first steps, so the
    # 144 beats go in back to back; the last output follows the last row's 2 virtual steps
    # and the last group's 2 virtual rows of 8 items (the unit's exact-cycle test, through the
    # lanes). With virtual steps it was 3 * (6 * 10 + 16) = 228 beats' worth.
    axes = (axis(6, 5, 1, pads=(2, 2)), axis(8, 5, 1, pads=(2, 2)))
    group = 8 * LANES // 4
    x = random_values(_rng("overlap"), np.dtype(np.float32), (3 * group, 6, 8))
    dut = WindowLanes(LANES, LANES, max_extent=5, max_columns=8, max_plane=16)
    run = check_window_lanes(dut, x, axes, group=group, indices=False, stalls=Stalls())
    assert run.cycles["o"] == WindowMaxPool.SETTLE + 1 + 144 + 1 + 2 * 8 + dut.latency


def test_error_on_a_window_of_padding_only():
    # Input 2, kernel 2, dilation 3, pads 1 and 1: the one window's taps are -1 and 2.
    dut = _unit(2)
    axes = (UNIT, UNIT, axis(2, 2, 1, dilation=3, pads=(1, 1)))
    beats = [{"data": [value, 0], "nbytes": 8, "first": 1, "last": 1} for value in (1, 2)]

    def setup(ctx):
        ctx.set(dut.dtype, format_of(np.float32).dtype)
        ctx.set(dut.group, 2)
        for a, given in enumerate(axes):
            for name in WINDOW_FIELDS:
                ctx.set(getattr(dut.config[a], name), getattr(given, name))

    def status(ctx):
        assert ctx.get(dut.error) == 1

    run_streams(dut, sources={dut.i: beats}, sinks={"o": (dut.o, 1)}, setup=setup, check=status)


def test_refuses_too_many_lanes():
    with pytest.raises(ValueError, match="window_lanes must be 1 to 2"):
        WindowLanes(2, 3)


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
def test_the_reply_with_indices_drains_while_the_next_row_streams(stalls):
    # The ResNet stem (3x3 stride 2 pad 1) on 4 x 64 int8 images with indices and no stalls:
    # 16 images fill the 16-byte beat, so an output position leaves as a beat of maxima and
    # four of indices, 5 beats for every 4 input beats. The 32 results of an output row come
    # while the last input row of their windows streams (64 beats), at twice the reply's rate,
    # more than the units' pipelines hold; the reply FIFO (a row of results) takes them, so
    # from the first result on the reply sends a beat every cycle: the first window ends at
    # beat 65 (row 1, column 1), its result leaves the units `latency` edges after that beat
    # is taken and the FIFO 2 edges later, and the last of the 64 results' 320 beats leaves
    # 319 edges after the first. Without the FIFO the units held the input while a row's
    # reply went out, and the reply waited for the next row's results.
    axes = (axis(4, 3, 2, pads=(1, 1)), axis(64, 3, 2, pads=(1, 1)))
    x = random_values(_rng("reply fifo"), np.dtype(np.int8), (16, 4, 64))
    dut = WindowLanes(LANES, LANES, max_extent=3, max_columns=32, max_plane=16)
    assert dut.reply_depth == 32
    run = check_window_lanes(dut, x, axes, group=16, indices=True, stalls=stalls)
    if stalls.idle == stalls.backpressure == 0:
        assert run.cycles["o"] == WindowMaxPool.SETTLE + 1 + 65 + dut.latency + 2 + 64 * 5 - 1


def test_clear_empties_the_reply_fifo():
    # Results queued in the reply FIFO behind a sink that never takes them are dropped by
    # clear: the unit is idle again SETTLE cycles later and sends nothing.
    dut = _unit()
    axes = (UNIT, axis(4, 3, 2, pads=(1, 1)), axis(8, 3, 2, pads=(1, 1)))

    async def bench(ctx):
        ctx.set(dut.dtype, format_of(np.float32).dtype)
        ctx.set(dut.group, 4)
        ctx.set(dut.indices, 1)
        for a, given in enumerate(axes):
            for name in WINDOW_FIELDS:
                ctx.set(getattr(dut.config[a], name), getattr(given, name))
        ctx.set(dut.i.valid, 1)
        for _ in range(40 + dut.latency):
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        await ctx.tick()
        assert ctx.get(dut.o.valid) == 1 and ctx.get(dut.idle) == 0
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        for _ in range(WindowMaxPool.SETTLE):
            assert ctx.get(dut.o.valid) == 0
            await ctx.tick()
        assert ctx.get(dut.idle) == 1
        for _ in range(dut.latency + 4):
            assert ctx.get(dut.o.valid) == 0
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
