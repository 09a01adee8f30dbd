"""Link layer and transports: faults in both directions, retries, timeouts, device URLs.

Faults are injected between the host and a board (``maxaccel.sim.faults.Faulty``, around
the fake board and around the virtual board, the real gateware in simulation) at chosen byte
offsets of either direction: a dropped, flipped, inserted or duplicated byte in a header, a
payload or a trailer. The host must retry and still return the golden model's bits, or, after its bounded
number of attempts, raise an error that names the command and the last failure. Every test is
bounded in time (an alarm fails it instead of letting it hang).
"""

import os
import threading
import tty

import numpy as np
import pytest
from fake_board import FakeBoard

from maxaccel.host.device import Device, open_device
from maxaccel.host.link import DeviceError, LinkError
from maxaccel.contract.wire import FRAME_OVERHEAD, PARAMETERS, Command, Status
from maxaccel.host.transport import TransportError, register_scheme
from maxaccel.sim import reference
from maxaccel.sim.faults import KINDS, TO_DEVICE, TO_HOST, Fault, Faulty
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.serve import pump
from maxaccel.sim.values import random_values
from maxaccel.contract.dtypes import format_of
from maxaccel.sim.virtual_board import VirtualBoard


#: A test that hangs fails after 30 s instead (tests/conftest.py).
pytestmark = pytest.mark.time_limit(30)


def quick_device(board, attempts=4):
    return Device(board, timeout_s=0.1, attempts=attempts)


def sample(seed=0, shape=(64,), dtype=np.float32):
    return random_values(np.random.default_rng(seed), dtype, shape, edge_fraction=0.2)


REQUEST = FRAME_OVERHEAD + PARAMETERS[Command.REDUCE].size + 64 * 4  # reduce_max of 64 floats
REPLY = FRAME_OVERHEAD + 4
POSITIONS = {"header": lambda n: 5, "payload": lambda n: 14, "trailer": lambda n: n - 2}


@pytest.fixture(scope="module")
def shared_virtual_board():
    board = VirtualBoard()
    yield board
    board.close()


def behind_the_xdma_driver(injector):
    """The ``xdma://`` transport to ``injector`` through the XDMA driver's double; the
    injector stays reachable as ``.injector``."""
    from maxaccel.host.transport import XdmaTransport
    from maxaccel.sim.xdma_driver import XdmaDriverModel
    transport = XdmaTransport("/dev/xdma0", files=XdmaDriverModel(injector))
    transport.injector = injector
    return transport


@pytest.fixture(params=["fake", "virtual", "fake-xdma"])
def faulty(request):
    """A fresh fake board, or the shared virtual board, behind a fault injector; or the fake
    board and its injector behind the XDMA driver's double."""
    if request.param == "fake":
        yield Faulty(FakeBoard(frame_timeout_s=0.02)), 0.1
        return
    if request.param == "fake-xdma":
        transport = behind_the_xdma_driver(Faulty(FakeBoard(frame_timeout_s=0.02)))
        yield transport, 0.1
        transport.files.shutdown()
        return
    board = request.getfixturevalue("shared_virtual_board")
    board.reset_output()
    board.settle(timeout_cycles=100_000)
    board.reset_input()
    # The simulator is slow but reports quiescence at once: a long timeout costs nothing.
    yield Faulty(board, close_inner=False), 2.0


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("direction", [TO_DEVICE, TO_HOST])
def test_a_damaged_byte_is_retried_and_the_result_is_exact(faulty, direction, kind, position):
    device_transport, timeout_s = faulty
    transport = getattr(device_transport, "injector", device_transport)
    with Device(device_transport, timeout_s=timeout_s) as dev:
        x = sample()
        length = REQUEST if direction == TO_DEVICE else REPLY
        transport.faults.append(Fault(direction, transport.sent[direction]
                                      + POSITIONS[position](length), kind))
        assert_same_bits(dev.reduce_max(x), reference.reduce_max(x))
        assert transport.injected == 1 and dev.link.retries >= 1
        # The link is usable afterwards, without further retries.
        retries = dev.link.retries
        y = x[:12].reshape(3, 4)
        assert_same_bits(dev.max(y, y[:1]), reference.max(y, y[:1]))
        assert dev.link.retries == retries


