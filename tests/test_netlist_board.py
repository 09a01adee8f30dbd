"""The netlist boards: each board's Core as yosys synthesises it, simulated gate by gate with
yosys's cell models under Verilator, gives the golden model's bits through the host driver.

The iCE40 board (the HX8K breakout's design, which is the iCEBreaker's too) runs with
``--slow``: a cold build is yosys and Verilator, two to three minutes on two cores, for three
tests. The ULX3S (ECP5) design is five times the cells and builds for five minutes and more:
it is slow too. Its block RAMs (``DP16KD``, the replay buffer of
broadcasting Max) have no model in yosys (only a blackbox); the netlist board gives them the
behaviour in ``sim/verilator/dp16kd_sim.vh`` and refuses, by instance, any whose parameters that
behaviour does not cover (``docs/semantics.md`` section 6). The Arty A7-35 (Xilinx,
``synth_xilinx``) is larger still and slow too; its block RAMs (``RAMB18E1``, ``RAMB36E1``),
which yosys declares without behaviour, get ``sim/verilator/ramb_sim.vh``, checked here in CI
against Amaranth's memories as the DP16KD behaviour is.
"""

import re
import subprocess

import numpy as np
import pytest
from amaranth.hdl import Cat, Elaboratable, Module, Signal
from amaranth.lib.memory import Memory
from device_checks import (ALL, CASES, MAXPOOL_CASES, PYTORCH_CASES, REDUCTIONS,
                           check_edge_digest, check_maxpool_case, check_node_case,
                           check_pytorch_case)

from maxaccel.boards.targets import target
from maxaccel.contract.wire import Command
from maxaccel.host.device import Device, open_device
from maxaccel.host.transport import SimTransport
from maxaccel.sim import reference
from maxaccel.sim.netlist import Synthesis, instances, netlist_targets
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import random_values

ICE40 = "ice40_hx8k_breakout"


@pytest.fixture(scope="module")
def ice40():
    with open_device(f"netlist:{ICE40}") as device:
        yield device


def check_node_cases(device):
    """Every ONNX backend node case of Max, ReduceMax, GlobalMaxPool, Min, ReduceMin, ArgMax
    and ArgMin (and the PyTorch-converted ones of Max and Min), bit for bit against its
    shipped output and the golden model."""
    for name in sorted(CASES):
        check_node_case(device, name)
    for name in sorted(PYTORCH_CASES):
        check_pytorch_case(device, name)


def check_reductions(device):
    """The corpus's reductions (empty, rank 0, noop, keepdims) in every dtype."""
    rng = np.random.default_rng(600)
    for fmt in ALL:
        for shape, axes, keepdims, noop in REDUCTIONS:
            data = random_values(rng, fmt, shape, edge_fraction=0.2)
            assert_same_bits(device.reduce_max(data, axes=axes, keepdims=keepdims,
                                               noop_with_empty_axes=noop),
                             reference.reduce_max(data, axes=axes, keepdims=keepdims,
                                                  noop_with_empty_axes=noop),
                             f"{fmt.dtype.name} {shape} axes={axes}")


#: The iCE40 netlist's build, for three tests.
ICE40_BUILD = pytest.mark.slow(reason="the iCE40 netlist builds for 2-3 minutes of both cores "
                                      "(158 s at load 11)")


@ICE40_BUILD
def test_the_netlist_is_the_bitstreams_core(ice40):
    """The HX8K's design: one lane, the run reducer only (no replay buffer, no pooling
    channels), 12 MHz, a byte per cycle as behind its UART."""
    assert ice40.link.transport.board.link_bytes == 1
    identity = ice40.identity
    assert (identity.lanes, identity.replay_depth, identity.pool_channels,
            identity.clock_hz) == (target(ICE40).lanes, 0, 0, 12_000_000)


@ICE40_BUILD
def test_onnx_node_cases_on_the_ice40_netlist(ice40):
    check_node_cases(ice40)


@ICE40_BUILD
def test_edge_corpus_sample_on_the_ice40_netlist(ice40):
    check_edge_digest(ice40)
    check_reductions(ice40)


#: One LUT of the netlist miscomputed: the one making bit 5 of lane 0's order key
#: (``value ^ flip mask``, ``LUT_INIT 0x0ff0``) made an XNOR. Bit 5 of byte 0 is in element 0
#: of every dtype, so any reduction whose operands differ there can come out wrong.
#: ``select -assert-count`` makes synthesis fail, rather than the test pass vacuously, if a
#: change to the design renames the cell.
BROKEN_LUT = "c:reducer.key_0_SB_DFFESR_Q_D_SB_LUT4_O"
BREAK = f"select -assert-count 1 {BROKEN_LUT}\nsetparam -set LUT_INIT 16'hf00f {BROKEN_LUT}\n"


