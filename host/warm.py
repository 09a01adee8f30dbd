"""Keep the CPU partition that follows a device call warm while the call waits.

On the machines this project is measured on, a CPU partition that runs after a device call of
a few milliseconds takes about twice its warm time: while the calling thread sleeps in the
call, its core's caches lose onnxruntime's code and the partition's kernels (docs/offload.md,
"Kept warm"). A board's call is such a sleep: the ``xdma://`` and ``serial://`` transports
wait in blocking reads. :class:`WarmKeeper` uses that idle core: during each device call, a
thread of the lowest priority (``SCHED_IDLE``), pinned to the core the call was made from,
runs a *twin* of the partition that follows the call (an onnxruntime session of its own of the
same partition model, one thread) on that partition's inputs of the previous run, over and
over until the call returns. The partition then starts with its code in the caches.

What it costs: the twin sessions' memory (each followed partition's weights once more;
partitions above :data:`WARM_LIMIT_BYTES` of weights are not twinned), CPU time the core would
have spent idle, and a lock and a wake-up per device call on the calling thread (a few
microseconds). A ``SCHED_IDLE`` thread runs only when nothing else wants its core, so it takes
nothing from the caller, the device's threads or other programs; where the call keeps the
calling thread busy (the in-process ``verilator`` and ``sim`` boards), it does not run at all.
Without ``SCHED_IDLE`` (any system but Linux) there is no keeper.
"""

import ctypes
import ctypes.util
import os
import threading
import time

import numpy as np

__all__ = ["WarmKeeper", "WARM_LIMIT_BYTES", "available"]

#: Partitions with more initializer bytes than this get no twin: they run for milliseconds,
#: where a cold start (0.1-0.2 ms measured) is a few percent, and a twin would hold their
#: weights twice.
WARM_LIMIT_BYTES = 16 << 20

#: Device calls shorter than this (the step's previous call) keep nothing warm: after a short
#: call little has gone cold, and waking the keeper costs about as much.
WARM_AFTER_S = 1e-3

_SCHED_IDLE = getattr(os, "SCHED_IDLE", None)


def _sched_getcpu():
    """libc's ``sched_getcpu`` (the calling thread's core), or None where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        function = libc.sched_getcpu
    except (OSError, AttributeError):
        return None
    function.restype, function.argtypes = ctypes.c_int, []
    return function


_getcpu = _sched_getcpu() if _SCHED_IDLE is not None else None


def available():
    """Whether this system can run a keeper (Linux: ``SCHED_IDLE`` and ``sched_getcpu``)."""
    return _SCHED_IDLE is not None and _getcpu is not None


def _initializer_bytes(model):
    return sum(t.ByteSize() for t in model.graph.initializer)


class WarmKeeper:
    """Runs twins of CPU partitions on an idle-priority thread while device calls wait.

    Parameters
    ----------
    followers : dict
        ``id(device step)`` -> the :class:`~maxaccel.host.partition.CpuPartition` that runs
        after it (the next partition of the plan).
    make_twin : callable
        ``make_twin(partition)`` -> a callable ``(output_names, feed)`` that runs a twin of the
        partition, or raises if onnxruntime cannot load it. Called on the keeper's thread, the
        first time the partition is to be kept warm.

    Notes
    -----
    :meth:`remember` records the arrays a followed partition reads (by name; the previous run's
    are what its twin runs on); :meth:`start` and :meth:`stop` bracket a device call. A
    partition whose inputs were not all remembered (the first run; in one onnxruntime session,
    an input another partition computes) is not kept warm. A twin that fails (to load or to run) is not run again.
    """

    def __init__(self, followers, make_twin):
        self._followers = {key: partition for key, partition in followers.items()
                           if _initializer_bytes(partition.model) <= WARM_LIMIT_BYTES}
        self._wanted = {name for partition in self._followers.values()
                        for name in partition.inputs}
        self._make_twin = make_twin
        self._seen = {}
        self._twins = {}
        self._job = None
        self._began = (None, 0.0)
        self._durations = {}
        self._twin_seconds = {}
        self._closing = False
        self._condition = threading.Condition()
        self._thread = None

    def remember(self, values, *, copy=False, skip=()):
        """Keep the arrays of ``values`` (a mapping) that a followed partition reads, but for
        the names in ``skip``; copies of them with ``copy`` (the caller's feeds, which it may
        change after the run)."""
        seen = self._seen
        for name in self._wanted.intersection(values):
            if name not in skip:
                seen[name] = np.array(values[name]) if copy else values[name]

    def start(self, step):
        """A device call of ``step`` begins on this thread: keep the partition after it warm."""
        self._began = (None, 0.0)
        partition = self._followers.get(id(step))
        if partition is None or self._twins.get(partition.index) is False:
            return
        try:
            feed = {name: self._seen[name] for name in partition.inputs}
        except KeyError:
            return
        now = time.perf_counter()
        self._began = (id(step), now)
        expected = self._durations.get(id(step), 0.0)
        if expected < WARM_AFTER_S:
            return
        deadline = now + expected
        with self._condition:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="maxaccel-warm",
                                                daemon=True)
                self._thread.start()
            self._job = (partition, feed, _getcpu(), deadline)
            self._condition.notify()

    def stop(self):
        """The device call returned: stop after the twin's current run (which yields the core
        at once: it runs at idle priority)."""
        self._job = None
        key, began = self._began
        if key is not None:
            self._durations[key] = time.perf_counter() - began

    def close(self):
        """Stop the keeper's thread (the twins go with it)."""
        with self._condition:
            self._closing, self._job = True, None
            self._condition.notify()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _work(self):
        os.sched_setscheduler(0, _SCHED_IDLE, os.sched_param(0))
        while True:
            with self._condition:
                while self._job is None and not self._closing:
                    self._condition.wait()
                if self._closing:
                    self._twins.clear()
                    return
                job = self._job
            partition, feed, cpu, deadline = job
            try:
                os.sched_setaffinity(0, {cpu})
            except OSError:     # that core left the process's set meanwhile
                pass
            twin = self._twins.get(partition.index)
            if twin is None:
                try:
                    twin = self._make_twin(partition)
                except Exception:   # onnxruntime's own types: the partition is not kept warm
                    twin = False
                self._twins[partition.index] = twin
            while twin is not False and self._job is job:
                began = time.perf_counter()
                if began + 2 * self._twin_seconds.get(partition.index, 0.0) > deadline:
                    break
                try:
                    twin(partition.outputs, feed)
                except Exception:
                    twin = self._twins[partition.index] = False
                self._twin_seconds[partition.index] = time.perf_counter() - began
            with self._condition:
                if self._job is job:    # a failed twin: wait for the next call
                    self._job = None
