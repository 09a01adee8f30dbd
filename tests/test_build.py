"""``maxaccel build`` and ``maxaccel program``: argument checks, the toolchain environment, the
PLL, and real bitstreams from the YoWASP toolchain (marked synth)."""

import json
import os
import stat

import numpy as np
import pytest
from amaranth.hdl import Fragment

from maxaccel.boards import build
from maxaccel.boards.targets import TARGETS
from maxaccel.host import cli


def run(*argv, capsys):
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("argv, message", [
    (["build", "nosuch"], "unknown board 'nosuch'; known boards: icebreaker, ice40_hx8k"),
    (["build", "ulx3s", "--lanes", "3"], "--lanes must be a power of two"),
    (["build", "icebreaker", "--clock", "24"],
     "icebreaker runs from its 12 MHz oscillator (no PLL on this target"),
    (["build", "ulx3s", "--clock", "40"], "cannot make 3000000 baud within 1%"),
    (["program", "icebreaker", "--out", "/nonexistent"],
     "no bitstream at /nonexistent/maxaccel.bin: run 'maxaccel build icebreaker --out"),
    (["program", "arty_a7_35"], "programmed from Vivado's hardware manager"),
    (["build", "nitefury", "--clock", "250"], "runs from the XDMA IP's 125 MHz AXI clock"),
    (["build", "nitefury", "--lanes", "2"],
     "nitefury: the core takes a 32-byte link word per cycle, which needs --lanes 4 or more"),
    (["build", "arty_a7_35", "--clock", "50"], "runs from its 100 MHz oscillator"),
    (["build", "nitefury", "--seed", "3"], "--seed is nextpnr's: nitefury is built by Vivado"),
])
def test_impossible_builds_are_refused_with_a_reason(capsys, argv, message):
    status, _, err = run(*argv, capsys=capsys)
    assert status == 2
    assert message in err and err.count("\n") == 1


def test_toolchain_environment_points_at_the_yowasp_tools():
    environment = build.toolchain_environment()
    for variable in ("YOSYS", "NEXTPNR_ICE40", "ICEPACK", "NEXTPNR_ECP5", "ECPPACK"):
        assert os.path.basename(environment[variable]).startswith("yowasp-")
        assert os.access(environment[variable], os.X_OK)


def test_a_target_s_nextpnr_options_reach_nextpnr(tmp_path, monkeypatch):
    """A target's ``nextpnr_options`` follow ``--timing-allow-fail`` on nextpnr's command line,
    and ``seed`` replaces its seed or adds one (stand-in tools record how they were called: the
    iCEBreaker's small design, with and without a seed of its own; the 85F's bitstream build
    checks its own)."""
    import dataclasses
    record = tmp_path / "called"
    tools = {}
    for variable, status in (("YOSYS", 0), ("NEXTPNR_ICE40", 1), ("ICEPACK", 0)):
        fake = tmp_path / variable.lower()
        fake.write_text(f"#!/bin/sh\necho {variable} \"$@\" >> {record}\nexit {status}\n")
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
        tools[variable] = str(fake)
    monkeypatch.setattr(build, "toolchain_environment", lambda: tools)
    plain = TARGETS["icebreaker"]
    seeded = dataclasses.replace(plain, nextpnr_options=("--seed", "7"))
    cases = [(seeded, None, ["--seed", "7"]), (seeded, 5, ["--seed", "5"]),
             (plain, None, []), (plain, 6, ["--seed", "6"])]
    for target, seed, _ in cases:
        monkeypatch.setitem(TARGETS, "icebreaker", target)
        with pytest.raises(build.BuildError, match="the toolchain failed"):
            build.build("icebreaker", seed=seed, out_dir=tmp_path / "out",
                        progress=lambda text: None)
    nextpnr = [line.split() for line in record.read_text().splitlines()
               if line.startswith("NEXTPNR_ICE40")]
    assert len(nextpnr) == len(cases)
    for arguments, (_, _, expected) in zip(nextpnr, cases):
        at = arguments.index("--timing-allow-fail")
        assert arguments[at + 1:at + 1 + len(expected)] == expected
        assert arguments.count("--seed") == len(expected) // 2
    assert TARGETS["ulx3s_85f"].nextpnr_options == ("--seed", "3")


