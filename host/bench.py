"""Benchmarks behind ``maxaccel bench``: device throughput, host overhead, link efficiency, and
the same operations on the CPU (numpy, onnxruntime) for comparison.

Every device figure comes from one timed call of a public :class:`~maxaccel.host.device.Device`
operation on a fresh random tensor, checked bit for bit against the golden model (a wrong
answer is never reported as a speed). The time splits in two:

* **transport time**: inside the transport's ``write`` and ``read`` (for a virtual board this is
  where the simulator runs; for a real board, where the bytes cross the link);
* **host time**: everything else: checking the inputs, planning, encoding tensors into frames
  (CRC included) and decoding replies. ``host MB/s`` is the operation's tensor bytes (inputs and
  output) over the host time: how fast the driver would go on an infinitely fast link.

Link efficiency is the tensor bytes over all bytes on the wire, both directions.

Whole models (:func:`measure_model`, ``maxaccel bench --model``): an
:class:`~maxaccel.host.offload.OffloadSession` on the device against onnxruntime running the
whole model on one thread, side by side; the session's time splits into the time inside the
device's operator calls and the time *outside* them (its CPU partitions and glue), which is
what the session costs a user over onnxruntime.
"""

from dataclasses import asdict, dataclass
import math
import platform
import statistics
import time

import numpy as np

__all__ = ["OPERATIONS", "Measurement", "measure_device", "measure_cpu", "default_elements",
           "format_table", "plot", "RATIO_OPERATIONS", "RATIO_DTYPES", "Ratio",
           "measure_ratios", "format_ratios", "ratio_line", "NoCycleCounter",
           "PoolClass", "POOL_CLASSES", "POOL_DTYPES", "PoolRatio", "measure_pool_ratios",
           "pool_ratio_line", "format_pool_ratios", "measure_core_link", "format_core_link",
           "CORE_LINK_FILE", "load_core_link", "check_operations"]


