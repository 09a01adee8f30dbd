"""Link words: what the command engine's link streams carry, one or several bytes per cycle.

A link of ``link_bytes`` bytes per cycle carries *link words*: ``link_bytes`` bytes of which the
first ``count`` (at least one in every transfer) are valid, in stream order from byte 0. A link
of one byte per cycle (a UART, the XDMA byte adapters) is a plain 8-bit stream, so
:func:`link_signature` is ``stream.Signature(8)`` there; the engine's building blocks use the
word layout in both cases.

:class:`WordCRC` checks or generates the protocol's CRC over a variable number of bytes per
cycle, so a frame need not be aligned to link words; :class:`SerialCRC` does it a bit a cycle,
for a link far slower than the clock.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib import crc, data, stream, wiring
from amaranth.lib.wiring import In, Out

from maxaccel.contract.wire import CRC_ALGORITHM

from .kit import Checked
from .lane import LANE_BYTES

__all__ = ["LINK_WIDTHS", "check_link_bytes", "word_layout", "link_signature", "word_fields",
           "one_byte", "WordSplitter", "CRC_CHUNK", "WordCRC", "SerialCRC"]

#: Bytes per cycle a link (and the engine behind it) may carry.
LINK_WIDTHS = (1, 2, 4, 8, 16, 32)


def check_link_bytes(link_bytes, *, lanes=None):
    """Raise a :class:`ValueError` unless ``link_bytes`` is one of :data:`LINK_WIDTHS` and, if
    ``lanes`` is given, at most the ``8 * lanes`` bytes of a beat."""
    if link_bytes not in LINK_WIDTHS:
        problem = (f"link_bytes must be one of {', '.join(map(str, LINK_WIDTHS))}, "
                   f"not {link_bytes!r}")
    elif lanes is not None and link_bytes > LANE_BYTES * lanes:
        problem = (f"link_bytes ({link_bytes}) must not exceed the {LANE_BYTES * lanes} bytes "
                   f"of a beat of {lanes} lanes")
    else:
        return
    raise ValueError(problem)


def word_fields(payload, link_bytes):
    """``(data, count)`` of a link stream's payload: its bytes as one value from byte 0, and
    how many are valid (``1`` on a byte link)."""
    if link_bytes == 1:
        return Value.cast(payload), 1
    return payload.data.as_value(), payload.count


def one_byte(payload, link_bytes, value):
    """The assignments that put the single byte ``value`` on a link stream's payload."""
    if link_bytes == 1:
        return [payload.eq(value)]
    return [payload.data[0].eq(value), payload.count.eq(1)]


def word_layout(link_bytes):
    """Layout of a link word of ``link_bytes`` bytes.

    Fields
    ------
    data : ArrayLayout(8, link_bytes)
        Bytes in stream order; bytes ``count`` and up are don't-care.
    count : range(link_bytes + 1)
        Valid bytes, from byte 0.
    """
    return data.StructLayout({"data": data.ArrayLayout(8, link_bytes),
                              "count": range(link_bytes + 1)})


def link_signature(link_bytes):
    """The stream signature of a link of ``link_bytes`` bytes per cycle: bytes for 1, else
    :func:`word_layout` words."""
    check_link_bytes(link_bytes)
    return stream.Signature(8 if link_bytes == 1 else word_layout(link_bytes))


