"""Device cycles per operation: ``maxaccel bench --ratios``, ``--core-link`` and ``--model-pools``.

On a virtual board cycles are deterministic, unlike wall time, so these tables are exact:

* **ratios** (:func:`measure_ratios`): each of :data:`RATIO_OPERATIONS` in device cycles over
  those of a ``reduce_max`` of as many input elements, per dtype (a ratio of 1 runs at the
  link's rate);
* **core against link** (:func:`measure_core_link`): for each board's build report, the rate at
  which its core takes an operation's request bytes over its link's rate (above 1 the link is
  the limit); the table is saved beside the reports (:data:`CORE_LINK_FILE`);
* **the pools of a model core** (:func:`measure_model_pools`, ``maxaccel bench
  --model-pools``): for each build report of a core built for models, its models' MaxPools on
  that core, their cycles at the board's clock against their link-bound time
  (:data:`MODEL_POOLS_FILE`, beside the reports).

The MaxPool table is ``bench/pools.py``'s; wall-clock throughput, ``bench/__init__.py``'s.
"""

from dataclasses import asdict, dataclass, fields

import numpy as np

from maxaccel.bench import random_tensor, square_shape

__all__ = ["RATIO_OPERATIONS", "RATIO_DTYPES", "Ratio", "NoCycleCounter", "cycle_counter",
           "measure_ratios", "ratio_line", "format_ratios", "measure_core_link",
           "format_core_link", "CORE_LINK_FILE", "CORE_LINK_COMMAND", "load_core_link",
           "MODEL_POOLS_FILE", "MODEL_POOLS_COMMAND", "report_models", "measure_model_pools",
           "format_model_pools", "load_model_pools"]


def _row_col(rng, n, dt):
    rows, columns = square_shape(n)
    return (random_tensor(rng, (rows, columns), dt), random_tensor(rng, (1, columns), dt),
            random_tensor(rng, (rows, 1), dt))


