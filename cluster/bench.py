"""Throughput of a :class:`~maxaccel.cluster.pool.BoardPool` against its number of boards, in
device cycles (``python -m maxaccel.cluster bench``).

The boards of a pool work at the same time, each bound by its link; what limits a pool is the
board that is busy longest. So the pool's time for a workload is its *makespan in device
cycles*, not the wall time of a machine whose two cores simulate every board at once. Each
call's cycles are a virtual board's exact count (as ``maxaccel bench --ratios`` counts them);
the pool hands each call to the first board that is free, and with real boards "free" is a
matter of device time, so the makespan is that dispatch replayed in device cycles: each call,
in order, to the board whose calls so far took fewest cycles. (The boards simulated here are
free when the machine's cores let their simulation finish, which hands them calls unevenly:
that split is reported too, as ``board_cycles``, but it measures this machine's scheduler.)
Throughput is the workload's elements over the makespan; with N boards it is at most N times
one board's, less whatever the split leaves unbalanced and the share of each call that does
not shrink with the data (request headers, the checks, the reply).

Two workloads, each checked bit for bit against the golden model:

``run``
    ``BoardPool.run`` of a one-node ReduceMax model over a batch of feeds: one board per run
    (online inference, many requests).
``shard``
    ``BoardPool.reduce_max`` of one tensor of as many elements, cut into one slice per board
    (one large request).
"""

import heapq
import time
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["Scaling", "measure_scaling", "format_scaling", "WORKLOADS"]

WORKLOADS = ("run", "shard")


@dataclass
class Scaling:
    """One workload on a pool of ``boards`` boards.

    Attributes
    ----------
    call_cycles : list of int
        Device cycles of each call, in order.
    board_cycles : list of int
        Device cycles each board spent on the workload as the calls were dispatched here
        (by which simulated board finished first on this machine's cores).
    seconds : float
        Wall time of the workload here (every virtual board simulated on this machine's
        cores: it says what the simulation cost, not what boards would take).
    """

    workload: str
    boards: int
    elements: int
    call_cycles: list
    board_cycles: list
    seconds: float

    @property
    def makespan(self):
        """The pool's time for the workload in device cycles, with the pool's dispatch in
        device time: each call in order to the board whose calls so far took fewest cycles;
        the busiest board's total."""
        free = [0] * self.boards
        for cycles in self.call_cycles:
            heapq.heapreplace(free, free[0] + cycles)
        return max(free)

    @property
    def elements_per_cycle(self):
        return self.elements / self.makespan

    def as_dict(self):
        return {**asdict(self), "makespan": self.makespan,
                "elements_per_cycle": self.elements_per_cycle}


def _reduce_model(shape, dtype):
    from onnx import helper
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["y"], keepdims=0)], "reduce",
        [helper.make_tensor_value_info("x", elem, list(shape))],
        [helper.make_tensor_value_info("y", elem, [])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                             ir_version=10).SerializeToString()


def measure_scaling(counts=(1, 2, 4), url="verilator", *, elements=1 << 18, batch=16,
                    dtype="float32", workloads=WORKLOADS, seed=0, address=None, progress=None):
    """Device cycles of each workload on pools of ``counts`` boards of ``url``.

    Parameters
    ----------
    counts : sequence of int
        Pool sizes to measure.
    url : str
        A virtual board's URL (``"verilator"``, ``"sim"``...): only they count cycles.
    elements : int
        Elements of each run's tensor; the ``shard`` tensor has ``batch`` times as many.
    batch : int
        Runs of the ``run`` workload.
    address : str, optional
        A Ray cluster to join; default: a local one for the measurement.
    progress : callable, optional
        Called with each :class:`Scaling` as it is measured.

    Returns
    -------
    list of Scaling

    Raises
    ------
    ValueError
        A board that counts no cycles, a bad count, size or workload (before any pool opens).
    AssertionError
        A result that differs from the golden model by a bit.
    """
    import ray

    from maxaccel.cluster.pool import BOARD_RESOURCE, BoardPool
    from maxaccel.contract.checks import REDUCE_MAX_DTYPES, check_dtype
    from maxaccel.contract.dtypes import format_of
    from maxaccel.host.transport import SimTransport, _parse
    from maxaccel.sim import reference
    counts = [int(n) for n in counts]
    if not counts or min(counts) < 1:
        raise ValueError(f"pool sizes must be at least 1, got {counts}")
    if elements < 1 or batch < 1:
        raise ValueError(f"elements and batch must be at least 1, got {elements}, {batch}")
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workload(s) {unknown}; known: {', '.join(WORKLOADS)}")
    check_dtype(format_of(dtype), REDUCE_MAX_DTYPES, "reduce_max() (ONNX ReduceMax)")
    if _parse(url)[0] not in SimTransport.BOARDS:
        raise ValueError(f"{url!r} counts no device cycles: measure virtual boards (sim, "
                         f"verilator, netlist:BOARD)")
    rng = np.random.default_rng(seed)
    shape = (elements,)
    feeds = [{"x": (rng.standard_normal(shape) * 100).astype(dtype)} for _ in range(batch)]
    model = _reduce_model(shape, dtype)
    big = np.concatenate([f["x"] for f in feeds])
    want_runs = [reference.reduce_max(f["x"], keepdims=False) for f in feeds]
    want_big = reference.reduce_max(big, keepdims=False)
    started = False
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, logging_level="WARNING",
                 log_to_driver=False,
                 **({} if address else {"resources": {BOARD_RESOURCE: max(counts)}}))
        started = True
    results = []
    try:
        for count in counts:
            with BoardPool([url] * count) as pool:
                for workload in workloads:
                    before = pool.cycles()
                    started_at = time.perf_counter()
                    if workload == "run":
                        got = pool.run(model, feeds)
                        for index, (outputs, want) in enumerate(zip(got, want_runs)):
                            reference.assert_same_bits(outputs[0], want, f"run {index}")
                    else:
                        reference.assert_same_bits(pool.reduce_max(big, keepdims=False),
                                                   want_big, "shard")
                    seconds = time.perf_counter() - started_at
                    spent = [a - b for a, b in zip(pool.cycles(), before)]
                    calls = [cycles for _, cycles in pool.last_calls]
                    results.append(Scaling(workload, count, big.size, calls, spent, seconds))
                    if progress is not None:
                        progress(results[-1])
    finally:
        if started:
            ray.shutdown()
    return results


def format_scaling(results):
    """The measurements as a markdown table, each workload's speed-up over its one-board
    figure (or over its smallest pool measured)."""
    base = {}
    for r in sorted(results, key=lambda r: r.boards):
        base.setdefault(r.workload, r)
    lines = ["| workload | boards | elements | calls | makespan (cycles) | elements/cycle | "
             "speed-up | per board | cycles per board as dispatched here | wall s here |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        first = base[r.workload]
        speedup = (r.elements_per_cycle / first.elements_per_cycle)
        lines.append(f"| {r.workload} | {r.boards} | {r.elements} | {len(r.call_cycles)} | "
                     f"{r.makespan} | {r.elements_per_cycle:.2f} | {speedup:.2f} | "
                     f"{speedup * first.boards / r.boards:.2f} | "
                     f"{' '.join(map(str, r.board_cycles))} | {r.seconds:.1f} |")
    return "\n".join(lines)
