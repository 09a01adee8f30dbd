"""Soak: every operation, random shapes and dtypes, through a link that damages bytes both ways.

    maxaccel soak --path serve --faults 1000000     # maxaccel serve over a pty
    maxaccel soak --path xdma --faults 1000000      # the XDMA driver's double
    maxaccel soak --path direct --faults 10000      # the board in this process

Each operation (Max, Min, ReduceMax, ReduceMin, ArgMax, ArgMin, GlobalMaxPool, MaxPool with
Indices) runs on the device through :class:`maxaccel.sim.faults.Faulty`, which drops, flips,
inserts or duplicates each byte, in each direction, with probability ``--fault-rate``, and its
result is compared bit for bit with the golden model's, under a watchdog. The paths:

``serve``
    ``maxaccel serve`` serves the board (``--device``) on a pseudo-terminal; the client is the
    host's serial transport. Every ``--kill-every`` operations the client disconnects, another
    client process starts a large request and is killed mid-frame, and the client reconnects
    (the time that takes is reported).
``xdma``
    The host's XDMA transport against the driver's double around the board, the bytes damaged
    on the host's side of the driver; besides, every ``--switch-every`` operations one of the
    double's fault switches (a stalled card, a mute card, a reply cut short) is set for a
    random fraction of a second.
``direct``
    The board in this process behind the injector: the fastest way to many faults.

Reported: faults injected (by direction and kind, and the switches set), operations and how
many succeeded, requests and retries, wrong results (must be 0), hangs (must be 0), operations
given up (``LinkError`` after the link's retry budget) with their last failures, and how long
operations took with and without retries. Exit status 0 when nothing was wrong and nothing hung.
"""

import argparse
import collections
import contextlib
import json
import os
import pathlib
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from maxaccel.host.device import Device
from maxaccel.host.link import LinkError
from maxaccel.host.transport import TransportError, is_virtual_board, open_transport

__all__ = ["add_arguments", "random_operation", "soak"]

#: The element types operations draw from (every width, signed and unsigned, floats).
DTYPES = (np.float16, np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16,
          np.int32, np.int64)

#: A client process that starts a long request and never finishes it, until killed.
KILLED_CLIENT = """
import sys, serial
from maxaccel.contract.dtypes import DType
from maxaccel.contract.wire import PARAMETERS, Command, encode_frame
port = serial.serial_for_url(sys.argv[1], timeout=0, write_timeout=5)
runs = 1 << 16
frame = encode_frame(Command.REDUCE, 0, PARAMETERS[Command.REDUCE].pack(
    dtype=DType.FLOAT, runs=runs, run_length=1) + bytes(4 * runs))
sent = 0
while True:
    port.write(frame[sent:sent + 256])
    sent += 256
    if sent == 256:
        print("started", flush=True)
"""


class Hang(Exception):
    """An operation outlived the watchdog."""


