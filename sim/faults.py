"""Link faults on purpose: a transport wrapper that damages bytes on their way, both directions.

:class:`Faulty` wraps any transport (a virtual board, a served port's serial transport, a
test's fake board) and drops, flips, inserts or duplicates bytes, at chosen offsets
(:class:`Fault`) or at random with a probability per byte (``fault_rate``). The test suite
checks the link's recovery with it, and ``python -m maxaccel.sim.soak`` drives every operation
through it for as many faults as asked.
"""

import collections
from dataclasses import dataclass

import numpy as np

__all__ = ["Fault", "Faulty", "KINDS", "TO_DEVICE", "TO_HOST", "inject"]

TO_DEVICE = "to_device"
TO_HOST = "to_host"
KINDS = ("drop", "flip", "insert", "duplicate")


@dataclass(frozen=True)
class Fault:
    """Damage byte ``offset`` (counted from the first byte ever sent that way) of a direction."""

    direction: str
    offset: int
    kind: str


def inject(data, start, faults):
    """``data`` (the bytes at offsets ``start`` on of a direction) with ``faults`` applied:
    a dropped byte is gone, a flipped one has bit 4 inverted, an inserted ``M`` goes before
    it, a duplicate repeats it."""
    out = bytearray(data)
    for fault in sorted((f for f in faults if start <= f.offset < start + len(data)),
                        key=lambda f: f.offset, reverse=True):
        i = fault.offset - start
        if fault.kind == "drop":
            del out[i]
        elif fault.kind == "flip":
            out[i] ^= 0x10
        elif fault.kind == "insert":
            out.insert(i, ord("M"))
        elif fault.kind == "duplicate":
            out.insert(i, out[i])
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")
    return bytes(out)


class Faulty:
    """A transport that damages the bytes of another on their way, in both directions.

    Parameters
    ----------
    inner : transport
        A virtual board, a serial transport, a test's fake board: any transport.
    faults : iterable of Fault
        Damage at given offsets (append more to :attr:`faults` at any time; :attr:`sent` gives
        the offset the next byte of each direction will have).
    fault_rate : float
        Probability that each byte, in each direction, is damaged (random kind), with ``seed``.
    close_inner : bool
        Whether :meth:`close` closes ``inner`` (not for a board shared between tests).

    Attributes
    ----------
    injected : int
        Faults applied so far.
    kinds : collections.Counter
        Faults applied, by ``(direction, kind)``.

    Other attributes are those of ``inner``.
    """

    def __init__(self, inner, faults=(), fault_rate=0.0, seed=0, close_inner=True):
        self.inner = inner
        self.faults = list(faults)
        self.fault_rate = fault_rate
        self.rng = np.random.default_rng(seed)
        self.close_inner = close_inner
        self.sent = {TO_DEVICE: 0, TO_HOST: 0}
        self.injected = 0
        self.kinds = collections.Counter()
        self.reply_timeout_s = getattr(inner, "reply_timeout_s", 1.0)
        self.write_chunk = getattr(inner, "write_chunk", 4096)
        self._held = bytearray()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _damage(self, direction, data):
        start = self.sent[direction]
        self.sent[direction] += len(data)
        faults = [f for f in self.faults if f.direction == direction]
        if self.fault_rate and data:
            count = self.rng.binomial(len(data), self.fault_rate)
            faults += [Fault(direction, start + int(i), KINDS[int(k)]) for i, k in zip(
                self.rng.choice(len(data), count, replace=False),
                self.rng.integers(0, len(KINDS), count))]
        if not faults:
            return data
        applied = [f for f in faults if start <= f.offset < start + len(data)]
        self.injected += len(applied)
        self.kinds.update((f.direction, f.kind) for f in applied)
        return inject(data, start, faults)

    def write(self, data):
        self.inner.write(self._damage(TO_DEVICE, bytes(data)))

    def read(self, size, timeout_s):
        if len(self._held) < size:
            self._held += self._damage(TO_HOST, self.inner.read(size - len(self._held),
                                                                timeout_s))
        data = bytes(self._held[:size])
        del self._held[:size]
        return data

    def reset_input(self):
        self._held.clear()
        self.inner.reset_input()

    def close(self):
        if self.close_inner:
            self.inner.close()