@pytest.mark.slow(reason="a second netlist build (2-3 min of CPU)")
def test_a_broken_netlist_is_caught():
    """The same checks on a netlist with one LUT wrong fail: the netlist board runs what the
    netlist computes, not what the design means."""
    transport = SimTransport("netlist", board=ICE40, synthesis=Synthesis("ice40", after=BREAK))
    with Device(transport) as device:
        with pytest.raises(AssertionError, match="elements differ"):
            check_edge_digest(device)


def test_netlist_urls_name_the_problem():
    with pytest.raises(ValueError,
                       match=r"netlist:BOARD .*\(e\.g\. netlist:ice40_hx8k_breakout\)"):
        open_device("netlist:")
    with pytest.raises(ValueError, match=r"no netlist board for nitefury \(its Core is about "
                                         r"three times the Arty's.*netlist boards: icebreaker, "
                                         r"ice40_hx8k_breakout, ulx3s, arty_a7_35$"):
        open_device("netlist:nitefury")
    with pytest.raises(ValueError, match="unknown board 'nosuch'"):
        SimTransport("netlist", board="nosuch")
    with pytest.raises(ValueError, match=r"no netlist board for ulx3s_85f \(its windowed "
                                         r"pooling unit's index products map onto MULT18X18D"):
        open_device("netlist:ulx3s_85f")
    assert netlist_targets() == ["icebreaker", "ice40_hx8k_breakout", "ulx3s", "arty_a7_35"]


@pytest.mark.slow(reason="the ULX3S netlist builds for many minutes")
def test_node_cases_and_edge_corpus_sample_on_the_ulx3s_netlist():
    """The ECP5 design with its block RAMs (DP16KD, the broadcast replay buffer) simulated
    by sim/verilator/dp16kd_sim.vh: broadcasting Max (in the node cases and the edge digest)
    reads its operands back from them."""
    with open_device("netlist:ulx3s") as device:
        assert device.identity.lanes == 2 and device.identity.replay_depth == 256
        check_node_cases(device)
        check_edge_digest(device)
        check_reductions(device)


ARTY = "arty_a7_35"

#: The MaxPool node cases the Arty's netlist runs: those of up to 64 KiB of input (24 of 28;
#: 2-D, 3-D and 1-D, the 2-D ones through the window unit's line buffers). The other four
#: (131 KB to 4 MB: 1000x1000, 32x32x32 twice, 1x220000) are millions of link cycles, tens of
#: minutes at the netlist's few thousand cycles a second; they run on the ``verilator`` board
#: (tests/test_offload.py).
ARTY_MAXPOOL_CASES = sorted(name for name, (_, data_sets) in MAXPOOL_CASES.items()
                            if sum(inputs[0].nbytes for inputs, _ in data_sets) <= 64 * 1024)


@pytest.mark.slow(reason="the Arty's netlist builds for many minutes")
def test_node_cases_and_edge_corpus_sample_on_the_arty_netlist():
    """The Xilinx design (synth_xilinx) with its block RAMs simulated by
    sim/verilator/ramb_sim.vh: RAMB36E1 in simple dual port (the broadcast replay buffer,
    which broadcasting Max in the node cases and the edge digest reads back) and RAMB18E1 in
    true dual port (the window unit's line buffers, which the 2-D MaxPool node cases go
    through), besides LUT RAMs, shift registers and DSP48E1s."""
    with open_device(f"netlist:{ARTY}") as device:
        assert (device.identity.lanes, device.identity.replay_depth) == (2, 512)
        check_node_cases(device)
        routes = set()
        assert len(ARTY_MAXPOOL_CASES) == 24
        for name in ARTY_MAXPOOL_CASES:
            check_maxpool_case(device, name)
            routes.add(device.last_max_pool_route)
        assert Command.MAX_POOL in routes
        check_edge_digest(device)
        check_reductions(device)


#: One block RAM of the Arty's netlist read at the wrong width: a slice of the first line buffer
#: of the window unit (a RAMB18E1 written 18 bits wide on port A, read on port B) read 9 bits
#: wide, so bits 8..15 and 17 of each word it gives are lost. The width is one the behaviour
#: covers, so the netlist is simulated, not refused: what is caught is the RAM's output.
BROKEN_RAMB = "c:window.unit_0.axis_0.line_1.0.0"
BREAK_RAMB = (f"select -assert-count 1 {BROKEN_RAMB} t:RAMB18E1 %i\n"
              f"setparam -set READ_WIDTH_B 9 {BROKEN_RAMB}\n")


