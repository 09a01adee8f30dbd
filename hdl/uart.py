"""UART receiver and transmitter with ``lib.stream`` byte interfaces (8N1).

The bit period is a run-time ``divisor`` in clock cycles (``clock_hz // baud``), so one
bitstream serves several baud rates and a simulation can use a small divisor for real bit timing.
"""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["UARTReceiver", "UARTTransmitter"]


class UARTReceiver(wiring.Component):
    """Receives 8N1 frames from the ``rx`` pin and emits their bytes as a stream.

    The pin is synchronised by two flip-flops. A start bit is a falling edge that is still low
    half a bit period later; each data bit is sampled in the middle of its period; the stop bit
    must be high, else the byte is dropped and ``framing_errors`` counts it. The receiver never
    stalls the line: a byte that completes while the previous one has not been taken from
    ``bytes`` is dropped and ``overruns`` counts it.

    Parameters
    ----------
    divisor_bits : int
        Width of the ``divisor`` port.
    counter_bits : int
        Width of the error counters (they wrap).

    Ports
    -----
    rx : In(1)
        Serial input, idle high.
    divisor : In(divisor_bits)
        Clock cycles per bit, at least 4; static while receiving.
    bytes : Out(stream.Signature(8))
        Received bytes; ``valid`` rises the cycle after the stop bit is sampled (the middle of
        the stop bit, two cycles late from the synchroniser), and a byte is held until taken.
    framing_errors, overruns : Out(counter_bits)
        Error counters.
    """

    def __init__(self, *, divisor_bits=16, counter_bits=32):
        super().__init__({
            "rx": In(1, init=1),
            "divisor": In(divisor_bits),
            "bytes": Out(stream.Signature(8)),
            "framing_errors": Out(counter_bits),
            "overruns": Out(counter_bits),
        })

    def elaborate(self, platform):
        m = Module()
        rx = Signal(init=1)
        m.submodules.sync_rx = FFSynchronizer(self.rx, rx, init=1)

        timer = Signal.like(self.divisor)
        bit_index = Signal(range(9))
        shift = Signal(8)

        with m.If(self.bytes.ready):
            m.d.sync += self.bytes.valid.eq(0)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(~rx):
                    m.d.sync += timer.eq(self.divisor >> 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(timer == 0):
                    with m.If(rx):
                        m.next = "IDLE"  # a glitch, not a start bit
                    with m.Else():
                        m.d.sync += [timer.eq(self.divisor - 1), bit_index.eq(0)]
                        m.next = "DATA"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("DATA"):
                with m.If(timer == 0):
                    m.d.sync += [
                        shift.eq(Cat(shift[1:], rx)),
                        bit_index.eq(bit_index + 1),
                        timer.eq(self.divisor - 1),
                    ]
                    with m.If(bit_index == 7):
                        m.next = "STOP"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("STOP"):
                with m.If(timer == 0):
                    with m.If(~rx):
                        m.d.sync += self.framing_errors.eq(self.framing_errors + 1)
                        m.next = "BREAK"
                    with m.Elif(self.bytes.valid & ~self.bytes.ready):
                        m.d.sync += self.overruns.eq(self.overruns + 1)
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [self.bytes.payload.eq(shift), self.bytes.valid.eq(1)]
                        m.next = "IDLE"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("BREAK"):
                # After a framing error wait for the line to go idle before hunting again.
                with m.If(rx):
                    m.next = "IDLE"
        return m


class UARTTransmitter(wiring.Component):
    """Sends the bytes of a stream as 8N1 frames on the ``tx`` pin.

    Ports
    -----
    bytes : In(stream.Signature(8))
        Bytes to send; one is taken when the previous frame's stop bit ends.
    divisor : In(divisor_bits)
        Clock cycles per bit, at least 1; static while sending.
    tx : Out(1)
        Serial output, idle high.

    Throughput is one byte per ``10 * divisor`` cycles, back to back.
    """

    def __init__(self, *, divisor_bits=16):
        super().__init__({
            "bytes": In(stream.Signature(8)),
            "divisor": In(divisor_bits),
            "tx": Out(1, init=1),
        })

    def elaborate(self, platform):
        m = Module()
        timer = Signal.like(self.divisor)
        # Start bit, 8 data bits LSB first, stop bit; shifted out from bit 0.
        frame = Signal(10, init=0x3FF)
        remaining = Signal(range(11))

        m.d.comb += self.tx.eq(frame[0])
        m.d.comb += self.bytes.ready.eq(remaining == 0)
        with m.If(remaining == 0):
            with m.If(self.bytes.valid):
                m.d.sync += [
                    frame.eq(1 << 9 | self.bytes.payload << 1),
                    remaining.eq(10),
                    timer.eq(self.divisor - 1),
                ]
        with m.Elif(timer == 0):
            m.d.sync += [
                frame.eq(1 << 9 | frame >> 1),
                remaining.eq(remaining - 1),
                timer.eq(self.divisor - 1),
            ]
        with m.Else():
            m.d.sync += timer.eq(timer - 1)
        return m
