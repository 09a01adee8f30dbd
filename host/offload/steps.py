"""The max-family nodes' calls on a device: what each node's attributes and inputs become as
a :class:`~maxaccel.host.device.Device` call (:func:`prepare`), where a node of an element
type runs (the device, or the golden model for a type it lacks), and :class:`DeviceCalls`,
each device step's call worked out once per step, element type and device."""

import functools
import inspect

import numpy as np
from onnx import helper

from maxaccel.contract.dtypes import dtype_of
from maxaccel.contract.pooling import resolve_max_pool
from maxaccel.host.partition import FAMILY, CpuPartition, DeviceStep

__all__ = ["DEVICE", "GOLDEN", "ONNXRUNTIME", "ONNX_REFERENCE", "DEVICE_CALLS",
           "DeviceCalls", "prepare", "max_pool_arguments", "takes_out", "indices_wanted",
           "pool_geometry", "pool_reads", "schedule", "PARTITION", "DEVICE_STEP", "SUBGRAPH"]

DEVICE = "device"
GOLDEN = "golden"
ONNXRUNTIME = "onnxruntime"
ONNX_REFERENCE = "onnx.reference"

#: The device call of each max-family node that is not a MaxPool; a GlobalMaxPool's when a
#: Transpose is folded into it (a reduction over the mapped spatial axes).
DEVICE_CALLS = {"Max": "max", "Min": "min", "ReduceMax": "reduce_max",
                "ReduceMin": "reduce_min", "GlobalMaxPool": "reduce_max",
                "ArgMax": "arg_max", "ArgMin": "arg_min"}

#: The attributes of MaxPool (every opset) that ``max_pool`` takes, with their defaults.
_MAX_POOL_ATTRIBUTES = {"strides": None, "pads": None, "dilations": None, "ceil_mode": 0,
                        "auto_pad": "NOTSET", "storage_order": 0}

#: The kinds of step a run goes through (:func:`schedule`).
PARTITION, DEVICE_STEP, SUBGRAPH = "partition", "device step", "subgraph step"


def schedule(steps):
    """What a run needs of each of the plan's ``steps``, worked out once: ``(step, kind,
    its nodes' names, [(name, op_type), ...])``."""
    return [(step, PARTITION if isinstance(step, CpuPartition) else
             DEVICE_STEP if isinstance(step, DeviceStep) else SUBGRAPH,
             tuple(name for name, _ in step.nodes),
             [(name, node.op_type) for name, node in step.nodes])
            for step in steps]


def takes_out(method):
    """Whether a device's ``method`` takes ``out`` (an array it writes its result into, as
    :meth:`~maxaccel.host.device.Device.max_pool` does): a device may be anything with the
    operators' methods (the golden model's module, say), which need not."""
    try:
        return "out" in inspect.signature(method).parameters
    except (TypeError, ValueError):     # no signature to read
        return False


def max_pool_arguments(attributes):
    """Keyword arguments of ``max_pool`` from a MaxPool node's attributes (``auto_pad`` comes
    as bytes from ONNX), those at their default left out: each one more is a dict entry more
    to pass on every call."""
    arguments = {"kernel_shape": attributes.get("kernel_shape")}
    for name, default in _MAX_POOL_ATTRIBUTES.items():
        value = attributes.get(name, default)
        if isinstance(value, bytes):
            value = value.decode()
        if value != default:
            arguments[name] = value
    return arguments


def indices_wanted(op_type, outputs):
    """Whether a max-family node with output names ``outputs`` is a MaxPool whose Indices
    output something reads."""
    return op_type == "MaxPool" and len(outputs) > 1 and bool(outputs[1])


