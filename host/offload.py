"""Run a whole ONNX model with its Max, ReduceMax, GlobalMaxPool, MaxPool, Min, ReduceMin,
ArgMax and ArgMin nodes on a maxaccel board.

:class:`OffloadSession` is a drop-in for onnxruntime's ``InferenceSession``: swap the
constructor (and give a ``device``), keep the rest of the script::

    from maxaccel.host import open_device, OffloadSession
    with open_device("sim") as dev:
        session = OffloadSession("model.onnx", device=dev)   # was onnxruntime.InferenceSession
        outputs = session.run(None, {"x": x})
        session.last_run    # [(node name, op_type, "device" | "onnxruntime" | ...), ...]
        session.last_steps  # [StepTiming(name, where, nodes, seconds), ...]

At creation the graph is split once (:mod:`maxaccel.host.partition`) into device steps and the
fewest CPU partitions the data dependencies allow. Where it can (the CPU provider, no subgraph
step, every device step's types known, and a C compiler to build the operators once), the
model then runs as *one* onnxruntime ``InferenceSession`` whose device steps are custom
operators calling the device (:mod:`maxaccel.host.device_ops`): one entry into onnxruntime a
run, the device steps' inputs read in place. Otherwise each partition is one onnxruntime
``InferenceSession``, created once and reused, and :meth:`OffloadSession.run` runs the steps in
order, values passing between them as the numpy arrays onnxruntime and the device return. Either
way the sessions get the user's ``SessionOptions`` and providers; the one session's thread pools
spin only while a run lasts, the partitions' sleep between hand-overs.

Where each node runs (the ``where`` of :attr:`~OffloadSession.placements`):

``"device"``
    Every opset version of Max (1, 6, 8, 12, 13), ReduceMax (1, 11, 12, 13, 18, 20),
    GlobalMaxPool (1, 22), Min (1, 6, 8, 12, 13), ReduceMin (1, 11, 12, 13, 18, 20), ArgMax
    and ArgMin (1, 11, 12, 13) of the default domain, with the contract's bits
    (``docs/semantics.md``; Min and ReduceMin are IEEE 754-2019 ``minimum``, section 7;
    ArgMax and ArgMin take a NaN as the extreme).
    A Transpose feeding only a GlobalMaxPool or a ReduceMax or ReduceMin over known axes runs
    with it: the
    reduction is done on the untransposed tensor, so a channels-last (NHWC) tensor reaches the
    device's channels-last pooling unit without a transpose on the host or the link.
``"golden"``
    A max-family node whose element type the device does not support: the golden model
    (``maxaccel.sim.reference``) on the CPU, the same bits.
``"onnxruntime"``
    Every other node, in CPU partitions: onnxruntime's bits.
``"onnx.reference"``
    A node whose subgraphs (If, Loop, Scan) hold max-family nodes: ``onnx.reference`` runs it,
    with those nodes sent to the device (or the golden model), so they keep the contract. Also a
    CPU partition onnxruntime cannot load (an operator it lacks): then the reason is in
    :attr:`OffloadSession.fallbacks`.

Model-local functions holding max-family nodes are inlined first, so their nodes run on the
device like any other. Windowed MaxPool (1, 8, 10, 11, 12, 22) runs on the device too,
through ``Device.max_pool`` (``OFFLOADED`` in :mod:`maxaccel.host.partition`).

Max-1, Max-6, Min-1 and Min-6 require same-shape inputs; this session broadcasts them as
Max-8 and Min-8 do (a superset). Results differ from running the whole model on onnxruntime
only in max-family nodes and only for NaN and signed zeros (``docs/semantics.md``).
"""

import functools
import inspect
import os
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from maxaccel.contract.dtypes import dtype_of
from maxaccel.contract.pooling import resolve_max_pool
from maxaccel.host.partition import (FAMILY, MAX_IR_VERSION, OFFLOADED, CpuPartition,
                                     DeviceStep, SubgraphStep, partition)

__all__ = ["OffloadSession", "read_model", "TensorSpec", "ModelMetadata", "StepTiming", "OFFLOADED",
           "DEVICE", "GOLDEN", "ONNXRUNTIME", "ONNX_REFERENCE", "SPINNING", "NO_SPINNING",
           "STOP_SPINNING_AFTER_RUN", "without_spinning", "spinning_within_runs"]

DEVICE = "device"
GOLDEN = "golden"
ONNXRUNTIME = "onnxruntime"
ONNX_REFERENCE = "onnx.reference"
_OPTIMIZING = threading.Lock()    # OffloadSession._optimized: one at a time


def _type_text(type_proto):
    """onnxruntime's name of a type: ``tensor(float)``, ``seq(tensor(int64))``, ..."""
    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(type_proto, kind).elem_type
        name = TensorProto.DataType.Name(elem).lower() if elem else "undefined"
        return f"{kind[:-5]}({name})"
    if kind == "sequence_type":
        return f"seq({_type_text(type_proto.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({_type_text(type_proto.optional_type.elem_type)})"
    if kind == "map_type":
        key = TensorProto.DataType.Name(type_proto.map_type.key_type).lower()
        return f"map({key},{_type_text(type_proto.map_type.value_type)})"
    return "undefined"


