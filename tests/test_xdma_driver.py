"""The ``xdma://`` transport against the XDMA driver's double (``sim/xdma_driver.py``).

First the double itself, against what the driver's source says (``cdev_sgdma.c``,
``libxdma.c``): whole blocking transfers cut at 2048 descriptors and the ring's wrap, a read
that ends at ``tlast`` only with ``O_TRUNC`` (``eop_flush``), one reader (held while a read is
in flight), ``ETIMEDOUT`` with the received bytes lost, at the module's timeouts or at a signal
the waiting thread does not block, a card that stops taking bytes when its reply has nowhere
to go. Then the transport through it, around the
compiled board: every operation exact (64 MB tensors included), requests of any size,
replies that stream back while their request goes in, and each failure ending in a clear error
within the configured time with the next request answered; signals at its threads, a short
write, packets back to back while it recovers, the board reopened after ``close``. Every test
is bounded by an alarm.
"""

import errno
import os
import signal
import time

import numpy as np
import pytest
from fake_board import FakeBoard

from maxaccel.contract.dtypes import format_of
from maxaccel.contract.wire import PARAMETERS, Command, FrameParser, Status, encode_frame
from maxaccel.host.device import Device, open_device
from maxaccel.host.link import LinkError
from maxaccel.host.transport import TransportError, XdmaModelTransport, XdmaTransport
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import random_values
from maxaccel.sim.xdma_driver import TRANSFER_OVERHEAD_S, XdmaDriverModel

H2C, C2H = "/dev/xdma0_h2c_0", "/dev/xdma0_c2h_0"


#: A test that hangs fails after 120 s instead (tests/conftest.py).
pytestmark = pytest.mark.time_limit(120)


@pytest.fixture(scope="module")
def compiled_board():
    """One compiled board for the module (opening it elaborates the design); each test resets
    it."""
    from maxaccel.sim.verilator_board import VerilatorBoard
    board = VerilatorBoard()
    yield board
    board.close()


@pytest.fixture
def board(compiled_board):
    compiled_board.reset()
    return compiled_board


def identify_frame(seq=0):
    return encode_frame(Command.IDENTIFY, seq, b"")


# --- the double, as the driver's source says -------------------------------------------------


def test_the_c2h_file_opens_once_and_unknown_files_do_not_exist():
    model = XdmaDriverModel(FakeBoard())
    fd = model.open(C2H, os.O_RDONLY | os.O_TRUNC)
    with pytest.raises(OSError) as busy:
        model.open(C2H, os.O_RDONLY)
    assert busy.value.errno == errno.EBUSY
    model.close(fd)
    model.close(model.open(C2H, os.O_RDONLY))      # free again once closed
    model.close(model.open(H2C, os.O_WRONLY))
    model.close(model.open(H2C, os.O_WRONLY | os.O_NONBLOCK))
    with pytest.raises(FileNotFoundError):
        model.open("/dev/xdma0_c2h_1", os.O_RDONLY)
    assert model.exists(H2C) and not model.exists("/dev/xdma1_h2c_0")
    with pytest.raises(OSError) as wrong_way:
        model.read(model.open(H2C, os.O_WRONLY), 16)
    assert wrong_way.value.errno == errno.EINVAL


def test_a_read_ends_at_tlast_only_in_eop_flush_mode():
    """With O_TRUNC a read returns the reply frame at its tlast; without, it waits for a
    full buffer, so a read larger than the reply times out and loses what it received."""
    for eop_flush in (True, False):
        model = XdmaDriverModel(FakeBoard(), c2h_timeout_s=0.3)
        read_fd = model.open(C2H, os.O_RDONLY | (os.O_TRUNC if eop_flush else 0))
        write_fd = model.open(H2C, os.O_WRONLY | os.O_NONBLOCK)
        assert model.write(write_fd, identify_frame()) == len(identify_frame())
        started = time.monotonic()
        if eop_flush:
            # The frame, not ETIMEDOUT: the read ended at tlast, not at a full buffer.
            reply = model.read(read_fd, 1 << 20)
            frames = FrameParser().feed(reply)
            assert len(frames) == 1 and frames[0].intact and frames[0].status == Status.OK
        else:
            with pytest.raises(OSError) as timed_out:
                model.read(read_fd, 1 << 20)
            assert timed_out.value.errno == errno.ETIMEDOUT
            assert time.monotonic() - started >= 0.3
            # The bytes the aborted transfer had received are gone.
            model.write(write_fd, identify_frame(1))
            frames = FrameParser().feed(model.read(read_fd, len(identify_frame()) + 1))
            assert not any(f.seq == 0 for f in frames)


def reduce_frame(values, run_length, seq=0):
    """A REDUCE request of ``values`` in runs of ``run_length``."""
    block = PARAMETERS[Command.REDUCE].pack(dtype=format_of(values.dtype).dtype,
                                            runs=values.size // run_length,
                                            run_length=run_length)
    return encode_frame(Command.REDUCE, seq, block + values.tobytes())


def wait_until(condition):
    """Poll ``condition`` (another thread's progress) until it holds; the alarm bounds it."""
    while not condition():
        time.sleep(0.005)


