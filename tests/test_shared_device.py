"""One Device shared by threads: each operation holds the link alone, others wait their turn.

Four threads call one device at once, every operation mixed with bad inputs: each thread gets
exactly its own results (bit for bit the golden model's) and its own errors, nothing hangs and
the process lives, on the Python-simulated board, the compiled one and the compiled one behind
the XDMA driver's double. Then the rules of the wait itself: bounded when the operation
holding the link is stuck, Ctrl-C while waiting, a device called from inside its own
operation, and ``close()`` while another thread works.
"""

import os
import signal
import threading
import time

import numpy as np
import pytest

from maxaccel.host import OffloadSession, open_device
from maxaccel.host.device import Device
from maxaccel.sim import reference
from maxaccel.sim.values import random_values

from fake_board import FakeBoard

THREADS = 4


def operations(rng, size, worker, bad):
    """A random operation of every kind, with sizes up to ``size`` elements along an axis; with
    ``bad``, a bad input whose message names this worker (its out-of-range axis)."""
    dtype = [np.float32, np.float16, np.int8, np.uint16, np.float64][int(rng.integers(5))]
    n = int(rng.integers(1, size + 1))
    kind = 8 if bad else int(rng.integers(8))
    if kind == 0:
        a, b = random_values(rng, dtype, (2, n)), random_values(rng, dtype, (1, n))
        return "max", lambda m: m.max(a, b)
    if kind == 1:
        a, b = random_values(rng, dtype, (n, 2)), random_values(rng, dtype, (n, 2))
        return "min", lambda m: m.min(a, b)
    if kind == 2:
        x = random_values(rng, dtype, (3, n))
        return "reduce_max", lambda m: m.reduce_max(x, axes=[1], keepdims=False)
    if kind == 3:
        x = random_values(rng, dtype, (n, 3))
        return "reduce_min", lambda m: m.reduce_min(x, axes=[0])
    if kind == 4:
        x = random_values(rng, dtype, (2, n))
        return "arg_max", lambda m: m.arg_max(x, axis=1)
    if kind == 5:
        x = random_values(rng, dtype, (n, 2))
        return "arg_min", lambda m: m.arg_min(x, axis=0, select_last_index=True)
    if kind == 6:
        x = random_values(rng, np.float32, (1, 2, n, 2))
        return "global_max_pool", lambda m: m.global_max_pool(x)
    if kind == 7:
        x = random_values(rng, np.float32, (1, 1, n + 2, 3))
        return "max_pool", lambda m: m.max_pool(x, kernel_shape=[2, 2], return_indices=True)
    x = random_values(rng, dtype, (2, n))
    return "bad axis", lambda m: m.reduce_max(x, axes=[10 + worker])


def same_bits(result, expected):
    if isinstance(expected, tuple):
        return all(same_bits(r, e) for r, e in zip(result, expected))
    return (result.dtype == expected.dtype and result.shape == expected.shape
            and result.tobytes() == expected.tobytes())


def run_threads(device, per_thread, size):
    """Each of THREADS threads runs ``per_thread`` operations on ``device``; returns each
    thread's (exact results, refusals naming it, wrong or misdirected outcomes)."""
    outcomes = [None] * THREADS
    start = threading.Barrier(THREADS)

    def work(worker):
        rng = np.random.default_rng(worker)
        exact, refused, wrong = 0, 0, []
        start.wait()
        for step in range(per_thread):
            name, call = operations(rng, size, worker, bad=step % 3 == 2)
            try:
                expected = call(reference)
            except ValueError as error:
                expected = error
            try:
                result = call(device)
            except ValueError as error:
                if (isinstance(expected, ValueError) and str(error) == str(expected)
                        and f"axis {10 + worker} " in str(error)):
                    refused += 1
                else:
                    wrong.append((name, repr(error)))
                continue
            if isinstance(expected, ValueError) or not same_bits(result, expected):
                wrong.append((name, result))
            else:
                exact += 1
        outcomes[worker] = (exact, refused, wrong)

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    return outcomes