def _fake_lattice_tools(tmp_path, fmax_mhz):
    """Stand-ins for yosys, nextpnr-ice40 and icepack: nextpnr writes a log with a
    utilisation table and an Fmax, so a build runs through to its report."""
    tools = {}
    log = (f"Info: Device utilisation:\nInfo:\t ICESTORM_LC:   100/  5280\n"
           f"Info:\t ICESTORM_RAM:   2/    30\n"
           f"Info: Max frequency for clock 'clk': {fmax_mhz:.2f} MHz (PASS at 12.00 MHz)\n")
    (tmp_path / "nextpnr.log").write_text(log)
    for variable in ("YOSYS", "NEXTPNR_ICE40", "ICEPACK"):
        fake = tmp_path / variable.lower()
        body = "exit 0"
        if variable == "NEXTPNR_ICE40":
            body = ('while [ $# -gt 0 ]; do if [ "$1" = --log ]; then cp '
                    f'{tmp_path / "nextpnr.log"} "$2"; fi; shift; done')
        fake.write_text(f"#!/bin/sh\n{body}\n")
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
        tools[variable] = str(fake)
    return tools


def test_a_build_s_core_parameters_merge_over_the_target_s(tmp_path, monkeypatch):
    """``core`` replaces the target's Core parameters it names and keeps the others; the
    report records the parameters built (stand-in tools: the iCEBreaker with the windowed
    pooling unit, the toolchain not run)."""
    monkeypatch.setattr(build, "toolchain_environment",
                        lambda: _fake_lattice_tools(tmp_path, 20.0))
    core = {"units": ["reduce", "window"], "window_lanes": 1, "window_extent": 3,
            "window_extent_outer": 1, "window_columns": 64, "window_plane": 1}
    report = build.build("icebreaker", core=core, out_dir=tmp_path / "out",
                         progress=lambda text: None)
    target = TARGETS["icebreaker"]
    assert report["core"] == {"clock_hz": 12_000_000, "lanes": 1,
                              **{k: list(v) if isinstance(v, tuple) else v
                                 for k, v in target.core.items()}, **core}
    assert report["units"] == ["reduce", "window"]
    assert report["capacities"]["window_extent"] == 3
    assert report["capacities"]["window_columns"] == 64
    assert json.loads((tmp_path / "out" / "report.json").read_text()) == report
    assert TARGETS["icebreaker"].core["units"] == ("reduce",)    # the target is unchanged


@pytest.mark.parametrize("core, message", [
    ({"window_extnet": 3}, "unknown core parameter 'window_extnet'; a Core has"),
    ({"lanes": 2}, "core parameter 'lanes' is set by lanes, not by core"),
    ({"clock_hz": 6_000_000}, "core parameter 'clock_hz' is set by clock_mhz"),
    ({"units": ("reduce", "windows")}, "units must be one or more of reduce, pool, "),
    ({"units": ("reduce", "window"), "window_extent": 0}, "max_extent must be an integer"),
])
def test_a_core_parameter_core_lacks_or_refuses_is_refused_before_synthesis(
        tmp_path, monkeypatch, core, message):
    def no_toolchain():
        raise AssertionError("the toolchain was reached")
    monkeypatch.setattr(build, "toolchain_environment", no_toolchain)
    with pytest.raises(ValueError, match=message):
        build.build("icebreaker", core=core, out_dir=tmp_path, progress=lambda text: None)


