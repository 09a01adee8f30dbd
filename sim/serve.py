"""A virtual board on a pseudo-terminal, so pyserial or a terminal program connects to it as to
a real board's serial port (``maxaccel serve``).

The server opens a pseudo-terminal pair in raw mode and pumps bytes between the master end and
a board: what a client writes to the slave goes to the board, what the board sends comes back.
The board is any device transport (:func:`maxaccel.host.transport.open_transport`): ``sim`` by
default. A pseudo-terminal has no bit rate: the client's ``baud`` is accepted and ignored, and
the bytes move as fast as the simulated board makes them.

A client that goes away (closes the port, exits, is killed) or gives up mid-request leaves a
partial frame and perhaps a long reply in progress: a simulated board would spend minutes
finishing it, and every later client would wait. The server therefore power-cycles the board
(its ``reset()``) and drops what it had queued for it when

* the terminal hangs up (no process has the slave open any more), or
* a client discards its unsent output (``tcflush(TCOFLUSH)``, pyserial's
  ``reset_output_buffer()``): the host's serial transport does this when it opens the port and
  when it abandons an interrupted request, so a client that comes right after another was
  killed (before the hang-up could be seen) still finds a fresh board. The kernel reports the
  flush to the server through the master's packet mode (``TIOCPKT_FLUSHWRITE``) and discards
  the vanished client's unread bytes itself.

Client bytes are taken only as fast as the board consumes them (:data:`CLIENT_CHUNK` at a
time), so little of a vanished client is ever queued in the board.
"""

import errno
import fcntl
import os
import select
import struct
import termios
import threading
import time
import tty

from maxaccel.contract.wire import MAGIC

__all__ = ["pump", "PtyServer"]

#: Seconds of board time (simulated time, for a virtual board) to run between polls of the
#: client side: short, so a reply starts to flow while the board is still working and a new
#: client is noticed within a fraction of a second (500 cycles at the virtual boards' 1 MHz:
#: about 0.2 s on ``sim``).
BOARD_SLICE_S = 0.0005

#: Bytes taken from the client at a time: a simulated board consumes them before the next
#: poll (about a tenth of a second on ``sim``), which bounds how late a hang-up is seen.
CLIENT_CHUNK = 256


def _packet_mode(fd):
    """Put a pseudo-terminal master in packet mode: each read then starts with a status byte
    (0 before data; flags such as ``TIOCPKT_FLUSHWRITE`` alone)."""
    fcntl.ioctl(fd, termios.TIOCPKT, struct.pack("i", 1))


class _Client:
    """The client side of a pump: what it sent and not yet given to the board, and whether a
    client is there."""

    def __init__(self, read_fd, packet, on_hangup):
        self.read_fd = read_fd
        self.packet = packet
        self.on_hangup = on_hangup
        self.present = False
        self.incoming = b""
        # A board just reset hunts for a frame's magic and drops what comes before it; so does
        # the server, without making the simulator chew through it (what the kernel still
        # holds of a vanished client, which a flush does not always discard).
        self.hunting = False

    def poll(self, wait_s):
        """Take what the client sent within ``wait_s``; returns False if the session ended
        (a hang-up, or a flush of the client's output): the board's output so far is then for
        nobody."""
        readable, _, _ = select.select([self.read_fd], [], [], wait_s)
        if not readable:
            self.present = True
            return True
        try:
            data = os.read(self.read_fd, CLIENT_CHUNK + self.packet)
        except BlockingIOError:
            return True
        except OSError as error:
            if error.errno != errno.EIO:
                raise
            # No process holds the slave open: the client has gone.
            ended, self.present = self.present, False
            if ended:
                self._end()
            return False
        if self.packet and data:
            status, data = data[0], data[1:]
            if status & termios.TIOCPKT_FLUSHWRITE:
                self.present = True
                self._end()
                return False
            if status & termios.TIOCPKT_FLUSHREAD:
                # The client discarded its input: what the board sent so far is stale.
                return False
        if data:
            self.present = True
            self.incoming += data
            if self.hunting:
                start = self.incoming.find(MAGIC)
                if start < 0:
                    keep = len(MAGIC) - 1     # the start of a magic split across reads
                    self.incoming = self.incoming[-keep:] if MAGIC.startswith(
                        self.incoming[-keep:]) else b""
                else:
                    self.incoming = self.incoming[start:]
                    self.hunting = False
        return True

    def _end(self):
        self.incoming = b""
        self.hunting = True
        if self.on_hangup is not None:
            self.on_hangup()


