"""onnx's backend API (:class:`onnx.backend.base.Backend`) over
:class:`~maxaccel.host.offload.OffloadSession`: the way runtimes plug into onnx's conformance
harness, so that it runs against maxaccel::

    import onnx.backend.test
    import maxaccel.onnx_backend as backend
    globals().update(onnx.backend.test.BackendTest(backend, __name__)
                     .include("test_max").test_cases)

    rep = backend.prepare(model)          # an OffloadSession, made once
    outputs = rep.run([x])                # inputs in the graph's order (or a dict by name)
    outputs = backend.run_model(model, [x])

The model's max-family nodes run on the maxaccel device of the backend, its other nodes on
onnxruntime, exactly as in an ``OffloadSession``. The module's functions use the golden model
(``maxaccel.sim.reference``: the contract's bits on the CPU, no board); :func:`on` gives a
backend on a board (``on("sim")``, ``on(open_device(url))``). onnx's ``device`` argument names
where the host side runs: ``"CPU"`` (onnxruntime's CPU provider), the only one supported.

Keyword arguments of :func:`prepare` and :func:`run_model` that are attributes of
``onnxruntime.SessionOptions`` (``intra_op_num_threads``, ``graph_optimization_level``...) set
the session's options, as onnxruntime's own backend does; others (the harness' ``rtol`` and
``atol``) are ignored.
"""

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep

from maxaccel.host.offload import OffloadSession
from maxaccel.host.partition import MAX_IR_VERSION
from maxaccel.sim import reference

__all__ = ["OffloadBackend", "OffloadBackendRep", "on", "prepare", "run_model", "run_node",
           "supports_device", "is_compatible"]

#: onnx's device names this backend runs on: the host side is onnxruntime's CPU provider.
DEVICES = ("CPU",)


class OffloadBackendRep(BackendRep):
    """A prepared model: :attr:`session`, its :class:`OffloadSession`."""

    def __init__(self, session):
        self.session = session

    def run(self, inputs, **kwargs):
        """Run the model.

        Parameters
        ----------
        inputs : list, dict or value
            One value per graph input to feed, in the graph's order (inputs with an
            initializer come last and may be left out), or a dict by name, or the one value
            of a model with one input. Tensors as numpy arrays, sequences as lists, optionals
            as None or their value, maps as dicts, as onnxruntime takes them.
        **kwargs
            Ignored (onnx's harness passes none the session uses).

        Returns
        -------
        list
            Every graph output, in order, as :meth:`OffloadSession.run` returns them.
        """
        session = self.session
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            names = [s.name for s in session.get_inputs() + session.get_overridable_initializers()]
            if not isinstance(inputs, list):
                if len(session.get_inputs()) != 1:
                    raise ValueError(f"the model has {len(session.get_inputs())} inputs: give "
                                     f"a list or a dict of them, not one value")
                inputs = [inputs]
            if len(inputs) > len(names):
                raise ValueError(f"{len(inputs)} inputs for a model with {len(names)}")
            feeds = dict(zip(names, inputs))
        feeds = {name: np.asarray(value) if isinstance(value, np.generic) else value
                 for name, value in feeds.items()}
        return session.run(None, feeds)


def _session_options(kwargs):
    """An ``onnxruntime.SessionOptions`` with the ``kwargs`` that are its attributes set, or
    None if none is."""
    import onnxruntime
    options = onnxruntime.SessionOptions()
    given = {k: v for k, v in kwargs.items() if hasattr(options, k)}
    if not given:
        return None
    for key, value in given.items():
        setattr(options, key, value)
    return options


class OffloadBackend(Backend):
    """:class:`onnx.backend.base.Backend` over :class:`OffloadSession` on :attr:`device`."""

    #: The maxaccel device the max-family nodes run on: a Device, or the golden model.
    device = reference

    @classmethod
    def supports_device(cls, device):
        """Whether onnx's ``device`` (``"CPU"``, ``"CUDA"``...) is one this backend runs on:
        the CPU, where onnxruntime runs the nodes the maxaccel device does not."""
        return str(device).split(":")[0].upper() in DEVICES

    @classmethod
    def is_compatible(cls, model, device="CPU", **kwargs):
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        """``model`` (an ``onnx.ModelProto``, a path or serialized bytes) as an
        :class:`OffloadSession` on the backend's maxaccel device, ready to run; ValueError for
        an onnx ``device`` other than the CPU, and what :class:`OffloadSession` raises for the
        model."""
        if not cls.supports_device(device):
            raise ValueError(f"maxaccel's backend runs on {', '.join(DEVICES)}, not {device!r}")
        session = OffloadSession(model, _session_options(kwargs), device=cls.device)
        return OffloadBackendRep(session)

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        """Run one node on ``inputs`` (numpy arrays, one per input name of the node, in order;
        an empty name takes no value): a model of that node alone (opset ``opset_version``,
        default the installed onnx's), its output types from ``outputs_info`` (``(dtype,
        shape)`` per output) or from onnx's shape inference."""
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        named = [name for name in node.input if name]
        values = [np.asarray(x) for x in inputs]
        graph_inputs = [helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
            for name, x in zip(named, values)]
        if outputs_info is not None:
            graph_outputs = [helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
                for name, (dtype, shape) in zip(node.output, outputs_info)]
        else:
            graph_outputs = [helper.make_empty_tensor_value_info(name)
                             for name in node.output if name]
        domain = node.domain or ""
        model = helper.make_model(
            helper.make_graph([node], f"{node.op_type.lower()}_node", graph_inputs,
                              graph_outputs),
            opset_imports=[helper.make_opsetid(domain, opset)], ir_version=MAX_IR_VERSION)
        if outputs_info is None:
            inferred = onnx.shape_inference.infer_shapes(model)
            types = {v.name: v.type for v in inferred.graph.value_info}
            types.update({v.name: v.type for v in inferred.graph.output})
            for output in model.graph.output:
                if types.get(output.name) is not None:
                    output.type.CopyFrom(types[output.name])
        return cls.run_model(model, dict(zip(named, values)), device, **kwargs)


def on(device):
    """A backend (a subclass of :class:`OffloadBackend`, usable where onnx wants a backend
    module) whose sessions run their max-family nodes on ``device``: a
    :class:`~maxaccel.host.device.Device`, a device URL (opened here, once, for every
    session of the backend: close it with ``backend.device.close()``), or the golden model."""
    if isinstance(device, str):
        from maxaccel.host.device import open_device
        device = open_device(device)
    return type("OffloadBackendOn", (OffloadBackend,), {"device": device})


prepare = OffloadBackend.prepare
run_model = OffloadBackend.run_model
run_node = OffloadBackend.run_node
supports_device = OffloadBackend.supports_device
is_compatible = OffloadBackend.is_compatible
