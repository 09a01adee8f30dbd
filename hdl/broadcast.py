"""Element-wise maximum of any number of operands, with numpy broadcasting done on the device.

The output is walked in *rows* (see :mod:`maxaccel.hdl.beat`): the innermost axis of the
coalesced output shape is a row, sent as ``row_beats`` beats; the rows are enumerated by up to
``max_dims`` outer counters. Each operand reaches the unit in one of two ways:

* The **streamed** operand (at most one, of the full output shape) arrives on the ``streamed``
  input, one beat per output beat, and is never stored: the largest operand needs no memory.
* Every other operand is **replayed**: it is first loaded, row-aligned, into the on-chip replay
  buffer (a ``LOAD`` command), then read back by a strided address generator during the ``RUN``
  pass, as many times as broadcasting needs. Dimensions along which the operand is broadcast
  have stride 0; an operand whose innermost size is 1 (a *splat* operand) stores one beat per
  row and its element 0 is replicated across the beat for the run-time dtype.

The host plans all of this (:func:`maxaccel.host.plan.plan_broadcast`): it coalesces axes,
chooses the streamed operand, places the replayed ones in the buffer and fills the
:attr:`BroadcastMax.config_layout` structure. See ``docs/architecture.md``, "Element-wise Max
with broadcasting".
"""

from amaranth.hdl import Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from maxaccel.host.dtypes import DType

from .beat import beat_layout
from .lane import (ELEMENT_SIZES, LANE_BITS, LANE_BYTES, FromKey, KeyMax, LaneDecode,
                   LaneFormat, ToKey)

__all__ = ["BroadcastOp", "BroadcastMax"]


class BroadcastOp(enum.Enum, shape=1):
    """Operation of a :class:`BroadcastMax` command."""

    #: Write ``count`` beats of the ``load`` stream into the replay buffer from address ``base``.
    LOAD = 0
    #: One pass over the output index space described by ``config``.
    RUN = 1


