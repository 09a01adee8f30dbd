"""The pipeline kit: the small pieces every datapath unit is built from.

Functions that add registers, stall control and key-space stages to an Amaranth ``Module``, so
that :mod:`~maxaccel.hdl.reduce`, :mod:`~maxaccel.hdl.pool`, :mod:`~maxaccel.hdl.broadcast`
and any new unit build their pipelines the same way:

* structure: :func:`register`, :func:`delay`, :func:`stall_control`;
* arithmetic: :class:`SaturatingMultiplier` (bit-serial: the command engine's checks of
  lengths, the windowed unit's serial configuration products);
* slicing: :func:`~maxaccel.hdl.lane.byte` (re-exported), :func:`lane_of`;
* key space: :func:`decode_format`, :func:`to_keys`, :func:`key_max`, :func:`from_key`,
  :func:`accumulate_runs` (the two-cycle run accumulator loop);
* construction: :class:`Unit` (a component whose nested ``Signature``, a
  :class:`UnitSignature`, carries and checks its parameters before the unit exists),
  :class:`Checked`, :func:`check_lanes`, :func:`check_dtype`, :func:`set_aside`.

**Stall discipline.** Every unit states how its input stalls behind its output in its
``Signature`` (:class:`Stall`), and ``tests/test_stall.py`` checks each the same way. The
pieces here build the *combinational* one: a pipeline advances when its output register is
empty or being taken (``advance = ~o.valid | o.ready``, :func:`stall_control`), every register
of a stage loads with ``advance``, and ``i.ready`` is ``advance``. Units with block RAM loops
(:class:`~maxaccel.hdl.pool.ChannelsLastPool`, :class:`~maxaccel.hdl.window.WindowMaxPool`)
keep the *registered* one instead: ``i.ready`` is a register and a skid register takes the
beat that finds the output full. See ``docs/library.md``.
"""

from amaranth.hdl import Const, EnableInserter, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import DType

from .unit import Checked, Stall, Unit, UnitSignature, check_dtype, check_lanes, set_aside
from .lane import (FLOAT_FORMATS, LANE_BITS, LANE_BYTES, FromKey, KeyMax, LaneDecode,
                   LaneFormat, ToKey, byte, float_key, lane_format, splat_constant)

__all__ = ["Checked", "UnitSignature", "Unit", "Stall", "set_aside", "check_lanes",
           "check_dtype", "decode_format", "stall_control", "register", "key_max", "delay",
           "to_keys", "byte", "lane_of", "from_key", "accumulate_runs",
           "SaturatingMultiplier"]


def decode_format(m, dtype, registered=True):
    """The format of ``dtype``, registered (one cycle after ``dtype``) unless ``registered`` is
    false; a constant if ``dtype`` is a :class:`~maxaccel.contract.dtypes.DType` (a unit's
    static element type), so the logic of the other formats folds away.

    In a pipelined unit every stage that needs the format runs at least one cycle after its
    beat was accepted (the key conversion's NaN tests need none), so ``dtype`` only has to be
    valid with the first beat, and the decode is never on a datapath timing path (``dtype`` is
    static during a command, so the register agrees with it whenever a beat is there). A
    unit that converts keys combinationally in the cycle a beat is accepted needs the decode
    unregistered for ``dtype`` to keep that contract.
    """
    if isinstance(dtype, DType):
        return lane_format(dtype)       # a static element type: a constant, nothing to decode
    m.submodules.decode = decode = LaneDecode()
    m.d.comb += decode.dtype.eq(dtype)
    if not registered:
        return decode.format
    format_registered = Signal(LaneFormat, name="registered")
    m.d.sync += format_registered.eq(decode.format)
    return format_registered


def stall_control(m, unit):
    """``advance = ~o.valid | o.ready``, driving ``i.ready``; returns ``advance``."""
    advance = Signal()
    m.d.comb += [
        advance.eq(~unit.o.valid | unit.o.ready),
        unit.i.ready.eq(advance),
    ]
    return advance


