"""The netlist boards: each Lattice board's Core as yosys synthesises it, simulated gate by gate
with yosys's cell models under Verilator, gives the golden model's bits through the host driver.

The iCE40 board (the HX8K breakout's design, which is the iCEBreaker's too) runs here on every
CI run: a cold build is yosys and Verilator, about two minutes on two cores, cached after. The
ULX3S (ECP5) design is five times the cells and builds for many minutes: it is marked slow and
runs only with ``MAXACCEL_SLOW=1``. It cannot pass yet: yosys ships no simulation model of the
ECP5 ``DP16KD`` block RAM (only a blackbox), so the board refuses the netlist, naming the cell
(``docs/semantics.md`` section 5), until such a model is supplied.
"""

import os

import numpy as np
import pytest
from test_host_device import ALL, REDUCTIONS, check_edge_digest
from test_offload import CASES, check_node_case

from maxaccel.boards.targets import target
from maxaccel.host.device import Device, open_device
from maxaccel.host.transport import SimTransport
from maxaccel.sim import reference
from maxaccel.sim.netlist import Synthesis, netlist_targets
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import random_values

ICE40 = "ice40_hx8k_breakout"


@pytest.fixture(scope="module")
def ice40():
    with open_device(f"netlist:{ICE40}") as device:
        yield device


def check_node_cases(device):
    """Every ONNX backend node case of Max, ReduceMax and GlobalMaxPool, bit for bit against
    its shipped output and the golden model."""
    for name in sorted(CASES):
        check_node_case(device, name)


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


def test_the_netlist_is_the_bitstreams_core(ice40):
    """The HX8K's design: one lane, the run reducer only (no replay buffer, no pooling
    channels), 12 MHz, a byte per cycle as behind its UART."""
    assert ice40.link.transport.board.link_bytes == 1
    identity = ice40.identity
    assert (identity.lanes, identity.replay_depth, identity.pool_channels,
            identity.clock_hz) == (target(ICE40).lanes, 0, 0, 12_000_000)


def test_onnx_node_cases_on_the_ice40_netlist(ice40):
    check_node_cases(ice40)


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


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("MAXACCEL_SLOW"),
                    reason="a second netlist build (2-3 min of CPU): MAXACCEL_SLOW=1 runs it")
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
    with pytest.raises(ValueError, match=r"no netlist board for arty_a7_35 .*netlist boards: "
                                         r"icebreaker, ice40_hx8k_breakout, ulx3s"):
        open_device("netlist:arty_a7_35")
    with pytest.raises(ValueError, match="unknown board 'nosuch'"):
        SimTransport("netlist", board="nosuch")
    assert netlist_targets() == ["icebreaker", "ice40_hx8k_breakout", "ulx3s"]


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("MAXACCEL_SLOW"),
                    reason="the ULX3S netlist builds for many minutes: MAXACCEL_SLOW=1 runs it")
def test_node_cases_and_edge_corpus_sample_on_the_ulx3s_netlist():
    with open_device("netlist:ulx3s") as device:
        assert device.identity.lanes == 2 and device.identity.replay_depth == 256
        check_node_cases(device)
        check_edge_digest(device)
        check_reductions(device)


def test_a_cell_without_a_simulation_model_is_refused():
    """yosys's ECP5 models declare DP16KD as a blackbox: a netlist using it would read 0 from
    its block RAMs, so the board refuses it, naming the cell; LUTs and flip-flops pass."""
    from maxaccel.sim.verilator import VerilatorUnavailable
    with pytest.raises(VerilatorUnavailable, match=r"ecp5 netlist uses DP16KD, for which yosys "
                                                   r"ships no simulation model"):
        Synthesis("ecp5").check_models("module top;\n  DP16KD #(\n  ) ram (\n  );\nendmodule\n")
    Synthesis("ecp5").check_models("module top;\n  LUT4 #(\n  ) lut (\n  );\nendmodule\n")