def test_ecp5_pll_parameters_come_from_ecppll():
    parameters, attributes, achieved = build.ecp5_pll(25, 60)
    assert achieved == 60
    # VCO = 25 / CLKI_DIV * CLKFB_DIV * CLKOP_DIV, output = VCO / CLKOP_DIV
    assert 25 / parameters["CLKI_DIV"] * parameters["CLKFB_DIV"] == pytest.approx(60)
    assert 400 <= 60 * parameters["CLKOP_DIV"] <= 800
    assert attributes["FREQUENCY_PIN_CLKI"] == "25"


@pytest.mark.parametrize("board", ["ulx3s", "ulx3s_85f"])
def test_program_runs_the_named_programmer(tmp_path, monkeypatch, capsys, board):
    """No board here: a stand-in programmer records how it was called (openFPGALoader's
    board ``ulx3s`` for every ULX3S: it finds the FPGA by its JTAG ID)."""
    (tmp_path / "maxaccel.bit").write_bytes(b"bitstream")
    record = tmp_path / "called"
    fake = tmp_path / "openFPGALoader"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {record}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("OPENFPGALOADER", str(fake))
    status, out, _ = run("program", board, "--out", str(tmp_path), capsys=capsys)
    assert status == 0, out
    arguments = record.read_text().split()
    assert arguments[:3] == ["-b", "ulx3s", "-m"] and arguments[3].endswith(".bit")


def test_a_missing_programmer_is_named(tmp_path, monkeypatch, capsys):
    (tmp_path / "maxaccel.bin").write_bytes(b"bitstream")
    monkeypatch.setenv("ICEPROG", str(tmp_path / "no-iceprog"))
    status, _, err = run("program", "icebreaker", "--out", str(tmp_path), capsys=capsys)
    assert status == 2
    assert "is not installed (or set ICEPROG to its path)" in err


def test_the_ice40_boards_build_a_reduce_only_core_with_the_shallow_reducer():
    """Both iCE40 boards run at 12 MHz from their oscillator: the same reduce-only core with
    the shallow RunReducer (latency 2), so the HX8K bitstream CI builds is the iCEBreaker's
    design; the faster boards keep the deep one."""
    ice40 = [t for t in TARGETS.values() if t.family == "ice40"]
    assert [t.name for t in ice40] == ["icebreaker", "ice40_hx8k_breakout"]
    assert ice40[0].core == ice40[1].core and ice40[0].lanes == ice40[1].lanes
    for t in ice40:
        top = build.uart_top(t, t.lanes, t.clock_mhz)
        core = top.core
        assert core.units == ("reduce",) and core.identity.replay_depth == 0
        assert (core.datapath["reducer"].pipeline, core.datapath["reducer"].latency) == ("shallow", 2)
        Fragment.get(top, platform=None).prepare()    # the design elaborates (a second)
    assert all(t.core.get("reduce_pipeline", "deep") == "deep"
               for t in TARGETS.values() if t.family != "ice40")


def test_the_icebreaker_core_computes_through_the_host():
    """The iCEBreaker's core, simulated, behind the host: REDUCE-only, bit for bit."""
    from maxaccel.host.device import Device
    from maxaccel.contract.dtypes import format_of
    from maxaccel.host.transport import SimTransport
    from maxaccel.sim import reference
    from maxaccel.sim.values import random_values

    icebreaker = TARGETS["icebreaker"]
    with Device(SimTransport("sim", lanes=icebreaker.lanes, **icebreaker.core)) as device:
        assert (device.identity.replay_depth, device.identity.pool_channels) == (0, 0)
        rng = np.random.default_rng(5)
        arrays = [random_values(rng, format_of(np.float32), s, edge_fraction=0.3)
                  for s in [(2, 3), (3,)]]
        reference.assert_same_bits(device.max(*arrays), reference.max(*arrays))
        x = random_values(rng, format_of(np.float16), (2, 3, 2, 3), edge_fraction=0.3)
        reference.assert_same_bits(device.global_max_pool(x), reference.global_max_pool(x))
        y = random_values(rng, format_of(np.int8), (3, 5))
        reference.assert_same_bits(device.reduce_max(y, axes=[0]),
                                   reference.reduce_max(y, axes=[0]))


