"""Top levels: the accelerator core behind a byte stream, and the core behind a UART.

:class:`Core` is the whole accelerator as a byte pipe: the command engine and its datapath
units (:data:`UNITS`). :class:`UARTTop` puts it behind the UART. Nothing here is board-specific: a
board target instantiates :class:`UARTTop` (or :class:`Core` behind another transport) and
provides the clock.
"""

from amaranth.hdl import (ClockDomain, ClockSignal, DomainRenamer, Elaboratable, EnableInserter,
                          Module, ResetInserter, ResetSignal, Signal)
from amaranth.lib import fifo, io, wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.wire import MAX_COUNT, MAX_STREAMED, WINDOW_FIELD_MAX

from .broadcast import BroadcastMax
from .engine import CommandEngine, engine_identity
from .kit import Checked
from .linkword import link_signature
from .pool import ChannelsLastPool
from .reduce import RunReducer
from .routing import POSITION_BITS, UNIT_CLASSES, UNIT_NAMES
from .uart import UARTReceiver, UARTTransmitter
from .window_lanes import WindowLanes

__all__ = ["Core", "UARTTop", "UNITS"]

#: The datapath units a :class:`Core` may be built with; ``"reduce"`` is always needed.
UNITS = ("reduce", "pool", "broadcast", "window")


