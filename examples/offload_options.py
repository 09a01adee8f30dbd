"""Measure the ways of cutting OffloadSession's cost outside the device calls (docs/offload.md,
"What a hand-over costs"). Each prints markdown rows: option, model, threading, host-side time
per run (the session's run minus its device calls), onnxruntime's whole model, their ratio;
medians of ``--repeats`` interleaved runs (the machine is shared: compare rows of one run).

    python examples/offload_options.py spinning --device verilator audio segnet kws
    python examples/offload_options.py spinning audio segnet kws resnet18 --one-session
    python examples/offload_options.py global-pool --device verilator audio segnet kws
    python examples/offload_options.py pause audio segnet kws
    python examples/offload_options.py iobinding audio segnet kws
    python examples/offload_options.py instant audio segnet kws
    python examples/offload_options.py gap audio segnet kws
    python examples/offload_options.py handover audio segnet kws
    python examples/offload_options.py layout audio segnet kws
    python examples/offload_options.py cold audio segnet kws
    python examples/offload_options.py neighbour audio segnet kws
    python examples/offload_options.py wrapper audio segnet kws
    python examples/offload_options.py pyop     # needs onnxruntime-extensions installed
    python examples/offload_options.py single audio segnet kws
    python examples/offload_options.py glue audio segnet kws
    python examples/offload_options.py --device verilator single audio segnet kws
    python examples/offload_options.py order audio segnet kws --busy 0.1
    python examples/offload_options.py awake audio kws examples/squeezenet1_1.onnx

``spinning``: the partitions' pools spinning between hand-overs (onnxruntime's default, what
the session did before), spinning only while a partition runs (``session.force_spinning_stop``:
onnxruntime stops the spinning when the last ``Run`` returns) and sleeping (what it does now);
with ``--one-session`` the same three for the model as one session, whose pools now spin while
a run lasts, device calls included. ``global-pool``: onnxruntime's
process-wide thread pools (``set_global_thread_pool_sizes``, ``use_per_session_threads =
False`` for every session, onnxruntime alone included), set before any session exists.
``pause``: the golden model as the device, returning at once or after 50 ms asleep (a board's
wait): what the hand-overs cost once the CPU's caches went cold. ``iobinding``: each partition
run warm, by ``run`` against ``run_with_iobinding`` (inputs bound, outputs left to onnxruntime).
``instant``: a device returning the golden model's results at once (computed once): the
session's own cost, partitions and glue, with nothing between the partitions.
``gap``: a device returning the golden model's results (computed once) after a busy wait of
0 to 20 ms that touches no memory: whether the partitions after a device call slow down with
what the call does or only with how long it lasts. ``handover``: each partition run alone
after such a wait (0 and 5 ms), by ``run``, the session binding's ``run`` (``_sess.run``, no
Python wrapper), ``run_with_ort_values`` and an ``IOBinding`` whose inputs are bound once and
whose outputs go into arrays allocated once.
``layout``: the partitions alone and the whole model, warm, with
``graph_optimization_level`` ``ORT_ENABLE_EXTENDED`` and ``ORT_ENABLE_ALL`` (the default, whose
NCHWc layout transformer puts a reorder at each partition's edges where the whole model has one).
``cold``: which part of a partition goes cold during a 5 ms wait: each partition timed
after the wait alone, after a twin session of the same partition ran on other arrays (its
code warm, its data cold), after itself ran on other arrays, after a one-node session ran
(onnxruntime's run path warm, the partition's kernels and data cold), and that one-node run
and the partition timed together.
``neighbour``: each partition after a 5 ms sleep (a board's blocking read), while a thread
runs a twin of it over and over: wherever the system puts that thread, on the other core, or
on the same core at ``SCHED_IDLE``; against a twin's run just before and warm.
``wrapper``: two sessions in one process, one running its partitions through
``InferenceSession.run`` (the Python wrapper), the other through the session binding's ``run``
(what the session does on the CPU provider), the device busy 0, 2 and 5 ms a call.
``pyop``: onnxruntime-extensions' Python operator against onnxruntime's Identity on 1k, 100k
and 1M float32 elements (a first single-session design: every device step such an operator).
``single``: the session as partitions (``one_session=False``, what every other option here
measures) against one onnxruntime session whose device steps are the native operators of
``maxaccel.host.device_ops`` (the session's default since), with the golden model as a device
busy ``--busy`` ms a call, or the device ``--device`` names.
``glue``: the one session as it is against the same session whose kernels call the device
straight away (every step of one result whose inputs are all named, no Transpose folded in:
no routing and no per-step Python between onnxruntime and the device's call), on
``--device``: what the session's own Python around each device call costs, run cold after the
call (both sessions with every pool in ONNX layout, as the straight calls take them).
``nchwc``: the one session as it is, its pools between onnxruntime's NCHWc nodes on NCHWc
tensors, against the same session with every pool on tensors as ONNX lays them out
(onnxruntime's reorders around each), on ``--device`` or the golden model busy ``--busy`` ms.
``order``: how the session and onnxruntime alone are timed against each other: run by run
(as ``maxaccel bench`` did until 2026-11-28); run by run with onnxruntime alone's pool
stopped when its run returns (``session.force_spinning_stop``: with default ``SessionOptions``
its workers spin on after a run, pinned to the cores the session's are); and in blocks, each
run back to back once the other's threads went still (as ``maxaccel bench`` does now); the
golden model busy ``--busy`` ms a call, or ``--device``. ``awake``: ``maxaccel bench``'s
figures on ``--device`` with and without a process of the lowest priority (``SCHED_IDLE``,
Linux) busy on each core: a core left idle through a long device call wakes slowly.
``length``: whether what the compiled board's calls leave the session is the calls' work or
their length: the one session timed as ``maxaccel bench`` times it, on the golden model's
results after a busy wait of ``--busy`` ms touching no memory, after a busy wait as long that
writes 16 MB over and over, and on ``--device`` itself; ``maxaccel bench --paced`` is the
device whose calls last what a NiteFury's would.
Models are the names of ``maxaccel.bench.models.BUILT_IN``, ``conv`` or ONNX files.
"""

