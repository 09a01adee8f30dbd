"""The values an :class:`~maxaccel.host.offload.OffloadSession` describes its model and runs
with, as onnxruntime's: graph inputs and outputs (:class:`TensorSpec`), the model's metadata,
each step's time (:class:`StepTiming`), and :func:`read_model`."""

import os
from dataclasses import dataclass, field
from typing import NamedTuple

import onnx
from onnx import TensorProto, helper

__all__ = ["TensorSpec", "ModelMetadata", "StepTiming", "read_model"]


def _type_text(type_proto):
    """onnxruntime's name of a type: ``tensor(float)``, ``seq(tensor(int64))``, ..."""
    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(type_proto, kind).elem_type
        name = TensorProto.DataType.Name(elem).lower() if elem else "undefined"
        return f"{kind[:-5]}({name})"
    if kind == "sequence_type":
        return f"seq({_type_text(type_proto.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({_type_text(type_proto.optional_type.elem_type)})"
    if kind == "map_type":
        key = TensorProto.DataType.Name(type_proto.map_type.key_type).lower()
        return f"map({key},{_type_text(type_proto.map_type.value_type)})"
    return "undefined"


class TensorSpec:
    """A graph input or output, as onnxruntime's ``NodeArg``: ``name``, ``type``
    (``'tensor(float)'``) and ``shape`` (a list of ints, strings for symbolic sizes and None
    for unknown ones; ``[]`` when the graph declares no shape), plus ``dtype`` (numpy, None if
    not a tensor or unknown) and ``dims`` (the shape as a tuple, None when undeclared).
    """

    __slots__ = ("name", "type", "dtype", "dims", "kind")

    def __init__(self, name, type_text, dtype, dims, kind="tensor_type"):
        self.name, self.type, self.dtype, self.dims = name, type_text, dtype, dims
        #: The ``onnx.TypeProto`` field the value's type is in: ``"tensor_type"``,
        #: ``"sequence_type"``, ``"optional_type"``, ``"map_type"``...
        self.kind = kind

    @property
    def shape(self):
        return [] if self.dims is None else list(self.dims)

    @classmethod
    def of(cls, value_info):
        kind = value_info.type.WhichOneof("value")
        dtype, dims = None, None
        if kind == "tensor_type":
            tensor = value_info.type.tensor_type
            if tensor.elem_type:
                dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
            if tensor.HasField("shape"):
                dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                             for d in tensor.shape.dim)
        return cls(value_info.name, _type_text(value_info.type), dtype, dims, kind)

    def __repr__(self):
        shape = "?" if self.dims is None else "[" + ", ".join(
            "?" if d is None else str(d) for d in self.dims) + "]"
        return f"{self.name}: {self.dtype or self.type} {shape}"


@dataclass(frozen=True)
class ModelMetadata:
    """The model's metadata, as onnxruntime's ``ModelMetadata``."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict = field(default_factory=dict)


class StepTiming(NamedTuple):
    """One step of the latest run: a CPU partition (``"partition N"``), a device node or a node
    run on ``onnx.reference``; ``nodes`` names the nodes it ran, ``seconds`` its wall time."""

    name: str
    where: str
    nodes: tuple
    seconds: float


def read_model(model_or_path):
    """``model_or_path`` (an ``onnx.ModelProto``, a path or serialized bytes) as an
    ``onnx.ModelProto``; FileNotFoundError for no file, ValueError (one line) for what does
    not parse as ONNX, TypeError for anything else."""
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    if isinstance(model_or_path, (bytes, bytearray)):
        try:
            return onnx.load_model_from_string(bytes(model_or_path))
        except Exception as error:  # protobuf raises its own DecodeError
            raise ValueError(f"not a valid ONNX model: cannot parse the bytes ({error})") \
                from None
    if isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no ONNX model at {path!r}")
        try:
            return onnx.load(path)
        except Exception as error:
            raise ValueError(f"not a valid ONNX model: cannot parse {path!r} ({error})") \
                from None
    raise TypeError(f"OffloadSession takes an onnx.ModelProto, a path or bytes, "
                    f"not {type(model_or_path).__name__}")

