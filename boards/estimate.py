"""How much of a board a core takes, before any synthesis: data and a small formula.

A core's logic is estimated as a sum of terms, each a coefficient (cells) times a feature of
the core's parameters (:func:`features`):

========================  ==================================================================
``base``                  1: the command engine, its checks, the UART or the link adapters
``reduce_command``        1 with the run reducer: what ``REDUCE`` adds to the engine
``reduce``                1, plus ``reduce_lane`` per lane (the deep pipeline) or
``reduce_shallow``        1, plus ``reduce_shallow_lane`` per lane (the shallow one), with the
                          run reducer (a core may leave it out)
``pool``, ``pool_lane``   the channels-last pooling unit: 1 and its lanes, if built
``broadcast``, ...        the broadcast unit: 1 and its lanes, if built
``window_lane``           the windowed pooling unit: its ``window_lanes``
``window_tap``            ``window_lanes`` times its taps, ``2 * (window_extent - 1) +
                          (window_extent_outer - 1)`` (each tap of an axis's compare tree and
                          delay line)
``window_serial``         ``window_lanes`` with ``window_serial_products``: what a lane's
                          serial products change (fewer cells without multipliers, more with;
                          not scaled by a static element type's share: the index arithmetic
                          is the same for every type)
``window_serial_lane``    ``window_lanes`` with ``window_serial``: the windowed unit of
                          ``SerialWindowMaxPool`` lanes (in place of the three terms above; its
                          taps are cycles, not logic), with what ``MAX_POOL`` adds to the engine
``window_two_axes``       ``window_lanes`` of a unit of two axes (``window_extent_outer`` 0):
``window_serial_two_...`` the outermost axis's logic they leave out, pipelined (``_serial``:
``window_serial_lane_...`` with ``window_serial_products``; ``_serial_lane``: with
                          ``window_serial``)
``window_field_bits_cut``  bits a ``MAX_POOL`` axis field is held in fewer than 16 (a
                          ``window_field_max`` below 65 535), with the windowed unit
``window_indices_cut``    ``window_lanes`` of a unit without Indices (``window_indices`` 0)
``link_byte``             bytes of the link word beyond one (the NiteFury's 32-byte word)
``serial_crc``            1 with ``serial_crc``: what the frames' CRCs a bit a cycle change
========================  ==================================================================

A core of one element type (the Core's ``dtype``) builds every unit for that type alone: each
unit's terms are then scaled by the share of its logic a static element type keeps
(:func:`static_dtype_shares`: the LUT4s of the unit built for float32 over those of the unit
that serves every type, from the library's synthesis figures, ``docs/library.md``,
"Resources"; the Xilinx family at the ECP5's shares).

The coefficients (:data:`COEFFICIENTS`, per FPGA family, in the unit its reports count:
``ICESTORM_LC``, ``TRELLIS_COMB``, yosys's Xilinx LUT estimate) come from measurements: the
units' own synthesis figures (``docs/resources.md``, "Streaming units": the cells a unit's
design takes at 1 and 4 lanes give its fixed and per-lane terms), and the board builds
(``docs/boards/*.json``), which fix the rest. :func:`refit` solves chosen coefficients again
from build reports (:func:`report_points`) by least squares, the others held: a new measured
build refits the estimate without touching the formula.

Imports neither amaranth nor the host: a host plans a core without the toolchain.
"""

import functools
import math

from maxaccel.contract.blocks import WINDOW_FIELD_MAX

__all__ = ["COEFFICIENTS", "FEATURES", "features", "estimate_cells", "report_points", "refit",
           "report_name",
           "window_taps", "relative_error", "report_core", "estimate_errors", "errors_markdown",
           "static_dtype_shares"]

#: The terms of the estimate, in order.
FEATURES = ("base", "reduce_command", "reduce", "reduce_lane", "reduce_shallow",
            "reduce_shallow_lane", "pool", "pool_lane", "broadcast", "broadcast_lane",
            "window_lane", "window_tap", "window_serial", "window_serial_lane", "window_two_axes",
            "window_serial_two_axes", "window_serial_lane_two_axes", "window_field_bits_cut",
            "window_indices_cut", "link_byte", "serial_crc")