def check(outcomes, per_thread):
    for worker, (exact, refused, wrong) in enumerate(outcomes):
        assert wrong == [], f"thread {worker}"
        assert (exact, refused) == (per_thread - per_thread // 3, per_thread // 3)


def test_four_threads_share_the_python_simulated_board():
    with open_device("sim", progress=None) as device:
        check(run_threads(device, per_thread=6, size=3), 6)
        requests = device.link.requests
        assert device.max(np.float32([1, np.nan]), np.float32([2, 0])).tobytes() == \
            np.float32([2, np.nan]).tobytes()
        assert device.link.requests == requests + 1 and device.link.retries == 0


def test_four_threads_share_the_compiled_device(compiled_device):
    retries = compiled_device.link.retries
    check(run_threads(compiled_device, per_thread=60, size=40), 60)
    assert compiled_device.link.retries == retries


def test_four_threads_share_the_compiled_device_behind_the_xdma_driver(compiled_device):
    with open_device("xdma-model:verilator", progress=None) as device:
        check(run_threads(device, per_thread=30, size=40), 30)
        assert device.link.retries == 0


def test_four_threads_share_one_offload_session(compiled_device):
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["r"]),
         helper.make_node("ReduceMax", ["r"], ["y"], axes=[1], keepdims=0),
         helper.make_node("ArgMin", ["x"], ["i"], axis=1)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              ir_version=10)
    session = OffloadSession(model.SerializeToString(), device=compiled_device)
    outcomes = [None] * THREADS

    def work(worker):
        rng = np.random.default_rng(100 + worker)
        good = errors = 0
        for step in range(40):
            if step % 8 == 7:
                try:
                    session.run(None, {"x": np.zeros((2, 9 + worker), np.float32)})
                except ValueError as error:
                    errors += f"got shape (2, {9 + worker})" in str(error)
                continue
            x = random_values(rng, np.float32, (int(rng.integers(1, 5)), 8))
            y, i = session.run(None, {"x": x})
            good += (y.tobytes() == reference.reduce_max(-x, axes=[1], keepdims=False)
                     .tobytes()) and np.array_equal(i, reference.arg_min(x, axis=1))
        outcomes[worker] = (good, errors)

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert not any(thread.is_alive() for thread in threads)
    assert outcomes == [(35, 5)] * THREADS


class StuckBoard(FakeBoard):
    """A fake board whose reads block, silent, until released: a link stuck mid-request.
    The operation a helper thread starts on it (a Min with broadcasting: several requests)
    leaves its result in ``results``."""

    def __init__(self, **options):
        super().__init__(**options)
        self.stuck = threading.Event()
        self.release = threading.Event()
        self.results = []
        self.reply_timeout_s = 0.2

    def read(self, size, timeout_s):
        if self.stuck.is_set():
            self.release.wait(30)
        return super().read(size, timeout_s)


def stuck_device():
    board = StuckBoard()
    device = Device(board, url="stuck", progress=None)
    board.stuck.set()
    holder = threading.Thread(target=lambda: board.results.append(
        device.min(np.float32([1, 4]), np.float32([[3], [2], [5]]))), daemon=True)
    holder.start()
    time.sleep(0.1)
    return board, device, holder


def test_a_thread_waiting_for_a_stuck_link_gives_up_bounded_by_the_timeout():
    board, device, holder = stuck_device()
    with pytest.raises(TimeoutError, match="'stuck' is busy: another thread's operation has "
                                           "held its link for"):
        device.max(np.float32([1]), np.float32([2]))
    board.release.set()
    holder.join(10)
    board.stuck.clear()
    assert device.max(np.float32([1]), np.float32([2])).tolist() == [2.0]


