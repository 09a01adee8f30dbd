"""The virtual board: the real top-level gateware in Amaranth's simulator behind a byte pipe.

A :class:`VirtualBoard` speaks the same bytes as a physical board (``docs/protocol.md``), so
the host driver, the CLI and the tests use it as one more transport.
"""

import collections
import math
import signal
import threading
import time

from amaranth.hdl import Value
from amaranth.sim import Simulator

from maxaccel.hdl.top import UNITS, Core, UARTTop
from maxaccel.contract.wire import MAX_COUNT, WINDOW_FIELD_MAX

__all__ = ["VirtualBoard", "CORE_DEFAULTS", "BYTES_PER_S"]

#: Request bytes the Python-simulated board takes per second of wall-clock time with
#: :data:`CORE_DEFAULTS` (a byte per cycle at 1 300 to 3 300 cycles a second, see the class
#: docstring): the basis of the warning before a long ``sim`` job.
BYTES_PER_S = 2000

#: The virtual boards' :class:`~maxaccel.hdl.top.Core` parameters, unless given: a small core
#: (2 lanes, a 64-beat replay buffer, a windowed pooling unit of all its lanes with short line buffers) that
#: simulates fast, a 1 MHz nominal clock, and a short frame timeout (2 ms) to keep timeouts
#: cheap in simulation.
CORE_DEFAULTS = dict(lanes=2, replay_depth=64, max_dims=4, max_operands=4, max_count=MAX_COUNT,
                     pool_channels=32, window_lanes=None, window_extent=3, window_columns=16,
                     window_plane=64, window_extent_outer=None, clock_hz=1_000_000,
                     frame_timeout_cycles=2000, units=UNITS, link_bytes=1,
                     reduce_pipeline="deep", dtype=None, window_serial_products=False,
                     window_serial=False, serial_crc=False,
                     window_field_max=WINDOW_FIELD_MAX, window_indices=True)