class BroadcastMax(wiring.Component):
    """Element-wise maximum of up to ``max_operands + 1`` broadcast operands.

    Parameters
    ----------
    lanes : int
        64-bit lanes per beat.
    depth : int
        Beats the replay buffer holds (one ``Memory`` of ``depth`` x ``64 * lanes`` bits, one
        write port and one read port, so it maps to block RAM). At least 2.
    max_dims : int
        Outer dimensions of the coalesced output (rows are enumerated by this many counters).
    max_operands : int
        Replayed operands per pass; a pass folds at most ``max_operands + 1`` operands.
    max_count : int
        Largest outer count and largest row length in beats (default 65535).

    All five are available as attributes of the same names, and together as :attr:`limits`
    (keyword arguments of :func:`maxaccel.host.plan.plan_broadcast`).

    Ports
    -----
    command : In(stream.Signature(command_layout))
        ``{op: BroadcastOp, base, count}``. Accepted only when idle (``ready == ~busy``).
        ``LOAD`` writes the next ``count`` beats of ``load`` at ``base, base + 1, ...``
        (``count == 0`` does nothing); ``RUN`` makes one pass described by ``config``.
    config : In(config_layout)
        The pass description (see :attr:`config_layout`), sampled while a ``RUN`` is busy: it
        must be stable from the cycle the ``RUN`` command is offered until ``busy`` falls.
        Its fields:

        ``dtype``
            ONNX element type code.
        ``operands``
            Number M of replayed operands (0 .. ``max_operands``).
        ``streamed``
            1 if an operand arrives on ``streamed``.
        ``row_beats``, ``last_nbytes``
            Beats per output row (>= 1) and valid bytes of its last beat (1 .. ``8 * lanes``).
        ``counts[d]``
            Outer counts, outermost first, >= 1 (unused dimensions are 1).
        ``operand[k].base``
            Buffer address of the first beat of replayed operand k.
        ``operand[k].splat``
            Operand k stores one beat per row; element 0 is replicated across the beat.
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
        the output; only ``data`` is used (the framing comes from ``config``). Ready only while
        a ``RUN`` with ``streamed == 1`` needs its next beat.
    output : Out(stream.Signature(beat_layout(lanes)))
        The result rows: ``first``/``last`` mark each row, ``nbytes`` is ``8 * lanes`` except
        ``last_nbytes`` in the last beat of a row; padding bytes are unspecified.
    busy : Out(1)
        A command is executing; it falls in the cycle after the last ``LOAD`` beat is written
        or after the last output beat of a ``RUN`` is accepted.

    Throughput and latency
    ----------------------
    ``LOAD`` writes one beat per cycle. A ``RUN`` reads one replayed beat per cycle from the
    single read port, so it emits one output beat every ``max(M, 1)`` cycles: one per cycle for
    a streamed operand plus one replayed operand (or a replayed or streamed operand alone),
    one every M cycles with M replayed operands. The first output beat is valid five cycles
    after the ``RUN`` command is accepted (memory read; read data register; splat and the
    streamed beat registered; key transform; fold into the output register). ``streamed.ready`` depends combinationally on
    ``output.ready``; ``output.valid`` does not depend on any ``ready``.

    The fold runs in key space (see :mod:`maxaccel.hdl.lane`): per lane, the replayed beat and
    the streamed beat go through :class:`ToKey` into registers; one :class:`KeyMax` folds them
    into a register of keys that is both the accumulator and the output register; and
    :class:`FromKey` turns that register into the output data (canonical NaNs). The first slot
    of an output beat compares replayed operand 0 with the streamed beat (or with itself, so
    that a single operand still has its NaNs canonicalised); slot k > 0 compares replayed
    operand k with the accumulator. The element format is decoded when the ``RUN`` is accepted.
    """

    def __init__(self, lanes, depth, max_dims, max_operands, *, max_count=65535):
        for name, value, least in [("lanes", lanes, 1), ("depth", depth, 2),
                                   ("max_dims", max_dims, 1), ("max_operands", max_operands, 1),
                                   ("max_count", max_count, 1)]:
            if not isinstance(value, int) or value < least:
                raise ValueError(f"BroadcastMax {name} must be an integer >= {least}, "
                                 f"not {value!r}")
        self.lanes = lanes
        self.depth = depth
        self.max_dims = max_dims
        self.max_operands = max_operands
        self.max_count = max_count
        #: Width of a buffer address; operand steps are taken modulo ``2**addr_bits``.
        self.addr_bits = (depth - 1).bit_length()

        address = unsigned(self.addr_bits)
        #: Payload layout of ``command``.
        self.command_layout = data.StructLayout({
            "op": BroadcastOp,
            "base": address,
            "count": range(depth + 1),
        })
        #: Layout of ``config`` (field meanings in the class docstring).
        self.config_layout = data.StructLayout({
            "dtype": DType,
            "operands": range(max_operands + 1),
            "streamed": 1,
            "row_beats": range(max_count + 1),
            "last_nbytes": range(LANE_BYTES * lanes + 1),
            "counts": data.ArrayLayout(range(max_count + 1), max_dims),
            "operand": data.ArrayLayout(data.StructLayout({
                "base": address,
                "splat": 1,
                "steps": data.ArrayLayout(address, max_dims),
            }), max_operands),
        })
        beat = beat_layout(lanes)
        super().__init__({
            "command": In(stream.Signature(self.command_layout)),
            "config": In(self.config_layout),
            "load": In(stream.Signature(beat)),
            "streamed": In(stream.Signature(beat)),
            "output": Out(stream.Signature(beat)),
            "busy": Out(1),
        })

    @property
    def limits(self):
        """The capacity limits, as keyword arguments of ``plan_broadcast``."""
        return {"lanes": self.lanes, "depth": self.depth, "max_dims": self.max_dims,
                "max_operands": self.max_operands, "max_count": self.max_count}

    def elaborate(self, platform):
        m = Module()
        lanes, config = self.lanes, self.config
        lane_array = data.ArrayLayout(LANE_BITS, lanes)

        m.submodules.buffer = buffer = Memory(shape=lane_array, depth=self.depth, init=[])
        write = buffer.write_port()
        read = buffer.read_port(domain="sync")

        loading = Signal()
        running = Signal()
        idle = ~loading & ~running
        m.d.comb += [self.command.ready.eq(idle), self.busy.eq(~idle)]

        # ---- LOAD: consecutive writes from the load stream.
        load_address = Signal(self.addr_bits)
        load_left = Signal(range(self.depth + 1))
        m.d.comb += [
            self.load.ready.eq(loading),
            write.addr.eq(load_address),
            write.data.eq(self.load.payload.data),
            write.en.eq(self.load.valid & loading),
        ]
        with m.If(self.load.valid & loading):
            m.d.sync += [load_address.eq(load_address + 1), load_left.eq(load_left - 1)]
            with m.If(load_left == 1):
                m.d.sync += loading.eq(0)

        # ---- RUN, stage 0: the address generator walks (outer indices, beat, slot).
        operand_count = self.max_operands
        issuing = Signal()
        slot = Signal(range(operand_count))
        beat = Signal(range(self.max_count))
        # Outer counters count down to 0 so that their end is a zero test.
        left = [Signal(range(self.max_count), name=f"left{d}") for d in range(self.max_dims)]
        row_address = Signal(data.ArrayLayout(self.addr_bits, operand_count))
        # Registered when the RUN is accepted, to keep subtractions off the counter paths.
        final_slot = Signal(range(operand_count))
        final_beat = Signal(range(self.max_count))

        current = config.operand[slot]
        last_slot = Signal()
        last_beat = Signal()
        m.d.comb += [
            last_slot.eq(slot == final_slot),
            last_beat.eq(beat == final_beat),
            read.addr.eq(row_address[slot] + Mux(current.splat, 0, beat)),
        ]

        # Innermost counter that does not wrap advances; the ones inside it wrap.
        advances, wraps = [], []
        carry = Const(1)
        for d in reversed(range(self.max_dims)):
            at_end = left[d] == 0
            advance_d, wrap_d = Signal(name=f"advance{d}"), Signal(name=f"wrap{d}")
            m.d.comb += [advance_d.eq(carry & ~at_end), wrap_d.eq(carry & at_end)]
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

        # ---- RUN, stages 1 to 4. Each stage carries this metadata along with its data.
        nbytes_shape = range(LANE_BYTES * lanes + 1)
        tag = data.StructLayout({
            "valid": 1, "first_slot": 1, "last_slot": 1, "splat": 1,
            "first": 1, "last": 1, "nbytes": nbytes_shape,
        })
        issued = Signal(tag)
        m.d.comb += [
            issued.valid.eq(issuing),
            issued.first_slot.eq(slot == 0),
            issued.last_slot.eq(last_slot),
            issued.splat.eq(current.splat),
            issued.first.eq(beat == 0),
            issued.last.eq(last_beat),
            issued.nbytes.eq(Mux(last_beat, config.last_nbytes, LANE_BYTES * lanes)),
        ]
        # 1: the memory's read register. 2: the read data registered (the memory's slow
        # clock-to-output stays alone in its cycle). 2b: the replayed beat splatted, and the
        # streamed beat, registered (the splat's size mux and the key transform would not fit
        # one cycle together). 3: order keys of the two values the slot compares. 4: the
        # accumulator of keys, which is also the output register.
        s1, s2, s3 = Signal(tag, name="s1"), Signal(tag, name="s2"), Signal(tag, name="s3")
        s2b = Signal(tag, name="s2b")
        s2_data = Signal(lane_array)
        s2b_replayed = Signal(lane_array)
        s2b_streamed = Signal(lane_array)
        s3_key_a = Signal(lane_array)        # the operand of this slot
        s3_key_first = Signal(lane_array)    # what slot 0 compares it with
        accumulator = Signal(lane_array)
        out_first, out_last = Signal(), Signal()
        out_nbytes = Signal(nbytes_shape)
        m.d.comb += [
            self.output.payload.first.eq(out_first),
            self.output.payload.last.eq(out_last),
            self.output.payload.nbytes.eq(out_nbytes),
        ]

        # The whole pipeline moves together: when the output register is free or being taken,
        # and the streamed beat is there if stage 2 holds a slot 0 that needs it.
        needs_stream = s2.valid & s2.first_slot & config.streamed
        output_free = ~self.output.valid | self.output.ready
        advance = Signal()
        m.d.comb += [
            advance.eq(output_free & (~needs_stream | self.streamed.valid)),
            self.streamed.ready.eq(needs_stream & output_free),
            read.en.eq(advance),
        ]

        # The element format, decoded once per RUN so the decode is off the datapath.
        m.submodules.decode = decode = LaneDecode()
        m.d.comb += decode.dtype.eq(config.dtype)
        lane_format = Signal(LaneFormat)

        # Splat: replicate element 0 of lane 0 across the beat for the run-time element size.
        stored = s2_data.as_value()
        splatted = Signal(LANE_BITS * lanes)
        for k, size in enumerate(ELEMENT_SIZES):
            with m.If(lane_format.size[k]):
                m.d.comb += splatted.eq(stored[:8 * size].replicate(LANE_BYTES * lanes // size))
        replayed = Signal(lane_array)
        m.d.comb += replayed.eq(Mux(s2.splat, splatted, stored))

        # Keys from stage 2b to 3; the fold from stage 3 to 4 is one compare and a select.
        key_a, key_first, results = (Signal(lane_array, name=n)
                                     for n in ("key_a", "key_first", "results"))
        for j in range(lanes):
            m.submodules[f"replayed_key{j}"] = replayed_key = ToKey()
            m.submodules[f"streamed_key{j}"] = streamed_key = ToKey()
            m.submodules[f"compare{j}"] = compare = KeyMax()
            m.submodules[f"value{j}"] = value = FromKey()
            m.d.comb += [
                replayed_key.format.eq(lane_format), replayed_key.value.eq(s2b_replayed[j]),
                streamed_key.format.eq(lane_format),
                streamed_key.value.eq(s2b_streamed[j]),
                key_a[j].eq(Mux(config.operands == 0, streamed_key.key, replayed_key.key)),
                key_first[j].eq(Mux(config.streamed, streamed_key.key, key_a[j])),
                compare.size.eq(lane_format.size),
                compare.a.eq(s3_key_a[j]),
                compare.b.eq(Mux(s3.first_slot, s3_key_first[j], accumulator[j])),
                results[j].eq(compare.result),
                value.format.eq(lane_format), value.key.eq(accumulator[j]),
                self.output.payload.data[j].eq(value.value),
            ]

        with m.If(advance):
            m.d.sync += [
                s1.eq(issued), s2.eq(s1), s2b.eq(s2), s3.eq(s2b),
                s2_data.eq(read.data), s2b_replayed.eq(replayed),
                s2b_streamed.eq(self.streamed.payload.data),
                s3_key_a.eq(key_a), s3_key_first.eq(key_first),
                self.output.valid.eq(s3.valid & s3.last_slot),
                out_first.eq(s3.first), out_last.eq(s3.last), out_nbytes.eq(s3.nbytes),
            ]
            with m.If(s3.valid):
                m.d.sync += accumulator.eq(results)
            with m.If(issuing):
                with m.If(~last_slot):
                    m.d.sync += slot.eq(slot + 1)
                with m.Elif(~last_beat):
                    m.d.sync += [slot.eq(0), beat.eq(beat + 1)]
                with m.Else():
                    m.d.sync += [slot.eq(0), beat.eq(0)]
                    for d in range(self.max_dims):
                        with m.If(advances[d]):
                            m.d.sync += left[d].eq(left[d] - 1)
                        with m.If(wraps[d]):
                            m.d.sync += left[d].eq(config.counts[d] - 1)
                    m.d.sync += [row_address[k].eq(row_address[k] + steps[k])
                                 for k in range(operand_count)]
                    with m.If(finished):
                        m.d.sync += issuing.eq(0)
        with m.Elif(self.output.ready):
            m.d.sync += self.output.valid.eq(0)

        with m.If(running & ~issuing & ~s1.valid & ~s2.valid & ~s2b.valid & ~s3.valid
                  & output_free):
            m.d.sync += running.eq(0)

        # ---- Commands (only accepted when idle, so nothing above is active).
        with m.If(self.command.valid & self.command.ready):
            command = self.command.payload
            with m.If(command.op == BroadcastOp.LOAD):
                m.d.sync += [
                    load_address.eq(command.base),
                    load_left.eq(command.count),
                    loading.eq(command.count != 0),
                ]
            with m.Else():
                m.d.sync += [running.eq(1), issuing.eq(1), slot.eq(0), beat.eq(0),
                             lane_format.eq(decode.format)]
                m.d.sync += [left[d].eq(config.counts[d] - 1) for d in range(self.max_dims)]
                m.d.sync += [
                    final_slot.eq(Mux(config.operands == 0, 0, config.operands - 1)),
                    final_beat.eq(config.row_beats - 1),
                ]
                m.d.sync += [row_address[k].eq(config.operand[k].base)
                             for k in range(operand_count)]
        return m
