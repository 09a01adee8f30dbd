"""Windowed max pooling (ONNX MaxPool) of a stream of elements, with the Indices.

:class:`WindowMaxPool` takes the elements of ``N x C`` images one after another, each image's
spatial elements in row-major order, and returns for each image its pooled outputs in row-major
order, each with the flat spatial index of the element that won. See ``docs/architecture.md``,
"Windowed max pooling".

On order keys the maximum is associative, so a window separates into one pass per spatial axis,
innermost first: the innermost pass takes each input row and emits, per output column, the
maximum of that column's taps along the row; the next pass takes those rows and emits, per output
row, the maximum over its taps along the next axis; and so on. Each pass is the same
:class:`AxisPass`: a delay line holding the items of the last ``max_extent - 1`` steps of its
axis (registers for the innermost axis, block RAM line buffers for the others), a tree of
compares over the taps the kernel and dilation select, and counters that say where windows end.

Each element is compared on its own, so a 64-bit lane carries one to eight images side by side
(:class:`~maxaccel.hdl.window_lanes.WindowLanes` puts a unit on each lane of the command engine's beats). What follows a
value through the passes is not its index but, per pass, the number of the tap that won (a few
bits per element); the unit's output stage turns them and the window's position into the flat
index.
"""

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, ResetInserter, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import DType
from maxaccel.contract.pooling import WINDOW_FIELDS

from .kit import (SaturatingMultiplier, Stall, Unit, UnitSignature, check_dtype, decode_format,
                  from_key, register, to_keys)
from .lane import (ELEMENT_SIZES, LANE_BITS, LANE_BYTES, byte, key_compare_level,
                   spans_at_least)

__all__ = ["axis_layout", "item_layout", "AxisPass", "WindowMaxPool"]



def axis_layout(dim_bits):
    """The configuration of one spatial axis.

    Fields
    ------
    size : dim_bits
        Input length ``D`` along the axis (>= 1).
    pad : dim_bits
        Padding at the beginning (``pads[axis]`` of ONNX). The padding at the end is implied
        by ``out``.
    out : dim_bits
        Output length (>= 1): windows ``0 .. out - 1``; window ``o`` has taps at input
        positions ``o * stride - pad + j * dilation`` for ``j`` in ``0 .. kernel - 1``; taps
        outside ``0 .. size - 1`` are padding and never contribute.
    kernel, stride, dilation : dim_bits
        >= 1 each; the extent ``(kernel - 1) * dilation + 1`` at most ``max_extent``.
    """
    return data.StructLayout({name: dim_bits for name in WINDOW_FIELDS})


def tap_bits(max_extent):
    """Bits of a tap number (``0 .. max_extent - 1``)."""
    return max(1, (max_extent - 1).bit_length())


def tap_field(axis):
    """Name of axis ``axis``'s field in a slot of :func:`item_layout`'s ``taps``."""
    return f"axis{axis}"


def item_layout(extents):
    """What travels between the passes: a lane of order keys (the elements of several images,
    packed as in :class:`~maxaccel.hdl.lane.LaneMax`), a *slot* of tap numbers per byte, and
    ``real`` (clear for padding, the same for every element).

    ``extents`` are the passes' delay lines, per axis (entry 0 the outermost). Slot ``k`` is
    for the element that starts at byte ``k`` (the slots inside an element are don't-care):
    field :func:`tap_field` ``(a)`` (``tap_bits(extents[a])`` wide) is the tap that won in the
    pass of axis ``a``, counted in steps back from the window's last tap. With the window's
    position that gives the winner's index (:class:`WindowMaxPool`), so an item carries a few
    bits per element where a 32-bit index would be.
    """
    slot = data.StructLayout({tap_field(a): tap_bits(e) for a, e in enumerate(extents)})
    return data.StructLayout({
        "key": LANE_BITS, "taps": data.ArrayLayout(slot, LANE_BYTES), "real": 1})


def _tree_levels(taps):
    return max(1, (taps - 1).bit_length())


def _pass_latency(max_extent, depth):
    """:attr:`AxisPass.latency`: the tap stage, the read data registered (block RAM only), two
    cycles per tree level, the output."""
    return 2 + (depth > 1) + 2 * _tree_levels(max_extent)