def _reduction_arguments(attributes, inputs):
    """``(axes, keepdims, noop_with_empty_axes)`` of a ReduceMax or ReduceMin of any opset
    version: axes from the attribute (before 18) or the optional second input (18 and later).

    Axes that name one axis more than once (``[1, -1]`` of a rank-2 tensor) name it once, as
    onnxruntime reads them (the device's ``reduce_max`` refuses them); an axis out of range is
    left for the device to name."""
    axes = attributes.get("axes")
    if axes is None and len(inputs) > 1 and inputs[1] is not None:
        axes = inputs[1]
    if axes is not None and len(axes) > 1:
        rank = np.ndim(inputs[0])
        named = [int(a) + rank if a < 0 else int(a) for a in np.asarray(axes).reshape(-1)]
        if len(set(named)) < len(named) and all(0 <= a < rank for a in named):
            axes = list(dict.fromkeys(named))
    return axes, attributes.get("keepdims", 1), attributes.get("noop_with_empty_axes", 0)


def prepare(device, op_type, attributes, indices=False):
    """``device``'s call for a max-family node: a function of the node's inputs (None for
    an absent optional one) that returns its result (a MaxPool with ``indices``:
    ``(y, indices)``)."""
    if op_type in ("Max", "Min"):
        elementwise = getattr(device, DEVICE_CALLS[op_type])
        return lambda *inputs: elementwise(*[x for x in inputs if x is not None])
    if op_type == "GlobalMaxPool":
        return device.global_max_pool
    if op_type == "MaxPool":
        arguments = max_pool_arguments(attributes)
        if indices:
            arguments["return_indices"] = True
        return functools.partial(device.max_pool, **arguments)
    if op_type in ("ArgMax", "ArgMin"):
        return functools.partial(getattr(device, DEVICE_CALLS[op_type]),
                                 axis=attributes.get("axis", 0),
                                 keepdims=attributes.get("keepdims", 1),
                                 select_last_index=attributes.get("select_last_index", 0))
    reduce = getattr(device, DEVICE_CALLS[op_type])

    def reduction(*inputs):
        axes, keepdims, noop = _reduction_arguments(attributes, inputs)
        return reduce(inputs[0], axes=axes, keepdims=keepdims, noop_with_empty_axes=noop)
    return reduction


def _transposed_reduction(step, device, where):
    """The call of a Transpose folded into a reduction: the untransposed tensor reduced over
    the mapped axes, then the (now size-1) axes moved where the transposed result has them."""
    node = step.node
    reduce = getattr(device, DEVICE_CALLS[node.op_type])
    axes = step.source_axes
    dropped = None if node.op_type == "GlobalMaxPool" \
        or step.attributes.get("keepdims", 1) else set(step.axes)

    def call(x, *_):
        result = np.ascontiguousarray(reduce(x, axes=axes, keepdims=True).transpose(step.perm))
        if dropped is not None:
            result = result.reshape([n for a, n in enumerate(result.shape) if a not in dropped])
        return (result,), where
    return call


def pool_geometry(attributes):
    """``geometry(dims)``: the :class:`~maxaccel.contract.pooling.PoolGeometry` of a MaxPool
    of ``attributes`` on an input of ONNX dims ``dims``, worked out once per ``dims``; an
    attribute the pool refuses raises as ``max_pool`` would."""
    arguments = max_pool_arguments(attributes)

    @functools.lru_cache(maxsize=None)
    def geometry(dims):
        return resolve_max_pool(dims, **arguments)
    return lambda dims: geometry(tuple(dims))


def pool_reads(attributes):
    """``reads(x, dims=None)``: the part of ``x`` a MaxPool of ``attributes`` reads, each
    spatial axis cut to the coordinates some window reads
    (:meth:`~maxaccel.contract.pooling.PoolGeometry.covered`; ``x`` itself where the windows
    read all of it). ``dims`` are ``x``'s ONNX dims where only its spatial axes (2, 3, ...)
    are theirs (an NCHWc tensor). What is cut is worked out once per ``dims``."""
    geometry_of = pool_geometry(attributes)
    known = {}

    def reads(x, dims=None):
        dims = tuple(x.shape) if dims is None else tuple(dims)
        cuts = known.get(dims)
        if cuts is None:
            geometry = geometry_of(dims)
            cuts = known[dims] = [(2 + i, part) for i, part in enumerate(geometry.covered())
                                  if not (isinstance(part, slice)
                                          and part == slice(0, geometry.axes[i].size))]
        for axis, part in cuts:
            if isinstance(part, slice):
                x = x[(slice(None),) * axis + (part,)]
            else:
                x = np.take(x, part, axis)
        return x
    return reads