#: Cells per feature and family. Where each comes from:
#:
#: * iCE40 units: ``docs/resources.md`` "Streaming units", UP5K, cells used at 1 and 4 lanes
#:   (RunReducer 1721 / 3853, RunReducer-shallow 829 / 2249, ChannelsLastPool 2026 / 6514,
#:   BroadcastMax 4379 / 12937): intercept and slope of the line through them. ``base``: the
#:   iCEBreaker's build (4 037, serial CRCs) less its one shallow lane, ``reduce_command`` and
#:   ``serial_crc``. ``reduce_command``: the HX8K's float32 core for SqueezeNet 1.1 (a unit of
#:   three axes, serial CRCs) built without the run reducer (6 313 cells) against with it
#:   (7 076), less the reducer's float32 terms (416).
#:   The windowed unit: the iCEBreaker's build of the reduce and window core (one lane of
#:   extent 3, outermost 1; 4 taps), which nextpnr placed at 28 245 cells before refusing it,
#:   less the reduce-only core of its engine (4 158): 24 087, split between lane and taps as
#:   on the ECP5.
#: * ECP5 units: the same table on the ECP5-25K (RunReducer 1078 / 2467, ChannelsLastPool 1563
#:   / 4624, BroadcastMax 2870 / 8211); the shallow reducer is the deep one scaled by the
#:   iCE40's shallow-to-deep ratio per lane. ``base``: the ULX3S 25F's build (15 608) less its
#:   three units at 2 lanes. The windowed unit's lane and tap: :func:`refit` over the ULX3S
#:   builds (the 25F's and 85F's own cores and the 25F's core for a model,
#:   ``docs/boards/models``).
#: * ``window_serial``: the resource points of the unit (``docs/boards/resource_points.json``,
#:   one lane of extent 3, outermost 1, every element type) with serial products against
#:   parallel: on the iCE40 11 197 LUT4s fewer (18 418 to 7 221, the flip-flops about the same);
#:   on the ECP5 1 277 LUT4s more and 134 ``CCU2C`` fewer (two TRELLIS_COMB each), its 21
#:   ``MULT18X18D`` left out; on Xilinx the ECP5's, scaled as below.
#: * ``window_serial_lane``: a build with a lane of ``SerialWindowMaxPool``. On the iCE40 the
#:   HX8K's float32 core for SqueezeNet 1.1 (one lane of extent 3, outermost 1) without the
#:   run reducer (6 313 cells), less its base and ``serial_crc``, over the unit's float32
#:   share; on the ECP5 the
#:   ULX3S 25F's own core with one lane of extent 5 (outermost 1) added: 21 119 TRELLIS_COMB
#:   against its 15 608 (66.3 MHz routed against 60); on Xilinx the ECP5's, scaled as below.
#: * ``window_two_axes``, ``window_serial_two_axes``: the outermost axis's counters and
#:   configuration arithmetic. The serial lane on the iCE40: the HX8K's float32 core for
#:   SqueezeNet 1.1 and ResNet-18 placed at 5 877 cells with a unit of two axes against 6 313
#:   with three, without the run reducer (6 628 against 7 076 with it; the smaller saving, on
#:   the safe side). The others: yosys's synthesis of the float32 ``WindowLanes`` of one lane
#:   of extent 3 (outermost 1) with two axes against three: its LUT4s on the iCE40 (pipelined 17 182 to
#:   9 657, with serial products 5 614 to 4 205), LUT4s and twice the ``CCU2C`` on the ECP5
#:   (serial 1 396 + 2 x 321 to 1 228 + 2 x 238; pipelined 3 539 + 2 x 900 to 2 633 + 2 x 645;
#:   with serial products 4 040 + 2 x 846 to 3 012 + 2 x 633), LUTs on Xilinx (serial 1 585 to
#:   1 229; pipelined 3 534 to 2 604; with serial products 4 164 to 3 091).
#: * ``serial_crc``: on the iCE40 the HX8K's core above of two axes without the run reducer
#:   with the frames' CRCs a bit a cycle (5 877 cells) against a byte a cycle (6 026); on the
#:   ECP5 and Xilinx yosys's synthesis of ``FrameReceiver`` and ``FrameTransmitter`` so
#:   against not (LUT4s 683 to 532, LUTs 596 to 479).
#: * ``window_field_bits_cut``, ``window_indices_cut``: on the iCE40 the HX8K's core above
#:   (two axes, serial CRCs, no run reducer, 5 877 cells) with fields of 7 bits
#:   (``window_field_max`` 127: 5 280 cells), without Indices (5 471) and with both (4 886):
#:   -406 for the Indices and the rest, over the 9 bits, per bit (with the run reducer both
#:   took 6 628 to 5 554, more). Off the iCE40 not measured, so 0: on the safe side.
#: * ``reduce_command`` off the iCE40: not measured, so 0 (in ``base``): a core without the
#:   run reducer is estimated with only the unit's terms taken off, on the safe side.
#: * Xilinx: the ECP5's units scaled by the lane's LUTs (482 Xilinx LUTs against 550 ECP5
#:   LUT4s, ``docs/resources.md``, "The lane"). ``base``: the Arty A7-35's build (18 725) less
#:   its units; the windowed unit's lane and tap and ``link_byte`` (what the NiteFury's 32-byte
#:   link word and XDMA adapters add): :func:`refit` over the Arty's and the NiteFury's own
#:   cores and their cores for a model.
COEFFICIENTS = {
    "ice40": dict(base=3010, reduce_command=347, reduce=1010, reduce_lane=711, reduce_shallow=356,
                  reduce_shallow_lane=473, pool=530, pool_lane=1496, broadcast=1526,
                  broadcast_lane=2853, window_lane=12107, window_tap=2995, window_serial=-11197,
                  window_serial_lane=5259, window_two_axes=-7525, window_serial_two_axes=-1409,
                  window_serial_lane_two_axes=-436, window_field_bits_cut=-65,
                  window_indices_cut=-406, link_byte=0, serial_crc=-149),
    "ecp5": dict(base=6834, reduce_command=0, reduce=615, reduce_lane=463, reduce_shallow=615,
                 reduce_shallow_lane=308, pool=543, pool_lane=1020, broadcast=1090,
                 broadcast_lane=1780, window_lane=3897, window_tap=964, window_serial=1009,
                 window_serial_lane=5511, window_two_axes=-1416, window_serial_two_axes=-1454,
                 window_serial_lane_two_axes=-334, window_field_bits_cut=0,
                 window_indices_cut=0, link_byte=0, serial_crc=-151),
    "xilinx": dict(base=6335, reduce_command=0, reduce=539, reduce_lane=406, reduce_shallow=539,
                   reduce_shallow_lane=270, pool=476, pool_lane=894, broadcast=955,
                   broadcast_lane=1560, window_lane=691, window_tap=692, window_serial=884,
                   window_serial_lane=4830, window_two_axes=-930, window_serial_two_axes=-1073,
                   window_serial_lane_two_axes=-356, window_field_bits_cut=0,
                   window_indices_cut=0, link_byte=810, serial_crc=-117),
}

