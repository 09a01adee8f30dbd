"""maxaccel.onnx_backend under onnx's own conformance harness (``onnx.backend.test.BackendTest``):
every node case of the max family, the sequence and optional cases, and those of a fixed sample
of the other operators' generators, on the golden model (``docs/measure_backend_suite.py`` runs
the whole node suite); and the backend's own API (its devices, a prepared model's feeds,
``run_node``, ``on``)."""

import importlib
import unittest.mock
import warnings

import numpy as np
import onnx.backend.test
import onnx.backend.test.runner
import pytest
from fake_board import FakeBoard
from onnx import TensorProto, helper

import maxaccel.onnx_backend as backend
from maxaccel.host.device import Device
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits

#: The generator modules (``onnx.backend.test.case.node``) whose every node case runs: the max
#: family, and those whose feeds or outputs are sequences or optionals (onnxruntime's Python
#: values for them: lists, None).
FAMILY_MODULES = ("max", "min", "reducemax", "reducemin", "argmax", "argmin", "globalmaxpool",
                  "maxpool")
WHOLE_MODULES = FAMILY_MODULES + ("identity", "loop", "sequence_map", "sequenceinsert",
                                  "splittosequence", "optionalgetelement",
                                  "optionalhaselement")
#: One generator module in SAMPLE_EVERY of the others (by name), as a sample of the rest: onnx
#: makes a module's cases, expected outputs included, when it is imported (all of them: 15 s).
SAMPLE_EVERY = 8


def node_cases(modules):
    """The node cases of the generator ``modules``, as ``onnx.backend.test.loader`` gives
    every module's (a module imported before is made again: its cases are made on import)."""
    import sys

    import onnx.backend.test.case.node as generators
    generators._TargetOpType = None
    # Names another test module's cases took in this process (pytest-xdist runs several
    # modules in one worker): onnx refuses a case name it has seen.
    generators._existing_names.clear()
    cases = []
    for module in modules:
        name = f"onnx.backend.test.case.node.{module}"
        first = len(generators._NodeTestCases)
        if name in sys.modules:
            importlib.reload(sys.modules[name])
        else:
            importlib.import_module(name)
        cases += generators._NodeTestCases[first:]
    return cases


def onnxruntime_passes(case):
    """Whether onnxruntime's own backend (``onnxruntime.backend``) passes node case ``case``
    under the harness' comparison."""
    import onnxruntime.backend
    from onnx.backend.test.runner import Runner
    try:
        rep = onnxruntime.backend.prepare(case.model)
        for inputs, outputs in case.data_sets:
            Runner.assert_similar_outputs(
                [onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x
                 for x in outputs], rep.run(list(inputs)), case.rtol, case.atol)
    except Exception:   # noqa: BLE001 (any failure: onnxruntime does not pass it)
        return False
    return True


def chosen_cases():
    """``(cases, whole, sampled)``: the node cases of :data:`WHOLE_MODULES` and of the
    sample's modules; the names of those of :data:`WHOLE_MODULES` that run (the max family's
    all, the others' those onnxruntime passes), and of the sample's that onnxruntime passes."""
    import pkgutil

    import onnx.backend.test.case.node as generators
    import onnxruntime
    onnxruntime.set_default_logger_severity(4)
    others = sorted(m.name for m in pkgutil.iter_modules(generators.__path__)
                    if m.name not in WHOLE_MODULES)
    sample = others[::SAMPLE_EVERY]
    made = {module: node_cases([module]) for module in WHOLE_MODULES + tuple(sample)}
    cases = {c.name: c for found in made.values() for c in found}
    family = {c.name for m in FAMILY_MODULES for c in made[m]}
    whole = {c.name for m in WHOLE_MODULES for c in made[m]}
    chosen = sorted(n for n in whole if n in family or onnxruntime_passes(cases[n]))
    sampled = sorted(n for n in cases if n not in whole and onnxruntime_passes(cases[n]))
    return list(cases.values()), chosen, sampled