#: name -> (inputs(rng, elements, dtype), device/reference call); each is compared with a
#: ``reduce_max`` of one tensor of as many elements as all its inputs together. A row is one
#: more entry: ``inputs`` makes the operands of about ``elements`` elements each in the dtype
#: given, ``call(m, *inputs)`` runs it on ``m``, a :class:`~maxaccel.host.device.Device` or
#: :mod:`maxaccel.sim.reference`.
def _sixteen_runs(rng, n, dt):
    """One ``(1, 16, n / 16)`` tensor: 16 runs along its last axis."""
    return (random_tensor(rng, (1, 16, max(1, n // 16)), dt),)


RATIO_OPERATIONS = {
    "ReduceMax / GlobalMaxPool": (
        _sixteen_runs,
        # GlobalMaxPool takes floats only; an integer tensor reduces its spatial axis.
        lambda m, x: (m.global_max_pool(x) if x.dtype.kind == "f"
                      else m.reduce_max(x, axes=(2,)))),
    # The ReduceMax row's tensor and runs, through REDUCE's minimum select.
    "ReduceMin": (_sixteen_runs, lambda m, x: m.reduce_min(x, axes=(2,))),
    # The same tensor's positions along the same runs, through REDUCE's arg select (and, for
    # ArgMin, its minimum select).
    "ArgMax": (_sixteen_runs, lambda m, x: m.arg_max(x, axis=2)),
    "ArgMin": (_sixteen_runs, lambda m, x: m.arg_min(x, axis=2)),
    "max(a, b), same shape": (
        lambda rng, n, dt: tuple(random_tensor(rng, (n,), dt) for _ in range(2)),
        lambda m, *x: m.max(*x)),
    # The row above through MAX's minimum select.
    "min(a, b), same shape": (
        lambda rng, n, dt: tuple(random_tensor(rng, (n,), dt) for _ in range(2)),
        lambda m, *x: m.min(*x)),
    "max(a, b, c), same shape": (
        lambda rng, n, dt: tuple(random_tensor(rng, (n,), dt) for _ in range(3)),
        lambda m, *x: m.max(*x)),
    "max(a, row, col)": (_row_col, lambda m, *x: m.max(*x)),
    # ResNet's stem pool on its 64 channels of a square image (64 x 64 at 2^18 elements): 32
    # int8 images fill a 32-byte link word.
    "MaxPool 3x3 stride 2 pads 1": (
        lambda rng, n, dt: (random_tensor(rng, (1, 64) + square_shape(max(1, n // 64)), dt),),
        lambda m, x: m.max_pool(x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
}

#: The dtypes of the ratio table.
RATIO_DTYPES = ("float32", "float16", "int8", "float64")


@dataclass
class Ratio:
    """One operation's device cycles against a ReduceMax of the same input bytes;
    ``request_bytes``: the bytes the host sent for the operation (frames, parameter blocks and
    data), which the core took in ``cycles``."""

    where: str
    operation: str
    dtype: str
    elements: int
    cycles: int
    reduce_cycles: int
    request_bytes: int

    @property
    def ratio(self):
        return self.cycles / self.reduce_cycles

    def as_dict(self):
        return {**asdict(self), "ratio": self.ratio}

    @classmethod
    def from_dict(cls, figures):
        """The inverse of :meth:`as_dict`, its derived ``ratio`` left out: a figure read back
        from the file ``maxaccel bench --json`` writes."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in figures.items() if k in names})


class NoCycleCounter(ValueError):
    """The device is not a virtual board: it has no clock cycles to count."""


def cycle_counter(device):
    """The virtual board behind ``device`` (its transport, unwrapped), which counts cycles.

    Raises
    ------
    NoCycleCounter
        A device that is not a virtual board.
    """
    transport = device.link.transport
    transport = getattr(transport, "inner", transport)         # a TimedTransport's
    transport = getattr(transport, "board", transport)         # a SimTransport's board
    if not hasattr(transport, "cycles"):
        raise NoCycleCounter(f"{device.url!r} does not count cycles: ratios need a virtual "
                             f"board (sim or verilator)")
    return transport


def measure_ratios(device, elements=1 << 18, *, dtypes=RATIO_DTYPES, operations=None, seed=0,
                   progress=None):
    """Device cycles of each of :data:`RATIO_OPERATIONS` (``elements`` per operand) over those
    of a ``reduce_max`` of as many input elements, per dtype, on a virtual board (cycles are
    deterministic, unlike wall time). Every result is checked against the golden model.

    Returns
    -------
    list of Ratio
    """
    from maxaccel.sim import reference
    board = cycle_counter(device)
    rng = np.random.default_rng(seed)

    def cycles(call):
        start, sent = board.cycles, device.link.bytes_written
        result = call()
        return result, board.cycles - start, device.link.bytes_written - sent

    results = []
    for dtype in dtypes:
        for name in operations or RATIO_OPERATIONS:
            make, call = RATIO_OPERATIONS[name]
            inputs = make(rng, elements, np.dtype(dtype))
            result, spent, sent = cycles(lambda: call(device, *inputs))
            reference.assert_same_bits(result, call(reference, *inputs),
                                       f"{name} {[x.shape for x in inputs]}")
            flat = random_tensor(rng, (sum(x.size for x in inputs),), np.dtype(dtype))
            result, baseline, _ = cycles(lambda: device.reduce_max(flat))
            reference.assert_same_bits(result, reference.reduce_max(flat), "reduce_max")
            results.append(Ratio(device.url, name, str(np.dtype(dtype)), elements, spent,
                                 baseline, sent))
            if progress is not None:
                progress(results[-1])
    return results


def ratio_line(r):
    """One :class:`Ratio` as a progress line."""
    return (f"{r.dtype:<8} {r.operation:<26} {r.cycles:>9} cycles, ReduceMax "
            f"{r.reduce_cycles:>9}: {r.ratio:.3f}")


def format_ratios(ratios):
    """The ratios as a markdown table: one row per operation, one column per dtype."""
    dtypes = list(dict.fromkeys(r.dtype for r in ratios))
    table = {(r.operation, r.dtype): r.ratio for r in ratios}
    lines = ["| operation | " + " | ".join(dtypes) + " |", "|---|" + "---|" * len(dtypes)]
    for operation in dict.fromkeys(r.operation for r in ratios):
        cells = [f"{table[operation, d]:.2f}" if (operation, d) in table else "-"
                 for d in dtypes]
        lines.append(f"| {operation} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def measure_core_link(report, elements=1 << 18, *, dtypes=RATIO_DTYPES, progress=None):
    """Core against link, per operation, for the board of a build ``report``
    (:func:`maxaccel.boards.targets.load_reports`).

    The board's core (its target's capacities and units, the report's lanes and clock, and its
    link word: ``core_bytes_per_s`` over the clock, 32 bytes behind the NiteFury's XDMA, one
    behind a UART) runs :data:`RATIO_OPERATIONS` on the compiled virtual board. For each
    operation, the rate at which the core takes the operation's request bytes (bytes sent over
    cycles, at the board's clock) over the link's payload rate (``link_bytes_per_s``): the
    peak ratio ``core_bytes_per_s / link_bytes_per_s`` times the share of its cycles in which
    the core took a full link word. Above 1 the link is the limit.

    Returns
    -------
    dict
        operation -> {dtype: core/link}
    """
    from maxaccel.boards.build import core_parameters
    from maxaccel.boards.targets import target
    clock_hz = report["clock_mhz"] * 1e6
    parameters = core_parameters(target(report["board"]), report["lanes"], report["clock_mhz"])
    with _board_of(report, parameters) as device:
        ratios = measure_ratios(device, elements, dtypes=dtypes, progress=progress)
    table = {}
    for r in ratios:
        rate = clock_hz * r.request_bytes / r.cycles
        table.setdefault(r.operation, {})[r.dtype] = rate / report["link_bytes_per_s"]
    return table


def _board_of(report, parameters, virtual_board="verilator"):
    """A :class:`~maxaccel.host.device.Device` on the virtual board of a build ``report``'s
    core (``parameters``, the Core's) with the report's link word: ``core_bytes_per_s`` over
    the clock, 32 bytes behind the NiteFury's XDMA, one behind a UART."""
    from maxaccel.host.device import Device
    from maxaccel.host.transport import SimTransport
    link_bytes = round(report["core_bytes_per_s"] / (report["clock_mhz"] * 1e6))
    # Only what IDENTIFY reports: the virtual boards' own clock keeps one model for all clocks.
    parameters = {name: value for name, value in parameters.items() if name != "clock_hz"}
    transport = SimTransport(virtual_board, link_bytes=link_bytes, **parameters)
    return Device(transport, url=f"{virtual_board}:{report['board']}")


def format_core_link(core_link):
    """``{board: measure_core_link(...)}`` as a markdown table: one row per board, one column
    per operation, each cell the lowest core/link over the dtypes."""
    operations = list(dict.fromkeys(op for table in core_link.values() for op in table))
    lines = ["| board | " + " | ".join(operations) + " |", "|---|" + "---|" * len(operations)]
    for board, table in core_link.items():
        cells = [f"{min(table[op].values()):.2f}x" if op in table else "-"
                 for op in operations]
        lines.append(f"| {board} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: The core/link table of the board reports (:func:`measure_core_link` of each), beside them.
CORE_LINK_FILE = "core_link.json"
#: The command that measures it.
CORE_LINK_COMMAND = "maxaccel bench --core-link"


def load_core_link(directory=None):
    """The core/link table saved beside the board reports in ``directory`` (default
    :func:`maxaccel.boards.targets.reports_dir`): ``{board: {operation: {dtype: figure}}}``,
    or None if there is none."""
    import json
    import pathlib
    from maxaccel.boards.targets import reports_dir
    path = pathlib.Path(reports_dir() if directory is None else directory) / CORE_LINK_FILE
    return json.loads(path.read_text())["boards"] if path.exists() else None


#: The model pools' table (:func:`measure_model_pools` of each model build report), beside the
#: board reports, and the command that measures it.
MODEL_POOLS_FILE = "model_pools.json"
MODEL_POOLS_COMMAND = "maxaccel bench --model-pools --model-pools-json docs/boards/model_pools.json"


def report_models(report):
    """``[(name, onnx.ModelProto), ...]`` of the models a model build report names (its
    ``"models"``): the bench's built-in models by name
    (:data:`maxaccel.bench.models.BUILT_IN`), others the source tree's ``examples/NAME.onnx``.

    Raises
    ------
    FileNotFoundError
        A model that is neither.
    """
    import pathlib

    from maxaccel.bench.models import BUILT_IN, build
    from maxaccel.boards.targets import reports_dir
    from maxaccel.host.offload import read_model
    models = []
    for name in report["models"]:
        if name in BUILT_IN:
            models.append((name, build(name)[1]))
            continue
        path = pathlib.Path(reports_dir()).parent.parent / "examples" / f"{name}.onnx"
        if not path.is_file():
            raise FileNotFoundError(f"{report['board']}'s model core was built for {name!r}: "
                                    f"not a built-in model and no {path}")
        models.append((name, read_model(str(path))))
    return models


def measure_model_pools(report, models, *, virtual_board="verilator", seed=0, progress=None):
    """The MaxPools of ``models`` (``(name, model)`` pairs, :func:`report_models`) on the core
    a model build ``report`` was built with (its ``"core"``), on the compiled virtual board
    (``virtual_board``: ``"sim"`` counts the same cycles, thousands of times slower) with the
    board's link word (a byte a cycle behind a UART), each against the golden model.

    Returns
    -------
    list of dict
        Per MaxPool: ``model``, ``node``, ``shape``, ``dtype``, ``kernel``, ``route`` (the
        command the host chose), ``cycles`` (the core's, from the request's first byte to the
        reply's last), ``core_s`` (those cycles at the board's clock), ``link_bytes`` (both
        ways) and ``link_s`` (their time at the link's rate: above ``core_s``, the link is the
        limit).
    """
    from maxaccel.host.model_core import model_steps
    from maxaccel.host.offload.steps import indices_wanted, prepare
    from maxaccel.sim import reference
    clock_hz = report["clock_mhz"] * 1e6
    parameters = {name: tuple(value) if name == "units" else value
                  for name, value in report["core"].items()}
    rng = np.random.default_rng(seed)
    rows = []
    with _board_of(report, parameters, virtual_board) as device:
        board, link = cycle_counter(device), device.link
        for name, model in models:
            for s in model_steps(model, name):
                node = s.step.node
                if node.op_type != "MaxPool":
                    continue
                x = random_tensor(rng, s.shape, np.dtype(s.dtype))
                wanted = indices_wanted(node.op_type, s.step.outputs)
                start, moved = board.cycles, link.bytes_written + link.bytes_read
                result = prepare(device, node.op_type, s.step.attributes, wanted)(x)
                cycles = board.cycles - start
                moved = link.bytes_written + link.bytes_read - moved
                reference.assert_same_bits(
                    result, prepare(reference, node.op_type, s.step.attributes, wanted)(x),
                    f"{name} {s.step.name}")
                kernel = s.step.attributes["kernel_shape"]
                rows.append({"model": name, "node": s.step.name, "shape": list(s.shape),
                             "dtype": s.dtype, "kernel": list(kernel),
                             "route": device.last_max_pool_route.name, "cycles": cycles,
                             "core_s": cycles / clock_hz, "link_bytes": moved,
                             "link_s": moved / report["link_bytes_per_s"]})
                if progress is not None:
                    progress(rows[-1])
    return rows


def format_model_pools(model_pools):
    """``{board: measure_model_pools(...)}`` as a markdown table, a row per board and pool:
    its cycles, their time at the board's clock, the link-bound time, and the link's time over
    the core's (above 1 the link is the limit)."""
    lines = ["| board | model | node | input | kernel | route | cycles | core time | "
             "link-bound time | link / core |", "|---|---|---|---|---|---|---:|---:|---:|---:|"]
    for board, rows in model_pools.items():
        for r in rows:
            lines.append(
                f"| {board} | {r['model']} | {r['node']} | {'x'.join(map(str, r['shape']))} "
                f"{r['dtype']} | {'x'.join(map(str, r['kernel']))} | {r['route']} | "
                f"{r['cycles']} | {_duration(r['core_s'])} | {_duration(r['link_s'])} | "
                f"{r['link_s'] / r['core_s']:.1f}x |")
    return "\n".join(lines)


def _duration(seconds):
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def load_model_pools(directory=None):
    """The model pools' table saved beside the board reports in ``directory`` (default
    :func:`maxaccel.boards.targets.reports_dir`): ``{board: [row, ...]}``, or None if there is
    none."""
    import json
    import pathlib
    from maxaccel.boards.targets import reports_dir
    path = pathlib.Path(reports_dir() if directory is None else directory) / MODEL_POOLS_FILE
    return json.loads(path.read_text())["boards"] if path.exists() else None