#: The units a parameter set without ``units`` builds (``hdl/top.py``'s ``UNITS``, the Core's
#: default).
_UNITS = ("reduce", "pool", "broadcast", "window")


#: The library unit (``library_units.json``: class and positional arguments) whose synthesis
#: figures give each estimate unit's share kept with a static element type.
_LIBRARY_UNITS = {"reduce": ("RunReducer", [1]), "reduce_shallow": ("RunReducer", [1, "shallow"]),
                  "pool": ("ChannelsLastPool", None), "broadcast": ("BroadcastMax", None),
                  "window": ("WindowMaxPool", None),
                  "window_serial": ("SerialWindowMaxPool", None)}


@functools.lru_cache(maxsize=None)
def static_dtype_shares(family, directory=None):
    """``{unit: share}``: the share of each unit's logic (``reduce``, ``reduce_shallow``,
    ``pool``, ``broadcast``, ``window``) a static element type keeps on ``family``, the LUT4s
    of its float32 build over those of its run-time-typed one in ``library_units.json``
    (``python docs/measure_library.py``; default directory
    :func:`~maxaccel.boards.targets.reports_dir`), read once per family and directory."""
    import json
    import pathlib
    from maxaccel.boards.targets import reports_dir
    path = pathlib.Path(reports_dir() if directory is None else directory) / "library_units.json"
    measured = json.loads(path.read_text())["units"]
    counted = "ice40" if family == "ice40" else "ecp5"
    shares = {}
    for name, (unit, args) in _LIBRARY_UNITS.items():
        luts = {row["dtype"]: row["counts"][counted]["lut"] for row in measured
                if row["unit"] == unit and (args is None or row["args"] == args)}
        shares[name] = luts["FLOAT"] / luts[None]
    return shares


