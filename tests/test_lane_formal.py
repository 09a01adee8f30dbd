"""Formal proofs that LaneMax computes the maxaccel order for ALL inputs (SymbiYosys + z3).

The specification below is written independently of the lane, the plain way a reader of the
semantics contract would: per element, NaN first (either operand NaN gives the canonical quiet
NaN), then for floats sign and magnitude with explicit rules (signs differ: the non-negative one
wins, so +0 beats -0; both non-negative: the larger magnitude; both negative: the smaller
magnitude), integers by a signed or unsigned compare. No order keys, no byte tricks.

Each proof converts a harness (lane + specification + ``Assert``) to RTLIL and runs
``yowasp-sby`` with the ``smtbmc z3`` engine in ``mode prove`` (k-induction), so a PASS covers
every input sequence, not just the ones a simulation happens to try:

* every dtype with the dtype tied to a constant, combinational, and every float dtype at the
  highest latency (the specification delayed by it);
* the combinational lane with the dtype a free input (any 5-bit code; codes outside the table
  must behave as uint8, as ``LaneDecode`` documents);
* every pipelined latency L against the combinational lane delayed by L cycles, with the dtype
  changing every cycle: the dtype travels through the pipeline with its operands. With the
  previous proof this is the specification delayed by L, for every input sequence;
* KeyMax at every latency against a per-element unsigned maximum, for every element size, and
  FromKey(ToKey(x)) with padding (``filled``) for any dtype: with the lane proofs, any tree of
  KeyMax between ToKey and FromKey computes the specification's maximum;
* PlainFloatMax, the comparator ``boards/resources.py`` compares the lane with;
* a negative control: a naive lane (raw unsigned max) must FAIL, so a PASS means something.

Each of these is proved for the maximum and the minimum select. In CI only the strongest run,
the select and the dtype free inputs (the dtype changing every cycle in the pipelined ones):
the proofs with either tied, and the highest latency checked directly, are special cases or
steps of a chain those close, and run with ``--slow`` (they name the failing dtype or
latency).
"""

import pytest
from amaranth.hdl import Assert, Assume, Cat, Elaboratable, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from maxaccel.boards.resources import PlainFloatMax
from maxaccel.hdl.lane import (ELEMENT_SIZES, LANE_BITS, LANE_BYTES, FromKey, KeyMax, LaneDecode,
                               LaneMax, ToKey)
from maxaccel.contract.dtypes import DType, FORMATS

from formal import prove

pytestmark = pytest.mark.formal

LATENCIES = (0, 1, 2, 3)
ALL_FORMATS = list(FORMATS.values())
FORMAT_IDS = [f.dtype.name for f in ALL_FORMATS]


# --- the specification ----------------------------------------------------------------------


def spec_element(m, fmt, a, b, minimum=False):
    """max(a, b) of one element of ``fmt`` (with ``minimum``, min(a, b)), written from the
    contract. ``minimum`` is a Python bool, or a 1-bit value selecting at run time."""
    if not isinstance(minimum, bool):
        result = Signal(fmt.bits)
        m.d.comb += result.eq(Mux(minimum, spec_element(m, fmt, a, b, True),
                                  spec_element(m, fmt, a, b, False)))
        return result
    # The side decides which operand a compare keeps: the greater for the maximum, the lesser
    # for the minimum (IEEE 754-2019 ``minimum``: -0 below +0). Equal magnitudes of one sign
    # are the same bits, so ties need no rule.
    keep_a = (lambda x, y: x <= y) if minimum else (lambda x, y: x >= y)
    result = Signal(fmt.bits)
    if fmt.is_float:
        exponent_ones = (1 << fmt.exponent_bits) - 1

        def is_nan(x):
            exponent = x[fmt.mantissa_bits:fmt.bits - 1]
            mantissa = x[:fmt.mantissa_bits]
            return (exponent == exponent_ones) & (mantissa != 0)

        negative_a, negative_b = a[fmt.bits - 1], b[fmt.bits - 1]
        magnitude_a, magnitude_b = a[:fmt.bits - 1], b[:fmt.bits - 1]
        with m.If(is_nan(a) | is_nan(b)):
            m.d.comb += result.eq(fmt.canonical_nan)
        with m.Elif(negative_a != negative_b):
            # Signs differ: the maximum keeps the non-negative one, the minimum the negative.
            m.d.comb += result.eq(Mux(negative_a, a, b) if minimum else Mux(negative_a, b, a))
        with m.Elif(~negative_a):
            m.d.comb += result.eq(Mux(keep_a(magnitude_a, magnitude_b), a, b))
        with m.Else():    # both negative: the larger magnitude is the lesser value
            m.d.comb += result.eq(Mux(keep_a(magnitude_b, magnitude_a), a, b))
    elif fmt.kind == "signed":
        m.d.comb += result.eq(Mux(keep_a(a.as_signed(), b.as_signed()), a, b))
    else:  # unsigned integers, and bool as the byte it travels in (False 0 < True 1)
        m.d.comb += result.eq(Mux(keep_a(a, b), a, b))
    return result


