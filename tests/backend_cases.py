"""The ONNX backend test cases of an operator, as (model, data sets), from the installed onnx.

Two sources: the node cases, whose ``data/node`` directories the onnx wheel does not ship but
generates from ``onnx.backend.test.case.node`` (done here in memory, exactly as onnx writes
them), and the PyTorch-converted and PyTorch-operator directories it does ship
(``onnx/backend/test/data/pytorch-*``). Each data set is ``(inputs, expected outputs)``, lists
of numpy arrays in the model's order.
"""

import glob
import importlib
import os
import warnings

import onnx
from onnx import numpy_helper

__all__ = ["generated_node_cases", "pytorch_cases", "maxpool_cases"]


def generated_node_cases(modules, prefixes):
    """``{name: (model, data_sets)}`` of the generated node cases whose name starts with one of
    ``prefixes``, from the generator modules ``modules`` (e.g. ``["maxpool"]``)."""
    import onnx.backend.test.case.node as node_cases
    node_cases._TargetOpType = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # some generators divide by zero on purpose
        for module in modules:
            importlib.import_module(f"onnx.backend.test.case.node.{module}")
    return {c.name: (c.model, c.data_sets) for c in node_cases._NodeTestCases
            if c.name.startswith(tuple(prefixes))}


def pytorch_cases(op_types):
    """``{directory name: (model, data_sets)}`` of the shipped PyTorch-converted and -operator
    cases whose graph is a single node of one of ``op_types``."""
    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    cases = {}
    for directory in sorted(glob.glob(os.path.join(root, "pytorch-*", "test_*"))):
        model = onnx.load(os.path.join(directory, "model.onnx"))
        if len(model.graph.node) != 1 or model.graph.node[0].op_type not in op_types:
            continue
        data_sets = []
        for data in sorted(glob.glob(os.path.join(directory, "test_data_set_*"))):
            inputs, outputs = ([numpy_helper.to_array(onnx.load_tensor(f))
                                for f in sorted(glob.glob(os.path.join(data, f"{kind}_*.pb")))]
                               for kind in ("input", "output"))
            data_sets.append((inputs, outputs))
        cases[os.path.basename(directory)] = (model, data_sets)
    return cases


def maxpool_cases():
    """MaxPool's 19 generated node cases and its 9 PyTorch-converted or -operator data
    directories."""
    return {**generated_node_cases(["maxpool"], ["test_maxpool"]), **pytorch_cases(["MaxPool"])}
