"""The link layer: one request, one reply, retried over an unreliable byte pipe.

:class:`Link` sends a command as a frame (:mod:`maxaccel.contract.wire`), waits for the reply
with the same command and sequence number, and retries a bounded number of times when the reply
does not come, comes broken, or reports that the request arrived broken (``CRC_ERROR``,
``TIMEOUT``). Between attempts it lets the device abandon any partial frame (it waits longer
than the device's frame timeout) and drains what is left in the input. Replies to earlier
requests (a late answer to a retried request) are recognised by their sequence number and
discarded. Every command of the protocol is idempotent, so resending is always safe.
"""

import logging
import time

from maxaccel.contract.dtypes import encode_elements_into
from maxaccel.contract.wire import Command, FrameParser, Status, encode_frame, payload_in_frame
from maxaccel.host.transport import Transport

_log = logging.getLogger("maxaccel")

__all__ = ["LinkError", "DeviceError", "Link"]

#: Statuses that mean the request was damaged on the way: send it again.
RETRYABLE = frozenset({Status.CRC_ERROR, Status.TIMEOUT})

_STATUS_MEANING = {
    Status.CRC_ERROR: "the request failed its frame check on the device",
    Status.BAD_COMMAND: "the device does not know this command",
    Status.BAD_LENGTH: "the payload length does not match the command's parameters",
    Status.UNSUPPORTED_DTYPE: "the device does not support this element type",
    Status.TOO_LARGE: "the command exceeds a capacity the device reported",
    Status.TIMEOUT: "the request stopped arriving mid-frame",
    Status.BAD_PARAMETER: "a parameter is out of range",
}


def _command_name(code):
    try:
        return Command(code).name
    except ValueError:
        return f"command 0x{int(code):02x}"


def _status_name(code):
    try:
        return Status(code).name
    except ValueError:
        return f"status {int(code)}"


class LinkError(OSError):
    """A request got no usable reply within the bounded number of attempts.

    Attributes
    ----------
    command : int
        The command code.
    attempts : int
        How many times it was sent.
    last_failure : str
        What went wrong the last time.
    heard : int
        Bytes received meanwhile that were no reply to this request (a board busy with an
        earlier request, or a wrong baud rate, sends some; an absent one none).
    noisy : bool
        The budget ran out on a line that carried the device's frames, damaged (every
        ``attempts`` spent), not on ``silent_attempts`` of silence: shorter requests may get
        through.
    payload_bytes : int
        The request's payload length.
    """

    def __init__(self, command, attempts, last_failure, hint="", heard=0, noisy=False,
                 payload_bytes=0):
        self.command = command
        self.attempts = attempts
        self.last_failure = last_failure
        self.heard = heard
        self.noisy = noisy
        self.payload_bytes = payload_bytes
        super().__init__(f"{_command_name(command)} failed after {attempts} attempt"
                         f"{'s' if attempts != 1 else ''}; last failure: {last_failure}"
                         f"{'; ' + hint if hint else ''}")


class DeviceError(RuntimeError):
    """The device refused a request (a status other than ``OK`` that a retry cannot fix).

    Attributes
    ----------
    command : int
    status : int
    """

    def __init__(self, command, status):
        self.command = command
        self.status = status
        meaning = _STATUS_MEANING.get(status, "unknown status")
        super().__init__(f"the device answered {_command_name(command)} with "
                         f"{_status_name(status)}: {meaning}")


def request_payload(block, values, fmt):
    """A request's payload, ``block`` (a parameter block's bytes) then the elements of
    ``values`` (any layout) as the wire takes them, written into the request's frame in one
    pass (:func:`~maxaccel.contract.frames.payload_in_frame`: a byte view, inside the frame)."""
    payload = payload_in_frame(len(block) + values.size * fmt.nbytes)
    payload[:len(block)] = block
    encode_elements_into(payload[len(block):], values, fmt)
    return payload


def _nothing():
    pass


class _Broken(Exception):
    """An attempt failed in a way a retry may fix."""