#: name -> (inputs(rng, elements, dtype), device/reference call). Shapes keep about
#: ``elements`` output or reduced elements, as square as powers of two allow.
def _matrix(elements):
    columns = 1 << max(0, int(math.log2(max(1, elements))) // 2)
    return max(1, elements // columns), columns


def _random(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


OPERATIONS = {
    "reduce_max": (lambda rng, n, dt: (_random(rng, (n,), dt),),
                   lambda m, x: m.reduce_max(x)),
    "max same shape": (lambda rng, n, dt: (_random(rng, (n,), dt), _random(rng, (n,), dt)),
                       lambda m, x, y: m.max(x, y)),
    "max broadcast row": (lambda rng, n, dt: (_random(rng, _matrix(n), dt),
                                              _random(rng, (1, _matrix(n)[1]), dt)),
                          lambda m, x, y: m.max(x, y)),
}


def _operator_checks():
    """name of :data:`OPERATIONS` -> (element types it takes, the operator's name), from the
    contract's checks."""
    from maxaccel.contract.checks import MAX_DTYPES, REDUCE_MAX_DTYPES
    return {"reduce_max": (REDUCE_MAX_DTYPES, "reduce_max() (ONNX ReduceMax)"),
            "max same shape": (MAX_DTYPES, "max() (ONNX Max)"),
            "max broadcast row": (MAX_DTYPES, "max() (ONNX Max)")}


def check_operations(dtype, operations=None):
    """TypeError naming the operator if one of ``operations`` (default: all of
    :data:`OPERATIONS`) does not take ``dtype``: checked before anything is measured."""
    from maxaccel.contract.checks import check_dtype
    from maxaccel.contract.dtypes import format_of
    fmt = format_of(dtype)
    checks = _operator_checks()
    for name in operations or OPERATIONS:
        allowed, operator_name = checks[name]
        check_dtype(fmt, allowed, operator_name)


@dataclass
class Measurement:
    """One timed operation.

    ``where`` is the device URL, or ``cpu:numpy`` / ``cpu:onnxruntime``; ``elements`` counts the
    elements of the largest input; times in seconds; ``host_s``, ``wire_bytes`` and
    ``link_efficiency`` are None on the CPU.
    """

    where: str
    operation: str
    dtype: str
    elements: int
    seconds: float
    tensor_bytes: int
    host_s: float | None = None
    wire_bytes: int | None = None

    @property
    def elements_per_s(self):
        return self.elements / self.seconds if self.seconds > 0 else math.inf

    @property
    def host_mb_per_s(self):
        if self.host_s is None:
            return None
        return self.tensor_bytes / self.host_s / 1e6 if self.host_s > 0 else math.inf

    @property
    def link_efficiency(self):
        return None if not self.wire_bytes else self.tensor_bytes / self.wire_bytes

    def as_dict(self):
        return dict(asdict(self), elements_per_s=self.elements_per_s,
                    host_mb_per_s=self.host_mb_per_s, link_efficiency=self.link_efficiency)


class _TimedTransport:
    """A transport that adds up the time spent in its ``write`` and ``read``."""

    def __init__(self, transport):
        self._transport = transport
        self.seconds = 0.0

    def write(self, data):
        started = time.perf_counter()
        try:
            return self._transport.write(data)
        finally:
            self.seconds += time.perf_counter() - started

    def read(self, size, timeout_s):
        started = time.perf_counter()
        try:
            return self._transport.read(size, timeout_s)
        finally:
            self.seconds += time.perf_counter() - started

    def __getattr__(self, name):
        return getattr(self._transport, name)


def _cases(elements, dtype, operations, seed):
    """``(name, call, inputs)`` for each size and operation, inputs from one seeded stream, so
    every place that times an operation times it on the same tensors."""
    rng = np.random.default_rng(seed)
    for count in elements:
        for name in operations or OPERATIONS:
            make, call = OPERATIONS[name]
            yield name, call, make(rng, count, np.dtype(dtype))


def default_elements(url):
    """Tensor sizes (elements) worth timing on a device: the Python-simulated board does a few
    thousand cycles a second, everything else is timed up to a million elements."""
    if url == "sim" or url.startswith("sim?"):
        return [256, 1024, 4096]
    return [1024, 16384, 262144, 1 << 20]


def measure_device(device, elements, *, dtype="float32", operations=None, seed=0,
                   progress=None):
    """Time ``operations`` (names of :data:`OPERATIONS`) on an open ``device`` for each size in
    ``elements``; returns a list of :class:`Measurement`.

    Raises AssertionError if a result differs from the golden model by a single bit.
    """
    from maxaccel.sim import reference
    link = device.link
    timed = link.transport = _TimedTransport(link.transport)
    results = []
    for name, call, inputs in _cases(elements, dtype, operations, seed):
        wire_before = link.bytes_written + link.bytes_read
        transport_before = timed.seconds
        started = time.perf_counter()
        result = call(device, *inputs)
        elapsed = time.perf_counter() - started
        reference.assert_same_bits(result, call(reference, *inputs),
                                   f"{name} {[x.shape for x in inputs]}")
        tensor_bytes = sum(x.nbytes for x in inputs) + result.nbytes
        results.append(Measurement(
            where=device.url, operation=name, dtype=str(np.dtype(dtype)),
            elements=max(x.size for x in inputs), seconds=elapsed,
            tensor_bytes=tensor_bytes, host_s=elapsed - (timed.seconds - transport_before),
            wire_bytes=link.bytes_written + link.bytes_read - wire_before))
        if progress is not None:
            progress(results[-1])
    return results


def _onnx_model(name, inputs):
    from onnx import helper
    elem = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    names = [f"x{i}" for i in range(len(inputs))]
    graph_inputs = [helper.make_tensor_value_info(n, elem, x.shape) for n, x in zip(names, inputs)]
    if name == "reduce_max":
        node = helper.make_node("ReduceMax", names, ["y"], keepdims=1)
    else:
        node = helper.make_node("Max", names, ["y"])
    graph = helper.make_graph([node], name.replace(" ", "_"), graph_inputs,
                              [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = min(model.ir_version, 9)    # what onnxruntime releases accept
    return model.SerializeToString()


def _best_of(call, repeats):
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_cpu(elements, *, dtype="float32", operations=None, seed=0, repeats=5):
    """The same operations with numpy and onnxruntime, on this machine's CPU.

    For speed only: neither follows the IEEE 754-2019 order on NaN and signed zero (see
    ``docs/semantics.md``). Returns (measurements, note) where note names onnxruntime's version.
    """
    numpy_calls = {
        "reduce_max": lambda x: np.max(x, keepdims=True),
        "max same shape": np.maximum,
        "max broadcast row": np.maximum,
    }
    import onnxruntime
    note = f"onnxruntime {onnxruntime.__version__}"
    results = []
    for name, _, inputs in _cases(elements, dtype, operations, seed):
        size = max(x.size for x in inputs)
        result = numpy_calls[name](*inputs)
        tensor_bytes = sum(x.nbytes for x in inputs) + result.nbytes
        seconds = _best_of(lambda: numpy_calls[name](*inputs), repeats)
        results.append(Measurement("cpu:numpy", name, str(np.dtype(dtype)), size, seconds,
                                   tensor_bytes))
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(_onnx_model(name, inputs), options,
                                               providers=["CPUExecutionProvider"])
        feeds = {f"x{i}": x for i, x in enumerate(inputs)}
        seconds = _best_of(lambda: session.run(None, feeds), repeats)
        results.append(Measurement("cpu:onnxruntime", name, str(np.dtype(dtype)), size,
                                   seconds, tensor_bytes))
    return results, note


def _si(value, unit):
    if value is None:
        return "-"
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def format_table(measurements):
    """A markdown table of ``measurements``."""
    lines = ["| where | operation | elements | time | elements/s | host MB/s | link efficiency |",
             "|---|---|---|---|---|---|---|"]
    for m in measurements:
        host = "-" if m.host_mb_per_s is None else f"{m.host_mb_per_s:.0f}"
        efficiency = "-" if m.link_efficiency is None else f"{100 * m.link_efficiency:.2f}%"
        lines.append(f"| {m.where} | {m.operation} | {m.elements} | {_si(m.seconds, 's')} | "
                     f"{_si(m.elements_per_s, '')} | {host} | {efficiency} |")
    return "\n".join(lines)


def machine_description():
    """One line naming the machine the figures came from."""
    import os
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"numpy {np.__version__}, {platform.system()} {platform.release()}")


def plot(measurements, path, *, title=""):
    """Elements per second against tensor size, one line per device or CPU library and
    operation, log-log, and link efficiency against size; written as a PNG to ``path``."""
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("plotting needs matplotlib: pip install 'maxaccel[bench]'") from None
    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (speed, efficiency) = pyplot.subplots(1, 2, figsize=(13, 5),
                                                  gridspec_kw=dict(width_ratios=[2, 1]))
    series = {}
    for m in measurements:
        series.setdefault((m.where, m.operation), []).append(m)
    # One colour per device or library, one line style and marker per operation.
    colours = {w: f"C{i}" for i, w in enumerate(dict.fromkeys(w for w, _ in sorted(series)))}
    styles = {name: style for name, style in zip(OPERATIONS, [("-", "o"), ("--", "s"),
                                                              (":", "^")])}
    for (where, operation), points in sorted(series.items()):
        points.sort(key=lambda m: m.elements)
        line, marker = styles.get(operation, ("-", "o"))
        drawing = dict(color=colours[where], linestyle=line, marker=marker,
                       label=f"{where}: {operation}")
        speed.plot([m.elements for m in points], [m.elements_per_s for m in points], **drawing)
        if points[0].link_efficiency is not None:
            efficiency.plot([m.elements for m in points],
                            [100 * m.link_efficiency for m in points], **drawing)
    speed.set(xscale="log", yscale="log", xlabel="elements per tensor",
              ylabel="elements per second", title=title or "throughput")
    speed.axhline(1e6, color="grey", linewidth=0.8, linestyle=":")
    speed.grid(True, which="both", alpha=0.3)
    speed.legend(fontsize=7, loc="lower right")
    efficiency.set(xscale="log", xlabel="elements per tensor", ylabel="%",
                   title="link efficiency (tensor bytes / wire bytes)")
    efficiency.axhline(95, color="grey", linewidth=0.8, linestyle=":")
    efficiency.grid(True, which="both", alpha=0.3)
    efficiency.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)


# --- whole models: OffloadSession against onnxruntime --------------------------------------------

#: The Device methods an OffloadSession calls; their time is the device's, not the session's.
DEVICE_METHODS = ("max", "reduce_max", "global_max_pool", "max_pool")


class _TimedDevice:
    """A device whose operator calls add up their time (``seconds``) and count (``calls``)."""

    def __init__(self, device):
        self._device = device
        self.seconds = 0.0
        self.calls = 0

    def __getattr__(self, name):
        attribute = getattr(self._device, name)
        if name not in DEVICE_METHODS:
            return attribute

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return attribute(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
                self.calls += 1
        setattr(self, name, timed)  # made once: the wrapper's own cost is not the session's
        return timed


def conv_model(size=192, channels=8, classes=10, seed=0):
    """A small CNN: ``1 x 3 x size x size`` float32 through two 3x3 Convs with
    ReLU, a ReduceMax over the spatial axes (to the device) and a Gemm. Returns
    ``(model, feeds)``."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)

    def weights(*shape):
        return numpy_helper.from_array(
            (rng.standard_normal(shape) / math.sqrt(math.prod(shape[1:]))).astype(np.float32))

    initializers = {"w1": weights(channels, 3, 3, 3), "w2": weights(channels, channels, 3, 3),
                    "wg": weights(classes, channels),
                    "b1": numpy_helper.from_array(np.zeros(channels, np.float32)),
                    "b2": numpy_helper.from_array(np.zeros(channels, np.float32)),
                    "bg": numpy_helper.from_array(np.zeros(classes, np.float32)),
                    "axes": numpy_helper.from_array(np.array([2, 3], np.int64))}
    for name, tensor in initializers.items():
        tensor.name = name
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("ReduceMax", ["r2", "axes"], ["features"], name="reduce_max",
                         keepdims=0),
        helper.make_node("Gemm", ["features", "wg", "bg"], ["logits"], name="gemm", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "two_convs_reducemax_gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
        initializer=list(initializers.values()))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              ir_version=10, producer_name="maxaccel bench")
    feeds = {"x": rng.standard_normal((1, 3, size, size)).astype(np.float32)}
    return model, feeds


@dataclass
class ModelMeasurement:
    """One model run by :class:`~maxaccel.host.offload.OffloadSession` on a device and by
    onnxruntime alone, side by side, with onnxruntime on one thread and with its default
    threading (seconds, each the median over the repeats).

    ``session_s`` is the whole ``OffloadSession.run``; ``device_s`` the time inside the device's
    operator calls during it; ``outside_s`` the session's own cost, its run time minus its
    device time (CPU nodes, hand-overs, glue); ``onnxruntime_s`` the whole model on onnxruntime;
    all with ``intra_op_num_threads=1`` (and ``inter_op_num_threads=1``). The ``default_``
    figures are the same with default ``SessionOptions`` for both. ``ratio`` and
    ``default_ratio`` are ``outside_s / onnxruntime_s``; ``partitions`` is how many
    onnxruntime sessions the session ran.
    """

    model: str
    where: str
    nodes: int
    device_nodes: int
    session_s: float
    device_s: float
    outside_s: float
    onnxruntime_s: float
    default_session_s: float = math.nan
    default_device_s: float = math.nan
    default_outside_s: float = math.nan
    default_onnxruntime_s: float = math.nan
    partitions: int = 0

    @property
    def ratio(self):
        return self.outside_s / self.onnxruntime_s if self.onnxruntime_s > 0 else math.inf

    @property
    def default_ratio(self):
        return self.default_outside_s / self.default_onnxruntime_s \
            if self.default_onnxruntime_s > 0 else math.inf

    def as_dict(self):
        return dict(asdict(self), ratio=self.ratio, default_ratio=self.default_ratio)


def _single_thread_options():
    options = _default_options()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return options


def _default_options():
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # quiet; no effect on the threading or the graph
    return options


def load_model(path_or_model):
    """``(name, model, feeds)`` for a model file (random normal float32 inputs, symbolic sizes
    set to 1, seed 0) or for one of the built-in models by name (``"conv"``, and the names of
    :data:`maxaccel.host.models.BUILT_IN`).

    Raises FileNotFoundError, or ValueError for a file that is not ONNX
    (:func:`~maxaccel.host.offload.read_model`)."""
    import os

    import onnx

    from maxaccel.host import models
    from maxaccel.host.offload import read_model
    if path_or_model == "conv":
        model, feeds = conv_model()
        return "two Convs, ReduceMax, Gemm (1x3x192x192)", model, feeds
    if path_or_model in models.BUILT_IN:
        return models.build(path_or_model)
    model = read_model(path_or_model)
    rng = np.random.default_rng(0)
    initialized = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initialized:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return os.path.basename(os.fspath(path_or_model)), model, feeds


def _time_pair(timed, session, runtime, feeds, repeats, warmup):
    """Median ``(session, device, outside, onnxruntime)`` seconds of ``repeats`` alternating
    runs of ``session`` (on the timed device) and ``runtime``, after ``warmup`` of each."""
    for _ in range(warmup):
        session.run(None, feeds)
        runtime.run(None, feeds)
    totals, inside, alone = [], [], []
    for _ in range(repeats):
        before = timed.seconds
        started = time.perf_counter()
        session.run(None, feeds)
        totals.append(time.perf_counter() - started)
        inside.append(timed.seconds - before)
        started = time.perf_counter()
        runtime.run(None, feeds)
        alone.append(time.perf_counter() - started)
    median = statistics.median
    return (median(totals), median(inside), median(t - d for t, d in zip(totals, inside)),
            median(alone))


def measure_model(device, name, model, feeds, *, repeats=7, warmup=2, configure=None):
    """Time ``model`` on ``feeds`` with an :class:`~maxaccel.host.offload.OffloadSession` on
    ``device`` and with onnxruntime alone, alternating, first both on one thread, then both
    with default ``SessionOptions``, after ``warmup`` runs of each (onnxruntime's allocator
    settles in its first few runs); returns a :class:`ModelMeasurement` (medians over
    ``repeats``). ``configure``, if given, is called on each ``SessionOptions`` before the
    session gets it (onnxruntime alone keeps them as they are), to measure another setting.

    Raises AssertionError if the session's outputs differ from onnxruntime's by more than
    float rounding (the inputs are random normals: no NaN or signed-zero ties for the
    contract to decide differently).
    """
    import onnxruntime

    from maxaccel.host.offload import OffloadSession
    timed = _TimedDevice(device)
    figures = []
    for options in (_single_thread_options, _default_options):
        given = options()
        if configure is not None:
            configure(given)
        session = OffloadSession(model, given, device=timed)
        runtime = onnxruntime.InferenceSession(model.SerializeToString(), options(),
                                               providers=["CPUExecutionProvider"])
        got, want = session.run(None, feeds), runtime.run(None, feeds)
        for value, expected in zip(got, want):
            np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-6,
                                       err_msg=f"{name}: OffloadSession differs from onnxruntime")
        figures.append(_time_pair(timed, session, runtime, feeds, repeats, max(warmup - 1, 0)))
        placements = session.placements
        partitions = sum(1 for step in session.last_steps if step.where == "onnxruntime")
        del session, runtime
    (session_s, device_s, outside_s, onnxruntime_s), default = figures
    return ModelMeasurement(
        model=name, where=getattr(device, "url", type(device).__name__),
        nodes=len(model.graph.node),
        device_nodes=sum(1 for *_, where in placements if where == "device"),
        session_s=session_s, device_s=device_s, outside_s=outside_s, onnxruntime_s=onnxruntime_s,
        default_session_s=default[0], default_device_s=default[1], default_outside_s=default[2],
        default_onnxruntime_s=default[3], partitions=partitions)


def format_model_table(measurements):
    """A markdown table of :class:`ModelMeasurement` s: one thread, then default threading."""
    lines = ["| model | device | nodes (on device) | session | in device calls | outside | "
             "onnxruntime, 1 thread | outside / onnxruntime | outside, default threads | "
             "onnxruntime, default threads | outside / onnxruntime, default | partitions |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in measurements:
        lines.append(f"| {m.model} | {m.where} | {m.nodes} ({m.device_nodes}) | "
                     f"{_si(m.session_s, 's')} | {_si(m.device_s, 's')} | "
                     f"{_si(m.outside_s, 's')} | {_si(m.onnxruntime_s, 's')} | "
                     f"{m.ratio:.2f}x | {_si(m.default_outside_s, 's')} | "
                     f"{_si(m.default_onnxruntime_s, 's')} | {m.default_ratio:.2f}x | "
                     f"{m.partitions} |")
    return "\n".join(lines)


# ---- Every operation against a ReduceMax of the same input bytes, in device cycles.

def _row_col(rng, n, dt):
    rows, columns = _matrix(n)
    return (_random(rng, (rows, columns), dt), _random(rng, (1, columns), dt),
            _random(rng, (rows, 1), dt))


#: name -> (inputs(rng, elements, dtype), device/reference call); each is compared with a
#: ``reduce_max`` of one tensor of as many elements as all its inputs together. A row is one
#: more entry: ``inputs`` makes the operands of about ``elements`` elements each in the dtype
#: given, ``call(m, *inputs)`` runs it on ``m``, a :class:`~maxaccel.host.device.Device` or
#: :mod:`maxaccel.sim.reference`.
RATIO_OPERATIONS = {
    "ReduceMax / GlobalMaxPool": (
        lambda rng, n, dt: (_random(rng, (1, 16, max(1, n // 16)), dt),),
        # GlobalMaxPool takes floats only; an integer tensor reduces its spatial axis.
        lambda m, x: (m.global_max_pool(x) if x.dtype.kind == "f"
                      else m.reduce_max(x, axes=(2,)))),
    "max(a, b), same shape": (lambda rng, n, dt: tuple(_random(rng, (n,), dt) for _ in range(2)),
                              lambda m, *x: m.max(*x)),
    "max(a, b, c), same shape": (
        lambda rng, n, dt: tuple(_random(rng, (n,), dt) for _ in range(3)),
        lambda m, *x: m.max(*x)),
    "max(a, row, col)": (_row_col, lambda m, *x: m.max(*x)),
    # ResNet's stem pool on its 64 channels of a square image (64 x 64 at 2^18 elements): 32
    # int8 images fill a 32-byte link word.
    "MaxPool 3x3 stride 2 pads 1": (
        lambda rng, n, dt: (_random(rng, (1, 64) + _matrix(max(1, n // 64)), dt),),
        lambda m, x: m.max_pool(x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
}

#: The dtypes of the ratio table.
RATIO_DTYPES = ("float32", "float16", "int8", "float64")


@dataclass
class Ratio:
    """One operation's device cycles against a ReduceMax of the same input bytes;
    ``request_bytes``: the bytes the host sent for the operation (frames, parameter blocks and
    data), which the core took in ``cycles``."""

    where: str
    operation: str
    dtype: str
    elements: int
    cycles: int
    reduce_cycles: int
    request_bytes: int

    @property
    def ratio(self):
        return self.cycles / self.reduce_cycles

    def as_dict(self):
        return {**asdict(self), "ratio": self.ratio}


class NoCycleCounter(ValueError):
    """The device is not a virtual board: it has no clock cycles to count."""


def _board(device):
    """The virtual board behind ``device`` (its transport, unwrapped), which counts cycles."""
    transport = device.link.transport
    transport = getattr(transport, "_transport", transport)    # a _TimedTransport's
    transport = getattr(transport, "board", transport)         # a SimTransport's board
    if not hasattr(transport, "cycles"):
        raise NoCycleCounter(f"{device.url!r} does not count cycles: ratios need a virtual "
                             f"board (sim or verilator)")
    return transport


def measure_ratios(device, elements=1 << 18, *, dtypes=RATIO_DTYPES, operations=None, seed=0,
                   progress=None):
    """Device cycles of each of :data:`RATIO_OPERATIONS` (``elements`` per operand) over those
    of a ``reduce_max`` of as many input elements, per dtype, on a virtual board (cycles are
    deterministic, unlike wall time). Every result is checked against the golden model.

    Returns
    -------
    list of Ratio
    """
    from maxaccel.sim import reference
    board = _board(device)
    rng = np.random.default_rng(seed)

    def cycles(call):
        start, sent = board.cycles, device.link.bytes_written
        result = call()
        return result, board.cycles - start, device.link.bytes_written - sent

    results = []
    for dtype in dtypes:
        for name in operations or RATIO_OPERATIONS:
            make, call = RATIO_OPERATIONS[name]
            inputs = make(rng, elements, np.dtype(dtype))
            result, spent, sent = cycles(lambda: call(device, *inputs))
            reference.assert_same_bits(result, call(reference, *inputs),
                                       f"{name} {[x.shape for x in inputs]}")
            flat = _random(rng, (sum(x.size for x in inputs),), np.dtype(dtype))
            result, baseline, _ = cycles(lambda: device.reduce_max(flat))
            reference.assert_same_bits(result, reference.reduce_max(flat), "reduce_max")
            results.append(Ratio(device.url, name, str(np.dtype(dtype)), elements, spent,
                                 baseline, sent))
            if progress is not None:
                progress(results[-1])
    return results


def ratio_line(r):
    """One :class:`Ratio` as a progress line."""
    return (f"{r.dtype:<8} {r.operation:<26} {r.cycles:>9} cycles, ReduceMax "
            f"{r.reduce_cycles:>9}: {r.ratio:.3f}")


def format_ratios(ratios):
    """The ratios as a markdown table: one row per operation, one column per dtype."""
    dtypes = list(dict.fromkeys(r.dtype for r in ratios))
    table = {(r.operation, r.dtype): r.ratio for r in ratios}
    lines = ["| operation | " + " | ".join(dtypes) + " |", "|---|" + "---|" * len(dtypes)]
    for operation in dict.fromkeys(r.operation for r in ratios):
        cells = [f"{table[operation, d]:.2f}" if (operation, d) in table else "-"
                 for d in dtypes]
        lines.append(f"| {operation} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---- MaxPool classes of real networks against the link-bound time, in device cycles.

@dataclass(frozen=True)
class PoolClass:
    """One MaxPool configuration of the MaxPool ratio table.

    Attributes
    ----------
    label : str
        The pool's attributes, short (the row's name is this and the shape's ``C x D1..Dn``).
    shape : tuple of int
        The input ``N x C x D1..Dn``.
    attributes : dict
        ``max_pool`` keyword arguments (``kernel_shape``, ``strides``, ``pads``, ...).
    return_indices : bool
        Whether the pool returns its Indices too.
    where : str
        The networks that pool this way.
    """

    label: str
    shape: tuple
    attributes: dict
    return_indices: bool = False
    where: str = ""

    @property
    def name(self):
        """The row's name: ``label, C x D1..Dn``."""
        return f"{self.label}, {'x'.join(str(n) for n in self.shape[1:])}"

    def with_channels(self, channels):
        """The same pool on ``channels`` channels (a scaled-down row; None: as it is)."""
        if channels is None:
            return self
        return PoolClass(self.label, self.shape[:1] + (channels,) + self.shape[2:],
                         self.attributes, self.return_indices, self.where)

    def call(self, m, x):
        """The pool of ``x`` on ``m`` (a Device or :mod:`maxaccel.sim.reference`)."""
        return m.max_pool(x, **self.attributes, return_indices=self.return_indices)

    def link_bytes(self, itemsize):
        """The bytes a pool of this class must move over the link one way or the other: the
        larger of its input and its output (values, and Indices as ``MAX_POOL`` replies carry
        them: :data:`~maxaccel.contract.wire.WINDOW_INDEX_BYTES` each). A ReduceMax of that
        many bytes is the link-bound time the table divides by."""
        from maxaccel.contract.pooling import resolve_max_pool
        from maxaccel.contract.wire import WINDOW_INDEX_BYTES
        outputs = math.prod(resolve_max_pool(self.shape, **self.attributes).output_shape)
        per_output = itemsize + (WINDOW_INDEX_BYTES if self.return_indices else 0)
        return max(math.prod(self.shape) * itemsize, outputs * per_output)


def _pads(rank, pad):
    return [pad] * (2 * rank)


def _values(rng, shape, dtype):
    """Random values of ``dtype``: normal for floats, the whole range for integers."""
    if dtype.kind == "f":
        return _random(rng, shape, dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


#: The MaxPool classes of ``maxaccel bench --ratios``, at the networks' own shapes.
#: The tests (``tests/test_pool_classes.py``: their exact cycles) and docs/benchmarks.md take
#: the rows from here.
POOL_CLASSES = (
    PoolClass("3x3 s2 p1", (1, 64, 147, 147),
              dict(kernel_shape=[3, 3], strides=[2, 2], pads=_pads(2, 1)),
              where="Inception v3 stem"),
    PoolClass("2x2 s2", (1, 64, 224, 224),
              dict(kernel_shape=[2, 2], strides=[2, 2]), where="VGG"),
    PoolClass("2x2 s2", (1, 64, 256, 256),
              dict(kernel_shape=[2, 2], strides=[2, 2]), where="U-Net encoder"),
    PoolClass("3x3 s1 p1", (1, 80, 128, 128),
              dict(kernel_shape=[3, 3], pads=_pads(2, 1)), where="CenterNet peak picking"),
    *(PoolClass(f"{k}x{k} s1 p{k // 2}", (1, c, n, n),
                dict(kernel_shape=[k, k], pads=_pads(2, k // 2)), where="SPP / SPPF blocks")
      for c, n in ((256, 13), (128, 20)) for k in (5, 9, 13)),
    PoolClass("k4 s4", (1, 64, 996), dict(kernel_shape=[4], strides=[4]),
              where="audio CNN"),
    PoolClass("k2 s2", (1, 32, 8000), dict(kernel_shape=[2], strides=[2]),
              where="audio CNN"),
    PoolClass("3x3x3 s2 p1", (1, 64, 16, 28, 28),
              dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=_pads(3, 1)),
              where="3-D CNN"),
    PoolClass("3x3 s2 p1 + Indices", (1, 64, 112, 112),
              dict(kernel_shape=[3, 3], strides=[2, 2], pads=_pads(2, 1)),
              return_indices=True, where="ResNet stem, MaxUnpool"),
)

#: The dtypes of the MaxPool table.
POOL_DTYPES = ("float32", "float16", "uint8")


@dataclass
class PoolRatio(Ratio):
    """One MaxPool class's device cycles against a ReduceMax of its
    :meth:`PoolClass.link_bytes`; ``route``: the command the pool ran through;
    ``reduce_route_cycles``: the same pool's cycles through ``REDUCE`` when it ran through
    ``MAX_POOL`` and that was measured too (else 0)."""

    route: str = ""
    reduce_route_cycles: int = 0


def measure_pool_ratios(device, classes=POOL_CLASSES, *, dtypes=POOL_DTYPES, seed=0,
                        both_routes=False, channels=None, progress=None):
    """Device cycles of each MaxPool class over those of a ``reduce_max`` of its link bytes
    (:meth:`PoolClass.link_bytes`), per dtype, on a virtual board; every result (values and
    Indices) checked against the golden model. With ``both_routes``, a pool that went through
    ``MAX_POOL`` is also timed through ``REDUCE`` (the fallback route), to show which is faster.
    ``channels`` runs every class on that many channels instead of its own (a quicker table).

    Returns
    -------
    list of PoolRatio
        ``elements``: those of the ReduceMax.
    """
    from maxaccel.sim import reference
    board = _board(device)
    rng = np.random.default_rng(seed)
    results = []
    for dtype in dtypes:
        dtype = np.dtype(dtype)
        for pool in classes:
            pool = pool.with_channels(channels)
            x = _values(rng, pool.shape, dtype)
            start, sent = board.cycles, device.link.bytes_written
            result = pool.call(device, x)
            spent, sent = board.cycles - start, device.link.bytes_written - sent
            route = device.last_max_pool_route.name
            want = pool.call(reference, x)
            results_to_check = [result]
            reduce_route = 0
            if both_routes and route == "MAX_POOL":
                from maxaccel.contract.pooling import check_max_pool
                from maxaccel.host.pool_reduce import plan_reduce_pool
                values, fmt, geometry, _ = check_max_pool(x, **pool.attributes)
                start = board.cycles
                results_to_check.append(device._max_pool_by_reduce(
                    values, fmt, plan_reduce_pool(geometry), pool.return_indices))
                reduce_route = board.cycles - start
            for each in results_to_check:
                for got, expected in zip(*((each, want) if pool.return_indices
                                           else ((each,), (want,)))):
                    reference.assert_same_bits(got, expected, f"{pool.name} {dtype}")
            elements = -(-pool.link_bytes(dtype.itemsize) // dtype.itemsize)
            flat = _values(rng, (elements,), dtype)
            start = board.cycles
            reference.assert_same_bits(device.reduce_max(flat), reference.reduce_max(flat),
                                       "reduce_max")
            results.append(PoolRatio(device.url, pool.name, str(dtype), elements, spent,
                                     board.cycles - start, sent, route, reduce_route))
            if progress is not None:
                progress(results[-1])
    return results


def pool_ratio_line(r):
    """One :class:`PoolRatio` as a progress line."""
    line = (f"{r.dtype:<8} {r.operation:<34} {r.route:<8} {r.cycles:>9} cycles, ReduceMax "
            f"{r.reduce_cycles:>8}: {r.ratio:.3f}")
    if r.reduce_route_cycles:
        line += f" (through REDUCE {r.reduce_route_cycles} cycles)"
    return line


def format_pool_ratios(ratios):
    """The MaxPool ratios as a markdown table: one row per class, one column per dtype, each
    cell the ratio and, when the pool did not go through the pooling unit, its route (with
    both routes timed: the REDUCE route's ratio beside the unit's)."""
    dtypes = list(dict.fromkeys(r.dtype for r in ratios))
    table = {(r.operation, r.dtype): r for r in ratios}
    lines = ["| MaxPool | " + " | ".join(dtypes) + " |", "|---|" + "---|" * len(dtypes)]
    for operation in dict.fromkeys(r.operation for r in ratios):
        cells = []
        for d in dtypes:
            r = table.get((operation, d))
            cell = "-" if r is None else f"{r.ratio:.2f}"
            if r is not None and r.route != "MAX_POOL":
                cell += f" ({r.route})"
            elif r is not None and r.reduce_route_cycles:
                cell += f" (REDUCE {r.reduce_route_cycles / r.reduce_cycles:.2f})"
            cells.append(cell)
        lines.append(f"| {operation} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def measure_core_link(report, elements=1 << 18, *, dtypes=RATIO_DTYPES, progress=None):
    """Core against link, per operation, for the board of a build ``report``
    (:func:`maxaccel.boards.targets.load_reports`).

    The board's core (its target's capacities and units, the report's lanes and clock, and its
    link word: ``core_bytes_per_s`` over the clock, 32 bytes behind the NiteFury's XDMA, one
    behind a UART) runs :data:`RATIO_OPERATIONS` on the compiled virtual board. For each
    operation, the rate at which the core takes the operation's request bytes (bytes sent over
    cycles, at the board's clock) over the link's payload rate (``link_bytes_per_s``): the
    peak ratio ``core_bytes_per_s / link_bytes_per_s`` times the share of its cycles in which
    the core took a full link word. Above 1 the link is the limit.

    Returns
    -------
    dict
        operation -> {dtype: core/link}
    """
    from maxaccel.boards.build import core_parameters
    from maxaccel.boards.targets import target
    from maxaccel.host.device import Device
    from maxaccel.host.transport import SimTransport
    board = target(report["board"])
    clock_hz = report["clock_mhz"] * 1e6
    link_bytes = round(report["core_bytes_per_s"] / clock_hz)
    parameters = core_parameters(board, report["lanes"], report["clock_mhz"])
    del parameters["clock_hz"]  # only what IDENTIFY reports; the virtual boards' keeps one model
    transport = SimTransport("verilator", link_bytes=link_bytes, **parameters)
    with Device(transport, url=f"verilator:{board.name}") as device:
        ratios = measure_ratios(device, elements, dtypes=dtypes, progress=progress)
    table = {}
    for r in ratios:
        rate = clock_hz * r.request_bytes / r.cycles
        table.setdefault(r.operation, {})[r.dtype] = rate / report["link_bytes_per_s"]
    return table


def format_core_link(core_link):
    """``{board: measure_core_link(...)}`` as a markdown table: one row per board, one column
    per operation, each cell the lowest core/link over the dtypes."""
    operations = list(dict.fromkeys(op for table in core_link.values() for op in table))
    lines = ["| board | " + " | ".join(operations) + " |", "|---|" + "---|" * len(operations)]
    for board, table in core_link.items():
        cells = [f"{min(table[op].values()):.2f}x" if op in table else "-"
                 for op in operations]
        lines.append(f"| {board} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: The core/link table of the board reports (:func:`measure_core_link` of each), beside them.
CORE_LINK_FILE = "core_link.json"


def load_core_link(directory=None):
    """The core/link table saved beside the board reports in ``directory`` (default
    :func:`maxaccel.boards.targets.reports_dir`): ``{board: {operation: {dtype: figure}}}``,
    or None if there is none."""
    import json
    import pathlib
    from maxaccel.boards.targets import reports_dir
    path = pathlib.Path(reports_dir() if directory is None else directory) / CORE_LINK_FILE
    return json.loads(path.read_text())["boards"] if path.exists() else None


def _main(argv=None):
    import argparse
    import json
    from maxaccel.host import open_device
    parser = argparse.ArgumentParser(
        prog="python -m maxaccel.host.bench",
        description="Each operation's device cycles over a ReduceMax of the same input bytes; "
                    "with --boards, core against link per operation for every board report.")
    parser.add_argument("--device", default="verilator", metavar="URL")
    parser.add_argument("--elements", type=int, metavar="N",
                        help="elements per operand (default 262144)")
    parser.add_argument("--dtype", action="append", help=f"default: {' '.join(RATIO_DTYPES)}")
    parser.add_argument("--boards", action="store_true",
                        help="measure core/link per operation of each board report's core on "
                             "the compiled virtual board (its link word, lanes, capacities)")
    parser.add_argument("--board", action="append", metavar="NAME",
                        help="with --boards (implied): only this board's report (repeatable)")
    parser.add_argument("--json", metavar="FILE", help="with --boards: write the table "
                        f"(docs/boards/{CORE_LINK_FILE} is this file); with --board, the "
                        "file's other boards are kept")
    args = parser.parse_args(argv)
    if args.board:
        from maxaccel.boards.targets import target
        for name in args.board:
            try:
                target(name)    # an unknown name is refused before anything runs
            except ValueError as error:
                parser.error(str(error))
        args.boards = True
    dtypes = args.dtype or RATIO_DTYPES
    progress = lambda r: print(f"  {ratio_line(r)}", flush=True)     # noqa: E731
    elements = args.elements or 1 << 18
    if not args.boards:
        with open_device(args.device) as device:
            ratios = measure_ratios(device, elements, dtypes=dtypes, progress=progress)
        print(format_ratios(ratios))
        return
    from maxaccel.boards.targets import TARGETS, load_reports
    reports = [r for r in load_reports() if not args.board or r["board"] in args.board]
    missing = set(args.board or ()) - {r["board"] for r in reports}
    if missing:
        parser.error(f"no build report for {', '.join(sorted(missing))} (run maxaccel build)")
    core_link = {}
    for report in reports:
        print(f"{report['board']}: {report['lanes']} lane(s), {report['clock_mhz']:g} MHz",
              flush=True)
        core_link[report["board"]] = measure_core_link(report, elements, dtypes=dtypes,
                                                       progress=progress)
    print(format_core_link(core_link))
    if args.json:
        import pathlib
        path = pathlib.Path(args.json)
        if args.board and path.exists():
            previous = json.loads(path.read_text())
            if previous.get("elements") != elements:
                parser.error(f"{path} was measured with {previous.get('elements')} elements "
                             f"per operand, not {elements}: measure every board again")
            core_link = {name: core_link.get(name, previous["boards"].get(name))
                         for name in TARGETS
                         if name in core_link or name in previous["boards"]}
        with open(path, "w") as file:
            json.dump({"command": "python -m maxaccel.host.bench --boards", "elements": elements,
                       "boards": core_link}, file, indent=1)
            file.write("\n")


if __name__ == "__main__":
    _main()
