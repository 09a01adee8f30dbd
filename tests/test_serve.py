"""``maxaccel serve``: the virtual board on a pseudo-terminal, driven through the host's serial
transport (pyserial) as a real board would be."""

import os
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from maxaccel.host.device import open_device
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.serve import PtyServer
from maxaccel.sim.values import random_values


def _read_line(process, deadline):
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        assert left > 0, f"maxaccel serve printed only {line!r}"
        readable, _, _ = select.select([process.stdout], [], [], left)
        if readable:
            byte = os.read(process.stdout.fileno(), 1)
            assert byte, f"maxaccel serve exited (status {process.wait()}) after {line!r}"
            line += byte
    return line.decode()


@pytest.fixture
def served(tmp_path):
    """A ``maxaccel serve`` process with its pseudo-terminal linked at a known path."""
    link = tmp_path / "ttyMAXACCEL"
    process = subprocess.Popen(
        [sys.executable, "-m", "maxaccel.host.cli", "serve", "--device", "sim?lanes=2",
         "--link", str(link)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        first, second = _read_line(process, deadline), _read_line(process, deadline)
        yield link, first + second, process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def test_serial_transport_drives_the_served_board(served):
    link, banner, process = served
    port = os.readlink(link)
    assert f"serving sim?lanes=2 on {port} (link {link})" in banner
    assert f'open_device("serial://{link}")' in banner

    rng = np.random.default_rng(11)
    a = random_values(rng, np.float32, (3, 5))
    b = random_values(rng, np.float32, (1, 5))
    with open_device(f"serial://{link}?baud=3000000", timeout_s=20.0) as device:
        assert device.identity.lanes == 2
        assert_same_bits(device.max(a, b), reference.max(a, b))
        assert_same_bits(device.reduce_max(a, axes=[1]), reference.reduce_max(a, axes=[1]))
    # A second client on the same server: the board is still there and answers.
    with open_device(f"serial://{link}?baud=3000000", timeout_s=20.0) as device:
        assert_same_bits(device.reduce_max(b), reference.reduce_max(b))

    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err.decode()
    assert out.decode().strip().endswith("stopped")
    assert not os.path.lexists(link), "the link outlives the server"


def test_sigterm_stops_the_server_cleanly(served):
    link, _, process = served
    process.terminate()
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err.decode()
    assert not os.path.lexists(link)


#: ``maxaccel serve`` in this process, and a thread that sends SIGTERM to its pump thread
#: alone once it serves (the kernel may give a process's signal to any of its threads).
SIGNAL_TO_THE_PUMP = """
import os, signal, sys, threading, time
from maxaccel.host.cli import main
link = sys.argv[1]

def signal_the_pump():
    while not os.path.lexists(link):
        time.sleep(0.01)
    time.sleep(0.5)     # the main thread is waiting by now
    pump = next(t for t in threading.enumerate() if t.name == "maxaccel-pty-pump")
    signal.pthread_kill(pump.ident, signal.SIGTERM)

threading.Thread(target=signal_the_pump, daemon=True).start()
sys.exit(main(["serve", "--device", "sim", "--link", link]))
"""


def test_a_signal_the_pump_thread_takes_still_stops_the_server(tmp_path):
    """SIGTERM handled by the pump thread's C-level handler: the main thread, which alone
    runs Python's handlers, still wakes, stops the server and exits cleanly."""
    link = tmp_path / "tty"
    process = subprocess.Popen([sys.executable, "-c", SIGNAL_TO_THE_PUMP, str(link)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = process.communicate(timeout=120)     # a hang guard, not a bound
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err.decode()
    assert out.decode().strip().endswith("stopped")
    assert not os.path.lexists(link)


def test_link_refuses_to_replace_a_file(tmp_path):
    class Board:
        closed = False

        def write(self, data):
            return len(data)

        def read(self, size, timeout):
            return b""

        def close(self):
            self.closed = True

    path = tmp_path / "precious.txt"
    path.write_text("keep me")
    with pytest.raises(FileExistsError, match="exists and is not a symbolic link"):
        PtyServer(Board(), link=path)
    assert path.read_text() == "keep me"


def test_echoing_board_sees_every_byte_in_order():
    """The pump loses and reorders nothing, whatever the chunking on either side."""
    class Echo:
        def __init__(self):
            self.buffer = bytearray()

        def write(self, data):
            self.buffer += data
            return len(data)

        def read(self, size, timeout):
            data, self.buffer[:] = bytes(self.buffer[:size]), self.buffer[size:]
            return data

        def close(self):
            pass

    payload = np.random.default_rng(5).integers(0, 256, 200_000, dtype=np.uint8).tobytes()
    with PtyServer(Echo()) as server:
        fd = os.open(server.port, os.O_RDWR | os.O_NOCTTY)
        try:
            import tty
            tty.setraw(fd)
            os.set_blocking(fd, False)
            sent, received, deadline = 0, bytearray(), time.monotonic() + 30
            while len(received) < len(payload):
                assert time.monotonic() < deadline, f"{len(received)} of {len(payload)} bytes"
                writable = [fd] if sent < len(payload) else []
                readable, writable, _ = select.select([fd], writable, [], 0.05)
                if writable:
                    sent += os.write(fd, payload[sent:sent + 4096])
                if readable:
                    received += os.read(fd, 1 << 16)
        finally:
            os.close(fd)
    assert bytes(received) == payload


def _abort_mid_request(port, seconds=0.5):
    """A client that sends as much of a large REDUCE as the port takes in ``seconds`` and
    vanishes (closes the port mid-frame), as a killed process would."""
    from maxaccel.contract.wire import PARAMETERS, Command, encode_frame
    from maxaccel.contract.dtypes import DType
    runs = 16384      # 64 KiB of float32 in, 64 KiB back: minutes for the simulated board
    frame = encode_frame(Command.REDUCE, 0, PARAMETERS[Command.REDUCE].pack(dtype=DType.FLOAT, runs=runs, run_length=1)
                         + bytes(4 * runs))
    fd = os.open(port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        import tty
        tty.setraw(fd)
        sent, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            _, writable, _ = select.select([], [fd], [], 0.05)
            if writable:
                try:
                    sent += os.write(fd, frame[sent:sent + 4096])
                except BlockingIOError:
                    pass
    finally:
        os.close(fd)
    assert 0 < sent < len(frame)
    return sent


def test_an_aborted_client_costs_the_next_one_at_most_one_request_timeout(served):
    """The next client opens with the default timeouts of a serial port and is answered at
    once (at most one attempt lost), and its results are right."""
    link, _, _ = served
    for _ in range(2):
        _abort_mid_request(link)
        with open_device(f"serial://{link}") as device:
            assert device.link.retries <= 1
            x = np.float32([[1, -0.0, np.nan], [0.0, -3, 2]])
            assert_same_bits(device.reduce_max(x, axes=[0]), reference.reduce_max(x, axes=[0]))


def test_a_busy_board_is_reported_as_busy_and_an_absent_one_as_absent():
    """Bytes that are no reply (a board still answering an earlier request) say "busy"; none at
    all say "no answer"; both say what was tried."""
    from maxaccel.host.link import LinkError
    from maxaccel.boards.targets import DEFAULT_BAUD
    import threading
    import tty
    master, slave = os.openpty()
    tty.setraw(slave)
    os.set_blocking(master, False)
    port = os.ttyname(slave)
    stop = threading.Event()

    def chatter():     # a board streaming the padding of some earlier reply
        while not stop.wait(0.01):
            try:
                os.write(master, b"\0" * 64)
            except BlockingIOError:
                pass
    thread = threading.Thread(target=chatter, daemon=True)
    try:
        with pytest.raises(LinkError) as absent:
            open_device(f"serial://{port}", timeout_s=0.1, attempts=2)
        thread.start()
        with pytest.raises(LinkError) as busy:
            open_device(f"serial://{port}", timeout_s=0.1, attempts=2)
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()
        os.close(master)
        os.close(slave)
    assert "no answer from the device" in str(absent.value) and "busy" not in str(absent.value)
    assert absent.value.heard == 0
    assert "busy (still answering an earlier request" in str(busy.value)
    assert busy.value.heard > 0
    for error in (absent, busy):
        assert f"tried {port} at {DEFAULT_BAUD} baud (the default); other boards run at " \
               f"4000000 baud: give ?board=NAME or ?baud=N" in str(error.value)


def test_a_signal_during_wait_leaves_close_to_stop_the_pump_first():
    """A signal handler that raises while :meth:`PtyServer.wait` waits (``maxaccel serve``'s
    Ctrl-C or SIGTERM) leaves the pump thread running; :meth:`PtyServer.close` still stops it
    before closing the pseudo-terminal and the board. (Interrupting ``Thread.join`` used to mark
    the running pump as stopped: close then closed the descriptor under it, and the pump's
    next ``select`` failed with ``EBADF``.)"""
    import threading

    class Interrupted(Exception):
        pass

    class SlowBoard:
        """A board whose every read takes a while, so the pump is mostly inside one."""

        def __init__(self):
            self.reading = threading.Event()
            self.in_read = False
            self.closed_in_a_read = None

        def write(self, data):
            return len(data)

        def read(self, size, timeout):
            self.in_read = True
            self.reading.set()
            time.sleep(0.5)
            self.in_read = False
            return b"\0"        # output: the pump looks at the client side again

        def close(self):
            self.closed_in_a_read = self.in_read

    def interrupted(signum, frame):
        raise Interrupted
    previous = signal.signal(signal.SIGUSR1, interrupted)
    try:
        board = SlowBoard()
        server = PtyServer(board)
        client = os.open(server.port, os.O_RDWR | os.O_NOCTTY)     # the pump reads the board
        assert board.reading.wait(30)
        main = threading.main_thread().ident
        threading.Timer(0.1, signal.pthread_kill, (main, signal.SIGUSR1)).start()
        with pytest.raises(Interrupted):
            server.wait()
        server.close()
        os.close(client)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert board.closed_in_a_read is False, "the board was closed under a running pump"
