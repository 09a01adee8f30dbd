"""Measure where numpy, onnxruntime and onnx.reference differ from the maxaccel contract.

Not part of the package or the tests. Needs numpy, ml_dtypes, onnx and onnxruntime:

    pip install onnxruntime        # not a maxaccel dependency
    python docs/measure_semantics.py

Prints one line per probe: what was computed, the bits that came out, and the bits the contract
(maxaccel.sim.reference) gives. The results are recorded in docs/semantics.md.
"""

import platform
import warnings

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from maxaccel.sim import reference

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64
ONNX_TYPE = {np.dtype(F16): TensorProto.FLOAT16, np.dtype(BF16): TensorProto.BFLOAT16,
             np.dtype(F32): TensorProto.FLOAT, np.dtype(F64): TensorProto.DOUBLE,
             np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.int16): TensorProto.INT16}


def bits(dtype, *patterns):
    return np.array(patterns, dtype=f"u{np.dtype(dtype).itemsize}").view(dtype)


def show(array):
    array = np.asarray(array)
    view = array.view(f"u{array.dtype.itemsize}") if array.dtype != np.bool_ else array
    return "[" + " ".join(f"{int(v):#0{2 + 2 * array.dtype.itemsize}x}"
                          if array.dtype != np.bool_ else str(bool(v))
                          for v in view.reshape(-1)) + "]"


def report(what, got, contract):
    """Print one probe; ``got`` may be a callable, whose exception is then recorded."""
    if callable(got):
        try:
            got = got()
        except Exception as error:   # noqa: BLE001 - an unsupported case is a result too
            print(f"ERR   {what:58s} {type(error).__name__}: {str(error).splitlines()[0][:110]}")
            return
    got, contract = np.asarray(got), np.asarray(contract)
    same = got.shape == contract.shape and show(got) == show(contract)
    print(f"{'same' if same else 'DIFF'}  {what:58s} got {show(got)} shape {got.shape}; "
          f"contract {show(contract)} shape {contract.shape}")


