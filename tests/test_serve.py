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
        process.wait()


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