def at_least(value, limit):
    """``value >= limit`` for an unsigned ``value`` and a constant ``limit``: any of its bits
    above the limit's, or its low bits compared with the limit, a few LUTs where yosys maps a
    compare of every bit to a carry chain. The bits below the limit's lowest set bit do not
    decide and are left out; a limit of all ones below its top bit is an AND of those bits."""
    value = Value.cast(value)
    if limit <= 0:
        return Const(1)
    if limit >= 1 << len(value):
        return Const(0)
    if value.shape().signed:
        return value >= limit
    zeros = (limit & -limit).bit_length() - 1
    value, limit = value[zeros:], limit >> zeros
    low = limit.bit_length()
    if len(value) <= low:
        return value >= limit
    if limit == (1 << low) - 1:
        return value[low:].any() | value[:low].all()
    return value[low:].any() | (value[:low] >= limit)


def register(m, enable, value, name):
    """``value`` in a register named ``name`` that loads with ``enable``."""
    value = Value.cast(value)
    held = Signal(len(value), name=name, reset_less=True)
    with m.If(enable):
        m.d.sync += held.eq(value)
    return held


def key_max(m, name, enable, size, a, b, registered=True, take_b=None, tags=None, tie_b=None):
    """A two-stage :class:`KeyMax` of ``a`` and ``b`` that advances only with ``enable``
    (combinational, ``latency=0``, if not ``registered``); the result is ``b`` where
    ``take_b`` (if given) is set with the operands, and on equal keys where ``tie_b`` is.

    With ``tags``, a pair ``(a_tags, b_tags)`` of lists of 8 equally wide values (a tag per
    byte), returns ``(result, result_tags)``: each byte's tag from the operand that won its
    element. Otherwise returns the result.
    """
    width = len(Value.cast(tags[0][0])) if tags is not None else 0
    key_max = KeyMax(latency=2 if registered else 0, tag_width=width)
    m.submodules[name] = EnableInserter(enable)(key_max) if registered else key_max
    m.d.comb += [key_max.size.eq(size), key_max.a.eq(a), key_max.b.eq(b)]
    if take_b is not None:
        m.d.comb += key_max.take_b.eq(take_b)
    if tie_b is not None:
        m.d.comb += key_max.tie_b.eq(tie_b)
    if tags is None:
        return key_max.result
    for i in range(len(tags[0])):
        m.d.comb += [key_max.a_tags[i].eq(tags[0][i]), key_max.b_tags[i].eq(tags[1][i])]
    return key_max.result, [key_max.result_tags[i] for i in range(len(tags[0]))]


def delay(m, name, enable, valid, tag, tag_shape, cycles):
    """``valid`` and ``tag`` delayed by ``cycles`` registers that advance with ``enable``."""
    for cycle in range(cycles):
        next_valid = Signal(name=f"{name}_valid_{cycle}")
        next_tag = Signal(tag_shape, name=f"{name}_tag_{cycle}")
        with m.If(enable):
            m.d.sync += [next_valid.eq(valid), next_tag.eq(tag)]
        valid, tag = next_valid, next_tag
    return valid, tag


def to_keys(m, enable, fmt, values, filled=None, latency=2, name="key", minimum=None):
    """:class:`ToKey` of each lane of ``values`` in ``latency`` register stages.

    ``latency=2``: the NaN tests, then the key; ``fmt`` is the registered decode (of
    :func:`decode_format`), read in the second cycle. ``latency=1``: the key is computed in the
    cycle ``values`` come and registered; ``fmt`` (the unregistered decode) is read in that
    cycle. The registers advance with ``enable``; ``filled`` (a byte mask per lane) marks the
    bytes that hold elements, the others get key 0. The submodules and key registers are
    named ``{name}_{lane}``. ``fmt`` may also be a list, a format per lane: copies of the
    format in distinct registers, to split its fanout over many lanes. ``minimum`` (if given)
    is :class:`ToKey`'s select, read with ``fmt``.
    """
    keys = []
    formats = fmt if isinstance(fmt, list) else [fmt] * len(values)
    for j, value in enumerate(values):
        to_key = ToKey(latency=latency - 1)
        m.submodules[f"{name}_{j}"] = EnableInserter(enable)(to_key)
        m.d.comb += [to_key.format.eq(formats[j]), to_key.value.eq(value)]
        if minimum is not None:
            m.d.comb += to_key.minimum.eq(minimum)
        if filled is not None:
            m.d.comb += to_key.filled.eq(filled[j])
        keys.append(register(m, enable, to_key.key, f"{name}_{j}"))
    return keys