class VirtualBoard:
    """The accelerator gateware, simulated, behind ``write``/``read`` of bytes.

    Two modes:

    * ``uart=False`` (default): :class:`~maxaccel.hdl.top.Core` with its byte streams driven
      directly, one byte per cycle at most. The fastest.
    * ``uart=True``: :class:`~maxaccel.hdl.top.UARTTop`, with the bytes sent and received as
      8N1 frames on the ``rx``/``tx`` pins at ``divisor`` cycles per bit (real bit timing,
      ``10 * divisor`` cycles per byte).

    Simulated time only advances inside :meth:`read` (and :meth:`run`, :meth:`settle`):
    :meth:`write` queues bytes, which the simulated host side then feeds to the gateware as
    fast as it takes them, while :meth:`read` runs the simulation until enough bytes came out.
    A request written in pieces with reads in between therefore sees simulated time pass in
    between, as on a real link (a frame left incomplete is abandoned after
    ``frame_timeout_cycles`` with a ``TIMEOUT`` reply); time the host spends elsewhere (a
    ``time.sleep``) is not simulated.

    Parameters
    ----------
    lanes, replay_depth, max_dims, max_operands, max_count, pool_channels, frame_timeout_cycles, units, link_bytes, reduce_pipeline, dtype, window_serial_products, window_serial, serial_crc, window_field_max, window_indices :
        Passed to :class:`~maxaccel.hdl.top.Core`; defaults in :data:`CORE_DEFAULTS`. With
        ``link_bytes`` above 1 the bench offers that many pending bytes per cycle (a wide
        stream, not a UART: ``uart=True`` needs 1).
    clock_hz : int
        Nominal clock frequency: reported by ``IDENTIFY``, and one simulated cycle is
        ``1 / clock_hz`` seconds of simulated time.
    uart : bool
        Simulate at the UART pins.
    divisor : int
        Cycles per bit in UART mode (at least 4).
    timeout : float, optional
        Default ``timeout`` of :meth:`read`, in seconds of simulated time (None: no limit).
    wall_timeout : float, optional
        Safety net: no :meth:`read` simulates for longer than this many seconds of wall-clock
        time (None: no limit).

    Attributes
    ----------
    identity : maxaccel.contract.wire.Identity
        What the gateware reports to ``IDENTIFY``.
    link_bytes : int
        Bytes per cycle of the link between the bench and the core (1 at the UART pins).
    cycles : int
        Clock cycles simulated so far.

    Transport interface
    -------------------
    ``write(data) -> int``, ``read(size, timeout=None) -> bytes``, ``drain()``,
    ``reset_input()``, ``reset()``, ``close()``, and use as a context manager. ``read`` returns as soon as ``size`` bytes came
    out; it returns fewer (possibly none)

    * when the board is *quiescent*: nothing queued for it and nothing in progress in the
      gateware, so no further byte can come without new input (exactly when a read from a real
      board would time out; detected within a few cycles, so such a read costs nothing);
    * after ``timeout`` seconds of **simulated** time (``timeout * clock_hz`` cycles;
      ``timeout=0`` returns what has come out without simulating), or ``timeout_cycles``
      cycles. Simulated time is what a real board would take, so a large request that the
      simulator needs minutes for never times out a host's read spuriously;
    * after ``wall_timeout`` seconds of wall-clock time, if set.

    Speed: the gateware takes a request byte per cycle, and the Python simulator runs the core
    at roughly 1 300 to 3 300 cycles per second with 2 lanes, depending on the command (REDUCE
    and MAX are the slowest); about 4 200 to 4 600 cycles (90 to 100 bytes) per second in UART
    mode with ``divisor=4``. Building the simulator takes about a second.
    """

    def __init__(self, *, uart=False, divisor=4, timeout=None, wall_timeout=None,
                 **parameters):
        unknown = set(parameters) - set(CORE_DEFAULTS)
        if unknown:
            raise TypeError(f"unknown virtual board parameter(s) {', '.join(sorted(unknown))}; "
                            f"accepted: {', '.join(CORE_DEFAULTS)}, uart, divisor, timeout, "
                            f"wall_timeout")
        parameters = {**CORE_DEFAULTS, **parameters}
        clock_hz = parameters.pop("clock_hz")
        self.uart = uart
        if uart:
            self._top = UARTTop(clock_hz, clock_hz // divisor, **parameters)
            self.divisor = self._top.divisor
        else:
            self._top = Core(clock_hz=clock_hz, **parameters)
        self.identity = self._top.identity
        self.link_bytes = parameters["link_bytes"]
        self.clock_hz = clock_hz
        self.timeout = timeout
        self.wall_timeout = wall_timeout
        self.cycles = 0
        self._pending = collections.deque()   # bytes written, not yet sent to the gateware
        self._received = bytearray()          # bytes from the gateware, not yet read
        self._idle_cycles = 0                 # consecutive cycles with nothing going on
        self._closed = False

        self._sim = Simulator(self._top)
        self._sim.add_clock(1 / clock_hz)
        self._sim.add_process(self._uart_bench if uart else self._stream_bench)
        while self.cycles == 0:       # start the bench (and leave reset) before anything else
            self._sim.advance()

    # -- testbenches: run forever; the simulation is advanced by _run_until.

    async def _stream_bench(self, ctx):
        core = self._top
        pending, received = self._pending, self._received
        width = core.link_bytes
        i_valid, i_payload = core.i.valid, Value.cast(core.i.payload)
        o_payload = Value.cast(core.o.payload)
        ctx.set(core.o.ready, 1)
        if width == 1:
            next_word, take_word = pending.popleft, received.append
        else:
            # A link word: the next pending bytes (up to `width`), their count above them.
            data_bits = 8 * width

            def next_word():
                count = min(width, len(pending))
                value = 0
                for k in range(count):
                    value |= pending.popleft() << (8 * k)
                return value | count << data_bits

            def take_word(word):
                count = word >> data_bits
                received.extend(word.to_bytes(width + 1, "little")[:count])
        offering = False    # a word is on core.i
        async for _, _, ready, valid, payload, idle in ctx.tick().sample(
                core.i.ready, core.o.valid, o_payload, core.idle):
            self.cycles += 1
            if valid:
                take_word(payload)
            if offering:
                self._idle_cycles = 0
                if ready:
                    if pending:
                        ctx.set(i_payload, next_word())
                    else:
                        offering = False
                        ctx.set(i_valid, 0)
            else:
                self._idle_cycles = self._idle_cycles + 1 if idle and not valid else 0
                if pending:
                    offering = True
                    ctx.set(i_payload, next_word())
                    ctx.set(i_valid, 1)

    async def _uart_bench(self, ctx):
        top = self._top
        divisor = self.divisor
        pending, received = self._pending, self._received
        # Sending: the bits of the byte on the line, one per `divisor` cycles.
        bits, bit_cycles = [], 0
        # Receiving: cycles since the start bit's falling edge, or None when the line is idle.
        rx_phase, rx_shift, previous_tx = None, 0, 1
        async for _, _, tx, idle in ctx.tick().sample(top.tx, top.idle):
            self.cycles += 1
            busy = False
            if bit_cycles:
                bit_cycles -= 1
            if not bit_cycles:
                if not bits and pending:
                    byte = pending.popleft()
                    bits = [0] + [byte >> k & 1 for k in range(8)] + [1]
                if bits:
                    ctx.set(top.rx, bits.pop(0))
                    bit_cycles = divisor
            if bits or bit_cycles:
                busy = True
            if rx_phase is None:
                if previous_tx and not tx:
                    rx_phase, rx_shift = 0, 0
            else:
                rx_phase += 1
                # Sample bit k (0 = start) in its middle.
                k, offset = divmod(rx_phase, divisor)
                if offset == divisor // 2 and 1 <= k <= 8:
                    rx_shift |= tx << (k - 1)
                elif offset == divisor // 2 and k == 9:
                    if tx:
                        received.append(rx_shift)
                    rx_phase = None
            previous_tx = tx
            if rx_phase is not None:
                busy = True
            self._idle_cycles = self._idle_cycles + 1 if idle and not busy else 0

    # -- driving the simulation.

    def _run_until(self, done, *, timeout=None, timeout_cycles=None, settle=None):
        """Advance until ``done()``; returns "done", "quiescent", "cycles" or "timeout"."""
        if self._closed:
            raise ValueError("the virtual board is closed")
        if settle is None:
            settle = 2 if not self.uart else 2 * self.divisor + 4
        deadline = None if timeout is None else time.monotonic() + timeout
        last_cycle = None if timeout_cycles is None else self.cycles + timeout_cycles
        self._idle_cycles = 0
        next_check = self.cycles     # of the wall clock, every 256 cycles
        advance = self._sim.advance
        # Ctrl-C is held until the simulator is between two steps: raised inside one, it would
        # end the testbench coroutine and leave a board that never answers again.
        interrupted = []
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if callable(previous):
                signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
            else:
                previous = None
        verdict = "done"
        try:
            while not done():
                if interrupted:
                    break
                if self._idle_cycles >= settle and not self._pending:
                    verdict = "quiescent"
                    break
                if last_cycle is not None and self.cycles >= last_cycle:
                    verdict = "cycles"
                    break
                if deadline is not None and self.cycles >= next_check:
                    next_check = self.cycles + 256
                    if time.monotonic() > deadline:
                        verdict = "timeout"
                        break
                advance()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        if interrupted:
            previous(signal.SIGINT, None)     # the handler that was there: KeyboardInterrupt
        return verdict

    def write(self, data):
        """Queue ``data`` for the board; returns the number of bytes queued."""
        if self._closed:
            raise ValueError("the virtual board is closed")
        data = bytes(data)
        self._pending.extend(data)
        return len(data)

    def read(self, size, timeout=None, *, timeout_cycles=None):
        """Up to ``size`` bytes from the board.

        Runs the simulation until ``size`` bytes have come out, or the board is quiescent, or
        ``timeout`` seconds of simulated time (default: the constructor's ``timeout``; None: no
        limit) or ``timeout_cycles`` cycles (if given, instead of ``timeout``) have passed, or
        ``wall_timeout``; returns what came out.
        """
        if timeout_cycles is None:
            if timeout is None:
                timeout = self.timeout
            if timeout is not None:
                timeout_cycles = math.ceil(timeout * self.clock_hz)
        self._run_until(lambda: len(self._received) >= size, timeout=self.wall_timeout,
                        timeout_cycles=timeout_cycles)
        data = bytes(self._received[:size])
        del self._received[:size]
        return data

    @property
    def pending_input(self):
        """Bytes written and not yet taken by the gateware."""
        return len(self._pending)

    def discard_input(self):
        """Drop the bytes written and not yet taken (a transfer aborted on the way in)."""
        self._pending.clear()

    def drain(self):
        """Simulate until the board has taken every byte written (its replies are kept for
        :meth:`read`): a write that returns when the bytes are on the wire, as a serial port's,
        so a progress report follows the board rather than a queue."""
        pending = self._pending
        self._run_until(lambda: not pending, timeout=self.wall_timeout, settle=float("inf"))

    def run(self, cycles):
        """Simulate ``cycles`` more clock cycles (input keeps flowing, output is kept)."""
        target = self.cycles + cycles
        self._run_until(lambda: self.cycles >= target, settle=float("inf"))

    def settle(self, timeout_cycles=None):
        """Run until the board is quiescent; returns False if ``timeout_cycles`` ran out first."""
        return self._run_until(lambda: False, timeout_cycles=timeout_cycles) == "quiescent"

    @property
    def in_waiting(self):
        """Bytes received from the board and not read yet."""
        return len(self._received)

    def reset_input(self):
        """Discard the bytes received from the board and not read yet."""
        self._received.clear()

    def reset_output(self):
        """Discard the bytes written and not yet taken by the board."""
        self._pending.clear()

    def reset(self):
        """Power-cycle the board: the gateware back to its initial state, every byte written
        or received and not read discarded (what a server does when a client vanished
        mid-request)."""
        if self._closed:
            raise ValueError("the virtual board is closed")
        self._pending.clear()
        self._received.clear()
        self._sim.reset()
        start = self.cycles
        while self.cycles == start:    # restart the bench and leave reset, as at creation
            self._sim.advance()

    def close(self):
        self._closed = True
        self._sim = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
