"""Reductions: the max across a beat's lanes, inside a lane, and over whole runs of beats.

Stream components, each usable on its own, and the ReduceMax unit built from them:

* :class:`ReductionTree` -- element-wise max across the ``lanes`` lanes of a beat: a binary tree
  of :class:`~maxaccel.hdl.lane.KeyMax` with one register per tree level.
* :class:`LaneFold` -- max of the elements *inside* one lane (8, 4, 2 or 1 of them, by dtype).
* :class:`PadLowest` -- replaces a beat's padding bytes by the dtype's least element, the
  identity of max, so padding never wins and an empty row yields the empty-set value.
* :class:`RunReducer` -- ReduceMax over runs (rows) of any length, one result per run:
  ``PadLowest -> ToKey -> ReductionTree -> LaneFold -> accumulator -> FromKey``.

The comparisons run in *key space* (:mod:`maxaccel.hdl.lane`): values are mapped to order keys
once on entry (:class:`~maxaccel.hdl.lane.ToKey`, every NaN becomes the greatest key) and back
once on exit (:class:`~maxaccel.hdl.lane.FromKey`, which makes NaN canonical), so each
comparison in between is one carry chain and a 2:1 select. ``ReductionTree`` and ``LaneFold``
take ``keys=True`` to carry keys in and out, for chaining them without converting in between.

Every component follows the same stall discipline: a pipeline advances when its output register
is empty or being taken (``advance = ~o.valid | o.ready``); ``i.ready`` is ``advance``, so
``ready`` never depends on ``valid``, and with ``o.ready`` held high one beat is accepted every
cycle. See ``docs/architecture.md``, "Reduction tree and run reducer".
"""

from amaranth.hdl import Cat, EnableInserter, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from maxaccel.host.dtypes import FORMATS, DType

from .beat import beat_layout
from .lane import (ELEMENT_SIZES, LANE_BITS, LANE_BYTES, FromKey, KeyMax, LaneDecode,
                   LaneFormat, ToKey, splat_constant)

__all__ = ["ReductionTree", "LaneFold", "PadLowest", "RunReducer", "lowest_lane",
           "tree_layout", "lane_layout"]


def lowest_lane(fmt):
    """A lane filled with the least element of ``fmt`` (:attr:`Format.lowest`), as an int."""
    return splat_constant(fmt.lowest, fmt.bits)


def tree_layout(lanes, tag_shape=0):
    """Payload of :class:`ReductionTree`'s input: ``data`` (``lanes`` x 64 bits) and ``tag``."""
    return data.StructLayout({"data": data.ArrayLayout(LANE_BITS, lanes), "tag": tag_shape})


def lane_layout(tag_shape=0):
    """Payload of a one-lane stream: ``data`` (64 bits) and ``tag``."""
    return data.StructLayout({"data": LANE_BITS, "tag": tag_shape})


def _check_lanes(unit, lanes, power_of_two=True):
    if not isinstance(lanes, int) or isinstance(lanes, bool) or lanes < 1 \
            or (power_of_two and lanes & (lanes - 1)):
        # A unit that failed to construct must not also warn that it was never elaborated.
        unit._MustUse__silence = True
        kind = "a power of two (1, 2, 4, 8, ...)" if power_of_two else "a positive integer"
        raise ValueError(f"{type(unit).__name__}: lanes must be {kind}, not {lanes!r}")


def _decode(m, dtype):
    """The format of ``dtype`` now (combinational) and registered (one cycle later).

    The input stage of a unit uses the combinational decode, so ``dtype`` only has to be valid
    with the first beat; later stages use the register, which keeps the decode off their paths
    (``dtype`` is static during a command, so both agree whenever a beat is there).
    """
    m.submodules.decode = decode = LaneDecode()
    registered = Signal(LaneFormat)
    m.d.comb += decode.dtype.eq(dtype)
    m.d.sync += registered.eq(decode.format)
    return decode.format, registered