def pump(board, read_fd, write_fd, stop, *, poll_s=0.005, on_hangup=None, packet=False):
    """Move bytes between file descriptors and a board until ``stop`` (a threading.Event) is set.

    Bytes read from ``read_fd`` are written to the board; bytes the board sends are written to
    ``write_fd`` (both descriptors may be the same, e.g. a pseudo-terminal master). ``board``
    has ``write(data)`` and ``read(size, timeout)``: a transport, a
    :class:`~maxaccel.sim.virtual_board.VirtualBoard` or a test's fake board. Nothing is dropped
    while a client is there: a client that is slow to read only holds the pump back.

    When ``read_fd`` is a pseudo-terminal master whose slave no process holds open any more
    (reading it fails with ``EIO``), the client has gone: what the board still sends is
    discarded, ``on_hangup()`` is called once (the server resets the board there), and the
    pump waits for the next client. With ``packet=True`` (``read_fd`` a master in packet mode)
    a client's flush of its output is handled the same way, and after a flush of its input
    the board's output so far is dropped; the client side is looked at again just before any
    output goes out, so nothing older than a flush reaches the client.
    """
    client = _Client(read_fd, packet, on_hangup)
    busy = False    # the board sent something last time: do not wait for the client
    while not stop.is_set():
        if client.hunting or not client.incoming:
            if not client.poll(0 if busy else poll_s) and not client.present:
                time.sleep(poll_s)   # nobody there
                continue
        if client.incoming and not client.hunting:
            chunk, client.incoming = client.incoming[:CLIENT_CHUNK], client.incoming[CLIENT_CHUNK:]
            board.write(chunk)
        pending = board.read(1 << 16, BOARD_SLICE_S)
        busy = bool(pending)
        if pending and packet and not client.poll(0):
            continue    # output of a session that has ended, or older than the client's flush
        while pending and not stop.is_set():
            try:
                pending = pending[os.write(write_fd, pending):]
            except BlockingIOError:
                select.select([], [write_fd], [], poll_s)
            except OSError as error:
                if error.errno != errno.EIO:
                    raise
                pending = b""   # the client went while its reply was on the way


class PtyServer:
    """A board served on a new pseudo-terminal, pumped by a background thread.

    Parameters
    ----------
    board
        What to serve: anything with ``write(data)``, ``read(size, timeout)`` and ``close()``
        (see :func:`pump`). Closed with the server.
    link : str or path, optional
        Also make a symbolic link with this name to the slave device (a stable name for
        scripts: the ``/dev/pts/N`` number changes from run to run). Removed on close.

    Attributes
    ----------
    port : str
        The slave device a client opens, e.g. ``/dev/pts/3``.
    url : str
        The device URL for :func:`maxaccel.host.device.open_device`.
    hangups : int
        Clients that went away or abandoned their output (each reset the board).

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, board, *, link=None):
        self.board = board
        self.hangups = 0
        self._master, slave = os.openpty()
        try:
            tty.setraw(slave)
            self.port = os.ttyname(slave)
        finally:
            # Not kept open: the master then sees a client hang up (EIO).
            os.close(slave)
        os.set_blocking(self._master, False)
        _packet_mode(self._master)
        self.link = None
        if link is not None:
            link = os.fspath(link)
            if os.path.lexists(link):
                if not os.path.islink(link):
                    self._close_fds()
                    raise FileExistsError(f"--link {link!r} exists and is not a symbolic link")
                os.unlink(link)
            os.symlink(self.port, link)
            self.link = link
        self.url = f"serial://{self.link or self.port}"
        self._stop = threading.Event()
        # Set by the pump thread as it ends. Waits are on it, never on ``Thread.join``: a
        # signal handler raising inside ``join`` (Ctrl-C in ``maxaccel serve``) can leave
        # Python 3.11's thread marked stopped while it still runs, and the descriptor would
        # then be closed under it.
        self._stopped = threading.Event()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="maxaccel-pty-pump", daemon=True)
        self._thread.start()

    def _hangup(self):
        self.hangups += 1
        reset = getattr(self.board, "reset", None)
        if reset is not None:
            reset()

    def _run(self):
        try:
            pump(self.board, self._master, self._master, self._stop, on_hangup=self._hangup,
                 packet=True)
        except BaseException as error:   # reported by wait() / close(), not lost in a thread
            self._error = error
        finally:
            self._stopped.set()

    def wait(self, timeout=None):
        """Block until the pump stops (it stops only on :meth:`close` or an error); re-raises
        an error of the board. Returns True if the pump has stopped."""
        stopped = self._stopped.wait(timeout)
        if self._error is not None:
            raise self._error
        return stopped

    def _close_fds(self):
        os.close(self._master)

    def close(self):
        """Stop the pump, close the pseudo-terminal and the board, remove the link."""
        if self._stop.is_set():
            return
        self._stop.set()
        if not self._stopped.wait(10):  # never seen; a daemon thread, so the process can end
            raise RuntimeError("the pseudo-terminal pump did not stop within 10 s")
        self._thread.join()
        self._close_fds()
        if self.link is not None and os.path.islink(self.link):
            os.unlink(self.link)
        self.board.close()
        if self._error is not None:
            raise self._error

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
