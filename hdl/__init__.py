"""Gateware for maxaccel: the comparator lane, the streaming max units, the command engine.

The library (``docs/library.md``): units a designer takes into their own Amaranth design, each
a :class:`~amaranth.lib.wiring.Component` with a nested ``Signature`` that carries and checks
its parameters, :mod:`amaranth.lib.stream` ports, and an optional static element type. They
know nothing of maxaccel's wire protocol (the command engine's adapters, in
:mod:`maxaccel.hdl.routing`, drive them from it).
"""

from .beat import beat_layout
from .broadcast import BroadcastMax, BroadcastOp
from .lane import FromKey, KeyMax, LaneDecode, LaneFormat, LaneMax, ToKey, lane_format
from .pool import ChannelsLastPool
from .reduce import RunReducer
from .unit import Stall
from .window import WindowMaxPool, axis_layout
from .window_serial import SerialWindowMaxPool

__all__ = ["KeyMax", "RunReducer", "ChannelsLastPool", "WindowMaxPool", "SerialWindowMaxPool",
           "BroadcastMax",
           "BroadcastOp", "ToKey", "FromKey", "LaneMax", "LaneDecode", "LaneFormat",
           "lane_format", "beat_layout", "axis_layout", "Stall"]
