"""The maxaccel pytest plugin: a device for tests, and a marker for tests that need a board.

pytest loads it through the entry point ``maxaccel`` (group ``pytest11``, module
``pytest_maxaccel``, which says why it is top-level) wherever maxaccel is installed;
``-p no:maxaccel`` turns it off. It offers:

``--maxaccel-device URL`` (ini key ``maxaccel_device``, default ``sim``)
    The device of :func:`maxaccel_device`: any URL :func:`maxaccel.host.open_device` takes.
    Given several times (or several URLs, space-separated, in the ini key), pytest-xdist
    worker ``gwN`` takes the N-th: one board per worker.
``maxaccel_device`` (fixture, session scope)
    A device opened on first use, one per process (so one per xdist worker), closed at the
    end of the session.
``maxaccel_device_factory`` (fixture)
    ``maxaccel_device_factory(url, **options)`` opens another device; those it opened are
    closed when the test ends.
``@pytest.mark.maxaccel_board``
    The test needs a physical board: it is skipped, with the reason, unless the device URL is
    one (``serial://`` or ``xdma://``).
``--maxaccel-record FILE``, ``--maxaccel-replay FILE``
    Record the link traffic of :func:`maxaccel_device` into ``FILE`` at the end of the
    session; or make :func:`maxaccel_device` a replay of such a recording, which answers as
    the recorded device did (:mod:`maxaccel.testing.replay`): board tests recorded where a
    board is attached then run where none is. One process only (not under xdist workers).

Loading the plugin imports pytest and the standard library only; the fixtures import the
driver (and a virtual board its simulator) when a test first asks for them.
"""

import pytest

__all__ = ["DEFAULT_URL", "BOARD_SCHEMES", "is_board_url", "device_url", "maxaccel_device",
           "maxaccel_device_factory"]

#: The device when neither the option nor the ini key names one: the virtual board.
DEFAULT_URL = "sim"
#: URL schemes of physical boards (the transports of :mod:`maxaccel.host.transport` that reach
#: hardware); any other URL is a virtual board.
BOARD_SCHEMES = ("serial", "xdma")

#: The recording :func:`maxaccel_device` replays, loaded when the session is configured.
_REPLAYED = pytest.StashKey[dict]()

_BOARD_MARKER = ("maxaccel_board: the test needs a physical board; skipped unless the device "
                 "(--maxaccel-device, ini maxaccel_device) is serial:// or xdma://")


def pytest_addoption(parser):
    group = parser.getgroup("maxaccel", "maxaccel")
    group.addoption(
        "--maxaccel-device", action="append", dest="maxaccel_device", metavar="URL",
        help="device URL of the maxaccel_device fixture (sim, verilator, "
             "serial:///dev/ttyUSB1, xdma:///dev/xdma0, ...); give it once per pytest-xdist "
             "worker to give each its own board. Default: the ini key maxaccel_device, "
             f"else {DEFAULT_URL}.")
    group.addoption(
        "--maxaccel-record", dest="maxaccel_record", metavar="FILE",
        help="record the link traffic of the maxaccel_device fixture into FILE (written at "
             "the end of the session)")
    group.addoption(
        "--maxaccel-replay", dest="maxaccel_replay", metavar="FILE",
        help="make the maxaccel_device fixture a replay of a recording of --maxaccel-record: "
             "it answers as the recorded device did, with none attached; its URL is the "
             "recorded one (so board tests of a board's recording run)")
    parser.addini(
        "maxaccel_device", type="args", default=[DEFAULT_URL],
        help="device URL(s) of the maxaccel_device fixture, space-separated (one per xdist "
             f"worker); --maxaccel-device overrides it. Default: {DEFAULT_URL}.")


def pytest_configure(config):
    config.addinivalue_line("markers", _BOARD_MARKER)
    record, replay = config.getoption("maxaccel_record"), config.getoption("maxaccel_replay")
    if record and replay:
        raise pytest.UsageError("--maxaccel-record and --maxaccel-replay: give one of them")
    if replay:
        from maxaccel.testing.replay import load_recording

        try:
            config.stash[_REPLAYED] = load_recording(replay)
        except (OSError, ValueError) as error:
            raise pytest.UsageError(f"--maxaccel-replay: {error}") from None


