"""A Python model of the device side of the maxaccel protocol, for fast host tests.

:class:`FakeBoard` is a transport (``write``, ``read``, ``reset_input``, ``close``) that answers
like a board: it parses frames with the protocol's own :class:`FrameParser`, abandons a partial
frame after the frame timeout (answering ``TIMEOUT``), answers a damaged frame with ``CRC_ERROR``,
answers every other status by the wire contract's ``request_verdict`` (as the engine derives its
checks from the same rules), and computes ``REDUCE`` (each run's maximum, or with the block's
``minimum`` its minimum; with ``arg`` the byte offset of its first maximum or minimum),
``POOL_CHANNELS_LAST`` (likewise), ``LOAD``, ``MAX`` (with ``minimum``, the element-wise Min)
and ``MAX_POOL`` with the golden model. ``MAX`` walks the replay buffer
exactly as the ``BroadcastMax`` unit does (row addresses advanced by the encoded steps, modulo
``2**addr_bits``), so a wrong parameter block gives wrong bits; load padding is filled with
garbage, so a host relying on it fails. ``MAX_POOL`` takes the group's images interleaved and
replies with values and Indices in the contract's layout (``separate_group_images`` and
``encode_window_reply`` of ``contract/pooling.py``, which the host's ``decode_window_reply``
reads).

``silent=True`` makes a board that never answers, ``answers=n`` one that stops answering after
n replies; tests damage its bytes with :mod:`maxaccel.sim.faults`. Not a user-facing device:
tests register it as ``fake://``.
"""

import math
import time

import numpy as np

from maxaccel.contract.dtypes import FORMATS, format_of
from maxaccel.contract.pooling import (WINDOW_RANK, encode_window_reply, separate_group_images,
                                       window_geometry)
from maxaccel.contract.wire import (COUNTERS, LANE_BYTES, PARAMETERS, VERSION, Command,
                                    FrameParser, Identity, MaxParameters, Status, encode_frame,
                                    WINDOW_INDEX_BYTES, request_verdict, window_fields)
from maxaccel.sim import reference

