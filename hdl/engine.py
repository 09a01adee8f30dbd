"""The command engine: wire-protocol frames in, datapath commands, reply frames out.

The engine speaks the protocol of ``docs/protocol.md`` on a pair of byte streams, so it is the
same behind a UART, a PCIe stream or a simulator. Everything the protocol fixes (magic, command
and status codes, parameter blocks and their field names, the status rules, the CRC, the
``IDENTIFY`` and ``COUNTERS`` replies) comes from :mod:`maxaccel.contract.wire`, so host and
gateware agree by construction. Its parts, each in a module of its own:

* :mod:`~maxaccel.hdl.framing` -- :class:`FrameReceiver`, :class:`FrameTransmitter`;
* :mod:`~maxaccel.hdl.packing` -- :class:`RowPacker`, :class:`RowUnpacker`;
* :mod:`~maxaccel.hdl.checks` -- the status rules on registers, the
  :class:`SaturatingMultiplier` that computes their products;
* here, :class:`CommandEngine` -- the control FSM that ties them to the datapath units.

See ``docs/architecture.md``, "Command engine".
"""

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import FORMATS
from maxaccel.contract.pooling import WINDOW_RANK
from maxaccel.contract.wire import (COUNTERS, DATA_COMMANDS, VERSION, Capacities, Command,
                                    WINDOW_INDEX_BYTES, Identity, Status, command_rules,
                                    parameter_block, window_fields)

from .broadcast import BroadcastMax, BroadcastOp
from .checks import SATURATED, SaturatingMultiplier, check_programs, verdict_logic
from .framing import FrameReceiver, FrameTransmitter
from .kit import refuse
from .lane import LANE_BYTES
from .linkword import check_link_bytes, link_signature, one_byte, word_fields
from .packing import RowPacker, RowUnpacker
from .pool import ChannelsLastPool
from .window import WindowLanes

__all__ = ["CommandEngine"]

#: The status of a ``MAX_POOL`` whose units found a window of padding only (the contract's
#: late status for it).
(LATE_STATUS, _), = command_rules(Command.MAX_POOL).late