import argparse
import contextlib
import statistics
import sys
import time

import numpy as np


def _median_ms(values):
    return statistics.median(values) * 1e3


def _pair(session, timed, runtime, feeds, repeats):
    """Median host-side time of ``session`` and time of ``runtime``, interleaved, ms."""
    for _ in range(2):
        session.run(None, feeds)
        runtime.run(None, feeds)
    outside, alone = [], []
    for _ in range(repeats):
        total, device = timed.time_run(session, feeds)
        outside.append(total - device)
        alone.append(timed.time_run(runtime, feeds)[0])
    return _median_ms(outside), _median_ms(alone)


@contextlib.contextmanager
def _pools_in_onnx_layout():
    """Sessions made meanwhile keep every pool on tensors as ONNX lays them out (onnxruntime's
    reorders around each), not on its NCHWc tensors."""
    from maxaccel.host import device_ops
    blocked = device_ops.with_blocked_pools
    device_ops.with_blocked_pools = lambda model, steps, *_: (model, [None] * len(steps))
    try:
        yield
    finally:
        device_ops.with_blocked_pools = blocked


def _cases(args, device):
    """What ``single`` and ``nchwc`` measure, one threading, then each model, then each
    device: ``(threading, model name, model, feeds, onnxruntime's session of it, the timed
    device, its label)``, the device ``device`` (``--device``), or else the golden model busy
    each ``--busy`` ms a call."""
    import onnxruntime

    from maxaccel import bench
    for threading in ("1 thread", "default threads"):
        for name in args.models:
            label, model, feeds = bench.load_model(name)
            runtime = onnxruntime.InferenceSession(model.SerializeToString(),
                                                   _options(threading))
            if device is not None:
                yield (threading, name, model, feeds, runtime, bench._TimedDevice(device),
                       args.device)
                continue
            for milliseconds in args.busy:
                yield (threading, name, model, feeds, runtime,
                       bench._TimedDevice(_Instant(milliseconds / 1e3)),
                       f"device busy {milliseconds} ms")


def _interleaved(sessions, timed, runtime, feeds, args):
    """``sessions`` (``{option: session}``) in turn, ``args.rounds`` rounds of
    ``args.repeats`` runs each interleaved with ``runtime``'s: ``(option, median host-side ms,
    median onnxruntime ms over every round)`` for each."""
    rows = {option: [] for option in sessions}
    alone = []
    for _ in range(args.rounds):
        for option, session in sessions.items():
            outside, runtime_ms = _pair(session, timed, runtime, feeds, args.repeats)
            rows[option].append(outside)
            alone.append(runtime_ms)
    return [(option, statistics.median(outside), statistics.median(alone))
            for option, outside in rows.items()]


def _row(option, model, threading, outside, alone):
    print(f"| {option} | {model} | {threading} | {outside:.3f} ms | {alone:.3f} ms | "
          f"{outside / alone:.2f}x |", flush=True)


def _options(threads, configure=None):
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    if threads == "1 thread":
        options.intra_op_num_threads = options.inter_op_num_threads = 1
    if configure is not None:
        configure(options)
    return options


