"""maxaccel.testing.assert_bits_equal: the same dtype, shape and every bit, for every dtype the
contract defines, with a message that names the first difference; the stream helpers' put and
get; and every example of the guide, ``docs/testing.md``, run as written."""

import doctest
import random
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from amaranth.lib import fifo
from amaranth.sim import Simulator

import maxaccel.testing.bits
from maxaccel.contract.dtypes import FORMATS, DType
from maxaccel.sim.streams import StreamTimeout, receive, send
from maxaccel.testing import assert_bits_equal

pytest_plugins = ["pytester"]

GUIDE = Path(__file__).parent.parent / "docs" / "testing.md"


def bits_array(bits, fmt):
    """An array of ``fmt``'s dtype holding the unsigned integers ``bits``."""
    words = np.array(bits, dtype=fmt.uint_dtype)
    return words.astype(bool) if fmt.kind == "bool" else words.view(fmt.numpy_dtype)


def edge_bits(fmt):
    """Bits of edge values of ``fmt``: zeros, ones, the least and greatest, the sign bit alone
    (-0 of a float), and for floats the canonical NaN and a NaN with another payload."""
    if fmt.kind == "bool":
        return [0, 1]
    bits = [0, 1, fmt.lowest, fmt.greatest, fmt.sign_mask]
    if fmt.is_float:
        bits += [fmt.canonical_nan, fmt.canonical_nan | 1, fmt.canonical_nan | fmt.sign_mask]
    return bits


@pytest.mark.parametrize("fmt", FORMATS.values(), ids=lambda fmt: str(fmt.numpy_dtype))
def test_every_dtype_is_compared_bit_for_bit(fmt):
    bits = edge_bits(fmt)
    assert_bits_equal(bits_array(bits, fmt), bits_array(bits, fmt))
    changed = list(bits)
    changed[-1] ^= 1
    width = 2 * fmt.nbytes
    message = (rf"^1 of {len(bits)} elements differ; first at index \({len(bits) - 1},\): "
               rf"got 0x{bits[-1]:0{width}x} \(.*\), expected 0x{changed[-1]:0{width}x} \(.*\)$")
    with pytest.raises(AssertionError, match=message):
        assert_bits_equal(bits_array(bits, fmt), bits_array(changed, fmt))


def test_zero_signs_differ_where_numpy_sees_equal_values():
    np.testing.assert_array_equal(np.float32([-0.0]), np.float32([0.0]))
    with pytest.raises(AssertionError, match=r"^1 of 1 elements differ; first at index \(0,\): "
                                             r"got 0x80000000 \(.*-0\.0.*\), "
                                             r"expected 0x00000000 \(.*0\.0.*\)$"):
        assert_bits_equal(np.float32([-0.0]), np.float32([0.0]))
    with pytest.raises(AssertionError, match=r"got 0x8000 .* expected 0x0000"):
        assert_bits_equal(np.array([-0.0], ml_dtypes.bfloat16), np.array([0.0], ml_dtypes.bfloat16))


def test_nan_payloads_and_signs_differ_where_numpy_sees_equal_values():
    fmt = FORMATS[DType.FLOAT16]
    quiet, payload = bits_array([fmt.canonical_nan], fmt), bits_array([0x7E01], fmt)
    np.testing.assert_array_equal(quiet, payload)
    np.testing.assert_allclose(quiet, payload)
    with pytest.raises(AssertionError, match=r"got 0x7e00 \(.*nan.*\), expected 0x7e01"):
        assert_bits_equal(quiet, payload)
    with pytest.raises(AssertionError, match=r"got 0x7e00 .*, expected 0xfe00"):
        assert_bits_equal(quiet, bits_array([0xFE00], fmt))
    assert_bits_equal(np.float64([np.nan]), np.float64([np.nan]))


def test_the_count_and_the_first_index_in_c_order():
    expected = np.arange(12, dtype=np.int16).reshape(3, 4)
    actual = expected.copy()
    actual[2, 0] = actual[1, 3] = actual[2, 3] = -1
    with pytest.raises(AssertionError, match=r"^3 of 12 elements differ; first at index "
                                             r"\(1, 3\): got 0xffff \(.*-1.*\), "
                                             r"expected 0x0007 \(.*7.*\)$"):
        assert_bits_equal(actual, expected)
    assert_bits_equal(actual[:, ::2], actual[:, ::2].copy())     # strided views too


def test_dtype_and_byte_order_must_match():
    with pytest.raises(AssertionError, match=r"^dtype float32 != expected float64$"):
        assert_bits_equal(np.zeros(2, np.float32), np.zeros(2, np.float64))
    with pytest.raises(AssertionError, match=r"^dtype int64 != expected uint64$"):
        assert_bits_equal(np.zeros(2, np.int64), np.zeros(2, np.uint64))
    with pytest.raises(AssertionError, match=r"^dtype >f4 != expected float32$"):
        assert_bits_equal(np.zeros(2, ">f4"), np.zeros(2, "<f4"))
    big = np.array([np.nan, -0.0], ">f4")
    assert_bits_equal(big, big.copy())


def test_shapes_must_match_without_broadcasting():
    with pytest.raises(AssertionError, match=r"^shape \(2,\) != expected \(1, 2\)$"):
        assert_bits_equal(np.zeros(2, np.float32), np.zeros((1, 2), np.float32))
    with pytest.raises(AssertionError, match=r"^shape \(\) != expected \(1,\)$"):
        assert_bits_equal(np.float32(0), np.zeros(1, np.float32))
    assert_bits_equal(np.zeros((2, 0), np.uint8), np.zeros((2, 0), np.uint8))
    with pytest.raises(AssertionError, match=r"first at index \(\): got 0x80000000"):
        assert_bits_equal(np.float32(-0.0), np.array(0.0, np.float32))


