"""The compiled virtual board: the same :class:`~maxaccel.hdl.top.Core` as
:class:`~maxaccel.sim.virtual_board.VirtualBoard`, compiled with Verilator
(:func:`maxaccel.sim.verilator.compile_model`), behind the same ``write``/``read`` of bytes.

``open_device("verilator")`` opens it. The cycle model is the same (a request word offered
per cycle while any byte is pending, replies always taken, quiescence after two idle cycles),
so with the same ``link_bytes`` both boards answer every request with the same bytes in the
same number of cycles; only the speed differs (a few hundred thousand to a few million cycles
a second here, against a few thousand). Its default link is a beat wide, not a byte.
"""

import ctypes
import hashlib
import inspect

from amaranth.hdl import ClockDomain, ClockSignal, Module, ResetSignal, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from maxaccel.boards.targets import TARGETS
from maxaccel.hdl.lane import LANE_BYTES
from maxaccel.hdl.linkword import link_signature
from maxaccel.hdl.top import Core
from maxaccel.sim.verilator import code_of, compile_model, require_verilator
from maxaccel.sim.virtual_board import CORE_DEFAULTS

__all__ = ["VerilatorBoard", "VERILATOR_DEFAULTS"]

#: The compiled board's :class:`~maxaccel.hdl.top.Core` parameters, unless given: the NiteFury's
#: core (its lanes and capacities: ``TARGETS["nitefury"]``, whose 32-byte link word this board's
#: beat-wide link stands for) with the virtual boards' nominal clock and frame timeout
#: (:data:`~maxaccel.sim.virtual_board.CORE_DEFAULTS`). Its replay buffer (1024 beats, block
#: RAM on the XC7A200T) holds a 512-row broadcast column and its row at once, where the
#: simulated board's 64 beats cut ``max(a, row, col)`` into hundreds of tiles; its windowed
#: pooling unit (all its lanes) takes a beat of images a cycle.
_NITEFURY = TARGETS["nitefury"]
VERILATOR_DEFAULTS = {**CORE_DEFAULTS, **_NITEFURY.core, "lanes": _NITEFURY.lanes}

_QUIESCENT_AFTER = 2        # idle cycles, as VirtualBoard's stream bench
_OUT_FULL, _QUIESCENT, _CYCLES_RAN_OUT = 0, 1, 2    # maxaccel_board_run's verdicts
_RESET_CYCLES = 2


def recipe(parameters):
    """What a :class:`~maxaccel.hdl.top.Core` made with ``parameters`` is made of, for the
    cache key (:func:`~maxaccel.sim.verilator.source_key` adds the gateware's sources)."""
    return (f"{Core.__module__}.{Core.__qualname__}("
            + ", ".join(f"{name}={value!r}" for name, value in sorted(parameters.items())) + ")")


