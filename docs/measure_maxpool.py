"""Measure where onnxruntime and onnx.reference differ from the maxaccel MaxPool contract.

Not part of the package or the tests. Needs numpy, onnx and onnxruntime:

    pip install onnxruntime        # not a maxaccel dependency
    python docs/measure_maxpool.py

Prints one line per corner probe (what onnxruntime, onnx.reference and the contract,
maxaccel.sim.reference.max_pool, give), then counts disagreements on a seeded corpus of random
NaN-free configurations. The results are recorded in docs/semantics.md, section "Windowed
MaxPool".
"""

import collections
import platform
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from maxaccel.contract.pooling import resolve_max_pool
from maxaccel.sim import reference

ONNX_TYPE = {"float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT,
             "float64": TensorProto.DOUBLE, "int8": TensorProto.INT8, "uint8": TensorProto.UINT8}


def model(x, opset=22, **attributes):
    names = ["y", "i"] if opset >= 8 else ["y"]
    node = helper.make_node("MaxPool", ["x"], names, **attributes)
    outputs = [helper.make_tensor_value_info("y", ONNX_TYPE[x.dtype.name], None),
               helper.make_tensor_value_info("i", TensorProto.INT64, None)][:len(names)]
    graph = helper.make_graph(
        [node], "maxpool", [helper.make_tensor_value_info("x", ONNX_TYPE[x.dtype.name],
                                                          list(x.shape))], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def run_ort(x, opset=22, **attributes):
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model(x, opset, **attributes).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def run_onnx_reference(x, **attributes):
    return ReferenceEvaluator(model(x, **attributes)).run(None, {"x": x})


def run_contract(x, **attributes):
    return reference.max_pool(x, **attributes, return_indices=True)


def show(result):
    if isinstance(result, Exception):
        return f"{type(result).__name__}: {str(result).splitlines()[0][-70:]}"
    y, i = (np.asarray(r) for r in result)
    bits = y.view(f"u{y.dtype.itemsize}").reshape(-1)
    values = " ".join(f"{v:g}" if not (y.dtype.kind == "f" and v == 0) else
                      ("-0" if b >> (8 * y.dtype.itemsize - 1) else "+0")
                      for v, b in zip(y.reshape(-1).tolist(), bits.tolist()))
    return f"y [{values}] i {i.reshape(-1).tolist()}"


def attempt(function, x, attributes):
    try:
        return function(x, **attributes)
    except Exception as error:   # noqa: BLE001 - a refusal is a result too
        return error


def same(a, b):
    if isinstance(a, Exception) or isinstance(b, Exception):
        return isinstance(a, Exception) and isinstance(b, Exception)
    (ya, ia), (yb, ib) = a, b
    ya, yb = np.asarray(ya), np.asarray(yb)
    return (ya.shape == yb.shape and np.array_equal(ya.view(f"u{ya.itemsize}"),
                                                   yb.view(f"u{yb.itemsize}"))
            and np.array_equal(ia, ib))


def probe(title, values, dtype=np.float32, **attributes):
    x = np.asarray(values, dtype=dtype)
    if x.ndim == 1:
        x = x.reshape(1, 1, -1)
    contract = attempt(run_contract, x, attributes)
    print(f"{title}  {attributes}")
    for name, function in (("onnxruntime", run_ort), ("onnx.reference", run_onnx_reference)):
        got = attempt(function, x, attributes)
        print(f"   {'same' if same(got, contract) else 'DIFF'} {name:15s} {show(got)}")
    print(f"        {'contract':15s} {show(contract)}")


def corpus(count, seed):
    """Random NaN-free float32 configurations with distinct values (no ties)."""
    rng = np.random.default_rng(seed)
    while count:
        rank = int(rng.integers(1, 4))
        attributes = {"kernel_shape": [int(k) for k in rng.integers(1, 4, rank)],
                      "strides": [int(s) for s in rng.integers(1, 4, rank)],
                      "dilations": [int(d) for d in rng.integers(1, 3, rank)],
                      "auto_pad": str(rng.choice(["NOTSET", "NOTSET", "VALID", "SAME_UPPER",
                                                  "SAME_LOWER"])),
                      "ceil_mode": int(rng.random() < 0.4),
                      "storage_order": int(rng.random() < 0.3)}
        if attributes["auto_pad"] == "NOTSET":
            attributes["pads"] = [int(p) for p in rng.integers(0, 3, 2 * rank)]
        shape = (1, 2) + tuple(int(n) for n in rng.integers(2, 8, rank))
        try:
            resolve_max_pool(shape, **attributes)
        except ValueError:
            continue
        x = (rng.permutation(int(np.prod(shape))) - 40).astype(np.float32).reshape(shape)
        yield x, attributes
        count -= 1


def why(x, attributes, got, contract):
    """The first feature of a configuration, or of the difference, that explains it."""
    geometry = resolve_max_pool(x.shape, **attributes)
    if isinstance(got, Exception):
        return f"error: {str(got).splitlines()[0][-48:]}"
    if geometry.has_empty_windows():
        return "a window of padding only"
    if attributes["auto_pad"].startswith("SAME") and any(d > 1 for d in attributes["dilations"]):
        return "SAME with dilation > 1"
    if attributes["auto_pad"].startswith("SAME") and any(
            a.extent < a.stride for a in geometry.axes):
        return "SAME with extent < stride"
    if attributes["auto_pad"] == "VALID" and attributes["ceil_mode"]:
        return "VALID with ceil_mode"
    if got[1] is None:
        return "no Indices output"
    for what, a, b in (("shape", np.shape(got[0]), contract[0].shape),
                       ("values", got[0], contract[0]), ("Indices", got[1], contract[1])):
        if not np.array_equal(a, b):
            return f"{what} ({attributes['auto_pad']})"
    return "other"


def main():
    print(f"numpy {np.__version__}, onnx {onnx.__version__}, onnxruntime {ort.__version__}, "
          f"{platform.machine()} {platform.python_version()}")
    warnings.simplefilter("ignore")
    f32 = np.float32
    probe("window of padding only", [1, 2], kernel_shape=[2], dilations=[3], pads=[1, 1])
    probe("right pad as long as the window (floor)", [3], kernel_shape=[1], pads=[0, 1])
    probe("SAME_UPPER extent 1 < stride 4", range(1, 8), kernel_shape=[1], strides=[4],
          auto_pad="SAME_UPPER")
    probe("SAME_LOWER extent 1 < stride 4", range(1, 8), kernel_shape=[1], strides=[4],
          auto_pad="SAME_LOWER")
    probe("SAME_LOWER odd padding", [1, 5, 2, 4, 3], kernel_shape=[2], auto_pad="SAME_LOWER")
    probe("SAME_UPPER dilation 2", range(1, 11), kernel_shape=[3], dilations=[2],
          auto_pad="SAME_UPPER")
    probe("VALID with ceil_mode", range(1, 6), kernel_shape=[2], strides=[2], auto_pad="VALID",
          ceil_mode=1)
    probe("ceil_mode, last window would start in the right padding", [1, 2],
          kernel_shape=[2], strides=[2], pads=[0, 1], ceil_mode=1)
    probe("ceil_mode, window longer than the padded input", [1, 2], kernel_shape=[3],
          strides=[2], ceil_mode=1)
    probe("1-D pads, stride and dilation 1", [5, 1, 2, 3], kernel_shape=[2], pads=[1, 0])
    probe("2-D pads [top, left, bottom, right], stride 1",
          np.arange(12, dtype=f32).reshape(1, 1, 3, 4), kernel_shape=[2, 2], pads=[1, 0, 0, 1])
    probe("all -inf window", [-np.inf] * 4, kernel_shape=[2], strides=[2])
    probe("NaN second in window", [1, np.nan, 3, 2], kernel_shape=[2])
    probe("signed zeros", [-0.0, 0.0, 0.0, -0.0], kernel_shape=[2])
    probe("int8", [-128, 5, 127, -1], dtype=np.int8, kernel_shape=[2], strides=[2])
    probe("uint8 stride and dilation 1", [0, 255, 7], dtype=np.uint8, kernel_shape=[2])

    count = 400
    differs = {"onnxruntime": collections.Counter(), "onnx.reference": collections.Counter()}
    older = collections.Counter()   # (opset, same) where onnxruntime-22 agrees
    for x, attributes in corpus(count, seed=17):
        contract = run_contract(x, **attributes)
        simple = all(v == 1 for v in attributes["strides"] + attributes["dilations"])
        for name, function in (("onnxruntime", run_ort),
                               ("onnx.reference", run_onnx_reference)):
            got = attempt(function, x, attributes)
            if not same(got, contract):
                reason = why(x, attributes, got, contract)
                if name == "onnx.reference":   # it takes a second code path in this case
                    reason += ", stride and dilation 1" if simple else ""
                differs[name][reason] += 1
            elif name == "onnxruntime":
                for opset in (1, 8, 10, 11, 12):
                    if opset < 10 and (attributes["ceil_mode"] or attributes["dilations"] != [1]
                                       * len(attributes["dilations"])):
                        continue
                    legacy = dict(attributes)
                    if opset < 10:
                        del legacy["ceil_mode"], legacy["dilations"]
                    if opset < 8:
                        del legacy["storage_order"]
                    older_got = attempt(lambda x, **a: run_ort(x, opset, **a), x, legacy)
                    if opset < 8 and not isinstance(older_got, Exception):
                        older_got = (older_got[0], contract[1])
                    older[opset, same(older_got, contract)] += 1
    for opset in (1, 8, 10, 11, 12):
        print(f"onnxruntime at opset {opset}: {older[opset, True]} of "
              f"{older[opset, True] + older[opset, False]} configurations where opset 22 agrees "
              f"with the contract agree too (opset 1 without Indices; 1 and 8 without dilations "
              f"and ceil_mode)")
    for name, counter in differs.items():
        print(f"{name}: {sum(counter.values())} of {count} NaN-free float32 configurations "
              f"differ from the contract")
        for reason, n in counter.most_common():
            print(f"   {n:4d}  {reason}")


if __name__ == "__main__":
    main()
