"""A core for your model: the units and capacities a board's core needs for the max-family
nodes of one or more ONNX models, each node's route on it, and whether it fits the board.

:func:`choose_core` reads each model as :class:`~maxaccel.host.offload.OffloadSession`
partitions it (:func:`~maxaccel.host.partition.partition`, shapes from ONNX shape inference,
the nodes named as the session names them) and asks the host's own planners what they would
do with each device step on a candidate core, given that core's ``IDENTIFY``
(:func:`~maxaccel.boards.targets.core_identity`): the node's call goes, with stand-in arrays of
its inputs' shapes (no data), through the session's own mapping of a node onto a device call
(:func:`~maxaccel.host.offload.steps.prepare`) to a :class:`RoutePlanner`, which plans it as
:class:`~maxaccel.host.device.Device` does (:func:`~maxaccel.host.device.plan_max_pool`,
:func:`~maxaccel.host.reduction.plan_reduction`,
:func:`~maxaccel.host.max_passes.expands_on_host`) and counts the bytes it puts on the link.

The choice:

* ``REDUCE`` is built unless the board cannot hold it (the last point). The windowed pooling
  unit (``window``), the channels-last pooling unit (``pool``) and the broadcast unit
  (``broadcast``) are built only if some node needs one: on a core with every unit, the
  planner routes the node through the unit, and that puts fewer bytes on the link than the
  node's route on a core of ``REDUCE`` alone.
  (A non-overlapping MaxPool, kernel = stride, or a channels-last reduction costs the link
  the same through ``REDUCE``, so neither asks for a unit.)
* The windowed unit's kernel extents are the largest of the nodes that need it (the two
  inner axes, and the outermost of 3-D pools, 1 without them); its line buffer holds the
  widest of their output rows, to the next power of two, at most the board's (or the Core's
  default, 64; wider pools go in tiles); its plane buffer likewise, where a 3-D pool needs
  one. The broadcast unit replays as many operands as a node has, in a buffer of as many
  beats as a node's pass takes (to a power of two), walking as many outer dimensions; a node
  of more than one pass (operands folded in groups, the output cut in tiles) keeps the
  board's capacities (or the Core's defaults, for a board without the unit), so every pass is
  the one the board's capacities give. When the core's estimate exceeds the board, the
  windowed unit computes its configuration's products serially if the estimate says that is
  smaller (on the iCE40), its lanes update one window at a time if they keep up with the link,
  and its lanes, the board's, are halved while it still does. Lanes, clock and the rest are
  the board's.
* If the core still exceeds the board, fits it without the run reducer, and every node goes
  through a unit, the run reducer is left out: the core serves these models' nodes, and the
  host refuses, before sending, a request only ``REDUCE`` would take (another model's ArgMax,
  a pool beyond the unit's capacities).
* When every node has the same element type, the core is built for that type alone (the
  Core's ``dtype``: about half the reducer's logic, a tenth to a quarter of the other units');
  a request of another type then runs on the golden model on the host.
* Every node's route is then the planner's on the chosen core: the unit or ``REDUCE``, with
  its link-bound time (bytes both ways over the link's rate) and why (``capacity`` when the
  core has the unit and the node is beyond it, ``unit absent`` when it has not).

:meth:`CoreChoice.check` refuses, before any synthesis, a core whose estimated logic
(:mod:`maxaccel.boards.estimate`) exceeds the board's, naming the node that asks for the most
and the nearest board or setting that would hold it.

Never imports amaranth itself: the identity of a candidate core is the gateware's own
definition, which :func:`~maxaccel.boards.targets.core_identity` loads when first asked.
"""

import math
from dataclasses import dataclass, field

import numpy as np
from onnx import numpy_helper

from maxaccel.boards.targets import TARGETS, core_identity, load_reports, target as find_target
from maxaccel.contract.checks import (check_arg, check_global_max_pool, check_max,
                                      check_reduce_max)
from maxaccel.contract.dtypes import format_of
from maxaccel.contract.pooling import check_max_pool, serial_window_cycles
from maxaccel.contract.wire import (WINDOW_FIELD_MAX, WINDOW_INDEX_BYTES, WINDOW_NARROW_FIELDS,
                                    Command)
from maxaccel.host.device import DEFAULT_FRAME_BYTES, max_pool_link_elements, plan_max_pool
from maxaccel.host.max_passes import expands_on_host, operands_per_pass
from maxaccel.host.plan import OutputTiles, plan_max_pass
from maxaccel.host.offload.specs import read_model
from maxaccel.host.offload.steps import indices_wanted, pool_reads, prepare
from maxaccel.host.partition import DeviceStep, node_name, partition
from maxaccel.host.reduction import plan_reduction
from maxaccel.host.transport import XdmaTransport

__all__ = ["CoreChoice", "NodeRoute", "CoreDoesNotFit", "RoutePlanner", "choose_core",
           "model_steps", "UNIT_OF_ROUTE", "UNIT_DEFAULTS", "UNIT_PARAMETERS",
           "absent_unit_settings", "check_unit_settings", "choices_markdown"]