def test_tuples_and_lists_item_by_item():
    y, indices = np.float32([[1.0, np.nan]]), np.int64([[0, 3]])
    assert_bits_equal((y, indices), (y.copy(), indices.copy()))
    assert_bits_equal([y, indices], (y, indices))
    with pytest.raises(AssertionError, match=r"^item 1: 1 of 2 elements differ; first at "
                                             r"index \(0, 1\): got 0x0000000000000003"):
        assert_bits_equal((y, indices), (y, np.int64([[0, 2]])))
    with pytest.raises(AssertionError, match=r"^item 0: dtype float32 != expected float16$"):
        assert_bits_equal([y], [y.astype(np.float16)])
    with pytest.raises(AssertionError, match=r"^got a tuple of 2 items, expected a list of 1 "
                                             r"item$"):
        assert_bits_equal((y, indices), [y])
    with pytest.raises(AssertionError, match=r"^got a tuple of 2 items, expected one array$"):
        assert_bits_equal((y, indices), y)


def test_what_is_not_a_numpy_array_of_a_supported_dtype_is_refused():
    with pytest.raises(TypeError, match=r"^expected is a list, not a numpy array \(or a tuple "
                                        r"or list of them\); give it a dtype with "
                                        r"numpy.asarray\(value, dtype\)$"):
        assert_bits_equal(np.float32([1.0]), [1.0])
    with pytest.raises(TypeError, match=r"^actual is a list, not a numpy array"):
        assert_bits_equal([1.0], [np.float64(1.0)])
    with pytest.raises(TypeError, match=r"^actual is a float, not a numpy array"):
        assert_bits_equal(1.0, np.float64(1.0))
    with pytest.raises(TypeError, match=r"^actual has dtype complex64, which maxaccel does not "
                                        r"support; supported: float16, bfloat16, float32"):
        assert_bits_equal(np.zeros(1, np.complex64), np.zeros(1, np.complex64))


def test_the_docstring_example_holds():
    failed, attempted = doctest.testmod(maxaccel.testing.bits)
    assert (failed, attempted) == (0, 5)


def test_a_message_line_per_fact():
    """The message is one line: pytest prints it whole beside the caller's line."""
    with pytest.raises(AssertionError) as caught:
        assert_bits_equal(np.uint64([1, 2**64 - 1]), np.uint64([1, 0]))
    assert "\n" not in str(caught.value)
    assert re.search(r"got 0xffffffffffffffff \(.*18446744073709551615.*\), "
                     r"expected 0x0000000000000000", str(caught.value))


def _simulate(dut, *testbenches):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for testbench in testbenches:
        sim.add_testbench(testbench)
    sim.run()


def test_receive_takes_its_count_and_leaves_the_rest():
    """``ready`` is low once the count is taken: the beats beyond it stay in the design."""
    dut = fifo.SyncFIFOBuffered(width=8, depth=8)
    seen = {}

    async def producer(ctx):
        await send(ctx, dut.w_stream, [5, 6, 7, 8], rng=random.Random(3), idle=0.3)

    async def consumer(ctx):
        seen["first"] = await receive(ctx, dut.r_stream, 2, rng=random.Random(4),
                                      backpressure=0.6)
        await ctx.tick().repeat(20)
        seen["level"] = ctx.get(dut.level)
        seen["rest"] = await receive(ctx, dut.r_stream, lambda beats: 8 in beats,
                                     rng=random.Random(5))

    _simulate(dut, producer, consumer)
    assert seen == {"first": [5, 6], "level": 2, "rest": [7, 8]}


def test_send_and_receive_give_up_after_their_timeout():
    dut = fifo.SyncFIFOBuffered(width=8, depth=2)

    async def stuck_producer(ctx):
        await send(ctx, dut.w_stream, [1, 2, 3, 4], rng=random.Random(0), timeout=10)

    with pytest.raises(StreamTimeout, match=r"^beat 2 of 4 not accepted in 10 cycles$"):
        _simulate(dut, stuck_producer)

    async def starved_consumer(ctx):
        await receive(ctx, dut.r_stream, 1, rng=random.Random(0), timeout=10)

    with pytest.raises(StreamTimeout, match=r"^the stream received 0 beats \(not complete\), "
                                            r"then nothing for 10 cycles$"):
        _simulate(fifo.SyncFIFOBuffered(width=8, depth=2), starved_consumer)


def test_the_guide_s_examples_run_as_written(pytester):
    """Each ``python`` block of the guide that starts with ``# test_NAME.py`` is that file of a
    user's project; they pass (the board test is skipped on the virtual board, with the reason
    the guide prints) under this suite's warnings-as-errors."""
    text = GUIDE.read_text()
    files = re.findall(r"```python\n# (test_\w+\.py)\n(.*?)```", text, re.S)
    assert [name for name, _ in files] == ["test_device.py", "test_factory.py", "test_board.py",
                                           "test_bits.py", "test_fifo.py"]
    for name, code in files:
        (pytester.path / name).write_text(f"# {name}\n{code}")
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8, skipped=1)
    skipped = re.search(r"```\n(SKIPPED \[1\] .*)\n```", text).group(1)
    assert skipped in result.outlines
    message = re.search(r"```\n(1 of 2 elements differ.*)\n```", text).group(1)
    with pytest.raises(AssertionError) as caught:
        assert_bits_equal(np.float32([1.0, -0.0]), np.float32([1.0, 0.0]))
    assert str(caught.value) == message
