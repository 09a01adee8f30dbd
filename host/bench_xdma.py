"""The XDMA link's modelled throughput against the host's transfer size
(``maxaccel bench --device xdma-model:verilator --transfers``).

Behind ``xdma-model:BOARD`` the host's ``xdma://`` transport talks to the XDMA driver's double
(:mod:`maxaccel.sim.xdma_driver`), which keeps the time each DMA transfer would take on a
NiteFury: a fixed cost per transfer and the link's rate (``docs/boards.md``, "The XDMA link").
For each transfer size, a ReduceMax whose every request carries one run of about that many
bytes (one host-to-card transfer a request, a few-byte reply) runs through it, checked bit for
bit against the golden model; its payload bytes over the modelled time are what a NiteFury
user gets from requests of that size.
"""

from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["TRANSFER_SIZES", "TransferMeasurement", "measure_transfers", "format_transfers",
           "default_total_bytes"]

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
        Bytes of each request's host-to-card transfer (the frame: payload and framing).
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
    model = getattr(device.link.transport, "model", None)
    if model is None:
        raise ValueError(f"{device.url!r} is no xdma-model:BOARD device: the modelled "
                         f"transfer times come from the XDMA driver's double")
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
            requests = device.link.requests
            result = device.reduce_max(x, axes=[1])
            expected = reference.reduce_max(x, axes=[1])
            if result.tobytes() != expected.tobytes():
                raise RuntimeError(f"ReduceMax through {device.url!r} differs from the golden "
                                   f"model at {size}-byte transfers")
            writes = [t.nbytes for t in model.transfers if t.direction == "h2c"]
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


def format_transfers(measurements, link_bytes_per_s):
    """A markdown table: transfer size, modelled MB/s, share of the link's rate."""
    lines = ["| transfer | requests | modelled MB/s | of the link |", "|---|---|---|---|"]
    for m in measurements:
        lines.append(f"| {m.transfer_bytes} B | {m.requests} | {m.bytes_per_s / 1e6:.1f} | "
                     f"{m.bytes_per_s / link_bytes_per_s:.1%} |")
    return "\n".join(lines)
