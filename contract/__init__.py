"""The contract between host, golden model and gateware: pure Python and numpy.

* :mod:`~maxaccel.contract.dtypes` -- the element types and their encodings;
* :mod:`~maxaccel.contract.wire` -- the wire protocol as data: frames, commands, parameter
  blocks with named fields, the status rules and their order, capacities, and
  :func:`~maxaccel.contract.wire.verdict`, the status a device answers;
* :mod:`~maxaccel.contract.checks` -- the argument checks the golden model and the device API
  share;
* :mod:`~maxaccel.contract.pooling` -- windowed MaxPool's attributes resolved into explicit
  windows, and the Indices numbering, shared by the golden model and the planners;
* :mod:`~maxaccel.contract.progress` -- progress bars and the package's logger, for the long
  work of every package (a transfer, the first Verilator build, a board build).

Every other package imports this one and it imports none of them, which keeps the import graph
free of cycles (``docs/architecture.md``).
"""
