"""Request checking: the wire contract's status rules as gateware.

The rules live in :mod:`maxaccel.contract.wire` (``RULES``) as predicates over a request's
fields, the quantities they imply and the device's capacities. Here they are mapped onto
registers: :func:`check_programs` turns each command's products into a program for the
bit-serial :class:`~maxaccel.hdl.kit.SaturatingMultiplier`, and :func:`verdict_logic`
evaluates the predicates on Amaranth values and picks the first status in ``STATUS_ORDER``
whose rule refuses.
:class:`RequestChecks` puts them together for the command engine: the request's geometry, the
programs run step by step, and the verdict.
"""

from amaranth.hdl import Cat, Module, Mux, Signal

from maxaccel.contract.dtypes import FORMATS
from maxaccel.contract.wire import STATUS_ORDER, WINDOW_INDEX_BYTES, Status, less_one_of

from .kit import SaturatingMultiplier, at_least

__all__ = ["SATURATED", "RequestChecks", "check_programs",
           "verdict_logic"]


class _HardwareOps:
    """The helpers of the contract's status rules (``maxaccel.contract.wire.RULES``), on
    Amaranth values."""

    @staticmethod
    def any(conditions):
        return Cat(*conditions).any()

    mux = staticmethod(Mux)

    @staticmethod
    def exceeds(value, bound):
        """``value > bound``; against a constant without a carry chain (:func:`at_least`)."""
        return at_least(value, bound + 1) if isinstance(bound, int) else value > bound


#: A saturated quantity of the checks: above every bound a status rule compares one with.
SATURATED = (1 << 36) - 1


def product_groups(products):
    """A command's products in groups that need nothing from one another: a product goes with
    every earlier product among its factors. Each group keeps the contract's order."""
    group_of, groups = {}, []
    for name, factors in products:
        joined = {group_of[f] for f in factors if f in group_of}
        group = [item for index in sorted(joined) for item in groups[index]]
        for index in sorted(joined, reverse=True):
            del groups[index]
        group.sort(key=products.index)
        groups.append(group + [(name, factors)])
        group_of = {n: index for index, g in enumerate(groups) for n, _ in g}
    return groups


def check_programs(specs, factor, chained):
    """The multiplier programs of each command's products, one per multiplier.

    With one multiplier its program takes the products in the contract's order. With more,
    the command's :func:`product_groups` are dealt out, largest first (by multiplications),
    each to the multiplier with the fewest so far, so the programs run side by side and no
    product waits for another multiplier's.

    A step is ``("multiply", first, second, save)``: start the multiplier on ``first``
    ((value, overflow) of a factor) and ``second`` ((value, less): a field, the row's beats or
    a field less one when ``less`` is 1, taken one from at the multiplier's input, so every
    such factor shares one decrement), and if ``save`` names a product,
    save the result as that product when it is ready (in the cycle that starts the next step,
    or in the program's end); or ``("copy", first, name)``: a product of one factor, saved at
    once. A product whose first factor is the product just computed starts from the
    multiplier's own product and overflow, so it waits for no save.

    Parameters
    ----------
    specs : dict of Command to CommandRules
    factor : callable(command, name) -> (value, overflow)
        A factor by name: a field, ``row_beats`` or an earlier product (for a field less one,
        the field itself).
    chained : list of (Value, Value)
        Each multiplier's product and overflow.

    Returns
    -------
    dict of Command to list of list of tuple
        Each command's programs, one per multiplier.
    """
    def multiplications(group):
        return sum(len(factors) - 1 for _, factors in group)

    programs = {}
    for code, spec in specs.items():
        if len(chained) == 1:
            shares = [spec.products]
        else:
            shares = [[] for _ in chained]
            for group in sorted(product_groups(spec.products), key=multiplications,
                                reverse=True):
                min(shares, key=multiplications).extend(group)
        programs[code] = [_program(code, share, factor, held_value)
                          for share, held_value in zip(shares, chained)]
    return programs


