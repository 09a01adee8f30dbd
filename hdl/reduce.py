"""Reductions: the max across a beat's lanes, inside a lane, and over whole runs of beats.

Stream components, each usable on its own, and the ReduceMax unit built from them:

* :class:`BeatKeys` -- a beat's lanes to order keys, its padding bytes to key 0.
* :class:`ReductionTree` -- element-wise max across the ``lanes`` lanes of a beat: a binary tree
  of two-stage :class:`~maxaccel.hdl.lane.KeyMax`.
* :class:`LaneFold` -- max of the elements *inside* one lane (8, 4, 2 or 1 of them, by dtype).
* :class:`RunAccumulator` -- max over each run of lanes, one lane per cycle, through a two-cycle
  loop that interleaves two partial maxima.
* :class:`RunReducer` -- ReduceMax over runs (rows) of any length, one result per run:
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

from amaranth.hdl import Cat, EnableInserter, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from maxaccel.host.dtypes import DType

from .beat import beat_layout
from .lane import (ELEMENT_SIZES, FLOAT_FORMATS, LANE_BITS, LANE_BYTES, FromKey, KeyMax,
                   LaneDecode, LaneFormat, ToKey, float_key, key_compare_level, splat_constant)

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


def _check_lanes(unit, lanes):
    if not isinstance(lanes, int) or isinstance(lanes, bool) or lanes < 1 or lanes & (lanes - 1):
        # A unit that failed to construct must not also warn that it was never elaborated.
        unit._MustUse__silence = True
        raise ValueError(f"{type(unit).__name__}: lanes must be a power of two (1, 2, 4, 8, "
                         f"...), not {lanes!r}")


def _decode(m, dtype, registered=True):
    """The format of ``dtype``, registered (one cycle after ``dtype``) unless ``registered`` is
    false.

    In a pipelined unit every stage that needs the format runs at least one cycle after its
    beat was accepted (the key conversion's NaN tests need none), so ``dtype`` only has to be
    valid with the first beat, and the decode is never on a datapath timing path (``dtype`` is
    static during a command, so the register agrees with it whenever a beat is there). A
    unit that converts keys combinationally in the cycle a beat is accepted needs the decode
    unregistered for ``dtype`` to keep that contract.
    """
    m.submodules.decode = decode = LaneDecode()
    m.d.comb += decode.dtype.eq(dtype)
    if not registered:
        return decode.format
    format_registered = Signal(LaneFormat, name="registered")
    m.d.sync += format_registered.eq(decode.format)
    return format_registered


def _stall_control(m, unit):
    """``advance = ~o.valid | o.ready``, driving ``i.ready``; returns ``advance``."""
    advance = Signal()
    m.d.comb += [
        advance.eq(~unit.o.valid | unit.o.ready),
        unit.i.ready.eq(advance),
    ]
    return advance


def _register(m, enable, value, name):
    """``value`` in a register named ``name`` that loads with ``enable``."""
    value = Value.cast(value)
    held = Signal(len(value), name=name, reset_less=True)
    with m.If(enable):
        m.d.sync += held.eq(value)
    return held


def _key_max(m, name, enable, size, a, b, registered=True, take_b=None):
    """A two-stage :class:`KeyMax` of ``a`` and ``b`` that advances only with ``enable``
    (combinational, ``latency=0``, if not ``registered``); the result is ``b`` where
    ``take_b`` (if given) is set with the operands."""
    key_max = KeyMax(latency=2 if registered else 0)
    m.submodules[name] = EnableInserter(enable)(key_max) if registered else key_max
    m.d.comb += [key_max.size.eq(size), key_max.a.eq(a), key_max.b.eq(b)]
    if take_b is not None:
        m.d.comb += key_max.take_b.eq(take_b)
    return key_max.result


def _delay(m, name, enable, valid, tag, tag_shape, cycles):
    """``valid`` and ``tag`` delayed by ``cycles`` registers that advance with ``enable``."""
    for cycle in range(cycles):
        next_valid = Signal(name=f"{name}_valid_{cycle}")
        next_tag = Signal(tag_shape, name=f"{name}_tag_{cycle}")
        with m.If(enable):
            m.d.sync += [next_valid.eq(valid), next_tag.eq(tag)]
        valid, tag = next_valid, next_tag
    return valid, tag


def _to_keys(m, enable, fmt, values, filled=None, latency=2, name="key"):
    """:class:`ToKey` of each lane of ``values`` in ``latency`` register stages.

    ``latency=2``: the NaN tests, then the key; ``fmt`` is the registered decode (of
    :func:`_decode`), read in the second cycle. ``latency=1``: the key is computed in the
    cycle ``values`` come and registered; ``fmt`` (the unregistered decode) is read in that
    cycle. The registers advance with ``enable``; ``filled`` (a byte mask per lane) marks the
    bytes that hold elements, the others get key 0. The submodules and key registers are
    named ``{name}_{lane}``. ``fmt`` may also be a list, a format per lane: copies of the
    format in distinct registers, to split its fanout over many lanes.
    """
    keys = []
    formats = fmt if isinstance(fmt, list) else [fmt] * len(values)
    for j, value in enumerate(values):
        to_key = ToKey(latency=latency - 1)
        m.submodules[f"{name}_{j}"] = EnableInserter(enable)(to_key)
        m.d.comb += [to_key.format.eq(formats[j]), to_key.value.eq(value)]
        if filled is not None:
            m.d.comb += to_key.filled.eq(filled[j])
        keys.append(_register(m, enable, to_key.key, f"{name}_{j}"))
    return keys


def _byte(value, i):
    return value[8 * i:8 * i + 8]


def _lane(value, j):
    """Lane ``j`` (64 bits) of a beat-wide value."""
    return value[LANE_BITS * j:LANE_BITS * (j + 1)]


def _from_key(m, name, fmt, key):
    from_key = m.submodules[name] = FromKey()
    m.d.comb += [from_key.format.eq(fmt), from_key.key.eq(key)]
    return from_key.value


def _tree_stages(m, advance, fmt, level, registered=True):
    """The levels of :class:`ReductionTree`: ``lanes`` key lanes to one, 2 cycles a level
    (combinational if not ``registered``)."""
    for depth in range((len(level) - 1).bit_length()):
        level = [_key_max(m, f"max_{depth}_{pair}", advance, fmt.size,
                          level[2 * pair], level[2 * pair + 1], registered)
                 for pair in range(len(level) // 2)]
    return level[0]


def _fold_stages(m, advance, fmt, lane, registered=True):
    """The stages of :class:`LaneFold` (:attr:`LaneFold.FOLD_LATENCY` cycles; combinational
    if not ``registered``)."""
    at_least = Cat(fmt.size[k:].any() for k in range(len(ELEMENT_SIZES)))
    for index, (width, cycles) in enumerate(LaneFold.STAGES):
        flags = ([_byte(lane, i) >= _byte(lane, i + width) for i in range(width)],
                 [_byte(lane, i) == _byte(lane, i + width) for i in range(width)])
        levels = list(range(1, width.bit_length()))
        if cycles == 2 and registered:
            flags = key_compare_level(flags, levels.pop(0), at_least[1])
            lane = _register(m, advance, lane, f"fold_{index}_lane")
            flags = (list(_register(m, advance, Cat(flags[0]), f"fold_{index}_ge")),
                     list(_register(m, advance, Cat(flags[1]), f"fold_{index}_eq")))
        for level in levels:
            flags = key_compare_level(flags, level, at_least[level])
        folds = ~at_least[width.bit_length()]   # elements of at most `width` bytes
        # A signal even when combinational: later stages then refer to it instead of copying
        # the expression into every use (which made the simulator compile the shallow
        # pipeline six times slower).
        folded = Signal(LANE_BITS, name=f"fold_{index}_result", reset_less=True)
        stage = m.d.sync if registered else m.d.comb
        with m.If(advance if registered else 1):
            stage += folded.eq(lane)
            for i in range(width):
                with m.If(folds & ~flags[0][i]):
                    stage += _byte(folded, i).eq(_byte(lane, i + width))
        lane = folded
    return lane


def _accumulate(m, advance, fmt, lanes, valid, last, registered=True):
    """The loop and close of :class:`RunAccumulator` for each key lane of ``lanes`` (a list);
    returns (list of result keys, result valid).

    The lanes advance together: one set of control registers (the partials' tags, ``step``),
    one loop :class:`KeyMax` and one close :class:`KeyMax` per lane.

    Not ``registered``: one accumulator register per lane instead, loaded with ``max(partial,
    lane)`` (``max(least key, lane)`` for a run's first lane) through a combinational compare;
    it holds the run's result in the cycle after its last lane (latency 1, not 4).
    """
    least_key = Signal(LANE_BITS)
    for index, spec in enumerate(FLOAT_FORMATS):
        with m.If(fmt.float_format[index]):
            m.d.comb += least_key.eq(splat_constant(float_key(spec, spec.lowest), spec.bits))

    def name(base, j):
        return base if len(lanes) == 1 else f"{base}_{j}"

    if not registered:
        live = Signal()                          # the accumulator holds a partial of this run
        step = Signal()
        m.d.comb += step.eq(advance & valid)
        results = []
        for j, lane in enumerate(lanes):
            loop = KeyMax(latency=1)
            m.submodules[name("loop", j)] = EnableInserter(step)(loop)
            m.d.comb += [loop.size.eq(fmt.size), loop.a.eq(Mux(live, loop.result, least_key)),
                         loop.b.eq(lane)]
            results.append(loop.result)
        result_valid = Signal()
        with m.If(step):
            m.d.sync += live.eq(~last)
        with m.If(advance):
            m.d.sync += result_valid.eq(valid & last)
        return results, result_valid

    ends = valid & last
    fed_live, fed_final = Signal(), Signal()     # tags of the partial in the first stage
    head_live, head_final = Signal(), Signal()   # tags of the partial at the head
    head_joins = Signal()                        # a lane now joins the head's partial
    step = Signal()
    m.d.comb += step.eq(advance & (valid | fed_final | head_final))
    with m.If(step):
        m.d.sync += [
            fed_live.eq(valid & ~ends),
            fed_final.eq(ends),
            head_live.eq(fed_live),
            head_final.eq(fed_final),
            head_joins.eq(fed_live & ~ends),
        ]

    results = []
    for j, lane in enumerate(lanes):
        # The other partial, or the least key.
        saved = Signal(LANE_BITS, name=name("saved", j), reset_less=True)
        loop = KeyMax(latency=2)
        m.submodules[name("loop", j)] = EnableInserter(step)(loop)
        head = loop.result
        m.d.comb += [loop.size.eq(fmt.size), loop.a.eq(head), loop.b.eq(lane),
                     loop.take_b.eq(~head_joins)]
        # When the previous step took a run's last lane (``fed_final``, which makes this cycle
        # a step whenever it advances).
        with m.If(advance & fed_final):
            m.d.sync += saved.eq(Mux(head_live, head, least_key))
        results.append(_key_max(m, name("close", j), advance, fmt.size, head, saved))
    closing, result_valid = Signal(), Signal()
    with m.If(advance):
        m.d.sync += [closing.eq(head_final), result_valid.eq(closing)]
    return results, result_valid


class BeatKeys(wiring.Component):
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

    def __init__(self, lanes):
        _check_lanes(self, lanes)
        self.lanes = lanes
        super().__init__({
            "i": In(stream.Signature(beat_layout(lanes))),
            "o": Out(stream.Signature(tree_layout(lanes, FRAMING))),
            "dtype": In(DType),
        })

    def elaborate(self, platform):
        m = Module()
        fmt = _decode(m, self.dtype)
        advance = _stall_control(m, self)
        beat = self.i.payload
        filled = [Cat(beat.nbytes > LANE_BYTES * j + b for b in range(LANE_BYTES))
                  for j in range(self.lanes)]
        keys = _to_keys(m, advance, fmt, list(beat.data), filled)
        valid, tag = _delay(m, "keys", advance, self.i.valid,
                            Cat(beat.first, beat.last), FRAMING, self.LATENCY)
        m.d.comb += [self.o.valid.eq(valid), self.o.payload.tag.eq(tag)]
        for j, key in enumerate(keys):
            m.d.comb += self.o.payload.data[j].eq(key)
        return m


class ReductionTree(wiring.Component):
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

    def __init__(self, lanes, tag_shape=0, *, keys=False):
        _check_lanes(self, lanes)
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
        format_registered = _decode(m, self.dtype)
        level = list(self.i.payload.data)
        valid, tag = self.i.valid, self.i.payload.tag

        if self.latency == 0:
            m.d.comb += self.i.ready.eq(self.o.ready)
        else:
            advance = _stall_control(m, self)
            if not self.keys:
                level = _to_keys(m, advance, format_registered, level)
                valid, tag = _delay(m, "keys", advance, valid, tag, self.tag_shape,
                                    BeatKeys.LATENCY)
            level = [_tree_stages(m, advance, format_registered, level)]
            valid, tag = _delay(m, "tree", advance, valid, tag, self.tag_shape, 2 * self.levels)

        result = level[0] if self.keys else _from_key(m, "value", format_registered, level[0])
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
        fmt = _decode(m, self.dtype)
        advance = _stall_control(m, self)

        lane, valid, tag = self.i.payload.data, self.i.valid, self.i.payload.tag
        if not self.keys:
            lane, = _to_keys(m, advance, fmt, [lane])
            valid, tag = _delay(m, "keys", advance, valid, tag, self.tag_shape, BeatKeys.LATENCY)
        lane = _fold_stages(m, advance, fmt, lane)
        valid, tag = _delay(m, "fold", advance, valid, tag, self.tag_shape, self.FOLD_LATENCY)
        if not self.keys:
            lane = _from_key(m, "value", fmt, lane)

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
        fmt = _decode(m, self.dtype)
        advance = _stall_control(m, self)
        (result,), result_valid = _accumulate(m, advance, fmt, [self.i.payload.data],
                                              self.i.valid, self.i.payload.tag.last)
        m.d.comb += self.o.valid.eq(result_valid)
        m.d.comb += self.o.payload.eq(result)
        return m


class RunReducer(wiring.Component):
    """ReduceMax over runs of beats: one result per run, whatever the run lengths.

    Each row of the input stream (``first`` .. ``last``, see
    :func:`~maxaccel.hdl.beat.beat_layout`) is one reduction run of R >= 0 elements; the unit
    emits their max under the maxaccel order: NaN absorbing (the canonical quiet NaN comes out),
    ``+0`` over ``-0``, and the empty-set value (``-inf``, the integer minimum, ``False``) for an
    empty run (one beat, ``nbytes == 0``, ``first = last = 1``). Runs may be of any length and
    number; the unit looks at nothing but ``first``, ``last`` and ``nbytes``.

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
    :attr:`latency` cycles from the last beat of a run accepted to its result valid:
    ``12 + 2 * log2(lanes)`` for ``"deep"`` (12, 14, 16, 18 for 1, 2, 4, 8 lanes), ``2`` for
    ``"shallow"`` whatever the lanes. Either way one beat per cycle in steady state while
    ``o.ready`` is high, for any mix of run lengths; a run costs
    ``max(1, ceil(R * itemsize / (8 * lanes)))`` beats. While a result waits
    (``o.valid & ~o.ready``) the pipeline behind it stalls.
    """

    def __init__(self, lanes, pipeline="deep"):
        _check_lanes(self, lanes)
        if pipeline not in PIPELINES:
            self._MustUse__silence = True
            raise ValueError(f"RunReducer: pipeline must be one of {', '.join(PIPELINES)}, "
                             f"not {pipeline!r}")
        self.lanes = lanes
        self.pipeline = pipeline
        # Register stages: key conversion, tree, fold, accumulation, output.
        if pipeline == "deep":
            self._stages = (BeatKeys.LATENCY, 2 * (lanes.bit_length() - 1),
                            LaneFold.FOLD_LATENCY, RunAccumulator.LATENCY, 1)
        else:
            self._stages = (1, 0, 0, 1, 0)
        self.latency = sum(self._stages)
        super().__init__({
            "i": In(stream.Signature(beat_layout(lanes))),
            "o": Out(stream.Signature(LANE_BITS)),
            "dtype": In(DType),
        })

    def elaborate(self, platform):
        m = Module()
        deep = self.pipeline == "deep"
        key_latency, tree_latency, fold_latency, _, output_latency = self._stages
        # "shallow" computes keys in the cycle a beat is accepted: the decode is unregistered
        # so that dtype still only has to be valid with the first beat.
        fmt = _decode(m, self.dtype, registered=deep)
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
        keys = _to_keys(m, advance, fmt, list(beat.data), filled, key_latency)
        lane = _fold_stages(m, advance, fmt, _tree_stages(m, advance, fmt, keys, deep), deep)
        valid, last = _delay(m, "beat", advance, self.i.valid, beat.last, 1,
                             key_latency + tree_latency + fold_latency)
        (result,), result_valid = _accumulate(m, advance, fmt, [lane], valid, last, deep)

        element0 = Signal(LANE_BITS)
        for k, size in enumerate(ELEMENT_SIZES):
            with m.If(fmt.size[k]):
                m.d.comb += element0.eq((1 << (8 * size)) - 1)
        value = _from_key(m, "value", fmt, result)
        output = m.d.sync if output_latency else m.d.comb
        with m.If(advance if output_latency else 1):
            output += [
                self.o.valid.eq(result_valid),
                self.o.payload.eq(value & element0),
            ]
        return m
