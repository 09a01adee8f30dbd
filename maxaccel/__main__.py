"""``python -m maxaccel``: the ``maxaccel`` command.

``maxaccel`` is an implicit namespace package whose parts are the repository's top-level
folders (``hdl``, ``sim``, ``host``, ``boards``); this folder adds only this module to it.
"""

import sys

from maxaccel.host.cli import main

sys.exit(main(prog="python -m maxaccel"))