def in_thread(function, *args, block=()):
    """Run ``function(*args)`` in a thread that blocks the signals ``block``; its result (or
    exception) lands in the returned list."""
    import threading
    result = []

    def run():
        signal.pthread_sigmask(signal.SIG_BLOCK, block)
        try:
            result.append(function(*args))
        except OSError as error:
            result.append(error)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_a_signal_ends_a_wait_in_the_driver_at_once_with_etimedout():
    """swait_event_interruptible_timeout returns at a signal; xdma_xfer_submit aborts the
    transfer and returns -ETIMEDOUT, never EINTR. A thread that blocks the signal waits on."""
    model = XdmaDriverModel(FakeBoard(), c2h_timeout_s=60)
    read_fd = model.open(C2H, os.O_RDONLY | os.O_TRUNC)
    write_fd = model.open(H2C, os.O_WRONLY)
    model.faults.signal = {"c2h"}
    thread, result = in_thread(model.read, read_fd, 4096)
    thread.join()
    assert isinstance(result[0], OSError) and result[0].errno == errno.ETIMEDOUT
    assert (model.signals_taken, model.signals_blocked) == (1, 0)

    model.faults.signal = {"c2h"}
    thread, result = in_thread(model.read, read_fd, 4096, block={signal.SIGALRM})
    wait_until(lambda: model.signals_blocked == 1)
    model.write(write_fd, identify_frame())
    thread.join()
    (reply,) = FrameParser().feed(result[0])
    assert reply.intact and reply.status == Status.OK and model.signals_taken == 1


def test_the_c2h_file_is_held_while_a_read_is_in_flight():
    """close() frees the file number at once; the driver's release (device_open = 0) runs when
    the read in flight returns, so until then the C2H file cannot be opened again."""
    model = XdmaDriverModel(FakeBoard(), c2h_timeout_s=60)
    read_fd = model.open(C2H, os.O_RDONLY | os.O_TRUNC)
    write_fd = model.open(H2C, os.O_WRONLY)
    thread, result = in_thread(model.read, read_fd, 4096)
    wait_until(lambda: model.calls)
    model.close(read_fd)
    with pytest.raises(OSError) as busy:
        model.open(C2H, os.O_RDONLY | os.O_TRUNC)
    assert busy.value.errno == errno.EBUSY
    with pytest.raises(OSError) as closed:
        model.read(read_fd, 4096)
    assert closed.value.errno == errno.EBADF
    model.write(write_fd, identify_frame())
    thread.join()
    assert FrameParser().feed(result[0])[0].intact
    model.close(model.open(C2H, os.O_RDONLY | os.O_TRUNC))


def test_transfers_are_cut_at_2048_descriptors_of_the_buffer_pages_and_at_the_ring_wrap():
    """One descriptor per page the buffer touches (an unaligned buffer one more); a transfer
    of at most 2048, cut again where the engine's ring of 2048 wraps; the alignment the
    engine asks is reported by IOCTL_XDMA_ALIGN_GET and a buffer off it is refused."""
    import mmap
    from maxaccel.boards.targets import XDMA_IOCTL_ALIGN_GET
    model = XdmaDriverModel(FakeBoard(), addr_align=64)
    read_fd = model.open(C2H, os.O_RDONLY | os.O_TRUNC)
    write_fd = model.open(H2C, os.O_WRONLY)
    assert model.ioctl(read_fd, XDMA_IOCTL_ALIGN_GET, bytes(4)) == (64).to_bytes(4, "little")
    aligned = mmap.mmap(-1, 4096 * 4096)
    assert model.write(write_fd, memoryview(aligned)[:100]) == 100
    assert model.write(write_fd, memoryview(aligned)[:2048 * 4096]) == 2048 * 4096
    assert [(t.pages, t.nbytes) for t in model.transfers] == [
        (1, 100), (2047, 2047 * 4096), (1, 4096)]
    with pytest.raises(OSError) as misaligned:
        model.write(write_fd, memoryview(aligned)[1:101])
    assert misaligned.value.errno == errno.EINVAL
    with pytest.raises(OSError) as unaligned_read:
        model.read(read_fd, 4096)          # os.read's buffer is not page-aligned
    assert unaligned_read.value.errno == errno.EINVAL
    frame = identify_frame()
    aligned[:len(frame)] = frame
    model.write(write_fd, memoryview(aligned)[:len(frame)])
    count = model.readinto(read_fd, memoryview(aligned)[:3 * 4096])
    assert FrameParser().feed(aligned[:count])[0].intact
    assert model.transfers[-1].pages == 3


def test_a_read_that_meets_two_packets_runs_them_as_the_descriptors_do():
    """With the completion serviced late, a read that meets the end of one packet with the
    next behind it returns the first, a hole to the next descriptor, and the start of the
    second cut at the completed descriptors; the second's rest comes in the next read."""
    import mmap
    model = XdmaDriverModel(FakeBoard(), c2h_timeout_s=5, c2h_fifo_bytes=1 << 16)
    read_fd = model.open(C2H, os.O_RDONLY | os.O_TRUNC)
    write_fd = model.open(H2C, os.O_WRONLY)
    values = np.arange(2000, dtype=np.float32)
    model.faults.hold_packets, model.faults.back_to_back = 2, 1
    model.write(write_fd, identify_frame())
    model.write(write_fd, reduce_frame(values, 1, seq=1))      # an 8 KB reply
    buffer = mmap.mmap(-1, 8 * 4096)
    buffer[:] = b"\xa5" * len(buffer)
    count = model.readinto(read_fd, buffer)
    first, second = FrameParser(), FrameParser()
    (identity,) = first.feed(buffer[:count])
    head = len(identify_frame()) + len(identity.payload)
    hole = buffer[head:4096]
    assert set(hole) == {0xa5} and count == head + 4096
    assert second.feed(buffer[4096:4096 + count - head]) == []
    assert model.readinto(read_fd, buffer) < 8 * 4096             # the rest, to its tlast


