"""A model run as *one* onnxruntime session whose device steps are custom operators calling
the device (:mod:`maxaccel.host.device_ops`): one entry into onnxruntime a run, the device
steps' inputs read in place (``docs/offload.md``, "One session")."""

import threading
import time
import weakref

import numpy as np
from onnx import TensorProto

from maxaccel.host.offload.runtime import NUMPY_NATIVE, direct_run, nchwc_level
from maxaccel.host.offload.specs import StepTiming
from maxaccel.host.offload.steps import (DEVICE_STEP, ONNXRUNTIME, indices_wanted,
                                         pool_geometry, pool_reads, prepare, takes_out)
from maxaccel.host.partition import CpuPartition, DeviceStep, SubgraphStep

__all__ = ["OneSession", "refusal"]


def refusal(plan, provider_names):
    """Why ``plan`` (a :class:`~maxaccel.host.partition.Plan`) cannot run as one session on
    providers ``provider_names``, or None if it may."""
    steps = plan.steps
    if not any(isinstance(s, DeviceStep) for s in steps):
        return "no device step: the model is one partition"
    if any(isinstance(s, SubgraphStep) for s in steps):
        return "a subgraph step (If, Loop or Scan holding max-family nodes) runs on " \
               "onnx.reference"
    if any(s.untyped for s in steps if isinstance(s, CpuPartition)):
        return "shape inference could not type every partition's inputs"
    if provider_names != ["CPUExecutionProvider"]:
        return f"providers {provider_names}: the device operators are the CPU provider's"
    graph = plan.model.graph
    foreign = sorted({TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower()
                      for v in list(graph.input) + list(graph.output)
                      if v.type.tensor_type.elem_type not in NUMPY_NATIVE})
    if foreign:
        return f"onnxruntime's Python API takes and gives no {', '.join(foreign)} arrays"
    types = _element_types(plan)
    names = {n for s in steps if isinstance(s, DeviceStep) for n in s.inputs + s.outputs if n}
    unknown = sorted(n for n in names if not types.get(n))
    if unknown:
        return f"no element type for {', '.join(unknown[:3])}"
    return None


def _element_types(plan):
    return {name: t.tensor_type.elem_type for name, t in plan.types.items()
            if t.HasField("tensor_type")}


class _Refused(Exception):
    """The model does not run as one session; the message says why."""


class _OneRun:
    """What one run records, apart from any other run on the session (runs may be made from
    several threads at once): its device calls (``{operator index: (start, seconds,
    where)}``) and the exceptions its device operators raised."""

    __slots__ = ("calls", "failures")

    def __init__(self):
        self.calls, self.failures = {}, []


