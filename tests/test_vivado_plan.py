"""The Arty's Vivado flow checked as far as it can be without Vivado: the plan's XDC puts every
port of the design on the pin, I/O standard and clock period amaranth-boards' platform gives
it, and the plan's Tcl script, run by a Tcl interpreter (CPython's ``tkinter.Tcl``, Tcl 8.6)
with every Vivado command recorded instead of run, issues the project, sources, constraints,
synthesis, implementation and bitstream steps in order, with the board's part. What only Vivado
can do (synthesis and place and route for the part, timing, the bitstream) is in
``docs/boards.md``.
"""

import re

import pytest

from maxaccel.boards.targets import target
from maxaccel.boards.xilinx import uart_plan

ARTY = "arty_a7_35"

tkinter = pytest.importorskip("tkinter", reason="CPython without tkinter has no Tcl interpreter "
                                                 "to run the plan's Tcl with")

#: Any command the interpreter does not know (every Vivado command) is recorded as a list of
#: its words and returns the empty string; ``get_ports``/``get_nets`` return a name
#: that says what they were asked for, so a recorded ``set_property`` shows its object.
RECORDER = """
set ::calls {}
proc unknown {args} { lappend ::calls $args; return "" }
proc get_ports {name} { return "port:$name" }
proc get_nets {name} { return "net:$name" }
"""


def run_tcl(text):
    """The Vivado commands ``text`` issues, in order, each a tuple of its words."""
    interpreter = tkinter.Tcl()
    interpreter.eval(RECORDER)
    interpreter.eval(text)
    calls = interpreter.eval("set ::calls")
    return [tuple(interpreter.splitlist(call)) for call in interpreter.splitlist(calls)]


@pytest.fixture(scope="module")
def plan():
    t = target(ARTY)
    platform, plan = uart_plan(t, lanes=t.lanes, clock_mhz=t.clock_mhz)
    return t, platform, {name: (text.decode() if isinstance(text, bytes) else text)
                         for name, text in plan.files.items()}


def expected_pins(platform, port):
    """The platform's pins, attributes and clock of a top-level port named
    ``<resource>_<number>__<subsignal>__io`` or ``<resource>_<number>__io``."""
    match = re.fullmatch(r"(\w+?)_(\d+)__(?:(\w+?)__)?io", port)
    assert match, port
    name, number, subsignal = match.groups()
    resource = platform.lookup(name, int(number))
    ios, attrs = resource.ios, dict(resource.attrs)
    if subsignal is not None:
        (sub,) = [s for s in ios if s.name == subsignal]
        ios, attrs = sub.ios, {**attrs, **dict(sub.attrs)}
    (pins,) = ios
    return pins.names, attrs, resource.clock


def test_xdc_pins_and_clock_are_the_platforms(plan):
    """Every port of the plan's Verilog top is placed (LOC) at the pin, with the I/O standard,
    amaranth-boards' ArtyA7_35Platform gives its resource, and nothing else is placed; the
    oscillator's clock is constrained at the platform's frequency (100 MHz, 10 ns)."""
    t, platform, files = plan
    calls = run_tcl(files["maxaccel.xdc"])
    placed = {call[3][len("port:"):]: call[2] for call in calls
              if call[:2] == ("set_property", "LOC")}
    standards = {call[3][len("port:"):]: call[2] for call in calls
                 if call[:2] == ("set_property", "IOSTANDARD")}
    header = re.search(r"module maxaccel\((.*?)\);", files["maxaccel.v"], re.DOTALL).group(1)
    ports = {port.strip() for port in header.split(",")}
    assert ports == set(placed) == {"uart_0__rx__io", "uart_0__tx__io", "clk100_0__io",
                                    "rst_0__io"}
    clocks = []
    for port in sorted(ports):
        pins, attrs, clock = expected_pins(platform, port)
        assert [placed[port]] == pins, port
        assert standards[port] == attrs["IOSTANDARD"], port
        if clock is not None:
            clocks.append((port, 1e9 / clock.frequency))
    assert clocks == [("clk100_0__io", 1e3 / t.clock_mhz)]
    (create,) = [call for call in calls if call[0] == "create_clock"]
    assert create == ("create_clock", "-name", "clk100_0__io", "-period", "10.0",
                      "net:clk100_0__io")
    assert float(create[4]) == clocks[0][1]


def test_tcl_runs_and_issues_the_vivado_steps_in_order(plan):
    """The Tcl parses and runs; the Vivado commands it issues: the project for the board's
    part, the plan's Verilog and XDC, synthesis of the top, then opt, place, route, the
    bitstream, in that order, and quit."""
    t, _, files = plan
    calls = run_tcl(files["maxaccel.tcl"])
    commands = [call[0] for call in calls]
    assert calls[0][:5] == ("create_project", "-force", "-name", "maxaccel", "-part")
    assert calls[0][5].lower() == t.device.lower()      # Vivado's part names ignore case
    assert ("add_files", "maxaccel.v") in calls and ("read_xdc", "maxaccel.xdc") in calls
    for name in ("maxaccel.v", "maxaccel.xdc"):
        assert name in files
    assert ("synth_design", "-top", "maxaccel") in calls
    assert "module maxaccel(" in files["maxaccel.v"]
    steps = ["create_project", "add_files", "read_xdc", "synth_design", "opt_design",
             "place_design", "route_design", "write_bitstream", "quit"]
    assert [commands.index(step) for step in steps] == sorted(commands.index(step)
                                                             for step in steps)
    assert ("write_bitstream", "-force", "-bin_file", "maxaccel.bit") in calls
    assert commands[-1] == "quit"
    # The script the plan runs Vivado with sources this Tcl in batch mode.
    assert re.search(r'"\$VIVADO" -mode batch .*-source maxaccel\.tcl',
                     files["build_maxaccel.sh"])


def test_the_recorder_sees_what_a_broken_script_does():
    """The stubs record, they do not excuse: a Tcl error fails the run, and a step left out
    is missing from what is recorded."""
    with pytest.raises(tkinter.TclError):
        run_tcl("create_project -part xc7a35ticsg324-1L\nset x [")
    assert run_tcl("synth_design -top t\nforeach c [get_cells -quiet] { place_design }") == [
        ("synth_design", "-top", "t"), ("get_cells", "-quiet")]
