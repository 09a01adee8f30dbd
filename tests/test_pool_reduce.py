"""MaxPool through REDUCE (host/pool_reduce.py), with the golden reduce_max as the device.

Every plan is checked bit for bit against the golden max_pool, Indices included, and for its
link cost: each input element sent once where the windows do not overlap, never a padding
element, and every output produced by exactly one run.
"""

import numpy as np
import pytest
from scalar_model import NUMERIC_DTYPES, dtype_id
from pool_configs import random_configs

from maxaccel.host.pool_reduce import max_pool_by_reduce, plan_reduce_pool
from maxaccel.contract.pooling import check_max_pool, resolve_max_pool
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import random_values


class GoldenReduce:
    """The golden REDUCE: runs of R elements -> their maxima; counts what it is sent."""

    def __init__(self):
        self.sent = 0
        self.lengths = []

    def __call__(self, rows):
        self.sent += rows.size
        self.lengths.append(rows.shape[1])
        return reference.reduce_max(rows, axes=1, keepdims=False)


def check_plan(x, attributes):
    values, _, geometry, _ = check_max_pool(x, **attributes)
    plan = plan_reduce_pool(geometry)
    device = GoldenReduce()
    y, indices = max_pool_by_reduce(values, plan, device, return_indices=True)
    want_y, want_indices = reference.max_pool(x, **attributes, return_indices=True)
    what = f"max_pool via REDUCE {x.shape} {x.dtype} {attributes}"
    assert_same_bits(y, want_y, what)
    assert_same_bits(indices, want_indices, what + " Indices")
    assert_same_bits(max_pool_by_reduce(values, plan, GoldenReduce()), want_y, what)
    # every spatial output in exactly one group, each run as long as its window's inputs
    outputs = np.concatenate([g.windows for g in plan.groups]) if plan.groups else []
    assert sorted(outputs) == list(range(int(np.prod(geometry.output_shape[2:]))))
    assert device.sent == plan.sent_elements
    for group in plan.groups:
        assert group.sources.shape == (len(group.windows), group.length)
        assert ((group.sources >= 0) & (group.sources < geometry.channel_stride)).all()
    if plan.each_element_once:
        sources = np.concatenate([g.sources.reshape(-1) for g in plan.groups]) \
            if plan.groups else np.zeros(0)
        assert np.unique(sources).size == sources.size
        assert plan.sent_elements <= plan.input_elements
    return plan


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_random_configs(dtype):
    rng = np.random.default_rng(99 + np.dtype(dtype).num)
    checked = 0
    for shape, attributes in random_configs(rng, {1: 25, 2: 20, 3: 10}):
        try:
            resolve_max_pool(shape, **attributes)
        except ValueError:
            continue
        check_plan(random_values(rng, dtype, shape, edge_fraction=0.3), attributes)
        checked += 1
    assert checked > 30


def test_non_overlapping_windows_send_each_element_once():
    x = random_values(np.random.default_rng(1), np.float32, (2, 3, 8, 8))
    plan = check_plan(x, dict(kernel_shape=[2, 2], strides=[2, 2]))
    assert plan.each_element_once and plan.sent_elements == x.size
    assert [g.length for g in plan.groups] == [4]
    # ceil_mode: the last row and column of windows are cut by the end
    x = random_values(np.random.default_rng(2), np.float32, (1, 2, 7, 7))
    plan = check_plan(x, dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=True))
    assert plan.sent_elements == x.size and [g.length for g in plan.groups] == [1, 2, 4]
    # stride above the extent: the elements between windows are never sent
    plan = check_plan(x, dict(kernel_shape=[2, 2], strides=[3, 3]))
    assert plan.sent_elements == 2 * 4 * 4 < x.size
    # dilated windows that interleave without sharing an element
    x = random_values(np.random.default_rng(3), np.int8, (1, 1, 8))
    plan = check_plan(x, dict(kernel_shape=[2], strides=[4], dilations=[2]))
    assert plan.each_element_once


def test_overlapping_windows_cost():
    """ResNet's stem, 3x3 stride 2 pad 1 on 112x112: each element ~2.25 times on the link."""
    geometry = resolve_max_pool((1, 64, 112, 112), [3, 3], [2, 2], [1, 1, 1, 1])
    plan = plan_reduce_pool(geometry)
    assert not plan.each_element_once
    ratio = plan.sent_elements / plan.input_elements
    assert plan.sent_elements == 64 * (56 * 3 - 1) ** 2   # 167 rows/columns of taps
    assert 2.2 < ratio < 2.25
    assert [g.length for g in plan.groups] == [4, 6, 9]


def test_windows_of_padding_only_are_empty_runs():
    x = np.array([[[1.0, 2.0]]], dtype=np.float32)
    plan = check_plan(x, dict(kernel_shape=[2], dilations=[3], pads=[1, 1]))
    assert [g.length for g in plan.groups] == [0] and plan.sent_elements == 0
    y, i = max_pool_by_reduce(x, plan, GoldenReduce(), return_indices=True)
    assert y.view(np.uint32).tolist() == [[[0xFF800000]]] and i.tolist() == [[[-1]]]


def test_nan_and_zero_ties_located_like_the_golden_model():
    bits = np.array([0x80000000, 0, 0x7F800001, 0xFFC00000, 0x3F800000, 0x80000000],
                    dtype=np.uint32)
    x = bits.view(np.float32).reshape(1, 1, 6)
    for attributes in (dict(kernel_shape=[2]), dict(kernel_shape=[2], strides=[2]),
                       dict(kernel_shape=[3], storage_order=1, pads=[1, 1])):
        check_plan(x, attributes)


def test_large_backend_geometries():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1, 1000, 1000)).astype(np.float32)
    plan = check_plan(x, dict(kernel_shape=[60, 80], strides=[10, 10], pads=[10, 20, 10, 20],
                              dilations=[10, 10]))
    assert plan.each_element_once is False
    x = rng.standard_normal((1, 1, 220000)).astype(np.float32)
    check_plan(x, dict(kernel_shape=[200], strides=[10], pads=[100, 100], dilations=[10]))


def test_empty_inputs():
    x = np.zeros((0, 3, 4), np.float32)
    check_plan(x, dict(kernel_shape=[2]))
    check_plan(np.zeros((1, 1, 0), np.float32), dict(kernel_shape=[2], auto_pad="SAME_UPPER"))
