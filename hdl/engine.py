"""The command engine: wire-protocol frames in, datapath commands, reply frames out.

The engine speaks the protocol of ``docs/protocol.md`` on a pair of byte streams, so it is the
same behind a UART, a PCIe stream or a simulator. Everything the protocol fixes (magic, command
and status codes, parameter blocks and their field names, the status rules, the CRC, the
``IDENTIFY`` and ``COUNTERS`` replies) comes from :mod:`maxaccel.contract.wire`, so host and
gateware agree by construction. Its parts, each in a module of its own:

* :mod:`~maxaccel.hdl.framing` -- :class:`FrameReceiver`, :class:`FrameTransmitter`;
* :mod:`~maxaccel.hdl.packing` -- :class:`RowPacker`, :class:`RowUnpacker`;
* :mod:`~maxaccel.hdl.parameters` -- :class:`ParameterRegister`, the parameter block;
* :mod:`~maxaccel.hdl.checks` -- :class:`RequestChecks`, the status rules on registers, their
  products computed by :class:`~maxaccel.hdl.kit.SaturatingMultiplier`;
* :mod:`~maxaccel.hdl.routing` -- :class:`UnitRouter`, which unit a command's beats go to
  (``ROUTES``), and each unit's adapter (``ADAPTERS``: its configuration from the block, its
  reply beats, when it has settled);
* here, :class:`CommandEngine` -- the control FSM that ties them together.

See ``docs/architecture.md``, "Command engine".
"""

import dataclasses
from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import FORMATS
from maxaccel.contract.wire import (COUNTERS, DATA_COMMANDS, MAX_STREAMED, VERSION, Capacities,
                                    Command, Identity, Status, WINDOW_NARROW_FIELDS,
                                    command_rules, parameter_block, takes)

from .broadcast import BroadcastMax
from .checks import RequestChecks
from .framing import FrameReceiver, FrameTransmitter
from .kit import Checked, at_least
from .linkword import check_link_bytes, link_signature, one_byte, word_fields
from .packing import RowPacker, RowUnpacker
from .parameters import PARAMETER_BYTES, ParameterRegister
from .pool import ChannelsLastPool
from .reduce import RunReducer
from .routing import POSITION_BITS, UNIT_NAMES, UnitRouter
from .window_lanes import WindowLanes
from .lane import LANE_BYTES

__all__ = ["CommandEngine", "engine_identity"]


def _present(reducer, pool, broadcast, window):
    """The units given (or their signatures), by port name, as signatures; ``ValueError``
    for none."""
    units = {"reducer": reducer, "pool": pool, "broadcast": broadcast, "window": window}
    present = {name: getattr(unit, "signature", unit) for name, unit in units.items() if unit}
    if not present:
        raise ValueError("a command engine needs at least one unit")
    return present


def _lanes(present):
    """The lanes the units (signatures, by port name) share: the first one's."""
    return next(iter(present.values())).lanes


def _broadcast_limits(broadcast):
    """``(depth, max_dims, max_operands, max_count)`` of the broadcast unit (a signature), or
    of none: one dimension and one operand, so the MAX block stays small, and no buffer."""
    if broadcast is None:
        return 0, 1, 1, 0
    return broadcast.depth, broadcast.max_dims, broadcast.max_operands, broadcast.max_count


def _element_types(present):
    """The element type codes the units (signatures, by port name) serve: one static
    ``dtype`` they share, else every one of :data:`FORMATS`."""
    static = {unit.dtype for unit in present.values()}
    if len(static) == 1 and None not in static:
        return frozenset({int(static.pop())})
    return frozenset(int(code) for code in FORMATS)