#: The unit each command runs on (``REDUCE`` on the run reducer).
UNIT_OF_ROUTE = {Command.MAX_POOL: "window", Command.POOL_CHANNELS_LAST: "pool",
                 Command.MAX: "broadcast", Command.REDUCE: "reduce"}
#: The optional units, and what the messages call them.
_UNIT_TITLES = {"window": "the windowed pooling unit", "pool": "the channels-last pooling unit",
                "broadcast": "the broadcast unit"}
#: The capacities a unit is given on a board whose own core lacks it: the Core's defaults
#: (``Core.unit_signatures`` in ``hdl/top.py``; a test holds them equal).
UNIT_DEFAULTS = {"window": dict(window_columns=64, window_plane=1024),
                 "pool": dict(pool_channels=32),
                 "broadcast": dict(replay_depth=64, max_dims=4, max_operands=4)}


#: The order in which a chosen core's parameters are given.
_CORE_ORDER = ("units", "dtype", "window_lanes", "window_extent", "window_extent_outer",
               "window_columns", "window_plane", "window_field_max", "window_indices",
               "window_serial_products", "window_serial",
               "pool_channels",
               "replay_depth", "max_dims", "max_operands")

#: Each unit's own Core parameters: none in a core without the unit.
UNIT_PARAMETERS = {"window": ("window_lanes", "window_extent", "window_extent_outer",
                              *UNIT_DEFAULTS["window"], "window_field_max", "window_indices",
                              "window_serial_products", "window_serial"),
                   "pool": tuple(UNIT_DEFAULTS["pool"]),
                   "broadcast": tuple(UNIT_DEFAULTS["broadcast"])}


def absent_unit_settings(settings, units):
    """``[(name, unit)]``: the parameters in ``settings`` of a unit ``units`` leaves out."""
    return [(name, unit) for unit, names in UNIT_PARAMETERS.items() if unit not in units
            for name in names if name in settings]


def check_unit_settings(settings, units):
    """``ValueError`` naming the parameters in ``settings`` of a unit ``units`` leaves out."""
    absent = absent_unit_settings(settings, units)
    if absent:
        raise ValueError(", ".join(f"{name}={settings[name]!r}" for name, _ in absent)
                         + f" set a parameter of {_UNIT_TITLES[absent[0][1]]}, which "
                         f"units={','.join(units)} leaves out")


class CoreDoesNotFit(ValueError):
    """The models need more of the board than it holds (the message names the node and the
    nearest board or setting that would hold it); raised before any synthesis."""


@dataclass(frozen=True)
class Planned:
    """What :class:`RoutePlanner` decides for one device call: the command it runs through,
    the bytes it puts on the link (both ways), and the pool's kernel extents (MaxPool only:
    per spatial axis)."""

    route: Command
    link_bytes: int
    extents: tuple = ()
    output_columns: int = 0
    output_plane: int = 0
    operands: int = 0
    replay_beats: int = 0
    outer_dims: int = 0
    field_max: int = 0
    indices: bool = False


def _pow2(n):
    """The least power of two at least ``n`` (1 for ``n`` < 1)."""
    return 1 << max(n - 1, 0).bit_length()


