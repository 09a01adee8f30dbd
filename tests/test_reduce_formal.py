"""Bounded proofs (SymbiYosys, yices) that the run reducer's pieces compute a plainly written
fold, for every dtype, any beats and any stalls; composed, they cover :class:`RunReducer`.

A direct proof of the whole reducer (free beats and stalls, against the contract's fold) did
not finish in ten minutes with z3 or yices, even at one lane. So the reducer is proved in the
pieces :class:`~maxaccel.hdl.reduce.RunReducer` builds it from, with the functions it builds
them with, each against a plain model in key space (:mod:`maxaccel.hdl.lane`: the unsigned
maximum of order keys). The dtype is free (any code of the table, fixed as during a command).

1. **The beat datapath**, two parts: ``_tree_stages`` (the maximum across a beat's lanes) and
   ``_fold_stages`` (the maximum of the elements inside the tree's result lane).

   * combinational (``pipeline="shallow"``), k-induction, every input: the tree's output is
     the element-wise unsigned maximum of its 1, 2 or 4 lanes; element 0 of the fold's output
     is the unsigned maximum of the lane's elements;
   * registered (``pipeline="deep"``) against the combinational part, with a free ``advance``
     every cycle (every stall pattern), ``valid`` carried by :func:`~maxaccel.hdl.kit.delay`
     as the reducer carries it: each beat that comes out (``valid`` and ``advance``) has the
     combinational part's result of the beat that went in, in order and exactly once (the
     expected value and a sequence number ride in the delayed tag). Bounded:
     :data:`DATAPATH_DEPTH` cycles from reset; the fold and the 2-lane tree (every board target
     has 1 or 2 lanes).

2. **The run accumulator**, :func:`~maxaccel.hdl.kit.accumulate_runs`: the two-cycle loop of
   two partials (``"deep"``) and the single accumulator (``"shallow"``), inside the reducer's
   output stage and ``advance = ~o.valid | o.ready``, with ``o.ready`` and the input's
   ``valid`` and ``last`` free every cycle. Plain model: an accumulator register, the format's
   least key at a run's start, the element-wise ``max(acc, lane)`` for each lane taken, its
   value queued at a run's last lane; each result the unit gives must be the queue's head, and
   none may come when the queue is empty. Bounded: :data:`ACCUMULATOR_DEPTH` cycles from reset
   (a ``"deep"`` run of up to 4 lanes comes out inside them, a ``"shallow"`` one of up to 4).
   Two reductions keep the solver on the accumulator's own logic:

   * its :class:`~maxaccel.hdl.lane.KeyMax` instances are replaced by :class:`PlainKeyMax`,
     which :func:`test_plain_key_max_is_key_max` proves equal to KeyMax in every cycle for
     every input sequence (both are pure pipelines of their latency, so they stay equal under
     the enables ``accumulate_runs`` puts on them);
   * data abstraction: each element of a lane is the format's least key L or L + 1 (or 0, all
     padding, as the one lane of an empty run, which is all the reducer feeds it). The data
     only flows through maxima and selects (``KeyMax``, ``take_b``, the ``saved`` mux), the
     same for every element, and nothing but ``valid``, ``last`` and the stalls steers them, so
     each result is the maximum of some set of lanes and perhaps L; a set that misses a lane of
     the run, or takes one of another run, or the least key where the run has no lane, gives a
     wrong result for some choice of L and L + 1, which the solver is free to make.

How they compose into the reducer (read ``RunReducer.elaborate`` beside this): the beat's lanes
become keys (:func:`~maxaccel.hdl.kit.to_keys`, padding as key 0; ``tests/test_lane_formal.py``
proves the key round trip), piece 1 reduces each beat to one key lane with its ``valid`` and
``last`` delayed alongside by the same ``advance``, and piece 2 folds those lanes over runs and
holds the output register. Keys are in the contract's order (``tests/test_lane_formal.py``:
``FromKey(KeyMax(ToKey a, ToKey b))`` is the contract's maximum) and the maximum of keys is one
of them, so ``FromKey`` of a run's maximum key is the contract's maximum of its values. Not
proved here: the glue lines of ``RunReducer.elaborate`` (the ``filled`` masks, the sum of the
latencies, the element-0 mask), runs and stall patterns beyond the bounds, and the 4-lane tree
under stalls; the simulation suites (``tests/test_reduce.py``) cover the whole unit.

Commands and times: ``docs/semantics.md`` section 6.
"""

