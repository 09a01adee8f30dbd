"""Progress bars and messages for long work: tensor transfers, the first Verilator build, board
builds.

Bars are tqdm's, drawn on stderr only when stderr is a terminal (a pipe, a log file or a test's
captured output get nothing), and only for work that has already taken :data:`DELAY_S`: a short
request draws nothing. Messages go through the standard :mod:`logging` module under the
``maxaccel`` logger (the ``maxaccel`` command's ``-v``/``-q`` set its level); without any
logging configuration Python prints warnings and errors on stderr and drops the rest.
"""

import contextlib
import logging
import sys
import threading
import time

from tqdm import tqdm

__all__ = ["log", "DELAY_S", "enabled", "set_enabled", "bar", "TransferProgress", "timed"]

#: The logger of the whole package.
log = logging.getLogger("maxaccel")

#: Seconds an operation runs before its bar appears.
DELAY_S = 1.0

_state = {"enabled": True}


def enabled():
    """Whether bars may be drawn at all (``maxaccel -q`` turns them off)."""
    return _state["enabled"]


def set_enabled(value):
    """Allow (True) or forbid (False) every bar of this process."""
    _state["enabled"] = bool(value)


def bar(total, *, desc, unit="B", stream=None, delay_s=DELAY_S, **options):
    """A tqdm bar on ``stream`` (default: stderr at the time of the call), disabled unless the
    stream is a terminal and bars are :func:`enabled`. Rate and ETA in ``unit`` per second
    (SI-scaled: kB, MB)."""
    stream = sys.stderr if stream is None else stream
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, unit_divisor=1000,
                file=stream, delay=delay_s, mininterval=0.1, dynamic_ncols=True, leave=False,
                disable=None if enabled() else True, **options)


class TransferProgress:
    """``progress(done_bytes, total_bytes)`` for :class:`~maxaccel.host.device.Device`: one
    bar per operation (bytes on the link, rate and ETA), removed when it ends.

    Parameters
    ----------
    desc : str
        The bar's label.
    stream : file, optional
        Where to draw (default stderr); nothing is drawn unless it is a terminal.
    delay_s : float
        Seconds an operation runs before its bar appears.
    """

    def __init__(self, desc="transfer", *, stream=None, delay_s=DELAY_S):
        self.desc = desc
        self.stream = stream
        self.delay_s = delay_s
        self._bar = None
        self._started = None        # (monotonic time, total) of the operation going on

    def __call__(self, done, total):
        if self._bar is not None and self._bar.total != total:
            self.close()
        if self._bar is None:
            # Most operations end within the delay: their bar is never built.
            now = time.monotonic()
            if self._started is None or self._started[1] != total:
                self._started = (now, total)
            if done >= total:
                self._started = None
                return
            if now - self._started[0] < self.delay_s:
                return
            self._bar = bar(total, desc=self.desc, stream=self.stream, delay_s=0)
        self._bar.update(done - self._bar.n)
        if done >= total:
            self.close()

    def close(self):
        """Remove the bar (also of an operation that ended early, e.g. interrupted)."""
        drawn, self._bar, self._started = self._bar, None, None
        if drawn is None:
            return
        shown = not drawn.disable
        drawn.close()
        if shown:
            # tqdm clears only a bar it knows it drew; Ctrl-C inside its redraw leaves one it
            # does not know about. Return to the start of the line and clear it.
            drawn.fp.write("\r\x1b[K")
            drawn.fp.flush()


@contextlib.contextmanager
def timed(desc, expected_s, *, stream=None, delay_s=DELAY_S, tick_s=0.5):
    """A bar over the wall-clock time of a step whose length is known only roughly (a build):
    it fills over ``expected_s`` seconds (a figure measured before), shows elapsed and
    remaining time, and stops just short of full until the step ends."""
    with bar(round(expected_s, 1), desc=desc, unit="s", stream=stream, delay_s=delay_s,
             bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed} of about "
                        "{total:.0f}s, {remaining} left") as drawn:
        done = threading.Event()
        started = time.monotonic()

        def tick():
            while not done.wait(tick_s):
                elapsed = min(time.monotonic() - started, 0.99 * drawn.total)
                drawn.update(elapsed - drawn.n)

        ticker = threading.Thread(target=tick, name="maxaccel-progress", daemon=True)
        ticker.start()
        try:
            yield drawn
        finally:
            done.set()
            ticker.join()