def spinning(args, device):
    import onnxruntime

    from maxaccel import bench
    from maxaccel.host.offload import (NO_SPINNING, SPINNING, STOP_SPINNING_AFTER_RUN,
                                       OffloadSession)
    timed = bench._TimedDevice(device)

    def pools(allow, stop):
        def configure(options):
            for key in SPINNING:
                options.add_session_config_entry(key, allow)
            options.add_session_config_entry(STOP_SPINNING_AFTER_RUN, stop)
        return configure
    one = args.one_session
    choices = (("pools spinning throughout", pools("1", "0")),
               ("pools spinning in a run, stopped at its end" + (" (now)" if one else ""),
                pools("1", "1")),
               ("pools sleeping" + ("" if one else " (now)"), pools(NO_SPINNING, "0")))
    for name in args.models:
        label, model, feeds = bench.load_model(name)
        for threads in ("default threads", "1 thread"):
            runtime = onnxruntime.InferenceSession(model.SerializeToString(), _options(threads))
            sessions = {option: OffloadSession(model, _options(threads, configure),
                                               device=timed, one_session=one)
                        for option, configure in choices}
            figures = {option: ([], []) for option in sessions}
            for _ in range(args.rounds):   # alternate the options, a few runs at a time
                for option, session in sessions.items():
                    outside, alone = _pair(session, timed, runtime, feeds, args.repeats)
                    figures[option][0].append(outside)
                    figures[option][1].append(alone)
            for option, (outside, alone) in figures.items():
                _row(f"{'one session' if one else 'partitions'}, {option}", name, threads,
                     statistics.median(outside), statistics.median(alone))


def global_pool(args, device):
    import onnxruntime

    from maxaccel import bench
    from maxaccel.host.offload import OffloadSession
    timed = bench._TimedDevice(device)

    def shared(options):
        options.use_per_session_threads = False
    for name in args.models:
        label, model, feeds = bench.load_model(name)
        runtime = onnxruntime.InferenceSession(model.SerializeToString(),
                                               _options("default threads", shared))
        session = OffloadSession(model, _options("default threads", shared), device=timed,
                                 one_session=False)
        outside, alone = _pair(session, timed, runtime, feeds, args.repeats * args.rounds)
        _row("one global thread pool", name, "default threads", outside, alone)


def pause(args, device):
    import onnxruntime

    from maxaccel import bench
    from maxaccel.host.offload import OffloadSession
    from maxaccel.sim import reference

    class Pausing:
        """The golden model, each call followed by ``seconds`` asleep."""

        def __init__(self, seconds):
            self.seconds_asleep = seconds

        def __getattr__(self, operation):
            function = getattr(reference, operation)

            def call(*arrays, **keywords):
                result = function(*arrays, **keywords)
                time.sleep(self.seconds_asleep)
                return result
            return call
    for name in args.models:
        label, model, feeds = bench.load_model(name)
        for threads in ("default threads", "1 thread"):
            runtime = onnxruntime.InferenceSession(model.SerializeToString(), _options(threads))
            for option, seconds in (("device returns at once", 0.0),
                                    ("device returns after 50 ms", 0.05)):
                timed = bench._TimedDevice(Pausing(seconds))
                session = OffloadSession(model, _options(threads), device=timed, one_session=False)
                outside, alone = _pair(session, timed, runtime, feeds,
                                       args.repeats * args.rounds)
                _row(option, name, threads, outside, alone)


def instant(args, device):
    import onnxruntime

    from maxaccel import bench
    from maxaccel.host.offload import OffloadSession
    from maxaccel.sim import reference

    class Instant:
        """The golden model's results, computed once per call site and shape, then returned
        at once: no device time and no cache churn between the partitions."""

        def __init__(self):
            self.results = {}

        def __getattr__(self, operation):
            function = getattr(reference, operation)

            def call(*arrays, **keywords):
                key = (operation, arrays[0].shape, len(arrays), repr(sorted(keywords.items())))
                if key not in self.results:
                    self.results[key] = function(*arrays, **keywords)
                return self.results[key]
            return call
    for name in args.models:
        label, model, feeds = bench.load_model(name)
        runtime = onnxruntime.InferenceSession(model.SerializeToString(), _options("1 thread"))
        timed = bench._TimedDevice(Instant())
        session = OffloadSession(model, _options("1 thread"), device=timed, one_session=False)
        for _ in range(3):
            session.run(None, feeds)
        outside, partitions, alone = [], [], []
        for _ in range(args.repeats * args.rounds * 20):
            total, device = timed.time_run(session, feeds)
            outside.append(total - device)
            partitions.append(sum(s.seconds for s in session.last_steps
                                  if s.where == "onnxruntime"))
            alone.append(timed.time_run(runtime, feeds)[0])
        _row(f"device at once (partitions {_median_ms(partitions):.3f} ms)", name, "1 thread",
             _median_ms(outside), _median_ms(alone))


def _spin(seconds):
    """Busy-wait ``seconds`` without touching memory (a device call that keeps the core)."""
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        pass


class _Instant:
    """The golden model's results, computed once per call site and shape and returned (as
    copies, as a device returns new arrays) after a busy wait of ``seconds``."""

    def __init__(self, seconds=0.0):
        from maxaccel.sim import reference
        self.reference, self.seconds, self.results = reference, seconds, {}

    def __getattr__(self, operation):
        function = getattr(self.reference, operation)

        def call(*arrays, **keywords):
            key = (operation, arrays[0].shape, len(arrays), repr(sorted(keywords.items())))
            if key not in self.results:
                self.results[key] = function(*arrays, **keywords)
            _spin(self.seconds)
            result = self.results[key]
            return tuple(r.copy() for r in result) if isinstance(result, tuple) \
                else result.copy()
        return call