class RoutePlanner:
    """A device that plans instead of running: the operators' methods of
    :class:`~maxaccel.host.device.Device`, on arrays (stand-ins: only their shapes and dtypes
    are read), each returning a :class:`Planned` from the host's planners for a device with
    ``identity`` and frames of ``frame_bytes``."""

    def __init__(self, identity, frame_bytes=DEFAULT_FRAME_BYTES):
        self.identity = identity
        self.frame_bytes = frame_bytes

    def max_pool(self, x, kernel_shape, strides=None, pads=None, dilations=None,
                 ceil_mode=False, auto_pad="NOTSET", storage_order=0, return_indices=False):
        values, fmt, geometry, indices = check_max_pool(
            x, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad, storage_order,
            return_indices)
        route, plan = plan_max_pool(geometry, fmt, self.identity, self.frame_bytes,
                                    indices=indices)
        link = max_pool_link_elements(route, plan) * fmt.nbytes
        outputs = [a.out_size for a in geometry.axes]
        field_max = max(batch.fields[name] for batch in plan.batches
                        for name in WINDOW_NARROW_FIELDS) if route == Command.MAX_POOL else 0
        return Planned(route, link, tuple((a.kernel - 1) * a.dilation + 1
                                          for a in geometry.axes),
                       output_columns=outputs[-1] if len(outputs) > 1 else 0,
                       output_plane=math.prod(outputs[-2:]) if len(outputs) > 2 else 0,
                       field_max=field_max, indices=indices)

    def _reduce(self, values, fmt, axes, keepdims, minimum=False):
        plan = plan_reduction(values.shape, axes, keepdims, fmt.nbytes, self.identity,
                              self.frame_bytes, minimum)
        return Planned(plan.command, (values.size + plan.output_elements) * fmt.nbytes)

    def reduce_max(self, data, axes=None, keepdims=True, noop_with_empty_axes=False,
                   name="reduce_max"):
        values, fmt, axes, keepdims, noop = check_reduce_max(data, axes, keepdims,
                                                             noop_with_empty_axes, name=name)
        if not axes:
            if noop:
                return Planned(None, 0)
            axes = tuple(range(values.ndim))
        return self._reduce(values, fmt, axes, keepdims, name == "reduce_min")

    def reduce_min(self, data, axes=None, keepdims=True, noop_with_empty_axes=False):
        return self.reduce_max(data, axes, keepdims, noop_with_empty_axes, name="reduce_min")

    def global_max_pool(self, x):
        values, fmt = check_global_max_pool(x)
        return self._reduce(values, fmt, tuple(range(2, values.ndim)), True)

    def max(self, *arrays, name="max"):
        natives, fmt, shape = check_max(arrays, name=name)
        shapes = [(1,) * (len(shape) - v.ndim) + v.shape for v in natives]
        size = math.prod(shape)
        if expands_on_host(shapes, shape, self.identity):
            return Planned(Command.REDUCE, (len(shapes) + 1) * size * fmt.nbytes)
        link = (sum(math.prod(s) for s in shapes) + size) * fmt.nbytes
        broadcasting = any(s != tuple(shape) for s in shapes)
        if len(shapes) > 1 and self.identity.replay_depth:
            return Planned(Command.MAX, link, operands=len(shapes) - 1 if broadcasting else 0,
                           **self._replay(shapes, fmt) if broadcasting else {})
        return Planned(Command.REDUCE, link)

    def _replay(self, shapes, fmt):
        """What a broadcasting Max's one pass (:class:`~maxaccel.host.max_passes.MaxPasses`)
        takes of the replay buffer, ``replay_beats``, and of the unit's outer dimensions,
        ``outer_dims``; the unit's whole capacities when it takes more than one pass (operands
        folded in groups, or the output in tiles)."""
        identity = self.identity
        whole = dict(replay_beats=identity.replay_depth, outer_dims=identity.max_dims)
        if len(shapes) > operands_per_pass(identity):
            return whole
        plan = plan_max_pass(shapes, fmt.nbytes, identity, self.frame_bytes)
        if isinstance(plan, OutputTiles):
            return whole
        return dict(replay_beats=plan.memory_beats, outer_dims=len(plan.dims) - 1)

    def min(self, *arrays):
        return self.max(*arrays, name="min")

    def arg_max(self, data, axis=0, keepdims=True, select_last_index=False, name="arg_max"):
        values, fmt, axis, *_ = check_arg(data, axis, keepdims, select_last_index, name)
        rows = values.size // max(values.shape[axis], 1)
        return Planned(Command.REDUCE, values.nbytes + rows * WINDOW_INDEX_BYTES)

    def arg_min(self, data, axis=0, keepdims=True, select_last_index=False):
        return self.arg_max(data, axis, keepdims, select_last_index, name="arg_min")


@dataclass
class _Step:
    """A device step of a model with stand-ins of its inputs."""

    model: str
    step: DeviceStep
    inputs: list
    shape: tuple
    dtype: str

    def plan(self, planner):
        step = self.step
        if step.transpose is not None:
            # As the session runs a folded Transpose: the untransposed tensor reduced over
            # the mapped axes.
            call = getattr(planner, "reduce_min" if step.node.op_type == "ReduceMin"
                           else "reduce_max")
            return call(self.inputs[0], axes=step.source_axes, keepdims=True)
        op_type = step.node.op_type
        call = prepare(planner, op_type, step.attributes,
                           indices_wanted(op_type, step.outputs))
        inputs = self.inputs
        if step.pool is not None:   # as the session runs a folded MaxPool
            inputs = [pool_reads(step.pool_attributes)(inputs[0])] + inputs[1:]
        return call(*inputs)


def _stand_in(name, types, initializers):
    """An array standing for value ``name``: an initializer's own, or a read-only array of
    the inferred shape and type that holds no data (symbolic or unknown dimensions as 1)."""
    if name in initializers:
        return numpy_helper.to_array(initializers[name])
    value_type = types.get(name)
    if value_type is None or not value_type.HasField("tensor_type") \
            or not value_type.tensor_type.elem_type:
        raise ValueError(f"the type of {name!r} is unknown (ONNX shape inference found none)")
    tensor = value_type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
    dtype = format_of(tensor.elem_type).numpy_dtype
    return np.broadcast_to(np.zeros((), dtype), shape)