@pytest.mark.synth
@pytest.mark.slow(reason="the ULX3S's place and route takes 3-4 minutes of CPU (the iCE40 "
                         "bitstream checks the build flow in CI)")
def test_ulx3s_bitstream_from_the_pip_installed_toolchain(tmp_path, capsys):
    """A real build (about 5 minutes on one core): bitstream, report, timing met at 60 MHz."""
    status, out, err = run("build", "ulx3s", "--out", str(tmp_path), capsys=capsys)
    assert status == 0, err[-2000:]
    assert (tmp_path / "maxaccel.bit").stat().st_size > 100_000
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["clock_mhz"] == 60 and report["fmax_mhz"] >= 60
    assert 0 < report["logic_cells"][0] < report["logic_cells"][1]
    assert report["flip_flops"] > 0 and report["bitstream"] == "maxaccel.bit"
    assert "PLL: 25 MHz -> 60 MHz" in out and "| ulx3s | LFE5U-25F" in out


@pytest.mark.synth
@pytest.mark.slow(reason="the ULX3S's place and route with the windowed pooling unit takes "
                         "about 15 minutes on a loaded machine")
@pytest.mark.parametrize("dtype", [None, "float32"], ids=["every-type", "float32"])
def test_ulx3s_bitstream_of_the_model_core_with_the_pooling_unit(tmp_path, dtype):
    """The 25F built with the core of each of its model reports (docs/boards/models:
    SqueezeNet 1.1 and ResNet-18, the windowed pooling unit of extent 3 in place of the pooling
    and broadcast units; for every element type, and for float32 alone as ``maxaccel build
    --model`` chooses): it fits and meets 60 MHz, with the unit in IDENTIFY."""
    from maxaccel.boards.targets import load_model_reports

    (shipped,) = [r for r in load_model_reports()
                  if r["board"] == "ulx3s" and r["core"].get("dtype") == dtype]
    core = {k: v for k, v in shipped["core"].items() if k not in ("lanes", "clock_hz")}
    report = build.build("ulx3s", core=core, out_dir=tmp_path, progress=lambda text: None)
    assert report["fmax_mhz"] >= 60 and report["bitstream"] == "maxaccel.bit"
    assert report["logic_cells"][0] < report["logic_cells"][1]
    assert report["units"] == ["reduce", "window"]
    assert report["capacities"] == shipped["capacities"]


@pytest.mark.parametrize("board", [name for name, t in TARGETS.items() if t.family == "ecp5"])
def test_each_ulx3s_target_names_its_amaranth_boards_device(board):
    """The device a report and ``maxaccel boards`` name is the one the platform builds for."""
    target = TARGETS[board]
    platform = target.platform()
    assert target.device == f"{platform.device}-{platform.speed}{platform.package}C"


def test_the_ulx3s_85f_is_the_25f_design_with_the_pooling_unit():
    """The 85F variant exists because the 25F cannot hold the windowed pooling unit beside its
    core (docs/boards.md): it is the 25F's design (lanes, UART, capacities) plus the unit, one
    window lane (8 bytes a cycle, far more than 3 Mbaud brings) of kernel extent 13 on the
    inner axes and 3 on a 3-D pool's outermost, at 30 MHz where the 25F runs 60 (the 85F's
    design does not close 60; 3 Mbaud is 10 cycles a bit at 30). IDENTIFY says so on both."""
    import dataclasses

    from maxaccel.boards.build import WINDOW_CAPACITIES
    from maxaccel.hdl.top import UNITS
    small, large = TARGETS["ulx3s"], TARGETS["ulx3s_85f"]
    assert [(t.family, t.link, t.baud, t.lanes) for t in (small, large)] == \
        [("ecp5", "uart", 3_000_000, 2)] * 2
    assert (small.clock_mhz, large.clock_mhz) == (60.0, 30.0)
    tops = [build.uart_top(t, t.lanes, t.clock_mhz) for t in (small, large)]
    for top in tops:
        Fragment.get(top, platform=None).prepare()    # the designs elaborate (seconds)
    assert [top.core.units for top in tops] == [("reduce", "pool", "broadcast"), UNITS]
    identities = [top.identity for top in tops]
    assert [getattr(identities[1], name) for name in WINDOW_CAPACITIES] == [1, 13, 3, 64, 1024]
    assert [getattr(identities[0], name) for name in WINDOW_CAPACITIES] == [0] * 5
    assert (identities[1].clock_hz, identities[1].frame_timeout_cycles) == \
        (30_000_000, 300_000)
    assert dataclasses.replace(identities[1], **dict.fromkeys(WINDOW_CAPACITIES, 0),
                               clock_hz=identities[0].clock_hz,
                               frame_timeout_cycles=identities[0].frame_timeout_cycles) == \
        identities[0]