def spec_lane(m, fmt, a, b, minimum=False):
    """The 64-bit lane of elements of ``fmt``, element j in bits ``j*w .. j*w+w-1``."""
    out = Signal(LANE_BITS)
    for start in range(0, LANE_BITS, fmt.bits):
        end = start + fmt.bits
        m.d.comb += out[start:end].eq(spec_element(m, fmt, a[start:end], b[start:end],
                                                   minimum))
    return out


def spec_any_dtype(m, a, b, dtype, minimum=False):
    """The specification with a run-time dtype; codes outside the table behave as uint8."""
    expected = Signal(LANE_BITS)
    with m.Switch(dtype):
        for fmt in ALL_FORMATS:
            with m.Case(fmt.dtype):
                m.d.comb += expected.eq(spec_lane(m, fmt, a, b, minimum))
        with m.Default():
            m.d.comb += expected.eq(spec_lane(m, FORMATS[DType.UINT8], a, b, minimum))
    return expected


def combinational_lane(m, a, b, dtype, minimum=False):
    """``LaneMax(latency=0)``, proved against the specification by the proofs above."""
    m.submodules.reference_lane = lane = LaneMax(latency=0)
    m.d.comb += [lane.a.eq(a), lane.b.eq(b), lane.dtype.eq(dtype), lane.minimum.eq(minimum)]
    return lane.result


class Delayed(Elaboratable):
    """A lane and a reference on the same free inputs; asserts they agree ``latency`` later.

    ``reference(m, a, b, dtype, minimum)`` returns the expected lane, combinationally. With
    ``fmt`` given, the dtype is tied to it; otherwise ``dtype`` is a free input that may change
    every cycle. ``minimum``: ``False`` or ``True`` ties the lane's select (the maximum, the
    minimum); ``None`` makes it a free input that may change every cycle, as the dtype. For a
    lane with latency L the reference is delayed by L registers and compared from cycle L on;
    the lane is a pure pipeline, so k-induction of depth L + 1 closes the proof.
    """

    def __init__(self, make_lane, latency, reference, fmt=None, minimum=False):
        self.make_lane = make_lane
        self.latency = latency
        self.reference = reference
        self.fmt = fmt
        self.a = Signal(LANE_BITS)
        self.b = Signal(LANE_BITS)
        self.dtype = Signal(DType)
        self.fixed_minimum = minimum
        self.minimum = Signal()

    def ports(self):
        return ([self.a, self.b] + ([] if self.fmt else [self.dtype])
                + ([self.minimum] if self.fixed_minimum is None else []))

    def elaborate(self, platform):
        m = Module()
        m.submodules.lane = lane = self.make_lane(self.latency)
        dtype = self.fmt.dtype if self.fmt else self.dtype
        minimum = self.minimum if self.fixed_minimum is None else self.fixed_minimum
        m.d.comb += [lane.a.eq(self.a), lane.b.eq(self.b), lane.dtype.eq(dtype)]
        if hasattr(lane, "minimum"):
            m.d.comb += lane.minimum.eq(minimum)

        assert_delayed(m, self.latency, lane.result,
                       self.reference(m, self.a, self.b, dtype, minimum))
        return m


def assert_delayed(m, latency, actual, expected):
    """Assert ``actual == expected`` delayed by ``latency`` cycles, from cycle ``latency`` on."""
    for stage in range(latency):
        delayed = Signal(len(expected), name=f"expected_{stage + 1}")
        m.d.sync += delayed.eq(expected)
        expected = delayed
    if latency:
        cycles = Signal(range(latency + 1))
        with m.If(cycles != latency):
            m.d.sync += cycles.eq(cycles + 1)
        with m.If(cycles == latency):
            m.d.comb += Assert(actual == expected)
    else:
        m.d.comb += Assert(actual == expected)


