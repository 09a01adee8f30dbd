"""Soak test of ``maxaccel serve`` under link faults (not part of CI: minutes, not seconds).

Starts ``maxaccel serve`` (the compiled virtual board by default) on a pseudo-terminal and
drives it through the host's serial transport wrapped in the test suite's fault injector
(:class:`fake_board.Faulty`): bytes dropped, flipped, inserted and duplicated at random, in both
directions. Every result is compared bit for bit with the golden model; every operation runs
under a watchdog. Every ``--kill-every`` operations the client closes its port, another client
process starts a large request and is killed (SIGKILL) mid-frame, and the client reconnects:
the time that reconnection takes is reported too.

    python tests/soak_serve.py                      # >= 10 000 faults, a few minutes
    python tests/soak_serve.py --faults 500 --device sim?lanes=2 --timeout 2

Exit status 0 when there was no wrong result and no hang; the figures are printed as a table
(and written as JSON with ``--json FILE``). ``docs/protocol.md`` quotes them.
"""

import argparse
import collections
import json
import os
import pathlib
import platform
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import fake_board  # noqa: E402  (the fault injector of the test suite)

from maxaccel.host.device import Device  # noqa: E402
from maxaccel.host.link import LinkError  # noqa: E402
from maxaccel.host.transport import open_transport  # noqa: E402
from maxaccel.sim import reference  # noqa: E402
from maxaccel.sim.values import random_values  # noqa: E402

KILLED_CLIENT = """
import sys, time, serial
from maxaccel.contract.dtypes import DType
from maxaccel.contract.wire import PARAMETERS, Command, encode_frame
port = serial.serial_for_url(sys.argv[1], timeout=0, write_timeout=5)
runs = 1 << 16
frame = encode_frame(Command.REDUCE, 0, PARAMETERS[Command.REDUCE].pack(dtype=DType.FLOAT, runs=runs, run_length=1)
                     + bytes(4 * runs))
sent = 0
while True:                         # until killed: a request far longer than the wait
    port.write(frame[sent:sent + 256])
    sent += 256
    if sent == 256:
        print("started", flush=True)
"""


class Hang(Exception):
    pass


def _watchdog(signum, frame):
    raise Hang


def _operations(rng):
    """A random small operation: (name, call on a device or the reference). Small, so that
    at the default fault rate an attempt has a fair chance to meet no fault at all."""
    dtype = rng.choice([np.float32, np.float16, np.int8, np.uint16, np.float64])
    kind = rng.integers(3)
    if kind == 0:
        shape = tuple(int(n) for n in rng.integers(1, 5, rng.integers(1, 3)))
        x = random_values(rng, dtype, shape)
        axes = [int(a) for a in rng.choice(len(shape), rng.integers(1, len(shape) + 1),
                                           replace=False)]
        return "reduce_max", lambda m: m.reduce_max(x, axes=axes)
    if kind == 1:
        a = random_values(rng, dtype, (int(rng.integers(1, 4)), int(rng.integers(1, 5))))
        b = random_values(rng, dtype, (1, a.shape[1]) if rng.integers(2) else a.shape)
        return "max", lambda m: m.max(a, b)
    dtype = rng.choice([np.float32, np.float16, np.float64])    # GlobalMaxPool: floats
    x = random_values(rng, dtype, (1, int(rng.integers(1, 3)), int(rng.integers(1, 4)), 2))
    return "global_max_pool", lambda m: m.global_max_pool(x)