def model_steps(model_or_path, label=None):
    """The device steps of a model as :class:`~maxaccel.host.offload.OffloadSession`
    partitions it, each with stand-ins of its inputs (``_Step``); ``label`` names the model
    in tables (default: its path, or ``graph.name``)."""
    model = read_model(model_or_path)
    if label is None:
        label = str(model_or_path) if not hasattr(model_or_path, "graph") else \
            (model.graph.name or "model")
    plan = partition(model, node_name)
    initializers = {t.name: t for t in plan.model.graph.initializer}
    steps = []
    for step in plan.steps:
        if not isinstance(step, DeviceStep):
            continue
        try:
            inputs = [_stand_in(n, plan.types, initializers) if n else None
                      for n in step.inputs]
        except ValueError as error:
            raise ValueError(f"{label}: node {step.name!r} ({step.node.op_type}): {error}; "
                             f"give the model's inputs fixed shapes") from None
        steps.append(_Step(label, step, inputs, tuple(inputs[0].shape),
                           str(inputs[0].dtype)))
    return steps


@dataclass(frozen=True)
class NodeRoute:
    """One max-family node on a chosen core: its model, ONNX name, op, input shape and dtype,
    kernel (MaxPool), route (``MAX_POOL``, ``POOL_CHANNELS_LAST``, ``MAX`` or ``REDUCE``), the
    bytes it puts on the link both ways, their time at the link's rate, and why it takes that
    route."""

    model: str
    node: str
    op: str
    shape: tuple
    dtype: str
    kernel: tuple
    route: str
    link_bytes: int
    link_s: float
    why: str

    def as_dict(self):
        return {"model": self.model, "node": self.node, "op": self.op,
                "shape": list(self.shape), "dtype": self.dtype, "kernel": list(self.kernel),
                "route": self.route, "link_bytes": self.link_bytes, "link_s": self.link_s,
                "why": self.why}


@dataclass
class CoreChoice:
    """A core chosen for models (:func:`choose_core`).

    Attributes
    ----------
    board : str or None
        The target it is for (None: a virtual board's own core).
    core : dict
        :class:`~maxaccel.hdl.top.Core` parameters merged over the target's ``core`` (what
        ``maxaccel.boards.build.build(board, core=...)`` takes).
    parameters : dict
        Every parameter of the core (``lanes`` and the target's ``core`` included).
    identity : Identity
        What the core reports to ``IDENTIFY``.
    nodes : list of NodeRoute
    estimate : int or None
        Estimated logic cells (:mod:`maxaccel.boards.estimate`), None without a board.
    capacity : int or None
        The board's logic cells.
    cell_type : str or None
        What the board's reports count (``ICESTORM_LC``, ``TRELLIS_COMB``, ``LUT``).
    """

    board: str
    core: dict
    parameters: dict
    identity: object
    nodes: list
    estimate: int = None
    capacity: int = None
    cell_type: str = None
    demands: list = field(default_factory=list, repr=False)
    fixed: dict = field(default_factory=dict, repr=False)

    @property
    def units(self):
        return tuple(self.parameters["units"])

    def fits(self):
        return self.estimate is None or self.capacity is None or self.estimate <= self.capacity

    def check(self):
        """``self``, or :class:`CoreDoesNotFit` naming the node that asks for the most and
        the nearest board or setting that holds it."""
        if self.fits():
            return self
        raise CoreDoesNotFit(_refusal(self))

    def report(self):
        """The keys a build report gains (``report.json``): ``model_core`` (the units and
        capacities chosen, the estimate against the board) and ``nodes`` (the per-node
        table)."""
        capacities = {k: v for k, v in self.core.items() if k != "units"}
        return {"model_core": {"units": list(self.units), "capacities": capacities,
                               "estimate": self.estimate, "capacity": self.capacity,
                               "cell_type": self.cell_type},
                "nodes": [n.as_dict() for n in self.nodes]}

    def markdown(self):
        """The core and the per-node table, as markdown."""
        capacities = ", ".join(f"{k}={v}" for k, v in self.core.items() if k != "units")
        lines = [f"Core for {self.board or 'the virtual board'}: units "
                 f"{', '.join(self.units)}; {capacities}"]
        if self.estimate is not None:
            fill = f" ({self.estimate / self.capacity:.0%})" if self.capacity else ""
            lines.append(f"Estimated logic: about {self.estimate} of {self.capacity} "
                         f"{self.cell_type}{fill}")
        lines += ["", "| model | node | op | shape | kernel | route | link bytes | link-bound "
                  "time | why |", "|---|---|---|---|---|---|---|---|---|"]
        for n in self.nodes:
            kernel = "x".join(map(str, n.kernel)) or "-"
            lines.append(f"| {n.model} | {n.node} | {n.op} | {'x'.join(map(str, n.shape))} "
                         f"{n.dtype} | {kernel} | {n.route} | {n.link_bytes} | "
                         f"{_seconds(n.link_s)} | {n.why} |")
        return "\n".join(lines)


