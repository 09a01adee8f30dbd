"""onnxruntime custom operators for an :class:`~maxaccel.host.offload.OffloadSession`'s device
steps, so that a model runs as *one* onnxruntime session (``docs/offload.md``, "One session").

Each device step becomes one node of a domain of its own (``ai.maxaccel.device.N``), with the
step's inputs and outputs and an attribute ``key``. Its kernel is C (``device_ops.c``, built
here once with the system C compiler and the interpreter's headers, cached beside the compiled
boards): it hands the inputs to one Python call as memoryviews over onnxruntime's buffers, no
copy (the same objects again while the tensors lie where they lay), with a ``room(index,
dims)`` function that hands out an output's buffer as a writable memoryview (the same object
again while the tensor lies where it lay), and copies each result the call returns into the
output onnxruntime allocates; a result of None is an output the call wrote itself, through its
room (a pool on NCHWc tensors whose device writes into ``out``: the reply lands where
onnxruntime wants it). The call, which its node's key resolves to once
(:func:`_resolve`), runs the step as the partitioned session does
(``DeviceCalls.step_call`` in :mod:`maxaccel.host.offload.steps`; a pool on NCHWc tensors
through :func:`blocked_pool`). Between
two device steps the model's other nodes run inside the same ``Run``, so the session enters
onnxruntime once a run, not once per partition.

onnxruntime's Python module carries its own copy of onnxruntime; the operators are made with the
``OrtApi`` it hands to the library's ``RegisterCustomOps`` when
``SessionOptions.register_custom_ops_library`` loads it. The ``OrtApi`` slot numbers and the
``OrtCustomOp`` layout are onnxruntime's C ABI (append-only; checked against 1.32.0); the slot
numbers and the ``OrtApi`` version the kernels ask for are ``device_ops.c``'s, read from it
here (:data:`API_VERSION`, :data:`SLOTS`), and the running onnxruntime is checked against that
version before the library is loaded.
"""

import ctypes
import hashlib
import itertools
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import weakref

import numpy as np
from onnx import helper

__all__ = ["DOMAIN", "NCHWC_DOMAIN", "OperatorsUnavailable", "API_VERSION", "SLOTS",
           "check_onnxruntime", "library", "register", "step_key",
           "one_model", "with_domain", "nchwc_block", "with_blocked_pools", "element_dtype",
           "arrays_of", "kept", "blocked_pool", "exportable"]

#: The operators' domain; each registration gets ``DOMAIN.N`` (a ``SessionOptions`` may carry
#: several, one per session made from it).
DOMAIN = "ai.maxaccel.device"
#: onnxruntime's domain of its CPU provider's NCHWc operators, which its ``NchwcTransformer``
#: puts in place of Conv, MaxPool and GlobalMaxPool at ``ORT_ENABLE_LAYOUT`` and above.
NCHWC_DOMAIN = "com.microsoft.nchwc"
#: The device steps that can take onnxruntime's NCHWc tensors as they are
#: (:func:`with_blocked_pools`).
BLOCKED_POOLS = ("MaxPool", "GlobalMaxPool")
#: The kernels' source, shipped with the package.
SOURCE = pathlib.Path(__file__).with_name("device_ops.c")


class OperatorsUnavailable(RuntimeError):
    """The operators' library cannot be built or loaded here."""


def _source_facts(text):
    """``(API_VERSION, {slot name: number})`` as ``device_ops.c`` defines them."""
    version = int(re.search(r"#define API_VERSION (\d+)", text).group(1))
    enum = re.search(r"enum \{([^}]*)\};", text).group(1)
    return version, {name: int(number) for name, number in re.findall(r"(\w+) = (\d+)", enum)}


#: The ``OrtApi`` version the kernels ask onnxruntime for, and its slots they and the
#: registration call (``device_ops.c``'s, read from it).
API_VERSION, SLOTS = _source_facts(SOURCE.read_text())

