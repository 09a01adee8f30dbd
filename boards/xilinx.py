"""Xilinx targets: a complete Vivado build plan and a yosys resource estimate (no Vivado here).

``maxaccel build arty_a7_35`` writes the plan amaranth-boards makes for the board (Verilog, XDC
with the board's pins and clock constraint, the Tcl script and ``build_maxaccel.sh`` that runs
Vivado in batch mode) and estimates the design's resources with ``yosys synth_xilinx``. Fmax
needs Vivado: the report says so. ``docs/boards.md`` says how to build and program the board.

For the PCIe board (NiteFury II) the plan also creates the Xilinx XDMA IP
(:data:`maxaccel.boards.xdma.XDMA_IP_TCL`) and instantiates it with the core on its AXI4-Stream
channels (:class:`maxaccel.boards.xdma.XDMATop`); the estimate covers the core and adapters,
not the IP.
"""

import json
import pathlib
import time

from maxaccel.boards.targets import report_markdown

__all__ = ["DEVICE_TOTALS", "build_plan", "uart_plan"]

#: LUTs, flip-flops and 36 Kb block RAMs of the devices (7-series data sheet, DS180).
DEVICE_TOTALS = {"XC7A35TICSG324-1L": (20800, 41600, 50), "XC7A200T-FBG484-2": (133800, 267600, 365)}


def uart_plan(target, *, lanes, clock_mhz):
    """The Vivado build plan (amaranth's ``BuildPlan``: Verilog, XDC, Tcl, the script running
    Vivado) of a UART target, and the board's platform it was made with."""
    from maxaccel.boards.build import uart_top

    platform = target.platform()
    oscillator_mhz = platform.lookup(platform.default_clk).clock.frequency / 1e6
    if abs(clock_mhz - oscillator_mhz) > 1e-6:
        raise ValueError(f"{target.name} runs from its {oscillator_mhz:g} MHz oscillator; "
                         f"--clock {clock_mhz:g} is not available")
    return platform, platform.build(uart_top(target, lanes, clock_mhz), name="maxaccel",
                                    do_build=False)


def build_plan(target, *, lanes, clock_mhz, out_dir, progress=print):
    """Write ``target``'s Vivado build plan into ``out_dir`` and return its report."""
    from maxaccel.boards.build import capacities, core_parameters, core_record, uart_top
    from maxaccel.hdl.top import Core
    from maxaccel.boards.resources import synthesize

    out = pathlib.Path(out_dir)
    started = time.monotonic()
    if target.link == "xdma":
        from maxaccel.boards.xdma import (XDMA_IP_TCL, XDMA_WIDTH, XDMA_XDC, CoreOverAXIStream,
                                          XDMATop, nitefury_platform)
        platform = nitefury_platform()
        if abs(clock_mhz - 125) > 1e-6:
            raise ValueError(f"{target.name} runs from the XDMA IP's 125 MHz AXI clock; "
                             f"--clock {clock_mhz:g} is not available")
        link_word = target.link_word
        if 8 * lanes < link_word:
            raise ValueError(f"{target.name}: the core takes a {link_word}-byte link word per "
                             f"cycle, which needs --lanes {link_word // 8} or more, not {lanes}")
        parameters = dict(core_parameters(target, lanes, clock_mhz), clock_hz=125_000_000)
        out.mkdir(parents=True, exist_ok=True)
        progress(f"Vivado build plan for {target.name} ({target.device}): {lanes} lane(s), "
                 f"125 MHz, PCIe Gen2 x4 XDMA, AXI4-Stream {8 * XDMA_WIDTH}-bit -> {out}")
        platform.add_file("xdma_clocks.xdc", XDMA_XDC)
        plan = platform.build(XDMATop(link_bytes=link_word, **parameters), name="maxaccel",
                              do_build=False,
                              script_after_read=XDMA_IP_TCL)
        plan.extract(str(out))
        progress("estimating resources with yosys synth_xilinx (the XDMA IP excluded)")
        top = CoreOverAXIStream(XDMA_WIDTH, link_bytes=link_word, **parameters)
        core_link_bytes = link_word         # the core takes a link word per cycle
        cells = synthesize(top, "xilinx")
    else:
        _, plan = uart_plan(target, lanes=lanes, clock_mhz=clock_mhz)
        progress(f"Vivado build plan for {target.name} ({target.device}): {lanes} lane(s), "
                 f"{clock_mhz:g} MHz, UART {target.baud} baud -> {out}")
        out.mkdir(parents=True, exist_ok=True)
        plan.extract(str(out))
        progress("estimating resources with yosys synth_xilinx")
        top = uart_top(target, lanes, clock_mhz)
        cells = synthesize(top, "xilinx", ports=[top.rx, top.tx, top.idle])
        core_link_bytes = 1                 # behind a UART, a byte per cycle
    lut_total, ff_total, bram_total = DEVICE_TOTALS[target.device]
    block_rams = (cells["cells"].get("RAMB36E1", 0)
                  + cells["cells"].get("RAMB18E1", 0) / 2)
    report = {
        "board": target.name, "device": target.device, "family": target.family,
        "lanes": lanes, "clock_mhz": clock_mhz, "fmax_mhz": None,
        "logic_cells": [cells["lut"], lut_total], "logic_cell_type": "LUT (yosys estimate)",
        "lut4": None, "flip_flops": cells["ff"], "carry4": cells["carry"],
        "block_rams": [block_rams, bram_total], "bitstream": None,
        "plan": sorted(plan.files), "link": target.link, "baud": target.baud,
        "link_bytes_per_s": target.link_bytes_per_s, "core_bytes_per_s": clock_mhz * 1e6 * core_link_bytes,
        "build_seconds": round(time.monotonic() - started, 1),
        "note": "Fmax needs Vivado: run build_maxaccel.sh (docs/boards.md)",
        "core": core_record(target, lanes, clock_mhz),
        "capacities": capacities(Core.identity_of(**core_parameters(target, lanes, clock_mhz))),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "report.md").write_text(report_markdown([report]) + "\n")
    progress(report_markdown([report]))
    progress(f"plan written: cd {out} && sh build_maxaccel.sh (needs Vivado on PATH)")
    return report
