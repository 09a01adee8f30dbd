"""A bounded proof (SymbiYosys, yices) that :class:`~maxaccel.hdl.window.AxisPass`, the pooling
unit's pass along one axis, is a plain sliding-window maximum, for any configuration of the
pass inside the bounds, any data and any stalls on both sides.

The plain model, written once here without the pass's delay line, counters or tree: for each
window ``o`` of an image it keeps an accumulator; every input item, at its position ``p`` in
the image, goes into each window ``o < out`` that has a tap ``j < kernel`` at ``p = o * stride
- pad + j * dilation`` if its key is strictly greater than the accumulator's (or the
accumulator holds nothing yet), with tap number ``(kernel - 1 - j) * dilation`` (steps back
from the window's last tap). Positions come in order, so ties keep the earliest tap; padding
(positions outside the image) is never an item, so it never contributes. Checked:

* each output the pass gives (``o.valid`` and ``o.ready``) is the model's window of that
  number, in order: key, tap number and ``real`` (the model holds the window complete by
  then, for a window's positions are all before the step at which it ends; an output given
  early would miss a tap);
* no output beyond ``out`` per image;
* nothing left over or lost: whenever the pass says ``idle``, every image taken so far is
  complete and every one of its outputs has been given.

Bounds: the innermost pass (a register delay line) of extent :data:`EXTENT` (4: a compare
tree of two levels, the delay line and tap numbers of an extent above 3), 3-bit configuration
fields with ``size`` and ``out`` at most :data:`MAX_SIZE` (so windows run into the padding on
both sides, and virtual steps follow a row), every window holding at least one element (the
host refuses others); at most two images in a row (the counters restart); one 8-byte element
per lane; data abstraction: each key is 0 or 1 (in its low bit) — the data only flow through
compares and selects, so a pass that took a wrong tap, lost the tie rule or mixed windows gives
a wrong key, tap number or count for some choice the solver may make, and with two values ties
are everywhere; free ``i.valid`` (held until taken, as a stream must), ``o.ready`` and the
domain's reset every cycle (a reset restarts pass and model alike, with a new configuration);
:data:`DEPTH` cycles from reset. The first item comes no earlier than the unit's pass sees one
(:attr:`WindowMaxPool.SETTLE` plus the two key stages, cycle 4) and a result leaves the tree
six cycles after its window's last item, so inside the bound the outputs checked are those of
windows that end on the first five items (or after a reset, on fewer): short images, a window
or two each, every configuration of them; ``idle`` is checked on every cycle. Each further
cycle roughly doubles the solver's time or more (with the tails' overlap, on two shared cores:
14 cycles 19-53 s, 15 cycles 31-45 s, 16 cycles 149 s). Free reset found a real bug: the pipeline's valid flags did not reset,
so a result in flight at a ``clear`` or an abort came out after it (``tests/test_window.py``,
``test_clear_drops_results_in_flight``). The negative controls make later taps win ties,
drop each window's last tap from the model, and let a tail's windows use the next image's items
(the overlap's mask left out): each must fail.

The overlap of a tail with the next image (``AxisPass``): the input is free, so the second
image's items may come during the first image's tail (then the tail takes them, as the next
image's first steps and as padding for its own windows), later (a gap: virtual steps), or not
at all (the second image's tail is always virtual); the model numbers items by the stream
alone, so an overlap that lost, repeated or misplaced an item, or mixed the images' windows,
gives a wrong output or leaves one out. Inside the bound an overlapped tail and outputs of both
images are reached: e.g. size 2, kernel 2, ceil mode (a tail of one step): the first image's
items at cycles 4 and 5, the second's first at 6 with the tail's step: the first image's last
window (ending on that step) given at 12, the second image's first (ending at 7) at 13 and its
last (ending on its own tail, virtual: no third image) at 14; the third negative control fails
there.

Not covered here: the outer passes' block RAM line buffers (the simulation suites,
``tests/test_window.py``, run them at every extent), elements narrower than 8 bytes, and
longer runs than the bound.
"""

import contextlib
from unittest import mock

import pytest
from amaranth.hdl import Assert, Assume, Cat, Elaboratable, Module, Mux, Signal, signed
from amaranth.lib import data
from formal import prove

from maxaccel.hdl import window
from maxaccel.hdl.lane import ELEMENT_SIZES
from maxaccel.hdl.window import AxisPass, WindowMaxPool, axis_layout, tap_bits, tap_field

