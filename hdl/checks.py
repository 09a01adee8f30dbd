"""Request checking: the wire contract's status rules as gateware.

The rules live in :mod:`maxaccel.contract.wire` (``RULES``) as predicates over a request's
fields, the quantities they imply and the device's capacities. Here they are mapped onto
registers: :func:`check_programs` turns each command's products into a program for the
bit-serial :class:`SaturatingMultiplier`, and :func:`verdict_logic` evaluates the predicates on
Amaranth values and picks the first status in ``STATUS_ORDER`` whose rule refuses.
:class:`RequestChecks` puts them together for the command engine: the request's geometry, the
programs run step by step, and the verdict.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import FORMATS
from maxaccel.contract.wire import STATUS_ORDER, WINDOW_INDEX_BYTES, Status

__all__ = ["SATURATED", "SaturatingMultiplier", "RequestChecks", "check_programs",
           "verdict_logic"]


class _HardwareOps:
    """The helpers of the contract's status rules (``maxaccel.contract.wire.RULES``), on
    Amaranth values."""

    @staticmethod
    def any(conditions):
        return Cat(*conditions).any()

    mux = staticmethod(Mux)


#: A saturated quantity of the checks: above every bound a status rule compares one with.
SATURATED = (1 << 36) - 1


class SaturatingMultiplier(wiring.Component):
    """``a * b`` for checking lengths: bit-serial, saturating at ``2**width``.

    Shift and add over the bits of ``b``, least significant first: while bits of ``b`` remain,
    ``p += a`` if the bit is set, then ``a`` doubles. The whole unit is one ``width + 1``-bit
    adder and three registers, and it stops as soon as no bit of ``b`` is left, so small factors
    (the usual counts) take a few cycles. ``overflow`` is set when the product is
    ``2**width`` or more; ``a_overflow`` says ``a`` stands for such a value. A product of 0 is
    exact whatever ``a`` was. Chaining ``product``/``overflow`` into ``a``/``a_overflow``
    multiplies any number of factors, saturating.

    Parameters
    ----------
    width : int
        Width of ``a``, ``b`` and ``product``.

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
    ``busy`` is high for ``b.bit_length()`` cycles from the cycle after ``start`` (0 to
    ``width``).
    """

    def __init__(self, width=32):
        self.width = width
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
        width = self.width
        multiplicand = Signal(width)
        multiplicand_overflow = Signal()      # the doubled multiplicand is 2**width or more
        multiplier = Signal(width)
        total = Signal(width + 1)
        m.d.comb += [
            total.eq(self.product + multiplicand),
            self.busy.eq(multiplier != 0),
        ]
        with m.If(self.busy):
            m.d.sync += [
                multiplicand.eq(multiplicand << 1),
                multiplier.eq(multiplier >> 1),
            ]
            with m.If(multiplicand[-1]):
                m.d.sync += multiplicand_overflow.eq(1)
            with m.If(multiplier[0]):
                m.d.sync += self.product.eq(total[:width])
                with m.If(total[width] | multiplicand_overflow):
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


def check_programs(specs, factor):
    """The multiplier program of each command's products, in the contract's order.

    Each step is ``("load", (value, overflow))``, ``("mul", value)`` or ``("save", name)``: load
    the accumulator, multiply it by a factor, save it as the product ``name``. A product whose
    first factor is the product just saved goes on from the accumulator.

    Parameters
    ----------
    specs : dict of Command to CommandRules
    factor : callable(command, name) -> (value, overflow)
        A factor by name: a field, ``row_beats`` or an earlier product.
    """
    programs = {}
    for code, spec in specs.items():
        program, previous = [], None
        for name, factors in spec.products:
            if factors[0] != previous:
                program.append(("load", factor(code, factors[0])))
            program += [("mul", factor(code, f)[0]) for f in factors[1:]]
            program.append(("save", name))
            previous = name
        programs[code] = program
    return programs


def verdict_logic(m, command, supported, specs, fields, quantities, capacities):
    """The status of the current request: ``OK`` or the first status in ``STATUS_ORDER`` whose
    rule refuses (``UNSUPPORTED_DTYPE`` when not ``supported``). Combinational in ``m``.

    Parameters
    ----------
    command : Value
        The request's command code.
    specs : dict of Command to CommandRules
    fields : dict of Command to dict
        Each command's block fields, by name, as slices of the parameter register.
    quantities : callable(command) -> dict
        The derived quantities of a command's rules, as Amaranth values (saturating).
    capacities : Capacities
    """
    verdict = Signal(8)
    with m.Switch(command):
        for code, spec in specs.items():
            q = quantities(code)
            with m.Case(code):
                with m.If(~supported):
                    m.d.comb += verdict.eq(Status.UNSUPPORTED_DTYPE)
                for outcome in STATUS_ORDER[1:]:
                    refusing = [rule.refuses(fields[code], q, capacities, _HardwareOps)
                                for rule in spec.rules if rule.status == outcome]
                    if refusing:
                        with m.Elif(Cat(*refusing).any()):
                            m.d.comb += verdict.eq(outcome)
    return verdict


class RequestChecks:
    """The command engine's checks of a request, on registers: geometry, products, verdict.

    Once the parameter block is in, the states of :meth:`states` run in this order, every step
    a register (to keep the checks off the critical path):

    * ``GEOMETRY_DTYPE``, ``GEOMETRY_SHIFT``, ``GEOMETRY_ROW``, ``GEOMETRY_BEATS``: the element
      type (:attr:`dtype`, :attr:`supported`, :attr:`shift`), the row in bytes and in beats
      (:attr:`row_bytes`, :attr:`row_beats`, :attr:`last_nbytes`);
    * ``PRODUCTS`` and ``PRODUCT_WAIT``: the command's program of products
      (:func:`check_programs`), a step a cycle, a multiplication waiting for the bit-serial
      :class:`SaturatingMultiplier` (one cycle per significant bit of its second factor);
    * ``SCALE``: the data and reply lengths in bytes (:attr:`reply_bytes`), saturating;

    then :attr:`verdict` (combinational, in the ``checks`` module) holds the request's status.
    Not a component: the engine builds it into its own module with :meth:`build`.

    Parameters
    ----------
    specs : dict of Command to CommandRules
        The contract's checks of each command the engine takes.
    fields : dict of Command to dict
        Each command's block fields, by name, as slices of the parameter register.
    capacities : Capacities
        What the rules compare with.
    beat_bytes : int
        Bytes of a datapath beat, a power of two.

    Attributes
    ----------
    command : Signal(8)
        The request's command code (the engine sets it from the header).
    dtype : Signal(8)
    shift : Signal(2)
        log2 of the element size.
    row_beats : Signal(32)
    row_bytes : Signal(35)
    last_nbytes : Signal
        Bytes of a row's last beat.
    reply_bytes : Signal(36)
        Bytes of the reply's payload, saturating.
    verdict : Signal(8)
        ``OK`` or the first refusing status (valid after ``SCALE``).
    """

    def __init__(self, specs, fields, capacities, beat_bytes):
        self.specs, self.fields, self.capacities = specs, fields, capacities
        self.beat_bytes = beat_bytes
        self.command = Signal(8, name="command")
        self.dtype = Signal(8, name="dtype")
        self.supported = Signal(name="supported")
        self.shift = Signal(2, name="shift")
        self.row_elements = Signal(32, name="row_elements")
        self.row_bytes = Signal(35, name="row_bytes")
        self.row_beats = Signal(32, name="row_beats")
        self.last_nbytes = Signal(range(beat_bytes + 1), name="last_nbytes")
        self.payload_data = Signal(32, name="payload_data")    # bytes after the block
        self.data_bytes = Signal(36, name="data_bytes")
        self.reply_bytes = Signal(36, name="reply_bytes")
        # Products (value, overflow), one register pair per name the contract uses (commands
        # share a name's registers).
        names = dict.fromkeys(name for spec in specs.values() for name, _ in spec.products)
        self.products = {name: (Signal(32, name=f"{name}_product"),
                                Signal(name=f"{name}_overflow")) for name in names}
        self.accumulator = Signal(32, name="accumulator")
        self.accumulator_overflow = Signal(name="accumulator_overflow")
        self.multiplier = SaturatingMultiplier(32)
        self.programs = check_programs(specs, self.factor)
        self.product_step = Signal(range(max(len(p) for p in self.programs.values()) + 1),
                                   name="product_step")
        self.verdict = None

    def product(self, name):
        """A product's value (its overflow aside)."""
        return self.products[name][0]

    def factor(self, code, name):
        """(value, overflow) of a factor of ``code``'s products: a field, the row's beats or an
        earlier product."""
        if name == "row_beats":
            return self.row_beats, 0
        if name in dict(self.specs[code].products):
            return self.products[name]
        return self.fields[code][name], 0

    def request_rows(self, code):
        """The rows of ``code``'s request data (the packer's row count)."""
        return self.factor(code, self.specs[code].request_rows)[0]

    def _saturated(self, name):
        value, overflow = self.products[name]
        return Mux(overflow, SATURATED, value)

    def _quantities(self, code):
        q = {name: self._saturated(name) for name, _ in self.specs[code].products}
        q.update(row_bytes=self.row_bytes, row_beats=self.row_beats, data_bytes=self.data_bytes,
                 reply_bytes=self.reply_bytes, payload_data=self.payload_data)
        return q

    def build(self, m, checks):
        """The checks' logic: registers and the multiplier in ``m``, the verdict in ``checks``."""
        with m.Switch(self.dtype):
            for fmt in FORMATS.values():
                with m.Case(fmt.dtype):
                    m.d.sync += [self.supported.eq(1),
                                 self.shift.eq(fmt.nbytes.bit_length() - 1)]
            with m.Default():
                m.d.sync += [self.supported.eq(0), self.shift.eq(0)]
        m.submodules.multiplier = multiplier = self.multiplier
        m.d.comb += [multiplier.a.eq(self.accumulator),
                     multiplier.a_overflow.eq(self.accumulator_overflow)]
        self.verdict = verdict_logic(checks, self.command, self.supported, self.specs,
                                     self.fields, self._quantities, self.capacities)

    def states(self, m, then, *, length, needed):
        """The checks' states of the engine's FSM, from ``GEOMETRY_DTYPE`` (enter it when the
        block is in) to ``then`` (when :attr:`verdict` is valid). ``length`` is the request's
        payload length and ``needed`` its block's bytes."""
        with m.State("GEOMETRY_DTYPE"):
            with m.Switch(self.command):
                for code, fields in self.fields.items():
                    with m.Case(code):
                        m.d.sync += [self.dtype.eq(fields["dtype"]),
                                     self.row_elements.eq(fields[self.specs[code].row])]
            m.d.sync += self.payload_data.eq(length - needed)
            m.next = "GEOMETRY_SHIFT"
        with m.State("GEOMETRY_SHIFT"):
            m.next = "GEOMETRY_ROW"    # the dtype's decode is registered meanwhile
        with m.State("GEOMETRY_ROW"):
            m.d.sync += self.row_bytes.eq(self.row_elements << self.shift)
            m.next = "GEOMETRY_BEATS"
        with m.State("GEOMETRY_BEATS"):
            beat_bytes = self.beat_bytes
            m.d.sync += [
                self.row_beats.eq((self.row_bytes + beat_bytes - 1)
                                  >> (beat_bytes.bit_length() - 1)),
                self.last_nbytes.eq(((self.row_bytes - 1) & (beat_bytes - 1)) + 1),
                self.product_step.eq(0),
            ]
            m.next = "PRODUCTS"
        with m.State("PRODUCTS"):
            with m.Switch(self.command):
                for code, program in self.programs.items():
                    with m.Case(code):
                        with m.Switch(self.product_step):
                            for step, (op, operand) in enumerate(program):
                                with m.Case(step):
                                    self._product_step(m, op, operand,
                                                       last=step == len(program) - 1)
            m.d.sync += self.product_step.eq(self.product_step + 1)
        with m.State("PRODUCT_WAIT"):
            with m.If(~self.multiplier.busy):
                m.d.sync += [self.accumulator.eq(self.multiplier.product),
                             self.accumulator_overflow.eq(self.multiplier.overflow)]
                m.next = "PRODUCTS"
        with m.State("SCALE"):
            with m.Switch(self.command):
                for code, spec in self.specs.items():
                    with m.Case(code):
                        shift = self.shift if spec.offsets is None else Mux(
                            self.fields[code][spec.offsets] != 0,
                            WINDOW_INDEX_BYTES.bit_length() - 1, self.shift)
                        total = self._bytes(spec.reply, lambda n: n << shift) \
                            + self._bytes(spec.indices, lambda n: n * WINDOW_INDEX_BYTES)
                        m.d.sync += [self.data_bytes.eq(self._bytes(spec.data,
                                                                    lambda n: n << self.shift)),
                                     self.reply_bytes.eq(Mux(total >= SATURATED, SATURATED,
                                                             total))]
            m.next = then

    def _product_step(self, m, op, operand, *, last):
        """One step of a program, in state ``PRODUCTS``."""
        if op == "load":
            value, overflow = operand
            m.d.sync += [self.accumulator.eq(value), self.accumulator_overflow.eq(overflow)]
        elif op == "save":
            value, overflow = self.products[operand]
            m.d.sync += [value.eq(self.accumulator), overflow.eq(self.accumulator_overflow)]
            if last:   # every program ends with a save
                m.next = "SCALE"
        else:
            m.d.comb += [self.multiplier.start.eq(1), self.multiplier.b.eq(operand)]
            m.next = "PRODUCT_WAIT"

    def _bytes(self, name, to_bytes):
        """A product (of elements or indices) in bytes, saturating; 0 for ``None``."""
        if name is None:
            return 0
        value, overflow = self.products[name]
        return Mux(overflow, SATURATED, to_bytes(value))