class KeyMaxAgainstSpec(Elaboratable):
    """KeyMax against a per-element unsigned maximum (or ``b`` when ``take_b``), the element
    size (any one-hot value, as LaneDecode produces) and ``take_b`` free every cycle."""

    def __init__(self, latency):
        self.latency = latency
        self.a = Signal(LANE_BITS)
        self.b = Signal(LANE_BITS)
        self.size = Signal(len(ELEMENT_SIZES))
        self.take_b = Signal()

    def ports(self):
        return [self.a, self.b, self.size, self.take_b]

    def elaborate(self, platform):
        m = Module()
        m.submodules.key_max = key_max = KeyMax(latency=self.latency)
        m.d.comb += [key_max.a.eq(self.a), key_max.b.eq(self.b), key_max.size.eq(self.size),
                     key_max.take_b.eq(self.take_b)]
        m.d.comb += Assume(Cat(self.size == 1 << k for k in range(len(ELEMENT_SIZES))).any())
        expected = Signal(LANE_BITS)
        for k, nbytes in enumerate(ELEMENT_SIZES):
            with m.If(self.size[k]):
                for start in range(0, LANE_BITS, 8 * nbytes):
                    a = self.a[start:start + 8 * nbytes]
                    b = self.b[start:start + 8 * nbytes]
                    m.d.comb += expected[start:start + 8 * nbytes].eq(
                        Mux(self.take_b, b, Mux(a >= b, a, b)))
        assert_delayed(m, self.latency, key_max.result, expected)
        return m


def against_spec(latency, fmt=None, minimum=False):
    if fmt is None:
        return Delayed(lambda n: LaneMax(latency=n), latency, spec_any_dtype, minimum=minimum)
    return Delayed(lambda n: LaneMax(latency=n), latency,
                   lambda m, a, b, dtype, select: spec_lane(m, fmt, a, b, select), fmt,
                   minimum=minimum)


class NaiveLane(wiring.Component):
    """Negative control: the raw unsigned maximum of the whole lane, whatever the dtype."""

    a: In(LANE_BITS)
    b: In(LANE_BITS)
    dtype: In(DType)
    result: Out(LANE_BITS)

    def __init__(self, latency):
        assert latency == 0
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.result.eq(Mux(self.a >= self.b, self.a, self.b))
        return m


# --- running SymbiYosys ---------------------------------------------------------------------


def assert_proved(harness, workdir, what, **options):
    passed, seconds, log = prove(harness, workdir, **options)
    assert passed, f"{what}: counterexample found, see {workdir}/top\n{log[-3000:]}"
    print(f"{what}: proved in {seconds:.1f} s")


# --- the proofs -----------------------------------------------------------------------------

def implied(by):
    """Skip a proof that a stronger one in CI implies (a special case of its free inputs, or a
    step of a chain it closes), unless ``--slow`` is given: it names the failing dtype or
    latency when the stronger proof fails."""
    return pytest.mark.slow(reason=f"implied by {by}")


EITHER_SELECT = "test_combinational_lane_with_any_dtype_code_and_either_select"
CHAIN = ("test_combinational_lane_with_any_dtype_code_and_either_select with "
         "test_pipelined_lane_with_dtype_and_select_changing_every_cycle")



@implied(EITHER_SELECT)
@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=FORMAT_IDS)
def test_combinational_lane_equals_spec_for_each_dtype(fmt, tmp_path):
    assert_proved(against_spec(0, fmt), tmp_path, f"LaneMax(latency=0) {fmt.dtype.name}")


@implied(CHAIN)
@pytest.mark.parametrize("fmt", [f for f in ALL_FORMATS if f.is_float], ids=lambda f: f.dtype.name)
def test_deepest_lane_equals_spec_for_each_float_dtype(fmt, tmp_path):
    """The direct check, spec delayed by the full latency; for the other dtypes (and a dtype
    changing every cycle) the two proofs below cover it more cheaply."""
    latency = max(LATENCIES)
    assert_proved(against_spec(latency, fmt), tmp_path,
                  f"LaneMax(latency={latency}) {fmt.dtype.name}")


@implied(EITHER_SELECT)
def test_combinational_lane_equals_spec_for_any_dtype_code(tmp_path):
    assert_proved(against_spec(0), tmp_path, "LaneMax(latency=0) any dtype code")


