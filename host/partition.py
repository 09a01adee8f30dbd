"""Splitting an ONNX graph into device steps and CPU partitions, for :class:`OffloadSession`.

:func:`partition` plans a model once:

1. Model-local functions that contain a max-family node (directly, in a subgraph, or through
   another function) are inlined, so their max-family nodes become ordinary graph nodes.
2. The nodes are sorted topologically (onnxruntime accepts unsorted graphs, so this does too).
3. Each node gets a kind: ``device`` (Max, ReduceMax, GlobalMaxPool, MaxPool, Min, ReduceMin,
   ArgMax and ArgMin of the default domain), ``subgraph`` (a node whose subgraphs contain
   max-family nodes: it runs on ``onnx.reference`` with the max family routed to the device,
   so it keeps the contract) or ``cpu`` (everything else). A Transpose whose only consumer
   is a GlobalMaxPool, or a ReduceMax or ReduceMin over known axes, is *folded* into that
   device step: the reduction runs on the untransposed tensor (the axes mapped through the
   permutation), so a channels-last tensor reaches the device's channels-last pooling unit
   without being transposed on the host. A MaxPool whose only reader is a GlobalMaxPool, or a
   ReduceMax over every spatial axis, is folded into it the same way: the max of the windows'
   maxima is the max of what the windows read, so the reduction runs on that part of the
   pool's input, one device call in place of two.
4. CPU nodes are grouped into as few partitions as the data dependencies allow: a CPU node goes
   into the earliest partition after every device step it depends on. The run order is
   partition 0, the device steps that depend on nothing later, partition 1, ...; the number of
   partitions is the longest chain of device steps, plus one.
5. Each partition becomes a model of its own: its nodes, the initializers they use, inputs
   typed from ONNX shape inference (symbolic dimensions kept), the outputs later steps or the
   graph need, the model's opsets and functions, and an IR version onnxruntime reads.

This module only plans; :mod:`maxaccel.host.offload` runs the plan.
"""

import heapq
from dataclasses import dataclass, field

import onnx
from onnx import TypeProto, helper, numpy_helper

__all__ = ["OFFLOADED", "FAMILY", "MAX_IR_VERSION", "Plan", "DeviceStep", "SubgraphStep",
           "CpuPartition", "partition", "subgraph_names", "node_inputs",
           "inline_max_family_functions", "node_name"]

#: Operator types of the default domain sent to the device, with the opset versions that
#: define them (every one of them goes to the device).
OFFLOADED = {"Max": (1, 6, 8, 12, 13), "ReduceMax": (1, 11, 12, 13, 18, 20),
             "GlobalMaxPool": (1, 22), "MaxPool": (1, 8, 10, 11, 12, 22),
             "Min": (1, 6, 8, 12, 13), "ReduceMin": (1, 11, 12, 13, 18, 20),
             "ArgMax": (1, 11, 12, 13), "ArgMin": (1, 11, 12, 13)}
FAMILY = tuple(OFFLOADED)

#: Highest IR version given to the models built for onnxruntime (onnx 1.23 writes 14,
#: onnxruntime 1.31 reads at most 13 and 1.17 at most 9; 10 covers every type but float4).
MAX_IR_VERSION = 10


def node_name(index, node):
    """The name :class:`~maxaccel.host.offload.OffloadSession` gives the graph's node at
    ``index``: its own, or ``OPTYPE_INDEX`` when it has none."""
    return node.name or f"{node.op_type}_{index}"


def _subgraphs(node):
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.g
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            yield from attribute.graphs


def subgraph_names(graph):
    """Names a (sub)graph reads but does not define: its outer-scope references."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    used = set()
    for node in graph.node:
        used.update(n for n in node.input if n)
        for subgraph in _subgraphs(node):
            used |= subgraph_names(subgraph)
        defined.update(node.output)
    return used - defined


def node_inputs(node):
    """The values ``node`` reads: its inputs, then its subgraphs' outer-scope references."""
    explicit = [n for n in node.input if n]
    implicit = set()
    for subgraph in _subgraphs(node):
        implicit |= subgraph_names(subgraph)
    return list(dict.fromkeys(explicit + sorted(implicit - set(explicit))))


