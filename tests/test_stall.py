"""Every library unit keeps the stall discipline its ``Signature`` states (``Stall``), checked the
same way for each: in every cycle of a run under random ``valid`` and ``ready``, the input's
``ready`` is read with the output's ``ready`` low and high, and with the input's ``valid`` low
and high. ``ready`` never depends on the same stream's ``valid``; a *registered* input's never
on the output's ``ready``; a *combinational* one's does (in some cycle it rises with it), and
only that way (never falls when it rises)."""

import random

import pytest
from amaranth.sim import Simulator

from maxaccel.contract.dtypes import DType
from maxaccel.hdl import (BroadcastMax, BroadcastOp, ChannelsLastPool, RunReducer,
                          SerialWindowMaxPool, WindowMaxPool)


def _reducer():
    unit = RunReducer(1)

    def setup(ctx):
        ctx.set(unit.dtype, DType.UINT8)
        ctx.set(unit.i.payload.first, 1)
        ctx.set(unit.i.payload.last, 1)
        ctx.set(unit.i.payload.nbytes, 8)
    return unit, setup


def _pool():
    unit = ChannelsLastPool(1, 1)

    def setup(ctx):
        ctx.set(unit.dtype, DType.UINT8)
        ctx.set(unit.pixels, 1)
        ctx.set(unit.channels, 8)
        ctx.set(unit.i.payload.first, 1)
        ctx.set(unit.i.payload.last, 1)
        ctx.set(unit.i.payload.nbytes, 8)
    return unit, setup


def _window(unit_class=WindowMaxPool):
    unit = unit_class(max_rank=1, max_extent=2, dim_bits=4, index_bits=8)

    def setup(ctx):
        ctx.set(unit.dtype, DType.UINT8)
        ctx.set(unit.config[0], {"size": 4, "pad": 0, "out": 3, "kernel": 2, "stride": 1,
                                 "dilation": 1})
    return unit, setup


def _broadcast():
    unit = BroadcastMax(1, 4, 1, 1, max_count=15, max_streamed=2)

    async def setup(ctx):
        # One pass of 15 one-beat rows of the streamed operand alone.
        ctx.set(unit.config, {"dtype": DType.UINT8, "operands": 0, "streamed": 1,
                              "row_beats": 1, "last_nbytes": 8, "counts": [15]})
        ctx.set(unit.command.payload, {"op": BroadcastOp.RUN})
        ctx.set(unit.command.valid, 1)
        await ctx.tick()
        ctx.set(unit.command.valid, 0)
    return unit, setup


UNITS = {"RunReducer": _reducer, "ChannelsLastPool": _pool, "WindowMaxPool": _window,
         "SerialWindowMaxPool": lambda: _window(SerialWindowMaxPool), "BroadcastMax": _broadcast}


@pytest.mark.parametrize("name", UNITS)
def test_each_unit_keeps_the_stall_discipline_its_signature_states(name):
    unit, setup = UNITS[name]()
    stall = unit.signature.stall
    into, out = getattr(unit, stall.into), getattr(unit, stall.out)
    seen = {"follows": False}

    async def bench(ctx):
        result = setup(ctx)
        if result is not None:
            await result
        rng = random.Random(1)
        for cycle in range(60):
            valid, ready = rng.random() < 0.8, rng.random() < 0.5
            readies = {}
            for v in (0, 1):
                for r in (0, 1):
                    ctx.set(into.valid, v)
                    ctx.set(out.ready, r)
                    readies[v, r] = ctx.get(into.ready)
            for r in (0, 1):
                assert readies[0, r] == readies[1, r], f"cycle {cycle}: ready follows valid"
            if stall.registered:
                assert readies[1, 0] == readies[1, 1], f"cycle {cycle}: ready follows o.ready"
            else:
                assert readies[1, 0] <= readies[1, 1], f"cycle {cycle}: ready falls with o.ready"
                seen["follows"] |= readies[1, 0] != readies[1, 1]
            ctx.set(into.valid, valid)
            ctx.set(out.ready, ready)
            await ctx.tick()

    sim = Simulator(unit)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert stall.registered or seen["follows"], "a combinational ready never followed o.ready"
