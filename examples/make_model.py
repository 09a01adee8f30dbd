"""Build ``examples/max_family.onnx``: a small model mixing offloaded and CPU nodes.

    x [2, 3, 4, 5], bias [3, 1, 5], floor [5]   (float32)
    Max(x, bias, floor)          -> maxed  [2, 3, 4, 5]   device (3 inputs, broadcasting)
    Relu(maxed)                  -> relu                   cpu
    ReduceMax(relu, axes=[2])    -> peak   [2, 3, 1, 5]   device (axes as an input, opset 18)
    GlobalMaxPool(maxed)         -> pooled [2, 3, 1, 1]   device
    Add(peak, pooled)            -> total  [2, 3, 1, 5]   cpu
    MaxPool(relu, 2x2 stride 2)  -> window [2, 3, 2, 2]   device, with its Indices (opset 18)

Run it with ``maxaccel run examples/max_family.onnx``. Regenerate with
``python examples/make_model.py`` (IR version 10, so onnxruntime 1.31 reads it too).
"""

import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PATH = pathlib.Path(__file__).with_name("max_family.onnx")


def build():
    f32 = TensorProto.FLOAT
    nodes = [
        helper.make_node("Max", ["x", "bias", "floor"], ["maxed"], name="max_broadcast"),
        helper.make_node("Relu", ["maxed"], ["relu"], name="relu"),
        helper.make_node("ReduceMax", ["relu", "axes"], ["peak"], name="reduce_rows",
                         keepdims=1),
        helper.make_node("GlobalMaxPool", ["maxed"], ["pooled"], name="global_pool"),
        helper.make_node("Add", ["peak", "pooled"], ["total"], name="add"),
        helper.make_node("MaxPool", ["relu"], ["window", "window_indices"], name="window_pool",
                         kernel_shape=[2, 2], strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes, "max_family",
        [helper.make_tensor_value_info("x", f32, [2, 3, 4, 5]),
         helper.make_tensor_value_info("bias", f32, [3, 1, 5]),
         helper.make_tensor_value_info("floor", f32, [5])],
        [helper.make_tensor_value_info("maxed", f32, [2, 3, 4, 5]),
         helper.make_tensor_value_info("pooled", f32, [2, 3, 1, 1]),
         helper.make_tensor_value_info("total", f32, [2, 3, 1, 5]),
         helper.make_tensor_value_info("window", f32, [2, 3, 2, 2]),
         helper.make_tensor_value_info("window_indices", TensorProto.INT64, [2, 3, 2, 2])],
        initializer=[numpy_helper.from_array(np.array([2], np.int64), "axes")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              ir_version=10, producer_name="maxaccel examples")
    onnx.checker.check_model(model, full_check=True)
    return model


if __name__ == "__main__":
    onnx.save(build(), PATH)
    print(f"wrote {PATH}")
