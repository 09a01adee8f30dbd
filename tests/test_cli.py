"""The ``maxaccel`` command, run in-process against the fake board (``fake://``, test only)."""

import io
import json
import pathlib
import subprocess
import sys

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
    assert sorted(saved.files) == ["maxed", "pooled", "total", "window", "window_indices"]
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


@pytest.mark.parametrize("board, message", [
    ("nosuch", "unknown board 'nosuch'; known boards: icebreaker"),
])
def test_core_link_of_one_board_names_a_board_it_cannot_measure(capsys, board, message):
    """``maxaccel bench --board NAME`` (core/link of one board) refuses an unknown board before
    measuring anything."""
    status, text = run("bench", "--board", board)
    assert status == 2 and message in capsys.readouterr().err
    assert text == ""


def test_core_link_json_goes_with_core_link(capsys, tmp_path):
    status, _ = run("bench", "--core-link-json", str(tmp_path / "core_link.json"))
    assert status == 2
    assert "--core-link-json goes with --core-link (or --board)" in capsys.readouterr().err


def test_bench_transfers_on_the_xdma_double(tmp_path, capsys):
    """--transfers: the modelled XDMA throughput per transfer size, in the table and the JSON;
    refused before anything opens on a device that is no xdma-model."""
    figures = tmp_path / "bench.json"
    status, text = run("bench", "--device", "xdma-model:sim", "--transfers", "256", "512",
                       "--no-cpu", "--json", str(figures))
    assert status == 0
    assert "xdma-model:sim: modelled XDMA throughput against transfer size" in text
    rows = json.loads(figures.read_text())["transfers"]["xdma-model:sim"]
    assert [r["requests"] for r in rows] == [8, 8]
    assert 250 < rows[0]["transfer_bytes"] <= 256 and rows[0]["bytes_per_s"] < 5e6
    assert rows[1]["bytes_per_s"] > 1.5 * rows[0]["bytes_per_s"]      # the fixed cost shared
    status, _ = run("bench", "--device", "sim", "--transfers")
    assert status == 2
    assert "--transfers needs xdma-model:BOARD devices" in capsys.readouterr().err


def test_bench_paces_whole_models_on_the_xdma_double(tmp_path, capsys):
    """--paced: the models' device calls take their modelled NiteFury time (the table names
    the wait); refused before anything opens without --model, off the XDMA double, or with a
    wait the driver has not."""
    figures = tmp_path / "bench.json"
    status, text = run("bench", "--device", "xdma-model:verilator", "--paced", "polling",
                       "--rounds", "1", "--model", "conv", "--no-cpu", "--json", str(figures))
    assert status == 0, text
    assert "| xdma-model:verilator, paced (polling) | 6 (1) |" in text
    (conv,) = json.loads(figures.read_text())["models"]
    assert 0 < conv["device_s"] < 0.01      # a NiteFury's call, not the simulation's seconds
    for argv, message in [
            (["--device", "sim", "--paced", "--model", "conv"],
             "--paced needs xdma-model:BOARD devices (the XDMA driver's double models each "
             "call's time on a NiteFury), not sim"),
            (["--device", "xdma-model:sim", "--paced"], "--paced goes with --model"),
            (["--device", "xdma-model:sim", "--paced", "spin", "--model", "conv"],
             "--paced spin: the wait is one of interrupts, polling"),
            (["--device", "xdma-model:sim", "--rounds", "0", "--model", "conv"],
             "--rounds 0: at least one round"),
            (["--device", "xdma-model:sim", "--rounds", "3"], "--rounds goes with --model")]:
        status, text = run("bench", *argv)
        err = capsys.readouterr().err
        assert status == 2 and text == "" and message in err, err


def test_bench_ratios_need_a_board_that_counts_cycles():
    status, text = run("bench", "--device", "fake://", "--ratios", "64", "--no-cpu")
    assert status == 1
    assert ("fake://: not measured: 'fake://' does not count cycles: ratios need a virtual "
            "board (sim or verilator)") in text