class Core(Checked, wiring.Component):
    """The accelerator: :class:`~maxaccel.hdl.engine.CommandEngine` and its datapath units.

    Units: :class:`~maxaccel.hdl.reduce.RunReducer` (``REDUCE``),
    :class:`~maxaccel.hdl.pool.ChannelsLastPool` (``POOL_CHANNELS_LAST``),
    :class:`~maxaccel.hdl.broadcast.BroadcastMax` (``LOAD``, ``MAX``) and
    :class:`~maxaccel.hdl.window_lanes.WindowLanes` (``MAX_POOL``). Each unit is reset by the
    engine's ``abort`` when a started request is abandoned, and clocked (a clock enable) only
    while the current command is one of its own: between its commands it holds still, which
    saves power on a board and most of its cost in the Python simulator.

    Parameters
    ----------
    lanes : int
        64-bit lanes per datapath beat, a power of two.
    reduce_pipeline : str
        The :class:`~maxaccel.hdl.reduce.RunReducer`'s pipeline: ``"deep"`` (pipelined for
        Fmax) or ``"shallow"`` (far fewer cells, for slow clocks on small devices).
    replay_depth : int
        Beats of the broadcast replay buffer.
    max_dims, max_operands, max_count : int
        Limits of the broadcast unit (see :class:`~maxaccel.hdl.broadcast.BroadcastMax`).
        ``IDENTIFY`` reports the first two; the protocol fixes ``max_count`` at
        ``MAX_COUNT`` (a host plans with it), so change it only for experiments.
    pool_channels : int
        8-byte channels the pooling unit holds (more of smaller dtypes).
    window_lanes : int, optional
        64-bit lanes of the beat the windowed pooling unit pools (a ``WindowMaxPool`` each,
        pooling ``8 / itemsize`` images side by side), 1 to ``lanes``; default ``lanes``, a
        beat a cycle for every element type.
    window_extent, window_columns, window_plane : int
        Its kernel extent (of every axis but a 3-D pool's outermost), line buffer and plane
        buffer capacities (:class:`~maxaccel.hdl.window_lanes.WindowLanes`).
    window_extent_outer : int, optional
        Its kernel extent of a 3-D pool's outermost axis; default ``window_extent``.
    window_serial_products : bool
        Its configuration products on one shift-and-add multiplier per window lane instead
        of a multiplier each (:class:`~maxaccel.hdl.window.WindowMaxPool`): for FPGAs without
        multipliers to spare; a ``MAX_POOL`` request then waits a few hundred cycles more
        before its data streams.
    window_field_max : int
        The largest ``MAX_POOL`` axis field it holds (``IDENTIFY``'s ``window_field_max``;
        default :data:`~maxaccel.contract.wire.WINDOW_FIELD_MAX`, 16 bits): its position
        counters and the engine's copy of the fields are as wide as this needs, so a core
        made for a model of small images is smaller; the host cuts a larger image into tiles.
    window_indices : bool
        Whether it gives MaxPool's Indices (``IDENTIFY``'s ``window_indices``; default True):
        a core made for models that never ask for them leaves them out (a serial unit then
        keeps none, and no reply FIFO waits for them).
    window_serial : bool
        Its units update one window at a time
        (:class:`~maxaccel.hdl.window_serial.SerialWindowMaxPool`, no reply FIFO): a fraction
        of the logic, and ``2 * taps * elements`` cycles or more per beat (``taps`` the
        product of the axes' extents, ``elements`` the images a lane holds): for a core
        behind a link that brings a beat no faster (a UART), on a device too small for the
        pipelined unit.
    clock_hz : int
        Clock frequency reported by ``IDENTIFY``.
    frame_timeout_cycles : int, optional
        Default ``clock_hz // 100`` (10 ms).
    units : tuple of str
        The datapath units to build (:data:`UNITS`, one or more). Without ``"broadcast"``
        the core reports a replay depth of 0, without ``"pool"`` 0 pooling channels, without
        ``"window"`` 0 window lanes, without ``"reduce"`` 0 ``reduce_lanes``, and it answers
        the commands of a unit it lacks (``LOAD`` and ``MAX``, ``POOL_CHANNELS_LAST``,
        ``MAX_POOL``, ``REDUCE``) with ``BAD_COMMAND``: it does not take them (``takes``).
        With ``REDUCE`` the host does the rest through it: ReduceMax, GlobalMaxPool and
        same-shape Max as always, a broadcasting Max by expanding the operands on the host, a
        windowed MaxPool one window per run (more bytes on the link). For devices too small
        for them all. Without it the core serves only what its units take (a core made for
        models whose every max-family node a unit serves), and the host refuses the rest
        before sending anything.
    link_bytes : int
        Bytes per cycle of ``i`` and ``o`` (:data:`~maxaccel.hdl.linkword.LINK_WIDTHS`, at most
        ``8 * lanes``): 1 behind a UART, 32 behind the NiteFury's XDMA stream and on the
        compiled virtual board.
    serial_crc : bool
        The frames' CRCs a bit a cycle (:class:`~maxaccel.hdl.linkword.SerialCRC`): about 200
        LUT4s fewer on the iCE40, and every byte in and out of a frame takes eight cycles. For
        a core behind a link of one byte per cycle that brings and takes a byte no faster (a
        UART: the iCE40 boards' 3 Mbaud at 12 MHz is a byte every 40 cycles).
    dtype : str, optional
        One element type for every unit (a name such as ``"float32"``, or anything
        :func:`~maxaccel.contract.dtypes.format_of` takes): the units are built for it alone
        (about half the reducer's logic, a tenth to a quarter of the others',
        ``docs/library.md``), ``IDENTIFY`` reports it as the only type, and a request of
        another is ``UNSUPPORTED_DTYPE`` (the host's ``Device`` refuses it first, naming the
        type; ``OffloadSession`` runs such a node on the golden model). Default None: every
        type, chosen by each request.

    Attributes
    ----------
    identity : maxaccel.contract.wire.Identity
        What ``IDENTIFY`` reports.
    engine : CommandEngine
    gated_unit_clocks : bool
        False (the default): each unit's clock enable as above. True, for simulation only:
        each unit in a clock domain of its own, whose clock is the core's gated by that
        enable (latched on the falling edge, so the gated clock has no glitch). The same
        registers change in the same cycles, but a simulator that evaluates by clock edges
        (Verilator) then spends nothing on the units the current command does not use. Never
        for a board: a gated clock on FPGA fabric skews against the core's.

    Ports
    -----
    i : In(link_signature(link_bytes))
        Request bytes (:func:`~maxaccel.hdl.linkword.link_signature`: plain bytes for one byte
        per cycle, else words of ``link_bytes`` bytes with a count).
    o : Out(link_signature(link_bytes))
        Reply bytes.
    uart_framing_errors, uart_overruns : In(32)
        Reported by ``COUNTERS``; 0 when unconnected.
    idle : Out(1)
        Nothing in progress: without new input no byte will come out.

    Latency and throughput
    ----------------------
    Those of the engine: ``link_bytes`` bytes per cycle in and out (see
    :class:`~maxaccel.hdl.engine.CommandEngine`).
    """

    @staticmethod
    def unit_signatures(*, lanes=2, replay_depth=64, max_dims=4, max_operands=4,
                        reduce_pipeline="deep", max_count=MAX_COUNT, pool_channels=32,
                        window_lanes=None, window_extent=3, window_columns=64,
                        window_plane=1024, window_extent_outer=None, clock_hz=100_000_000,
                        frame_timeout_cycles=None, units=UNITS, link_bytes=1, dtype=None,
                        window_serial_products=False, window_serial=False, serial_crc=False,
                        window_field_max=WINDOW_FIELD_MAX, window_indices=True):
        """The signatures of the units a core with these parameters is built with, by the
        engine's port name (each checks its parameters: ``ValueError``), and the engine's
        other arguments; nothing is built."""
        if not units or set(units) - set(UNITS):
            raise ValueError(f"units must be one or more of {', '.join(UNITS)}, not "
                             f"{units!r}")
        makers = {
            "reducer": lambda: RunReducer.Signature(lanes, reduce_pipeline,
                                                    position_bits=POSITION_BITS, dtype=dtype),
            "pool": lambda: ChannelsLastPool.Signature(lanes, pool_channels, dtype=dtype),
            "broadcast": lambda: BroadcastMax.Signature(lanes, replay_depth, max_dims,
                                                        max_operands, max_count=max_count,
                                                        max_streamed=MAX_STREAMED, dtype=dtype),
            "window": lambda: WindowLanes.Signature(
                lanes, lanes if window_lanes is None else window_lanes,
                max_extent=window_extent, max_extent_outer=window_extent_outer,
                max_columns=window_columns, max_plane=window_plane, dtype=dtype,
                serial_products=window_serial_products, serial=window_serial,
                field_max=window_field_max, with_indices=window_indices),
        }
        signatures = {name: make() for name, make in makers.items()
                      if UNIT_NAMES[name] in units}
        engine = dict(clock_hz=clock_hz, frame_timeout_cycles=frame_timeout_cycles,
                      link_bytes=link_bytes, serial_crc=serial_crc)
        return signatures, engine

    @classmethod
    def check_parameters(cls, **parameters):
        """``ValueError`` (or ``TypeError``) for parameters a core cannot be built with."""
        signatures, engine = cls.unit_signatures(**parameters)
        CommandEngine.check_parameters(**signatures, **engine)

    @classmethod
    def identity_of(cls, **parameters):
        """What ``IDENTIFY`` of a core with these parameters reports, without building one."""
        signatures, engine = cls.unit_signatures(**parameters)
        return engine_identity(**signatures, **engine)

    def __init__(self, **parameters):
        signatures, engine = self.unit_signatures(**parameters)
        self.units = tuple(UNIT_NAMES[name] for name in signatures)
        #: The datapath units built, by the engine's port name.
        self.datapath = {name: UNIT_CLASSES[name](**signature.parameters)
                         for name, signature in signatures.items()}
        self.engine = CommandEngine(**self.datapath, **engine)
        link_bytes = engine["link_bytes"]
        self.identity = self.engine.identity
        self.link_bytes = link_bytes
        self.gated_unit_clocks = False
        super().__init__({
            "i": In(link_signature(link_bytes)),
            "o": Out(link_signature(link_bytes)),
            "uart_framing_errors": In(32),
            "uart_overruns": In(32),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        engine = self.engine
        m.submodules.engine = engine
        wiring.connect(m, wiring.flipped(self.i), engine.i)
        wiring.connect(m, engine.o, wiring.flipped(self.o))
        m.d.comb += [
            engine.uart_framing_errors.eq(self.uart_framing_errors),
            engine.uart_overruns.eq(self.uart_overruns),
            self.idle.eq(engine.idle),
        ]
        if self.gated_unit_clocks:
            m.domains.sync_fall = ClockDomain("sync_fall", clk_edge="neg", reset_less=True)
            m.d.comb += ClockSignal("sync_fall").eq(ClockSignal("sync"))
        for name, unit in self.datapath.items():
            active = getattr(engine, f"{UNIT_NAMES[name]}_active")
            enabled = EnableInserter(active)(ResetInserter(engine.abort)(unit))
            if self.gated_unit_clocks:
                enabled = _gated_clock(m, name, active, enabled)
            m.submodules[name] = enabled
            wiring.connect(m, getattr(engine, name), unit)
        return m


def _gated_clock(m, name, enable, fragment):
    """``fragment``'s ``sync`` domain moved to a domain of its own clocked by ``sync``'s clock
    while ``enable`` (sampled in ``sync_fall``, on the falling edge, as a clock-gating latch
    does) and reset with it; see :attr:`Core.gated_unit_clocks`."""
    domain = f"{name}_gated"
    m.domains += ClockDomain(domain)
    held = Signal(name=f"{name}_clock_enable")
    m.d.sync_fall += held.eq(enable)
    m.d.comb += [ClockSignal(domain).eq(ClockSignal("sync") & held),
                 ResetSignal(domain).eq(ResetSignal("sync"))]
    return DomainRenamer(domain)(fragment)


class UARTTop(Checked, Elaboratable):
    """:class:`Core` behind a UART (8N1, ``clock_hz / baud`` cycles per bit).

    With a platform, the pins come from ``platform.request("uart", 0)``; the design must then be
    clocked by the platform's default clock at ``clock_hz``. Without one (simulation), the pins
    are the ``rx`` and ``tx`` signals.

    Received bytes pass through a FIFO of ``rx_fifo_depth`` bytes (one block RAM at the
    default 512) on their way to the core. It absorbs the engine's short input stalls (header
    check, parameter checks) at any bit rate, and the next request's first bytes while the
    engine still sends the previous reply's tail (the engine takes a new request only once the
    reply is out: 56 bytes for IDENTIFY, up to ``8 * lanes + 17`` after a MAX). A host that
    sends more than that ahead of the replies overruns the receiver (counted by ``COUNTERS``).

    Parameters
    ----------
    clock_hz : int
        Core clock frequency.
    baud : int
        Bit rate; ``clock_hz // baud`` must be at least 4 (the receiver's minimum).
    rx_fifo_depth : int
        Bytes of the receive FIFO.
    **core_parameters
        Passed on to :class:`Core` (``clock_hz`` is passed too).

    Attributes
    ----------
    divisor : int
        Clock cycles per bit.
    core : Core
    identity : Identity
    rx : Signal(1), in
        Serial input (simulation only), idle high.
    tx : Signal(1), out
        Serial output (simulation only), idle high.
    idle : Signal(1), out
        Nothing received, queued, processed or being sent.
    """

    @classmethod
    def check_parameters(cls, clock_hz, baud, *, rx_fifo_depth=512, **core_parameters):
        """``ValueError`` for a link wider than a byte, fewer than 4 cycles per bit, or
        parameters the core refuses."""
        if core_parameters.get("link_bytes", 1) != 1:
            raise ValueError(f"a UART carries one byte per cycle: link_bytes must be 1, not "
                             f"{core_parameters['link_bytes']!r}")
        if clock_hz // baud < 4:
            raise ValueError(f"clock_hz / baud = {clock_hz} / {baud} gives {clock_hz // baud} "
                             f"cycles per bit; the UART needs at least 4")
        Core.check_parameters(clock_hz=clock_hz, **core_parameters)

    def __init__(self, clock_hz, baud, *, rx_fifo_depth=512, **core_parameters):
        self.divisor = clock_hz // baud
        self.clock_hz = clock_hz
        self.baud = baud
        self.rx_fifo_depth = rx_fifo_depth
        self.core = Core(clock_hz=clock_hz, **core_parameters)
        self.identity = self.core.identity
        self.rx = Signal(init=1)
        self.tx = Signal(init=1)
        self.idle = Signal()

    def elaborate(self, platform):
        m = Module()
        divisor_bits = self.divisor.bit_length()
        m.submodules.receiver = receiver = UARTReceiver(divisor_bits=divisor_bits)
        m.submodules.transmitter = transmitter = UARTTransmitter(divisor_bits=divisor_bits)
        m.submodules.rx_fifo = rx_fifo = fifo.SyncFIFOBuffered(width=8,
                                                               depth=self.rx_fifo_depth)
        m.submodules.core = core = self.core

        rx, tx = self.rx, self.tx
        if platform is not None:
            uart = platform.request("uart", 0, dir="-")
            m.submodules.rx_buffer = rx_buffer = io.Buffer("i", uart.rx)
            m.submodules.tx_buffer = tx_buffer = io.Buffer("o", uart.tx)
            rx, tx = Signal(init=1), Signal(init=1)
            m.d.comb += [rx.eq(rx_buffer.i), tx_buffer.o.eq(tx)]

        m.d.comb += [
            receiver.rx.eq(rx),
            tx.eq(transmitter.tx),
            receiver.divisor.eq(self.divisor),
            transmitter.divisor.eq(self.divisor),
            rx_fifo.w_data.eq(receiver.bytes.payload),
            rx_fifo.w_en.eq(receiver.bytes.valid),
            receiver.bytes.ready.eq(rx_fifo.w_rdy),
            core.i.payload.eq(rx_fifo.r_data),
            core.i.valid.eq(rx_fifo.r_rdy),
            rx_fifo.r_en.eq(core.i.ready),
            core.uart_framing_errors.eq(receiver.framing_errors),
            core.uart_overruns.eq(receiver.overruns),
            self.idle.eq(core.idle & ~rx_fifo.r_rdy & ~receiver.bytes.valid
                         & transmitter.bytes.ready),
        ]
        wiring.connect(m, core.o, transmitter.bytes)
        return m