def lane_of(value, j):
    """Lane ``j`` (64 bits) of a beat-wide value."""
    return value[LANE_BITS * j:LANE_BITS * (j + 1)]


def from_key(m, name, fmt, key, minimum=None):
    """:class:`FromKey` of ``key`` (with the ``minimum`` select, if given)."""
    from_key = m.submodules[name] = FromKey()
    m.d.comb += [from_key.format.eq(fmt), from_key.key.eq(key)]
    if minimum is not None:
        m.d.comb += from_key.minimum.eq(minimum)
    return from_key.value


def accumulate_runs(m, advance, fmt, lanes, valid, last, registered=True, minimum=None,
                    position=None):
    """The loop and close of :class:`RunAccumulator` for each key lane of ``lanes`` (a list);
    returns (list of result keys, result valid).

    With ``position`` (a value that comes with each lane: where its element 0 lies in the
    run, increasing along the run), also returns the position of the first element 0 of the
    run's first lane with the greatest key: (list of result keys, result valid, position).
    A tie goes to the lower position: to the partial already there (it came earlier) and, at
    the close, to the lower of the two partials' positions; the least key of a partial that
    holds nothing never wins one.

    The least key (what an empty run gives) is the key of the empty-set value: that of
    ``-inf``, of the integer minimum or of False, and with ``minimum`` (:class:`ToKey`'s
    select, if given) that of ``+inf``, of the integer maximum or of True -- the same key but
    for bool.

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
    if minimum is not None:
        # A minimum complements keys: the least key is then the complement of the greatest
        # element's, for floats and integers the same as the maximum's (``~key(+inf) ==
        # key(-inf)``, ``~key(max) == 0``), for bool ``~key(True)``.
        with m.If(minimum & fmt.boolean):
            m.d.comb += least_key.eq(splat_constant(0xFE, 8))

    def name(base, j):
        return base if len(lanes) == 1 else f"{base}_{j}"

    width = 0 if position is None else len(Value.cast(position))
    if not registered:
        live = Signal()                          # the accumulator holds a partial of this run
        step = Signal()
        m.d.comb += step.eq(advance & valid)
        results = []
        for j, lane in enumerate(lanes):
            loop = KeyMax(latency=1, tag_width=width if j == 0 else 0)
            m.submodules[name("loop", j)] = EnableInserter(step)(loop)
            m.d.comb += [loop.size.eq(fmt.size), loop.a.eq(Mux(live, loop.result, least_key)),
                         loop.b.eq(lane)]
            results.append(loop.result)
            if j == 0 and width:
                # A run's first lane wins a tie with the least key.
                m.d.comb += [loop.a_tags[0].eq(loop.result_tags[0]),
                             loop.b_tags[0].eq(position), loop.tie_b.eq(~live)]
                found = loop.result_tags[0]
        result_valid = Signal()
        with m.If(step):
            m.d.sync += live.eq(~last)
        with m.If(advance):
            m.d.sync += result_valid.eq(valid & last)
        return (results, result_valid) + ((found,) if width else ())

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
        loop = KeyMax(latency=2, tag_width=width if j == 0 else 0)
        m.submodules[name("loop", j)] = EnableInserter(step)(loop)
        head = loop.result
        m.d.comb += [loop.size.eq(fmt.size), loop.a.eq(head), loop.b.eq(lane),
                     loop.take_b.eq(~head_joins)]
        # When the previous step took a run's last lane (``fed_final``, which makes this cycle
        # a step whenever it advances).
        with m.If(advance & fed_final):
            m.d.sync += saved.eq(Mux(head_live, head, least_key))
        if j or not width:
            results.append(key_max(m, name("close", j), advance, fmt.size, head, saved))
            continue
        m.d.comb += [loop.a_tags[0].eq(loop.result_tags[0]), loop.b_tags[0].eq(position)]
        head_position = loop.result_tags[0]
        saved_position = Signal(width, name="saved_position", reset_less=True)
        saved_live = Signal(name="saved_live", reset_less=True)
        with m.If(advance & fed_final):
            m.d.sync += [saved_position.eq(head_position), saved_live.eq(head_live)]
        # The two partials hold alternate lanes of the run, so either may hold the earlier
        # of two equal keys.
        earlier = saved_live & (saved_position < head_position)
        unused = [0] * (LANE_BYTES - 1)
        result, (found, *_) = key_max(m, "close", advance, fmt.size, head, saved,
                                      tags=([head_position, *unused], [saved_position, *unused]),
                                      tie_b=earlier)
        results.append(result)
    closing, result_valid = Signal(), Signal()
    with m.If(advance):
        m.d.sync += [closing.eq(head_final), result_valid.eq(closing)]
    return (results, result_valid) + ((found,) if width else ())


class SaturatingMultiplier(Checked, wiring.Component):
    """``a * b``, bit-serial, ``digit_bits`` bits of ``b`` a cycle, saturating at
    ``2**width``: the command engine's checks of lengths, and the windowed pooling unit's
    configuration products when it computes them one after another.

    Shift and add over the bits of ``b``, least significant first: while bits of ``b`` remain,
    ``p += a * d`` for the next digit ``d`` of ``digit_bits`` bits (an adder per bit of the
    digit, chained), then ``a`` is shifted past the digit. The unit stops as soon as no bit of
    ``b`` is left, so small factors (the usual counts) take a few cycles. ``overflow`` is set
    when the product is ``2**width`` or more; ``a_overflow`` says ``a`` stands for such a
    value. A product of 0 is exact whatever ``a`` was. Chaining ``product``/``overflow`` into
    ``a``/``a_overflow`` (they hold until the next ``start``) multiplies any number of factors,
    saturating.

    Parameters
    ----------
    width : int
        Width of ``a``, ``b`` and ``product``.
    digit_bits : int
        Bits of ``b`` a cycle (1 or 2: one adder or two).

    Ports
    -----
    start : In(1)
        Strobe: sample ``a``, ``a_overflow``, ``b`` and begin.
    a, b : In(width)
    a_overflow : In(1)
    product : Out(width), overflow : Out(1)
        Valid while ``busy`` is low after a ``start``.
    busy : Out(1)

    Latency
    -------
    ``busy`` is high for ``ceil(b.bit_length() / digit_bits)`` cycles from the cycle after
    ``start`` (0 when ``b`` is 0); a ``start`` may come in the first cycle ``busy`` is low.
    """

    @classmethod
    def check_parameters(cls, width=32, digit_bits=2):
        if digit_bits not in (1, 2):
            raise ValueError(f"digit_bits must be 1 or 2, not {digit_bits!r}")

    def __init__(self, width=32, digit_bits=2):
        self.width, self.digit_bits = width, digit_bits
        super().__init__({
            "start": In(1),
            "a": In(width),
            "a_overflow": In(1),
            "b": In(width),
            "product": Out(width),
            "overflow": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        width, digit = self.width, self.digit_bits
        multiplicand = Signal(width)
        multiplicand_overflow = Signal()      # the shifted multiplicand is 2**width or more
        multiplier = Signal(width)
        total = Signal(width + digit + 1)
        # a * 2**j for each set bit j of the digit (not truncated: the total says overflow).
        terms = [Mux(multiplier[j], multiplicand << j, 0) for j in range(digit)]
        m.d.comb += [
            total.eq(sum(terms, self.product)),
            self.busy.eq(multiplier != 0),
        ]
        with m.If(self.busy):
            m.d.sync += [
                multiplicand.eq(multiplicand << digit),
                multiplier.eq(multiplier >> digit),
                self.product.eq(total[:width]),
            ]
            with m.If(multiplicand[width - digit:].any()):
                m.d.sync += multiplicand_overflow.eq(1)
            with m.If(total[width:].any()
                      | (multiplicand_overflow & multiplier[:digit].any())):
                m.d.sync += self.overflow.eq(1)
        with m.If(self.start):
            m.d.sync += [
                multiplicand.eq(self.a),
                multiplicand_overflow.eq(self.a_overflow),
                multiplier.eq(self.b),
                self.product.eq(0),
                self.overflow.eq(0),
            ]
        return m