def gap(args, device):
    import onnxruntime

    from maxaccel import bench
    from maxaccel.host.offload import OffloadSession
    for name in args.models:
        label, model, feeds = bench.load_model(name)
        runtime = onnxruntime.InferenceSession(model.SerializeToString(), _options("1 thread"))
        for milliseconds in (0, 0.05, 0.5, 2, 5, 20):
            timed = bench._TimedDevice(_Instant(milliseconds / 1e3))
            session = OffloadSession(model, _options("1 thread"), device=timed, one_session=False)
            outside, alone = _pair(session, timed, runtime, feeds, args.repeats * args.rounds * 2)
            _row(f"device busy {milliseconds} ms, touching no memory", name, "1 thread",
                 outside, alone)


def _partition_feeds(model, feeds):
    """``(session, {partition index: the arrays it reads})`` from one run on the golden model."""
    from maxaccel.host.offload import OffloadSession
    from maxaccel.sim import reference
    probe = OffloadSession(model, _options("1 thread"), device=reference, one_session=False)
    captured = {}
    original = probe._run_partition

    def capture(step, values, feeds_, run_options, *rest):
        captured[step.index] = {n: values[n] for n in step.inputs}
        return original(step, values, feeds_, run_options, *rest)
    probe._run_partition = capture
    probe.run(None, feeds)
    return probe, captured


def _partition_sessions_and_twins(model, feeds):
    """Each CPU partition of ``model`` with two onnxruntime sessions of it (one thread each),
    and its inputs in one run on ``feeds``.

    Returns
    -------
    steps : list of CpuPartition
    sessions, twins : list of onnxruntime.InferenceSession
        One per partition, in the order of ``steps``.
    inputs, other_inputs : dict
        Partition index -> its inputs in that run, and copies of them (other arrays).
    """
    import onnxruntime

    from maxaccel.host.offload import _for_onnxruntime
    from maxaccel.host.partition import CpuPartition
    probe, captured = _partition_feeds(model, feeds)
    steps = [s for s in probe._steps if isinstance(s, CpuPartition)]
    engines, twins = ([onnxruntime.InferenceSession(_for_onnxruntime(s.model),
                                                    _options("1 thread")) for s in steps]
                      for _ in range(2))
    others = {k: {n: v.copy() for n, v in feed.items()} for k, feed in captured.items()}
    return steps, engines, twins, captured, others


def _print_partition_rows(name, times):
    """Rows of ``{case: [each partition's times]}``: the sum of the medians, and each."""
    for case, each_times in times.items():
        each = [_median_ms(t) for t in each_times]
        print(f"| partitions {case} | {name} | 1 thread | {sum(each):.3f} ms "
              f"({' + '.join(f'{t:.3f}' for t in each)}) | | |", flush=True)


def handover(args, device):
    import onnxruntime

    from maxaccel import bench
    from maxaccel.host.offload import _for_onnxruntime
    from maxaccel.host.partition import CpuPartition
    for name in args.models:
        label, model, feeds = bench.load_model(name)
        probe, captured = _partition_feeds(model, feeds)
        steps = [s for s in probe._steps if isinstance(s, CpuPartition)]
        engines = [onnxruntime.InferenceSession(_for_onnxruntime(s.model), _options("1 thread"))
                   for s in steps]
        bindings = []
        for step, engine in zip(steps, engines):
            binding = engine.io_binding()
            for key, value in captured[step.index].items():
                binding.bind_cpu_input(key, value)
            for output, value in zip(step.outputs, engine.run(step.outputs,
                                                              captured[step.index])):
                kept = np.empty_like(value)
                binding.bind_output(output, "cpu", 0, kept.dtype, kept.shape, kept.ctypes.data)
                bindings.append(kept)
            bindings.append(binding)

        def plain(i):
            engines[i].run(steps[i].outputs, captured[steps[i].index])

        def ort_values(i):
            feed = {k: onnxruntime.OrtValue.ortvalue_from_numpy(v)
                    for k, v in captured[steps[i].index].items()}
            [v.numpy() for v in engines[i].run_with_ort_values(steps[i].outputs, feed)]

        bound = [b for b in bindings if not isinstance(b, np.ndarray)]

        def reused(i):
            engines[i].run_with_iobinding(bound[i])
        def binding_run(i):
            engines[i]._sess.run(steps[i].outputs, captured[steps[i].index], None)
        variants = {"run": plain, "the session binding's run": binding_run,
                    "run_with_ort_values": ort_values,
                    "IOBinding, outputs into arrays allocated once": reused}
        for milliseconds in (0, 5):
            times = {v: [[] for _ in steps] for v in variants}
            for _ in range(args.repeats * args.rounds * 3):
                for variant, call in variants.items():
                    for i in range(len(steps)):
                        _spin(milliseconds / 1e3)
                        started = time.perf_counter()
                        call(i)
                        times[variant][i].append(time.perf_counter() - started)
            for variant in variants:
                each = [_median_ms(t) for t in times[variant]]
                print(f"| {variant}, after {milliseconds} ms busy | {name} | 1 thread | "
                      f"{sum(each):.3f} ms ({' + '.join(f'{t:.3f}' for t in each)}) | | |",
                      flush=True)


