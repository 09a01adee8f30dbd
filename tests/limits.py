"""Bounds for tests that could hang."""

import contextlib
import signal


@contextlib.contextmanager
def time_limit(seconds):
    """Fail the code inside with a TimeoutError after ``seconds`` instead of letting it hang
    (SIGALRM; the main thread of a pytest process)."""
    def hang(*_):
        raise TimeoutError(f"the test took more than {seconds} s: something hangs")
    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