def test_ctrl_c_while_waiting_for_the_link_is_one_line():
    board, device, holder = stuck_device()
    # Python's own Ctrl-C handler (a pytest-xdist worker ignores SIGINT).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    ctrl_c = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    ctrl_c.start()
    try:
        with pytest.raises(KeyboardInterrupt, match="interrupted while waiting for the device "
                                                    "at 'stuck' .* nothing was sent"):
            device.max(np.float32([1]), np.float32([2]))
    finally:
        ctrl_c.join()
        signal.signal(signal.SIGINT, previous)
    board.release.set()
    holder.join(10)
    board.stuck.clear()
    assert device.max(np.float32([1]), np.float32([2])).tolist() == [2.0]


def test_close_waits_for_the_operation_in_progress_then_refuses_later_calls():
    board, device, holder = stuck_device()
    closer = threading.Thread(target=device.close)
    closer.start()
    time.sleep(0.1)
    assert closer.is_alive()        # waiting for the holder's operation
    board.release.set()
    holder.join(10)
    closer.join(10)
    assert not closer.is_alive() and board.closed
    # The operation in progress finished all its requests before the port closed.
    assert board.results[0].tolist() == [[1, 3], [1, 2], [1, 4]]
    with pytest.raises(ValueError, match="'stuck' is closed"):
        device.max(np.float32([1]), np.float32([2]))


def test_a_device_called_from_its_own_progress_callback_refuses():
    device = Device(FakeBoard(), url="fake", progress=None)
    seen = []

    def progress(done, total):
        if not seen:
            with pytest.raises(RuntimeError, match="inside one of its own operations"):
                device.max(np.float32([1]), np.float32([2]))
        seen.append(done)
    device.progress = progress
    assert device.reduce_max(np.float32([1, 5, 2])).tolist() == [5.0]
    assert seen


def test_a_serial_port_opened_twice_is_refused_in_this_process_and_another():
    import subprocess
    import sys
    from maxaccel.host.transport import TransportError, open_transport
    master, slave = os.openpty()
    port = os.ttyname(slave)
    try:
        first = open_transport(f"serial://{port}")
        message = (f"serial port '{port}' is already open (another Device, in this process or "
                   f"another): one client at a time talks to a board")
        with pytest.raises(TransportError, match=message.replace("(", r"\(").replace(")", r"\)")):
            open_transport(f"serial://{port}")
        other = subprocess.run(
            [sys.executable, "-c", "import sys; from maxaccel.host.transport import "
             "open_transport; open_transport(sys.argv[1])", f"serial://{port}"],
            capture_output=True, text=True, timeout=120)
        assert other.returncode == 1 and message in other.stderr
        first.close()
        open_transport(f"serial://{port}").close()      # free again once closed
    finally:
        os.close(slave)
        os.close(master)


def test_a_noisy_line_shrinks_the_frames_until_an_operation_gets_through():
    """At 0.3% of the bytes damaged each way, a 32 KiB request never arrives whole: the link
    spends its attempts, and the operation runs again in shorter frames until it does, with
    the golden model's bits; clean operations then grow the frames back."""
    from maxaccel.host.link import LinkError
    from maxaccel.sim.faults import Faulty
    x = random_values(np.random.default_rng(5), np.float32, (8, 1024))
    faulty = Faulty(FakeBoard(frame_timeout_s=0.01), fault_rate=0.003, seed=3)
    device = Device(faulty, url="noisy", timeout_s=0.05, progress=None)
    assert device.frame_bytes == device.max_frame_bytes == 1 << 20
    result = device.reduce_max(x, axes=[1])
    assert result.tobytes() == reference.reduce_max(x, axes=[1]).tobytes()
    assert device.NOISY_FRAME_BYTES <= device.frame_bytes <= 4096 and faulty.injected > 50
    faulty.fault_rate = 0
    for _ in range(12):
        device.reduce_max(np.float32([1, 2]))
    assert device.frame_bytes == device.max_frame_bytes
    # A line too noisy even for the shortest frames ends in a LinkError, and the device
    # answers again once the line is clean.
    faulty.fault_rate = 0.03
    with pytest.raises(LinkError):
        device.reduce_max(x, axes=[1])
    faulty.fault_rate = 0
    assert device.reduce_max(x, axes=[1]).tobytes() == \
        reference.reduce_max(x, axes=[1]).tobytes()
