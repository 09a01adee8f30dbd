"""The maxaccel wire protocol: frames, commands, status codes (see ``docs/protocol.md``).

Pure Python: the host uses it to talk to a board, and the gateware imports its constants so
both ends agree by construction. Its parts, by idea:

* :mod:`~maxaccel.contract.frames` -- magic, version, command and status codes, the CRC,
  frames and their parser, the ``COUNTERS`` reply;
* :mod:`~maxaccel.contract.identity` -- :class:`Identity`, the ``IDENTIFY`` reply;
* :mod:`~maxaccel.contract.blocks` -- the parameter blocks and their fields;
* :mod:`~maxaccel.contract.rules` -- the status rules as data, :class:`Capacities`, verdicts.

This module is the protocol's one import: every name of the four.
"""

from .blocks import *  # noqa: F401,F403
from .blocks import __all__ as _blocks
from .frames import *  # noqa: F401,F403
from .frames import __all__ as _frames
from .identity import *  # noqa: F401,F403
from .identity import __all__ as _identity
from .rules import *  # noqa: F401,F403
from .rules import __all__ as _rules

__all__ = [*_frames, *_identity, *_blocks, *_rules]