def _estimate(family, parameters, link_word):
    """:func:`maxaccel.boards.estimate.estimate_cells` (the boards' data, loaded when asked)."""
    from maxaccel.boards.estimate import estimate_cells
    return estimate_cells(family, parameters, link_word)


def _seconds(value):
    if value is None:
        return "-"
    return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"


def _base(board, base):
    """``(target or None, base Core parameters)``."""
    if board is None:
        return None, dict(base or {})
    target = find_target(board)
    return target, {"lanes": target.lanes, "clock_hz": round(target.clock_mhz * 1e6),
                    **target.core, **(base or {})}


def _probe(base, steps):
    """``base`` with every unit, the windowed one at the extents of every pool."""
    inner = outer = 1
    for s in steps:
        if s.step.node.op_type == "MaxPool":
            extents = _kernel_extents(s)
            inner = max([inner, *extents[-2:]])
            if len(extents) > 2:
                outer = max(outer, extents[0])
    built = base.get("units", UNIT_OF_ROUTE.values())
    probe = dict(base, units=("reduce", "pool", "broadcast", "window"),
                 window_extent=inner, window_extent_outer=outer)
    for unit in ("pool", "broadcast"):
        if unit not in built:   # the board's capacities of a unit it lacks are placeholders
            probe.update(UNIT_DEFAULTS[unit])
    if "window" not in built:
        probe["window_lanes"] = 1
    return probe


def _kernel_extents(s):
    attributes = s.step.attributes
    kernel = list(attributes.get("kernel_shape", ()))
    dilations = list(attributes.get("dilations", [1] * len(kernel)))
    return tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations))


def _link_s(link_bytes, rate):
    return link_bytes / rate if rate else None


def _frame_bytes(target):
    return XdmaTransport.max_frame_bytes if target is not None and target.link == "xdma" \
        else DEFAULT_FRAME_BYTES


def _needs(steps, base, frame_bytes):
    """Per step, the unit it needs (or None) and what it planned on the probe core."""
    probe = RoutePlanner(core_identity(_probe(base, steps)), frame_bytes)
    bare = RoutePlanner(core_identity(dict(base, units=("reduce",))), frame_bytes)
    needs = []
    for s in steps:
        rich, plain = s.plan(probe), s.plan(bare)
        unit = UNIT_OF_ROUTE.get(rich.route)
        needed = unit if unit != "reduce" and rich.link_bytes < plain.link_bytes else None
        needs.append((needed, rich))
    return needs


def _chosen(base, steps, needs):
    """The Core parameters for the units ``needs`` names."""
    units = ["reduce"] + [u for u in ("pool", "broadcast", "window")
                          if any(n == u for n, _ in needs)]
    core = {"units": tuple(units)}
    element_types = {s.dtype for s in steps}
    if len(element_types) == 1 and base.get("dtype") is None:
        core["dtype"] = element_types.pop()
    for unit in units[1:]:
        if unit not in base.get("units", UNIT_OF_ROUTE.values()):
            # The board's capacities of a unit it does not build are placeholders.
            base = dict(base, **UNIT_DEFAULTS[unit])
            core.update(UNIT_DEFAULTS[unit])
    if "window" in units:
        pools = [(s, planned) for s, (n, planned) in zip(steps, needs) if n == "window"]
        extents = [_kernel_extents(s) for s, _ in pools]
        columns = max(p.output_columns for _, p in pools)
        plane = max(p.output_plane for _, p in pools)
        had = "window" in base.get("units", ("window",))
        core.update(
            window_lanes=base.get("window_lanes") if had else 1,
            window_extent=max(max(e[-2:]) for e in extents),
            window_extent_outer=max([0] + [e[0] for e in extents if len(e) > 2]),
            **{name: min(dict(UNIT_DEFAULTS["window"], **base)[name], _pow2(need))
               for name, need in (("window_columns", columns), ("window_plane", plane))})
        # Fields as wide as the pools' largest (a kernel reaching the unit's extent among
        # them), and Indices only if a pool asks for them.
        largest = max([3, core["window_extent"], core["window_extent_outer"]]
                      + [p.field_max for _, p in pools])
        core.update(window_field_max=min((1 << largest.bit_length()) - 1,
                                         base.get("window_field_max", WINDOW_FIELD_MAX)),
                    window_indices=any(p.indices for _, p in pools))
        if core["window_lanes"] is None:
            del core["window_lanes"]
    if "broadcast" in units:
        core.update(_broadcast_capacities(dict(UNIT_DEFAULTS["broadcast"], **base),
                                          [p for n, p in needs if n == "broadcast"]))
    return core


def _broadcast_capacities(base, planned):
    """The broadcast unit's capacities for the Max nodes ``planned`` on the probe core: the
    most replayed operands a node has, a replay buffer of the most beats a node's pass takes
    (to a power of two) and the most outer dimensions it walks, each at most the board's; a
    node of more than one pass keeps the board's, so no pass is cut again."""
    operands = max(p.operands for p in planned)
    if not operands:    # only same-shape Max nodes: their passes stream every operand
        return {}
    max_operands = min(base["max_operands"], operands)
    return {"replay_depth": min(base["replay_depth"],
                                max(_pow2(max(p.replay_beats for p in planned)), 2,
                                    _pow2(max_operands))),
            "max_dims": min(base["max_dims"], max(max(p.outer_dims for p in planned), 1)),
            "max_operands": max_operands}


