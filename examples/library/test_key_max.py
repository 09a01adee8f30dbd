"""A user's design built from the key lane pieces: the maximum of three lanes of float32
(NaN absorbing, the canonical quiet NaN out, +0 above -0), two cycles after its operands,
built for float32 alone (a static element type: no format port, no logic for other formats).

Run with ``pytest examples/library/test_key_max.py``.
"""

import numpy as np
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from maxaccel.contract.dtypes import DType
from maxaccel.hdl import FromKey, KeyMax, ToKey
from maxaccel.sim import reference


class MaxOfThree(wiring.Component):
    """``max(a, b, c)`` of each float32 element of three 64-bit lanes, two cycles later."""

    a: In(64)
    b: In(64)
    c: In(64)
    result: Out(64)

    def elaborate(self, platform):
        m = Module()
        keys = []
        for name in ("a", "b", "c"):
            m.submodules[f"key_{name}"] = to_key = ToKey(dtype=DType.FLOAT)
            m.d.comb += to_key.value.eq(getattr(self, name))
            keys.append(to_key.key)
        # max(a, b) in one cycle, then max(that, c) in the next; c waits a cycle.
        m.submodules.first = first = KeyMax(latency=1, dtype=DType.FLOAT)
        m.submodules.second = second = KeyMax(latency=1, dtype=DType.FLOAT)
        m.submodules.value = value = FromKey(dtype=DType.FLOAT)
        c_key = Signal(64)
        m.d.sync += c_key.eq(keys[2])
        m.d.comb += [first.a.eq(keys[0]), first.b.eq(keys[1]),
                     second.a.eq(first.result), second.b.eq(c_key),
                     value.key.eq(second.result), self.result.eq(value.value)]
        return m


def lanes(x):
    """float32 pairs as 64-bit lanes."""
    return x.view(np.uint64)


def test_max_of_three_is_the_contracts_maximum_bit_for_bit():
    rng = np.random.default_rng(0)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1.0],
                        np.float32)
    a, b, c = (rng.choice(np.concatenate([specials, rng.standard_normal(8, np.float32)]), 64)
               .astype(np.float32) for _ in range(3))
    expected = reference.max(a, b, c)
    dut = MaxOfThree()
    results = []

    async def bench(ctx):
        for x, y, z in zip(lanes(a), lanes(b), lanes(c)):
            ctx.set(dut.a, int(x))
            ctx.set(dut.b, int(y))
            ctx.set(dut.c, int(z))
            await ctx.tick()
            # After this edge the result is that of the operands one edge earlier.
            results.append(ctx.get(dut.result))
        await ctx.tick()
        results.append(ctx.get(dut.result))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    got = np.array(results[1:], np.uint64).view(np.float32)
    assert got.view(np.uint32).tolist() == expected.view(np.uint32).tolist()