def _is_family(node):
    return node.domain in ("", "ai.onnx") and node.op_type in FAMILY


def _contains_family(nodes, functions):
    """Whether ``nodes`` (or their subgraphs, or local functions they call) hold a max-family
    node; ``functions`` is the set of ``(domain, name)`` of the local functions known to hold
    one."""
    for node in nodes:
        if _is_family(node) or (node.domain, node.op_type) in functions:
            return True
        if any(_contains_family(g.node, functions) for g in _subgraphs(node)):
            return True
    return False


def _functions_with_family(model):
    found = set()
    changed = True
    while changed:
        changed = False
        for function in model.functions:
            key = (function.domain, function.name)
            if key not in found and _contains_family(function.node, found):
                found.add(key)
                changed = True
    return found


def inline_max_family_functions(model):
    """``model`` with every local function that contains a max-family node inlined (the same
    object when there is none)."""
    selected = _functions_with_family(model)
    if not selected:
        return model
    from onnx import inliner
    return inliner.inline_selected_functions(model, sorted(selected))


def _topological(nodes, available):
    """``nodes`` in an order where every value is produced before it is read (stable: the
    graph's order where it already is one)."""
    producers = {}
    for index, node in enumerate(nodes):
        for name in node.output:
            if name:
                producers[name] = index
    waiting, consumers = [], [[] for _ in nodes]
    for index, node in enumerate(nodes):
        needs = set()
        for name in node_inputs(node):
            if name in producers and name not in available:
                needs.add(producers[name])
            elif name not in available:
                raise ValueError(f"node {node.name or node.op_type!r} reads {name!r}, which no "
                                 f"node, input or initializer defines")
        for producer in needs:
            consumers[producer].append(index)
        waiting.append(len(needs))
    ready = [i for i, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        index = heapq.heappop(ready)
        order.append(nodes[index])
        for consumer in consumers[index]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                heapq.heappush(ready, consumer)
    if len(order) != len(nodes):
        stuck = [nodes[i].name or nodes[i].op_type for i, c in enumerate(waiting) if c]
        raise ValueError(f"the graph has a cycle through node(s) {', '.join(stuck[:5])}")
    return order


@dataclass
class DeviceStep:
    """A max-family node run on the device.

    ``node`` is the max-family node; ``transpose`` a folded Transpose node before it (then
    ``perm`` is its permutation and ``axes`` the reduced axes of the *transposed* tensor,
    non-negative) or None; ``pool`` a folded MaxPool before it (the reduction then reads the
    part of the pool's input its windows read: ``pool_attributes``) or None;
    ``inputs``/``outputs`` the values read and written.
    """

    node: onnx.NodeProto
    name: str
    inputs: list
    outputs: list
    attributes: dict
    transpose: onnx.NodeProto = None
    transpose_name: str = None
    perm: tuple = None
    axes: tuple = None
    pool: onnx.NodeProto = None
    pool_name: str = None

    @property
    def nodes(self):
        named = [(self.transpose_name, self.transpose)] if self.transpose is not None else []
        if self.pool is not None:
            named.append((self.pool_name, self.pool))
        return named + [(self.name, self.node)]

    @property
    def pool_attributes(self):
        """The folded MaxPool's attributes (``pool``)."""
        return _attributes(self.pool)

    @property
    def source_axes(self):
        """With a folded Transpose, the reduced axes of the untransposed input (``axes``
        mapped through ``perm``): the device reduces the tensor as it lies."""
        return [self.perm[a] for a in self.axes]


@dataclass
class SubgraphStep:
    """A node whose subgraphs hold max-family nodes, run on ``onnx.reference`` with those
    nodes routed to the device; ``model`` is the one-node model."""

    node: onnx.NodeProto
    name: str
    inputs: list
    outputs: list
    model: onnx.ModelProto

    @property
    def nodes(self):
        return [(self.name, self.node)]


@dataclass
class CpuPartition:
    """The CPU nodes that can run together between two rounds of device steps, as one model
    (``model``) for onnxruntime.

    ``inputs`` must be fed; ``overridable`` are initializers the user may override with a feed;
    ``outputs`` are what later steps and the graph read; ``untyped`` lists inputs whose type
    shape inference could not tell (the partition's model is then typed from the first run's
    arrays).
    """

    index: int
    named_nodes: list
    inputs: list
    overridable: list
    outputs: list
    model: onnx.ModelProto
    untyped: list = field(default_factory=list)

    @property
    def nodes(self):
        return self.named_nodes

    @property
    def name(self):
        return f"partition {self.index}"


@dataclass
class Plan:
    """The steps in run order, the model they came from (functions inlined), and the type of
    every value the model declares or ONNX shape inference finds (``_inferred_types``)."""

    model: onnx.ModelProto
    steps: list
    types: dict = field(default_factory=dict)


def _attributes(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _inferred_types(model):
    """Value name -> TypeProto, from the graph's declarations and ONNX shape inference (which
    may fail on unusual models: then only the declarations)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # shape inference is best effort: onnxruntime does its own
        inferred = model.graph
    types = {}
    for values in (inferred.value_info, inferred.input, inferred.output, model.graph.input,
                   model.graph.output):
        for value in values:
            if value.type.WhichOneof("value") is not None:
                types.setdefault(value.name, value.type)
    for tensor in model.graph.initializer:
        types.setdefault(tensor.name, helper.make_tensor_type_proto(tensor.data_type,
                                                                    list(tensor.dims)))
    return types


def _constant_axes(name, initializers, overridable):
    if not name:
        return None
    if name in initializers and name not in overridable:
        return [int(a) for a in numpy_helper.to_array(initializers[name]).reshape(-1)]
    return None


def _fold(node, attributes, producer, consumers, graph_outputs, initializers, overridable):
    """``(perm, axes)`` if ``producer`` is a Transpose that can be folded into ``node``."""
    if producer is None or producer.op_type != "Transpose" \
            or producer.domain not in ("", "ai.onnx"):
        return None
    value = producer.output[0]
    if value in graph_outputs or consumers.get(value, 0) != 1:
        return None
    perm = next((helper.get_attribute_value(a) for a in producer.attribute if a.name == "perm"),
                None)
    if perm is None:
        return None  # the default (reversed) permutation needs the rank: leave it
    perm = tuple(int(p) for p in perm)
    rank = len(perm)
    if node.op_type == "GlobalMaxPool":
        axes = tuple(range(2, rank))
    elif node.op_type in ("ReduceMax", "ReduceMin"):
        if "axes" in attributes:
            axes = list(attributes["axes"])
        else:
            axes = _constant_axes(node.input[1] if len(node.input) > 1 else "", initializers,
                                  overridable)
        if not axes:
            return None  # all axes or an identity: nothing a transpose costs to fold
        axes = tuple(sorted({a + rank if a < 0 else a for a in axes}))
        if any(not 0 <= a < rank for a in axes):
            return None  # let the device's own check name the problem
    else:
        return None
    return perm, axes


def _folds_pool(node, attributes, producer, consumers, graph_outputs, initializers,
                overridable, types):
    """Whether ``producer`` is a MaxPool that can be folded into ``node``: a GlobalMaxPool, or
    a ReduceMax over every spatial axis (known when planning), that is the only reader of the
    pool's results."""
    if producer is None or producer.op_type != "MaxPool" \
            or producer.domain not in ("", "ai.onnx"):
        return False
    pooled = producer.output[0]
    indices = producer.output[1] if len(producer.output) > 1 else ""
    if pooled in graph_outputs or consumers.get(pooled, 0) != 1:
        return False
    if indices and (indices in graph_outputs or consumers.get(indices, 0)):
        return False
    if node.op_type == "GlobalMaxPool":
        return True
    if node.op_type != "ReduceMax":
        return False
    if "axes" in attributes:
        axes = list(attributes["axes"])
    elif len(node.input) > 1 and node.input[1]:
        axes = _constant_axes(node.input[1], initializers, overridable)
        if axes is None:
            return False    # the axes are known only when it runs
    else:
        axes = []
    if not axes:    # every axis, or none at all
        return not attributes.get("noop_with_empty_axes", 0)
    value_type = types.get(producer.input[0])
    if value_type is None or not value_type.tensor_type.HasField("shape"):
        return False
    rank = len(value_type.tensor_type.shape.dim)
    named = {a + rank if a < 0 else a for a in axes}
    return all(0 <= a < rank for a in named) and set(range(2, rank)) <= named


def partition(model, name_of):
    """Plan ``model`` (see the module docstring); ``name_of(index, node)`` names each node.

    Returns
    -------
    Plan

    Raises
    ------
    ValueError
        A node reads a value nothing defines, or the graph has a cycle.
    """
    model = inline_max_family_functions(model)
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    sparse = {t.values.name: t for t in graph.sparse_initializer}
    graph_inputs = {i.name for i in graph.input}
    overridable = set(initializers) & graph_inputs
    graph_outputs = {o.name for o in graph.output}
    available = graph_inputs | set(initializers) | set(sparse)
    nodes = list(graph.node)  # one wrapper per node: kinds and levels are keyed by id()
    names = {id(node): name_of(index, node) for index, node in enumerate(nodes)}
    nodes = _topological(nodes, available)
    functions = _functions_with_family(model)

    producer_of, consumers = {}, {}
    for node in nodes:
        for name in node.output:
            if name:
                producer_of[name] = node
        for name in node_inputs(node):
            consumers[name] = consumers.get(name, 0) + 1

    # Kinds, with Transposes and MaxPools folded into the device step that consumes them.
    types = _inferred_types(model)
    kinds, fold_of = {}, {}
    for node in nodes:
        if _is_family(node):
            kinds[id(node)] = "device"
            producer = producer_of.get(node.input[0]) if node.input else None
            attributes = _attributes(node)
            fold = _fold(node, attributes, producer, consumers, graph_outputs,
                         initializers, overridable)
            if fold is not None and kinds.get(id(producer)) == "cpu":
                fold_of[id(node)] = (producer, fold)
                kinds[id(producer)] = "folded"
            elif kinds.get(id(producer)) == "device" and _folds_pool(
                    node, attributes, producer, consumers, graph_outputs, initializers,
                    overridable, types):
                fold_of[id(node)] = (producer, None)
                kinds[id(producer)] = "folded"
        elif _contains_family([node], functions):
            kinds[id(node)] = "subgraph"
        else:
            kinds[id(node)] = "cpu"

    # Levels: a CPU node joins partition `level`; a device or subgraph step runs after
    # partition `level` (and after the steps of its level that come before it).
    ready_cpu, ready_host, level_of = {}, {}, {}
    for node in nodes:
        kind = kinds[id(node)]
        if kind == "folded":
            continue  # placed with its consumer
        reads = node_inputs(node)
        if id(node) in fold_of:
            reads = node_inputs(fold_of[id(node)][0]) + reads[1:]
        if kind == "cpu":
            level = max([ready_cpu.get(n, 0) for n in reads], default=0)
            for name in node.output:
                ready_cpu[name] = ready_host[name] = level
        else:
            level = max([ready_host.get(n, 0) for n in reads], default=0)
            for name in node.output:
                ready_cpu[name], ready_host[name] = level + 1, level
        level_of[id(node)] = level
        if id(node) in fold_of:
            level_of[id(fold_of[id(node)][0])] = level

    read_later = _reads_after(nodes, kinds, level_of, graph_outputs)
    steps, partitions = [], 0
    for level in range(max(level_of.values(), default=0) + 1):
        members = [n for n in nodes if kinds[id(n)] == "cpu" and level_of[id(n)] == level]
        if members:
            steps.append(_cpu_partition(partitions, members, names, model, initializers,
                                        sparse, overridable, types, read_later))
            partitions += 1
        for node in nodes:
            kind = kinds[id(node)]
            if level_of.get(id(node)) != level or kind in ("cpu", "folded"):
                continue
            if kind == "device":
                steps.append(_device_step(node, names, fold_of.get(id(node))))
            else:
                steps.append(_subgraph_step(node, names[id(node)], model))
    return Plan(model, steps, types)


def _reads_after(nodes, kinds, level_of, graph_outputs):
    """Value name -> whether something outside its producer's partition reads it (a device or
    subgraph step, a CPU node of another partition, or the graph's outputs)."""
    partition_of = {}
    for node in nodes:
        key = ("cpu", level_of[id(node)]) if kinds[id(node)] == "cpu" else ("step", id(node))
        for name in node.output:
            if name:
                partition_of[name] = key
    outside = set(graph_outputs)
    for node in nodes:
        if kinds[id(node)] == "folded":
            continue
        key = ("cpu", level_of[id(node)]) if kinds[id(node)] == "cpu" else ("step", id(node))
        for name in node_inputs(node):
            if partition_of.get(name, key) != key:
                outside.add(name)
    for node in nodes:  # a folded Transpose or MaxPool reads for its device step
        if kinds[id(node)] == "folded":
            outside.update(node_inputs(node))
    return outside


def _device_step(node, names, fold):
    step = DeviceStep(node, names[id(node)], list(node.input), list(node.output),
                      _attributes(node))
    if fold is not None:
        producer, transposed = fold
        if transposed is None:
            step.pool, step.pool_name = producer, names[id(producer)]
        else:
            step.transpose, step.transpose_name = producer, names[id(producer)]
            step.perm, step.axes = transposed
        step.inputs = [producer.input[0]] + step.inputs[1:]
    return step


def _value_info(name, types):
    return helper.make_value_info(name, types.get(name, TypeProto()))


def _cpu_partition(index, members, names, model, initializers, sparse, overridable, types,
                   read_later):
    produced = {n for node in members for n in node.output if n}
    reads = list(dict.fromkeys(n for node in members for n in node_inputs(node)))
    used_initializers = [n for n in reads if n in initializers and n not in produced]
    used_sparse = [n for n in reads if n in sparse and n not in produced]
    inputs = [n for n in reads if n not in produced and n not in initializers
              and n not in sparse]
    overridden = [n for n in used_initializers if n in overridable]
    outputs = [n for node in members for n in node.output if n and n in read_later]
    if not outputs:  # nothing reads this partition: keep its values for the record
        outputs = [n for node in members for n in node.output if n]
    graph = helper.make_graph(
        members, f"partition_{index}",
        [_value_info(n, types) for n in inputs + overridden],
        [_value_info(n, types) for n in outputs],
        initializer=[initializers[n] for n in used_initializers],
        sparse_initializer=[sparse[n] for n in used_sparse])
    partition_model = helper.make_model(
        graph, opset_imports=model.opset_import, functions=model.functions,
        ir_version=min(model.ir_version, MAX_IR_VERSION))
    untyped = [n for n in inputs if n not in types
               or (types[n].HasField("tensor_type") and not types[n].tensor_type.elem_type)]
    return CpuPartition(index, [(names[id(n)], n) for n in members], inputs, overridden,
                        outputs, partition_model, untyped)


def _subgraph_step(node, name, model):
    inputs = node_inputs(node)
    graph = helper.make_graph(
        [node], name, [helper.make_value_info(n, TypeProto()) for n in inputs],
        [helper.make_value_info(n, TypeProto()) for n in node.output if n])
    single = helper.make_model(graph, opset_imports=model.opset_import,
                               functions=model.functions, ir_version=model.ir_version)
    return SubgraphStep(node, name, inputs, list(node.output), single)