def _program(code, products, factor, chained):
    """One multiplier's steps for ``products`` (in order)."""
    program, held = [], None    # held: the product the multiplier holds
    for name, factors in products:
        first = chained if factors[0] == held else factor(code, factors[0])
        if len(factors) == 1:
            program.append(("copy", first, name))
            continue
        for i, second in enumerate(factors[1:]):
            field = less_one_of(second)
            program.append(("multiply", first if i == 0 else chained,
                            (factor(code, second if field is None else field)[0],
                             int(field is not None)),
                            name if i == len(factors) - 2 else None))
        held = name
    return program


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
    * ``PRODUCTS``: the command's programs of products (:func:`check_programs`), one per
      bit-serial :class:`SaturatingMultiplier`, side by side: a multiplication costs a cycle
      to start and one per ``digit_bits`` significant bits of its second factor, a product of
      one factor a cycle, and a program's end (the last save) one more;
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
    multipliers : int
        :class:`SaturatingMultiplier` s that run the programs side by side.
    digit_bits : int
        Their bits of the second factor a cycle.
    dtypes : collection of int, optional
        The element type codes the units serve (default every one of
        :data:`~maxaccel.contract.dtypes.FORMATS`); the others are ``UNSUPPORTED_DTYPE``.

    Attributes
    ----------
    command : Signal(8)
        The request's command code (the engine sets it from the header).
    payload_data : Signal(32)
        Bytes of the request's payload after its block (the engine sets it from the header).
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

    def __init__(self, specs, fields, capacities, beat_bytes, *, multipliers=1, digit_bits=1,
                 dtypes=None):
        self.specs, self.fields, self.capacities = specs, fields, capacities
        self.formats = [fmt for code, fmt in FORMATS.items()
                        if dtypes is None or int(code) in dtypes]
        self.beat_bytes = beat_bytes
        self.command = Signal(8, name="command")
        self.dtype = Signal(8, name="dtype")
        self.supported = Signal(name="supported")
        self.shift = Signal(2, name="shift")
        self.row_bytes = Signal(35, name="row_bytes")
        self.row_beats = Signal(32, name="row_beats")
        self.last_nbytes = Signal(range(beat_bytes + 1), name="last_nbytes")
        self.payload_data = Signal(32, name="payload_data")
        self.data_bytes = Signal(36, name="data_bytes")
        self.reply_bytes = Signal(36, name="reply_bytes")
        # Products (value, overflow), one register pair per name the contract uses (commands
        # share a name's registers).
        names = dict.fromkeys(name for spec in specs.values() for name, _ in spec.products)
        self.products = {name: (Signal(32, name=f"{name}_product"),
                                Signal(name=f"{name}_overflow")) for name in names}
        self.multipliers = [SaturatingMultiplier(32, digit_bits) for _ in range(multipliers)]
        self.programs = check_programs(specs, self.factor,
                                       [(unit.product, unit.overflow) for unit in self.multipliers])
        # Each multiplier's second factor before and after the decrement of a field less one.
        self._second = [Signal(32, name=f"second_{i}") for i in range(multipliers)]
        self._second_less = [Signal(name=f"second_less_{i}") for i in range(multipliers)]
        longest = max(len(p) for programs in self.programs.values() for p in programs)
        self.product_steps = [Signal(range(longest + 2), name=f"product_step_{i}")
                              for i in range(multipliers)]
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
            for fmt in self.formats:
                with m.Case(fmt.dtype):
                    m.d.sync += [self.supported.eq(1),
                                 self.shift.eq(fmt.nbytes.bit_length() - 1)]
            with m.Default():
                m.d.sync += [self.supported.eq(0), self.shift.eq(0)]
        for i, unit in enumerate(self.multipliers):
            m.submodules[f"multiplier_{i}"] = unit
            m.d.comb += unit.b.eq(self._second[i] - self._second_less[i])
        self.verdict = verdict_logic(checks, self.command, self.supported, self.specs,
                                     self.fields, self._quantities, self.capacities)

    def states(self, m, then):
        """The checks' states of the engine's FSM, from ``GEOMETRY_DTYPE`` (enter it when the
        block is in, :attr:`command` and :attr:`payload_data` set) to ``then`` (when
        :attr:`verdict` is valid)."""
        with m.State("GEOMETRY_DTYPE"):
            with m.Switch(self.command):
                for code, fields in self.fields.items():
                    with m.Case(code):
                        m.d.sync += self.dtype.eq(fields["dtype"])
            m.next = "GEOMETRY_SHIFT"
        with m.State("GEOMETRY_SHIFT"):
            m.next = "GEOMETRY_ROW"    # the dtype's decode is registered meanwhile
        with m.State("GEOMETRY_ROW"):
            with m.Switch(self.command):
                for code, fields in self.fields.items():
                    with m.Case(code):
                        m.d.sync += self.row_bytes.eq(fields[self.specs[code].row]
                                                      << self.shift)
            m.next = "GEOMETRY_BEATS"
        with m.State("GEOMETRY_BEATS"):
            beat_bytes = self.beat_bytes
            m.d.sync += [
                self.row_beats.eq((self.row_bytes + beat_bytes - 1)
                                  >> (beat_bytes.bit_length() - 1)),
                self.last_nbytes.eq(((self.row_bytes - 1) & (beat_bytes - 1)) + 1),
                *(counter.eq(0) for counter in self.product_steps),
            ]
            m.next = "PRODUCTS"
        with m.State("PRODUCTS"):
            with m.Switch(self.command):
                for code, programs in self.programs.items():
                    with m.Case(code):
                        ended = []
                        for index, (program, unit, counter) in enumerate(
                                zip(programs, self.multipliers, self.product_steps)):
                            with m.If(~unit.busy & (counter <= len(program))):
                                with m.Switch(counter):
                                    for step in range(len(program) + 1):
                                        with m.Case(step):
                                            self._product_step(m, unit, program, step,
                                                               index)
                                m.d.sync += counter.eq(counter + 1)
                            ended.append((counter == len(program) + 1)
                                         | ((counter == len(program)) & ~unit.busy))
                        with m.If(Cat(*ended).all()):
                            m.next = "SCALE"
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
                                     self.reply_bytes.eq(Mux(at_least(total, SATURATED),
                                                             SATURATED, total))]
            m.next = then

    def _product_step(self, m, unit, program, step, index):
        """Step ``step`` of a multiplier's program (or its end, ``len(program)``), in state
        ``PRODUCTS`` once ``unit`` is idle: the save the step before left, then the step."""
        if step and program[step - 1][0] == "multiply" and program[step - 1][3] is not None:
            value, overflow = self.products[program[step - 1][3]]
            m.d.sync += [value.eq(unit.product), overflow.eq(unit.overflow)]
        if step == len(program):
            return
        op, first, *rest = program[step]
        if op == "copy":
            value, overflow = self.products[rest[0]]
            m.d.sync += [value.eq(first[0]), overflow.eq(first[1])]
        else:
            second, less = rest[0]
            m.d.comb += [unit.start.eq(1), unit.a.eq(first[0]), unit.a_overflow.eq(first[1]),
                         self._second[index].eq(second), self._second_less[index].eq(less)]

    def _bytes(self, name, to_bytes):
        """A product (of elements or indices) in bytes, saturating; 0 for ``None``."""
        if name is None:
            return 0
        value, overflow = self.products[name]
        return Mux(overflow, SATURATED, to_bytes(value))