@pytest.mark.parametrize("xdma", [False, True])
def test_random_faults_in_both_directions_still_give_exact_results(xdma):
    transport = Faulty(FakeBoard(frame_timeout_s=0.02), fault_rate=3e-5, seed=11)
    rng = np.random.default_rng(12)
    with Device(behind_the_xdma_driver(transport) if xdma else transport, timeout_s=0.1,
                attempts=8) as dev:
        for step in range(24):
            a = random_values(rng, np.float32, (16, 64), edge_fraction=0.1)
            b = random_values(rng, np.float32, (1, 64), edge_fraction=0.1)
            assert_same_bits(dev.max(a, b), reference.max(a, b), f"step {step}")
            assert_same_bits(dev.reduce_max(a, axes=[0]), reference.reduce_max(a, axes=[0]))
        assert transport.injected >= 3 and dev.link.retries >= 1


class RefusingBoard(FakeBoard):
    """Claims that every REDUCE request arrived damaged."""

    def _answer(self, frame):
        if frame.code == Command.REDUCE:
            self._reply(frame.code, frame.seq, b"", Status.CRC_ERROR)
        else:
            super()._answer(frame)


def test_retries_are_bounded_and_the_error_names_command_attempts_and_failure():
    board = RefusingBoard()
    with quick_device(board, attempts=3) as dev:
        with pytest.raises(LinkError, match=r"REDUCE failed after 3 attempts; last failure: the "
                                            r"device answered CRC_ERROR") as error:
            dev.reduce_max(sample())
        assert (error.value.command, error.value.attempts) == (Command.REDUCE, 3)
        assert [code for code, _ in board.log].count(Command.REDUCE) == 3


class WaitCountingBoard(FakeBoard):
    """A fake board that adds up the time the host waited on it: the timeouts of its reads
    that came back empty."""

    waited_s = 0.0

    def read(self, size, timeout_s):
        data = super().read(size, timeout_s)
        if not data and timeout_s:
            self.waited_s += timeout_s
        return data


def test_a_silent_device_gives_a_clear_timeout_at_open():
    boards = []
    register_scheme("fake-silent", lambda url: boards.append(WaitCountingBoard(silent=True))
                    or boards[-1])
    with pytest.raises(LinkError, match=r"IDENTIFY failed after 2 attempts; last failure: no "
                                        r"reply within 0.1 s; no answer from the device at "
                                        r"'fake-silent://'"):
        open_device("fake-silent://", timeout_s=0.1, attempts=2)
    (board,) = boards
    assert board.waited_s <= 2 * 0.1 + 1e-9, "the host waited beyond its two timeouts"


def test_a_device_that_falls_silent_gives_a_timeout_not_a_hang():
    board = WaitCountingBoard(answers=1)  # IDENTIFY only
    with quick_device(board, attempts=3) as dev:
        with pytest.raises(LinkError, match=r"REDUCE failed after 3 attempts; last failure: "
                                            r"no reply within 0.1 s"):
            dev.reduce_max(sample())
    assert board.waited_s <= 3 * 0.1 + 1e-9, "the host waited beyond its three timeouts"