class CommandEngine(wiring.Component):
    """Request frames in, datapath commands, reply frames out (``docs/protocol.md``).

    The engine is transport-agnostic: a byte stream in, a byte stream out. It drives up to four
    datapath units through ports wired up by :class:`~maxaccel.hdl.top.Core`; it takes the
    units themselves (not elaborated here) only to read their capacities and layouts.

    A request goes through these phases (states of the control FSM):

    1. **Header.** :class:`FrameReceiver` hunts for a header that passes its check.
    2. **Parameters.** The command's parameter block (``PARAMETERS`` of
       :mod:`maxaccel.contract.wire`, ``MaxParameters.layout`` for ``MAX``) is shifted into a
       register, its fields only (the padding that aligns the data is counted, not stored).
       A payload shorter than the block is ``BAD_LENGTH``, an unknown command
       ``BAD_COMMAND``; both are decided from the header.
    3. **Checks.** The data length and reply length the parameters imply are computed with a
       bit-serial :class:`SaturatingMultiplier` (one cycle per significant bit of the second
       factor, 1 to ``max_dims`` products per command), then one cycle decides the status, in
       this priority:
       ``UNSUPPORTED_DTYPE``, ``BAD_PARAMETER`` (a zero dimension where none is allowed:
       ``POOL_CHANNELS_LAST`` pixels or channels, a ``LOAD`` or ``MAX`` row length, a ``MAX``
       count; for ``MAX`` also more operands than ``max_operands``, none at all, a flag other
       than 0/1, a reserved byte other than 0), ``TOO_LARGE`` (beyond a capacity: the pooling
       channels, the replay buffer's depth for a ``LOAD`` or a ``MAX`` operand's base, the
       ``MAX`` count limit ``max_count`` for a count or a row in beats, or a reply above
       ``MAX_PAYLOAD``), ``BAD_LENGTH`` (the payload is not the block plus the data the
       parameters imply). The input is stalled meanwhile.
    4. **Streaming.** If the command is accepted, the reply header (with the length the
       parameters imply) is sent at once, the unit is started, the remaining payload is repacked
       into beats by :class:`RowPacker` and the unit's results are serialised by
       :class:`RowUnpacker` into the reply payload while the request is still arriving.
       A refused command's remaining payload is drained and discarded.
    5. **Trailer.** When the request's trailer has been checked, the reply's status is decided:
       ``TIMEOUT`` if the request stopped arriving (its reply, if started, is padded with zero
       bytes to its declared length, and the packer, the unpacker and the units are reset by
       ``abort``), else ``CRC_ERROR`` if the frame check failed, else the status of step 3,
       unless the unit found a late problem (``CommandRules.late``: a ``MAX_POOL`` window of
       padding only), which is then the status once the unit is idle. A
       reply that had not started has an empty payload unless it is an ``IDENTIFY`` or
       ``COUNTERS`` reply with status ``OK``. After a ``LOAD`` the status waits for the last
       beat to be written.
    6. The engine waits for the reply's last byte, then hunts for the next header.

    One request is handled at a time; every request whose header passes its check gets exactly
    one reply, whatever its content, and no input stops the engine from hunting again.

    Parameters
    ----------
    reducer : RunReducer
    pool : ChannelsLastPool or None
    broadcast : BroadcastMax or None
    window : WindowLanes or None
        The units; they must have the same ``lanes``, a power of two. The engine reads their
        capacities and signatures (it does not elaborate them). Without a pool or broadcast
        unit the engine reports its capacity as 0 in ``IDENTIFY``, so the status rules refuse
        its commands as ``TOO_LARGE``, and it has no port for it.
    clock_hz : int
        Clock frequency reported by ``IDENTIFY``.
    frame_timeout_cycles : int, optional
        Idle cycles after which a partial request is abandoned; default ``clock_hz // 100``
        (10 ms).
    link_bytes : int
        Bytes per cycle of ``i`` and ``o`` (:data:`~maxaccel.hdl.linkword.LINK_WIDTHS`, at
        most ``8 * lanes``): 1 behind a UART, more behind a wide stream such as PCIe or the
        compiled virtual board.

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
    bottleneck); headers, parameter blocks, trailers and word replies go a byte per cycle. A
    payload row that does not start on a link word boundary costs a word per beat more. Per
    request the input stalls 15 cycles at the header (its check and the handshake), and a
    data command's checks stall it once more after the parameter block: about 9 cycles plus,
    per product, 3 plus the bit length of its second factor (measured: 17 cycles for a REDUCE,
    24 for a LOAD, 30 for a POOL_CHANNELS_LAST, 29 for a MAX with 4 dimensions, all with small
    factors). The reply header's first byte goes out in the cycle the first data byte is taken.
    A unit's result bytes follow the beat that completes them by the unit's latency plus 2
    cycles (packer and unpacker registers). The reply trailer starts 3 to 8 cycles after the
    request's last byte, or right after the reply's last payload byte if that is later (an
    output beat's bytes leave one per cycle, so a MAX reply trails its request by about
    ``8 * lanes`` cycles).
    """

    def __init__(self, *, reducer, pool=None, broadcast=None, window=None, clock_hz,
                 frame_timeout_cycles=None, link_bytes=1):
        lanes = reducer.lanes
        present = {name: unit for name, unit in
                   [("reducer", reducer), ("pool", pool), ("broadcast", broadcast),
                    ("window", window)] if unit}
        if any(unit.lanes != lanes for unit in present.values()):
            refuse(self, "the units must have the same lanes, not "
                         + ", ".join(f"{name} {unit.lanes}" for name, unit in present.items()))
        if frame_timeout_cycles is None:
            frame_timeout_cycles = max(clock_hz // 100, 1)
        check_link_bytes(link_bytes, lanes=lanes, unit=self)
        self.lanes = lanes
        self.link_bytes = link_bytes
        self.units = tuple(present)
        self.pool_capacity_bytes = pool.capacity_bytes if pool else 0
        if broadcast:
            self.depth, self.max_dims = broadcast.depth, broadcast.max_dims
            self.max_operands, self.max_count = broadcast.max_operands, broadcast.max_count
        else:
            # One dimension and one operand, so the MAX block stays small; no buffer.
            self.depth, self.max_dims, self.max_operands, self.max_count = 0, 1, 1, 0
        self.clock_hz = clock_hz
        self.frame_timeout_cycles = frame_timeout_cycles
        self.max_parameters = parameter_block(Command.MAX, self.max_dims, self.max_operands)
        #: The data commands this engine takes (``MAX_POOL`` only with a window unit).
        self.commands = tuple(code for code in DATA_COMMANDS
                              if code != Command.MAX_POOL or window is not None)
        self.identity = Identity(
            version=VERSION, lanes=lanes, dtypes=frozenset(int(code) for code in FORMATS),
            replay_depth=self.depth, max_dims=self.max_dims, max_operands=self.max_operands,
            pool_channels=self.pool_capacity_bytes // 8, clock_hz=clock_hz,
            frame_timeout_cycles=frame_timeout_cycles, **(window.limits if window else {}))
        # The signatures of the units' ports; an absent unit's stands in inside the engine.
        self._unit_signatures = {
            "reducer": reducer.signature,
            "pool": pool.signature if pool else ChannelsLastPool.signature_for(lanes, 1),
            "broadcast": broadcast.signature if broadcast else BroadcastMax.signature_for(
                lanes, 2, self.max_dims, self.max_operands, 1),
            "window": window.signature if window else WindowLanes.signature_for(lanes, 1),
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
        lanes, max_dims, max_operands = self.lanes, self.max_dims, self.max_operands
        # The units' ports; an absent unit's are local signals that take whatever is offered
        # (the status rules never let a request with data reach it) and never answer.
        ports = {}
        for name, signature in self._unit_signatures.items():
            if name in self.units:
                ports[name] = getattr(self, name)
            else:
                ports[name] = port = signature.flip().create(path=(f"absent_{name}",))
                for stream_port in (port.i,) if name in ("pool", "window") else (
                        port.command, port.load, port.streamed):
                    m.d.comb += stream_port.ready.eq(1)
                if name in ("pool", "window"):
                    m.d.comb += port.idle.eq(1)
        reducer, pool, broadcast = ports["reducer"], ports["pool"], ports["broadcast"]
        window = ports["window"]
        beat_bytes = LANE_BYTES * lanes
        if beat_bytes & (beat_bytes - 1):
            raise ValueError(f"lanes must be a power of two, not {lanes}")

        width = self.link_bytes
        m.submodules.receiver = receiver = FrameReceiver(self.frame_timeout_cycles, width)
        m.submodules.transmitter = transmitter = FrameTransmitter(width)
        m.submodules.multiplier = multiplier = SaturatingMultiplier(32)
        packer, unpacker = RowPacker(lanes, width), RowUnpacker(lanes, width)
        m.submodules.packer = ResetInserter(self.abort)(packer)
        m.submodules.unpacker = ResetInserter(self.abort)(unpacker)

        # ---- Parameter block: a shift register; the bytes of a block of N bytes end up in
        # the top N bytes, so every field of every command is a fixed slice. The blocks, the
        # quantities the checks compute and the status rules all come from the wire contract
        # (maxaccel.contract.wire): this engine only maps them onto registers.
        # MAX_POOL is a command only of a core with the window unit (the contract: a device
        # without one answers BAD_COMMAND), so a small core stores no window block.
        commands = self.commands
        blocks = {code: parameter_block(code, max_dims, max_operands) for code in commands}
        specs = {code: command_rules(code, max_dims) for code in commands}
        capacities = Capacities.of(self.identity)
        # Only a block's fields are stored: its padding (``PAYLOAD_ALIGN``) is counted, not kept.
        block_bytes = max(b.fields_size for b in blocks.values())
        block = Signal(8 * block_bytes)

        def fields_of(code):
            start = block_bytes - blocks[code].fields_size
            return {f.name: block[8 * (start + f.offset):8 * (start + f.offset + f.size)]
                    for f in blocks[code].fields}

        by_command = {code: fields_of(code) for code in commands}
        pool_fields = by_command[Command.POOL_CHANNELS_LAST]
        load_fields = by_command[Command.LOAD]
        max_fields = by_command[Command.MAX]

        # ---- Request state.
        command = Signal(8)
        seq = Signal(8)
        length = Signal(32)
        wire_bytes = max(b.size for b in blocks.values())
        needed = Signal(range(wire_bytes + 1))          # the block's bytes on the wire
        stored = Signal(range(block_bytes + 1))         # its fields' bytes
        received = Signal(range(wire_bytes + 1))
        status = Signal(8)
        final = Signal(8)
        pad = Signal()

        # Element type and row geometry, registered one after the other in the checks (every
        # step of the checks is a register, to keep them off the critical path).
        dtype = Signal(8)
        supported = Signal()
        shift = Signal(2)          # log2(itemsize)
        with m.Switch(dtype):
            for fmt in FORMATS.values():
                with m.Case(fmt.dtype):
                    m.d.sync += [supported.eq(1), shift.eq(fmt.nbytes.bit_length() - 1)]
            with m.Default():
                m.d.sync += [supported.eq(0), shift.eq(0)]
        row_elements = Signal(32)
        row_bytes = Signal(35)
        row_beats = Signal(32)
        last_nbytes = Signal(range(beat_bytes + 1))
        m.d.comb += [reducer.dtype.eq(dtype), pool.dtype.eq(dtype), window.dtype.eq(dtype)]
        m.d.sync += [
            self.reduce_active.eq(command == Command.REDUCE),
            self.pool_active.eq(command == Command.POOL_CHANNELS_LAST),
            self.broadcast_active.eq((command == Command.LOAD) | (command == Command.MAX)),
            self.window_active.eq(command == Command.MAX_POOL),
        ]

        # Products (value, overflow) of the checks, one register pair per name the contract
        # uses (commands share a name's registers).
        product_names = list(dict.fromkeys(name for spec in specs.values()
                                           for name, _ in spec.products))
        products = {name: (Signal(32, name=f"{name}_product"), Signal(name=f"{name}_overflow"))
                    for name in product_names}
        accumulator, accumulator_overflow = Signal(32), Signal()
        m.d.comb += [multiplier.a.eq(accumulator), multiplier.a_overflow.eq(accumulator_overflow)]

        reply_length = Signal(32)
        packer_rows = Signal(32)
        packer_row_bytes = Signal(32)
        m.d.comb += [packer.rows.eq(packer_rows), packer.row_bytes.eq(packer_row_bytes)]

        # ---- The programs of the checks: load a factor, multiply by one, save the product.
        # A product whose first factor is the product just saved goes on from the accumulator.
        def factor(code, name):
            """(value, overflow) of a factor: a field, the row's beats or an earlier product."""
            if name == "row_beats":
                return row_beats, 0
            if name in dict(specs[code].products):
                return products[name]
            return by_command[code][name], 0

        programs = check_programs(specs, factor)
        product_step = Signal(range(max(len(p) for p in programs.values()) + 1))

        def product_op(code, step, op, operand):
            """One step of a program, in state PRODUCTS."""
            if op == "load":
                value, overflow = operand
                m.d.sync += [accumulator.eq(value), accumulator_overflow.eq(overflow)]
            elif op == "save":
                value, overflow = products[operand]
                m.d.sync += [value.eq(accumulator), overflow.eq(accumulator_overflow)]
                if step == len(programs[code]) - 1:   # every program ends with a save
                    m.next = "SCALE"
            else:
                m.d.comb += [multiplier.start.eq(1), multiplier.b.eq(operand)]
                m.next = "PRODUCT_WAIT"

        # The comb logic is split over three fragments so that the Python simulator, which
        # re-runs a fragment's whole comb logic whenever one of its inputs changes, re-runs
        # only the small stream routing for every byte: `checks` (verdicts and unit
        # configuration) changes only while a parameter block comes in, `m` (the control FSM)
        # only between phases.
        m.submodules.checks = checks = Module()
        m.submodules.streams = streams = Module()

        # ---- Verdicts: the contract's rules on the registered quantities, the first status
        # in STATUS_ORDER whose rule refuses. The products are scaled to bytes into registers
        # (state SCALE) before the verdict; an overflowed quantity saturates.
        payload_data = Signal(32)          # bytes after the parameter block
        data_bytes, reply_bytes = Signal(36), Signal(36)

        def saturated(name):
            value, overflow = products[name]
            return Mux(overflow, SATURATED, value)

        def quantities(code):
            spec = specs[code]
            q = {name: saturated(name) for name, _ in spec.products}
            q.update(row_bytes=row_bytes, row_beats=row_beats, data_bytes=data_bytes,
                     reply_bytes=reply_bytes, payload_data=payload_data)
            return q

        verdict = verdict_logic(checks, command, supported, specs, by_command, quantities,
                                capacities)
        beats = products["beats"][0]
        max_streamed = max_fields["streamed"]
        max_operand_count = max_fields["operands"]

        # ---- Unit configuration: slices of the block and the registered geometry.
        checks.d.comb += [
            pool.pixels.eq(pool_fields["pixels"]),
            pool.channels.eq(pool_fields["channels"]),
        ]
        if Command.MAX_POOL in commands:
            pool_window_fields = by_command[Command.MAX_POOL]
            checks.d.comb += [
                window.group.eq(pool_window_fields["group"]),
                window.indices.eq(pool_window_fields["indices"][0]),
            ]
            for axis in range(WINDOW_RANK):
                for name, field in window_fields(axis).items():
                    checks.d.comb += getattr(window.config[axis], name).eq(
                        pool_window_fields[field])
        config = broadcast.config
        checks.d.comb += [
            config.dtype.eq(dtype),
            config.operands.eq(max_operand_count),
            config.streamed.eq(max_streamed),
            config.row_beats.eq(row_beats),
            config.last_nbytes.eq(last_nbytes),
        ]
        for d in range(max_dims):
            checks.d.comb += config.counts[d].eq(max_fields[f"counts[{d}]"])
        for k in range(max_operands):
            checks.d.comb += [
                config.operand[k].base.eq(max_fields[f"slot[{k}].base"]),
                config.operand[k].splat.eq(max_fields[f"slot[{k}].splat"][0]),
            ]
            for d in range(max_dims):
                checks.d.comb += config.operand[k].steps[d].eq(
                    max_fields[f"slot[{k}].steps[{d}]"])
        with checks.If(command == Command.LOAD):
            checks.d.comb += broadcast.command.payload.op.eq(BroadcastOp.LOAD)
        with checks.Else():
            checks.d.comb += broadcast.command.payload.op.eq(BroadcastOp.RUN)
        checks.d.comb += [
            broadcast.command.payload.base.eq(load_fields["base"]),
            broadcast.command.payload.count.eq(beats),
            # Rows of one element are a splat operand's: stored repeated across their beat.
            broadcast.command.payload.fill.eq(load_fields["row_length"] == 1),
        ]

        # ---- Reply payload sources: a word shifted out (IDENTIFY, COUNTERS) or the unpacker.
        identity_bytes = self.identity.encode()
        counters = Cat(self.uart_framing_errors, self.uart_overruns,
                       receiver.frame_check_failures, receiver.header_check_failures,
                       receiver.frame_timeouts)
        assert len(counters) == 8 * COUNTERS.size
        reply_word = Signal(8 * max(len(identity_bytes), COUNTERS.size))
        word_reply = Signal()
        m.d.sync += word_reply.eq((command == Command.IDENTIFY) | (command == Command.COUNTERS))
        with streams.If(word_reply):
            streams.d.comb += [transmitter.payload.valid.eq(1),
                               *one_byte(transmitter.payload.payload, width, reply_word[:8])]
        with streams.Else():
            wiring.connect(streams, unpacker.o, transmitter.payload)
        with m.If(word_reply & transmitter.payload.ready):
            m.d.sync += reply_word.eq(reply_word >> 8)
        streams.d.comb += transmitter.pad.eq(pad)

        # ---- Routing between packer, units and unpacker by command, selected by one-hot
        # registers (not by decoding `command` on the way).
        selected = {code: Signal(name=f"route_{code.name.lower()}") for code in commands}
        m.d.sync += [flag.eq(command == code) for code, flag in selected.items()]
        to_unit = {Command.REDUCE: reducer.i, Command.POOL_CHANNELS_LAST: pool.i,
                   Command.LOAD: broadcast.load, Command.MAX: broadcast.streamed,
                   Command.MAX_POOL: window.i}
        from_unit = {Command.POOL_CHANNELS_LAST: pool.o, Command.MAX: broadcast.output,
                     Command.MAX_POOL: window.o}
        to_unit = {code: port for code, port in to_unit.items() if code in commands}
        from_unit = {code: port for code, port in from_unit.items() if code in commands}
        for code, port in to_unit.items():
            if code == Command.MAX_POOL:
                # Beats reach the window units only during their command: their input logic
                # (a select per unit, the keys) then holds still for every other command,
                # which keeps the Python simulation of the whole core fast.
                with streams.If(selected[code]):
                    streams.d.comb += port.payload.eq(packer.o.payload)
            else:
                streams.d.comb += port.payload.eq(packer.o.payload)
            with streams.If(selected[code]):
                streams.d.comb += [port.valid.eq(packer.o.valid),
                                   packer.o.ready.eq(port.ready)]
        with streams.If(selected[Command.REDUCE]):
            streams.d.comb += [
                unpacker.i.valid.eq(reducer.o.valid),
                unpacker.i.payload.data[0].eq(reducer.o.payload),
                unpacker.i.payload.nbytes.eq(Const(1, 4) << shift),
                unpacker.i.payload.first.eq(1),
                unpacker.i.payload.last.eq(1),
                reducer.o.ready.eq(unpacker.i.ready),
            ]
        for code, port in from_unit.items():
            with streams.If(selected[code]):
                streams.d.comb += [
                    unpacker.i.valid.eq(port.valid),
                    unpacker.i.payload.eq(port.payload),
                    port.ready.eq(unpacker.i.ready),
                ]

        wiring.connect(streams, wiring.flipped(self.i), receiver.i)
        wiring.connect(streams, transmitter.o, wiring.flipped(self.o))

        # Request payload: into the parameter block, to the packer, or discarded, by phase.
        taking_parameters, streaming, draining = Signal(), Signal(), Signal()
        streams.d.comb += [
            receiver.payload.ready.eq(taking_parameters | draining
                                      | (streaming & packer.i.ready)),
            receiver.payload_limit.eq(Mux(taking_parameters, 1,
                                          Mux(streaming, packer.limit, width))),
            packer.i.valid.eq(streaming & receiver.payload.valid),
            packer.i.payload.eq(receiver.payload.payload),
        ]
        parameter_byte = word_fields(receiver.payload.payload, width)[0][:8]

        # ---- The control FSM.
        def take_trailer(then):
            """Accept the receiver's trailer and decide the final status."""
            m.d.comb += receiver.trailer.ready.eq(1)
            with m.If(receiver.trailer.valid):
                outcome = receiver.trailer.payload
                m.d.sync += final.eq(Mux(outcome.timeout, Status.TIMEOUT,
                                         Mux(outcome.intact, status, Status.CRC_ERROR)))
                then(outcome)

        def to_reply(outcome):
            m.next = "REPLY"

        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += receiver.header.ready.eq(1)
                m.d.sync += pad.eq(0)
                with m.If(receiver.header.valid):
                    header = receiver.header.payload
                    m.d.sync += [
                        command.eq(header.command),
                        seq.eq(header.seq),
                        length.eq(header.length),
                        received.eq(0),
                        status.eq(Status.OK),
                        needed.eq(0),
                    ]
                    m.next = "DRAIN"
                    with m.Switch(header.command):
                        with m.Case(Command.IDENTIFY, Command.COUNTERS):
                            with m.If(header.length != 0):
                                m.d.sync += status.eq(Status.BAD_LENGTH)
                        for code, s in blocks.items():
                            with m.Case(code):
                                m.d.sync += [needed.eq(s.size), stored.eq(s.fields_size)]
                                with m.If(header.length < s.size):
                                    m.d.sync += status.eq(Status.BAD_LENGTH)
                                with m.Else():
                                    m.next = "PARAMS"
                        with m.Default():
                            m.d.sync += status.eq(Status.BAD_COMMAND)

            with m.State("PARAMS"):
                m.d.comb += taking_parameters.eq(1)
                with m.If(receiver.payload.valid):
                    m.d.sync += received.eq(received + 1)
                    with m.If(received < stored):
                        m.d.sync += block.eq(Cat(block[8:], parameter_byte))
                    with m.If(received == needed - 1):
                        m.next = "GEOMETRY_DTYPE"
                take_trailer(to_reply)   # only a timeout ends a frame here

            with m.State("GEOMETRY_DTYPE"):
                with m.Switch(command):
                    for code, f in by_command.items():
                        with m.Case(code):
                            m.d.sync += [dtype.eq(f["dtype"]),
                                         row_elements.eq(f[specs[code].row])]
                m.d.sync += payload_data.eq(length - needed)
                m.next = "GEOMETRY_SHIFT"
            with m.State("GEOMETRY_SHIFT"):
                m.next = "GEOMETRY_ROW"    # the dtype's decode is registered meanwhile
            with m.State("GEOMETRY_ROW"):
                m.d.sync += row_bytes.eq(row_elements << shift)
                m.next = "GEOMETRY_BEATS"
            with m.State("GEOMETRY_BEATS"):
                log_beat = beat_bytes.bit_length() - 1
                m.d.sync += [
                    row_beats.eq((row_bytes + beat_bytes - 1) >> log_beat),
                    last_nbytes.eq(((row_bytes - 1) & (beat_bytes - 1)) + 1),
                ]
                m.d.sync += product_step.eq(0)
                m.next = "PRODUCTS"

            # The command's program of products (check_programs), one step per cycle; a
            # multiplication waits in PRODUCT_WAIT for the bit-serial multiplier.
            with m.State("PRODUCTS"):
                with m.Switch(command):
                    for code, program in programs.items():
                        with m.Case(code):
                            with m.Switch(product_step):
                                for step, (op, operand) in enumerate(program):
                                    with m.Case(step):
                                        product_op(code, step, op, operand)
                m.d.sync += product_step.eq(product_step + 1)

            with m.State("PRODUCT_WAIT"):
                with m.If(~multiplier.busy):
                    m.d.sync += [accumulator.eq(multiplier.product),
                                 accumulator_overflow.eq(multiplier.overflow)]
                    m.next = "PRODUCTS"

            with m.State("SCALE"):
                def scaled(name):
                    if name is None:
                        return 0
                    value, overflow = products[name]
                    return Mux(overflow, SATURATED, value << shift)
                def index_bytes(name):
                    if name is None:
                        return 0
                    value, overflow = products[name]
                    return Mux(overflow, SATURATED, value * WINDOW_INDEX_BYTES)
                with m.Switch(command):
                    for code, spec in specs.items():
                        with m.Case(code):
                            total = scaled(spec.reply) + index_bytes(spec.indices)
                            m.d.sync += [data_bytes.eq(scaled(spec.data)),
                                         reply_bytes.eq(Mux(total >= SATURATED, SATURATED,
                                                            total))]
                m.next = "VALIDATE"

            with m.State("VALIDATE"):
                m.d.sync += [status.eq(verdict), reply_length.eq(reply_bytes)]
                with m.Switch(command):
                    for code, spec in specs.items():
                        with m.Case(code):
                            m.d.sync += packer_rows.eq(factor(code, spec.request_rows)[0])
                m.d.sync += packer_row_bytes.eq(row_bytes)
                m.next = "DECIDE"

            with m.State("DECIDE"):
                with m.If(status == Status.OK):
                    m.next = "START"
                with m.Else():
                    m.next = "DRAIN"

            with m.State("START"):
                m.d.comb += [
                    transmitter.start.valid.eq(1),
                    transmitter.start.payload.command.eq(command),
                    transmitter.start.payload.seq.eq(seq),
                    transmitter.start.payload.length.eq(reply_length),
                ]
                with m.If(transmitter.start.ready):
                    m.d.comb += [
                        packer.start.eq(1),
                        pool.clear.eq(command == Command.POOL_CHANNELS_LAST),
                        window.clear.eq(command == Command.MAX_POOL),
                    ]
                    with m.If((command == Command.LOAD) | (command == Command.MAX)):
                        m.next = "COMMAND"
                    with m.Else():
                        m.next = "STREAM"

            with m.State("COMMAND"):
                m.d.comb += [streaming.eq(1), broadcast.command.valid.eq(1)]
                with m.If(broadcast.command.ready):
                    m.next = "STREAM"

            with m.State("STREAM"):
                m.d.comb += streaming.eq(1)

                def streamed_outcome(outcome):
                    with m.If(outcome.timeout):
                        m.next = "ABORT"
                    with m.Else():
                        m.next = "SETTLE"
                take_trailer(streamed_outcome)

            with m.State("SETTLE"):
                # A LOAD is done when its last beat is written; a MAX_POOL when its last window
                # is out of the units, which then know whether a window held only padding (the
                # contract's late status).
                window_done = window.idle if Command.MAX_POOL not in self.commands \
                    else window.idle | ~selected[Command.MAX_POOL]
                with m.If(packer.idle & ~broadcast.busy & window_done):
                    if Command.MAX_POOL in commands:
                        with m.If(selected[Command.MAX_POOL] & window.error
                                  & (final == Status.OK)):
                            m.d.sync += final.eq(LATE_STATUS)
                    m.next = "STATUS"

            with m.State("ABORT"):
                m.d.comb += self.abort.eq(1)
                m.d.sync += pad.eq(1)
                m.next = "STATUS"

            with m.State("DRAIN"):
                m.d.comb += draining.eq(1)
                take_trailer(to_reply)

            with m.State("REPLY"):
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
                    with m.If(command == Command.IDENTIFY):
                        m.d.sync += reply_word.eq(int.from_bytes(identity_bytes, "little"))
                    with m.Else():
                        m.d.sync += reply_word.eq(counters)
                    m.next = "STATUS"

            with m.State("STATUS"):
                m.d.comb += [
                    transmitter.status.valid.eq(1),
                    transmitter.status.payload.eq(final),
                ]
                with m.If(transmitter.status.ready):
                    m.next = "FINISH"

            with m.State("FINISH"):
                with m.If(transmitter.idle):
                    m.next = "IDLE"

        m.d.comb += self.idle.eq(fsm.ongoing("IDLE") & receiver.hunting & transmitter.idle)
        return m