@pytest.mark.slow(reason="a second Arty netlist build (many minutes)")
def test_a_broken_xilinx_netlist_is_caught():
    """MaxPool through the window unit on a netlist with one block RAM port wrong fails: the
    netlist board runs the RAMB as the netlist configures it."""
    transport = SimTransport("netlist", board=ARTY,
                             synthesis=Synthesis("xilinx", after=BREAK_RAMB))
    with Device(transport) as device:
        with pytest.raises(AssertionError):
            for name in ARTY_MAXPOOL_CASES:
                check_maxpool_case(device, name)


#: A RAMB36E1 as yosys's Xilinx mapping writes it (the simple dual port of the replay buffer).
RAMB36E1_INSTANCE = """\
  RAMB36E1 #(
    .DOA_REG(32'sd0),
    .DOB_REG(32'sd0),
    .INIT_00(256'bxxxxxxxx00000000),
    .INIT_A(72'h000000000xxxxxxxxx),
    .RAM_MODE("SDP"),
    .READ_WIDTH_A(32'd72),
    .READ_WIDTH_B(32'd0),
    .WRITE_MODE_A("READ_FIRST"),
    .WRITE_MODE_B("READ_FIRST"),
    .WRITE_WIDTH_A(32'd0),
    .WRITE_WIDTH_B(32'd72)
  ) \\broadcast.buffer.0.0  (
    .ADDRARDADDR({ 1'h0, _00021_, 6'h00 }),
    .CLKARDCLK(clk),
    .CLKBWRCLK(clk),
    .WEBWE({ _06150_, _06150_, _06150_, _06150_, _06150_, _06150_, _06150_, _06150_ })
  );
"""


@pytest.mark.parametrize("old,new,problem", [
    (".DOA_REG(32'sd0)", ".DOA_REG(32'sd1)", r"DOA_REG 1 \(covered: 0\)"),
    (".READ_WIDTH_A(32'd72)", ".READ_WIDTH_A(32'd36)",
     r"simple dual port READ_WIDTH_A/WRITE_WIDTH_B 36/72"),
    ('.WRITE_MODE_B("READ_FIRST")', '.WRITE_MODE_B("WRITE_FIRST")',
     r"simple dual port WRITE_MODE_A/B READ_FIRST/WRITE_FIRST"),
    ('.RAM_MODE("SDP")', '.RAM_MODE("TDP")', r"READ_WIDTH_A 72 \(covered: 0, 1, 2, 4, 9, 18, 36\)"),
    (".DOB_REG(32'sd0)", '.RAM_EXTENSION_A("LOWER")', r"RAM_EXTENSION_A 'LOWER'"),
    (".DOB_REG(32'sd0)", ".IS_CLKARDCLK_INVERTED(1'h1)", r"IS_CLKARDCLK_INVERTED 1 \(an inverted"),
    (".DOB_REG(32'sd0)", '.EN_ECC_READ("TRUE")', r"EN_ECC_READ 'TRUE'"),
    (".DOB_REG(32'sd0)", '.SIM_SOMETHING("X")', r"SIM_SOMETHING 'X' \(a parameter the model"),
    (".CLKBWRCLK(clk)", ".CLKBWRCLK(clk2)", r"ports clocked by clk and clk2"),
], ids=["output-register", "mixed-sdp", "sdp-modes", "tdp-72", "cascade", "inverted-clock", "ecc",
        "unknown-parameter", "two-clocks"])
def test_a_ramb_the_model_does_not_cover_is_refused_by_name(old, new, problem):
    """The RAMB behaviour covers what yosys's Xilinx mapping instantiates; any other
    parameter, or two clocks on the ports, is refused with the instance's name before
    anything is built. (x bits in contents, which yosys writes for what nothing defines, read
    as 0.)"""
    from maxaccel.sim.verilator import VerilatorUnavailable
    netlist = f"module top(input clk, clk2);\n{RAMB36E1_INSTANCE}endmodule\n"
    Synthesis("xilinx").check_models(netlist)
    assert [(name, parameters["INIT_A"], parameters["INIT_00"]) for name, parameters in
            instances(netlist, "RAMB36E1")] == [("broadcast.buffer.0.0", 0, 0)]
    with pytest.raises(VerilatorUnavailable,
                       match=rf"does not cover.*broadcast\.buffer\.0\.0: {problem}"):
        Synthesis("xilinx").check_models(netlist.replace(old, new))
    # RAMB18E1 has no 36-bit true dual port, and its simple dual port word is 36 bits.
    netlist = netlist.replace("RAMB36E1", "RAMB18E1")
    with pytest.raises(VerilatorUnavailable, match=r"READ_WIDTH_A/WRITE_WIDTH_B 72/72 "
                                                   r"\(covered: 36/36"):
        Synthesis("xilinx").check_models(netlist)