def engine_identity(*, reducer=None, pool=None, broadcast=None, window=None, clock_hz,
                    frame_timeout_cycles=None, link_bytes=1, serial_crc=False):
    """What ``IDENTIFY`` of a :class:`CommandEngine` with these units (or their signatures)
    reports, without building one."""
    present = _present(reducer, pool, broadcast, window)
    pool, window, reducer = (present.get(name) for name in ("pool", "window", "reducer"))
    depth, max_dims, max_operands, _ = _broadcast_limits(present.get("broadcast"))
    if frame_timeout_cycles is None:
        frame_timeout_cycles = max(clock_hz // 100, 1)
    return Identity(
        version=VERSION, lanes=_lanes(present),
        dtypes=_element_types(present), replay_depth=depth,
        max_dims=max_dims, max_operands=max_operands,
        pool_channels=(pool.capacity_bytes if pool else 0) // LANE_BYTES, clock_hz=clock_hz,
        frame_timeout_cycles=frame_timeout_cycles, reduce_lanes=reducer.lanes if reducer else 0,
        **(window.limits if window else {}))


def _engine_rules(code, max_dims, identity):
    """The :class:`CommandRules` the engine checks ``code`` by: the contract's, but for a
    window unit without Indices the ``MAX_POOL`` reply counts no Indices. Its rules refuse
    ``indices`` 1 there (``TOO_LARGE``, as any longer reply would be), and none of an earlier
    status reads the reply's length, so the verdicts are the contract's."""
    spec = command_rules(code, max_dims)
    if code != Command.MAX_POOL or identity.window_indices:
        return spec
    return dataclasses.replace(spec, indices=None, products=tuple(
        (name, factors) for name, factors in spec.products if name != spec.indices))


class CommandEngine(Checked, wiring.Component):
    """Request frames in, datapath commands, reply frames out (``docs/protocol.md``).

    The engine is transport-agnostic: a byte stream in, a byte stream out. It drives up to four
    datapath units through ports wired up by :class:`~maxaccel.hdl.top.Core`; it takes the
    units themselves (not elaborated here) only to read their capacities and layouts.

    A request goes through these phases (states of the control FSM):

    1. **Header.** :class:`FrameReceiver` hunts for a header that passes its check.
    2. **Parameters.** The command's parameter block (``parameter_block`` of
       :mod:`maxaccel.contract.wire`) goes into the :class:`ParameterRegister`, its fields only
       (the padding that aligns the data is counted, not stored). A payload shorter than the
       block is ``BAD_LENGTH``, an unknown command ``BAD_COMMAND`` (so is the command of a
       unit the core lacks: ``LOAD`` and ``MAX`` without a broadcast unit,
       ``POOL_CHANNELS_LAST`` without a pool, ``MAX_POOL`` without a window unit); both are
       decided from the header.
    3. **Checks.** :class:`RequestChecks` computes the row geometry and the products the
       contract's rules name (``command_rules``: the data length, the reply length, ...) with
       a bit-serial multiplier, then one cycle decides the status: the first of
       ``STATUS_ORDER`` whose rule refuses (the table in ``docs/protocol.md``, "What each
       command refuses", is generated from the same rules). The input is stalled meanwhile.
    4. **Streaming.** If the command is accepted, the reply header (with the length the
       parameters imply) is sent at once, the :class:`UnitRouter` starts the command's unit
       (``ROUTES``), the remaining payload is repacked into beats by :class:`RowPacker` and
       the unit's results are serialised by :class:`RowUnpacker` into the reply payload while
       the request is still arriving.
       A refused command's remaining payload is drained and discarded.
    5. **Trailer.** When the request's trailer has been checked, the reply's status is decided:
       ``TIMEOUT`` if the request stopped arriving (its reply, if started, is padded with zero
       bytes to its declared length, and the packer, the unpacker and the units are reset by
       ``abort``), else ``CRC_ERROR`` if the frame check failed, else the status of step 3,
       unless the unit found a late problem (``CommandRules.late``: a ``MAX_POOL`` window of
       padding only), which is then the status once the unit has settled. A
       reply that had not started has an empty payload unless it is an ``IDENTIFY`` or
       ``COUNTERS`` reply with status ``OK``. After a ``LOAD`` the status waits for the last
       beat to be written.
    6. The engine waits for the reply's last byte, then hunts for the next header.

    One request is handled at a time; every request whose header passes its check gets exactly
    one reply, whatever its content, and no input stops the engine from hunting again.

    Parameters
    ----------
    reducer : RunReducer, its Signature, or None
    pool : ChannelsLastPool, its Signature, or None
    broadcast : BroadcastMax, its Signature, or None
    window : WindowLanes, its Signature, or None
        The units, or their signatures (which carry their parameters): the engine reads their
        capacities and signatures only (it builds and elaborates no unit). They must have the
        same ``lanes``, a power of two; at least one is given. Without a unit the engine
        reports its capacity as 0 in ``IDENTIFY`` (the reducer's: ``reduce_lanes``), takes
        none of its commands (``takes``), so it answers them ``BAD_COMMAND``, and has no port
        for it. The units share one ``dtype``: None (every element type, chosen by each
        request) or a static one, which ``IDENTIFY`` then reports as the only type and the
        checks refuse every other (``UNSUPPORTED_DTYPE``).
    clock_hz : int
        Clock frequency reported by ``IDENTIFY``.
    frame_timeout_cycles : int, optional
        Idle cycles after which a partial request is abandoned; default ``clock_hz // 100``
        (10 ms).
    link_bytes : int
        Bytes per cycle of ``i`` and ``o`` (:data:`~maxaccel.hdl.linkword.LINK_WIDTHS`, at
        most ``8 * lanes``): 1 behind a UART, more behind a wide stream such as PCIe or the
        compiled virtual board.
    serial_crc : bool
        The frame checks' CRCs a bit a cycle (:class:`~maxaccel.hdl.linkword.SerialCRC`, a
        byte link only): about 200 LUT4s fewer on the iCE40, and every byte in and out of a
        frame takes eight cycles, for a link no faster (a UART).

    Attributes
    ----------
    identity : Identity
        What ``IDENTIFY`` reports.
    max_parameters : struct.Struct
        The ``MAX`` parameter block of this engine (``MaxParameters.layout(max_dims,
        max_operands)``).

    Ports
    -----
    i : In(link_signature(link_bytes))
        Request bytes from the link.
    o : Out(link_signature(link_bytes))
        Reply bytes to the link.
    uart_framing_errors, uart_overruns : In(32)
        Link error counters reported by ``COUNTERS`` (tie to 0 without a UART).
    abort : Out(1)
        One-cycle reset strobe for the units when a started request is abandoned.
    reduce_active, pool_active, broadcast_active, window_active : Out(1)
        The current command is the unit's (registered): a clock enable for the unit, which
        holds still between its commands (and costs the simulator little meanwhile).
    idle : Out(1)
        No request or reply in progress and no header candidate pending: without new input
        the engine will never send another byte.
    reducer : In(reducer.signature)
        Only with a run reducer.
    pool : In(pool.signature)
        Only with a pool unit.
    broadcast : In(broadcast.signature)
        Only with a broadcast unit.
    window : In(window.signature)
        Only with a windowed pooling unit. Each is the unit's own signature, flipped: the core
        connects a unit to the engine with one ``wiring.connect``.

    Latency and throughput
    ----------------------
    ``link_bytes`` link bytes per cycle in and out for the data, whatever the command and
    dtype (the units take a beat of ``8 * lanes`` bytes per cycle, so they are never the
    bottleneck); the parameter block up to :data:`~maxaccel.hdl.parameters.PARAMETER_BYTES`
    bytes per cycle; headers, trailers and word replies a byte per cycle. A payload row that
    does not start on a link word boundary costs a word per beat more. Per request the input
    stalls 15 cycles at the header (its check and the handshake), and a data command's checks
    stall it once more after the parameter block: 9 cycles plus the products' programs
    (:class:`~maxaccel.hdl.checks.RequestChecks`: a multiplication costs a cycle plus one per
    bit of its second factor, per two bits on two multipliers side by side on a wide link).
    With small factors behind a byte link that is 14 cycles for a REDUCE, 19 for a LOAD, 23 for
    a POOL_CHANNELS_LAST, 18 for a MAX with 4 dimensions. The reply header's first byte goes
    out in the cycle the first data byte is taken. A unit's result bytes follow the beat that
    completes them by the unit's latency plus 2 cycles (packer and unpacker registers). The
    reply trailer starts 3 to 8 cycles after the request's last byte, or right after the
    reply's last payload byte if that is later (an output beat's bytes leave one per cycle, so
    a MAX reply trails its request by about ``8 * lanes`` cycles).
    """

    @classmethod
    def check_parameters(cls, *, reducer=None, pool=None, broadcast=None, window=None, clock_hz,
                         frame_timeout_cycles=None, link_bytes=1, serial_crc=False):
        """``ValueError`` unless the units have the same ``lanes`` and ``link_bytes`` fits
        them."""
        present = _present(reducer, pool, broadcast, window)
        lanes = _lanes(present)
        if any(unit.lanes != lanes for unit in present.values()):
            raise ValueError("the units must have the same lanes, not "
                             + ", ".join(f"{name} {unit.lanes}"
                                         for name, unit in present.items()))
        check_link_bytes(link_bytes, lanes=lanes)
        FrameTransmitter.check_parameters(link_bytes, serial_crc)
        static = {name: unit.dtype for name, unit in present.items()}
        if len(set(static.values())) > 1:
            raise ValueError("the units must have the same dtype (one static element type, or "
                             "None: every type chosen at run time), not "
                             + ", ".join(f"{name} {getattr(d, 'name', d)}"
                                         for name, d in static.items()))

    def __init__(self, *, reducer=None, pool=None, broadcast=None, window=None, clock_hz,
                 frame_timeout_cycles=None, link_bytes=1, serial_crc=False):
        present = _present(reducer, pool, broadcast, window)
        lanes = _lanes(present)
        if frame_timeout_cycles is None:
            frame_timeout_cycles = max(clock_hz // 100, 1)
        self.lanes = lanes
        self.link_bytes = link_bytes
        self.serial_crc = serial_crc
        self.units = tuple(present)
        reducer, pool, broadcast, window = (present.get(name) for name in
                                            ("reducer", "pool", "broadcast", "window"))
        self.pool_capacity_bytes = pool.capacity_bytes if pool else 0
        self.depth, self.max_dims, self.max_operands, self.max_count = _broadcast_limits(
            broadcast)
        self.clock_hz = clock_hz
        self.frame_timeout_cycles = frame_timeout_cycles
        self.max_parameters = parameter_block(Command.MAX, self.max_dims, self.max_operands)
        self.identity = engine_identity(**present, clock_hz=clock_hz,
                                        frame_timeout_cycles=frame_timeout_cycles)
        #: The data commands this engine takes: those of its units (``takes``).
        self.commands = tuple(code for code in DATA_COMMANDS if takes(code, self.identity))
        # The signatures of the units' ports; an absent unit's stands in inside the engine.
        self._unit_signatures = {
            "reducer": reducer or RunReducer.Signature(lanes, "shallow",
                                                       position_bits=POSITION_BITS),
            "pool": pool or ChannelsLastPool.Signature(lanes, 1),
            "broadcast": broadcast or BroadcastMax.Signature(
                lanes, 2, self.max_dims, self.max_operands, max_count=1,
                max_streamed=MAX_STREAMED),
            "window": window or WindowLanes.Signature(lanes, 1),
        }
        super().__init__({
            "i": In(link_signature(link_bytes)),
            "o": Out(link_signature(link_bytes)),
            "uart_framing_errors": In(32),
            "uart_overruns": In(32),
            "abort": Out(1),
            "idle": Out(1),
            "reduce_active": Out(1),
            "pool_active": Out(1),
            "broadcast_active": Out(1),
            "window_active": Out(1),
            **{name: In(self._unit_signatures[name]) for name in present},
        })

    def elaborate(self, platform):
        m = Module()
        ports = {name: getattr(self, name) if name in self.units
                 else UnitRouter.stand_in(m, name, signature)
                 for name, signature in self._unit_signatures.items()}
        parts = self._parts(m, ports)
        self._payload_paths(m, parts)
        with m.FSM() as fsm:
            self._request_states(m, parts)
            self._reply_states(m, parts)
        m.d.comb += self.idle.eq(fsm.ongoing("IDLE") & parts.receiver.hunting
                                 & parts.transmitter.idle)
        return m

    def _parts(self, m, ports):
        """The engine's parts and registers (a namespace): the framing, the packer and the
        unpacker, the parameter register, the request checks, the unit router, and the
        registers of a request's header and reply."""
        lanes, max_dims, max_operands = self.lanes, self.max_dims, self.max_operands
        beat_bytes = LANE_BYTES * lanes
        width = self.link_bytes
        m.submodules.receiver = receiver = FrameReceiver(self.frame_timeout_cycles, width,
                                                         serial_crc=self.serial_crc)
        m.submodules.transmitter = transmitter = FrameTransmitter(width,
                                                                  serial_crc=self.serial_crc)
        packer, unpacker = RowPacker(lanes, width), RowUnpacker(lanes, width)
        m.submodules.packer = ResetInserter(self.abort)(packer)
        m.submodules.unpacker = ResetInserter(self.abort)(unpacker)

        # The comb logic is split over three fragments so that the Python simulator, which
        # re-runs a fragment's whole comb logic whenever one of its inputs changes, re-runs
        # only the small stream routing for every byte: `checks` (verdicts and unit
        # configuration) changes only while a parameter block comes in, `m` (the control FSM)
        # only between phases.
        m.submodules.checks = checks = Module()
        m.submodules.streams = streams = Module()

        # The three parts: the parameter register, the request checks, the unit router. MAX_POOL
        # is a command only of a core with the window unit (the contract: a device without one
        # answers BAD_COMMAND), so a small core stores no window block.
        commands = self.commands
        parameters = ParameterRegister({code: parameter_block(code, max_dims, max_operands)
                                        for code in commands}, min(width, PARAMETER_BYTES),
                                       narrow={Command.MAX_POOL: WINDOW_NARROW_FIELDS}
                                       if Command.MAX_POOL in commands else None,
                                       narrow_max=self.identity.window_field_max)
        # On a wide link the checks' cycles are a request's fixed cost, so they get two
        # multipliers of two bits a cycle; behind a byte link (a UART's pace) one of one bit.
        request = RequestChecks({code: _engine_rules(code, max_dims, self.identity)
                                 for code in commands},
                                parameters.fields, Capacities.of(self.identity), beat_bytes,
                                multipliers=2 if width > 1 else 1,
                                digit_bits=2 if width > 1 else 1,
                                dtypes=self.identity.dtypes)
        command = request.command
        request.build(m, checks)
        router = UnitRouter(ports, self.units, commands)
        router.build(m, checks, streams, command=command, request=request,
                     fields=parameters.fields, packer=packer, unpacker=unpacker,
                     active={name: getattr(self, f"{UNIT_NAMES[name]}_active")
                             for name in ports})

        parts = SimpleNamespace(
            receiver=receiver, transmitter=transmitter, packer=packer, unpacker=unpacker,
            streams=streams, parameters=parameters, request=request, router=router,
            command=command,
            seq=Signal(8, name="seq"), status=Signal(8, name="status"),
            final=Signal(8, name="final"), pad=Signal(name="pad"))
        # The checks' registers hold the request's geometry until the next request's checks.
        with m.Switch(command):
            for code in commands:
                with m.Case(code):
                    m.d.comb += packer.rows.eq(request.request_rows(code))
        m.d.comb += packer.row_bytes.eq(request.row_bytes)

        parts.reply_word = self._reply_source(m, streams, command=command, receiver=receiver,
                                              transmitter=transmitter, unpacker=unpacker)
        streams.d.comb += transmitter.pad.eq(parts.pad)

        wiring.connect(streams, wiring.flipped(self.i), receiver.i)
        wiring.connect(streams, transmitter.o, wiring.flipped(self.o))
        return parts

    def _payload_paths(self, m, parts):
        """Where the request payload goes, by phase: into the parameter register, to the
        packer, or discarded (``parts.taking_parameters``, ``streaming``, ``draining``)."""
        receiver, packer, parameters = parts.receiver, parts.packer, parts.parameters
        width = self.link_bytes
        taking_parameters, streaming, draining = Signal(), Signal(), Signal()
        parts.streams.d.comb += [
            receiver.payload.ready.eq(taking_parameters | draining
                                      | (streaming & packer.i.ready)),
            receiver.payload_limit.eq(Mux(taking_parameters, parameters.limit(),
                                          Mux(streaming, packer.limit, width))),
            packer.i.valid.eq(streaming & receiver.payload.valid),
            packer.i.payload.eq(receiver.payload.payload),
        ]
        parts.payload_data, parts.payload_count = word_fields(receiver.payload.payload, width)
        parts.taking_parameters, parts.streaming = taking_parameters, streaming
        parts.draining = draining

    def _take_trailer(self, m, parts, then):
        """Accept the receiver's trailer and decide the final status; ``then(outcome)``."""
        receiver = parts.receiver
        m.d.comb += receiver.trailer.ready.eq(1)
        with m.If(receiver.trailer.valid):
            outcome = receiver.trailer.payload
            m.d.sync += parts.final.eq(Mux(outcome.timeout, Status.TIMEOUT,
                                           Mux(outcome.intact, parts.status,
                                               Status.CRC_ERROR)))
            then(outcome)

    def _request_states(self, m, parts):
        """The control FSM's states that take a request: the header, the parameter block, the
        checks, the verdict."""
        receiver, parameters, request = parts.receiver, parts.parameters, parts.request
        command, status = parts.command, parts.status

        def to_reply(outcome):
            m.next = "REPLY"

        with m.State("IDLE"):
            m.d.comb += receiver.header.ready.eq(1)
            m.d.sync += parts.pad.eq(0)
            with m.If(receiver.header.valid):
                header = receiver.header.payload
                m.d.sync += [
                    command.eq(header.command),
                    parts.seq.eq(header.seq),
                    status.eq(Status.OK),
                ]
                parameters.clear(m)
                m.next = "DRAIN"
                with m.Switch(header.command):
                    with m.Case(Command.IDENTIFY, Command.COUNTERS):
                        with m.If(header.length != 0):
                            m.d.sync += status.eq(Status.BAD_LENGTH)
                    for code, block in parameters.blocks.items():
                        with m.Case(code):
                            parameters.expect(m, code)
                            m.d.sync += request.payload_data.eq(header.length - block.size)
                            with m.If(~at_least(header.length, block.size)):
                                m.d.sync += status.eq(Status.BAD_LENGTH)
                            with m.Else():
                                m.next = "PARAMS"
                    with m.Default():
                        m.d.sync += status.eq(Status.BAD_COMMAND)

        with m.State("PARAMS"):
            m.d.comb += parts.taking_parameters.eq(1)
            with m.If(receiver.payload.valid):
                with m.If(parameters.take(m, parts.payload_data, parts.payload_count)):
                    m.next = "GEOMETRY_DTYPE"
            self._take_trailer(m, parts, to_reply)   # only a timeout ends a frame here

        request.states(m, then="VALIDATE")

        with m.State("VALIDATE"):
            m.d.sync += status.eq(request.verdict)
            m.next = "DECIDE"

        with m.State("DECIDE"):
            with m.If(status == Status.OK):
                m.next = "START"
            with m.Else():
                m.next = "DRAIN"

    def _reply_states(self, m, parts):
        """The control FSM's states that answer a request: the reply header, the data through
        the unit, the status, and the refused request's drain."""
        transmitter, packer, router = parts.transmitter, parts.packer, parts.router
        command = parts.command

        def to_reply(outcome):
            m.next = "REPLY"

        with m.State("START"):
            m.d.comb += [
                transmitter.start.valid.eq(1),
                transmitter.start.payload.command.eq(command),
                transmitter.start.payload.seq.eq(parts.seq),
                transmitter.start.payload.length.eq(parts.request.reply_bytes),
            ]
            with m.If(transmitter.start.ready):
                m.d.comb += [packer.start.eq(1), *router.start(command)]
                with m.If(router.takes_command(command)):
                    m.next = "COMMAND"
                with m.Else():
                    m.next = "STREAM"

        with m.State("COMMAND"):
            unit_command = router.command_stream
            m.d.comb += [parts.streaming.eq(1), unit_command.valid.eq(1)]
            with m.If(unit_command.ready):
                m.next = "STREAM"

        with m.State("STREAM"):
            m.d.comb += parts.streaming.eq(1)

            def streamed_outcome(outcome):
                with m.If(outcome.timeout):
                    m.next = "ABORT"
                with m.Else():
                    m.next = "SETTLE"
            self._take_trailer(m, parts, streamed_outcome)

        with m.State("SETTLE"):
            with m.If(packer.idle & router.settled()):
                router.late_status(m, parts.final)
                m.next = "STATUS"

        with m.State("ABORT"):
            m.d.comb += self.abort.eq(1)
            m.d.sync += parts.pad.eq(1)
            m.next = "STATUS"

        with m.State("DRAIN"):
            m.d.comb += parts.draining.eq(1)
            self._take_trailer(m, parts, to_reply)

        with m.State("REPLY"):
            self._word_reply(m, parts.reply_word, command=command, seq=parts.seq,
                             final=parts.final, receiver=parts.receiver,
                             transmitter=transmitter)
            with m.If(transmitter.start.ready):
                m.next = "STATUS"

        with m.State("STATUS"):
            m.d.comb += [
                transmitter.status.valid.eq(1),
                transmitter.status.payload.eq(parts.final),
            ]
            with m.If(transmitter.status.ready):
                m.next = "FINISH"

        with m.State("FINISH"):
            with m.If(transmitter.idle):
                m.next = "IDLE"

    def _counters(self, receiver):
        counters = Cat(self.uart_framing_errors, self.uart_overruns,
                       receiver.frame_check_failures, receiver.header_check_failures,
                       receiver.frame_timeouts)
        assert len(counters) == 8 * COUNTERS.size
        return counters

    def _reply_source(self, m, streams, *, command, receiver, transmitter, unpacker):
        """The reply payload's source: a word sent a byte at a time (``IDENTIFY``, ``COUNTERS``)
        or the unpacker. Returns ``(sent, counters)``: the word's bytes sent so far, and the
        register that holds the counters as they were when the reply began, shifted out."""
        identity = self.identity.encode()
        sent = Signal(range(max(len(identity), COUNTERS.size) + 1), name="word_sent")
        counters = Signal(8 * COUNTERS.size, name="counters_reply")
        word_reply, identify = Signal(name="word_reply"), Signal(name="identify_reply")
        m.d.sync += [word_reply.eq((command == Command.IDENTIFY) | (command == Command.COUNTERS)),
                     identify.eq(command == Command.IDENTIFY)]
        byte = Mux(identify, Array(Const(b, 8) for b in identity)[sent], counters[:8])
        with streams.If(word_reply):
            streams.d.comb += [transmitter.payload.valid.eq(1),
                               *one_byte(transmitter.payload.payload, self.link_bytes, byte)]
        with streams.Else():
            wiring.connect(streams, unpacker.o, transmitter.payload)
        with m.If(word_reply & transmitter.payload.ready):
            m.d.sync += [sent.eq(sent + 1), counters.eq(counters >> 8)]
        return sent, counters

    def _word_reply(self, m, reply_word, *, command, seq, final, receiver, transmitter):
        """State ``REPLY``: the header of a reply without data, or with the ``IDENTIFY`` or
        ``COUNTERS`` word (``reply_word``, :meth:`_reply_source`'s, restarted when the header
        is taken)."""
        sent, counters = reply_word
        identity_bytes = self.identity.encode()
        ok = final == Status.OK
        m.d.comb += [
            transmitter.start.valid.eq(1),
            transmitter.start.payload.command.eq(command),
            transmitter.start.payload.seq.eq(seq),
        ]
        with m.If(ok & (command == Command.IDENTIFY)):
            m.d.comb += transmitter.start.payload.length.eq(len(identity_bytes))
        with m.If(ok & (command == Command.COUNTERS)):
            m.d.comb += transmitter.start.payload.length.eq(COUNTERS.size)
        with m.If(transmitter.start.ready):
            m.d.sync += [sent.eq(0), counters.eq(self._counters(receiver))]