class WordSplitter(Checked, wiring.Component):
    """Passes link words on in pieces of at most ``limit`` bytes.

    A word used up in the cycle it arrives passes straight through (combinationally); a word
    only partly taken is held in a register and its remaining bytes, moved down to byte 0, are
    offered first, so a consumer can take a header byte by byte and the payload after it a
    word at a time, whatever the alignment.

    Parameters
    ----------
    width : int
        Bytes per word (above 1).

    Ports
    -----
    i : In(stream.Signature(word_layout(width)))
        Words; each must carry at least one byte.
    limit : In(range(1, width + 1))
        The most bytes the consumer takes in the next transfer (may change every cycle).
    o : Out(stream.Signature(word_layout(width)))
        Pieces: ``count`` is the bytes the current word has left, at most ``limit``.
    holding : Out(1)
        A partly used word is held (its bytes are taken from ``i`` but not yet passed on).

    Latency and throughput
    ----------------------
    No latency for a word that is not held; a word goes through in as many cycles as it takes
    pieces. ``i.ready`` is ``o.ready`` while no word is held.
    """

    @classmethod
    def check_parameters(cls, width):
        if width == 1:
            raise ValueError("a WordSplitter needs words of more than one byte")
        check_link_bytes(width)

    def __init__(self, width):
        self.width = width
        super().__init__({
            "i": In(stream.Signature(word_layout(width))),
            "limit": In(range(1, width + 1), init=width),
            "o": Out(stream.Signature(word_layout(width))),
            "holding": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        width = self.width
        held = self.holding
        held_word = Signal(word_layout(width))
        offset = Signal(range(width))
        word = Signal(word_layout(width))
        start = Mux(held, offset, 0)
        available = Signal(range(width + 1))
        m.d.comb += [
            word.eq(Mux(held, held_word, self.i.payload)),
            available.eq(word.count - start),
            self.o.valid.eq(held | self.i.valid),
            self.o.payload.data.as_value().eq(word.data.as_value() >> (start * 8)),
            self.o.payload.count.eq(Mux(available < self.limit, available, self.limit)),
            self.i.ready.eq(~held & self.o.ready),
        ]
        with m.If(self.o.valid & self.o.ready):
            with m.If(self.o.payload.count == available):
                m.d.sync += held.eq(0)
            with m.Else():
                m.d.sync += [held.eq(1), held_word.eq(word),
                             offset.eq(start + self.o.payload.count)]
        return m


#: Most bytes :class:`WordCRC` adds with one update matrix; a wider word goes through two.
CRC_CHUNK = 16


def _updated(parameters, state_in, word):
    """The CRC register ``state_in`` after adding a word of ``parameters``' data width, from
    Amaranth's own update matrices (its Processor's); reflecting a whole little-endian word is
    reflecting it byte by byte, byte 0 first."""
    f, g = parameters._matrices()
    crc_width, word_width = parameters._crc_width, parameters.data_width

    def word_bit(j):
        return word[word_width - 1 - j] if parameters._reflect_input else word[j]

    # One XOR reduction per bit, of bits indexed straight from the signals: chains of `^` or
    # slices of reversed slices take Amaranth minutes and gigabytes to convert at 16 bytes.
    return Cat(Cat(*[state_in[j] for j in range(crc_width) if f[j][i]],
                   *[word_bit(j) for j in range(word_width) if g[j][i]]).xor()
               for i in range(crc_width))


def _drive_outputs(m, component, parameters, state):
    """``component``'s ``crc`` and ``match_detected`` from its CRC register ``state``, as
    :class:`amaranth.lib.crc.Processor` gives them."""
    value = state[::-1] if parameters._reflect_output else state
    m.d.comb += [component.crc.eq(value ^ parameters._xor_output),
                 component.match_detected.eq(value == parameters.residue())]


class WordCRC(wiring.Component):
    """The protocol's CRC (``CRC_ALGORITHM``) over ``0 .. width`` bytes per cycle.

    As :class:`amaranth.lib.crc.Processor`, but each cycle adds the first ``count`` bytes of
    ``data`` (byte 0 first), so frames need not be aligned to link words. One update matrix
    per possible count up to :data:`CRC_CHUNK`; the count selects which one loads the register.
    A wider word (32 bytes) with more than ``CRC_CHUNK`` bytes first goes through the fixed
    ``CRC_CHUNK``-byte update, then through the matrix of the bytes left: two XOR trees in a
    row instead of 32 matrices of up to 288 inputs (a third of the logic, and of the
    Verilog the compiled board builds).

    Parameters
    ----------
    width : int
        Bytes per cycle at most (up to ``2 * CRC_CHUNK``).

    Ports
    -----
    start : In(1)
        Restart from the initial value (before adding ``data`` if ``count`` is not 0).
    data : In(ArrayLayout(8, width))
    count : In(range(width + 1))
        Bytes of ``data`` to add this cycle.
    crc : Out(32)
        The CRC of the bytes added so far, from a register.
    match_detected : Out(1)
        The bytes added so far end with their own CRC (the residue is in the register).

    Latency
    -------
    ``crc`` includes a cycle's bytes from the next cycle on.
    """

    def __init__(self, width):
        if width > 2 * CRC_CHUNK:
            raise ValueError(f"a WordCRC adds at most {2 * CRC_CHUNK} bytes a cycle, "
                             f"not {width}")
        self.width = width
        algorithm = getattr(crc.catalog, CRC_ALGORITHM)
        self._parameters = [algorithm(data_width=8 * k)
                            for k in range(1, min(width, CRC_CHUNK) + 1)]
        base = self._parameters[0]
        self._crc_width = base._crc_width
        super().__init__({
            "start": In(1),
            "data": In(data.ArrayLayout(8, width)),
            "count": In(range(width + 1)),
            "crc": Out(self._crc_width),
            "match_detected": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        base = self._parameters[0]
        crc_width = self._crc_width
        initial = base._initial_crc
        state = Signal(crc_width, init=initial)
        source = Signal(crc_width)
        m.d.comb += source.eq(Mux(self.start, initial, state))
        raw = self.data.as_value()

        _drive_outputs(m, self, base, state)

        def update(name, k, state_in, word):
            """The CRC register after adding the ``k`` bytes of ``word`` to ``state_in``."""
            updated = Signal(crc_width, name=name)
            m.d.comb += updated.eq(_updated(self._parameters[k - 1], state_in, word))
            return updated

        # The bytes the last stage adds: all of them, or those after the first chunk.
        chunk = min(self.width, CRC_CHUNK)
        if self.width > CRC_CHUNK:
            whole = update("updated_chunk", CRC_CHUNK, source, raw[:8 * CRC_CHUNK])
            beyond = self.count > CRC_CHUNK
            stage_state, stage_word = Signal(crc_width), Signal(8 * chunk)
            stage_count = Signal(range(chunk + 1))
            m.d.comb += [
                stage_state.eq(Mux(beyond, whole, source)),
                stage_word.eq(Mux(beyond, raw[8 * CRC_CHUNK:], raw[:8 * chunk])),
                stage_count.eq(Mux(beyond, self.count - CRC_CHUNK, self.count)),
            ]
        else:
            stage_state, stage_word, stage_count = source, raw, self.count

        with m.Switch(stage_count):
            for k in range(1, chunk + 1):
                updated = update(f"updated_{k}", k, stage_state, stage_word)
                with m.Case(k):
                    m.d.sync += state.eq(updated)
            with m.Default():
                with m.If(self.start):
                    m.d.sync += state.eq(initial)
        return m


class SerialCRC(wiring.Component):
    """The protocol's CRC (``CRC_ALGORITHM``) a bit a cycle: :class:`WordCRC`'s ports for one
    byte per cycle, and ``busy``, in about a third of its logic.

    A byte added (``count`` 1) goes in over eight cycles, its first bit in the cycle it is
    added, least significant first (the order a reflected CRC takes a byte in); ``busy`` is
    high for the seven after it, and a byte may be added again, and ``crc`` and
    ``match_detected`` are the bytes' so far, when it is low.

    Ports
    -----
    start, data, count, crc, match_detected
        As :class:`WordCRC` of ``width`` 1 (``count`` 0 or 1), but ``start`` with ``count`` 0
        restarts with the next byte added: ``crc`` and ``match_detected`` are the old bytes'
        until then.
    busy : Out(1)
        Bits of the last byte still going in.

    Latency and throughput
    ----------------------
    A byte every eight cycles; ``crc`` includes it eight cycles after it was added.
    """

    def __init__(self):
        algorithm = getattr(crc.catalog, CRC_ALGORITHM)
        self._parameters = algorithm(data_width=1)
        if not self._parameters._reflect_input:
            raise ValueError("SerialCRC takes a byte least significant bit first: a CRC "
                             "whose input is reflected")
        super().__init__({
            "start": In(1),
            "data": In(data.ArrayLayout(8, 1)),
            "count": In(range(2)),
            "crc": Out(self._parameters._crc_width),
            "match_detected": Out(1),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        parameters = self._parameters
        width, initial = parameters._crc_width, parameters._initial_crc
        state = Signal(width, init=initial)
        rest = Signal(7)                      # the byte's bits still to go in, next at bit 0
        left = Signal(range(8))
        m.d.comb += self.busy.eq(left != 0)
        _drive_outputs(m, self, parameters, state)

        # One update for both a byte's first bit and the rest (a LUT4 a bit of the register):
        # a start without a byte is held until the next byte comes.
        restart = Signal()
        fresh = ~self.busy & (self.start | restart)
        bit = Mux(self.busy, rest[0], self.data[0][0])
        with m.If(self.busy | (self.count == 1)):
            m.d.sync += [state.eq(_updated(parameters, Mux(fresh, initial, state), bit)),
                         restart.eq(0)]
        with m.Elif(self.start):
            m.d.sync += restart.eq(1)
        with m.If(self.busy):
            m.d.sync += [rest.eq(rest >> 1), left.eq(left - 1)]
        with m.Elif(self.count == 1):
            m.d.sync += [rest.eq(self.data[0][1:]), left.eq(7)]
        return m
