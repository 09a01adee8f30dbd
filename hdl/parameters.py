"""The command engine's parameter register: a request's parameter block, its fields as slices.

Every data command's block comes from :mod:`maxaccel.contract.wire` (``parameter_block``), so
the engine and the host agree on it by construction; this module only maps it onto a register.
"""

from amaranth.hdl import Cat, Mux, Signal

from maxaccel.contract.wire import WINDOW_FIELD_MAX

__all__ = ["PARAMETER_BYTES", "ParameterRegister"]

#: The most bytes of a parameter block the engine takes a cycle on a wide link: 8 takes the
#: largest blocks (84 bytes for MAX_POOL, 148 for MAX) in 11 and 19 cycles instead of a byte a
#: cycle, for an 8-way multiplexer per register bit; a wider shift saves a few cycles more
#: for a multiplexer twice as wide.
PARAMETER_BYTES = 8


class ParameterRegister:
    """A shift register that takes a request's parameter block up to ``width`` bytes a cycle.

    The bytes of a block of N field bytes end up in the register's top N bytes, so every field
    of every command is a fixed slice (:attr:`fields`), whatever command the block was for.
    Only a block's fields are stored: its padding (``PAYLOAD_ALIGN``) is counted, not kept. A
    transfer brings 1 to :meth:`limit` bytes, never fields and padding together, and shifts
    the register by as many bytes (a ``width``-way multiplexer per bit).

    A narrowed field (``narrow``) is seen as its low :attr:`narrow_bytes` bytes and above them
    one bit, set when any higher byte is not 0: its value while it is below
    ``2**(8 * narrow_bytes)``, and above that bound when it is not. On a byte link only those
    bytes and the bit are stored (the higher bytes pass into the bit as they come); on a wider
    one the field is stored whole and seen the same way.

    Not a component: the command engine builds it into its own module (:meth:`expect` in the
    state that reads the header, :meth:`take` in the one that takes the block).

    Parameters
    ----------
    blocks : dict of Command to ParameterBlock
        The blocks of the commands the engine takes.
    width : int
        The most bytes a cycle (at most the link's).
    narrow : dict of Command to collection of str, optional
        Fields seen narrowed, of at most one command.
    narrow_max : int
        The largest value a narrowed field must hold exactly (default
        :data:`~maxaccel.contract.wire.WINDOW_FIELD_MAX`): :attr:`narrow_bytes` are its
        bytes.

    Attributes
    ----------
    block : Signal(8 * block_bytes)
        The register.
    fields : dict of Command to dict of str to Value
        Each command's fields by their contract names, as slices of :attr:`block` (valid once
        the block is in).
    needed : Signal
        Bytes of the current block on the wire (its fields and its padding).
    flags : Signal
        Behind a byte link, each narrowed field's bit (above the bound), in block order with
        the last at the top, as :attr:`block` holds the bytes.
    """

    def __init__(self, blocks, width=1, narrow=None, narrow_max=WINDOW_FIELD_MAX):
        self.blocks, self.width = blocks, width
        #: Bytes of a narrowed field the register keeps.
        self.narrow_bytes = (narrow_max.bit_length() + 7) // 8
        self.narrow = {code: set(names) for code, names in (narrow or {}).items() if names}
        assert len(self.narrow) <= 1, "fields narrowed in more than one command"
        self._dropped = width == 1 and bool(self.narrow)   # their high bytes left out
        self.block_bytes = max(self._stored_bytes(code) for code in blocks)
        self.wire_bytes = max(b.size for b in blocks.values())
        self.block = Signal(8 * self.block_bytes, name="block")
        self.flags = Signal(max((len(n) for n in self.narrow.values()), default=0), name="flags")
        self._narrowing = Signal(name="narrowing")     # the block's command narrows fields
        self._high = Signal(name="high")               # a high byte of this field is not 0
        self.needed = Signal(range(self.wire_bytes + 1), name="needed")
        self._stored = Signal(range(max(b.fields_size for b in blocks.values()) + 1),
                              name="stored")
        self._received = Signal(range(self.wire_bytes + 1), name="received")
        self.fields = {code: self._fields_of(code) for code in blocks}

    def _stored_bytes(self, code):
        """Bytes of ``code``'s fields the register keeps."""
        narrow = self.narrow.get(code, ()) if self._dropped else ()
        return sum(self.narrow_bytes if f.name in narrow else f.size
                   for f in self.blocks[code].fields)

    def _dropped_bytes(self, code):
        """Offsets in ``code``'s block of the narrowed fields' high bytes, and of their last."""
        narrow = self.narrow.get(code, ())
        fields = [f for f in self.blocks[code].fields if f.name in narrow]
        return ([f.offset + i for f in fields for i in range(self.narrow_bytes, f.size)],
                [f.offset + f.size - 1 for f in fields])

    def _fields_of(self, code):
        narrow = self.narrow.get(code, ())
        start = self.block_bytes - self._stored_bytes(code)
        flag = len(self.flags) - len(narrow)
        fields, narrowed = {}, self.narrow_bytes
        for f in self.blocks[code].fields:
            kept = self.narrow_bytes if self._dropped and f.name in narrow else f.size
            value = self.block[8 * start:8 * (start + kept)]
            start += kept
            if f.name in narrow:
                high = self.flags[flag] if self._dropped else value[8 * narrowed:].any()
                value, flag = Cat(value[:8 * narrowed], high), flag + 1
            fields[f.name] = value
        return fields

    def clear(self, m):
        """A new request: nothing received, no block expected (synchronous)."""
        m.d.sync += [self._received.eq(0), self.needed.eq(0), self._high.eq(0)]

    def expect(self, m, code):
        """The request's block is ``code``'s (synchronous, after :meth:`clear`)."""
        block = self.blocks[code]
        m.d.sync += [self.needed.eq(block.size), self._stored.eq(block.fields_size),
                     self._narrowing.eq(code in self.narrow)]

    def limit(self):
        """The most bytes the next transfer may bring: what is left of the block's fields, or
        of its padding once they are in, at most ``width`` (a value; 1 on a byte link)."""
        if self.width == 1:
            return 1
        in_fields = self._received < self._stored
        left = Mux(in_fields, self._stored, self.needed) - self._received
        return Mux(left < self.width, left, self.width)

    def take(self, m, data, count):
        """Take the first ``count`` bytes of ``data`` (at most :meth:`limit`; synchronous);
        returns the condition that they end the block."""
        m.d.sync += self._received.eq(self._received + count)
        with m.If(self._received < self._stored):
            if self.width == 1:
                self._take_byte(m, data[:8])
            else:
                with m.Switch(count):
                    for n in range(1, min(self.width, self.block_bytes) + 1):
                        with m.Case(n):
                            m.d.sync += self.block.eq(Cat(self.block[8 * n:], data[:8 * n]))
        return self._received + count == self.needed

    def _take_byte(self, m, byte):
        """A field byte on a byte link: shifted in, or for a narrowed field's high byte, kept
        only as whether it is 0 (the field's bit shifted into :attr:`flags` with its last)."""
        if not self._dropped:
            m.d.sync += self.block.eq(Cat(self.block[8:], byte))
            return
        (code, _), = self.narrow.items()
        dropped, last = self._dropped_bytes(code)
        drop, ends = Signal(name="high_byte"), Signal(name="high_byte_last")
        with m.Switch(self._received):
            with m.Case(*dropped):
                m.d.comb += drop.eq(self._narrowing)
        with m.Switch(self._received):
            with m.Case(*last):
                m.d.comb += ends.eq(self._narrowing)
        high = self._high | byte.any()
        with m.If(~drop):
            m.d.sync += self.block.eq(Cat(self.block[8:], byte))
        with m.Elif(ends):
            m.d.sync += [self.flags.eq(Cat(self.flags[1:], high)), self._high.eq(0)]
        with m.Else():
            m.d.sync += self._high.eq(high)