class OneSession:
    """The model as one onnxruntime session (:meth:`make`), its device steps run through
    ``calls`` (a :class:`~maxaccel.host.offload.steps.DeviceCalls`)."""

    @classmethod
    def make(cls, plan, runtime, calls, schedule):
        """``(one session, None)``, or ``(None, why the model runs as partitions)``."""
        reason = refusal(plan, runtime.provider_names)
        if reason is not None:
            return None, reason
        try:
            return cls(plan, runtime, calls, schedule), None
        except _Refused as refused:
            return None, str(refused)

    def __init__(self, plan, runtime, calls, schedule):
        import onnxruntime

        from maxaccel.host import device_ops
        self._calls = calls
        model, device_steps, signatures = device_ops.one_model(
            plan.model, plan.steps, _element_types(plan),
            lambda index: device_ops.step_key(self, index))
        options = runtime.options
        try:
            domain = device_ops.register(options, signatures)
        except device_ops.OperatorsUnavailable as error:
            raise _Refused(f"the device operators are unavailable: {error}") from None
        device_ops.with_domain(model, domain, signatures)
        # Pools between onnxruntime's NCHWc nodes take its NCHWc tensors as they lie.
        blocked, blocks = model, [None] * len(device_steps)
        if int(options.graph_optimization_level) >= int(nchwc_level()):
            blocked, blocks = device_ops.with_blocked_pools(model, device_steps, domain,
                                                            runtime.optimized)
        # Nodes in the plan's order where the data allow (Kahn's order, lowest node first),
        # so each partition runs between the device steps around it (``last_steps``).
        if options.execution_order == onnxruntime.ExecutionOrder.DEFAULT:
            options.execution_order = onnxruntime.ExecutionOrder.PRIORITY_BASED
        self.engine, blocks = self._load(runtime, model, blocked, blocks)
        # Each operator's step, whether every input and output of the step has a name (then
        # the operator's arrays are the step's, in order), and the NCHWc block of its tensors.
        self._steps = [(step, all(step.inputs), all(step.outputs), block)
                       for step, block in zip(device_steps, blocks)]
        self._run = direct_run(self.engine)
        # What the kernels' calls (kernel_call) share: each operator's (call, where) for
        # self._operators_device, the run each thread is in (_OneRun), the link's lock.
        self._operators = [None] * len(device_steps)
        self._operators_device = None
        self._current = threading.local()
        # onnxruntime's parallel executor calls kernels on its own threads, which are in no
        # run of their own: its runs on this session go one at a time, the run in ``_shared``.
        self._parallel = options.execution_mode == onnxruntime.ExecutionMode.ORT_PARALLEL
        self._shared, self._one_at_a_time = [None], threading.Lock()
        self._device_lock = threading.Lock()
        self._schedule = self._with_operators(schedule, device_steps)

    @staticmethod
    def _load(runtime, model, blocked, blocks):
        """``(onnxruntime session, blocks)`` of the model with blocked pools, else without."""
        try:
            return runtime.session(blocked), blocks
        except Exception as error:  # onnxruntime's exception types: the partitions then
            if blocked is model:
                raise _Refused(f"onnxruntime does not load the model as one session: "
                               f"{error}") from None
        try:
            return runtime.session(model), [None] * len(blocks)
        except Exception as error:
            raise _Refused(f"onnxruntime does not load the model as one session: "
                           f"{error}") from None

    @staticmethod
    def _with_operators(schedule, device_steps):
        """``schedule``'s entries, each a device step's with its operator's index, a
        partition's with the indices of the device operators after it in the plan (read by
        :meth:`records`)."""
        index = {id(step): i for i, step in enumerate(device_steps)}
        later = [index[id(entry[0])] for entry in schedule if entry[1] is DEVICE_STEP]
        made = []
        for entry in schedule:
            if entry[1] is DEVICE_STEP:
                later.pop(0)
                made.append((*entry, index[id(entry[0])]))
            else:
                made.append((*entry, tuple(later)))
        return made

    def run(self, output_names, feeds, run_options):
        """The run's results and ``(start, end, device calls)`` for :meth:`records`."""
        if self._operators_device is not self._calls.device:
            self._operators[:] = [None] * len(self._operators)
            self._operators_device = self._calls.device
        run = _OneRun()
        current = self._current
        if self._parallel:
            self._one_at_a_time.acquire()
            self._shared[0] = run
        current.run = run
        clock = time.perf_counter
        started = clock()
        try:
            results = self._run(output_names, feeds, run_options)
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
        return results, (started, clock(), run.calls)

    def records(self, started, ended, calls):
        """``(last_run, last_steps)`` of a run from its start, its end and its device calls
        (``{operator index: (start, seconds, where)}``): each device step its call's time,
        each partition the time between the device calls around it (its nodes run there); a
        device step onnxruntime did not need for the outputs asked for is left out."""
        record, timings = [], []
        since = started
        for step, kind, names, operators, operator in self._schedule:
            if kind is DEVICE_STEP:
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

    def kernel_call(self, index):
        """The call of device operator ``index``'s kernel
        (:func:`maxaccel.host.device_ops._resolve`): ``call(inputs, room)`` runs the step on
        the kernel's ``(memoryview, element type, shape)`` over onnxruntime's buffers (read
        only), one per named input, and returns its results, one per named output, as the
        kernel copies them (None: written through ``room``). The kernel keeps the call; it
        holds this object weakly, and its operator is worked out on its first call after
        :meth:`run` saw a new device."""
        one = weakref.ref(self)
        operators, current, shared = self._operators, self._current, self._shared
        lock, clock = self._device_lock, time.perf_counter

        def call(inputs, room):
            run = getattr(current, "run", None) or shared[0] or _OneRun()
            try:
                made = operators[index]
                if made is None:
                    made = operators[index] = one()._operator(index, inputs[0][1])
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
        the kernel copies them (:meth:`kernel_call`), one Python call between the kernel and
        the device's."""
        from maxaccel.host import device_ops
        step, names_every_input, names_every_output, block = self._steps[index]
        dtype = device_ops.element_dtype(element)
        if block:
            return self._blocked_pool(step, dtype, block)
        device, where = self._calls.route(dtype)
        if step.node.op_type == "MaxPool" and not indices_wanted("MaxPool", step.outputs) \
                and dtype.isbuiltin == 1 and takes_out(device.max_pool):
            return self._pool_into_room(step, dtype, device), where
        step_call = self._calls.step_call(step, dtype)
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

    @staticmethod
    def _pool_into_room(step, dtype, device):
        """``call(inputs, room)`` of MaxPool ``step`` (no Indices) on a device whose
        ``max_pool`` takes ``out``: the pool writes into onnxruntime's output, and the kernel
        copies nothing. The input's array and the output's dims are worked out while the input
        lies where it lay, the output's array while its room does."""
        from maxaccel.host import device_ops
        pool = prepare(device, "MaxPool", step.attributes)
        geometry = pool_geometry(step.attributes)

        def made(inputs):
            x, = device_ops.arrays_of(inputs)
            # [the room handed out, the output over it]: made again when the room moves.
            return x, geometry(x.shape).output_shape, [None, None]
        made_kept = device_ops.kept(made)

        def call(inputs, room):
            x, dims, out = made_kept(inputs)
            view = room(0, dims)
            if view is not out[0]:
                out[:] = view, np.ndarray(dims, dtype, view)
            pool(x, out=out[1])
            return (None,)
        return call

    def _blocked_pool(self, step, dtype, block):
        """``(call, where)`` of pool ``step`` on onnxruntime's NCHWc tensors of ``block``
        (:func:`~maxaccel.host.device_ops.with_blocked_pools`): ``call(inputs, room)`` of the
        kernel's inputs returns its result as the kernel copies it, or writes it into
        onnxruntime's output when the device's ``max_pool`` takes ``out``
        (:func:`~maxaccel.host.device_ops.blocked_pool`)."""
        from maxaccel.host import device_ops
        device, where = self._calls.route(dtype)
        if step.node.op_type == "GlobalMaxPool":
            reads = None if step.pool is None else pool_reads(step.pool_attributes)
            return device_ops.blocked_pool(device.reduce_max, dtype, block, True,
                                           reads=reads), where
        pool = prepare(device, "MaxPool", step.attributes)
        output_dims = None
        if takes_out(device.max_pool):
            geometry = pool_geometry(step.attributes)

            def output_dims(dims):
                return geometry(dims).output_shape
        return device_ops.blocked_pool(pool, dtype, block, output_dims=output_dims), where