_P, _SIZE = ctypes.c_void_p, ctypes.c_size_t
_PP = ctypes.POINTER(ctypes.c_void_p)

#: The ``OrtApi`` functions called from Python (when the operators are registered): slot,
#: result type, argument types.
_SLOTS = {
    "CreateCustomOpDomain": (SLOTS["CREATE_CUSTOM_OP_DOMAIN"], _P, (ctypes.c_char_p, _PP)),
    "CustomOpDomain_Add": (SLOTS["CUSTOM_OP_DOMAIN_ADD"], _P, (_P, _P)),
    "AddCustomOpDomain": (SLOTS["ADD_CUSTOM_OP_DOMAIN"], _P, (_P, _P)),
    "GetErrorMessage": (SLOTS["ERROR_MESSAGE"], ctypes.c_char_p, (_P,)),
    "ReleaseStatus": (SLOTS["RELEASE_STATUS"], None, (_P,)),
}

#: ``OrtCustomOp``'s function pointers, in order after its ``uint32_t version``.
_OP_FIELDS = ("CreateKernel", "GetName", "GetExecutionProviderType", "GetInputType",
              "GetInputTypeCount", "GetOutputType", "GetOutputTypeCount", "KernelCompute",
              "KernelDestroy", "GetInputCharacteristic", "GetOutputCharacteristic",
              "GetInputMemoryType", "GetVariadicInputMinArity", "GetVariadicInputHomogeneity",
              "GetVariadicOutputMinArity", "GetVariadicOutputHomogeneity", "CreateKernelV2",
              "KernelComputeV2", "InferOutputShapeFn", "GetStartVersion", "GetEndVersion",
              "GetMayInplace", "ReleaseMayInplace", "GetAliasMap", "ReleaseAliasMap")
#: The version the operators declare: ``CreateKernelV2`` and ``KernelComputeV2`` (errors as
#: statuses) are read from 16 on, the shape-inference and opset-range functions from 17.
_OP_VERSION = 16


class _OrtCustomOp(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32)] + [(name, _P) for name in _OP_FIELDS]


_lock = threading.RLock()
_loaded = _loaded_path = None  # the library's ctypes handle and file, once loaded
_domains = itertools.count(1)
_keys = itertools.count(1)
_steps = {}               # key -> (weak reference to the session, its step index)
_pending = None           # (domain, {op_type: (input types, output types)}) being registered
_kept = []                # operators and callbacks onnxruntime points to: kept for the process
_dtypes = {}


def _compiler():
    for name in ([os.environ["CC"]] if os.environ.get("CC") else []) + ["cc", "gcc", "clang"]:
        found = shutil.which(name)
        if found:
            return found
    return None


def check_onnxruntime(version=None):
    """Refuse an onnxruntime (``version``, default the running one's ``__version__``) whose
    ``OrtApi`` is older than :data:`API_VERSION` (onnxruntime 1.N serves ``OrtApi`` N).

    Raises
    ------
    OperatorsUnavailable
        The version is too old, or not one this check can read.
    """
    if version is None:
        import onnxruntime
        version = onnxruntime.__version__
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None:
        raise OperatorsUnavailable(f"onnxruntime {version}: not a version the device operators "
                                   f"can check for OrtApi {API_VERSION}")
    major, minor = map(int, found.groups())
    if major == 1 and minor < API_VERSION:
        raise OperatorsUnavailable(f"onnxruntime {version} serves OrtApi {minor}; the device "
                                   f"operators need {API_VERSION} (onnxruntime 1.{API_VERSION} "
                                   f"or later)")


def library():
    """The path of the operators' shared library, built on first use (and cached per source,
    interpreter and machine in ``$MAXACCEL_CACHE_DIR/operators``).

    Raises
    ------
    OperatorsUnavailable
        No C compiler, no ``Python.h``, a cache directory that cannot be written, or the build
        failed (the reason says which).
    """
    try:
        return _library()
    except OSError as error:
        raise OperatorsUnavailable(f"cannot build the operators' library: {error}") from None