def window_taps(window_extent, window_extent_outer=None):
    """Taps of a windowed pooling unit's axes: ``2 * (extent - 1) + (outer - 1)``, without the
    last term for a unit of two axes (``outer`` 0)."""
    outer = window_extent if window_extent_outer is None else window_extent_outer
    return 2 * (window_extent - 1) + max(outer - 1, 0)


def features(core, link_word=1, family=None):
    """The feature values (:data:`FEATURES`) of a core made with the
    :class:`~maxaccel.hdl.top.Core` parameters ``core`` (``lanes``, ``units``,
    ``reduce_pipeline``, ``window_lanes``, ``window_extent``, ``window_extent_outer``,
    ``dtype``; absent ones at the Core's defaults) behind a link of ``link_word`` bytes a
    cycle; a core of one element type needs the ``family`` (its units' terms scaled by
    :func:`static_dtype_shares`)."""
    lanes = core.get("lanes", 2)
    units = tuple(core.get("units", _UNITS))
    shallow = core.get("reduce_pipeline", "deep") == "shallow"
    share = dict.fromkeys(_LIBRARY_UNITS, 1.0)
    if core.get("dtype") is not None:
        if family is None:
            raise ValueError("a core of one element type is estimated on a family")
        share = static_dtype_shares(family)
    values = dict.fromkeys(FEATURES, 0)
    values["base"] = 1
    if "reduce" in units:
        reducer = "reduce_shallow" if shallow else "reduce"
        values["reduce_command"] = 1
        values[reducer] = share[reducer]
        values[f"{reducer}_lane"] = lanes * share[reducer]
    for unit in ("pool", "broadcast"):
        if unit in units:
            values[unit] = share[unit]
            values[f"{unit}_lane"] = lanes * share[unit]
    window_lanes = core.get("window_lanes") or lanes
    two_axes = window_lanes if core.get("window_extent_outer") == 0 else 0
    if "window" in units and core.get("window_serial"):
        values["window_serial_lane"] = window_lanes * share["window_serial"]
        values["window_serial_lane_two_axes"] = two_axes
    elif "window" in units:
        serial_products = core.get("window_serial_products")
        values["window_serial_two_axes" if serial_products else "window_two_axes"] = two_axes
        values["window_lane"] = window_lanes * share["window"]
        values["window_tap"] = window_lanes * share["window"] * window_taps(
            core.get("window_extent", 3), core.get("window_extent_outer"))
        if core.get("window_serial_products"):     # the index arithmetic: any element type
            values["window_serial"] = window_lanes
    if "window" in units:
        values["window_field_bits_cut"] = (WINDOW_FIELD_MAX.bit_length()
                                           - core.get("window_field_max",
                                                      WINDOW_FIELD_MAX).bit_length())
        values["window_indices_cut"] = 0 if core.get("window_indices", True) else window_lanes
    values["link_byte"] = link_word - 1
    values["serial_crc"] = int(bool(core.get("serial_crc")))
    return values