def test_a_reply_with_no_read_posted_stops_the_card_and_the_write_times_out(board):
    """A REDUCE of one-element runs streams its results back while its data goes in; with no
    read posted the card's output buffer fills, the core stops, and the host's write blocks
    until the driver's h2c timeout ends it with ETIMEDOUT (what a pipe never shows). With a
    read posted alongside, the same request goes through."""
    frame = reduce_frame(np.arange(1 << 16, dtype=np.float32), 1)
    model = XdmaDriverModel(board, h2c_timeout_s=0.5, close_board=False)
    read_fd = model.open(C2H, os.O_RDONLY | os.O_TRUNC)
    write_fd = model.open(H2C, os.O_WRONLY)
    started = time.monotonic()
    with pytest.raises(OSError) as timed_out:
        model.write(write_fd, frame)
    assert timed_out.value.errno == errno.ETIMEDOUT
    assert time.monotonic() - started >= 0.5     # the driver's h2c timeout was waited

    board.reset()
    model = XdmaDriverModel(board, h2c_timeout_s=5, close_board=False)
    read_fd = model.open(C2H, os.O_RDONLY | os.O_TRUNC)
    write_fd = model.open(H2C, os.O_WRONLY)
    import threading
    replies = []
    reader = threading.Thread(target=lambda: replies.append(model.read(read_fd, 1 << 20)))
    reader.start()
    assert model.write(write_fd, frame) == len(frame)
    reader.join(5)
    (reply,) = FrameParser().feed(replies[0])
    assert reply.intact and reply.status == Status.OK
    assert reply.payload == np.arange(1 << 16, dtype=np.float32).tobytes()


def test_modelled_time_follows_the_published_figures():
    """512 B and 4 KiB transfers at the NiteFury's measured 9.2 and 68.5 MB/s (within 5%),
    8 MiB at 1.6 GB/s less the fixed cost (99%)."""
    model = XdmaDriverModel(FakeBoard())
    for size, rate in ((512, 9.2e6), (4096, 68.5e6)):
        model.reset_clock()
        model._timed("h2c", size, 0.0)
        assert abs(size / model.clock_s / rate - 1) < 0.05
    model.reset_clock()
    model._timed("h2c", 8 << 20, 0.0)
    assert (8 << 20) / model.clock_s / 1.6e9 > 0.98
    assert model.transfers[0].end_s - model.transfers[0].start_s > TRANSFER_OVERHEAD_S


# --- the transport through the double ----------------------------------------------------------


@pytest.fixture
def device(board):
    transport = XdmaModelTransport(board, close_board=False)
    with Device(transport, progress=None) as dev:
        yield dev


def test_every_operation_is_exact_through_the_driver(device):
    """ReduceMax, Max with broadcasting (its reply streams back while the operands go in),
    GlobalMaxPool and MaxPool with Indices, through whole-transfer writes and tlast reads."""
    rng = np.random.default_rng(5)
    a = random_values(rng, np.float32, (64, 300))
    b = random_values(rng, np.float32, (64, 1))
    assert_same_bits(device.reduce_max(a, axes=[1]), reference.reduce_max(a, axes=[1]))
    assert_same_bits(device.max(a, b, a[:1]), reference.max(a, b, a[:1]))
    x = random_values(rng, np.float16, (1, 8, 9, 9))
    assert_same_bits(device.global_max_pool(x), reference.global_max_pool(x))
    y, idx = device.max_pool(x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                             return_indices=True)
    y_ref, idx_ref = reference.max_pool(x, kernel_shape=[3, 3], strides=[2, 2],
                                        pads=[1, 1, 1, 1], return_indices=True)
    assert_same_bits(y, y_ref)
    np.testing.assert_array_equal(idx, idx_ref)
    transfers = device.link.transport.model.transfers
    # One write per request; a reply is one read of a page, ended by its tlast, and for a
    # reply longer than a page one more read of exactly its rest.
    assert sum(t.direction == "h2c" for t in transfers) == device.link.requests
    replies, rest = 0, False
    for read in (t for t in transfers if t.direction == "c2h"):
        if not rest:
            assert read.pages == 1
            replies += 1
        rest = not rest and read.nbytes == 4096
    assert replies == device.link.requests


# About 110 s on an idle machine (64 MiB through the compiled board): its hang guard is
# longer than the module's.
@pytest.mark.time_limit(600)
def test_a_64_mb_reduce_max_is_exact_at_over_90_percent_of_the_link(device):
    """64 MiB in requests of about 8 MiB, one transfer each: exact, and the modelled time is
    within 10% of the link's rate at 8 MB transfers (docs/boards.md, "The XDMA link")."""
    model = device.link.transport.model
    assert device.max_frame_bytes == XdmaTransport.max_frame_bytes
    a = random_values(np.random.default_rng(6), np.float32, (1 << 12, 1 << 12))
    model.reset_clock()
    calls = len(model.calls)
    assert_same_bits(device.reduce_max(a, axes=[0]), reference.reduce_max(a, axes=[0]))
    writes = [n for engine, n in model.calls[calls:] if engine == "h2c"]
    assert len(writes) == device.link.requests - 1 == 9     # IDENTIFY came before the clock
    # Each is one or two transfers: cut where the engine's ring of descriptors wraps.
    assert 9 <= sum(t.direction == "h2c" for t in model.transfers) <= 18
    link_rate = (8 << 20) / (TRANSFER_OVERHEAD_S + (8 << 20) / model.rates["h2c"])
    assert a.nbytes / model.clock_s >= 0.9 * link_rate


