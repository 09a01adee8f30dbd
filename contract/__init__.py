"""The contract between host, golden model and gateware: Python with numpy, ml_dtypes (the
element types) and tqdm (the progress bars); no amaranth, none of the other packages.

* :mod:`~maxaccel.contract.dtypes` -- the element types and their encodings;
* :mod:`~maxaccel.contract.frames` -- frames, command and status codes, the CRC;
* :mod:`~maxaccel.contract.blocks` -- each command's parameter block with its named fields;
* :mod:`~maxaccel.contract.rules` -- the status rules and their order, capacities, and
  :func:`~maxaccel.contract.rules.verdict`, the status a device answers;
* :mod:`~maxaccel.contract.identity` -- the ``IDENTIFY`` reply;
* :mod:`~maxaccel.contract.wire` -- all of the wire protocol in one import (it re-exports the
  four above);
* :mod:`~maxaccel.contract.checks` -- the argument checks the golden model and the device API
  share;
* :mod:`~maxaccel.contract.pooling` -- windowed MaxPool's attributes resolved into explicit
  windows, and the Indices numbering, shared by the golden model and the planners;
* :mod:`~maxaccel.contract.progress` -- progress bars and the package's logger, for the long
  work of every package (a transfer, the first Verilator build, a board build).

Every other package imports this one and it imports none of them, which keeps the import graph
free of cycles (``docs/architecture.md``).
"""