def estimate_cells(family, core, link_word=1, coefficients=None):
    """The estimated logic cells (``ICESTORM_LC``, ``TRELLIS_COMB``, Xilinx LUTs) of a core
    made with the parameters ``core`` on ``family`` (``coefficients``: default
    :data:`COEFFICIENTS`)."""
    table = (coefficients or COEFFICIENTS)[family]
    return round(sum(table[name] * value
                     for name, value in features(core, link_word, family).items()))


def report_core(report, targets):
    """The Core parameters a build report (``maxaccel build``'s report.json) was built with:
    its ``core`` key, else the units and capacities it records over its target's ``core``."""
    target = targets[report["board"]]
    core = dict(target.core, lanes=report["lanes"])
    if "units" in report:
        core["units"] = tuple(report["units"])
    core.update(report.get("capacities") or {})
    core.update(report.get("core") or {})
    return core


def report_points(reports, targets):
    """``[(family, features, cells)]`` of build reports: the core each was built with
    (:func:`report_core`) and the logic cells it used."""
    return [(report["family"], features(report_core(report, targets),
                                        targets[report["board"]].link_word, report["family"]),
             report["logic_cells"][0]) for report in reports]


def estimate_errors(reports, targets, coefficients=None):
    """``{name: (estimate, measured, relative error)}`` of the estimate against build
    reports (:func:`~maxaccel.boards.targets.load_reports` and ``load_model_reports``; the
    name is :func:`report_name`)."""
    errors = {}
    for report in reports:
        target = targets[report["board"]]
        estimate = estimate_cells(report["family"], report_core(report, targets),
                                  target.link_word, coefficients)
        measured = report["logic_cells"][0]
        errors[report_name(report)] = (estimate, measured, relative_error(estimate, measured))
    return errors


def report_name(report):
    """A build report's name in tables: its board, the models a core for models was chosen
    for (``docs/boards/models``) and the one element type of a core built for one:
    ``"ulx3s (squeezenet1_1, resnet18; float32)"``."""
    models = report.get("models")
    dtype = (report.get("core") or {}).get("dtype")
    within = [", ".join(models)] if models else []
    if dtype is not None:
        within.append(dtype)
    return report["board"] + (f" ({'; '.join(within)})" if within else "")


def refit(points, names, coefficients=None):
    """The coefficients with ``names`` of the points' families solved again by least squares
    over ``points`` (:func:`report_points`), the others held; returns a new table."""
    import numpy as np
    table = {family: dict(values) for family, values in (coefficients or COEFFICIENTS).items()}
    for family in {p[0] for p in points}:
        rows = [p for p in points if p[0] == family]
        held = [sum(table[family][n] * f[n] for n in FEATURES if n not in names)
                for _, f, _ in rows]
        matrix = np.array([[f[n] for n in names] for _, f, _ in rows], dtype=float)
        target = np.array([cells - h for (_, _, cells), h in zip(rows, held)], dtype=float)
        solved = np.linalg.lstsq(matrix, target, rcond=None)[0]
        table[family].update({n: int(round(v)) for n, v in zip(names, solved)})
    return table


def relative_error(estimate, measured):
    """``(estimate - measured) / measured``."""
    return (estimate - measured) / measured if measured else math.inf


def errors_markdown(errors):
    """A markdown table of :func:`estimate_errors`: per board the estimate, the build's logic
    cells and the error (``docs/boards.md``, "A core for your model")."""
    lines = ["| board | estimate | build | error |", "|---|---|---|---|"]
    for board, (estimate, measured, error) in errors.items():
        lines.append(f"| {board} | {estimate} | {measured} | {error:+.2%} |")
    return "\n".join(lines)
