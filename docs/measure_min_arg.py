"""Measure where numpy, onnxruntime, onnx.reference and PyTorch differ from the maxaccel contract
on Min, ReduceMin, ArgMax and ArgMin.

Not part of the package or the tests. Needs numpy and ml_dtypes; measures each of onnxruntime,
onnx.reference (the onnx package) and PyTorch that is installed, and says which it skipped.
PyTorch is not a maxaccel dependency:

    pip install torch          # optional; measured with 2.13.0 (CPU)
    python docs/measure_min_arg.py

Prints a Markdown table, one row per probe: the contract's result (``maxaccel.sim.reference``),
then each library's: ``=`` where it gives the same bits, its result where it differs, ``ERR``
with the exception's name where it refuses, ``-`` where it has no such operation (numpy and
PyTorch have no ``select_last_index``, PyTorch no one-input ``minimum``). Floats are shown as
bits in hex, indices as numbers. numpy is ``np.minimum`` (``np.minimum.reduce([x])`` for one
input), ``np.min``, ``np.argmax`` / ``np.argmin``; PyTorch ``torch.minimum``, ``torch.amin``,
``torch.argmax`` / ``torch.argmin``; onnxruntime (CPU) and onnx.reference run one-node models:
Min-13, ReduceMin-18 (20 for bool), ArgMax / ArgMin-13. The results are recorded in
docs/semantics.md section 7.
"""

import importlib
import importlib.util
import platform
import warnings

import ml_dtypes
import numpy as np

from maxaccel.sim import reference

F16, BF16, F32, F64 = np.float16, ml_dtypes.bfloat16, np.float32, np.float64
FLOATS = (F16, BF16, F32, F64)


def optional(module):
    """The module if it is installed, else None (a library not installed is skipped)."""
    return importlib.import_module(module) if importlib.util.find_spec(module) else None


ort = optional("onnxruntime")
onnx = optional("onnx")
torch = optional("torch")


def bits(dtype, *patterns):
    return np.array(patterns, dtype=f"u{np.dtype(dtype).itemsize}").view(dtype)


def show(array):
    """Bits in hex for floats, numbers for integers and bool; ``;`` between elements."""
    array = np.asarray(array)
    if array.dtype.kind in "iub":
        return "[" + " ".join(str(v) for v in array.reshape(-1).tolist()) + "]"
    view = array.view(f"u{array.dtype.itemsize}").reshape(-1)
    return "[" + " ".join(f"{int(v):#0{2 + 2 * array.dtype.itemsize}x}" for v in view) + "]"


# --- one operation, five ways ---------------------------------------------------------------------


def contract(op, arrays, attributes):
    if op == "Min":
        return reference.min(*arrays)
    if op == "ReduceMin":
        return reference.reduce_min(arrays[0], attributes.get("axes"),
                                    attributes.get("keepdims", 1))
    arg = reference.arg_max if op == "ArgMax" else reference.arg_min
    return arg(arrays[0], attributes.get("axis", 0), attributes.get("keepdims", 1),
               attributes.get("select_last_index", 0))


def with_numpy(op, arrays, attributes):
    if op == "Min":
        if len(arrays) == 1:
            return np.minimum.reduce([arrays[0]])
        result = arrays[0]
        for other in arrays[1:]:
            result = np.minimum(result, other)
        return result
    if op == "ReduceMin":
        axes = attributes.get("axes")
        return np.min(arrays[0], axis=None if axes is None else tuple(axes),
                      keepdims=bool(attributes.get("keepdims", 1)))
    if attributes.get("select_last_index"):
        return None
    function = np.argmax if op == "ArgMax" else np.argmin
    return function(arrays[0], axis=attributes.get("axis", 0),
                    keepdims=bool(attributes.get("keepdims", 1)))


