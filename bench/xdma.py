"""The XDMA link's modelled throughput against the host's transfer size
(``maxaccel bench --device xdma-model:verilator --transfers``), and a device whose calls take
the modelled time (``maxaccel bench --device xdma-model:verilator --paced --model ...``).

Behind ``xdma-model:BOARD`` the host's ``xdma://`` transport talks to the XDMA driver's double
(:mod:`maxaccel.sim.xdma_driver`), which keeps the time each DMA transfer would take on a
NiteFury: a fixed cost per transfer, a cost per page of the buffer it posts and the link's rate
(``docs/boards.md``, "The XDMA link").
For each transfer size, a ReduceMax whose every request carries one run of about that many
bytes (one host-to-card transfer a request, a few-byte reply) runs through it, checked bit for
bit against the golden model; its payload bytes over the modelled time are what a NiteFury
user gets from requests of that size.

:class:`PacedDevice` runs a call it has seen before as the device's own call again, with the
board's part answered from what the first call kept, each transfer after its modelled time and
waited for as the driver waits: whole models timed on it are timed as on a NiteFury, not after
the compiled board's simulation, which lasts a thousand times longer.
"""

import contextlib
import ctypes
from dataclasses import asdict, dataclass, fields
import errno
import functools
import os
import struct
import threading
import time

import numpy as np

from maxaccel.bench import _OperatorWrapper
from maxaccel.contract.frames import HEADER_SIZE, TRAILER_SIZE, crc32

__all__ = ["TRANSFER_SIZES", "TransferMeasurement", "measure_transfers", "format_transfers",
           "default_total_bytes", "driver_model", "PacedDevice", "WAITS", "TRANSFERS_FILE",
           "TRANSFERS_COMMAND", "load_transfers"]

#: Transfer sizes measured by default: the published NiteFury points (512 B, 4 KiB), the
#: host's old 4 KiB writes' neighbours, and the 8 MiB a request is by default.
TRANSFER_SIZES = (512, 4096, 65536, 1 << 20, 8 << 20)


def default_total_bytes(url):
    """Tensor bytes per transfer size: 64 MiB around the compiled board, none beyond the
    fewest requests around one that Amaranth's simulator runs (a few KB a second)."""
    return 0 if url.startswith("xdma-model:sim") else 64 << 20


@dataclass
class TransferMeasurement:
    """The modelled throughput of requests of one size.

    Attributes
    ----------
    transfer_bytes : int
        Bytes of each request's host-to-card write (the frame: payload and framing).
    requests : int
    payload_bytes : int
        Tensor bytes moved.
    modelled_s : float
        Modelled time from the first request to the last reply.
    """

    transfer_bytes: int
    requests: int
    payload_bytes: int
    modelled_s: float

    @property
    def bytes_per_s(self):
        return self.payload_bytes / self.modelled_s

    def as_dict(self):
        return dict(asdict(self), bytes_per_s=self.bytes_per_s)


def driver_model(device):
    """The XDMA driver's double behind ``device`` (its :attr:`clock_s` is the modelled time).

    Raises
    ------
    ValueError
        ``device`` was not opened on ``xdma-model:BOARD``.
    """
    link = getattr(device, "link", None)
    model = getattr(getattr(link, "transport", None), "model", None)
    if model is None or not hasattr(model, "clock_s"):
        raise ValueError(f"{getattr(device, 'url', device)!r} is no xdma-model:BOARD device: the "
                         f"modelled transfer times come from the XDMA driver's double")
    return model


