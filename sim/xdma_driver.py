"""A test double of the Xilinx XDMA driver's streaming character devices, with a board behind it.

No PCIe board is attached to the machines this project is built on, so the host's ``xdma://``
transport (:class:`maxaccel.host.transport.XdmaTransport`) is tested against this object, which
behaves as the driver does (``dma_ip_drivers``, ``XDMA/linux-kernel/xdma``: ``cdev_sgdma.c``'s
``char_sgdma_read_write``, ``char_sgdma_open``/``char_sgdma_close``, ``libxdma.c``'s
``xdma_xfer_submit`` and ``transfer_init``), not as a pipe would:

* **No poll.** The driver's ``file_operations`` have no ``poll``: ``select()`` says "ready"
  always, so this object offers no readiness either; the calls are ``open``, ``read``,
  ``readinto``, ``write``, ``ioctl`` and ``close`` (of file numbers it hands out).
* **Whole, blocking transfers, split at descriptors.** A call pins the user buffer's pages
  (one descriptor each, the first and last partial when the buffer is not page-aligned) and
  runs them as transfers of at most 2048 descriptors, each also cut where the engine's ring
  of 2048 descriptors wraps (``transfer_init``). ``write`` returns when the card has taken
  every byte, ``read`` when its transfer completes; ``O_NONBLOCK`` changes nothing.
* **Timeouts, signals, short counts.** Each transfer's wait ends when it completes, at the
  module's ``h2c_timeout`` / ``c2h_timeout`` (seconds, 10 by default, 0 for none; this object
  reads them from files like ``/sys/module/xdma/parameters/``, under a root a test chooses)
  or at once when a signal the waiting thread does not block arrives
  (``swait_event_interruptible_timeout``). Either way the transfer is aborted; the call
  returns the bytes of the request's earlier, completed transfers, or fails with
  ``ETIMEDOUT`` (never ``EINTR``); a card-to-host transfer's received bytes are lost.
* **Reads end at ``tlast``, with ``O_TRUNC``.** Opened with ``O_TRUNC`` the card-to-host
  engine runs in ``eop_flush`` mode: a read returns when the stream's packet ends (``tlast``)
  or the buffer is full; the count is the sum of the completed descriptors' lengths. Opened
  without it, a read returns only when its buffer is full.
* **One reader, held while a read is in flight.** The card-to-host file of a streaming
  engine can be open once (``EBUSY``); a file closed while a call on it is in the driver is
  released when that call returns, as the kernel releases a file when its last user drops it.
* **Backpressure.** The card's reply leaves only into a posted read: without one, the card's
  output buffer (``c2h_fifo_bytes``) fills, the core stops, and so does the host-to-card
  stream.

The board is any virtual board (``write`` of bytes, ``read(size, timeout)`` that returns early
once it is quiescent). A packet (``tlast``) ends when the board is quiescent with every byte
given to it taken, which is when the C2H adapter ends one (``boards/xdma.py``,
``BytesToWords``: ``flush`` is the core's ``idle``; ``tests/test_xdma.py`` checks the gateware).

**Modelled time.** Alongside, the double keeps the time the transfers would take on a NiteFury
(:attr:`clock_s`), from the published figures (``docs/boards.md``, "The XDMA link"): a fixed
cost per transfer, a cost per page of the buffer it posts (:data:`PAGE_COST_S`) and the link's
rate, fitted to 9.2 MB/s at 512-byte and 68.5 MB/s at 4 KiB transfers on a NiteFury and to
1.6 GB/s (host to card) and 1.3 GB/s (card to host) at 8 MiB transfers of whole pages on a
Gen2 x4 XDMA design; the core's own cycles at its clock bound a transfer too.
"""

import contextlib
import ctypes
import errno
import os
import signal
import threading
import time
from dataclasses import dataclass

from maxaccel.boards.targets import TARGETS, XDMA_IOCTL_ALIGN_GET

__all__ = ["XdmaDriverModel", "Transfer", "TRANSFER_OVERHEAD_S", "PAGE_COST_S",
           "PAGES_PER_TRANSFER", "MODULE_PARAMETERS"]

