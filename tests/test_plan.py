"""The broadcast planner: shapes, coalescing, placement, limits, packing (pure host, fast).

The central check replays every plan on a Python model of ``BroadcastMax``'s address generator
(row addresses advanced by ``steps`` modulo ``2**addr_bits``; a splat operand's one beat per row
replayed as stored) and compares each fetched beat with ``numpy.broadcast_to`` of the operand.
"""

import itertools

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

from maxaccel.host.plan import BroadcastError, CapacityError, broadcast_shape, plan_broadcast
from broadcast_model import (load_commands, pack_operand, run_cycles, unit_config,
                             unpack_output)

LIMITS = dict(lanes=2, depth=4096, max_dims=6, max_operands=8)


def model_replay(plan, arrays):
    """Yield ``(output beat, operand index, fetched beat, expected beat)`` for every replayed
    operand, as the unit's address generator fetches them."""
    modulus = 1 << plan.addr_bits
    memory = np.full((plan.depth, plan.beat_bytes), 0xA5, np.uint8)
    for index, base, beats in load_commands(plan):
        memory[base:base + beats] = pack_operand(plan, index, arrays[index])
    expected = {}
    for o in plan.replayed:
        full = np.broadcast_to(arrays[o.index], plan.output_shape).reshape(-1, plan.row_elements)
        rows = np.zeros((full.shape[0], plan.row_beats * plan.beat_bytes), np.uint8)
        rows[:, :plan.row_elements * plan.itemsize] = np.ascontiguousarray(full).view(np.uint8)
        expected[o.index] = rows.reshape(-1, plan.beat_bytes)
    row_address = {o.index: o.base % modulus for o in plan.replayed}
    beat_number = 0
    for index in itertools.product(*(range(c) for c in plan.counts)):
        for beat in range(plan.row_beats):
            for o in plan.replayed:
                address = (row_address[o.index] + (0 if o.splat else beat)) % modulus
                assert address < plan.depth
                fetched = memory[address]
                yield beat_number, o.index, fetched, expected[o.index][beat_number]
            beat_number += 1
        # The innermost counter that does not wrap advances.
        for d in reversed(range(len(plan.counts))):
            if index[d] != plan.counts[d] - 1:
                for o in plan.replayed:
                    row_address[o.index] = (row_address[o.index] + o.steps[d]) % modulus
                break
    assert beat_number == plan.output_beats


def distinct_values(shape, dtype, seed):
    """Values that tell elements apart (as far as the width allows)."""
    count = int(np.prod(shape, dtype=np.int64))
    bits = np.arange(count, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(seed)
    return bits.astype(f"u{dtype.itemsize}").view(dtype).reshape(shape)  # keeps the low bytes


def check_replay(shapes, itemsize, **limits):
    limits = {**LIMITS, **limits}
    plan = plan_broadcast(shapes, itemsize, **limits)
    dtype = np.dtype(f"u{itemsize}")
    arrays = [distinct_values(s, dtype, 17 * i + 1) for i, s in enumerate(shapes)]
    for beat, operand, fetched, expected in model_replay(plan, arrays):
        valid = plan.last_nbytes if (beat + 1) % plan.row_beats == 0 else plan.beat_bytes
        assert fetched[:valid].tobytes() == expected[:valid].tobytes(), \
            f"{shapes}: output beat {beat}, operand {operand}"
    return plan, arrays


def broadcastable(most_operands, max_dims, max_side):
    return st.integers(1, most_operands).flatmap(lambda n: mutually_broadcastable_shapes(
        num_shapes=n, min_dims=0, max_dims=max_dims, min_side=0, max_side=max_side))


@settings(max_examples=400)
@given(broadcastable(5, 5, 4),
       st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]))
def test_replay_model_matches_broadcast(shapes_and_result, itemsize, lanes, depth_slack):
    shapes, result = shapes_and_result.input_shapes, shapes_and_result.result_shape
    plan = plan_broadcast(shapes, itemsize, **{**LIMITS, "lanes": lanes}, check=False)
    assert plan.output_shape == result == np.broadcast_shapes(*shapes)
    if plan.empty or not plan.fits:
        return
    # Exactly enough memory (odd depths too), so addresses must wrap modulo 2**addr_bits.
    depth = max(plan.memory_beats + depth_slack - 1, 2)
    check_replay(shapes, itemsize, lanes=lanes, depth=depth)


@given(broadcastable(6, 6, 3))
def test_coalescing_is_minimal(shapes_and_result):
    shapes = shapes_and_result.input_shapes
    plan = plan_broadcast(shapes, 4, **LIMITS, check=False)
    if plan.empty:
        return
    assert np.prod(plan.dims) == np.prod(plan.output_shape)
    patterns = [tuple(o.groups[d] != 1 for o in plan.operands) for d in range(len(plan.dims))]
    if plan.dims != (1,):
        assert 1 not in plan.dims
        assert all(a != b for a, b in zip(patterns, patterns[1:]))
    full = [o.index for o in plan.operands if o.groups == plan.dims]
    assert [o.index for o in plan.operands if o.streamed] == full[:1]
    for o in plan.operands:
        assert np.prod(o.groups) == np.prod(o.shape)
        assert o.splat == (o.groups[-1] == 1 and plan.dims[-1] != 1)


