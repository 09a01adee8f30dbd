"""Request checking: the wire contract's status rules as gateware.

The rules live in :mod:`maxaccel.contract.wire` (``RULES``) as predicates over a request's
fields, the quantities they imply and the device's capacities. Here they are mapped onto
registers: :func:`check_programs` turns each command's products into a program for the
bit-serial :class:`SaturatingMultiplier`, and :func:`verdict_logic` evaluates the predicates on
Amaranth values and picks the first status in ``STATUS_ORDER`` whose rule refuses. The command
engine runs the programs and reads the verdict.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.wire import STATUS_ORDER, Status

__all__ = ["SATURATED", "SaturatingMultiplier", "check_programs", "verdict_logic"]


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
