"""64-bit comparator lanes that compute an element-wise maximum for every supported dtype.

A lane holds 8 x 8, 4 x 16, 2 x 32 or 1 x 64-bit elements, chosen at run time by an ONNX dtype
code, so one bitstream serves every dtype at 8 bytes per cycle whatever the dtype.

The maximum is computed in *key space* (see ``docs/architecture.md``):

1. :class:`ToKey` maps each element to an *order key*, an unsigned integer whose numeric order is
   the contract's order: unsigned integers as they are; signed integers with the sign bit
   flipped; floats with the sign bit flipped if positive and every bit inverted if negative.
   This puts ``-inf < negatives < -0 < +0 < positives < +inf``, subnormals included. Every NaN,
   whatever its sign and payload, becomes the all-ones key, above every other key: NaN absorbs.
2. :class:`KeyMax` takes the larger key per element: byte-wise compares combined by a prefix
   tree into ``a >= b`` per element for the runtime element size. Equal keys are equal values,
   so ties need no rule.
3. :class:`FromKey` maps keys back to values; the all-ones key of a float is a NaN and comes out
   as the canonical quiet NaN.

Units that reduce many operands (trees, accumulators) convert once on entry and once on exit and
run :class:`KeyMax` in between: each comparison is then a compare and a 2:1 select, which keeps
loops short and Fmax high. :class:`LaneMax` composes the three for a single comparison.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from maxaccel.host.dtypes import DType, FORMATS

__all__ = ["LANE_BITS", "LANE_BYTES", "ELEMENT_SIZES", "FLOAT_FORMATS", "LaneFormat",
           "LaneDecode", "ToKey", "FromKey", "KeyMax", "LaneMax", "spread_from_top",
           "splat_constant"]

LANE_BITS = 64
LANE_BYTES = LANE_BITS // 8
#: Element widths in bytes a lane can hold.
ELEMENT_SIZES = (1, 2, 4, 8)
#: Float formats, in the order of the one-hot ``LaneFormat.float_format`` field.
FLOAT_FORMATS = [f for f in FORMATS.values() if f.is_float]


class LaneFormat(data.Struct):
    """What a lane needs to know about its elements, decoded from a dtype code.

    Fields
    ------
    size : 4
        One-hot element size: bit k set for elements of ``2**k`` bytes.
    top : 8
        Bit i set when byte i is the most significant byte of its element.
    signed : 1
        The element's top bit is a sign bit (floats and signed integers).
    float_format : 4
        One-hot float format in the order of :data:`FLOAT_FORMATS`; zero for integers.
    """

    size: 4
    top: LANE_BYTES
    signed: 1
    float_format: len(FLOAT_FORMATS)


def splat_constant(value, bits):
    """``value`` (``bits`` wide) repeated to fill a lane."""
    return sum(value << (i * bits) for i in range(LANE_BITS // bits))


def spread_from_top(m, bits_by_top, size):
    """Per-byte copy of one bit per element: byte i gets the bit of its element's top byte.

    ``bits_by_top`` has a bit per byte position; only the positions that are the top byte of an
    element for the given one-hot ``size`` are read.
    """
    out = Signal(LANE_BYTES)
    for i in range(LANE_BYTES):
        m.d.comb += out[i].eq(Cat(
            bits_by_top[i | (s - 1)] & size[k] for k, s in enumerate(ELEMENT_SIZES)).any())
    return out


def _byte(value, i):
    return value[8 * i:8 * i + 8]


class LaneDecode(wiring.Component):
    """Decodes a dtype code into a :class:`LaneFormat`. Combinational.

    Unknown codes decode as 1-byte unsigned integers; the command engine refuses them before
    they reach a datapath. Units register the decoded format once per command so that the
    decode is never on a datapath timing path.

    Ports
    -----
    dtype : In(DType)
    format : Out(LaneFormat)
    """

    dtype: In(DType)
    format: Out(LaneFormat)

    # The fields of ``format``, for units that read one of them.
    size = property(lambda self: self.format.size)
    top = property(lambda self: self.format.top)
    signed = property(lambda self: self.format.signed)
    float_format = property(lambda self: self.format.float_format)

    def elaborate(self, platform):
        m = Module()
        fmt = self.format
        with m.Switch(self.dtype):
            for spec in FORMATS.values():
                with m.Case(spec.dtype):
                    m.d.comb += [
                        fmt.size.eq(1 << ELEMENT_SIZES.index(spec.nbytes)),
                        fmt.signed.eq(spec.is_signed),
                    ]
                    if spec.is_float:
                        m.d.comb += fmt.float_format.eq(1 << FLOAT_FORMATS.index(spec))
            with m.Default():
                m.d.comb += fmt.size.eq(1)
        for i in range(LANE_BYTES):
            m.d.comb += fmt.top[i].eq(Cat(
                fmt.size[k] & ((i % size) == size - 1) for k, size in enumerate(ELEMENT_SIZES)
            ).any())
        return m


class ToKey(wiring.Component):
    """Maps a lane of values to a lane of order keys; every NaN becomes the all-ones key.

    Combinational.

    Ports
    -----
    format : In(LaneFormat)
    value : In(64)
    key : Out(64)
    """

    format: In(LaneFormat)
    value: In(LANE_BITS)
    key: Out(LANE_BITS)

    def elaborate(self, platform):
        m = Module()
        fmt, value = self.format, self.value
        is_float = fmt.float_format.any()
        sign = spread_from_top(m, Cat(value[8 * i + 7] for i in range(LANE_BYTES)), fmt.size)

        nan_by_top = Signal(LANE_BYTES)
        for index, spec in enumerate(FLOAT_FORMATS):
            for start in range(0, LANE_BITS, spec.bits):
                element = value[start:start + spec.bits]
                exponent = element[spec.mantissa_bits:spec.bits - 1]
                mantissa = element[:spec.mantissa_bits]
                with m.If(fmt.float_format[index] & exponent.all() & mantissa.any()):
                    m.d.comb += nan_by_top[(start + spec.bits) // 8 - 1].eq(1)
        nan = spread_from_top(m, nan_by_top, fmt.size)

        for i in range(LANE_BYTES):
            flip = Mux(is_float & sign[i], 0xFF, Mux(fmt.top[i] & fmt.signed, 0x80, 0))
            m.d.comb += _byte(self.key, i).eq(Mux(nan[i], 0xFF, _byte(value, i) ^ flip))
        return m


class FromKey(wiring.Component):
    """Maps a lane of order keys back to values; a float's all-ones key is the canonical NaN.

    Combinational. ``FromKey(ToKey(x)) == x`` for every element that is not a NaN.

    Ports
    -----
    format : In(LaneFormat)
    key : In(64)
    value : Out(64)
    """

    format: In(LaneFormat)
    key: In(LANE_BITS)
    value: Out(LANE_BITS)

    def elaborate(self, platform):
        m = Module()
        fmt, key = self.format, self.key
        is_float = fmt.float_format.any()
        # A float key with its top bit clear came from a negative value (all bits inverted).
        negative = spread_from_top(m, Cat(~key[8 * i + 7] for i in range(LANE_BYTES)), fmt.size)

        # All-ones elements: AND of the byte flags over each element, per size.
        ones = Cat(_byte(key, i).all() for i in range(LANE_BYTES))
        ones_by_top = Signal(LANE_BYTES)
        for i in range(LANE_BYTES):
            m.d.comb += ones_by_top[i].eq(Cat(
                fmt.size[k] & ones[i - s + 1:i + 1].all() if i % s == s - 1 else 0
                for k, s in enumerate(ELEMENT_SIZES)).any())
        nan = spread_from_top(m, ones_by_top, fmt.size)

        canonical_nan = Signal(LANE_BITS)
        for index, spec in enumerate(FLOAT_FORMATS):
            with m.If(fmt.float_format[index]):
                m.d.comb += canonical_nan.eq(splat_constant(spec.canonical_nan, spec.bits))

        for i in range(LANE_BYTES):
            flip = Mux(is_float & negative[i], 0xFF, Mux(fmt.top[i] & fmt.signed, 0x80, 0))
            m.d.comb += _byte(self.value, i).eq(
                Mux(is_float & nan[i], _byte(canonical_nan, i), _byte(key, i) ^ flip))
        return m


class KeyMax(wiring.Component):
    """Element-wise maximum of two lanes of order keys.

    Each byte pair is compared on its own (``a > b`` and ``a == b``, eight short 8-bit
    compares), then the flags are combined up a three-level prefix tree, most significant byte
    first, into ``a >= b`` for 2-, 4- and 8-byte elements, and the element size picks one. No
    carry chain is longer than a byte, so the compare is fast on every family.

    Parameters
    ----------
    latency : int
        0: combinational. 1: the result is registered. 2: the byte flags are registered too,
        splitting the byte compares from the prefix tree and select (for pipelined trees; a
        loop that must close in one cycle uses latency 0 or 1).

    Ports
    -----
    size : In(4)
        One-hot element size (``LaneFormat.size``).
    a, b : In(64)
        Key lanes.
    result : Out(64)
        The larger key of each element, ``latency`` cycles later. Equal keys are equal values,
        so ties need no rule.
    """

    def __init__(self, *, latency=0):
        if latency not in (0, 1, 2):
            raise ValueError(f"KeyMax latency must be 0, 1 or 2, not {latency!r}")
        self.latency = latency
        super().__init__({
            "size": In(len(ELEMENT_SIZES)),
            "a": In(LANE_BITS),
            "b": In(LANE_BITS),
            "result": Out(LANE_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        flags = m.d.sync if self.latency == 2 else m.d.comb
        a, b = Signal(LANE_BITS, name="a_s1"), Signal(LANE_BITS, name="b_s1")
        size = Signal(len(ELEMENT_SIZES), name="size_s1")
        greater, equal = Signal(LANE_BYTES), Signal(LANE_BYTES)
        flags += [a.eq(self.a), b.eq(self.b), size.eq(self.size)]
        for i in range(LANE_BYTES):
            flags += [
                greater[i].eq(_byte(self.a, i) > _byte(self.b, i)),
                equal[i].eq(_byte(self.a, i) == _byte(self.b, i)),
            ]

        # Prefix tree: (greater, equal) of the high half decides unless it is equal.
        levels = {1: (list(greater), list(equal))}
        for width in ELEMENT_SIZES[1:]:
            lower_greater, lower_equal = levels[width // 2]
            levels[width] = (
                [lower_greater[2 * j + 1] | lower_equal[2 * j + 1] & lower_greater[2 * j]
                 for j in range(LANE_BYTES // width)],
                [lower_equal[2 * j + 1] & lower_equal[2 * j] for j in range(LANE_BYTES // width)],
            )
        a_wins_by_top = Signal(LANE_BYTES)
        for k, width in enumerate(ELEMENT_SIZES):
            element_greater, element_equal = levels[width]
            for j in range(LANE_BYTES // width):
                with m.If(size[k]):
                    m.d.comb += a_wins_by_top[j * width + width - 1].eq(
                        element_greater[j] | element_equal[j])
        a_wins = spread_from_top(m, a_wins_by_top, size)

        result = m.d.comb if self.latency == 0 else m.d.sync
        for i in range(LANE_BYTES):
            result += _byte(self.result, i).eq(Mux(a_wins[i], _byte(a, i), _byte(b, i)))
        return m


class LaneMax(wiring.Component):
    """Element-wise maximum of two 64-bit lanes of values under the maxaccel order.

    Decode, :class:`ToKey` on both operands, :class:`KeyMax`, :class:`FromKey`.

    Parameters
    ----------
    latency : int
        Register stages, 0 to 3. 0: combinational. 1: the larger key is registered (decode, key
        transform and comparison in one cycle; the key-to-value map after the register). 2: the
        keys are registered too. 3: the comparison is split as well (``KeyMax(latency=2)``),
        the fastest. Registers are in the ``sync`` domain and advance every cycle; wrap the lane
        in :class:`amaranth.hdl.EnableInserter` to stall it.

    Ports
    -----
    a, b : In(64)
        Operand lanes, elements packed little-endian (element j in bits ``j*w .. j*w+w-1``).
    dtype : In(DType)
        Element type, sampled together with ``a`` and ``b``.
    result : Out(64)
        ``max(a, b)`` per element, ``latency`` cycles after the operands. NaN results are the
        canonical quiet NaN; ``+0`` beats ``-0``.

    Throughput is one pair of lanes per cycle (8 bytes of each operand) for every dtype.
    """

    def __init__(self, *, latency=0):
        if latency not in (0, 1, 2, 3):
            raise ValueError(f"LaneMax latency must be 0, 1, 2 or 3, not {latency!r}")
        self.latency = latency
        super().__init__({
            "a": In(LANE_BITS),
            "b": In(LANE_BITS),
            "dtype": In(DType),
            "result": Out(LANE_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.decode = decode = LaneDecode()
        m.submodules.key_a = key_a = ToKey()
        m.submodules.key_b = key_b = ToKey()
        compare_latency = {0: 0, 1: 1, 2: 1, 3: 2}[self.latency]
        m.submodules.compare = compare = KeyMax(latency=compare_latency)
        m.submodules.value = value = FromKey()
        m.d.comb += [
            decode.dtype.eq(self.dtype),
            key_a.format.eq(decode.format), key_a.value.eq(self.a),
            key_b.format.eq(decode.format), key_b.value.eq(self.b),
        ]
        # The format travels alongside the data through every register stage.
        keyed_format = Signal(LaneFormat)
        keys = m.d.sync if self.latency >= 2 else m.d.comb
        keys += [
            keyed_format.eq(decode.format),
            compare.a.eq(key_a.key), compare.b.eq(key_b.key),
        ]
        m.d.comb += compare.size.eq(keyed_format.size)
        result_format = keyed_format
        for stage in range(compare_latency):
            delayed = Signal(LaneFormat, name=f"format_compare_{stage}")
            m.d.sync += delayed.eq(result_format)
            result_format = delayed
        m.d.comb += [
            value.format.eq(result_format), value.key.eq(compare.result),
            self.result.eq(value.value),
        ]
        return m