class AxisPass(wiring.Component):
    """One axis of a windowed max pool: a stream of items in steps of that axis in, the
    maximum over each window's taps out.

    The input is a sequence of *images* of this axis: ``size`` steps, each step a row of
    ``prod(out)`` items of the inner axes (one item for the innermost axis), the items of a row
    in order. The output is ``out`` rows of the same length per image: output row ``o``,
    column ``c`` is the earliest item of greatest key (``real`` items only) among column ``c``
    of the input steps ``o * stride - pad + j * dilation``, ``j < kernel``, that lie inside the
    image. Ties keep the earlier step, so passes chained innermost first pick the first element
    in row-major window order.

    Rows are kept in a *delay line*: ``max_extent - 1`` registers (``depth == 1``) or block RAMs
    of ``depth`` entries, tap ``t`` holding the item of the same column ``t`` steps ago. A step
    at which window ``o`` ends (its last tap) sends the row's items, each with the maximum of its
    selected taps, to the output. Windows that end beyond the last step (right padding) are
    closed by a *tail* of ``T = max(0, (out - 1) * stride - pad + (kernel - 1) * dilation - size
    + 1)`` steps of one row each per image. If the next image's first item is there at the
    tail's first item, and none of its windows ends within ``T`` steps (``T <= (kernel - 1) *
    dilation - pad``) and it is longer (``T < size``), the tail *overlaps* it: its steps are the
    next image's first ``T`` steps, which the tail's windows take as padding (a second
    thermometer beside the one of steps seen) while the next image's counters start ``T``
    steps in. Else the tail is ``T`` *virtual* steps of padding items the pass makes itself,
    the input not ready meanwhile: a stream may end after any image, so the pass never waits
    for the next.

    Parameters
    ----------
    axis : int
        Which entry of ``config`` this pass reads.
    inner : sequence of int
        The axes inside this one (their ``out`` make the row length).
    extents : sequence of int
        Taps of each axis's delay line, the largest ``(kernel - 1) * dilation + 1`` (entry 0
        the outermost axis); this pass has ``extents[axis]`` taps, the others size the items'
        tap fields (:func:`item_layout`).
    depth : int
        Items a row may hold (1 for the innermost axis: registers, no memory).
    config_shape : Layout
        Shape of ``config`` (an array of :func:`axis_layout`).
    dim_bits : int
        Width of the configuration fields.
    reach : Signal, optional
        ``(out - 1) * stride`` of this axis, computed by the unit (``serial_products`` of
        :class:`WindowMaxPool`); without it the pass multiplies for itself.

    Attributes
    ----------
    latency : int
        Clock edges from an item taken on ``i`` to its window result taken from ``o`` (by a
        ready sink, if a window ends at its step): ``2 + 2 * max(1, ceil(log2(extent)))``
        (``extent = extents[axis]``), plus 1 with block RAM (``depth > 1``).

    Ports
    -----
    i, o : stream of :func:`item_layout`
    config : In(config_shape)
        Static while an image is in flight.
    size : In(4)
        One-hot element size (``LaneFormat.size``), static like ``config``: each element of
        the lane is compared on its own and keeps its own index.
    config_error : Out(1)
        Registered: this axis's configuration is refused (see :class:`WindowMaxPool`).
    capacity_error : Out(1)
        Sticky: a row longer than ``depth`` items came while taps beyond the first are used.
    idle : Out(1)
        Between images, nothing in flight.
    """

    def __init__(self, axis, inner, extents, depth, config_shape, dim_bits, reach=None):
        self.axis = axis
        self._reach = reach
        self.inner = tuple(inner)
        self.extents = tuple(extents)
        self.max_extent = self.extents[axis]
        self.depth = depth
        self.dim_bits = dim_bits
        self.levels = _tree_levels(self.max_extent)
        self.latency = _pass_latency(self.max_extent, depth)
        items = stream.Signature(item_layout(self.extents))
        super().__init__({
            "i": In(items), "o": Out(items),
            "config": In(config_shape),
            "size": In(len(ELEMENT_SIZES)),
            "config_error": Out(1), "capacity_error": Out(1), "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        extent, dim_bits = self.max_extent, self.dim_bits
        item_shape = self.i.payload.shape()
        derived = self._configuration(m)
        mask, wide, windows, windows_one = (derived.mask, derived.wide, derived.windows,
                                            derived.windows_one)
        first_gap, first_gap_zero = derived.first_gap, derived.first_gap_zero
        stride_less, stride_one = derived.stride_less, derived.stride_one
        size_less, size_one = derived.size_less, derived.size_one
        inner_last, inner_one = derived.inner_last, derived.inner_one
        overlap_ok, follow_gap, follow_gap_zero = (derived.overlap_ok, derived.follow_gap,
                                                   derived.follow_gap_zero)
        follow_rows, follow_rows_zero = derived.follow_rows, derived.follow_rows_zero
        gap_shape = derived.gap_shape

        # --- Counters: where the next item of the image is. Each counts down and keeps
        # flags of its next zero tests, set when it is loaded, so a step's decisions are a
        # few gates of flip-flops, never a compare or an add. ----------------------------
        gap = Signal(gap_shape)                   # steps until the next window ends
        gap_zero = Signal()
        rows_after = Signal(dim_bits)             # real steps after this one
        rows_zero = Signal()
        windows_left = Signal(dim_bits)           # windows not closed yet
        windows_zero, windows_single = Signal(), Signal()
        virtual = Signal()                        # this step is past the last real one
        tail_first = Signal()                     # ... and the first such (nothing fired yet)
        overlap = Signal()                        # the tail takes the next image's steps
        seen = Signal(extent)                     # bit t: at least t + 1 steps before this one
        fresh = Signal(extent)                    # bit t: t + 1 steps of the next image before
        at_start = Signal(init=1)                 # no item of the image has come yet
        # The column of the item in the row: one count-down per inner axis, an odometer.
        columns = [Signal(dim_bits, name=f"column_{b}") for b in self.inner]
        columns_zero = [Signal(name=f"column_{b}_zero") for b in self.inner]
        address = Signal(range(self.depth + 1))   # the column, counting up; saturates at depth
        row_end = Cat(columns_zero).all() if columns else 1
        ends = Signal()                           # a window ends at this step
        m.d.comb += ends.eq(~windows_zero & (gap_zero | gap[-1]))

        def reload_columns():
            return ([c.eq(last) for c, last in zip(columns, inner_last)]
                    + [z.eq(one) for z, one in zip(columns_zero, inner_one)]
                    + [address.eq(0)])

        def restart():
            return [gap.eq(first_gap), gap_zero.eq(first_gap_zero),
                    rows_after.eq(size_less), rows_zero.eq(size_one),
                    windows_left.eq(windows), windows_zero.eq(0), windows_single.eq(windows_one),
                    virtual.eq(0), tail_first.eq(0), overlap.eq(0), seen.eq(0), fresh.eq(0),
                    at_start.eq(1)] + reload_columns()

        def follow():
            # The next image, whose first ``tail`` steps the tail took.
            return [gap.eq(follow_gap.as_signed()), gap_zero.eq(follow_gap_zero),
                    rows_after.eq(follow_rows), rows_zero.eq(follow_rows_zero),
                    windows_left.eq(windows), windows_zero.eq(0), windows_single.eq(windows_one),
                    virtual.eq(0), tail_first.eq(0), overlap.eq(0),
                    seen.eq(Cat(1, fresh[:-1])), fresh.eq(0), at_start.eq(0)] + reload_columns()

        # --- The pipeline: stage A (now), B (taps), the compare tree. ----------------------
        # One enable for every stage, a register: high unless the skid register behind the
        # output register holds an item, so ``i.ready`` never depends on ``o.ready``.
        # In a tail the input is taken only if the tail overlaps the next image: decided at the
        # tail's first item, by whether the next image's first item is there (a stream may end
        # after any image, so the pass never waits for one); then every step of the tail takes
        # one (the next image is longer than the tail), else none does (virtual steps).
        advance = Signal(init=1)
        takes = Signal()                          # an item of the input may be taken now
        m.d.comb += takes.eq(~virtual | overlap | (tail_first & overlap_ok))
        m.d.comb += self.i.ready.eq(advance & takes)
        taking = Signal()
        m.d.comb += taking.eq(advance & takes & self.i.valid)
        fire = Signal()
        m.d.comb += fire.eq(taking | advance & virtual & ~overlap)
        ahead = Signal()                          # the item is the next image's, in a tail
        m.d.comb += ahead.eq(virtual & taking)
        entering = Signal(item_shape)
        with m.If(takes & self.i.valid):
            m.d.comb += entering.eq(self.i.payload)

        with m.If(fire):
            m.d.sync += [at_start.eq(0), tail_first.eq(0)]
            with m.If(ahead):
                m.d.sync += overlap.eq(1)
            with m.If(row_end):
                last_real = virtual | rows_zero
                with m.If(last_real & Mux(ends, windows_single, windows_zero)):
                    with m.If(ahead):
                        m.d.sync += follow()
                    with m.Else():
                        m.d.sync += restart()
                with m.Else():
                    with m.If(ends):
                        m.d.sync += [gap.eq(stride_less), gap_zero.eq(stride_one),
                                     windows_left.eq(windows_left - 1),
                                     windows_zero.eq(windows_single),
                                     windows_single.eq(windows_left == 2)]
                    with m.Else():
                        m.d.sync += [gap.eq(gap - 1), gap_zero.eq(gap == 1)]
                    m.d.sync += [
                        virtual.eq(last_real),
                        tail_first.eq(last_real & ~virtual),
                        rows_after.eq(rows_after - 1),
                        rows_zero.eq(rows_after == 1),
                        seen.eq(Cat(1, seen[:-1])),
                    ]
                    with m.If(ahead):
                        m.d.sync += fresh.eq(Cat(1, fresh[:-1]))
                    m.d.sync += reload_columns()
            with m.Else():
                # The innermost column counts down; at zero it reloads and the next one counts.
                carry = 1
                for c, z, last, one in reversed(list(zip(columns, columns_zero, inner_last,
                                                         inner_one))):
                    with m.If(carry):
                        with m.If(z):
                            m.d.sync += [c.eq(last), z.eq(one)]
                        with m.Else():
                            m.d.sync += [c.eq(c - 1), z.eq(c == 1)]
                    carry = carry & z
                with m.If(address != self.depth):
                    m.d.sync += address.eq(address + 1)
            with m.If((address == self.depth) & wide):
                m.d.sync += self.capacity_error.eq(1)
        with m.Elif(at_start):
            # Between images the counters follow the configuration.
            m.d.sync += restart()

        self._taps_and_compares(m, advance, fire, entering, ends=ends, mask=mask, seen=seen,
                                ahead=ahead, fresh=fresh, address=address, at_start=at_start)
        return m

    def _configuration(self, m):
        """The configuration, derived and registered (static during an image). Returns the
        registers."""
        extent, dim_bits = self.max_extent, self.dim_bits
        cfg = self.config[self.axis]
        multiples = [j * cfg.dilation for j in range(extent)]
        mask = register(m, 1, Cat(
            Cat((j < cfg.kernel) & (multiples[j] == t) for j in range(extent)).any()
            for t in range(extent)), "tap_mask")
        # (kernel - 1) * dilation if kernel <= extent; then the checks and the first gap from
        # it, a register later (the configuration's paths are as short as the datapath's).
        span = Signal(2 * dim_bits)
        for j in range(extent):
            with m.If(cfg.kernel == j + 1):
                m.d.comb += span.eq(multiples[j])
        span = register(m, 1, span, "span")
        zero_field = register(m, 1, (cfg.kernel == 0) | (cfg.stride == 0) | (cfg.dilation == 0)
                              | (cfg.size == 0) | (cfg.out == 0) | (cfg.kernel > extent),
                              "zero_field")
        m.d.sync += self.config_error.eq(zero_field | (span >= extent) | (span < cfg.pad))
        # Steps from the image's first to the end of window 0 (negative only if refused).
        gap_shape = signed(dim_bits + 2)
        first_gap = Signal(gap_shape)
        m.d.comb += first_gap.eq(span - cfg.pad)
        first_gap = register(m, 1, first_gap, "first_gap").as_signed()
        stride_less = register(m, 1, cfg.stride - 1, "stride_less")
        size_less = register(m, 1, cfg.size - 1, "size_less")
        windows = register(m, 1, cfg.out, "windows")
        wide = register(m, 1, mask[1:].any(), "wide")   # some tap beyond the newest is used
        inner_last = [register(m, 1, self.config[b].out - 1, f"last_{b}") for b in self.inner]
        # The zero tests of the counters' start values, registered too.
        first_gap_zero = register(m, 1, first_gap == 0, "first_gap_zero")
        stride_one = register(m, 1, cfg.stride == 1, "stride_one")
        size_one = register(m, 1, cfg.size == 1, "size_one")
        windows_one = register(m, 1, cfg.out == 1, "windows_one")
        inner_one = [register(m, 1, self.config[b].out == 1, f"one_{b}") for b in self.inner]
        # The tail: virtual steps after an image's last real step, ``end - size + 1`` where
        # ``end = (out - 1) * stride + first_gap`` is the last window's last tap. The tail may
        # take the next image's first steps instead (it treats them as padding) when none of
        # that image's windows ends during it (tail <= first_gap) and that image is longer
        # (tail < size); the counters of the next image after the tail are then constants.
        reach = self._reach
        if reach is None:
            reach = register(m, 1, (cfg.out - 1) * cfg.stride, "reach")
        tail_shape = signed(2 * dim_bits + 3)
        tail = Signal(tail_shape)
        m.d.comb += tail.eq(reach + first_gap - size_less)
        tail = register(m, 1, tail, "tail").as_signed()
        overlap_ok = register(m, 1, (tail > 0) & (tail <= first_gap) & (tail <= size_less),
                              "overlap_ok")
        follow_gap = register(m, 1, (first_gap - tail)[:dim_bits + 2], "follow_gap")
        follow_gap_zero = register(m, 1, tail == first_gap, "follow_gap_zero")
        follow_rows = register(m, 1, (size_less - tail)[:dim_bits], "follow_rows")
        follow_rows_zero = register(m, 1, tail == size_less, "follow_rows_zero")
        return SimpleNamespace(gap_shape=gap_shape, mask=mask, first_gap=first_gap,
                               stride_less=stride_less, size_less=size_less,
                               windows=windows, wide=wide,
                               inner_last=inner_last, first_gap_zero=first_gap_zero,
                               stride_one=stride_one, size_one=size_one,
                               windows_one=windows_one, inner_one=inner_one,
                               overlap_ok=overlap_ok, follow_gap=follow_gap,
                               follow_gap_zero=follow_gap_zero, follow_rows=follow_rows,
                               follow_rows_zero=follow_rows_zero)

    def _taps_and_compares(self, m, advance, fire, entering, *, ends, mask, seen, ahead, fresh,
                           address, at_start):
        """Stage B (the taps, from the line buffers) and the compare tree, to the output."""
        extent = self.max_extent
        item_shape = self.i.payload.shape()
        b_valid = _valid_register(m, advance, fire, "b_valid")
        b_item = Signal(item_shape, name="b_item")
        with m.If(advance):
            m.d.sync += b_item.eq(entering)
        b_ends = register(m, advance, ends, "b_ends")
        # Taps before the image are padding, and so, in a tail, are the next image's.
        b_use = register(m, advance, _tail_use(Cat(1, mask[1:] & seen[:-1]),
                                               Cat(ahead, fresh[:-1])), "b_use")
        b_address = register(m, advance, address, "b_address")
        stored = [b_item]                         # tap t: the item t steps ago, same column
        storing = advance & b_valid
        if self.depth == 1:
            for t in range(1, extent):
                held = Signal(item_shape, name=f"tap_{t}")
                with m.If(storing):
                    m.d.sync += held.eq(stored[-1])
                stored.append(held)
        else:
            for t in range(1, extent):
                line = m.submodules[f"line_{t}"] = Memory(
                    shape=item_shape, depth=self.depth, init=[])
                write = line.write_port()
                read = line.read_port(transparent_for=(write,))
                m.d.comb += [
                    read.en.eq(advance),
                    read.addr.eq(Mux(address != self.depth, address, 0)),
                    write.en.eq(storing & (b_address != self.depth)),
                    write.addr.eq(b_address),
                    write.data.eq(stored[-1]),
                ]
                stored.append(read.data)

        # The taps in scan order (oldest first), unselected ones as padding, each element's tap
        # field of this axis set to the tap's number.
        taps = []
        for t in reversed(range(extent)):
            tap = Signal(item_shape, name=f"use_{t}")
            m.d.comb += [tap.eq(stored[t]), tap.real.eq(stored[t].real & b_use[t])]
            m.d.comb += [tap.taps[k][tap_field(self.axis)].eq(t) for k in range(LANE_BYTES)]
            taps.append(tap)
        valid = b_valid & b_ends
        valids = [b_valid]
        if self.depth > 1:
            # The block RAM's read data get a cycle to themselves (its clock-to-output is slow:
            # 5.6 ns on the ECP5), the taps registered before the compares.
            registered = []
            for t, tap in enumerate(taps):
                held = Signal(item_shape, name=f"held_{t}")
                with m.If(advance):
                    m.d.sync += held.eq(tap)
                registered.append(held)
            taps = registered
            valid = _valid_register(m, advance, valid, "held_valid")
            valids.append(valid)
        at_least = spans_at_least(self.size)
        for level in range(self.levels):
            merged = []
            for k in range(0, len(taps), 2):
                merged.append(_earliest_max(m, f"max_{level}_{k // 2}", advance, at_least,
                                            *taps[k:k + 2]))
            taps = merged
            halfway = _valid_register(m, advance, valid, f"valid_{level}_a")
            valid = _valid_register(m, advance, halfway, f"valid_{level}_b")
            valids += [halfway, valid]
        assert len(taps) == 1
        # The result goes into the output register if that is free or being taken, else into
        # the skid register (empty whenever the pipeline advances), which refills the output
        # register when it is taken.
        arriving = advance & valid
        skid = Signal(item_shape, name="skid")
        skid_valid = Signal()
        output_free = ~self.o.valid | self.o.ready
        with m.If(output_free):
            m.d.sync += [
                self.o.valid.eq(skid_valid | arriving),
                self.o.payload.eq(Mux(skid_valid, skid.as_value(), taps[0].as_value())),
                skid_valid.eq(0),
            ]
        with m.Elif(arriving):
            m.d.sync += [skid_valid.eq(1), skid.eq(taps[0])]
        m.d.sync += advance.eq(output_free | ~(skid_valid | arriving))
        m.d.comb += self.idle.eq(~Cat(valids).any() & ~self.o.valid & ~skid_valid & at_start)


def _tail_use(use, ahead):
    """The taps a window uses: ``use`` but not those holding the next image's items
    (``ahead``), which a tail takes as padding."""
    return use & ~ahead


def _valid_register(m, enable, value, name):
    """A pipeline stage's valid flag: :func:`~maxaccel.hdl.kit.register`, but cleared by the
    domain's reset (``clear``, the engine's abort), so a reset drops what was in flight; the
    data registers beside it may keep stale contents."""
    held = Signal(name=name)
    with m.If(enable):
        m.d.sync += held.eq(value)
    return held


def _earliest_max(m, name, enable, at_least, earlier, later=None):
    """Element by element, the item of greater key, ``earlier``'s on equal keys (padding never
    wins over a value), in two register stages that load with ``enable``; ``earlier`` alone if
    there is no ``later``.

    The keys are compared as :class:`~maxaccel.hdl.lane.KeyMax` compares a lane (``at_least``:
    bit ``L`` set if elements span at least ``2**L`` bytes): byte compares and the first
    butterfly level in the first stage, the other two levels and the select in the second.
    Every byte ends with its element's verdict, so byte ``k`` of the key and tap slot ``k``
    follow it: an element's taps come with its key.
    """
    shape = earlier.shape()
    first_a = Signal(shape, name=f"{name}_a")
    first_b = Signal(shape, name=f"{name}_b")
    winner = Signal(shape, name=name)
    if later is None:
        with m.If(enable):
            m.d.sync += [first_a.eq(earlier), winner.eq(first_a)]
        return winner
    flags = ([byte(earlier.key, i) >= byte(later.key, i) for i in range(LANE_BYTES)],
             [byte(earlier.key, i) == byte(later.key, i) for i in range(LANE_BYTES)])
    flags = key_compare_level(flags, 1, at_least[1])
    greater_equal = Signal(LANE_BYTES, name=f"{name}_ge")
    equal = Signal(LANE_BYTES, name=f"{name}_eq")
    with m.If(enable):
        m.d.sync += [first_a.eq(earlier), first_b.eq(later),
                     greater_equal.eq(Cat(flags[0])), equal.eq(Cat(flags[1]))]
    flags = (list(greater_equal), list(equal))
    for level in (2, 3):
        flags = key_compare_level(flags, level, at_least[level])
    later_wins = [first_b.real & (~first_a.real | ~flags[0][i]) for i in range(LANE_BYTES)]
    with m.If(enable):
        m.d.sync += winner.real.eq(first_a.real | first_b.real)
        for i in range(LANE_BYTES):
            m.d.sync += [
                byte(winner.key, i).eq(Mux(later_wins[i], byte(first_b.key, i),
                                           byte(first_a.key, i))),
                winner.taps[i].eq(Mux(later_wins[i], first_b.taps[i], first_a.taps[i])),
            ]
    return winner


class _ConfigProducts:
    """Products of the configuration, each held in a register: ``wide * field``, where
    ``field`` is at most ``field_bits`` wide.

    Parallel: each product is one multiplier and its register, ready a cycle after its
    factors. Serial: the engine checks' bit-serial
    :class:`~maxaccel.hdl.kit.SaturatingMultiplier` (a bit of the field a cycle) computes
    them one after another from reset (:meth:`sequence`), in the order they were asked for, so
    a product may take an earlier one as its ``wide`` factor; each takes :meth:`cycles_each`
    cycles, however few bits its field has, so the unit's :attr:`~WindowMaxPool.settle` is a
    constant. A product keeps its low ``width`` bits, as a parallel one does.
    """

    def __init__(self, m, serial, field_bits):
        self.m, self.serial, self.field_bits = m, serial, field_bits
        self.steps = []

    @staticmethod
    def cycles_each(field_bits):
        """Cycles of one serial product: the start, a bit of the field a cycle, the store."""
        return field_bits + 2

    def product(self, name, wide, field, width, field_first=True):
        """A register of ``(wide * field)[:width]`` (parallel: ``field * wide`` if
        ``field_first``, the operands in the order the synthesis has always been given)."""
        if not self.serial:
            return register(self.m, 1, ((field * wide) if field_first else (wide * field))[:width],
                            name)
        held = Signal(width, name=name, reset_less=True)
        self.steps.append((held, Value.cast(wide), Value.cast(field)[:self.field_bits]))
        return held

    def sequence(self):
        """The serial multiplier (nothing when parallel); returns the cycles from reset until
        the last product is stored."""
        if not self.serial or not self.steps:
            return 0
        m, bits = self.m, self.field_bits
        width = max(len(held) for held, _, _ in self.steps)
        m.submodules.product_multiplier = multiplier = SaturatingMultiplier(width, digit_bits=1)
        step = Signal(range(len(self.steps) + 1), name="product_step")
        phase = Signal(range(bits + 2), name="product_phase")
        with m.If(step != len(self.steps)):
            m.d.sync += phase.eq(Mux(phase == bits + 1, 0, phase + 1))
            with m.If(phase == 0):
                m.d.comb += [multiplier.start.eq(1),
                             multiplier.a.eq(Array(w for _, w, _ in self.steps)[step]),
                             multiplier.b.eq(Array(f for _, _, f in self.steps)[step])]
            with m.Elif(phase == bits + 1):    # the field's bits are all taken: not busy
                with m.Switch(step):
                    for k, (held, _, _) in enumerate(self.steps):
                        with m.Case(k):
                            m.d.sync += held.eq(multiplier.product)
                m.d.sync += step.eq(step + 1)
        return len(self.steps) * self.cycles_each(bits)


class WindowMaxPool(Unit):
    """Streaming windowed max pooling of ``N x C`` images with the index of each maximum, a
    64-bit lane of images at a time.

    Input: one *lane* per beat: the elements of ``8 / itemsize`` images (one, two, four or
    eight), packed little-endian as :class:`~maxaccel.hdl.lane.LaneMax` takes them, element
    ``e`` of the lane belonging to image ``e``; the beats in row-major order over the spatial
    axes (``prod(size)`` beats per image lane), image lanes one after another. Each element is
    pooled on its own. Output: for each image lane its ``prod(out)`` pooled lanes in row-major
    order, one per beat, with, in index slot ``e * itemsize``, the flat row-major index (into
    the unpadded image, ``0 .. prod(size) - 1``) of the element that won for element ``e``. Values
    follow the contract's order (``+0`` above ``-0``, NaN absorbing, NaNs out as the canonical
    quiet NaN); padding never contributes; ties go to the first element in row-major window
    order whose key is the maximum (for a NaN window, the first NaN). A window must hold at least
    one element (the host refuses others; ``empty_window`` flags one).

    A pool of rank ``r < max_rank`` is given as a ``max_rank`` pool with unit outer axes
    (``size = out = kernel = stride = dilation = 1``, ``pad = 0``).

    Parameters
    ----------
    max_rank : int
        Spatial axes, 1 to 3. A pass per axis.
    max_extent : int or sequence of int
        Largest kernel extent ``(kernel - 1) * dilation + 1`` (>= 1): one for every axis, or
        one per axis (``max_rank`` of them, entry 0 the outermost). A pass's compare tree has
        that many taps, its delay line one fewer (registers, line or plane buffers), and every
        element carries ``ceil(log2(extent))`` bits of tap number per axis.
    max_columns : int
        Largest ``out`` of the innermost axis (the line buffers' depth), for ``max_rank >= 2``.
    max_plane : int
        Largest ``out[1] * out[2]`` (the plane buffers' depth), for ``max_rank == 3``.
    dim_bits : int
        Width of every configuration field.
    index_bits : int
        Width of the output index: ``prod(size)`` must be below ``2**index_bits``.
    dtype : DType, optional
        A static element type: no ``dtype`` port, and the other formats' logic folds away.
    serial_products : bool
        Compute the configuration's products (the index arithmetic's constants and each pass's
        reach, ``7 * max_rank - 1`` of them) one after another on one shift-and-add multiplier
        after reset or ``clear``, instead of a multiplier each, for a longer :attr:`settle`:
        for FPGAs without multipliers to spare (the iCE40's synthesis infers none, so there
        it saves most of the unit's LUTs; ``docs/boards.md``, "Built for a model", has the
        figures).

    Ports
    -----
    i : In(stream.Signature(StructLayout({"data": 64})))
    o : Out(stream.Signature(StructLayout({"data": 64, "index": ArrayLayout(index_bits, 8)})))
        ``data``: the pooled lane; ``index``: a slot per byte, slot ``k`` for the element that
        starts at byte ``k`` (the other slots are don't-care).
    dtype : In(DType)
        Only without the ``dtype`` parameter.
    config : In(ArrayLayout(axis_layout(dim_bits), max_rank))
        Entry 0 is the outermost spatial axis. ``dtype`` and ``config`` are static while an
        image is in flight: change them only while ``idle`` (or with ``clear``). With
        ``serial_products`` a new ``config`` takes a ``clear`` (its products are computed
        after one).
    clear : In(1)
        Synchronous reset of the unit (not of its line buffers): abandons a partial image.

    Status
    ------
    idle : Out(1)
        Between images, nothing in flight.
    config_error : Out(1)
        Registered: some axis has a zero field, an extent above ``max_extent``, an
        ``out`` of the innermost axis above ``max_columns`` while the next axis's kernel is
        above 1 (``max_rank >= 2``), or a first
        window of padding only on the left (``(kernel - 1) * dilation < pad``).
    capacity_error : Out(1)
        Sticky until ``clear``: a line or plane buffer was too short for its rows (an outer
        axis with taps beyond the newest, and ``out[1] * out[2] > max_plane``).
    empty_window : Out(1)
        Sticky until ``clear``: a window held only padding (its output is unspecified).

    Latency and throughput
    ----------------------
    ``i.ready`` is low for the first :attr:`settle` cycles after reset or ``clear`` (the
    configuration is registered; :attr:`SETTLE`, or with ``serial_products`` its products are
    computed as well). Then one lane is taken per cycle, except that each pass
    inserts one cycle per virtual step: per input row ``max(0, end - size + 1)`` for the
    innermost axis, where ``end = (out - 1) * stride - pad + (kernel - 1) * dilation``, and
    per image a row of ``out`` items (``out[2]``, resp. ``out[1] * out[2]``) per virtual step
    of an outer axis, when they back up to the input; none where the tail overlaps the next
    row's (image's) first steps (:class:`AxisPass`: e.g. every stride-1 pool with symmetric
    padding ``p <= (kernel - 1) / 2`` on rows longer than ``p``, when the next row's first
    element is there in time: the innermost pass then costs nothing but the stream's last
    row's tail). An output whose window's last element (or
    last virtual step) is taken at edge ``e`` is taken by a ready sink at edge ``e +``
    :attr:`latency`, ``3 + sum over the axes of (2 + 2 * max(1, ceil(log2(extent)))) +
    (max_rank - 1)`` (``extent`` the axis's ``max_extent``; the ``max_rank - 1`` passes with
    buffers of more than one entry): two cycles of keys, then per pass the tap stage,
    the read data registered (the passes with block RAM), two cycles per compare tree level and
    the pass's output register, then the output register (values and indices).

    The indices: the flat index of a window's last tap (``base``, an odometer over the output
    positions, stepping by per-axis constants) less, per axis, the winning tap's steps back
    times the axis's step in the flat index (``prod(size)`` of the inner axes). The constants
    are products of the configuration, registered in a chain six deep: ``config`` must be
    stable that many cycles before an image's first output, which comes :attr:`latency` cycles
    or more after its first element.

    Each pass's stages move with one enable, a register that is high unless the skid register
    behind the pass's output register holds an item, so ``i.ready`` never depends
    combinationally on ``o.ready``.
    """

    #: Cycles ``i.ready`` stays low after reset or ``clear`` (without ``serial_products``). The
    #: counters' start values are up to three registers deep; the first element reaches the
    #: passes two cycles after it is taken, when every pass has loaded its counters from them.
    #: The tail's constants (four deep) are read no earlier than the step after an image's
    #: first. With ``serial_products`` the products are stored in turn from reset, the
    #: passes' reaches first (their tails' constants then settle as they do from the
    #: configuration); the last feeds only ``start``, a register on, read at an image's first
    #: output: :attr:`settle` is this plus the products' cycles plus two, a margin.
    SETTLE = 2

    class Signature(UnitSignature):
        """:class:`WindowMaxPool`'s signature: ``WindowMaxPool.Signature(*, max_rank=3,
        max_extent=3, max_columns=64, max_plane=1024, dim_bits=16, index_bits=32,
        dtype=None)``, the unit's parameters, each checked (``ValueError``); without
        ``dtype`` a ``dtype`` port. Its :attr:`stall`: ``i.ready`` is registered (the first
        pass's skid register)."""

        stall = Stall("i", "o", registered=True)

        def __init__(self, *, max_rank=3, max_extent=3, max_columns=64, max_plane=1024,
                     dim_bits=16, index_bits=32, dtype=None, serial_products=False):
            dtype = self.check_parameters(
                max_rank=max_rank, max_extent=max_extent, max_columns=max_columns,
                max_plane=max_plane, dim_bits=dim_bits, index_bits=index_bits, dtype=dtype,
                serial_products=serial_products)
            members = {
                "i": In(stream.Signature(data.StructLayout({"data": LANE_BITS}))),
                "o": Out(stream.Signature(data.StructLayout({
                    "data": LANE_BITS, "index": data.ArrayLayout(index_bits, LANE_BYTES)}))),
            }
            if dtype is None:
                members["dtype"] = In(DType)
            members.update({
                "config": In(data.ArrayLayout(axis_layout(dim_bits), max_rank)),
                "clear": In(1),
                "idle": Out(1),
                "config_error": Out(1),
                "capacity_error": Out(1),
                "empty_window": Out(1),
            })
            super().__init__(members, max_rank=max_rank, max_extent=max_extent,
                             max_columns=max_columns, max_plane=max_plane, dim_bits=dim_bits,
                             index_bits=index_bits, dtype=dtype,
                             serial_products=serial_products)

        @classmethod
        def check_parameters(cls, *, max_rank=3, max_extent=3, max_columns=64, max_plane=1024,
                             dim_bits=16, index_bits=32, dtype=None, serial_products=False):
            """The static element type; ``ValueError`` for a parameter out of range (see
            :class:`WindowMaxPool`) or an unknown ``dtype``."""
            def integer(value, least):
                return isinstance(value, int) and not isinstance(value, bool) and value >= least

            for name, value, least in [("max_rank", max_rank, 1),
                                       ("max_columns", max_columns, 1),
                                       ("max_plane", max_plane, 1),
                                       ("dim_bits", dim_bits, 2), ("index_bits", index_bits, 1)]:
                if not integer(value, least):
                    raise ValueError(f"WindowMaxPool: {name} must be an integer >= {least}, "
                                     f"not {value!r}")
            if max_rank > 3:
                raise ValueError(f"WindowMaxPool: max_rank must be 1, 2 or 3, not {max_rank}")
            if serial_products not in (False, True):
                raise ValueError(f"WindowMaxPool: serial_products must be True or False (or 1 "
                                 f"or 0), not {serial_products!r}")
            extents = (max_extent,) * max_rank if integer(max_extent, 1) else max_extent
            if not (isinstance(extents, (tuple, list)) and len(extents) == max_rank
                    and all(integer(e, 1) for e in extents)):
                raise ValueError(f"WindowMaxPool: max_extent must be an integer >= 1 or "
                                 f"{max_rank} of them (one per axis), not {max_extent!r}")
            return check_dtype(dtype, "WindowMaxPool")

    def __init__(self, *, max_rank=3, max_extent=3, max_columns=64, max_plane=1024,
                 dim_bits=16, index_bits=32, dtype=None, serial_products=False):
        super().__init__(max_rank=max_rank, max_extent=max_extent, max_columns=max_columns,
                         max_plane=max_plane, dim_bits=dim_bits, index_bits=index_bits,
                         dtype=dtype, serial_products=serial_products)
        extents = (max_extent,) * max_rank if isinstance(max_extent, int) else max_extent
        #: Largest kernel extent per axis, entry 0 the outermost.
        self.extents = tuple(extents)
        self.max_extent = max(self.extents)
        self.max_columns = max_columns if max_rank >= 2 else 1
        self.max_plane = max_plane if max_rank >= 3 else 1
        # Items a row holds, per axis: one element for the innermost axis (registers), a row
        # of out[-1] for the next (line buffers), a plane for the third (plane buffers).
        self._depths = {max_rank - 1: 1, max_rank - 2: self.max_columns,
                        max_rank - 3: self.max_plane}
        self.latency = 3 + sum(_pass_latency(self.extents[axis], self._depths[axis])
                               for axis in range(max_rank))
        self.config_shape = data.ArrayLayout(axis_layout(dim_bits), max_rank)
        # The serial products' narrow factor: a field, or a window's reach (below the extent).
        self._field_bits = max(dim_bits, (self.max_extent - 1).bit_length())
        #: Cycles ``i.ready`` stays low after reset or ``clear`` (:attr:`SETTLE`).
        self.settle = self.SETTLE
        if serial_products:
            self.settle += (7 * max_rank - 1) * _ConfigProducts.cycles_each(
                self._field_bits) + 2

    @property
    def limits(self):
        """The capacities, by name (what IDENTIFY reports)."""
        return {"max_rank": self.max_rank, "max_extent": self.max_extent,
                "extents": self.extents,
                "max_columns": self.max_columns, "max_plane": self.max_plane,
                "dim_bits": self.dim_bits, "index_bits": self.index_bits}

    def elaborate(self, platform):
        m = Module()
        rank = self.max_rank
        fmt = decode_format(m, self.dtype)
        settle = Signal(range(self.settle + 1), init=self.settle)
        with m.If(settle != 0):
            m.d.sync += settle.eq(settle - 1)
        cfg, bits = self.config, self.index_bits
        products = _ConfigProducts(m, self.serial_products, self._field_bits)
        # Each pass's reach, (out - 1) * stride, from the serial multiplier (else its own).
        reaches = [products.product(f"pass_reach_{a}", cfg[a].stride, cfg[a].out - 1,
                                    2 * self.dim_bits) if self.serial_products else None
                   for a in range(rank)]

        passes = []
        for axis in reversed(range(rank)):
            passes.append(AxisPass(axis, range(axis + 1, rank), self.extents,
                                   self._depths[axis], self.config_shape, self.dim_bits,
                                   reach=reaches[axis]))
            m.submodules[f"axis_{axis}"] = passes[-1]
            m.d.comb += [passes[-1].config.eq(self.config), passes[-1].size.eq(fmt.size)]
        for inner, outer in zip(passes, passes[1:]):
            wiring.connect(m, inner.o, outer.i)

        # --- Input: the lane's keys (two stages). ------------------------------------------
        first = passes[0].i
        halfway, keyed_valid = Signal(), Signal()
        advance = ~keyed_valid | first.ready
        m.d.comb += self.i.ready.eq(advance & (settle == 0))
        key, = to_keys(m, advance, fmt, [self.i.payload.data])
        with m.If(advance):
            m.d.sync += [halfway.eq(self.i.valid & self.i.ready), keyed_valid.eq(halfway)]
        m.d.comb += [
            first.valid.eq(keyed_valid),
            first.payload.key.eq(key),
            first.payload.real.eq(1),
        ]

        # --- Output: keys back to values, and each element's index from the window's position
        # and the taps that won: the flat index of the window's last tap, ``base``, less, per
        # axis, the winning tap's steps back times the axis's stride in the flat index. -------
        last = passes[-1].o

        def product(name, wide, field, field_first=True):
            return products.product(name, wide, field, bits, field_first)

        inner = [Const(1, bits)] * rank            # flat-index stride of one step of each axis
        for a in reversed(range(rank - 1)):
            inner[a] = product(f"inner_{a}", inner[a + 1], cfg[a + 1].size, field_first=False)
        step = [product(f"step_{a}", inner[a], cfg[a].stride) for a in range(rank)]
        back = [register(m, 1, (product(f"out_step_{a}", step[a], cfg[a].out) - step[a])[:bits],
                         f"back_{a}") for a in range(rank)]
        # The base's change when axis a advances and the axes inside it start over.
        delta = [register(m, 1, (step[a] - sum(back[a + 1:], Const(0, bits)))[:bits],
                          f"delta_{a}") for a in range(rank)]
        # A window's reach back along an axis, registered on its own: a product of a product
        # in one cycle was the ULX3S 85F's critical path (two MULT18X18D and an adder chain).
        # It is as deep as ``inner``'s first product, so ``span`` and ``start`` come no later.
        if self.serial_products:
            reach = [products.product(f"reach_{a}", cfg[a].dilation, cfg[a].kernel - 1,
                                      2 * self.dim_bits) for a in range(rank)]
        else:
            reach = [register(m, 1, cfg[a].kernel * cfg[a].dilation - cfg[a].dilation,
                              f"reach_{a}") for a in range(rank)]
        span = [product(f"span_{a}", inner[a], reach[a]) for a in range(rank)]
        padding = [product(f"padding_{a}", inner[a], cfg[a].pad) for a in range(rank)]
        start = register(m, 1, (sum(span, Const(0, bits)) - sum(padding, Const(0, bits)))[:bits],
                         "start")
        multiples = [[register(m, 1, (inner[a] * t)[:bits], f"multiple_{a}_{t}")
                      for t in range(self.extents[a])] for a in range(rank)]
        assert products.sequence() + self.SETTLE + 2 * self.serial_products == self.settle
        out_less = [register(m, 1, cfg[a].out - 1, f"out_less_{a}") for a in range(rank)]

        # Where the next output is: ``fresh`` at an image's first (then ``start`` and the
        # full counts apply), else ``base`` and ``left`` (outputs after this one, per axis).
        fresh = Signal(init=1)
        base = Signal(bits)
        left = [Signal(self.dim_bits, name=f"left_{a}") for a in range(rank)]
        here = Mux(fresh, start, base)
        counts = [Mux(fresh, out_less[a], left[a]) for a in range(rank)]
        wraps = [c == 0 for c in counts]
        m.d.comb += last.ready.eq(~self.o.valid | self.o.ready)
        take = last.valid & last.ready
        with m.If(take):
            m.d.sync += [
                self.o.valid.eq(1),
                self.o.payload.data.eq(from_key(m, "from_key", fmt, last.payload.key)),
            ]
            for k in range(LANE_BYTES):
                taps = last.payload.taps[k]
                back_by = sum((Array(multiples[a])[taps[tap_field(a)]] for a in range(rank)),
                              Const(0, bits))
                m.d.sync += self.o.payload.index[k].eq((here - back_by)[:bits])
            with m.If(~last.payload.real):
                m.d.sync += self.empty_window.eq(1)
            # The odometer: the innermost axis that does not wrap advances.
            m.d.sync += [fresh.eq(Cat(wraps).all()), base.eq(start)]
            for a in range(rank):                  # outermost first: the innermost one wins
                inside_wrap = Cat(wraps[a + 1:]).all() if a + 1 < rank else 1
                with m.If(inside_wrap):
                    m.d.sync += left[a].eq(Mux(wraps[a], out_less[a], counts[a] - 1))
                    with m.If(~wraps[a]):
                        m.d.sync += base.eq(here + delta[a])
                with m.Else():
                    m.d.sync += left[a].eq(counts[a])
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        columns_refused = 0
        if rank >= 2:
            # Rows longer than the line buffers only matter when the next axis has taps to
            # keep (kernel above 1); a 1-D pool has rows of any length.
            columns_refused = register(m, 1, (self.config[rank - 1].out > self.max_columns)
                                       & (self.config[rank - 2].kernel > 1), "columns_refused")
        m.d.comb += [
            self.config_error.eq(Cat(p.config_error for p in passes).any() | columns_refused),
            self.capacity_error.eq(Cat(p.capacity_error for p in passes).any()),
            self.idle.eq(Cat(p.idle for p in passes).all() & ~halfway & ~keyed_valid
                         & ~self.o.valid & fresh & (settle == 0)),
        ]
        return ResetInserter(self.clear)(m)
