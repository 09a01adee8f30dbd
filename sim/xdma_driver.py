"""A test double of the Xilinx XDMA driver's streaming character devices, with a board behind it.

No PCIe board is attached to the machines this project is built on, so the host's ``xdma://``
transport (:class:`maxaccel.host.transport.XdmaTransport`) is tested against this object, which
behaves as the driver does (``dma_ip_drivers``, ``XDMA/linux-kernel/xdma``: ``cdev_sgdma.c``
and ``libxdma.c``'s ``xdma_xfer_submit``), not as a pipe would:

* **No poll.** The driver's ``file_operations`` have no ``poll``: ``select()`` says "ready"
  always, so this object offers no readiness either; the only calls are ``open``, ``read``,
  ``write`` and ``close`` (of file numbers it hands out).
* **Whole, blocking transfers.** ``write`` returns when the card has taken every byte;
  ``read`` when its transfer completes. ``O_NONBLOCK`` changes nothing. A transfer that does
  not complete within the engine's timeout (``h2c_timeout`` / ``c2h_timeout``, module
  parameters, 10 s by default) is aborted and the call fails with ``ETIMEDOUT``; the bytes a
  timed-out card-to-host transfer had received are lost (the driver counts only completed
  transfers). A wait is not ended by signals (``xlx_wait_event_interruptible_timeout`` loops
  until it expires). A request larger than one transfer's descriptors (2048 pages: 8 MiB) is
  several transfers, one after the other.
* **Reads end at ``tlast``, with ``O_TRUNC``.** Opened with ``O_TRUNC`` the card-to-host
  engine runs in ``eop_flush`` mode: a read returns when the stream's packet ends (``tlast``)
  or the buffer is full. Opened without it, a read returns only when its buffer is full,
  whatever packets end meanwhile.
* **One reader.** The card-to-host file of a streaming engine can be open once (``EBUSY``).
* **Backpressure.** The card's reply leaves only into a posted read: without one, the card's
  output buffer (``c2h_fifo_bytes``) fills, the core stops, and so does the host-to-card
  stream: a host that writes a request whose reply streams back while it goes in, without
  reading alongside, waits until the write times out, as on the real card.

The board is any virtual board (``write`` of bytes, ``read(size, timeout)`` that returns early
once it is quiescent). A packet (``tlast``) ends when the board is quiescent with every byte
given to it taken, which is when the C2H adapter ends one (``boards/xdma.py``,
``BytesToWords``: ``flush`` is the core's ``idle``; ``tests/test_xdma.py`` checks the gateware).

**Modelled time.** Alongside, the double keeps the time the transfers would take on a NiteFury
(:attr:`clock_s`), from the published figures (``docs/boards.md``, "The XDMA link"): a fixed
cost per transfer and the link's rate, fitted to 9.2 MB/s at 512-byte and 68.5 MB/s at 4 KiB
transfers on a NiteFury and to 1.6 GB/s (host to card) and 1.3 GB/s (card to host) at 8 MB on
a Gen2 x4 XDMA design; the core's own cycles at its clock bound a transfer too.
"""

import errno
import os
import threading
import time
from dataclasses import dataclass

from maxaccel.boards.targets import TARGETS

__all__ = ["XdmaDriverModel", "Transfer", "TRANSFER_OVERHEAD_S", "PAGES_PER_TRANSFER"]