#: Fixed cost of one DMA transfer (descriptor set-up, doorbell, interrupt, wake-up), seconds:
#: 512 B at 9.2 MB/s is 55.7 us and 4 KiB at 68.5 MB/s 59.8 us on a NiteFury (each one page),
#: so a transfer costs 55 us plus its pages and its bytes at the link's rate.
TRANSFER_OVERHEAD_S = 55e-6
#: Cost of one page of a posted buffer, seconds: ``char_sgdma_map_user_buf_to_sgl`` pins it
#: (``get_user_pages_fast``) and maps it, ``transfer_init`` writes its descriptor, the unmap
#: dirties and releases it. An estimate of that kernel work (no published figure), charged
#: for every page a call posts, whatever the card sends into it.
PAGE_COST_S = 0.25e-6
#: Descriptors of one transfer and of the engine's ring (``XDMA_ENGINE_XFER_MAX_DESC``), one
#: per page of the user's buffer: a larger read or write is several transfers.
PAGES_PER_TRANSFER = 0x800
#: Where the module's parameters are (``module_param(h2c_timeout, uint, 0644)``).
MODULE_PARAMETERS = "/sys/module/xdma/parameters"
_PAGE = 4096
#: Where ``os.read`` 's buffer starts in its page: a bytes object's data, 32 bytes into the
#: object, which glibc's ``malloc`` places 16 bytes into the pages it maps for large blocks.
_OS_READ_OFFSET = 48
#: Bytes of one 8 MiB transfer of whole pages, the size the published link rates are for.
_RATED_BYTES = PAGES_PER_TRANSFER * _PAGE

_NITEFURY = TARGETS["nitefury"]


@dataclass(frozen=True)
class Transfer:
    """One DMA transfer as the model timed it.

    Attributes
    ----------
    direction : str
        ``"h2c"`` or ``"c2h"``.
    nbytes : int
        Bytes moved.
    start_s, end_s : float
        Modelled times (:attr:`XdmaDriverModel.clock_s`).
    pages : int
        Descriptors (pages of the user's buffer) the transfer posted.
    """

    direction: str
    nbytes: int
    start_s: float
    end_s: float
    pages: int = 1


class _Faults:
    """What a test makes the card (or the machine) do (all off by default).

    Attributes
    ----------
    stall : bool
        The card takes no bytes (the host-to-card stream holds ``tready`` low).
    stall_after : int or None
        The card takes this many more bytes, then stalls (``stall`` turns on).
    mute : bool
        The card takes bytes but every byte it sends is lost.
    cut_next_reply : int
        The next packet the card sends loses its last this many bytes (ending early with
        ``tlast``).
    hold_packets : int
        The card sends nothing until this many packets are ready, then all of them back to
        back (a late reply followed by the next); 0 is off.
    back_to_back : int
        The next read that meets a packet's end with another packet behind it completes
        late, as the driver can (the completion is serviced after the engine went on): the
        next packet runs into the read's following descriptors, this many of them, and the
        count is the completed descriptors' lengths (the first packet, a hole to the next
        descriptor, a cut start of the second; its rest goes to the next read); a read whose
        buffer ends with the packet has no descriptor left to run into. 0 is off.
    signal : set of str
        Engines (``"h2c"``, ``"c2h"``) where a signal (:attr:`signal_number`) arrives at the
        thread in the driver, once each, at its next transfer's start or during its wait: a
        thread that does not block it has the transfer's wait, if it needs one, ended at once.
    signal_number : int
    """

    def __init__(self):
        self.stall = False
        self.stall_after = None
        self.mute = False
        self.cut_next_reply = 0
        self.hold_packets = 0
        self.back_to_back = 0
        self.signal = set()
        self.signal_number = signal.SIGALRM


class _Aborted(Exception):
    """A transfer's wait ended without its completion (timeout or signal)."""


class _File:
    def __init__(self, engine, eop_flush):
        self.engine = engine
        self.eop_flush = eop_flush
        self.calls = 0              # calls on the file still in the driver
        self.closed = False


def _address(buffer):
    """The memory address of a buffer's first byte (a bytes object's, or a writable one's)."""
    if isinstance(buffer, bytes):
        return id(buffer) + bytes.__basicsize__ - 1     # CPython: the data after the header
    view = memoryview(buffer)
    if view.readonly:
        return None
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def _descriptors(offset, length):
    """Lengths of the descriptors of a buffer of ``length`` bytes starting ``offset`` bytes
    into a page (``char_sgdma_map_user_buf_to_sgl``: one per page)."""
    lengths = []
    while length > 0:
        piece = min(_PAGE - offset, length)
        lengths.append(piece)
        length -= piece
        offset = 0
    return lengths