def onnx_model(op, arrays, attributes):
    """A one-node model: Min-13, ReduceMin-18 (axes an input; 20 for bool), ArgMax/ArgMin-13."""
    from onnx import TensorProto, helper
    element = helper.np_dtype_to_tensor_dtype(np.dtype(arrays[0].dtype))
    names = [f"x{i}" for i in range(len(arrays))]
    inputs = [helper.make_tensor_value_info(n, element, a.shape) for n, a in zip(names, arrays)]
    feeds = dict(zip(names, arrays))
    attributes = dict(attributes)
    opset = 13
    if op == "ReduceMin":
        opset = 20 if arrays[0].dtype == np.bool_ else 18
        axes = attributes.pop("axes", None)
        if axes is not None:
            names.append("axes")
            feeds["axes"] = np.array(axes, np.int64)
            inputs.append(helper.make_tensor_value_info("axes", TensorProto.INT64, [len(axes)]))
    out_element = TensorProto.INT64 if op.startswith("Arg") else element
    output = helper.make_tensor_value_info("y", out_element, None)
    node = helper.make_node(op, names, ["y"], **attributes)
    graph = helper.make_graph([node], op, inputs, [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=10)
    return model, feeds


def with_onnxruntime(op, arrays, attributes):
    model, feeds = onnx_model(op, arrays, attributes)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def with_onnx_reference(op, arrays, attributes):
    from onnx.reference import ReferenceEvaluator
    model, feeds = onnx_model(op, arrays, attributes)
    return ReferenceEvaluator(model).run(None, feeds)[0]


TORCH_VIEWS = {"bfloat16": ("int16", "bfloat16"), "uint16": ("int16", "uint16"),
               "uint32": ("int32", "uint32"), "uint64": ("int64", "uint64")}


def to_torch(array):
    """A torch tensor with the same bits (through a signed view where torch.from_numpy has
    no such dtype)."""
    name = np.dtype(array.dtype).name
    if name in TORCH_VIEWS:
        signed, target = TORCH_VIEWS[name]
        return torch.from_numpy(np.ascontiguousarray(array).view(signed)).view(
            getattr(torch, target))
    return torch.from_numpy(np.ascontiguousarray(array))


def from_torch(tensor, dtype):
    name = np.dtype(dtype).name
    if name in TORCH_VIEWS and str(tensor.dtype) == f"torch.{TORCH_VIEWS[name][1]}":
        return tensor.view(getattr(torch, TORCH_VIEWS[name][0])).numpy().view(dtype)
    return tensor.numpy()


def with_torch(op, arrays, attributes):
    tensors = [to_torch(a) for a in arrays]
    if op == "Min":
        if len(tensors) == 1:
            return None   # torch.minimum takes two tensors; there is no one-input form
        result = tensors[0]
        for other in tensors[1:]:
            result = torch.minimum(result, other)
        return from_torch(result, arrays[0].dtype)
    if op == "ReduceMin":
        axes = attributes.get("axes")
        dim = tuple(range(arrays[0].ndim)) if axes is None else tuple(axes)
        result = torch.amin(tensors[0], dim=dim, keepdim=bool(attributes.get("keepdims", 1)))
        return from_torch(result, arrays[0].dtype)
    if attributes.get("select_last_index"):
        return None
    function = torch.argmax if op == "ArgMax" else torch.argmin
    return function(tensors[0], dim=attributes.get("axis", 0),
                    keepdim=bool(attributes.get("keepdims", 1))).numpy()


LIBRARIES = {
    "numpy": with_numpy,
    "onnxruntime": with_onnxruntime if ort else None,
    "onnx.reference": with_onnx_reference if onnx else None,
    "PyTorch": with_torch if torch else None,
}


# --- the probes ---------------------------------------------------------------------------------


def probes():
    """(label, op, arrays, attributes) for every edge case measured."""
    cases = []
    for dtype in FLOATS:
        name = np.dtype(dtype).name
        p, n = np.array([0.0], dtype), np.array([-0.0], dtype)
        cases += [(f"Min(+0, -0) {name}", "Min", [p, n], {}),
                  (f"Min(-0, +0) {name}", "Min", [n, p], {})]
        for order in ([0.0, -0.0], [-0.0, 0.0]):
            x = np.array(order, dtype)
            cases.append((f"ReduceMin({order}) {name}", "ReduceMin", [x], {"keepdims": 0}))
        for values in ([np.nan, 1.0, 2.0], [1.0, np.nan, 2.0], [1.0, 2.0, np.nan]):
            x = np.array(values, dtype)
            cases.append((f"ReduceMin({values}) {name}", "ReduceMin", [x], {"keepdims": 0}))
        cases.append((f"Min([1, NaN], [NaN, 1]) {name}", "Min",
                      [np.array([1.0, np.nan], dtype), np.array([np.nan, 1.0], dtype)], {}))
    f32_nans = {"sNaN 0x7f800001": 0x7F80_0001, "-qNaN 0xffc00123": 0xFFC0_0123}
    for label, pattern in f32_nans.items():
        nan, one = bits(F32, pattern), np.array([1.0], F32)
        cases += [(f"Min({label}, 1) float32", "Min", [nan, one], {}),
                  (f"Min(1, {label}) float32", "Min", [one, nan], {}),
                  (f"Min({label}) one input, float32", "Min", [nan], {}),
                  (f"ReduceMin([2, {label}, 1]) float32", "ReduceMin",
                   [bits(F32, 0x4000_0000, pattern, 0x3F80_0000)], {"keepdims": 0})]
    cases += [
        ("ReduceMin(2x0, axes=[1]) float32 (empty)", "ReduceMin", [np.zeros((2, 0), F32)],
         {"axes": [1]}),
        ("ReduceMin(0, axes=[0]) int8 (empty)", "ReduceMin", [np.zeros(0, np.int8)],
         {"axes": [0]}),
        ("ReduceMin(0, axes=[0]) uint64 (empty)", "ReduceMin", [np.zeros(0, np.uint64)],
         {"axes": [0]}),
        ("ReduceMin(0, axes=[0]) bool (empty)", "ReduceMin", [np.zeros(0, np.bool_)],
         {"axes": [0]}),
        ("ReduceMin([True, False]) bool", "ReduceMin", [np.array([True, False])],
         {"keepdims": 0}),
        ("Min(2^64-1, 2^64-2) uint64", "Min",
         [np.array([2**64 - 1], np.uint64), np.array([2**64 - 2], np.uint64)], {}),
        ("Min(-128, 127) int8", "Min", [np.array([-128], np.int8), np.array([127], np.int8)], {}),
    ]
    for op in ("ArgMax", "ArgMin"):
        for dtype in FLOATS:
            name = np.dtype(dtype).name
            for values in ([np.nan, 1.0, 2.0], [1.0, np.nan, 2.0], [1.0, 2.0, np.nan]):
                x = np.array(values, dtype)
                cases.append((f"{op}({values}) {name}", op, [x], {"keepdims": 0}))
            two = np.array([1.0, np.nan, 3.0, np.nan, 0.5], dtype)
            for last in (0, 1):
                cases.append((f"{op}([1, NaN, 3, NaN, 0.5], last={last}) {name}", op, [two],
                              {"keepdims": 0, "select_last_index": last}))
            for order in ([0.0, -0.0, 0.0, -0.0], [-0.0, 0.0, -0.0, 0.0]):
                x = np.array(order, dtype)
                for last in (0, 1):
                    cases.append((f"{op}({order}, last={last}) {name}", op, [x],
                                  {"keepdims": 0, "select_last_index": last}))
        payload = bits(F32, 0x3F80_0000, 0xFFC0_0123, 0x4000_0000, 0x7F80_0001)
        for last in (0, 1):
            cases.append((f"{op}([1, -qNaN 0xffc00123, 2, sNaN 0x7f800001], last={last}) float32",
                          op, [payload], {"keepdims": 0, "select_last_index": last}))
        for last in (0, 1):
            cases += [
                (f"{op}([3, 1, 3, 1], last={last}) int32", op,
                 [np.array([3, 1, 3, 1], np.int32)], {"keepdims": 0, "select_last_index": last}),
                (f"{op}([2^64-2, 2^64-1, 2^64-2, 2^64-1], last={last}) uint64", op,
                 [np.array([2**64 - 2, 2**64 - 1, 2**64 - 2, 2**64 - 1], np.uint64)],
                 {"keepdims": 0, "select_last_index": last}),
                (f"{op}([-128, 127, -128, 127], last={last}) int8", op,
                 [np.array([-128, 127, -128, 127], np.int8)],
                 {"keepdims": 0, "select_last_index": last}),
            ]
    return cases


def measure(function, op, arrays, attributes, want):
    """``=``, the differing result, ``ERR name`` or ``-`` (no such operation)."""
    try:
        got = function(op, [a.copy() for a in arrays], attributes)
    except Exception as error:   # noqa: BLE001 - a refusal is a result too
        return f"ERR {type(error).__name__}", "err"
    if got is None:
        return "-", "none"
    got = np.asarray(got)
    if op.startswith("Arg"):
        got = got.astype(np.int64)
    same = got.shape == want.shape and got.dtype == want.dtype and show(got) == show(want)
    return ("=" if same else show(got) + ("" if got.shape == want.shape else f" {got.shape}"),
            "same" if same else "diff")


def main():
    versions = [f"numpy {np.__version__}", f"ml_dtypes {ml_dtypes.__version__}"]
    for label, module in (("onnx", onnx), ("onnxruntime", ort), ("torch", torch)):
        versions.append(f"{label} {module.__version__}" if module else f"{label} NOT INSTALLED "
                        "(skipped)")
    print(", ".join(versions) + f", {platform.machine()} Python {platform.python_version()}\n")
    warnings.simplefilter("ignore")   # numpy's bfloat16 comparisons warn on NaN
    if ort:
        ort.set_default_logger_severity(4)   # its refusals are in the table
    measured = {name: function for name, function in LIBRARIES.items() if function}
    print("| probe | contract | " + " | ".join(measured) + " |")
    print("|---|---|" + "---|" * len(measured))
    tally = {name: {"same": 0, "diff": 0, "err": 0, "none": 0} for name in measured}
    for label, op, arrays, attributes in probes():
        want = contract(op, arrays, attributes)
        cells = []
        for name, function in measured.items():
            cell, verdict = measure(function, op, arrays, attributes, want)
            tally[name][verdict] += 1
            cells.append(cell)
        print(f"| {label} | {show(want)} | " + " | ".join(cells) + " |")
    print()
    for name, counts in tally.items():
        print(f"{name}: the contract's bits on {counts['same']} probes, other bits on "
              f"{counts['diff']}, refused {counts['err']}, no such operation {counts['none']}")
    for name, function in LIBRARIES.items():
        if function is None:
            print(f"{name}: not installed, skipped")
    print("\nArgMax over an empty axis (2x0, axis=1), which the contract refuses (ValueError):")
    empty = np.zeros((2, 0), F32)
    for name, function in measured.items():
        cell, _ = measure(function, "ArgMax", [empty], {"axis": 1}, np.zeros((2, 1), np.int64))
        print(f"  {name}: {cell if cell.startswith('ERR') else 'returns ' + cell}")


if __name__ == "__main__":
    main()