class TensorSpec:
    """A graph input or output, as onnxruntime's ``NodeArg``: ``name``, ``type``
    (``'tensor(float)'``) and ``shape`` (a list of ints, strings for symbolic sizes and None
    for unknown ones; ``[]`` when the graph declares no shape), plus ``dtype`` (numpy, None if
    not a tensor or unknown) and ``dims`` (the shape as a tuple, None when undeclared).
    """

    __slots__ = ("name", "type", "dtype", "dims", "kind")

    def __init__(self, name, type_text, dtype, dims, kind="tensor_type"):
        self.name, self.type, self.dtype, self.dims = name, type_text, dtype, dims
        #: The ``onnx.TypeProto`` field the value's type is in: ``"tensor_type"``,
        #: ``"sequence_type"``, ``"optional_type"``, ``"map_type"``...
        self.kind = kind

    @property
    def shape(self):
        return [] if self.dims is None else list(self.dims)

    @classmethod
    def of(cls, value_info):
        kind = value_info.type.WhichOneof("value")
        dtype, dims = None, None
        if kind == "tensor_type":
            tensor = value_info.type.tensor_type
            if tensor.elem_type:
                dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
            if tensor.HasField("shape"):
                dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                             for d in tensor.shape.dim)
        return cls(value_info.name, _type_text(value_info.type), dtype, dims, kind)

    def __repr__(self):
        shape = "?" if self.dims is None else "[" + ", ".join(
            "?" if d is None else str(d) for d in self.dims) + "]"
        return f"{self.name}: {self.dtype or self.type} {shape}"


