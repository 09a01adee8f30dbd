"""Lanes of windowed pooling units behind one beat: the ``MAX_POOL`` unit of the core.

Not a library unit: the command engine's side of :class:`~maxaccel.hdl.window.WindowMaxPool`,
whose reply beats and configuration widths are the wire protocol's.

:class:`WindowLanes` puts ``window_lanes`` :class:`~maxaccel.hdl.window.WindowMaxPool` units
side by side (each pools ``8 / itemsize`` images of a ``MAX_POOL`` group), splits each input
beat among them and sends their results, values then indices, as reply beats.
"""

from amaranth.hdl import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import DType
from maxaccel.contract.pooling import WINDOW_RANK
from maxaccel.contract.wire import WINDOW_FIELD_MAX, WINDOW_INDEX_BYTES

from .beat import beat_layout
from .kit import Unit, UnitSignature, decode_format, lane_of
from .lane import ELEMENT_SIZES, LANE_BITS, LANE_BYTES
from .window import WindowMaxPool, axis_layout
from .window_serial import SerialWindowMaxPool

__all__ = ["WindowLanes"]


def _unit_parameters(max_extent, max_extent_outer, max_columns, max_plane, dtype=None,
                     serial_products=False, field_max=WINDOW_FIELD_MAX):
    """The parameters of each unit of a :class:`WindowLanes`: of :data:`WINDOW_RANK` axes, or
    of the inner two with ``max_extent_outer`` 0."""
    outer = max_extent if max_extent_outer is None else max_extent_outer
    rank = WINDOW_RANK if outer else WINDOW_RANK - 1
    return dict(max_rank=rank, max_extent=((outer,) if outer else ()) + (max_extent,) * 2,
                max_columns=max_columns, max_plane=max_plane, dim_bits=field_max.bit_length(),
                index_bits=8 * WINDOW_INDEX_BYTES, dtype=dtype, serial_products=serial_products)


def _unit(serial, indices, parameters):
    """A :class:`WindowMaxPool`, or with ``serial`` a :class:`SerialWindowMaxPool` (of no
    indices without ``indices``; a pipelined unit's go unused)."""
    if serial:
        parameters = {k: v for k, v in parameters.items() if k != "serial_products"}
        return SerialWindowMaxPool(**dict(parameters, index_bits=parameters["index_bits"]
                                          if indices else 0))
    return WindowMaxPool(**parameters)


def _check_flag(name, value):
    """``ValueError`` unless ``value`` is True or False (or 1 or 0)."""
    if value not in (False, True):
        raise ValueError(f"WindowLanes: {name} must be True or False (or 1 or 0), not "
                         f"{value!r}")