def _library():
    from maxaccel.sim.verilator import cache_dir
    source = SOURCE.read_bytes()
    include = sysconfig.get_paths()["include"]
    key = hashlib.sha256(b"\0".join([source, sys.version.encode(), include.encode(),
                                     platform.machine().encode()])).hexdigest()[:16]
    path = cache_dir().parent / "operators" / f"device_ops_{key}.so"
    with _lock:
        if path.exists():
            return str(path)
        compiler = _compiler()
        if compiler is None:
            raise OperatorsUnavailable("no C compiler (cc, gcc or clang) on PATH")
        if not os.path.isfile(os.path.join(include, "Python.h")):
            raise OperatorsUnavailable(f"no Python.h in {include} (Debian: apt install "
                                       f"python3-dev)")
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
            built = pathlib.Path(scratch) / path.name
            done = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-I", include,
                                   str(SOURCE), "-o", str(built)],
                                  capture_output=True, text=True)
            if done.returncode:
                raise OperatorsUnavailable(f"{compiler} could not build {SOURCE.name}: "
                                           f"{done.stderr.strip()[-2000:]}")
            os.replace(built, path)
    return str(path)


def _load():
    """The library's path, loaded once a process (its kernels call back into this module):
    later sessions register the same file, whatever the cache directory says then."""
    global _loaded, _loaded_path
    with _lock:
        if _loaded is None:
            check_onnxruntime()
            path = library()
            try:
                handle = ctypes.CDLL(path)
            except OSError as error:
                raise OperatorsUnavailable(f"cannot load {path}: {error}") from None
            handle.maxaccel_set_python.argtypes = [ctypes.py_object, ctypes.py_object]
            handle.maxaccel_set_python(_register, _resolve)
            _loaded, _loaded_path = handle, path
        return _loaded_path


def step_key(session, index):
    """A new key for ``session``'s device step ``index`` (the nodes' ``key`` attribute); the
    step is found through a weak reference, so the key does not keep the session alive."""
    with _lock:
        key = next(_keys)
        _steps[key] = (weakref.ref(session), index)
        weakref.finalize(session, _steps.pop, key, None)
    return key


def register(options, signatures):
    """Register operators on ``options`` (an ``onnxruntime.SessionOptions``, which is changed)
    for ``signatures``, ``{op_type: (input element types, output element types)}`` (ONNX
    ``TensorProto`` codes). Returns their domain (a new one each call).

    Raises
    ------
    OperatorsUnavailable
        The library cannot be built, loaded or registered (onnxruntime's reason included).
    """
    path = _load()
    with _lock:
        global _pending
        domain = f"{DOMAIN}.{next(_domains)}"
        _pending = (domain, signatures)
        try:
            options.register_custom_ops_library(path)
        except Exception as error:  # onnxruntime's exception types, one per status
            raise OperatorsUnavailable(f"onnxruntime does not register them: {error}") \
                from None
        finally:
            _pending = None
    return domain


def one_model(model, steps, types, key_of):
    """``model``'s graph with each device step one node of the operators' domain.

    Parameters
    ----------
    model : onnx.ModelProto
        The planned model (functions inlined).
    steps : list
        The plan's steps in run order, only ``CpuPartition`` and ``DeviceStep``.
    types : dict of str to int
        Element type of every value a device step reads or writes.
    key_of : callable(step index) -> int
        The ``key`` of each device step (:func:`step_key`).

    Returns
    -------
    (onnx.ModelProto, list, dict)
        The model (its device nodes in no domain yet: :func:`with_domain`), the device steps
        by index (the operators' arrays are the step's named inputs and outputs, in order),
        and the signatures.
    """
    from maxaccel.host.partition import CpuPartition
    nodes, device_steps, op_types = [], [], {}
    for step in steps:
        if isinstance(step, CpuPartition):
            nodes += [node for _, node in step.named_nodes]
            continue
        inputs = [name for name in step.inputs if name]
        outputs = [name for name in step.outputs if name]
        signature = (tuple(types[n] for n in inputs), tuple(types[n] for n in outputs))
        op_type = op_types.setdefault(signature, f"Step{len(op_types)}")
        nodes.append(helper.make_node(op_type, inputs, outputs, name=step.name,
                                      key=key_of(len(device_steps))))
        device_steps.append(step)
    graph = model.graph
    one = helper.make_model(
        helper.make_graph(nodes, graph.name, list(graph.input), list(graph.output),
                          list(graph.initializer), doc_string=graph.doc_string,
                          sparse_initializer=list(graph.sparse_initializer)),
        opset_imports=list(model.opset_import), functions=list(model.functions))
    one.ir_version = model.ir_version
    return one, device_steps, {op_type: signature for signature, op_type in op_types.items()}