def _why(planned, final_core, needed, probe_planned):
    unit = UNIT_OF_ROUTE.get(planned.route)
    if planned.route is None:
        return "no reduction (noop_with_empty_axes)"
    if unit != "reduce":
        return f"{_UNIT_TITLES[unit]}: within its capacities"
    probe_unit = UNIT_OF_ROUTE.get(probe_planned.route)
    if probe_unit in (None, "reduce"):
        return "REDUCE: no unit takes it"
    if probe_unit in final_core["units"]:
        return f"capacity: beyond {_UNIT_TITLES[probe_unit]}'s"
    if needed is None:
        return f"unit absent: {_UNIT_TITLES[probe_unit]} would put the same bytes on the link"
    return f"unit absent: {_UNIT_TITLES[probe_unit]}"


def _capacity(target):
    """``(logic cells, their name)`` of a target's device, from its shipped build report or
    the Xilinx data sheet's totals; ``(None, None)`` without either."""
    if target is None:
        return None, None
    for report in load_reports():
        if report["board"] == target.name:
            return report["logic_cells"][1], report["logic_cell_type"].split(" ")[0]
    if target.family == "xilinx":
        from maxaccel.boards.xilinx import DEVICE_TOTALS
        return DEVICE_TOTALS[target.device][0], "LUT"
    return None, None


def choose_core(board=None, models=(), *, base=None, fixed=None):
    """The core ``board`` (a target of :data:`~maxaccel.boards.targets.TARGETS`; None: a
    virtual board whose own parameters are ``base``) needs for the max-family nodes of
    ``models`` (paths, bytes or ``onnx.ModelProto``s, or ``(label, model)`` pairs), and each
    node's route on it; see the module docstring. ``base``: Core parameters over the
    target's. ``fixed``: Core parameters the choice takes as they are, over what the nodes
    need (``maxaccel build --core``): ``{"window_extent": 9}`` sends larger kernels through
    ``REDUCE``, ``{"units": ("reduce",)}`` every node a unit would have taken. Refuses
    nothing: :meth:`CoreChoice.check` does.

    Returns
    -------
    CoreChoice
    """
    target, base = _base(board, base)
    fixed = dict(fixed or {})
    if "units" in fixed:
        fixed["units"] = tuple(fixed["units"])
    steps = []
    for model in models:
        label, model = model if isinstance(model, tuple) else (None, model)
        steps += model_steps(model, label)
    frame_bytes = _frame_bytes(target)
    needs = _needs(steps, base, frame_bytes)
    core = _with_fixed(base, _chosen(base, steps, needs), fixed)
    parameters = {**base, **core}
    if "window" not in core["units"]:
        for key in UNIT_PARAMETERS["window"]:
            parameters.pop(key, None)
    capacity, cell_type = _capacity(target)
    core, parameters = _window_unit_held(target, capacity, core, parameters, fixed)
    core, parameters = _reducer_left_out(target, capacity, core, parameters, fixed,
                                         steps, frame_bytes)
    core = _ordered(core)
    identity = core_identity(parameters)
    planner = RoutePlanner(identity, frame_bytes)
    rate = target.link_bytes_per_s if target is not None else None
    nodes = []
    for s, (needed, probe_planned) in zip(steps, needs):
        planned = s.plan(planner)
        nodes.append(NodeRoute(
            s.model, s.step.name, s.step.node.op_type, s.shape, s.dtype,
            _kernel_extents(s) if s.step.node.op_type == "MaxPool" else (),
            planned.route.name if planned.route is not None else "-", planned.link_bytes,
            _link_s(planned.link_bytes, rate),
            _why(planned, parameters, needed, probe_planned)))
    estimate = None if target is None else _estimate(
        target.family, parameters, target.link_word)
    return CoreChoice(board, core, parameters, identity, nodes, estimate, capacity, cell_type,
                      demands=[(s, n) for s, (n, _) in zip(steps, needs) if n], fixed=fixed)


def _with_fixed(base, core, fixed):
    """The chosen ``core`` with the ``fixed`` parameters over it: a unit they leave out takes
    its parameters along, a unit they add has the Core's defaults where the board builds none
    (:data:`UNIT_DEFAULTS`); ``ValueError`` for a parameter of a unit the core leaves out."""
    units = fixed.get("units", core["units"])
    check_unit_settings(fixed, units)
    built = base.get("units", UNIT_OF_ROUTE.values())
    added = {key: value for unit in units if unit not in core["units"] and unit not in built
             for key, value in UNIT_DEFAULTS.get(unit, {}).items()}
    core = {**added, **core, **fixed}
    for unit, names in UNIT_PARAMETERS.items():
        if unit not in units:
            for name in names:
                core.pop(name, None)
    return core