def model(op, inputs, opset, **attributes):
    """An onnx model with one node; inputs: list of (name, array). ir_version=10 for ort 1.31."""
    values = [helper.make_tensor_value_info(n, ONNX_TYPE[a.dtype], a.shape) for n, a in inputs]
    output = helper.make_tensor_value_info("y", ONNX_TYPE[inputs[0][1].dtype], None)
    node = helper.make_node(op, [n for n, _ in inputs], ["y"], **attributes)
    graph = helper.make_graph([node], op, values, [output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def run_ort(op, arrays, opset, **attributes):
    inputs = [(f"x{i}", a) for i, a in enumerate(arrays)]
    session = ort.InferenceSession(model(op, inputs, opset, **attributes).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, dict(inputs))[0]


def run_onnx_reference(op, arrays, opset, **attributes):
    inputs = [(f"x{i}", a) for i, a in enumerate(arrays)]
    return ReferenceEvaluator(model(op, inputs, opset, **attributes)).run(None, dict(inputs))[0]


def main():
    print(f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, onnx {onnx.__version__}, "
          f"onnxruntime {ort.__version__}, {platform.machine()} {platform.python_version()}")
    warnings.simplefilter("ignore")   # bfloat16 comparisons warn on NaN
    ort.set_default_logger_severity(3)  # quiet the opset-1 notice

    print("\n# numpy")
    for dtype in (F16, BF16, F32, F64):
        p, n = np.array([0.0], dtype), np.array([-0.0], dtype)
        name = np.dtype(dtype).name
        report(f"np.maximum(+0, -0) {name}", np.maximum(p, n), reference.max(p, n))
        report(f"np.maximum(-0, +0) {name}", np.maximum(n, p), reference.max(n, p))
        long_p, long_n = np.zeros(1024, dtype), np.full(1024, -0.0, dtype)
        report(f"np.maximum(+0[1024], -0[1024]) {name}, first element",
               np.maximum(long_p, long_n)[:1], reference.max(long_p, long_n)[:1])
        for order in ([-0.0, 0.0], [0.0, -0.0]):
            x = np.array(order, dtype)
            report(f"np.max({order}) {name}", np.max(x), reference.reduce_max(x, keepdims=False))
        x = np.array([-0.0] * 500 + [0.0] * 500, dtype)
        report(f"np.max([-0]*500 + [+0]*500) {name}", np.max(x),
               reference.reduce_max(x, keepdims=False))
    f32_nans = {"sNaN 0x7f800001": 0x7F80_0001, "-qNaN 0xffc00123": 0xFFC0_0123}
    for label, pattern in f32_nans.items():
        nan, one = bits(F32, pattern), np.array([1.0], F32)
        report(f"np.maximum({label}, 1) float32", np.maximum(nan, one), reference.max(nan, one))
        report(f"np.maximum(1, {label}) float32", np.maximum(one, nan), reference.max(one, nan))
        x = bits(F32, 0x3F80_0000, pattern, 0x7FC0_0000, 0x4000_0000)
        report(f"np.max([1, {label}, qNaN, 2]) float32", np.max(x),
               reference.reduce_max(x, keepdims=False))
    x = bits(F16, 0x3C00, 0xFD01, 0x4000)
    report("np.max([1, -sNaN 0xfd01, 2]) float16", np.max(x),
           reference.reduce_max(x, keepdims=False))
    x = bits(BF16, 0x3F80, 0xFF81, 0x4000)
    report("np.max([1, -sNaN 0xff81, 2]) bfloat16", np.max(x),
           reference.reduce_max(x, keepdims=False))
    x = bits(F64, 0x3FF0_0000_0000_0000, 0xFFF0_0000_0000_0001)
    report("np.max([1, -sNaN 0xfff0000000000001]) float64", np.max(x),
           reference.reduce_max(x, keepdims=False))

    print("\n# onnxruntime, Max (opset 13)")
    for dtype in (F16, BF16, F32, F64):
        name = np.dtype(dtype).name
        p, n = np.array([0.0, 0.0], dtype), np.array([-0.0, -0.0], dtype)
        report(f"Max(+0, -0) {name}", lambda: run_ort("Max", [p, n], 13), reference.max(p, n))
        report(f"Max(-0, +0) {name}", lambda: run_ort("Max", [n, p], 13), reference.max(n, p))
        scalar_n = np.array(-0.0, dtype)
        report(f"Max(+0[2], -0 rank 0) {name}", lambda: run_ort("Max", [p, scalar_n], 13),
               reference.max(p, scalar_n))
        report(f"Max(-0 rank 0, +0[2]) {name}", lambda: run_ort("Max", [scalar_n, p], 13),
               reference.max(scalar_n, p))
        report(f"Max(-0, +0, -0) {name}", lambda: run_ort("Max", [n, p, n], 13),
               reference.max(n, p, n))
    for label, pattern in f32_nans.items():
        nan, one = bits(F32, pattern), np.array([1.0], F32)
        report(f"Max({label}, 1) float32", lambda: run_ort("Max", [nan, one], 13),
               reference.max(nan, one))
        report(f"Max(1, {label}) float32", lambda: run_ort("Max", [one, nan], 13),
               reference.max(one, nan))
        report(f"Max({label}) one input, float32", lambda: run_ort("Max", [nan], 13),
               reference.max(nan))

    print("\n# onnxruntime, ReduceMax (opset 13 axes attribute; 18 for empty sets; 20 for bool)")
    for label, pattern in {"qNaN": 0x7FC0_0000, **f32_nans}.items():
        for position in range(3):
            values = [0x3F80_0000, 0x4000_0000, 0x4040_0000]   # 1, 2, 3
            values[position] = pattern
            x = bits(F32, *values)
            report(f"ReduceMax({label} at position {position} of 3) float32",
                   lambda: run_ort("ReduceMax", [x], 13, keepdims=0),
                   reference.reduce_max(x, keepdims=False))
    x = bits(F32, *([0x3F80_0000] * 20 + [0x7FC0_0000] + [0x3F80_0000] * 20))
    report("ReduceMax(NaN at position 20 of 41) float32",
           lambda: run_ort("ReduceMax", [x], 13, keepdims=0),
           reference.reduce_max(x, keepdims=False))
    for dtype in (F16, F64):
        for values in ([np.nan, 1.0, 2.0], [1.0, np.nan, 2.0]):
            x = np.array(values, dtype)
            report(f"ReduceMax({values}) {np.dtype(dtype).name}",
                   lambda: run_ort("ReduceMax", [x], 13, keepdims=0),
                   reference.reduce_max(x, keepdims=False))
    for dtype in (F16, F32, F64):
        name = np.dtype(dtype).name
        for order in ([-0.0, 0.0], [0.0, -0.0]):
            x = np.array(order, dtype)
            report(f"ReduceMax({order}) {name}",
                   lambda: run_ort("ReduceMax", [x], 13, keepdims=0),
                   reference.reduce_max(x, keepdims=False))
    empty = np.zeros((2, 0), F32)
    report("ReduceMax(2x0, axes=[1]) float32, opset 18", lambda: run_ort_with_axes(empty, [1], 18),
           reference.reduce_max(empty, axes=[1]))
    booleans = np.array([[True, False], [False, False]])
    report("ReduceMax(bool 2x2, axes=[1]) opset 20", lambda: run_ort_with_axes(booleans, [1], 20),
           reference.reduce_max(booleans, axes=[1]))
    x16 = np.array([-3, 7], np.int16)
    report("ReduceMax(int16) opset 20", lambda: run_ort_with_axes(x16, [0], 20),
           reference.reduce_max(x16, axes=[0]))

    print("\n# onnxruntime, GlobalMaxPool (opset 22)")
    for dtype in (F16, BF16, F32, F64):
        name = np.dtype(dtype).name
        for values in ([1.0, np.nan, 2.0], [np.nan, 1.0, 2.0], [np.nan, np.nan, np.nan],
                       [-np.inf, -np.inf, -np.inf], [-0.0, 0.0, -0.0], [-0.0, -0.0, -0.0]):
            x = np.array(values, dtype).reshape(1, 1, 3)
            report(f"GlobalMaxPool({values}) {name}",
                   lambda: run_ort("GlobalMaxPool", [x], 22), reference.global_max_pool(x))
    x = np.array([1.0, np.nan, 2.0], F64).reshape(1, 1, 3)
    report("GlobalMaxPool([1.0, nan, 2.0]) float64, opset 1",
           lambda: run_ort("GlobalMaxPool", [x], 1), reference.global_max_pool(x))

    print("\n# ±0 ties against length: how many of n results are -0 (contract: 0 of n)")
    for dtype in (F16, BF16, F32, F64):
        name = np.dtype(dtype).name
        for n in (1, 2, 7, 8, 1000):
            p, q = np.zeros(n, dtype), np.full(n, -0.0, dtype)
            counts = [f"np.maximum(+0,-0) {np.signbit(np.maximum(p, q)).sum()}",
                      f"np.maximum(-0,+0) {np.signbit(np.maximum(q, p)).sum()}"]
            if dtype is not BF16:
                counts += [f"ort Max(+0,-0) {np.signbit(run_ort('Max', [p, q], 13)).sum()}",
                           f"ort Max(-0,+0) {np.signbit(run_ort('Max', [q, p], 13)).sum()}"]
            print(f"      {name:8s} n={n:<5d} " + ", ".join(counts))

    print("\n# onnx.reference, GlobalMaxPool (opset 22)")
    rng = np.random.default_rng(0)
    for shape in ((1, 2, 3), (1, 2, 3, 4), (1, 2, 2, 3, 2)):
        x = rng.integers(-50, 50, size=shape).astype(F32)
        report(f"onnx.reference GlobalMaxPool shape {shape}",
               lambda: run_onnx_reference("GlobalMaxPool", [x], 22), reference.global_max_pool(x))


def run_ort_with_axes(data, axes, opset):
    """ReduceMax with axes as an input (opset >= 18)."""
    inputs = [("x0", data), ("axes", np.array(axes, np.int64))]
    values = [helper.make_tensor_value_info("x0", ONNX_TYPE[data.dtype], data.shape),
              helper.make_tensor_value_info("axes", TensorProto.INT64, [len(axes)])]
    output = helper.make_tensor_value_info("y", ONNX_TYPE[data.dtype], None)
    node = helper.make_node("ReduceMax", ["x0", "axes"], ["y"])
    graph = helper.make_graph([node], "ReduceMax", values, [output])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                   ir_version=10)
    session = ort.InferenceSession(onnx_model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, dict(inputs))[0]


if __name__ == "__main__":
    main()
