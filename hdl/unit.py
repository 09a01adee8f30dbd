"""What every library unit is built on: a component whose nested ``Signature`` carries and
checks its parameters (:class:`Unit`, :class:`UnitSignature`, as amaranth-stdio's
``AsyncSerialRX.Signature``), the stall discipline a signature states (:class:`Stall`), and
the checks of the parameters the units share.

A unit's parameters are checked before the unit exists (:class:`Checked`), so a refused one
leaves no elaboratable behind for Amaranth to warn about; Amaranth's public API offers no
other way to say that an elaboratable was not a mistake than elaborating it
(:func:`set_aside`).
"""

from dataclasses import dataclass

from amaranth.hdl import Fragment
from amaranth.lib import wiring

from maxaccel.contract.dtypes import dtype_of

__all__ = ["Checked", "UnitSignature", "Unit", "Stall", "set_aside", "check_lanes",
           "check_dtype"]


class Checked:
    """Mixin for an Amaranth elaboratable whose constructor may refuse its arguments:
    ``cls.check_parameters(*args, **kwargs)`` (the constructor's arguments) runs before the
    object exists, so a refused one leaves nothing behind that Amaranth would warn was never
    elaborated. The object records its creation site as its caller's, as Amaranth does."""

    def __new__(cls, *args, **kwargs):
        cls.check_parameters(*args, **kwargs)
        return super().__new__(cls, *args, src_loc_at=1, **kwargs)

    @classmethod
    def check_parameters(cls, *args, **kwargs):
        """Raise ``ValueError`` (or ``TypeError``) naming the first argument refused."""


class UnitSignature(wiring.Signature):
    """A unit's signature that carries its parameters, as amaranth-stdio's
    ``AsyncSerialRX.Signature`` does: each is an attribute of the signature, two signatures
    are equal when their class and parameters are, and the subclass's ``check_parameters``
    refuses bad ones before any member is made.

    Subclasses (a unit's nested ``Signature``) call ``super().__init__(members, **parameters)``
    and state their unit's stall discipline as :attr:`stall`.
    """

    #: The unit's :class:`Stall` discipline (``None``: no stream that stalls).
    stall = None

    def __init__(self, members, **parameters):
        self._parameters = parameters
        super().__init__(members)

    @property
    def parameters(self):
        """The parameters, by name."""
        return dict(self._parameters)

    def __getattr__(self, name):
        parameters = self.__dict__.get("_parameters", {})
        if name in parameters:
            return parameters[name]
        raise AttributeError(f"{type(self).__qualname__} has no attribute {name!r}")

    def __eq__(self, other):
        return type(other) is type(self) and other._parameters == self._parameters

    def __repr__(self):
        arguments = ", ".join(f"{name}={value!r}" for name, value in self._parameters.items())
        return f"{type(self).__qualname__}({arguments})"


class Unit(Checked, wiring.Component):
    """A library unit: a :class:`~amaranth.lib.wiring.Component` whose constructor takes the
    arguments of its nested ``Signature`` class (a :class:`UnitSignature`), checked before the
    unit exists, and whose parameters are the unit's attributes of the same names."""

    @classmethod
    def check_parameters(cls, *args, **kwargs):
        cls.Signature.check_parameters(*args, **kwargs)

    def __init__(self, *args, **kwargs):
        signature = self.Signature(*args, **kwargs)
        for name, value in signature.parameters.items():
            if name not in signature.members:     # a static dtype, not the dtype port
                setattr(self, name, value)
        super().__init__(signature)


@dataclass(frozen=True)
class Stall:
    """How a unit's input stream stalls behind its output stream, stated by its
    ``Signature`` (:attr:`UnitSignature.stall`) and tested the same way for every unit.

    Every unit keeps the stream rules: ``ready`` never depends on ``valid`` of the same
    stream, and ``valid`` never on ``ready``. Beyond them a unit's ``into.ready`` is either

    * *combinational* (``registered=False``): it follows ``out.ready`` in the same cycle.
      With a result waiting (``out.valid & ~out.ready``) the unit takes nothing; a pipeline
      that advances when its output register is empty or being taken (``advance = ~o.valid |
      o.ready``, :func:`stall_control`) is one. A chain of such units is one combinational
      path from the last ``ready`` to the first.
    * *registered* (``registered=True``): a register (with the unit's own state), never a
      function of ``out.ready`` in the same cycle: a skid register behind the output register
      takes the beat that finds it full, and the unit stalls the cycle after. Chaining
      such units adds no combinational path.

    Attributes
    ----------
    into, out : str
        The input and output streams (members of the signature).
    registered : bool
    """

    into: str
    out: str
    registered: bool


def set_aside(design):
    """Mark ``design`` used, as elaborating it does: for a design that is no mistake and will
    not be elaborated otherwise (its compiled model came from a cache, say), which Amaranth
    would warn about when it is collected.

    Elaborating is Amaranth's only public way of marking a design used, so this elaborates
    it (a whole core takes seconds): what only needs a design's parameters or what it
    reports is better served by its ``Signature``, which builds nothing.
    """
    Fragment.get(design, None)


def check_lanes(lanes, name):
    """Raise ``ValueError`` unless ``lanes`` is a power of two (``name`` names the unit)."""
    if not isinstance(lanes, int) or isinstance(lanes, bool) or lanes < 1 or lanes & (lanes - 1):
        raise ValueError(f"{name}: lanes must be a power of two (1, 2, 4, 8, ...), not "
                         f"{lanes!r}")


def check_dtype(dtype, name):
    """``None`` (the element type chosen at run time, by a ``dtype`` port), or the
    :class:`~maxaccel.contract.dtypes.DType` of a static element type, given as anything
    :func:`~maxaccel.contract.dtypes.format_of` takes (``DType.FLOAT``, ``"float32"``,
    ``numpy.float32``, the ONNX code 1); ``ValueError`` for anything else (``name`` names the
    unit)."""
    if dtype is None:
        return None
    try:
        return dtype_of(dtype)
    except TypeError as error:
        raise ValueError(f"{name}: dtype: {error} (or None: chosen at run time)") from None