class BenchCore(wiring.Component):
    """``core`` as the compiled board's bench drives it, with only the link's ``i`` as inputs.

    The bench holds reset for its first ``reset_cycles`` cycles, always takes ``o`` and has no
    UART; here those are made inside the model: a power-on countdown (a register with an
    initial value) holds the core's reset for exactly those cycles, ``o.ready`` is 1 and the
    UART's error counts are 0. The core is the same logic in the same cycles. What changes is
    Verilator's schedule: logic a top-level input reaches combinationally (every register's
    next value reads the reset) is evaluated again on every ``eval()``, twice a cycle, where
    logic reached from registers only is evaluated once, after the clock edge. With ``rst``
    and ``o.ready`` as inputs, that would be most of the windowed pooling unit.

    The core's units run on gated clocks (:attr:`~maxaccel.hdl.top.Core.gated_unit_clocks`):
    the same registers change in the same cycles, and Verilator evaluates a unit's logic only
    on its own clock's edges, so a ReduceMax does not pay for the windowed pooling unit (about
    70% of the default core's Verilog), twice as many cycles a second.

    Parameters
    ----------
    core : maxaccel.hdl.top.Core
    reset_cycles : int
        Cycles from power-on during which the core is held in reset.

    Attributes
    ----------
    clk : In(1)
        The clock.
    i : In(link stream)
        The core's ``i``.
    o : Out(valid, payload)
        The core's ``o``, without ``ready`` (always taken).
    idle : Out(1)
        The core's ``idle``.
    """

    def __init__(self, core, reset_cycles):
        self.core = core
        self.reset_cycles = reset_cycles
        link = link_signature(core.link_bytes)
        super().__init__({
            "clk": In(1),
            "i": In(link),
            "o": Out(wiring.Signature({"valid": Out(1),
                                       "payload": Out(link.members["payload"].shape)})),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        core.gated_unit_clocks = True
        m.domains.sync = ClockDomain("sync")
        m.domains.power_on = ClockDomain("power_on", reset_less=True)
        m.d.comb += [ClockSignal("sync").eq(self.clk), ClockSignal("power_on").eq(self.clk)]
        countdown = Signal(range(self.reset_cycles + 1), init=self.reset_cycles)
        with m.If(countdown != 0):
            m.d.power_on += countdown.eq(countdown - 1)
        m.d.comb += ResetSignal("sync").eq(countdown != 0)
        wiring.connect(m, wiring.flipped(self.i), core.i)
        m.d.comb += [
            self.o.valid.eq(core.o.valid),
            self.o.payload.eq(core.o.payload),
            core.o.ready.eq(1),
            self.idle.eq(core.idle),
        ]
        return m


#: Part of the compiled board's cache key: the sources of the gateware packages are hashed by
#: :func:`~maxaccel.sim.verilator.source_key`, this wrapper's own source is not among them
#: (its code only, as theirs: editing its docstring does not rebuild a model).
_BENCH_KEY = hashlib.sha256(code_of(inspect.getsource(BenchCore)).encode()).hexdigest()[:12]


def _load(parameters, synthesis=None, name="core"):
    """The harness around a :class:`~maxaccel.hdl.top.Core` made with ``parameters`` compiled
    (Amaranth's Verilog of :class:`BenchCore` around it, or the netlist ``synthesis`` makes of
    the core alone: a board's own reset and ports) and loaded, its functions declared. The
    cache key is the parameters and the sources: a built model loads without making the
    core at all."""
    defines = {"LINK_BYTES": parameters["link_bytes"]}
    made = recipe(parameters)
    design = lambda: Core(**parameters)     # noqa: E731
    if synthesis is None:
        design = lambda: BenchCore(Core(**parameters), _RESET_CYCLES)     # noqa: E731
        defines["BENCH_CORE"] = 1
        made = f"BenchCore[{_BENCH_KEY}]({made}, reset_cycles={_RESET_CYCLES})"
    library = compile_model(design, "core_harness.cpp", name=name, top="maxaccel_core",
                            defines=defines, synthesis=synthesis, recipe=made)
    size_p = ctypes.POINTER(ctypes.c_size_t)
    library.maxaccel_board_new.argtypes = [ctypes.c_uint32]
    library.maxaccel_board_new.restype = ctypes.c_void_p
    library.maxaccel_board_delete.argtypes = [ctypes.c_void_p]
    library.maxaccel_board_delete.restype = None
    library.maxaccel_board_cycles.argtypes = [ctypes.c_void_p]
    library.maxaccel_board_cycles.restype = ctypes.c_uint64
    library.maxaccel_board_run.argtypes = [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, size_p, ctypes.c_void_p,
        ctypes.c_size_t, size_p, ctypes.c_uint64, ctypes.c_uint32]
    library.maxaccel_board_run.restype = ctypes.c_int
    return library


class VerilatorBoard:
    """The accelerator gateware, compiled with Verilator, behind ``write``/``read`` of bytes.

    Parameters
    ----------
    lanes, replay_depth, max_dims, max_operands, max_count, pool_channels, clock_hz,
    frame_timeout_cycles, units, reduce_pipeline :
        As :class:`~maxaccel.sim.virtual_board.VirtualBoard`; defaults in
        :data:`VERILATOR_DEFAULTS` (the NiteFury's core: 4 lanes, a 1024-beat replay buffer).
    link_bytes : int, optional
        Bytes per cycle between the bench and the core; default the NiteFury's link word, or
        a beat if that is less: ``min(32, 8 * lanes)``, a wide stream (as PCIe gives), so a
        compiled board moves a beat per cycle instead of a byte. ``link_bytes=1`` is a byte link, cycle for cycle as
        :class:`~maxaccel.sim.virtual_board.VirtualBoard`'s default.
    timeout : float, optional
        Default ``timeout`` of :meth:`read`, in seconds of simulated time (None: no limit).

    Attributes
    ----------
    identity : maxaccel.contract.wire.Identity
    cycles : int
        Clock cycles simulated so far.

    Transport interface
    -------------------
    As :class:`~maxaccel.sim.virtual_board.VirtualBoard`: ``write(data)`` queues bytes,
    ``read(size, timeout=None)`` simulates until ``size`` bytes came out, the board is
    quiescent, or ``timeout`` seconds of simulated time have passed; ``reset_input()``,
    ``reset()``, ``close()``, context manager.

    Raises
    ------
    maxaccel.sim.verilator.VerilatorUnavailable
        No Verilator or no C++ compiler (the message says how to get them).
    """

    def __init__(self, *, timeout=None, **parameters):
        unknown = set(parameters) - set(CORE_DEFAULTS)
        if unknown:
            raise TypeError(f"unknown virtual board parameter(s) {', '.join(sorted(unknown))}; "
                            f"accepted: {', '.join(CORE_DEFAULTS)}, timeout")
        parameters = {**VERILATOR_DEFAULTS, "link_bytes": None, **parameters}
        if parameters["link_bytes"] is None:
            parameters["link_bytes"] = min(_NITEFURY.link_word, LANE_BYTES * parameters["lanes"])
        self.clock_hz = parameters["clock_hz"]
        require_verilator()     # before building anything: a missing tool is said at once
        self.identity = Core.identity_of(**parameters)
        self.link_bytes = parameters["link_bytes"]
        self.timeout = timeout
        self._library = self._compile(parameters)
        self._handle = self._library.maxaccel_board_new(_RESET_CYCLES)
        self._pending = bytearray()
        self._received = bytearray()

    def _compile(self, parameters):
        """The compiled model of the core made with ``parameters``
        (:class:`~maxaccel.sim.netlist.NetlistBoard` compiles a synthesised netlist instead)."""
        return _load(parameters)

    @property
    def cycles(self):
        return self._library.maxaccel_board_cycles(self._handle) - _RESET_CYCLES

    def _check_open(self):
        if self._handle is None:
            raise ValueError("the virtual board is closed")

    def write(self, data):
        """Queue ``data`` for the board; returns the number of bytes queued."""
        self._check_open()
        data = bytes(data)
        self._pending += data
        return len(data)

    def read(self, size, timeout=None, *, timeout_cycles=None):
        """Up to ``size`` bytes from the board (see the class docstring)."""
        self._check_open()
        if timeout_cycles is None:
            timeout = self.timeout if timeout is None else timeout
            timeout_cycles = None if timeout is None else int(timeout * self.clock_hz + 0.999)
        wanted = size - len(self._received)
        if wanted > 0 and (timeout_cycles is None or timeout_cycles > 0):
            limit = (1 << 64) - 1 if timeout_cycles is None else timeout_cycles
            self._run(wanted, limit, _QUIESCENT_AFTER)
        data = bytes(self._received[:size])
        del self._received[:size]
        return data

    def run(self, cycles):
        """Simulate ``cycles`` more clock cycles (input keeps flowing, output is kept)."""
        self._check_open()
        self._run(cycles + 1, cycles, 0xFFFFFFFF)

    def settle(self, timeout_cycles=None):
        """Run until the board is quiescent; returns False if ``timeout_cycles`` ran out first."""
        self._check_open()
        left = (1 << 64) - 1 if timeout_cycles is None else timeout_cycles
        while True:
            start = self.cycles
            verdict = self._run(1 << 16, left, _QUIESCENT_AFTER)
            left -= self.cycles - start
            if verdict != _OUT_FULL:
                return verdict == _QUIESCENT

    def _run(self, out_capacity, max_cycles, settle):
        """One call into the compiled model, the pending bytes passed in place (no copy);
        returns the harness's verdict."""
        out = ctypes.create_string_buffer(out_capacity + self.link_bytes)
        taken, produced = ctypes.c_size_t(0), ctypes.c_size_t(0)
        pending = (ctypes.c_char * len(self._pending)).from_buffer(self._pending)
        try:
            verdict = self._library.maxaccel_board_run(
                self._handle, ctypes.addressof(pending), len(self._pending),
                ctypes.byref(taken), out, out_capacity, ctypes.byref(produced), max_cycles,
                settle)
        finally:
            del pending     # releases the bytearray for resizing
        del self._pending[:taken.value]
        self._received += out.raw[:produced.value]
        return verdict

    @property
    def pending_input(self):
        """Bytes written and not yet taken by the gateware."""
        return len(self._pending)

    def discard_input(self):
        """Drop the bytes written and not yet taken (a transfer aborted on the way in)."""
        self._pending.clear()

    @property
    def in_waiting(self):
        """Bytes received from the board and not read yet."""
        return len(self._received)

    def reset_input(self):
        """Discard the bytes received from the board and not read yet."""
        self._received.clear()

    def reset(self):
        """Power-cycle the board: a fresh model instance (the compiled library is kept), every
        byte written or received and not read discarded."""
        self._check_open()
        self._library.maxaccel_board_delete(self._handle)
        self._handle = self._library.maxaccel_board_new(_RESET_CYCLES)
        self._pending.clear()
        self._received.clear()

    def close(self):
        if self._handle is not None:
            self._library.maxaccel_board_delete(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self.close()