def test_requests_larger_than_a_transfer_and_replies_that_stream_back(board):
    """20 MiB requests, which the driver splits into transfers of 8 MiB; a broadcast Max whose
    8 MiB result streams back while its operand goes in."""
    rng = np.random.default_rng(7)
    a = random_values(rng, np.float32, (3 << 10, 1 << 11))      # 24 MiB
    transport = XdmaModelTransport(board, close_board=False)
    with Device(transport, progress=None, max_frame_bytes=20 << 20) as dev:
        transport.model.reset_clock()
        calls = len(transport.model.calls)
        assert_same_bits(dev.reduce_max(a), reference.reduce_max(a))
        writes = [n for engine, n in transport.model.calls[calls:] if engine == "h2c"]
        assert len(writes) == dev.link.requests - 1
        # The first request (20 MiB of data) is one write, which the driver runs as transfers
        # of at most 2048 pages, cut again where its ring of descriptors wraps.
        transfers = [t for t in transport.model.transfers if t.direction == "h2c"]
        first, total = [], 0
        for transfer in transfers:
            first.append(transfer)
            total += transfer.nbytes
            if total == writes[0]:
                break
        assert total == writes[0] and len(first) >= 3
        assert all(t.pages <= 2048 for t in transfers)
        row = random_values(rng, np.float32, (1, 1 << 11))
        b = a[:1 << 10]
        assert_same_bits(dev.max(b, row), reference.max(b, row))


def test_a_card_that_takes_no_bytes_is_reported_within_the_timeout_and_the_next_works(board):
    transport = XdmaModelTransport(board, close_board=False, driver_timeout_s=1.0)
    with Device(transport, progress=None) as dev:
        transport.write_timeout_s = 0.3
        transport.model.faults.stall = True
        with pytest.raises(TransportError, match=r"took no request bytes for 0.3 s .*"
                                                 r"h2c_timeout"):     # ours, not the driver's
            dev.reduce_max(np.ones(1000, np.float32))
        transport.model.faults.stall = False
        x = np.arange(1000, dtype=np.int32)
        assert_same_bits(dev.reduce_max(x), reference.reduce_max(x))
        # The driver's timeout first (ours longer): its ETIMEDOUT is named as such.
        transport.write_timeout_s = 5.0
        transport.model.h2c_timeout_s = 0.3
        transport.model.faults.stall = True
        with pytest.raises(TransportError, match=r"writing to /dev/xdma0_h2c_0 failed: timed "
                                                 r"out in the driver \(h2c_timeout\)"):
            dev.reduce_max(np.ones(1000, np.float32))
        transport.model.faults.stall = False
        assert_same_bits(dev.reduce_max(x), reference.reduce_max(x))


def test_a_card_that_stops_answering_or_cuts_a_reply_short(board):
    """A mute card: the link's bounded retries end in a LinkError naming the timeout; a reply
    cut short (tlast early): the link retries and the result is exact; then the next request
    is answered."""
    transport = XdmaModelTransport(board, close_board=False, driver_timeout_s=1.0)
    with Device(transport, progress=None, timeout_s=0.2, attempts=2) as dev:
        x = np.arange(5000, dtype=np.int16)
        transport.model.faults.mute = True
        with pytest.raises(LinkError, match=r"REDUCE failed after 2 attempts; last failure: "
                                            r"no reply within 0.2 s"):
            dev.reduce_max(x)
        transport.model.faults.mute = False
        assert_same_bits(dev.reduce_max(x), reference.reduce_max(x))
        transport.model.faults.cut_next_reply = 3
        retries = dev.link.retries
        assert_same_bits(dev.reduce_max(x, axes=[0]), reference.reduce_max(x, axes=[0]))
        assert dev.link.retries == retries + 1
        assert_same_bits(dev.reduce_max(x), reference.reduce_max(x))


def test_a_second_transport_on_the_same_board_is_refused_clearly(board):
    transport = XdmaModelTransport(board, close_board=False)
    try:
        with pytest.raises(TransportError, match=r"cannot open /dev/xdma0_c2h_0: .*one process"):
            XdmaTransport("/dev/xdma0", files=transport.model)
    finally:
        transport.close()


def test_xdma_model_urls():
    from maxaccel.host.transport import check_url
    check_url("xdma-model:verilator")
    check_url("xdma-model:sim?lanes=4")
    for url in ("xdma-model:", "xdma-model:serial:///dev/ttyUSB0", "xdma-model:nothing"):
        with pytest.raises(ValueError, match=r"xdma-model URL must be xdma-model:BOARD"):
            check_url(url)