def with_domain(model, domain, signatures):
    """``model`` (from :func:`one_model`) with its device nodes (``signatures``' op types, of
    the default domain there) in ``domain``, as registered (:func:`register`)."""
    for node in model.graph.node:
        if not node.domain and node.op_type in signatures:
            node.domain = domain
    model.opset_import.append(helper.make_opsetid(domain, 1))
    return model


_nchwc = []   # [block or None], once asked (nchwc_block)


def nchwc_block():
    """onnxruntime's NCHWc block ``B`` on this machine, or None where it has no NCHWc layout
    (a CPU without AVX2, or onnxruntime laying it out otherwise than below).

    At ``ORT_ENABLE_LAYOUT`` and above, onnxruntime's CPU provider keeps a tensor between its
    NCHWc operators as ``N x C' x H x W`` (``C`` padded with zeros to ``C'``, a multiple of
    ``B``) laid out in memory as ``N x C'/B x H x W x B``: ``N * C'/B`` channels-last images of
    ``B`` channels. Asked of onnxruntime once a process (its ``ReorderInput`` of a known
    tensor, the layout checked element by element).
    """
    with _lock:
        if not _nchwc:
            _nchwc.append(_probe_block())
        return _nchwc[0]


def _probe_block():
    import onnxruntime
    from onnx import TensorProto
    shape = [1, 4, 2, 3]
    graph = helper.make_graph(
        [helper.make_node("ReorderInput", ["x"], ["y"], domain=NCHWC_DOMAIN)], "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid(NCHWC_DOMAIN, 1)])
    model.ir_version = 8    # the oldest onnxruntime that has NCHWc reads it
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    x = np.arange(1, 25, dtype=np.float32).reshape(shape)
    try:
        y = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                         providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    except Exception:   # no NCHWc operators in this onnxruntime, or on this CPU
        return None
    block = y.shape[1] if y.ndim == 4 and y.shape[0] == 1 and y.shape[2:] == (2, 3) else 0
    if block < 4 or block % 4:
        return None
    expected = np.zeros((1, 1, 2, 3, block), np.float32)
    expected[..., :4] = x.transpose(0, 2, 3, 1)[:, np.newaxis]
    return block if np.array_equal(y.reshape(-1), expected.reshape(-1)) else None


def with_blocked_pools(model, steps, domain, optimized_by):
    """``model`` (from :func:`with_domain`) as onnxruntime optimizes it, its pool steps between
    onnxruntime's NCHWc nodes taking the NCHWc tensors (:func:`nchwc_block`) as they lie.

    onnxruntime runs a CPU model's float Convs in its NCHWc layout, and a MaxPool or
    GlobalMaxPool between them too; around a node it does not know, such as a device
    operator, it converts the tensor back and forth (``ReorderOutput``, ``ReorderInput``:
    megabytes a run on SqueezeNet). So the model is optimized with every pool step (a MaxPool
    without Indices, a GlobalMaxPool, no Transpose folded) as its own node, and each pool
    onnxruntime made an NCHWc node (named for its output, ``<output>_nchwc``) whose input an
    NCHWc node computes becomes the step's device operator again, on the NCHWc tensors. A
    pool whose input onnxruntime would reorder for it (a lone pool, or one after nodes it
    keeps in ONNX layout) gains nothing from the layout: the model is optimized again with
    that pool left an operator, until no such pool is left.

    Parameters
    ----------
    model : onnx.ModelProto
        The one model, its device operators in ``domain`` (in the order of ``steps``).
    steps : list of DeviceStep
        The device steps, by operator index.
    domain : str
        The operators' domain, as registered on the session's options.
    optimized_by : callable(onnx.ModelProto) -> onnx.ModelProto or None
        The model as the session's onnxruntime options optimize it (None if they do not load
        it).

    Returns
    -------
    (onnx.ModelProto, list)
        The model to load and each operator's NCHWc block, None for a step that takes
        the tensors as ONNX lays them out; ``model`` itself and no blocks where no pool step
        takes NCHWc tensors (or an optimized model is not as expected).
    """
    unchanged = model, [None] * len(steps)
    operators = [node for node in model.graph.node if node.domain == domain]
    pools = [i for i, step in enumerate(steps)
             if step.transpose is None and step.node.op_type in BLOCKED_POOLS
             and not any(step.node.output[1:])]
    block = nchwc_block() if pools and len(operators) == len(steps) else None
    if block is None:
        return unchanged
    while pools:
        probe = _copy(model)
        nodes = [node for node in probe.graph.node if node.domain == domain]
        for i in pools:
            nodes[i].CopyFrom(steps[i].node)
            nodes[i].name = operators[i].name
            nodes[i].input[0] = steps[i].inputs[0]  # a folded MaxPool's input
        optimized = optimized_by(probe)
        found = None if optimized is None else _pools_in(optimized, steps, pools, operators,
                                                          domain)
        if found is None:
            return unchanged
        reordered = {i for i, (node, nchwc) in found.items() if nchwc is None}
        if not reordered:
            break
        pools = [i for i in pools if i not in reordered]
    if not any(nchwc for _, nchwc in found.values()):
        return unchanged
    blocks = [None] * len(steps)
    for i, (node, nchwc) in found.items():
        inputs, outputs = list(node.input[:1]), list(node.output[:1])
        node.CopyFrom(operators[i])
        node.input[:], node.output[:] = inputs, outputs
        blocks[i] = block if nchwc else None
    _unshadow(optimized.graph, _names(optimized.graph))
    return optimized, blocks


def _pools_in(optimized, steps, pools, operators, domain):
    """Each pool step's node in ``optimized``: ``{step index: (node, nchwc)}``, ``nchwc``
    True for an NCHWc node whose input an NCHWc node computes, None for one whose input
    onnxruntime reorders for it, False for the pool left in ONNX layout; None if the model is
    not as expected (the other operators not all there as they were, a pool not found
    once)."""
    kept = [node.name for node in optimized.graph.node if node.domain == domain]
    if sorted(kept) != sorted(operators[i].name for i in range(len(steps)) if i not in pools):
        return None
    producers = {name: node for node in optimized.graph.node for name in node.output}
    found = {}
    for i in pools:
        output, op_type = steps[i].node.output[0], steps[i].node.op_type
        nchwc = [node for node in optimized.graph.node
                 if node.domain == NCHWC_DOMAIN and node.op_type == op_type
                 and (node.name == f"{output}_nchwc"
                      or node.name.startswith(f"{output}_nchwc_token_"))]
        plain = [node for node in optimized.graph.node
                 if not node.domain and node.op_type == op_type and node.output[:1] == [output]]
        if len(nchwc) + len(plain) != 1:
            return None
        if plain:
            found[i] = plain[0], False
            continue
        producer = producers.get(nchwc[0].input[0])
        reordered = producer is not None and producer.domain == NCHWC_DOMAIN \
            and producer.op_type == "ReorderInput"
        found[i] = nchwc[0], None if reordered else True
    return found


def _subgraphs(node):
    for attribute in node.attribute:
        if attribute.HasField("g"):
            yield attribute.g
        yield from attribute.graphs


def _names(graph):
    """Every value name ``graph`` defines or reads, its subgraphs' included."""
    names = {v.name for v in list(graph.input) + list(graph.output)}
    names.update(t.name for t in graph.initializer)
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        for subgraph in _subgraphs(node):
            names |= _names(subgraph)
    names.discard("")
    return names


def _unshadow(graph, taken, outer=frozenset(), renamed=None):
    """Renames each value a subgraph of ``graph`` defines under a name an enclosing graph
    defines too: onnxruntime names the values it makes per graph (``reorder_token_0`` in a
    Loop body and in the main graph), and then refuses the model it saved (not in single
    static assignment form). ``taken``: every name in the model (new names join it);
    ``outer``: the names the graphs enclosing ``graph`` define; ``renamed``: their renamed
    values, old name -> new."""
    renamed = dict(renamed or {})

    def define(name):
        if name in outer:
            renamed[name] = _fresh(name, taken)
            return renamed[name]
        renamed.pop(name, None)
        return name

    for value in graph.input:
        value.name = define(value.name)
    for tensor in graph.initializer:
        tensor.name = define(tensor.name)
    enclosing = set(outer) | {v.name for v in graph.input} | {t.name for t in graph.initializer}
    enclosing.update(name for node in graph.node for name in node.output if name)
    for node in graph.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]
        for subgraph in _subgraphs(node):
            _unshadow(subgraph, taken, enclosing, renamed)
        node.output[:] = [define(name) if name else name for name in node.output]
    for value in list(graph.output) + list(graph.value_info):
        value.name = renamed.get(value.name, value.name)


