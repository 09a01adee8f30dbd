"""What a user at a terminal sees: progress bars with rate and ETA (only on a terminal), the
warning before a long ``sim`` job, and Ctrl-C as one line with the device still usable. Run
through a pseudo-terminal, as a user's shell would."""

import io
import logging
import os
import re
import signal
import threading

import numpy as np
import pytest
from terminal import Terminal

from maxaccel.contract import progress

# A script at a terminal: a long reduce_max on the Python-simulated board, interrupted by the
# test once its bar shows, then a short one on the same device.
INTERRUPTED_JOB = """
import numpy as np
from maxaccel.host import open_device
with open_device("sim") as dev:
    try:
        dev.reduce_max(np.arange(40000, dtype=np.float32))
        print("NOT INTERRUPTED")
    except KeyboardInterrupt as error:
        print("caught:", error)
    print("next:", dev.reduce_max(np.float32([1, 7, 2])), dev.max(np.int8([3]), np.int8([-4, 9])))
"""


def test_api_progress_bar_then_ctrl_c_leaves_the_device_usable():
    terminal = Terminal("-c", INTERRUPTED_JOB)
    try:
        # tqdm's bar: percentage, bytes done of the total, the rate and the time left.
        terminal.expect(r"sim:\s+\d+%\|.*\| [\d.]+k?/\d+[\d.]*kB? \[\d\d:\d\d<\d\d:\d\d, +[\d.]+k?B/s\]")
        terminal.process.send_signal(signal.SIGINT)
        terminal.expect(r"next: \[7\.\] \[3 9\]")
        assert terminal.finish() == 0
    finally:
        terminal.close()
    assert "caught: interrupted; the device at 'sim' drops the request" in terminal.text
    assert "Traceback" not in terminal.text and "NOT INTERRUPTED" not in terminal.text


def test_cli_ctrl_c_is_one_line_and_status_130():
    terminal = Terminal("-m", "maxaccel", "bench", "--device", "sim", "--elements", "40000",
                        "--no-cpu")
    try:
        terminal.expect(r"\d+%\|.*B/s\]")
        terminal.process.send_signal(signal.SIGINT)
        assert terminal.finish() == 130
    finally:
        terminal.close()
    # After the last drawing of the bar: the line cleared, then exactly one line.
    after = terminal.text.rsplit("B/s]", 1)[1]
    assert after.replace("\x1b[K", "").strip("\r\n ") == "maxaccel bench: interrupted", \
        terminal.text
    assert "Traceback" not in terminal.text


def test_no_bar_when_stderr_is_not_a_terminal():
    stream = io.StringIO()
    bar = progress.TransferProgress("x", stream=stream, delay_s=0)
    for done in range(0, 101, 10):
        bar(done, 100)
    assert stream.getvalue() == ""


def _openpty():
    """A pseudo-terminal pair whose terminal is 100 columns wide."""
    import fcntl
    import struct
    import termios
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    return master, slave


def test_quiet_turns_bars_off_even_on_a_terminal():
    master, slave = _openpty()
    try:
        with open(slave, "w", closefd=False) as stream:
            assert stream.isatty()
            progress.set_enabled(False)
            try:
                bar = progress.TransferProgress("x", stream=stream, delay_s=0)
                bar(50, 100)
                bar(100, 100)
            finally:
                progress.set_enabled(True)
            os.set_blocking(master, False)
            with pytest.raises(BlockingIOError):
                os.read(master, 1024)
            bar = progress.TransferProgress("x", stream=stream, delay_s=0)
            bar(50, 100)
            stream.flush()
            assert re.search(rb"x:\s+\d+%\|", os.read(master, 1024))
            bar(100, 100)
    finally:
        os.close(master)
        os.close(slave)


def test_timed_bar_shows_elapsed_and_time_left_on_a_terminal():
    master, slave = _openpty()
    try:
        with open(slave, "w", closefd=False) as stream:
            with progress.timed("building", 40, stream=stream, delay_s=0, tick_s=0.05) as bar:
                threading.Event().wait(0.3)
            assert 0 < bar.n < 40
        text = os.read(master, 1 << 16).decode()
    finally:
        os.close(master)
        os.close(slave)
    assert re.search(r"building:\s+\d+%\|.*\| 00:00 of about 40s, 00:\d\d left", text), text


def test_a_long_sim_job_is_announced_in_one_line_and_interrupted_cleanly(caplog):
    """The warning comes before any work; Ctrl-C (here from a timer) ends the job at once and
    the next request on the same device works."""
    from maxaccel.host import open_device
    caplog.set_level(logging.WARNING, logger="maxaccel")
    # Ctrl-C as at a shell's prompt, even when the test runner was started with SIGINT ignored
    # (a background job): the disposition under test is set, not inherited.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_a_long_sim_job(open_device)
    finally:
        signal.signal(signal.SIGINT, previous)
    (record,) = [r for r in caplog.records if r.name == "maxaccel"]
    assert re.fullmatch(r"this moves 1\.05 MB through the Python-simulated board: about \d+ "
                        r"min; 'verilator' is the same gateware compiled, thousands of "
                        r"times faster", record.getMessage())


def _interrupt_a_long_sim_job(open_device):
    with open_device("sim") as dev:
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt, match="drops the request"):
                dev.reduce_max(np.zeros(1 << 18, np.float32))
        finally:
            timer.cancel()
        assert dev.reduce_max(np.float32([-0.0, 0.0])).view(np.uint32)[0] == 0