def test_open_device_xdma_model_sim():
    """The URL form, around the Python-simulated board (one small request)."""
    with open_device("xdma-model:sim", progress=None) as dev:
        x = np.float32([[1, np.nan], [-0.0, 0.0]])
        assert_same_bits(dev.reduce_max(x, axes=[1]), reference.reduce_max(x, axes=[1]))


def test_modelled_throughput_against_transfer_size(device):
    """The bench's table: the published NiteFury points come out of the model (512 B at about
    9.2 MB/s, 4 KiB at about 68.5 MB/s, both less the few bytes of framing), larger
    transfers approach the link's rate."""
    from maxaccel.bench.xdma import format_transfers, measure_transfers
    results = measure_transfers(device, (512, 4096, 1 << 20), min_requests=4, max_requests=16)
    # A request of n elements is 4 n bytes plus the framing: up to 3 bytes under the size.
    assert all(size - 4 < m.transfer_bytes <= size
               for size, m in zip((512, 4096, 1 << 20), results))
    rates = [m.bytes_per_s for m in results]
    assert 0.85 * 9.2e6 < rates[0] < 9.2e6
    assert 0.9 * 68.5e6 < rates[1] < 1.05 * 68.5e6
    assert 0.9 * 1.6e9 < rates[2] < 1.6e9
    assert [m.requests for m in results] == [16, 16, 16]
    table = format_transfers(results, 1.6e9)
    assert table.splitlines()[2].startswith(f"| {results[0].transfer_bytes} B | 16 |")


@pytest.fixture
def ctrl_c():
    """SIGINT as Python's default handler takes it (a background job may have inherited it
    ignored), restored after the test; gives :func:`ctrl_c_once_written`."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield ctrl_c_once_written
    signal.signal(signal.SIGINT, previous)


def ctrl_c_once_written(model):
    """Send the main thread SIGINT (Ctrl-C) from another thread as soon as the next write is in
    the driver's double ``model``; that thread, started."""
    import threading
    main = threading.main_thread().ident
    writes = sum(engine == "h2c" for engine, _ in model.calls)

    def interrupt():
        wait_until(lambda: sum(engine == "h2c" for engine, _ in model.calls) > writes)
        signal.pthread_kill(main, signal.SIGINT)
    thread = threading.Thread(target=interrupt, daemon=True)
    thread.start()
    return thread


def test_ctrl_c_in_a_transfer_the_driver_holds_returns_at_once_and_the_next_request_works(
        board, ctrl_c):
    """The transport waits in the driver only in its own threads, which block signals: Ctrl-C
    goes to the calling thread and returns at once, while the write it abandoned is still in
    the driver, which would never give it up (the card stalled, h2c_timeout 0), so nothing
    but our own threads' design lets it return; the write is not aborted by the signal, and
    the next request waits for it to end before it goes."""
    # Timeouts longer than the test: neither the transport nor the link gives up first.
    transport = XdmaModelTransport(board, close_board=False, driver_timeout_s=30.0)
    model = transport.model
    with Device(transport, progress=None) as dev:
        model.faults.stall, model.h2c_timeout_s = True, 0
        interrupt = ctrl_c(model)
        with pytest.raises(KeyboardInterrupt):
            dev.reduce_max(np.ones(1 << 16, np.float32))
        interrupt.join()
        assert model.signals_taken == 0
        model.faults.stall, model.h2c_timeout_s = False, 30.0
        x = random_values(np.random.default_rng(8), np.float64, (300, 7))
        assert_same_bits(dev.reduce_max(x, axes=[0]), reference.reduce_max(x, axes=[0]))


def test_a_paced_device_answers_inputs_it_has_seen_in_their_modelled_time(device):
    """``maxaccel bench --paced``: the first call runs on the board; a call on the same bits
    and layout (a copy) is the device's own call again, its requests answered without the
    board after their modelled time on a NiteFury, its results new arrays of the board's bits;
    inputs in another layout, inputs one bit apart (-0 for +0) and other keywords run on the
    board again; each wait of the driver's waits at least as long."""
    from maxaccel.bench.xdma import PacedDevice
    model = device.link.transport.model
    x = random_values(np.random.default_rng(8), np.float32, (1, 8, 12, 12))
    x[0, 0, :2, :2] = [[np.nan, 0.0], [-0.0, np.inf]]
    pool = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], return_indices=True)
    expected = reference.max_pool(x, **pool)
    channels_last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    for wait in ("interrupts", "polling"):
        paced = PacedDevice(device, wait)
        assert paced.url == f"{device.url}, paced ({wait})"
        clock, requests = model.clock_s, device.link.requests
        first = paced.max_pool(x, **pool)
        modelled = model.clock_s - clock
        made = device.link.requests - requests
        assert modelled > 0 and made >= 1 and (paced.recorded, paced.replayed) == (1, 0)
        for same, recorded in ((x.copy(), 1), (channels_last, 2), (channels_last.copy(), 2)):
            transfers, requests = len(model.transfers), device.link.requests
            started = time.perf_counter()
            again = paced.max_pool(same, **pool)
            took = time.perf_counter() - started
            for got, want, before in zip(again, expected, first):
                assert_same_bits(got, want)
                assert got is not before
            assert device.link.requests - requests == made     # the device's own requests
            assert paced.recorded == recorded
            if len(model.transfers) == transfers:               # the board did not run
                assert took >= modelled
        assert (paced.recorded, paced.replayed) == (2, 2)
        signed = x.copy()
        signed[0, 0, 1, 0] = 0.0
        transfers = len(model.transfers)
        assert_same_bits(paced.max_pool(signed, **pool)[0],
                         reference.max_pool(signed, **pool)[0])
        assert paced.recorded == 3 and len(model.transfers) > transfers
        assert_same_bits(paced.max_pool(x, **{**pool, "return_indices": False}),
                         expected[0])
        assert paced.recorded == 4                  # other keywords: the board's call
        assert paced.identity is device.identity    # the rest is the device's


