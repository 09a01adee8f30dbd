"""Wall-clock benchmarks behind ``maxaccel bench``: device throughput, host overhead, link
efficiency, and the same operations on the CPU (numpy, onnxruntime) for comparison; and whole
models, an OffloadSession against onnxruntime. The device-cycle tables are elsewhere:
``bench/cycles.py`` (each operation over a ReduceMax; core against link per board),
``bench/pools.py`` (the MaxPool classes), ``bench/xdma.py`` (XDMA transfer sizes).

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
whole model, side by side (each run back to back in a block of its own); the session's time
splits into the time inside the device's operator calls and the time *outside* them (its CPU
partitions and glue), which is what the session costs a user over onnxruntime.
"""

import dataclasses
from dataclasses import asdict, dataclass
import functools
import inspect
import math
import platform
import statistics
import time

import numpy as np

__all__ = ["OPERATIONS", "Measurement", "TimedTransport", "measure_device", "measure_cpu",
           "default_elements", "format_table", "plot", "check_operations", "machine_description",
           "square_shape", "random_tensor", "ModelMeasurement", "conv_model", "load_model",
           "measure_model", "format_model_table", "MODELS_FILE", "MODELS_COMMAND",
           "load_model_measurements"]


def square_shape(elements):
    """``(rows, columns)`` of about ``elements`` elements, as square as powers of two allow."""
    columns = 1 << max(0, int(math.log2(max(1, elements))) // 2)
    return max(1, elements // columns), columns


def random_tensor(rng, shape, dtype):
    """Normal random values of ``dtype`` (the benchmarks' inputs)."""
    return rng.standard_normal(shape).astype(dtype)


#: name -> (inputs(rng, elements, dtype), device/reference call). Shapes keep about
#: ``elements`` output or reduced elements.
OPERATIONS = {
    "reduce_max": (lambda rng, n, dt: (random_tensor(rng, (n,), dt),),
                   lambda m, x: m.reduce_max(x)),
    "max same shape": (lambda rng, n, dt: (random_tensor(rng, (n,), dt),
                                           random_tensor(rng, (n,), dt)),
                       lambda m, x, y: m.max(x, y)),
    "max broadcast row": (lambda rng, n, dt: (random_tensor(rng, square_shape(n), dt),
                                              random_tensor(rng, (1, square_shape(n)[1]), dt)),
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


class TimedTransport:
    """A transport that adds up the time spent in its ``write`` and ``read``; ``inner`` is the
    transport it times."""

    def __init__(self, transport):
        self.inner = transport
        self.seconds = 0.0

    def write(self, data):
        started = time.perf_counter()
        try:
            return self.inner.write(data)
        finally:
            self.seconds += time.perf_counter() - started

    def read(self, size, timeout_s):
        started = time.perf_counter()
        try:
            return self.inner.read(size, timeout_s)
        finally:
            self.seconds += time.perf_counter() - started

    def __getattr__(self, name):
        return getattr(self.inner, name)


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
    timed = link.transport = TimedTransport(link.transport)
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

def _device_operations():
    """The names of :class:`~maxaccel.host.device.Device`'s public operations: its public
    methods that take a tensor (every one but ``close``)."""
    from maxaccel.host.device import Device
    return tuple(name for name, member in vars(Device).items()
                 if not name.startswith("_") and inspect.isfunction(member)
                 and len(inspect.signature(member).parameters) > 1)


#: The Device operations (an OffloadSession calls them); their time is the device's, not the
#: session's.
DEVICE_METHODS = _device_operations()


class _OperatorWrapper:
    """A device whose operator calls (:data:`DEVICE_METHODS`) go through ``_wrap(name,
    method)``'s function, made once per name (the wrapper's own cost is not the session's);
    any other attribute is the device's."""

    def __init__(self, device):
        self._device = device

    def __getattr__(self, name):
        attribute = getattr(self._device, name)
        if name not in DEVICE_METHODS:
            return attribute
        wrapped = self._wrap(name, attribute)
        setattr(self, name, wrapped)
        return wrapped


class _TimedDevice(_OperatorWrapper):
    """A device whose operator calls add up their time (``seconds``) and count (``calls``)."""

    def __init__(self, device):
        super().__init__(device)
        self.seconds = 0.0
        self.calls = 0

    def _wrap(self, name, method):
        @functools.wraps(method)    # its signature: whether it takes ``out``
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
                self.calls += 1
        return timed

    def time_run(self, model, feeds):
        """``model.run(None, feeds)`` (a session on this device) timed: ``(seconds, seconds
        in its device calls)``; the host-side time is their difference."""
        before = self.seconds
        started = time.perf_counter()
        model.run(None, feeds)
        return time.perf_counter() - started, self.seconds - before


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
    threading (seconds, each the median of the rounds' blocks' medians: :func:`_time_pair`).

    ``session_s`` is the whole ``OffloadSession.run``; ``device_s`` the time inside the device's
    operator calls during it; ``outside_s`` the session's own cost, its run time minus its
    device time (CPU nodes, hand-overs, glue); ``onnxruntime_s`` the whole model on onnxruntime;
    all with ``intra_op_num_threads=1`` (and ``inter_op_num_threads=1``). The ``default_``
    figures are the same with default ``SessionOptions`` for both. ``ratio`` and
    ``default_ratio`` are ``outside_s / onnxruntime_s``; ``partitions`` is how many
    onnxruntime sessions the session ran. ``spread_s`` and ``default_spread_s`` are the
    interquartile ranges of the session's whole runs (device time included): how far a run
    moves from the next on this machine, the least a change must move ``session_s`` by to be
    seen.
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
    spread_s: float = math.nan
    default_spread_s: float = math.nan

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
    :data:`maxaccel.bench.models.BUILT_IN`).

    Raises FileNotFoundError, or ValueError for a file that is not ONNX
    (:func:`~maxaccel.host.offload.read_model`)."""
    import os

    import onnx

    from maxaccel.bench import models
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


def _quiet(window_s=0.005, busy=0.2, limit_s=2.0, *, cpu=time.process_time, sleep=time.sleep,
           clock=time.perf_counter):
    """Wait until this process's threads (the caller, asleep, aside) use less than ``busy`` of
    a core over ``window_s``, at most ``limit_s``; returns the seconds waited.

    With default ``SessionOptions`` onnxruntime's thread pool spins on after a run (about
    40 ms here), its workers pinned to the same cores in every session of the process: a
    session run meanwhile shares those cores with them (docs/offload.md, "How the two are
    timed").
    """
    started = clock()
    while clock() - started < limit_s:
        used = cpu()
        sleep(window_s)
        if cpu() - used < busy * window_s:
            break
    return clock() - started


def _spread(seconds):
    """The interquartile range of ``seconds``."""
    if len(seconds) < 2:
        return 0.0
    low, _, high = statistics.quantiles(seconds, n=4, method="inclusive")
    return high - low


def _time_pair(timed, session, runtime, feeds, repeats, warmup, rounds):
    """Median ``(session, device, outside, onnxruntime)`` seconds over ``rounds`` rounds, in
    each a block of ``repeats`` runs of ``session`` (on the timed device) back to back and a
    block of as many of ``runtime``, the first of the two taking turns, each block after
    ``warmup`` runs once the other's threads are still (:func:`_quiet`): each as a model run
    over and over on its own. Run by run, each would run beside the other's spinning pool;
    in one block each, where the scheduler happened to put the calling thread would decide
    the ratio. A figure is the median of its blocks' medians; a fifth is the spread of all
    the session's runs (:func:`_spread`)."""
    blocks = {session: [], runtime: []}
    totals_of_session = []
    for round_ in range(rounds):
        for model in (session, runtime) if round_ % 2 == 0 else (runtime, session):
            _quiet()
            for _ in range(warmup):
                model.run(None, feeds)
            totals, inside = [], []
            for _ in range(repeats):
                total, device = timed.time_run(model, feeds)
                totals.append(total)
                inside.append(device)
            blocks[model].append((statistics.median(totals), statistics.median(inside),
                                  statistics.median(t - d for t, d in zip(totals, inside))))
            if model is session:
                totals_of_session += totals

    def median(model, figure):
        return statistics.median(block[figure] for block in blocks[model])
    return (median(session, 0), median(session, 1), median(session, 2), median(runtime, 0),
            _spread(totals_of_session))


def measure_model(device, name, model, feeds, *, repeats=7, warmup=2, rounds=5,
                  configure=None):
    """Time ``model`` on ``feeds`` with an :class:`~maxaccel.host.offload.OffloadSession` on
    ``device`` and with onnxruntime alone, each run back to back in ``rounds`` rounds of
    blocks (:func:`_time_pair`), first both on one thread, then both with default
    ``SessionOptions``, after ``warmup`` runs of each (onnxruntime's allocator settles in its
    first few runs); returns a :class:`ModelMeasurement` (medians over the rounds of the
    medians over ``repeats``). ``configure``, if given, is called
    on each ``SessionOptions`` before the session gets it (onnxruntime alone keeps them as they
    are), to measure another setting.

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
        figures.append(_time_pair(timed, session, runtime, feeds, repeats,
                                  max(warmup - 1, 0), rounds))
        placements = session.placements
        partitions = sum(1 for step in session.last_steps if step.where == "onnxruntime")
        del session, runtime
    (session_s, device_s, outside_s, onnxruntime_s, spread_s), default = figures
    return ModelMeasurement(
        model=name, where=getattr(device, "url", type(device).__name__),
        nodes=len(model.graph.node),
        device_nodes=sum(1 for *_, where in placements if where == "device"),
        session_s=session_s, device_s=device_s, outside_s=outside_s, onnxruntime_s=onnxruntime_s,
        default_session_s=default[0], default_device_s=default[1], default_outside_s=default[2],
        default_onnxruntime_s=default[3], partitions=partitions, spread_s=spread_s,
        default_spread_s=default[4])


def format_model_table(measurements):
    """A markdown table of :class:`ModelMeasurement` s: one thread, then default threading."""
    lines = ["| model | device | nodes (on device) | session | spread | in device calls | "
             "outside | onnxruntime, 1 thread | outside / onnxruntime | session, default "
             "threads | spread, default | outside, default threads | onnxruntime, default "
             "threads | outside / onnxruntime, default | partitions |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in measurements:
        lines.append(f"| {m.model} | {m.where} | {m.nodes} ({m.device_nodes}) | "
                     f"{_si(m.session_s, 's')} | {_si(m.spread_s, 's')} | "
                     f"{_si(m.device_s, 's')} | "
                     f"{_si(m.outside_s, 's')} | {_si(m.onnxruntime_s, 's')} | "
                     f"{m.ratio:.2f}x | {_si(m.default_session_s, 's')} | "
                     f"{_si(m.default_spread_s, 's')} | {_si(m.default_outside_s, 's')} | "
                     f"{_si(m.default_onnxruntime_s, 's')} | {m.default_ratio:.2f}x | "
                     f"{m.partitions} |")
    return "\n".join(lines)


#: The ``maxaccel bench --json`` file whose whole-model table docs/offload.md quotes
#: ("Performance"); :data:`MODELS_COMMAND` writes it anew.
MODELS_FILE = "docs/bench/models.json"
#: The command that measures :data:`MODELS_FILE` (a few minutes with the compiled model cached):
#: every built-in model and SqueezeNet 1.1, each device call paced as on a NiteFury.
MODELS_COMMAND = ("maxaccel bench --device xdma-model:verilator --paced --no-cpu -q "
                  "--model audio --model segnet --model kws --model m5 --model resnet18 "
                  f"--model examples/squeezenet1_1.onnx --model control --json {MODELS_FILE}")


def load_model_measurements(path):
    """The whole-model figures (:class:`ModelMeasurement` s, in order) of a file
    ``maxaccel bench --model ... --json`` wrote, such as :data:`MODELS_FILE`."""
    import json
    names = {f.name for f in dataclasses.fields(ModelMeasurement)}
    with open(path) as file:
        models = json.load(file)["models"]
    return [ModelMeasurement(**{k: v for k, v in m.items() if k in names}) for m in models]
