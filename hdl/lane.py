"""64-bit comparator lanes that compute an element-wise maximum, or minimum, for every supported
dtype.

A lane holds 8 x 8, 4 x 16, 2 x 32 or 1 x 64-bit elements, chosen at run time by an ONNX dtype
code, so one bitstream serves every dtype at 8 bytes per cycle whatever the dtype.

The maximum is computed in *key space* (see ``docs/architecture.md``):

1. :class:`ToKey` maps each element to an *order key*, an unsigned integer whose numeric order is
   the contract's order: unsigned integers as they are; signed integers with the sign bit
   flipped; floats with the sign bit flipped if positive and every bit inverted if negative.
   This puts ``-inf < negatives < -0 < +0 < positives < +inf``, subnormals included. Every NaN,
   whatever its sign and payload, gets the key of the canonical quiet NaN, above the key of every
   other value: NaN absorbs.
2. :class:`KeyMax` takes the larger key per element: byte-wise compares combined by a
   butterfly into ``a >= b`` per element for the runtime element size. Equal keys are equal values,
   so ties need no rule.
3. :class:`FromKey` maps keys back to values; a NaN's key is the canonical NaN's, so it comes
   back canonical with no test.

Units that reduce many operands (trees, accumulators) convert once on entry and once on exit and
run :class:`KeyMax` in between: each comparison is then a compare and a 2:1 select, which keeps
loops short and Fmax high. :class:`LaneMax` composes the three for a single comparison.

**Minimum.** :class:`ToKey` and :class:`FromKey` take a ``minimum`` select: the key of every
value that is not a NaN is then complemented (the least value gets the greatest key), while a
NaN keeps the canonical NaN's key, still above every other key, and padding keeps key 0. The
same :class:`KeyMax` (trees, folds, accumulators untouched) then takes the IEEE 754-2019
``minimum``: NaN absorbing, ``-0`` below ``+0``. This is the golden model's rule
(``maxaccel.sim.reference._extreme_keys``, which gives a NaN the key all ones instead: the two
keys rank alike against every other key).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import DType, FORMATS

from .unit import UnitSignature, Unit, check_dtype

__all__ = ["LANE_BITS", "LANE_BYTES", "ELEMENT_SIZES", "FLOAT_FORMATS", "LaneFormat",
           "LaneDecode", "lane_format", "ToKey", "FromKey", "KeyMax", "LaneMax", "spread_from_top",
           "splat_constant", "spans_at_least", "key_compare_level", "float_key"]

#: Bytes of one lane: one element of the widest format (the wire contract's ``LANE_BYTES``,
#: ``IDENTIFY``'s unit of lanes, is the same, which ``tests/test_layout.py`` checks).
LANE_BYTES = max(spec.nbytes for spec in FORMATS.values())
#: Bits of one lane.
LANE_BITS = 8 * LANE_BYTES
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
    boolean : 1
        The elements are bool (a byte, False 0 < True 1): a minimum's empty set is True, not
        the byte's greatest value.
    """

    size: 4
    top: LANE_BYTES
    signed: 1
    float_format: len(FLOAT_FORMATS)
    boolean: 1


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


def byte(value, i):
    """Byte ``i`` (bits ``8*i .. 8*i+7``) of ``value``."""
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
        # Each output bit is a function of the 5-bit code, written as its truth table: the
        # mapping then gets the two LUT levels a 5-input function needs, not a decode per case.
        formats = [_lane_format(code) for code in range(1 << len(self.dtype))]
        flat = Value.cast(self.format)
        for bit in range(len(flat)):
            table = sum((value >> bit & 1) << code for code, value in enumerate(formats))
            m.d.comb += flat[bit].eq(Const(table, len(formats)).bit_select(self.dtype, 1))
        return m


def _lane_format(code):
    """The :class:`LaneFormat` of an ONNX dtype code, as an int (unknown: 1-byte unsigned)."""
    spec = next((f for f in FORMATS.values() if f.dtype == code), None)
    nbytes = spec.nbytes if spec else 1
    fields = {
        "size": 1 << ELEMENT_SIZES.index(nbytes),
        "top": sum(1 << i for i in range(LANE_BYTES) if i % nbytes == nbytes - 1),
        "signed": int(bool(spec and spec.is_signed)),
        "float_format": 1 << FLOAT_FORMATS.index(spec) if spec and spec.is_float else 0,
        "boolean": int(bool(spec and spec.kind == "bool")),
    }
    return Const.cast(data.Layout.cast(LaneFormat).const(fields)).value