def test_a_cell_without_a_simulation_model_is_refused():
    """A blackbox of yosys's models (an iCE40 PLL, say) would read 0: the board refuses a
    netlist using one, naming the cell; LUTs and flip-flops pass, and so does ECP5's DP16KD,
    whose blackbox gets the behaviour of sim/verilator/dp16kd_sim.vh."""
    from maxaccel.sim.verilator import VerilatorUnavailable
    with pytest.raises(VerilatorUnavailable, match=r"ice40 netlist uses SB_PLL40_CORE, for "
                                                   r"which yosys ships no simulation model"):
        Synthesis("ice40").check_models("module top;\n  SB_PLL40_CORE #(\n  ) pll (\n  );\n"
                                        "endmodule\n")
    Synthesis("ecp5").check_models("module top;\n  LUT4 #(\n  ) lut (\n  );\nendmodule\n")
    # SB_SPI has no blackbox attribute, and no behaviour either.
    with pytest.raises(VerilatorUnavailable, match=r"ice40 netlist uses SB_SPI, for which"):
        Synthesis("ice40").check_models("module top;\n  SB_SPI spi (\n  );\nendmodule\n")
    models = Synthesis("ecp5").cell_models()
    assert "dp16kd_sim.vh" in models
    assert not re.search(r"blackbox\s*\*\)\s*module\s+DP16KD", models["cells_sim.v"])


def test_cells_without_behaviour_are_found_with_or_without_the_blackbox_attribute():
    """yosys's Xilinx models declare the block RAMs with parameters and timing but no
    behaviour and no blackbox attribute: the check sees them, and the netlist board's models
    give them the behaviour of sim/verilator/ramb_sim.vh. The cells the designs use all have
    behaviour, DP16KD and the RAMBs through the models of sim/verilator."""
    from maxaccel.sim.netlist import _share_dir, cells_without_behaviour
    xilinx = cells_without_behaviour((_share_dir() / "xilinx" / "cells_sim.v").read_text())
    assert {"RAMB18E1", "RAMB36E1"} <= xilinx and not {"LUT6", "FDRE", "CARRY4"} & xilinx
    assert cells_without_behaviour("module M(input a, output b);\n  specify\n    (a => b) = 1;"
                                   "\n  endspecify\nendmodule\n") == {"M"}
    assert cells_without_behaviour("(* blackbox *)\nmodule B(input a, output b);\n"
                                   "  assign b = a;\nendmodule\n") == {"B"}
    for family, cells in [("ice40", {"SB_LUT4", "SB_CARRY", "SB_DFF", "SB_DFFESR"}),
                          ("ecp5", {"LUT4", "TRELLIS_FF", "CCU2C", "PFUMX", "L6MUX21",
                                    "TRELLIS_DPR16X4", "DP16KD"}),
                          # the cells of the Arty's netlist
                          ("xilinx", {"LUT2", "LUT3", "LUT4", "LUT5", "LUT6", "INV", "CARRY4",
                                      "FDRE", "FDSE", "DSP48E1", "SRL16E", "RAM32M", "RAM64M",
                                      "RAMB18E1", "RAMB36E1"})]:
        empty = set().union(*map(cells_without_behaviour,
                                 Synthesis(family).cell_models().values()))
        assert not cells & empty, f"{family}: {cells & empty}"


#: A DP16KD as yosys's ECP5 mapping writes it (the pseudo dual port of the replay buffer).
DP16KD_INSTANCE = """\
  DP16KD #(
    .CLKAMUX("CLKA"),
    .CSDECODE_A("0b000"),
    .DATA_WIDTH_A(32'd36),
    .DATA_WIDTH_B(32'd36),
    .INITVAL_00(320'h0),
    .REGMODE_A("NOREG"),
    .REGMODE_B("NOREG"),
    .RESETMODE("ASYNC")
  ) \\broadcast.buffer.0.0  (
    .CLKA(clk)
  );
"""


