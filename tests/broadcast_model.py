"""The ``BroadcastMax`` unit's view of a host plan, for the gateware tests.

:func:`unit_config` is the unit's ``config`` for a :class:`~maxaccel.host.plan.BroadcastPlan`,
:func:`load_commands` the ``LOAD`` commands it needs, :func:`run_cycles` the cycles of its
``RUN`` pass, :func:`pack_operand` lays an operand out row-aligned as the unit stores or streams
it, and :func:`unpack_output` turns the unit's output beats back into the output array (all
vectorised numpy). The host driver needs none of these: it sends dense elements and the command
engine repacks them.
"""

import numpy as np

from maxaccel.hdl.broadcast import BroadcastMax
from maxaccel.host.plan import CapacityError, _shape_text

__all__ = ["unit_config", "load_commands", "run_cycles", "slots", "pack_operand",
           "unpack_output"]


def load_commands(plan):
    """``(operand index, base, beats)`` of each ``LOAD`` command the pass needs."""
    return [(o.index, o.base, o.beats) for o in plan.replayed]


def run_cycles(plan):
    """Cycles of the ``RUN`` pass without stalls, from accepting the command to the last
    output beat: ``BroadcastMax.READ_PORTS`` replayed beats are read per cycle, and the first
    output beat is valid ``BroadcastMax.LATENCY`` cycles after the command is accepted."""
    return BroadcastMax.LATENCY + plan.output_beats * slots(plan)


def slots(plan):
    """Cycles per output beat of a pass: its replayed operands, ``READ_PORTS`` a cycle."""
    return max(-(-len(plan.replayed) // BroadcastMax.READ_PORTS), 1)


def unit_config(plan, dtype, minimum=False):
    """The unit's ``config`` value for this pass, as nested dicts and lists of ints.

    Parameters
    ----------
    plan : BroadcastPlan
    dtype : int
        ONNX element type code.
    minimum : bool
        The pass is a Min (the unit's ``minimum`` select).

    Raises
    ------
    CapacityError
        If the plan does not fit.
    ValueError
        If the output is empty (there is nothing to run).
    """
    if not plan.fits:
        raise CapacityError(plan.problems, plan)
    if plan.empty:
        raise ValueError("the output is empty: there is nothing to run")
    modulus = 1 << plan.addr_bits
    operand = [{"base": 0, "splat": 0, "steps": [0] * plan.max_dims}
               for _ in range(plan.max_operands)]
    for o in plan.replayed:
        operand[o.slot] = {"base": o.base, "splat": int(o.splat),
                           "steps": [s % modulus for s in o.steps]}
    return {
        "dtype": int(dtype),
        "minimum": int(minimum),
        "operands": len(plan.replayed),
        "streamed": int(plan.streamed is not None),
        "row_beats": plan.row_beats,
        "last_nbytes": plan.last_nbytes,
        "counts": list(plan.counts),
        "operand": operand,
    }


def _little_endian(array):
    array = np.asarray(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return np.asarray(array, order="C")  # not ascontiguousarray: it makes rank 0 rank 1


def pack_operand(plan, index, array):
    """Operand ``index`` laid out row-aligned, as the unit stores or streams it.

    Parameters
    ----------
    plan : BroadcastPlan
    index : int
        Position of the operand in the caller's list.
    array : numpy.ndarray
        The operand, of the planned shape and itemsize.

    Returns
    -------
    numpy.ndarray
        ``uint8`` of shape ``(beats, 8 * lanes)``: beat i is the i-th ``LOAD`` (or ``streamed``)
        beat, lane j in bytes ``8*j .. 8*j+7``; padding bytes are zero. A splat operand's beat
        (one per row) holds the row's element repeated across the whole beat.
    """
    operand = plan.operands[index]
    array = _little_endian(array)
    if array.shape != operand.shape:
        raise ValueError(f"operand {index} has shape {_shape_text(array.shape)}, "
                         f"the plan expects {_shape_text(operand.shape)}")
    if array.dtype.itemsize != plan.itemsize:
        raise ValueError(f"operand {index} has {array.dtype.itemsize}-byte elements, "
                         f"the plan expects {plan.itemsize}")
    if plan.empty:
        return np.zeros((0, plan.beat_bytes), np.uint8)
    row_length = operand.groups[-1]
    rows = array.reshape(-1, row_length).view(np.uint8)
    if operand.splat:
        # The unit replays the stored beat for every beat of the row as it is: the element
        # fills it.
        return np.tile(rows, plan.beat_bytes // plan.itemsize)
    padded = np.zeros((rows.shape[0], operand.row_beats * plan.beat_bytes), np.uint8)
    padded[:, :rows.shape[1]] = rows
    return padded.reshape(-1, plan.beat_bytes)


def unpack_output(plan, beats, dtype):
    """The output array from the unit's output beats.

    Parameters
    ----------
    plan : BroadcastPlan
    beats : numpy.ndarray or bytes
        ``plan.output_beats`` beats of ``8 * lanes`` bytes, in order (any shape of ``uint8``).
    dtype : numpy.dtype
        Element type of the output.

    Returns
    -------
    numpy.ndarray
        Of ``plan.output_shape``.
    """
    dtype = np.dtype(dtype)
    if dtype.itemsize != plan.itemsize:
        raise ValueError(f"{dtype} has {dtype.itemsize}-byte elements, the plan expects "
                         f"{plan.itemsize}")
    beats = np.frombuffer(beats, np.uint8) if isinstance(beats, (bytes, bytearray)) else beats
    beats = np.asarray(beats, np.uint8).reshape(-1)
    if beats.size != plan.output_beats * plan.beat_bytes:
        raise ValueError(f"expected {plan.output_beats} beats of {plan.beat_bytes} bytes, "
                         f"got {beats.size} bytes")
    if plan.empty:
        return np.zeros(plan.output_shape, dtype)
    rows = beats.reshape(-1, plan.row_beats * plan.beat_bytes)
    elements = np.ascontiguousarray(rows[:, :plan.row_elements * plan.itemsize])
    little = dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype
    return elements.view(little).reshape(plan.output_shape).astype(dtype, copy=False)
