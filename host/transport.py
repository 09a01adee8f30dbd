"""Byte pipes to a board: serial port, PCIe XDMA character devices, the virtual board.

A transport moves bytes and nothing else; framing, retries and meaning live in
:mod:`maxaccel.host.link`. Every transport has the same four methods:

``write(data)``
    Send all of ``data`` (raises :class:`TransportError` if the pipe stops taking bytes).
``read(size, timeout_s)``
    Up to ``size`` bytes: returns when ``size`` bytes have arrived or ``timeout_s`` has passed,
    so it may return fewer (``b""`` when nothing came). ``timeout_s=0`` returns what is already
    there.
``reset_input()``
    Discard bytes received and not yet read.
``close()``
    Release the port or device files (idempotent).

:func:`open_transport` turns a device URL into a transport:

==============================  =====================================================
``sim``                         the virtual board, in this process (Amaranth's simulator)
``verilator``                   the same board compiled with Verilator: thousands of times
                                faster (``sim?lanes=4``, ``verilator?lanes=4``: Core parameters)
``netlist:BOARD``               a Lattice board's Core as yosys synthesises it, simulated gate by
                                gate with Verilator (``netlist:ice40_hx8k_breakout``)
``serial://PORT``               a serial port through pyserial (``serial:///dev/ttyUSB1``,
                                ``serial://COM3``; any pyserial URL such as ``loop://``), at
                                :data:`DEFAULT_BAUD`, the rate of the boards we build;
                                ``?board=NAME`` takes a board's own rate
                                (:data:`maxaccel.boards.targets.TARGETS`), ``?baud=N`` any
``xdma:///dev/xdma0``           Xilinx XDMA character devices ``/dev/xdma0_h2c_0`` (to the
                                board) and ``/dev/xdma0_c2h_0`` (from it)
==============================  =====================================================
"""

import os
import re
import select
import time
import urllib.parse

from maxaccel.boards.targets import DEFAULT_BAUD, TARGETS
from maxaccel.contract.progress import log

__all__ = ["TransportError", "Transport", "SerialTransport", "XdmaTransport", "SimTransport",
           "open_transport", "check_url", "register_scheme", "URL_FORMS", "DEFAULT_BAUD",
           "latency_timer_path"]

#: The device URL forms users may give, for error messages and ``--help``.
URL_FORMS = ("sim", "serial://PORT[?board=NAME|?baud=N] (e.g. serial:///dev/ttyUSB1?board=ulx3s)",
             "xdma:///dev/xdma0", "verilator",
             "netlist:BOARD (e.g. netlist:ice40_hx8k_breakout)")


class TransportError(OSError):
    """A pipe to the board could not be opened, or stopped moving bytes."""


class Transport:
    """Interface of every transport (see the module docstring)."""

    #: How long the link waits for a reply to start before it retries (seconds); a slow
    #: transport (a simulator) sets more.
    reply_timeout_s = 1.0
    #: Bytes the link writes at a time before it collects what has arrived, so that a reply
    #: streamed back while the request is still going out never overflows an OS buffer.
    write_chunk = 4096

    def write(self, data):
        raise NotImplementedError

    def read(self, size, timeout_s):
        raise NotImplementedError

    def reset_input(self):
        raise NotImplementedError

    def close(self):
        raise NotImplementedError

    def abandon(self, silence_s):
        """After an interrupted request: stay silent for ``silence_s`` (longer than the
        device's frame timeout, so it abandons a partial frame), then discard what came in."""
        time.sleep(silence_s)
        self.reset_input()

    def slow_warning(self, nbytes):
        """A line to show before a request of ``nbytes`` that will take minutes on this
        transport, or None."""
        return None

    def describe(self):
        """What was tried, for a message about a device that does not answer."""
        return ""


def latency_timer_path(port):
    """The sysfs file of the FTDI latency timer behind the serial device ``port`` (Linux's
    ``ftdi_sio`` driver: ``/sys/class/tty/ttyUSB0/device/latency_timer``, in milliseconds), or
    None if it has none (not an FTDI chip, a pseudo-terminal, another OS)."""
    name = os.path.basename(os.path.realpath(port))
    path = f"/sys/class/tty/{name}/device/latency_timer"
    return path if os.path.exists(path) else None