def measure_transfers(device, sizes=TRANSFER_SIZES, *, total_bytes=64 << 20, min_requests=8,
                      max_requests=256, seed=0, progress=None):
    """Modelled throughput per transfer size on an ``xdma-model:`` device.

    Parameters
    ----------
    device : Device
        Opened on ``xdma-model:BOARD``.
    sizes : sequence of int
        Request sizes in bytes (each request's payload is the size less its framing).
    total_bytes, min_requests, max_requests : int
        Tensor bytes per size, held to this many requests.
    progress : callable, optional
        Called with each :class:`TransferMeasurement`.

    Returns
    -------
    list of TransferMeasurement
    """
    from maxaccel.contract.wire import FRAME_OVERHEAD, PARAMETERS, Command
    from maxaccel.sim import reference
    model = driver_model(device)
    block = PARAMETERS[Command.REDUCE].size
    rng = np.random.default_rng(seed)
    results = []
    saved = device.max_frame_bytes
    try:
        for size in sizes:
            payload = size - FRAME_OVERHEAD - block
            run = payload // 4
            if run < 1:
                raise ValueError(f"a transfer of {size} bytes holds no data")
            runs = min(max_requests, max(min_requests, total_bytes // (4 * run)))
            x = rng.standard_normal((runs, run)).astype(np.float32)
            device.max_frame_bytes = 4 * run
            model.reset_clock()
            requests, calls = device.link.requests, len(model.calls)
            result = device.reduce_max(x, axes=[1])
            expected = reference.reduce_max(x, axes=[1])
            if result.tobytes() != expected.tobytes():
                raise RuntimeError(f"ReduceMax through {device.url!r} differs from the golden "
                                   f"model at {size}-byte transfers")
            # Each request's write (the driver may run it as two transfers, cut where its
            # ring of descriptors wraps).
            writes = [n for engine, n in model.calls[calls:] if engine == "h2c"]
            measurement = TransferMeasurement(max(writes), device.link.requests - requests,
                                              x.nbytes + expected.nbytes, model.clock_s)
            results.append(measurement)
            if progress is not None:
                progress(measurement)
    finally:
        device.max_frame_bytes = saved
    return results


def transfer_line(m):
    """One :class:`TransferMeasurement` as a progress line."""
    return (f"{m.transfer_bytes:>9} B transfers: {m.requests:>5} requests, "
            f"{m.bytes_per_s / 1e6:9.1f} MB/s modelled")


#: The figures of ``docs/boards.md``'s table of throughput against transfer size ("The XDMA
#: link"); :data:`TRANSFERS_COMMAND` writes it anew.
TRANSFERS_FILE = "docs/bench/transfers.json"
#: The command that measures :data:`TRANSFERS_FILE` (a few minutes around the compiled board).
TRANSFERS_COMMAND = ("maxaccel bench --device xdma-model:verilator --transfers --no-cpu "
                     f"--json {TRANSFERS_FILE}")


def load_transfers(path):
    """``{device URL: [TransferMeasurement, ...]}`` of a file ``maxaccel bench --transfers
    --json`` wrote, such as :data:`TRANSFERS_FILE`."""
    import json
    names = {f.name for f in fields(TransferMeasurement)}
    with open(path) as file:
        transfers = json.load(file)["transfers"]
    return {url: [TransferMeasurement(**{k: v for k, v in m.items() if k in names})
                  for m in rows] for url, rows in transfers.items()}


def format_transfers(measurements, link_bytes_per_s):
    """A markdown table: transfer size, modelled MB/s, share of the link's rate."""
    lines = [f"| transfer | requests | modelled MB/s | of the link "
             f"({link_bytes_per_s / 1e9:g} GB/s) |", "|---|---|---|---|"]
    for m in measurements:
        lines.append(f"| {m.transfer_bytes} B | {m.requests} | {m.bytes_per_s / 1e6:.1f} | "
                     f"{m.bytes_per_s / link_bytes_per_s:.1%} |")
    return "\n".join(lines)


def _spin_until(deadline):
    # The driver polls in the kernel, the interpreter's lock released: other threads of this
    # process (the transport's other one, the caller) run meanwhile.
    while time.perf_counter() < deadline:
        os.sched_yield()


_PR_SET_TIMERSLACK = 29
_precise = threading.local()


def _sleep_until(deadline):
    if not getattr(_precise, "set", False):
        # The transfer's interrupt wakes the driver's thread when it comes; a timed sleep is
        # late by the thread's timer slack (50 us by default) unless that is cut to 1 ns.
        _precise.set = True
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0)
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)


#: How :class:`PacedDevice` waits for a transfer, as the XDMA driver does: asleep until the
#: transfer's interrupt (its default), or polling the engine's write-back (``poll_mode=1``).
WAITS = {"interrupts": _sleep_until, "polling": _spin_until}