@pytest.mark.synth
@pytest.mark.slow(reason="the ULX3S 85F's build takes 36 minutes (synthesis 2.5, "
                         "placement 7, routing 26 on a quiet machine)")
def test_ulx3s_85f_bitstream_with_the_pooling_unit(tmp_path, capsys):
    """The 85F with the windowed pooling unit: bitstream, timing met at its 30 MHz (60 is not:
    docs/boards.md, "ULX3S 85F"), room left on the LFE5U-85F, and a report that records the
    unit."""
    status, out, err = run("build", "ulx3s_85f", "--out", str(tmp_path), capsys=capsys)
    assert status == 0, err[-2000:]
    assert (tmp_path / "maxaccel.bit").stat().st_size > 100_000
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["clock_mhz"] == 30 and report["fmax_mhz"] >= 30
    assert report["device"] == "LFE5U-85F-6BG381C" and report["bitstream"] == "maxaccel.bit"
    assert "window" in report["units"]
    assert "--seed 3" in (tmp_path / "build_maxaccel.sh").read_text()
    assert report["nextpnr_options"] == ["--seed", "3"] and report["mult18x18d"][0] > 0
    assert (report["capacities"]["window_lanes"], report["capacities"]["window_extent"],
            report["capacities"]["window_extent_outer"]) == (1, 13, 3)
    used, total = report["logic_cells"]
    assert 0 < used <= 0.75 * total and report["block_rams"][0] < report["block_rams"][1]
    assert "PLL: 25 MHz -> 30 MHz" in out and "| ulx3s_85f | LFE5U-85F" in out


@pytest.mark.synth
@pytest.mark.slow(reason="yosys's resource estimate of the Arty takes minutes of CPU (the plan "
                         "itself is checked in CI by tests/test_vivado_plan.py)")
def test_arty_build_plan_and_resource_estimate(tmp_path, capsys):
    """The Vivado plan amaranth-boards makes for the Arty, checked file by file, and a
    synth_xilinx estimate that fits the XC7A35T (about 75 s)."""
    status, out, err = run("build", "arty_a7_35", "--out", str(tmp_path), capsys=capsys)
    assert status == 0, err[-2000:]
    xdc = (tmp_path / "maxaccel.xdc").read_text()
    assert 'LOC A9 [get_ports "uart_0__rx__io"]' in xdc      # FTDI UART, the board's pins
    assert 'LOC D10 [get_ports "uart_0__tx__io"]' in xdc
    assert "create_clock -name clk100_0__io -period 10.0" in xdc
    tcl = (tmp_path / "maxaccel.tcl").read_text()
    assert "create_project -force -name maxaccel -part xc7a35ticsg324-1L" in tcl
    assert "add_files maxaccel.v" in tcl and "write_bitstream" in tcl
    assert "module maxaccel(" in (tmp_path / "maxaccel.v").read_text()
    assert "vivado" in (tmp_path / "build_maxaccel.sh").read_text().lower()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["fmax_mhz"] is None and report["baud"] == 4_000_000
    assert 0 < report["logic_cells"][0] < report["logic_cells"][1]
    assert 0 < report["flip_flops"] and report["block_rams"][0] < report["block_rams"][1]


