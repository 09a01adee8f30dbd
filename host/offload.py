"""Run a whole ONNX model with its Max, ReduceMax and GlobalMaxPool nodes on a maxaccel board.

:class:`OffloadSession` is used like onnxruntime's ``InferenceSession``::

    from maxaccel.host import open_device, OffloadSession
    with open_device("sim") as dev:
        session = OffloadSession("model.onnx", device=dev)
        outputs = session.run(None, {"x": x})
        session.last_run  # [(node name, op_type, "device" | "cpu"), ...]

Nodes run one by one in the graph's (topological) order. Every opset version of the three
operators goes to the device (Max 1, 6, 8, 12, 13; ReduceMax 1, 11, 12, 13, 18, 20;
GlobalMaxPool 1, 22); every other node runs on the CPU with ``onnx.reference``, node by node.
An offloaded node whose element type the board does not support runs on the CPU with the golden
model (``maxaccel.sim.reference``), so the bits are the same either way.

Max-1 and Max-6 require same-shape inputs; this session broadcasts them as Max-8 does (a
superset). Results follow the semantics contract of ``docs/semantics.md``, which is where they
can differ from onnxruntime or ``onnx.reference`` (NaN and signed-zero handling).
"""

import os

import numpy as np
import onnx
from onnx import TypeProto, helper, numpy_helper

from maxaccel.contract.dtypes import dtype_of

__all__ = ["OffloadSession", "TensorSpec", "OFFLOADED"]

#: Operator types sent to the device, with the opset versions that define them.
OFFLOADED = {"Max": (1, 6, 8, 12, 13), "ReduceMax": (1, 11, 12, 13, 18, 20),
             "GlobalMaxPool": (1, 22)}

DEVICE = "device"
CPU = "cpu"


class TensorSpec:
    """A graph input or output: name, numpy dtype (None if unknown) and shape.

    ``shape`` is None when the graph declares no shape; otherwise a tuple whose entries are
    ints (fixed sizes), strings (symbolic sizes) or None (unknown sizes).
    """

    __slots__ = ("name", "dtype", "shape")

    def __init__(self, name, dtype, shape):
        self.name, self.dtype, self.shape = name, dtype, shape

    @classmethod
    def of(cls, value_info):
        tensor = value_info.type.tensor_type
        dtype = (helper.tensor_dtype_to_np_dtype(tensor.elem_type) if tensor.elem_type
                 else None)
        shape = None
        if tensor.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value")
                          else (d.dim_param or None) for d in tensor.shape.dim)
        return cls(value_info.name, dtype, shape)

    def __repr__(self):
        shape = "?" if self.shape is None else "[" + ", ".join(
            "?" if d is None else str(d) for d in self.shape) + "]"
        return f"{self.name}: {self.dtype or '?'} {shape}"


def _load(model_or_path):
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


