"""A core of one element type (``Core(dtype=...)``): every unit built for that type alone, the
type ``IDENTIFY`` reports, the others refused by the gateware as the contract says, the host
naming the type before it sends anything, and the same bits as the golden model on edge values
(NaN payloads, signed zeros, infinities, subnormals) through every unit."""

import numpy as np
import pytest

from maxaccel.contract.dtypes import DType, format_of
from maxaccel.contract.wire import (Command, FrameParser, PARAMETERS, Status, encode_frame,
                                    request_verdict)
from maxaccel.hdl.top import Core
from maxaccel.host import OffloadSession, open_device
from maxaccel.sim import reference
from maxaccel.sim.values import random_values
from maxaccel.sim.virtual_board import VirtualBoard
from maxaccel.testing import assert_bits_equal

from onnx_models import single_node_model
from window_model import _rng

#: A small core of every unit, for float32 alone.
CORE = dict(lanes=1, window_columns=8, window_plane=16, replay_depth=16, pool_channels=4,
            dtype="float32")
URL = "sim?" + "&".join(f"{k}={v}" for k, v in CORE.items())


@pytest.fixture(scope="module")
def device():
    with open_device(URL) as dev:
        yield dev


def test_the_core_reports_its_one_type():
    assert Core.identity_of(**CORE).dtypes == {DType.FLOAT}
    assert Core.identity_of(**dict(CORE, dtype=None)).dtypes == set(DType)


def test_an_unknown_type_is_refused_before_anything_is_built():
    with pytest.raises(ValueError, match="dtype: .*float99"):
        Core.check_parameters(**dict(CORE, dtype="float99"))


@pytest.mark.parametrize("dtype", [DType.FLOAT16, DType.DOUBLE, DType.INT8, DType.BOOL])
def test_the_gateware_refuses_the_other_types_as_the_contract_does(dtype):
    with VirtualBoard(**CORE) as board:
        for code, block in [(Command.REDUCE, PARAMETERS[Command.REDUCE].pack(
                                dtype=dtype, runs=1, run_length=1, minimum=0, arg=0)),
                            (Command.POOL_CHANNELS_LAST, PARAMETERS[Command.POOL_CHANNELS_LAST]
                             .pack(dtype, 1, 1, 1))]:
            payload = block + bytes(format_of(dtype).nbytes)
            assert request_verdict(code, payload, board.identity) == Status.UNSUPPORTED_DTYPE
            board.write(encode_frame(code, 1, payload))
            (reply,) = FrameParser().feed(board.read(1 << 12, timeout_cycles=20_000))
            assert (reply.status, reply.payload, reply.intact) == (
                Status.UNSUPPORTED_DTYPE, b"", True)


def test_the_host_names_the_type_before_sending(device):
    with pytest.raises(TypeError, match=r"does not support float16; it supports: float32"):
        device.reduce_max(np.ones((2, 3), np.float16), axes=[1])
    with pytest.raises(TypeError, match=r"max_pool\(\).* does not support float64"):
        device.max_pool(np.ones((1, 1, 4, 4)), kernel_shape=[2, 2])
    assert_bits_equal(device.reduce_max(np.float32([[1, -0.0]]), axes=[1]), np.float32([[1]]))


def test_every_unit_gives_the_golden_bits(device):
    x = random_values(_rng("pool"), np.dtype(np.float32), (1, 2, 5, 6), edge_fraction=0.4)
    y, indices = device.max_pool(x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                 return_indices=True)
    assert device.last_max_pool_route == Command.MAX_POOL
    want, want_indices = reference.max_pool(x, kernel_shape=[3, 3], strides=[2, 2],
                                            pads=[1, 1, 1, 1], return_indices=True)
    assert_bits_equal(y, want)
    np.testing.assert_array_equal(indices, want_indices)

    r = random_values(_rng("reduce"), np.dtype(np.float32), (3, 7), edge_fraction=0.4)
    assert_bits_equal(device.reduce_min(r, axes=[1]), reference.reduce_min(r, axes=[1]))
    np.testing.assert_array_equal(device.arg_max(r, axis=1), reference.arg_max(r, axis=1))

    a = random_values(_rng("max a"), np.dtype(np.float32), (3, 4), edge_fraction=0.4)
    b = random_values(_rng("max b"), np.dtype(np.float32), (4,), edge_fraction=0.4)
    assert_bits_equal(device.max(a, b), reference.max(a, b))

    c = random_values(_rng("nhwc"), np.dtype(np.float32), (1, 3, 3, 4), edge_fraction=0.4)
    assert_bits_equal(device.global_max_pool(c, channels_last=True),
                      reference.reduce_max(c, axes=[1, 2]))


def test_a_session_runs_a_node_of_another_type_on_the_golden_model(device):
    model = single_node_model("ReduceMax", 13, [("x", 10, [2, 5])], [("y", 10, None)],
                              axes=[1], keepdims=0)
    session = OffloadSession(model.SerializeToString(), device=device)
    x = random_values(_rng("session"), np.dtype(np.float16), (2, 5), edge_fraction=0.4)
    (y,) = session.run(None, {"x": x})
    assert_bits_equal(y, reference.reduce_max(x, axes=[1], keepdims=False))
    assert [where for _, op, where in session.placements if op == "ReduceMax"] == ["golden"]
    assert [where for _, op, where in session.last_run if op == "ReduceMax"] == ["golden"]
