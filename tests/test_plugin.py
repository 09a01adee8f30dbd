"""The pytest plugin as a user's project outside the repository sees it (pytester): the fixtures,
the option and its ini key, the board marker (on a board behind a serial port too),
``-p no:maxaccel`` and ``--strict-markers``, pytest-xdist workers, a board's traffic recorded
and replayed, and what loading the plugin costs a suite that does not use it."""

import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from fake_board import FakeBoard
from maxaccel.sim.faults import TO_HOST, Fault, Faulty

import maxaccel.testing.plugin
from maxaccel.host.transport import register_scheme
from maxaccel.sim.serve import PtyServer

pytest_plugins = ["pytester"]

#: Options of the runs in new processes: no cache, and no hypothesis plugin (its import is most
#: of a process's start here, and the runs do not use it).
LIGHT = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")

#: The boards ``recorded://`` opened, in order: the test sees what the user's run opened.
OPENED = []


def _recorded(url):
    board = FakeBoard()
    board.url = url
    OPENED.append(board)
    return board


register_scheme("recorded", _recorded)

USERS_TESTS = """
    import numpy as np
    import pytest

    from maxaccel.sim import reference
    from maxaccel.testing import assert_bits_equal

    SEEN = []


    def test_the_device_computes(maxaccel_device):
        a, b = np.float32([1.0, 0.0, np.nan]), np.float32([-2.0, -0.0, 3.0])
        assert_bits_equal(maxaccel_device.max(a, b), reference.max(a, b))
        SEEN.append(maxaccel_device)


    def test_one_device_a_session(maxaccel_device):
        assert SEEN == [maxaccel_device]
        print("URL", maxaccel_device.url)


    def test_the_factory_opens_more(maxaccel_device_factory, maxaccel_device):
        first = maxaccel_device_factory("recorded://first")
        second = maxaccel_device_factory("recorded://second", attempts=2)
        assert first is not second and maxaccel_device not in (first, second)
        x = np.int8([[3, -1], [7, 2]])
        assert_bits_equal(first.reduce_max(x, axes=[1]), np.int8([[3], [7]]))


    @pytest.mark.maxaccel_board
    def test_on_a_board():
        pass
"""


def _users_project(pytester, ini=None):
    """A project of the user's, outside the repository, with :data:`USERS_TESTS`."""
    OPENED.clear()
    if ini is not None:
        pytester.makepyprojecttoml(f"[tool.pytest.ini_options]\n{ini}\n")
    pytester.makepyfile(test_users=textwrap.dedent(USERS_TESTS))


def _closed_boards():
    return [(board.url, board.closed) for board in OPENED]


def test_the_fixtures_on_the_option_s_device_and_the_factory_s(pytester):
    _users_project(pytester)
    result = pytester.runpytest("--maxaccel-device", "recorded://session", "-rs", "-s")
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines(["*URL recorded://session*"])
    # One session device, opened once and closed at the end; the factory's closed after
    # their test, last first.
    assert _closed_boards() == [("recorded://session", True), ("recorded://first", True),
                                ("recorded://second", True)]


def test_the_ini_key_names_the_device_and_the_option_overrides_it(pytester):
    _users_project(pytester, ini='maxaccel_device = "recorded://from-ini"')
    result = pytester.runpytest("-s")
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines(["*URL recorded://from-ini*"])
    result = pytester.runpytest("-s", "--maxaccel-device=recorded://from-option")
    result.stdout.fnmatch_lines(["*URL recorded://from-option*"])


def test_board_tests_are_skipped_with_the_reason_unless_the_device_is_a_board(pytester):
    _users_project(pytester)
    result = pytester.runpytest("-k", "board", "-rs", "--strict-markers")
    result.assert_outcomes(skipped=1, deselected=3)
    result.stdout.fnmatch_lines([
        "SKIPPED * needs a physical board (serial:// or xdma://); the device is sim "
        "(--maxaccel-device URL or the ini key maxaccel_device)"])
    for url in ("serial:///dev/ttyUSB1?board=ulx3s", "xdma:///dev/xdma0"):
        result = pytester.runpytest("-k", "board", "--maxaccel-device", url, "--strict-markers")
        result.assert_outcomes(passed=1, deselected=3)
    result = pytester.runpytest("-k", "board", "--maxaccel-device", "xdma-model:sim")
    result.assert_outcomes(skipped=1, deselected=3)