from unittest import mock

import pytest
from amaranth.hdl import Array, Assert, Assume, Cat, Elaboratable, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from formal import prove

from maxaccel.contract.dtypes import FORMATS
from maxaccel.hdl.kit import accumulate_runs, decode_format, delay
from maxaccel.hdl.lane import ELEMENT_SIZES, LANE_BITS, KeyMax, float_key
from maxaccel.hdl.reduce import LaneFold, _fold_stages, _tree_stages

pytestmark = pytest.mark.formal

#: Cycles of the registered datapath proofs: the deepest pipeline here (4 lanes: 4 + 5 cycles)
#: delivers at least its first beat inside them, with any stalls before.
DATAPATH_DEPTH = 10
#: Cycles of the accumulator proofs, by pipeline: one more cycle took 2.5 minutes (deep) and
#: 1-3 minutes (shallow) on two shared cores.
ACCUMULATOR_DEPTH = {"deep": 10, "shallow": 5}


def free_constant(m, free, shape, name):
    """A value free in the first cycle and held from then on (a free ``AnyConst``); its free
    input is appended to ``free``."""
    first = Signal(init=1, name=f"{name}_first")
    m.d.sync += first.eq(0)
    value, held, chosen = (Signal(shape, name=f"{name}_{kind}")
                           for kind in ("free", "held", "value"))
    free.append(value)
    m.d.comb += chosen.eq(Mux(first, value, held))
    m.d.sync += held.eq(chosen)
    return chosen, first


def any_dtype(m, free):
    """A dtype of the table, fixed for the proof (as during a command), and its first cycle."""
    dtype, first = free_constant(m, free, 5, "dtype")
    m.d.comb += Assume(Cat(dtype == fmt.dtype for fmt in FORMATS.values()).any())
    return dtype, first


def per_size(m, dtype, width, build):
    """A ``width``-bit signal that is ``build(bits)`` for the element size of the run-time
    ``dtype``."""
    out = Signal(width)
    sizes = sorted({fmt.bits for fmt in FORMATS.values()})
    with m.Switch(dtype):
        for bits in sizes:
            with m.Case(*[fmt.dtype for fmt in FORMATS.values() if fmt.bits == bits]):
                m.d.comb += out.eq(build(bits))
    return out


def per_format(m, dtype, width, build):
    """A ``width``-bit signal that is ``build(fmt)`` for the run-time ``dtype``."""
    out = Signal(width)
    with m.Switch(dtype):
        for fmt in FORMATS.values():
            with m.Case(fmt.dtype):
                m.d.comb += out.eq(build(fmt))
    return out


def elements(lane, bits):
    """The ``bits``-wide elements of a lane, element 0 first."""
    return [lane[start:start + bits] for start in range(0, LANE_BITS, bits)]


def plain_max(values):
    """The unsigned maximum of ``values``, one after the other."""
    result = values[0]
    for value in values[1:]:
        result = Mux(value > result, value, result)
    return result


def least_key(fmt):
    """The key an empty run yields: that of ``-inf`` for floats, of the minimum (key 0) for
    integers and bool."""
    return float_key(fmt, fmt.lowest) if fmt.is_float else 0


# --- 1. the beat datapath -------------------------------------------------------------------