class Link:
    """Requests and replies over a transport, with sequence numbers, timeouts and retries.

    Parameters
    ----------
    transport : maxaccel.host.transport.Transport
    timeout_s : float, optional
        How long to wait for the next byte of a reply before the attempt counts as failed
        (default: the transport's ``reply_timeout_s``).
    attempts : int
        The most sends of one request before :class:`LinkError` (default 16): a line that
        damages frames but carries the device's answers (a reply that fails its check, a
        ``CRC_ERROR``, a reply cut short) is retried up to this many times.
    silent_attempts : int
        Sends in a row that hear no frame at all (no reply, no part of one) before
        :class:`LinkError` (default 4): an absent, unpowered or wedged board is reported after
        this many reply timeouts, however many ``attempts`` a noisy line is allowed.
    frame_timeout_s : float
        The device's frame timeout; before a retry the link stays silent for twice this long so
        the device abandons a partial frame.

    Attributes
    ----------
    bytes_written, bytes_read : int
        Bytes that crossed the link, in each direction, since the link was made.
    requests, retries, stale_replies : int
        Requests made, attempts beyond the first, replies discarded as belonging to an earlier
        attempt.
    on_bytes : callable or None
        Called with the number of bytes each time some move (for progress reports).
    last_activity : float
        ``time.monotonic()`` when bytes last moved or an attempt last started (how a thread
        waiting for the link tells a busy link from a stuck one).
    """

    def __init__(self, transport, *, timeout_s=None, attempts=16, silent_attempts=4,
                 frame_timeout_s=0.01):
        for name, value in (("attempts", attempts), ("silent_attempts", silent_attempts)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer of at least 1, not {value!r}")
        self.transport = transport
        self._read_chunk = getattr(transport, "read_chunk", Transport.read_chunk)
        self.timeout_s = transport.reply_timeout_s if timeout_s is None else timeout_s
        self.attempts = attempts
        self.silent_attempts = silent_attempts
        self.frame_timeout_s = frame_timeout_s
        self.bytes_written = self.bytes_read = 0
        self.requests = self.retries = self.stale_replies = 0
        self.on_bytes = None
        self.last_activity = time.monotonic()
        self._parser = FrameParser()
        self._seq = 0
        self._interrupted = False
        self._heard_frame = False       # the current attempt saw a frame, whole or in part

    def request(self, command, payload=b""):
        """Send ``command`` with ``payload``; return the reply's payload.

        ``payload`` is bytes-like; one made by :func:`request_payload` (a tensor's bytes
        written straight into the frame) is not copied.

        Raises
        ------
        LinkError
            No intact ``OK`` (or refusing) reply after ``attempts`` sends.
        DeviceError
            The device refused the request with a status a retry cannot fix.
        maxaccel.host.transport.TransportError
            The pipe itself failed (a port that went away).
        KeyboardInterrupt
            Ctrl-C: the request is abandoned; the next one first lets the device drop what it
            had of this one (:meth:`recover`). So for any other exception raised in the
            middle of a request (a watchdog's TimeoutError from a signal handler, say): it
            propagates, and the next request recovers first.
        """
        if self._interrupted:
            self.recover()
        try:
            return self._request(command, payload)
        except (LinkError, DeviceError):
            raise   # the exchange ended cleanly: a refusal, or no reply after every retry
        except BaseException:
            # Interrupted at any point (Ctrl-C, a signal handler's exception, a failing pipe):
            # the device may hold part of this request, or a reply not read yet.
            self._interrupted = True
            raise

    def recover(self):
        """Leave the device ready after an abandoned request: the transport discards what it
        has not sent and lets the device drop a partial frame (waiting out its frame timeout,
        or power-cycling a simulated board), and everything received is forgotten."""
        self._interrupted = False
        abandon = getattr(self.transport, "abandon", None)
        if abandon is not None:
            abandon(2 * self.frame_timeout_s)
        else:   # a bare byte pipe (a test's): silence, then drain
            self._resync()
        self._parser.reset()

    def _request(self, command, payload):
        frame = None
        failure = None
        self.requests += 1
        heard = self.bytes_read
        attempt = silent = 0
        while attempt < self.attempts and silent < self.silent_attempts:
            if attempt:
                self.retries += 1
                self._resync()
            attempt += 1
            self.last_activity = time.monotonic()
            seq = self._seq
            self._seq = (seq + 1) & 0xFF
            self._heard_frame = False
            try:
                frame = self._exchange(command, seq, payload)
            except _Broken as error:
                failure = str(error)
            else:
                if frame.status == Status.OK:
                    return frame.payload
                if frame.status not in RETRYABLE:
                    raise DeviceError(command, frame.status)
                failure = (f"the device answered {_status_name(frame.status)} "
                           f"({_STATUS_MEANING[frame.status]})")
            silent = 0 if self._heard_frame else silent + 1
            _log.debug("%s, attempt %d (at most %d; %d in a row with no frame heard, at most "
                       "%d): %s", _command_name(command), attempt, self.attempts, silent,
                       self.silent_attempts, failure)
        heard = self.bytes_read - heard
        hint = ""
        if heard and frame is None:
            hint = (f"the device sent {heard} bytes meanwhile, none a reply to this request: "
                    f"it is busy (still answering an earlier request, e.g. an interrupted "
                    f"client's) or the baud rate is wrong")
        raise LinkError(command, attempt, failure, hint=hint, heard=heard,
                        noisy=silent < self.silent_attempts, payload_bytes=len(payload))

    def _count(self, read=0, written=0):
        self.last_activity = time.monotonic()
        self.bytes_read += read
        self.bytes_written += written
        if self.on_bytes is not None:
            self.on_bytes(read + written)

    def _exchange(self, command, seq, payload):
        # A transport that reads in the background (XDMA) reads while a reply is owed.
        getattr(self.transport, "expect_reply", _nothing)()
        try:
            return self._exchange_frame(command, seq, payload)
        finally:
            getattr(self.transport, "reply_done", _nothing)()

    def _exchange_frame(self, command, seq, payload):
        wire = encode_frame(command, seq, payload)
        replies = []
        chunk = self.transport.write_chunk
        for start in range(0, len(wire), chunk):
            piece = wire if len(wire) <= chunk else wire[start:start + chunk]
            self.transport.write(piece)
            self._count(written=len(piece))
            # Collect what the device already streams back, so no OS buffer overflows.
            data = self.transport.read(self._read_chunk, 0)
            if data:
                self._count(read=len(data))
                replies += self._parser.feed(data)
        # Bytes that are no frame (garbage, a wrong baud rate) do not keep a request waiting:
        # the timeout runs from the last frame seen or in progress.
        framed_at = time.monotonic()
        skipped = self._parser.skipped_bytes
        while True:
            match = None
            for reply in replies:
                if match is None and reply.code == command and reply.seq == seq:
                    match = reply
                else:
                    self.stale_replies += 1
            if match is not None:
                self._heard_frame = True
                if not match.intact:
                    raise _Broken("the reply failed its frame check")
                return match
            now = time.monotonic()
            if replies or self._parser.partial() is not None:
                framed_at = now
                self._heard_frame = True
            elif now - framed_at > self.timeout_s:
                raise _Broken(f"no reply within {self.timeout_s:g} s (only "
                              f"{self._parser.skipped_bytes - skipped} bytes that were no "
                              f"frame)")
            want = min(self._parser.wanted(), self._read_chunk)
            data = self.transport.read(want, self.timeout_s)
            if not data:
                if self._parser.pending():
                    raise _Broken(f"the reply stopped arriving for {self.timeout_s:g} s "
                                  f"({self._parser.pending()} bytes of a frame received)")
                raise _Broken(f"no reply within {self.timeout_s:g} s")
            self._count(read=len(data))
            replies = self._parser.feed(data)

    def _resync(self):
        """Let the device abandon a partial frame, then forget everything received."""
        time.sleep(2 * self.frame_timeout_s)
        self.transport.reset_input()
        self._parser.reset()
