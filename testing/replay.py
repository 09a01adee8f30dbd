"""A device's link traffic recorded where a board is attached, and replayed where none is.

:class:`RecordingTransport` wraps the transport of a device and keeps every byte the host
sent and every byte it read, with how many bytes the host had sent by the time it read them.
:class:`ReplayTransport` is a transport made from such a recording: it checks that the host
sends the recorded bytes, in order, and hands it the recorded replies once it has sent what
preceded them. A test that does what it did when it was recorded therefore gets the board's
answers, bit for bit, with no board attached; a test that sends anything else fails with the
first byte that differs. The pytest plugin uses them for ``--maxaccel-record FILE`` and
``--maxaccel-replay FILE`` (``docs/testing.md``).

A recording is one sequence: requests carry sequence numbers, so a replay must send what the
recorded run sent, from the first request, in the same order.
"""

import json
import time

from maxaccel.host.transport import Transport, TransportError

__all__ = ["RecordingTransport", "ReplayTransport", "ReplayMismatch", "load_recording",
           "RECORDING_FORMAT"]

#: Version of the recording file's layout.
RECORDING_FORMAT = 1


class ReplayMismatch(TransportError):
    """The host sent bytes other than those recorded (or more than were recorded)."""


class RecordingTransport:
    """``inner`` with every byte it moves recorded (see the module docstring).

    Parameters
    ----------
    inner : maxaccel.host.transport.Transport
        The transport to the board; closed with this one. Its other attributes
        (``reply_timeout_s``, ``write_chunk``, ``max_frame_bytes``, ...) are this one's.
    url : str
        The device URL, kept in the recording.
    """

    def __init__(self, inner, url):
        self.inner = inner
        self.url = url
        self.sent = bytearray()
        #: ``[(bytes sent before, bytes read), ...]`` in the order the host read them.
        self.received = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def write(self, data):
        self.inner.write(data)
        self.sent += data

    def read(self, size, timeout_s):
        data = self.inner.read(size, timeout_s)
        if data:
            self.received.append((len(self.sent), bytes(data)))
        return data

    def reset_input(self):
        self.inner.reset_input()

    def close(self):
        self.inner.close()

    def save(self, path):
        """Write the recording to ``path`` (JSON, bytes in hex)."""
        recording = {
            "format": RECORDING_FORMAT,
            "url": self.url,
            "reply_timeout_s": self.inner.reply_timeout_s,
            "max_frame_bytes": getattr(self.inner, "max_frame_bytes", None),
            "sent": self.sent.hex(),
            "received": [[before, data.hex()] for before, data in self.received],
        }
        with open(path, "w") as file:
            json.dump(recording, file, indent=0)


def load_recording(path):
    """The recording in ``path``, as :meth:`RecordingTransport.save` wrote it.

    Raises
    ------
    ValueError
        The file is not such a recording, or of another format version.
    OSError
        The file cannot be read.
    """
    with open(path) as file:
        try:
            recording = json.load(file)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not a maxaccel recording: {error}") from None
    if not isinstance(recording, dict) or recording.get("format") != RECORDING_FORMAT:
        raise ValueError(f"{path} is not a maxaccel recording of format {RECORDING_FORMAT}")
    return recording


class ReplayTransport(Transport):
    """A transport that answers as the recorded board did (see the module docstring).

    Parameters
    ----------
    recording : dict
        What :func:`load_recording` returns.

    Attributes
    ----------
    url : str
        The URL of the recorded device.
    """

    def __init__(self, recording):
        self.url = recording["url"]
        self.reply_timeout_s = recording["reply_timeout_s"]
        if recording["max_frame_bytes"] is not None:
            self.max_frame_bytes = recording["max_frame_bytes"]
        self._expected = bytes.fromhex(recording["sent"])
        self._replies = [(before, bytes.fromhex(data)) for before, data in recording["received"]]
        self._sent = 0
        self._next = 0          # the reply being read, and how much of it was
        self._offset = 0

    def write(self, data):
        data = bytes(data)
        expected = self._expected[self._sent:self._sent + len(data)]
        if data != expected:
            index = next((i for i, (a, b) in enumerate(zip(data, expected)) if a != b),
                         len(expected))
            at = self._sent + index
            recorded = (f"the recording has 0x{expected[index]:02x}" if index < len(expected)
                        else f"the recording ends after {len(self._expected)} bytes")
            raise ReplayMismatch(
                f"replay of {self.url}: the host sent other bytes than were recorded: byte "
                f"{at} is 0x{data[index]:02x} where {recorded} (a replay must make the "
                f"recorded run's requests, in the same order)")
        self._sent += len(data)

    def read(self, size, timeout_s):
        out = bytearray()
        while (len(out) < size and self._next < len(self._replies)
               and self._replies[self._next][0] <= self._sent):
            reply = self._replies[self._next][1]
            taken = reply[self._offset:self._offset + size - len(out)]
            out += taken
            self._offset += len(taken)
            if self._offset == len(reply):
                self._next, self._offset = self._next + 1, 0
        if not out and timeout_s:
            time.sleep(timeout_s)   # nothing came here when it was recorded either
        return bytes(out)

    def reset_input(self):
        """Nothing to discard: what the recorded host discarded it never read, so it is not
        in the recording."""

    def close(self):
        pass