def test_bench_prints_the_ratio_table_of_the_compiled_board(tmp_path):
    """``maxaccel bench --ratios``: every operation of ``RATIO_OPERATIONS`` in every dtype
    against a ReduceMax of its input bytes, each result checked against the golden model (the
    exact cycles at the table's size are asserted in tests/test_verilator_board.py)."""
    from maxaccel.bench.cycles import RATIO_DTYPES, RATIO_OPERATIONS
    from maxaccel.bench.pools import POOL_CLASSES, POOL_DTYPES
    figures = tmp_path / "bench.json"
    status, text = run("bench", "--device", "verilator", "--ratios", "1024", "--no-cpu",
                       "--pool-channels", "2", "--json", str(figures))
    assert status == 0
    assert "verilator: device cycles over a ReduceMax of the same input bytes, 1024 elements " \
           "per operand:" in text
    assert "| operation | " + " | ".join(RATIO_DTYPES) + " |" in text
    ratios = json.loads(figures.read_text())["ratios"]
    assert {(r["operation"], r["dtype"]) for r in ratios} == \
        {(o, d) for o in RATIO_OPERATIONS for d in RATIO_DTYPES}
    assert all(r["ratio"] == r["cycles"] / r["reduce_cycles"] > 0 for r in ratios)
    assert "| verilator | reduce_max |" not in text         # no --elements: no throughput rows
    # The MaxPool table, scaled down to 2 channels (its full-size cycles are asserted in
    # tests/test_pool_classes.py).
    assert "| MaxPool | " + " | ".join(POOL_DTYPES) + " |" in text
    pools = json.loads(figures.read_text())["pool_ratios"]
    assert [(r["operation"], r["dtype"]) for r in pools] == \
        [(p.with_channels(2).name, d) for d in POOL_DTYPES for p in POOL_CLASSES]
    assert all(r["route"] in ("MAX_POOL", "REDUCE") and r["cycles"] > 0 for r in pools)


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


