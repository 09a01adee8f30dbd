"""A virtual board on a pseudo-terminal, so pyserial or a terminal program connects to it as to
a real board's serial port (``maxaccel serve``).

The server opens a pseudo-terminal pair in raw mode, keeps the slave end open itself (so a
client may come and go without the master seeing end-of-file) and pumps bytes between the master
end and a board: what a client writes to the slave goes to the board, what the board sends
comes back. The board is any device transport (:func:`maxaccel.host.transport.open_transport`):
``sim`` by default. A pseudo-terminal has no bit rate: the client's ``baud`` is accepted and
ignored, and the bytes move as fast as the simulated board makes them.
"""

import os
import select
import threading
import tty

__all__ = ["pump", "PtyServer"]

#: Seconds of board time (simulated time, for a virtual board) to run between polls of the
#: client side: short, so a reply starts to flow while the board is still working.
BOARD_SLICE_S = 0.002


def pump(board, read_fd, write_fd, stop, *, poll_s=0.005):
    """Move bytes between file descriptors and a board until ``stop`` (a threading.Event) is set.

    Bytes read from ``read_fd`` are written to the board; bytes the board sends are written to
    ``write_fd`` (both descriptors may be the same, e.g. a pseudo-terminal master). ``board``
    has ``write(data)`` and ``read(size, timeout)``: a transport, a
    :class:`~maxaccel.sim.virtual_board.VirtualBoard` or a test's fake board. Nothing is dropped:
    a client that is slow to read only holds the pump back.
    """
    pending = b""
    while not stop.is_set():
        readable, _, _ = select.select([read_fd], [], [], poll_s)
        if readable:
            try:
                data = os.read(read_fd, 1 << 16)
            except (BlockingIOError, OSError):
                data = b""
            if data:
                board.write(data)
        pending += board.read(1 << 16, BOARD_SLICE_S)
        while pending and not stop.is_set():
            try:
                pending = pending[os.write(write_fd, pending):]
            except BlockingIOError:
                select.select([], [write_fd], [], poll_s)


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

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, board, *, link=None):
        self.board = board
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        os.set_blocking(self._master, False)
        self.port = os.ttyname(self._slave)
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
        self.url = f"serial://{self.link or self.port}?baud=3000000"
        self._stop = threading.Event()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="maxaccel-pty-pump", daemon=True)
        self._thread.start()

    def _run(self):
        try:
            pump(self.board, self._master, self._master, self._stop)
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
        for fd in (self._master, self._slave):
            os.close(fd)

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