def lane_format(dtype):
    """The :class:`LaneFormat` of ``dtype`` (a :class:`~maxaccel.contract.dtypes.DType`) as a
    constant: a static element type, whose every test of the format is decided at
    elaboration."""
    layout = data.Layout.cast(LaneFormat)
    return data.View(layout, Const(_lane_format(DType(dtype)), layout.size))


def float_key(spec, bits):
    """The order key of a float bit pattern ``bits`` of format ``spec`` (NaNs as they are)."""
    negative = bits & spec.sign_mask
    return ~bits & ((1 << spec.bits) - 1) if negative else bits | spec.sign_mask


class ToKey(Unit):
    """Maps a lane of values to a lane of order keys; every NaN gets the canonical NaN's key.

    Keys: unsigned integers as they are; signed integers with the sign bit flipped; floats with
    the sign bit flipped if positive and every bit inverted if negative. Every NaN, whatever its
    sign and payload, gets the key of the canonical quiet NaN, which is above ``+inf``'s and
    above every key a non-NaN value has: NaN absorbs, and :class:`FromKey` brings it back as the
    canonical NaN with no test of its own.

    Bytes not marked in ``filled`` (the padding of a beat) get key 0, below every key a value
    has, so padding never wins a max. For integers and bool that is the least element's key; for
    floats it lies below the key of ``-inf`` and is no value's key, so a unit whose result can
    be all padding (an empty reduction) takes the max with the least key before
    :class:`FromKey`.

    With ``minimum`` set the key of every value that is not a NaN is complemented, so the
    maximum of keys is the minimum of values (``-0`` below ``+0``); a NaN keeps the canonical
    NaN's key, which is above the complemented key of ``-inf`` (the greatest a float value then
    has), so NaN still absorbs; padding keeps key 0 (the complemented key of the integer
    maximum, below every float value's). The cost is one more input to each byte's two
    control LUTs.

    Parameters
    ----------
    latency : int
        0: combinational. 1: the NaN tests are registered, with the value and ``filled``; the
        key is combinational after that register (register it again for a two-stage
        conversion). The NaN tests need no format, so ``format`` is not registered: it is read
        in the second cycle and must not change in between (a format is static during a
        command; pass the unit's registered decode), and so is ``minimum``. Wrap the unit in
        :class:`amaranth.hdl.EnableInserter` to stall it.
    dtype : DType, optional
        A static element type: no ``format`` port, and the other formats' logic folds away.

    Ports
    -----
    format : In(LaneFormat)
        Only without ``dtype``.
    minimum : In(1)
        0 (default): order keys, for a maximum. 1: keys for a minimum (above). Read with
        ``format``.
    value : In(64)
    filled : In(8, init=0xFF)
        Bit ``i`` set: byte ``i`` holds part of an element. Whole elements only (every byte of
        an element set or clear); all set unless driven.
    key : Out(64)
        ``latency`` cycles after ``value``.
    """

    class Signature(UnitSignature):
        """:class:`ToKey`'s signature: ``ToKey.Signature(*, latency=0, dtype=None)``, the
        unit's parameters (``ValueError`` for a bad one); without ``dtype`` a ``format``
        port."""

        def __init__(self, *, latency=0, dtype=None):
            dtype = self.check_parameters(latency=latency, dtype=dtype)
            members = {} if dtype is not None else {"format": In(LaneFormat)}
            super().__init__({
                **members,
                "minimum": In(1),
                "value": In(LANE_BITS),
                "filled": In(LANE_BYTES, init=(1 << LANE_BYTES) - 1),
                "key": Out(LANE_BITS),
            }, latency=latency, dtype=dtype)

        @classmethod
        def check_parameters(cls, *, latency=0, dtype=None):
            """The static element type (``None`` or a ``DType``); ``ValueError`` for a
            ``latency`` other than 0 or 1 or an unknown ``dtype``."""
            if latency not in (0, 1):
                raise ValueError(f"ToKey latency must be 0 or 1, not {latency!r}")
            return check_dtype(dtype, "ToKey")

    def elaborate(self, platform):
        m = Module()
        stage = m.d.sync if self.latency else m.d.comb
        fmt = self.format if self.dtype is None else lane_format(self.dtype)
        value = Signal(LANE_BITS, name="value_s1", reset_less=True)
        filled = Signal(LANE_BYTES, name="filled_s1", reset_less=True)
        stage += [value.eq(self.value), filled.eq(self.filled)]

        # NaN tests per float format and element position, independent of the format in use;
        # then each byte takes the test of its element in the format in use.
        nan = Signal(LANE_BYTES)
        for index, spec in enumerate(FLOAT_FORMATS):
            for start in range(0, LANE_BITS, spec.bits):
                element = self.value[start:start + spec.bits]
                exponent = element[spec.mantissa_bits:spec.bits - 1]
                mantissa = element[:spec.mantissa_bits]
                is_nan = Signal(name=f"nan_{spec.dtype.name.lower()}_{start // spec.bits}",
                                reset_less=True)
                stage += is_nan.eq(exponent.all() & mantissa.any())
                with m.If(fmt.float_format[index] & is_nan):
                    m.d.comb += nan[start // 8:(start + spec.bits) // 8].eq(-1)

        nan_key = Signal(LANE_BITS)
        for index, spec in enumerate(FLOAT_FORMATS):
            with m.If(fmt.float_format[index]):
                m.d.comb += nan_key.eq(
                    splat_constant(float_key(spec, spec.canonical_nan), spec.bits))

        is_float = fmt.float_format.any()
        sign = spread_from_top(m, Cat(value[8 * i + 7] for i in range(LANE_BYTES)), fmt.size)
        for i in range(LANE_BYTES):
            # Per byte, a mode and a control bit, so that each key bit is one LUT4 of (special,
            # control, value bit, NaN key bit): special ? control & nan_key : value ^ control.
            # A minimum complements the key of a value (not of a NaN, not of padding).
            special = Signal(name=f"special_{i}")
            m.d.comb += special.eq(nan[i] | ~filled[i])
            flip_low = (is_float & sign[i]) ^ self.minimum
            flip_top = ((is_float & sign[i]) | fmt.top[i] & fmt.signed) ^ self.minimum
            for bit in range(8):
                control = Signal(name=f"control_{i}_{bit}") if bit in (0, 7) else control
                if bit in (0, 7):
                    m.d.comb += control.eq(
                        Mux(special, filled[i], flip_top if bit == 7 else flip_low))
                m.d.comb += self.key[8 * i + bit].eq(
                    Mux(special, control & nan_key[8 * i + bit], value[8 * i + bit] ^ control))
        return m


class FromKey(Unit):
    """Maps a lane of order keys back to values. Combinational.

    The inverse of :class:`ToKey` (with the same ``minimum``): ``FromKey(ToKey(x)) == x`` for
    every element that is not a NaN, and a NaN's key comes back as the canonical quiet NaN.

    With ``minimum`` set a key is complemented back before the map, except the canonical NaN's
    key, which the minimum does not complement. The keys a minimum gives have the top bit, every
    exponent bit and the quiet bit (the mantissa's top bit) all set only for a NaN (a negative
    value keeps its bits: with the exponent all ones it is ``-inf``, whose quiet bit is clear),
    so a test of those bits per element, for the float format in use, finds the NaN.

    Parameters
    ----------
    dtype : DType, optional
        A static element type: no ``format`` port.

    Ports
    -----
    format : In(LaneFormat)
        Only without ``dtype``.
    minimum : In(1)
        0 (default): order keys (a maximum's). 1: a minimum's keys (see :class:`ToKey`).
    key : In(64)
    value : Out(64)
    """

    class Signature(UnitSignature):
        """:class:`FromKey`'s signature: ``FromKey.Signature(*, dtype=None)``."""

        def __init__(self, *, dtype=None):
            dtype = self.check_parameters(dtype=dtype)
            members = {} if dtype is not None else {"format": In(LaneFormat)}
            super().__init__({**members, "minimum": In(1), "key": In(LANE_BITS),
                              "value": Out(LANE_BITS)}, dtype=dtype)

        @classmethod
        def check_parameters(cls, *, dtype=None):
            """The static element type; ``ValueError`` for an unknown ``dtype``."""
            return check_dtype(dtype, "FromKey")

    def elaborate(self, platform):
        m = Module()
        fmt = self.format if self.dtype is None else lane_format(self.dtype)
        key = self.key
        is_float = fmt.float_format.any()
        # A minimum's NaN key (top, exponent and quiet bits set), per float format and element.
        nan = Signal(LANE_BYTES)
        for index, spec in enumerate(FLOAT_FORMATS):
            for start in range(0, LANE_BITS, spec.bits):
                element = key[start:start + spec.bits]
                is_nan = element[spec.mantissa_bits - 1:].all()
                with m.If(fmt.float_format[index] & is_nan):
                    m.d.comb += nan[start // 8:(start + spec.bits) // 8].eq(-1)
        complement = Signal(LANE_BYTES)
        m.d.comb += complement.eq(Mux(self.minimum, ~nan, 0))
        # A float key with its top bit clear (after the complement) came from a negative value
        # (all bits inverted).
        negative = spread_from_top(
            m, Cat(~(key[8 * i + 7] ^ complement[i]) for i in range(LANE_BYTES)), fmt.size)
        for i in range(LANE_BYTES):
            flip = Mux(is_float & negative[i], 0xFF, Mux(fmt.top[i] & fmt.signed, 0x80, 0))
            m.d.comb += byte(self.value, i).eq(byte(key, i) ^ flip ^ Mux(complement[i], 0xFF, 0))
        return m


class KeyMax(Unit):
    """Element-wise maximum of two lanes of order keys.

    Each byte pair is compared on its own (``a >= b`` and ``a == b``, eight 8-bit compares), then
    a three-level butterfly combines the flags into ``a >= b`` for each byte's element: at level
    ``L`` every byte merges the verdict of the other half of its ``2**L``-byte block (the higher
    half decides unless it is equal), if elements are at least that wide. Each level is one LUT4
    per byte and flag, and every byte ends with its own element's verdict, so no select by size
    or spread of a per-element flag follows. No carry chain is longer than a byte.

    Parameters
    ----------
    latency : int
        0: combinational. 1: the result is registered. 2: the byte compares and the first
        butterfly level are registered too (with both operands and the size), leaving two
        butterfly levels and the select for the second cycle (for pipelined trees; a loop that
        must close in one cycle uses latency 0 or 1).
    tag_width : int
        Bits of a tag per byte (0: no tags).
    dtype : DType, optional
        A static element type: no ``size`` port.

    Ports
    -----
    size : In(4)
        One-hot element size (``LaneFormat.size``); only without ``dtype``.
    a, b : In(64)
        Key lanes.
    take_b : In(1)
        Set with the operands: the result is ``b``, whatever the compare (an accumulator's
        first operand). With ``latency=2`` it resets the registered verdicts, so it costs no
        logic level. 0 unless driven.
    tie_b : In(1)
        Set with the operands: where an element's keys are equal, the result (and the tag) is
        ``b``'s; otherwise ``a``'s. Equal keys are equal values, so only the tags tell the two
        apart. 0 unless driven (then it costs nothing).
    result : Out(64)
        The larger key of each element, ``latency`` cycles later.
    a_tags, b_tags : In(ArrayLayout(tag_width, 8)), only with ``tag_width``
        A tag per byte of each operand (an argument reduction's positions).
    result_tags : Out(ArrayLayout(tag_width, 8)), only with ``tag_width``
        Each byte's tag from the operand its element's result came from, with ``result``.
    """

    class Signature(UnitSignature):
        """:class:`KeyMax`'s signature: ``KeyMax.Signature(*, latency=0, tag_width=0,
        dtype=None)``, the unit's parameters (``ValueError`` for a bad one); without
        ``dtype`` a ``size`` port."""

        def __init__(self, *, latency=0, tag_width=0, dtype=None):
            dtype = self.check_parameters(latency=latency, tag_width=tag_width, dtype=dtype)
            members = {} if dtype is not None else {"size": In(len(ELEMENT_SIZES))}
            members.update({
                "a": In(LANE_BITS),
                "b": In(LANE_BITS),
                "take_b": In(1),
                "tie_b": In(1),
                "result": Out(LANE_BITS),
            })
            if tag_width:
                tags = data.ArrayLayout(tag_width, LANE_BYTES)
                members.update(a_tags=In(tags), b_tags=In(tags), result_tags=Out(tags))
            super().__init__(members, latency=latency, tag_width=tag_width, dtype=dtype)

        @classmethod
        def check_parameters(cls, *, latency=0, tag_width=0, dtype=None):
            """The static element type; ``ValueError`` for a ``latency`` other than 0, 1 or
            2, a negative ``tag_width`` or an unknown ``dtype``."""
            if latency not in (0, 1, 2):
                raise ValueError(f"KeyMax latency must be 0, 1 or 2, not {latency!r}")
            if not isinstance(tag_width, int) or isinstance(tag_width, bool) or tag_width < 0:
                raise ValueError(f"KeyMax tag_width must be an integer >= 0, not "
                                 f"{tag_width!r}")
            return check_dtype(dtype, "KeyMax")

    def elaborate(self, platform):
        m = Module()
        first = m.d.sync if self.latency == 2 else m.d.comb
        size_in = self.size if self.dtype is None else lane_format(self.dtype).size
        # Datapath registers need no reset (the valid bits of the unit using it have one).
        a = Signal(LANE_BITS, name="a_s1", reset_less=True)
        b = Signal(LANE_BITS, name="b_s1", reset_less=True)
        size = Signal(len(ELEMENT_SIZES), name="size_s1", reset_less=True)
        tie_b = Signal(name="tie_b_s1", reset_less=True)
        first += [a.eq(self.a), b.eq(self.b), size.eq(size_in), tie_b.eq(self.tie_b)]
        at_least = spans_at_least(size_in)
        flags = ([byte(self.a, i) >= byte(self.b, i) for i in range(LANE_BYTES)],
                 [byte(self.a, i) == byte(self.b, i) for i in range(LANE_BYTES)])
        flags = key_compare_level(flags, 1, at_least[1])
        greater_equal = Signal(LANE_BYTES, reset_less=True)
        equal = Signal(LANE_BYTES, reset_less=True)
        # All verdicts "b wins" make every later level and the select take b.
        first += [greater_equal.eq(Mux(self.take_b, 0, Cat(flags[0]))), equal.eq(Cat(flags[1]))]
        at_least = spans_at_least(size)
        flags = (list(greater_equal), list(equal))
        for level in (2, 3):
            flags = key_compare_level(flags, level, at_least[level])
        a_wins = [greater & ~(same & tie_b) for greater, same in zip(*flags)]

        result = Signal(LANE_BITS, reset_less=True)
        m.d.comb += self.result.eq(result)
        stage = m.d.comb if self.latency == 0 else m.d.sync
        for i in range(LANE_BYTES):
            stage += byte(result, i).eq(Mux(a_wins[i], byte(a, i), byte(b, i)))
        if self.tag_width:
            tags = data.ArrayLayout(self.tag_width, LANE_BYTES)
            a_tags = Signal(tags, name="a_tags_s1", reset_less=True)
            b_tags = Signal(tags, name="b_tags_s1", reset_less=True)
            result_tags = Signal(tags, reset_less=True)
            first += [a_tags.eq(self.a_tags), b_tags.eq(self.b_tags)]
            m.d.comb += self.result_tags.eq(result_tags)
            for i in range(LANE_BYTES):
                stage += result_tags[i].eq(Mux(a_wins[i], a_tags[i], b_tags[i]))
        return m


def spans_at_least(size):
    """Bit ``L`` set when the elements span at least ``2**L`` bytes, from ``size`` (one-hot,
    ``LaneFormat.size``): the ``merge`` of :func:`key_compare_level` at level ``L``."""
    return Cat(size[k:].any() for k in range(len(ELEMENT_SIZES)))


def key_compare_level(flags, level, merge):
    """One butterfly level of :class:`KeyMax`'s compare.

    ``flags`` is ``(greater_equal, equal)``, one bit per byte (any number of bytes, a multiple
    of ``2**level``): the verdict of ``a`` against ``b`` over the byte's part of its
    ``2**(level-1)``-byte block. When ``merge`` (elements span at least ``2**level`` bytes),
    each byte combines it with the other half of its ``2**level``-byte block: the higher half
    decides unless it is equal. Returns the new flags.
    """
    greater_equal, equal = flags
    half = 1 << (level - 1)
    merged_ge, merged_eq = [], []
    for i in range(len(greater_equal)):
        j = i ^ half
        # Merging, a byte of the high half takes the low half's verdict if its own half is
        # equal; a byte of the low half takes the high half's verdict unless that one is equal.
        takes_other = merge & (equal[i] if i & half else ~equal[j])
        merged_ge.append(Mux(takes_other, greater_equal[j], greater_equal[i]))
        merged_eq.append(equal[i] & (~merge | equal[j]))
    return merged_ge, merged_eq


class LaneMax(Unit):
    """Element-wise maximum (or, with ``minimum``, minimum) of two 64-bit lanes of values under
    the maxaccel order.

    Decode, :class:`ToKey` on both operands, :class:`KeyMax`, :class:`FromKey`, the last three
    with the ``minimum`` select.

    Parameters
    ----------
    latency : int
        Register stages, 0 to 3. 0: combinational. 1: the larger key is registered (decode, key
        transform and comparison in one cycle; the key-to-value map after the register). 2: the
        keys are registered too. 3: the comparison is split as well (``KeyMax(latency=2)``),
        the fastest. Registers are in the ``sync`` domain and advance every cycle; wrap the lane
        in :class:`amaranth.hdl.EnableInserter` to stall it.
    dtype : DType, optional
        A static element type: no ``dtype`` port and no decode.

    Ports
    -----
    a, b : In(64)
        Operand lanes, elements packed little-endian (element j in bits ``j*w .. j*w+w-1``).
    dtype : In(DType)
        Element type, sampled together with ``a`` and ``b``; only without the ``dtype``
        parameter (a static element type, which drops the decode).
    minimum : In(1)
        0 (default): the maximum. 1: the minimum (IEEE 754-2019 ``minimum``: NaN absorbing,
        ``-0`` below ``+0``). Sampled together with ``a`` and ``b``.
    result : Out(64)
        ``max(a, b)`` (``min(a, b)``) per element, ``latency`` cycles after the operands. NaN
        results are the canonical quiet NaN; ``+0`` beats ``-0`` in a maximum, ``-0`` in a
        minimum.

    Throughput is one pair of lanes per cycle (8 bytes of each operand) for every dtype.
    """

    class Signature(UnitSignature):
        """:class:`LaneMax`'s signature: ``LaneMax.Signature(*, latency=0, dtype=None)``;
        without ``dtype`` a ``dtype`` port."""

        def __init__(self, *, latency=0, dtype=None):
            dtype = self.check_parameters(latency=latency, dtype=dtype)
            members = {"a": In(LANE_BITS), "b": In(LANE_BITS)}
            if dtype is None:
                members["dtype"] = In(DType)
            members.update({"minimum": In(1), "result": Out(LANE_BITS)})
            super().__init__(members, latency=latency, dtype=dtype)

        @classmethod
        def check_parameters(cls, *, latency=0, dtype=None):
            """The static element type; ``ValueError`` for a ``latency`` other than 0 to 3 or
            an unknown ``dtype``."""
            if latency not in (0, 1, 2, 3):
                raise ValueError(f"LaneMax latency must be 0, 1, 2 or 3, not {latency!r}")
            return check_dtype(dtype, "LaneMax")

    def elaborate(self, platform):
        m = Module()
        if self.signature.dtype is None:
            m.submodules.decode = decode = LaneDecode()
            m.d.comb += decode.dtype.eq(self.dtype)
            decoded = decode.format
        else:
            decoded = lane_format(self.dtype)
        m.submodules.key_a = key_a = ToKey()
        m.submodules.key_b = key_b = ToKey()
        compare_latency = {0: 0, 1: 1, 2: 1, 3: 2}[self.latency]
        m.submodules.compare = compare = KeyMax(latency=compare_latency)
        m.submodules.value = value = FromKey()
        m.d.comb += [
            key_a.format.eq(decoded), key_a.value.eq(self.a),
            key_b.format.eq(decoded), key_b.value.eq(self.b),
            key_a.minimum.eq(self.minimum), key_b.minimum.eq(self.minimum),
        ]
        # The format and the select travel alongside the data through every register stage.
        keyed_format, keyed_minimum = Signal(LaneFormat), Signal()
        keys = m.d.sync if self.latency >= 2 else m.d.comb
        keys += [
            keyed_format.eq(decoded), keyed_minimum.eq(self.minimum),
            compare.a.eq(key_a.key), compare.b.eq(key_b.key),
        ]
        m.d.comb += compare.size.eq(keyed_format.size)
        result_format, result_minimum = keyed_format, keyed_minimum
        for stage in range(compare_latency):
            delayed = Signal(LaneFormat, name=f"format_compare_{stage}")
            delayed_minimum = Signal(name=f"minimum_compare_{stage}")
            m.d.sync += [delayed.eq(result_format), delayed_minimum.eq(result_minimum)]
            result_format, result_minimum = delayed, delayed_minimum
        m.d.comb += [
            value.format.eq(result_format), value.minimum.eq(result_minimum),
            value.key.eq(compare.result), self.result.eq(value.value),
        ]
        return m
