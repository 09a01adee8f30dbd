"""The command engine's parameter register: a request's parameter block, its fields as slices.

Every data command's block comes from :mod:`maxaccel.contract.wire` (``parameter_block``), so
the engine and the host agree on it by construction; this module only maps it onto a register.
"""

from amaranth.hdl import Cat, Mux, Signal

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

    Not a component: the command engine builds it into its own module (:meth:`expect` in the
    state that reads the header, :meth:`take` in the one that takes the block).

    Parameters
    ----------
    blocks : dict of Command to ParameterBlock
        The blocks of the commands the engine takes.
    width : int
        The most bytes a cycle (at most the link's).

    Attributes
    ----------
    block : Signal(8 * block_bytes)
        The register.
    fields : dict of Command to dict of str to Value
        Each command's fields by their contract names, as slices of :attr:`block` (valid once
        the block is in).
    needed : Signal
        Bytes of the current block on the wire (its fields and its padding).
    """

    def __init__(self, blocks, width=1):
        self.blocks, self.width = blocks, width
        self.block_bytes = max(b.fields_size for b in blocks.values())
        self.wire_bytes = max(b.size for b in blocks.values())
        self.block = Signal(8 * self.block_bytes, name="block")
        self.needed = Signal(range(self.wire_bytes + 1), name="needed")
        self._stored = Signal(range(self.block_bytes + 1), name="stored")
        self._received = Signal(range(self.wire_bytes + 1), name="received")
        self.fields = {code: self._fields_of(code) for code in blocks}

    def _fields_of(self, code):
        start = self.block_bytes - self.blocks[code].fields_size
        return {f.name: self.block[8 * (start + f.offset):8 * (start + f.offset + f.size)]
                for f in self.blocks[code].fields}

    def clear(self, m):
        """A new request: nothing received, no block expected (synchronous)."""
        m.d.sync += [self._received.eq(0), self.needed.eq(0)]

    def expect(self, m, code):
        """The request's block is ``code``'s (synchronous, after :meth:`clear`)."""
        block = self.blocks[code]
        m.d.sync += [self.needed.eq(block.size), self._stored.eq(block.fields_size)]

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
                m.d.sync += self.block.eq(Cat(self.block[8:], data[:8]))
            else:
                with m.Switch(count):
                    for n in range(1, min(self.width, self.block_bytes) + 1):
                        with m.Case(n):
                            m.d.sync += self.block.eq(Cat(self.block[8 * n:], data[:8 * n]))
        return self._received + count == self.needed