pytestmark = pytest.mark.formal

EXTENT = 4
MAX_SIZE = 4
DIM_BITS = 3
KEY_BITS = 1
IMAGES = 2
#: Cycles of the bounded check (see the module docstring for what they reach).
DEPTH = 15
#: Cycles before the first item, as in :class:`WindowMaxPool`: ``i.ready`` low for ``SETTLE``
#: cycles, then two key stages before the passes.
FIRST_ITEM = WindowMaxPool.SETTLE + 2


class AxisPassAgainstModel(Elaboratable):
    """:class:`AxisPass` (innermost, ``EXTENT`` taps) against the plain sliding-window model.

    ``control``: a negative control; ``"later ties"`` makes the pass's compares keep the later
    item on equal keys, ``"short model"`` leaves each window's last tap out of the model.
    """

    def __init__(self, control=None):
        self.control = control
        self.free = []

    def ports(self):
        return self.free

    def _free(self, shape, name):
        signal = Signal(shape, name=name)
        self.free.append(signal)
        return signal

    def elaborate(self, platform):
        m = Module()
        config_shape = data.ArrayLayout(axis_layout(DIM_BITS), 1)
        dut = AxisPass(0, (), (EXTENT,), 1, config_shape, DIM_BITS)
        m.submodules.dut = dut
        # A free configuration, held from the first cycle on.
        first = Signal(init=1)
        m.d.sync += first.eq(0)
        config_free = self._free(config_shape.size, "config_free")
        config_held = Signal(config_shape.size)
        config = Signal(config_shape.size)
        m.d.comb += config.eq(Mux(first, config_free, config_held))
        m.d.sync += config_held.eq(config)
        m.d.comb += [dut.config.eq(config), dut.size.eq(1 << ELEMENT_SIZES.index(8))]
        cfg = data.View(axis_layout(DIM_BITS), config)
        size, pad, out = cfg.size, cfg.pad, cfg.out
        kernel, stride, dilation = cfg.kernel, cfg.stride, cfg.dilation
        span = (kernel - 1) * dilation
        m.d.comb += [
            Assume((size >= 1) & (size <= MAX_SIZE) & (out >= 1) & (out <= MAX_SIZE)),
            Assume((kernel >= 1) & (stride >= 1) & (dilation >= 1)),
            Assume(span + 1 <= EXTENT),
            Assume(pad <= span),
        ]

        # Input position of tap j of window o (signed), and tap j's number.
        positions = [[Signal(signed(DIM_BITS + 4), name=f"position_{o}_{j}")
                      for j in range(EXTENT)] for o in range(MAX_SIZE)]
        tap_numbers = [Signal(DIM_BITS + 2, name=f"tap_number_{j}") for j in range(EXTENT)]
        for j in range(EXTENT):
            m.d.comb += tap_numbers[j].eq((kernel - 1 - j) * dilation)
            for o in range(MAX_SIZE):
                m.d.comb += positions[o][j].eq(o * stride + j * dilation - pad)

        def position(o, j):
            return positions[o][j]

        # Every window holds at least one element.
        for o in range(MAX_SIZE):
            holds = Cat((j < kernel) & (position(o, j) >= 0) & (position(o, j) < size)
                        for j in range(EXTENT)).any()
            m.d.comb += Assume((o >= out) | holds)

        # --- The input: free keys, valid free but held until taken, two images at most. ----
        cycle = Signal(range(FIRST_ITEM + 1))
        with m.If(cycle != FIRST_ITEM):
            m.d.sync += cycle.eq(cycle + 1)
        want = self._free(1, "want")
        key_free = self._free(KEY_BITS, "key_free")
        in_pos = Signal(DIM_BITS)             # position of the next item in its image
        in_image = Signal(range(IMAGES + 1))
        pending = Signal()                    # valid and not taken last cycle
        pending_key = Signal(KEY_BITS)
        valid = Signal()
        key = Signal(KEY_BITS)
        m.d.comb += [
            valid.eq(pending | (want & (cycle == FIRST_ITEM) & (in_image != IMAGES))),
            key.eq(Mux(pending, pending_key, key_free)),
            dut.i.valid.eq(valid),
            dut.i.payload.key.eq(key),
            dut.i.payload.real.eq(1),
        ]
        taken = valid & dut.i.ready
        m.d.sync += [pending.eq(valid & ~dut.i.ready), pending_key.eq(key)]
        with m.If(taken):
            with m.If(in_pos == size - 1):
                m.d.sync += [in_pos.eq(0), in_image.eq(in_image + 1)]
            with m.Else():
                m.d.sync += in_pos.eq(in_pos + 1)

        # --- The model: an accumulator per image and window. --------------------------------
        tap_width = tap_bits(EXTENT)
        acc_key = [[Signal(KEY_BITS, name=f"acc_key_{n}_{o}") for o in range(MAX_SIZE)]
                   for n in range(IMAGES)]
        acc_tap = [[Signal(tap_width, name=f"acc_tap_{n}_{o}") for o in range(MAX_SIZE)]
                   for n in range(IMAGES)]
        acc_real = [[Signal(name=f"acc_real_{n}_{o}") for o in range(MAX_SIZE)]
                    for n in range(IMAGES)]
        modelled = kernel - 1 if self.control == "short model" else kernel
        for n in range(IMAGES):
            for o in range(MAX_SIZE):
                for j in range(EXTENT):
                    hit = (taken & (in_image == n) & (o < out) & (j < modelled)
                           & (position(o, j) == in_pos))
                    with m.If(hit & (~acc_real[n][o] | (key > acc_key[n][o]))):
                        m.d.sync += [acc_key[n][o].eq(key), acc_real[n][o].eq(1),
                                     acc_tap[n][o].eq(tap_numbers[j])]

        # --- The output: free ready; each output the model's, in order. ---------------------
        ready = self._free(1, "ready")
        m.d.comb += dut.o.ready.eq(ready)
        out_o = Signal(DIM_BITS)
        out_image = Signal(range(IMAGES + 1))
        given = dut.o.valid & dut.o.ready
        result = dut.o.payload
        with m.If(given):
            m.d.comb += Assert(out_image < IMAGES)
            for n in range(IMAGES):
                for o in range(MAX_SIZE):
                    with m.If((out_image == n) & (out_o == o)):
                        m.d.comb += [
                            Assert(result.key == acc_key[n][o]),
                            Assert(result.taps[0][tap_field(0)] == acc_tap[n][o]),
                            Assert(result.real == acc_real[n][o]),
                        ]
            with m.If(out_o == out - 1):
                m.d.sync += [out_o.eq(0), out_image.eq(out_image + 1)]
            with m.Else():
                m.d.sync += out_o.eq(out_o + 1)
        # Idle: every image taken is complete and all its outputs are out.
        with m.If(dut.idle & (cycle == FIRST_ITEM)):
            m.d.comb += Assert((in_pos == 0) & (out_o == 0) & (out_image == in_image))
        with m.If(cycle == FIRST_ITEM):
            m.d.comb += Assert(~dut.config_error & ~dut.capacity_error)
        return m


