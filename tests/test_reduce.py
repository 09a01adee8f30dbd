"""BeatKeys, ReductionTree, LaneFold, RunAccumulator and RunReducer, bit for bit.

Every stream test goes through ``run_streams`` (random idle cycles and backpressure, nothing left
over). The dtype x lanes x stall-pattern cross product is sampled so that every dtype meets every
lane count (1, 2, 4; 8 for some) and every stall pattern is used many times; each simulation
batches many runs back to back. RunReducer's tests run for both of its pipelines, "deep" and
"shallow", which must give the same bits at their own latency.
"""

import itertools
import zlib

import numpy as np
import pytest

from maxaccel.hdl.lane import LANE_BYTES, float_key
from maxaccel.hdl.reduce import PIPELINES, BeatKeys, LaneFold, ReductionTree, RunAccumulator, \
    RunReducer
from maxaccel.contract.dtypes import FORMATS
from maxaccel.sim import reference
from maxaccel.sim.streams import STALL_PATTERNS, Stalls, beats_from_rows, lanes_to_bytes, \
    run_streams, shared_design
from maxaccel.sim.values import edge_bits, random_values

ALL_FORMATS = list(FORMATS.values())
FLOAT_FORMATS = [f for f in ALL_FORMATS if f.is_float]
NO_STALLS = Stalls()


def _id(value):
    if hasattr(value, "numpy_dtype"):
        return str(value.numpy_dtype)
    if isinstance(value, Stalls):
        return f"i{value.idle}-b{value.backpressure}"
    return None


