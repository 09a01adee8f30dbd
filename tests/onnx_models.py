"""ONNX models the offload tests share: one node, a graph mixing device and CPU nodes, and
a bfloat16 Max the one-session path leaves to the partitions."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def single_node_model(op_type, opset, inputs, outputs, initializers=(), **attributes):
    node = helper.make_node(op_type, [name for name, *_ in inputs + list(initializers)],
                            [name for name, *_ in outputs], **attributes)
    graph = helper.make_graph(
        [node], f"{op_type.lower()}_{opset}",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=[numpy_helper.from_array(v, n) for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=10)


def mixed_model():
    """Max (device) -> If on the CPU whose branches read an outer value -> ReduceMax (device)
    -> Relu (CPU), with a GlobalMaxPool (device) feeding an Add (CPU)."""
    f32 = TensorProto.FLOAT
    then_branch = helper.make_graph(
        [helper.make_node("Neg", ["m"], ["branch_out"])], "then", [],
        [helper.make_tensor_value_info("branch_out", f32, ["batch", 3, 4])])
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["m"], ["branch_out"])], "else", [],
        [helper.make_tensor_value_info("branch_out", f32, ["batch", 3, 4])])
    nodes = [
        helper.make_node("Max", ["a", "b"], ["m"], name="max"),
        helper.make_node("If", ["flip"], ["chosen"], name="if", then_branch=then_branch,
                         else_branch=else_branch),
        helper.make_node("ReduceMax", ["chosen", "axes"], ["r"], name="reduce", keepdims=0),
        helper.make_node("Relu", ["r"], ["relu"], name="relu"),
        helper.make_node("GlobalMaxPool", ["m"], ["pooled"], name="pool"),
        helper.make_node("Reshape", ["pooled", "flat"], ["pooled_flat"], name="reshape"),
        helper.make_node("Add", ["relu", "pooled_flat"], ["out"], name="add"),
    ]
    graph = helper.make_graph(
        nodes, "mixed",
        [helper.make_tensor_value_info("a", f32, ["batch", 3, 4]),
         helper.make_tensor_value_info("b", f32, [1, 3, 1]),
         helper.make_tensor_value_info("flip", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("out", f32, ["batch", 3]),
         helper.make_tensor_value_info("m", f32, ["batch", 3, 4])],
        initializer=[numpy_helper.from_array(np.array([2], np.int64), "axes"),
                     numpy_helper.from_array(np.array([-1, 3], np.int64), "flat")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def bfloat16_model():
    graph = helper.make_graph(
        [helper.make_node("Max", ["x", "y"], ["m"]), helper.make_node("Cast", ["m"], ["z"],
                                                                       to=TensorProto.FLOAT)],
        "bf16", [helper.make_tensor_value_info(n, TensorProto.BFLOAT16, [3]) for n in "xy"],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