def test_a_paced_device_replays_calls_of_several_requests_and_streamed_replies(device):
    """Calls the device cuts into several requests (small frames), replies that stream back
    while their request goes in (a broadcast Max) and replies longer than the transport's
    first read (a MaxPool's) are replayed bit for bit, each request in its own modelled time,
    with nothing left over: every kept request made again and answered."""
    from maxaccel.bench.xdma import PacedDevice
    model = device.link.transport.model
    rng = np.random.default_rng(10)
    a = random_values(rng, np.float32, (64, 300))
    b = random_values(rng, np.float32, (64, 1))
    image = random_values(rng, np.float32, (1, 4, 40, 40), edge_fraction=0.5)
    calls = [("reduce_max", (a,), dict(axes=[1]), reference.reduce_max(a, axes=[1])),
             ("max", (a, b), {}, reference.max(a, b)),
             ("max_pool", (image,), dict(kernel_shape=[2, 2], strides=[1, 1]),
              reference.max_pool(image, kernel_shape=[2, 2], strides=[1, 1]))]
    paced = PacedDevice(device, "polling")
    saved = device.max_frame_bytes
    device.max_frame_bytes = 4096
    try:
        for name, arrays, keywords, expected in calls:
            clock, requests = model.clock_s, device.link.requests
            assert_same_bits(getattr(paced, name)(*arrays, **keywords), expected)
            modelled, made = model.clock_s - clock, device.link.requests - requests
            assert made > 1, name
            transfers, requests = len(model.transfers), device.link.requests
            for _ in range(2):
                started = time.perf_counter()
                got = getattr(paced, name)(*(x.copy() for x in arrays), **keywords)
                assert time.perf_counter() - started >= modelled, name
                assert_same_bits(got, expected)
            assert device.link.requests - requests == 2 * made, name
            assert len(model.transfers) == transfers, name
    finally:
        device.max_frame_bytes = saved
    assert (paced.recorded, paced.replayed) == (3, 6)
    assert_same_bits(paced.reduce_max(a, axes=[0]), reference.reduce_max(a, axes=[0]))


def test_a_paced_device_writes_what_it_answers_into_out(device):
    """A call given ``out`` (a strided view, or a tuple of a room or None per result) records
    and replays with the same bits written into it, Indices as without it, whatever ``out``
    it gets (not part of what it recognises); an ``out`` that does not fit gets the device's
    own error."""
    from maxaccel.bench.xdma import PacedDevice
    x = random_values(np.random.default_rng(9), np.float32, (1, 8, 12, 12), edge_fraction=0.5)
    pool = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    expected = reference.max_pool(x, **pool, return_indices=True)
    paced = PacedDevice(device, "polling")
    for indices in (False, True, False, True):
        whole = np.full((6, 8, 13), np.nan, np.float32)
        out = whole.transpose(1, 0, 2)[np.newaxis, :, :, 1::2]
        got = paced.max_pool(x, **pool, return_indices=indices, out=out)
        assert (got[0] if indices else got) is out
        assert_same_bits(out, expected[0])
        assert np.isnan(whole[..., ::2]).all()
        if indices:
            assert np.array_equal(got[1], expected[1])
    assert (paced.recorded, paced.replayed) == (2, 2)
    # A tuple: a room per result, or None for a new array; recorded and replayed alike.
    for _ in range(2):
        indices = np.full((1, 8, 6, 6), -1, np.int64)
        got = paced.max_pool(x, **pool, return_indices=True, out=(None, indices))
        assert got[1] is indices and np.array_equal(indices, expected[1])
        assert_same_bits(got[0], expected[0])
        values = np.empty((1, 8, 6, 6), np.float32)
        got = paced.max_pool(x, **pool, return_indices=True, out=(values, indices))
        assert got[0] is values and got[1] is indices
        assert_same_bits(values, expected[0])
    assert (paced.recorded, paced.replayed) == (2, 6)
    with pytest.raises(ValueError, match=r"out must have the result's shape \(1, 8, 6, 6\)"):
        paced.max_pool(x, **pool, out=np.empty((1, 8, 6, 7), np.float32))
    with pytest.raises(ValueError, match=r"out must have the result's shape \(1, 8, 6, 6\)"):
        paced.max_pool(x, **pool, return_indices=True,
                       out=(None, np.empty((1, 8, 6, 7), np.int64)))
    with pytest.raises(ValueError, match="out must be a tuple of 2"):
        paced.max_pool(x, **pool, return_indices=True, out=(None,))
    assert (paced.recorded, paced.replayed) == (2, 6)


