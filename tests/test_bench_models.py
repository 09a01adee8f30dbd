"""``maxaccel bench --model``: whole models through OffloadSession against onnxruntime."""

import io
import json
import pathlib

from fake_board import FakeBoard

from maxaccel.host import bench, cli
from maxaccel.host.device import Device
from maxaccel.host.transport import register_scheme

SQUEEZENET = pathlib.Path(__file__).parents[1] / "examples" / "squeezenet1_1.onnx"

register_scheme("fake", lambda url: FakeBoard())


def test_bench_times_whole_models_outside_the_device_calls(tmp_path):
    figures = tmp_path / "bench.json"
    out = io.StringIO()
    status = cli.main(["bench", "--device", "fake://", "--no-cpu",
                       "--model", "conv", "--model", str(SQUEEZENET), "--json", str(figures)],
                      out=out)
    assert status == 0
    text = out.getvalue()
    assert "| two Convs, ReduceMax, Gemm (1x3x192x192) | fake:// | 6 (1) |" in text
    assert "| squeezenet1_1.onnx | fake:// | 83 (3) |" in text
    models = json.loads(figures.read_text())["models"]
    assert [m["model"] for m in models] == ["two Convs, ReduceMax, Gemm (1x3x192x192)",
                                            "squeezenet1_1.onnx"]
    conv, squeezenet = models
    assert 0 < conv["device_s"] < conv["session_s"]
    assert 0 < conv["outside_s"] < conv["session_s"]
    assert 0 < squeezenet["device_s"] < squeezenet["session_s"] and squeezenet["onnxruntime_s"] > 0


def test_the_timed_device_counts_only_operator_calls():
    model, feeds = bench.conv_model(size=16)
    with Device(FakeBoard()) as dev:
        measurement = bench.measure_model(dev, "small", model, feeds, repeats=2, warmup=1)
    assert measurement.device_nodes == 1 and measurement.nodes == 6
    assert measurement.session_s > measurement.device_s > 0
    assert measurement.ratio > 0