@pytest.mark.parametrize("old,new,problem", [
    ('.REGMODE_B("NOREG")', ".REGMODE_B(\"OUTREG\")", r"REGMODE_B 'OUTREG'"),
    (".DATA_WIDTH_B(32'd36)", ".DATA_WIDTH_B(32'd18)", r"DATA_WIDTH_A/B 36/18"),
    ('.CLKAMUX("CLKA")', '.CLKAMUX("INV")', r"CLKAMUX 'INV' \(an inverted"),
    ('.CSDECODE_A("0b000")', '.CSDECODE_A("0b101")', r"CSDECODE_A '0b101'"),
    ('.RESETMODE("ASYNC")', '.INIT_DATA("DYNAMIC")', r"INIT_DATA 'DYNAMIC' \(a parameter"),
], ids=["outreg", "mixed-36", "inverted-clock", "csdecode", "unknown-parameter"])
def test_a_dp16kd_the_model_does_not_cover_is_refused_by_name(old, new, problem):
    """The DP16KD behaviour covers what yosys's ECP5 mapping instantiates; any other
    parameter is refused with the instance's name, before anything is built."""
    from maxaccel.sim.verilator import VerilatorUnavailable
    netlist = f"module top(input clk);\n{DP16KD_INSTANCE}endmodule\n"
    Synthesis("ecp5").check_models(netlist)
    assert [name for name, _ in instances(netlist, "DP16KD")] == ["broadcast.buffer.0.0"]
    with pytest.raises(VerilatorUnavailable,
                       match=rf"does not cover.*broadcast\.buffer\.0\.0: {problem}"):
        Synthesis("ecp5").check_models(netlist.replace(old, new))


# --- the DP16KD behaviour against Amaranth's memories ----------------------------------------

#: Both designs (Amaranth's Verilog of a memory, ``reference``, and its synth_ecp5 netlist with
#: DP16KD, ``dut``) driven with the same random inputs for 20 000 cycles; every other
#: thousand cycles the addresses are 0..3 only, so reads of a word being written (by the other
#: port, in the same cycle or the one after) are frequent. Every output compared every cycle.
DP16KD_BENCH = """\
module tb;
  reg clk = 0, rst = 1;
  reg [13:0] addr0, addr1; reg [35:0] data0, data1; reg [3:0] en0, en1; reg ren0, ren1;
  wire [35:0] r0, r1, d0, d1;
  integer cycle, errors = 0;
  reference R(.clk(clk), .rst(rst), .addr0(addr0[`AB-1:0]), .data0(data0[`W-1:0]),
              .en0(en0[`E-1:0]), .ren0(ren0), .out0(r0[`W-1:0]), .addr1(addr1[`AB-1:0]),
              .data1(data1[`W-1:0]), .en1(en1[`E-1:0]), .ren1(ren1), .out1(r1[`W-1:0]));
  dut D(.clk(clk), .rst(rst), .addr0(addr0[`AB-1:0]), .data0(data0[`W-1:0]), .en0(en0[`E-1:0]),
        .ren0(ren0), .out0(d0[`W-1:0]), .addr1(addr1[`AB-1:0]), .data1(data1[`W-1:0]),
        .en1(en1[`E-1:0]), .ren1(ren1), .out1(d1[`W-1:0]));
  initial begin
    for (cycle = 0; cycle < 20000; cycle = cycle + 1) begin
      addr0 = (cycle / 1000) % 2 ? $urandom % 4 : $urandom;
      addr1 = (cycle / 1000) % 2 ? $urandom % 4 : $urandom;
      data0 = {$urandom, $urandom}; data1 = {$urandom, $urandom};
      en0 = $urandom % 3 == 0 ? $urandom : 0; en1 = $urandom % 3 == 0 ? $urandom : 0;
      ren0 = $urandom % 4 != 0; ren1 = $urandom % 4 != 0;
      if (cycle == 3) rst = 0;
      #5 clk = 1; #5 clk = 0;
      if (!rst && (r0[`W-1:0] !== d0[`W-1:0] || r1[`W-1:0] !== d1[`W-1:0])) begin
        errors = errors + 1;
        if (errors < 5) $display("cycle %0d: reference %h %h, netlist %h %h", cycle,
                                 r0[`W-1:0], r1[`W-1:0], d0[`W-1:0], d1[`W-1:0]);
      end
    end
    $display("DONE errors=%0d", errors);
    $finish;
  end
endmodule
"""


