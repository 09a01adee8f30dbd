"""The command engine's parameter register: a request's parameter block, its fields as slices.

Every data command's block comes from :mod:`maxaccel.contract.wire` (``parameter_block``), so
the engine and the host agree on it by construction; this module only maps it onto a register.
"""

from amaranth.hdl import Cat, Signal

__all__ = ["ParameterRegister"]


class ParameterRegister:
    """A shift register that takes a request's parameter block a byte at a time.

    The bytes of a block of N field bytes end up in the register's top N bytes, so every field
    of every command is a fixed slice (:attr:`fields`), whatever command the block was for.
    Only a block's fields are stored: its padding (``PAYLOAD_ALIGN``) is counted, not kept.

    Not a component: the command engine builds it into its own module (:meth:`expect` in the
    state that reads the header, :meth:`take` in the one that takes the block).

    Parameters
    ----------
    blocks : dict of Command to ParameterBlock
        The blocks of the commands the engine takes.

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

    def __init__(self, blocks):
        self.blocks = blocks
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

    def take(self, m, byte):
        """Take ``byte`` of the block (synchronous); returns the condition that it is the
        block's last."""
        m.d.sync += self._received.eq(self._received + 1)
        with m.If(self._received < self._stored):
            m.d.sync += self.block.eq(Cat(self.block[8:], byte))
        return self._received == self.needed - 1
