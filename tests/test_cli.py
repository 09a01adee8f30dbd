"""The ``maxaccel`` command, run in-process against the fake board (``fake://``, test only)."""

import io
import json
import pathlib

import numpy as np
import pytest
from fake_board import FakeBoard

from maxaccel.host import cli
from maxaccel.host.offload import OffloadSession
from maxaccel.host.transport import register_scheme
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits

EXAMPLE = pathlib.Path(__file__).parents[1] / "examples" / "max_family.onnx"

register_scheme("fake", lambda url: FakeBoard())


def run(*argv):
    out = io.StringIO()
    status = cli.main(list(argv), out=out)
    return status, out.getvalue()


def test_run_generates_inputs_and_checks_against_the_golden_model(tmp_path, capsys):
    target = tmp_path / "out.npz"
    status, text = run("run", str(EXAMPLE), "--device", "fake://", "--seed", "7",
                       "--output", str(target))
    assert status == 0, capsys.readouterr().err
    assert "generated inputs with seed 7 (repeat with --seed 7)" in text
    assert "x: float32 [2, 3, 4, 5]" in text
    assert "maxed: float32 [2, 3, 4, 5]" in text and "total: float32 [2, 3, 1, 5]" in text
    for line in ["max_broadcast  Max            device         ",
                 "relu           Relu           onnxruntime    partition 0: ",
                 "reduce_rows    ReduceMax      device         ",
                 "global_pool    GlobalMaxPool  device         ",
                 "add            Add            onnxruntime    partition 1: "]:
        assert line in text
    assert "outputs match the golden model bit for bit" in text
    # The saved outputs are the golden model's for the same seed.
    again = run("run", str(EXAMPLE), "--device", "fake://", "--seed", "7")[1]
    assert again.splitlines()[:4] == text.splitlines()[:4]
    saved = np.load(target)
    assert sorted(saved.files) == ["maxed", "pooled", "total"]
    rng = np.random.default_rng(7)
    from maxaccel.contract.dtypes import format_of
    from maxaccel.sim.values import random_values
    session = OffloadSession(EXAMPLE, device=reference)
    feeds = {s.name: random_values(rng, format_of(s.dtype), s.shape)
             for s in session.get_inputs()}
    for name, value in zip(["maxed", "pooled", "total"], session.run(None, feeds)):
        assert_same_bits(saved[name], value, name)


def test_run_with_inputs_from_files(tmp_path):
    rng = np.random.default_rng(1)
    files = {}
    for name, shape in [("x", (2, 3, 4, 5)), ("bias", (3, 1, 5)), ("floor", (5,))]:
        files[name] = tmp_path / f"{name}.npy"
        np.save(files[name], rng.standard_normal(shape).astype(np.float32))
    status, text = run("run", str(EXAMPLE), "--device", "fake://",
                       *[f"--input={n}={p}" for n, p in files.items()])
    assert status == 0
    assert "generated" not in text and "bit for bit" in text


@pytest.mark.parametrize("argv, message", [
    (["run", "missing.onnx", "--device", "fake://"], "no ONNX model at 'missing.onnx'"),
    (["run", str(EXAMPLE), "--device", "nowhere://x"],
     "unknown device URL 'nowhere://x'; accepted: sim, serial://PORT"),
    (["run", str(EXAMPLE), "--device", "fake://", "--input", "x"], "--input takes NAME=FILE"),
    (["run", str(EXAMPLE), "--device", "fake://", "--input", "x=/nonexistent.npy"],
     "cannot load input 'x'"),
    (["serve", "--device", "nowhere://x"], "unknown device URL 'nowhere://x'"),
])
def test_errors_are_one_clear_line(capsys, argv, message):
    status, _ = run(*argv)
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_wrong_input_shape_is_reported(tmp_path, capsys):
    bad = tmp_path / "x.npy"
    np.save(bad, np.zeros((2, 3), np.float32))
    status, _ = run("run", str(EXAMPLE), "--device", "fake://", "--input", f"x={bad}")
    assert status == 2
    assert "input 'x' must have rank 4" in capsys.readouterr().err


def test_bench_reports_throughput_overhead_efficiency_and_the_cpu(tmp_path):
    plot, figures = tmp_path / "bench.png", tmp_path / "bench.json"
    status, text = run("bench", "--device", "fake://", "--elements", "1024", "4096",
                       "--plot", str(plot), "--json", str(figures))
    assert status == 0
    report = json.loads(figures.read_text())
    places = {(m["where"], m["operation"], m["elements"]) for m in report["measurements"]}
    for where in ("fake://", "cpu:numpy", "cpu:onnxruntime"):
        for operation in ("reduce_max", "max same shape"):
            for elements in (1024, 4096):
                assert (where, operation, elements) in places
    device = [m for m in report["measurements"] if m["where"] == "fake://"]
    assert all(m["link_efficiency"] >= 0.95 for m in device if m["elements"] == 4096)
    assert all(m["host_mb_per_s"] > 0 and m["host_s"] <= m["seconds"] for m in device)
    assert "| fake:// | reduce_max | 4096 |" in text
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_bench_names_a_device_it_cannot_measure():
    status, text = run("bench", "--device", "serial:///dev/does-not-exist", "--no-cpu",
                       "--elements", "16")
    assert status == 1
    assert "serial:///dev/does-not-exist: not measured: cannot open serial port" in text


def test_progress_bar_appears_only_after_the_delay_and_is_throttled():
    clock = iter([0.0, 0.5, 1.5, 1.55, 1.7, 2.0]).__next__
    stream = io.StringIO()
    bar = cli.ProgressBar(stream, delay_s=1.0, width=10, clock=clock, interval_s=0.1)
    bar(10, 100)
    bar(20, 100)
    assert stream.getvalue() == ""
    bar(50, 100)
    assert stream.getvalue() == "\r[#####.....]  50% 0.1 kB of 0.1 kB, 0.0 kB/s"
    bar(60, 100)  # 50 ms later: not redrawn
    assert stream.getvalue().count("\r") == 1
    bar(70, 100)
    assert stream.getvalue().count("\r") == 2
    bar(100, 100)
    assert stream.getvalue().endswith("100% 0.1 kB of 0.1 kB, 0.1 kB/s\n")


def test_the_main_job_command_runs_on_the_virtual_board(capsys):
    """``maxaccel run examples/max_family.onnx``: default device, the simulated gateware."""
    status, text = run("run", str(EXAMPLE), "--seed", "1")
    assert status == 0, capsys.readouterr().err
    assert f"ran {EXAMPLE} on sim" in text
    assert "outputs match the golden model bit for bit" in text


def test_boards_lists_every_target_with_device_link_lanes_and_clock():
    from maxaccel.boards.targets import TARGETS
    status, text = run("boards")
    assert status == 0
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["board", "device", "link", "lanes", "clock"]
    for target in TARGETS.values():
        (line,) = [l for l in lines if l.startswith(target.name + " ")]
        assert target.device in line and f"{target.clock_mhz:g} MHz" in line
        assert ("UART" if target.link == "uart" else "XDMA") in line