def test_examples():
    plan = plan_broadcast([(2, 3, 4), (4,)], 4, **LIMITS)
    assert plan.output_shape == (2, 3, 4) and plan.dims == (6, 4)
    assert plan.counts == (1, 1, 1, 1, 1, 6) and plan.row_beats == 1 and plan.last_nbytes == 16
    assert plan.streamed.index == 0 and [o.index for o in plan.replayed] == [1]
    bias = plan.operands[1]
    assert (bias.base, bias.beats, bias.splat, set(bias.strides)) == (0, 1, False, {0})

    plan = plan_broadcast([(3, 1), (1, 5)], 2, **LIMITS)
    assert plan.streamed is None and plan.dims == (3, 5)
    column, row = plan.operands
    assert column.splat and column.strides[-1] == 1 and column.beats == 3
    assert not row.splat and row.strides[-1] == 0 and (row.base, row.beats) == (3, 1)

    plan = plan_broadcast([(2, 1, 3, 1), (1, 5, 1, 1), ()], 8, **LIMITS)
    assert plan.output_shape == (2, 5, 3, 1) and plan.dims == (2, 5, 3)
    assert plan.row_beats == 2 and plan.last_nbytes == 8
    assert [o.strides[-2:] for o in plan.replayed] == [(2, 0), (0, 1), (0, 0)]
    assert [o.splat for o in plan.replayed] == [False, True, True]

    plan = plan_broadcast([(4, 1, 1, 6), (4, 1, 1, 6)], 1, **LIMITS)
    assert plan.dims == (24,) and plan.streamed.index == 0 and plan.replayed[0].beats == 2

    plan = plan_broadcast([(), (1, 1)], 4, **LIMITS)
    assert plan.output_shape == (1, 1) and plan.dims == (1,) and plan.output_beats == 1
    assert plan.replayed[0].beats == 1 and not plan.replayed[0].splat


def test_streamed_operand_is_the_first_full_one():
    plan = plan_broadcast([(3,), (2, 3), (2, 1), (1, 2, 3), (2, 3)], 4, **LIMITS)
    assert plan.streamed.index == 1
    assert [o.slot for o in plan.replayed] == [0, 1, 2, 3]
    assert [o.base for o in plan.replayed] == [0, 1, 3, 5]


def test_steps_follow_strides():
    plan = plan_broadcast([(3, 1, 4, 5), (1, 2, 1, 5)], 4, **{**LIMITS, "max_dims": 3})
    assert plan.counts == (3, 2, 4)
    for o in plan.replayed:
        for d in range(3):
            inner = sum((plan.counts[e] - 1) * o.strides[e] for e in range(d + 1, 3))
            assert o.steps[d] == o.strides[d] - inner
    assert any(step < 0 for o in plan.replayed for step in o.steps)
    config = unit_config(plan, 1)
    modulus = 1 << plan.addr_bits
    assert config["operand"][0]["steps"] == [s % modulus for s in plan.replayed[0].steps]
    assert config["operand"][1]["base"] == plan.replayed[1].base
    assert len(config["operand"]) == LIMITS["max_operands"]
    assert (config["operands"], config["streamed"], config["dtype"]) == (2, 0, 1)


def test_cycles():
    # 14 cycles of latency; two replayed beats read per cycle (ceil(M / 2) cycles a beat).
    assert run_cycles(plan_broadcast([(4, 16), (16,)], 4, **LIMITS)) == 14 + 4 * 4
    assert run_cycles(plan_broadcast([(4, 1), (1, 16), ()], 4, **LIMITS)) == 14 + 4 * 4 * 2


def test_shapes_that_do_not_broadcast():
    with pytest.raises(BroadcastError, match=r"axis -1 has sizes 3, 4 \(operand 0 \(2, 3\), "
                                             r"operand 2 \(4,\)\)"):
        plan_broadcast([(2, 3), (1,), (4,)], 4, **LIMITS)
    with pytest.raises(BroadcastError, match=r"axis -3"):
        broadcast_shape([(2, 1, 1), (3, 1, 1)])
    with pytest.raises(BroadcastError, match="at least one operand"):
        broadcast_shape([])
    # Callers that take any argument error (Device.max's users) catch it as a ValueError.
    with pytest.raises(ValueError, match="do not broadcast"):
        plan_broadcast([(2, 3), (4,)], 4, **LIMITS)


def test_too_many_dimensions():
    shapes = [(2, 1, 2, 1), (1, 2, 1, 2)]
    with pytest.raises(CapacityError, match=r"3 outer dimensions \(2, 2, 2\) but the unit walks "
                                            r"at most 2"):
        plan_broadcast(shapes, 4, **{**LIMITS, "max_dims": 2})
    plan_broadcast(shapes, 4, **{**LIMITS, "max_dims": 3})