def test_a_paced_device_needs_the_xdma_double_and_a_driver_wait(board):
    from maxaccel.bench.xdma import PacedDevice
    with Device(FakeBoard(), progress=None) as plain:
        with pytest.raises(ValueError, match="is no xdma-model:BOARD device"):
            PacedDevice(plain)
    transport = XdmaModelTransport(board, close_board=False)
    with Device(transport, progress=None) as dev:
        with pytest.raises(ValueError, match="wait must be one of interrupts, polling, not "
                                             "'spin'"):
            PacedDevice(dev, "spin")


# --- the transport as the driver really behaves -------------------------------------------------


def fake_transport(**model_options):
    """The xdma:// transport on the double around a fake board (answers as requests arrive)."""
    model = XdmaDriverModel(FakeBoard(), **model_options)
    return XdmaTransport(model.prefix, files=model, driver_timeout_s=5.0,
                         write_timeout_s=30.0, reply_timeout_s=30.0)


def test_a_signal_at_the_transports_threads_mid_transfer_loses_nothing(board):
    """A signal (a watchdog's SIGALRM) arrives at the threads waiting in the driver, one in a
    write, one in a read: both block it, so neither transfer is aborted; the result is exact
    with no retry."""
    transport = XdmaModelTransport(board, close_board=False)
    with Device(transport, progress=None) as dev:
        transport.model.faults.signal = {"h2c", "c2h"}
        x = random_values(np.random.default_rng(10), np.float32, (1 << 10, 1 << 10))
        assert_same_bits(dev.reduce_max(x, axes=[1]), reference.reduce_max(x, axes=[1]))
        assert transport.model.signals_blocked == 2 and transport.model.signals_taken == 0
        assert dev.link.retries == 0


def test_a_request_then_close_leaves_the_board_reopenable_at_once():
    """No read stays posted once a reply is in, so close() releases the C2H file at once and
    the board opens again; after a request that got no reply (its read still posted), close()
    waits for that read (at most the driver's c2h_timeout) and the board opens again."""
    transport = fake_transport(c2h_timeout_s=60)
    model = transport.files
    with Device(transport, progress=None, max_frame_bytes=1 << 16) as dev:
        x = np.arange(1 << 15, dtype=np.int32)
        assert_same_bits(dev.reduce_max(x.reshape(8, -1), axes=[1]),
                         reference.reduce_max(x.reshape(8, -1), axes=[1]))
    again = XdmaTransport(model.prefix, files=model, driver_timeout_s=60.0)
    again.close()

    model.c2h_timeout_s = 0.5
    transport = XdmaTransport(model.prefix, files=model, driver_timeout_s=0.5)
    with Device(transport, progress=None, timeout_s=0.1, attempts=1) as dev:
        model.faults.mute = True
        with pytest.raises(LinkError):
            dev.reduce_max(np.ones(10, np.float32))
    model.faults.mute = False
    with Device(XdmaTransport(model.prefix, files=model, driver_timeout_s=0.5),
                progress=None) as dev:
        assert_same_bits(dev.reduce_max(np.ones(10, np.float32)), np.float32([1]))


def test_a_write_stalled_after_some_bytes_fails_once_and_sends_nothing_twice():
    """The card stops taking bytes inside a request of three transfers: the driver returns the
    count of the transfers done; the transport fails the request with it (one write call, one
    h2c_timeout), never sending the rest, which the card may partly hold."""
    transport = fake_transport(h2c_timeout_s=0.3)
    model = transport.files
    try:
        model.faults.stall_after = 10 << 20
        frame = bytes(20 << 20)
        transport.expect_reply()
        with pytest.raises(TransportError, match=r"the driver took \d+ of 20971520 bytes, then "
                                                 r"a transfer timed out \(h2c_timeout\); the "
                                                 r"request is not sent again in part"):
            transport.write(frame)
        assert [n for engine, n in model.calls if engine == "h2c"] == [20 << 20]
    finally:
        transport.close()


def back_to_back(model, descriptors=1):
    """The card holds its next reply until a second is ready and the read that meets them
    completes late (a late reply, then the next one)."""
    model.faults.hold_packets, model.faults.back_to_back = 2, descriptors


def test_packets_back_to_back_after_a_timed_out_attempt_are_recovered_exactly():
    """The first attempt's reply comes late, right before the retry's, and the read that
    meets them completes late: it still takes one, since a reply's first read is one page
    (one descriptor) and its rest is read at exactly the frame's length, so no descriptor is
    left for the next packet to run into. The link takes the stale one for stale and the
    retry's reply, within its budget of attempts."""
    transport = fake_transport(c2h_timeout_s=5, c2h_fifo_bytes=1 << 16)
    model = transport.files
    with Device(transport, progress=None, timeout_s=0.2, attempts=4) as dev:
        x = random_values(np.random.default_rng(11), np.float32, (300, 40))
        back_to_back(model)
        assert_same_bits(dev.reduce_max(x, axes=[1]), reference.reduce_max(x, axes=[1]))
        assert 1 <= dev.link.retries <= 3 and model.faults.hold_packets == 0
        assert model.faults.back_to_back == 0 and model.runs_on == 0
        assert_same_bits(dev.reduce_max(x, axes=[0]), reference.reduce_max(x, axes=[0]))