def _rng(*key):
    """A generator seeded by ``key`` (stable across runs, unlike ``hash``)."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


# --- building test data -------------------------------------------------------------------------


def _bits(values, fmt):
    return reference.bits_of(values).astype(fmt.uint_dtype)


def _from_bits(bits, fmt):
    return reference.from_bits(np.asarray(bits, dtype=fmt.uint_dtype), fmt)


def _nan_patterns(fmt):
    edges = edge_bits(fmt)
    return _bits(edges[reference.is_nan(edges)], fmt)


def _ordinary(rng, fmt, count, edge_fraction=0.25):
    """Random values with no NaN (NaNs replaced by non-NaN edge values)."""
    values = random_values(rng, fmt, count, edge_fraction=edge_fraction)
    if not fmt.is_float:
        return values
    bits = _bits(values, fmt)
    edges = edge_bits(fmt)
    finite = _bits(edges[~reference.is_nan(edges)], fmt)
    nan = reference.is_nan(values)
    bits[nan] = rng.choice(finite, size=int(nan.sum()))
    return _from_bits(bits, fmt)


def _zero(fmt, negative):
    return _from_bits([fmt.sign_mask if negative else 0], fmt)


def _position_sweep(rng, fmt, length, minimum=False):
    """Runs of ``length`` with a deciding element at every position in turn.

    Floats: a NaN (every NaN pattern in turn: quiet, signalling, negative) among ordinary values,
    some of them +inf (-inf for a ``minimum``); then ``+0`` among ``-0``s and ``-0`` among
    ``+0``s (the tie in both orders). Integers and bool: one element above the least among least
    elements (for a ``minimum``: below the greatest among greatest elements).
    """
    runs = []
    if fmt.is_float:
        nans = _nan_patterns(fmt)
        infinity = ((1 << fmt.exponent_bits) - 1) << fmt.mantissa_bits
        if minimum:
            infinity |= fmt.sign_mask
        for p in range(length):
            bits = _bits(_ordinary(rng, fmt, length), fmt)
            if p % 2:
                bits[(p + 1 + rng.integers(length - 1)) % length] = infinity
            bits[p] = nans[p % len(nans)]
            runs.append(_from_bits(bits, fmt))
        for p in range(length):
            for negative in (True, False):
                bits = np.full(length, fmt.sign_mask if negative else 0, dtype=fmt.uint_dtype)
                bits[p] = 0 if negative else fmt.sign_mask
                runs.append(_from_bits(bits, fmt))
    else:
        extreme = fmt.greatest if minimum else fmt.lowest
        for p in range(length):
            bits = np.full(length, extreme, dtype=fmt.uint_dtype)
            value = extreme
            while value == extreme:
                value = int(_bits(random_values(rng, fmt, 1, edge_fraction=0.5), fmt)[0])
            bits[p] = value
            runs.append(_from_bits(bits, fmt))
    return runs


def _elements_per_beat(fmt, lanes):
    return LANE_BYTES * lanes // fmt.nbytes


def reduction_runs(fmt, lanes, seed=0, minimum=False):
    """The runs a RunReducer is checked on for ``fmt`` and ``lanes`` (for its ``minimum``: the
    sweep decided by the least element, and runs of the greatest element)."""
    rng = _rng("runs", fmt.dtype, lanes, seed)
    per_beat = _elements_per_beat(fmt, lanes)
    sweep = 2 * per_beat + max(1, per_beat // 2)   # first, middle and a partial last beat
    runs = _position_sweep(rng, fmt, sweep, minimum)
    # Lengths around beat boundaries, R = 0 and R = 1, then random lengths.
    lengths = sorted({0, 1, 2, per_beat - 1, per_beat, per_beat + 1, 2 * per_beat - 1,
                      2 * per_beat + 1, 3 * per_beat + per_beat // 2} - {-1})
    lengths += [int(n) for n in rng.integers(0, 3 * per_beat + 2, size=12)]
    for length in lengths:
        runs.append(_ordinary(rng, fmt, length))
        runs.append(random_values(rng, fmt, length, edge_fraction=0.1))
    # Many short runs back to back, empty ones among them.
    runs += [_ordinary(rng, fmt, int(n)) for n in rng.integers(0, 3, size=24)]
    # All least elements (the padding value itself), and the ±0 ties of two elements.
    runs.append(_from_bits(np.full(per_beat + 1, fmt.lowest, dtype=fmt.uint_dtype), fmt))
    if minimum:
        runs.append(_from_bits(np.full(per_beat + 1, fmt.greatest, dtype=fmt.uint_dtype), fmt))
    if fmt.is_float:
        for first, second in itertools.product((True, False), repeat=2):
            runs.append(np.concatenate([_zero(fmt, first), _zero(fmt, second)]))
    return runs


def _garbage_padding(beats, rng):
    """Fill padding bytes with random bytes: the beat contract leaves them undefined."""
    for beat in beats:
        raw = bytearray(lanes_to_bytes(beat["data"]))
        raw[beat["nbytes"]:] = rng.integers(0, 256, size=len(raw) - beat["nbytes"],
                                            dtype=np.uint8).tobytes()
        beat["data"] = [int.from_bytes(raw[8 * j:8 * j + 8], "little")
                        for j in range(len(beat["data"]))]
    return beats


def _element0(received, fmt, what):
    """Element 0 of each received lane as an array of ``fmt``; the other bytes must be zero."""
    values = [int(v) for v in received]
    for index, value in enumerate(values):
        assert value >> fmt.bits == 0, \
            f"{what}: result {index} has nonzero upper bytes: {value:#018x}"
    bits = np.array(values, dtype=np.uint64).astype(fmt.uint_dtype)
    return bits.view(np.bool_) if fmt.kind == "bool" else bits.view(fmt.numpy_dtype)


def reduce_runs(fmt, lanes, runs, stalls, seed=0, pipeline="deep", minimum=False, arg=False):
    """Send ``runs`` through a RunReducer (its ``minimum`` and ``arg`` selects set as given);
    return (results, StreamRun, beats sent, unit). With ``arg`` the results are the byte
    offsets the unit gives, as integers."""
    dut = shared_design(RunReducer, lanes, pipeline)
    beats = beats_from_rows([np.ascontiguousarray(run).tobytes() for run in runs], lanes)
    _garbage_padding(beats, _rng("padding", fmt.dtype, lanes, seed))

    def setup(ctx):
        ctx.set(dut.dtype, fmt.dtype)
        ctx.set(dut.minimum, int(minimum))
        ctx.set(dut.arg, int(arg))

    run = run_streams(dut, sources={dut.i: beats}, sinks={"o": (dut.o, len(runs))},
                      stalls=stalls, setup=setup)
    if arg:
        return [int(v) for v in run.received["o"]], run, beats, dut
    return _element0(run.received["o"], fmt, f"{fmt.numpy_dtype} x{lanes}"), run, beats, dut


def expected_maxima(runs):
    return np.stack([reference.reduce_max(run, axes=-1, keepdims=False) for run in runs])


def expected_minima(runs):
    return np.stack([reference.reduce_min(run, axes=-1, keepdims=False) for run in runs])


# --- RunReducer ---------------------------------------------------------------------------------


def _reducer_cases():
    cases = []
    for i, fmt in enumerate(ALL_FORMATS):
        for j, lanes in enumerate((1, 2, 4)):
            cases.append((fmt, lanes, STALL_PATTERNS[(i + j) % len(STALL_PATTERNS)]))
    for k, fmt in enumerate([FORMATS[d] for d in (10, 3, 11, 9)]):   # f16, int8, f64, bool
        cases.append((fmt, 8, STALL_PATTERNS[k]))
    return cases


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("fmt, lanes, stalls", _reducer_cases(), ids=_id)
def test_run_reducer_matches_reference(fmt, lanes, stalls, pipeline):
    runs = reduction_runs(fmt, lanes)
    actual, *_ = reduce_runs(fmt, lanes, runs, stalls, pipeline=pipeline)
    reference.assert_same_bits(actual, expected_maxima(runs),
                               f"RunReducer({lanes}, {pipeline}) {fmt.numpy_dtype} {stalls}")


def _minimum_cases():
    """Every dtype once in minimum mode, lanes and stall patterns rotating (a second, wider
    lane count for the floats)."""
    cases = []
    for i, fmt in enumerate(ALL_FORMATS):
        cases.append((fmt, (1, 2, 4)[i % 3], STALL_PATTERNS[i % len(STALL_PATTERNS)]))
        if fmt.is_float:
            cases.append((fmt, 8 if i % 2 else 2, STALL_PATTERNS[(i + 2) % len(STALL_PATTERNS)]))
    return cases


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("fmt, lanes, stalls", _minimum_cases(), ids=_id)
def test_run_reducer_minimum_matches_reference(fmt, lanes, stalls, pipeline):
    """ReduceMin: NaN payloads at every position, -0 among +0 and +0 among -0, -inf beside
    ordinary values, integer extremes, runs of the greatest element and empty runs (+inf, the
    integer maximum, True), under random idle cycles and backpressure."""
    runs = reduction_runs(fmt, lanes, minimum=True)
    actual, *_ = reduce_runs(fmt, lanes, runs, stalls, pipeline=pipeline, minimum=True)
    expected = expected_minima(runs)
    reference.assert_same_bits(actual, expected,
                               f"RunReducer({lanes}, {pipeline}) minimum {fmt.numpy_dtype} "
                               f"{stalls}")
    assert any(run.size == 0 for run in runs)
    # Not a maximum in disguise: the sweep's runs are decided differently by the two.
    assert not np.array_equal(reference.bits_of(expected),
                              reference.bits_of(expected_maxima(runs)))


def _arg_cases():
    """Every dtype in both arg modes, each mode in the other pipeline for the next dtype, so
    both pipelines meet both modes and every dtype; lanes and stall patterns rotating."""
    cases = []
    for i, fmt in enumerate(ALL_FORMATS):
        for minimum in (False, True):
            cases.append((fmt, (1, 2, 4, 8)[(i + 3 * minimum) % 4],
                          STALL_PATTERNS[(i + minimum) % len(STALL_PATTERNS)], minimum,
                          PIPELINES[(i + minimum) % 2]))
    return cases


def argument_runs(fmt, lanes, minimum):
    """The runs an arg reduction is checked on: every run of :func:`reduction_runs` but the
    empty ones, ties of the extreme at two positions (and NaNs at two), and runs of one
    repeated value (the first position wins)."""
    rng = _rng("arg runs", fmt.dtype, lanes, minimum)
    runs = [run for run in reduction_runs(fmt, lanes, minimum=minimum) if run.size]
    per_beat = _elements_per_beat(fmt, lanes)
    extreme = fmt.greatest if not minimum else fmt.lowest
    for length in (2, per_beat + 1, 3 * per_beat + 2):
        for first, second in ((0, length - 1), (1, length // 2), (length - 2, length - 1)):
            bits = _bits(_ordinary(rng, fmt, length), fmt)
            bits[[first, second]] = extreme
            runs.append(_from_bits(bits, fmt))
            if fmt.is_float:
                nans = _nan_patterns(fmt)
                bits[[first, second]] = rng.choice(nans, size=2)
                runs.append(_from_bits(bits, fmt))
        runs.append(_from_bits(np.full(length, rng.integers(0, 1 << min(fmt.bits, 62)),
                                       dtype=fmt.uint_dtype), fmt))
    return runs


@pytest.mark.parametrize("fmt, lanes, stalls, minimum, pipeline", _arg_cases(), ids=_id)
def test_run_reducer_arg_matches_reference(fmt, lanes, stalls, minimum, pipeline):
    """ArgMax and ArgMin: each run's byte offset of the golden model's position (the first
    NaN, else the first extreme key; -0 and +0 distinct), NaN payloads and ties at every
    position, under random idle cycles and backpressure."""
    runs = argument_runs(fmt, lanes, minimum)
    actual, *_ = reduce_runs(fmt, lanes, runs, stalls, pipeline=pipeline, minimum=minimum,
                             arg=True)
    find = reference.arg_min if minimum else reference.arg_max
    expected = [int(find(run, axis=0, keepdims=False)) * fmt.nbytes for run in runs]
    mismatches = [(index, a, e) for index, (a, e) in enumerate(zip(actual, expected)) if a != e]
    assert not mismatches, (f"RunReducer({lanes}, {pipeline}) arg minimum={minimum} "
                            f"{fmt.numpy_dtype} {stalls}: (run, offset, expected) "
                            f"{mismatches[:5]}")
    assert len(set(expected)) > 3    # not every run decided in one place


#: RunReducer's latency by pipeline, from the last beat of a run accepted to its result valid.
REDUCER_LATENCY = {"deep": lambda lanes: 12 + 2 * (lanes.bit_length() - 1),
                   "shallow": lambda lanes: 2}


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("lanes", [1, 2, 4, 8])
@pytest.mark.parametrize("fmt", [FORMATS[1], FORMATS[2]], ids=_id)   # float32, uint8
def test_run_reducer_latency_and_throughput(fmt, lanes, pipeline):
    """No stalls: one beat per cycle, each result exactly ``latency`` after its last beat."""
    rng = _rng("timing", fmt.dtype, lanes)
    per_beat = _elements_per_beat(fmt, lanes)
    runs = [_ordinary(rng, fmt, int(n)) for n in
            [0, 1, 0, 0, per_beat, per_beat + 1, 3 * per_beat, 1, 1, 2, 5 * per_beat - 1]
            + list(rng.integers(0, 3 * per_beat, size=20))]
    actual, run, beats, dut = reduce_runs(fmt, lanes, runs, NO_STALLS, pipeline=pipeline)
    reference.assert_same_bits(actual, expected_maxima(runs))
    latency = REDUCER_LATENCY[pipeline](lanes)
    assert dut.latency == latency
    last_beats = [index + 1 for index, beat in enumerate(beats) if beat["last"]]
    assert run.arrivals["o"] == [edge + latency for edge in last_beats]
    assert run.cycles["o"] == len(beats) + latency
    # The minimum: the same runs, the same arrivals, cycle for cycle.
    actual, run_min, _, _ = reduce_runs(fmt, lanes, runs, NO_STALLS, pipeline=pipeline,
                                        minimum=True)
    reference.assert_same_bits(actual, expected_minima(runs))
    assert run_min.arrivals["o"] == run.arrivals["o"]
    assert run_min.cycles["o"] == run.cycles["o"]


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("fmt, lanes, stalls", [
    (fmt, (1, 2, 4, 8)[i % 4], STALL_PATTERNS[i % len(STALL_PATTERNS)])
    for i, fmt in enumerate(FLOAT_FORMATS)
], ids=_id)
def test_global_max_pool_channel_first(fmt, lanes, stalls, pipeline):
    """GlobalMaxPool N x C x D1..Dn is N*C runs of prod(D) elements, fed to RunReducer as is."""
    rng = _rng("pool", fmt.dtype, lanes)
    shapes = [(2, 3, 5), (1, 2, 3, 4), (2, 1, 2, 1, 3), (1, 3, 0, 2), (3, 2, 1), (1, 1, 4, 4, 2)]
    tensors = [random_values(rng, fmt, shape, edge_fraction=0.05) for shape in shapes]
    tensors.append(_from_bits(np.full((1, 2, 3), fmt.sign_mask, dtype=fmt.uint_dtype), fmt))
    runs = [row for x in tensors for row in x.reshape(x.shape[0] * x.shape[1], -1)]
    actual, *_ = reduce_runs(fmt, lanes, runs, stalls, pipeline=pipeline)
    offset = 0
    for x in tensors:
        count = x.shape[0] * x.shape[1]
        pooled = actual[offset:offset + count].reshape(x.shape[:2] + (1,) * (x.ndim - 2))
        reference.assert_same_bits(pooled, reference.global_max_pool(x),
                                   f"GlobalMaxPool {x.shape} {fmt.numpy_dtype}")
        offset += count


@pytest.mark.parametrize("lanes", [0, 3, 6, -2, 2.0, True])
def test_lanes_must_be_a_power_of_two(lanes):
    for unit in (BeatKeys, ReductionTree, RunReducer):
        with pytest.raises(ValueError, match=f"{unit.__name__}: lanes must be a power of two"):
            unit(lanes)


def test_pipeline_must_be_deep_or_shallow():
    with pytest.raises(ValueError, match="RunReducer: pipeline must be one of deep, shallow, "
                                         "not 'fast'"):
        RunReducer(1, "fast")


# --- ReductionTree ------------------------------------------------------------------------------


def _tree_cases():
    cases = []
    for i, fmt in enumerate(ALL_FORMATS):
        lanes_options = (2, 4, 8) if fmt.is_float else ((1, 2, 4, 8)[i % 4],)
        for j, lanes in enumerate(lanes_options):
            cases.append((fmt, lanes, STALL_PATTERNS[(i + j) % len(STALL_PATTERNS)]))
    return cases


def _lane_elements(lane_value, fmt):
    bits = np.frombuffer(int(lane_value).to_bytes(8, "little"), dtype=fmt.uint_dtype)
    return _from_bits(bits, fmt)


def _lane_value(values):
    return int.from_bytes(np.ascontiguousarray(values).tobytes(), "little")


@pytest.mark.parametrize("fmt, lanes, stalls", _tree_cases(), ids=_id)
def test_reduction_tree_matches_reference(fmt, lanes, stalls):
    rng = _rng("tree", fmt.dtype, lanes)
    per_lane = LANE_BYTES // fmt.nbytes
    # Sweep: the deciding element (NaN, +0 among -0, ...) at every element of every lane.
    beats = [run.reshape(lanes, per_lane) for run in
             _position_sweep(rng, fmt, lanes * per_lane)]
    beats += [random_values(rng, fmt, (lanes, per_lane), edge_fraction=0.3) for _ in range(24)]
    beats += [_ordinary(rng, fmt, lanes * per_lane).reshape(lanes, per_lane) for _ in range(24)]
    tags = rng.integers(0, 256, size=len(beats))
    dut = ReductionTree(lanes, tag_shape=8)
    payloads = [{"data": [_lane_value(lane) for lane in beat], "tag": int(tag)}
                for beat, tag in zip(beats, tags)]
    run = run_streams(dut, sources={dut.i: payloads}, sinks={"o": (dut.o, len(beats))},
                      stalls=stalls, setup=lambda ctx: ctx.set(dut.dtype, fmt.dtype))
    received = run.received["o"]
    actual = np.stack([_lane_elements(out.data, fmt) for out in received])
    if fmt.kind == "bool":   # ONNX Max has no bool: max over lanes as a reduction
        expected = np.stack([reference.reduce_max(beat, axes=0, keepdims=False)
                             for beat in beats])
    else:
        expected = np.stack([reference.max(*beat) for beat in beats])
    reference.assert_same_bits(actual, expected, f"ReductionTree({lanes}) {fmt.numpy_dtype}")
    assert [int(out.tag) for out in received] == [int(t) for t in tags]


@pytest.mark.parametrize("lanes", [1, 2, 4, 8])
def test_reduction_tree_latency(lanes):
    fmt = FORMATS[1]
    rng = _rng("tree timing", lanes)
    dut = ReductionTree(lanes)
    payloads = [{"data": [_lane_value(_ordinary(rng, fmt, 2)) for _ in range(lanes)], "tag": 0}
                for _ in range(17)]
    run = run_streams(dut, sources={dut.i: payloads}, sinks={"o": (dut.o, len(payloads))},
                      setup=lambda ctx: ctx.set(dut.dtype, fmt.dtype))
    latency = 2 + 2 * (lanes.bit_length() - 1)
    assert dut.latency == latency
    assert run.arrivals["o"] == [n + 1 + latency for n in range(len(payloads))]


# --- LaneFold, BeatKeys, RunAccumulator ------------------------------------------------------


@pytest.mark.parametrize("fmt, stalls", [
    (fmt, STALL_PATTERNS[i % len(STALL_PATTERNS)]) for i, fmt in enumerate(ALL_FORMATS)
], ids=_id)
def test_lane_fold_matches_reference(fmt, stalls):
    rng = _rng("fold", fmt.dtype)
    per_lane = LANE_BYTES // fmt.nbytes
    lanes = _position_sweep(rng, fmt, per_lane)
    lanes += [random_values(rng, fmt, per_lane, edge_fraction=0.3) for _ in range(16)]
    lanes += [_ordinary(rng, fmt, per_lane) for _ in range(16)]
    tags = rng.integers(0, 16, size=len(lanes))
    dut = LaneFold(tag_shape=4)
    payloads = [{"data": _lane_value(lane), "tag": int(tag)} for lane, tag in zip(lanes, tags)]
    run = run_streams(dut, sources={dut.i: payloads}, sinks={"o": (dut.o, len(lanes))},
                      stalls=stalls, setup=lambda ctx: ctx.set(dut.dtype, fmt.dtype))
    received = run.received["o"]
    # Only element 0 is defined; the upper bytes are don't-care.
    actual = np.stack([_lane_elements(out.data, fmt)[0] for out in received])
    expected = np.stack([reference.reduce_max(lane, axes=-1, keepdims=False) for lane in lanes])
    reference.assert_same_bits(actual, expected, f"LaneFold {fmt.numpy_dtype}")
    assert [int(out.tag) for out in received] == [int(t) for t in tags]
    if stalls == STALL_PATTERNS[0]:
        assert dut.latency == 7
        assert run.arrivals["o"] == [n + 1 + dut.latency for n in range(len(lanes))]


def _expected_keys(values, fmt):
    """Order keys as BeatKeys makes them: every NaN gets the canonical NaN's key."""
    keys = reference.order_key(values).astype(np.uint64)
    if fmt.is_float:
        keys[reference.is_nan(values)] = float_key(fmt, fmt.canonical_nan)
    return keys


