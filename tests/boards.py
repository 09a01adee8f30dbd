"""The cores the tests run on, named once: tests that need the same compiled core open the
same one, so a run builds each (minutes of C++ on two cores) at most once."""

#: A small core for the engine's tests and the compiled board's checks at a byte a cycle: 2
#: lanes, a byte link (:data:`~maxaccel.sim.virtual_board.CORE_DEFAULTS`), small buffers, so
#: tiles and chained passes show at small sizes. Simulated (``VirtualBoard(**SMALL_CORE)``) or
#: compiled (:func:`small_compiled_board`).
SMALL_CORE = dict(lanes=2, replay_depth=32, max_dims=3, max_operands=3, pool_channels=8,
                  frame_timeout_cycles=300)


def small_compiled_board():
    """:data:`SMALL_CORE` compiled with Verilator (the same bytes in the same cycles as
    simulated, about a hundred times faster)."""
    from maxaccel.sim.verilator_board import VerilatorBoard
    from maxaccel.sim.virtual_board import CORE_DEFAULTS
    return VerilatorBoard(**dict(CORE_DEFAULTS, **SMALL_CORE))
