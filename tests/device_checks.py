"""Checks the device tests run on more than one board: the ONNX backend node cases of the
max family and of MaxPool through an OffloadSession, and the edge digest, on the fake board,
the virtual boards and the netlist boards."""

import importlib
import warnings

import numpy as np

from maxaccel.contract.dtypes import FORMATS
from maxaccel.host.offload import OffloadSession
from maxaccel.sim import reference
from maxaccel.sim.reference import assert_same_bits
from maxaccel.sim.values import edge_bits, random_values

from backend_cases import maxpool_cases, pytorch_cases

#: Every format, bool included.
ALL = list(FORMATS.values())

#: Reductions of the host tests and the netlist boards': shape, axes, keepdims,
#: noop_with_empty_axes.
REDUCTIONS = [
    ((3, 4, 5), None, True, False),
    ((3, 4, 5), [1], True, False),
    ((3, 4, 5), [0, 2], False, False),
    ((3, 4, 5), -1, False, False),
    ((2, 3, 2, 3), [0, 3], True, False),
    ((), None, True, False),
    ((), [], False, False),
    ((7,), [0], False, False),
    ((1, 9), None, False, False),
    ((2, 0, 3), [1], True, False),   # empty reductions: the least element
    ((2, 0, 3), [0, 2], False, False),  # empty output
    ((0,), None, True, False),
    ((4, 3), [], True, True),       # noop: the identity, NaN payloads untouched
    ((4, 3), None, True, True),
    ((4, 3), [], True, False),
]


def backend_node_cases():
    """The onnx package's node test cases of Max, ReduceMax, GlobalMaxPool, Min, ReduceMin,
    ArgMax and ArgMin."""
    import onnx.backend.test.case.node as node_cases
    node_cases._TargetOpType = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators divide by zero on purpose
        for module in ("max", "reducemax", "globalmaxpool", "min", "reducemin", "argmax",
                       "argmin"):
            importlib.import_module(f"onnx.backend.test.case.node.{module}")
    # By the node's operator, not the case's name: "test_max" also begins the MaxPool cases,
    # which are in the list when another test module loaded them first.
    return {c.name: c for c in node_cases._NodeTestCases
            if c.model.graph.node[0].op_type in FAMILY_CASES}


#: The operators whose shipped cases run here (MaxPool's are in MAXPOOL_CASES below).
FAMILY_CASES = ("Max", "ReduceMax", "GlobalMaxPool", "Min", "ReduceMin", "ArgMax", "ArgMin")


CASES = backend_node_cases()


def check_node_case(device, name):
    """One shipped case on ``device``: the node placed there, bit for bit against its shipped
    output and the golden model (also run on the netlist boards, tests/test_netlist_board.py)."""
    case = CASES[name]
    session = OffloadSession(case.model, device=device)
    golden = OffloadSession(case.model, device=reference)
    input_names = [i.name for i in case.model.graph.input]
    for inputs, expected in case.data_sets:
        feeds = dict(zip(input_names, inputs))
        got = session.run(None, feeds)
        assert [where for _, _, where in session.last_run] == ["device"]
        for value, shipped, want in zip(got, expected, golden.run(None, feeds)):
            assert_same_bits(value, want, f"{name} vs the golden model")
            assert_same_bits(value, shipped, f"{name} vs the shipped output")


#: The older releases' PyTorch-converted cases onnx still ships, of the operators above (their
#: MaxPool ones are in MAXPOOL_CASES below).
PYTORCH_CASES = pytorch_cases(FAMILY_CASES)


def check_shipped_case(device, model, data_sets, name):
    """A shipped case (a one-node model and its data sets), the node placed on ``device``,
    every output equal to the shipped one."""
    session = OffloadSession(model, device=device)
    input_names = [i.name for i in model.graph.input]
    for inputs, expected in data_sets:
        got = session.run(None, dict(zip(input_names, inputs)))
        assert [where for _, _, where in session.last_run] == ["device"], name
        assert len(got) == len(expected)
        for value, shipped in zip(got, expected):
            assert_same_bits(value, shipped, name)


def check_pytorch_case(device, name):
    """One shipped PyTorch case (:func:`check_shipped_case`)."""
    check_shipped_case(device, *PYTORCH_CASES[name], name)


#: MaxPool's 28 backend cases (19 generated, 9 PyTorch-converted).
MAXPOOL_CASES = maxpool_cases()


def check_maxpool_case(device, name):
    """The MaxPool node placed on the device, Y and Indices equal to the shipped output
    (:func:`check_shipped_case`)."""
    check_shipped_case(device, *MAXPOOL_CASES[name], name)


def check_edge_digest(dev):
    """The digest: every dtype reduced (maximum, minimum, the positions of both, first and
    last), broadcast (but bool) and, for floats, a NaN in every row (its value and its
    position) and a global pool; also run on the netlist boards
    (tests/test_netlist_board.py)."""
    rng = np.random.default_rng(500)
    for fmt in ALL:
        data = random_values(rng, fmt, (3, 5), edge_fraction=0.5)
        for name in ("reduce_max", "reduce_min"):
            assert_same_bits(getattr(dev, name)(data, axes=[1], keepdims=False),
                             getattr(reference, name)(data, axes=[1], keepdims=False),
                             f"{name} {fmt}")
        for name, last in [("arg_max", False), ("arg_min", True)]:
            assert_same_bits(getattr(dev, name)(data, axis=1, select_last_index=last),
                             getattr(reference, name)(data, axis=1, select_last_index=last),
                             f"{name} {fmt}")
        if fmt.kind != "bool":
            arrays = [random_values(rng, fmt, s, edge_fraction=0.5)
                      for s in [(2, 1, 4), (3, 1), (1,)]]
            assert_same_bits(dev.max(*arrays), reference.max(*arrays), str(fmt))
        if fmt.is_float:
            edges = edge_bits(fmt)
            nans = edges[reference.is_nan(edges)]
            matrix = rng.choice(edges[~reference.is_nan(edges)], size=(7, 7))
            matrix[np.arange(7), np.arange(7)] = nans[:7]
            got = dev.reduce_max(matrix, axes=[1])
            assert (reference.bits_of(got) == fmt.canonical_nan).all()
            assert dev.arg_min(matrix, axis=1, keepdims=False).tolist() == list(range(7))
            x = random_values(rng, fmt, (1, 2, 3, 2))
            assert_same_bits(dev.global_max_pool(x), reference.global_max_pool(x))
