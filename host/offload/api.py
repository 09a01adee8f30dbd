""":class:`OffloadSession`, onnxruntime's ``InferenceSession`` API over a model split between
a maxaccel device and onnxruntime (the package's docstring says how)."""

import warnings

import numpy as np
import onnx
from onnx import numpy_helper

from maxaccel.host.offload.one_session import OneSession
from maxaccel.host.offload.partitions import Partitions
from maxaccel.host.offload.runtime import Runtime, onnxruntime_refusal
from maxaccel.host.offload.specs import ModelMetadata, TensorSpec, read_model
from maxaccel.host.offload.steps import ONNXRUNTIME, DeviceCalls, schedule
from maxaccel.host.partition import CpuPartition, DeviceStep, node_name, partition

__all__ = ["OffloadSession"]


def _checked(model):
    """``model``, if ``onnx.checker`` (with strict type inference) or onnxruntime takes it."""
    try:
        onnx.checker.check_model(model)
        # The checker leaves operators' type constraints alone (a bool Max passes it);
        # onnxruntime checks them at load, and so does strict shape inference.
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        # No stricter than onnxruntime: refused only if onnxruntime refuses it too.
        refusal = onnxruntime_refusal(model)
        if refusal is not None:
            raise ValueError(f"not a valid ONNX model: {error} (onnxruntime: {refusal})") \
                from None
    return model


def _opened(device):
    """``(device, owned)``: a device URL opened here (a wrong URL or an absent board is said
    at once), owned and closed by the session; a device object as given."""
    if isinstance(device, str):
        from maxaccel.host.device import open_device
        return open_device(device), True
    if device is not None and not all(hasattr(device, name) for name in
                                      ("max", "reduce_max", "global_max_pool")):
        raise TypeError(f"device must be a Device (open_device(url)), a device URL such as "
                        f"'sim', or maxaccel.sim.reference, not {type(device).__name__}")
    return device, False


