"""The element types maxaccel supports, shared by the host, the golden model and the gateware.

Each dtype is identified on the wire and in the gateware by its ONNX ``TensorProto`` code, so a
command carries the same number an ONNX model does. This module needs numpy and ml_dtypes (for
bfloat16) only: the gateware (``maxaccel.hdl``) imports it as its source of truth, never the
other way round.
"""

import enum
import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = ["DType", "Format", "FORMATS", "dtype_of", "format_of", "supported_dtype_names",
           "encode_elements", "encode_elements_into", "decode_elements"]


class DType(enum.IntEnum):
    """ONNX ``TensorProto.DataType`` codes of the supported element types."""

    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    BOOL = 9
    FLOAT16 = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    BFLOAT16 = 16


@dataclass(frozen=True)
class Format:
    """How the elements of one dtype are encoded.

    Attributes
    ----------
    dtype : DType
        Wire and gateware code.
    numpy_dtype : numpy.dtype
        The host-side numpy dtype (bfloat16 from ``ml_dtypes``).
    kind : str
        ``"float"``, ``"signed"``, ``"unsigned"`` or ``"bool"``.
    bits : int
        Width of one element.
    exponent_bits, mantissa_bits : int
        Field widths for floats (0 for the others).
    """

    dtype: DType
    numpy_dtype: np.dtype
    kind: str
    bits: int
    exponent_bits: int = 0
    mantissa_bits: int = 0

    @property
    def nbytes(self):
        return self.bits // 8

    @property
    def is_float(self):
        return self.kind == "float"

    @property
    def is_signed(self):
        """Whether the top bit is a sign bit (floats and signed integers)."""
        return self.kind in ("float", "signed")

    @property
    def uint_dtype(self):
        """The unsigned numpy dtype of the same width, for integer views of the bits."""
        return np.dtype(f"<u{self.nbytes}")

    @property
    def sign_mask(self):
        return 1 << (self.bits - 1)

    @property
    def canonical_nan(self):
        """Bits of the canonical quiet NaN: sign 0, exponent all ones, mantissa MSB only."""
        if not self.is_float:
            raise ValueError(f"{self.dtype.name} has no NaN")
        return ((1 << self.exponent_bits) - 1) << self.mantissa_bits | 1 << (self.mantissa_bits - 1)

    @property
    def lowest(self):
        """Bits of the least element of the order: -inf, the integer minimum, or False."""
        if self.is_float:
            return ((1 << (self.exponent_bits + 1)) - 1) << self.mantissa_bits
        if self.kind == "signed":
            return self.sign_mask
        return 0

    @property
    def greatest(self):
        """Bits of the greatest element of the order: +inf, the integer maximum, or True (the
        value of an empty ReduceMin, as :attr:`lowest` is of an empty ReduceMax)."""
        if self.is_float:
            return self.lowest ^ self.sign_mask
        if self.kind == "signed":
            return self.sign_mask - 1
        if self.kind == "bool":
            return 1
        return (1 << self.bits) - 1


FORMATS = {
    f.dtype: f
    for f in [
        Format(DType.FLOAT16, np.dtype(np.float16), "float", 16, 5, 10),
        Format(DType.BFLOAT16, np.dtype(ml_dtypes.bfloat16), "float", 16, 8, 7),
        Format(DType.FLOAT, np.dtype(np.float32), "float", 32, 8, 23),
        Format(DType.DOUBLE, np.dtype(np.float64), "float", 64, 11, 52),
        Format(DType.INT8, np.dtype(np.int8), "signed", 8),
        Format(DType.INT16, np.dtype(np.int16), "signed", 16),
        Format(DType.INT32, np.dtype(np.int32), "signed", 32),
        Format(DType.INT64, np.dtype(np.int64), "signed", 64),
        Format(DType.UINT8, np.dtype(np.uint8), "unsigned", 8),
        Format(DType.UINT16, np.dtype(np.uint16), "unsigned", 16),
        Format(DType.UINT32, np.dtype(np.uint32), "unsigned", 32),
        Format(DType.UINT64, np.dtype(np.uint64), "unsigned", 64),
        Format(DType.BOOL, np.dtype(np.bool_), "bool", 8),
    ]
}

_BY_NUMPY = {f.numpy_dtype: f for f in FORMATS.values()}


def supported_dtype_names():
    """Names of the supported numpy dtypes, for error messages."""
    return ", ".join(str(f.numpy_dtype) for f in FORMATS.values())


def format_of(dtype):
    """The :class:`Format` of a numpy dtype, a :class:`DType` or an ONNX code.

    Raises
    ------
    TypeError
        If the dtype is not supported; the message lists the supported ones.
    """
    if isinstance(dtype, (DType, int)) and not isinstance(dtype, (bool, np.generic)):
        try:
            return FORMATS[DType(dtype)]
        except ValueError:
            raise TypeError(
                f"unsupported ONNX element type code {int(dtype)}; "
                f"supported: {', '.join(f'{d.name}={d.value}' for d in FORMATS)}"
            ) from None
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{dtype!r} is not a dtype; supported: {supported_dtype_names()}") from None
    try:
        return _BY_NUMPY[np_dtype.newbyteorder("=") if np_dtype.byteorder == ">" else np_dtype]
    except KeyError:
        raise TypeError(
            f"unsupported dtype {np_dtype}; supported: {supported_dtype_names()}"
        ) from None


def dtype_of(dtype):
    """The :class:`DType` code of a numpy dtype (see :func:`format_of`)."""
    return format_of(dtype).dtype


# ---- Elements on the wire: dense little-endian bytes.

def encode_elements(values, fmt):
    """Elements of ``values`` (native byte order) as dense little-endian bytes, in C order."""
    values = np.asarray(values)
    buffer = bytearray(values.size * fmt.nbytes)
    encode_elements_into(buffer, values, fmt)
    return bytes(buffer)


def encode_elements_into(buffer, values, fmt):
    """Write the elements of ``values`` (native byte order, any layout: a transposed view is
    read as it lies) into the writable ``buffer`` as dense little-endian bytes, in C order, in
    one pass."""
    words = np.frombuffer(buffer, fmt.uint_dtype, count=values.size).reshape(values.shape)
    words[...] = values.view(f"=u{fmt.nbytes}")


def decode_elements(payload, fmt, shape):
    """Little-endian elements as a read-only array of ``fmt``'s dtype and ``shape``."""
    words = np.frombuffer(payload, fmt.uint_dtype)
    if words.size != math.prod(shape):
        raise ValueError(f"reply of {len(payload)} bytes for {math.prod(shape)} elements")
    return words.astype(f"=u{fmt.nbytes}", copy=False).view(fmt.numpy_dtype).reshape(shape)
