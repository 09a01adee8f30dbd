"""Element-wise maximum of any number of operands, with numpy broadcasting done on the device.

The output is walked in *rows* (see :mod:`maxaccel.hdl.beat`): the innermost axis of the
coalesced output shape is a row, sent as ``row_beats`` beats; the rows are enumerated by up to
``max_dims`` outer counters. Each operand reaches the unit in one of two ways:

* The **streamed** operand (at most one, of the full output shape) arrives on the ``streamed``
  input, one beat per output beat, and is never stored: the largest operand needs no memory.
  Several same-shape operands and nothing replayed (the *fold*: ``streamed`` = S >= 2, rows of
  one beat) arrive there too, S beats per output beat, one per cycle, and the unit folds each
  S consecutive beats into one output beat.
* Every other operand is **replayed**: it is first loaded, row-aligned, into the on-chip replay
  buffer (a ``LOAD`` command), then read back by a strided address generator during the ``RUN``
  pass, as many times as broadcasting needs. Dimensions along which the operand is broadcast
  have stride 0; an operand whose innermost size is 1 (a *splat* operand) stores one beat per
  row, replayed for every beat of the row and filled with the row's element: by the host
  (``pack_operand`` in ``tests/broadcast_model.py``), or by the unit as it writes a ``LOAD`` with
  ``fill`` set, so the ``RUN`` pipeline has no replication logic.

The host plans all of this (:func:`maxaccel.host.plan.plan_broadcast`): it coalesces axes,
chooses the streamed operand, places the replayed ones in the buffer and fills the
:attr:`BroadcastMax.config_layout` structure. See ``docs/architecture.md``, "Element-wise Max
with broadcasting".
"""

from types import SimpleNamespace

from amaranth.hdl import Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from maxaccel.contract.dtypes import DType

from .beat import beat_layout
from .lane import ELEMENT_SIZES, LANE_BITS, LANE_BYTES, LaneDecode, LaneFormat
from .lane import lane_format as constant_format
from .kit import (Stall, Unit, UnitSignature, accumulate_runs, check_dtype, delay, from_key,
                  key_max, lane_of, register, to_keys)
from .reduce import RunAccumulator

__all__ = ["BroadcastOp", "BroadcastMax"]


class BroadcastOp(enum.Enum, shape=1):
    """Operation of a :class:`BroadcastMax` command."""

    #: Write ``count`` beats of the ``load`` stream into the replay buffer from address ``base``.
    LOAD = 0
    #: One pass over the output index space described by ``config``.
    RUN = 1


