"""One onnxruntime session for a whole model, its device steps as Python operators.

:class:`~maxaccel.host.offload.OffloadSession` runs a plan (:mod:`maxaccel.host.partition`) of
CPU partitions and device steps. Run as one onnxruntime ``InferenceSession`` per partition,
every hand-over between a partition and a device step costs a ``run`` call, its input checks
and output copies, and every partition brings a thread pool of its own. This module builds the
alternative :class:`OffloadSession` prefers: the whole model as one onnxruntime session, in
which each device step (and each subgraph step) is a node of onnxruntime-extensions' Python
custom operators (``onnxruntime_extensions.onnx_op``) that calls back into the session. The CPU
nodes then run between the device calls with one thread pool and no hand-over but the
operator call itself (about 13 us measured here).

Python operators carry tensors exactly for some element types only (measured with
onnxruntime-extensions 0.15.2 and onnxruntime 1.32): an operator declared with float16 or
bfloat16 aborts the process, uint64 outputs come back with wrong values (converted through a
double), a scalar bool output is refused, and float32 outputs are converted so that a
signalling NaN comes back quieted (the max family never produces one: the contract's NaN is the
canonical quiet NaN). :data:`EXACT_DTYPES` lists the element types a model's device and
subgraph steps may read and write for it to run fused; any other model keeps the partitions.
"""

import itertools
import threading
import weakref

import numpy as np
import onnx
from onnx import helper

from maxaccel.host.partition import MAX_IR_VERSION, CpuPartition, DeviceStep

__all__ = ["EXACT_DTYPES", "DOMAIN", "available", "fused_model", "FusedSteps",
           "register_library"]

#: Element types a Python operator reads and writes bit for bit (see the module docstring).
EXACT_DTYPES = {onnx.TensorProto.FLOAT: "dt_float", onnx.TensorProto.DOUBLE: "dt_double",
                onnx.TensorProto.INT8: "dt_int8", onnx.TensorProto.INT16: "dt_int16",
                onnx.TensorProto.INT32: "dt_int32", onnx.TensorProto.INT64: "dt_int64",
                onnx.TensorProto.UINT8: "dt_uint8", onnx.TensorProto.UINT16: "dt_uint16",
                onnx.TensorProto.UINT32: "dt_uint32"}

#: onnxruntime-extensions' domain of Python operators.
DOMAIN = "ai.onnx.contrib"

_register_lock = threading.Lock()
_steps_by_key = weakref.WeakValueDictionary()   # session key -> FusedSteps
_keys = itertools.count()
# SessionOptions holding the library, by id, kept for the process: the library is unloaded
# when its SessionOptions goes, and a garbage collection may take it before the sessions
# whose kernels it holds (a segmentation fault).
_libraries = {}
_defined = []     # once the operators are defined: the default SessionOptions


def available():
    """Whether onnxruntime-extensions is installed (the fused session needs it)."""
    try:
        import onnxruntime_extensions  # noqa: F401
    except ImportError:
        return False
    return True


def _call(*arrays, step):
    """Every Python operator of this module: the step ``"key/index"`` of a session."""
    key, index = step.rsplit("/", 1)
    return _steps_by_key[key].call(int(index), arrays)


#: The most inputs of a Max run fused (a Max of more runs in the partitions).
MAX_INPUTS = 8


def _signatures():
    """Every ``(input element types, output element types)`` of a device step: one input
    (GlobalMaxPool, ReduceMax, MaxPool, a one-input Max), ReduceMax's axes input, MaxPool's
    Indices output, Max of 2 to :data:`MAX_INPUTS` inputs; for each exact element type."""
    int64 = onnx.TensorProto.INT64
    found = {}
    for element in EXACT_DTYPES:
        for signature in [((element,), (element,)), ((element, int64), (element,)),
                          ((element,), (element, int64))] + [
                ((element,) * count, (element,)) for count in range(2, MAX_INPUTS + 1)]:
            found[signature] = "MaxaccelStep_" + "_".join(
                [onnx.TensorProto.DataType.Name(e).lower() for e in signature[0]] + ["to"]
                + [onnx.TensorProto.DataType.Name(e).lower() for e in signature[1]])
    return found


#: Operator type of each signature. Every one is defined before onnxruntime-extensions'
#: library is first registered: an operator defined after that makes the next session's
#: creation crash (a segmentation fault, measured with 0.15.2).
OPERATORS = _signatures()


def _define_operators():
    from onnxruntime_extensions import PyCustomOpDef, onnx_op
    for (inputs, outputs), name in OPERATORS.items():
        onnx_op(op_type=name,
                inputs=[getattr(PyCustomOpDef, EXACT_DTYPES[e]) for e in inputs],
                outputs=[getattr(PyCustomOpDef, EXACT_DTYPES[e]) for e in outputs],
                attrs={"step": PyCustomOpDef.dt_string})(_call)


def register_library(options=None):
    """``options`` (an ``onnxruntime.SessionOptions``; None: default options shared by every
    session that has none) with onnxruntime-extensions' operator library registered, once per
    object (registering it twice makes every session fail); the operators are defined first."""
    with _register_lock:
        if not _defined:
            _define_operators()
            import onnxruntime
            _defined.append(onnxruntime.SessionOptions())
        if options is None:
            options = _defined[0]
        if _libraries.get(id(options)) is not options:
            from onnxruntime_extensions import get_library_path
            options.register_custom_ops_library(get_library_path())
            _libraries[id(options)] = options
    return options


def _element(types, name):
    """The element type of value ``name`` if it is a tensor of an exact type, else None."""
    proto = types.get(name)
    if proto is None or proto.WhichOneof("value") != "tensor_type":
        return None
    element = proto.tensor_type.elem_type
    return element if element in EXACT_DTYPES else None


