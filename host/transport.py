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
                                faster (``sim?lanes=4``, ``verilator?lanes=4``: Core parameters;
                                ``verilator?dtype=float32``: a core of one element type)
``netlist:BOARD``               a board's Core as yosys synthesises it, simulated gate by gate
                                with Verilator (``netlist:ice40_hx8k_breakout``,
                                ``netlist:arty_a7_35``)
``serial://PORT``               a serial port through pyserial (``serial:///dev/ttyUSB1``,
                                ``serial://COM3``; any pyserial URL such as ``loop://``), at
                                :data:`DEFAULT_BAUD`, the rate of the boards we build;
                                ``?board=NAME`` takes a board's own rate
                                (:data:`maxaccel.boards.targets.TARGETS`), ``?baud=N`` any
``xdma:///dev/xdma0``           Xilinx XDMA character devices ``/dev/xdma0_h2c_0`` (to the
                                board) and ``/dev/xdma0_c2h_0`` (from it)
``xdma-model:BOARD``            the ``xdma://`` transport against the XDMA driver's double
                                (:mod:`maxaccel.sim.xdma_driver`) around a virtual board
                                (``xdma-model:verilator``): the driver's blocking transfers,
                                and the transfers' time on a NiteFury modelled
==============================  =====================================================

A virtual board (``sim``, ``verilator``, ``netlist:BOARD``, and those inside
``xdma-model:``) takes ``for=MODEL.onnx``: its core is the one
:func:`maxaccel.host.model_core.choose_core` chooses for the model's max-family nodes
(several models: ``for=a.onnx,b.onnx``, or ``for=`` repeated), on the target ``board=NAME``
when given (``verilator?for=m.onnx&board=icebreaker``: the core ``maxaccel build icebreaker
--model m.onnx`` builds), else on the virtual board's own core. ``board=NAME`` alone gives
the target's core. The other options then apply over it.
"""

import errno
import os
import re
import time
import urllib.parse

from maxaccel.boards.targets import DEFAULT_BAUD, TARGETS
from maxaccel.contract.dtypes import format_of
from maxaccel.contract.progress import log

__all__ = ["TransportError", "Transport", "SerialTransport", "XdmaTransport",
           "XdmaModelTransport", "SimTransport", "open_transport", "check_url",
           "register_scheme", "is_virtual_board", "URL_FORMS", "DEFAULT_BAUD",
           "latency_timer_path"]

#: The device URL forms users may give, for error messages and ``--help``.
URL_FORMS = ("sim", "serial://PORT[?board=NAME|?baud=N] (e.g. serial:///dev/ttyUSB1?board=ulx3s)",
             "xdma:///dev/xdma0", "verilator",
             "netlist:BOARD (e.g. netlist:ice40_hx8k_breakout)",
             "xdma-model:BOARD (the XDMA driver's double around a virtual board, e.g. "
             "xdma-model:verilator)")


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
    #: Most bytes the link asks of one read: it reports progress and checks its timeouts
    #: between reads.
    read_chunk = 1 << 16

    def write(self, data):
        raise NotImplementedError

    def read(self, size, timeout_s):
        raise NotImplementedError

    def reset_input(self):
        raise NotImplementedError

    def close(self):
        raise NotImplementedError

    def expect_reply(self):
        """A request is about to be written: its reply is owed from now on."""

    def reply_done(self):
        """The link has the reply it was waiting for (or gave up on it)."""

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

    The port is opened exclusively (an advisory ``flock`` on POSIX, as pyserial's
    ``exclusive=True`` takes it): a second opener, in this process or another, gets a
    :class:`TransportError` saying the port is in use, as a second reader of an XDMA card gets
    ``EBUSY``; threads share one :class:`~maxaccel.host.device.Device` instead.
    """

    def __init__(self, port, baud=DEFAULT_BAUD, *, write_timeout_s=5.0, baud_from="given"):
        try:
            import serial
        except ImportError as error:  # pragma: no cover - pyserial is a dependency
            raise TransportError(f"serial transport needs pyserial: {error}") from None
        self._serial_module = serial
        try:
            # exclusive: an advisory lock (flock), so a second opener is refused instead of
            # mixing its frames with ours on the line.
            self._port = serial.serial_for_url(port, baudrate=baud, timeout=0,
                                               write_timeout=write_timeout_s, exclusive=True)
        except (serial.SerialException, ValueError, OSError) as error:
            if "exclusively lock" in str(error):
                raise TransportError(
                    f"serial port {port!r} is already open (another Device, in this process "
                    f"or another): one client at a time talks to a board; share one Device "
                    f"between threads instead") from None
            raise TransportError(f"cannot open serial port {port!r} at {baud} baud: {error}") \
                from None
        self.port = port
        self.baud = baud
        self.baud_from = baud_from
        # Nothing an earlier client left unsent may reach the board (a pseudo-terminal served by
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

    ``<device>_h2c_0`` carries requests to the board, ``<device>_c2h_0`` replies from it
    (AXI4-Stream mode). The driver (``dma_ip_drivers``, ``cdev_sgdma.c``, ``libxdma.c``) makes
    each ``read`` and ``write`` blocking DMA transfers that end when done, at the module's
    ``h2c_timeout``/``c2h_timeout`` or at a signal to the waiting thread (the transfer then
    aborted: ``ETIMEDOUT`` or the count of the request's earlier transfers), whatever
    ``O_NONBLOCK`` says, and its files have no ``poll``. So this transport:

    * writes a request as one ``write`` (the driver splits it into transfers), from a writer
      thread; a short count fails that request (:class:`TransportError`): the rest is never
      sent again, since the card may hold bytes of the aborted transfer;
    * reads replies from a reader thread that posts a read only while a reply is owed and the
      request is still going in (until a packet has ended), the link wants more bytes, or the
      last read filled its buffer, so a reply that streams back while its request goes in
      (broadcast Max, pools) never backs up into the card, and no read stays posted once the
      reply is in. The card-to-host file is opened with ``O_TRUNC`` (the driver's
      ``eop_flush``): a read ends at the reply frame's ``tlast``. A packet's first read is one
      page; a frame longer than that is read on in one read of exactly its remaining bytes
      (from its header). Reads go into a page-aligned buffer (one ``read`` call: ``readv``
      would take the driver's asynchronous ``read_iter`` path), which meets the engines'
      alignment (``IOCTL_XDMA_ALIGN_GET``); writes are copied into one when the alignment
      asks more than a byte;
    * blocks every signal it can in both threads (``signal.pthread_sigmask``), so a signal
      (a watchdog's ``SIGALRM``, Ctrl-C) goes to another thread and never aborts a transfer;
      the calling thread waits with its own timeouts, so Ctrl-C still ends a request at once;
    * takes the driver's timeouts from the module's parameters
      (``/sys/module/xdma/parameters/h2c_timeout``, ``c2h_timeout``; 10 s, the module's
      default, when they cannot be read) and refuses a timeout of 0 (a transfer the card never
      completes would hold its thread and the board forever); a transfer still in the driver
      when our wait ended is waited for (at most the driver's timeout) before the next
      request, and :meth:`close` waits so for a read still posted, so the board can be opened
      again as soon as it returns.

    Parameters
    ----------
    device : str
        Path prefix, e.g. ``/dev/xdma0``.
    files : object, optional
        ``open``, ``read``, ``readinto``, ``write``, ``ioctl``, ``close`` and ``exists`` as
        ``os.open``, ``os.read``, ``io.FileIO.readinto`` (the file number first), ``os.write``,
        ``fcntl.ioctl``, ``os.close`` and ``os.path.exists`` (the default): a test passes the
        driver's double (:class:`maxaccel.sim.xdma_driver.XdmaDriverModel`).
    write_timeout_s : float
        Longest a request's transfer may take before :class:`TransportError`.
    reply_timeout_s : float
        How long the link waits for a reply's next bytes (:attr:`Transport.reply_timeout_s`).
    driver_timeout_s : float, optional
        The driver's timeout in seconds (how long a transfer still pending after ours expired
        may take to end); by default the larger of the module's ``h2c_timeout`` and
        ``c2h_timeout``, read from ``parameters``.
    parameters : str
        The directory of the module's parameter files.

    Attributes
    ----------
    files : object
        The file calls in use (``files``, or the operating system's).
    alignment : int
        The larger of the engines' address alignments, as the driver reports them.
    """

    #: A request is one write, whatever its size: the transfer size is the link's throughput
    #: (``docs/boards.md``, "The XDMA link"), and the driver makes a write of more than 8 MiB
    #: several transfers itself.
    write_chunk = 1 << 40
    #: A reply is taken whole as the reader thread has it (a frame is one transfer or two).
    read_chunk = 1 << 40
    #: Largest tensor payload per request that :class:`~maxaccel.host.device.Device` uses on
    #: this transport unless told otherwise (a request of about 8 MiB: one transfer, two where
    #: the driver's ring of descriptors wraps).
    max_frame_bytes = (8 << 20) - 4096
    #: The module's parameter files (``module_param(h2c_timeout, uint, 0644)``).
    PARAMETERS = "/sys/module/xdma/parameters"
    #: The module's default timeouts, seconds (``cdev_sgdma.c``).
    DEFAULT_DRIVER_TIMEOUT_S = 10

    def __init__(self, device, *, files=None, write_timeout_s=5.0, reply_timeout_s=1.0,
                 driver_timeout_s=None, parameters=PARAMETERS):
        import mmap
        import threading
        from maxaccel.contract.wire import FRAME_OVERHEAD, PAYLOAD_ALIGN
        self.device = device
        self.write_path = f"{device}_h2c_0"
        self.read_path = f"{device}_c2h_0"
        self.write_timeout_s = write_timeout_s
        self.reply_timeout_s = reply_timeout_s
        self.files = _OS_FILES if files is None else files
        self.driver_timeout_s = (_driver_timeout_s(parameters) if driver_timeout_s is None
                                 else driver_timeout_s)
        # The largest reply frame (payload, parameter block, frame overhead) with room to
        # spare: a read never asks more.
        self.read_bytes = self.max_frame_bytes + FRAME_OVERHEAD + 2 * PAYLOAD_ALIGN + 4096
        self._read_fd = self._write_fd = None
        self._cond = None
        for path in (self.write_path, self.read_path):
            if not self.files.exists(path):
                raise TransportError(
                    f"XDMA device file {path} does not exist (is the xdma driver loaded and "
                    f"the board enumerated? expected {self.write_path} and {self.read_path})")
        try:
            # O_TRUNC: the driver's eop_flush, a read ends at the stream's tlast.
            self._read_fd = self.files.open(self.read_path, os.O_RDONLY | os.O_TRUNC)
        except OSError as error:
            busy = (" (the driver lets one process read a streaming card-to-host channel: "
                    "is another program using the board?)" if error.errno == errno.EBUSY
                    else "")
            raise TransportError(f"cannot open {self.read_path}: {error}{busy}") from None
        try:
            self._write_fd = self.files.open(self.write_path, os.O_WRONLY)
        except OSError as error:
            self.close()
            raise TransportError(f"cannot open {self.write_path}: {error}") from None
        self.alignment = self._alignment()
        # Anonymous mappings start on a page: the driver maps whole pages of it.
        self._read_buffer = mmap.mmap(-1, -(-self.read_bytes // mmap.PAGESIZE) * mmap.PAGESIZE)
        self._cond = threading.Condition()
        self._received = bytearray()
        self._owed = False          # a request was sent whose reply is not complete yet
        self._wanting = False       # the link waits for bytes and none are here
        self._read_full = False     # the last read filled its buffer: the packet goes on
        self._packet_ended = False  # a packet ended since this request's write began
        self._packet = None         # (bytes read, frame length or None) of a packet going on
        self._reading = False       # a read is in the driver
        self._read_error = None
        self._job = None            # bytes for the writer thread
        self._writing = False       # a write is with the writer thread (or the driver)
        self._write_result = None
        self._closing = False
        self._threads = [threading.Thread(target=self._reader, name="xdma-c2h", daemon=True),
                         threading.Thread(target=self._writer, name="xdma-h2c", daemon=True)]
        for thread in self._threads:
            thread.start()

    def _alignment(self):
        """The larger of the two engines' address alignments (``IOCTL_XDMA_ALIGN_GET``); 1
        where it cannot be asked."""
        import struct
        from maxaccel.boards.targets import XDMA_IOCTL_ALIGN_GET
        ioctl = getattr(self.files, "ioctl", None)
        alignment = 1
        for fd in (self._read_fd, self._write_fd) if ioctl is not None else ():
            try:
                (align,) = struct.unpack("i", ioctl(fd, XDMA_IOCTL_ALIGN_GET, bytes(4)))
            except OSError:
                continue
            alignment = max(alignment, align)
        return alignment

    # --- the link's side ---------------------------------------------------------------------

    def expect_reply(self):
        with self._cond:
            self._owed = True
            self._read_error = None
            self._cond.notify_all()

    def reply_done(self):
        with self._cond:
            self._owed = self._wanting = False

    def write(self, data):
        data = self._aligned(data)
        with self._cond:
            if self._writing and not self._cond.wait_for(lambda: not self._writing,
                                                          self.driver_timeout_s + 1.0):
                raise TransportError(f"{self.write_path}: an earlier transfer is still pending "
                                     f"in the XDMA driver after its timeout")
            self._job, self._writing, self._write_result = data, True, None
            self._packet_ended = False
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: not self._writing, self.write_timeout_s):
                raise TransportError(
                    f"{self.write_path}: the board took no request bytes for "
                    f"{self.write_timeout_s:g} s (a transfer of {len(data)} bytes; the driver "
                    f"gives it up after its h2c_timeout); is the board's bitstream running?")
            result = self._write_result
        if isinstance(result, OSError):
            reason = ("timed out in the driver (h2c_timeout): the board stopped taking bytes"
                      if result.errno == errno.ETIMEDOUT else str(result))
            raise TransportError(f"writing to {self.write_path} failed: {reason}")
        if result != len(data):
            raise TransportError(f"writing to {self.write_path}: the driver took {result} of "
                                 f"{len(data)} bytes, then a transfer timed out (h2c_timeout); "
                                 f"the request is not sent again in part")

    def _aligned(self, data):
        """``data`` as a byte view (no copy), or a page-aligned copy when the engine's alignment
        asks more than a byte."""
        data = memoryview(data)
        if self.alignment == 1:
            return data
        import mmap
        buffer = mmap.mmap(-1, max(1, -(-len(data) // mmap.PAGESIZE)) * mmap.PAGESIZE)
        buffer[:len(data)] = data
        return memoryview(buffer)[:len(data)]

    def read(self, size, timeout_s):
        with self._cond:
            if not self._received and timeout_s > 0:
                self._wanting = True
                self._cond.notify_all()
                self._cond.wait_for(lambda: self._received or self._closing
                                    or self._read_error is not None, max(0.0, timeout_s))
            if self._read_error is not None and not self._received:
                error, self._read_error = self._read_error, None
                raise TransportError(f"reading from {self.read_path} failed: {error}")
            data = bytes(self._received[:size])
            del self._received[:size]
            if data:
                self._wanting = False
            return data

    def reset_input(self):
        with self._cond:
            self._received.clear()

    def abandon(self, silence_s):
        # A transfer still in the driver ends by itself (done or its timeout) before the
        # silence that lets the board drop a partial frame.
        with self._cond:
            self._cond.wait_for(lambda: not self._writing, self.driver_timeout_s + 1.0)
            self._owed = self._wanting = False
        super().abandon(silence_s)

    def describe(self):
        return f"tried {self.write_path} and {self.read_path}"

    def close(self):
        cond = self._cond
        if cond is not None:
            with cond:
                self._closing = True
                cond.notify_all()
                # A read still in the driver holds the card-to-host file until it returns.
                cond.wait_for(lambda: not self._reading, self.driver_timeout_s + 1.0)
        for name in ("_read_fd", "_write_fd"):
            fd = getattr(self, name)
            if fd is not None:
                try:
                    self.files.close(fd)
                except OSError:
                    pass
                setattr(self, name, None)

    # --- the threads that wait in the driver ---------------------------------------------------

    def _post(self):
        """Whether a read should be in the driver now (the lock held)."""
        return self._owed and (self._wanting or self._read_full
                               or (self._writing and not self._packet_ended))

    def _read_size(self):
        """Bytes to ask of the next read: a page for a packet's start, the frame's remaining
        bytes for its continuation (the largest frame when its header is not one)."""
        if self._packet is None:
            return _PAGE_BYTES
        got, length = self._packet
        return min(self.read_bytes, length - got) if length else self.read_bytes

    def _track(self, data, size):
        """After a read of ``size`` that returned ``data``: whether the packet goes on."""
        from maxaccel.contract.frames import HEADER_SIZE, FrameParser
        if len(data) < size:
            self._packet = None                 # ended at tlast
            return False
        if self._packet is None:
            parser = FrameParser()
            parser.feed(data[:HEADER_SIZE])
            length = None
            if parser.partial() is not None:
                length = HEADER_SIZE + parser.wanted()
            self._packet = (0, length)
        got, length = self._packet
        got += len(data)
        if length is not None and got >= length:
            self._packet = None                 # the frame's last byte: its tlast
            return False
        self._packet = (got, length)
        return True

    def _reader(self):
        _block_signals()
        view = memoryview(self._read_buffer)
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closing or self._post())
                if self._closing:
                    return
                fd, size = self._read_fd, self._read_size()
                self._reading = True
            try:
                count = self._read_into(fd, view[:size])
            except OSError as error:
                with self._cond:
                    self._reading = False
                    self._cond.notify_all()
                    if self._closing or error.errno == errno.EBADF:
                        return
                    self._read_full = False
                    self._packet = None
                    if error.errno != errno.ETIMEDOUT:
                        self._read_error = error
                        self._owed = False
                    # ETIMEDOUT: the driver gave the read up (nothing ended a packet in
                    # time, or a signal) and what it had received is lost; another read is
                    # posted if the link still wants bytes, its timeout and retries say the
                    # rest.
                continue
            with self._cond:
                self._reading = False
                self._received += view[:count]
                self._read_full = self._track(view[:count], size)
                if not self._read_full:
                    self._packet_ended = True
                if count:
                    self._wanting = False       # the link asks again if it needs more
                self._cond.notify_all()

    def _read_into(self, fd, buffer):
        readinto = getattr(self.files, "readinto", None)
        if readinto is None:
            data = self.files.read(fd, len(buffer))
            buffer[:len(data)] = data
            return len(data)
        return readinto(fd, buffer)

    def _writer(self):
        _block_signals()
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closing or self._job is not None)
                if self._closing:
                    return
                data, self._job = self._job, None
                fd = self._write_fd
            try:
                # One call: a short count is the request's failure (the card may hold bytes
                # of the transfer that timed out), never a reason to send the rest.
                result = self.files.write(fd, data)
            except OSError as error:
                result = error
            with self._cond:
                self._write_result = result
                self._writing = False
                self._cond.notify_all()


_PAGE_BYTES = 4096

#: Signals a thread cannot block usefully (raised by its own faults) or at all.
_UNBLOCKABLE = {"SIGKILL", "SIGSTOP", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGTRAP",
                "SIGSYS", "SIGABRT"}


def _block_signals():
    """Block in the calling thread every signal another thread can take instead, so a signal
    never ends a wait in the XDMA driver (which aborts the transfer)."""
    import signal
    if not hasattr(signal, "pthread_sigmask"):
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {s for s in signal.valid_signals()
                                              if getattr(s, "name", "") not in _UNBLOCKABLE})


def _driver_timeout_s(parameters):
    """The larger of the xdma module's ``h2c_timeout`` and ``c2h_timeout`` (seconds) read from
    the directory ``parameters``; the module's default if they cannot be read.

    Raises
    ------
    TransportError
        A timeout of 0: the driver then waits for a transfer without end.
    """
    values = []
    for name in ("h2c_timeout", "c2h_timeout"):
        path = os.path.join(parameters, name)
        try:
            with open(path) as file:
                value = int(file.read().strip())
        except (OSError, ValueError):
            log.debug(f"{path} unreadable: taking the xdma module's default, "
                      f"{XdmaTransport.DEFAULT_DRIVER_TIMEOUT_S} s")
            value = XdmaTransport.DEFAULT_DRIVER_TIMEOUT_S
        if value == 0:
            raise TransportError(
                f"the xdma module's {name} is 0 (no timeout): a transfer the card never "
                f"completes would hold this process and the board until it is killed; set "
                f"one, as root: echo 10 > {path}")
        values.append(value)
    return float(max(values))


class _OsFiles:
    """The operating system's file calls (what :class:`XdmaTransport` uses on a real board)."""

    open = staticmethod(os.open)
    read = staticmethod(os.read)
    write = staticmethod(os.write)
    close = staticmethod(os.close)
    exists = staticmethod(os.path.exists)

    @staticmethod
    def readinto(fd, buffer):
        """One ``read(2)`` into ``buffer`` (the driver's ``read``, not its ``read_iter``)."""
        import io
        with io.FileIO(fd, "r", closefd=False) as file:
            return file.readinto(buffer)

    @staticmethod
    def ioctl(fd, request, arg):
        import fcntl
        return fcntl.ioctl(fd, request, arg)


_OS_FILES = _OsFiles()


class XdmaModelTransport(XdmaTransport):
    """:class:`XdmaTransport` against the driver's double around a virtual board
    (``xdma-model:BOARD``).

    The double's driver timeouts stand for the driver's 10 s scaled to the simulator's speed:
    a minute around the compiled board (which moves about 10 MB a second, so an 8 MiB
    transfer takes a second, several on a loaded machine), an hour around the board Amaranth's
    simulator runs; this transport's own timeouts match them (``xdma-model:`` URLs). A test of
    timeouts passes its own.

    Parameters
    ----------
    board : virtual board
    driver_timeout_s : float
        The double's ``h2c_timeout`` and ``c2h_timeout``, and this transport's timeouts.
    **model_options
        Passed to :class:`~maxaccel.sim.xdma_driver.XdmaDriverModel`.

    Attributes
    ----------
    model : maxaccel.sim.xdma_driver.XdmaDriverModel
        The double (its modelled time, its transfers, its fault switches).
    """

    def __init__(self, board, *, driver_timeout_s=60.0, **model_options):
        from maxaccel.sim.xdma_driver import XdmaDriverModel
        self.model = XdmaDriverModel(board, h2c_timeout_s=driver_timeout_s,
                                     c2h_timeout_s=driver_timeout_s, **model_options)
        try:
            super().__init__(self.model.prefix, files=self.model,
                             write_timeout_s=driver_timeout_s, reply_timeout_s=driver_timeout_s,
                             driver_timeout_s=driver_timeout_s)
        except BaseException:
            self.model.shutdown()
            raise

    def close(self):
        # The double first: a call still in it ends at once, as when the board goes away.
        self.model.shutdown()
        super().close()


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
            names, text = core_setting_refusal(options, str(error))
            given = "&".join(f"{name}={options[name]}" for name in names)
            raise ValueError(f"{kind}?{given}: {text}") from None

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


def core_setting_refusal(settings, text):
    """A gateware refusal ``text`` of Core ``settings`` (a virtual board's URL options, ``maxaccel
    build --core``) in the settings' own terms: ``(names, text)``, the names of the settings it
    is about (those it names or whose value it quotes, else all of them) and the text without
    the name of the gateware unit that refused, the unit's own name for the one setting it
    is about replaced by the setting's (BroadcastMax's ``depth`` is ``replay_depth``)."""
    named = [name for name in settings
             if re.search(rf"\b{re.escape(name)}\b", text)
             or re.search(rf"\bnot {re.escape(repr(settings[name]))}$", text)]
    named = named or list(settings)
    text = re.sub(r"^[A-Z][A-Za-z]+:? (?=[a-z])", "", text)
    if len(named) == 1 and not re.search(rf"\b{re.escape(named[0])}\b", text):
        text = re.sub(r"^\w+(?= must be)", named[0], text)
    return named, text


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


#: The Core parameters given by name, not as integers.
TEXT_OPTIONS = ("dtype", "reduce_pipeline")


def core_value(name, text):
    """The value of Core parameter ``name`` given as ``text`` (a virtual board's URL option,
    ``maxaccel build --core``): ``units`` a comma-separated list, ``dtype`` an element type's
    name (``every``: None, every type), ``reduce_pipeline`` a name, the others integers
    (``window_serial_products`` 0 or 1); ``ValueError`` naming what it should be."""
    if name == "units":
        return tuple(unit for unit in text.split(",") if unit)
    if name == "dtype":
        if text == "every":
            return None
        try:
            return format_of(text).numpy_dtype.name
        except TypeError as error:
            raise ValueError(f"{name}={text!r}: {error}, or every") from None
    if name in TEXT_OPTIONS:
        return text
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} must be an integer") from None


def _options(query, url, integer=True):
    options = {}
    for key, values in urllib.parse.parse_qs(query, keep_blank_values=True).items():
        if not integer:
            options[key] = values[-1]
            continue
        try:
            options[key] = core_value(key, values[-1])
        except ValueError as error:
            raise ValueError(f"option {error} (device URL {url!r})") from None
    return options


_HIDDEN_SCHEMES = {}


def register_scheme(scheme, factory):
    """Make ``scheme://...`` URLs open ``factory(url)`` (for tests; not listed to users)."""
    _HIDDEN_SCHEMES[scheme] = factory


#: The virtual boards' URL options that name models and a board, not Core parameters.
MODEL_OPTIONS = ("for", "board")


def _model_options(query, url):
    """``(query without them, {"for": (paths...), "board": name})`` of a virtual board's
    ``for=`` and ``board=`` options (see the module docstring); ValueError for a model file
    that does not exist or a board that is not a target."""
    found, rest = {}, []
    for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if key == "for":
            paths = [p for p in value.split(",") if p]
            missing = [p for p in paths if not os.path.isfile(p)]
            if not paths or missing:
                raise ValueError(f"option for={value!r} of device URL {url!r}: no ONNX model "
                                 f"at {', '.join(map(repr, missing)) or 'an empty path'}")
            found["for"] = found.get("for", ()) + tuple(paths)
        elif key == "board":
            if value not in TARGETS:
                raise ValueError(f"option board={value!r} of device URL {url!r}: no such "
                                 f"board; known: {', '.join(TARGETS)}")
            found["board"] = value
        else:
            rest.append((key, value))
    return urllib.parse.urlencode(rest), found


def core_options(kind, options):
    """A virtual board's options with its ``for=`` and ``board=`` (:data:`MODEL_OPTIONS`)
    replaced by the Core parameters they name: the target's core, or the core chosen for the
    models (:func:`maxaccel.host.model_core.choose_core`, which keeps the Core parameters the
    options give), with the other options over it."""
    options = dict(options)
    models = options.pop("for", ())
    if kind == "netlist":
        if models:
            from maxaccel.host.model_core import choose_core
            options["core"] = choose_core(options["board"], models).core
        return options
    board = options.pop("board", None)
    if not models and board is None:
        return options
    import importlib
    from maxaccel.host.model_core import choose_core
    module_name, _ = SimTransport.BOARDS[kind]
    module = importlib.import_module(module_name)
    defaults = getattr(module, "VERILATOR_DEFAULTS", None) or module.CORE_DEFAULTS
    # The Core parameters the URL gives: the choice keeps them, as maxaccel build --core's.
    fixed = {name: value for name, value in options.items() if name in defaults}
    if board is None:
        chosen = choose_core(None, models, base=defaults, fixed=fixed).parameters
    else:
        # The target's bitstream's core; the virtual board keeps its own clock, frame timeout
        # and link, which are the bench's, not the core's.
        from maxaccel.boards.build import board_core
        chosen = board_core(TARGETS[board], choose_core(board, models, fixed=fixed).core
                            if models else None)
        chosen = {k: v for k, v in chosen.items()
                  if k not in ("clock_hz", "frame_timeout_cycles", "link_bytes")}
    return {**{k: v for k, v in chosen.items() if k in defaults and defaults[k] != v},
            **options}


def _parse(url):
    """``(kind, parsed, options)`` of a device URL; ValueError or TypeError if it has no
    accepted form or its options are malformed. Opens nothing."""
    if not isinstance(url, str):
        raise TypeError(f"a device URL is a string, got {url!r}; accepted: "
                        f"{', '.join(URL_FORMS)}")
    if url.partition(":")[0].partition("?")[0] == "netlist":
        board, _, query = url.partition(":")[2].partition("?")
        if not board or not board.isidentifier():
            raise ValueError(f"netlist URL must be netlist:BOARD with a board of "
                             f"'maxaccel boards' (e.g. netlist:ice40_hx8k_breakout), got {url!r}")
        rest, models = _model_options(query, url)
        if rest or "board" in models:
            raise ValueError(f"a netlist URL takes only for=MODEL.onnx (its board is "
                             f"netlist:BOARD's), got {url!r}")
        return "netlist", None, {"board": board, **models}
    if url.startswith("xdma-model:"):
        inner = url[len("xdma-model:"):]
        try:
            kind, _, options = _parse(inner)
        except (ValueError, TypeError):
            kind = None
        if kind not in SimTransport.BOARDS:
            raise ValueError(f"xdma-model URL must be xdma-model:BOARD with a virtual board "
                             f"(sim, verilator, netlist:BOARD and their options), got {url!r}")
        return "xdma-model", kind, options
    for kind in SimTransport.BOARDS:
        if url == kind or url.startswith(kind + "?"):
            rest, models = _model_options(url[len(kind) + 1:], url)
            return kind, None, {**_options(rest, url), **models}
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


def is_virtual_board(url):
    """Whether ``url`` names a board simulated in this process (``sim``, ``verilator``,
    ``netlist:BOARD``, with their options); raises as :func:`check_url` for a malformed URL.
    Opens nothing."""
    return _parse(url)[0] in SimTransport.BOARDS


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
        return SimTransport(kind, **core_options(kind, options))
    if kind == "xdma-model":
        board = SimTransport(parsed, **core_options(parsed, options)).board
        return XdmaModelTransport(board, driver_timeout_s=60.0 if parsed == "verilator"
                                  else 3600.0)
    if kind == "hidden":
        return _HIDDEN_SCHEMES[parsed.scheme](url)
    if kind == "serial":
        return _open_serial(parsed, options)
    return _open_xdma(parsed, options)