def test_a_read_that_takes_two_packets_is_recovered_exactly():
    """The late reply is cut short (its tlast early): its rest is read at the length its
    header gives, more descriptors than the packet fills, so the retry's reply runs into the
    last (the late one's rest, a hole, a cut start of the retry's). The link takes the pieces
    for broken and asks again, within its budget; the read after the garbage was posted
    at the largest frame and ended at the packet's tlast."""
    transport = fake_transport(c2h_timeout_s=5, c2h_fifo_bytes=1 << 16)
    model = transport.files
    with Device(transport, progress=None, timeout_s=0.2, attempts=4) as dev:
        x = random_values(np.random.default_rng(14), np.float32, (4000, 2))     # 16 KB replies
        back_to_back(model)
        model.faults.cut_next_reply = 4000
        assert_same_bits(dev.reduce_max(x, axes=[1]), reference.reduce_max(x, axes=[1]))
        assert model.runs_on == 1 and 2 <= dev.link.retries <= 3
        assert_same_bits(dev.reduce_max(x, axes=[0]), reference.reduce_max(x, axes=[0]))


def test_packets_back_to_back_after_ctrl_c_are_recovered_exactly(ctrl_c):
    """Ctrl-C while the reply is held: that reply reaches the card's output right before the
    next request's, and the read that meets them completes late; it still takes one (as
    after a timed-out attempt), and the next request is exact within its budget of
    attempts."""
    transport = fake_transport(c2h_timeout_s=5, c2h_fifo_bytes=1 << 16)
    model = transport.files
    # The link's timeout outlasts the Ctrl-C: the held reply ends no attempt.
    with Device(transport, progress=None, timeout_s=30.0, attempts=4) as dev:
        x = random_values(np.random.default_rng(12), np.float32, (300, 40))
        back_to_back(model)
        interrupt = ctrl_c(model)
        with pytest.raises(KeyboardInterrupt):
            dev.reduce_max(x, axes=[1])
        interrupt.join()
        assert_same_bits(dev.reduce_max(x, axes=[0]), reference.reduce_max(x, axes=[0]))
        assert dev.link.retries <= 3 and model.faults.hold_packets == 0
        assert model.faults.back_to_back == 0 and model.runs_on == 0


def test_the_driver_timeouts_come_from_the_module_parameters(tmp_path):
    """h2c_timeout and c2h_timeout read like /sys/module/xdma/parameters/: 3 s is the
    transport's bound on a transfer left in the driver and the double's timeout (a double's
    second is 0.1 s here); 0, no timeout at all in the driver, is refused with the fix."""
    model = XdmaDriverModel(FakeBoard(), parameters_root=tmp_path, second_s=0.1,
                            h2c_timeout_s=0.3, c2h_timeout_s=0.3)
    parameters = tmp_path / "sys/module/xdma/parameters"
    assert (parameters / "h2c_timeout").read_text() == "3\n"
    transport = XdmaTransport(model.prefix, files=model, parameters=str(parameters),
                              write_timeout_s=30.0)
    try:
        assert transport.driver_timeout_s == 3
        model.faults.stall = True
        with pytest.raises(TransportError, match=r"timed out in the driver \(h2c_timeout\)"):
            transport.write(identify_frame())
    finally:
        transport.close()
    (parameters / "c2h_timeout").write_text("0\n")
    with pytest.raises(TransportError, match=r"c2h_timeout is 0 \(no timeout\).*echo 10 > "):
        XdmaTransport(model.prefix, files=model, parameters=str(parameters))
    # The double with 0: a read waits until something ends it (here a signal).
    read_fd = model.open(C2H, os.O_RDONLY | os.O_TRUNC)
    assert model.c2h_timeout_s == 0
    thread, result = in_thread(model.readinto, read_fd, bytearray(4096))
    time.sleep(0.5)
    assert thread.is_alive()
    model.faults.signal = {"c2h"}
    thread.join()
    assert result[0].errno == errno.ETIMEDOUT


def test_a_read_costs_its_posted_pages_in_modelled_time():
    """Pinning, mapping and describing each page of the posted buffer costs time whatever the
    card sends: a 20-byte reply into a buffer of 2049 pages costs about half a millisecond
    more than into one page; a whole 8 MiB transfer still runs at the published rate."""
    from maxaccel.sim.xdma_driver import PAGE_COST_S
    model = XdmaDriverModel(FakeBoard())
    one = model._timed("c2h", 20, 0.0, pages=1)
    model.reset_clock()
    many = model._timed("c2h", 20, 0.0, pages=2049)
    assert abs(many - one - 2048 * PAGE_COST_S) < 1e-9
    model.reset_clock()
    assert abs((8 << 20) / model._timed("h2c", 8 << 20, 0.0) / 1.6e9 - 1) < 1e-9


def test_the_transport_asks_the_alignment_and_meets_it():
    """Engines that want 64-byte-aligned buffers: the transport asks (IOCTL_XDMA_ALIGN_GET),
    reads into a page-aligned buffer and copies each request into one, so nothing is refused;
    each reply's first read posts one page."""
    transport = fake_transport(addr_align=64)
    model = transport.files
    with Device(transport, progress=None) as dev:
        assert transport.alignment == 64
        x = random_values(np.random.default_rng(13), np.float32, (30, 700))
        assert_same_bits(dev.reduce_max(x, axes=[1]), reference.reduce_max(x, axes=[1]))
        assert_same_bits(dev.max(x, x[:1]), reference.max(x, x[:1]))
    reads = [n for engine, n in model.calls if engine == "c2h"]
    assert reads[0] == 4096 and all(n <= transport.read_bytes for n in reads)
