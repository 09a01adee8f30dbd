"""A core whose units run on gated clocks (``Core.gated_unit_clocks``, what the compiled board
is built with) is the same machine as the core with clock enables that boards are built with:
both cores side by side in one simulation, fed the same request bytes (every unit's commands,
recorded from the host, a request cut off mid-frame so the engine aborts, and stalls on both
sides), give the same ``i.ready``, ``o`` and ``idle`` in every cycle."""

import random

import numpy as np
from amaranth.hdl import Module
from amaranth.sim import Simulator

from maxaccel.contract.wire import MAGIC
from maxaccel.hdl.top import Core
from maxaccel.host.device import Device
from maxaccel.host.transport import open_transport
from maxaccel.sim.virtual_board import CORE_DEFAULTS

PARAMETERS = {**CORE_DEFAULTS, "frame_timeout_cycles": 300}


class _Recording:
    """The simulated board's transport, keeping every request byte written to it."""

    def __init__(self):
        self.transport = open_transport("sim?frame_timeout_cycles=300")
        self.written = bytearray()

    def write(self, data):
        self.written += data
        return self.transport.write(data)

    def __getattr__(self, name):
        return getattr(self.transport, name)


def _requests():
    """The bytes the host sends for one operation of each unit, on tiny tensors."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2, 3, 4)).astype(np.float32)
    x[0, 1, 2, 2] = np.nan
    x[1, 0, 0, 0] = -0.0
    recording = _Recording()
    with Device(recording) as device:
        device.reduce_max(x, axes=[3])                                  # REDUCE
        device.reduce_max(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), axes=[1, 2])
        device.max(x[0], x[1, :, :1, :])                                # LOAD, MAX
        device.max_pool(x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    return bytes(recording.written)


def test_gated_unit_clocks_change_no_cycle():
    stream = _requests()
    starts = [k for k in range(len(stream)) if stream.startswith(MAGIC, k)]
    # The first REDUCE (after IDENTIFY) cut off half-way, silence past the frame timeout (the
    # engine aborts the reducer), then every request from that REDUCE on.
    inputs = [stream[:(starts[1] + starts[2]) // 2], None, stream[starts[1]:]]
    m = Module()
    cores = []
    for gated in (False, True):
        core = Core(**PARAMETERS)
        core.gated_unit_clocks = gated
        m.submodules[f"core_{int(gated)}"] = core
        cores.append(core)
    sim = Simulator(m)
    sim.add_clock(1e-6)
    rng = random.Random(11)
    compared = []

    async def bench(ctx):
        for piece in inputs:
            if piece is None:
                for _ in range(PARAMETERS["frame_timeout_cycles"] + 50):
                    await ctx.tick()
                continue
            position = 0
            while position < len(piece) or not all(ctx.get(core.idle) for core in cores):
                offering = position < len(piece) and rng.random() < 0.8
                taking = rng.random() < 0.7
                for core in cores:
                    ctx.set(core.i.valid, offering)
                    ctx.set(core.i.payload, piece[position] if offering else 0)
                    ctx.set(core.o.ready, taking)
                seen = [(ctx.get(core.i.ready), ctx.get(core.o.valid),
                         ctx.get(core.o.payload), ctx.get(core.idle)) for core in cores]
                assert seen[0] == seen[1], f"cycle {len(compared)}: {seen}"
                compared.append(seen[0])
                if offering and seen[0][0]:
                    position += 1
                await ctx.tick()

    sim.add_testbench(bench)
    sim.run()
    replies = sum(1 for ready, valid, payload, idle in compared if valid)
    assert replies > 100        # the replies came, and were compared byte by byte