#: Fixed cost of one DMA transfer (descriptor set-up, doorbell, interrupt, wake-up), seconds:
#: 512 B at 9.2 MB/s is 55.7 us and 4 KiB at 68.5 MB/s 59.8 us on a NiteFury, so a transfer
#: costs 55 us plus its bytes at the link's rate.
TRANSFER_OVERHEAD_S = 55e-6
#: Descriptors of one transfer (``XDMA_ENGINE_XFER_MAX_DESC``), one per 4 KiB page of the
#: user's buffer: a larger read or write is several transfers.
PAGES_PER_TRANSFER = 0x800
_PAGE = 4096

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
    """

    direction: str
    nbytes: int
    start_s: float
    end_s: float


class _Faults:
    """What a test makes the card do wrong (all off by default).

    Attributes
    ----------
    stall : bool
        The card takes no bytes (the host-to-card stream holds ``tready`` low).
    mute : bool
        The card takes bytes but every byte it sends is lost.
    cut_next_reply : int
        The next packet the card sends loses its last this many bytes (ending early with
        ``tlast``).
    """

    def __init__(self):
        self.stall = False
        self.mute = False
        self.cut_next_reply = 0


class XdmaDriverModel:
    """``/dev/xdmaN_h2c_0`` and ``/dev/xdmaN_c2h_0`` of the XDMA driver, a board behind them.

    Its ``open``/``read``/``write``/``close``/``exists`` have the signatures of ``os.open``,
    ``os.read``, ``os.write``, ``os.close`` and ``os.path.exists``, so
    :class:`~maxaccel.host.transport.XdmaTransport` takes it in their place (``files=``). Any
    number of threads may call it at once, as a process may call the driver.

    Parameters
    ----------
    board : virtual board
        ``VerilatorBoard``, ``VirtualBoard`` or a test's fake; it is closed with the model.
    prefix : str
        The device path prefix (``/dev/xdma0``).
    h2c_timeout_s, c2h_timeout_s : float
        The driver's ``h2c_timeout`` and ``c2h_timeout`` (seconds of real time here).
    c2h_fifo_bytes : int
        Reply bytes the card holds without a read posted before it stops.
    transfer_overhead_s : float
        Modelled fixed cost of a transfer.
    h2c_bytes_per_s, c2h_bytes_per_s : float
        Modelled link rates.
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
    clock_s : float
        Modelled time of the last completed transfer's end.
    """

    def __init__(self, board, *, prefix="/dev/xdma0", h2c_timeout_s=10.0, c2h_timeout_s=10.0,
                 c2h_fifo_bytes=4096, transfer_overhead_s=TRANSFER_OVERHEAD_S,
                 h2c_bytes_per_s=_NITEFURY.link_bytes_per_s, c2h_bytes_per_s=1.3e9,
                 core_clock_hz=_NITEFURY.clock_mhz * 1e6, close_board=True):
        self.board = board
        self.close_board = close_board
        self.prefix = prefix
        self.paths = {f"{prefix}_h2c_0": "h2c", f"{prefix}_c2h_0": "c2h"}
        self.h2c_timeout_s = h2c_timeout_s
        self.c2h_timeout_s = c2h_timeout_s
        self.c2h_fifo_bytes = c2h_fifo_bytes
        self.transfer_overhead_s = transfer_overhead_s
        self.rates = {"h2c": h2c_bytes_per_s, "c2h": c2h_bytes_per_s}
        self.core_clock_hz = core_clock_hz
        self.faults = _Faults()
        self.transfers = []
        self.clock_s = 0.0
        self._engine_free_s = {"h2c": 0.0, "c2h": 0.0}
        self._produced_s = 0.0                  # modelled time the card's last bytes came out
        self._h2c_end_s = None                  # modelled end of the H2C transfer going in
        self._h2c_start_s = 0.0                 # modelled start of the last H2C transfer
        self._busy_cycles = 0                   # cycles the board ran with request bytes
        self._cond = threading.Condition()
        self._files = {}                        # fd -> (engine, eop_flush)
        self._next_fd = 1000
        self._c2h_open = False
        self._engine_busy = {"h2c": False, "c2h": False}    # the engine's desc_lock
        self._feed = bytearray()                # bytes of the current H2C transfer not given
        identity = getattr(board, "identity", None)
        # Cycles the board runs at a time with no request bytes to take (an eighth of its frame
        # timeout).
        self._idle_slice_cycles = max(64, (getattr(identity, "frame_timeout_cycles", 0)
                                           or 4096) // 8)
        self._fifo = bytearray()                # card-to-host bytes not yet in a read
        self._packet_ends = []                  # positions in _fifo just after a tlast
        self._closed = False

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
            self._files[fd] = (engine, bool(flags & os.O_TRUNC))
            return fd

    def close(self, fd):
        with self._cond:
            engine, _ = self._file(fd)
            del self._files[fd]
            if engine == "c2h":
                self._c2h_open = False

    def write(self, fd, data):
        engine, _ = self._file(fd)
        if engine != "h2c":
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        view = memoryview(bytes(data))
        done = 0
        with self._cond:
            self._acquire_engine("h2c")
            try:
                for start in range(0, len(view), PAGES_PER_TRANSFER * _PAGE):
                    piece = view[start:start + PAGES_PER_TRANSFER * _PAGE]
                    try:
                        self._h2c_transfer(piece)
                    except TimeoutError:
                        if done:
                            return done     # "as long as some data is processed"
                        raise OSError(errno.ETIMEDOUT, os.strerror(errno.ETIMEDOUT)) from None
                    done += len(piece)
            finally:
                self._release_engine("h2c")
        return done

    def read(self, fd, size):
        engine, eop_flush = self._file(fd)
        if engine != "c2h":
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        with self._cond:
            self._acquire_engine("c2h")
            try:
                chunks = []
                for start in range(0, size, PAGES_PER_TRANSFER * _PAGE):
                    length = min(size - start, PAGES_PER_TRANSFER * _PAGE)
                    try:
                        data, ended = self._c2h_transfer(length, eop_flush)
                    except TimeoutError:
                        if chunks:
                            break
                        raise OSError(errno.ETIMEDOUT, os.strerror(errno.ETIMEDOUT)) from None
                    chunks.append(data)
                    if ended:
                        break       # eop_flush: the packet's end finishes the whole request
                return b"".join(chunks)
            finally:
                self._release_engine("c2h")

    # --- modelled time ---------------------------------------------------------------------

    def reset_clock(self):
        """Start the modelled time again at 0 with no transfers recorded."""
        with self._cond:
            self.transfers.clear()
            self.clock_s = self._produced_s = self._h2c_start_s = 0.0
            self._engine_free_s = {"h2c": 0.0, "c2h": 0.0}

    def _end_s(self, direction, start_s, nbytes, ready_s=0.0):
        """When a transfer of ``nbytes`` started at ``start_s`` ends on the link, its data
        there from ``ready_s``."""
        return max(start_s + self.transfer_overhead_s, ready_s) + nbytes / self.rates[direction]

    def _timed(self, direction, nbytes, issued_s, ready_s=0.0, core_s=0.0):
        start = max(issued_s, self._engine_free_s[direction])
        end = max(self._end_s(direction, start, nbytes, ready_s), start + core_s)
        self._engine_free_s[direction] = end
        self.clock_s = max(self.clock_s, end)
        self.transfers.append(Transfer(direction, nbytes, start, end))
        return end

    # --- the card ---------------------------------------------------------------------------

    def _file(self, fd):
        try:
            return self._files[fd]
        except KeyError:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF)) from None

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

    def _advance(self):
        """Run the card: give it the current transfer's bytes and collect what it sends, until
        it is idle, its output buffer is full or it makes no progress. Called with the lock
        held."""
        while not self._closed:
            room = self.c2h_fifo_bytes - len(self._fifo)
            if room <= 0:
                return
            if self._feed and not self.faults.stall:
                self.board.write(bytes(self._feed))
                self._feed.clear()
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

    def _h2c_transfer(self, piece):
        issued_s = self.clock_s
        self._h2c_start_s = max(issued_s, self._engine_free_s["h2c"])
        self._h2c_end_s = self._end_s("h2c", self._h2c_start_s, len(piece))
        cycles = self._busy_cycles
        self._feed += piece
        deadline = time.monotonic() + self.h2c_timeout_s
        try:
            while True:
                self._advance()
                if not self._feed and not self._pending_input():
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    # Aborted: the rest never reaches the card.
                    self._feed.clear()
                    getattr(self.board, "discard_input", lambda: None)()
                    raise TimeoutError
                self._cond.wait(min(left, 0.05))
        finally:
            self._h2c_end_s = None
        core_s = (self._busy_cycles - cycles) / self.core_clock_hz
        self._timed("h2c", len(piece), issued_s, core_s=core_s)
        self._cond.notify_all()

    def _c2h_transfer(self, length, eop_flush):
        """One card-to-host transfer into a buffer of ``length``: ``(bytes, ended at tlast)``.
        A posted read drains the card as its bytes come. In modelled time a read counts as
        posted when the last host-to-card transfer before its end started, as a host that
        reads alongside its writes posts it (the transport does; when it happens in real
        time here depends on the machine's load)."""
        deadline = time.monotonic() + self.c2h_timeout_s
        got = bytearray()
        while True:
            self._advance()
            take = min(len(self._fifo), length - len(got))
            ended = bool(self._packet_ends) and self._packet_ends[0] <= take
            if ended:
                take = self._packet_ends[0]
            if take:
                got += self._fifo[:take]
                del self._fifo[:take]
                self._packet_ends = [e - take for e in self._packet_ends if e > take]
                self._cond.notify_all()
            if (ended and eop_flush) or len(got) == length:
                self._timed("c2h", len(got), self._h2c_start_s, ready_s=self._produced_s)
                self._cond.notify_all()
                return bytes(got), ended
            if take:
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                # Aborted: what the engine had written into the buffer is not reported.
                self._cond.notify_all()
                raise TimeoutError
            self._cond.wait(min(left, 0.05))

    def shutdown(self):
        """Close the board; calls waiting in the model fail."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            close = getattr(self.board, "close", None) if self.close_board else None
        if close is not None:
            close()