class TruncatingBoard(FakeBoard):
    """Sends only the first half of every REDUCE reply."""

    def _reply(self, code, seq, payload, status):
        super()._reply(code, seq, payload, status)
        if code == Command.REDUCE:
            del self._out[len(self._out) // 2:]


def test_a_reply_that_stops_arriving_is_reported():
    with quick_device(TruncatingBoard(), attempts=2) as dev:
        with pytest.raises(LinkError, match=r"the reply stopped arriving for 0.1 s \(10 bytes "
                                            r"of a frame received\)"):
            dev.reduce_max(sample())


class LateBoard(FakeBoard):
    """Holds back the first REDUCE reply until the next request: it arrives stale."""

    held = None

    def _reply(self, code, seq, payload, status):
        if code == Command.REDUCE and self.held is None:
            self.held = (code, seq, payload, status)
            return
        if self.held and self.held != "sent":
            super()._reply(*self.held)
            self.held = "sent"
        super()._reply(code, seq, payload, status)


class EchoingBoard(FakeBoard):
    """Sends every reply twice."""

    def _reply(self, code, seq, payload, status):
        super()._reply(code, seq, payload, status)
        super()._reply(code, seq, payload, status)


@pytest.mark.parametrize("board_class", [LateBoard, EchoingBoard])
def test_stale_replies_are_discarded(board_class):
    with quick_device(board_class()) as dev:
        x, y = sample(1), sample(2)
        assert_same_bits(dev.reduce_max(x), reference.reduce_max(x))
        assert_same_bits(dev.reduce_max(y), reference.reduce_max(y))
        assert dev.link.stale_replies >= 1


def test_refusals_raise_device_error_naming_the_status():
    with quick_device(FakeBoard()) as dev:
        with pytest.raises(DeviceError, match=r"answered command 0x7f with BAD_COMMAND"):
            dev.link.request(0x7F)
        with pytest.raises(DeviceError, match=r"answered REDUCE with BAD_LENGTH: the payload "
                                              r"length does not match"):
            dev.link.request(Command.REDUCE, b"\x01")
        assert dev.link.retries == 0


# --- device URLs and transports -----------------------------------------------------------------


@pytest.mark.parametrize("url, error, message", [
    ("bogus://x", ValueError, r"unknown device URL 'bogus://x'; accepted: sim, serial://PORT"),
    ("/dev/ttyUSB0", ValueError,
     r"accepted: sim, serial://PORT\[\?board=NAME\|\?baud=N\] .*xdma:///dev/xdma0"),
    ("serial://", ValueError, r"serial URL names no port"),
    ("serial:///dev/ttyS99?baud=fast", ValueError, r"\?baud='fast' must be an integer"),
    ("serial:///dev/ttyS99?board=nitefury", ValueError,
     r"\?board='nitefury': no board of that name has a serial link; known: icebreaker"),
    ("serial:///dev/ttyS99?board=ulx3s&baud=9600", ValueError, r"not both"),
    ("serial:///dev/ttyS99?speed=9600", ValueError, r"unknown serial URL option\(s\) speed"),
    ("serial:///dev/does-not-exist?baud=9600", TransportError,
     r"cannot open serial port '/dev/does-not-exist' at 9600 baud"),
    ("xdma:///nonexistent/xdma0", TransportError,
     r"/nonexistent/xdma0_h2c_0 does not exist .* /nonexistent/xdma0_c2h_0"),
    ("xdma://host/dev/xdma0", ValueError, r"XDMA URL must be xdma:///dev/xdmaN"),
    # A parameter the gateware refuses is named as the URL gives it, not by the
    # unit that refused it (was "RunReducer: lanes must be ...").
    ("sim?lanes=3", ValueError, r"^sim\?lanes=3: lanes must be a power of two .*, not 3$"),
    ("verilator?lanes=3", ValueError, r"^verilator\?lanes=3: lanes must be a power of two"),
])
def test_bad_device_urls_are_explained(url, error, message):
    with pytest.raises(error, match=message):
        open_device(url)


def virtual_board():
    return VirtualBoard()


BOARDS = {"fake": FakeBoard, "virtual": virtual_board}


def exercise(dev, shape):
    rng = np.random.default_rng(3)
    a = random_values(rng, np.float64, shape)
    b = random_values(rng, np.float64, shape[:1] + (1,))
    assert_same_bits(dev.max(a, b), reference.max(a, b))
    assert_same_bits(dev.reduce_max(a, axes=[0]), reference.reduce_max(a, axes=[0]))
    assert_same_bits(dev.global_max_pool(a[None]), reference.global_max_pool(a[None]))


@pytest.mark.parametrize("board_name", BOARDS)
def test_serial_transport_through_a_pseudo_terminal(board_name):
    board, stop = BOARDS[board_name](), threading.Event()
    master, slave = os.openpty()
    tty.setraw(slave)
    thread = threading.Thread(target=pump, args=(board, master, master, stop), daemon=True)
    thread.start()
    try:
        with open_device(f"serial://{os.ttyname(slave)}?baud=3000000", timeout_s=5.0) as dev:
            exercise(dev, (40, 30) if board_name == "fake" else (5, 6))
    finally:
        stop.set()
        thread.join()
        os.close(master)
        os.close(slave)


@pytest.mark.parametrize("board_name", BOARDS)
def test_xdma_transport_through_the_driver_double(board_name):
    """The xdma:// transport against the XDMA driver's behaviour (blocking whole transfers, no
    poll, reads ending at tlast: sim/xdma_driver.py; more in tests/test_xdma_driver.py)."""
    from maxaccel.host.transport import XdmaTransport
    from maxaccel.sim.xdma_driver import XdmaDriverModel
    model = XdmaDriverModel(BOARDS[board_name]())
    transport = XdmaTransport(model.prefix, files=model, reply_timeout_s=5.0)
    try:
        with Device(transport, timeout_s=5.0, progress=None) as dev:
            exercise(dev, (40, 30) if board_name == "fake" else (5, 6))
    finally:
        model.shutdown()


def test_serial_baud_defaults_to_our_boards_or_comes_from_the_board_name():
    """One definition: the default is boards.targets.DEFAULT_BAUD, which the UART boards use;
    ?board=NAME takes that board's rate."""
    from maxaccel.boards.targets import DEFAULT_BAUD, TARGETS
    from maxaccel.host.transport import open_transport
    assert DEFAULT_BAUD in {t.baud for t in TARGETS.values()}
    master, slave = os.openpty()
    port = os.ttyname(slave)
    try:
        for query, baud, origin in [("", DEFAULT_BAUD, "the default"),
                                    ("?board=arty_a7_35", TARGETS["arty_a7_35"].baud,
                                     "board arty_a7_35"),
                                    ("?board=icebreaker", TARGETS["icebreaker"].baud,
                                     "board icebreaker"),
                                    ("?baud=115200", 115200, "given")]:
            transport = open_transport(f"serial://{port}{query}")
            try:
                assert (transport.baud, transport.baud_from) == (baud, origin)
                assert f"tried {port} at {baud} baud ({origin})" in transport.describe()
            finally:
                transport.close()
    finally:
        os.close(master)
        os.close(slave)


class _WatchdogInWrite:
    """A transport that raises ``TimeoutError`` (a user's watchdog, from a signal handler)
    once, after half of a request's bytes have gone out."""

    def __init__(self, transport):
        self._transport = transport
        self.fired = False

    def write(self, data):
        if not self.fired and len(data) > 8:
            self.fired = True
            self._transport.write(bytes(data)[:len(data) // 2])
            raise TimeoutError("watchdog")
        return self._transport.write(data)

    def __getattr__(self, name):
        return getattr(self._transport, name)


@pytest.mark.parametrize("url", ["sim", "fake"])
def test_any_exception_mid_request_leaves_the_device_answering_the_next(url):
    """Not only Ctrl-C: whatever interrupts a request, the next one is answered at once, with
    no retry (the device dropped the half frame it had)."""
    device = (open_device("sim") if url == "sim"
              else Device(FakeBoard(), url="fake"))
    with device:
        device.link.transport = watchdog = _WatchdogInWrite(device.link.transport)
        with pytest.raises(TimeoutError, match="watchdog"):
            device.reduce_max(np.arange(64, dtype=np.float32))
        assert watchdog.fired
        retries = device.link.retries
        x = random_values(np.random.default_rng(1), format_of("float32"), (3, 5))
        assert_same_bits(device.reduce_max(x, axes=[1]), reference.reduce_max(x, axes=[1]))
        assert device.link.retries == retries


@pytest.fixture
def pty_port():
    master, slave = os.openpty()
    try:
        yield os.ttyname(slave)
    finally:
        os.close(master)
        os.close(slave)


def test_low_latency_mode_is_set_where_the_os_allows(pty_port, monkeypatch, caplog):
    """An FTDI chip's latency timer holds short replies up to 16 ms; the serial
    transport asks for the low-latency mode (pyserial's) and says so at -v."""
    import logging

    import serial

    from maxaccel.host.transport import SerialTransport
    calls = []
    monkeypatch.setattr(serial.Serial, "set_low_latency_mode",
                        lambda self, enabled: calls.append(enabled), raising=False)
    caplog.set_level(logging.DEBUG, logger="maxaccel")
    transport = SerialTransport(pty_port)
    try:
        assert transport.low_latency is True and calls == [True]
    finally:
        transport.close()
    assert f"serial port {pty_port}: low-latency mode set" in caplog.text


def test_a_pty_has_no_latency_timer_and_gets_no_warning(pty_port, caplog):
    import logging

    from maxaccel.host.transport import SerialTransport, latency_timer_path
    caplog.set_level(logging.DEBUG, logger="maxaccel")
    assert latency_timer_path(pty_port) is None
    transport = SerialTransport(pty_port)
    transport.close()
    assert transport.low_latency is False
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "low-latency mode not available" in caplog.text


def test_an_ftdi_port_whose_timer_cannot_be_lowered_gets_one_hint(pty_port, tmp_path,
                                                                  monkeypatch, caplog):
    """Where the mode cannot be set (no permission) on an FTDI port: one warning at opening
    that names the timer, its value and the fix; nothing per request."""
    import logging

    from maxaccel.host import transport as transports
    timer = tmp_path / "latency_timer"
    timer.write_text("16\n")
    monkeypatch.setattr(transports, "latency_timer_path", lambda port: str(timer))
    caplog.set_level(logging.DEBUG, logger="maxaccel")
    serial_transport = transports.SerialTransport(pty_port)
    try:
        serial_transport.write(b"\x00" * 8)
        serial_transport.read(8, 0.01)
    finally:
        serial_transport.close()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.startswith(f"serial port {pty_port}: could not set the low-latency mode")
    assert f"its FTDI latency timer (16 ms) may hold every short reply: as root, echo 1 > " \
           f"{timer}" in warning


@pytest.mark.parametrize("options, text, message", [
    ({"replay_depth": 0}, "BroadcastMax depth must be an integer >= 2, not 0",
     "sim?replay_depth=0: replay_depth must be an integer >= 2, not 0"),
    ({"lanes": 2, "pool_channels": 0}, "max_channels must be a positive integer, not 0",
     "sim?pool_channels=0: pool_channels must be a positive integer, not 0"),
    ({"link_bytes": 3}, "link_bytes must be one of 1, 2, 4, 8, 16, 32, not 3",
     "sim?link_bytes=3: link_bytes must be one of 1, 2, 4, 8, 16, 32, not 3"),
    ({"window_extent": 9, "window_plane": 4}, "WindowLanes: a plane must hold a window",
     "sim?window_extent=9&window_plane=4: a plane must hold a window"),
])
def test_a_gateware_refusal_names_the_url_parameters(options, text, message):
    """The units' own names for a parameter become the URL's (and ``--core``'s)."""
    from maxaccel.host.transport import core_setting_refusal
    names, refusal = core_setting_refusal(options, text)
    assert f"sim?{'&'.join(f'{n}={options[n]}' for n in names)}: {refusal}" == message