def _key_max(m, name, enable, fmt, a, b):
    """A registered :class:`KeyMax` of ``a`` and ``b`` that advances only with ``enable``."""
    key_max = KeyMax(latency=1)
    m.submodules[name] = EnableInserter(enable)(key_max)
    m.d.comb += [key_max.size.eq(fmt.size), key_max.a.eq(a), key_max.b.eq(b)]
    return key_max.result


def _to_key(m, name, fmt, value):
    to_key = m.submodules[name] = ToKey()
    m.d.comb += [to_key.format.eq(fmt), to_key.value.eq(value)]
    return to_key.key


def _from_key(m, name, fmt, key):
    from_key = m.submodules[name] = FromKey()
    m.d.comb += [from_key.format.eq(fmt), from_key.key.eq(key)]
    return from_key.value


class ReductionTree(wiring.Component):
    """Element-wise maximum across the lanes of each beat.

    A binary tree of :class:`~maxaccel.hdl.lane.KeyMax`: level ``k`` takes the max of pairs of
    level ``k-1``'s results, one register per level, so ``log2(lanes)`` levels reduce ``lanes``
    lanes to one. NaN wins from any lane (the result is the canonical quiet NaN) and ``+0``
    beats ``-0`` whichever lanes they come from. The tag travels with its beat untouched, so a
    caller can carry ``first``/``last``/``nbytes`` or anything else alongside.

    Parameters
    ----------
    lanes : int
        Lanes per input beat, a power of two (``ValueError`` otherwise). With ``lanes == 1``
        there is no register: ``o`` is ``i`` through the key round trip (which still makes a NaN
        canonical), ``i.ready = o.ready``.
    tag_shape : shape-like
        Shape of the opaque tag carried alongside each beat (default: none, 0 bits).
    keys : bool
        ``False`` (default): ``data`` in and out are values; the tree converts to order keys at
        its input and back at its output (both combinational, the latter after the last
        register). ``True``: ``data`` in and out are order keys (see :class:`ToKey`).

    Ports
    -----
    i : In(stream.Signature(tree_layout(lanes, tag_shape)))
        ``data``: ``lanes`` 64-bit lanes, elements packed little-endian; ``tag``.
    o : Out(stream.Signature(lane_layout(tag_shape)))
        ``data``: one lane, element ``j`` the max over the lanes of their element ``j``;
        ``tag``: the beat's tag.
    dtype : In(DType)
        Element type; valid with the first beat and constant while beats are in the tree
        (static during a command).

    Latency and throughput
    ----------------------
    :attr:`latency` ``= log2(lanes)`` cycles from a beat accepted to its result valid; one beat
    per cycle whenever ``o.ready`` is high. ``o.valid & ~o.ready`` stalls every level.
    """

    def __init__(self, lanes, tag_shape=0, *, keys=False):
        _check_lanes(self, lanes)
        self.lanes = lanes
        self.tag_shape = tag_shape
        self.keys = keys
        self.latency = lanes.bit_length() - 1
        super().__init__({
            "i": In(stream.Signature(tree_layout(lanes, tag_shape))),
            "o": Out(stream.Signature(lane_layout(tag_shape))),
            "dtype": In(DType),
        })

    def elaborate(self, platform):
        m = Module()
        format_now, format_registered = _decode(m, self.dtype)
        # The output format: the registered one once a register separates it from the input.
        format_out = format_registered if self.latency else format_now

        level = [self.i.payload.data[j] for j in range(self.lanes)]
        if not self.keys:
            level = [_to_key(m, f"key_{j}", format_now, lane) for j, lane in enumerate(level)]

        if self.lanes == 1:
            m.d.comb += self.i.ready.eq(self.o.ready)
            valid, tag = self.i.valid, self.i.payload.tag
        else:
            advance = Signal()
            m.d.comb += [
                advance.eq(~self.o.valid | self.o.ready),
                self.i.ready.eq(advance),
            ]
            valid, tag = self.i.valid, self.i.payload.tag
            for depth in range(self.latency):
                fmt = format_now if depth == 0 else format_registered
                level = [_key_max(m, f"max_{depth}_{pair}", advance, fmt,
                                  level[2 * pair], level[2 * pair + 1])
                         for pair in range(len(level) // 2)]
                next_valid = Signal(name=f"valid_{depth}")
                next_tag = Signal(self.tag_shape, name=f"tag_{depth}")
                with m.If(advance):
                    m.d.sync += [next_valid.eq(valid), next_tag.eq(tag)]
                valid, tag = next_valid, next_tag

        result = level[0] if self.keys else _from_key(m, "value", format_out, level[0])
        m.d.comb += [
            self.o.valid.eq(valid),
            self.o.payload.data.eq(result),
            self.o.payload.tag.eq(tag),
        ]
        return m


class LaneFold(wiring.Component):
    """Maximum of the elements inside one lane, for the run-time dtype.

    Three registered :class:`~maxaccel.hdl.lane.KeyMax` stages fold the lane in halves:
    ``max(x, x >> 32)``, then ``>> 16``, then ``>> 8`` (in keys). A stage folds only where the
    element size allows (elements of at most 4, 2, 1 bytes respectively); otherwise it passes
    the lane on (``max(x, x)``). Element 0 of the output (its low ``element size`` bytes) is the
    max of all the input lane's elements; a NaN result is the canonical quiet NaN.

    The **upper bytes of the output are don't-care** (maxima of partial folds with zero keys
    shifted in); mask them if they matter.

    Parameters
    ----------
    tag_shape : shape-like
        Shape of an opaque tag carried alongside each lane (default: none, 0 bits).
    keys : bool
        ``False`` (default): ``data`` in and out are values (converted to keys at the input and
        back at the output, both combinational). ``True``: order keys in and out.

    Ports
    -----
    i : In(stream.Signature(lane_layout(tag_shape)))
        ``data``: one lane, elements packed little-endian; ``tag``.
    o : Out(stream.Signature(lane_layout(tag_shape)))
        ``data``: element 0 is the max of the input lane's elements, the rest don't-care;
        ``tag``: the input's tag.
    dtype : In(DType)
        Element type; valid with the first lane and constant while lanes are in the fold.

    Latency and throughput
    ----------------------
    :attr:`LATENCY` ``= 3`` cycles for every dtype; one lane per cycle whenever ``o.ready`` is
    high.
    """

    #: Cycles from a lane accepted to its result valid.
    LATENCY = 3
    # (shift in bytes, element sizes in bytes for which the stage folds)
    _STAGES = ((4, (1, 2, 4)), (2, (1, 2)), (1, (1,)))

    def __init__(self, tag_shape=0, *, keys=False):
        self.tag_shape = tag_shape
        self.keys = keys
        super().__init__({
            "i": In(stream.Signature(lane_layout(tag_shape))),
            "o": Out(stream.Signature(lane_layout(tag_shape))),
            "dtype": In(DType),
        })

    def elaborate(self, platform):
        m = Module()
        format_now, format_registered = _decode(m, self.dtype)

        advance = Signal()
        m.d.comb += [
            advance.eq(~self.o.valid | self.o.ready),
            self.i.ready.eq(advance),
        ]

        lane, valid, tag = self.i.payload.data, self.i.valid, self.i.payload.tag
        if not self.keys:
            lane = _to_key(m, "key", format_now, lane)
        for index, (shift, sizes) in enumerate(self._STAGES):
            fmt = format_now if index == 0 else format_registered
            folds = Cat(fmt.size[ELEMENT_SIZES.index(size)] for size in sizes).any()
            lane = _key_max(m, f"fold_{index}", advance, fmt,
                            lane, Mux(folds, lane >> (8 * shift), lane))
            next_valid = Signal(name=f"valid_{index}")
            next_tag = Signal(self.tag_shape, name=f"tag_{index}")
            with m.If(advance):
                m.d.sync += [next_valid.eq(valid), next_tag.eq(tag)]
            valid, tag = next_valid, next_tag
        if not self.keys:
            lane = _from_key(m, "value", format_registered, lane)

        m.d.comb += [
            self.o.valid.eq(valid),
            self.o.payload.data.eq(lane),
            self.o.payload.tag.eq(tag),
        ]
        return m


class PadLowest(wiring.Component):
    """Replaces the padding bytes of each beat by the dtype's least element.

    Bytes ``nbytes`` and up of a beat carry no element (see
    :func:`~maxaccel.hdl.beat.beat_layout`); they become ``-inf``, the integer minimum or
    ``False`` (:attr:`Format.lowest` repeated), the identity of max. An empty row
    (``nbytes == 0``) becomes a beat of least elements, whose max is the empty-set value.

    Parameters
    ----------
    lanes : int
        Lanes per beat (any positive count).

    Ports
    -----
    i : In(stream.Signature(beat_layout(lanes)))
        Beats; ``nbytes`` is a multiple of the element size.
    o : Out(stream.Signature(beat_layout(lanes)))
        The same beats (``nbytes``, ``first``, ``last`` unchanged), padding replaced.
    dtype : In(DType)
        Element type; valid with the first beat and constant while beats are in the unit.

    Latency and throughput
    ----------------------
    1 cycle (one register); one beat per cycle whenever ``o.ready`` is high.
    """

    def __init__(self, lanes):
        _check_lanes(self, lanes, power_of_two=False)
        self.lanes = lanes
        super().__init__({
            "i": In(stream.Signature(beat_layout(lanes))),
            "o": Out(stream.Signature(beat_layout(lanes))),
            "dtype": In(DType),
        })

    def elaborate(self, platform):
        m = Module()
        lowest = Signal(LANE_BITS)
        with m.Switch(self.dtype):
            for fmt in FORMATS.values():
                with m.Case(fmt.dtype):
                    m.d.comb += lowest.eq(lowest_lane(fmt))

        advance = Signal()
        m.d.comb += [
            advance.eq(~self.o.valid | self.o.ready),
            self.i.ready.eq(advance),
        ]
        beat = self.i.payload
        with m.If(advance):
            m.d.sync += [
                self.o.valid.eq(self.i.valid),
                self.o.payload.nbytes.eq(beat.nbytes),
                self.o.payload.first.eq(beat.first),
                self.o.payload.last.eq(beat.last),
            ]
            for j in range(self.lanes):
                for b in range(LANE_BYTES):
                    byte = slice(8 * b, 8 * b + 8)
                    m.d.sync += self.o.payload.data[j][byte].eq(
                        Mux(beat.nbytes > LANE_BYTES * j + b, beat.data[j][byte], lowest[byte]))
        return m


class RunReducer(wiring.Component):
    """ReduceMax over runs of beats: one result per run, whatever the run lengths.

    Each row of the input stream (``first`` .. ``last``, see
    :func:`~maxaccel.hdl.beat.beat_layout`) is one reduction run of R >= 0 elements; the unit
    emits their max under the maxaccel order: NaN absorbing (the canonical quiet NaN comes out),
    ``+0`` over ``-0``, and the empty-set value (``-inf``, the integer minimum, ``False``) for an
    empty run (one beat, ``nbytes == 0``, ``first = last = 1``). Runs may be of any length and
    number; the unit looks at nothing but ``first``, ``last`` and ``nbytes``.

    Pipeline (cycles)::

        i -> PadLowest (1) -> ToKey + ReductionTree (log2 lanes) -> LaneFold (3)
          -> accumulator (1) -> FromKey, mask -> o

    The accumulator register holds the running max key: ``acc = max(first ? v : acc, v)``. Its
    loop (a 2:1 mux and a :class:`~maxaccel.hdl.lane.KeyMax`: one 72-bit carry chain and a
    select) must close in one cycle to take a beat per cycle whatever the run lengths, so it is
    the likely Fmax limit of the unit (not measured yet). The output is ``FromKey(acc)``,
    combinational after the accumulator register.

    GlobalMaxPool of an ``N x C x D1..Dn`` tensor in channel-first order is ``N*C`` runs of
    ``prod(D)`` elements, so it uses this unit directly.

    Parameters
    ----------
    lanes : int
        Lanes per input beat, a power of two (``ValueError`` otherwise).

    Ports
    -----
    i : In(stream.Signature(beat_layout(lanes)))
        Rows of elements, one row per run.
    o : Out(stream.Signature(64))
        One lane per run: element 0 (the low ``element size`` bytes) is the run's max; the other
        bytes are zero.
    dtype : In(DType)
        Element type; valid with the first beat and constant while runs are in the unit (static
        during a command).

    Latency and throughput
    ----------------------
    :attr:`latency` ``= 5 + log2(lanes)`` cycles from the last beat of a run accepted to its
    result valid (1 pad + log2(lanes) tree + 3 fold + 1 accumulator): 5, 6, 7, 8 for 1, 2, 4, 8
    lanes. One beat per cycle in steady state while ``o.ready`` is high, for any mix of run
    lengths; a run costs ``max(1, ceil(R * itemsize / (8 * lanes)))`` beats. While a result
    waits (``o.valid & ~o.ready``) the accumulator holds and the pipeline behind it stalls.
    """

    def __init__(self, lanes):
        _check_lanes(self, lanes)
        self.lanes = lanes
        self.latency = 1 + (lanes.bit_length() - 1) + LaneFold.LATENCY + 1
        super().__init__({
            "i": In(stream.Signature(beat_layout(lanes))),
            "o": Out(stream.Signature(LANE_BITS)),
            "dtype": In(DType),
        })

    def elaborate(self, platform):
        m = Module()
        framing = data.StructLayout({"first": 1, "last": 1})
        m.submodules.pad = pad = PadLowest(self.lanes)
        m.submodules.tree = tree = ReductionTree(self.lanes, tag_shape=framing, keys=True)
        m.submodules.fold = fold = LaneFold(tag_shape=framing, keys=True)
        for unit in (pad, tree, fold):
            m.d.comb += unit.dtype.eq(self.dtype)
        _, fmt = _decode(m, self.dtype)   # registered: every use below is after the pad

        wiring.connect(m, wiring.flipped(self.i), pad.i)
        m.d.comb += [
            tree.i.valid.eq(pad.o.valid),
            tree.i.payload.tag.first.eq(pad.o.payload.first),
            tree.i.payload.tag.last.eq(pad.o.payload.last),
            pad.o.ready.eq(tree.i.ready),
        ]
        for j in range(self.lanes):
            m.d.comb += tree.i.payload.data[j].eq(
                _to_key(m, f"key_{j}", fmt, pad.o.payload.data[j]))
        wiring.connect(m, tree.o, fold.i)

        # Accumulator, also the output register. Loop: acc -> mux -> KeyMax -> acc.
        beat = fold.o.payload
        acc = Signal(LANE_BITS)
        m.submodules.accumulate = accumulate = KeyMax(latency=0)
        m.d.comb += [
            accumulate.size.eq(fmt.size),
            accumulate.a.eq(Mux(beat.tag.first, beat.data, acc)),
            accumulate.b.eq(beat.data),
        ]
        advance = Signal()
        m.d.comb += [
            advance.eq(~self.o.valid | self.o.ready),
            fold.o.ready.eq(advance),
        ]
        with m.If(advance):
            m.d.sync += self.o.valid.eq(fold.o.valid & beat.tag.last)
            with m.If(fold.o.valid):
                m.d.sync += acc.eq(accumulate.result)

        element0 = Signal(LANE_BITS)
        for k, size in enumerate(ELEMENT_SIZES):
            with m.If(fmt.size[k]):
                m.d.comb += element0.eq((1 << (8 * size)) - 1)
        m.d.comb += self.o.payload.eq(_from_key(m, "value", fmt, acc) & element0)
        return m
