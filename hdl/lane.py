"""A 64-bit comparator lane that computes an element-wise maximum for every supported dtype.

The lane holds 8 x 8, 4 x 16, 2 x 32 or 1 x 64-bit elements, chosen at run time by an ONNX
dtype code, so one bitstream serves every dtype at 8 bytes per cycle whatever the dtype.

How it works (see ``docs/architecture.md`` for the derivation):

1. Each element is mapped to an *order key*, an unsigned integer whose numeric order is the
   contract's order: unsigned integers as they are; signed integers with the sign bit flipped;
   floats with the sign bit flipped if positive and every bit inverted if negative. This puts
   ``-inf < negatives < -0 < +0 < positives < +inf``, subnormals included.
2. The keys of both operands are compared by *one* 72-bit subtraction: every byte gets a guard
   bit above it. Inside an element the guard bits are 0 - 0, which passes the borrow on; at the
   top of an element they are 1 - 0, which stops the borrow and leaves ``key_a >= key_b`` of
   that element in the guard's result bit. Synthesis maps this onto a single carry chain.
3. Each element takes ``a`` where ``key_a >= key_b``, otherwise ``b`` (equal keys are equal bits).
4. If either float element is a NaN the result element is the canonical quiet NaN.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from maxaccel.host.dtypes import DType, FORMATS

__all__ = ["LANE_BITS", "LANE_BYTES", "ELEMENT_SIZES", "LaneDecode", "LaneMax"]

LANE_BITS = 64
LANE_BYTES = LANE_BITS // 8
#: Element widths in bytes a lane can hold.
ELEMENT_SIZES = (1, 2, 4, 8)

_FLOATS = [f for f in FORMATS.values() if f.is_float]


def _splat(value, bits):
    """``value`` (``bits`` wide) repeated to fill a lane."""
    word = 0
    for i in range(LANE_BITS // bits):
        word |= value << (i * bits)
    return word


class LaneDecode(wiring.Component):
    """Decodes a dtype code into what a lane needs to know about its elements.

    Purely combinational. Unknown codes decode as 1-byte unsigned integers; the command engine
    refuses them before they reach a datapath.

    Ports
    -----
    dtype : In(DType)
        ONNX element type code.
    size : Out(4)
        One-hot element size: bit k set for elements of ``2**k`` bytes.
    top : Out(8)
        Bit i set when byte i is the most significant byte of its element.
    signed : Out(1)
        The element's top bit is a sign bit (floats and signed integers).
    float_format : Out(len(float formats))
        One-hot float format, in the order of ``LaneDecode.FLOATS``; all zero for integers.
    """

    FLOATS = _FLOATS

    dtype: In(DType)
    size: Out(4)
    top: Out(LANE_BYTES)
    signed: Out(1)
    float_format: Out(len(_FLOATS))

    def elaborate(self, platform):
        m = Module()
        with m.Switch(self.dtype):
            for fmt in FORMATS.values():
                with m.Case(fmt.dtype):
                    m.d.comb += [
                        self.size.eq(1 << ELEMENT_SIZES.index(fmt.nbytes)),
                        self.signed.eq(fmt.is_signed),
                    ]
                    if fmt.is_float:
                        m.d.comb += self.float_format.eq(1 << _FLOATS.index(fmt))
            with m.Default():
                m.d.comb += self.size.eq(1)
        for i in range(LANE_BYTES):
            m.d.comb += self.top[i].eq(Cat(
                self.size[k] & ((i % size) == size - 1) for k, size in enumerate(ELEMENT_SIZES)
            ).any())
        return m


class LaneMax(wiring.Component):
    """Element-wise maximum of two 64-bit lanes under the maxaccel order, for any dtype.

    Parameters
    ----------
    latency : int
        Register stages, 0, 1 or 2. 0: combinational. 1: the result is registered. 2: the
        comparison is registered too, splitting the carry chain from the select and NaN muxes
        (the Fmax-critical path). Registers are in the ``sync`` domain and advance every cycle;
        wrap the lane in :class:`amaranth.hdl.EnableInserter` to stall it.

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
        if latency not in (0, 1, 2):
            raise ValueError(f"LaneMax latency must be 0, 1 or 2, not {latency!r}")
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
        m.d.comb += decode.dtype.eq(self.dtype)

        def byte(value, i):
            return value[8 * i:8 * i + 8]

        def per_element(bits_by_top, size):
            """Spread one bit per element (indexed by its top byte) to every byte of it."""
            out = Signal(LANE_BYTES)
            for i in range(LANE_BYTES):
                m.d.comb += out[i].eq(Cat(
                    bits_by_top[i | (s - 1)] & size[k] for k, s in enumerate(ELEMENT_SIZES)
                ).any())
            return out

        is_float = decode.float_format.any()

        # 1. Order keys.
        def order_key(value, name):
            sign = per_element(Cat(value[8 * i + 7] for i in range(LANE_BYTES)), decode.size)
            key = Signal(LANE_BITS, name=f"key_{name}")
            for i in range(LANE_BYTES):
                flip = Mux(is_float & sign[i], 0xFF, Mux(decode.top[i] & decode.signed, 0x80, 0))
                m.d.comb += byte(key, i).eq(byte(value, i) ^ flip)
            return key

        key_a, key_b = order_key(self.a, "a"), order_key(self.b, "b")

        # 2. One segmented subtraction, 9 bits per byte (see module docstring).
        guarded_a = Cat(*(Cat(byte(key_a, i), decode.top[i]) for i in range(LANE_BYTES)))
        guarded_b = Cat(*(Cat(byte(key_b, i), Const(0, 1)) for i in range(LANE_BYTES)))
        difference = Signal(9 * LANE_BYTES + 1)
        m.d.comb += difference.eq(guarded_a - guarded_b)
        a_wins_by_top = Cat(difference[9 * i + 8] for i in range(LANE_BYTES))

        # 4. NaN: any float element of either operand with all-ones exponent, nonzero mantissa.
        def nan_by_top(value):
            flags = Signal(LANE_BYTES)
            for index, fmt in enumerate(_FLOATS):
                for start in range(0, LANE_BITS, fmt.bits):
                    element = value[start:start + fmt.bits]
                    exponent = element[fmt.mantissa_bits:fmt.bits - 1]
                    mantissa = element[:fmt.mantissa_bits]
                    top = (start + fmt.bits) // 8 - 1
                    with m.If(decode.float_format[index] & exponent.all() & mantissa.any()):
                        m.d.comb += flags[top].eq(1)
            return flags

        nan_top = Signal(LANE_BYTES)
        m.d.comb += nan_top.eq(nan_by_top(self.a) | nan_by_top(self.b))
        canonical_nan = Signal(LANE_BITS)
        for index, fmt in enumerate(_FLOATS):
            with m.If(decode.float_format[index]):
                m.d.comb += canonical_nan.eq(_splat(fmt.canonical_nan, fmt.bits))

        # Optional register between the comparison and the selection.
        compared = Signal(LANE_BYTES, name="a_wins_by_top")
        nan_compared = Signal(LANE_BYTES, name="nan_by_top")
        a, b = Signal(LANE_BITS, name="a_s1"), Signal(LANE_BITS, name="b_s1")
        nan_word = Signal(LANE_BITS, name="canonical_nan_s1")
        size = Signal(4, name="size_s1")
        stage1 = m.d.sync if self.latency == 2 else m.d.comb
        stage1 += [
            compared.eq(a_wins_by_top), nan_compared.eq(nan_top), a.eq(self.a), b.eq(self.b),
            nan_word.eq(canonical_nan), size.eq(decode.size),
        ]

        # 3. Select per byte, then the NaN override.
        a_wins, is_nan = per_element(compared, size), per_element(nan_compared, size)
        selected = Signal(LANE_BITS)
        for i in range(LANE_BYTES):
            m.d.comb += byte(selected, i).eq(
                Mux(is_nan[i], byte(nan_word, i), Mux(a_wins[i], byte(a, i), byte(b, i))))

        output = m.d.comb if self.latency == 0 else m.d.sync
        output += self.result.eq(selected)
        return m