@pytest.mark.parametrize("fmt, lanes, stalls", [
    (fmt, (1, 2, 4, 8)[i % 4], STALL_PATTERNS[i % len(STALL_PATTERNS)])
    for i, fmt in enumerate(ALL_FORMATS)
], ids=_id)
def test_beat_keys(fmt, lanes, stalls):
    """Each element's order key (NaN: the canonical NaN's); padding elements key 0."""
    rng = _rng("keys", fmt.dtype, lanes)
    per_beat = _elements_per_beat(fmt, lanes)
    rows = [random_values(rng, fmt, int(n), edge_fraction=0.4)
            for n in rng.integers(0, 3 * per_beat, size=20)]
    beats = _garbage_padding(beats_from_rows([row.tobytes() for row in rows], lanes), rng)
    dut = BeatKeys(lanes)
    run = run_streams(dut, sources={dut.i: beats}, sinks={"o": (dut.o, len(beats))},
                      stalls=stalls, setup=lambda ctx: ctx.set(dut.dtype, fmt.dtype))
    for index, (sent, got) in enumerate(zip(beats, run.received["o"])):
        n = sent["nbytes"] // fmt.nbytes
        values = _from_bits(np.frombuffer(lanes_to_bytes(sent["data"]), dtype=fmt.uint_dtype), fmt)
        expected = _expected_keys(values, fmt)
        expected[n:] = 0
        actual = np.frombuffer(lanes_to_bytes(got.data), dtype=fmt.uint_dtype)
        assert [int(k) for k in actual] == [int(k) for k in expected], f"beat {index}"
        assert (got.tag.first, got.tag.last) == (sent["first"], sent["last"])
    if stalls == STALL_PATTERNS[0]:
        assert run.arrivals["o"] == [n + 1 + BeatKeys.LATENCY for n in range(len(beats))]


