"""The maxaccel pytest plugin's entry point (``pytest11``, name ``maxaccel``).

The plugin is :mod:`maxaccel.testing.plugin`; this top-level module hands pytest its hooks and
fixtures. It is top-level because pytest, loading a plugin's distribution, marks the
distribution's top-level modules and packages for assertion rewriting: with none (``maxaccel``
is a namespace package with a ``__main__`` module) it would take the next level down, mark
``__main__`` and warn in every run that it cannot rewrite it, an error under ``-W error``.
"""

from maxaccel.testing.plugin import (maxaccel_device, maxaccel_device_factory, pytest_addoption,
                                     pytest_collection_modifyitems, pytest_configure)

__all__ = ["pytest_addoption", "pytest_configure", "pytest_collection_modifyitems",
           "maxaccel_device", "maxaccel_device_factory"]