class BroadcastMax(Unit):
    """Element-wise maximum of up to ``max_operands + 1`` broadcast operands.

    Parameters
    ----------
    lanes : int
        64-bit lanes per beat.
    depth : int
        Beats the replay buffer holds (one ``Memory`` of ``depth`` x ``64 * lanes`` bits, one
        write port and :attr:`READ_PORTS` read ports: a simple dual-port block RAM per read
        port, holding the same data). At least 2.
    max_dims : int
        Outer dimensions of the coalesced output (rows are enumerated by this many counters).
    max_operands : int
        Replayed operands per pass; a pass folds at most ``max_operands + 1`` operands.
    max_count : int
        Largest outer count and largest row length in beats (default 65535).
    max_streamed : int
        Most streamed operands a fold takes (``config.streamed``; default 255).
    dtype : DType, optional
        A static element type: no ``config.dtype``, and the other formats' logic folds away.

    Each is an attribute of the same name; the first five together are :attr:`limits`
    (keyword arguments of :func:`maxaccel.host.plan.plan_broadcast`).

    Ports
    -----
    command : In(stream.Signature(command_layout))
        ``{op: BroadcastOp, base, count, fill}``. Accepted only when idle (``ready ==
        ~busy``). ``LOAD`` writes the next ``count`` beats of ``load`` at ``base, base + 1,
        ...`` (``count == 0`` does nothing); with ``fill`` set, each beat's first element (of
        ``config.dtype``, sampled when the ``LOAD`` is accepted) is written repeated across the
        whole beat, which is how a splat operand's rows are stored. ``RUN`` makes one pass
        described by ``config``.
    config : In(config_layout)
        The pass description (see :attr:`config_layout`), sampled while a ``RUN`` is busy: it
        must be stable from the cycle the ``RUN`` command is offered until ``busy`` falls.
        Its fields:

        ``dtype``
            ONNX element type code.
        ``minimum``
            0: the element-wise maximum; 1: the minimum (IEEE 754-2019 ``minimum``: NaN
            absorbing, ``-0`` below ``+0``), the same pipeline on :class:`ToKey`'s minimum keys.
        ``operands``
            Number M of replayed operands (0 .. ``max_operands``).
        ``streamed``
            S, the number of operands arriving on ``streamed``: 0, 1, or S >= 2 (then
            ``operands`` is 0 and ``row_beats`` 1: each output beat is the fold of S
            consecutive streamed beats).
        ``row_beats``, ``last_nbytes``
            Beats per output row (>= 1) and valid bytes of its last beat (1 .. ``8 * lanes``).
        ``counts[d]``
            Outer counts, outermost first, >= 1 (unused dimensions are 1).
        ``operand[k].base``
            Buffer address of the first beat of replayed operand k.
        ``operand[k].splat``
            Operand k stores one beat per row, replayed for every beat of the row (the host
            fills it with the row's element, repeated).
        ``operand[k].steps[d]``
            Change of operand k's row address when counter d advances (and the counters
            inside it wrap), modulo ``2**addr_bits``: ``stride[d] - sum over d' > d of
            (counts[d'] - 1) * stride[d']``, with ``stride`` in beats and 0 along broadcast
            dimensions. Beat i of a row is at row address + i (+ 0 for a splat operand).

        At least one operand is required (``operands >= 1`` or ``streamed == 1``).
    load : In(stream.Signature(beat_layout(lanes)))
        Beats to store; only ``data`` is used. Ready only during a ``LOAD``.
    streamed : In(stream.Signature(beat_layout(lanes)))
        The streamed operand, one beat per output beat in output order, rows beat-aligned like
        the output (with S >= 2 streamed operands, S beats per output beat); only ``data`` is
        used (the framing comes from ``config``). Ready only while a ``RUN`` with ``streamed``
        needs its next beat.
    output : Out(stream.Signature(beat_layout(lanes)))
        The result rows: ``first``/``last`` mark each row, ``nbytes`` is ``8 * lanes`` except
        ``last_nbytes`` in the last beat of a row; padding bytes are unspecified.
    busy : Out(1)
        A command is executing; it falls in the cycle after the last ``LOAD`` beat is written
        or after the last output beat of a ``RUN`` is accepted.

    Throughput and latency
    ----------------------
    ``LOAD`` writes one beat per cycle. A ``RUN`` reads two replayed beats per cycle (one per
    read port: a *slot* is a pair of operands), so it emits one output beat every
    ``max(ceil(M / 2), 1)`` cycles: one per cycle for a streamed operand plus one or two
    replayed ones (a tensor, a row and a column), one every ``ceil(M / 2)`` cycles with more.
    A fold of S streamed operands takes one streamed beat per cycle and emits one output beat
    every S cycles. The first output beat is valid :attr:`LATENCY` ``= 14`` cycles after the
    ``RUN`` command is accepted (the address queue; memory read; read data registered twice;
    key transform, two cycles; the max of the pair, two; the slot-0 compare with the streamed
    beat, two; the fold of the slots, four), so a pass without stalls takes ``14 + N *
    max(ceil(M / 2), S, 1)`` cycles for N output beats. ``streamed.ready`` depends
    combinationally on ``output.ready``; ``output.valid`` does not depend on any ``ready``.

    The fold runs in key space (see :mod:`maxaccel.hdl.lane`), per lane, with every
    register-to-register path about one half of a :class:`KeyMax` or of a :class:`ToKey`:

    * a two-stage *pair* :class:`KeyMax` takes the max of the slot's two replayed beats;
    * the replayed beat (all padding, key 0, when M = 0, so that the max below is the
      streamed beat) and the streamed beat go through :class:`ToKey` in two register stages;
    * a two-stage *first* :class:`KeyMax` takes, for slot 0 of an output beat, the max of its
      operand and the streamed beat (of every slot, in a fold); it passes the slot's operand
      through (``take_b``) for slots k > 0, and for slot 0 when nothing streams (the key of a
      value is already that of the max of the value with itself, NaNs canonical);
    * the slots of each output beat are then folded as
      :class:`~maxaccel.hdl.reduce.RunAccumulator` folds a run, a two-cycle loop of two
      interleaved partial maxima and a two-stage close, whose result register is the output
      register;
    * :class:`FromKey` turns that register into the output data (canonical NaNs).

    The address generator runs ahead of the pipeline into a two-entry queue
    (:class:`amaranth.lib.fifo.SyncFIFO`) of buffer addresses and slot tags, so its counters
    load on the queue's ``w_rdy`` alone: no path runs from the output or streamed handshakes,
    or from ``advance`` (the one enable of the pipeline), into the counters. Their end tests
    (last slot, last beat of a row, each outer counter at 0) are registers, set when the
    counters are loaded. The element format is decoded when the ``RUN`` is accepted, and
    every pipeline stage carries its own copy of it, so no format register fans out to the
    whole datapath.
    """

    #: Cycles from a ``RUN`` accepted to its first output beat valid.
    LATENCY = 14

    #: Replayed beats read per cycle: the buffer has this many read ports (a copy of the
    #: block RAM each), so an output beat of M replayed operands takes ``ceil(M / 2)`` cycles.
    READ_PORTS = 2

    class Signature(UnitSignature):
        """:class:`BroadcastMax`'s signature: ``BroadcastMax.Signature(lanes, depth, max_dims,
        max_operands, *, max_count=65535, max_streamed=255, dtype=None)``, the unit's
        parameters, each checked (``ValueError``); without ``dtype`` a ``config.dtype``
        field. Its :attr:`stall`: ``streamed.ready`` is combinational on ``output.ready``."""

        stall = Stall("streamed", "output", registered=False)

        def __init__(self, lanes, depth, max_dims, max_operands, *, max_count=65535,
                     max_streamed=255, dtype=None):
            dtype = self.check_parameters(lanes, depth, max_dims, max_operands,
                                          max_count=max_count, max_streamed=max_streamed,
                                          dtype=dtype)
            command_layout, config_layout = BroadcastMax.layouts(
                lanes, depth, max_dims, max_operands, max_count, max_streamed, dtype)
            beat = beat_layout(lanes)
            super().__init__({
                "command": In(stream.Signature(command_layout)),
                "config": In(config_layout),
                "load": In(stream.Signature(beat)),
                "streamed": In(stream.Signature(beat)),
                "output": Out(stream.Signature(beat)),
                "busy": Out(1),
            }, lanes=lanes, depth=depth, max_dims=max_dims, max_operands=max_operands,
               max_count=max_count, max_streamed=max_streamed, dtype=dtype)

        @classmethod
        def check_parameters(cls, lanes, depth, max_dims, max_operands, *, max_count=65535,
                             max_streamed=255, dtype=None):
            """The static element type; ``ValueError`` for a parameter below its least
            value (``depth`` 2, the others 1) or an unknown ``dtype``."""
            for name, value, least in [("lanes", lanes, 1), ("depth", depth, 2),
                                       ("max_dims", max_dims, 1),
                                       ("max_operands", max_operands, 1),
                                       ("max_count", max_count, 1),
                                       ("max_streamed", max_streamed, 2)]:
                if not isinstance(value, int) or value < least:
                    raise ValueError(f"BroadcastMax {name} must be an integer >= {least}, "
                                     f"not {value!r}")
            return check_dtype(dtype, "BroadcastMax")

    def __init__(self, lanes, depth, max_dims, max_operands, *, max_count=65535,
                 max_streamed=255, dtype=None):
        super().__init__(lanes, depth, max_dims, max_operands, max_count=max_count,
                         max_streamed=max_streamed, dtype=dtype)
        #: Width of a buffer address; operand steps are taken modulo ``2**addr_bits``.
        self.addr_bits = (depth - 1).bit_length()
        self.command_layout = self.command.payload.shape()
        self.config_layout = self.config.shape()

    @staticmethod
    def layouts(lanes, depth, max_dims, max_operands, max_count, max_streamed=255,
                dtype=None):
        """``(command_layout, config_layout)`` of a unit with these parameters (no
        ``config.dtype`` with a static ``dtype``)."""
        address = unsigned((depth - 1).bit_length())
        command_layout = data.StructLayout({
            "op": BroadcastOp,
            "base": address,
            "count": range(depth + 1),
            "fill": 1,
        })
        config_layout = data.StructLayout({
            **({"dtype": DType} if dtype is None else {}),
            "minimum": 1,
            "operands": range(max_operands + 1),
            "streamed": range(max_streamed + 1),
            "row_beats": range(max_count + 1),
            "last_nbytes": range(LANE_BYTES * lanes + 1),
            "counts": data.ArrayLayout(range(max_count + 1), max_dims),
            "operand": data.ArrayLayout(data.StructLayout({
                "base": address,
                "splat": 1,
                "steps": data.ArrayLayout(address, max_dims),
            }), max_operands),
        })
        return command_layout, config_layout

    @property
    def limits(self):
        """The capacity limits, as keyword arguments of ``plan_broadcast``."""
        return {"lanes": self.lanes, "depth": self.depth, "max_dims": self.max_dims,
                "max_operands": self.max_operands, "max_count": self.max_count}

    def elaborate(self, platform):
        m = Module()
        lane_array = data.ArrayLayout(LANE_BITS, self.lanes)

        m.submodules.buffer = buffer = Memory(shape=lane_array, depth=self.depth, init=[])
        write = buffer.write_port()
        reads = [buffer.read_port(domain="sync") for _ in range(self.READ_PORTS)]

        loading = Signal()
        busy = Signal()         # a LOAD or a RUN is executing
        m.d.comb += [self.command.ready.eq(~busy), self.busy.eq(busy)]

        load = self._load_writer(m, write, loading, busy)
        run = self._address_generator(m)
        self._pipeline(m, reads, run, busy)
        self._commands(m, load, run, loading, busy)
        return m

    def _load_writer(self, m, write, loading, busy):
        """``LOAD``: consecutive writes from the load stream. Returns its registers."""
        lanes = self.lanes
        # ---- LOAD: consecutive writes from the load stream.
        load_address = Signal(self.addr_bits)
        load_left = Signal(range(self.depth + 1))
        # A filling LOAD repeats the beat's first element (of ``fill_size`` bytes, one-hot).
        fill_size = Signal(len(ELEMENT_SIZES), reset_less=True)
        first_element = self.load.payload.data[0]
        repeated = Signal(LANE_BITS)
        for k, size in enumerate(ELEMENT_SIZES):
            with m.If(fill_size[k]):
                m.d.comb += repeated.eq(first_element[:8 * size].replicate(LANE_BYTES // size))
        m.d.comb += [
            self.load.ready.eq(loading),
            write.addr.eq(load_address),
            write.data.eq(self.load.payload.data),
            write.en.eq(self.load.valid & loading),
        ]
        with m.If(fill_size.any()):
            m.d.comb += write.data.eq(repeated.replicate(lanes))
        with m.If(self.load.valid & loading):
            m.d.sync += [load_address.eq(load_address + 1), load_left.eq(load_left - 1)]
            with m.If(load_left == 1):
                m.d.sync += [loading.eq(0), busy.eq(0)]
        return SimpleNamespace(address=load_address, left=load_left, fill_size=fill_size)

    def _address_generator(self, m):
        """``RUN``'s address generator, in front of the queue. Returns its registers."""
        lanes, config = self.lanes, self.config
        # ---- RUN, the address generator: walks (outer indices, beat, slot) and queues, for
        # each slot, the buffer address to read and the slot's tag. It runs ahead of the
        # pipeline as far as the two-entry queue lets it, so its counters load on registers
        # alone (``queue.w_rdy``) and never wait on the output or streamed handshakes.
        operand_count = self.max_operands
        # Slots per output beat: the pairs of the M replayed operands (two read ports), or the
        # S streamed beats of a fold. Slot p reads operands 2p and 2p + 1.
        pairs = -(-operand_count // self.READ_PORTS)
        port_bits = self.READ_PORTS.bit_length() - 1      # READ_PORTS is a power of two
        slot_limit = max(pairs, self.max_streamed)
        issuing = Signal()
        # The registers below are all loaded when a RUN is accepted, so they need no reset
        # (which would keep their enables out of the flip-flops' clock enables).
        slot = Signal(range(slot_limit), reset_less=True)
        beat = Signal(range(self.max_count), reset_less=True)
        # Outer counters count down to 0; ``at_end[d]`` (left[d] == 0), ``last_slot`` and
        # ``last_beat`` are registers, set when their counter is loaded, so no compare sits on
        # the paths through the counters and the row addresses.
        left = [Signal(range(self.max_count), name=f"left{d}", reset_less=True)
                for d in range(self.max_dims)]
        at_end = [Signal(name=f"at_end{d}", reset_less=True) for d in range(self.max_dims)]
        row_address = Signal(data.ArrayLayout(self.addr_bits, operand_count), reset_less=True)
        # Each operand's address of the current beat (row address + beat, + 0 for a splat
        # operand), kept in registers so that queueing a slot is a select, not an add.
        beat_address = Signal(data.ArrayLayout(self.addr_bits, operand_count), reset_less=True)
        # Registered when the RUN is accepted, to keep subtractions off the counter paths.
        before_final_slot = Signal(range(slot_limit), reset_less=True)      # slots - 2
        full_pairs = Signal(range(pairs + 1), reset_less=True)              # operands // 2
        single_slot = Signal(reset_less=True)                               # slots <= 1
        before_final_beat = Signal(range(self.max_count), reset_less=True)  # row_beats - 2
        single_beat = Signal(reset_less=True)                               # row_beats == 1
        last_slot = Signal(reset_less=True)
        last_beat = Signal(reset_less=True)

        # Registered when the RUN is accepted: the element format, decoded once per RUN so the
        # decode is off the datapath, the minimum select that goes with it, and "no operand is
        # replayed" (the streamed beat is then the only operand).
        if self.signature.dtype is None:
            m.submodules.decode = decode = LaneDecode()
            m.d.comb += decode.dtype.eq(config.dtype)
            decoded = decode.format
        else:
            decoded = constant_format(self.dtype)    # a static element type
        lane_format = Signal(LaneFormat, reset_less=True)
        lane_minimum = Signal(reset_less=True)
        stream_only = Signal(reset_less=True)

        # Innermost counter that does not wrap advances; the ones inside it wrap.
        advances, wraps = [], []
        carry = Const(1)
        for d in reversed(range(self.max_dims)):
            advance_d, wrap_d = Signal(name=f"advance{d}"), Signal(name=f"wrap{d}")
            m.d.comb += [advance_d.eq(carry & ~at_end[d]), wrap_d.eq(carry & at_end[d])]
            advances.insert(0, advance_d)
            wraps.insert(0, wrap_d)
            carry = wrap_d
        finished = carry
        # The row-address change of each operand when this row ends.
        steps = []
        for k in range(operand_count):
            step = Signal(self.addr_bits, name=f"step{k}")
            for d in range(self.max_dims):
                with m.If(advances[d]):
                    m.d.comb += step.eq(config.operand[k].steps[d])
            steps.append(step)

        # Each queued slot carries this tag down the pipeline; ``valid`` travels beside it.
        nbytes_shape = range(LANE_BYTES * lanes + 1)
        slot_tag = data.StructLayout({
            "stream": 1,        # a valid slot 0 of a pass with a streamed operand
            "second": 1,        # the slot's second read port reads an operand
            "last_slot": 1,
            "first": 1, "last": 1, "nbytes": nbytes_shape,
            "final": 1,         # the pass's last slot
        })
        entry = data.StructLayout({
            "address": data.ArrayLayout(self.addr_bits, self.READ_PORTS), "tag": slot_tag})
        m.submodules.queue = queue = SyncFIFO(width=entry.size, depth=2)
        queued = Signal(entry)
        issue = Signal()
        m.d.comb += [
            issue.eq(issuing & queue.w_rdy),
            queue.w_en.eq(issue),
            queue.w_data.eq(queued.as_value()),
            queued.tag.stream.eq(((slot == 0) | stream_only) & config.streamed.any()),
            queued.tag.second.eq(slot < full_pairs),
            queued.tag.last_slot.eq(last_slot),
            queued.tag.first.eq(beat == 0),
            queued.tag.last.eq(last_beat),
            queued.tag.nbytes.eq(Mux(last_beat, config.last_nbytes, LANE_BYTES * lanes)),
            queued.tag.final.eq(last_slot & last_beat & finished),
        ]

        # Slot p's addresses: operands 2p and 2p + 1 (a fold's slots read addresses nobody uses).
        with m.Switch(slot):
            for pair in range(pairs):
                with m.Case(pair):
                    for port in range(self.READ_PORTS):
                        k = self.READ_PORTS * pair + port
                        if k < operand_count:
                            m.d.comb += queued.address[port].eq(beat_address[k])

        # Each counter's next value is formed from registers alone, and ``issue`` only enables
        # the load.
        step_row = Signal()
        m.d.comb += step_row.eq(issue & last_slot)
        with m.If(issue):
            with m.If(~last_slot):
                m.d.sync += [slot.eq(slot + 1), last_slot.eq(slot == before_final_slot)]
            with m.Else():
                m.d.sync += [slot.eq(0), last_slot.eq(single_slot)]
        with m.If(step_row):
            with m.If(~last_beat):
                m.d.sync += [beat.eq(beat + 1), last_beat.eq(beat == before_final_beat)]
            with m.Else():
                m.d.sync += [beat.eq(0), last_beat.eq(single_beat)]
        # The outer counters and the row addresses move when a row ends.
        row_ends = Signal()
        m.d.comb += row_ends.eq(step_row & last_beat)
        for d in range(self.max_dims):
            with m.If(row_ends & (advances[d] | wraps[d])):
                m.d.sync += [
                    left[d].eq(Mux(advances[d], left[d] - 1, config.counts[d] - 1)),
                    at_end[d].eq(Mux(advances[d], left[d] == 1, config.counts[d] == 1)),
                ]
        for k in range(operand_count):
            with m.If(row_ends):
                next_row = row_address[k] + steps[k]
                m.d.sync += [row_address[k].eq(next_row), beat_address[k].eq(next_row)]
            with m.Elif(step_row):
                m.d.sync += beat_address[k].eq(beat_address[k] + ~config.operand[k].splat)
        with m.If(row_ends):
            with m.If(finished):
                m.d.sync += issuing.eq(0)
        return SimpleNamespace(slot_tag=slot_tag, entry=entry, queue=queue,
                               lane_format=lane_format, lane_minimum=lane_minimum,
                               stream_only=stream_only, decoded=decoded,
                               issuing=issuing, slot=slot, beat=beat, left=left, at_end=at_end,
                               port_bits=port_bits, operand_count=operand_count,
                               before_final_slot=before_final_slot, full_pairs=full_pairs,
                               single_slot=single_slot, last_slot=last_slot,
                               before_final_beat=before_final_beat, single_beat=single_beat,
                               last_beat=last_beat, row_address=row_address,
                               beat_address=beat_address)

    def _pipeline(self, m, reads, run, busy):
        """``RUN``'s pipeline behind the queue, to the output."""
        lanes = self.lanes
        slot_tag, entry, queue = run.slot_tag, run.entry, run.queue
        lane_format, lane_minimum, stream_only = run.lane_format, run.lane_minimum, run.stream_only
        # ---- RUN, the pipeline behind the queue. It moves together (one enable, ``advance``):
        # when the output register is free or being taken, and the streamed beat is there if
        # stage 3 holds a slot that needs it. Stage 0 is the queue's head, whose address the
        # memory reads; stage 1 is the memory's read register.
        # Every stage's tag holds its own copy of the element format, loaded with the slot at
        # stage 1, so each stage's logic reads a register of its own instead of all stages one
        # register with a fanout of thousands. A stage may read the copy of an earlier stage:
        # every slot behind a valid one entered after the RUN was accepted (the pipeline is
        # empty then), so it carries the same format.
        tag = data.StructLayout({**{name: field.shape for name, field in slot_tag},
                                 "format": LaneFormat, "minimum": 1})
        advance = Signal()
        head = data.View(entry, queue.r_data)
        head_tag = Signal(tag)
        m.d.comb += [
            head_tag.as_value()[:slot_tag.size].eq(head.tag),    # the fields in common
            head_tag.stream.eq(head.tag.stream & queue.r_rdy),
            head_tag.format.eq(lane_format),
            head_tag.minimum.eq(lane_minimum),
            *[read.addr.eq(head.address[port]) for port, read in enumerate(reads)],
            *[read.en.eq(advance) for read in reads],
            queue.r_en.eq(advance),
        ]
        s1_valid, s1 = delay(m, "s1", advance, queue.r_rdy, head_tag, tag, 1)
        needs_stream = Signal()
        output_free = ~self.output.valid | self.output.ready
        m.d.comb += [
            advance.eq(output_free & (~needs_stream | self.streamed.valid)),
            self.streamed.ready.eq(needs_stream & output_free),
        ]

        # 2, 3: the read data registered twice: the memory's slow clock-to-output (5.6 ns on
        # the ECP5) stays alone in its cycle, into a register that feeds only the next one, so
        # that it can sit next to the block RAM. The streamed beat is taken in stage 3.
        s2_valid, s2 = delay(m, "s2", advance, s1_valid, s1, tag, 1)
        s2_data = [register(m, advance, read.data, f"s2_data_{port}")
                   for port, read in enumerate(reads)]
        s3_valid, s3 = delay(m, "s3", advance, s2_valid, s2, tag, 1)
        s3_data = [register(m, advance, d, f"s3_data_{port}") for port, d in enumerate(s2_data)]
        m.d.comb += needs_stream.eq(s3.stream)

        # 4, 5: the replayed beats' and the streamed beat's order keys, in two stages (ToKey's
        # NaN tests, then the key). A replayed beat that holds no operand (all of them with no
        # replayed operand, the second of an odd M's last pair) is all padding, key 0, below
        # every value's key, so the maxima below are those of the other operands.
        keys_valid, keys_tag = delay(m, "keys", advance, s3_valid, s3, tag, 1)
        filled = [Mux(stream_only, 0, (1 << LANE_BYTES) - 1),
                  Mux(s3.second, (1 << LANE_BYTES) - 1, 0)]
        slot_keys = [to_keys(m, advance, keys_tag.format,
                             [lane_of(s3_data[port], j) for j in range(lanes)],
                             filled=[filled[port]] * lanes, name=f"slot_key_{port}",
                             minimum=keys_tag.minimum)
                     for port in range(self.READ_PORTS)]
        streamed_keys = to_keys(m, advance, s3.format, list(self.streamed.payload.data),
                                name="streamed_key", minimum=s3.minimum)
        keys_valid, keys_tag = delay(m, "keys_2", advance, keys_valid, keys_tag, tag, 1)

        # 6, 7: the max of the slot's two replayed beats; the streamed beat's keys wait.
        pair_keys = [key_max(m, f"pair_{j}", advance, keys_tag.format.size, a, b)
                     for j, (a, b) in enumerate(zip(*slot_keys))]
        streamed_keys = [register(m, advance, register(m, advance, key, f"streamed_wait_{j}"),
                                  f"streamed_waited_{j}")
                         for j, key in enumerate(streamed_keys)]
        pair_valid, pair_tag = delay(m, "pair", advance, keys_valid, keys_tag, tag, 2)

        # 8, 9: the slot's operands, max'ed with the streamed beat in slot 0 (KeyMax.take_b
        # passes them through otherwise; max(x, x) would be x).
        firsts = [key_max(m, f"first_{j}", advance, pair_tag.format.size, streamed_key,
                          pair_key, take_b=~pair_tag.stream)
                  for j, (pair_key, streamed_key) in enumerate(zip(pair_keys, streamed_keys))]
        first_valid, first_tag = delay(m, "first", advance, pair_valid, pair_tag, tag, 2)

        # 10 to 13: the slots of each output beat folded, as RunAccumulator folds a run (two
        # interleaved partial maxima, then their max); its result register is the output
        # register, turned into values by FromKey.
        results, result_valid = accumulate_runs(m, advance, first_tag.format, firsts,
                                                first_valid, first_tag.last_slot,
                                                minimum=first_tag.minimum)
        _, out = delay(m, "out", advance, first_valid, first_tag, tag,
                       RunAccumulator.LATENCY)
        m.d.comb += [
            self.output.valid.eq(result_valid),
            self.output.payload.first.eq(out.first),
            self.output.payload.last.eq(out.last),
            self.output.payload.nbytes.eq(out.nbytes),
        ]
        # A beat taken while the pipeline waits for the streamed beat leaves the register.
        with m.If(~advance & self.output.ready):
            m.d.sync += result_valid.eq(0)
        for j, result in enumerate(results):
            m.d.comb += self.output.payload.data[j].eq(
                from_key(m, f"value_{j}", out.format, result, out.minimum))

        # The pass ends when its last output beat is taken.
        with m.If(self.output.valid & self.output.ready & out.final):
            m.d.sync += busy.eq(0)

    def _commands(self, m, load, run, loading, busy):
        """The commands, accepted only when idle (so nothing else is active)."""
        config = self.config
        load_address, load_left, fill_size = load.address, load.left, load.fill_size
        decoded, issuing, slot, beat = run.decoded, run.issuing, run.slot, run.beat
        lane_format, lane_minimum, stream_only = run.lane_format, run.lane_minimum, run.stream_only
        left, at_end = run.left, run.at_end
        port_bits, operand_count = run.port_bits, run.operand_count
        before_final_slot, full_pairs, single_slot, last_slot = \
            run.before_final_slot, run.full_pairs, run.single_slot, run.last_slot
        before_final_beat, single_beat, last_beat = \
            run.before_final_beat, run.single_beat, run.last_beat
        row_address, beat_address = run.row_address, run.beat_address
        # ---- Commands (only accepted when idle, so nothing above is active).
        with m.If(self.command.valid & self.command.ready):
            command = self.command.payload
            with m.If(command.op == BroadcastOp.LOAD):
                m.d.sync += [
                    load_address.eq(command.base),
                    load_left.eq(command.count),
                    fill_size.eq(Mux(command.fill, decoded.size, 0)),
                    loading.eq(command.count != 0),
                    busy.eq(command.count != 0),
                ]
            with m.Else():
                m.d.sync += [busy.eq(1), issuing.eq(1), slot.eq(0), beat.eq(0),
                             lane_format.eq(decoded), lane_minimum.eq(config.minimum),
                             stream_only.eq(config.operands == 0)]
                for d in range(self.max_dims):
                    m.d.sync += [left[d].eq(config.counts[d] - 1),
                                 at_end[d].eq(config.counts[d] == 1)]
                slots = Mux(config.operands == 0, config.streamed,
                            (config.operands + self.READ_PORTS - 1) >> port_bits)
                m.d.sync += [
                    before_final_slot.eq(slots - 2),
                    full_pairs.eq(config.operands >> port_bits),
                    single_slot.eq(slots <= 1),
                    last_slot.eq(slots <= 1),
                    before_final_beat.eq(config.row_beats - 2),
                    single_beat.eq(config.row_beats == 1),
                    last_beat.eq(config.row_beats == 1),
                ]
                m.d.sync += [row_address[k].eq(config.operand[k].base)
                             for k in range(operand_count)]
                m.d.sync += [beat_address[k].eq(config.operand[k].base)
                             for k in range(operand_count)]