def test_a_board_test_runs_on_a_board_behind_a_serial_port(pytester):
    """A serial port with a board behind it (a pseudo-terminal served by a board's double):
    the marked test runs, and its device talks through pyserial."""
    pytester.makepyfile(test_board="""
        import numpy as np
        import pytest

        from maxaccel.testing import assert_bits_equal


        @pytest.mark.maxaccel_board
        def test_on_the_board(maxaccel_device):
            assert maxaccel_device.url.startswith("serial:///dev/")
            y = maxaccel_device.max(np.float32([0.0, np.nan]), np.float32([-0.0, 1.0]))
            assert_bits_equal(y, np.float32([0.0, np.nan]))
    """)
    with PtyServer(FakeBoard()) as server:
        result = pytester.runpytest("--maxaccel-device", server.url, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


REPLAYED_TESTS = """
    import numpy as np
    import pytest

    from maxaccel.testing import assert_bits_equal

    X = np.float32([[0.0, -0.0], [np.nan, -1.0]])


    @pytest.mark.maxaccel_board
    def test_on_the_board(maxaccel_device):
        y = maxaccel_device.reduce_max(X, axes=[1], keepdims=False)
        assert_bits_equal(y, np.float32([0.0, np.nan]))


    def test_max(maxaccel_device):
        y = maxaccel_device.max(X, np.float32([-0.0]))
        assert_bits_equal(y, np.float32([[0.0, -0.0], [np.nan, -0.0]]))
        print("\\nLINK", maxaccel_device.url, maxaccel_device.link.requests,
              maxaccel_device.link.retries)
"""


def test_a_board_s_traffic_recorded_and_replayed_where_no_board_is(pytester, tmp_path):
    """Recorded through a serial port with a board behind it; replayed with none: the board
    test runs, and the device answers the same bits, retries included (a byte of a reply
    dropped on the way when it was recorded)."""
    pytester.makepyfile(test_replayed=textwrap.dedent(REPLAYED_TESTS))
    recording = tmp_path / "board.json"
    board = Faulty(FakeBoard(), [Fault(TO_HOST, 40, "drop")])
    with PtyServer(board) as server:
        result = pytester.runpytest("-s", "--maxaccel-device", server.url,
                                    "--maxaccel-record", str(recording))
    result.assert_outcomes(passed=2)
    assert board.injected == 1
    (recorded,) = [line for line in result.outlines if line.startswith("LINK")]
    assert recorded.split()[1] == server.url and recorded.split()[3] == "1"    # one retry
    result = pytester.runpytest("-s", "-rs", "--maxaccel-replay", str(recording))
    result.assert_outcomes(passed=2)
    assert [line for line in result.outlines if line.startswith("LINK")] == [recorded]


def test_a_replay_that_sends_other_bytes_fails_at_the_first(pytester, tmp_path):
    pytester.makepyfile(test_replayed=textwrap.dedent(REPLAYED_TESTS))
    recording = tmp_path / "fake.json"
    result = pytester.runpytest("--maxaccel-device", "recorded://", "--maxaccel-record",
                                str(recording))
    result.assert_outcomes(passed=1, skipped=1)     # not a board: the board test skipped
    pytester.makepyfile(test_replayed=textwrap.dedent(REPLAYED_TESTS).replace("-1.0", "-2.0"))
    result = pytester.runpytest("--maxaccel-replay", str(recording))
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines([
        "*ReplayMismatch: replay of recorded://: the host sent other bytes than were "
        "recorded: byte * is 0x* where the recording has 0x* (a replay must make the recorded "
        "run's requests, in the same order)"])
    pytester.makepyfile(test_replayed=textwrap.dedent(REPLAYED_TESTS) + textwrap.dedent("""
        def test_more(maxaccel_device):
            maxaccel_device.max(X)
    """))
    result = pytester.runpytest("--maxaccel-replay", str(recording))
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*the recording ends after * bytes*"])


def test_record_and_replay_refuse_what_they_cannot_do(pytester, tmp_path):
    result = pytester.runpytest("--maxaccel-record", "a.json", "--maxaccel-replay", "b.json")
    result.stderr.fnmatch_lines(["*--maxaccel-record and --maxaccel-replay: give one of them"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result = pytester.runpytest("--maxaccel-replay", str(tmp_path / "none.json"))
    result.stderr.fnmatch_lines(["*--maxaccel-replay: *No such file or directory*none.json*"])
    (tmp_path / "other.json").write_text('{"format": 0}')
    result = pytester.runpytest("--maxaccel-replay", str(tmp_path / "other.json"))
    result.stderr.fnmatch_lines(["*--maxaccel-replay: *other.json is not a maxaccel recording "
                                 "of format 1"])


def test_without_the_plugin_its_names_are_unknown(pytester):
    """In new processes, as a user runs pytest (this one's warnings are errors)."""
    _users_project(pytester)
    result = pytester.runpytest_subprocess("-p", "no:maxaccel", *LIGHT)
    result.assert_outcomes(passed=1, errors=3, warnings=1)
    result.stdout.fnmatch_lines(["*fixture 'maxaccel_device' not found*",
                                 "*Unknown pytest.mark.maxaccel_board*"])
    result = pytester.runpytest_subprocess("-p", "no:maxaccel", *LIGHT, "--strict-markers")
    result.stdout.fnmatch_lines(["*'maxaccel_board' not found in `markers` configuration option*"])
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result = pytester.runpytest("-p", "no:maxaccel", "--maxaccel-device", "sim")
    result.stderr.fnmatch_lines(["*unrecognized arguments: --maxaccel-device*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_the_options_have_their_heading_and_the_marker_its_line(pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["maxaccel:", "  --maxaccel-device=URL*"])
    result.stdout.fnmatch_lines(["  maxaccel_device (args):*"])
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.maxaccel_board: the test needs a physical board*"])


def test_a_suite_that_does_not_use_the_plugin_loads_no_amaranth_or_onnx(pytester):
    """Run in a new process (this one has imported everything): the plugin is loaded, and
    neither the driver nor amaranth, onnx, onnxruntime or numpy is."""
    pytester.makepyfile(test_light="""
        import sys

        def test_nothing_heavy():
            loaded = {name.split(".")[0] for name in sys.modules}
            assert "pytest_maxaccel" in sys.modules
            assert not loaded & {"amaranth", "onnx", "onnxruntime", "numpy"}
            assert "maxaccel.host" not in sys.modules
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error")
    result.assert_outcomes(passed=1)


def test_the_entry_point_s_module_is_top_level():
    """pytest marks the top-level modules and packages of a plugin's distribution for
    assertion rewriting; with none, it marks the next level down, ``__main__`` among them, and
    warns in every run of an installed wheel that it cannot rewrite it (an error under
    ``-W error``). A top-level module for the entry point keeps it from looking further."""
    (entry_point,) = [ep for ep in entry_points(group="pytest11") if ep.name == "maxaccel"]
    assert entry_point.value == "pytest_maxaccel"
    assert entry_point.load().maxaccel_device is maxaccel.testing.plugin.maxaccel_device


def test_each_xdist_worker_opens_its_own_device(pytester):
    """Under ``-n 2`` with two URLs, worker gwN opens the N-th; with one virtual URL, each
    worker opens its own device of it; one physical board is refused to two workers, and
    a recording's replay to any."""
    pytester.makeconftest(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from fake_board import FakeBoard
        from maxaccel.host.transport import register_scheme
        register_scheme("fake", lambda url: FakeBoard())
    """)
    pytester.makepyfile(test_workers="""
        import os

        def test_a(maxaccel_device, worker_id):
            print("WORKER", worker_id, maxaccel_device.url, os.getpid(), id(maxaccel_device))

        def test_b(maxaccel_device, worker_id):
            print("WORKER", worker_id, maxaccel_device.url, os.getpid(), id(maxaccel_device))
    """)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "each", *LIGHT, "-rA",
        "--maxaccel-device", "fake://zero", "--maxaccel-device", "fake://one")
    result.assert_outcomes(passed=4)
    seen = {tuple(line.split()[1:]) for line in result.outlines if line.startswith("WORKER")}
    assert {(worker, url) for worker, url, *_ in seen} == {("gw0", "fake://zero"),
                                                           ("gw1", "fake://one")}
    # One device a worker: both tests of a worker saw the same process and device.
    assert len({(pid, device) for _, _, pid, device in seen}) == 2
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "each", *LIGHT, "-rA",
                                           "--maxaccel-device", "fake://shared")
    result.assert_outcomes(passed=4)
    seen = {tuple(line.split()[1:]) for line in result.outlines if line.startswith("WORKER")}
    # Fewer URLs than workers: they go round the list, each worker with its own device.
    assert {(worker, url) for worker, url, *_ in seen} == {("gw0", "fake://shared"),
                                                           ("gw1", "fake://shared")}
    assert len({pid for _, _, pid, _ in seen}) == 2
    result = pytester.runpytest_subprocess("-n", "2", *LIGHT,
                                           "--maxaccel-device", "serial:///dev/ttyUSB1")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines([
        "*maxaccel_device: 2 xdist workers but 1 device URL(s), and serial:///dev/ttyUSB1 is a "
        "physical board, which serves one process at a time: give --maxaccel-device once per "
        "worker (-n 1), or run without xdist*"])
    (pytester.path / "empty.json").write_text(
        '{"format": 1, "url": "fake://", "reply_timeout_s": 1, "max_frame_bytes": null, '
        '"sent": "", "received": []}')
    result = pytester.runpytest_subprocess("-n", "2", *LIGHT,
                                           "--maxaccel-replay", "empty.json")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*maxaccel_device: --maxaccel-record and --maxaccel-replay "
                                 "follow one sequence of requests, so one process: run "
                                 "without xdist workers*"])