class DatapathAgainstFold(Elaboratable):
    """The reduction tree across ``lanes`` key lanes (``part="tree"``: each element the
    unsigned maximum of that element of every lane) or the fold inside one lane
    (``part="fold"``: element 0 the unsigned maximum of the lane's elements), against the
    plain model; combinational, or registered with free stalls.

    ``control``: a negative control; ``"last lane"`` leaves the last lane (the last element for
    the fold) out of the plain model (a wrong model must fail); ``"stall"`` lets the tag
    registers advance on every cycle while the datapath stalls (a beat then meets another's
    tag).
    """

    SEQUENCE_BITS = 4

    def __init__(self, part, lanes, registered, control=None):
        assert part in ("tree", "fold") and (part == "tree" or lanes == 1)
        self.part = part
        self.lanes = lanes
        self.registered = registered
        self.control = control
        stages = 2 * (lanes.bit_length() - 1) if part == "tree" else LaneFold.FOLD_LATENCY
        self.latency = stages if registered else 0
        self.keys = [Signal(LANE_BITS, name=f"key{j}") for j in range(lanes)]
        self.valid = Signal()
        self.advance = Signal()
        self.free = [*self.keys, self.valid, self.advance]

    def ports(self):
        return self.free

    def elaborate(self, platform):
        m = Module()
        dtype, first = any_dtype(m, self.free)
        # As in RunReducer: the deep pipeline reads the registered decode (keys come at least
        # a cycle after the dtype), the shallow one the decode itself.
        fmt = decode_format(m, dtype, registered=self.registered)
        advance = self.advance if self.registered else 1
        drop = 1 if self.control == "last lane" else 0

        def datapath(registered, module):
            if self.part == "tree":
                return _tree_stages(module, advance, fmt, self.keys, registered)
            return _fold_stages(module, advance, fmt, self.keys[0], registered)

        out = datapath(self.registered, m)
        if self.part == "tree":
            mask = (1 << LANE_BITS) - 1
        else:
            mask = per_size(m, dtype, LANE_BITS, lambda bits: (1 << bits) - 1)
        if not self.registered:
            if self.part == "tree":
                expected = per_size(m, dtype, LANE_BITS, lambda bits: Cat(
                    plain_max(list(column)[:self.lanes - drop])
                    for column in zip(*[elements(lane, bits) for lane in self.keys])))
            else:
                expected = per_size(m, dtype, LANE_BITS, lambda bits: plain_max(
                    elements(self.keys[0], bits)[:max(1, LANE_BITS // bits - drop)]))
            m.d.comb += Assert((out & mask) == (expected & mask))
            return m

        # Registered: against the combinational datapath (proved against the plain model
        # above), delayed through the stalls.
        m.submodules.reference = reference = Module()
        expected = datapath(False, reference)

        m.d.comb += Assume(~(first & self.valid))
        sent, taken = Signal(self.SEQUENCE_BITS), Signal(self.SEQUENCE_BITS)
        tag_shape = LANE_BITS + self.SEQUENCE_BITS
        tag_advance = 1 if self.control == "stall" else advance
        valid, tag = delay(m, "beat", tag_advance, self.valid, Cat(expected, sent), tag_shape,
                           self.latency)
        with m.If(self.valid & advance):
            m.d.sync += sent.eq(sent + 1)
        with m.If(valid & advance):
            m.d.sync += taken.eq(taken + 1)
            m.d.comb += [
                Assert((out & mask) == (tag[:LANE_BITS] & mask)),
                Assert(tag[LANE_BITS:] == taken),
            ]
        return m


def proved(harness, tmp_path, what, **options):
    passed, seconds, log = prove(harness, tmp_path, solver="yices", **options)
    assert passed, f"{what}: counterexample, see {tmp_path}/top\n{log[-3000:]}"
    print(f"{what}: proved in {seconds:.1f} s")


@pytest.mark.parametrize("part,lanes", [("fold", 1), ("tree", 2), ("tree", 4)])
def test_combinational_datapath_is_the_plain_maximum(part, lanes, tmp_path):
    proved(DatapathAgainstFold(part, lanes, registered=False), tmp_path,
           f"{part}, {lanes} lane(s), combinational")


@pytest.mark.parametrize("part,lanes", [("fold", 1), ("tree", 2)])
def test_registered_datapath_is_the_plain_maximum_under_stalls(part, lanes, tmp_path):
    """Every board target has one or two lanes (``boards/targets.py``). Four lanes (two tree
    levels) did not finish step 9 of 10 in five minutes; they are proved combinationally
    above, and under stalls only by the simulation suites."""
    proved(DatapathAgainstFold(part, lanes, registered=True), tmp_path,
           f"{part}, {lanes} lane(s), registered, {DATAPATH_DEPTH} cycles", mode="bmc",
           depth=DATAPATH_DEPTH)


@pytest.mark.parametrize("part,lanes,registered,control", [
    ("fold", 1, False, "last lane"), ("tree", 2, False, "last lane"),
    ("fold", 1, True, "stall"), ("tree", 2, True, "stall")])
def test_the_datapath_check_finds_a_wrong_model_and_lost_beats(part, lanes, registered,
                                                                control, tmp_path):
    passed, _, _ = prove(DatapathAgainstFold(part, lanes, registered, control), tmp_path,
                         mode="bmc", depth=DATAPATH_DEPTH if registered else 1, solver="yices")
    assert not passed, f"negative control {control!r} passed: the check checks nothing"


# --- 2. the run accumulator -----------------------------------------------------------------


class PlainKeyMax(wiring.Component):
    """:class:`~maxaccel.hdl.lane.KeyMax` as its proof states it: per element of the one-hot
    ``size``, ``b`` if ``take_b`` else the unsigned maximum of ``a`` and ``b``, ``latency``
    register stages later (the operands registered first, then the result). The accumulator
    proofs run with it in place of KeyMax, so the solver compares the same maximum on both
    sides and spends itself on what the accumulator adds: which partial a lane joins, what is
    saved and closed, and the stalls. :func:`test_plain_key_max_is_key_max` proves the two
    equal, every input sequence. Without tags: the proofs are of the values; the positions an
    ``arg`` reduction carries as tags are checked in simulation (``tests/test_reduce.py``)."""

    def __init__(self, *, latency=0, tag_width=0):
        assert latency in (0, 1, 2) and tag_width == 0
        self.latency = latency
        super().__init__({"size": In(len(ELEMENT_SIZES)), "a": In(LANE_BITS),
                          "b": In(LANE_BITS), "take_b": In(1), "result": Out(LANE_BITS)})

    def elaborate(self, platform):
        m = Module()
        operands = [self.size, self.a, self.b, self.take_b]
        if self.latency == 2:
            staged = [Signal.like(value, name=f"{value.name}_s1") for value in operands]
            m.d.sync += [s.eq(value) for s, value in zip(staged, operands)]
            operands = staged
        size, a, b, take_b = operands
        result = Signal(LANE_BITS)
        for k, nbytes in enumerate(ELEMENT_SIZES):
            with m.If(size[k]):
                m.d.comb += result.eq(Mux(take_b, b, Cat(
                    plain_max([x, y]) for x, y in zip(elements(a, 8 * nbytes),
                                                      elements(b, 8 * nbytes)))))
        if self.latency:
            m.d.sync += self.result.eq(result)
        else:
            m.d.comb += self.result.eq(result)
        return m


class KeyMaxAgainstPlain(Elaboratable):
    def __init__(self, latency):
        self.latency = latency
        self.size, self.take_b = Signal(len(ELEMENT_SIZES)), Signal()
        self.a, self.b = Signal(LANE_BITS), Signal(LANE_BITS)

    def ports(self):
        return [self.size, self.take_b, self.a, self.b]

    def elaborate(self, platform):
        m = Module()
        m.d.comb += Assume(Cat(self.size == 1 << k for k in range(len(ELEMENT_SIZES))).any())
        m.submodules.real = real = KeyMax(latency=self.latency)
        m.submodules.plain = plain = PlainKeyMax(latency=self.latency)
        for unit in (real, plain):
            m.d.comb += [unit.size.eq(self.size), unit.a.eq(self.a), unit.b.eq(self.b),
                         unit.take_b.eq(self.take_b)]
        cycles = Signal(range(self.latency + 1))
        with m.If(cycles != self.latency):
            m.d.sync += cycles.eq(cycles + 1)
        with m.Else():
            m.d.comb += Assert(real.result == plain.result)
        return m


@pytest.mark.parametrize("latency", [1, 2])
def test_plain_key_max_is_key_max(latency, tmp_path):
    """The stand-in of the accumulator proofs gives KeyMax's result in every cycle."""
    proved(KeyMaxAgainstPlain(latency), tmp_path, f"PlainKeyMax = KeyMax(latency={latency})")


class AccumulatorAgainstFold(Elaboratable):
    """:func:`accumulate_runs` with the reducer's output stage, against a plain accumulator.

    ``control``: a negative control; ``"ignore stalls"`` makes the model take a lane whenever
    one is valid, whether the unit takes it or not; ``"no least key"`` starts each run of the
    model at key 0 instead of the format's least key (an empty float run then differs).
    """

    QUEUE = 8

    def __init__(self, registered, control=None):
        self.registered = registered
        self.control = control
        self.lane = Signal(LANE_BITS)
        self.valid = Signal()
        self.last = Signal()
        self.ready = Signal()
        self.free = [self.lane, self.valid, self.last, self.ready]

    def ports(self):
        return self.free

    def elaborate(self, platform):
        m = Module()
        dtype, first = any_dtype(m, self.free)
        fmt = decode_format(m, dtype, registered=self.registered)
        if self.registered:
            m.d.comb += Assume(~(first & self.valid))

        # RunReducer's output stage and stall control around the accumulator.
        o_valid, o_key = Signal(), Signal(LANE_BITS)
        advance = Signal()
        m.d.comb += advance.eq(~o_valid | self.ready)
        with mock.patch("maxaccel.hdl.kit.KeyMax", PlainKeyMax):
            (result,), result_valid = accumulate_runs(m, advance, fmt, [self.lane], self.valid,
                                                      self.last, self.registered)
        if self.registered:
            with m.If(advance):
                m.d.sync += [o_valid.eq(result_valid), o_key.eq(result)]
        else:
            m.d.comb += [o_valid.eq(result_valid), o_key.eq(result)]

        # The plain accumulator and the queue of the results it expects.
        acc, in_run = Signal(LANE_BITS), Signal()
        queue = Array(Signal(LANE_BITS, name=f"expected{i}") for i in range(self.QUEUE))
        head, tail = Signal(range(self.QUEUE)), Signal(range(self.QUEUE))
        pending = Signal(range(self.QUEUE + 1))
        least = per_format(m, dtype, LANE_BITS, lambda fmt: sum(
            least_key(fmt) << start for start in range(0, LANE_BITS, fmt.bits)))
        start = Mux(in_run, acc, 0 if self.control == "no least key" else least)
        folded = per_size(m, dtype, LANE_BITS, lambda bits: Cat(
            plain_max([a, b]) for a, b in zip(elements(start, bits), elements(self.lane, bits))))
        # What the reducer feeds it: keys of values (at least the least key), or key 0 (every
        # byte padding) only as the one lane of an empty run. And the data abstraction (see
        # the module's docstring): each element the least key L or L + 1.
        fed = per_format(m, dtype, 1, lambda fmt: Cat(
            (key == least_key(fmt)) | (key == least_key(fmt) + 1)
            | ((key == 0) & ~in_run & self.last)
            for key in elements(self.lane, fmt.bits)).all())
        m.d.comb += Assume(~self.valid | fed)
        taken_in = self.valid & (1 if self.control == "ignore stalls" else advance)
        taken_out = o_valid & self.ready
        with m.If(taken_in):
            m.d.sync += [acc.eq(folded), in_run.eq(~self.last)]
            with m.If(self.last):
                m.d.sync += [queue[tail].eq(folded), tail.eq(tail + 1)]
        with m.If(taken_out):
            m.d.comb += [Assert(pending != 0), Assert(o_key == queue[head])]
            m.d.sync += head.eq(head + 1)
        m.d.sync += pending.eq(pending + (taken_in & self.last) - taken_out)
        m.d.comb += Assume(pending < self.QUEUE)
        return m


@pytest.mark.parametrize("pipeline", ["deep", "shallow"])
def test_run_accumulator_is_the_plain_fold_under_stalls(pipeline, tmp_path):
    depth = ACCUMULATOR_DEPTH[pipeline]
    proved(AccumulatorAgainstFold(pipeline == "deep"), tmp_path,
           f"run accumulator ({pipeline}), {depth} cycles", mode="bmc", depth=depth)


@pytest.mark.parametrize("pipeline,control", [("shallow", "ignore stalls"),
                                              ("deep", "no least key")])
def test_the_accumulator_check_finds_ignored_stalls_and_a_wrong_fold(pipeline, control,
                                                                      tmp_path):
    """(A stall in the deep pipeline's bound cannot show: its first result can be stalled at
    cycle 6 at the earliest, and the run a wrongly taken lane joins ends past cycle 10.)"""
    passed, _, _ = prove(AccumulatorAgainstFold(pipeline == "deep", control=control), tmp_path,
                         mode="bmc", depth=ACCUMULATOR_DEPTH[pipeline], solver="yices")
    assert not passed, f"negative control {control!r} passed: the check checks nothing"