def test_too_many_operands():
    with pytest.raises(CapacityError, match="3 operands must be replayed .* at most 2"):
        plan_broadcast([(4, 4), (4,), (4, 1), ()], 4, **{**LIMITS, "max_operands": 2})


def test_operands_exceeding_memory():
    limits = {**LIMITS, "lanes": 1, "depth": 20}
    with pytest.raises(CapacityError) as error:
        plan_broadcast([(3, 1, 1), (1, 4, 6)], 8, **limits)
    message = str(error.value)
    assert "need 27 beats of 8 bytes" in message and "holds 20" in message
    assert "operand 0 (3, 1, 1): 3 beats" in message and "operand 1 (1, 4, 6): 24 beats" in message
    plan = error.value.plan
    assert not plan.fits and plan.memory_beats == 27
    plan_broadcast([(3, 1, 1), (1, 4, 6)], 8, **{**limits, "depth": 27})


def test_counts_too_large():
    with pytest.raises(CapacityError, match=r"an outer count above MAX_COUNT.*outer counts \(70,\).*"
                                            r"count limit is 64"):
        plan_broadcast([(70, 4), (4,)], 4, **LIMITS, max_count=64)
    with pytest.raises(CapacityError, match="a row of more than MAX_COUNT beats.*rows of 300 "
                                            "elements in 75 beats"):
        plan_broadcast([(300,)], 4, **LIMITS, max_count=64)


def test_check_false_reports_every_problem():
    plan = plan_broadcast([(2, 1, 2, 1), (1, 2, 1, 2), ()], 8,
                          lanes=1, depth=4, max_dims=1, max_operands=2, check=False)
    assert not plan.fits and len(plan.problems) == 3
    with pytest.raises(CapacityError) as error:
        unit_config(plan, 11)
    assert error.value.problems == list(plan.problems)


def test_empty_output():
    plan = plan_broadcast([(0, 3), (1, 3)], 4, **LIMITS)
    assert plan.empty and plan.output_shape == (0, 3) and plan.output_beats == 0
    assert plan.fits and load_commands(plan) == []
    assert pack_operand(plan, 1, np.ones((1, 3), np.float32)).shape == (0, 16)
    assert unpack_output(plan, b"", np.float32).shape == (0, 3)
    with pytest.raises(ValueError, match="nothing to run"):
        unit_config(plan, 1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float16, ml_dtypes.bfloat16,
                                   np.float32, np.int64, np.float64, ">f4", ">u2"])
@pytest.mark.parametrize("shape", [(), (1,), (5,), (3, 7), (2, 3, 17)])
def test_pack_unpack_round_trip(dtype, shape):
    dtype = np.dtype(dtype)
    values = distinct_values(shape, dtype.newbyteorder("="), 3).astype(dtype)
    plan = plan_broadcast([shape], dtype.itemsize, **LIMITS)
    beats = pack_operand(plan, 0, values)
    assert beats.dtype == np.uint8 and beats.shape == (plan.output_beats, plan.beat_bytes)
    # Little-endian elements from byte 0 of each row, zero padding.
    first_row = beats[:plan.row_beats].reshape(-1)
    little = values.astype(dtype.newbyteorder("<")).reshape(-1, plan.row_elements)[0]
    assert first_row[:plan.row_elements * dtype.itemsize].tobytes() == little.tobytes()
    assert not first_row[plan.row_elements * dtype.itemsize:].any()
    back = unpack_output(plan, beats, dtype)
    assert back.dtype == dtype and back.shape == values.shape
    assert back.tobytes() == values.tobytes()
    assert unpack_output(plan, beats.tobytes(), dtype).tobytes() == values.tobytes()


def test_pack_checks_its_input():
    plan = plan_broadcast([(2, 3), (3,)], 4, **LIMITS)
    with pytest.raises(ValueError, match=r"operand 1 has shape \(2, 3\), the plan expects \(3,\)"):
        pack_operand(plan, 1, np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="8-byte elements, the plan expects 4"):
        pack_operand(plan, 1, np.zeros(3, np.float64))
    with pytest.raises(ValueError, match="expected 2 beats of 16 bytes, got 16 bytes"):
        unpack_output(plan, np.zeros(16, np.uint8), np.float32)
    with pytest.raises(ValueError, match="itemsize"):
        plan_broadcast([(2,)], 3, **LIMITS)


def test_splat_operand_stores_one_beat_per_row():
    plan = plan_broadcast([(4, 9), (4, 1)], 2, **LIMITS)
    column = plan.operands[1]
    assert column.splat and column.row_beats == 1 and column.beats == 4
    values = np.arange(4, dtype=np.uint16).reshape(4, 1) + 1
    beats = pack_operand(plan, 1, values)
    assert beats.shape == (4, 16)
    # Each row's element fills its beat: the unit replays the beat as stored.
    assert (beats.view("<u2") == values).all()


def test_plan_module_has_no_amaranth():
    import pathlib

    import maxaccel.host.plan as plan_module
    source = pathlib.Path(plan_module.__file__).read_text()
    assert "import amaranth" not in source and "from amaranth" not in source