def random_operation(rng, size):
    """A random operation: ``(name, call)``, ``call(device_or_reference)`` giving its result.

    Parameters
    ----------
    rng : numpy.random.Generator
    size : int
        The most elements along a random axis (tensors stay small, so that at the fault rates
        of a soak most attempts meet no fault).
    """
    from maxaccel.sim.values import random_values
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    n = int(rng.integers(1, size + 1))
    m = int(rng.integers(1, 4))
    kind = int(rng.integers(8))
    if kind in (0, 1):
        a = random_values(rng, dtype, (m, n))
        b = random_values(rng, dtype, (1, n) if rng.integers(2) else (m, n))
        name = ("max", "min")[kind]
        return name, lambda d: getattr(d, name)(a, b)
    if kind in (2, 3):
        x = random_values(rng, dtype, (m, n))
        axes = [[0], [1], [0, 1]][int(rng.integers(3))]
        keepdims = bool(rng.integers(2))
        name = ("reduce_max", "reduce_min")[kind - 2]
        return name, lambda d: getattr(d, name)(x, axes=axes, keepdims=keepdims)
    if kind in (4, 5):
        x = random_values(rng, dtype, (m, n))
        axis, last = int(rng.integers(2)), bool(rng.integers(2))
        name = ("arg_max", "arg_min")[kind - 4]
        return name, lambda d: getattr(d, name)(x, axis=axis, select_last_index=last)
    floats = (np.float16, np.float32, np.float64)[int(rng.integers(3))]
    if kind == 6:
        x = random_values(rng, floats, (1, m, max(1, n // 4), 2))
        return "global_max_pool", lambda d: d.global_max_pool(x)
    x = random_values(rng, floats, (1, m, max(2, n // 4), 3))
    return "max_pool", lambda d: d.max_pool(x, kernel_shape=[2, 2], return_indices=True)


def _same_bits(result, expected):
    if isinstance(expected, tuple):
        return all(_same_bits(r, e) for r, e in zip(result, expected))
    return (result.dtype == expected.dtype and result.shape == expected.shape
            and result.tobytes() == expected.tobytes())


@contextlib.contextmanager
def _watchdog(seconds):
    def fire(*_):
        raise Hang
    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _Figures:
    """What a soak counts."""

    def __init__(self):
        self.counts = collections.Counter({"wrong results": 0, "hangs": 0,
                                           "operations given up": 0})
        self.given_up = collections.Counter()
        self.clean_s, self.retried_s, self.reconnect_s = [], [], []
        self.kinds = collections.Counter()
        self.switches = collections.Counter()
        self.faults_closed = 0      # faults of injectors already closed

    def faults(self, faulty):
        return self.faults_closed + (faulty.injected if faulty is not None else 0)

    def retire(self, faulty, device):
        """Count what a client's injector and device saw before they are replaced."""
        if faulty is not None:
            self.faults_closed += faulty.injected
            self.kinds.update(faulty.kinds)
        if device is not None:
            self.counts["requests"] += device.link.requests
            self.counts["retries"] += device.link.retries

    def state(self):
        """Everything counted, as JSON-able data (what a job of ``--jobs`` hands its parent)."""
        return {"counts": dict(self.counts), "given_up": dict(self.given_up),
                "clean_s": self.clean_s, "retried_s": self.retried_s,
                "reconnect_s": self.reconnect_s, "switches": dict(self.switches),
                "kinds": [[d, k, n] for (d, k), n in self.kinds.items()],
                "faults_closed": self.faults_closed}

    def add(self, state):
        """Add the counts of another soak's :meth:`state`."""
        self.counts.update(state["counts"])
        self.given_up.update(state["given_up"])
        self.switches.update(state["switches"])
        self.kinds.update({(d, k): n for d, k, n in state["kinds"]})
        for name in ("clean_s", "retried_s", "reconnect_s"):
            getattr(self, name).extend(state[name])
        self.faults_closed += state["faults_closed"]

    def report(self, args, seconds):
        def spread(values):
            if not values:
                return None
            return {"median": round(float(np.median(values)), 4),
                    "p99": round(float(np.percentile(values, 99)), 4),
                    "max": round(max(values), 4)}
        operations = self.counts["operations"]
        done = operations - self.counts["operations given up"] - self.counts["hangs"]
        return {
            "command": " ".join(["maxaccel", "soak", *_options(args)]),
            "path": args.path, "device": args.device, "fault rate (each byte, each way)":
                args.fault_rate, "reply timeout s": args.timeout, "attempts": args.attempts,
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "jobs": args.jobs,
            "seconds": round(seconds),
            "faults injected": self.faults_closed,
            **{k: v for k, v in sorted(self.counts.items())},
            "operations that succeeded": f"{done} of {operations} "
                                         f"({100 * done / max(1, operations):.3f}%)",
            "faults by direction and kind": {f"{d} {k}": n for (d, k), n in
                                             sorted(self.kinds.items())},
            "fault switches set": dict(self.switches),
            "last failure of operations given up": dict(self.given_up.most_common(6)),
            "operation s, no retry": spread(self.clean_s),
            "operation s, with retries": spread(self.retried_s),
            "reconnect after a killed client s": spread(self.reconnect_s),
        }


def _options(args, **changed):
    """The options that repeat a soak (every one :func:`add_arguments` made, but where the
    figures go), with ``changed`` values in place of some: a list of arguments."""
    return [text for name in args.soak_options
            for text in (f"--{name.replace('_', '-')}",
                         str(changed.get(name, getattr(args, name))))]


def _run_one(device, rng, args, figures):
    """One random operation on ``device``, counted; False when the device must be replaced."""
    name, call = random_operation(rng, args.size)
    retries, began = device.link.retries, time.monotonic()
    figures.counts["operations"] += 1
    try:
        with _watchdog(args.watchdog):
            result = call(device)
    except Hang:
        figures.counts["hangs"] += 1
        return False
    except LinkError as error:
        figures.counts["operations given up"] += 1
        figures.given_up[error.last_failure[:80]] += 1
        return True
    except TransportError as error:     # reported, as a board's pipe failing is
        figures.counts["operations given up"] += 1
        figures.given_up[str(error)[:80]] += 1
        return True
    took = time.monotonic() - began
    (figures.retried_s if device.link.retries > retries else figures.clean_s).append(took)
    from maxaccel.sim import reference
    expected = call(reference)
    if not _same_bits(result, expected):
        figures.counts["wrong results"] += 1
        _say(f"WRONG: {name}: {result!r} != {expected!r}")
    return True


def _say(line):
    """``line`` on stderr in one write: a soak's jobs share their parent's stderr, and a line
    written in pieces (``print`` writes the text and its newline apart) interleaves with
    theirs."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _progress(figures, faulty, started):
    if figures.counts["operations"] % 500 == 0:
        _say(f"{figures.counts['operations']} operations, {figures.faults(faulty)} faults, "
             f"{time.monotonic() - started:.0f} s")


def _device(faulty, url, args):
    return Device(faulty, url=url, timeout_s=args.timeout, attempts=args.attempts,
                  progress=None)


def _kill_a_client_mid_frame(port, rng):
    """A second client process starts a long request and is killed mid-frame."""
    process = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, port],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = process.stdout.readline()
        if line != b"started\n":
            raise RuntimeError(f"the killed client did not start: {process.stderr.read()!r}")
        time.sleep(float(rng.uniform(0.02, 0.3)))
    finally:
        process.kill()
        process.communicate()


#: Seconds ``maxaccel serve`` has to stop after SIGTERM at the end of a serve soak; one that
#: has not is killed and counted, and fails the soak.
SERVER_STOP_S = 60


def _soak_serve(args, figures, rng, started):
    from maxaccel.sim.faults import Faulty
    workdir = tempfile.mkdtemp(prefix="maxaccel-soak-")
    link = os.path.join(workdir, "tty")
    server = subprocess.Popen([sys.executable, "-m", "maxaccel", "-q", "serve", "--device",
                               args.device, "--link", link], stdout=subprocess.PIPE)
    device = faulty = None
    try:
        for _ in range(2):
            server.stdout.readline()        # serving ..., connect with ...
        while figures.faults(faulty) < args.faults:
            if device is None:
                began = time.monotonic()
                faulty = Faulty(open_transport(f"serial://{link}"), fault_rate=args.fault_rate,
                                seed=int(rng.integers(2**32)))
                try:
                    with _watchdog(args.watchdog):
                        device = _device(faulty, f"serial://{link}", args)
                except (LinkError, Hang):
                    figures.counts["failed opens"] += 1
                    figures.retire(faulty, None)
                    faulty.close()
                    faulty = None
                    continue
                figures.reconnect_s.append(time.monotonic() - began)
            alive = _run_one(device, rng, args, figures)
            _progress(figures, faulty, started)
            if not alive or figures.counts["operations"] % args.kill_every == 0:
                figures.retire(faulty, device)
                device.close()
                device = faulty = None
                _kill_a_client_mid_frame(link, rng)
                figures.counts["clients killed mid-frame"] += 1
    finally:
        figures.retire(faulty, device)
        if device is not None:
            device.close()
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=SERVER_STOP_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
            figures.counts["served boards that did not stop on SIGTERM"] += 1
            _say(f"soak: the served board (pid {server.pid}) had not stopped "
                 f"{SERVER_STOP_S} s after SIGTERM; killed")


def _switch(model, rng, figures):
    """Set one of the XDMA double's fault switches, and clear it after a while."""
    kind = ("stall", "mute", "cut reply")[int(rng.integers(3))]
    figures.switches[kind] += 1
    if kind == "cut reply":
        model.faults.cut_next_reply = int(rng.integers(1, 8))
        return
    setattr(model.faults, kind, True)
    threading.Timer(float(rng.uniform(0.01, 0.3)), setattr,
                    (model.faults, kind, False)).start()


def _soak_xdma(args, figures, rng, started):
    from maxaccel.host.transport import XdmaTransport
    from maxaccel.sim.faults import Faulty
    from maxaccel.sim.xdma_driver import XdmaDriverModel
    board = open_transport(args.device).board
    model = XdmaDriverModel(board, h2c_timeout_s=args.driver_timeout,
                            c2h_timeout_s=args.driver_timeout)
    transport = XdmaTransport(model.prefix, files=model, write_timeout_s=args.driver_timeout,
                              reply_timeout_s=args.timeout, driver_timeout_s=args.driver_timeout)
    # The bytes are damaged on the host's side of the driver, both ways.
    faulty = Faulty(transport, fault_rate=args.fault_rate, seed=int(rng.integers(2**32)))
    device = _device(faulty, "xdma-model", args)
    try:
        while figures.faults(faulty) + sum(figures.switches.values()) < args.faults:
            if args.switch_every and figures.counts["operations"] % args.switch_every == 0:
                _switch(model, rng, figures)
            if not _run_one(device, rng, args, figures):
                raise RuntimeError("an operation hung behind the XDMA double")
            _progress(figures, faulty, started)
    finally:
        figures.retire(faulty, device)
        figures.faults_closed += sum(figures.switches.values())
        device.close()


def _soak_direct(args, figures, rng, started):
    from maxaccel.sim.faults import Faulty
    faulty = Faulty(open_transport(args.device), fault_rate=args.fault_rate,
                    seed=int(rng.integers(2**32)))
    device = _device(faulty, args.device, args)
    try:
        while figures.faults(faulty) < args.faults:
            if not _run_one(device, rng, args, figures):
                raise RuntimeError("an operation hung on the board in this process")
            _progress(figures, faulty, started)
    finally:
        figures.retire(faulty, device)
        device.close()


def _stop(*_):
    """Ctrl-C or SIGTERM stops a soak with its figures so far."""
    raise KeyboardInterrupt


def _run_jobs(args, figures):
    """Run ``args.jobs`` soaks as child processes, each to its share of the faults, and add
    their figures to ``figures``. On Ctrl-C or SIGTERM each child is stopped (SIGTERM) and
    hands over its figures so far."""
    share = -(-args.faults // args.jobs)
    with tempfile.TemporaryDirectory(prefix="maxaccel-soak-jobs-") as workdir:
        children = []
        for job in range(args.jobs):
            out = os.path.join(workdir, f"{job}.json")
            command = [sys.executable, "-m", "maxaccel", "-q", "soak", "--figures-out", out,
                       *_options(args, faults=share, seed=args.seed + job, jobs=1)]
            children.append((subprocess.Popen(command, stdout=subprocess.DEVNULL), out))
        try:
            for child, _ in children:
                child.wait()
        except KeyboardInterrupt:
            for child, _ in children:
                if child.poll() is None:
                    child.terminate()
            for child, _ in children:
                child.wait()
            raise
        finally:
            for child, out in children:
                if os.path.exists(out):
                    figures.add(json.loads(pathlib.Path(out).read_text()))
                else:
                    figures.counts["jobs that failed"] += 1
                    _say(f"a soak job ended with status {child.returncode} and no figures")


def add_arguments(parser):
    """The soak's options, on ``parser`` (the ``maxaccel soak`` subcommand's)."""
    names = []

    def option(flag, **settings):
        names.append(parser.add_argument(flag, **settings).dest)
    option("--path", choices=("serve", "xdma", "direct"), default="serve",
           help="how the host reaches the board (default: serve)")
    option("--device", default="verilator",
           help="the virtual board: sim, verilator, verilator?PARAMS (default: verilator)")
    option("--faults", type=int, default=10_000,
           help="stop after this many faults (default 10000)")
    option("--fault-rate", type=float, default=0.002,
           help="probability of a fault at each byte, each direction (default 0.002)")
    option("--size", type=int, default=24,
           help="most elements along an operation's longest axis (default 24)")
    option("--timeout", type=float, default=0.2, help="reply timeout, seconds (default 0.2)")
    option("--attempts", type=int, default=16,
           help="the link's most sends of one request (default 16)")
    option("--kill-every", type=int, default=200,
           help="serve: operations between clients killed mid-frame (default 200)")
    option("--switch-every", type=int, default=50,
           help="xdma: operations between fault switches, 0 for none (default 50)")
    option("--driver-timeout", type=float, default=2.0,
           help="xdma: the double's h2c/c2h timeouts, seconds (default 2)")
    option("--watchdog", type=float, default=120.0,
           help="an operation taking longer is a hang, seconds (default 120)")
    option("--seed", type=int, default=0, help="random seed (default 0)")
    option("--jobs", type=int, default=1,
           help="soaks run side by side, each with its own board and client, seeds SEED, "
                "SEED+1, ..., each to its share of --faults; their figures are added "
                "(default 1)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    parser.add_argument("--figures-out", help=argparse.SUPPRESS)
    parser.set_defaults(soak_options=names)


def soak(args, out=sys.stdout):
    """Run the soak ``args`` describe (:func:`add_arguments`); print the figures to ``out``
    (and write them as JSON with ``--json``); 0 when nothing was wrong and nothing hung."""
    if args.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, not {args.jobs}")
    if args.path != "serve" and not is_virtual_board(args.device):
        raise ValueError(f"--path {args.path} puts the injector (and, for xdma, the XDMA "
                         f"driver's double) around a virtual board in this process (sim, "
                         f"verilator, netlist:BOARD), not {args.device!r}")
    figures = _Figures()
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    run = {"serve": _soak_serve, "xdma": _soak_xdma, "direct": _soak_direct}[args.path]
    # Both explicitly: a shell starts a background job with SIGINT ignored.
    previous = {number: signal.signal(number, _stop)
                for number in (signal.SIGINT, signal.SIGTERM)}
    _say(f"soak: {args.faults} faults through {args.path} to {args.device}"
         + (f" in {args.jobs} jobs" if args.jobs > 1 else "") + "; Ctrl-C or SIGTERM stops it")
    try:
        if args.jobs > 1:
            _run_jobs(args, figures)
        else:
            run(args, figures, rng, started)
    except KeyboardInterrupt:
        _say("interrupted: the figures so far")
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if args.figures_out:
        pathlib.Path(args.figures_out).write_text(json.dumps(figures.state()))
    report = figures.report(args, time.monotonic() - started)
    width = max(map(len, report))
    for key, value in report.items():
        print(f"{key:<{width}}  {value}", file=out)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    failed = report["wrong results"] or report["hangs"] \
        or report.get("served boards that did not stop on SIGTERM")
    return 1 if failed else 0