#: The shape a scalar step output is reshaped to (the empty shape), an initializer.
_SCALAR_SHAPE = "maxaccel_scalar_shape"


def _rank(types, name):
    """The rank shape inference gives value ``name``, or None if unknown."""
    proto = types.get(name)
    if proto is None or not proto.tensor_type.HasField("shape"):
        return None
    return len(proto.tensor_type.shape.dim)


def fused_model(plan, key):
    """The plan's model with each device and subgraph step replaced by a Python operator
    node (attribute ``step`` = ``"key/index"``, ``index`` the step's position in
    ``plan.steps``; a scalar output is carried as shape ``(1,)`` and reshaped), or None if a
    step reads or writes an element type the operators do not carry exactly
    (:data:`EXACT_DTYPES`) or an output of unknown rank, is a subgraph step or a Max of more
    than :data:`MAX_INPUTS` inputs, or a partition's inputs could not be typed.

    Returns
    -------
    onnx.ModelProto or None
    """
    nodes, produced, scalars = [], set(), False
    for index, step in enumerate(plan.steps):
        if isinstance(step, CpuPartition):
            if step.untyped:
                return None
            nodes += [node for _, node in step.nodes]
            continue
        inputs = [n for n in step.inputs if n]
        outputs = [n for n in step.outputs if n]
        if not isinstance(step, DeviceStep):
            return None     # a subgraph step's signature is the subgraph's: not predefined
        elements = [_element(plan.types, n) for n in inputs + outputs]
        operator = OPERATORS.get((tuple(elements[:len(inputs)]), tuple(elements[len(inputs):])))
        if operator is None:
            return None
        ranks = [_rank(plan.types, n) for n in outputs]
        if None in ranks:
            return None     # a scalar comes back from a Python operator as shape (1,)
        carried = [f"{n}__maxaccel_scalar" if rank == 0 else n
                   for n, rank in zip(outputs, ranks)]
        nodes.append(helper.make_node(
            operator, inputs, carried,
            name=f"maxaccel_step_{index}", domain=DOMAIN, step=f"{key}/{index}"))
        for name, value in zip(carried, outputs):
            if name != value:
                nodes.append(helper.make_node("Reshape", [name, _SCALAR_SHAPE], [value],
                                              name=f"maxaccel_scalar_{index}_{value}"))
                scalars = True
    for node in nodes:
        produced.update(node.output)
    source = plan.model.graph
    graph = helper.make_graph(
        nodes, source.name, list(source.input), list(source.output),
        initializer=list(source.initializer) + (
            [helper.make_tensor(_SCALAR_SHAPE, onnx.TensorProto.INT64, [0], [])] if scalars
            else []),
        value_info=[v for v in source.value_info if v.name in produced],
        sparse_initializer=list(source.sparse_initializer))
    opsets = [o for o in plan.model.opset_import if o.domain != DOMAIN]
    model = helper.make_model(graph, opset_imports=opsets + [helper.make_opsetid(DOMAIN, 1)],
                              functions=plan.model.functions,
                              ir_version=min(plan.model.ir_version, MAX_IR_VERSION))
    return model


class FusedSteps:
    """The device and subgraph steps of one session's fused model: what its Python operators
    call (``run(index, arrays)`` runs step ``index`` on arrays and returns its outputs), with a
    record of each call of the current run.

    Parameters
    ----------
    steps : list
        The plan's steps.
    run_step : callable
        ``run_step(step, values) -> where``: runs a device or subgraph step on ``values`` (a
        dict of value name to array, updated with the step's outputs).

    Attributes
    ----------
    key : str
        This object's key in the operators' ``step`` attribute.
    calls : list of (int, str, float, float)
        ``(index, where, started, ended)`` of each step called during the current run
        (``time.perf_counter`` seconds).
    error : BaseException or None
        What the latest failing step raised (onnxruntime reports it as a plain failure).
    """

    def __init__(self, steps, run_step):
        import time
        self._steps, self._run_step, self._clock = steps, run_step, time.perf_counter
        self._lock = threading.Lock()   # a device is one conversation at a time
        self.key = f"s{next(_keys)}"
        self.calls, self.error = [], None
        _steps_by_key[self.key] = self

    def call(self, index, arrays):
        step = self._steps[index]
        with self._lock:
            started = self._clock()
            try:
                values = dict(zip([n for n in step.inputs if n], arrays))
                where = self._run_step(step, values)
                results = tuple(np.ascontiguousarray(values[n]) for n in step.outputs if n)
            except BaseException as error:
                self.error = error
                raise
            self.calls.append((index, where, started, self._clock()))
        return results if len(results) > 1 else results[0]

    def timings(self, started, ended):
        """``[(index, where, seconds)]`` for every step of the latest run (``started`` to
        ``ended``), in plan order. A device step's time is its call's; a step not called has
        where None and no time. onnxruntime orders independent nodes as it likes, so the CPU
        time is known only as the gaps between the calls: each gap goes to the nearest CPU
        partition before the call that ends it in the plan (or the first partition, if none
        comes before it), the gap after the last call to the last partition."""
        partitions = [i for i, step in enumerate(self._steps) if isinstance(step, CpuPartition)]
        seconds = dict.fromkeys(partitions, 0.0)
        where = {}
        boundary = started
        for index, called_where, begin, end in sorted(self.calls, key=lambda call: call[2]):
            if partitions:
                before = [i for i in partitions if i < index]
                seconds[before[-1] if before else partitions[0]] += max(begin - boundary, 0.0)
            seconds[index], where[index] = end - begin, called_where
            boundary = end
        if partitions:
            seconds[partitions[-1]] += max(ended - boundary, 0.0)
        return [(index, where.get(index), seconds.get(index, 0.0))
                for index in range(len(self._steps))]