def _window_unit_held(target, capacity, core, parameters, fixed):
    """``(core, parameters)`` with the windowed unit the board holds. When the core's estimate
    exceeds the board's ``capacity`` (its logic cells), the unit's configuration products go
    serial if that takes fewer cells (``window_serial_products``: a few hundred cycles more
    before each ``MAX_POOL`` request's data; fewer cells where the synthesis has no
    multipliers, the iCE40's); if it still does not fit, its lanes update one window at a time
    (``window_serial``: a fraction of the logic) when they keep up with the board's link
    (:func:`_serial_window_keeps_up`); then its lanes (the board's, one per datapath lane by
    default) are halved while it still does not fit and more than one is left; each only if
    not ``fixed``. Fewer window lanes pool fewer bytes a cycle; a core that does not fit with
    one is refused (:meth:`CoreChoice.check`)."""
    if capacity is None or "window" not in core["units"]:
        return core, parameters

    def estimate(given):
        return _estimate(target.family, given, target.link_word)

    serial = dict(parameters, window_serial_products=True)
    if estimate(parameters) > capacity and "window_serial_products" not in fixed \
            and not parameters.get("window_serial") and estimate(serial) < estimate(parameters):
        parameters = serial
        core = dict(core, window_serial_products=True)
    unit = {**{k: v for k, v in parameters.items() if k != "window_serial_products"},
            "window_serial": True}
    if estimate(parameters) > capacity and "window_serial" not in fixed \
            and "window_serial_products" not in fixed and _serial_window_keeps_up(target, unit) \
            and estimate(unit) < estimate(parameters):
        parameters = unit
        core = {**{k: v for k, v in core.items() if k != "window_serial_products"},
                "window_serial": True}
    lanes = parameters.get("window_lanes") or parameters["lanes"]
    while lanes > 1 and "window_lanes" not in fixed and estimate(parameters) > capacity:
        lanes //= 2
        parameters = dict(parameters, window_lanes=lanes)
        core = dict(core, window_lanes=lanes)
    return core, parameters


def _reducer_left_out(target, capacity, core, parameters, fixed, steps, frame_bytes):
    """``(core, parameters)`` without the run reducer when the core's estimate exceeds the
    board's ``capacity`` (after :func:`_window_unit_held`) with it and not without it,
    ``units`` is not ``fixed``, and every node's route on the core is a unit's: the core then
    serves these nodes (and any other request its units take) and refuses the rest."""
    if capacity is None or "units" in fixed or "reduce" not in core["units"] \
            or len(core["units"]) == 1 \
            or _estimate(target.family, parameters, target.link_word) <= capacity:
        return core, parameters
    planner = RoutePlanner(core_identity(parameters), frame_bytes)
    if any(s.plan(planner).route == Command.REDUCE for s in steps):
        return core, parameters
    units = tuple(u for u in core["units"] if u != "reduce")
    without = dict(parameters, units=units)
    if _estimate(target.family, without, target.link_word) > capacity:
        return core, parameters     # a refusal names settings and boards with REDUCE
    return dict(core, units=units), without


def _serial_window_keeps_up(target, parameters):
    """Whether a windowed unit that updates one window at a time
    (:func:`~maxaccel.contract.pooling.serial_window_cycles`, the largest kernel of the core's
    extents, the most images a lane of its element type holds, a window leaving each lane)
    takes a lane no slower than the board's link brings one at its clock."""
    extent = parameters.get("window_extent", 3)
    outer = parameters.get("window_extent_outer")
    outer = extent if outer is None else outer
    dtype = parameters.get("dtype")
    elements = 8 // format_of(dtype).nbytes if dtype else 8
    cycles = serial_window_cycles((max(outer, 1), extent, extent), elements, 1)
    return cycles <= target.clock_mhz * 1e6 * 8 / target.link_bytes_per_s


def _ordered(core):
    """``core`` with its parameters in :data:`_CORE_ORDER`, any others after them."""
    return {**{name: core[name] for name in _CORE_ORDER if name in core}, **core}


