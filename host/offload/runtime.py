"""onnxruntime as an :class:`~maxaccel.host.offload.OffloadSession` uses it: the caller's
options, providers and keyword arguments made into sessions (:class:`Runtime`), the thread
pools' spinning entries, and a session's run without its Python wrapper
(:func:`direct_run`)."""

import os
import tempfile
import threading

import onnx
from onnx import TensorProto

from maxaccel.host.partition import MAX_IR_VERSION

__all__ = ["SPINNING", "NO_SPINNING", "without_spinning",
           "Runtime", "direct_run", "onnxruntime_refusal",
           "NUMPY_NATIVE"]

#: Element types whose numpy arrays onnxruntime's Python API takes and returns (not bfloat16,
#: the float8 and 4-bit types: those arrays reach only the device, between partitions).
NUMPY_NATIVE = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BOOL,
                TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
                TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
                TensorProto.STRING}

#: The session configuration entries that let a thread pool's idle threads spin, and the
#: value that stops them (onnxruntime's default, "1", lets them spin).
SPINNING = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")
NO_SPINNING = "0"

_OPTIMIZING = threading.Lock()    # Runtime.optimized: one at a time


def for_onnxruntime(model):
    """``model`` serialized with an IR version onnxruntime reads."""
    if model.ir_version > MAX_IR_VERSION:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.ir_version = MAX_IR_VERSION
    return model.SerializeToString()


def onnxruntime_refusal(model):
    """Why onnxruntime does not load ``model``, or None if it does (an operator it has no
    kernel for counts as loaded: the graph was valid, and that node may run on the device)."""
    import onnxruntime
    from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as Missing
    try:
        onnxruntime.InferenceSession(for_onnxruntime(model),
                                     providers=["CPUExecutionProvider"])
    except Missing:
        return None
    except Exception as error:  # onnxruntime's exception types, one per status
        return str(error)
    return None


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


def direct_run(engine):
    """How to run an onnxruntime session: its binding's ``run``, without
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


def nchwc_level():
    """The lowest optimization level at which onnxruntime runs Convs in its NCHWc layout:
    ``ORT_ENABLE_LAYOUT``, or ``ORT_ENABLE_ALL`` in an onnxruntime without that level."""
    import onnxruntime
    levels = onnxruntime.GraphOptimizationLevel
    return getattr(levels, "ORT_ENABLE_LAYOUT", levels.ORT_ENABLE_ALL)


class Runtime:
    """How a session makes its onnxruntime sessions: the caller's ``SessionOptions`` (or new
    ones when the model has steps off onnxruntime, whose pools the session then sets up),
    providers, provider options and keyword arguments."""

    def __init__(self, options, providers, provider_options, kwargs, needs_device):
        if needs_device and options is None:
            import onnxruntime
            options = onnxruntime.SessionOptions()
        self.options = options
        self.providers = providers
        self.provider_options, self.kwargs = provider_options, kwargs

    @property
    def provider_names(self):
        """The providers asked for, by name."""
        return [p if isinstance(p, str) else p[0]
                for p in (self.providers or ["CPUExecutionProvider"])]

    def session(self, model):
        """``model`` as an onnxruntime session with the options, providers and keyword
        arguments as they are now."""
        import onnxruntime
        return onnxruntime.InferenceSession(
            for_onnxruntime(model), self.options,
            providers=self.providers or ["CPUExecutionProvider"],
            provider_options=self.provider_options, **self.kwargs)

    def optimized(self, model):
        """``model`` as onnxruntime optimizes it with the options (a session made and
        dropped, which writes no profile and no warning that the file suits only this
        machine), or None if onnxruntime does not load it."""
        options = self.options
        # Sessions made at once from one SessionOptions: one sets its entries aside at a time.
        with _OPTIMIZING, tempfile.TemporaryDirectory() as scratch:
            saved = (options.optimized_model_filepath, options.log_severity_level,
                     options.enable_profiling)
            try:
                options.optimized_model_filepath = os.path.join(scratch, "optimized.onnx")
                options.log_severity_level = max(saved[1], 3)
                options.enable_profiling = False
                self.session(model)    # no session of the model's to run
                return onnx.load(options.optimized_model_filepath)
            except Exception:   # onnxruntime's exception types: the model as it is, then
                return None
            finally:
                (options.optimized_model_filepath, options.log_severity_level,
                 options.enable_profiling) = saved
