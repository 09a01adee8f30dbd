"""Host driver for maxaccel: the link (framing, retries), transports, the tensor API and its
planners, ONNX offload and the ``maxaccel`` command (whose ``bench`` subcommand loads the
benchmarks, :mod:`maxaccel.bench`, when it runs). The wire protocol itself is
the contract's (:mod:`maxaccel.contract.wire`), shared with the gateware.

This package never imports amaranth: a host script talks to a board with numpy alone::

    from maxaccel.host import open_device, OffloadSession
    with open_device("sim") as dev:
        y = dev.reduce_max(x, axes=[1])
        outputs = OffloadSession("model.onnx", device=dev).run(None, {"x": x})

The names below are imported on first use, so ``import maxaccel.host.link`` stays light
(``OffloadSession`` needs onnx).
"""

import importlib

__all__ = ["open_device", "Device", "OffloadSession", "LinkError", "DeviceError",
           "TransportError"]

_HOMES = {
    "open_device": "device", "Device": "device", "OffloadSession": "offload",
    "LinkError": "link", "DeviceError": "link", "TransportError": "transport",
}


def __getattr__(name):
    if name in _HOMES:
        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
