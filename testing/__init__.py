"""Helpers for testing code that uses maxaccel: bit-exact assertions and a pytest plugin.

* :func:`assert_bits_equal` -- the same dtype, the same shape and every bit, where numpy's
  assertions let ``-0.0 == +0.0`` and any NaN equal any other pass;
* :mod:`maxaccel.testing.plugin` -- the pytest plugin (entry point ``maxaccel``): the fixtures
  ``maxaccel_device`` and ``maxaccel_device_factory``, the option ``--maxaccel-device`` and the
  marker ``maxaccel_board``;
* :mod:`maxaccel.testing.replay` -- a device's link traffic recorded where a board is attached
  and replayed where none is (the plugin's ``--maxaccel-record`` and ``--maxaccel-replay``);
* :mod:`maxaccel.sim.streams` -- for gateware: stream sources and sinks with seeded stalls.

``docs/testing.md`` is the guide. The names are imported on first use, so the plugin, which
pytest loads in every run, costs no numpy until a test asks for them.
"""

import importlib

__all__ = ["assert_bits_equal"]

_HOMES = {"assert_bits_equal": "bits"}


def __getattr__(name):
    if name in _HOMES:
        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
