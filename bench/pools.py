"""The MaxPool table of ``maxaccel bench --ratios``: MaxPool classes of real networks in device
cycles, over a ReduceMax of the bytes the pool must move over the link (its larger of input and
output, Indices included), on a virtual board; ``--pool-routes`` times the pools the pooling
unit takes through ``REDUCE`` too.

:data:`POOL_CLASSES` is the one list of the classes: ``tests/test_pool_classes.py`` (their
exact cycles) and ``docs/benchmarks.md`` take the rows from here. The figures of both tables
that page quotes are those of one ``maxaccel bench --ratios --json`` file, :data:`RATIOS_FILE`
(:func:`load_ratio_tables`); the tests assert the device's cycles against it and the page's
tables against :func:`format_pool_ratios` and ``bench_cycles.format_ratios`` of it.
"""

import math
from dataclasses import dataclass

import numpy as np

from maxaccel.contract.wire import Command
from maxaccel.bench import random_tensor
from maxaccel.bench.cycles import Ratio, cycle_counter

__all__ = ["PoolClass", "POOL_CLASSES", "POOL_DTYPES", "PoolRatio", "measure_pool_ratios",
           "pool_ratio_line", "format_pool_ratios", "RATIOS_FILE", "RATIOS_COMMAND",
           "load_ratio_tables", "format_link_elements"]



@dataclass(frozen=True)
class PoolClass:
    """One MaxPool configuration of the MaxPool ratio table.

    Attributes
    ----------
    label : str
        The pool's attributes, short (the row's name is this and the shape's ``C x D1..Dn``).
    shape : tuple of int
        The input ``N x C x D1..Dn``.
    attributes : dict
        ``max_pool`` keyword arguments (``kernel_shape``, ``strides``, ``pads``, ...).
    return_indices : bool
        Whether the pool returns its Indices too.
    where : str
        The networks that pool this way.
    """

    label: str
    shape: tuple
    attributes: dict
    return_indices: bool = False
    where: str = ""

    @property
    def name(self):
        """The row's name: ``label, C x D1..Dn``."""
        return f"{self.label}, {'x'.join(str(n) for n in self.shape[1:])}"

    def with_channels(self, channels):
        """The same pool on ``channels`` channels (a scaled-down row; None: as it is)."""
        if channels is None:
            return self
        return PoolClass(self.label, self.shape[:1] + (channels,) + self.shape[2:],
                         self.attributes, self.return_indices, self.where)

    def call(self, m, x, **route):
        """The pool of ``x`` on ``m`` (a Device or :mod:`maxaccel.sim.reference`; ``route``:
        :meth:`~maxaccel.host.device.Device.max_pool`'s, for a Device)."""
        return m.max_pool(x, **self.attributes, return_indices=self.return_indices, **route)

    def link_bytes(self, itemsize):
        """The bytes a pool of this class must move over the link one way or the other: the
        larger of its input and its output (values, and Indices as ``MAX_POOL`` replies carry
        them: :data:`~maxaccel.contract.wire.WINDOW_INDEX_BYTES` each). A ReduceMax of that
        many bytes is the link-bound time the table divides by."""
        from maxaccel.contract.pooling import resolve_max_pool
        from maxaccel.contract.wire import WINDOW_INDEX_BYTES
        outputs = math.prod(resolve_max_pool(self.shape, **self.attributes).output_shape)
        per_output = itemsize + (WINDOW_INDEX_BYTES if self.return_indices else 0)
        return max(math.prod(self.shape) * itemsize, outputs * per_output)


def _pads(rank, pad):
    return [pad] * (2 * rank)


