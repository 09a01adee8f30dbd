"""Shared pytest set-up: deterministic hypothesis runs, so a CI run is reproducible bit for bit,
and the one slow gate (``--slow``)."""

import pytest
from hypothesis import HealthCheck, settings

from limits import time_limit

# derandomize: the examples come from a fixed seed derived from each test, so a failure seen in
# CI is seen again locally. No deadline: simulation time varies with machine load.
settings.register_profile(
    "maxaccel", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("maxaccel")

#: What ``--slow`` adds, for ``pytest --help`` (the README says the same).
SLOW_HELP = (
    "also run the tests marked slow, skipped without it: the bitstream builds of the ULX3S "
    "(25F and 85F) and the synth_xilinx estimates of the Arty and the NiteFury, the netlist "
    "boards of the iCE40, the ULX3S and the Arty and the broken-netlist checks, the lane's "
    "minimum on every 2^32 pair of each format, the formal proofs implied by stronger ones, "
    "the host corpus and the engine's tests through Amaranth's simulator, the rest of the "
    "compiled board's MaxPool cycle table, an 8-byte compiled link, the compiled board and the "
    "iCEBreaker's netlist of a core chosen for a model, and the Ray Serve example serving "
    "requests. About 1 h 50 min on 2 cores with the models cached (the ULX3S 85F's place "
    "and route about 67 min of it); combine with -k or a file to run a part")


@pytest.fixture(scope="session")
def compiled_device():
    """The default compiled board, ``open_device("verilator")`` (the NiteFury's core), one
    per test process for every module that needs it."""
    from maxaccel.host.device import open_device
    with open_device("verilator") as device:
        yield device


@pytest.fixture(autouse=True)
def _time_limit(request):
    """A test marked ``time_limit(seconds)`` (or in a module so marked) fails with a
    TimeoutError after ``seconds`` instead of hanging."""
    marker = request.node.get_closest_marker("time_limit")
    if marker is None:
        yield
        return
    with time_limit(marker.args[0]):
        yield


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False, help=SLOW_HELP)


def pytest_collection_modifyitems(config, items):
    """Without ``--slow``, each test marked ``slow`` is skipped with its marker's reason."""
    if config.getoption("--slow"):
        return
    for item in items:
        marker = item.get_closest_marker("slow")
        if marker is not None:
            reason = marker.kwargs.get("reason", "marked slow")
            item.add_marker(pytest.mark.skip(reason=f"{reason}: --slow runs it"))