def _read_timer(path):
    try:
        with open(path) as file:
            return f"{int(file.read().strip())} ms"
    except (OSError, ValueError):
        return "unreadable"


class SerialTransport(Transport):
    """A serial port (UART) through pyserial.

    Parameters
    ----------
    port : str
        Device path (``/dev/ttyUSB1``, ``COM3``) or any pyserial URL (``loop://``,
        ``socket://host:port``).
    baud : int
        Bits per second (default :data:`DEFAULT_BAUD`).
    write_timeout_s : float
        Longest a write may block before :class:`TransportError`.
    baud_from : str
        Where the rate came from, for messages (``"the default"``, ``"board ulx3s"``).
    """

    def __init__(self, port, baud=DEFAULT_BAUD, *, write_timeout_s=5.0, baud_from="given"):
        try:
            import serial
        except ImportError as error:  # pragma: no cover - pyserial is a dependency
            raise TransportError(f"serial transport needs pyserial: {error}") from None
        self._serial_module = serial
        try:
            self._port = serial.serial_for_url(port, baudrate=baud, timeout=0,
                                               write_timeout=write_timeout_s)
        except (serial.SerialException, ValueError, OSError) as error:
            raise TransportError(f"cannot open serial port {port!r} at {baud} baud: {error}") \
                from None
        self.port = port
        self.baud = baud
        self.baud_from = baud_from
        # Nothing of an earlier session may reach the board (a pseudo-terminal served by
        # 'maxaccel serve' also takes this as "a new client": it resets its board).
        self._port.reset_output_buffer()
        # Ten bits a byte on the wire: a frame of n bytes needs n * 10 / baud seconds; wait for
        # a reply to start for at least a second and ten 4 KiB chunks' worth.
        self.reply_timeout_s = max(1.0, 10 * self.write_chunk * 10 / baud)
        self.low_latency = self._set_low_latency()

    def _set_low_latency(self):
        """Ask the OS for the port's low-latency mode (Linux: the FTDI driver then sets its
        latency timer, 16 ms by default, to 1 ms; docs/boards.md). Returns True if it is set,
        False if it could not be (a warning with the fix once, when the port is an FTDI chip
        whose timer then holds every short reply), None where the port has no such mode (a
        pyserial URL, another OS)."""
        setter = getattr(self._port, "set_low_latency_mode", None)
        if setter is None:
            log.debug(f"serial port {self.port}: no low-latency mode here (not a Linux serial "
                      f"port)")
            return None
        try:
            setter(True)
        except (ValueError, OSError, self._serial_module.SerialException) as error:
            timer = latency_timer_path(self.port)
            if timer is None:
                log.debug(f"serial port {self.port}: low-latency mode not available "
                          f"({error}); not an FTDI USB-serial port, no latency timer to lower")
            else:
                log.warning(f"serial port {self.port}: could not set the low-latency mode "
                            f"({error}); its FTDI latency timer ({_read_timer(timer)}) may "
                            f"hold every short reply: as root, echo 1 > {timer} (docs/"
                            f"boards.md)")
            return False
        log.debug(f"serial port {self.port}: low-latency mode set (FTDI latency timer 1 ms)")
        return True

    def write(self, data):
        try:
            self._port.write(data)
            self._port.flush()
        except self._serial_module.SerialTimeoutException:
            raise TransportError(f"serial port {self.port!r} stopped taking bytes (write "
                                 f"timeout)") from None
        except (self._serial_module.SerialException, OSError) as error:
            raise TransportError(f"writing to serial port {self.port!r} failed: {error}") \
                from None

    def read(self, size, timeout_s):
        try:
            self._port.timeout = max(0.0, timeout_s)
            return bytes(self._port.read(size))
        except (self._serial_module.SerialException, OSError) as error:
            raise TransportError(f"reading from serial port {self.port!r} failed: {error}") \
                from None

    def reset_input(self):
        self._port.reset_input_buffer()

    def abandon(self, silence_s):
        self._port.reset_output_buffer()    # what an interrupted write left unsent
        super().abandon(silence_s)

    def describe(self):
        others = sorted({t.baud for t in TARGETS.values() if t.baud and t.baud != self.baud})
        return (f"tried {self.port} at {self.baud} baud ({self.baud_from}); "
                + (f"other boards run at {', '.join(map(str, others))} baud: " if others
                   else "") + "give ?board=NAME or ?baud=N")

    def close(self):
        self._port.close()