def _fresh(name, taken):
    for count in itertools.count(1):
        candidate = f"{name}__{count}"
        if candidate not in taken:
            taken.add(candidate)
            return candidate


def _copy(model):
    """A deep copy of ``model``."""
    copy = type(model)()
    copy.CopyFrom(model)
    return copy


# --- called back from C ---------------------------------------------------------------------

class _Api:
    def __init__(self, address):
        slots = ctypes.cast(address, ctypes.POINTER(_P))
        for name, (slot, restype, argtypes) in _SLOTS.items():
            setattr(self, name, ctypes.CFUNCTYPE(restype, *argtypes)(slots[slot]))

    def check(self, status):
        if status:
            text = self.GetErrorMessage(status).decode()
            self.ReleaseStatus(status)
            raise RuntimeError(text)


def _callback(restype, *argtypes):
    def wrap(function):
        made = ctypes.CFUNCTYPE(restype, *argtypes)(function)
        _kept.append(made)
        return ctypes.cast(made, _P).value
    return wrap


def _operator(name, inputs, outputs):
    op = _OrtCustomOp()
    op.version = _OP_VERSION
    label = ctypes.create_string_buffer(name.encode())
    _kept.extend([op, label])
    op.GetName = _callback(_P, _P)(lambda _: ctypes.addressof(label))
    op.GetExecutionProviderType = _callback(_P, _P)(lambda _: None)     # None: the CPU's
    op.GetInputType = _callback(ctypes.c_int, _P, _SIZE)(lambda _, i: inputs[i])
    op.GetInputTypeCount = _callback(_SIZE, _P)(lambda _: len(inputs))
    op.GetOutputType = _callback(ctypes.c_int, _P, _SIZE)(lambda _, i: outputs[i])
    op.GetOutputTypeCount = _callback(_SIZE, _P)(lambda _: len(outputs))
    required = _callback(ctypes.c_int, _P, _SIZE)(lambda _, i: 0)
    op.GetInputCharacteristic = op.GetOutputCharacteristic = required
    op.GetInputMemoryType = _callback(ctypes.c_int, _P, _SIZE)(lambda _, i: 0)  # the CPU's
    one = _callback(ctypes.c_int, _P)(lambda _: 1)
    op.GetVariadicInputMinArity = op.GetVariadicInputHomogeneity = one
    op.GetVariadicOutputMinArity = op.GetVariadicOutputHomogeneity = one
    op.CreateKernelV2 = ctypes.cast(_loaded.maxaccel_create_kernel, _P).value
    op.KernelComputeV2 = ctypes.cast(_loaded.maxaccel_compute, _P).value
    op.KernelDestroy = ctypes.cast(_loaded.maxaccel_destroy_kernel, _P).value
    return op


