"""Run a whole ONNX model with its Max, ReduceMax, GlobalMaxPool, MaxPool, Min, ReduceMin,
ArgMax and ArgMin nodes on a maxaccel board.

:class:`OffloadSession` is a drop-in for onnxruntime's ``InferenceSession``: swap the
constructor (and give a ``device``), keep the rest of the script::

    from maxaccel.host import open_device, OffloadSession
    with open_device("sim") as dev:
        session = OffloadSession("model.onnx", device=dev)   # was onnxruntime.InferenceSession
        outputs = session.run(None, {"x": x})
        session.last_run    # [(node name, op_type, "device" | "onnxruntime" | ...), ...]
        session.last_steps  # [StepTiming(name, where, nodes, seconds), ...]

At creation the graph is split once (:mod:`maxaccel.host.partition`) into device steps and the
fewest CPU partitions the data dependencies allow. Where it can (the CPU provider, no subgraph
step, every device step's types known, and a C compiler to build the operators once), the
model then runs as *one* onnxruntime ``InferenceSession`` whose device steps are custom
operators calling the device (:mod:`maxaccel.host.device_ops`): one entry into onnxruntime a
run, the device steps' inputs read in place. Otherwise each partition is one onnxruntime
``InferenceSession``, created once and reused, and :meth:`OffloadSession.run` runs the steps in
order, values passing between them as the numpy arrays onnxruntime and the device return. Either
way the sessions get the user's ``SessionOptions`` and providers; the partitions' thread pools
sleep between hand-overs (unless the caller lets them spin), the one session's pool does what
onnxruntime's default does.

Where each node runs (the ``where`` of :attr:`~OffloadSession.placements`):

``"device"``
    Every opset version of Max (1, 6, 8, 12, 13), ReduceMax (1, 11, 12, 13, 18, 20),
    GlobalMaxPool (1, 22), Min (1, 6, 8, 12, 13), ReduceMin (1, 11, 12, 13, 18, 20), ArgMax
    and ArgMin (1, 11, 12, 13) of the default domain, with the contract's bits
    (``docs/semantics.md``; Min and ReduceMin are IEEE 754-2019 ``minimum``, section 7;
    ArgMax and ArgMin take a NaN as the extreme).
    A Transpose feeding only a GlobalMaxPool or a ReduceMax or ReduceMin over known axes runs
    with it: the
    reduction is done on the untransposed tensor, so a channels-last (NHWC) tensor reaches the
    device's channels-last pooling unit without a transpose on the host or the link.
``"golden"``
    A max-family node whose element type the device does not support: the golden model
    (``maxaccel.sim.reference``) on the CPU, the same bits.
``"onnxruntime"``
    Every other node, in CPU partitions: onnxruntime's bits.
``"onnx.reference"``
    A node whose subgraphs (If, Loop, Scan) hold max-family nodes: ``onnx.reference`` runs it,
    with those nodes sent to the device (or the golden model), so they keep the contract. Also a
    CPU partition onnxruntime cannot load (an operator it lacks): then the reason is in
    :attr:`OffloadSession.fallbacks`.

Model-local functions holding max-family nodes are inlined first, so their nodes run on the
device like any other. Windowed MaxPool (1, 8, 10, 11, 12, 22) runs on the device too,
through ``Device.max_pool`` (``OFFLOADED`` in :mod:`maxaccel.host.partition`).

Max-1, Max-6, Min-1 and Min-6 require same-shape inputs; this session broadcasts them as
Max-8 and Min-8 do (a superset). Results differ from running the whole model on onnxruntime
only in max-family nodes and only for NaN and signed zeros (``docs/semantics.md``).

The package's modules, one idea each: :mod:`~maxaccel.host.offload.api` (the onnxruntime
API), :mod:`~maxaccel.host.offload.steps` (a max-family node as a device call),
:mod:`~maxaccel.host.offload.partitions` (a model run as partitions),
:mod:`~maxaccel.host.offload.one_session` (a model run as one session),
:mod:`~maxaccel.host.offload.runtime` (onnxruntime's sessions and options) and
:mod:`~maxaccel.host.offload.specs` (the values the API describes a model with).
"""

from maxaccel.host.offload.api import OffloadSession
from maxaccel.host.offload.runtime import NO_SPINNING, SPINNING, without_spinning
from maxaccel.host.offload.specs import ModelMetadata, StepTiming, TensorSpec, read_model
from maxaccel.host.offload.steps import DEVICE, GOLDEN, ONNX_REFERENCE, ONNXRUNTIME
from maxaccel.host.partition import OFFLOADED

__all__ = ["OffloadSession", "read_model", "TensorSpec", "ModelMetadata", "StepTiming", "OFFLOADED",
           "DEVICE", "GOLDEN", "ONNXRUNTIME", "ONNX_REFERENCE", "SPINNING", "NO_SPINNING",
           "without_spinning"]