class XdmaDriverModel:
    """``/dev/xdmaN_h2c_0`` and ``/dev/xdmaN_c2h_0`` of the XDMA driver, a board behind them.

    Its ``open``/``read``/``readinto``/``write``/``ioctl``/``close``/``exists`` take what
    ``os.open``, ``os.read``, ``io.FileIO.readinto`` (with the file number first), ``os.write``,
    ``fcntl.ioctl``, ``os.close`` and ``os.path.exists`` take, so
    :class:`~maxaccel.host.transport.XdmaTransport` takes it in their place (``files=``). Any
    number of threads may call it at once, as a process may call the driver.

    Parameters
    ----------
    board : virtual board
        ``VerilatorBoard``, ``VirtualBoard`` or a test's fake; it is closed with the model.
    prefix : str
        The device path prefix (``/dev/xdma0``).
    h2c_timeout_s, c2h_timeout_s : float
        The driver's ``h2c_timeout`` and ``c2h_timeout`` in seconds of real time (0: none).
    parameters_root : str, optional
        A directory under which the double offers the module's parameter files
        (``ROOT/sys/module/xdma/parameters/h2c_timeout`` and ``c2h_timeout``, whole module
        seconds); from then on it reads its timeouts from them at each transfer, as the
        driver reads its parameters.
    second_s : float
        Real seconds of one module second, for timeouts read from the files (a test's 3 s
        timeout need not last 3 s).
    c2h_fifo_bytes : int
        Reply bytes the card holds without a read posted before it stops.
    addr_align : int
        The engines' address alignment (their alignment register; 1 when it reads 0): a
        buffer at another alignment is refused with ``EINVAL`` (``check_transfer_align``).
    transfer_overhead_s, page_cost_s : float
        Modelled fixed cost of a transfer and cost of each page it posts.
    h2c_bytes_per_s, c2h_bytes_per_s : float
        Modelled link rates at 8 MiB transfers of whole pages (fixed and page costs included).
    core_clock_hz : float
        The core's clock for the modelled time (the NiteFury's); cycles from ``board.cycles``.
    close_board : bool
        :meth:`shutdown` closes the board too.

    Attributes
    ----------
    faults : _Faults
        Switches for fault tests.
    transfers : list of Transfer
        Every completed transfer.
    calls : list of tuple
        ``(engine, bytes asked)`` of every ``read``/``write`` call.
    signals_blocked, signals_taken : int
        Signals that arrived at a thread in the driver which blocked them, or which did not
        (its transfer's wait, if any, ended).
    runs_on : int
        Reads into which the next packet ran (``faults.back_to_back``): bytes of two packets
        in one read's count.
    clock_s : float
        Modelled time of the last completed transfer's end.
    """

    def __init__(self, board, *, prefix="/dev/xdma0", h2c_timeout_s=10.0, c2h_timeout_s=10.0,
                 parameters_root=None, second_s=1.0, c2h_fifo_bytes=4096, addr_align=1,
                 transfer_overhead_s=TRANSFER_OVERHEAD_S, page_cost_s=PAGE_COST_S,
                 h2c_bytes_per_s=_NITEFURY.link_bytes_per_s, c2h_bytes_per_s=1.3e9,
                 core_clock_hz=_NITEFURY.clock_mhz * 1e6, close_board=True):
        self.board = board
        self.close_board = close_board
        self.prefix = prefix
        self.paths = {f"{prefix}_h2c_0": "h2c", f"{prefix}_c2h_0": "c2h"}
        self.second_s = second_s
        self.parameters_dir = None
        self._timeouts = {}
        if parameters_root is not None:
            self.parameters_dir = os.path.join(parameters_root, MODULE_PARAMETERS.lstrip("/"))
            os.makedirs(self.parameters_dir, exist_ok=True)
        self.h2c_timeout_s = h2c_timeout_s
        self.c2h_timeout_s = c2h_timeout_s
        self.c2h_fifo_bytes = c2h_fifo_bytes
        self.addr_align = addr_align
        self.transfer_overhead_s = transfer_overhead_s
        self.page_cost_s = page_cost_s
        self.rates = {"h2c": h2c_bytes_per_s, "c2h": c2h_bytes_per_s}
        # Seconds per byte on the link: the rated transfer's time less its fixed costs.
        self._byte_s = {d: (_RATED_BYTES / rate - transfer_overhead_s
                            - PAGES_PER_TRANSFER * page_cost_s) / _RATED_BYTES
                        for d, rate in self.rates.items()}
        self.core_clock_hz = core_clock_hz
        self.faults = _Faults()
        self.transfers = []
        self.calls = []
        self.signals_blocked = self.signals_taken = 0
        self.runs_on = 0
        self._interrupted = set()
        self.clock_s = 0.0
        self._engine_free_s = {"h2c": 0.0, "c2h": 0.0}
        self._produced_s = 0.0                  # modelled time the card's last bytes came out
        self._h2c_end_s = None                  # modelled end of the H2C transfer going in
        self._h2c_start_s = 0.0                 # modelled start of the last H2C transfer
        self._busy_cycles = 0                   # cycles the board ran with request bytes
        self._cond = threading.Condition()
        self._files = {}                        # fd -> _File
        self._next_fd = 1000
        self._c2h_open = False
        self._engine_busy = {"h2c": False, "c2h": False}    # the engine's desc_lock
        self._ring = {"h2c": 0, "c2h": 0}       # the engine's desc_idx
        self._feed = bytearray()                # bytes of the current H2C transfer not given
        identity = getattr(board, "identity", None)
        # Cycles the board runs at a time with no request bytes to take (an eighth of its frame
        # timeout).
        self._idle_slice_cycles = max(64, (getattr(identity, "frame_timeout_cycles", 0)
                                           or 4096) // 8)
        self._fifo = bytearray()                # card-to-host bytes not yet in a read
        self._packet_ends = []                  # positions in _fifo just after a tlast
        self._closed = False

    # --- the module's parameters ------------------------------------------------------------

    def _timeout_s(self, engine):
        """The engine's timeout in real seconds, None for none (a parameter of 0)."""
        if self.parameters_dir is None:
            value = self._timeouts[engine]
        else:
            with open(os.path.join(self.parameters_dir, f"{engine}_timeout")) as file:
                value = int(file.read().strip()) * self.second_s
        return value if value > 0 else None

    def _set_timeout(self, engine, seconds):
        if self.parameters_dir is None:
            self._timeouts[engine] = seconds
            return
        with open(os.path.join(self.parameters_dir, f"{engine}_timeout"), "w") as file:
            file.write(f"{round(seconds / self.second_s)}\n")

    h2c_timeout_s = property(lambda self: self._timeout_s("h2c") or 0,
                             lambda self, value: self._set_timeout("h2c", value),
                             doc="``h2c_timeout`` in real seconds (0: none).")
    c2h_timeout_s = property(lambda self: self._timeout_s("c2h") or 0,
                             lambda self, value: self._set_timeout("c2h", value),
                             doc="``c2h_timeout`` in real seconds (0: none).")

    # --- the file operations ---------------------------------------------------------------

    def exists(self, path):
        return str(path) in self.paths

    def open(self, path, flags, mode=0o777):
        with self._cond:
            engine = self.paths.get(str(path))
            if engine is None or self._closed:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
            # The direction is checked at read and write (EINVAL), as the driver does.
            if engine == "c2h":
                if self._c2h_open:
                    raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))
                self._c2h_open = True
            fd = self._next_fd
            self._next_fd += 1
            self._files[fd] = _File(engine, bool(flags & os.O_TRUNC))
            return fd

    def close(self, fd):
        """Free the file number at once; the file itself when no call on it is in the driver
        (``char_sgdma_close`` runs when the kernel drops the file's last reference)."""
        with self._cond:
            file = self._file(fd)
            del self._files[fd]
            file.closed = True
            if not file.calls:
                self._release(file)

    def ioctl(self, fd, request, arg=0, mutate_flag=True):
        """``IOCTL_XDMA_ALIGN_GET``: the engine's address alignment, as ``fcntl.ioctl`` returns
        it for a bytes argument (an int of 4 bytes); other requests fail with ``EINVAL``."""
        self._file(fd)
        if request != XDMA_IOCTL_ALIGN_GET:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return self.addr_align.to_bytes(4, "little", signed=True)

    def write(self, fd, data):
        view = memoryview(data).cast("B")
        address = _address(data)
        with self._call(fd, "h2c", len(view), address):
            done = 0
            for descriptors in self._transfers("h2c", address, len(view)):
                length = sum(descriptors)
                piece = view[done:done + length]
                try:
                    self._h2c_transfer(piece, len(descriptors))
                except _Aborted:
                    if done:
                        return done     # "as long as some data is processed, return the count"
                    raise OSError(errno.ETIMEDOUT, os.strerror(errno.ETIMEDOUT)) from None
                done += length
            return done

    def read(self, fd, size):
        """As ``os.read``: into a buffer of ``size`` bytes that is not page-aligned."""
        buffer = bytearray(size)
        count = self._read(fd, buffer, _OS_READ_OFFSET)
        return bytes(buffer[:count])

    def readinto(self, fd, buffer):
        """A ``read`` into the writable ``buffer`` (as ``io.FileIO.readinto``, one ``read``
        call): the card's bytes land at their places in it (a packet's hole keeps what the
        buffer held); returns the count."""
        view = memoryview(buffer).cast("B")
        return self._read(fd, view, _address(view))

    def _read(self, fd, buffer, address):
        with self._call(fd, "c2h", len(buffer), address) as file:
            position = 0
            for descriptors in self._transfers("c2h", address, len(buffer)):
                try:
                    count, ended = self._c2h_transfer(buffer, position, descriptors,
                                                      file.eop_flush)
                except _Aborted:
                    if position:
                        break
                    raise OSError(errno.ETIMEDOUT, os.strerror(errno.ETIMEDOUT)) from None
                position += count
                if ended:
                    break       # eop_flush: the packet's end finishes the whole request
            return position

    # --- a call in the driver ---------------------------------------------------------------

    @contextlib.contextmanager
    def _call(self, fd, engine, nbytes, address):
        """A read or write in the driver: checked as ``char_sgdma_read_write`` checks it, the
        engine's ``desc_lock`` held, the file held until it returns."""
        with self._cond:
            file = self._file(fd)
            if file.engine != engine:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
            if address is not None and address % self.addr_align:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))     # misaligned buffer
            if nbytes <= 0:
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))     # no pages to map
            self.calls.append((engine, nbytes))
            file.calls += 1
            try:
                self._acquire_engine(engine)
                try:
                    yield file
                finally:
                    self._release_engine(engine)
            finally:
                file.calls -= 1
                if file.closed and not file.calls:
                    self._release(file)

    def _transfers(self, engine, address, length):
        """Descriptor lengths of each transfer of a call, built as the call reaches it: at most
        2048 descriptors, cut where the engine's ring wraps (``transfer_init``)."""
        lengths = _descriptors((address or 0) % _PAGE, length)
        first = 0
        while first < len(lengths):
            ring = self._ring[engine]
            count = min(len(lengths) - first, PAGES_PER_TRANSFER)
            if ring + count >= PAGES_PER_TRANSFER:
                count = PAGES_PER_TRANSFER - ring
            self._ring[engine] = (ring + count) % PAGES_PER_TRANSFER
            yield lengths[first:first + count]
            first += count

    def _wait(self, deadline, engine):
        """Wait for the card (the lock held) until ``deadline`` (None: no timeout); raises
        :class:`_Aborted` when it has passed, when a signal the thread does not block arrives,
        or when the model is shut down."""
        self._signal_arrives(engine)
        if engine in self._interrupted:
            self._interrupted.discard(engine)
            raise _Aborted
        if self._closed:
            raise _Aborted
        if deadline is None:
            self._cond.wait(0.05)
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Aborted
        self._cond.wait(min(left, 0.05))

    def _signal_arrives(self, engine):
        """At a transfer's start or during its wait, the signal set for ``engine`` arrives at
        the calling thread: pending for it if it blocks the signal (another thread takes it),
        else the transfer's wait, if it needs one, ends at once
        (``swait_event_interruptible_timeout`` tests the completion before the signal)."""
        if engine not in self.faults.signal:
            return
        self.faults.signal.discard(engine)
        if self.faults.signal_number in signal.pthread_sigmask(signal.SIG_BLOCK, []):
            self.signals_blocked += 1
        else:
            self.signals_taken += 1
            self._interrupted.add(engine)

    def _deadline(self, engine):
        timeout = self._timeout_s(engine)
        return None if timeout is None else time.monotonic() + timeout

    # --- modelled time ---------------------------------------------------------------------

    def reset_clock(self):
        """Start the modelled time again at 0 with no transfers recorded."""
        with self._cond:
            self.transfers.clear()
            self.clock_s = self._produced_s = self._h2c_start_s = 0.0
            self._engine_free_s = {"h2c": 0.0, "c2h": 0.0}

    def _end_s(self, direction, start_s, nbytes, pages, ready_s=0.0):
        """When a transfer of ``nbytes`` into ``pages`` pages started at ``start_s`` ends on
        the link, its data there from ``ready_s``."""
        return (max(start_s + self.transfer_overhead_s + pages * self.page_cost_s, ready_s)
                + nbytes * self._byte_s[direction])

    def _timed(self, direction, nbytes, issued_s, ready_s=0.0, core_s=0.0, pages=None):
        pages = max(1, -(-nbytes // _PAGE)) if pages is None else pages
        start = max(issued_s, self._engine_free_s[direction])
        end = max(self._end_s(direction, start, nbytes, pages, ready_s), start + core_s)
        self._engine_free_s[direction] = end
        self.clock_s = max(self.clock_s, end)
        self.transfers.append(Transfer(direction, nbytes, start, end, pages))
        return end

    # --- the card ---------------------------------------------------------------------------

    def _file(self, fd):
        try:
            return self._files[fd]
        except KeyError:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF)) from None

    def _release(self, file):
        if file.engine == "c2h":
            self._c2h_open = False
        self._cond.notify_all()

    def _acquire_engine(self, engine):
        while self._engine_busy[engine]:
            self._cond.wait()
        self._engine_busy[engine] = True

    def _release_engine(self, engine):
        self._engine_busy[engine] = False
        self._cond.notify_all()

    def _pending_input(self):
        return getattr(self.board, "pending_input", 0)

    def _run_board(self, room):
        """Run the board for at most ``room`` output bytes: until the bytes given to it are
        taken, or, with none left, for a slice of its frame timeout; ``(data, quiescent)``.
        Simulated time passes only here, so with no request bytes the board runs in slices,
        giving a host between two transfers of a request time to send the next before the
        board's frame timeout abandons the frame."""
        if not hasattr(self.board, "cycles"):       # a fake: answers as requests arrive
            data = self.board.read(room, None)
            return data, len(data) < room
        pending = self._pending_input()
        link_bytes = getattr(self.board, "link_bytes", 1)
        limit = (-(-pending // link_bytes) + 64 if pending else self._idle_slice_cycles)
        before = self.board.cycles
        data = self.board.read(room, timeout_cycles=limit)
        ran = self.board.cycles - before
        if pending:
            self._busy_cycles += ran
        return data, len(data) < room and ran < limit and not self._pending_input()

    def _give(self):
        """Give the board the current transfer's bytes it takes."""
        faults = self.faults
        if not self._feed or faults.stall:
            return
        count = len(self._feed)
        if faults.stall_after is not None:
            count = min(count, faults.stall_after)
            faults.stall_after -= count
            if not faults.stall_after:
                faults.stall, faults.stall_after = True, None
        if count:
            self.board.write(bytes(self._feed[:count]))
            del self._feed[:count]

    def _advance(self):
        """Run the card: give it the current transfer's bytes and collect what it sends, until
        it is idle, its output buffer is full or it makes no progress. Called with the lock
        held."""
        while not self._closed:
            room = self.c2h_fifo_bytes - len(self._fifo)
            if room <= 0:
                return
            self._give()
            pending = self._pending_input()
            data, quiescent = self._run_board(room)
            if self.faults.mute:
                data = b""
            if data:
                # Bytes that come out while a transfer goes in count as out at its end.
                self._fifo += data
                self._produced_s = max(self._produced_s, self.clock_s if self._h2c_end_s is None
                                       else self._h2c_end_s)
            unended = len(self._fifo) - (self._packet_ends[-1] if self._packet_ends else 0)
            if quiescent and unended > 0:
                # The core is idle: the C2H adapter ends the packet (tlast).
                if self.faults.cut_next_reply:
                    cut = min(self.faults.cut_next_reply, unended)
                    del self._fifo[len(self._fifo) - cut:]
                    self.faults.cut_next_reply = 0
                self._packet_ends.append(len(self._fifo))
            if data or quiescent:
                self._cond.notify_all()
            if quiescent or not (data or self._pending_input() < pending):
                return

    def _h2c_transfer(self, piece, pages):
        issued_s = self.clock_s
        self._h2c_start_s = max(issued_s, self._engine_free_s["h2c"])
        self._h2c_end_s = self._end_s("h2c", self._h2c_start_s, len(piece), pages)
        cycles = self._busy_cycles
        self._feed += piece
        self._signal_arrives("h2c")
        deadline = self._deadline("h2c")
        try:
            while True:
                self._advance()
                if not self._feed and not self._pending_input():
                    break
                try:
                    self._wait(deadline, "h2c")
                except _Aborted:
                    # Aborted: the rest never reaches the card.
                    self._feed.clear()
                    getattr(self.board, "discard_input", lambda: None)()
                    raise
        finally:
            self._h2c_end_s = None
            self._interrupted.discard("h2c")
        core_s = (self._busy_cycles - cycles) / self.core_clock_hz
        self._timed("h2c", len(piece), issued_s, core_s=core_s, pages=pages)
        self._cond.notify_all()

    def _sendable(self):
        """Bytes at the head of the card's buffer it sends now (none while it holds packets)."""
        hold = self.faults.hold_packets
        if hold and len(self._packet_ends) < hold and not self._closed:
            return 0
        self.faults.hold_packets = 0
        return len(self._fifo)

    def _take(self, buffer, at, room):
        """Move the card's next bytes, up to ``room`` and the packet's end, into ``buffer`` at
        ``at``: ``(count, the packet ended)``."""
        count = min(room, self._sendable())
        end = self._packet_ends[0] if self._packet_ends else None
        if end is not None and end <= count:
            count = end
        buffer[at:at + count] = self._fifo[:count]
        del self._fifo[:count]
        self._packet_ends = [e - count for e in self._packet_ends if e > count]
        return count, end == count

    def _c2h_transfer(self, buffer, position, descriptors, eop_flush):
        """One card-to-host transfer into the descriptors ``descriptors`` (lengths) of
        ``buffer`` from ``position``: ``(count, ended at tlast)``, the count being the
        completed descriptors' lengths (``xdma_xfer_submit``: ``done += result[i].length``).
        A packet's end closes its descriptor; with ``eop_flush`` it completes the transfer.
        In modelled time a read counts as posted when the last host-to-card transfer before
        its end started, as a host that reads alongside its writes posts it."""
        self._signal_arrives("c2h")
        deadline = self._deadline("c2h")
        starts = [position]
        for length in descriptors[:-1]:
            starts.append(starts[-1] + length)
        index = filled = count = 0
        ended = False
        while True:
            self._advance()
            progress = False
            while index < len(descriptors) and not (ended and eop_flush):
                got, ended = self._take(buffer, starts[index] + filled,
                                        descriptors[index] - filled)
                if not got and not ended:
                    break
                progress = True
                filled += got
                count += got
                if (ended and eop_flush) or filled == descriptors[index]:
                    index, filled = index + 1, 0
            if ended and eop_flush and self.faults.back_to_back and self._sendable():
                count += self._run_on(buffer, starts[index:], descriptors[index:])
            if (ended and eop_flush) or index == len(descriptors):
                self._timed("c2h", count, self._h2c_start_s, ready_s=self._produced_s,
                            pages=len(descriptors))
                self._interrupted.discard("c2h")
                self._cond.notify_all()
                return count, ended
            self._cond.notify_all()
            if progress:
                continue
            try:
                self._wait(deadline, "c2h")
            except _Aborted:
                # Aborted: what the engine had written into the buffer is not reported.
                self._cond.notify_all()
                raise

    def _run_on(self, buffer, starts, descriptors):
        """The completion of a read serviced after the engine went on: the next packet fills
        up to ``faults.back_to_back`` of the read's remaining descriptors; their bytes."""
        merged = 0
        for start, length in list(zip(starts, descriptors))[:self.faults.back_to_back]:
            got, ended = self._take(buffer, start, length)
            merged += got
            if ended or got < length:
                break
        self.faults.back_to_back = 0
        self.runs_on += merged > 0
        return merged

    def shutdown(self):
        """Close the board; calls waiting in the model fail."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            close = getattr(self.board, "close", None) if self.close_board else None
        if close is not None:
            close()