def _register(options, api):
    """``RegisterCustomOps``: the pending domain and its operators onto ``options``."""
    try:
        if _pending is None:
            return "maxaccel: no operators to register (use maxaccel.host.device_ops.register)"
        domain_name, signatures = _pending
        table = _Api(api)
        domain = _P()
        table.check(table.CreateCustomOpDomain(domain_name.encode(), ctypes.byref(domain)))
        for name, (inputs, outputs) in signatures.items():
            op = _operator(name, inputs, outputs)
            table.check(table.CustomOpDomain_Add(domain, ctypes.byref(op)))
        table.check(table.AddCustomOpDomain(options, domain))
        return None
    except Exception as error:
        return f"maxaccel: cannot register the device operators: {error}"


def element_dtype(element):
    """The numpy dtype of ONNX element type ``element`` (a ``TensorProto`` code)."""
    dtype = _dtypes.get(element)
    if dtype is None:
        dtype = _dtypes[element] = np.dtype(helper.tensor_dtype_to_np_dtype(element))
    return dtype


def _resolve(key):
    """The call of the kernel of the node of ``key`` (asked once a kernel, when it first
    runs): ``call(inputs, room)``, the kernel's inputs as ``(memoryview, element type,
    shape)``, returns the results as arrays, C-contiguous or not (those of a dtype numpy does
    not build in, such as bfloat16, viewed as unsigned integers of their size: their buffers
    cannot be exported as they are, :func:`exportable`), ``(dims, array)`` for a result whose
    output has other dims than the array (the kernel copies the array's items in C order), or
    None for an output the call wrote itself: ``room(index, dims)`` hands out output ``index``
    of ONNX dims ``dims`` as a writable memoryview of its bytes while the call runs (the same
    object again while the tensor lies where it lay). The kernel keeps the call for as long as
    onnxruntime keeps it: the call holds its session weakly
    (``OneSession.kernel_call`` in :mod:`maxaccel.host.offload.one_session`)."""
    entry = _steps.get(key)
    session = entry[0]() if entry else None
    if session is None:
        raise RuntimeError("maxaccel: the OffloadSession of this device step no longer exists")
    return session.kernel_call(entry[1])