class PacedDevice(_OperatorWrapper):
    """A device opened on ``xdma-model:BOARD`` whose calls take the time they would take on a
    NiteFury: what whole models are timed on (``maxaccel bench --paced``).

    The first call of an operation on given inputs (their bits and layout) and keyword
    arguments runs on the board, through the XDMA driver's double; each of its requests' bytes,
    its reply's bytes and its DMA transfers' modelled times are kept. A later call on inputs of
    the same bits and layout is the device's own call again (its checks, its tiling, the
    request's packing and framing, the transport's threads, the reply's parsing and unpacking
    into new arrays or ``out``), with the driver's double answered from what was kept: each
    transfer ends when its modelled time has passed since its request's ``write`` began, and
    the driver's thread waits for it as the driver waits (``wait``). Only the board's own time
    is replaced. Any other attribute is the device's. On the compiled board a call lasts
    0.01-1 s; after that long this machine's caches have lost what the next CPU nodes need, as
    they would after any wait that long (``docs/offload.md``, "Paced as a NiteFury"), while a
    NiteFury's calls on the same tensors take 0.07-0.4 ms.

    Parameters
    ----------
    device : Device
        Opened on ``xdma-model:BOARD`` (:func:`driver_model`); its transport's driver calls go
        through this object from now on.
    wait : str
        A key of :data:`WAITS`: ``"interrupts"`` (the driver's default) or ``"polling"``.

    Attributes
    ----------
    recorded, replayed : int
        Calls that ran on the board, and calls answered from what they kept.
    url : str
        The device's URL and the wait.

    Raises
    ------
    ValueError
        ``device`` is no ``xdma-model:`` device, or ``wait`` is not a key of :data:`WAITS`.
    RuntimeError
        A call on kept inputs made requests other than the kept ones.
    """

    def __init__(self, device, wait="interrupts"):
        if wait not in WAITS:
            raise ValueError(f"wait must be one of {', '.join(WAITS)}, not {wait!r}")
        model = driver_model(device)
        super().__init__(device)
        transport = device.link.transport
        if not isinstance(transport.files, _KeptTransfers):
            transport.files = _KeptTransfers(model)
        self._transfers = transport.files
        self._wait = WAITS[wait]
        self._kept = {}
        self._lock = threading.Lock()
        self.recorded = self.replayed = 0
        self.url = f"{device.url}, paced ({wait})"

    def _wrap(self, name, method):
        @functools.wraps(method)    # its signature: whether it takes ``out``
        def paced(*arrays, **keywords):
            if not all(isinstance(a, np.ndarray) for a in arrays):
                return method(*arrays, **keywords)     # the device's checks and errors
            key = (name, tuple((a.shape, a.dtype.str, a.strides) for a in arrays),
                   repr(sorted((k, v) for k, v in keywords.items() if k != "out")))
            with self._lock:
                for inputs, requests in self._kept.get(key, ()):
                    if all(_same_bits(a, b) for a, b in zip(arrays, inputs)):
                        with self._transfers.replaying(requests, self._wait):
                            results = method(*arrays, **keywords)
                        self.replayed += 1
                        return results
                with self._transfers.recording() as requests:
                    results = method(*arrays, **keywords)
                self._kept.setdefault(key, []).append(([a.copy() for a in arrays], requests))
                self.recorded += 1
                return results
        return paced


@dataclass
class _Request:
    """One request as a recorded call made it: its frame, its reply frame, and its transfers'
    modelled ends from the moment it was written (``h2c`` ends; ``c2h`` (bytes, end) pairs)."""

    frame: bytes
    issued_s: float
    first_transfer: int
    reply: bytearray
    h2c: list = None
    c2h: list = None

    def same_request(self, data):
        """Whether ``data`` is this request again, its sequence number (and so its header's
        check) aside: the same command and length, the same payload check."""
        view = memoryview(data).cast("B")
        kept = self.frame
        return (len(view) == len(kept) and view[:3] == kept[:3] and view[4:8] == kept[4:8]
                and view[-TRAILER_SIZE:] == kept[-TRAILER_SIZE:])