@dataclass(frozen=True)
class ModelMetadata:
    """The model's metadata, as onnxruntime's ``ModelMetadata``."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict = field(default_factory=dict)


class StepTiming(NamedTuple):
    """One step of the latest run: a CPU partition (``"partition N"``), a device node or a node
    run on ``onnx.reference``; ``nodes`` names the nodes it ran, ``seconds`` its wall time."""

    name: str
    where: str
    nodes: tuple
    seconds: float


def read_model(model_or_path):
    """``model_or_path`` (an ``onnx.ModelProto``, a path or serialized bytes) as an
    ``onnx.ModelProto``; FileNotFoundError for no file, ValueError (one line) for what does
    not parse as ONNX, TypeError for anything else."""
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    if isinstance(model_or_path, (bytes, bytearray)):
        try:
            return onnx.load_model_from_string(bytes(model_or_path))
        except Exception as error:  # protobuf raises its own DecodeError
            raise ValueError(f"not a valid ONNX model: cannot parse the bytes ({error})") \
                from None
    if isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no ONNX model at {path!r}")
        try:
            return onnx.load(path)
        except Exception as error:
            raise ValueError(f"not a valid ONNX model: cannot parse {path!r} ({error})") \
                from None
    raise TypeError(f"OffloadSession takes an onnx.ModelProto, a path or bytes, "
                    f"not {type(model_or_path).__name__}")


def _for_onnxruntime(model):
    """``model`` serialized with an IR version onnxruntime reads."""
    if model.ir_version > MAX_IR_VERSION:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.ir_version = MAX_IR_VERSION
    return model.SerializeToString()


def _onnxruntime_refusal(model):
    """Why onnxruntime does not load ``model``, or None if it does (an operator it has no
    kernel for counts as loaded: the graph was valid, and that node may run on the device)."""
    import onnxruntime
    from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as Missing
    try:
        onnxruntime.InferenceSession(_for_onnxruntime(model),
                                     providers=["CPUExecutionProvider"])
    except Missing:
        return None
    except Exception as error:  # onnxruntime's exception types, one per status
        return str(error)
    return None


_PARTITION, _DEVICE_STEP, _SUBGRAPH = "partition", "device step", "subgraph step"

#: Element types whose numpy arrays onnxruntime's Python API takes and returns (not bfloat16,
#: the float8 and 4-bit types: those arrays reach only the device, between partitions).
_NUMPY_NATIVE = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BOOL,
                 TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
                 TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
                 TensorProto.STRING}

#: The session configuration entries that let a thread pool's idle threads spin, and the
#: value that stops them (onnxruntime's default, "1", lets them spin).
SPINNING = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")
NO_SPINNING = "0"
#: The session configuration entry that stops the pools' spinning when a run returns.
STOP_SPINNING_AFTER_RUN = "session.force_spinning_stop"


def _set_unless_set(options, entries):
    """``options`` (None: new default ones) with each of ``entries`` (key -> value) the caller
    has not set; an entry the caller set is kept. The caller's object is changed (onnxruntime
    has no copy of a ``SessionOptions``, and setting an entry again logs a warning)."""
    import onnxruntime
    if options is None:
        options = onnxruntime.SessionOptions()
    for key, value in entries.items():
        try:
            options.get_session_config_entry(key)
        except RuntimeError:    # onnxruntime's answer for an entry never set
            options.add_session_config_entry(key, value)
    return options


def without_spinning(options):
    """``options`` (an ``onnxruntime.SessionOptions``; None: new default ones) with each
    entry of :data:`SPINNING` the caller has not set set to :data:`NO_SPINNING`, so that idle
    pool threads sleep instead of spinning (what a model run as partitions needs: a pool
    spinning after its partition holds a core that the device call and the next partition's
    pool need); an entry the caller set is kept. The caller's object is changed, which
    changes nothing else."""
    return _set_unless_set(options, dict.fromkeys(SPINNING, NO_SPINNING))


def spinning_within_runs(options):
    """``options`` (as for :func:`without_spinning`) with :data:`STOP_SPINNING_AFTER_RUN`
    set to "1" unless the caller set it: the pool of a model run as one session spins (if
    the caller lets it: onnxruntime's default) while a run lasts, device calls included, and
    stops when the run returns, so it neither waits to be woken between a run's parallel
    nodes nor holds a core after the run."""
    return _set_unless_set(options, {STOP_SPINNING_AFTER_RUN: "1"})


def _direct_run(engine):
    """How to run a partition's onnxruntime session: its binding's ``run``, without
    ``InferenceSession.run``'s Python wrapper, when it runs on the CPU provider alone.

    The wrapper checks that every input is fed (a partition's feed always is) and other
    providers' graph-capture and OrtValue rules; cold after a device call it costs 10-30 µs a
    partition. An ``EPFail`` goes through ``engine.run``, so onnxruntime's fallback is kept.

    Parameters
    ----------
    engine : onnxruntime.InferenceSession

    Returns
    -------
    callable
        ``run(output_names, feed, run_options)``, returning what ``engine.run`` returns.
    """
    inner = getattr(engine, "_sess", None)
    if getattr(inner, "run", None) is None or engine.get_providers() != ["CPUExecutionProvider"]:
        return engine.run
    from onnxruntime.capi.onnxruntime_pybind11_state import EPFail

    def run(output_names, feed, run_options):
        try:
            return inner.run(output_names, feed, run_options)
        except EPFail:
            return engine.run(output_names, feed, run_options)
    return run


#: The attributes of MaxPool (every opset) that ``max_pool`` takes, with their defaults.
_MAX_POOL_ATTRIBUTES = {"strides": None, "pads": None, "dilations": None, "ceil_mode": 0,
                        "auto_pad": "NOTSET", "storage_order": 0}


def _takes_out(method):
    """Whether a device's ``method`` takes ``out`` (an array it writes its result into, as
    :meth:`~maxaccel.host.device.Device.max_pool` does): a device may be anything with the
    operators' methods (the golden model's module, say), which need not."""
    try:
        return "out" in inspect.signature(method).parameters
    except (TypeError, ValueError):     # no signature to read
        return False


def _max_pool_arguments(attributes):
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


def _nchwc_level():
    """The lowest optimization level at which onnxruntime runs Convs in its NCHWc layout:
    ``ORT_ENABLE_LAYOUT``, or ``ORT_ENABLE_ALL`` in an onnxruntime without that level."""
    import onnxruntime
    levels = onnxruntime.GraphOptimizationLevel
    return getattr(levels, "ORT_ENABLE_LAYOUT", levels.ORT_ENABLE_ALL)


#: The device call of each max-family node that is not a MaxPool; a GlobalMaxPool's when a
#: Transpose is folded into it (a reduction over the mapped spatial axes).
_DEVICE_CALLS = {"Max": "max", "Min": "min", "ReduceMax": "reduce_max",
                 "ReduceMin": "reduce_min", "GlobalMaxPool": "reduce_max",
                 "ArgMax": "arg_max", "ArgMin": "arg_min"}


def _indices_wanted(op_type, outputs):
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


class _OneRun:
    """What one run of the one session records, apart from any other run on the session (runs
    may be made from several threads at once): its device calls (``{operator index: (start,
    seconds, where)}``) and the exceptions its device operators raised."""

    __slots__ = ("calls", "failures")

    def __init__(self):
        self.calls, self.failures = {}, []


class OffloadSession:
    """An ONNX model whose max-family nodes run on a maxaccel device and whose other nodes run
    on onnxruntime: onnxruntime's ``InferenceSession`` API.

    Parameters
    ----------
    path_or_bytes : str, os.PathLike, bytes or onnx.ModelProto
        The model. It must pass ``onnx.checker`` or load in onnxruntime (no stricter check
        than onnxruntime's).
    sess_options : onnxruntime.SessionOptions, optional
        Used for the one session, or every CPU partition. When the model has device or
        subgraph steps, entries it does not set are set on it: for the one session
        :data:`STOP_SPINNING_AFTER_RUN` (see :func:`spinning_within_runs`: its pools spin only
        while a run lasts), its ``execution_order`` and the device operators' library; for
        partitions each of :data:`SPINNING` to :data:`NO_SPINNING` (see
        :func:`without_spinning`: the partitions' pools sleep between hand-overs). A model
        onnxruntime refuses to load as one session gets both. Entries already present count
        as the caller's: sessions sharing one ``SessionOptions`` keep what the first set. For
        the one session onnxruntime also optimizes the model once with them (its optimized
        model file, log level and profiling set aside meanwhile and restored), so that pools
        take its NCHWc tensors (``docs/offload.md``, "One session").
    providers, provider_options : optional
        onnxruntime execution providers for the CPU partitions (default
        ``["CPUExecutionProvider"]``), as for ``InferenceSession``.
    device : Device or str, optional
        Where the max family, Min, ReduceMin, ArgMax and ArgMin run: a
        :class:`~maxaccel.host.device.Device` or anything with its ``max``, ``reduce_max``
        and ``global_max_pool`` (and ``max_pool``, ``min``, ``reduce_min``, ``arg_max`` and
        ``arg_min`` for models with those nodes; the golden model
        module ``maxaccel.sim.reference`` works too), or a device URL (``"sim"``,
        ``"verilator"``, ``"serial:///dev/ttyUSB0"``...): opened here by
        :func:`~maxaccel.host.device.open_device`, owned by the session and closed by
        :meth:`close` (or the ``with`` block). Default: the virtual board,
        ``open_device("sim")``, opened at the first :meth:`run` that needs it, owned and closed
        by the session.
    one_session : bool, optional
        Run the model as one onnxruntime session with device operators where it can (the
        default); False: always as partitions (:attr:`one_session_refusal` says why a model
        that could not was not).
    **kwargs
        Passed to each ``onnxruntime.InferenceSession``.

    :meth:`run` may be called from several threads at once, as onnxruntime's: each call gets
    its own results and its own exceptions; :attr:`last_run` and :attr:`last_steps` are those
    of the run that returned last.

    Attributes
    ----------
    inputs, outputs : list of TensorSpec
        The graph's inputs (those without an initializer) and outputs.
    placements : list of (str, str, str)
        ``(node name, op_type, where)`` for every node, in run order, as planned (``where``:
        see the module docstring).
    last_run : list of (str, str, str)
        The same for the latest :meth:`run`, as it happened (worked out when first read).
    last_steps : list of StepTiming
        Each step of the latest :meth:`run` with its wall time (likewise).
    fallbacks : dict
        Partition name -> why onnxruntime could not run it (it ran on ``onnx.reference``).
    one_session_refusal : str or None
        Why the model runs as partitions rather than as one session (None when it runs as
        one).

    Raises
    ------
    ValueError
        The model is not valid ONNX: neither ``onnx.checker`` (with strict type inference: a
        bool Max breaks its operator's type constraint) nor onnxruntime accepts it (both
        messages are included), or a partition runs neither on onnxruntime nor on
        ``onnx.reference``.
    FileNotFoundError, TypeError
        No file at the path; an argument that is no model.
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None,
                 *, device=None, one_session=True, **kwargs):
        model = read_model(path_or_bytes)
        try:
            onnx.checker.check_model(model)
            # The checker leaves operators' type constraints alone (a bool Max passes it);
            # onnxruntime checks them at load, and so does strict shape inference.
            onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
            # No stricter than onnxruntime: refused only if onnxruntime refuses it too.
            refusal = _onnxruntime_refusal(model)
            if refusal is not None:
                raise ValueError(f"not a valid ONNX model: {error} (onnxruntime: {refusal})") \
                    from None
        self.model = model
        graph = model.graph
        initialized = {t.name for t in graph.initializer}
        self.inputs = [TensorSpec.of(i) for i in graph.input if i.name not in initialized]
        self._overridable = [TensorSpec.of(i) for i in graph.input if i.name in initialized]
        self.outputs = [TensorSpec.of(o) for o in graph.output]
        self._specs = {s.name: s for s in self.inputs + self._overridable}
        try:
            plan = partition(model, lambda index, node: node.name or f"{node.op_type}_{index}")
        except ValueError as error:
            raise ValueError(f"not a valid ONNX model: {error}") from None
        self._steps = plan.steps
        self._sess_options, self._providers = sess_options, providers
        self._provider_options, self._ort_kwargs = provider_options, kwargs
        self.fallbacks = {}
        self._engines = {}
        self._runs = {}     # partition index -> how its onnxruntime session is run
        # The pools of a model with device or subgraph steps: spinning only while a run lasts
        # in one session (spinning_within_runs), sleeping between partitions
        # (without_spinning). A model with no such step is one partition: onnxruntime's own
        # behaviour.
        self._partition_options = sess_options
        self._needs_device = any(not isinstance(s, CpuPartition) for s in self._steps)
        if self._needs_device and sess_options is None:
            import onnxruntime
            self._partition_options = onnxruntime.SessionOptions()
        # onnxruntime warns about the providers (one it does not have, say) for every
        # partition's session: said once for the model, as its own InferenceSession would.
        self._one = None
        self.one_session_refusal = "one_session=False" if not one_session else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if one_session:
                self.one_session_refusal = self._make_one_session(plan)
            if self._one is None and self._needs_device:
                without_spinning(self._partition_options)
            for step in self._steps if self._one is None else ():
                if isinstance(step, CpuPartition) and not step.untyped:
                    self._engines[step.index] = self._engine(step, step.model)
                elif isinstance(step, SubgraphStep):
                    from onnx.reference import ReferenceEvaluator
                    self._engines[id(step)] = ReferenceEvaluator(step.model,
                                                                 new_ops=self._reference_ops())
        for text, category in dict.fromkeys((str(w.message), w.category) for w in caught):
            warnings.warn(text, category, stacklevel=2)
        # Initializers a device step, a subgraph step or the graph's outputs read as arrays.
        wanted = {n for s in self._steps if not isinstance(s, CpuPartition) for n in s.inputs}
        wanted |= {o.name for o in self.outputs}
        self._initializers = {t.name: numpy_helper.to_array(t) for t in plan.model.graph.initializer
                              if t.name in wanted}
        self.placements = [(name, node.op_type, self._where(step))
                           for step in self._steps for name, node in step.nodes]
        self._make_schedules()
        self._output_names = [o.name for o in self.outputs]
        self._routes = {}   # dtype -> (the device it was worked out for, (device, where))
        self._step_calls = {}   # id(step) -> (device, dtype, call): _step_call
        self._last = ([], [])    # (last_run, last_steps)
        self._one_last = None   # or, after a one-session run, what _one_records makes them of
        self._owns_device = False
        if isinstance(device, str):
            # A device URL: opened here (a wrong URL or an absent board is said at once), owned
            # and closed by the session.
            from maxaccel.host.device import open_device
            device = open_device(device)
            self._owns_device = True
        elif device is not None and not all(hasattr(device, name) for name in
                                            ("max", "reduce_max", "global_max_pool")):
            raise TypeError(f"device must be a Device (open_device(url)), a device URL such as "
                            f"'sim', or maxaccel.sim.reference, not {type(device).__name__}")
        self.device = device

    def _make_schedules(self):
        """What a run needs of each step, worked out once: its kind, its nodes' names and ops
        (``_schedule``); for the one session, each entry with its device operator's index, or
        for a partition the indices of the device operators after it in the plan
        (``_one_schedule``, read by :meth:`_one_records`)."""
        self._schedule = [(step, _PARTITION if isinstance(step, CpuPartition) else
                           _DEVICE_STEP if isinstance(step, DeviceStep) else _SUBGRAPH,
                           tuple(name for name, _ in step.nodes),
                           [(name, node.op_type) for name, node in step.nodes])
                          for step in self._steps]
        if self._one is None:
            return
        index = {id(step): i for i, (step, *_) in enumerate(self._one_steps)}
        later = [index[id(entry[0])] for entry in self._schedule if entry[1] is _DEVICE_STEP]
        self._one_schedule = []
        for entry in self._schedule:
            if entry[1] is _DEVICE_STEP:
                later.pop(0)
                self._one_schedule.append((*entry, index[id(entry[0])]))
            else:
                self._one_schedule.append((*entry, tuple(later)))

    # --- the onnxruntime API -------------------------------------------------------------------

    def get_inputs(self):
        """The graph inputs to feed (as onnxruntime's ``get_inputs``)."""
        return list(self.inputs)

    def get_outputs(self):
        return list(self.outputs)

    def get_overridable_initializers(self):
        """Initializers that are also graph inputs, which a feed may replace."""
        return list(self._overridable)

    def get_modelmeta(self):
        model = self.model
        return ModelMetadata(
            producer_name=model.producer_name, graph_name=model.graph.name,
            domain=model.domain, description=model.doc_string,
            graph_description=model.graph.doc_string, version=model.model_version,
            custom_metadata_map={p.key: p.value for p in model.metadata_props})

    def get_providers(self):
        """The onnxruntime providers of the CPU nodes (the device is :attr:`device`)."""
        engines = list(self._engines.values())
        for engine in engines if self._one is None else [self._one]:
            if hasattr(engine, "get_providers"):
                return engine.get_providers()
        return [p if isinstance(p, str) else p[0]
                for p in (self._providers or ["CPUExecutionProvider"])]

    def get_session_options(self):
        if self._sess_options is None:
            import onnxruntime
            self._sess_options = onnxruntime.SessionOptions()
        return self._sess_options

    # --- running -------------------------------------------------------------------------------

    def run(self, output_names, input_feed, run_options=None):
        """Run the model.

        Parameters
        ----------
        output_names : list of str or None
            Outputs to return, in this order; None (or empty) for all graph outputs.
        input_feed : dict of str to array_like
            One array per graph input (inputs with an initializer may be overridden).
        run_options : onnxruntime.RunOptions, optional
            Passed to every CPU partition.

        Returns
        -------
        list of numpy.ndarray

        Raises
        ------
        ValueError
            Unknown or missing inputs, shapes that do not match the graph, unknown outputs.
        TypeError
            Feeds whose dtype differs from the graph's.
        """
        feeds = self.check_feeds(input_feed)
        if not output_names:
            output_names = self._output_names
        else:
            unknown = [n for n in output_names if n not in self._output_names]
            if unknown:
                known = self._output_names
                raise ValueError(f"unknown output(s) {', '.join(map(repr, unknown))}; the "
                                 f"model's outputs: {', '.join(sorted(known))}")
        if self.device is None and self._needs_device:
            from maxaccel.host.device import open_device
            self.device = open_device("sim")
            self._owns_device = True
        if self._one is not None:
            return self._run_one(output_names, feeds, run_options)
        values = dict(self._initializers)
        values.update(feeds)
        record, timings = [], []
        clock = time.perf_counter
        for step, kind, names, operators in self._schedule:
            started = clock()
            if kind is _PARTITION:
                where = self._run_partition(step, values, feeds, run_options)
            elif kind is _DEVICE_STEP:
                where = self._run_device(step, values)
            else:
                where = self._run_subgraph(step, values)
            timings.append(StepTiming(step.name, where, names, clock() - started))
            record += [(name, op_type, where) for name, op_type in operators]
        self._last, self._one_last = (record, timings), None
        return [values[name] for name in output_names]

    # --- one onnxruntime session, device steps as its operators -------------------------------

    def _make_one_session(self, plan):
        """Make :attr:`_one`, the model as one onnxruntime session; returns None, or why the
        model runs as partitions instead."""
        import onnxruntime

        from maxaccel.host import device_ops
        steps = self._steps
        if not any(isinstance(s, DeviceStep) for s in steps):
            return "no device step: the model is one partition"
        if any(isinstance(s, SubgraphStep) for s in steps):
            return "a subgraph step (If, Loop or Scan holding max-family nodes) runs on " \
                   "onnx.reference"
        if any(s.untyped for s in steps if isinstance(s, CpuPartition)):
            return "shape inference could not type every partition's inputs"
        providers = [p if isinstance(p, str) else p[0]
                     for p in (self._providers or ["CPUExecutionProvider"])]
        if providers != ["CPUExecutionProvider"]:
            return f"providers {providers}: the device operators are the CPU provider's"
        graph = plan.model.graph
        foreign = sorted({TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower()
                          for v in list(graph.input) + list(graph.output)
                          if v.type.tensor_type.elem_type not in _NUMPY_NATIVE})
        if foreign:
            return f"onnxruntime's Python API takes and gives no {', '.join(foreign)} arrays"
        types = {name: t.tensor_type.elem_type for name, t in plan.types.items()
                 if t.HasField("tensor_type")}
        names = {n for s in steps if isinstance(s, DeviceStep) for n in s.inputs + s.outputs
                 if n}
        unknown = sorted(n for n in names if not types.get(n))
        if unknown:
            return f"no element type for {', '.join(unknown[:3])}"
        model, device_steps, signatures = device_ops.one_model(
            plan.model, steps, types, lambda index: device_ops.step_key(self, index))
        options = self._partition_options
        try:
            domain = device_ops.register(options, signatures)
        except device_ops.OperatorsUnavailable as error:
            return f"the device operators are unavailable: {error}"
        device_ops.with_domain(model, domain, signatures)
        # Pools between onnxruntime's NCHWc nodes take its NCHWc tensors as they lie.
        blocked, blocks = model, [None] * len(device_steps)
        if int(options.graph_optimization_level) >= int(_nchwc_level()):
            blocked, blocks = device_ops.with_blocked_pools(model, device_steps, domain,
                                                            self._optimized)
        # Nodes in the plan's order where the data allow (Kahn's order, lowest node first),
        # so each partition runs between the device steps around it (``last_steps``).
        if options.execution_order == onnxruntime.ExecutionOrder.DEFAULT:
            options.execution_order = onnxruntime.ExecutionOrder.PRIORITY_BASED
        spinning_within_runs(options)
        try:
            self._one = self._onnxruntime_session(blocked)
        except Exception as error:  # onnxruntime's exception types: the partitions then
            if blocked is model:
                return f"onnxruntime does not load the model as one session: {error}"
            blocks = [None] * len(device_steps)
            try:
                self._one = self._onnxruntime_session(model)
            except Exception as error:
                return f"onnxruntime does not load the model as one session: {error}"
        # Each operator's step, whether every input and output of the step has a name (then
        # the operator's arrays are the step's, in order), and the NCHWc block of its tensors.
        self._one_steps = [(step, all(step.inputs), all(step.outputs), block)
                           for step, block in zip(device_steps, blocks)]
        self._one_run = _direct_run(self._one)
        # What the kernels' calls (_kernel_call) share: each operator's (call, where) for
        # self._operators_device, the run each thread is in (_OneRun), the link's lock.
        self._operators = [None] * len(device_steps)
        self._operators_device = None
        self._current = threading.local()
        # onnxruntime's parallel executor calls kernels on its own threads, which are in no
        # run of their own: its runs on this session go one at a time, the run in ``_shared``.
        self._parallel = options.execution_mode == onnxruntime.ExecutionMode.ORT_PARALLEL
        self._shared, self._one_at_a_time = [None], threading.Lock()
        self._device_lock = threading.Lock()
        return None

    def _optimized(self, model):
        """``model`` as onnxruntime optimizes it with the session's options (a session made and
        dropped, which writes no profile and no warning that the file suits only this
        machine), or None if onnxruntime does not load it."""
        import tempfile
        options = self._partition_options
        # Sessions made at once from one SessionOptions: one sets its entries aside at a time.
        with _OPTIMIZING, tempfile.TemporaryDirectory() as scratch:
            saved = (options.optimized_model_filepath, options.log_severity_level,
                     options.enable_profiling)
            try:
                options.optimized_model_filepath = os.path.join(scratch, "optimized.onnx")
                options.log_severity_level = max(saved[1], 3)
                options.enable_profiling = False
                self._new_onnxruntime_session(model)    # no session of the model's to run
                return onnx.load(options.optimized_model_filepath)
            except Exception:   # onnxruntime's exception types: the model as it is, then
                return None
            finally:
                (options.optimized_model_filepath, options.log_severity_level,
                 options.enable_profiling) = saved

    def _kernel_call(self, index):
        """The call of device operator ``index``'s kernel
        (:func:`maxaccel.host.device_ops._resolve`): ``call(inputs, room)`` runs the step on
        the kernel's ``(memoryview, element type, shape)`` over onnxruntime's buffers (read
        only), one per named input, and returns its results, one per named output, as the
        kernel copies them (None: written through ``room``). The kernel keeps the call; it
        holds the session weakly, and its operator is worked out on its first call after
        :meth:`_run_one` saw a new device."""
        session = weakref.ref(self)
        operators, current, shared = self._operators, self._current, self._shared
        lock, clock = self._device_lock, time.perf_counter

        def call(inputs, room):
            run = getattr(current, "run", None) or shared[0] or _OneRun()
            try:
                made = operators[index]
                if made is None:
                    made = operators[index] = session()._operator(index, inputs[0][1])
                # onnxruntime's parallel executor may run two device steps at once: one at a
                # time on the link.
                with lock:
                    started = clock()
                    results = made[0](inputs, room)
                    run.calls[index] = (started, clock() - started, made[1])
            except BaseException as error:
                run.failures.append(error)  # raised by run() in place of onnxruntime's error
                raise
            return results
        return call

    def _operator(self, index, element):
        """How device operator ``index`` runs, its inputs of ONNX element type ``element``,
        worked out once per operator and device (the kernel's path is cold after every device
        call: each layer of Python on it costs microseconds): ``(call, where)``;
        ``call(inputs, room)`` runs the step on the kernel's inputs and returns its results as
        the kernel copies them (:meth:`_kernel_call`), one Python call between the kernel and
        the device's."""
        from maxaccel.host import device_ops
        step, names_every_input, names_every_output, block = self._one_steps[index]
        dtype = device_ops.element_dtype(element)
        if block:
            return self._blocked_pool(step, dtype, block)
        step_call = self._step_call(step, dtype)
        where = self._device_for(dtype)[1]
        arrays_of = device_ops.kept(device_ops.arrays_of)

        def call(inputs, room):
            arrays = arrays_of(inputs)
            if not names_every_input:
                given = iter(arrays)
                arrays = [next(given) if name else None for name in step.inputs]
            return [device_ops.exportable(np.asarray(result))
                    for result, name in zip(step_call(*arrays)[0], step.outputs)
                    if names_every_output or name]
        return call, where

    def _blocked_pool(self, step, dtype, block):
        """``(call, where)`` of pool ``step`` on onnxruntime's NCHWc tensors of ``block``
        (:func:`~maxaccel.host.device_ops.with_blocked_pools`): ``call(inputs, room)`` of the
        kernel's inputs returns its result as the kernel copies it, or writes it into
        onnxruntime's output when the device's ``max_pool`` takes ``out``
        (:func:`~maxaccel.host.device_ops.blocked_pool`)."""
        from maxaccel.host import device_ops
        device, where = self._device_for(dtype)
        if step.node.op_type == "GlobalMaxPool":
            return device_ops.blocked_pool(device.reduce_max, dtype, block, True), where
        pool = self._prepare(device, "MaxPool", step.attributes)
        output_dims = None
        if _takes_out(device.max_pool):
            arguments = _max_pool_arguments(step.attributes)

            def output_dims(dims):
                return resolve_max_pool(dims, **arguments).output_shape
        return device_ops.blocked_pool(pool, dtype, block, output_dims=output_dims), where

    def _run_one(self, output_names, feeds, run_options):
        """:meth:`run` as one onnxruntime session. :attr:`last_steps` gives each device step
        its call's time and each partition the time between the device calls around it
        (its nodes run there); a device step onnxruntime did not need for the outputs asked
        for is not in :attr:`last_run` or :attr:`last_steps`."""
        if self._operators_device is not self.device:
            self._operators[:] = [None] * len(self._operators)
            self._operators_device = self.device
        run = _OneRun()
        current = self._current
        if self._parallel:
            self._one_at_a_time.acquire()
            self._shared[0] = run
        current.run = run
        clock = time.perf_counter
        started = clock()
        try:
            results = self._one_run(output_names, feeds, run_options)
        except Exception:
            if run.failures:
                raise run.failures[-1] from None
            raise
        finally:
            current.run = None
            if self._parallel:
                self._shared[0] = None
                self._one_at_a_time.release()
        # The run's records are worked out when read (cold after the run, they cost as much
        # as a device step's glue).
        self._one_last = (started, clock(), run.calls)
        return results

    def _one_records(self, started, ended, calls):
        """``(last_run, last_steps)`` of a one-session run from its start, its end and its
        device calls (``{operator index: (start, seconds, where)}``)."""
        record, timings = [], []
        since = started
        for step, kind, names, operators, operator in self._one_schedule:
            if kind is _DEVICE_STEP:
                call = calls.get(operator)
                if call is None:
                    continue
                begun, seconds, where = call
                since = begun + seconds
            else:   # until the next device call of the plan (``operator``: their indices)
                until = next((calls[i][0] for i in operator if i in calls), ended)
                seconds, where = max(until - since, 0.0), ONNXRUNTIME
            timings.append(StepTiming(step.name, where, names, seconds))
            record += [(name, op_type, where) for name, op_type in operators]
        return record, timings

    @property
    def last_run(self):
        return self._records()[0]

    @property
    def last_steps(self):
        return self._records()[1]

    def _records(self):
        if self._one_last is not None:
            self._last, self._one_last = self._one_records(*self._one_last), None
        return self._last

    def _where(self, step):
        if isinstance(step, CpuPartition):
            engine = self._engines.get(step.index)
            return ONNXRUNTIME if engine is None or hasattr(engine, "get_providers") \
                else ONNX_REFERENCE
        return DEVICE if isinstance(step, DeviceStep) else ONNX_REFERENCE

    def _onnxruntime_session(self, model):
        """``model`` as an onnxruntime session with the caller's options (their pool entries
        set as the session's docstring says), providers and keyword arguments: a partition's, or
        the one session's."""
        return self._new_onnxruntime_session(model)

    def _new_onnxruntime_session(self, model):
        """``model`` as an onnxruntime session with the caller's options, providers and
        keyword arguments as they are now: :meth:`_onnxruntime_session`'s, and the one made
        and dropped by :meth:`_optimized`."""
        import onnxruntime
        return onnxruntime.InferenceSession(
            _for_onnxruntime(model), self._partition_options,
            providers=self._providers or ["CPUExecutionProvider"],
            provider_options=self._provider_options, **self._ort_kwargs)

    def _engine(self, step, model):
        """An onnxruntime session for a partition, or ``onnx.reference`` if it cannot load."""
        try:
            return self._onnxruntime_session(model)
        except Exception as error:  # onnxruntime's own exception types, by status
            from onnx.reference import ReferenceEvaluator
            try:
                engine = ReferenceEvaluator(model, new_ops=self._reference_ops())
            except Exception as second:
                raise ValueError(f"{step.name} ({len(step.nodes)} nodes) runs neither on "
                                 f"onnxruntime ({error}) nor on onnx.reference ({second})") \
                    from None
            self.fallbacks[step.name] = str(error)
            return engine

    def _run_partition(self, step, values, feeds, run_options):
        engine = self._engines.get(step.index)
        feed = {name: values[name] for name in step.inputs}
        for name in step.overridable:
            if name in feeds:
                feed[name] = feeds[name]
        if engine is None:  # inputs shape inference could not type: type them from this run
            model = onnx.ModelProto()
            model.CopyFrom(step.model)
            for value in model.graph.input:
                if value.name in step.untyped:
                    value.type.CopyFrom(helper.make_tensor_type_proto(
                        helper.np_dtype_to_tensor_dtype(np.asarray(feed[value.name]).dtype),
                        None))
            engine = self._engines[step.index] = self._engine(step, model)
        if hasattr(engine, "get_providers"):
            run = self._runs.get(step.index)
            if run is None:
                run = self._runs[step.index] = _direct_run(engine)
            results = run(step.outputs, feed, run_options)
            where = ONNXRUNTIME
        else:
            results = engine.run(step.outputs, feed)
            where = ONNX_REFERENCE
        values.update(zip(step.outputs, results))
        return where

    def _run_device(self, step, values):
        """Device step ``step`` on the arrays of ``values`` (by name); its results go there."""
        inputs = [values[n] if n else None for n in step.inputs]
        results, where = self._step_call(step, inputs[0].dtype)(*inputs)
        for name, result in zip(step.outputs, results):
            if name:
                values[name] = result
        return where

    def _step_call(self, step, dtype):
        """What runs device step ``step`` on inputs of element type ``dtype``, worked out once
        per step, element type and device (the steps' run path is cold after every device
        call: each layer of Python on it costs microseconds): ``call(*inputs)``, the step's
        inputs in order (None for an absent optional one), returns ``(results, where)``, one
        result per name of ``step.outputs`` (None for an empty name)."""
        made = self._step_calls.get(id(step))
        if made is not None and made[0] is self.device and made[1] == dtype:
            return made[2]
        device, where = self._device_for(dtype)
        node = step.node
        if step.transpose is None:
            indices = _indices_wanted(node.op_type, step.outputs)
            operation = self._prepare(device, node.op_type, step.attributes, indices)

            if indices:
                def call(*inputs):
                    return operation(*inputs), where
            else:
                def call(*inputs):
                    return (operation(*inputs),), where
        else:
            # Transpose + reduction: reduce the untransposed tensor over the mapped axes, then
            # move the (now size-1) axes where the transposed result has them.
            reduce = getattr(device, _DEVICE_CALLS[node.op_type])
            axes = [step.perm[a] for a in step.axes]
            dropped = None if node.op_type == "GlobalMaxPool" \
                or step.attributes.get("keepdims", 1) else set(step.axes)

            def call(x, *_):
                result = np.ascontiguousarray(reduce(x, axes=axes, keepdims=True)
                                              .transpose(step.perm))
                if dropped is not None:
                    result = result.reshape([n for a, n in enumerate(result.shape)
                                             if a not in dropped])
                return (result,), where
        self._step_calls[id(step)] = (self.device, dtype, call)
        return call

    def _run_subgraph(self, step, values):
        results = self._engines[id(step)].run(None, {n: values[n] for n in step.inputs})
        for name, result in zip(step.node.output, results):
            if name:    # a sequence (list), a map (dict) or an absent optional (None) as it is
                values[name] = result if result is None or isinstance(result, (list, dict)) \
                    else np.asarray(result)
        return ONNX_REFERENCE

    def _family(self, op_type, attributes, inputs, indices=False):
        """``(result, where)`` of a max-family node, on the device or (for an element type the
        device lacks) the golden model; a MaxPool with ``indices`` gives ``(y, indices)``."""
        device, where = self._device_for(inputs[0].dtype)
        return self._prepare(device, op_type, attributes, indices)(*inputs), where

    def _prepare(self, device, op_type, attributes, indices=False):
        """``device``'s call for a max-family node: a function of the node's inputs (None for
        an absent optional one) that returns its result (a MaxPool with ``indices``:
        ``(y, indices)``)."""
        if op_type in ("Max", "Min"):
            elementwise = getattr(device, _DEVICE_CALLS[op_type])
            return lambda *inputs: elementwise(*[x for x in inputs if x is not None])
        if op_type == "GlobalMaxPool":
            return device.global_max_pool
        if op_type == "MaxPool":
            arguments = _max_pool_arguments(attributes)
            if indices:
                arguments["return_indices"] = True
            return functools.partial(device.max_pool, **arguments)
        if op_type in ("ArgMax", "ArgMin"):
            return functools.partial(getattr(device, _DEVICE_CALLS[op_type]),
                                     axis=attributes.get("axis", 0),
                                     keepdims=attributes.get("keepdims", 1),
                                     select_last_index=attributes.get("select_last_index", 0))
        reduce = getattr(device, _DEVICE_CALLS[op_type])

        def reduction(*inputs):
            axes, keepdims, noop = _reduction_arguments(attributes, inputs)
            return reduce(inputs[0], axes=axes, keepdims=keepdims, noop_with_empty_axes=noop)
        return reduction

    def _device_for(self, dtype):
        """``(device, where)`` for a node of element type ``dtype``: the device, or the golden
        model for a type the device lacks (worked out once per type and device)."""
        known = self._routes.get(dtype)
        if known is not None and known[0] is self.device:
            return known[1]
        route = self._route(dtype)
        self._routes[dtype] = (self.device, route)
        return route

    def _route(self, dtype):
        identity = getattr(self.device, "identity", None)
        try:
            supported = identity is None or dtype_of(dtype) in identity.dtypes
        except TypeError:
            supported = True  # an unsupported dtype: the device's own check names the problem
        if supported:
            return self.device, DEVICE
        from maxaccel.sim import reference
        return reference, GOLDEN

    def _reference_ops(self):
        """``onnx.reference`` implementations of the max family that call :meth:`_family`."""
        from onnx.reference.op_run import OpRun
        session = self

        def make(op_type):
            def _run(self, *inputs, **_attributes):
                attributes = {a.name: helper.get_attribute_value(a)
                              for a in self.onnx_node.attribute}
                inputs = [None if x is None else np.asarray(x) for x in inputs]
                indices = _indices_wanted(op_type, self.onnx_node.output)
                result = session._family(op_type, attributes, inputs, indices)[0]
                return tuple(result) if indices else (result,)
            return type(op_type, (OpRun,), {"op_domain": "", "_run": _run})
        return [make(op_type) for op_type in FAMILY]

    def check_feeds(self, feeds, *, complete=True):
        """``feeds`` checked against the graph's inputs as :meth:`run` checks them (names,
        ranks, fixed sizes, element types), as native-byte-order arrays; raises what
        :meth:`run` raises for them. Lets a caller check its inputs before a device opens;
        with ``complete=False`` a missing input is no error (the caller makes it later).

        A big-endian (non-native) array of the input's element type is accepted, as
        onnxruntime accepts it, and converted to the native order (onnxruntime 1.31 reads its
        bytes as native ones: wrong values).

        A feed of an input that is no tensor (a sequence, an optional or a map: a list, None
        or a dict, as onnxruntime takes them) is passed as given: onnxruntime checks it where
        it is read (no device step reads one).
        """
        if not isinstance(feeds, dict):
            raise TypeError(f"input_feed must be a dict of input name to array, "
                            f"not {type(feeds).__name__}")
        specs = self._specs
        unknown = [n for n in feeds if n not in specs]
        if unknown:
            raise ValueError(f"unknown input(s) {', '.join(map(repr, unknown))}; the model's "
                             f"inputs: {', '.join(repr(s) for s in self.inputs)}")
        missing = [s.name for s in self.inputs if s.name not in feeds]
        if missing and complete:
            raise ValueError(f"missing input(s) {', '.join(map(repr, missing))}; the model's "
                             f"inputs: {', '.join(repr(s) for s in self.inputs)}")
        checked = {}
        for name, value in feeds.items():
            spec = specs[name]
            if spec.kind != "tensor_type":
                checked[name] = value
                continue
            array = value if isinstance(value, np.ndarray) else np.asarray(value)
            if not array.dtype.isnative:
                array = array.astype(array.dtype.newbyteorder("="))
            if spec.dtype is not None and array.dtype != spec.dtype:
                raise TypeError(f"input {name!r} must be {spec.dtype}, got {array.dtype}")
            if spec.dims is not None:
                if array.ndim != len(spec.dims):
                    raise ValueError(f"input {name!r} must have rank {len(spec.dims)} "
                                     f"({spec!r}), got shape {array.shape}")
                for axis, (want, got) in enumerate(zip(spec.dims, array.shape)):
                    if isinstance(want, int) and want != got:
                        raise ValueError(f"input {name!r} must have size {want} along axis "
                                         f"{axis} ({spec!r}), got shape {array.shape}")
            checked[name] = array
        return checked

    def close(self):
        """Close the device if the session opened it."""
        if self._owns_device:
            self.device.close()
            self.device, self._owns_device = None, False

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
