"""Each library unit's nested ``Signature`` carries and checks its parameters (as
amaranth-stdio's ``AsyncSerialRX.Signature``): equal to the unit's own signature, its
parameters as attributes, a bad one refused before any unit exists (so Amaranth has nothing
to warn about: pytest runs with warnings as errors), and a static dtype drops the port."""

import gc

import numpy as np
import pytest

from maxaccel.contract.dtypes import DType
from maxaccel.hdl import (BroadcastMax, ChannelsLastPool, FromKey, KeyMax, LaneMax, RunReducer,
                          SerialWindowMaxPool, ToKey, WindowMaxPool)
from maxaccel.hdl.window_lanes import WindowLanes

UNITS = [
    (KeyMax, (), dict(latency=2), dict(latency=3), "size"),
    (ToKey, (), dict(latency=1), dict(latency=2), "format"),
    (FromKey, (), dict(), dict(dtype=99), "format"),
    (LaneMax, (), dict(latency=3), dict(latency=4), "dtype"),
    (RunReducer, (2,), dict(pipeline="shallow"), dict(pipeline="fast"), "dtype"),
    (ChannelsLastPool, (1, 8), dict(pixel_bits=16), dict(pixel_bits=0), "dtype"),
    (WindowMaxPool, (), dict(max_rank=2, max_extent=3), dict(max_rank=4), "dtype"),
    (SerialWindowMaxPool, (), dict(max_rank=2, max_extent=3), dict(max_rank=4), "dtype"),
    (BroadcastMax, (1, 8, 2, 2), dict(max_count=100), dict(max_count=0), "config"),
    # The engine's MAX_POOL unit (WindowMaxPool side by side), for a core of one element type.
    (WindowLanes, (2, 1), dict(max_columns=8, max_plane=4), dict(max_columns=0), "dtype"),
    (WindowLanes, (2, 1), dict(max_columns=8, max_plane=4, serial=True), dict(serial=3),
     "dtype"),
]


@pytest.mark.parametrize("unit_class, args, good, bad, port", UNITS,
                         ids=[u[0].__name__ for u in UNITS])
def test_the_signature_carries_and_checks_the_parameters(unit_class, args, good, bad, port):
    signature = unit_class.Signature(*args, **good)
    unit = unit_class(*args, **good)
    assert unit.signature == signature
    assert unit.signature != unit_class.Signature(*args, **good, dtype=DType.FLOAT)
    for name, value in good.items():
        assert getattr(signature, name) == value == getattr(unit, name)
    assert repr(signature).startswith(f"{unit_class.__name__}.Signature(")
    with pytest.raises(ValueError):
        unit_class.Signature(*args, **bad)
    with pytest.raises(ValueError):
        unit_class(*args, **bad)
    gc.collect()            # a unit that had been created would warn here
    static = unit_class.Signature(*args, **good, dtype=DType.FLOAT)
    # The static type by any name numpy and ONNX give it, and a clear refusal of a non-type.
    assert all(unit_class.Signature(*args, **good, dtype=name) == static
               for name in ("float32", np.float32, np.dtype("float32"), 1))
    with pytest.raises(ValueError, match=r"^\w+: dtype: .*'float99'"):
        unit_class.Signature(*args, **good, dtype="float99")
    if port == "config":
        assert "dtype" in signature.members["config"].shape.members
        assert "dtype" not in static.members["config"].shape.members
    else:
        assert port in signature.members and port not in static.members
    from amaranth.hdl import Fragment
    Fragment.get(unit, None)