@implied("test_pipelined_lane_with_dtype_and_select_changing_every_cycle")
@pytest.mark.parametrize("latency", [n for n in LATENCIES if n > 0])
def test_pipelined_lane_with_dtype_changing_every_cycle(latency, tmp_path):
    """LaneMax(latency=L) is LaneMax(latency=0) delayed by L cycles, whatever the dtype does
    from cycle to cycle; with the proof above, it equals the specification delayed by L.
    (Equivalent to proving it against the specification directly, and 2-4x faster for z3.)"""
    assert_proved(Delayed(lambda n: LaneMax(latency=n), latency, combinational_lane), tmp_path,
                  f"LaneMax(latency={latency}) any dtype, every cycle")


@implied(EITHER_SELECT)
@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=FORMAT_IDS)
def test_combinational_lane_minimum_equals_spec_for_each_dtype(fmt, tmp_path):
    """The minimum select: IEEE 754-2019 ``minimum`` for every dtype, every input pair."""
    assert_proved(against_spec(0, fmt, minimum=True), tmp_path,
                  f"LaneMax(latency=0, minimum) {fmt.dtype.name}")


@implied(CHAIN)
@pytest.mark.parametrize("fmt", [f for f in ALL_FORMATS if f.is_float], ids=lambda f: f.dtype.name)
def test_deepest_lane_minimum_equals_spec_for_each_float_dtype(fmt, tmp_path):
    latency = max(LATENCIES)
    assert_proved(against_spec(latency, fmt, minimum=True), tmp_path,
                  f"LaneMax(latency={latency}, minimum) {fmt.dtype.name}")


def test_combinational_lane_with_any_dtype_code_and_either_select(tmp_path):
    """The select free, with the dtype: each of the two specifications by its select."""
    assert_proved(against_spec(0, minimum=None), tmp_path,
                  "LaneMax(latency=0) any dtype code, either select")


@pytest.mark.parametrize("latency", [n for n in LATENCIES if n > 0])
def test_pipelined_lane_with_dtype_and_select_changing_every_cycle(latency, tmp_path):
    """The select travels through the pipeline with its operands, as the dtype does."""
    assert_proved(Delayed(lambda n: LaneMax(latency=n), latency, combinational_lane,
                          minimum=None), tmp_path,
                  f"LaneMax(latency={latency}) any dtype and select, every cycle")


@pytest.mark.parametrize("latency", [0, 1, 2])
def test_key_max_is_the_unsigned_maximum_per_element(latency, tmp_path):
    """What the reduction units rely on: with LaneMax = FromKey(KeyMax(ToKey a, ToKey b))
    proved against the specification, this makes any tree of KeyMax between one ToKey and one
    FromKey compute the specification's maximum (the maximum of keys is associative)."""
    assert_proved(KeyMaxAgainstSpec(latency), tmp_path, f"KeyMax(latency={latency})")


