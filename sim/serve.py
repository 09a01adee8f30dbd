"""A virtual board on a pseudo-terminal, so pyserial or a terminal program connects to it as to
a real board's serial port (``maxaccel serve``).

The server opens a pseudo-terminal pair in raw mode and pumps bytes between the master end and
a board: what a client writes to the slave goes to the board, what the board sends comes back.
The board is any device transport (:func:`maxaccel.host.transport.open_transport`): ``sim`` by
default. A pseudo-terminal has no bit rate: the client's ``baud`` is accepted and ignored, and
the bytes move as fast as the simulated board makes them.

A client that goes away (closes the port, exits, is killed) mid-request leaves a partial frame
and perhaps a long reply in progress: a simulated board would spend minutes finishing it. The
server sees the terminal hang up (no process has the slave open) and power-cycles the board
(its ``reset()``), so the next client finds it idle. Client bytes are taken only as fast as the
board consumes them, so nothing of a vanished client is left queued.
"""

import errno
import os
import select
import threading
import tty

__all__ = ["pump", "PtyServer"]

#: Seconds of board time (simulated time, for a virtual board) to run between polls of the
#: client side: short, so a reply starts to flow while the board is still working.
BOARD_SLICE_S = 0.002

#: Bytes taken from the client at a time: a simulated board consumes them before the next
#: poll (about half a second on ``sim``), which bounds how late a hang-up is seen.
CLIENT_CHUNK = 1024


def pump(board, read_fd, write_fd, stop, *, poll_s=0.005, on_hangup=None):
    """Move bytes between file descriptors and a board until ``stop`` (a threading.Event) is set.

    Bytes read from ``read_fd`` are written to the board; bytes the board sends are written to
    ``write_fd`` (both descriptors may be the same, e.g. a pseudo-terminal master). ``board``
    has ``write(data)`` and ``read(size, timeout)``: a transport, a
    :class:`~maxaccel.sim.virtual_board.VirtualBoard` or a test's fake board. Nothing is dropped
    while a client is there: a client that is slow to read only holds the pump back.

    When ``read_fd`` is a pseudo-terminal master whose slave no process holds open any more
    (reading it fails with ``EIO``), the client has gone: what the board still sends is
    discarded, ``on_hangup()`` is called once (the server resets the board there), and the
    pump waits for the next client.
    """
    pending = b""
    client = False
    while not stop.is_set():
        readable, _, _ = select.select([read_fd], [], [], poll_s)
        if not readable:
            client = True
        else:
            try:
                data = os.read(read_fd, CLIENT_CHUNK)
            except BlockingIOError:
                data = b""
            except OSError as error:
                if error.errno != errno.EIO:
                    raise
                if client:
                    client = False
                    pending = b""
                    if on_hangup is not None:
                        on_hangup()
                stop.wait(poll_s)
                continue
            if data:
                client = True
                board.write(data)
        pending += board.read(1 << 16, BOARD_SLICE_S)
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
        Clients that went away (each one reset the board).

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
            pump(self.board, self._master, self._master, self._stop, on_hangup=self._hangup)
        except BaseException as error:   # reported by wait() / close(), not lost in a thread
            self._error = error

    def wait(self, timeout=None):
        """Block until the pump stops (it stops only on :meth:`close` or an error); re-raises
        an error of the board. Returns True if the pump has stopped."""
        self._thread.join(timeout)
        if self._error is not None:
            raise self._error
        return not self._thread.is_alive()

    def _close_fds(self):
        os.close(self._master)

    def close(self):
        """Stop the pump, close the pseudo-terminal and the board, remove the link."""
        if self._stop.is_set():
            return
        self._stop.set()
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