def test_version_and_python_dash_m(tmp_path):
    """``python -m maxaccel`` is the console script; run from elsewhere than the repository."""
    import importlib.metadata
    done = subprocess.run([sys.executable, "-m", "maxaccel", "--version"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"maxaccel {importlib.metadata.version('maxaccel')}"
    done = subprocess.run([sys.executable, "-m", "maxaccel", "boards"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "ulx3s" in done.stdout


@pytest.mark.parametrize("command", ["run", "bench", "serve", "boards", "build", "program"])
def test_help_is_plain_text(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    assert "usage: maxaccel " + command in text
    for markup in ("``", ":class:", ":func:", ":mod:", "\\n\\n"):
        assert markup not in text


def test_verbose_and_quiet_set_the_log_level(capsys):
    """-q hides what is only informative; -v shows it; both before or after the command."""
    import logging

    from maxaccel.contract import progress
    for argv, level in [(["boards"], logging.INFO), (["-q", "boards"], logging.WARNING),
                        (["boards", "-q"], logging.WARNING), (["-v", "boards"], logging.DEBUG),
                        (["boards", "-vv"], logging.DEBUG)]:
        assert run(*argv)[0] == 0
        assert progress.log.getEffectiveLevel() == level, argv
        assert progress.enabled() == (level != logging.WARNING)
    run("boards")   # back to the default for the other tests


def test_verbose_and_quiet_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        cli.main(["-v", "-q", "boards"])
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["run", str(EXAMPLE), "--device", "foo://"], "--device foo://: unknown device URL"),
    (["run", str(EXAMPLE), "--device", "serial:///dev/ttyUSB0?baud=fast"],
     "?baud='fast' must be an integer"),
    (["run", str(EXAMPLE), "--output", "/nonexistent/dir/out.npz"],
     "--output /nonexistent/dir/out.npz: directory '/nonexistent/dir' does not exist"),
    (["run", str(EXAMPLE), "--output", "/"], "--output /: is a directory"),
    (["run", str(EXAMPLE), "--seed", "-1"], "--seed -1: must be a non-negative integer"),
    (["bench", "--device", "sim", "--device", "foo://"], "--device foo://"),
    (["bench", "--elements", "0"], "sizes must be at least 1"),
    (["bench", "--ratios", "0"], "--ratios 0: elements per operand must be at least 1"),
    (["bench", "--ratios", "--pool-channels", "0"], "--pool-channels 0: at least 1 channel"),
    (["bench", "--dtype", "complex64"], "--dtype complex64: unsupported dtype complex64"),
    (["bench", "--json", "/nonexistent/x.json"], "directory '/nonexistent' does not exist"),
    (["bench", "--reports", "/nonexistent"], "--reports /nonexistent: no such directory"),
    (["serve", "--link", "/nonexistent/tty"], "--link /nonexistent/tty: directory"),
    (["build", "nosuchboard"], "unknown board 'nosuchboard'; known boards: icebreaker"),
    (["build", "ulx3s", "--lanes", "3"], "--lanes must be a power of two"),
    (["build", "ulx3s", "--clock", "0"], "--clock 0: must be a positive frequency"),
    (["program", "nosuchboard"], "unknown board 'nosuchboard'"),
])
def test_every_argument_is_checked_before_any_work(capsys, argv, message):
    """Nothing is printed to stdout (no inputs generated, nothing measured): the error comes
    first, as one line."""
    status, text = run(*argv)
    err = capsys.readouterr().err
    assert status == 2 and text == ""
    assert message in err and err.count("\n") == 1, err


def test_bench_plot_without_matplotlib_fails_before_measuring(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)    # import matplotlib fails
    status, text = run("bench", "--device", "fake://", "--plot", str(tmp_path / "x.png"))
    assert status == 2 and text == ""
    assert "--plot needs matplotlib: pip install 'maxaccel[bench]'" in capsys.readouterr().err


def test_bench_finds_the_board_reports_outside_the_repository(monkeypatch, tmp_path):
    from maxaccel.boards.targets import TARGETS, reports_dir
    monkeypatch.chdir(tmp_path)
    status, text = run("bench", "--device", "fake://", "--elements", "64", "--no-cpu")
    assert status == 0
    assert f"boards (build reports in {reports_dir()}):" in text
    for name in TARGETS:
        assert f"| {name} |" in text
    assert "core against link per operation" in text
    assert text.count("| nitefury |") == 2          # the boards table and core/link's


def test_core_link_of_a_board_report():
    """``maxaccel bench --core-link`` (``docs/boards/core_link.json``), for one
    board at a small size: the NiteFury's core takes its requests' bytes at up to 32 a cycle,
    4 GB/s at 125 MHz against the link's 1.6 (at 4096 elements per-request costs weigh: the
    2^18-element figures are in the file)."""
    from maxaccel.boards.targets import load_reports
    from maxaccel.bench.cycles import RATIO_OPERATIONS, format_core_link, measure_core_link
    (report,) = [r for r in load_reports() if r["board"] == "nitefury"]
    peak = report["core_bytes_per_s"] / report["link_bytes_per_s"]
    assert peak == 32 * 125e6 / 1.6e9
    table = measure_core_link(report, 4096, dtypes=("float32",))
    assert list(table) == list(RATIO_OPERATIONS)
    for operation, figures in table.items():
        assert 0.5 < figures["float32"] <= peak, operation
    assert format_core_link({"nitefury": table}).splitlines()[2].startswith("| nitefury | ")


def test_model_pools_of_a_model_core():
    """``maxaccel bench --model-pools`` (``docs/boards/model_pools.json``) of a report of a
    core built for a model, on the virtual board at a tiny size: each MaxPool through the
    windowed unit, against the golden model, its cycles at the board's clock against its bytes
    (both ways) at the link's rate; a byte a cycle each way behind a UART."""
    from onnx import TensorProto, helper

    from maxaccel.bench.cycles import format_model_pools, measure_model_pools
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 7, 7])
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], name="stem", kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["x"], ["z", "i"], name="indexed",
                              kernel_shape=[3, 3])]
    outputs = [helper.make_tensor_value_info(n, t, None)
               for n, t in (("y", TensorProto.FLOAT), ("z", TensorProto.FLOAT),
                            ("i", TensorProto.INT64))]
    model = helper.make_model(helper.make_graph(nodes, "pools", [x], outputs), ir_version=10,
                              opset_imports=[helper.make_opsetid("", 13)])
    report = {"board": "ulx3s", "models": ["pools"], "clock_mhz": 60.0,
              "core_bytes_per_s": 60e6, "link_bytes_per_s": 300e3,
              "core": {"clock_hz": 60_000_000, "lanes": 1, "units": ["reduce", "window"],
                       "window_lanes": 1, "window_extent": 3, "window_extent_outer": 1,
                       "window_columns": 4, "window_plane": 1}}
    rows = measure_model_pools(report, [("pools", model)], virtual_board="sim")
    assert [(r["node"], r["route"], r["shape"], r["kernel"]) for r in rows] == [
        ("stem", "MAX_POOL", [1, 2, 7, 7], [3, 3]), ("indexed", "MAX_POOL", [1, 2, 7, 7], [3, 3])]
    for r in rows:
        assert r["core_s"] == r["cycles"] / 60e6 and r["link_s"] == r["link_bytes"] / 300e3
        # Both ways at a byte a cycle each way: at least half the bytes' cycles.
        assert 2 * r["cycles"] >= r["link_bytes"] > 2 * 7 * 7 * 4
    # The indexed pool's reply carries the indices too.
    assert rows[1]["link_bytes"] > rows[0]["link_bytes"]
    table = format_model_pools({"ulx3s (pools)": rows}).splitlines()
    assert table[2].startswith("| ulx3s (pools) | pools | stem | 1x2x7x7 float32 | 3x3 | "
                               f"MAX_POOL | {rows[0]['cycles']} |")


def test_model_pools_json_goes_with_model_pools(capsys, tmp_path):
    status, _ = run("bench", "--model-pools-json", str(tmp_path / "model_pools.json"))
    assert status == 2
    assert "--model-pools-json goes with --model-pools" in capsys.readouterr().err
    status, _ = run("bench", "--model-pools", "--board", "ulx3s_85f")
    assert status == 2
    assert "--model-pools: no model build report for ulx3s_85f" in capsys.readouterr().err