class KeyRoundTrip(Elaboratable):
    """FromKey(ToKey(x)) with ``filled`` free every cycle (the dtype too at latency 0): each
    filled element comes back as it was, a NaN as the canonical NaN, an unfilled one as what
    key 0 maps to."""

    def __init__(self, latency, minimum=False):
        self.latency = latency
        self.minimum = minimum
        self.value = Signal(LANE_BITS)
        self.filled = Signal(LANE_BYTES)
        self.dtype = Signal(DType)

    def ports(self):
        return [self.value, self.filled, self.dtype]

    def elaborate(self, platform):
        m = Module()
        m.submodules.decode = decode = LaneDecode()
        m.submodules.to_key = to_key = ToKey(latency=self.latency)
        m.submodules.from_key = from_key = FromKey()
        m.d.comb += [decode.dtype.eq(self.dtype), to_key.format.eq(decode.format),
                     to_key.value.eq(self.value), to_key.filled.eq(self.filled),
                     to_key.minimum.eq(self.minimum), from_key.minimum.eq(self.minimum)]
        m.d.comb += [from_key.format.eq(decode.format), from_key.key.eq(to_key.key)]
        if self.latency:
            # ToKey(latency=1) reads the format in its second cycle: the format is static
            # during a command, so the dtype may only change before the first cycle.
            previous, started = Signal(DType), Signal()
            m.d.sync += [previous.eq(self.dtype), started.eq(1)]
            with m.If(started):
                m.d.comb += Assume(self.dtype == previous)

        expected = Signal(LANE_BITS)
        formats = {fmt.dtype: fmt for fmt in ALL_FORMATS}
        with m.Switch(self.dtype):
            for code in [*formats, None]:
                fmt = formats.get(code, FORMATS[DType.UINT8])
                with (m.Case(code) if code is not None else m.Default()):
                    for start in range(0, LANE_BITS, fmt.bits):
                        x = self.value[start:start + fmt.bits]
                        filled = self.filled[start // 8:(start + fmt.bits) // 8]
                        # ToKey's precondition: whole elements are filled or not.
                        m.d.comb += Assume(filled.all() | ~filled.any())
                        if fmt.is_float:
                            nan = (x[fmt.mantissa_bits:fmt.bits - 1].all()
                                   & x[:fmt.mantissa_bits].any())
                            x = Mux(nan, fmt.canonical_nan, x)
                        # Padding gets key 0, below every value's key (ToKey's docstring):
                        # the least element for integers and bool; for floats no value's key,
                        # which FromKey maps to all-ones bits (units never convert it back).
                        # A minimum's key 0 is the complement of the all-ones key: the
                        # greatest integer (the byte 0xFF for bool), for floats all ones but
                        # the sign.
                        padding = (1 << fmt.bits) - 1 if fmt.is_float else fmt.lowest
                        if self.minimum:
                            padding = ((1 << fmt.bits) - 1) ^ (
                                fmt.sign_mask if fmt.kind in ("float", "signed") else 0)
                        m.d.comb += expected[start:start + fmt.bits].eq(
                            Mux(filled.all(), x, padding))
        assert_delayed(m, self.latency, from_key.value, expected)
        return m


@pytest.mark.parametrize("minimum", [False, True], ids=["maximum", "minimum"])
@pytest.mark.parametrize("latency", [0, 1])
def test_key_round_trip_with_padding(latency, minimum, tmp_path):
    """The reduction units' entry and exit: values come back, NaNs canonical, padding key 0
    (with either select: the minimum's NaN key is the one FromKey must not complement)."""
    assert_proved(KeyRoundTrip(latency, minimum), tmp_path,
                  f"FromKey(ToKey(latency={latency})) {'minimum' if minimum else 'maximum'}")


class PlainAgainstSpec(Elaboratable):
    """The single-element float max that boards/resources.py compares the lane with."""

    def __init__(self, fmt):
        self.fmt = fmt
        self.latency = 0
        self.a = Signal(fmt.bits)
        self.b = Signal(fmt.bits)

    def ports(self):
        return [self.a, self.b]

    def elaborate(self, platform):
        m = Module()
        m.submodules.plain = plain = PlainFloatMax(self.fmt.dtype)
        m.d.comb += [plain.a.eq(self.a), plain.b.eq(self.b)]
        m.d.comb += Assert(plain.result == spec_element(m, self.fmt, self.a, self.b))
        return m


@pytest.mark.parametrize("fmt", [f for f in ALL_FORMATS if f.is_float], ids=lambda f: f.dtype.name)
def test_resource_baseline_plain_float_max_equals_spec(fmt, tmp_path):
    """So that docs/resources.md compares the lane with a correct comparator."""
    assert_proved(PlainAgainstSpec(fmt), tmp_path, f"PlainFloatMax {fmt.dtype.name}")


def test_proof_finds_a_wrong_lane(tmp_path):
    fmt = FORMATS[DType.FLOAT]
    harness = Delayed(NaiveLane, 0, lambda m, a, b, dtype, minimum: spec_lane(m, fmt, a, b),
                      fmt)
    passed, _, _ = prove(harness, tmp_path)
    assert not passed, "the naive lane was 'proved' correct: the harness checks nothing"


def test_proof_finds_a_maximum_where_a_minimum_is_due(tmp_path):
    """The minimum's specification is not the maximum's: the lane in maximum mode fails it."""
    fmt = FORMATS[DType.FLOAT16]
    harness = Delayed(lambda n: LaneMax(latency=n), 0,
                      lambda m, a, b, dtype, minimum: spec_lane(m, fmt, a, b, True), fmt,
                      minimum=False)
    passed, _, _ = prove(harness, tmp_path)
    assert not passed, "a maximum was 'proved' a minimum: the minimum's harness checks nothing"