def arrays_of(inputs):
    """A kernel's inputs (``(memoryview, element type, shape)``) as read-only arrays of their
    ONNX dims, one numpy call each (the kernel's path is cold after every device call: each
    numpy call on it costs microseconds)."""
    return [np.ndarray(shape, element_dtype(element), view) for view, element, shape in inputs]


def kept(make):
    """``made(inputs)``: ``make(inputs)`` of a kernel's inputs, made again only when the kernel
    passes other inputs than its last call's (it passes the same while onnxruntime's tensors
    lie where they lay, with the same type and dims: ``device_ops.c``, ``inputs_of``), so the
    views made of them are not made again after every device call."""
    last = [None, None]

    def made(inputs):
        if inputs is not last[0]:
            last[:] = inputs, make(inputs)
        return last[1]
    return made


def blocked_pool(pool, dtype, block, global_pool=False, output_dims=None, reads=None):
    """The call of a kernel whose one input and output are onnxruntime's NCHWc tensors of
    ``block`` (ONNX dims ``N x C' x D1..Dn``, lying as ``N x C'/B x D1..Dn x B``:
    :func:`nchwc_block`) of ``dtype``: ``call(inputs, room)`` returns the one result as the
    kernel copies it, or None when the pool wrote it into onnxruntime's output itself
    (``output_dims``); the input's view is made once while the tensor lies where it lay
    (:func:`kept`), and so is the output's; a result's is one numpy call (the kernel's path is
    cold after every device call: each call on it costs microseconds).

    Parameters
    ----------
    pool : callable
        A MaxPool: ``pool(images)`` of ``N * C'/B`` channels-first images of ``B`` channels
        (``N * C'/B x B x D1..Dn``, a strided view of the input) returns the pooled images.
        With ``global_pool``, a reduction: ``pool(pixels, axes=..., keepdims=True)`` of the
        input as it lies (``N x C'/B x D1..Dn x B``, each image's pixels channels-last) over
        the pixels.
    output_dims : callable, optional
        For a MaxPool that writes its result into an array it is given
        (``pool(images, out=...)``, as :meth:`~maxaccel.host.device.Device.max_pool` does):
        ``output_dims(dims)``, the output's ONNX dims for an input of ONNX dims ``dims``.
        The pool then writes into onnxruntime's output, seen as the pooled images (a strided
        view), and the kernel copies nothing.
    reads : callable, optional
        With ``global_pool``, a MaxPool folded into it
        (:func:`~maxaccel.host.offload.steps.pool_reads`): ``reads(pixels, dims)``, the part
        of the input it reduces.
    """
    if global_pool:
        def pixels_of(inputs):
            (view, _, shape), = inputs
            n, channels, *spatial = shape
            pixels = np.ndarray((n, channels // block, *spatial, block), dtype, view)
            if reads is not None:
                pixels = reads(pixels, shape)
            return pixels, tuple(range(2, len(shape))), shape[:2]
        pixels_kept = kept(pixels_of)

        def call(inputs, room):
            pixels, axes, dims = pixels_kept(inputs)
            y = pool(pixels, axes=axes, keepdims=True)
            return (y.reshape(dims + y.shape[2:-1]),)
        return call

    def images_of(inputs):
        (view, _, shape), = inputs
        images, strides, channels_last = _images_layout(shape, block, dtype.itemsize)
        # [room's view, the pooled images over it, the output's dims]: made again when the
        # room handed out moves.
        out = None if output_dims is None else [None, None, tuple(output_dims(shape))]
        return np.ndarray(images, dtype, view, 0, strides), channels_last, shape[:2], out
    images_kept = kept(images_of)

    if output_dims is not None:
        def call(inputs, room):
            images, _, _, out = images_kept(inputs)
            view = room(0, out[2])
            if view is not out[0]:
                pooled, strides, _ = _images_layout(out[2], block, dtype.itemsize)
                out[:2] = view, np.ndarray(pooled, dtype, view, 0, strides)
            pool(images, out=out[1])
            return (None,)
        return call

    def call(inputs, room):
        images, channels_last, dims, _ = images_kept(inputs)
        y = pool(images)
        # (dims, array): the pooled images channels-last, the output's items in C order.
        return ((dims + y.shape[2:], y.transpose(channels_last)),)
    return call


def _images_layout(shape, block, itemsize):
    """``(shape, strides, channels last)`` of the ``N * C'/B`` channels-first images of ``B``
    channels of an NCHWc tensor of ONNX dims ``shape`` (:func:`blocked_pool`), and the axes
    that put an image's channels last."""
    n, channels, *spatial = shape
    strides, stride = [], block * itemsize
    for size in reversed(spatial):
        strides.append(stride)
        stride *= size
    return ((n * channels // block, block, *spatial), (stride, itemsize, *reversed(strides)),
            (0, *range(2, len(shape)), 1))


def exportable(array):
    """``array``, or a view of it as unsigned integers of its item size where numpy does not
    build its dtype in (bfloat16): a buffer the kernel can read."""
    return array if array.dtype.isbuiltin == 1 else array.view(f"u{array.itemsize}")