def _values(rng, shape, dtype):
    """Random values of ``dtype``: normal for floats, the whole range for integers."""
    if dtype.kind == "f":
        return random_tensor(rng, shape, dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


#: The MaxPool classes of ``maxaccel bench --ratios``, at the networks' own shapes.
#: The tests (``tests/test_pool_classes.py``: their exact cycles) and docs/benchmarks.md take
#: the rows from here.
POOL_CLASSES = (
    PoolClass("3x3 s2 p1", (1, 64, 147, 147),
              dict(kernel_shape=[3, 3], strides=[2, 2], pads=_pads(2, 1)),
              where="Inception v3 stem"),
    PoolClass("2x2 s2", (1, 64, 224, 224),
              dict(kernel_shape=[2, 2], strides=[2, 2]), where="VGG"),
    PoolClass("2x2 s2", (1, 64, 256, 256),
              dict(kernel_shape=[2, 2], strides=[2, 2]), where="U-Net encoder"),
    PoolClass("3x3 s1 p1", (1, 80, 128, 128),
              dict(kernel_shape=[3, 3], pads=_pads(2, 1)), where="CenterNet peak picking"),
    *(PoolClass(f"{k}x{k} s1 p{k // 2}", (1, c, n, n),
                dict(kernel_shape=[k, k], pads=_pads(2, k // 2)), where="SPP / SPPF blocks")
      for c, n in ((256, 13), (128, 20)) for k in (5, 9, 13)),
    PoolClass("k4 s4", (1, 64, 996), dict(kernel_shape=[4], strides=[4]),
              where="audio CNN"),
    PoolClass("k2 s2", (1, 32, 8000), dict(kernel_shape=[2], strides=[2]),
              where="audio CNN"),
    PoolClass("3x3x3 s2 p1", (1, 64, 16, 28, 28),
              dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=_pads(3, 1)),
              where="3-D CNN"),
    PoolClass("3x3 s2 p1 + Indices", (1, 64, 112, 112),
              dict(kernel_shape=[3, 3], strides=[2, 2], pads=_pads(2, 1)),
              return_indices=True, where="ResNet stem, MaxUnpool"),
)

#: The dtypes of the MaxPool table.
POOL_DTYPES = ("float32", "float16", "uint8")


@dataclass
class PoolRatio(Ratio):
    """One MaxPool class's device cycles against a ReduceMax of its
    :meth:`PoolClass.link_bytes`; ``route``: the command the pool ran through;
    ``reduce_route_cycles``: the same pool's cycles through ``REDUCE`` when it ran through
    ``MAX_POOL`` and that was measured too (else 0)."""

    route: str = ""
    reduce_route_cycles: int = 0


def measure_pool_ratios(device, classes=POOL_CLASSES, *, dtypes=POOL_DTYPES, seed=0,
                        both_routes=False, channels=None, progress=None):
    """Device cycles of each MaxPool class over those of a ``reduce_max`` of its link bytes
    (:meth:`PoolClass.link_bytes`), per dtype, on a virtual board; every result (values and
    Indices) checked against the golden model. With ``both_routes``, a pool that went through
    ``MAX_POOL`` is also timed through ``REDUCE`` (the fallback route), to show which is faster.
    ``channels`` runs every class on that many channels instead of its own (a quicker table).

    Returns
    -------
    list of PoolRatio
        ``elements``: those of the ReduceMax.
    """
    from maxaccel.sim import reference
    board = cycle_counter(device)
    rng = np.random.default_rng(seed)
    results = []
    for dtype in dtypes:
        dtype = np.dtype(dtype)
        for pool in classes:
            pool = pool.with_channels(channels)
            x = _values(rng, pool.shape, dtype)
            start, sent = board.cycles, device.link.bytes_written
            result = pool.call(device, x)
            spent, sent = board.cycles - start, device.link.bytes_written - sent
            route = device.last_max_pool_route.name
            want = pool.call(reference, x)
            results_to_check = [result]
            reduce_route = 0
            if both_routes and route == "MAX_POOL":
                start = board.cycles
                results_to_check.append(pool.call(device, x, route=Command.REDUCE))
                reduce_route = board.cycles - start
            for each in results_to_check:
                for got, expected in zip(*((each, want) if pool.return_indices
                                           else ((each,), (want,)))):
                    reference.assert_same_bits(got, expected, f"{pool.name} {dtype}")
            elements = -(-pool.link_bytes(dtype.itemsize) // dtype.itemsize)
            flat = _values(rng, (elements,), dtype)
            start = board.cycles
            reference.assert_same_bits(device.reduce_max(flat), reference.reduce_max(flat),
                                       "reduce_max")
            results.append(PoolRatio(device.url, pool.name, str(dtype), elements, spent,
                                     board.cycles - start, sent, route, reduce_route))
            if progress is not None:
                progress(results[-1])
    return results


def pool_ratio_line(r):
    """One :class:`PoolRatio` as a progress line."""
    line = (f"{r.dtype:<8} {r.operation:<34} {r.route:<8} {r.cycles:>9} cycles, ReduceMax "
            f"{r.reduce_cycles:>8}: {r.ratio:.3f}")
    if r.reduce_route_cycles:
        line += f" (through REDUCE {r.reduce_route_cycles} cycles)"
    return line


def format_pool_ratios(ratios):
    """The MaxPool ratios as a markdown table: one row per class, one column per dtype, each
    cell the ratio and, when the pool did not go through the pooling unit, its route (with
    both routes timed: the REDUCE route's ratio beside the unit's)."""
    dtypes = list(dict.fromkeys(r.dtype for r in ratios))
    table = {(r.operation, r.dtype): r for r in ratios}
    lines = ["| MaxPool | " + " | ".join(dtypes) + " |", "|---|" + "---|" * len(dtypes)]
    for operation in dict.fromkeys(r.operation for r in ratios):
        cells = []
        for d in dtypes:
            r = table.get((operation, d))
            cell = "-" if r is None else f"{r.ratio:.2f}"
            if r is not None and r.route != "MAX_POOL":
                cell += f" ({r.route})"
            elif r is not None and r.reduce_route_cycles:
                cell += f" (REDUCE {r.reduce_route_cycles / r.reduce_cycles:.2f})"
            cells.append(cell)
        lines.append(f"| {operation} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: The ``maxaccel bench --json`` file (in a source tree) holding the figures of the ratio and
#: MaxPool tables that ``docs/benchmarks.md`` quotes, whose cycles ``tests/test_pool_classes.py``
#: asserts exactly; :data:`RATIOS_COMMAND` writes it anew.
RATIOS_FILE = "docs/bench/ratios.json"
#: The command that measures :data:`RATIOS_FILE` (about 10 min with the compiled model cached).
RATIOS_COMMAND = ("maxaccel bench --device verilator --ratios --no-cpu --pool-routes "
                  f"--json {RATIOS_FILE}")


def load_ratio_tables(path):
    """The two cycle tables of a file ``maxaccel bench --ratios --json`` wrote.

    Parameters
    ----------
    path : str or os.PathLike
        The file, such as :data:`RATIOS_FILE`.

    Returns
    -------
    ratios : list of Ratio
        The operations' table (``bench_cycles.format_ratios`` prints it).
    pools : list of PoolRatio
        The MaxPool table (:func:`format_pool_ratios` prints it).
    """
    import json
    import pathlib
    figures = json.loads(pathlib.Path(path).read_text())
    return ([Ratio.from_dict(r) for r in figures["ratios"]],
            [PoolRatio.from_dict(r) for r in figures["pool_ratios"]])


def format_link_elements(identities, classes=POOL_CLASSES, *, dtype="float32",
                         max_frame_bytes=1 << 20):
    """Elements on the link per MaxPool class and board, from the host's planners: a markdown
    table, one row per class: its input plus output elements; per board with a windowed
    pooling unit, the elements ``MAX_POOL`` moves both ways over those (its tiles' halos,
    padding and filler images included; ``-`` when the pool is beyond the unit); last, what
    ``REDUCE`` moves over them, the route of the boards without the unit.

    Parameters
    ----------
    identities : dict of str to Identity
        Board name -> its ``IDENTIFY`` (``maxaccel.boards.build.target_identity``).
    classes : sequence of PoolClass
    dtype : str
    max_frame_bytes : int
        The frames' largest payload (1 MiB: a serial link's).
    """
    from maxaccel.contract.dtypes import format_of
    from maxaccel.contract.pooling import resolve_max_pool
    from maxaccel.host.pool_reduce import plan_reduce_pool
    from maxaccel.host.pool_window import plan_window_pool
    fmt = format_of(np.dtype(dtype))
    with_unit = {board: i for board, i in identities.items() if i.window_lanes}
    without = [board for board, i in identities.items() if not i.window_lanes]
    lines = ["| pool | input + output elements | "
             + " | ".join(f"`MAX_POOL`: {board}" for board in with_unit)
             + f" | `REDUCE`: {', '.join(without)} |",
             "|---|---|" + "---|" * (len(with_unit) + 1)]
    for pool in classes:
        geometry = resolve_max_pool(pool.shape, **pool.attributes)
        elements = math.prod(geometry.input_shape) + math.prod(geometry.output_shape)
        cells = []
        for identity in with_unit.values():
            plan = plan_window_pool(geometry, fmt, identity, max_frame_bytes,
                                    indices=pool.return_indices)
            cells.append("-" if plan is None else f"{plan.wire_elements() / elements:.3f}")
        reduce = plan_reduce_pool(geometry)
        cells.append(f"{(reduce.sent_elements + reduce.output_elements) / elements:.2f}")
        lines.append(f"| {pool.name} | {elements} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
