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


#: A fake board's pooling unit small enough that pools go in tiles at small sizes (3 output
#: columns, 6-output planes, on 2 window lanes).
SMALL_WINDOW = dict(lanes=2, window_lanes=2, window_columns=3, window_plane=6)


def _compiled_window():
    from maxaccel.sim.verilator_board import VERILATOR_DEFAULTS as board
    return dict(lanes=board["lanes"], window_lanes=board["window_lanes"] or board["lanes"],
                **{k: board[k] for k in ("window_extent", "window_extent_outer",
                                         "window_columns", "window_plane")})


#: The compiled board's pooling unit (the NiteFury's: ``boards/targets.py``), for a fake board.
COMPILED_WINDOW = _compiled_window()
