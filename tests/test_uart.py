"""UART at the bit level: loopback under stalls, the 8N1 waveform, framing errors and overruns."""

import random

import pytest
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.sim import Simulator

from maxaccel.hdl.uart import UARTReceiver, UARTTransmitter
from maxaccel.sim.streams import STALL_PATTERNS, run_streams


class Loopback(wiring.Component):
    def __init__(self, divisor):
        self.divisor = divisor
        self.tx = UARTTransmitter()
        self.rx = UARTReceiver()
        super().__init__({
            "sent": wiring.In(stream.Signature(8)),
            "received": wiring.Out(stream.Signature(8)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.tx, m.submodules.rx = self.tx, self.rx
        wiring.connect(m, wiring.flipped(self.sent), self.tx.bytes)
        wiring.connect(m, self.rx.bytes, wiring.flipped(self.received))
        m.d.comb += [
            self.rx.rx.eq(self.tx.tx),
            self.tx.divisor.eq(self.divisor), self.rx.divisor.eq(self.divisor),
        ]
        return m


@pytest.mark.parametrize("stalls", STALL_PATTERNS, ids=str)
@pytest.mark.parametrize("divisor", [4, 7])
def test_loopback_delivers_every_byte(divisor, stalls):
    data = [0x00, 0xFF, 0x55, 0xAA, 0x80, 0x01] + random.Random(divisor).choices(range(256), k=20)
    dut = Loopback(divisor)
    run = run_streams(dut, sources={dut.sent: data}, sinks={"rx": (dut.received, len(data))},
                      stalls=stalls, drain_cycles=12 * divisor)
    assert run.received["rx"] == data


def drive_line(bits, divisor):
    """Cycle-by-cycle line levels for a sequence of bit values, ``divisor`` cycles each."""
    return [bit for bit in bits for _ in range(divisor)]


def frame_bits(byte, stop=1):
    return [0] + [byte >> i & 1 for i in range(8)] + [stop]


def simulate_receiver(levels, divisor, *, ready=True):
    dut = UARTReceiver()
    received = []
    counters = {}

    async def testbench(ctx):
        ctx.set(dut.divisor, divisor)
        ctx.set(dut.bytes.ready, ready)
        for level in levels + [1] * 4 * divisor:
            ctx.set(dut.rx, level)
            _, _, valid, payload = await ctx.tick().sample(dut.bytes.valid, dut.bytes.payload)
            if valid and ready:
                received.append(payload)
        counters["framing"] = ctx.get(dut.framing_errors)
        counters["overruns"] = ctx.get(dut.overruns)
        counters["pending"] = ctx.get(dut.bytes.valid)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    return received, counters


def test_transmitter_waveform_is_8n1_lsb_first():
    divisor = 5
    dut = UARTTransmitter()
    levels = []

    async def testbench(ctx):
        ctx.set(dut.divisor, divisor)
        ctx.set(dut.bytes.payload, 0xA6)
        ctx.set(dut.bytes.valid, 1)
        await ctx.tick().until(dut.bytes.ready)
        ctx.set(dut.bytes.valid, 0)
        for _ in range(12 * divisor):
            levels.append(ctx.get(dut.tx))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert levels[:10 * divisor] == drive_line(frame_bits(0xA6), divisor)
    assert set(levels[10 * divisor:]) == {1}


def test_framing_error_is_counted_and_the_next_byte_received():
    divisor = 6
    levels = ([1] * 10 + drive_line(frame_bits(0x3C, stop=0), divisor) + [0] * 3 * divisor
              + [1] * 2 * divisor + drive_line(frame_bits(0xC3), divisor))
    received, counters = simulate_receiver(levels, divisor)
    assert received == [0xC3]
    assert counters["framing"] == 1 and counters["overruns"] == 0


def test_glitch_shorter_than_half_a_bit_is_not_a_start_bit():
    divisor = 8
    levels = [1] * 10 + [0, 0] + [1] * 20 + drive_line(frame_bits(0x5A), divisor)
    received, counters = simulate_receiver(levels, divisor)
    assert received == [0x5A] and counters["framing"] == 0


def test_overrun_is_counted_when_bytes_are_not_taken():
    divisor = 4
    levels = [1] * 8
    for byte in [0x11, 0x22, 0x33]:
        levels += drive_line(frame_bits(byte), divisor)
    received, counters = simulate_receiver(levels, divisor, ready=False)
    assert counters["overruns"] == 2 and counters["framing"] == 0 and counters["pending"] == 1