def layout(args, device):
    import onnxruntime

    from maxaccel import bench
    from maxaccel.host.offload import _for_onnxruntime
    from maxaccel.host.partition import CpuPartition
    for name in args.models:
        label, model, feeds = bench.load_model(name)
        probe, captured = _partition_feeds(model, feeds)
        steps = [s for s in probe._steps if isinstance(s, CpuPartition)]
        levels = {}
        for level in ("ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"):
            options = _options("1 thread")
            options.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, level)
            levels[level] = ([onnxruntime.InferenceSession(_for_onnxruntime(s.model), options)
                              for s in steps],
                             onnxruntime.InferenceSession(model.SerializeToString(), options))
        times = {level: ([[] for _ in steps], []) for level in levels}
        for _ in range(args.repeats * args.rounds * 20):
            for level, (engines, whole) in levels.items():
                for i, (step, engine) in enumerate(zip(steps, engines)):
                    started = time.perf_counter()
                    engine.run(step.outputs, captured[step.index])
                    times[level][0][i].append(time.perf_counter() - started)
                started = time.perf_counter()
                whole.run(None, feeds)
                times[level][1].append(time.perf_counter() - started)
        for level, (each, whole) in times.items():
            each = [_median_ms(t) for t in each]
            _row(f"partitions warm, {level} ({' + '.join(f'{t:.3f}' for t in each)})", name,
                 "1 thread", sum(each), _median_ms(whole))


def cold(args, device):
    import onnxruntime
    from onnx import TensorProto, helper

    from maxaccel import bench
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "one_node",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    one_node = onnxruntime.InferenceSession(
        helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 18)])
        .SerializeToString(), _options("1 thread"))
    one_feed = {"x": np.ones((1, 16), np.float32)}
    for name in args.models:
        label, model, feeds = bench.load_model(name)
        steps, engines, twins, captured, others = _partition_sessions_and_twins(model,
                                                                                 feeds)
        cases = ("after 5 ms busy", "after 5 ms busy and a twin's run",
                 "after 5 ms busy and its own run on other arrays",
                 "after 5 ms busy and a one-node session's run",
                 "after 5 ms busy, a one-node session's run timed with it", "warm")
        times = {case: [[] for _ in steps] for case in cases}
        for _ in range(args.repeats * args.rounds * 4):
            for i, step in enumerate(steps):
                for case in cases:
                    if case != "warm":
                        _spin(0.005)
                    started = time.perf_counter()
                    if case.endswith("twin's run"):
                        twins[i].run(step.outputs, others[step.index])
                    elif case.endswith("other arrays"):
                        engines[i].run(step.outputs, others[step.index])
                    elif "one-node" in case:
                        one_node.run(None, one_feed)
                    if "timed with it" not in case:
                        started = time.perf_counter()
                    engines[i].run(step.outputs, captured[step.index])
                    times[case][i].append(time.perf_counter() - started)
        _print_partition_rows(name, times)


def neighbour(args, device):
    import os
    import threading

    from maxaccel import bench
    cores = sorted(os.sched_getaffinity(0))
    for name in args.models:
        _, model, feeds = bench.load_model(name)
        steps, engines, twins, captured, other_inputs = _partition_sessions_and_twins(model,
                                                                                       feeds)
        cases = {"after 5 ms asleep": None,
                 "after 5 ms asleep, a thread running its twin meanwhile": "any",
                 "same, the thread on the other core": "other",
                 "same, the thread on the same core at SCHED_IDLE": "idle",
                 "after 5 ms asleep and a twin's run": "before", "warm": "warm"}
        if len(cores) < 2:
            del cases["same, the thread on the other core"]
        times = {case: [[] for _ in steps] for case in cases}
        # The measuring thread on the first core throughout; the twin's thread where the case
        # says, stopped and joined before the partition is timed.
        os.sched_setaffinity(0, cores[:1])
        for _ in range(args.repeats * args.rounds * 4):
            for i, step in enumerate(steps):
                for case, where in cases.items():
                    stop = threading.Event()
                    thread = None
                    if where in ("any", "other", "idle"):
                        def run_twin(where=where, i=i, step=step, stop=stop):
                            if where == "any":
                                os.sched_setaffinity(0, cores)
                            elif where == "other":
                                os.sched_setaffinity(0, cores[1:2])
                            else:
                                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
                            while not stop.is_set():
                                twins[i].run(step.outputs, other_inputs[step.index])
                        thread = threading.Thread(target=run_twin)
                        thread.start()
                    if where != "warm":
                        time.sleep(0.005)
                    if where == "before":
                        twins[i].run(step.outputs, other_inputs[step.index])
                    stop.set()
                    if thread is not None:
                        thread.join()
                    started = time.perf_counter()
                    engines[i].run(step.outputs, captured[step.index])
                    times[case][i].append(time.perf_counter() - started)
        os.sched_setaffinity(0, cores)
        _print_partition_rows(name, times)