def _pooled_reduction(step, device, where):
    """The call of a MaxPool folded into the reduction after it (``step.pool``): the
    reduction of the part of the pool's input its windows read, one device call."""
    operation = prepare(device, step.node.op_type, step.attributes)
    reads = pool_reads(step.pool_attributes)

    def call(x, *rest):
        return (operation(reads(x), *rest),), where
    return call


class DeviceCalls:
    """The device steps' calls on :attr:`device` (None until a run opens one), each worked out
    once per step, element type and device: the steps' run path is cold after every device
    call, and each layer of Python on it costs microseconds."""

    def __init__(self, device=None):
        self.device = device
        self._routes = {}   # dtype -> (the device it was worked out for, (device, where))
        self._calls = {}    # id(step) -> (device, dtype, call)

    def route(self, dtype):
        """``(device, where)`` for a node of element type ``dtype``: the device, or the golden
        model for a type the device lacks."""
        known = self._routes.get(dtype)
        if known is not None and known[0] is self.device:
            return known[1]
        identity = getattr(self.device, "identity", None)
        try:
            supported = identity is None or dtype_of(dtype) in identity.dtypes
        except TypeError:
            supported = True  # an unsupported dtype: the device's own check names the problem
        if supported:
            route = self.device, DEVICE
        else:
            from maxaccel.sim import reference
            route = reference, GOLDEN
        self._routes[dtype] = (self.device, route)
        return route

    def step_call(self, step, dtype):
        """What runs device step ``step`` on inputs of element type ``dtype``:
        ``call(*inputs)``, the step's inputs in order (None for an absent optional one),
        returns ``(results, where)``, one result per name of ``step.outputs`` (None for an
        empty name)."""
        made = self._calls.get(id(step))
        if made is not None and made[0] is self.device and made[1] == dtype:
            return made[2]
        device, where = self.route(dtype)
        node = step.node
        if step.transpose is not None:
            call = _transposed_reduction(step, device, where)
        elif step.pool is not None:
            call = _pooled_reduction(step, device, where)
        elif indices_wanted(node.op_type, step.outputs):
            operation = prepare(device, node.op_type, step.attributes, True)

            def call(*inputs):
                return operation(*inputs), where
        else:
            operation = prepare(device, node.op_type, step.attributes)

            def call(*inputs):
                return (operation(*inputs),), where
        self._calls[id(step)] = (self.device, dtype, call)
        return call

    def family(self, op_type, attributes, inputs, indices=False):
        """``(result, where)`` of a max-family node, on the device or (for an element type the
        device lacks) the golden model; a MaxPool with ``indices`` gives ``(y, indices)``."""
        device, where = self.route(inputs[0].dtype)
        return prepare(device, op_type, attributes, indices)(*inputs), where

    def reference_ops(self):
        """``onnx.reference`` implementations of the max family that call :meth:`family`."""
        from onnx.reference.op_run import OpRun
        calls = self

        def make(op_type):
            def _run(self, *inputs, **_attributes):
                attributes = {a.name: helper.get_attribute_value(a)
                              for a in self.onnx_node.attribute}
                inputs = [None if x is None else np.asarray(x) for x in inputs]
                indices = indices_wanted(op_type, self.onnx_node.output)
                result = calls.family(op_type, attributes, inputs, indices)[0]
                return tuple(result) if indices else (result,)
            return type(op_type, (OpRun,), {"op_domain": "", "_run": _run})
        return [make(op_type) for op_type in FAMILY]
