"""Reductions: the max across a beat's lanes, inside a lane, and over whole runs of beats.

Stream components, each usable on its own, and the ReduceMax unit built from them:

* :class:`BeatKeys` -- a beat's lanes to order keys, its padding bytes to key 0.
* :class:`ReductionTree` -- element-wise max across the ``lanes`` lanes of a beat: a binary tree
  of two-stage :class:`~maxaccel.hdl.lane.KeyMax`.
* :class:`LaneFold` -- max of the elements *inside* one lane (8, 4, 2 or 1 of them, by dtype).
* :class:`RunAccumulator` -- max over each run of lanes, one lane per cycle, through a two-cycle
  loop that interleaves two partial maxima.
* :class:`RunReducer` -- ReduceMax (or, with its ``minimum`` select, ReduceMin) over runs
  (rows) of any length, one result per run:
  ``BeatKeys -> ReductionTree -> LaneFold -> RunAccumulator -> FromKey``, pipelined for Fmax
  (``pipeline="deep"``) or, for slow clocks on small devices, the same stages with only two
  registers, the keys and one accumulator (``pipeline="shallow"``, latency 2).

The comparisons run in *key space* (:mod:`maxaccel.hdl.lane`): values are mapped to order keys
once on entry (:class:`~maxaccel.hdl.lane.ToKey`, every NaN gets the canonical NaN's key, the
greatest) and back once on exit (:class:`~maxaccel.hdl.lane.FromKey`), so each comparison in
between is eight byte compares, a three-level butterfly and a 2:1 select, split over two
register stages (``KeyMax(latency=2)``). No path between two registers holds more than about
four LUT levels and an 8-bit carry chain: see ``docs/resources.md`` for Fmax.

Every component follows the same stall discipline: a pipeline advances when its output register
is empty or being taken (``advance = ~o.valid | o.ready``); ``i.ready`` is ``advance``, so
``ready`` never depends on ``valid``, and with ``o.ready`` held high one beat is accepted every
cycle. :class:`RunReducer` builds the stages of the others into one pipeline with one such
``advance``. See ``docs/architecture.md``, "Reduction tree and run reducer".
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import DType

from .beat import beat_layout
from .kit import (Checked, Stall, Unit, UnitSignature, accumulate_runs, byte, check_dtype,
                  check_lanes, decode_format, delay, from_key, key_max, register, stall_control,
                  to_keys)
from .lane import ELEMENT_SIZES, LANE_BITS, LANE_BYTES, key_compare_level, spans_at_least

__all__ = ["BeatKeys", "ReductionTree", "LaneFold", "RunAccumulator", "RunReducer",
           "FRAMING", "PIPELINES", "tree_layout", "lane_layout"]

#: The pipelines :class:`RunReducer` can be built with (see its ``pipeline`` parameter).
PIPELINES = ("deep", "shallow")

#: Tag of a beat's row framing, carried alongside its keys.
FRAMING = data.StructLayout({"first": 1, "last": 1})


def tree_layout(lanes, tag_shape=0):
    """Payload of :class:`ReductionTree`'s input: ``data`` (``lanes`` x 64 bits) and ``tag``."""
    return data.StructLayout({"data": data.ArrayLayout(LANE_BITS, lanes), "tag": tag_shape})


def lane_layout(tag_shape=0):
    """Payload of a one-lane stream: ``data`` (64 bits) and ``tag``."""
    return data.StructLayout({"data": LANE_BITS, "tag": tag_shape})


