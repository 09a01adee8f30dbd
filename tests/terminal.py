"""A child process on a pseudo-terminal, for tests of what a user at a terminal sees."""

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time


def _default_ctrl_c():
    """In the child before Python starts: SIGINT at its default disposition, as for a command
    typed at a shell's prompt. A background job (``nohup``, ``cmd &`` in a script, some CI
    runners) inherits it ignored, and Python then installs no KeyboardInterrupt handler: the
    tests set the disposition they test instead of inheriting the runner's."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Terminal:
    """``python ARGS`` with stdin, stdout and stderr on a new pseudo-terminal, Ctrl-C
    (SIGINT) at its default disposition whatever the test runner's."""

    def __init__(self, *args, env=None, columns=100):
        self.master, slave = pty.openpty()
        import fcntl
        import struct
        import termios
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        environment = dict(os.environ, **(env or {}))
        environment.pop("NO_COLOR", None)
        self.process = subprocess.Popen([sys.executable, *args], stdin=slave, stdout=slave,
                                        stderr=slave, env=environment, start_new_session=True,
                                        preexec_fn=_default_ctrl_c)
        os.close(slave)
        self.text = ""

    def expect(self, pattern, timeout=60):
        """Read until ``pattern`` (a regular expression) appears; returns the match."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.text)
            if found:
                return found
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} within {timeout} s; the terminal shows:\n{self.text}"
            if not self._read(left):
                raise AssertionError(f"no {pattern!r} before the process ended (status "
                                     f"{self.process.poll()}):\n{self.text}")

    def _read(self, timeout):
        readable, _, _ = select.select([self.master], [], [], min(timeout, 0.2))
        if not readable:
            return self.process.poll() is None
        try:
            data = os.read(self.master, 1 << 16)
        except OSError:     # EIO: the child closed the terminal
            return False
        self.text += data.decode(errors="replace")
        return bool(data)

    def finish(self, timeout=60):
        """Read to the end; returns the exit status."""
        deadline = time.monotonic() + timeout
        while self._read(max(0.0, deadline - time.monotonic())):
            assert time.monotonic() < deadline, f"still running after {timeout} s:\n{self.text}"
        return self.process.wait(timeout=max(1.0, deadline - time.monotonic()))

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)