def wrapper(args, device):
    import onnxruntime

    from maxaccel import bench
    from maxaccel.host.offload import OffloadSession
    for name in args.models:
        label, model, feeds = bench.load_model(name)
        runtime = onnxruntime.InferenceSession(model.SerializeToString(), _options("1 thread"))
        for milliseconds in (0, 2, 5):
            timed = bench._TimedDevice(_Instant(milliseconds / 1e3))
            sessions = {option: OffloadSession(model, _options("1 thread"), device=timed,
                                               one_session=False)
                        for option in ("InferenceSession.run", "the binding's run (now)")}
            wrapped = sessions["InferenceSession.run"]
            wrapped._runs = {index: engine.run for index, engine in wrapped._engines.items()}
            figures = {option: ([], []) for option in sessions}
            for _ in range(args.rounds * 2):
                for option, session in sessions.items():
                    outside, alone = _pair(session, timed, runtime, feeds, args.repeats * 2)
                    figures[option][0].append(outside)
                    figures[option][1].append(alone)
            for option, (outside, alone) in figures.items():
                _row(f"{option}, device busy {milliseconds} ms", name, "1 thread",
                     statistics.median(outside), statistics.median(alone))


def iobinding(args, device):
    import onnxruntime

    from maxaccel import bench
    from maxaccel.host.offload import OffloadSession, _for_onnxruntime
    from maxaccel.host.partition import CpuPartition
    from maxaccel.sim import reference
    for name in args.models:
        label, model, feeds = bench.load_model(name)
        # The arrays each partition reads, captured from one run.
        probe = OffloadSession(model, _options("1 thread"), device=reference, one_session=False)
        captured = {}
        original = probe._run_partition

        def capture(step, values, feeds_, run_options):
            captured[step.index] = {n: values[n] for n in step.inputs}
            return original(step, values, feeds_, run_options)
        probe._run_partition = capture
        probe.run(None, feeds)
        plain, bound = [], []
        for step in probe._steps:
            if not isinstance(step, CpuPartition):
                continue
            engine = onnxruntime.InferenceSession(_for_onnxruntime(step.model),
                                                  _options("1 thread"))
            feed = captured[step.index]
            binding = engine.io_binding()
            for key, value in feed.items():
                binding.bind_cpu_input(key, value)
            for output in step.outputs:
                binding.bind_output(output, "cpu")
            for timings, call in ((plain, lambda: engine.run(step.outputs, feed)),
                                  (bound, lambda: (engine.run_with_iobinding(binding),
                                                   binding.copy_outputs_to_cpu()))):
                runs = []
                for _ in range(args.repeats * args.rounds * 10):
                    started = time.perf_counter()
                    call()
                    runs.append(time.perf_counter() - started)
                timings.append(_median_ms(runs))
        runtime = onnxruntime.InferenceSession(model.SerializeToString(), _options("1 thread"))
        runs = []
        for _ in range(args.repeats * args.rounds * 10):
            started = time.perf_counter()
            runtime.run(None, feeds)
            runs.append(time.perf_counter() - started)
        for option, partitions in (("partitions by run, warm", plain),
                                   ("partitions by run_with_iobinding, warm", bound)):
            _row(f"{option} ({len(partitions)})", name, "1 thread", sum(partitions),
                 _median_ms(runs))


