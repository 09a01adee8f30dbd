"""``maxaccel soak``: random operations through a faulty link, every result checked.

Short soaks on the compiled board (the suite's default core): each path injects faults both
ways and ends with nothing wrong and nothing hung, its figures adding up; ``--jobs`` runs
soaks side by side and adds their figures; a result the device got wrong is counted as such
and fails the run; bad options are refused before anything runs.
"""

import json
import signal
import subprocess
import sys

import numpy as np
import pytest

from maxaccel.host import soak as soak_module
from maxaccel.host.cli import main
from maxaccel.sim import reference


def run_soak(tmp_path, *options):
    """``maxaccel soak OPTIONS --json FILE``: (exit status, printed text, the JSON figures)."""
    figures = tmp_path / "soak.json"
    lines = []

    class Out:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass
    status = main(["soak", *options, "--json", str(figures)], out=Out())
    return status, "".join(lines), json.loads(figures.read_text())


def check_consistent(figures, faults):
    """The figures a clean soak must show: at least ``faults`` faults, counted by kind and
    direction, every operation accounted for, nothing wrong or hung."""
    assert figures["wrong results"] == 0 and figures["hangs"] == 0
    assert figures["faults injected"] >= faults
    by_kind = sum(figures["faults by direction and kind"].values())
    assert by_kind + sum(figures["fault switches set"].values()) == figures["faults injected"]
    assert figures["requests"] >= figures["operations"] > 0 and figures["retries"] > 0
    done, of = figures["operations that succeeded"].split(" (")[0].split(" of ")
    assert int(of) == figures["operations"]
    assert int(done) == figures["operations"] - figures["operations given up"]


@pytest.mark.parametrize("path", ["direct", "xdma"])
def test_a_short_soak_on_each_in_process_path_is_clean(path, tmp_path, compiled_device):
    status, text, figures = run_soak(tmp_path, "--path", path, "--faults", "60",
                                     "--timeout", "0.2", "--switch-every", "5")
    assert status == 0, text
    check_consistent(figures, 60)
    assert figures["path"] == path and "wrong results" in text
    if path == "xdma":
        assert sum(figures["fault switches set"].values()) > 0


def test_the_serve_path_and_jobs_add_their_figures(tmp_path, compiled_device):
    """Two soaks through ``maxaccel serve`` over a pty, side by side: their faults and
    operations add up, each client killed mid-frame and reconnected."""
    status, text, figures = run_soak(tmp_path, "--path", "serve", "--faults", "40",
                                     "--jobs", "2", "--kill-every", "4", "--timeout", "0.2")
    assert status == 0, text
    check_consistent(figures, 40)
    assert figures["jobs"] == 2
    assert figures["clients killed mid-frame"] >= 2
    assert len(figures["command"].split("--jobs 2")) == 2


def test_a_wrong_result_is_counted_and_fails_the_soak(tmp_path, compiled_device, monkeypatch):
    """A device answer that differs from the golden model's in one bit is counted as wrong
    and the soak exits 1."""
    real = soak_module.random_operation

    def one_bit_off(rng, size):
        name, call = real(rng, size)

        def wrong(device):
            result = call(device)
            if device is reference:
                return result
            first = result[0] if isinstance(result, tuple) else result
            flat = first.reshape(-1).view(np.uint8)
            if flat.size:
                flat[0] ^= 1
            return result
        return name, wrong
    monkeypatch.setattr(soak_module, "random_operation", one_bit_off)
    status, _, figures = run_soak(tmp_path, "--path", "direct", "--faults", "5",
                                  "--fault-rate", "0.001")
    assert status == 1
    assert figures["wrong results"] > 0


def test_a_served_board_that_does_not_stop_is_killed_counted_and_fails_the_soak(
        tmp_path, compiled_device, monkeypatch):
    """No time to stop after SIGTERM: the soak kills the served board, keeps its figures,
    counts the board and exits 1."""
    monkeypatch.setattr(soak_module, "SERVER_STOP_S", 0)
    status, _, figures = run_soak(tmp_path, "--path", "serve", "--faults", "10",
                                  "--timeout", "0.2")
    assert status == 1
    assert figures["served boards that did not stop on SIGTERM"] == 1
    check_consistent(figures, 10)


@pytest.mark.parametrize("options, message", [
    (["--jobs", "0"], "--jobs must be at least 1, not 0"),
    (["--path", "xdma", "--device", "serial:///dev/null"], "--path xdma puts the injector"),
    (["--path", "direct", "--device", "xdma:///dev/xdma0"], "a virtual board in this process"),
])
def test_bad_options_are_refused_before_anything_runs(options, message, capsys):
    assert main(["soak", *options]) == 2
    assert message in capsys.readouterr().err


def test_sigterm_stops_a_background_soak_with_its_figures(tmp_path, compiled_device):
    """A soak started as a shell starts a background job (SIGINT ignored, a session of its
    own) and stopped with SIGTERM: it and its jobs stop, and the figures so far are printed
    and written, exit status 0."""
    figures = tmp_path / "soak.json"
    soak = subprocess.Popen(
        [sys.executable, "-m", "maxaccel", "soak", "--path", "direct", "--faults", "10000000",
         "--jobs", "2", "--json", str(figures)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    started = 0
    while started < 3:      # the soak and its two jobs have their handlers
        line = soak.stderr.readline()
        assert line, "the soak ended before its jobs started"
        started += line.startswith(b"soak: ")
    soak.send_signal(signal.SIGTERM)
    out, err = soak.communicate(timeout=120)
    assert soak.returncode == 0, err
    assert err.count(b"interrupted: the figures so far") == 3
    written = json.loads(figures.read_text())
    assert written["jobs"] == 2 and written["wrong results"] == 0
    assert b"operations" in out
