"""Several maxaccel boards behind one pool, on Ray (the optional extra ``cluster``).

One Ray actor per board holds the board's :class:`~maxaccel.host.device.Device` and its
:class:`~maxaccel.host.offload.OffloadSession` objects; the pool spreads runs and shards of a
large tensor over the actors, combines shards on the host with the golden model's rules, and
moves the calls of a board that dies or stops answering to the others::

    from maxaccel.cluster import BoardPool
    with BoardPool(["sim", "sim", "sim"]) as pool:          # or real boards' URLs
        outputs = pool.run("model.onnx", [{"x": x0}, {"x": x1}])
        y = pool.reduce_max(big, axes=[1])
        pool.boards                                         # url, actor, runs, failures...

Importing this package loads neither Ray nor amaranth: Ray is imported when a pool starts, and
the boards' actors import the driver (and, for a virtual board, the simulator) in their own
processes. The design and the failure modes: ``docs/scale-out.md``.
"""

import importlib

__all__ = ["BoardPool", "Board", "NoBoardLeft", "BOARD_RESOURCE", "measure_scaling",
           "format_scaling"]

_HOMES = {"BoardPool": "pool", "Board": "pool", "NoBoardLeft": "pool",
          "BOARD_RESOURCE": "pool", "measure_scaling": "bench", "format_scaling": "bench"}


def __getattr__(name):
    if name in _HOMES:
        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
