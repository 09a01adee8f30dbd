"""A model run as partitions: each CPU partition one onnxruntime session, made once and
reused (or ``onnx.reference`` where onnxruntime cannot load it), each device step one device
call, each subgraph step ``onnx.reference``, run in the plan's order with values passing
between them as numpy arrays."""

import time

import numpy as np
import onnx
from onnx import helper

from maxaccel.host.offload.runtime import direct_run, without_spinning
from maxaccel.host.offload.specs import StepTiming
from maxaccel.host.offload.steps import (DEVICE, DEVICE_STEP, ONNX_REFERENCE, ONNXRUNTIME,
                                         PARTITION)
from maxaccel.host.partition import CpuPartition, DeviceStep, SubgraphStep

__all__ = ["Partitions"]


class Partitions:
    """The steps of a plan run one after another.

    Parameters
    ----------
    steps : list
        The plan's steps, in run order.
    runtime : Runtime
        Makes the partitions' onnxruntime sessions; when ``needs_device``, their pools are set
        to sleep between hand-overs (:func:`~maxaccel.host.offload.without_spinning`).
    calls : DeviceCalls
        The device steps' calls, and the max family's ``onnx.reference`` implementations.
    fallbacks : dict
        Filled with partition name -> why onnxruntime could not run it.
    """

    def __init__(self, steps, runtime, calls, fallbacks, needs_device):
        self._runtime, self._calls, self.fallbacks = runtime, calls, fallbacks
        self._engines = {}
        self._runs = {}     # partition index -> how its onnxruntime session is run
        if needs_device:
            without_spinning(runtime.options)
        for step in steps:
            if isinstance(step, CpuPartition) and not step.untyped:
                self._engines[step.index] = self._engine(step, step.model)
            elif isinstance(step, SubgraphStep):
                from onnx.reference import ReferenceEvaluator
                self._engines[id(step)] = ReferenceEvaluator(step.model,
                                                             new_ops=calls.reference_ops())

    def providers(self):
        """The providers of the first partition onnxruntime runs, or None."""
        for engine in self._engines.values():
            if hasattr(engine, "get_providers"):
                return engine.get_providers()
        return None

    def where(self, step):
        """Where ``step`` runs, as planned."""
        if isinstance(step, CpuPartition):
            engine = self._engines.get(step.index)
            return ONNXRUNTIME if engine is None or hasattr(engine, "get_providers") \
                else ONNX_REFERENCE
        return DEVICE if isinstance(step, DeviceStep) else ONNX_REFERENCE

    def run(self, schedule, values, feeds, run_options):
        """Run every step of ``schedule`` (:func:`~maxaccel.host.offload.steps.schedule`) on
        ``values`` (name -> array, the results added); returns ``(last_run, last_steps)``."""
        record, timings = [], []
        clock = time.perf_counter
        for step, kind, names, operators in schedule:
            started = clock()
            if kind is PARTITION:
                where = self._run_partition(step, values, feeds, run_options)
            elif kind is DEVICE_STEP:
                where = self._run_device(step, values)
            else:
                where = self._run_subgraph(step, values)
            timings.append(StepTiming(step.name, where, names, clock() - started))
            record += [(name, op_type, where) for name, op_type in operators]
        return record, timings

    def _engine(self, step, model):
        """An onnxruntime session for a partition, or ``onnx.reference`` if it cannot load."""
        try:
            return self._runtime.session(model)
        except Exception as error:  # onnxruntime's own exception types, by status
            from onnx.reference import ReferenceEvaluator
            try:
                engine = ReferenceEvaluator(model, new_ops=self._calls.reference_ops())
            except Exception as second:
                raise ValueError(f"{step.name} ({len(step.nodes)} nodes) runs neither on "
                                 f"onnxruntime ({error}) nor on onnx.reference ({second})") \
                    from None
            self.fallbacks[step.name] = str(error)
            return engine

    def _typed_engine(self, step, feed):
        """The engine of a partition whose inputs shape inference could not type, typed from
        the arrays of its first run's ``feed``."""
        model = onnx.ModelProto()
        model.CopyFrom(step.model)
        for value in model.graph.input:
            if value.name in step.untyped:
                value.type.CopyFrom(helper.make_tensor_type_proto(
                    helper.np_dtype_to_tensor_dtype(np.asarray(feed[value.name]).dtype), None))
        engine = self._engines[step.index] = self._engine(step, model)
        return engine

    def _run_partition(self, step, values, feeds, run_options):
        engine = self._engines.get(step.index)
        feed = {name: values[name] for name in step.inputs}
        for name in step.overridable:
            if name in feeds:
                feed[name] = feeds[name]
        if engine is None:
            engine = self._typed_engine(step, feed)
        if hasattr(engine, "get_providers"):
            run = self._runs.get(step.index)
            if run is None:
                run = self._runs[step.index] = direct_run(engine)
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
        results, where = self._calls.step_call(step, inputs[0].dtype)(*inputs)
        for name, result in zip(step.outputs, results):
            if name:
                values[name] = result
        return where

    def _run_subgraph(self, step, values):
        results = self._engines[id(step)].run(None, {n: values[n] for n in step.inputs})
        for name, result in zip(step.node.output, results):
            if name:    # a sequence (list), a map (dict) or an absent optional (None) as it is
                values[name] = result if result is None or isinstance(result, (list, dict)) \
                    else np.asarray(result)
        return ONNX_REFERENCE