class XdmaTransport(Transport):
    """The Xilinx XDMA driver's streaming character devices of a PCIe board.

    ``<device>_h2c_0`` carries bytes to the board, ``<device>_c2h_0`` from it (AXI4-Stream
    mode). Both are opened non-blocking and waited on with ``select``, so a board that does not
    answer gives a timeout, never a hang; the same code drives a pair of FIFOs in tests. The
    XDMA driver itself may ignore non-blocking mode: a ``c2h`` read then returns when the bytes
    asked for have come or the stream packet ends (TLAST). The link asks for no more than the
    frame it is receiving still needs, so a board should end each reply frame with TLAST.

    Parameters
    ----------
    device : str
        Path prefix, e.g. ``/dev/xdma0``.
    open_timeout_s, write_timeout_s : float
        How long opening the write side (a FIFO needs a reader) and one write may wait.
    """

    def __init__(self, device, *, open_timeout_s=2.0, write_timeout_s=5.0):
        self.device = device
        self.write_path = f"{device}_h2c_0"
        self.read_path = f"{device}_c2h_0"
        self.write_timeout_s = write_timeout_s
        self._read_fd = self._write_fd = None
        for path in (self.write_path, self.read_path):
            if not os.path.exists(path):
                raise TransportError(
                    f"XDMA device file {path} does not exist (is the xdma driver loaded and "
                    f"the board enumerated? expected {self.write_path} and {self.read_path})")
        try:
            self._read_fd = os.open(self.read_path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as error:
            raise TransportError(f"cannot open {self.read_path}: {error}") from None
        deadline = time.monotonic() + open_timeout_s
        while True:
            try:
                self._write_fd = os.open(self.write_path, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as error:
                # ENXIO: a FIFO with no reader yet.
                if time.monotonic() > deadline:
                    self.close()
                    raise TransportError(f"cannot open {self.write_path}: {error}") from None
                time.sleep(0.01)

    def write(self, data):
        view = memoryview(data)
        while view:
            _, writable, _ = select.select([], [self._write_fd], [], self.write_timeout_s)
            if not writable:
                raise TransportError(f"{self.write_path} took no bytes for "
                                     f"{self.write_timeout_s} s")
            try:
                written = os.write(self._write_fd, view)
            except BlockingIOError:
                continue
            except OSError as error:
                raise TransportError(f"writing to {self.write_path} failed: {error}") from None
            view = view[written:]

    def read(self, size, timeout_s):
        chunks, got = [], 0
        deadline = time.monotonic() + max(0.0, timeout_s)
        while got < size:
            left = deadline - time.monotonic()
            readable, _, _ = select.select([self._read_fd], [], [], max(0.0, left))
            if not readable:
                break
            try:
                chunk = os.read(self._read_fd, size - got)
            except BlockingIOError:
                chunk = None
            except OSError as error:
                raise TransportError(f"reading from {self.read_path} failed: {error}") from None
            if chunk:
                chunks.append(chunk)
                got += len(chunk)
            elif left <= 0:
                break
            else:
                # End of file (a FIFO whose writer is gone) or a spurious wake-up: do not spin.
                time.sleep(min(0.001, max(0.0, left)))
        return b"".join(chunks)

    def reset_input(self):
        while self.read(1 << 16, 0):
            pass

    def close(self):
        for name in ("_read_fd", "_write_fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)


class SimTransport(Transport):
    """A virtual board in this process: ``sim`` (``maxaccel.sim.virtual_board.VirtualBoard``,
    Amaranth's simulator) or ``verilator`` (``maxaccel.sim.verilator_board.VerilatorBoard``,
    the same gateware compiled).

    A simulated board is slower than a real link (``sim``: some thousand cycles a second), but
    its ``read`` returns at once when the board is quiescent (nothing in flight, so nothing
    more can come): the reply timeout only bounds a simulation that is still busy, and is an
    hour.
    """

    reply_timeout_s = 3600.0

    BOARDS = {"sim": ("maxaccel.sim.virtual_board", "VirtualBoard"),
              "verilator": ("maxaccel.sim.verilator_board", "VerilatorBoard"),
              "netlist": ("maxaccel.sim.netlist", "NetlistBoard")}

    def __init__(self, kind="sim", **options):
        import importlib
        module_name, class_name = self.BOARDS[kind]
        try:
            board_class = getattr(importlib.import_module(module_name), class_name)
        except ImportError as error:
            raise TransportError(
                f"the {kind!r} virtual board is not available ({error}); it needs "
                f"{module_name} and amaranth") from None
        try:
            self.board = board_class(**options)
        except TypeError as error:
            raise ValueError(f"{kind}: {error}") from None
        except ValueError as error:
            if not options or kind == "netlist":
                raise
            raise ValueError(_url_parameter_error(kind, options, str(error))) from None

        self.kind = kind

    def write(self, data):
        self.board.write(data)
        drain = getattr(self.board, "drain", None)
        if drain is not None:
            # Return when the board has taken the bytes, as a serial port does: progress then
            # follows the simulation, and a slow board holds its writer back.
            drain()

    def read(self, size, timeout_s):
        return self.board.read(size, timeout_s)

    def reset_input(self):
        self.board.reset_input()

    def reset(self):
        """Power-cycle the simulated board (the server does this when a client vanishes)."""
        self.board.reset()

    def abandon(self, silence_s):
        # A simulated board is power-cycled: waiting out a frame timeout, and the padding of a
        # reply it had started, would take the simulator minutes (the host sleeping does not
        # advance simulated time at all).
        self.reset()

    def slow_warning(self, nbytes):
        if self.kind != "sim":
            return None
        from maxaccel.sim.virtual_board import BYTES_PER_S
        seconds = nbytes / BYTES_PER_S
        if seconds < 60:
            return None
        return (f"this moves {nbytes / 1e6:.2f} MB through the Python-simulated board: about "
                f"{seconds / 60:.0f} min; 'verilator' is the same gateware compiled, "
                f"thousands of times faster")

    def close(self):
        self.board.close()


def _url_parameter_error(kind, options, text):
    """A virtual board's refusal of its URL's parameters, naming them as the URL gives them:
    those the gateware's message names (or whose value it quotes), else all of them; the
    message without the name of the gateware unit that refused."""
    named = [name for name in options
             if re.search(rf"\b{re.escape(name)}\b", text)
             or re.search(rf"\bnot {re.escape(repr(options[name]))}$", text)]
    given = "&".join(f"{name}={options[name]}" for name in (named or options))
    text = re.sub(r"^[A-Z][A-Za-z]+:? (?=[a-z])", "", text)
    if len(named) == 1 and not re.search(rf"\b{re.escape(named[0])}\b", text):
        # The unit's own name for it (BroadcastMax's depth is the URL's replay_depth).
        text = re.sub(r"^\w+(?= must be)", named[0], text)
    return f"{kind}?{given}: {text}"


def _serial_arguments(parsed, options):
    """``(port, baud, where the baud came from)`` of a ``serial://`` URL."""
    port = (parsed.netloc + parsed.path) if parsed.netloc else parsed.path
    if not port:
        raise ValueError("serial URL names no port: use serial:///dev/ttyUSB1 "
                         "(?board=NAME or ?baud=N) or serial://COM3")
    board = options.pop("board", None)
    baud = options.pop("baud", None)
    if options:
        raise ValueError(f"unknown serial URL option(s) {', '.join(sorted(options))}; "
                         f"accepted: board, baud")
    if board is not None and baud is not None:
        raise ValueError("give a serial URL ?board=NAME or ?baud=N, not both")
    if board is not None:
        uart = [name for name, t in TARGETS.items() if t.baud]
        if board not in uart:
            raise ValueError(f"?board={board!r}: no board of that name has a serial link; "
                             f"known: {', '.join(uart)}")
        return port, TARGETS[board].baud, f"board {board}"
    if baud is None:
        return port, DEFAULT_BAUD, "the default"
    try:
        baud = int(baud)
    except ValueError:
        raise ValueError(f"?baud={baud!r} must be an integer (bits per second)") from None
    if baud <= 0:
        raise ValueError(f"?baud={baud} must be positive")
    return port, baud, "given"


def _open_serial(parsed, options):
    port, baud, baud_from = _serial_arguments(parsed, options)
    return SerialTransport(port, baud, baud_from=baud_from)


def _check_xdma(parsed, options):
    if options or not parsed.path or parsed.netloc:
        raise ValueError(f"XDMA URL must be xdma:///dev/xdmaN (the device path prefix), "
                         f"got {parsed.geturl()!r}")


def _open_xdma(parsed, options):
    _check_xdma(parsed, options)
    return XdmaTransport(parsed.path)


def _options(query, url, integer=True):
    options = {}
    for key, values in urllib.parse.parse_qs(query, keep_blank_values=True).items():
        value = values[-1]
        if not integer:
            options[key] = value
            continue
        try:
            options[key] = int(value)
        except ValueError:
            raise ValueError(f"option {key}={value!r} of device URL {url!r} must be an "
                             f"integer") from None
    return options


_HIDDEN_SCHEMES = {}


def register_scheme(scheme, factory):
    """Make ``scheme://...`` URLs open ``factory(url)`` (for tests; not listed to users)."""
    _HIDDEN_SCHEMES[scheme] = factory


def _parse(url):
    """``(kind, parsed, options)`` of a device URL; ValueError or TypeError if it has no
    accepted form or its options are malformed. Opens nothing."""
    if not isinstance(url, str):
        raise TypeError(f"a device URL is a string, got {url!r}; accepted: "
                        f"{', '.join(URL_FORMS)}")
    if url.partition(":")[0].partition("?")[0] == "netlist":
        board = url.partition(":")[2]
        if not board or not board.isidentifier():
            raise ValueError(f"netlist URL must be netlist:BOARD with a Lattice board of "
                             f"'maxaccel boards' (e.g. netlist:ice40_hx8k_breakout), got {url!r}")
        return "netlist", None, {"board": board}
    for kind in SimTransport.BOARDS:
        if url == kind or url.startswith(kind + "?"):
            return kind, None, _options(url[len(kind) + 1:], url)
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme in _HIDDEN_SCHEMES:
        return "hidden", parsed, {}
    if parsed.scheme == "serial":
        return "serial", parsed, _options(parsed.query, url, integer=False)
    if parsed.scheme == "xdma":
        return "xdma", parsed, _options(parsed.query, url)
    raise ValueError(f"unknown device URL {url!r}; accepted: {', '.join(URL_FORMS)}")


def check_url(url):
    """Check a device URL's form and options without opening anything (what a command does
    before any work); raises as :func:`open_transport` would for a malformed URL."""
    kind, parsed, options = _parse(url)
    if kind == "serial":
        _serial_arguments(parsed, options)
    elif kind == "xdma":
        _check_xdma(parsed, options)


def open_transport(url):
    """The transport a device URL names (see the module docstring).

    Raises
    ------
    ValueError
        A URL of no accepted form (the message lists them) or with bad options.
    TransportError
        The port or device files could not be opened.
    """
    kind, parsed, options = _parse(url)
    if kind in SimTransport.BOARDS:
        return SimTransport(kind, **options)
    if kind == "hidden":
        return _HIDDEN_SCHEMES[parsed.scheme](url)
    if kind == "serial":
        return _open_serial(parsed, options)
    return _open_xdma(parsed, options)
