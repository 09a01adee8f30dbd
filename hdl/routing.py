"""The command engine's unit router: which unit a command's beats go to and come from.

A data command is served by one datapath unit. :data:`ROUTES` says which, and through which of
its streams; each unit configures itself from the parameter block (its ``configure``, beside
the unit), so adding a command touches the contract, its unit and one line here.
"""

from dataclasses import dataclass

from amaranth.hdl import Cat, Signal
from amaranth.lib.wiring import In

from maxaccel.contract.wire import Command, Status, command_rules

from .broadcast import BroadcastMax
from .pool import ChannelsLastPool
from .reduce import RunReducer
from .window_lanes import WindowLanes

__all__ = ["Route", "ROUTES", "UNIT_CLASSES", "UNIT_NAMES", "UnitRouter"]


@dataclass(frozen=True)
class Route:
    """Where a data command's beats go.

    Attributes
    ----------
    unit : str
        The engine's port for the unit (a key of :data:`UNIT_CLASSES`).
    into : str
        The unit's stream that takes the request's beats.
    results : str or None
        The unit's stream of results, or ``None`` if the command has no reply data.
    """

    unit: str
    into: str
    results: object


#: The unit and streams of each data command.
ROUTES = {
    Command.REDUCE: Route("reducer", "i", "o"),
    Command.POOL_CHANNELS_LAST: Route("pool", "i", "o"),
    Command.LOAD: Route("broadcast", "load", None),
    Command.MAX: Route("broadcast", "streamed", "output"),
    Command.MAX_POOL: Route("window", "i", "o"),
}

#: The unit class behind each of the engine's unit ports.
UNIT_CLASSES = {"reducer": RunReducer, "pool": ChannelsLastPool, "broadcast": BroadcastMax,
                "window": WindowLanes}

#: The name of each unit port's unit in :class:`~maxaccel.hdl.top.Core`'s ``units`` (and of
#: the engine's ``<name>_active`` outputs).
UNIT_NAMES = {"reducer": "reduce", "pool": "pool", "broadcast": "broadcast",
              "window": "window"}


class UnitRouter:
    """Routes a request's beats to its unit and the unit's results to the reply.

    Not a component: the command engine builds it into its own module. A command's route is
    chosen by a one-hot register (``route_<command>``), set from the command a cycle after the
    header, not by decoding the command on the way.

    Parameters
    ----------
    ports : dict of str to interface
        The engine's unit ports (a unit's signature, flipped) by port name, present units'
        and the stand-ins of absent ones.
    present : tuple of str
        The ports with a unit behind them.
    commands : tuple of Command
        The data commands the engine takes.

    Attributes
    ----------
    selected : dict of Command to Signal
        The one-hot route registers.
    """

    def __init__(self, ports, present, commands):
        self.ports, self.present, self.commands = ports, present, commands
        self.selected = {code: Signal(name=f"route_{code.name.lower()}") for code in commands}

    @staticmethod
    def stand_in(m, name, signature):
        """The port of an absent unit: local signals that take whatever is offered (the status
        rules never let a request with data reach it) and never answer."""
        port = signature.flip().create(path=(f"absent_{name}",))
        for member_name, member in signature.members.items():
            if member.is_signature and member.flow == In:
                m.d.comb += getattr(port, member_name).ready.eq(1)
        if "idle" in signature.members:
            m.d.comb += port.idle.eq(1)
        return port

    def _is(self, command, unit):
        return Cat(*(command == code for code, route in ROUTES.items()
                     if route.unit == unit)).any()

    def build(self, m, checks, streams, *, command, request, fields, active, packer, unpacker):
        """The router's logic.

        Parameters
        ----------
        m, checks, streams : Module
            The engine's module and its ``checks`` and ``streams`` parts.
        command : Signal
            The request's command code.
        request : RequestChecks
            The request's registered geometry, which the units configure from.
        fields : dict of Command to dict
            The parameter register's fields.
        active : dict of str to Signal
            The engine's ``<unit>_active`` outputs by unit port.
        packer, unpacker : RowPacker, RowUnpacker
        """
        m.d.sync += [flag.eq(self._is(command, unit)) for unit, flag in active.items()]
        m.d.sync += [flag.eq(command == code) for code, flag in self.selected.items()]
        for name, port in self.ports.items():
            if all(code in self.commands for code, route in ROUTES.items()
                   if route.unit == name):
                checks.d.comb += UNIT_CLASSES[name].configure(port, fields, request)
        for code, selected in self.selected.items():
            route = ROUTES[code]
            unit_class, port = UNIT_CLASSES[route.unit], self.ports[route.unit]
            into = getattr(port, route.into)
            if getattr(unit_class, "GATED_INPUT", False):
                with streams.If(selected):
                    streams.d.comb += into.payload.eq(packer.o.payload)
            else:
                streams.d.comb += into.payload.eq(packer.o.payload)
            with streams.If(selected):
                streams.d.comb += [into.valid.eq(packer.o.valid), packer.o.ready.eq(into.ready)]
            if route.results is None:
                continue
            results = getattr(port, route.results)
            with streams.If(selected):
                streams.d.comb += [unpacker.i.valid.eq(results.valid),
                                   results.ready.eq(unpacker.i.ready)]
                if hasattr(unit_class, "result_beat"):
                    streams.d.comb += unit_class.result_beat(port, unpacker.i.payload, request)
                else:
                    streams.d.comb += unpacker.i.payload.eq(results.payload)

    def start(self, command):
        """Statements of the cycle a request starts: every unit with a ``clear`` strobe whose
        command it is restarts."""
        return [port.clear.eq(self._is(command, name)) for name, port in self.ports.items()
                if hasattr(port, "clear")]

    def _commanded_unit(self):
        """The name of the one unit that takes a command beat (a ``command`` stream)."""
        unit, = (name for name, port in self.ports.items() if hasattr(port, "command"))
        return unit

    def takes_command(self, command):
        """The request's unit takes a command beat (its ``command`` stream) before the data."""
        return self._is(command, self._commanded_unit())

    @property
    def command_stream(self):
        """The ``command`` stream of the unit that has one."""
        return self.ports[self._commanded_unit()].command

    def settled(self):
        """Every present unit is done with the request (its ``settled``; a ``LOAD`` when its
        last beat is written, a ``MAX_POOL`` when its last window is out of the units)."""
        conditions = [UNIT_CLASSES[name].settled(self.ports[name], self._selected_of(name))
                      for name in self.present if hasattr(UNIT_CLASSES[name], "settled")]
        return Cat(*conditions).all()

    def _selected_of(self, unit):
        return Cat(*(flag for code, flag in self.selected.items()
                     if ROUTES[code].unit == unit)).any()

    def late_status(self, m, final):
        """The contract's late status of a command (``CommandRules.late``) when its unit found
        the problem (its ``error``) and nothing else failed (synchronous, once settled)."""
        for code, selected in self.selected.items():
            late = command_rules(code).late
            if late:
                (status, _), = late
                port = self.ports[ROUTES[code].unit]
                with m.If(selected & port.error & (final == Status.OK)):
                    m.d.sync += final.eq(status)