def _subgraph_names(graph):
    """Names a (sub)graph reads but does not define: its outer-scope references."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    used = set()
    for node in graph.node:
        used.update(n for n in node.input if n)
        for attribute in node.attribute:
            subgraphs = list(attribute.graphs) + ([attribute.g] if attribute.HasField("g") else [])
            for subgraph in subgraphs:
                used |= _subgraph_names(subgraph)
        defined.update(node.output)
    return used - defined


class _Step:
    __slots__ = ("node", "name", "where", "version", "evaluator")

    def __init__(self, node, name, where, version, evaluator=None):
        self.node, self.name, self.where = node, name, where
        self.version, self.evaluator = version, evaluator


class OffloadSession:
    """An ONNX model whose max-family nodes run on a maxaccel device.

    Parameters
    ----------
    model_or_path : onnx.ModelProto, str, os.PathLike or bytes
        The model; checked with ``onnx.checker`` (full check, with shape inference).
    device : Device, optional
        Where Max, ReduceMax and GlobalMaxPool run: a :class:`~maxaccel.host.device.Device` or
        anything with the same three methods (the golden model module ``maxaccel.sim.reference``
        works too). Default: the virtual board, ``open_device("sim")``, opened at the first
        :meth:`run` that needs it, owned and closed by the session.

    Attributes
    ----------
    inputs, outputs : list of TensorSpec
        The graph's inputs (those without an initializer) and outputs.
    placements : list of (str, str, str)
        ``(node name, op_type, "device" or "cpu")`` for every node, in run order, as planned.
    last_run : list of (str, str, str)
        The same for the latest :meth:`run`, as it happened.

    Raises
    ------
    ValueError
        The model is not valid ONNX (the checker's message is included).
    """

    def __init__(self, model_or_path, device=None):
        model = _load(model_or_path)
        try:
            onnx.checker.check_model(model, full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
            raise ValueError(f"not a valid ONNX model: {error}") from None
        self.model = model
        graph = model.graph
        self._opsets = {(i.domain or "ai.onnx"): i.version for i in model.opset_import}
        self._initializers = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.inputs = [TensorSpec.of(i) for i in graph.input
                       if i.name not in self._initializers]
        self._overridable = {i.name: TensorSpec.of(i) for i in graph.input
                             if i.name in self._initializers}
        self.outputs = [TensorSpec.of(o) for o in graph.output]
        self._steps = [self._plan_node(index, node) for index, node in enumerate(graph.node)]
        self.placements = [(s.name, s.node.op_type, s.where) for s in self._steps]
        self.last_run = []
        self._owns_device = False
        self.device = device

    def _plan_node(self, index, node):
        domain = node.domain or "ai.onnx"
        name = node.name or f"{node.op_type}_{index}"
        version = self._opsets.get(domain)
        if domain == "ai.onnx" and node.op_type in OFFLOADED:
            return _Step(node, name, DEVICE, version)
        outer = _subgraph_names(helper.make_graph([node], "outer", [], []))
        inputs = list(dict.fromkeys([n for n in node.input if n] + sorted(outer)))
        graph = helper.make_graph(
            [node], name, [helper.make_value_info(n, TypeProto()) for n in inputs],
            [helper.make_value_info(n, TypeProto()) for n in node.output if n])
        single = helper.make_model(graph, opset_imports=self.model.opset_import,
                                   functions=self.model.functions,
                                   ir_version=self.model.ir_version)
        from onnx.reference import ReferenceEvaluator
        return _Step(node, name, CPU, version, ReferenceEvaluator(single))

    # --- running -------------------------------------------------------------------------------

    def get_inputs(self):
        """The graph inputs to feed (as onnxruntime's ``get_inputs``)."""
        return list(self.inputs)

    def get_outputs(self):
        return list(self.outputs)

    def run(self, output_names, feeds):
        """Run the model.

        Parameters
        ----------
        output_names : list of str or None
            Outputs to return, in this order; None for all graph outputs.
        feeds : dict of str to array_like
            One array per graph input (inputs with an initializer may be overridden).

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
        values = dict(self._initializers)
        values.update(self._check_feeds(feeds))
        known = {o.name for o in self.outputs}
        if output_names is None:
            output_names = [o.name for o in self.outputs]
        else:
            unknown = [n for n in output_names if n not in known]
            if unknown:
                raise ValueError(f"unknown output(s) {', '.join(map(repr, unknown))}; the "
                                 f"model's outputs: {', '.join(sorted(known))}")
        if self.device is None and any(s.where == DEVICE for s in self._steps):
            from maxaccel.host.device import open_device
            self.device = open_device("sim")
            self._owns_device = True
        record = []
        for step in self._steps:
            if step.where == DEVICE:
                results, where = self._offload(step, values)
            else:
                inputs = step.evaluator.input_names
                results = step.evaluator.run(None, {n: values[n] for n in inputs})
                where = CPU
            for name, result in zip(step.node.output, results):
                if name:
                    values[name] = np.asarray(result)
            record.append((step.name, step.node.op_type, where))
        self.last_run = record
        return [values[name] for name in output_names]

    def _offload(self, step, values):
        node, version = step.node, step.version
        inputs = [values[n] if n else None for n in node.input]
        device, where = self.device, DEVICE
        if not self._supports(inputs[0].dtype):
            # Same bits on the CPU: the golden model.
            from maxaccel.sim import reference as device
            where = CPU
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Max":
            return [device.max(*[x for x in inputs if x is not None])], where
        if node.op_type == "GlobalMaxPool":
            return [device.global_max_pool(inputs[0])], where
        keepdims = attributes.get("keepdims", 1)
        if version is not None and version >= 18:
            axes = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
            noop = attributes.get("noop_with_empty_axes", 0)
        else:
            axes = attributes.get("axes")
            noop = 0
        return [device.reduce_max(inputs[0], axes=axes, keepdims=keepdims,
                                  noop_with_empty_axes=noop)], where

    def _supports(self, dtype):
        identity = getattr(self.device, "identity", None)
        try:
            return identity is None or dtype_of(dtype) in identity.dtypes
        except TypeError:
            return True  # an unsupported dtype: the device's own check names the problem

    def _check_feeds(self, feeds):
        if not isinstance(feeds, dict):
            raise TypeError(f"feeds must be a dict of input name to array, "
                            f"not {type(feeds).__name__}")
        specs = {s.name: s for s in self.inputs}
        specs.update(self._overridable)
        listing = ", ".join(repr(s) for s in self.inputs)
        unknown = [n for n in feeds if n not in specs]
        if unknown:
            raise ValueError(f"unknown input(s) {', '.join(map(repr, unknown))}; the model's "
                             f"inputs: {listing}")
        missing = [s.name for s in self.inputs if s.name not in feeds]
        if missing:
            raise ValueError(f"missing input(s) {', '.join(map(repr, missing))}; the model's "
                             f"inputs: {listing}")
        checked, symbols = {}, {}
        for name, value in feeds.items():
            spec = specs[name]
            array = np.asarray(value)
            if spec.dtype is not None and array.dtype != spec.dtype:
                raise TypeError(f"input {name!r} must be {spec.dtype}, got {array.dtype}")
            if spec.shape is not None:
                if array.ndim != len(spec.shape):
                    raise ValueError(f"input {name!r} must have rank {len(spec.shape)} "
                                     f"({spec!r}), got shape {array.shape}")
                for axis, (want, got) in enumerate(zip(spec.shape, array.shape)):
                    if isinstance(want, int) and want != got:
                        raise ValueError(f"input {name!r} must have size {want} along axis "
                                         f"{axis} ({spec!r}), got shape {array.shape}")
                    if isinstance(want, str):
                        seen = symbols.setdefault(want, (got, name))
                        if seen[0] != got:
                            raise ValueError(
                                f"input {name!r} has size {got} for dimension {want!r} along "
                                f"axis {axis}, but input {seen[1]!r} has {seen[0]}")
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
