"""What a device reports of itself: the ``IDENTIFY`` reply (``docs/protocol.md``)."""

import struct
from dataclasses import dataclass

from .blocks import WINDOW_FIELD_MAX

__all__ = ["Identity"]


@dataclass(frozen=True)
class Identity:
    """What ``IDENTIFY`` reports: the device's protocol version, datapath and capacities.

    Attributes
    ----------
    version : int
        Protocol version.
    lanes : int
        64-bit lanes per datapath beat (8 * lanes bytes per cycle).
    dtypes : frozenset of int
        Supported ONNX element type codes.
    replay_depth : int
        Beats the broadcast replay buffer holds.
    max_dims : int
        Outer dimensions a ``MAX`` pass enumerates.
    max_operands : int
        Replayed operands a ``MAX`` pass folds.
    pool_channels : int
        Channels ``POOL_CHANNELS_LAST`` can hold (for 8-byte elements; more for smaller ones,
        see ``docs/architecture.md``).
    clock_hz : int
        Core clock frequency.
    frame_timeout_cycles : int
        Idle cycles after which the device abandons a partial frame.
    window_lanes : int
        64-bit lanes of the windowed pooling unit (``MAX_POOL``), at most ``lanes``; 0 without
        the unit. It pools a beat of up to ``8 * window_lanes`` bytes a cycle: one element of
        each of ``8 * window_lanes / itemsize`` images.
    window_extent : int
        Largest kernel extent ``(kernel - 1) * dilation + 1`` of a ``MAX_POOL`` axis but the
        outermost of three (so of every axis of a 1-D or 2-D pool).
    window_columns : int
        Largest output length of the innermost axis (the line buffers' depth), when the middle
        axis's kernel extent is above 1 (a 1-D pool, or rows pooled only along themselves,
        need no line buffer).
    window_plane : int
        Largest output plane of the two inner axes (the plane buffers' depth), when the
        outermost axis's kernel extent is above 1.
    window_extent_outer : int
        Largest kernel extent of the outermost of three ``MAX_POOL`` axes (a 3-D pool's first);
        0 for a unit of two axes, which takes only an outermost axis of one element and one
        output (every 1-D and 2-D pool).
    reduce_lanes : int
        64-bit lanes of the run reducer (``REDUCE``): ``lanes``, or 0 in a core built without
        it (one made for models whose every max-family node a pooling unit serves). Default:
        ``lanes``.
    window_field_max : int
        The largest value of a ``MAX_POOL`` axis field (size, out, kernel, stride, dilation,
        pad) the windowed pooling unit holds: :data:`~maxaccel.contract.blocks.WINDOW_FIELD_MAX`
        (the default), or less in a core made for models whose pools need less (a larger
        field is then ``BAD_PARAMETER``; the host cuts such an image into tiles).
    window_indices : int
        1 when the windowed pooling unit gives MaxPool's Indices (the default), 0 in a core
        made for models that never ask for them (``MAX_POOL`` with ``indices`` 1 is then
        ``TOO_LARGE``).
    """

    version: int
    lanes: int
    dtypes: frozenset
    replay_depth: int
    max_dims: int
    max_operands: int
    pool_channels: int
    clock_hz: int
    frame_timeout_cycles: int
    window_lanes: int = 0
    window_extent: int = 0
    window_columns: int = 0
    window_plane: int = 0
    window_extent_outer: int = 0
    reduce_lanes: int = None
    window_field_max: int = WINDOW_FIELD_MAX
    window_indices: int = 1

    STRUCT = struct.Struct("<BBIIBBIIIBBIIBBHB")

    def __post_init__(self):
        if self.reduce_lanes is None:
            object.__setattr__(self, "reduce_lanes", self.lanes)

    def encode(self):
        bitmap = sum(1 << int(code) for code in self.dtypes)
        return self.STRUCT.pack(self.version, self.lanes, bitmap, self.replay_depth,
                                self.max_dims, self.max_operands, self.pool_channels,
                                self.clock_hz, self.frame_timeout_cycles, self.window_lanes,
                                self.window_extent, self.window_columns, self.window_plane,
                                self.window_extent_outer, self.reduce_lanes,
                                self.window_field_max, self.window_indices)

    @classmethod
    def decode(cls, payload):
        if len(payload) != cls.STRUCT.size:
            raise ValueError(f"IDENTIFY reply of {len(payload)} bytes, expected {cls.STRUCT.size}")
        (version, lanes, bitmap, *rest) = cls.STRUCT.unpack(payload)
        dtypes = frozenset(code for code in range(32) if bitmap >> code & 1)
        return cls(version, lanes, dtypes, *rest)