class _KeptTransfers:
    """The XDMA driver's double as a paced device's transport sees it: every file call is the
    double's, except while a call records (its requests, replies and modelled transfer times
    kept) or replays (its requests answered from those, each transfer waited for until its
    modelled end from its request's ``write``, as the driver's thread waits)."""

    def __init__(self, model):
        self._model = model
        self._cond = threading.Condition()
        self._requests = None       # the call's requests, recorded or replayed
        self._replaying = False
        self._wait = None
        self._next = 0              # replay: the next request to be written
        # [request, its write's wall-clock start, reply bytes given, its sequence number]
        self._current = None

    def __getattr__(self, name):
        return getattr(self._model, name)

    @contextlib.contextmanager
    def recording(self):
        """Record the requests of the calls made inside: yields their list (filled in)."""
        model, requests = self._model, []
        with self._cond:
            self._requests, self._replaying, self._current = requests, False, None
        try:
            yield requests
        finally:
            with self._cond:
                self._requests = self._current = None
            ends = [r.first_transfer for r in requests[1:]] + [len(model.transfers)]
            for request, end in zip(requests, ends):
                transfers = model.transfers[request.first_transfer:end]
                request.h2c = [t.end_s - request.issued_s for t in transfers
                               if t.direction == "h2c"]
                request.c2h = [(t.nbytes, t.end_s - request.issued_s) for t in transfers
                               if t.direction == "c2h"]

    @contextlib.contextmanager
    def replaying(self, requests, wait):
        """Answer the calls made inside with ``requests`` (from :meth:`recording`), waiting
        with ``wait`` (a :data:`WAITS` value)."""
        with self._cond:
            self._requests, self._replaying, self._wait = requests, True, wait
            self._next, self._current = 0, None
        try:
            yield
            if self._next != len(requests):
                raise RuntimeError(f"a paced call on kept inputs made {self._next} of the "
                                   f"{len(requests)} requests it made on the board")
        finally:
            with self._cond:
                self._requests = self._current = None
                self._replaying = False
                self._cond.notify_all()

    def write(self, fd, data):
        with self._cond:
            requests, replaying = self._requests, self._replaying
            if replaying:
                request = requests[self._next] if self._next < len(requests) else None
                if request is None or not request.same_request(data):
                    raise RuntimeError("a paced call on kept inputs made a request it did not "
                                       "make on the board")
                self._next += 1
                seq = memoryview(data).cast("B")[3]
                started = time.perf_counter()
                self._current = [request, started, 0, seq]
                self._cond.notify_all()
            elif requests is not None:
                self._current = [_Request(bytes(data), self._model.clock_s,
                                          len(self._model.transfers), bytearray()), 0.0, 0, 0]
                requests.append(self._current[0])
        if not replaying:
            return self._model.write(fd, data)
        for end in request.h2c:
            self._wait(started + end)
        return len(data)

    def readinto(self, fd, buffer):
        with self._cond:
            replaying = self._replaying
            if replaying:
                self._cond.wait_for(lambda: not self._replaying or self._unread())
                if not self._replaying:
                    raise OSError(errno.ETIMEDOUT, os.strerror(errno.ETIMEDOUT))
                request, started, given, seq = self._current
                count = min(len(buffer), len(request.reply) - given)
                buffer[:count] = memoryview(request.reply)[given:given + count]
                if not given and buffer[3] != seq:
                    # The reply answers the request written now: its sequence number, and so
                    # its header's check.
                    buffer[3] = seq
                    buffer[8:HEADER_SIZE] = struct.pack("<I", crc32(bytes(buffer[:8])))
                self._current[2] = given + count
                deadline = started + _arrival_s(request.c2h, given + count)
        if replaying:
            self._wait(deadline)
            return count
        count = self._model.readinto(fd, buffer)
        with self._cond:
            if self._requests is not None and self._current is not None:
                self._current[0].reply += bytes(memoryview(buffer)[:count])
        return count

    def read(self, fd, size):
        buffer = bytearray(size)
        return bytes(buffer[:self.readinto(fd, buffer)])

    def _unread(self):
        return self._current is not None and self._current[2] < len(self._current[0].reply)


def _arrival_s(c2h, through):
    """When the reply's first ``through`` bytes have arrived, from ``c2h`` (bytes, end) pairs."""
    arrived = 0
    for nbytes, end in c2h:
        arrived += nbytes
        if arrived >= through:
            return end
    return c2h[-1][1] if c2h else 0.0


def _same_bits(a, b):
    if a.itemsize not in (1, 2, 4, 8):
        return a.tobytes() == b.tobytes()
    unsigned = f"u{a.itemsize}"     # NaN payloads and the sign of zero compared too
    return np.array_equal(a.view(unsigned), b.view(unsigned))