@pytest.mark.parametrize("nbytes, stalls", [
    (nbytes, STALL_PATTERNS[i % len(STALL_PATTERNS)])
    for i, nbytes in enumerate((1, 2, 4, 8, 1, 8))
], ids=_id)
def test_run_accumulator(nbytes, stalls):
    """Runs of key lanes of every length 1..7 in all orders, one-lane runs back to back among
    them: the two interleaved partials must never mix runs, whatever the gaps."""
    fmt = next(f for f in ALL_FORMATS if f.nbytes == nbytes and f.kind == "unsigned")
    rng = _rng("accumulate", nbytes, stalls)
    lengths = [int(n) for n in rng.permutation(np.repeat(np.arange(1, 8), 3))]
    lengths += [1] * 6 + [2, 1, 2, 1, 3, 1]
    # The first lane is taken in the cycle the dtype's decode is registered (the unit wants it
    # a cycle ahead): a one-lane run, whose maximum is itself whatever the element size.
    lengths = [1] + lengths
    runs = [rng.integers(0, 256, size=(n, LANE_BYTES), dtype=np.uint8) for n in lengths]
    payloads = [{"data": int.from_bytes(lane.tobytes(), "little"),
                 "tag": {"first": int(k == 0), "last": int(k == len(run) - 1)}}
                for run in runs for k, lane in enumerate(run)]
    dut = RunAccumulator()
    result = run_streams(dut, sources={dut.i: payloads}, sinks={"o": (dut.o, len(runs))},
                         stalls=stalls, setup=lambda ctx: ctx.set(dut.dtype, fmt.dtype))
    for index, (run, got) in enumerate(zip(runs, result.received["o"])):
        expected = run.view(fmt.uint_dtype).max(axis=0).tobytes()
        assert int(got).to_bytes(8, "little") == expected, f"run {index} of {len(run)}"
    if stalls == STALL_PATTERNS[0]:
        last_lanes = list(itertools.accumulate(lengths))
        assert result.arrivals["o"] == [n + RunAccumulator.LATENCY for n in last_lanes]
