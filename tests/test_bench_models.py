"""``maxaccel bench --model``: whole models through OffloadSession against onnxruntime."""

import io
import json
import pathlib

import pytest

from fake_board import FakeBoard

from maxaccel import bench
from maxaccel.host import cli
from maxaccel.host.device import Device
from maxaccel.host.transport import register_scheme

SQUEEZENET = pathlib.Path(__file__).parents[1] / "examples" / "squeezenet1_1.onnx"

register_scheme("fake", lambda url: FakeBoard())


def test_bench_times_whole_models_outside_the_device_calls(tmp_path):
    figures = tmp_path / "bench.json"
    out = io.StringIO()
    status = cli.main(["bench", "--device", "fake://", "--no-cpu", "--rounds", "1",
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


def test_every_device_operation_is_timed_as_the_devices():
    """The operations the bench times as the device's are Device's public operations (Min,
    ReduceMin, ArgMax and ArgMin included), and cover every call an OffloadSession makes."""
    from maxaccel.host.offload.steps import DEVICE_CALLS
    assert set(bench.DEVICE_METHODS) == {"max", "min", "reduce_max", "reduce_min", "arg_max",
                                         "arg_min", "global_max_pool", "max_pool"}
    assert set(DEVICE_CALLS.values()) | {"max_pool"} <= set(bench.DEVICE_METHODS)
    import numpy as np
    with Device(FakeBoard()) as dev:
        timed = bench._TimedDevice(dev)
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        for name in ("min", "reduce_min", "arg_max", "arg_min"):
            getattr(timed, name)(x)
        assert timed.calls == 4 and timed.seconds > 0
        assert timed.close == dev.close     # anything else is the device's own


class _Spinners:
    """A process whose other threads use ``busy`` of a core for each of the first ``windows``
    sleeps of the caller (a thread pool spinning after a run), then nothing: its CPU clock, its
    sleep and its wall clock for :func:`bench._quiet`."""

    def __init__(self, windows, busy=1.0):
        self.windows, self.busy, self.cpu_s, self.now_s, self.sleeps = windows, busy, 0.0, 0.0, 0

    def cpu(self):
        return self.cpu_s

    def sleep(self, seconds):
        self.now_s += seconds
        if self.sleeps < self.windows:
            self.cpu_s += self.busy * seconds
        self.sleeps += 1

    def clock(self):
        return self.now_s


def quiet(process, **kwargs):
    return bench._quiet(cpu=process.cpu, sleep=process.sleep, clock=process.clock, **kwargs)


def test_a_timed_block_waits_until_the_other_sessions_pool_stops_spinning():
    spinning = _Spinners(windows=8)     # 40 ms of 5 ms windows
    assert quiet(spinning) == pytest.approx(0.045)
    assert spinning.sleeps == 9
    assert quiet(_Spinners(windows=0)) == pytest.approx(0.005)
    assert quiet(_Spinners(windows=100, busy=0.1)) == pytest.approx(0.005)  # under a fifth


def test_a_pool_that_never_stops_spinning_is_waited_for_a_bounded_time():
    assert quiet(_Spinners(windows=10**9), limit_s=0.5) == pytest.approx(0.5)


def test_the_session_and_onnxruntime_are_timed_in_rounds_of_blocks_taking_turns(monkeypatch):
    """Rounds of blocks of runs, each block after the other's threads are still, the two
    taking turns to go first; each figure the median of its blocks' medians, the device's time
    counted for the session only, the spread that of all the session's runs."""
    events = []
    monkeypatch.setattr(bench, "_quiet", lambda: events.append("quiet"))

    class Model:
        """A model whose runs take the seconds given, ``device_s`` of them in device calls."""

        def __init__(self, name, device_s, seconds):
            self.name, self.device_s, self.seconds = name, device_s, iter(seconds)

        def run(self, outputs, feeds):
            events.append(self.name)
            self.last = next(self.seconds), self.device_s

    class Timed:
        """What ``_time_pair`` reads of a timed device: a run's ``(seconds, device seconds)``."""

        def time_run(self, model, feeds):
            model.run(None, feeds)
            return model.last

    # blocks of 3 timed runs, a warm-up run (9 s) before each
    session = Model("session", 0.001, [9, .01, .01, .03, 9, .04, .04, .04, 9, .02, .02, .02])
    runtime = Model("onnxruntime", 0.0, [9, .005, .005, .005, 9, .002, .002, .002,
                                         9, .003, .001, .003])
    total, device, outside, alone, spread = bench._time_pair(
        Timed(), session, runtime, {}, repeats=3, warmup=1, rounds=3)
    assert events == (["quiet"] + ["session"] * 4 + ["quiet"] + ["onnxruntime"] * 4
                      + ["quiet"] + ["onnxruntime"] * 4 + ["quiet"] + ["session"] * 4
                      + ["quiet"] + ["session"] * 4 + ["quiet"] + ["onnxruntime"] * 4)
    assert total == 0.02            # of the blocks' medians 0.01, 0.04, 0.02: not the mean
    assert device == 0.001 and outside == pytest.approx(0.019)
    assert alone == 0.003           # the warm-up runs (9 s) are in no figure
    assert spread == pytest.approx(0.02)     # all nine runs: quartiles 0.02 and 0.04


