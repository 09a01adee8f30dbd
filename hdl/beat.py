"""The beat: what one datapath stream transfer carries.

Datapath units exchange *rows*: a run of elements (a reduction run, a pixel's channels, the
innermost axis of an element-wise operand) is sent as consecutive beats, the first of which
starts at byte 0 of lane 0. Bytes ``nbytes`` and up of a beat are padding and carry no element;
``first`` and ``last`` mark the row's first and last beat (both set for a one-beat row). An empty
row (R = 0 elements) is one beat with ``nbytes == 0`` and both flags set.

Aligning rows to beats costs at most one partial beat per row inside the device, where a beat
moves every cycle; the link, which is far slower, carries the elements densely (the command
engine repacks).
"""

from amaranth.lib import data

from .lane import LANE_BITS, LANE_BYTES

__all__ = ["beat_layout"]


def beat_layout(lanes):
    """Layout of a beat of ``lanes`` 64-bit lanes.

    Fields
    ------
    data : ArrayLayout(64, lanes)
        Lane j holds bytes ``8*j .. 8*j+7`` of the beat; elements little-endian.
    nbytes : range(8*lanes + 1)
        Valid bytes, from byte 0; always a multiple of the element size.
    first, last : 1
        First and last beat of a row.
    """
    return data.StructLayout({
        "data": data.ArrayLayout(LANE_BITS, lanes),
        "nbytes": range(LANE_BYTES * lanes + 1),
        "first": 1,
        "last": 1,
    })