def pyop(args, device):
    import onnxruntime
    from onnx import TensorProto, helper
    try:
        from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op
    except ImportError:
        sys.exit("pyop needs onnxruntime-extensions (pip install onnxruntime-extensions)")

    @onnx_op(op_type="MaxaccelProbeIdentity", inputs=[PyCustomOpDef.dt_float],
             outputs=[PyCustomOpDef.dt_float])
    def identity(x):
        return x
    options = _options("1 thread")
    options.register_custom_ops_library(get_library_path())
    for size in (1000, 100_000, 1_000_000):
        for op_type, domain in (("MaxaccelProbeIdentity", "ai.onnx.contrib"), ("Identity", "")):
            graph = helper.make_graph(
                [helper.make_node(op_type, ["x"], ["y"], domain=domain)], "probe",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [size])])
            model = helper.make_model(graph, ir_version=10, opset_imports=[
                helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.contrib", 1)])
            session = onnxruntime.InferenceSession(model.SerializeToString(), options)
            x = np.ones(size, np.float32)
            runs = []
            for _ in range(args.repeats * args.rounds):
                started = time.perf_counter()
                session.run(None, {"x": x})
                runs.append(time.perf_counter() - started)
            print(f"| {'Python operator' if domain else 'onnxruntime Identity'} | {size} "
                  f"float32 | {_median_ms(runs):.3f} ms |", flush=True)


def glue(args, device):
    """The one session as it is against the same session whose kernels call the device
    straight away (no routing, no per-step Python between onnxruntime and the device call
    but the device call itself, as ``OffloadSession._prepare`` makes it): what the session's
    own Python between the two costs."""
    import onnxruntime

    from maxaccel import bench
    from maxaccel.host import device_ops
    from maxaccel.host.offload import OffloadSession
    timed = bench._TimedDevice(device)
    straight, perf = {}, time.perf_counter

    def resolve(key, _as_it_is=device_ops._resolve):
        entry = straight.get(key)
        if entry is None:
            return _as_it_is(key)
        call, index, calls = entry

        def kernel_call(inputs, room):
            arrays = device_ops.arrays_of(inputs)     # made every call, as they were
            started = perf()
            result = call(*arrays)
            calls[index] = (started, perf() - started, "device")
            return (result,)
        return kernel_call
    for name in args.models:
        label, model, feeds = bench.load_model(name)
        runtime = onnxruntime.InferenceSession(model.SerializeToString(), _options("1 thread"))
        with _pools_in_onnx_layout():   # the straight calls take tensors as ONNX lays them out
            sessions = {option: OffloadSession(model, _options("1 thread"), device=timed)
                        for option in ("as it is", "device called straight from the kernel")}
        short = sessions["device called straight from the kernel"]
        for key, (session, index) in list(device_ops._steps.items()):
            if session() is not short:
                continue
            step = short._one_steps[index][0]
            # One result, every input named, no Transpose folded in: the node's own call.
            if step.transpose is None and len(step.outputs) == 1 and all(step.inputs):
                call = short._prepare(timed, step.node.op_type, step.attributes)
                straight[key] = (call, index, short._calls)
        device_ops._loaded.maxaccel_set_python(device_ops._register, resolve)
        try:
            expected = sessions["as it is"].run(None, feeds)
            for got, want in zip(short.run(None, feeds), expected):
                np.testing.assert_array_equal(got, want)
            rows = _interleaved(sessions, timed, runtime, feeds, args)
        finally:
            device_ops._loaded.maxaccel_set_python(device_ops._register, device_ops._resolve)
        for option, outside, alone in rows:
            _row(f"one session, {option}", name, "1 thread", outside, alone)


def nchwc(args, device):
    """The one session as it is (pools between onnxruntime's NCHWc nodes take its NCHWc
    tensors) against the same session with every pool on tensors as ONNX lays them out
    (onnxruntime's ReorderOutput and ReorderInput around each), interleaved, both threadings;
    on ``--device``, or else the golden model busy ``--busy`` ms a call."""
    from maxaccel.host.offload import OffloadSession
    for threading, name, model, feeds, runtime, timed, what in _cases(args, device):
        sessions = {"pools on NCHWc tensors": OffloadSession(model, _options(threading),
                                                             device=timed)}
        with _pools_in_onnx_layout():
            sessions["pools in ONNX layout"] = OffloadSession(model, _options(threading),
                                                              device=timed)
        expected = sessions["pools in ONNX layout"].run(None, feeds)
        for got, want in zip(sessions["pools on NCHWc tensors"].run(None, feeds), expected):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        for option, outside, alone in _interleaved(sessions, timed, runtime, feeds, args):
            _row(f"one session, {option}, {what}", name, threading, outside, alone)


def single(args, device):
    from maxaccel.host.offload import OffloadSession
    for threading, name, model, feeds, runtime, timed, what in _cases(args, device):
        sessions = {
            "partitions": OffloadSession(model, _options(threading), device=timed,
                                         one_session=False),
            "one session, device operators": OffloadSession(model, _options(threading),
                                                            device=timed)}
        # The same bits for the small models; onnxruntime fuses and lays out a large graph in
        # one session otherwise than in partitions (float rounding).
        expected = sessions["partitions"].run(None, feeds)
        for option, session in sessions.items():
            for got, want in zip(session.run(None, feeds), expected):
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        for option, outside, alone in _interleaved(sessions, timed, runtime, feeds, args):
            _row(f"{option}, {what}", name, threading, outside, alone)


def order(args, device):
    import onnxruntime

    from maxaccel import bench
    from maxaccel.host.offload import STOP_SPINNING_AFTER_RUN, OffloadSession

    def blocks(session, timed, runtime, feeds, repeats):
        *_, outside, alone = bench._time_pair(timed, session, runtime, feeds, repeats, 1)
        return outside * 1e3, alone * 1e3
    for threading, name, model, feeds, runtime, timed, what in _cases(args, device):
        session = OffloadSession(model, _options(threading), device=timed)
        stopped = onnxruntime.InferenceSession(
            model.SerializeToString(),
            _options(threading, lambda o: o.add_session_config_entry(STOP_SPINNING_AFTER_RUN,
                                                                     "1")))
        orders = {"run by run (maxaccel bench until 2026-11-28)": (_pair, runtime),
                  "run by run, onnxruntime alone's pool stopped after its run":
                      (_pair, stopped),
                  "blocks, each back to back once the other's threads are still "
                  "(maxaccel bench)": (blocks, runtime)}
        figures = {option: ([], []) for option in orders}
        for _ in range(args.rounds):
            for option, (timing, baseline) in orders.items():
                outside, alone = timing(session, timed, baseline, feeds, args.repeats)
                figures[option][0].append(outside)
                figures[option][1].append(alone)
        for option, (outside, alone) in figures.items():
            _row(f"{option}, {what}", name, threading, statistics.median(outside),
                 statistics.median(alone))


class _Writing(_Instant):
    """:class:`_Instant` whose wait writes 16 MB over and over (a call that fills the caches)."""

    scratch = np.zeros(16 << 20, np.uint8)

    def __getattr__(self, operation):
        answer = super().__getattr__(operation)

        def call(*arrays, **keywords):
            started = time.perf_counter()
            while time.perf_counter() - started < self.seconds:
                self.scratch += 1
            return answer(*arrays, **keywords)
        return call


def length(args, device):
    import onnxruntime

    from maxaccel import bench
    from maxaccel.host.offload import OffloadSession
    for threading in ("1 thread", "default threads"):
        for name in args.models:
            label, model, feeds = bench.load_model(name)
            runtime = onnxruntime.InferenceSession(model.SerializeToString(),
                                                   _options(threading))
            devices = [(f"device busy {ms} ms, touching no memory", _Instant(ms / 1e3))
                       for ms in args.busy]
            devices += [(f"device busy {ms} ms, writing 16 MB over and over",
                         _Writing(ms / 1e3)) for ms in args.busy]
            devices.append((args.device, device))
            for what, inner in devices:
                timed = bench._TimedDevice(inner)
                session = OffloadSession(model, _options(threading), device=timed)
                session.run(None, feeds)
                _, called, outside, alone = bench._time_pair(timed, session, runtime, feeds,
                                                             args.repeats, 1)
                _row(f"{what} ({called * 1e3:.3g} ms a run)", name, threading,
                     outside * 1e3, alone * 1e3)


def awake(args, device):
    import os
    import subprocess

    from maxaccel import bench
    keeper = ("import os\nos.sched_setaffinity(0, {%d})\n"
              "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\nwhile True: pass")
    for name in args.models:
        label, model, feeds = bench.load_model(name)
        figures = {"cores left idle": [], "a SCHED_IDLE process busy on each core": []}
        for _ in range(args.rounds):
            for option, rows in figures.items():
                keepers = [] if option == "cores left idle" else [
                    subprocess.Popen([sys.executable, "-c", keeper % core])
                    for core in sorted(os.sched_getaffinity(0))]
                try:
                    rows.append(bench.measure_model(device, name, model, feeds,
                                                    repeats=args.repeats))
                finally:
                    for process in keepers:
                        process.kill()
                        process.wait()
        for option, rows in figures.items():
            for threading, outside, alone in (
                    ("1 thread", "outside_s", "onnxruntime_s"),
                    ("default threads", "default_outside_s", "default_onnxruntime_s")):
                _row(f"maxaccel bench's timing, {option}, {args.device}", name, threading,
                     statistics.median(getattr(m, outside) for m in rows) * 1e3,
                     statistics.median(getattr(m, alone) for m in rows) * 1e3)


OPTIONS = {"spinning": spinning, "global-pool": global_pool, "pause": pause,
           "iobinding": iobinding, "pyop": pyop, "instant": instant, "gap": gap,
           "handover": handover, "layout": layout, "cold": cold, "neighbour": neighbour,
           "wrapper": wrapper, "single": single, "glue": glue, "nchwc": nchwc,
           "order": order, "awake": awake, "length": length}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("option", choices=sorted(OPTIONS))
    parser.add_argument("models", nargs="*", default=["audio", "segnet", "kws"])
    parser.add_argument("--device", default="verilator", metavar="URL")
    parser.add_argument("--repeats", type=int, default=5, help="runs per round (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the options taken "
                        "in turn (default 3)")
    parser.add_argument("--one-session", action="store_true",
                        help="spinning: the model as one session (the session's default) "
                        "instead of partitions")
    parser.add_argument("--busy", type=float, nargs="+", default=[0, 2, 5],
                        help="single, nchwc, order, length: the golden model's device busy this "
                        "many ms a call (default 0 2 5), unless --device is given (length: "
                        "both)")
    args = parser.parse_args(argv)
    if args.option == "global-pool":
        from onnxruntime.capi import _pybind_state
        _pybind_state.set_global_thread_pool_sizes(0, 0)   # before any session: default sizes
    if args.option == "pyop":
        print("| operator | tensor | time per run |\n|---|---|---|")
    else:
        print("| option | model | threading | host-side time per run | onnxruntime, whole "
              "model | ratio |\n|---|---|---|---|---|---|")
    if args.option in ("spinning", "global-pool", "glue", "awake", "length") or (
            args.option in ("single", "nchwc", "order") and "--device" in (argv or sys.argv)):
        from maxaccel.host import open_device
        with open_device(args.device) as device:
            OPTIONS[args.option](args, device)
    else:
        OPTIONS[args.option](args, None)


if __name__ == "__main__":
    main()
