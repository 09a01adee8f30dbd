"""OffloadSession runs its CPU-provider partitions (and its one session: ``one_session``)
through onnxruntime's session binding without ``InferenceSession.run``'s Python wrapper: the
same results, onnxruntime's fallback after an execution-provider failure kept, and the wrapper
used wherever it does more."""

import numpy as np
import onnxruntime
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import EPFail

from maxaccel.host.offload import OffloadSession, _direct_run
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from onnx_models import mixed_model

FEEDS = {"a": np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32),
         "b": np.array([0.5, -0.0, np.nan], np.float32).reshape(1, 3, 1),
         "flip": np.array(False)}


def engines(session):
    return [e for e in session._engines.values() if hasattr(e, "get_providers")]


def test_the_direct_run_gives_the_wrappers_results():
    direct = OffloadSession(mixed_model(), device=reference, one_session=False)
    wrapped = OffloadSession(mixed_model(), device=reference, one_session=False)
    wrapped._runs = {index: engine.run for index, engine in wrapped._engines.items()}
    for got, want in zip(direct.run(None, FEEDS), wrapped.run(None, FEEDS)):
        assert_same_bits(got, want)
    assert len(direct._runs) == len(engines(direct)) == 2
    for index, run in direct._runs.items():
        assert run != direct._engines[index].run     # the binding's run, not the wrapper


def test_the_one_session_runs_through_the_binding_too():
    one = OffloadSession(mixed_model(), device=reference)
    assert one.one_session_refusal is None and one._one_run != one._one.run
    partitions = OffloadSession(mixed_model(), device=reference, one_session=False)
    for got, want in zip(one.run(None, FEEDS), partitions.run(None, FEEDS)):
        assert_same_bits(got, want)


def test_the_direct_run_skips_the_wrapper_on_the_cpu_provider_only():
    session = OffloadSession(mixed_model(), device=reference, one_session=False)
    engine = engines(session)[0]
    assert _direct_run(engine) != engine.run   # a bound method compares equal to itself

    class OtherProvider:
        """An engine on another provider: its wrapper runs, as onnxruntime would."""

        _sess = engine._sess
        run = engine.run

        def get_providers(self):
            return ["SomeExecutionProvider", "CPUExecutionProvider"]
    other = OtherProvider()
    assert _direct_run(other) == other.run


def test_an_execution_provider_failure_goes_through_onnxruntimes_own_run():
    calls = []

    class Failing:
        """A binding that fails as an execution provider does, then the wrapper's retry."""

        def run(self, *arguments):
            raise EPFail("the provider failed")

    class Engine:
        _sess = Failing()

        def get_providers(self):
            return ["CPUExecutionProvider"]

        def run(self, *arguments):
            calls.append(arguments)
            return ["retried"]
    assert _direct_run(Engine())(["y"], {"x": 1}, None) == ["retried"]
    assert calls == [(["y"], {"x": 1}, None)]


@pytest.mark.parametrize("missing", [True, False])
def test_an_engine_without_the_binding_keeps_its_run(missing):
    class Engine:
        def get_providers(self):
            return ["CPUExecutionProvider"]

        def run(self, *arguments):
            return ["plain"]
    engine = Engine()
    if not missing:
        engine._sess = object()     # no run of its own
    assert _direct_run(engine) == engine.run


@pytest.mark.parametrize("one_session", [True, False])
def test_run_options_reach_the_direct_run(one_session):
    session = OffloadSession(mixed_model(), device=reference, one_session=one_session)
    options = onnxruntime.RunOptions()
    options.terminate = True
    with pytest.raises(Exception, match="[Tt]erminat"):
        session.run(None, FEEDS, options)
