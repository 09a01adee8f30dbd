"""OffloadSession runs its CPU-provider partitions (and its one session: ``one_session``)
through onnxruntime's session binding without ``InferenceSession.run``'s Python wrapper: the
same results, onnxruntime's fallback after an execution-provider failure kept, and the wrapper
used wherever it does more."""

import numpy as np
import onnxruntime
import pytest
from onnxruntime.capi.onnxruntime_pybind11_state import EPFail

from maxaccel.host.offload import OffloadSession
from maxaccel.host.offload.runtime import direct_run
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from onnx_models import mixed_model

FEEDS = {"a": np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32),
         "b": np.array([0.5, -0.0, np.nan], np.float32).reshape(1, 3, 1),
         "flip": np.array(False)}


def wrapper_runs(monkeypatch):
    """The calls of ``InferenceSession.run`` (onnxruntime's Python wrapper) from now on."""
    calls = []
    wrapper = onnxruntime.InferenceSession.run

    def counted(self, *arguments, **keywords):
        calls.append(self)
        return wrapper(self, *arguments, **keywords)
    monkeypatch.setattr(onnxruntime.InferenceSession, "run", counted)
    return calls


def cpu_engine():
    """A plain onnxruntime session of one Relu on the CPU provider."""
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              ir_version=10)
    return onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"])


def test_the_direct_run_gives_the_wrappers_results():
    engine = cpu_engine()
    x = np.array([[np.nan, -0.0, 1], [-2, 0.0, np.inf]], np.float32)
    (got,), (want,) = direct_run(engine)(["y"], {"x": x}, None), engine.run(["y"], {"x": x})
    assert_same_bits(got, want)


@pytest.mark.parametrize("one_session", [False, True])
def test_the_sessions_run_through_the_binding_with_the_same_bits(one_session, monkeypatch):
    session = OffloadSession(mixed_model(), device=reference, one_session=one_session)
    assert (session.one_session_refusal is None) == one_session
    want = OffloadSession(mixed_model(), device=reference, one_session=not one_session)
    expected = want.run(None, FEEDS)
    calls = wrapper_runs(monkeypatch)
    got = session.run(None, FEEDS)
    assert calls == []     # the binding's run, not the wrapper
    assert [where for *_, where in session.last_run].count("onnxruntime") > 0
    for value, wanted in zip(got, expected):
        assert_same_bits(value, wanted)


def test_the_direct_run_skips_the_wrapper_on_the_cpu_provider_only():
    engine = cpu_engine()
    assert direct_run(engine) != engine.run   # a bound method compares equal to itself

    class OtherProvider:
        """An engine on another provider: its wrapper runs, as onnxruntime would."""

        _sess = engine._sess
        run = engine.run

        def get_providers(self):
            return ["SomeExecutionProvider", "CPUExecutionProvider"]
    other = OtherProvider()
    assert direct_run(other) == other.run


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
    assert direct_run(Engine())(["y"], {"x": 1}, None) == ["retried"]
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
    assert direct_run(engine) == engine.run


@pytest.mark.parametrize("one_session", [True, False])
def test_run_options_reach_thedirect_run(one_session):
    session = OffloadSession(mixed_model(), device=reference, one_session=one_session)
    options = onnxruntime.RunOptions()
    options.terminate = True
    with pytest.raises(Exception, match="[Tt]erminat"):
        session.run(None, FEEDS, options)