with warnings.catch_warnings():
    warnings.simplefilter("ignore")     # some generators overflow and divide by zero on purpose
    _CASES, WHOLE_CASES, SAMPLED_CASES = chosen_cases()
    # The harness made of the chosen cases only (it would load, and make, every node case).
    with unittest.mock.patch.object(onnx.backend.test.runner, "load_model_tests",
                                    lambda kind=None, **_: _CASES if kind == "node" else []):
        _runner = onnx.backend.test.BackendTest(backend, __name__)
_runner.include("^(?:" + "|".join(WHOLE_CASES + SAMPLED_CASES) + ")_cpu$")
globals().update(_runner.test_cases)


def test_the_cases_are_chosen():
    assert len(WHOLE_CASES) > 110 and len(SAMPLED_CASES) > 60
    for name in ("test_identity_sequence", "test_identity_opt", "test_loop13_seq",
                 "test_sequence_insert_at_back",
                 "test_sequence_insert_at_front", "test_sequence_map_add_2_sequences",
                 "test_maxpool_2d_default", "test_reduce_max_empty_set"):
        assert name in WHOLE_CASES, name


def test_a_loop_over_an_optional_sequence_runs_as_onnxruntime_runs_it():
    """``test_loop16_seq_none``, whose input is an optional sequence (the harness' comparison
    cannot take its sequence holding a 0-d tensor, for onnxruntime either): the same values as
    onnxruntime's."""
    import onnxruntime
    (case,) = [c for c in _CASES if c.name == "test_loop16_seq_none"]
    for inputs, _ in case.data_sets:
        feeds = dict(zip([i.name for i in case.model.graph.input], [
            onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x
            for x in inputs]))
        theirs = onnxruntime.InferenceSession(case.model.SerializeToString()).run(None, feeds)
        mine = backend.prepare(case.model).run(feeds)
        assert len(mine) == len(theirs)
        for got, want in zip(mine, theirs):
            assert isinstance(got, list) and len(got) == len(want)
            for a, b in zip(got, want):
                assert_same_bits(np.asarray(a), np.asarray(b))


def test_the_backend_runs_on_the_cpu_only():
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Max", ["a", "b"], ["y"])], "max",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    with pytest.raises(ValueError, match="CUDA"):
        backend.prepare(model, "CUDA")
    a = np.array([0.0, np.nan], np.float32)
    b = np.array([-0.0, 1.0], np.float32)
    rep = backend.prepare(model)
    assert rep.session.placements[0][2] == "device"
    for feeds in ([a, b], {"a": a, "b": b}):
        (y,) = rep.run(feeds)
        assert_same_bits(y, reference.max(a, b))
    (y,) = backend.run_model(model, [a, b])
    assert_same_bits(y, reference.max(a, b))
    with pytest.raises(ValueError, match="2 inputs"):
        rep.run(a)


def test_run_node_types_the_outputs_by_shape_inference():
    x = np.array([[3, 1], [2, 5]], np.float32)
    node = helper.make_node("ReduceMin", ["x"], ["y"], axes=[1], keepdims=0)
    (y,) = backend.run_node(node, [x], opset_version=13)
    assert_same_bits(y, np.array([1, 2], np.float32))
    node = helper.make_node("ArgMax", ["x"], ["i"], axis=0)
    (i,) = backend.run_node(node, [x], outputs_info=[(np.int64, (1, 2))])
    np.testing.assert_array_equal(i, [[0, 1]])


def test_a_backend_on_a_board():
    """``on(device)``: the sessions' max-family nodes on that device."""
    board = FakeBoard()
    with Device(board) as device:
        on_board = backend.on(device)
        x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])
        sent = len(board.log)
        (y,) = on_board.run_node(node, [x])
        assert len(board.log) > sent
        assert_same_bits(y, reference.max_pool(x, [2, 2]))
