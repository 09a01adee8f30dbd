"""Run the whole ONNX backend node suite of the installed onnx through onnxruntime and through
maxaccel's backend, and count the cases each passes.

Not part of the package or the tests (CI runs the max family and a sample of the rest:
``tests/test_onnx_backend.py``). Each node case (``onnx.backend.test.loader``: the generated
cases, data sets included) is run by a plain ``onnxruntime.InferenceSession`` (CPU) and by
``maxaccel.onnx_backend`` (an ``OffloadSession`` on the golden model), its outputs compared by
the harness' own ``assert_similar_outputs`` with the case's tolerance::

    python docs/measure_backend_suite.py            # a few minutes on one core

Prints both counts, the cases onnxruntime passes and the backend does not (with the first line
of the error), and the count of cases the backend passes that onnxruntime cannot run.
"""

import sys
import warnings

import numpy as np
import onnx
import onnxruntime
from onnx.backend.test.loader import load_model_tests
from onnx.backend.test.runner import Runner

import maxaccel.onnx_backend as backend
from maxaccel.host.partition import MAX_IR_VERSION


def _feeds(model, inputs):
    initialized = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initialized]
    return dict(zip(names, [onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto)
                            else x for x in inputs]))


def _outputs(values):
    return [onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x
            for x in values]


def passes(run, case):
    """None if ``run(model, feeds)`` gives every data set's outputs within the case's
    tolerance, else the first line of what went wrong."""
    try:
        for inputs, outputs in case.data_sets:
            got = run(case.model, _feeds(case.model, inputs))
            Runner.assert_similar_outputs(_outputs(outputs), got, case.rtol, case.atol)
    except Exception as error:  # noqa: BLE001 (any failure is the case's result)
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0][:160]}" \
            if str(error).strip() else type(error).__name__
    return None


def with_onnxruntime(model, feeds):
    if model.ir_version > MAX_IR_VERSION:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.ir_version = MAX_IR_VERSION
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    # numpy scalars as 0-d arrays, as onnxruntime's own backend gives them
    return session.run(None, {name: np.asarray(value) if isinstance(value, np.generic)
                              else value for name, value in feeds.items()})


def with_maxaccel(model, feeds):
    return backend.prepare(model).run(feeds)


def main():
    onnxruntime.set_default_logger_severity(4)
    warnings.simplefilter("ignore")
    cases = sorted(load_model_tests(kind="node"), key=lambda c: c.name)
    theirs = mine = 0
    missed, beyond = [], 0
    for number, case in enumerate(cases, 1):
        ort_error = passes(with_onnxruntime, case)
        our_error = passes(with_maxaccel, case)
        theirs += ort_error is None
        mine += our_error is None
        if ort_error is None and our_error is not None:
            missed.append((case.name, our_error))
        beyond += ort_error is not None and our_error is None
        if number % 200 == 0:
            print(f"... {number} of {len(cases)}", file=sys.stderr, flush=True)
    print(f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, numpy "
          f"{np.__version__}: {len(cases)} node cases")
    print(f"onnxruntime passes {theirs}; maxaccel.onnx_backend (golden model) passes {mine}")
    print(f"passed by onnxruntime, not by maxaccel: {len(missed)}")
    for name, error in missed:
        print(f"  {name}: {error}")
    print(f"passed by maxaccel, not run by onnxruntime: {beyond}")


if __name__ == "__main__":
    main()