def _kill_a_client_mid_frame(port, rng):
    """A second client process starts a long request and is killed mid-frame."""
    process = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT, port],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = process.stdout.readline()
        assert line == b"started\n", process.stderr.read().decode()
        time.sleep(float(rng.uniform(0.02, 0.3)))
    finally:
        process.kill()
        process.communicate()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="verilator", help="what serve serves")
    parser.add_argument("--faults", type=int, default=10_000, help="stop after this many")
    parser.add_argument("--fault-rate", type=float, default=0.01,
                        help="probability of a fault at each byte, each direction")
    parser.add_argument("--timeout", type=float, default=0.1,
                        help="client reply timeout (s)")
    parser.add_argument("--attempts", type=int, default=64,
                        help="sends per request (at the default rate about one attempt in "
                             "eight meets no fault)")
    parser.add_argument("--kill-every", type=int, default=100,
                        help="operations between clients killed mid-frame")
    parser.add_argument("--watchdog", type=float, default=60.0,
                        help="an operation taking longer is a hang (s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)

    kinds = collections.Counter()
    inject = fake_board._inject

    def counting(data, start, faults):
        for f in faults:
            if start <= f.offset < start + len(data):
                kinds[(f.direction, f.kind)] += 1
        return inject(data, start, faults)
    fake_board._inject = counting

    rng = np.random.default_rng(args.seed)
    workdir = tempfile.mkdtemp(prefix="maxaccel-soak-")
    link = os.path.join(workdir, "tty")
    server = subprocess.Popen([sys.executable, "-m", "maxaccel", "-q", "serve", "--device",
                               args.device, "--link", link], stdout=subprocess.PIPE)
    figures = collections.Counter({"wrong results": 0, "hangs": 0, "requests given up": 0})
    reconnect_s = []
    signal.signal(signal.SIGALRM, _watchdog)
    started = time.monotonic()
    device = faulty = None
    try:
        for _ in range(2):
            server.stdout.readline()        # serving ..., connect with ...
        injected_before = 0

        def connect():
            nonlocal faulty
            faulty = fake_board.Faulty(open_transport(f"serial://{link}"),
                                       fault_rate=args.fault_rate,
                                       seed=int(rng.integers(2**32)))
            return Device(faulty, url=f"serial://{link}", timeout_s=args.timeout,
                          attempts=args.attempts, progress=None)

        while figures["faults"] < args.faults:
            if device is None:
                began = time.monotonic()
                signal.setitimer(signal.ITIMER_REAL, args.watchdog)
                try:
                    device = connect()
                except LinkError:
                    figures["failed opens"] += 1
                    figures["faults"] = injected_before + faulty.injected
                    injected_before = figures["faults"]
                    faulty.close()
                    continue
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                reconnect_s.append(time.monotonic() - began)
            name, call = _operations(rng)
            signal.setitimer(signal.ITIMER_REAL, args.watchdog)
            try:
                result = call(device)
            except Hang:
                figures["hangs"] += 1
                device.close()
                device = None
                continue
            except LinkError:
                figures["requests given up"] += 1
                continue
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            expected = call(reference)
            same = (result.dtype == expected.dtype and result.shape == expected.shape
                    and result.tobytes() == expected.tobytes())
            figures["operations"] += 1
            figures["wrong results"] += not same
            figures["faults"] = injected_before + faulty.injected
            if figures["operations"] % args.kill_every == 0:
                figures["requests"] += device.link.requests
                figures["retries"] += device.link.retries
                injected_before = figures["faults"]
                device.close()
                device = None
                _kill_a_client_mid_frame(link, rng)
                figures["clients killed mid-frame"] += 1
            if figures["operations"] % 200 == 0:
                print(f"{figures['operations']} operations, {figures['faults']} faults, "
                      f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        if device is not None:
            figures["requests"] += device.link.requests
            figures["retries"] += device.link.retries
            device.close()
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=30)
    figures["seconds"] = round(time.monotonic() - started)
    report = {
        "command": "python tests/soak_serve.py " + " ".join(argv or sys.argv[1:]),
        "device": args.device, "fault_rate": args.fault_rate, "timeout_s": args.timeout,
        "attempts": args.attempts, "machine": f"{platform.processor() or platform.machine()}, "
                                              f"{os.cpu_count()} cores",
        **{k: v for k, v in sorted(figures.items())},
        "faults by direction and kind": {f"{d} {k}": n for (d, k), n in sorted(kinds.items())},
        "reconnect after a killed client, s (median / max)":
            [round(float(np.median(reconnect_s)), 3), round(max(reconnect_s), 3)],
    }
    width = max(map(len, report))
    for key, value in report.items():
        print(f"{key:<{width}}  {value}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0 if figures["wrong results"] == 0 and figures["hangs"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
