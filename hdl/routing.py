"""The command engine's unit router: which unit a command's beats go to and come from, and
how the engine drives each unit from a request.

A data command is served by one datapath unit. :data:`ROUTES` says which, and through which of
its streams; the unit's adapter here (:data:`ADAPTERS`) configures it from the parameter block
and the request's geometry, so adding a command touches the contract, its unit and this
module. The units themselves know nothing of the wire protocol: every field name, command
code and reply format a unit is driven by is here (``tests/test_layout.py`` checks that the
library units import nothing of ``maxaccel.contract.wire``).
"""

from dataclasses import dataclass

from amaranth.hdl import Cat, Const, Mux, Signal
from amaranth.lib.wiring import In

from maxaccel.contract.pooling import WINDOW_RANK
from maxaccel.contract.wire import (MAX_PAYLOAD, WINDOW_INDEX_BYTES, Command, Status,
                                    command_rules, window_fields)

from .broadcast import BroadcastOp

from .broadcast import BroadcastMax
from .pool import ChannelsLastPool
from .reduce import RunReducer
from .window_lanes import WindowLanes

__all__ = ["Route", "ROUTES", "UNIT_CLASSES", "UNIT_NAMES", "Adapter", "ADAPTERS",
           "POSITION_BITS", "UnitRouter"]

#: Bits of a ``REDUCE`` ``arg`` result (the reducer's ``position_bits``): a run is part of one
#: request's payload, so its byte offsets are below ``MAX_PAYLOAD``.
POSITION_BITS = (MAX_PAYLOAD - 1).bit_length()


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


def _element_type(holder, request):
    """``holder.dtype`` (a port, or the broadcast unit's ``config``) set to the request's, or
    nothing for a unit of a static element type (it has no ``dtype``)."""
    return [holder.dtype.eq(request.dtype)] if hasattr(holder, "dtype") else []


def _configure_reducer(port, fields, request):
    """A ``REDUCE``: the reducer's ``dtype``, ``minimum`` and ``arg`` (the block's fields; the
    status rules let only 0 and 1 through)."""
    reduce = fields[Command.REDUCE]
    return _element_type(port, request) + [port.minimum.eq(reduce["minimum"][0]),
                                            port.arg.eq(reduce["arg"][0])]


def _reducer_result_beat(port, beat, request):
    """The reply beat of a reducer's result: one element (or a u32 position with ``arg``), a
    row of its own."""
    return [beat.data[0].eq(port.o.payload),
            beat.nbytes.eq(Mux(port.arg, WINDOW_INDEX_BYTES, Const(1, 4) << request.shift)),
            beat.first.eq(1), beat.last.eq(1)]


def _configure_pool(port, fields, request):
    """A ``POOL_CHANNELS_LAST``: the pool's ``dtype``, ``minimum``, ``pixels`` and
    ``channels``."""
    pool = fields[Command.POOL_CHANNELS_LAST]
    return _element_type(port, request) + [
        port.minimum.eq(pool["minimum"][0]), port.pixels.eq(pool["pixels"]),
        port.channels.eq(pool["channels"])]


def _configure_broadcast(port, fields, request):
    """A ``LOAD`` or a ``MAX``: the broadcast unit's ``command`` payload from the ``LOAD`` block
    (or a ``RUN`` for a ``MAX``), its ``config`` from the ``MAX`` block and the request's
    geometry (``dtype``, ``row_beats``, ``last_nbytes``, the ``beats`` product)."""
    load, run, config = fields[Command.LOAD], fields[Command.MAX], port.config
    command = port.command.payload
    max_dims, max_operands = len(config.counts), len(config.operand)
    statements = _element_type(config, request) + [
        config.minimum.eq(run["minimum"][0]),
        config.operands.eq(run["operands"]),
        config.streamed.eq(run["streamed"]),
        config.row_beats.eq(request.row_beats),
        config.last_nbytes.eq(request.last_nbytes),
        *(config.counts[d].eq(run[f"counts[{d}]"]) for d in range(max_dims)),
    ]
    for k in range(max_operands):
        statements += [config.operand[k].base.eq(run[f"slot[{k}].base"]),
                       config.operand[k].splat.eq(run[f"slot[{k}].splat"][0])]
        statements += [config.operand[k].steps[d].eq(run[f"slot[{k}].steps[{d}]"])
                       for d in range(max_dims)]
    return statements + [
        command.op.eq(Mux(request.command == Command.LOAD, BroadcastOp.LOAD, BroadcastOp.RUN)),
        command.base.eq(load["base"]),
        command.count.eq(request.product("beats")),
        # Rows of one element are a splat operand's: stored repeated across their beat.
        command.fill.eq(load["row_length"] == 1),
    ]


def _configure_window(port, fields, request):
    """A ``MAX_POOL``: the window units' ``dtype``, ``group``, ``indices`` and each axis's
    configuration, the block's fields by their contract names
    (:func:`~maxaccel.contract.wire.window_fields`)."""
    pool = fields[Command.MAX_POOL]
    statements = _element_type(port, request) + [port.group.eq(pool["group"]),
                                                 port.indices.eq(pool["indices"][0])]
    for axis in range(WINDOW_RANK):
        for name, field in window_fields(axis).items():
            statements.append(getattr(port.config[axis], name).eq(pool[field]))
    return statements


@dataclass(frozen=True)
class Adapter:
    """How the command engine drives one unit port.

    Attributes
    ----------
    configure : callable
        ``configure(port, fields, request)``: the unit's configuration for its commands, a list
        of assignments (combinational, static while a command runs). ``port`` is the unit's
        signature, flipped (the engine's side); ``fields`` the parameter register's fields by
        command (:attr:`~maxaccel.hdl.parameters.ParameterRegister.fields`); ``request`` the
        request's registered geometry (:class:`~maxaccel.hdl.checks.RequestChecks`).
    result_beat : callable or None
        ``result_beat(port, beat, request)``: the reply beat (a ``beat_layout`` view, the
        unpacker's input payload) of a result, for a unit whose results are not beats
        already; ``None``: the results stream is connected as it is.
    settled : callable or None
        ``settled(port, selected)``: the engine may send a request's status (``selected``:
        the request is this unit's); ``None``: as soon as the packer is idle.
    gated_input : bool
        The unit's input payload is driven only during its commands, so its input logic holds
        still for every other command (which keeps the Python simulation of a whole core fast).
    """

    configure: object
    result_beat: object = None
    settled: object = None
    gated_input: bool = False


#: The adapter of each unit port.
ADAPTERS = {
    "reducer": Adapter(_configure_reducer, result_beat=_reducer_result_beat),
    "pool": Adapter(_configure_pool),
    # No command in progress: a LOAD is done when its last beat is written.
    "broadcast": Adapter(_configure_broadcast, settled=lambda port, selected: ~port.busy),
    # Its last window is out of the units, which then know whether a window held only
    # padding (the contract's late status, ``error``).
    "window": Adapter(_configure_window, settled=lambda port, selected: port.idle | ~selected,
                      gated_input=True),
}


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
                checks.d.comb += ADAPTERS[name].configure(port, fields, request)
        for code, selected in self.selected.items():
            route = ROUTES[code]
            adapter, port = ADAPTERS[route.unit], self.ports[route.unit]
            into = getattr(port, route.into)
            if adapter.gated_input:
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
                if adapter.result_beat is not None:
                    streams.d.comb += adapter.result_beat(port, unpacker.i.payload, request)
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
        conditions = [ADAPTERS[name].settled(self.ports[name], self._selected_of(name))
                      for name in self.present if ADAPTERS[name].settled is not None]
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