class FakeBoard:
    """The device side of the protocol, in Python (see the module docstring).

    Parameters
    ----------
    lanes, replay_depth, max_dims, max_operands, pool_channels : int
    window_lanes, window_extent, window_columns, window_plane : int
        Capacities reported by ``IDENTIFY`` and enforced.
    window_extent_outer : int, optional
        Likewise; default ``window_extent``.
    dtypes : iterable of DType, optional
        Supported element types (default: all).
    frame_timeout_s : float
        Silence after which a partial request frame is abandoned.
    reply_timeout_s : float
        What the host link should wait for a reply (the transport attribute).
    silent : bool
        Never answer.
    answers : int, optional
        Answer this many requests, then fall silent.
    **window
        Further :class:`Identity` capacities, reported and enforced: ``reduce_lanes``,
        ``window_field_max``, ``window_indices``.
    """

    write_chunk = 4096

    def __init__(self, *, lanes=4, replay_depth=512, max_dims=3, max_operands=3,
                 pool_channels=256, window_lanes=4, window_extent=3, window_columns=64,
                 window_plane=1024, window_extent_outer=None, dtypes=None, frame_timeout_s=0.05,
                 reply_timeout_s=0.25, silent=False, answers=None, **window):
        clock_hz = 1_000_000
        self.identity = Identity(
            VERSION, lanes, frozenset(int(d) for d in (FORMATS if dtypes is None else dtypes)),
            replay_depth, max_dims, max_operands, pool_channels, clock_hz,
            round(frame_timeout_s * clock_hz), window_lanes, window_extent, window_columns,
            window_plane, window_extent if window_extent_outer is None else window_extent_outer,
            **window)
        self.frame_timeout_s = frame_timeout_s
        self.reply_timeout_s = reply_timeout_s
        self.beat_bytes = LANE_BYTES * lanes
        self.addr_bits = (replay_depth - 1).bit_length()
        self.memory = np.zeros((replay_depth, self.beat_bytes), np.uint8)
        self.silent = silent
        self.answers = answers
        self.closed = False
        self.bytes_received = 0
        self.bytes_sent = 0
        self.log = []  # (command code, status) of every reply
        self.requests = []  # (command code, payload) of every intact request frame
        self.timeouts = 0
        self._parser = FrameParser()
        self._out = bytearray()
        self._last_byte = time.monotonic()

    # --- transport interface -------------------------------------------------------------------

    def write(self, data):
        self._check_open()
        data = bytes(data)
        self._expire()
        self.bytes_received += len(data)
        if data:
            self._last_byte = time.monotonic()
        for frame in self._parser.feed(data):
            self._answer(frame)

    def read(self, size, timeout_s):
        self._check_open()
        self._expire()
        # timeout None: what a quiescent board has (this one answers as requests arrive).
        if not self._out and timeout_s is not None and timeout_s > 0:
            deadline = time.monotonic() + timeout_s
            partial = self._parser.partial()
            if partial is not None:
                time.sleep(max(0.0, min(deadline, self._last_byte + self.frame_timeout_s)
                               - time.monotonic()))
                self._expire()
            if not self._out:
                time.sleep(max(0.0, deadline - time.monotonic()))
        data = bytes(self._out[:size])
        del self._out[:size]
        return data

    def reset_input(self):
        self._out.clear()

    def close(self):
        self.closed = True

    # --- device behaviour ----------------------------------------------------------------------

    def _check_open(self):
        if self.closed:
            raise ValueError("the fake board is closed")

    def _expire(self):
        """Abandon a partial request frame after the frame timeout, answering TIMEOUT."""
        partial = self._parser.partial()
        if self._parser.pending() and time.monotonic() - self._last_byte > self.frame_timeout_s:
            self._parser.reset()
            self.timeouts += 1
            if partial is not None:
                code, seq, _ = partial
                self._reply(code, seq, b"", Status.TIMEOUT)

    def _reply(self, code, seq, payload, status):
        self.log.append((code, Status(status)))
        if self.silent or (self.answers is not None and len(self.log) > self.answers):
            return
        wire = encode_frame(code, seq, payload, status)
        self.bytes_sent += len(wire)
        self._out += wire

    def _answer(self, frame):
        if not frame.intact:
            self._reply(frame.code, frame.seq, b"", Status.CRC_ERROR)
            return
        self.requests.append((frame.code, bytes(frame.payload)))
        # The status comes from the wire contract's rules, as the engine's does; the handlers
        # only compute the results of accepted requests.
        status = request_verdict(frame.code, frame.payload, self.identity)
        payload = b""
        if status == Status.OK:
            handler = {
                Command.IDENTIFY: self._identify, Command.COUNTERS: self._counters,
                Command.REDUCE: self._reduce, Command.POOL_CHANNELS_LAST: self._pool,
                Command.LOAD: self._load, Command.MAX: self._max,
                Command.MAX_POOL: self._max_pool,
            }[frame.code]
            payload = handler(frame.payload)
        self._reply(frame.code, frame.seq, payload, status)

    def _parameters(self, command, payload):
        block = PARAMETERS[command]
        values = block.struct.unpack_from(payload)
        return format_of(values[0]), values[1:], payload[block.size:]

    @staticmethod
    def _elements(data, fmt, shape):
        return np.frombuffer(data, fmt.uint_dtype).view(fmt.numpy_dtype).reshape(shape)

    @staticmethod
    def _bytes(values, fmt):
        return np.ascontiguousarray(values).view(fmt.uint_dtype).tobytes()

    def _identify(self, payload):
        return self.identity.encode()

    def _counters(self, payload):
        return COUNTERS.pack(0, 0, self._parser.frame_errors, self._parser.header_errors,
                             self.timeouts)

    def _reduce(self, payload):
        fmt, (runs, length, minimum, arg), data = self._parameters(Command.REDUCE, payload)
        values = self._elements(data, fmt, (runs, length))
        if arg:
            find = reference.arg_min if minimum else reference.arg_max
            offsets = find(values, axis=1, keepdims=False) * fmt.nbytes
            return offsets.astype(f"<u{WINDOW_INDEX_BYTES}").tobytes()
        reduce = reference.reduce_min if minimum else reference.reduce_max
        return self._bytes(reduce(values, axes=1, keepdims=False), fmt)

    def _pool(self, payload):
        fmt, (images, pixels, channels, minimum), data = self._parameters(
            Command.POOL_CHANNELS_LAST, payload)
        values = self._elements(data, fmt, (images, pixels, channels))
        reduce = reference.reduce_min if minimum else reference.reduce_max
        return self._bytes(reduce(values, axes=1, keepdims=False), fmt)

    def _row_beats(self, row_length, fmt):
        return -(-row_length * fmt.nbytes // self.beat_bytes)

    def _load(self, payload):
        fmt, (base, rows, row_length), data = self._parameters(Command.LOAD, payload)
        values = self._elements(data, fmt, (rows, row_length))
        row_beats = self._row_beats(row_length, fmt)
        stored = np.full((rows, row_beats * self.beat_bytes), 0xA5, np.uint8)  # padding: garbage
        stored[:, :row_length * fmt.nbytes] = values.view(np.uint8).reshape(rows, -1)
        if row_length == 1:     # a splat operand's row: the element fills its beat
            stored = np.tile(stored[:, :fmt.nbytes], self.beat_bytes // fmt.nbytes)
        self.memory[base:base + rows * row_beats] = stored.reshape(-1, self.beat_bytes)
        return b""

    def _max(self, payload):
        identity = self.identity
        parameters, data = MaxParameters.decode(payload, identity.max_dims,
                                                identity.max_operands)
        fmt = format_of(parameters.dtype)
        counts, row_length = parameters.counts, parameters.row_length
        row_beats = self._row_beats(row_length, fmt)
        rows = math.prod(counts)
        operands = []
        if parameters.streamed:
            # S streamed operands, interleaved row by row.
            streamed = self._elements(data, fmt, (rows, parameters.streamed, row_length))
            operands += [streamed[:, s] for s in range(parameters.streamed)]
        # The address generator: the row address advances by steps[d] when counter d advances
        # (the counters inside it wrap), modulo 2**addr_bits.
        index = np.indices(counts).reshape(len(counts), -1).T
        advancing = np.argmax(index[1:] != index[:-1], axis=1)
        modulus = 1 << self.addr_bits
        # Addresses past the buffer's depth read as zeros.
        memory = np.concatenate([self.memory, np.zeros(
            (modulus - len(self.memory), self.beat_bytes), np.uint8)])
        for operand in parameters.operands:
            steps = np.array(operand.steps, np.int64)
            addresses = (operand.base + np.concatenate([[0], np.cumsum(steps[advancing])])) \
                % modulus
            beats = 1 if operand.splat else row_beats
            beat_addresses = (addresses[:, None] + np.arange(beats)) % modulus
            stored = memory[beat_addresses].reshape(rows, -1)
            if operand.splat:   # one stored beat replayed for each beat of the row
                stored = np.tile(stored, row_beats)
            operands.append(stored[:, :row_length * fmt.nbytes].copy().view(fmt.numpy_dtype))
        extreme = reference.min if parameters.minimum else reference.max
        return self._bytes(extreme(*operands), fmt)

    def _max_pool(self, payload):
        block = PARAMETERS[Command.MAX_POOL]
        fields = block.unpack(payload)
        fmt = format_of(fields["dtype"])
        group, groups = fields["group"], fields["groups"]
        config = [{name: fields[field] for name, field in window_fields(axis).items()}
                  for axis in range(WINDOW_RANK)]
        geometry = window_geometry(config, groups * group)
        data = self._elements(payload[block.size:], fmt, (groups, -1, group))
        images = separate_group_images(data).reshape(geometry.input_shape)
        y, indices = reference.pool_windows(images, fmt, geometry, return_indices=True)
        y = y.reshape(groups * group, -1)
        positions = None
        if fields["indices"]:
            positions = (indices.reshape(groups * group, -1)
                         - np.arange(groups * group)[:, None] * geometry.channel_stride)
        return encode_window_reply(y, positions, fmt, group)


class CountingBoard(FakeBoard):
    """The fake board, keeping every MAX_POOL parameter block it was sent."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.blocks = []

    def _max_pool(self, payload):
        self.blocks.append(PARAMETERS[Command.MAX_POOL].unpack(payload))
        return super()._max_pool(payload)


__all__ = ["CountingBoard", "FakeBoard"]