def _refusal(choice):
    """The message of a choice that does not fit: the node asking for the most, the setting
    that would hold the rest (as ``maxaccel build --core`` gives it: the ``fixed`` of
    :func:`choose_core`), and the nearest board that holds it all."""
    target = find_target(choice.board)
    demands = sorted((d for d in choice.demands if d[1] in choice.units),
                     key=lambda d: max(_kernel_extents(d[0]) or (0,)), reverse=True)
    culprit = demands[0] if demands else None
    without = dict(choice.parameters,
                   units=tuple(u for u in choice.units if culprit is None or u != culprit[1]))
    lighter = _estimate(target.family, without, target.link_word)
    what = (f"the core ({', '.join(choice.units)})" if culprit is None else
            f"node {culprit[0].step.name!r} ({culprit[0].step.node.op_type}"
            + (f", kernel {'x'.join(map(str, _kernel_extents(culprit[0])))}"
               if culprit[0].step.node.op_type == "MaxPool" else "")
            + f", model {culprit[0].model}) needs {_UNIT_TITLES[culprit[1]]}"
            + (f" with window_extent {choice.parameters['window_extent']}"
               if culprit[1] == "window" else ""))
    message = (f"{choice.board}: {what}; the core would take about {choice.estimate} "
               f"{choice.cell_type}, the {target.device} has {choice.capacity}")
    smaller = _largest_extent(choice, target) if culprit and culprit[1] == "window" else None
    if smaller:
        settings = " ".join(f"--core {name}={value}" for name, value in smaller[0].items())
        given = ", ".join(f"{name}={value}" for name, value in smaller[0].items())
        message += (f" (with {given} about {smaller[1]}, `{settings}`: larger kernels then go "
                    f"through REDUCE)")
    elif culprit is not None and lighter <= choice.capacity:
        units = ",".join(without["units"])
        message += (f" (with units={units} about {lighter}, `--core units={units}`: the nodes "
                    f"{_UNIT_TITLES[culprit[1]]} would serve then go through REDUCE)")
    nearest = _nearest_board(choice)
    message += (f"; {nearest[0]} holds it (about {nearest[1]} of {nearest[2]})" if nearest
                else "; no board maxaccel builds for holds it")
    return message


def _largest_extent(choice, target):
    """``(settings, estimate)`` of the largest windowed unit's extent below the chosen one
    (above 1) whose core the board holds, or None: ``settings`` are ``window_extent`` and, if
    the outermost axis's extent is larger, ``window_extent_outer`` too."""
    outer = choice.parameters["window_extent_outer"]
    for extent in range(choice.parameters["window_extent"] - 1, 1, -1):
        settings = dict(window_extent=extent, **({"window_extent_outer": extent}
                                                 if outer > extent else {}))
        estimate = _estimate(target.family, dict(choice.parameters, **settings),
                             target.link_word)
        if estimate <= choice.capacity:
            return settings, estimate
    return None


#: The order in which other boards are offered: the same family first, then the families
#: whose bitstreams the open toolchain makes, then Xilinx; within one, the smallest device.
_FAMILY_ORDER = ("ice40", "ecp5", "xilinx")


def _nearest_board(choice):
    """``(board, estimate, capacity)`` of the nearest other board whose core for the same
    units and capacities fits (:data:`_FAMILY_ORDER`), or None; each board's core as its choice
    would make it (:func:`_window_unit_held`, the choice's ``fixed`` settings kept): the
    windowed unit's products serial, or its lanes updating one window at a time, only where
    the board needs them."""
    family = find_target(choice.board).family
    found = []
    made = ("window_serial_products", "window_serial")   # what the choice made for its board
    core = {k: v for k, v in choice.core.items() if k not in made or k in choice.fixed}
    for name, other in TARGETS.items():
        capacity, _ = _capacity(other)
        if name == choice.board or capacity is None:
            continue
        parameters = {"lanes": other.lanes, **other.core, **core}
        _, parameters = _window_unit_held(other, capacity, core, parameters, choice.fixed)
        estimate = _estimate(other.family, parameters, other.link_word)
        if estimate <= capacity:
            rank = (other.family != family, _FAMILY_ORDER.index(other.family))
            found.append((rank, capacity, name, estimate))
    if not found:
        return None
    _, capacity, name, estimate = min(found)
    return name, estimate, capacity


def choices_markdown(choices):
    """A markdown table of :class:`CoreChoice` s, one row per board: the units, the element
    type they serve, the windowed unit's extents, the estimate against the board's logic, and
    the nodes per route (the table of ``docs/boards.md``, "A core for your model")."""
    lines = ["| board | units | element type | window extent (inner / outer) | estimated logic "
             "| fill | fits | nodes per route |", "|---|---|---|---|---|---|---|---|"]
    for c in choices:
        extent = (f"{c.parameters['window_extent']} / {c.parameters['window_extent_outer']}"
                  + (", serial products" if c.parameters.get("window_serial_products") else "")
                  + (", serial unit" if c.parameters.get("window_serial") else "")
                  if "window" in c.units else "-")
        routes = {}
        for n in c.nodes:
            routes[n.route] = routes.get(n.route, 0) + 1
        lines.append(f"| {c.board} | {', '.join(c.units)} | "
                     f"{c.parameters.get('dtype') or 'every'} | {extent} | {c.estimate} / "
                     f"{c.capacity} {c.cell_type} | {c.estimate / c.capacity:.0%} | "
                     f"{'yes' if c.fits() else 'no'} | "
                     f"{', '.join(f'{r} {k}' for r, k in routes.items())} |")
    return "\n".join(lines)