def is_board_url(url):
    """Whether ``url`` names a physical board (its scheme is one of :data:`BOARD_SCHEMES`)."""
    scheme, separator, _ = url.partition("://")
    return bool(separator) and scheme in BOARD_SCHEMES


def _urls(config):
    """The device URLs of the option, else of the ini key, else :data:`DEFAULT_URL`."""
    return list(config.getoption("maxaccel_device") or config.getini("maxaccel_device")
                or [DEFAULT_URL])


def _worker(config):
    """``(index, count)`` of this pytest-xdist worker (``gw2`` is index 2), or None outside
    one. xdist gives every worker's config a ``workerinput`` with its id and the count."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    return int(workerinput["workerid"].removeprefix("gw")), int(workerinput["workercount"])


def device_url(config):
    """The URL of this process's device: the recorded one with ``--maxaccel-replay``; else
    the N-th URL on xdist worker ``gwN`` (counting round the list when there are fewer URLs
    than workers), the first elsewhere."""
    if _REPLAYED in config.stash:
        return config.stash[_REPLAYED]["url"]
    urls = _urls(config)
    worker = _worker(config)
    return urls[worker[0] % len(urls)] if worker else urls[0]


def _check_not_shared(config, url):
    """Refuse to hand one physical board to several xdist workers: two processes writing one
    serial port or XDMA channel would interleave their frames."""
    worker, urls = _worker(config), _urls(config)
    if worker and is_board_url(url) and worker[1] > len(urls):
        pytest.fail(
            f"maxaccel_device: {worker[1]} xdist workers but {len(urls)} device URL(s), and "
            f"{url} is a physical board, which serves one process at a time: give "
            f"--maxaccel-device once per worker (-n {len(urls)}), or run without xdist",
            pytrace=False)


def pytest_collection_modifyitems(config, items):
    url = None
    for item in items:
        if item.get_closest_marker("maxaccel_board") is None:
            continue
        url = url or device_url(config)
        if not is_board_url(url):
            item.add_marker(pytest.mark.skip(
                reason=f"needs a physical board (serial:// or xdma://); the device is {url} "
                       f"(--maxaccel-device URL or the ini key maxaccel_device)"))


def _open(config):
    """``(device, recording)``: this process's device, and the :class:`RecordingTransport`
    under it with ``--maxaccel-record`` (else None)."""
    record = config.getoption("maxaccel_record")
    if not record and _REPLAYED not in config.stash:
        from maxaccel.host import open_device

        url = device_url(config)
        _check_not_shared(config, url)
        return open_device(url), None
    worker = _worker(config)
    if worker and worker[1] > 1:
        pytest.fail("maxaccel_device: --maxaccel-record and --maxaccel-replay follow one "
                    "sequence of requests, so one process: run without xdist workers",
                    pytrace=False)
    from maxaccel.host import Device
    from maxaccel.host.transport import open_transport
    from maxaccel.testing.replay import RecordingTransport, ReplayTransport

    if record:
        url = device_url(config)
        transport = RecordingTransport(open_transport(url), url)
    else:
        transport = ReplayTransport(config.stash[_REPLAYED])
    try:
        return Device(transport, url=transport.url), transport if record else None
    except BaseException:
        transport.close()
        raise


@pytest.fixture(scope="session")
def maxaccel_device(request):
    """An open :class:`maxaccel.host.Device` on ``--maxaccel-device`` (default ``sim``), shared
    by the tests of this process (of this xdist worker) and closed at the end; with
    ``--maxaccel-record`` its traffic is then saved, with ``--maxaccel-replay`` it is the
    recording's replay."""
    device, recording = _open(request.config)
    try:
        yield device
    finally:
        device.close()
        if recording is not None:
            recording.save(request.config.getoption("maxaccel_record"))


@pytest.fixture
def maxaccel_device_factory():
    """``open(url, **options)``: a device opened with :func:`maxaccel.host.open_device`,
    closed when the test ends (every one it opened, last first)."""
    from maxaccel.host import open_device

    opened = []

    def open_(url, **options):
        device = open_device(url, **options)
        opened.append(device)
        return device

    yield open_
    for device in reversed(opened):
        device.close()