@pytest.mark.synth
@pytest.mark.slow(reason="synth_xilinx of the 4-lane, 32-byte NiteFury core takes 8 minutes "
                         "of CPU")
def test_nitefury_xdma_build_plan(tmp_path, capsys):
    """The PCIe plan: the XDMA IP created by the Tcl, instantiated with the core on its
    AXI4-Stream channels, the board's PCIe pins, and an estimate that fits (about 2 min)."""
    status, out, err = run("build", "nitefury", "--out", str(tmp_path), capsys=capsys)
    assert status == 0, err[-2000:]
    tcl = (tmp_path / "maxaccel.tcl").read_text()
    assert "create_project -force -name maxaccel -part xc7a200tfbg484-2" in tcl
    create = tcl.index("create_ip -name xdma -vendor xilinx.com -library ip -module_name xdma_0")
    assert create < tcl.index("synth_design -top maxaccel")
    for setting in ("CONFIG.pl_link_cap_max_link_width {X4}",
                    "CONFIG.pl_link_cap_max_link_speed {5.0_GT/s}",
                    "CONFIG.axi_data_width {128_bit}", "CONFIG.axisten_freq {125}",
                    "CONFIG.xdma_axi_intf_mm {AXI_Stream}"):
        assert setting in tcl
    assert 'read_xdc "xdma_clocks.xdc"' in tcl
    verilog = (tmp_path / "maxaccel.v").read_text()
    assert "IBUFDS_GTE2" in verilog and "xdma_0 xdma (" in verilog
    for port in ("m_axis_h2c_tdata_0", "m_axis_h2c_tkeep_0", "m_axis_h2c_tready_0",
                 "s_axis_c2h_tdata_0", "s_axis_c2h_tlast_0", "s_axis_c2h_tvalid_0",
                 "pci_exp_txp", "pci_exp_rxn", "axi_aclk", "axi_aresetn", "sys_rst_n"):
        assert f".{port}(" in verilog, port
    xdc = (tmp_path / "maxaccel.xdc").read_text()
    assert 'LOC F6 [get_ports "pcie_0__clk__p"]' in xdc and 'LOC J1 [get_ports' in xdc
    assert "create_clock -name pcie_refclk -period 10.000 [get_ports pcie_0__clk__p]" in \
        (tmp_path / "xdma_clocks.xdc").read_text()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["link"] == "xdma" and report["clock_mhz"] == 125
    # A 32-byte link word (two AXI words) per cycle: 2.5 times the PCIe link's rate.
    assert report["core_bytes_per_s"] == 32 * 125e6 >= 2 * report["link_bytes_per_s"]
    assert 0 < report["logic_cells"][0] < report["logic_cells"][1]


@pytest.mark.synth
def test_ice40_bitstream_from_the_pip_installed_toolchain(tmp_path, capsys):
    """The iCE40 build CI makes (HX8K breakout board, the iCEBreaker's reduce-only core with
    the shallow reducer; about a minute)."""
    status, out, err = run("build", "ice40_hx8k_breakout", "--out", str(tmp_path),
                           capsys=capsys)
    assert status == 0, err[-2000:]
    assert (tmp_path / "maxaccel.bin").stat().st_size > 100_000
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["units"] == ["reduce"] and report["capacities"]["replay_depth"] == 0
    assert report["reduce_pipeline"] == "shallow"
    assert report["fmax_mhz"] >= 12 and report["logic_cells"][0] <= report["logic_cells"][1]
    # The iCEBreaker builds this design: it packs into as many logic cells on the UP5K (its
    # Fmax there, 14.2 MHz, is in docs/boards/icebreaker.json).
    assert report["logic_cells"][0] <= 5280