class MemoryUnderTest(Elaboratable):
    """A memory with random contents, a write port and a read port (port 0 writes, port 1
    reads), as yosys maps it onto DP16KD."""

    def __init__(self, width, depth, granularity, transparent):
        self.width, self.depth = width, depth
        self.granularity, self.transparent = granularity, transparent
        self.ports = [dict(addr=Signal(range(depth), name=f"addr{p}"),
                           data=Signal(width, name=f"data{p}"),
                           en=Signal(width // granularity, name=f"en{p}"),
                           ren=Signal(name=f"ren{p}"), out=Signal(width, name=f"out{p}"))
                      for p in range(2)]

    def signals(self):
        return [s for port in self.ports for s in port.values()]

    def elaborate(self, platform):
        m = Module()
        rng = np.random.default_rng(1)
        m.submodules.memory = memory = Memory(
            shape=self.width, depth=self.depth,
            init=[int.from_bytes(rng.bytes(-(-self.width // 8)), "little") % (1 << self.width)
                  for _ in range(self.depth)])
        write, read = self.ports
        port = memory.write_port(granularity=self.granularity)
        m.d.comb += [port.addr.eq(write["addr"]), port.data.eq(write["data"]),
                     port.en.eq(write["en"])]
        port = memory.read_port(transparent_for=(port,) if self.transparent else ())
        m.d.comb += [port.addr.eq(read["addr"]), port.en.eq(read["ren"]),
                     read["out"].eq(port.data)]
        return m


@pytest.mark.parametrize("width,depth,transparent,data_width", [
    (18, 1024, False, 18), (9, 2048, False, 9), (36, 512, True, 36)])
def test_dp16kd_behaviour_gives_amaranths_memory_semantics(width, depth, transparent,
                                                           data_width, tmp_path):
    """The DP16KD behaviour, in the netlists yosys makes of Amaranth memories (18 and 9-bit
    ports, the 36-bit pseudo dual port; byte enables; transparent read ports or not; random
    initial contents), gives Amaranth's own semantics cycle for cycle. (A first version of the
    behaviour, which complemented the whole word on a collision, failed here: yosys delays a
    write by a cycle and bypasses only the bytes written, so it relies on the others reading
    their old value.)"""
    from amaranth.back import rtlil, verilog

    from maxaccel.sim.verilator import require_verilator
    command, _ = require_verilator()
    top = MemoryUnderTest(width, depth, 9, transparent)
    synthesis = Synthesis("ecp5")
    netlist = synthesis.netlist(rtlil.convert(top, name="dut", ports=top.signals()), "dut")
    rams = [parameters for _, parameters in instances(netlist, "DP16KD")]
    assert rams and all(ram["DATA_WIDTH_A"] == ram["DATA_WIDTH_B"] == data_width
                        for ram in rams)
    sources = {"reference.v": verilog.convert(top, name="reference", ports=top.signals()),
               "dut.v": netlist, "tb.v": DP16KD_BENCH, **synthesis.cell_models()}
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    build = subprocess.run(
        [command, "--binary", "--timing", "-O1", "-Wno-fatal", "-Wno-lint", "-Wno-style",
         "-Wno-TIMESCALEMOD", f"+define+W={width}", f"+define+E={width // 9}",
         f"+define+AB={(depth - 1).bit_length()}", "--top-module", "tb", "tb.v", "reference.v",
         "dut.v", "cells_sim.v", "-j", "2"], cwd=tmp_path, capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    run = subprocess.run([tmp_path / "obj_dir" / "Vtb"], capture_output=True, text=True)
    assert "DONE errors=0" in run.stdout, run.stdout[-3000:]


# --- the RAMB18E1/RAMB36E1 behaviour against Amaranth's memories -----------------------------

#: Amaranth's Verilog of :class:`XilinxMemories` (``reference``) and its synth_xilinx netlist
#: (``dut``) driven with the same random inputs for 20 000 cycles, collision-heavy as
#: :data:`DP16KD_BENCH` (every other thousand cycles the addresses are 0..3 only); every read
#: output compared every cycle, from before the first clock edge. Only the two ports of the
#: ``two18`` memory never write one word at the same edge: the RAM leaves the word undefined
#: then (UG473, and the behaviour complements it), Amaranth's Verilog lets the later port win,
#: and yosys maps the two write ports straight onto the RAM's, adding nothing to order them.
RAMB_BENCH = """\
module tb;
  reg clk = 0;
  reg [15:0] addr0, addr1; reg [71:0] data0, data1; reg [7:0] en0, en1; reg ren0, ren1;
  wire [`W-1:0] r, d;
  integer cycle, errors = 0;
  reference R(.clk(clk), .rst(1'b0), .addr0(addr0), .addr1(addr1), .data0(data0), .data1(data1),
              .en0(en0), .en1(en1), .ren0(ren0), .ren1(ren1), .out(r));
  dut D(.clk(clk), .rst(1'b0), .addr0(addr0), .addr1(addr1), .data0(data0), .data1(data1),
        .en0(en0), .en1(en1), .ren0(ren0), .ren1(ren1), .out(d));
  initial begin
    for (cycle = 0; cycle < 20000; cycle = cycle + 1) begin
      addr0 = (cycle / 1000) % 2 ? $urandom % 4 : $urandom;
      addr1 = (cycle / 1000) % 2 ? $urandom % 4 : $urandom;
      data0 = {$urandom, $urandom, $urandom}; data1 = {$urandom, $urandom, $urandom};
      en0 = $urandom % 3 == 0 ? $urandom : 0; en1 = $urandom % 3 == 0 ? $urandom : 0;
      ren0 = $urandom % 4 != 0; ren1 = $urandom % 4 != 0;
      if (en0 != 0 && addr0[9:0] == addr1[9:0]) en1 = 0;
      #1;
      if (r !== d) begin
        errors = errors + 1;
        if (errors < 5) $display("cycle %0d: reference %h, netlist %h, differing %h", cycle, r,
                                 d, r ^ d);
      end
      #4 clk = 1; #5 clk = 0;
    end
    $display("DONE errors=%0d", errors);
    $finish;
  end
endmodule
"""

#: The memories of :class:`XilinxMemories`: name -> (width, depth, write granularity, ports),
#: and the block RAM synth_xilinx makes of each: (cell, RAM_MODE, READ_WIDTH_A,
#: WRITE_WIDTH_A, READ_WIDTH_B, WRITE_WIDTH_B, WRITE_MODE_A, WRITE_MODE_B). Ports: ``wr`` a
#: write port (addresses, data and enables of port 0) and a read port (address and enable of
#: port 1), ``wr_t`` the same with the read port transparent; ``rw``/``rw_t`` a write port and
#: a read port at the same address (one RAM port); ``rw_nc`` the same, reading only while not
#: writing; ``two`` two write ports, each with a transparent read port at its address. The
#: Arty's design has the first two kinds (its line buffers and broadcast buffer).
XILINX_MEMORIES = {
    "tdp18": ((18, 1024, 9, "wr"),
              ("RAMB18E1", "TDP", 0, 18, 18, 0, "READ_FIRST", "READ_FIRST")),
    "sdp72": ((72, 512, 9, "wr"),
              ("RAMB36E1", "SDP", 72, 0, 0, 72, "READ_FIRST", "READ_FIRST")),
    "sdp36t": ((36, 512, 9, "wr_t"),
               ("RAMB18E1", "SDP", 36, 0, 0, 36, "READ_FIRST", "READ_FIRST")),
    "tdp36": ((36, 1024, 9, "wr"),
              ("RAMB36E1", "TDP", 0, 36, 36, 0, "READ_FIRST", "READ_FIRST")),
    "tdp9t": ((9, 2048, 9, "wr_t"),
              ("RAMB18E1", "TDP", 0, 9, 9, 0, "READ_FIRST", "READ_FIRST")),
    "tdp4": ((4, 4096, 4, "wr"),
             ("RAMB18E1", "TDP", 0, 4, 4, 0, "READ_FIRST", "READ_FIRST")),
    "rw18": ((18, 1024, 9, "rw"),
             ("RAMB18E1", "TDP", 0, 18, 18, 0, "READ_FIRST", "READ_FIRST")),
    "rw18t": ((18, 1024, 9, "rw_t"),
              ("RAMB18E1", "TDP", 18, 18, 0, 0, "WRITE_FIRST", "READ_FIRST")),
    "rw18nc": ((18, 1024, 9, "rw_nc"),
               ("RAMB18E1", "TDP", 18, 18, 0, 0, "NO_CHANGE", "READ_FIRST")),
    "two18": ((18, 1024, 9, "two"),
              ("RAMB18E1", "TDP", 18, 18, 18, 18, "READ_FIRST", "READ_FIRST")),
}


class XilinxMemories(Elaboratable):
    """The memories of :data:`XILINX_MEMORIES` with random contents, side by side: inputs
    shared (each memory takes the low bits it needs), read data concatenated in ``out``."""

    def __init__(self, memories):
        self.memories = memories
        self.addr = [Signal(16, name=f"addr{p}") for p in range(2)]
        self.data = [Signal(72, name=f"data{p}") for p in range(2)]
        self.en = [Signal(8, name=f"en{p}") for p in range(2)]
        self.ren = [Signal(name=f"ren{p}") for p in range(2)]
        self.out = Signal(sum(width * (2 if ports == "two" else 1)
                              for (width, _, _, ports), _ in memories.values()), name="out")

    def signals(self):
        return [*self.addr, *self.data, *self.en, *self.ren, self.out]

    def elaborate(self, platform):
        m = Module()
        rng = np.random.default_rng(1)
        outputs = []
        for name, ((width, depth, granularity, ports), _) in self.memories.items():
            m.submodules[name] = memory = Memory(shape=width, depth=depth, init=[
                int.from_bytes(rng.bytes(-(-width // 8)), "little") % (1 << width)
                for _ in range(depth)])
            enables = width // granularity
            writes = []
            for p in ([0, 1] if ports == "two" else [0]):
                port = memory.write_port(granularity=granularity)
                m.d.comb += [port.addr.eq(self.addr[p]), port.data.eq(self.data[p]),
                             port.en.eq(self.en[p][:enables])]
                writes.append(port)
            if ports == "two":
                reads = [(memory.read_port(transparent_for=(w,)), p, self.ren[p])
                         for p, w in enumerate(writes)]
            else:
                at = 1 if ports.startswith("wr") else 0
                enable = ~self.en[0][:enables].any() if ports == "rw_nc" else self.ren[at]
                reads = [(memory.read_port(transparent_for=writes if ports.endswith("_t")
                                           else ()), at, enable)]
            for port, at, enable in reads:
                m.d.comb += [port.addr.eq(self.addr[at]), port.en.eq(enable)]
                outputs.append(port.data)
        m.d.comb += self.out.eq(Cat(*outputs))
        return m


def run_ramb_bench(tmp_path, after=""):
    """:data:`RAMB_BENCH` on :data:`XILINX_MEMORIES` and their synth_xilinx netlist (with the
    yosys commands ``after`` run on it); what the bench prints. Each memory is asserted to be
    the block RAM and mode expected, so a comparison cannot pass on logic that avoided them."""
    from amaranth.back import rtlil, verilog

    from maxaccel.sim.verilator import require_verilator
    command, _ = require_verilator()
    top = XilinxMemories(XILINX_MEMORIES)
    synthesis = Synthesis("xilinx", after=after)
    netlist = synthesis.netlist(rtlil.convert(top, name="dut", ports=top.signals()), "dut")
    made = {name.partition(".")[0]: (cell, *(parameters.get(key, 0) for key in (
                "RAM_MODE", "READ_WIDTH_A", "WRITE_WIDTH_A", "READ_WIDTH_B", "WRITE_WIDTH_B",
                "WRITE_MODE_A", "WRITE_MODE_B")))
            for cell in ("RAMB18E1", "RAMB36E1") for name, parameters in instances(netlist, cell)}
    if not after:
        assert made == {name: ram for name, (_, ram) in XILINX_MEMORIES.items()}
    sources = {"reference.v": verilog.convert(top, name="reference", ports=top.signals()),
               "dut.v": netlist, "tb.v": RAMB_BENCH, **synthesis.cell_models()}
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    # C++ at -O0: the bench runs in a fraction of a second, compiling it is the cost.
    build = subprocess.run(
        [command, "--binary", "--timing", "-O1", "-Wno-fatal", "-Wno-lint", "-Wno-style",
         "-Wno-TIMESCALEMOD", "-MAKEFLAGS", synthesis.make_flags.replace("-O1", "-O0"),
         f"+define+W={len(top.out)}",
         "--top-module", "tb", "tb.v", "reference.v", "dut.v", "cells_sim.v", "-j", "2"],
        cwd=tmp_path, capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    run = subprocess.run([tmp_path / "obj_dir" / "Vtb"], capture_output=True, text=True)
    assert "DONE errors=" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    return run.stdout


def test_ramb_behaviour_gives_amaranths_memory_semantics(tmp_path):
    """The RAMB18E1/RAMB36E1 behaviour (sim/verilator/ramb_sim.vh), in the netlist yosys makes
    of Amaranth memories of every kind its Xilinx mapping has here (true dual port at 4, 9, 18
    and 36 bits, simple dual port at 36 and 72, byte enables, READ_FIRST, WRITE_FIRST and
    NO_CHANGE, two ports writing, transparent read ports or not, random initial contents),
    gives Amaranth's own semantics cycle for cycle. (A version of the behaviour giving a
    READ_FIRST port's collisions complemented failed here with 5 474 errors.)"""
    output = run_ramb_bench(tmp_path)
    assert "DONE errors=0" in output, output[-3000:]


@pytest.mark.slow(reason="a second synthesis and bench build (about 40 s)")
def test_the_ramb_bench_catches_a_broken_netlist(tmp_path):
    """The same bench on a netlist with one block RAM port wrong (``tdp18``'s read port at 9
    bits, a width the behaviour covers) reports errors: the bench compares what the netlist's
    RAMs give, not what the design means."""
    broken = "c:tdp18.0.0"
    output = run_ramb_bench(tmp_path, after=f"select -assert-count 1 {broken} t:RAMB18E1 %i\n"
                                            f"setparam -set READ_WIDTH_B 9 {broken}\n")
    assert "DONE errors=0" not in output, output[-3000:]