def _tree_stages(m, advance, fmt, level, registered=True, tags=None):
    """The levels of :class:`ReductionTree`: ``lanes`` key lanes to one, 2 cycles a level
    (combinational if not ``registered``).

    With ``tags`` (a list of 8 byte tags per lane), returns ``(lane, tags)``: each byte's tag
    followed by the bits of the lane its element came from, level 0's lowest. On equal keys
    the lower lane wins (:class:`~maxaccel.hdl.lane.KeyMax` keeps ``a``)."""
    tagged = tags is not None
    if not tagged:
        tags = [None] * len(level)
    for depth in range((len(level) - 1).bit_length()):
        merged = []
        for pair in range(len(level) // 2):
            a, b = 2 * pair, 2 * pair + 1
            # The lower lane is a, so its new tag bit is 0.
            pair_tags = ([Cat(t, Const(0, 1)) for t in tags[a]],
                         [Cat(t, Const(1, 1)) for t in tags[b]]) if tagged else None
            result = key_max(m, f"max_{depth}_{pair}", advance, fmt.size, level[a], level[b],
                             registered, tags=pair_tags)
            merged.append(result if tagged else (result, None))
        level, tags = [lane for lane, _ in merged], [lane_tags for _, lane_tags in merged]
    return (level[0], tags[0]) if tagged else level[0]


def _fold_stages(m, advance, fmt, lane, registered=True, tags=None):
    """The stages of :class:`LaneFold` (:attr:`LaneFold.FOLD_LATENCY` cycles; combinational
    if not ``registered``).

    With ``tags`` (a list of 8 byte tags, positions), returns ``(lane, tag)``: the tag of the
    byte element 0 came from. On equal keys the lower tag wins: the halves a stage compares
    are not in position order once a tree has picked each element slot from any lane."""
    at_least = spans_at_least(fmt.size)
    for index, (width, cycles) in enumerate(LaneFold.STAGES):
        flags = ([byte(lane, i) >= byte(lane, i + width) for i in range(width)],
                 [byte(lane, i) == byte(lane, i + width) for i in range(width)])
        levels = list(range(1, width.bit_length()))
        if tags is not None:
            upper_earlier = Cat(tags[i + width] < tags[i] for i in range(width))
        if cycles == 2 and registered:
            flags = key_compare_level(flags, levels.pop(0), at_least[1])
            lane = register(m, advance, lane, f"fold_{index}_lane")
            flags = (list(register(m, advance, Cat(flags[0]), f"fold_{index}_ge")),
                     list(register(m, advance, Cat(flags[1]), f"fold_{index}_eq")))
            if tags is not None:
                tags = [register(m, advance, tag, f"fold_{index}_held_tag_{i}")
                        for i, tag in enumerate(tags[:2 * width])]
                upper_earlier = register(m, advance, upper_earlier, f"fold_{index}_earlier")
        for level in levels:
            flags = key_compare_level(flags, level, at_least[level])
        folds = ~at_least[width.bit_length()]   # elements of at most `width` bytes
        # A signal even when combinational: later stages then refer to it instead of copying
        # the expression into every use (which made the simulator compile the shallow
        # pipeline six times slower).
        folded = Signal(LANE_BITS, name=f"fold_{index}_result", reset_less=True)
        stage = m.d.sync if registered else m.d.comb
        if tags is not None:
            folded_tags = [Signal(len(Value.cast(tags[i])), name=f"fold_{index}_tag_{i}",
                                  reset_less=True) for i in range(width)]
        with m.If(advance if registered else 1):
            stage += folded.eq(lane)
            for i in range(width):
                with m.If(folds & ~flags[0][i]):
                    stage += byte(folded, i).eq(byte(lane, i + width))
            if tags is not None:
                for i in range(width):
                    upper = ~flags[0][i] | (flags[1][i] & upper_earlier[i])
                    stage += folded_tags[i].eq(Mux(folds & upper, tags[i + width], tags[i]))
        lane = folded
        if tags is not None:
            tags = folded_tags
    return lane if tags is None else (lane, tags[0])


class BeatKeys(Checked, wiring.Component):
    """The lanes of each beat as order keys, padding bytes as key 0.

    Each lane goes through :class:`~maxaccel.hdl.lane.ToKey` in two register stages (the NaN
    tests, then the key). Bytes ``nbytes`` and up of a beat carry no element (see
    :func:`~maxaccel.hdl.beat.beat_layout`); they get key 0, below every value's key, so
    padding never wins a max (an all-padding result, an empty run, is raised to the least key
    by :class:`RunAccumulator`).

    Parameters
    ----------
    lanes : int
        Lanes per beat, a power of two (``ValueError`` otherwise).

    Ports
    -----
    i : In(stream.Signature(beat_layout(lanes)))
        Beats; ``nbytes`` is a multiple of the element size.
    o : Out(stream.Signature(tree_layout(lanes, FRAMING)))
        ``data``: the beat's lanes as keys, padding bytes 0; ``tag``: its ``first`` and
        ``last``.
    dtype : In(DType)
        Element type; valid with the first beat and constant while beats are in the unit.

    Latency and throughput
    ----------------------
    :attr:`LATENCY` ``= 2`` cycles; one beat per cycle whenever ``o.ready`` is high.
    """

    LATENCY = 2

    @classmethod
    def check_parameters(cls, lanes):
        check_lanes(lanes, "BeatKeys")

    def __init__(self, lanes):
        self.lanes = lanes
        super().__init__({
            "i": In(stream.Signature(beat_layout(lanes))),
            "o": Out(stream.Signature(tree_layout(lanes, FRAMING))),
            "dtype": In(DType),
        })

    def elaborate(self, platform):
        m = Module()
        fmt = decode_format(m, self.dtype)
        advance = stall_control(m, self)
        beat = self.i.payload
        filled = [Cat(beat.nbytes > LANE_BYTES * j + b for b in range(LANE_BYTES))
                  for j in range(self.lanes)]
        keys = to_keys(m, advance, fmt, list(beat.data), filled)
        valid, tag = delay(m, "keys", advance, self.i.valid,
                            Cat(beat.first, beat.last), FRAMING, self.LATENCY)
        m.d.comb += [self.o.valid.eq(valid), self.o.payload.tag.eq(tag)]
        for j, key in enumerate(keys):
            m.d.comb += self.o.payload.data[j].eq(key)
        return m


class ReductionTree(Checked, wiring.Component):
    """Element-wise maximum across the lanes of each beat.

    A binary tree of two-stage :class:`~maxaccel.hdl.lane.KeyMax` (``latency=2``): level ``k``
    takes the max of pairs of level ``k-1``'s results, so ``log2(lanes)`` levels reduce
    ``lanes`` lanes to one. NaN wins from any lane (the result is the canonical quiet NaN) and
    ``+0`` beats ``-0`` whichever lanes they come from. The tag travels with its beat untouched,
    so a caller can carry ``first``/``last``/``nbytes`` or anything else alongside.

    Parameters
    ----------
    lanes : int
        Lanes per input beat, a power of two (``ValueError`` otherwise).
    tag_shape : shape-like
        Shape of the opaque tag carried alongside each beat (default: none, 0 bits).
    keys : bool
        ``False`` (default): ``data`` in and out are values; the tree converts them to order
        keys in two register stages at its input and back after its last register
        (:class:`~maxaccel.hdl.lane.FromKey`, combinational). ``True``: ``data`` in and out are
        order keys (see :class:`~maxaccel.hdl.lane.ToKey`).

    Ports
    -----
    i : In(stream.Signature(tree_layout(lanes, tag_shape)))
        ``data``: ``lanes`` 64-bit lanes, elements packed little-endian; ``tag``.
    o : Out(stream.Signature(lane_layout(tag_shape)))
        ``data``: one lane, element ``j`` the max over the lanes of their element ``j``;
        ``tag``: the beat's tag.
    dtype : In(DType)
        Element type, constant while beats are in the tree (static during a command); valid
        with the first beat, or with ``keys=True`` one cycle before it (the compares use the
        registered decode, which keeps the decode off their paths; behind a key conversion
        that holds by construction).

    Latency and throughput
    ----------------------
    :attr:`latency` ``= 2 * log2(lanes)`` cycles from a beat accepted to its result valid, plus
    2 with ``keys=False``; one beat per cycle whenever ``o.ready`` is high. ``o.valid &
    ~o.ready`` stalls every stage. With ``lanes == 1`` and ``keys=True`` there is no register:
    ``o`` is ``i``, ``i.ready = o.ready``.
    """

    @classmethod
    def check_parameters(cls, lanes, tag_shape=0, *, keys=False):
        check_lanes(lanes, "ReductionTree")

    def __init__(self, lanes, tag_shape=0, *, keys=False):
        self.lanes = lanes
        self.tag_shape = tag_shape
        self.keys = keys
        self.levels = lanes.bit_length() - 1
        self.latency = 2 * self.levels + (0 if keys else BeatKeys.LATENCY)
        super().__init__({
            "i": In(stream.Signature(tree_layout(lanes, tag_shape))),
            "o": Out(stream.Signature(lane_layout(tag_shape))),
            "dtype": In(DType),
        })

    def elaborate(self, platform):
        m = Module()
        format_registered = decode_format(m, self.dtype)
        level = list(self.i.payload.data)
        valid, tag = self.i.valid, self.i.payload.tag

        if self.latency == 0:
            m.d.comb += self.i.ready.eq(self.o.ready)
        else:
            advance = stall_control(m, self)
            if not self.keys:
                level = to_keys(m, advance, format_registered, level)
                valid, tag = delay(m, "keys", advance, valid, tag, self.tag_shape,
                                    BeatKeys.LATENCY)
            level = [_tree_stages(m, advance, format_registered, level)]
            valid, tag = delay(m, "tree", advance, valid, tag, self.tag_shape, 2 * self.levels)

        result = level[0] if self.keys else from_key(m, "value", format_registered, level[0])
        m.d.comb += [
            self.o.valid.eq(valid),
            self.o.payload.data.eq(result),
            self.o.payload.tag.eq(tag),
        ]
        return m


class LaneFold(wiring.Component):
    """Maximum of the elements inside one lane, for the run-time dtype.

    Three stages fold the lane in halves, in keys: bytes ``0..3`` against ``4..7``, then
    ``0..1`` against ``2..3``, then byte 0 against byte 1. A stage of width ``w`` bytes compares
    only those ``w`` byte pairs (byte compares and the butterfly of
    :class:`~maxaccel.hdl.lane.KeyMax`, for elements up to ``w`` bytes) and takes the larger
    element into bytes ``0..w-1``; it folds only where elements are at most ``w`` bytes wide
    and otherwise passes the lane on. Element 0 of the output (its low ``element size`` bytes)
    is the max of all the input lane's elements; a NaN result is the canonical quiet NaN.

    The **upper bytes of the output are don't-care**; mask them if they matter.

    Parameters
    ----------
    tag_shape : shape-like
        Shape of an opaque tag carried alongside each lane (default: none, 0 bits).
    keys : bool
        ``False`` (default): ``data`` in and out are values (converted to keys in two register
        stages at the input and back, combinationally, at the output). ``True``: order keys in
        and out.

    Ports
    -----
    i : In(stream.Signature(lane_layout(tag_shape)))
        ``data``: one lane, elements packed little-endian; ``tag``.
    o : Out(stream.Signature(lane_layout(tag_shape)))
        ``data``: element 0 is the max of the input lane's elements, the rest don't-care;
        ``tag``: the input's tag.
    dtype : In(DType)
        Element type, constant while lanes are in the fold; valid with the first lane, or with
        ``keys=True`` one cycle before it (as for :class:`ReductionTree`).

    Latency and throughput
    ----------------------
    :attr:`latency` ``= 5`` cycles for every dtype (``7`` with ``keys=False``): two for each
    of the 4- and 2-byte stages (compares and the first butterfly level, then the rest and the
    select), one for the last; one lane per cycle whenever ``o.ready`` is high.
    """

    #: The stages: (width in bytes, cycles).
    STAGES = ((4, 2), (2, 2), (1, 1))
    #: Cycles of the fold proper (the latency with ``keys=True``).
    FOLD_LATENCY = sum(cycles for _, cycles in STAGES)

    def __init__(self, tag_shape=0, *, keys=False):
        self.tag_shape = tag_shape
        self.keys = keys
        self.latency = self.FOLD_LATENCY + (0 if keys else BeatKeys.LATENCY)
        super().__init__({
            "i": In(stream.Signature(lane_layout(tag_shape))),
            "o": Out(stream.Signature(lane_layout(tag_shape))),
            "dtype": In(DType),
        })

    def elaborate(self, platform):
        m = Module()
        fmt = decode_format(m, self.dtype)
        advance = stall_control(m, self)

        lane, valid, tag = self.i.payload.data, self.i.valid, self.i.payload.tag
        if not self.keys:
            lane, = to_keys(m, advance, fmt, [lane])
            valid, tag = delay(m, "keys", advance, valid, tag, self.tag_shape, BeatKeys.LATENCY)
        lane = _fold_stages(m, advance, fmt, lane)
        valid, tag = delay(m, "fold", advance, valid, tag, self.tag_shape, self.FOLD_LATENCY)
        if not self.keys:
            lane = from_key(m, "value", fmt, lane)

        m.d.comb += [
            self.o.valid.eq(valid),
            self.o.payload.data.eq(lane),
            self.o.payload.tag.eq(tag),
        ]
        return m


class RunAccumulator(wiring.Component):
    """Maximum of the key lanes of each run, one lane per cycle, for runs of any length.

    A run is the lanes from one with ``first`` to the next with ``last`` (both on a one-lane
    run); the unit emits the element-wise maximum key of each run, and at least the least key
    of the format (that of ``-inf``, of the integer minimum or of ``False``), so that a run of
    padding only (key 0, see :class:`~maxaccel.hdl.lane.ToKey`) yields the empty-set value.

    A single accumulator register would have to close compare and select in one cycle. Here the
    maximum goes round a two-cycle loop instead, a :class:`~maxaccel.hdl.lane.KeyMax` with
    ``latency=2`` fed back on itself, so two partial maxima circulate, one in each stage, and
    each incoming lane joins the one at the loop's head::

        loop <- max(head, lane)     the head belongs to the lane's run
                lane                otherwise (KeyMax.take_b: a new partial)

    The loop steps only when a lane comes, or while a finished run is leaving it, so a partial
    waits at the head across gaps. Each partial carries a ``live`` bit (it belongs to the run in
    progress) and a ``final`` bit (the run's last lane went into it). In the step after a run's
    last lane the other partial is at the head; it is saved if it is live, else the least key is.
    In the next step the final partial reaches the head and a second two-stage KeyMax, outside
    the loop, takes ``max(final, saved)``: the run's maximum. A run may
    start in any cycle, the one right after another's last lane included.

    Which partial a lane joins is decided a cycle ahead (``head_joins``) and applied by
    resetting the loop KeyMax's registered verdicts (``take_b``), so the loop's paths are those
    of a KeyMax alone.

    Ports
    -----
    i : In(stream.Signature(lane_layout(FRAMING)))
        ``data``: a lane of keys; ``tag``: ``first`` and ``last`` of its run. (Only ``last`` is
        used: a run starts after the previous one's last lane.)
    o : Out(stream.Signature(64))
        One lane of keys per run, the element-wise maximum of its lanes.
    dtype : In(DType)
        Element type; valid one cycle before the first lane (the compares use the registered
        decode) and constant while lanes are in the unit.

    Latency and throughput
    ----------------------
    :attr:`LATENCY` ``= 4`` cycles from a run's last lane accepted to its result valid; one lane
    per cycle whenever ``o.ready`` is high, whatever the run lengths and the gaps between lanes.
    ``o.valid & ~o.ready`` stalls everything, the loop included.
    """

    LATENCY = 4

    def __init__(self):
        super().__init__({
            "i": In(stream.Signature(lane_layout(FRAMING))),
            "o": Out(stream.Signature(LANE_BITS)),
            "dtype": In(DType),
        })

    def elaborate(self, platform):
        m = Module()
        fmt = decode_format(m, self.dtype)
        advance = stall_control(m, self)
        (result,), result_valid = accumulate_runs(m, advance, fmt, [self.i.payload.data],
                                              self.i.valid, self.i.payload.tag.last)
        m.d.comb += self.o.valid.eq(result_valid)
        m.d.comb += self.o.payload.eq(result)
        return m


class RunReducer(Unit):
    """ReduceMax (or ReduceMin) over runs of beats: one result per run, whatever the run
    lengths.

    Each row of the input stream (``first`` .. ``last``, see
    :func:`~maxaccel.hdl.beat.beat_layout`) is one reduction run of R >= 0 elements; the unit
    emits their max under the maxaccel order: NaN absorbing (the canonical quiet NaN comes out),
    ``+0`` over ``-0``, and the empty-set value (``-inf``, the integer minimum, ``False``) for an
    empty run (one beat, ``nbytes == 0``, ``first = last = 1``). Runs may be of any length and
    number; the unit looks at nothing but ``first``, ``last`` and ``nbytes``.

    With ``minimum`` set it emits their min instead (IEEE 754-2019 ``minimum``: NaN absorbing,
    ``-0`` below ``+0``; an empty run gives ``+inf``, the integer maximum, ``True``): the
    select acts where values become keys and keys become values (:class:`~maxaccel.hdl.lane.
    ToKey`, :class:`~maxaccel.hdl.lane.FromKey`, and the accumulator's least key for bool), so
    the tree, the fold and the accumulator are the same, and so are the latency and the
    throughput.

    Both pipelines are the stages of the components of the same names, built by the same
    functions, in one pipeline with a single enable (``advance = ~o.valid | o.ready``, which is
    ``i.ready``); they differ in which stages have registers. ``pipeline="deep"`` (cycles)::

        i -> BeatKeys (2) -> ReductionTree (2 log2 lanes) -> LaneFold (5)
          -> RunAccumulator (4) -> FromKey, mask, register (1) -> o

    Every register-to-register path is at most one half of a :class:`~maxaccel.hdl.lane.KeyMax`
    or of a :class:`~maxaccel.hdl.lane.ToKey`; the run accumulation, which must take a beat per
    cycle whatever the run lengths, goes round a two-cycle loop holding two interleaved partial
    maxima (:class:`RunAccumulator`). For fast clocks: 130 MHz on an iCE40 HX8K at one lane.

    ``pipeline="shallow"``, for slow clocks on small devices (a 12 MHz iCE40)::

        i -> ToKey, register (1) -> tree, fold, max with the run's partial,
          accumulator register (1) -> FromKey, mask -> o

    The same stages with two registers: the keys, and one accumulator that takes the max of
    its partial (the least key for a run's first beat) and the beat's tree and fold, all
    combinational, so a run needs no second partial and no closing compare; ``o`` is the
    accumulator through :class:`~maxaccel.hdl.lane.FromKey` and the element-0 mask. At one lane
    two thirds of the LUT4s and an eighth of the flip-flops of ``"deep"``, for a long path that
    costs Fmax (16.9 MHz on an iCE40 UP5K) and grows with ``lanes`` (``docs/resources.md``).

    GlobalMaxPool of an ``N x C x D1..Dn`` tensor in channel-first order is ``N*C`` runs of
    ``prod(D)`` elements, so it uses this unit directly.

    Parameters
    ----------
    lanes : int
        Lanes per input beat, a power of two (``ValueError`` otherwise).
    pipeline : str
        ``"deep"`` (default) or ``"shallow"`` (:data:`PIPELINES`; ``ValueError`` otherwise).
        The results are the same bits; the latency, the size and the Fmax differ.
    position_bits : int
        Bits of an ``arg`` result, a byte offset in a run (default 32: runs under 4 GiB).
    dtype : DType, optional
        A static element type: no ``dtype`` port, and the logic of the other formats folds
        away (``docs/library.md`` measures it).

    Ports
    -----
    i : In(stream.Signature(beat_layout(lanes)))
        Rows of elements, one row per run.
    o : Out(stream.Signature(64))
        One lane per run: element 0 (the low ``element size`` bytes) is the run's max; the other
        bytes are zero.
    dtype : In(DType)
        Element type; valid with the first beat and constant while runs are in the unit (static
        during a command). Only without the ``dtype`` parameter.
    minimum : In(1)
        0: the maximum of each run; 1: the minimum. Valid and constant as ``dtype``.
    arg : In(1)
        0: each run's extreme value; 1: where it is (ArgMax, with ``minimum`` ArgMin), as
        the byte offset in its run of its first element whose key is the run's extreme (a
        NaN's key is the greatest either way, so the first NaN if there is one), in the low
        ``position_bits`` of ``o`` (runs of at least one element and fewer than
        ``2**position_bits`` bytes). Valid and constant as ``dtype``.

    Latency and throughput
    ----------------------
    :attr:`latency` cycles from the last beat of a run accepted to its result valid:
    ``12 + 2 * log2(lanes)`` for ``"deep"`` (12, 14, 16, 18 for 1, 2, 4, 8 lanes), ``2`` for
    ``"shallow"`` whatever the lanes. Either way one beat per cycle in steady state while
    ``o.ready`` is high, for any mix of run lengths; a run costs
    ``max(1, ceil(R * itemsize / (8 * lanes)))`` beats. While a result waits
    (``o.valid & ~o.ready``) the pipeline behind it stalls. ``arg`` changes neither.

    With ``arg`` each element's byte offset travels with its key (a per-byte tag through the
    tree and the fold: the byte's offset in its lane and the lane's number; then the beat's
    number in its run, counted where beats enter the accumulator), and every compare that
    picks a key picks its tag. Equal keys go to the lower offset: in the tree and the fold
    the lower lane and bytes win a tie, in the accumulator the partial already there, and at
    the close the partial of the lower offset (the two hold alternate beats). Padding, key 0,
    comes after every element of its beat, so it never wins a tie with one.
    """

    class Signature(UnitSignature):
        """:class:`RunReducer`'s signature: ``RunReducer.Signature(lanes, pipeline="deep", *,
        position_bits=32, dtype=None)``, the unit's parameters, each checked
        (``ValueError``); without ``dtype`` a ``dtype`` port. Its :attr:`stall`: ``i.ready``
        is ``~o.valid | o.ready``, combinational."""

        stall = Stall("i", "o", registered=False)

        def __init__(self, lanes, pipeline="deep", *, position_bits=32, dtype=None):
            dtype = self.check_parameters(lanes, pipeline, position_bits=position_bits,
                                          dtype=dtype)
            members = {
                "i": In(stream.Signature(beat_layout(lanes))),
                "o": Out(stream.Signature(LANE_BITS)),
            }
            if dtype is None:
                members["dtype"] = In(DType)
            members.update({"minimum": In(1), "arg": In(1)})
            super().__init__(members, lanes=lanes, pipeline=pipeline,
                             position_bits=position_bits, dtype=dtype)

        @classmethod
        def check_parameters(cls, lanes, pipeline="deep", *, position_bits=32, dtype=None):
            """The static element type (``None`` or a ``DType``); ``ValueError`` for
            ``lanes`` not a power of two, an unknown ``pipeline``, ``position_bits`` too
            narrow to count a beat of ``lanes`` lanes, or an unknown ``dtype``."""
            check_lanes(lanes, "RunReducer")
            if pipeline not in PIPELINES:
                raise ValueError(f"RunReducer: pipeline must be one of {', '.join(PIPELINES)}, "
                                 f"not {pipeline!r}")
            least = (LANE_BYTES * lanes - 1).bit_length() + 1
            if not isinstance(position_bits, int) or isinstance(position_bits, bool) \
                    or position_bits < least:
                raise ValueError(f"RunReducer: position_bits must be an integer >= {least} "
                                 f"(a beat of {lanes} lanes and a beat count), not "
                                 f"{position_bits!r}")
            return check_dtype(dtype, "RunReducer")

    def __init__(self, lanes, pipeline="deep", *, position_bits=32, dtype=None):
        super().__init__(lanes, pipeline, position_bits=position_bits, dtype=dtype)
        # Register stages: key conversion, tree, fold, accumulation, output.
        if pipeline == "deep":
            self._stages = (BeatKeys.LATENCY, 2 * (lanes.bit_length() - 1),
                            LaneFold.FOLD_LATENCY, RunAccumulator.LATENCY, 1)
        else:
            self._stages = (1, 0, 0, 1, 0)
        self.latency = sum(self._stages)

    def elaborate(self, platform):
        m = Module()
        deep = self.pipeline == "deep"
        key_latency, tree_latency, fold_latency, _, output_latency = self._stages
        # "shallow" computes keys in the cycle a beat is accepted: the decode is unregistered
        # so that dtype still only has to be valid with the first beat.
        fmt = decode_format(m, self.dtype, registered=deep)
        # The select goes with the format: registered as its decode is.
        minimum, arg = Signal(), Signal()
        select = m.d.sync if deep else m.d.comb
        select += [minimum.eq(self.minimum), arg.eq(self.arg)]
        # One pipeline, one enable: i.ready depends on o.ready through one gate, not through
        # the handshakes of five chained components.
        advance = Signal()
        m.d.comb += [
            advance.eq(~self.o.valid | self.o.ready),
            self.i.ready.eq(advance),
        ]
        beat = self.i.payload
        filled = [Cat(beat.nbytes > LANE_BYTES * j + b for b in range(LANE_BYTES))
                  for j in range(self.lanes)]
        keys = to_keys(m, advance, fmt, list(beat.data), filled, key_latency, minimum=minimum)
        lane, tags = _tree_stages(m, advance, fmt, keys, deep,
                                  tags=[[Cat()] * LANE_BYTES for _ in keys])
        # A byte's offset in its beat: its offset in the lane, then the lane's number.
        lane, offset = _fold_stages(m, advance, fmt, lane, deep,
                                    tags=[Cat(Const(i, (LANE_BYTES - 1).bit_length()), tag)
                                          for i, tag in enumerate(tags)])
        valid, last = delay(m, "beat", advance, self.i.valid, beat.last, 1,
                             key_latency + tree_latency + fold_latency)
        beat_number = Signal(self.position_bits - len(offset))   # this beat's in its run
        with m.If(advance & valid):
            m.d.sync += beat_number.eq(Mux(last, 0, beat_number + 1))
        (result,), result_valid, position = accumulate_runs(
            m, advance, fmt, [lane], valid, last, deep, minimum, Cat(offset, beat_number))

        element0 = Signal(LANE_BITS)
        for k, size in enumerate(ELEMENT_SIZES):
            with m.If(fmt.size[k]):
                m.d.comb += element0.eq((1 << (8 * size)) - 1)
        value = from_key(m, "value", fmt, result, minimum)
        output = m.d.sync if output_latency else m.d.comb
        with m.If(advance if output_latency else 1):
            output += [
                self.o.valid.eq(result_valid),
                self.o.payload.eq(Mux(arg, position, value & element0)),
            ]
        return m
