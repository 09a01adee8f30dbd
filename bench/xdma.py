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

:class:`PacedDevice` answers a call it has seen before with the board's results after the
call's modelled time, waited as the driver waits: whole models timed on it are timed as on a
NiteFury, not after the compiled board's simulation, which lasts a thousand times longer.
"""

from dataclasses import asdict, dataclass, fields
import functools
import time

import numpy as np

from maxaccel.contract.checks import check_out
from maxaccel.contract.dtypes import format_of
from maxaccel.bench import _OperatorWrapper
from maxaccel.host.reduction import store_bits

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
    while time.perf_counter() < deadline:
        pass


def _sleep_until(deadline):
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)


#: How :class:`PacedDevice` waits for a transfer, as the XDMA driver does: asleep until the
#: transfer's interrupt (its default), or polling the engine's write-back (``poll_mode=1``).
WAITS = {"interrupts": _sleep_until, "polling": _spin_until}


class PacedDevice(_OperatorWrapper):
    """A device opened on ``xdma-model:BOARD`` whose calls take the time they would take on a
    NiteFury: what whole models are timed on (``maxaccel bench --paced``).

    The first call of an operation on given inputs (and keyword arguments) runs on the board,
    through the XDMA driver's double; its results, a copy of its inputs and its DMA transfers'
    modelled end times are kept. A later call on inputs of the same bits returns copies of
    those results once the modelled time has passed since the call began: it waits for the
    end of each host-to-card transfer in turn (the request's ``write``), then for the call's
    last transfer (the reply's ``read``), each as the driver waits (``wait``). A call given
    ``out`` (an array for the first result, or a tuple of one array or None per result, as
    :class:`~maxaccel.host.device.Device`'s operations take it) gets those results written
    into it, as the board's reply would be. Any other attribute is the device's. On the compiled
    board a call lasts 0.01-1 s; after that long this machine's caches have lost what the next
    CPU nodes need, as they would after any wait that long (``docs/offload.md``, "Paced as a
    NiteFury"), while a NiteFury's calls on the same tensors take 0.07-0.4 ms.

    Parameters
    ----------
    device : Device
        Opened on ``xdma-model:BOARD`` (:func:`driver_model`).
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
    """

    def __init__(self, device, wait="interrupts"):
        if wait not in WAITS:
            raise ValueError(f"wait must be one of {', '.join(WAITS)}, not {wait!r}")
        self._model = driver_model(device)
        super().__init__(device)
        self._wait = WAITS[wait]
        self._kept = {}
        self.recorded = self.replayed = 0
        self.url = f"{device.url}, paced ({wait})"

    def _wrap(self, name, method):
        @functools.wraps(method)    # its signature: whether it takes ``out``
        def paced(*arrays, out=None, **keywords):
            started = time.perf_counter()
            if out is not None:
                keywords["out"] = out
            if not all(isinstance(a, np.ndarray) for a in arrays) or not _rooms_given(out):
                return method(*arrays, **keywords)     # the device's checks and errors
            key = (name, tuple((a.shape, a.dtype.str) for a in arrays),
                   repr(sorted((k, v) for k, v in keywords.items() if k != "out")))
            for inputs, results, ends in self._kept.get(key, ()):
                if all(_same_bits(a, b) for a, b in zip(arrays, inputs)):
                    several = isinstance(results, tuple)
                    values = results if several else (results,)
                    rooms = out if type(out) is tuple else (out,)
                    if len(rooms) != len(values) and type(out) is tuple:
                        return method(*arrays, **keywords)  # the device's own error
                    rooms += (None,) * (len(values) - len(rooms))
                    for room, y in zip(rooms, values):  # as the device checks, before waits
                        if room is not None:
                            check_out(room, y.shape, format_of(y.dtype), f"{name}()")
                    for end in ends:
                        self._wait(started + end)
                    self.replayed += 1
                    answered = []
                    for room, y in zip(rooms, values):
                        if room is None:
                            answered.append(y.copy())
                        else:
                            store_bits(room, y)
                            answered.append(room)
                    return tuple(answered) if several else answered[0]
            clock, first = self._model.clock_s, len(self._model.transfers)
            results = method(*arrays, **keywords)
            transfers = self._model.transfers[first:]
            writes = [t.end_s - clock for t in transfers if t.direction == "h2c"]
            ends = sorted(writes) + [self._model.clock_s - clock]
            self._kept.setdefault(key, []).append(
                ([a.copy() for a in arrays], _copies(results), ends))
            self.recorded += 1
            return results
        return paced


def _rooms_given(out):
    """Whether ``out`` is one a paced call answers: None, an array, or a tuple of arrays and
    Nones (anything else is the device's to refuse)."""
    if type(out) is tuple:
        return all(isinstance(room, (np.ndarray, type(None))) for room in out)
    return isinstance(out, (np.ndarray, type(None)))


def _same_bits(a, b):
    if a.itemsize not in (1, 2, 4, 8):
        return a.tobytes() == b.tobytes()
    unsigned = f"u{a.itemsize}"     # NaN payloads and the sign of zero compared too
    return np.array_equal(a.view(unsigned), b.view(unsigned))


def _copies(results):
    return tuple(r.copy() for r in results) if isinstance(results, tuple) else results.copy()