class OffloadSession:
    """An ONNX model whose max-family nodes run on a maxaccel device and whose other nodes run
    on onnxruntime: onnxruntime's ``InferenceSession`` API.

    Parameters
    ----------
    path_or_bytes : str, os.PathLike, bytes or onnx.ModelProto
        The model. It must pass ``onnx.checker`` or load in onnxruntime (no stricter check
        than onnxruntime's).
    sess_options : onnxruntime.SessionOptions, optional
        Used for the one session, or every CPU partition. Entries it does not set are set on
        it: for partitions with device or subgraph steps between them, each of
        :data:`~maxaccel.host.offload.SPINNING` to :data:`~maxaccel.host.offload.NO_SPINNING`
        (:func:`~maxaccel.host.offload.without_spinning`: their pools sleep between
        hand-overs); for the one session its ``execution_order`` and the device operators'
        library (its pool spins or sleeps as onnxruntime's default says). Entries already
        present count as the caller's: sessions sharing one ``SessionOptions`` keep what the
        first set. For the one session onnxruntime also optimizes the model once with them
        (its optimized model file, log level and profiling set aside meanwhile and restored),
        so that pools take its NCHWc tensors (``docs/offload.md``, "One session").
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
        see the package docstring).
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
        self.model = model = _checked(read_model(path_or_bytes))
        graph = model.graph
        initialized = {t.name for t in graph.initializer}
        self.inputs = [TensorSpec.of(i) for i in graph.input if i.name not in initialized]
        self._overridable = [TensorSpec.of(i) for i in graph.input if i.name in initialized]
        self.outputs = [TensorSpec.of(o) for o in graph.output]
        self._specs = {s.name: s for s in self.inputs + self._overridable}
        self._output_names = [o.name for o in self.outputs]
        try:
            plan = partition(model, node_name)
        except ValueError as error:
            raise ValueError(f"not a valid ONNX model: {error}") from None
        self._sess_options = sess_options
        # A model with no device or subgraph step is one partition: onnxruntime's own
        # behaviour, its pools as the caller set them.
        self._needs_device = any(not isinstance(s, CpuPartition) for s in plan.steps)
        self._runtime = Runtime(sess_options, providers, provider_options, kwargs,
                                self._needs_device)
        self._calls = DeviceCalls()
        self._schedule = schedule(plan.steps)
        self.fallbacks = {}
        self._make_executor(plan, one_session)
        # Initializers a device step, a subgraph step or the graph's outputs read as arrays.
        wanted = {n for s in plan.steps if not isinstance(s, CpuPartition) for n in s.inputs}
        wanted |= set(self._output_names)
        self._initializers = {t.name: numpy_helper.to_array(t)
                              for t in plan.model.graph.initializer if t.name in wanted}
        self._last = ([], [])    # (last_run, last_steps)
        self._one_last = None   # or, after a one-session run, what OneSession.records takes
        self._calls.device, self._owns_device = _opened(device)
        self.placements = [(name, node.op_type, self._where(step, plan.types))
                           for step in plan.steps for name, node in step.nodes]

    def _make_executor(self, plan, one_session):
        """The one session, or the partitions (with :attr:`one_session_refusal` saying why).

        onnxruntime warns about the providers (one it does not have, say) for every session
        made: said once for the model, as its own InferenceSession would."""
        self._one = self._partitions = None
        self.one_session_refusal = "one_session=False" if not one_session else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if one_session:
                self._one, self.one_session_refusal = OneSession.make(
                    plan, self._runtime, self._calls, self._schedule)
            if self._one is None:
                self._partitions = Partitions(plan.steps, self._runtime, self._calls,
                                              self.fallbacks, self._needs_device)
        for text, category in dict.fromkeys((str(w.message), w.category) for w in caught):
            warnings.warn(text, category, stacklevel=3)

    def _where(self, step, types):
        if isinstance(step, DeviceStep):
            return self._device_where(step, types)
        if self._one is not None:
            return ONNXRUNTIME
        return self._partitions.where(step)

    def _device_where(self, step, types):
        """Where device step ``step`` runs: the device, or the golden model for an element type
        (from the model's ``types``; 0 when unknown) the device does not support, as
        :meth:`~maxaccel.host.offload.steps.DeviceCalls.route` decides at run time."""
        value = types.get(step.inputs[0])
        elem_type = value.tensor_type.elem_type if value is not None \
            and value.HasField("tensor_type") else 0
        return self._calls.route(elem_type)[1]

    @property
    def device(self):
        """The device the max-family nodes run on (None until a run opens the default)."""
        return self._calls.device

    @device.setter
    def device(self, device):
        self._calls.device = device

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
        providers = self._one.engine.get_providers() if self._one is not None \
            else self._partitions.providers()
        return providers if providers is not None else self._runtime.provider_names

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
        if self._calls.device is None and self._needs_device:
            from maxaccel.host.device import open_device
            self._calls.device, self._owns_device = open_device("sim"), True
        if self._one is not None:
            results, self._one_last = self._one.run(output_names, feeds, run_options)
            return results
        values = dict(self._initializers)
        values.update(feeds)
        self._last = self._partitions.run(self._schedule, values, feeds, run_options)
        self._one_last = None
        return [values[name] for name in output_names]

    @property
    def last_run(self):
        return self._records()[0]

    @property
    def last_steps(self):
        return self._records()[1]

    def _records(self):
        pending = self._one_last
        if pending is not None:
            self._last, self._one_last = self._one.records(*pending), None
        return self._last

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
        return {name: _checked_feed(specs[name], value) for name, value in feeds.items()}

    def close(self):
        """Close the device if the session opened it."""
        if self._owns_device:
            self._calls.device.close()
            self._calls.device, self._owns_device = None, False

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _checked_feed(spec, value):
    """A feed for the input of ``spec``, as :meth:`OffloadSession.check_feeds` checks it."""
    name = spec.name
    if spec.kind != "tensor_type":
        return value
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
    return array