def test_ctrl_c_is_one_line_and_status_130(monkeypatch, capsys):
    def interrupt(args, out):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_boards", interrupt)
    assert run("boards") == (130, "")
    assert capsys.readouterr().err == "maxaccel boards: interrupted\n"


def _never_opened(url):
    raise AssertionError(f"{url} was opened: a bad argument must be refused before")


register_scheme("unopenable", _never_opened)


def test_the_unopenable_device_would_be_noticed():
    with pytest.raises(AssertionError, match="was opened"):
        run("run", str(EXAMPLE), "--device", "unopenable://")


@pytest.mark.parametrize("content, message", [
    ("npz", "a .npz archive; --input takes one array in a .npy file (numpy.save)"),
    ("text", "not a .npy file (numpy.save writes one)"),
    ("pickle", "not a .npy file (numpy.save writes one)"),
    ("cut", "cannot load input 'x' from"),
    ("name", "--input: unknown input(s) 'nosuch'; the model's inputs: x"),
    ("shape", "--input: input 'x' must have rank 4"),
    ("dtype", "--input: input 'x' must be float32, got float64"),
])
def test_inputs_are_checked_before_any_device_opens(tmp_path, capsys, content, message):
    """A .npz (was an AttributeError traceback), a file numpy cannot read (was its
    'pickled data' message), a wrong name, shape or dtype (were said after the device had
    opened): one line, status 2, nothing generated, no device opened."""
    import pickle
    path = tmp_path / "x.npy"
    name = "x"
    if content == "npz":
        path = tmp_path / "x.npz"
        np.savez(path, x=np.zeros((2, 3, 4, 5), np.float32))
    elif content == "text":
        path.write_text("1 2 3\n")
    elif content == "pickle":
        path.write_bytes(pickle.dumps([1, 2, 3]))
    elif content == "cut":
        np.save(path, np.zeros((2, 3, 4, 5), np.float32))
        path.write_bytes(path.read_bytes()[:100])
    else:
        np.save(path, np.zeros((2, 3, 4, 5) if content != "shape" else (2, 3),
                               np.float64 if content == "dtype" else np.float32))
        name = "nosuch" if content == "name" else "x"
    status, text = run("run", str(EXAMPLE), "--device", "unopenable://",
                       "--input", f"{name}={path}")
    err = capsys.readouterr().err
    assert status == 2 and text == "", text
    assert message in err and err.count("\n") == 1, err


def test_a_big_endian_input_file_runs(tmp_path):
    """numpy.save keeps a big-endian array so; the model gets its values."""
    path = tmp_path / "x.npy"
    np.save(path, np.arange(120, dtype=">f4").reshape(2, 3, 4, 5))
    status, text = run("run", str(EXAMPLE), "--device", "fake://", "--input", f"x={path}",
                       "--seed", "1")
    assert status == 0 and "outputs match the golden model bit for bit" in text


@pytest.mark.parametrize("argv, message", [
    (["--model", "{truncated}"], "--model {truncated}: not a valid ONNX model: cannot parse"),
    (["--model", "{missing}"], "--model {missing}: no ONNX model at"),
    (["--dtype", "bool"], "--dtype bool: max() (ONNX Max) does not accept bool"),
])
def test_bench_checks_models_and_dtypes_before_any_device_opens(tmp_path, capsys, argv,
                                                                 message):
    """A truncated model was a protobuf traceback after the device had opened;
    bool measured ReduceMax before Max refused it."""
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(EXAMPLE.read_bytes()[:200])
    names = {"truncated": truncated, "missing": tmp_path / "missing.onnx"}
    argv = [a.format(**names) for a in argv]
    status, text = run("bench", "--device", "unopenable://", *argv)
    err = capsys.readouterr().err
    assert status == 2 and text == "", text
    assert message.format(**names) in err and err.count("\n") == 1, err


def test_verbose_says_what_happened_on_a_healthy_run(capsys):
    """-v added nothing on a run that went well; it names the device opened."""
    status, _ = run("-v", "run", str(EXAMPLE), "--device", "fake://", "--seed", "1")
    err = capsys.readouterr().err
    assert status == 0
    assert "maxaccel: opened fake:// in " in err
    assert "maxaccel: fake://: <Device fake:// protocol v" in err
    status, _ = run("run", str(EXAMPLE), "--device", "fake://", "--seed", "1")
    assert status == 0 and "opened" not in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"]])
def test_help_names_every_operator_offloaded(argv, capsys):
    """``maxaccel --help`` left out MaxPool, which the session places on the
    device (``OFFLOADED``)."""
    from maxaccel.host.partition import OFFLOADED
    with pytest.raises(SystemExit):
        cli.main(argv)
    text = " ".join(capsys.readouterr().out.split())
    for operator in OFFLOADED:
        assert operator in text, operator