class _ReplyFIFO(SyncFIFOBuffered):
    """:class:`~amaranth.lib.fifo.SyncFIFOBuffered` with its memory asked for in block RAM
    (yosys's ``ram_style``): a reply FIFO is wide and shallow (a row of results, each the
    units' values and indices, 1 280 bits on the NiteFury), which yosys would otherwise put in
    LUT RAM (427 RAM64M, 1 700 LUTs, on a board at 84% of its LUTs) where a few block RAMs of a
    mostly idle bank hold it."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.submodules.storage.attrs["ram_style"] = "block"
        return m


class WindowLanes(Unit):
    """``MAX_POOL``'s unit: :class:`WindowMaxPool` units side by side, a 64-bit lane of the
    engine's beats each, fed from and emptied into the beats.

    A request's data is groups of ``group`` images interleaved element by element: each input
    beat holds one element of each image of the group, image ``j``'s at byte ``j * itemsize``
    (a row of ``group`` elements, ``docs/protocol.md``), at most the units' ``8 *
    window_lanes`` bytes. Unit ``u`` takes lane ``u`` of every beat, so it pools the ``8 /
    itemsize`` images whose elements the lane holds, each on its own: a beat per cycle whatever
    the element type. The units are identical and see the same handshakes, so they move in
    lockstep; for each output position one beat leaves holding the ``group`` maxima the same
    way, followed, with ``indices``, by the ``group`` flat indices (u32 each, little-endian,
    image ``j``'s at byte ``4 * j``) in as many beats as they fill. The lanes and elements
    beyond ``group`` pool whatever the beat holds there; their results are not sent.

    Parameters
    ----------
    lanes : int
        64-bit lanes of the engine's beats.
    window_lanes : int
        Units, 1 to ``lanes``: the first ``window_lanes`` lanes of a beat are pooled.
    max_extent, max_columns, max_plane : int
        Capacities of each :class:`WindowMaxPool` (``max_rank``
        :data:`~maxaccel.contract.pooling.WINDOW_RANK`, configuration fields of ``field_max``'s
        bits, 32-bit indices);
        ``max_extent`` is the kernel extent of the two inner axes (every 1-D and 2-D pool's
        axes).
    max_extent_outer : int, optional
        The kernel extent of the outermost axis (a 3-D pool's first), default ``max_extent``.
        Its delay line is ``max_extent_outer - 1`` plane buffers of ``max_plane`` entries, the
        unit's largest memories: a board sizes it apart. 0: units of the two inner axes alone
        (``max_rank`` 2), for cores that pool only 1-D and 2-D images; a request whose
        outermost axis holds more than one element is refused before it reaches them (the
        contract's rules).
    dtype : DType, optional
        A static element type: no ``dtype`` port, and the other formats' logic folds away.
    serial_products : bool
        The units' configuration products on one shift-and-add multiplier each
        (:class:`WindowMaxPool`), for a longer :attr:`settle`.
    serial : bool
        :class:`~maxaccel.hdl.window_serial.SerialWindowMaxPool` units, which update one
        window at a time (a few cycles per element and window tap), and no reply FIFO: each
        result leaves before the units go on. For cores whose link is slower than that.
    field_max : int
        The largest configuration field the units hold (default
        :data:`~maxaccel.contract.wire.WINDOW_FIELD_MAX`, 16 bits; at least ``max_extent``):
        ``config``'s fields are ``field_max.bit_length()`` bits. Smaller for a core made for
        models of small images, whose position counters are then narrower.
    with_indices : bool
        Whether the unit gives Indices (default True). Without, the ``indices`` port is
        ignored (the engine refuses such a request first), serial units keep no indices and
        there is no reply FIFO: for a core made for models that never ask for them.

    Attributes
    ----------
    latency : int or None
        :attr:`WindowMaxPool.latency` (None with ``serial``: the cycles depend on the data).
    settle : int
        :attr:`WindowMaxPool.settle`: cycles after ``clear`` before the first beat is taken.
    reply_depth : int
        Results the reply FIFO holds with ``indices`` (``max_columns``: a row of outputs).
    limits : dict
        ``window_lanes``, ``window_extent``, ``window_extent_outer``, ``window_columns``,
        ``window_plane``: what ``IDENTIFY`` reports.

    Ports
    -----
    i : In(stream.Signature(beat_layout(lanes)))
        Rows of ``group`` elements, one beat each (``nbytes``, ``first`` and ``last`` ignored).
    o : Out(stream.Signature(beat_layout(lanes)))
        Per output position a one-beat row of ``group * itemsize`` bytes of maxima, then
        (``indices``) a row of ``group * 4`` bytes of indices, ``ceil(group * 4 / (8 * lanes))``
        beats (``first`` and ``last`` mark each row's ends).
    dtype : In(DType)
        Only without the ``dtype`` parameter.
    config : In(ArrayLayout(axis_layout(field_max.bit_length()), WINDOW_RANK))
    group : In(range(8 * window_lanes + 1))
    indices : In(1)
        Static during a request, like ``dtype`` and ``config``.
    clear : In(1)
        Restart every unit (strobe before a request).
    idle : Out(1)
        Nothing in flight.
    error : Out(1)
        A unit found a window of padding only, a buffer too short or a configuration it
        refuses (the request's status is then ``BAD_PARAMETER``).

    Latency and throughput
    ----------------------
    With ``serial``, those of :class:`~maxaccel.hdl.window_serial.SerialWindowMaxPool`, each
    result held until its reply beats are sent. Else those of :class:`WindowMaxPool`: a beat
    per cycle in (after :attr:`settle` cycles from ``clear``), with one bubble per virtual
    step; per window result an output beat, plus ``ceil(group * 4 / (8 * lanes))`` with
    ``indices``. Without ``indices`` a result leaves as the units give it (:attr:`latency`).
    With ``indices`` the results queue in a reply FIFO of :attr:`reply_depth` results (a row
    of outputs; the units' values and indices, ``320 * window_lanes`` bits each: block RAM) in
    front of the beats that send them, 2
    cycles more latency: the units keep taking input while up to a row of results waits for
    its reply, and are held only when the FIFO is full. (At stride 2 an output row's results
    come during one input row, a result every 2 cycles, while the reply takes one every 3
    cycles for float16 groups and every 5 for uint8 on 32-byte beats.)
    """

    class Signature(UnitSignature):
        """:class:`WindowLanes`'s signature: ``WindowLanes.Signature(lanes, window_lanes, *,
        max_extent=3, max_extent_outer=None, max_columns=64, max_plane=1024, dtype=None,
        serial_products=False, serial=False, field_max=WINDOW_FIELD_MAX, with_indices=True)``,
        its parameters checked (``ValueError``), and their :attr:`limits`; without ``dtype``
        a ``dtype`` port."""

        def __init__(self, lanes, window_lanes, *, max_extent=3, max_extent_outer=None,
                     max_columns=64, max_plane=1024, dtype=None, serial_products=False,
                     serial=False, field_max=WINDOW_FIELD_MAX, with_indices=True):
            dtype = self.check_parameters(lanes, window_lanes, max_extent=max_extent,
                                          max_extent_outer=max_extent_outer,
                                          max_columns=max_columns, max_plane=max_plane,
                                          dtype=dtype, serial_products=serial_products,
                                          serial=serial, field_max=field_max,
                                          with_indices=with_indices)
            beats = stream.Signature(beat_layout(lanes))
            members = {"i": In(beats), "o": Out(beats)}
            if dtype is None:
                members["dtype"] = In(DType)
            super().__init__({
                **members,
                "config": In(data.ArrayLayout(axis_layout(field_max.bit_length()),
                                              WINDOW_RANK)),
                "group": In(range(LANE_BYTES * window_lanes + 1)),
                "indices": In(1),
                "clear": In(1),
                "idle": Out(1),
                "error": Out(1),
            }, lanes=lanes, window_lanes=window_lanes, max_extent=max_extent,
               max_extent_outer=max_extent_outer, max_columns=max_columns, max_plane=max_plane,
               dtype=dtype, serial_products=serial_products, serial=serial,
               field_max=field_max, with_indices=with_indices)

        @classmethod
        def check_parameters(cls, lanes, window_lanes, *, max_extent=3, max_extent_outer=None,
                             max_columns=64, max_plane=1024, dtype=None, serial_products=False,
                             serial=False, field_max=WINDOW_FIELD_MAX, with_indices=True):
            """``ValueError`` unless ``window_lanes`` is 1 to ``lanes`` and the units'
            capacities and ``dtype`` are valid (:class:`WindowMaxPool`); returns the static
            ``DType`` or None."""
            if not isinstance(window_lanes, int) or isinstance(window_lanes, bool) \
                    or not 1 <= window_lanes <= lanes:
                raise ValueError(f"WindowLanes: window_lanes must be 1 to {lanes} (lanes of a "
                                 f"beat of {lanes} lanes), not {window_lanes!r}")
            _check_flag("serial", serial)
            if serial and serial_products:
                raise ValueError("WindowLanes: serial units compute their products serially "
                                 "anyway; serial_products is for the pipelined ones")
            if not isinstance(field_max, int) or isinstance(field_max, bool) \
                    or not 3 <= field_max <= WINDOW_FIELD_MAX:
                raise ValueError(f"WindowLanes: field_max must be an integer from 3 to "
                                 f"{WINDOW_FIELD_MAX}, not {field_max!r}")
            _check_flag("with_indices", with_indices)
            dtype = WindowMaxPool.Signature.check_parameters(**_unit_parameters(
                max_extent, max_extent_outer, max_columns, max_plane, dtype, serial_products,
                field_max))
            largest = max(max_extent, max_extent_outer or 0)
            if field_max < largest:
                raise ValueError(f"WindowLanes: field_max {field_max} is below the kernel "
                                 f"extent {largest}, which a kernel field must reach")
            return dtype

        @property
        def limits(self):
            """``window_lanes``, ``window_extent``, ``window_extent_outer``,
            ``window_columns``, ``window_plane``, ``window_field_max``, ``window_indices``:
            what ``IDENTIFY`` reports."""
            outer = self.max_extent if self.max_extent_outer is None else self.max_extent_outer
            return {"window_lanes": self.window_lanes, "window_extent": self.max_extent,
                    "window_extent_outer": outer, "window_columns": self.max_columns,
                    "window_plane": self.max_plane, "window_field_max": self.field_max,
                    "window_indices": int(self.with_indices)}

    def __init__(self, lanes, window_lanes, *, max_extent=3, max_extent_outer=None,
                 max_columns=64, max_plane=1024, dtype=None, serial_products=False,
                 serial=False, field_max=WINDOW_FIELD_MAX, with_indices=True):
        super().__init__(lanes, window_lanes, max_extent=max_extent,
                         max_extent_outer=max_extent_outer, max_columns=max_columns,
                         max_plane=max_plane, dtype=dtype, serial_products=serial_products,
                         serial=serial, field_max=field_max, with_indices=with_indices)
        self.units = [_unit(serial, with_indices, _unit_parameters(
                          max_extent, max_extent_outer, max_columns, max_plane,
                          self.signature.dtype, serial_products, field_max))
                      for _ in range(window_lanes)]
        unit = self.units[0]
        self.latency = None if serial else unit.latency
        self.settle = unit.settle
        #: Entries of the reply FIFO (results waiting for their indices to be sent): a row of
        #: outputs, the line buffers' ``max_columns``; none with ``serial`` units.
        self.reply_depth = 0 if serial or not with_indices else unit.max_columns
        self.limits = self.signature.limits

    def elaborate(self, platform):
        m = Module()
        units, count = self.units, self.window_lanes
        # Whether this request's replies carry Indices: never in a unit without them.
        indices = self.indices if self.with_indices else Const(0)
        beat_bytes = LANE_BYTES * self.lanes
        beat_bits = 8 * beat_bytes
        fmt = decode_format(m, self.dtype)
        sizes = list(zip(fmt.size, ELEMENT_SIZES))
        for j, unit in enumerate(units):
            m.submodules[f"unit_{j}"] = unit
            m.d.comb += [unit.config.eq(Cat(self.config[a] for a in
                                             range(WINDOW_RANK - unit.max_rank, WINDOW_RANK))),
                         unit.clear.eq(self.clear)]
            if self.signature.dtype is None:
                m.d.comb += unit.dtype.eq(self.dtype)

        # --- In: lane u of the beat to unit u. -----------------------------------------------
        ready = Cat(u.i.ready for u in units).all()
        m.d.comb += self.i.ready.eq(ready)
        for j, unit in enumerate(units):
            m.d.comb += [unit.i.valid.eq(self.i.valid & ready),
                         unit.i.payload.data.eq(lane_of(self.i.payload.data.as_value(), j))]

        # --- Out: the units' lanes in one beat, then (indices) the indices in beats. ---------
        units_valid = Cat(u.o.valid for u in units).all()
        # Image j's index: unit j // (8 / size), the slot of its element's first byte.
        units_index = 0
        for is_size, size in sizes:
            per_lane = LANE_BYTES // size
            row = Cat(units[j // per_lane].o.payload.index[(j % per_lane) * size]
                      for j in range(count * per_lane))
            units_index = units_index | Mux(is_size, row, 0)
        units_values = Cat(u.o.payload.data for u in units)
        value_bits = count * LANE_BITS
        index_bits = count * LANE_BYTES * 8 * WINDOW_INDEX_BYTES

        # With indices a result leaves as 1 + index_beats beats, so the units' results queue
        # in the reply FIFO, a row of outputs deep: at stride 2 a row of results comes while
        # the last input row of its windows streams, faster than the reply sends them, and
        # drains while the next input row streams. Without indices a result is one beat and
        # goes straight out (the FIFO would only add its two cycles).
        if self.reply_depth:
            fifo = m.submodules.reply = _ReplyFIFO(width=value_bits + index_bits,
                                                  depth=self.reply_depth)
            m.d.comb += [fifo.w_en.eq(units_valid & indices),
                         fifo.w_data.eq(Cat(units_values, units_index))]
            valid = Mux(indices, fifo.r_rdy, units_valid)
            values = Mux(indices, fifo.r_data[:value_bits], units_values)
            index_row = fifo.r_data[value_bits:]
            queued = fifo.level != 0
        else:
            # The units hold each result until its beats are sent.
            valid, values, index_row, queued = units_valid, units_values, units_index, 0
        index_beats = -(-index_bits // beat_bits)
        index_row = Cat(index_row, Const(0, index_beats * beat_bits))
        in_indices = Signal()           # the indices are being sent, word ``index_word``
        index_word = Signal(range(index_beats))
        index_left = Signal(range(count * LANE_BYTES * WINDOW_INDEX_BYTES + 1))
        index_last = index_left <= beat_bytes
        value_bytes = 0
        for is_size, size in sizes:
            value_bytes = value_bytes | Mux(is_size, self.group * size, 0)
        m.d.comb += [
            self.o.valid.eq(valid),
            self.o.payload.data.eq(Mux(in_indices, index_row.word_select(index_word, beat_bits),
                                       values)),
            self.o.payload.nbytes.eq(Mux(in_indices, Mux(index_last, index_left, beat_bytes),
                                         value_bytes)),
            self.o.payload.first.eq(~in_indices | (index_word == 0)),
            self.o.payload.last.eq(~in_indices | index_last),
        ]
        done = self.o.ready & (in_indices & index_last | ~indices)
        if self.reply_depth:
            m.d.comb += fifo.r_en.eq(done)
        for unit in units:
            taken = Mux(indices, fifo.w_rdy, done) if self.reply_depth else done
            m.d.comb += unit.o.ready.eq(units_valid & taken)
        with m.If(self.o.valid & self.o.ready & indices):
            with m.If(~in_indices):
                m.d.sync += [in_indices.eq(1), index_word.eq(0),
                             index_left.eq(self.group * WINDOW_INDEX_BYTES)]
            with m.Elif(index_last):
                m.d.sync += in_indices.eq(0)
            with m.Else():
                m.d.sync += [index_word.eq(index_word + 1),
                             index_left.eq(index_left - beat_bytes)]

        m.d.comb += [
            self.idle.eq(Cat(u.idle for u in units).all() & ~in_indices & ~queued),
            self.error.eq(Cat(u.empty_window | u.capacity_error | u.config_error
                              for u in units).any()),
        ]
        return ResetInserter(self.clear)(m)
