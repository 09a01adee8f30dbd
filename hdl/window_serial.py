"""Windowed max pooling (ONNX MaxPool) with the Indices, one compare at a time: for FPGAs whose
link is far slower than their clock.

:class:`SerialWindowMaxPool` has :class:`~maxaccel.hdl.window.WindowMaxPool`'s interface and
results, and spends cycles instead of logic: where the pipelined unit compares every tap of a
window in a tree, this one keeps each open window's running maximum (its key and the flat index
of the element that holds it) in block RAM and, for each element that comes, updates the windows
that hold it one after another, a read and a write each. A window's result leaves when the
input has passed its last element; windows open at once share the RAM as a ring.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data
from amaranth.lib.memory import Memory

from maxaccel.contract.dtypes import DType, format_of
from maxaccel.contract.pooling import serial_window_cycles

from .kit import SaturatingMultiplier, Unit, at_least, decode_format, from_key, to_keys
from .lane import ELEMENT_SIZES, LANE_BITS, LANE_BYTES
from .window import WindowMaxPool, axis_layout

__all__ = ["SerialWindowMaxPool"]


def _ceil_pow2(n):
    return 1 << max(0, (n - 1).bit_length())


def _saturating_increment(value, limit):
    return Mux(value >= limit, limit, value + 1)


class SerialWindowMaxPool(Unit):
    """Windowed max pooling of ``N x C`` images with the index of each maximum, one window
    update a cycle pair: :class:`~maxaccel.hdl.window.WindowMaxPool`'s streams, configuration,
    status and results (see there), in far less logic and more cycles.

    Each element of a lane (``8 / itemsize`` images side by side) is taken in turn; for it, every
    combination of the candidate windows along each axis (``max_extent`` candidates per axis,
    the windows whose span could hold the element) is visited: a window that holds the element
    (a tap of it lies there, the window exists) reads its running maximum from the RAM and
    writes back the larger (the element if its key is greater, or if it is the window's first
    element in row-major order, whose write starts the window). After a lane's updates, the
    windows whose last element has come leave in row-major order, the lane's elements read from
    the RAM one by one. A window's slot is its row-major output number modulo the ring's depth,
    which holds every window open at once: ``max_extent`` output rows of the innermost axis
    (``max_columns``) when the next axis has taps across rows, ``max_extent`` output planes
    (``max_plane``) when the outermost does.

    Parameters
    ----------
    max_rank, max_extent, max_columns, max_plane, dim_bits, dtype
        As :class:`~maxaccel.hdl.window.WindowMaxPool`'s.
    index_bits : int
        As :class:`~maxaccel.hdl.window.WindowMaxPool`'s, or 0: no indices (``o``'s
        ``index`` slots are empty, and neither the RAM nor the output keeps any).

    Ports and status
    ----------------
    As :class:`~maxaccel.hdl.window.WindowMaxPool`'s. ``config`` and ``dtype`` are read after
    reset or ``clear``: a new configuration takes a ``clear``. ``capacity_error`` is set
    after :attr:`settle` when the outermost axis has taps across planes and
    ``out[1] * out[2] > max_plane`` (rank 3).

    Latency and throughput
    ----------------------
    ``i.ready`` is low for the first :attr:`settle` cycles after reset or ``clear`` (the RAM's
    windows are marked unwritten, one address a cycle, and the plane's size is multiplied).
    Then a lane is taken when the unit is idle; each lane costs three cycles (taken, keyed, the
    check for windows to leave), ``2 * prod(max_extent) * elements`` cycles of updates
    (``elements = 8 / itemsize``), and for each window that leaves after it ``2 * elements +
    2`` cycles, plus any cycles the output's sink is not ready: :meth:`lane_cycles`. Each lane
    waits for the previous one's windows to leave. A window's result is taken by a ready sink
    ``2 + 2 * prod(max_extent) * elements + k * (2 * elements + 2)`` edges after the lane that
    completes it, the ``k``-th to leave after it.
    """

    class Signature(WindowMaxPool.Signature):
        """:class:`SerialWindowMaxPool`'s signature: ``SerialWindowMaxPool.Signature(*,
        max_rank=3, max_extent=3, max_columns=64, max_plane=1024, dim_bits=16,
        index_bits=32, dtype=None)``, checked as :class:`WindowMaxPool`'s; ``i.ready`` is a
        register (the unit's state)."""

        def __init__(self, *, max_rank=3, max_extent=3, max_columns=64, max_plane=1024,
                     dim_bits=16, index_bits=32, dtype=None):
            super().__init__(max_rank=max_rank, max_extent=max_extent, max_columns=max_columns,
                             max_plane=max_plane, dim_bits=dim_bits, index_bits=index_bits,
                             dtype=dtype)

        @classmethod
        def check_parameters(cls, *, max_rank=3, max_extent=3, max_columns=64, max_plane=1024,
                             dim_bits=16, index_bits=32, dtype=None, serial_products=False):
            if serial_products is not False:
                raise ValueError("SerialWindowMaxPool: its products are always serial")
            if index_bits == 0 and not isinstance(index_bits, bool):
                index_bits = 1          # no indices: checked as the narrowest
            return WindowMaxPool.Signature.check_parameters(
                max_rank=max_rank, max_extent=max_extent, max_columns=max_columns,
                max_plane=max_plane, dim_bits=dim_bits, index_bits=index_bits, dtype=dtype)

    def __init__(self, *, max_rank=3, max_extent=3, max_columns=64, max_plane=1024,
                 dim_bits=16, index_bits=32, dtype=None):
        super().__init__(max_rank=max_rank, max_extent=max_extent, max_columns=max_columns,
                         max_plane=max_plane, dim_bits=dim_bits, index_bits=index_bits,
                         dtype=dtype)
        extents = (max_extent,) * max_rank if isinstance(max_extent, int) else max_extent
        #: Largest kernel extent per axis, entry 0 the outermost.
        self.extents = tuple(extents)
        self.max_extent = max(self.extents)
        self.max_columns = max_columns if max_rank >= 2 else 1
        self.max_plane = max_plane if max_rank >= 3 else 1
        self.config_shape = data.ArrayLayout(axis_layout(dim_bits), max_rank)
        # The ring: every window open at once has a slot of its own.
        open_windows = [self.extents[-1] + 1]
        if max_rank >= 2:
            open_windows.append(self.extents[-2] * self.max_columns + self.extents[-1])
        if max_rank >= 3 and self.extents[0] > 1:
            open_windows.append(self.extents[0] * self.max_plane + self.extents[-1])
        #: Slots of the ring, per element of a lane.
        self.ring = _ceil_pow2(max(open_windows))
        sizes = (format_of(self.dtype).nbytes,) if isinstance(self.dtype, DType) else ELEMENT_SIZES
        #: Elements of a lane at most (images side by side).
        self.max_elements = LANE_BYTES // min(sizes)
        self.key_bits = 8 * max(sizes)
        # The plane's product (rank 3): two bits of a factor a cycle.
        plane_cycles = (dim_bits + 1) // 2 + 2
        #: Cycles ``i.ready`` stays low after reset or ``clear``: a slot of the RAM a cycle.
        self.settle = max(self.max_elements * self.ring, plane_cycles) + 1

    #: The capacities, by name, as :attr:`WindowMaxPool.limits`.
    limits = WindowMaxPool.limits

    def lane_cycles(self, elements, leaving):
        """Cycles from one lane taken to the next (an always-ready sink): ``elements`` images
        in the lane, ``leaving`` windows whose results leave after it
        (:func:`~maxaccel.contract.pooling.serial_window_cycles`)."""
        return serial_window_cycles(self.extents, elements, leaving)

    def elaborate(self, platform):
        m = Module()
        rank, bits, cfg = self.max_rank, self.index_bits, self.config
        fmt = decode_format(m, self.dtype, registered=False)
        ring_bits = (self.ring - 1).bit_length()
        element_bits = (self.max_elements - 1).bit_length()
        depth = self.max_elements * self.ring

        # --- Settle: mark every slot unwritten, multiply the plane. -------------------------
        settle = Signal(range(self.settle), init=self.settle - 1)
        settled = Signal()
        m.d.comb += settled.eq(settle == 0)
        with m.If(~settled):
            m.d.sync += settle.eq(settle - 1)

        memory = m.submodules.ring = Memory(
            shape=data.StructLayout({"key": self.key_bits, "index": bits, "written": 1}),
            depth=depth, init=[])
        read = memory.read_port()
        write = memory.write_port()

        plane_error = self._plane_capacity(m, settle)
        # Row-major output numbers (mod the ring) of one step of each axis.
        weights = [Const(1, ring_bits)] * rank
        if rank >= 2:
            weights[rank - 2] = cfg[rank - 1].out[:ring_bits]
        if rank >= 3:
            weights[0] = Signal(ring_bits, name="plane_weight")
            m.d.sync += weights[0].eq(cfg[1].out[:ring_bits] * cfg[2].out[:ring_bits])

        derived = [self._axis_constants(m, a) for a in range(rank)]
        self._checks(m, derived, plane_error)

        at = self._input_position(m, derived, weights, ring_bits)
        flat, seen = at.flat, at.seen

        # --- The updates: for each element, each combination of candidates. ---------------
        element = Signal(element_bits)
        last_element = Signal()
        m.d.comb += last_element.eq(
            element == Mux(fmt.size[0], 7, Mux(fmt.size[1], 3, Mux(fmt.size[2], 1, 0)))
            if self.max_elements > 1 else 1)
        keys = Signal(LANE_BITS)          # the lane's keys, element 0 at the bottom
        element_mask = Mux(fmt.size[0], 0xFF, Mux(fmt.size[1], 0xFFFF,
                           Mux(fmt.size[2], 0xFFFF_FFFF, (1 << 64) - 1)))
        new_key = Signal(self.key_bits)
        m.d.comb += new_key.eq((keys & element_mask)[:self.key_bits])
        visit = self._candidates(m, derived, weights, ring_bits, at)
        leave = self._outputs(m, derived, at, ring_bits)

        out_keys = Signal(LANE_BITS)
        index = Signal(data.ArrayLayout(bits, LANE_BYTES))
        written = Signal(init=1)

        def address(slot):                  # of the current element's entry
            return Cat(slot, element) if element_bits else slot

        m.d.comb += [read.addr.eq(0), write.en.eq(0)]
        with m.FSM() as fsm:
            with m.State("SETTLE"):
                m.d.comb += [write.addr.eq(settle[:(depth - 1).bit_length()]), write.en.eq(1),
                             write.data.eq(0)]
                m.d.sync += at.restart_all()
                m.d.sync += [leave.restart(), flat.eq(0), seen.eq(0), leave.done.eq(0)]
                with m.If(settled):
                    m.next = "TAKE"
            with m.State("TAKE"):
                m.d.comb += self.i.ready.eq(1)
                key, = to_keys(m, self.i.valid, fmt, [self.i.payload.data], latency=1)
                with m.If(self.i.valid):
                    m.d.sync += [element.eq(0), visit.reset(range(rank))]
                    m.next = "KEY"
            with m.State("KEY"):
                m.d.sync += keys.eq(key)
                m.next = "READ"
            with m.State("READ"):
                m.d.comb += read.addr.eq(address(visit.slot))
                m.next = "WRITE"
            with m.State("WRITE"):
                stored = read.data
                greater = new_key > stored.key
                m.d.comb += [
                    write.addr.eq(address(visit.slot)),
                    write.data.key.eq(new_key), write.data.index.eq(flat),
                    write.data.written.eq(1),
                    write.en.eq(visit.hit & (visit.starts | greater)),
                ]
                visit.step()
                m.next = "READ"
                with m.If(visit.last):
                    m.d.sync += keys.eq(Mux(fmt.size[0], keys >> 8, Mux(fmt.size[1], keys >> 16,
                                            Mux(fmt.size[2], keys >> 32, 0))))
                    m.d.sync += element.eq(element + 1)
                    with m.If(last_element):
                        m.d.sync += [seen.eq(1), element.eq(0)]
                        m.next = "LEAVE"
            with m.State("LEAVE"):
                # The input's position is this lane's; the windows it completes leave.
                with m.If(leave.complete):
                    with m.If(~self.o.valid | self.o.ready):
                        m.next = "LEAVE_READ"
                with m.Else():
                    at.step()
                    with m.If(Cat(at.last_pos).all()):
                        m.d.sync += leave.done.eq(0)
                    m.next = "TAKE"
            with m.State("LEAVE_READ"):
                m.d.comb += read.addr.eq(address(leave.slot))
                m.next = "LEAVE_WRITE"
            with m.State("LEAVE_WRITE"):
                stored = read.data
                m.d.comb += [
                    write.addr.eq(address(leave.slot)),
                    write.data.eq(0), write.en.eq(1),
                ]
                shifted = Mux(fmt.size[0], Cat(out_keys[8:], stored.key[:8]),
                              Mux(fmt.size[1], Cat(out_keys[16:], stored.key[:16]),
                                  Mux(fmt.size[2], Cat(out_keys[32:], stored.key[:32]),
                                      stored.key[:64] if self.key_bits >= 64
                                      else Cat(out_keys[self.key_bits:], stored.key))))
                m.d.sync += out_keys.eq(shifted)
                slot_of = Mux(fmt.size[0], element, Mux(fmt.size[1], element << 1,
                              Mux(fmt.size[2], element << 2, 0)))
                for k in range(LANE_BYTES):
                    with m.If(slot_of == k):
                        m.d.sync += index[k].eq(stored.index)
                with m.If(~stored.written):
                    m.d.sync += written.eq(0)
                m.next = "LEAVE_READ"
                m.d.sync += element.eq(element + 1)
                with m.If(last_element):
                    m.d.sync += element.eq(0)
                    m.next = "EMIT"
            with m.State("EMIT"):
                m.d.sync += [self.o.valid.eq(1), written.eq(1)]
                with m.If(~written):
                    m.d.sync += self.empty_window.eq(1)
                leave.step()
                m.next = "LEAVE"
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        # The result's keys and indices stay put until it is taken (the next one is gathered
        # after that).
        m.d.comb += [self.o.payload.data.eq(from_key(m, "from_key", fmt, out_keys)),
                     self.o.payload.index.eq(index)]
        m.d.comb += self.idle.eq(fsm.ongoing("TAKE") & ~seen & ~self.o.valid & (flat == 0)
                                 & Cat(p == 0 for p in at.pos).all())
        return ResetInserter(self.clear)(m)

    def _input_position(self, m, derived, weights, ring_bits):
        """Where the next lane lies: an odometer over the input, innermost axis fastest. Per
        axis the position (``pos``; ``pos_near``, saturating at the extent), ``(pos + pad) mod
        stride`` (``phase``), the newest window holding it (``(pos + pad) div stride``:
        ``newest``, saturating, and its output number's share mod the ring, ``share``), the
        windows after it (``left``) or beyond the last (``over``, saturating); the flat index
        of the element (``flat``) and whether a lane of the image has been updated
        (``seen``). ``restart_all()`` gives the statements of an image's start, ``step()``
        adds those of the next lane."""
        rank, dim_bits = self.max_rank, self.dim_bits
        extents = self.extents
        pos = [Signal(dim_bits, name=f"pos_{a}") for a in range(rank)]
        pos_near = [Signal(range(extents[a] + 1), name=f"pos_near_{a}") for a in range(rank)]
        phase = [Signal(dim_bits, name=f"phase_{a}") for a in range(rank)]
        newest = [Signal(range(extents[a] + 1), name=f"newest_{a}") for a in range(rank)]
        left = [Signal(dim_bits, name=f"left_{a}") for a in range(rank)]
        over = [Signal(range(extents[a] + 1), name=f"over_{a}") for a in range(rank)]
        share = [Signal(ring_bits, name=f"share_{a}") for a in range(rank)]
        flat = Signal(self.index_bits)
        seen = Signal()
        last_pos = [pos[a] == derived[a].size_less for a in range(rank)]

        def restart(a):
            d = derived[a]
            return [pos[a].eq(0), pos_near[a].eq(0), phase[a].eq(d.phase),
                    newest[a].eq(d.newest), left[a].eq(d.left), over[a].eq(d.over),
                    share[a].eq(d.newest * weights[a])]

        def advance(a):
            wrap = phase[a] == derived[a].stride_less
            m.d.sync += [pos[a].eq(pos[a] + 1),
                         pos_near[a].eq(_saturating_increment(pos_near[a], extents[a])),
                         phase[a].eq(Mux(wrap, 0, phase[a] + 1))]
            with m.If(wrap):
                m.d.sync += [newest[a].eq(_saturating_increment(newest[a], extents[a])),
                             share[a].eq(share[a] + weights[a])]
                with m.If(left[a] == 0):
                    m.d.sync += over[a].eq(_saturating_increment(over[a], extents[a]))
                with m.Else():
                    m.d.sync += left[a].eq(left[a] - 1)

        def restart_all():
            return [r for a in range(rank) for r in restart(a)]

        def step():
            with m.If(Cat(last_pos).all()):
                m.d.sync += restart_all() + [flat.eq(0), seen.eq(0)]
            with m.Else():
                carry = 1
                for a in reversed(range(rank)):
                    with m.If(carry):
                        with m.If(last_pos[a]):
                            m.d.sync += restart(a)
                        with m.Else():
                            advance(a)
                    carry = carry & last_pos[a]
                m.d.sync += flat.eq(flat + 1)

        return SimpleNamespace(pos=pos, pos_near=pos_near, phase=phase, newest=newest,
                               over=over, share=share, flat=flat, seen=seen,
                               last_pos=last_pos, restart_all=restart_all, step=step)

    def _candidates(self, m, derived, weights, ring_bits, at):
        """The candidate windows of an element, one combination a visit: per axis candidate
        ``n`` is window ``newest - n``, which exists if ``over <= n <= newest`` and holds the
        element if its tap offset there (``phase + n * stride``, saturating at the extent) is
        one of its taps. ``hit``: the combination holds the element; ``starts``: it is the
        window's first element (every axis at its first tap in the image); ``slot``: the
        window's slot in the ring; ``last``: the last combination. ``reset(axes)`` gives the
        statements that start the axes over, ``step()`` adds those of the next combination."""
        rank, extents = self.max_rank, self.extents
        candidate = [Signal(range(max(extents[a], 2)), name=f"candidate_{a}")
                     for a in range(rank)]
        offset = [Signal(range(extents[a] + 1), name=f"offset_{a}") for a in range(rank)]
        back = [Signal(ring_bits, name=f"back_{a}") for a in range(rank)]
        last_candidate = [candidate[a] == extents[a] - 1 for a in range(rank)]
        holds, first = [], []
        for a in range(rank):
            d = derived[a]
            exists = (candidate[a] <= at.newest[a]) & (candidate[a] >= at.over[a])
            on_tap = Cat((offset[a] == t) & d.mask[t] for t in range(extents[a])).any()
            holds.append(exists & on_tap)
            first.append((offset[a] == 0) | (at.pos_near[a] < d.dilation))
        slot = Signal(ring_bits)
        m.d.comb += slot.eq(sum(at.share, Const(0, ring_bits)) - sum(back, Const(0, ring_bits)))

        def reset(axes):
            return ([candidate[a].eq(0) for a in axes]
                    + [offset[a].eq(Mux(at_least(at.phase[a], extents[a]), extents[a],
                                        at.phase[a])) for a in axes]
                    + [back[a].eq(0) for a in axes])

        def step():
            carry = 1
            for a in reversed(range(rank)):
                with m.If(carry):
                    with m.If(last_candidate[a]):
                        m.d.sync += reset([a])
                    with m.Else():
                        moved = offset[a] + derived[a].stride
                        m.d.sync += [candidate[a].eq(candidate[a] + 1),
                                     offset[a].eq(Mux(moved >= extents[a], extents[a], moved)),
                                     back[a].eq(back[a] + weights[a])]
                carry = carry & last_candidate[a]

        return SimpleNamespace(hit=Cat(holds).all(), starts=Cat(first).all(), slot=slot,
                               last=Cat(last_candidate).all(), reset=reset, step=step)

    def _outputs(self, m, derived, at, ring_bits):
        """The windows that leave: an odometer over the outputs in row-major order, with each
        window's last tap per axis (``reach``). ``complete``: the next window's last element
        (row-major, the last tap clipped to the image) has been updated; ``slot``: its slot in
        the ring; ``done``: every window of the image has left. ``restart()`` gives the
        statements of an image's start, ``step()`` adds those of the next window."""
        rank, cfg = self.max_rank, self.config
        out_at = [Signal(self.dim_bits, name=f"out_at_{a}") for a in range(rank)]
        reach = [Signal(self.dim_bits + 2, name=f"reach_{a}") for a in range(rank)]
        slot = Signal(ring_bits)
        done = Signal()
        # Passed: beyond the last element on an axis, or at it (at the reach, or the axis's
        # last position when the reach lies beyond) and passed on the inner axes.
        passed = Const(1)
        for a in reversed(range(rank)):
            behind = at.pos[a] - reach[a]
            reached = ~behind[-1] | at.last_pos[a]
            passed = (~behind[-1] & (behind != 0)) | (reached & passed)
        complete = Signal()
        m.d.comb += complete.eq(at.seen & ~done & passed)
        out_last = [out_at[a] == derived[a].out_less for a in range(rank)]

        def restart():
            return ([out_at[a].eq(0) for a in range(rank)]
                    + [reach[a].eq(derived[a].reach) for a in range(rank)] + [slot.eq(0)])

        def step():
            m.d.sync += slot.eq(slot + 1)
            with m.If(Cat(out_last).all()):
                m.d.sync += restart() + [done.eq(1)]
            with m.Else():
                carry = 1
                for a in reversed(range(rank)):
                    with m.If(carry):
                        with m.If(out_last[a]):
                            m.d.sync += [out_at[a].eq(0), reach[a].eq(derived[a].reach)]
                        with m.Else():
                            m.d.sync += [out_at[a].eq(out_at[a] + 1),
                                         reach[a].eq(reach[a] + cfg[a].stride)]
                    carry = carry & out_last[a]

        return SimpleNamespace(complete=complete, slot=slot, done=done, restart=restart,
                               step=step)

    def _plane_capacity(self, m, settle):
        """Whether the output plane, ``out[1] * out[2]``, is above ``max_plane`` (a register,
        valid once settled); only when the outermost axis has taps across planes."""
        if self.max_rank < 3 or self.extents[0] == 1:
            return Const(0)
        multiplier = m.submodules.plane = SaturatingMultiplier(width=self.dim_bits,
                                                               digit_bits=2)
        m.d.comb += [multiplier.start.eq(settle == self.settle - 1),
                     multiplier.a.eq(self.config[1].out), multiplier.b.eq(self.config[2].out)]
        return (multiplier.overflow | (multiplier.product > self.max_plane)) & (settle == 0)

    def _axis_constants(self, m, a):
        """Axis ``a``'s constants, registered: the taps' offsets in a window (``mask``), the
        stride and dilation saturated at the extent (beyond it no second tap falls in a span),
        ``(kernel - 1) * dilation`` (``span``), the newest window holding position 0 (``pad
        div stride``) and the offset there (``pad mod stride``), the windows after it
        (``left``) or beyond the last (``over``), and the first window's last tap (``reach``,
        ``span - pad``). ``pad`` is at most the span (the configuration check), so all of it
        is arithmetic on a few bits, a register a step (three deep)."""
        cfg, extent = self.config[a], self.extents[a]
        small = extent.bit_length() + 1

        def near(name, value):
            saturated = Signal(small, name=f"{name}_{a}")
            m.d.sync += saturated.eq(Mux(at_least(value, extent), extent, value))
            return saturated

        stride, dilation, pad = near("stride", cfg.stride), near("dilation", cfg.dilation), \
            near("pad", cfg.pad)
        kernel = near("kernel", cfg.kernel)
        mask = Signal(extent, name=f"mask_{a}")
        m.d.sync += mask.eq(Cat(
            Cat((j < kernel) & (j * dilation == t) for j in range(extent)).any()
            for t in range(extent)))
        span = Signal(2 * small, name=f"span_{a}")
        m.d.sync += span.eq((kernel - 1) * dilation)
        # A register a step: they are the configuration's, settled long before an image.
        newest = Signal(small, name=f"newest0_{a}")
        m.d.sync += newest.eq(sum((pad >= t * stride for t in range(1, extent)),
                                  Const(0, small)))
        phase = Signal(small, name=f"pad_mod_{a}")
        left = Signal(self.dim_bits, name=f"left0_{a}")
        over = Signal(small, name=f"over0_{a}")
        reach = Signal(2 * small, name=f"reach0_{a}")
        stride_less, size_less, out_less = (
            Signal(self.dim_bits, name=f"{name}_less_{a}") for name in ("stride", "size", "out"))
        m.d.sync += [stride_less.eq(cfg.stride - 1), size_less.eq(cfg.size - 1),
                     out_less.eq(cfg.out - 1)]
        beyond = out_less - newest
        m.d.sync += [phase.eq(pad - newest * stride), reach.eq(span - pad),
                     left.eq(Mux(beyond[-1], 0, beyond)),
                     over.eq(Mux(beyond[-1], -beyond, 0))]
        return SimpleNamespace(mask=mask, span=span, stride=stride, stride_less=stride_less,
                               size_less=size_less, out_less=out_less, dilation=dilation,
                               kernel_wide=at_least(cfg.kernel, extent + 1), newest=newest,
                               phase=phase, left=left, over=over, reach=reach, pad=pad)

    def _checks(self, m, derived, plane_error):
        cfg, rank = self.config, self.max_rank
        refused = []
        for a in range(rank):
            d = derived[a]
            refused += [cfg[a].size == 0, cfg[a].out == 0, cfg[a].kernel == 0,
                        cfg[a].stride == 0, cfg[a].dilation == 0, d.kernel_wide,
                        at_least(d.span, self.extents[a]), d.span < d.pad]
        if rank >= 2:
            refused.append(at_least(cfg[rank - 1].out, self.max_columns + 1)
                           & at_least(cfg[rank - 2].kernel, 2))
        m.d.sync += self.config_error.eq(Cat(refused).any())
        with m.If(plane_error & at_least(cfg[0].kernel, 2)):
            m.d.sync += self.capacity_error.eq(1)