def _later_wins_ties(original):
    def broken(m, name, enable, at_least, earlier, later=None):
        if later is None:
            return original(m, name, enable, at_least, earlier)
        return original(m, name, enable, at_least, later, earlier)
    return broken


def test_axis_pass_is_a_sliding_window_maximum(tmp_path):
    passed, seconds, log = prove(AxisPassAgainstModel(), tmp_path, mode="bmc", depth=DEPTH,
                                 solver="yices", flatten=True)
    assert passed, f"counterexample, see {tmp_path}/top\n{log[-3000:]}"
    print(f"AxisPass extent {EXTENT}: {DEPTH} cycles proved in {seconds:.1f} s")


def _tail_sees_the_next_image(use, ahead):
    return use


@pytest.mark.parametrize("control", ["later ties", "short model", "tail sees the next image"])
def test_the_axis_pass_check_finds_a_broken_pass(control, tmp_path):
    patch = (mock.patch.object(window, "_earliest_max", _later_wins_ties(window._earliest_max))
             if control == "later ties"
             else mock.patch.object(window, "_tail_use", _tail_sees_the_next_image)
             if control == "tail sees the next image" else contextlib.nullcontext())
    with patch:
        passed, _, _ = prove(AxisPassAgainstModel(control), tmp_path, mode="bmc", depth=DEPTH,
                             solver="yices", flatten=True)
    assert not passed, f"negative control {control!r} passed: the check checks nothing"
