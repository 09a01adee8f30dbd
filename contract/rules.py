"""What a device answers: the status rules of the data commands, as data, and the verdicts
they give (``docs/protocol.md``, "What each command refuses").
"""

from dataclasses import dataclass

from .blocks import (LANE_BYTES, MAX_COUNT, WINDOW_IMAGE_MAX,
                     WINDOW_INDEX_BYTES, parameter_block, window_fields)
from .dtypes import FORMATS, format_of
from .frames import MAX_PAYLOAD, VERSION, Command, Status
from .identity import Identity
from .pooling import WINDOW_FIELDS, WINDOW_RANK, window_geometry

__all__ = ["Capacities", "Rule", "CommandRules", "RULES", "STATUS_ORDER", "DATA_COMMANDS",
           "command_rules", "Problem", "quantities", "less_one", "less_one_of", "problems",
           "WINDOW_NARROW_FIELDS",
           "verdict", "request_verdict", "rules_markdown", "late_problems", "takes"]

#
# Each data command's request is described by quantities derived from its fields -- products
# of fields (element or beat counts; a factor may be a field less one) and their sizes in bytes
# -- and by rules, predicates over the fields, the quantities and the device's capacities, each
# with the status it gives. The predicates use only comparisons, ``+``, ``&``, ``|`` and the
# helpers of ``ops`` (``any``, ``mux`` and ``exceeds``), so the same function is evaluated on
# Python integers by :func:`problems` (the host, the fake board, the tests' oracle) and on
# Amaranth values by the command engine, which thereby derives its checks from this table. A
# product that overflows in the engine saturates to a value above every bound a rule compares
# it with, so unbounded Python integers and the engine's saturating products give the same
# verdicts. (A field less one is taken modulo 2**32 there: it is -1 only when the field is 0,
# which a ``BAD_PARAMETER`` rule of the same command refuses first.)


class Capacities:
    """The limits the status rules compare with: a view of what ``IDENTIFY`` reports (an
    :class:`Identity`), with the protocol's constants.

    Every attribute of the identity (``lanes``, ``replay_depth``, ``max_dims``,
    ``max_operands``, ``pool_channels``, the ``window_*`` capacities, ...) reads through.

    Parameters
    ----------
    identity : Identity
    max_count : int, optional
        :data:`MAX_COUNT`, which the protocol fixes; a broadcast unit built with another
        ``max_count`` (for experiments) is checked with its own.

    Attributes
    ----------
    max_payload : int
        :data:`MAX_PAYLOAD`.
    window_image_max : int
        :data:`WINDOW_IMAGE_MAX`.
    """

    max_payload = MAX_PAYLOAD
    window_image_max = WINDOW_IMAGE_MAX

    def __init__(self, identity, *, max_count=MAX_COUNT):
        self.identity = identity
        self.max_count = max_count

    def __getattr__(self, name):
        if name == "identity":        # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.identity, name)

    @classmethod
    def of(cls, identity):
        """The capacities of a device that reported ``identity``."""
        return cls(identity)

    @classmethod
    def limits(cls, *, lanes, replay_depth=0, max_dims=1, max_operands=1, pool_channels=0,
               max_count=MAX_COUNT, **window):
        """The capacities of a device known by its limits alone (what a plan was made for),
        every dtype supported; ``window`` takes the ``window_*`` capacities of
        :class:`Identity`."""
        identity = Identity(VERSION, lanes, frozenset(FORMATS), replay_depth, max_dims,
                            max_operands, pool_channels, clock_hz=0, frame_timeout_cycles=0,
                            **window)
        return cls(identity, max_count=max_count)

    @property
    def beat_bytes(self):
        return LANE_BYTES * self.lanes

    @property
    def window_bytes(self):
        """Bytes of a beat the windowed pooling unit takes (a ``MAX_POOL`` group's row)."""
        return LANE_BYTES * self.window_lanes

    @property
    def pool_capacity_bytes(self):
        """Bytes of one pixel the pooling unit holds (``pool_channels`` channels of
        :data:`LANE_BYTES`)."""
        return LANE_BYTES * self.pool_channels


@dataclass(frozen=True)
class Rule:
    """One reason to refuse a request: ``status`` when ``refuses(f, q, cap, ops)`` is true.

    ``ops`` is how the predicate is evaluated, on Python integers or on gateware values:
    ``ops.any(conditions)``, ``ops.mux(condition, a, b)`` and ``ops.exceeds(value, bound)``
    (``value > bound``, which the gateware takes without a carry chain when ``bound`` is a
    capacity or another constant)."""

    status: Status
    description: str
    refuses: object


@dataclass(frozen=True)
class CommandRules:
    """How a data command's request is checked and what it moves.

    Attributes
    ----------
    row : str
        The field that holds the row length in elements (each row of the request data starts
        a beat inside the device).
    products : tuple of (name, tuple of str)
        Quantities computed in this order as the product of fields, ``"row_beats"`` or earlier
        products (a single factor is an alias); a factor after the first may be a field less
        one (:func:`less_one`). The engine's bit-serial multiplier runs them in this order, so
        a product whose first factor is the one just computed chains.
    data, reply : str or None
        The products that count the elements of the request data and of the reply (``None``:
        none); ``data_bytes``/``reply_bytes`` are these times the element size.
    request_rows : str
        The product or field that counts the rows of the request data.
    rules : tuple of Rule
        In the order of their statuses' priority (:data:`STATUS_ORDER`).
    offsets : str or None
        A flag field: when it is not 0 the reply's elements are u32 byte offsets
        (:data:`WINDOW_INDEX_BYTES` each) instead of values (``REDUCE``'s ``arg``).
    indices : str or None
        The product that counts the Indices in the reply (:data:`WINDOW_INDEX_BYTES` each,
        added to ``reply_bytes``).
    late : tuple of (Status, str)
        What the unit itself finds while the data streams, given as the reply's status (the
        reply's data is then unspecified): :func:`late_problems` decides it on Python
        integers; the engine takes it from the unit.
    """

    row: str
    products: tuple
    data: object
    reply: object
    request_rows: str
    rules: tuple
    indices: object = None
    offsets: object = None
    late: tuple = ()


#: The order in which a data command's checks decide (the first status whose rule refuses).
#: Before them: ``BAD_COMMAND`` for an unknown code and ``BAD_LENGTH`` for a payload shorter
#: than the block, both decided from the header; after them, on the trailer, ``TIMEOUT`` and
#: ``CRC_ERROR``.
STATUS_ORDER = (Status.UNSUPPORTED_DTYPE, Status.BAD_PARAMETER, Status.TOO_LARGE,
                Status.BAD_LENGTH)


#: How a product's factor names a field less one: ``"axis[0].kernel - 1"``.
_LESS_ONE = " - 1"


def less_one(field):
    """The factor name of ``field`` less one (a factor after a product's first)."""
    return field + _LESS_ONE


def less_one_of(factor):
    """The field a factor name takes one from, or ``None`` for any other factor."""
    return factor[:-len(_LESS_ONE)] if factor.endswith(_LESS_ONE) else None


def _length_rule(data):
    return Rule(Status.BAD_LENGTH, f"the data after the block is not {data}",
                lambda f, q, cap, ops: q["data_bytes"] != q["payload_data"])


def _reply_rule():
    return Rule(Status.TOO_LARGE, "the reply is above MAX_PAYLOAD",
                lambda f, q, cap, ops: ops.exceeds(q["reply_bytes"], cap.max_payload))


def _minimum_rule():
    return Rule(Status.BAD_PARAMETER, "a minimum flag other than 0 or 1",
                lambda f, q, cap, ops: ops.exceeds(f["minimum"], 1))


def _max_rules():
    dims = lambda cap: range(cap.max_dims)          # noqa: E731
    slots = lambda cap: range(cap.max_operands)     # noqa: E731
    return (
        Rule(Status.BAD_PARAMETER, "more replayed operands than max_operands",
             lambda f, q, cap, ops: ops.exceeds(f["operands"], cap.max_operands)),
        _minimum_rule(),
        Rule(Status.BAD_PARAMETER, "several streamed operands with a replayed one",
             lambda f, q, cap, ops: ops.exceeds(f["streamed"], 1) & (f["operands"] != 0)),
        Rule(Status.BAD_PARAMETER, "no operand (none replayed and none streamed)",
             lambda f, q, cap, ops: (f["operands"] == 0) & (f["streamed"] == 0)),
        Rule(Status.BAD_PARAMETER, "a row length of 0",
             lambda f, q, cap, ops: f["row_length"] == 0),
        Rule(Status.BAD_PARAMETER, "an outer count of 0",
             lambda f, q, cap, ops: ops.any(f[f"counts[{d}]"] == 0 for d in dims(cap))),
        Rule(Status.BAD_PARAMETER, "an operand's splat flag is not 0 or 1",
             lambda f, q, cap, ops: ops.any(ops.exceeds(f["operands"], k)
                                            & ops.exceeds(f[f"slot[{k}].splat"], 1)
                                            for k in slots(cap))),
        Rule(Status.TOO_LARGE, "an outer count above MAX_COUNT",
             lambda f, q, cap, ops: ops.any(ops.exceeds(f[f"counts[{d}]"], cap.max_count)
                                            for d in dims(cap))),
        Rule(Status.TOO_LARGE, "a row of more than MAX_COUNT beats",
             lambda f, q, cap, ops: ops.exceeds(q["row_beats"], cap.max_count)),
        Rule(Status.TOO_LARGE, "several streamed operands with a row of more than one beat",
             lambda f, q, cap, ops: ops.exceeds(f["streamed"], 1)
             & ops.exceeds(q["row_beats"], 1)),
        Rule(Status.TOO_LARGE, "an operand's base at or beyond the replay buffer's depth",
             lambda f, q, cap, ops: ops.any(
                 ops.exceeds(f["operands"], k)
                 & ops.exceeds(f[f"slot[{k}].base"], cap.replay_depth - 1)
                 for k in slots(cap))),
        _reply_rule(),
        _length_rule("prod(counts) x streamed x row_length elements"),
    )


#: The data commands' checks (``IDENTIFY`` and ``COUNTERS`` take no parameters and no data: a
#: payload with them is ``BAD_LENGTH``).
RULES = {
    Command.REDUCE: CommandRules(
        row="run_length", products=(("data", ("runs", "run_length")), ("reply", ("runs",))),
        data="data", reply="reply", request_rows="runs",
        offsets="arg",
        rules=(_minimum_rule(),
               Rule(Status.BAD_PARAMETER, "an arg flag other than 0 or 1",
                    lambda f, q, cap, ops: ops.exceeds(f["arg"], 1)),
               Rule(Status.BAD_PARAMETER, "an arg flag with a run length of 0 (no position)",
                    lambda f, q, cap, ops: (f["arg"] != 0) & (f["run_length"] == 0)),
               _reply_rule(), _length_rule("runs x run_length elements"))),
    Command.POOL_CHANNELS_LAST: CommandRules(
        row="channels",
        products=(("rows", ("images", "pixels")), ("data", ("rows", "channels")),
                  ("reply", ("images", "channels"))),
        data="data", reply="reply", request_rows="rows",
        rules=(
            Rule(Status.BAD_PARAMETER, "pixels or channels of 0",
                 lambda f, q, cap, ops: (f["pixels"] == 0) | (f["channels"] == 0)),
            _minimum_rule(),
            Rule(Status.TOO_LARGE, "a pixel (channels x itemsize bytes) beyond the pooling "
                 "capacity",
                 lambda f, q, cap, ops: ops.exceeds(q["row_bytes"], cap.pool_capacity_bytes)),
            _reply_rule(),
            _length_rule("images x pixels x channels elements"))),
    Command.LOAD: CommandRules(
        row="row_length",
        products=(("data", ("rows", "row_length")), ("beats", ("rows", "row_beats"))),
        data="data", reply=None, request_rows="rows",
        rules=(
            Rule(Status.BAD_PARAMETER, "a row length of 0",
                 lambda f, q, cap, ops: f["row_length"] == 0),
            Rule(Status.TOO_LARGE, "base + the rows' beats beyond the replay buffer's depth",
                 lambda f, q, cap, ops: f["base"] + q["beats"] > cap.replay_depth),
            _length_rule("rows x row_length elements"))),
}


def _window_extents(capacities):
    """The largest kernel extent of each ``MAX_POOL`` axis (entry 0 the outermost; 1 there for
    a unit of two axes)."""
    return ((max(capacities.window_extent_outer, 1),)
            + (capacities.window_extent,) * (WINDOW_RANK - 1))


def _max_pool_rules():
    axes = [window_fields(axis) for axis in range(WINDOW_RANK)]
    inner = axes[-1]
    span = [f"span[{axis}]" for axis in range(WINDOW_RANK)]   # (kernel - 1) x dilation
    positive = ("size", "out", "kernel", "stride", "dilation")
    return CommandRules(
        row="group",
        products=(("image", tuple(a["size"] for a in axes)), ("rows", ("image", "groups")),
                  ("data", ("rows", "group")),
                  ("image_out", tuple(a["out"] for a in axes)),
                  ("reply", ("image_out", "groups", "group")),
                  ("reply_indices", ("reply", "indices")),
                  ("plane", (axes[1]["out"], axes[2]["out"])),
                  *((span[k], (a["dilation"], less_one(a["kernel"])))
                    for k, a in enumerate(axes))),
        data="data", reply="reply", indices="reply_indices", request_rows="rows",
        rules=(
            Rule(Status.BAD_PARAMETER, "a reserved byte is not 0",
                 lambda f, q, cap, ops: f["reserved"] != 0),
            Rule(Status.BAD_PARAMETER, "an indices flag other than 0 or 1",
                 lambda f, q, cap, ops: ops.exceeds(f["indices"], 1)),
            Rule(Status.BAD_PARAMETER, "a group of 0 images",
                 lambda f, q, cap, ops: f["group"] == 0),
            Rule(Status.BAD_PARAMETER, "an axis's size, out, kernel, stride or dilation of 0",
                 lambda f, q, cap, ops: ops.any(f[a[name]] == 0 for a in axes
                                                for name in positive)),
            Rule(Status.BAD_PARAMETER, "a first window of padding only ((kernel - 1) x "
                 "dilation < pad)",
                 lambda f, q, cap, ops: ops.any(q[s] < f[a["pad"]] for s, a in zip(span, axes))),
            Rule(Status.BAD_PARAMETER, "an axis field above window_field_max",
                 lambda f, q, cap, ops: ops.any(ops.exceeds(f[name], cap.window_field_max)
                                                for a in axes for name in a.values())),
            Rule(Status.TOO_LARGE, "Indices asked of a unit without them (window_indices 0)",
                 lambda f, q, cap, ops: (cap.window_indices == 0) & ops.exceeds(f["indices"], 0)),
            Rule(Status.TOO_LARGE, "a group wider than the pooling unit's lanes (group x "
                 "itemsize above 8 x window_lanes bytes)",
                 lambda f, q, cap, ops: ops.exceeds(q["row_bytes"], cap.window_bytes)),
            Rule(Status.TOO_LARGE, "a kernel extent above window_extent (an axis but the "
                 "outermost) or window_extent_outer (the outermost)",
                 lambda f, q, cap, ops: ops.any(
                     ops.exceeds(q[s], limit - 1) for s, limit in zip(span, _window_extents(cap)))),
            Rule(Status.TOO_LARGE, "an outermost axis of more than one element or output on a "
                 "unit of two axes (window_extent_outer 0)",
                 lambda f, q, cap, ops: (cap.window_extent_outer == 0)
                 & (ops.exceeds(f[axes[0]["size"]], 1) | ops.exceeds(f[axes[0]["out"]], 1))),
            Rule(Status.TOO_LARGE, "an innermost output length above window_columns with a "
                 "middle kernel extent above 1",
                 lambda f, q, cap, ops: ops.exceeds(f[inner["out"]], cap.window_columns)
                 & ops.exceeds(q[span[1]], 0)),
            Rule(Status.TOO_LARGE, "an output plane above window_plane with an outermost "
                 "kernel extent above 1",
                 lambda f, q, cap, ops: ops.exceeds(q["plane"], cap.window_plane)
                 & ops.exceeds(q[span[0]], 0)),
            Rule(Status.TOO_LARGE, "an image of more than WINDOW_IMAGE_MAX elements",
                 lambda f, q, cap, ops: ops.exceeds(q["image"], cap.window_image_max)),
            _reply_rule(),
            _length_rule("groups x group x prod(size) elements")),
        late=((Status.BAD_PARAMETER, "a window of padding only (found by the unit while the "
                                     "data streams; the reply's data is unspecified)"),))


RULES[Command.MAX_POOL] = _max_pool_rules()

#: ``MAX_POOL`` fields a device may hold as their value up to its ``window_field_max`` and one
#: bit that says whether it is above (every axis field): "an axis field above
#: window_field_max" is a ``BAD_PARAMETER``, so when that bit is set the verdict is
#: ``BAD_PARAMETER`` whatever the other rules say, and when none is set the values are exact.
WINDOW_NARROW_FIELDS = tuple(window_fields(axis)[name] for axis in range(WINDOW_RANK)
                             for name in WINDOW_FIELDS)


def _max_command_rules(max_dims):
    counts = tuple(f"counts[{d}]" for d in range(max_dims))
    return CommandRules(
        row="row_length",
        products=(("rows", counts), ("streamed_rows", ("rows", "streamed")),
                  ("data", ("streamed_rows", "row_length")), ("reply", ("rows", "row_length"))),
        data="data", reply="reply", request_rows="streamed_rows", rules=_max_rules())


def _check_rules(command, spec, block):
    """The table's own consistency: names resolve one way, statuses come in priority order."""
    products = [name for name, _ in spec.products]
    assert not set(products) & set(block.names), f"{command!r}: a product named like a field"
    for index, (name, factors) in enumerate(spec.products):
        for factor in factors[1:]:    # only a first factor may be an earlier product
            assert factor in block.names or factor == "row_beats" \
                or less_one_of(factor) in block.names, (command, name, factor)
        assert factors[0] in block.names or factors[0] in products[:index] \
            or factors[0] == "row_beats", (command, name)
    order = [STATUS_ORDER.index(rule.status) for rule in spec.rules]
    assert order == sorted(order), f"{command!r}: rules out of priority order"


def command_rules(command, max_dims=0):
    """The :class:`CommandRules` of a data command (``MAX``'s depend on ``max_dims``), or
    ``None`` for ``IDENTIFY``, ``COUNTERS`` and unknown codes."""
    if command == Command.MAX:
        return _max_command_rules(max_dims)
    return RULES.get(command)


#: The data commands, in code order.
DATA_COMMANDS = (Command.REDUCE, Command.POOL_CHANNELS_LAST, Command.LOAD, Command.MAX,
                 Command.MAX_POOL)

for _command in DATA_COMMANDS:
    _check_rules(_command, command_rules(_command, 2), parameter_block(_command, 2, 2))


class _PythonOps:
    any = staticmethod(lambda conditions: any(conditions))
    exceeds = staticmethod(lambda value, bound: value > bound)
    mux = staticmethod(lambda condition, a, b: a if condition else b)


@dataclass(frozen=True)
class Problem:
    """A rule a request breaks: its status and what it says."""

    status: Status
    description: str


def quantities(command, fields, capacities, itemsize, data_length=0):
    """The derived quantities of a data request, on Python integers (unbounded).

    ``row_bytes``, ``row_beats``, the products of :class:`CommandRules`, ``data_bytes``,
    ``reply_bytes`` and ``payload_data`` (``data_length``, the bytes after the block).
    """
    spec = command_rules(command, capacities.max_dims)
    q = {"payload_data": data_length}
    q["row_bytes"] = fields[spec.row] * itemsize
    q["row_beats"] = -(-q["row_bytes"] // capacities.beat_bytes)
    for name, factors in spec.products:
        value = 1
        for factor in factors:
            field = less_one_of(factor)
            value *= q[factor] if factor in q else fields[factor] if field is None \
                else fields[field] - 1
        q[name] = value
    q["data_bytes"] = q[spec.data] * itemsize if spec.data else 0
    reply_size = WINDOW_INDEX_BYTES if spec.offsets and fields[spec.offsets] else itemsize
    q["reply_bytes"] = q[spec.reply] * reply_size if spec.reply else 0
    if spec.indices:
        q["reply_bytes"] += q[spec.indices] * WINDOW_INDEX_BYTES
    return q


def takes(command, capacities):
    """Whether a device takes ``command`` at all: ``REDUCE`` only with the run reducer
    (``reduce_lanes`` above 0), ``MAX_POOL`` only with the windowed pooling unit
    (``window_lanes`` above 0), ``POOL_CHANNELS_LAST`` only with the channels-last one
    (``pool_channels`` above 0), ``LOAD`` and ``MAX`` only with the broadcast unit
    (``replay_depth`` above 0). Without its unit a command's code is unknown
    (``BAD_COMMAND``), so a small core spends nothing on its block and rules.
    ``capacities`` is a :class:`Capacities` or an :class:`Identity`."""
    unit = {Command.REDUCE: "reduce_lanes", Command.MAX_POOL: "window_lanes",
            Command.POOL_CHANNELS_LAST: "pool_channels", Command.LOAD: "replay_depth",
            Command.MAX: "replay_depth"}.get(command)
    return unit is None or getattr(capacities, unit) > 0


def problems(command, fields, capacities, *, data_length=0, dtypes=None):
    """Every rule a request breaks, in priority order (empty: the device answers ``OK``).

    Parameters
    ----------
    command : int
    fields : dict
        ``{field name: value}`` of the parameter block (``ParameterBlock.unpack``); ignored for
        commands without one.
    capacities : Capacities or Identity
    data_length : int
        Bytes of the payload after the parameter block.
    dtypes : collection of int, optional
        The supported dtype codes (default: ``capacities.dtypes`` of an Identity, else all of
        :data:`~maxaccel.contract.dtypes.FORMATS`).
    """
    if isinstance(capacities, Identity):
        dtypes = capacities.dtypes if dtypes is None else dtypes
        capacities = Capacities.of(capacities)
    dtypes = {int(code) for code in FORMATS} if dtypes is None else set(dtypes)
    if command in (Command.IDENTIFY, Command.COUNTERS):
        return [Problem(Status.BAD_LENGTH, "the command takes no payload")] if data_length \
            else []
    spec = command_rules(command, capacities.max_dims)
    if spec is None or not takes(command, capacities):
        return [Problem(Status.BAD_COMMAND, f"unknown command code {command}")]
    if fields["dtype"] not in dtypes:
        return [Problem(Status.UNSUPPORTED_DTYPE, f"dtype code {fields['dtype']} is not one the "
                                                  f"device supports")]
    itemsize = format_of(fields["dtype"]).nbytes
    q = quantities(command, fields, capacities, itemsize, data_length)
    return [Problem(rule.status, rule.description) for rule in spec.rules
            if rule.refuses(fields, q, capacities, _PythonOps)]


def rules_markdown():
    """The status rules as the Markdown table ``docs/protocol.md`` shows (a test keeps the two
    equal): one row per data command, one column per status, in priority order."""
    statuses = STATUS_ORDER[1:]
    lines = ["| command | " + " | ".join(f"`{s.name}`" for s in statuses) + " |",
             "|---|" + "---|" * len(statuses)]
    for command in DATA_COMMANDS:
        spec = command_rules(command, 1)
        cells = ["; ".join(r.description for r in spec.rules if r.status == s) or "(none)"
                 for s in statuses]
        lines.append(f"| `{command.name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def late_problems(command, fields):
    """What the unit finds while an accepted request's data streams (:attr:`CommandRules.late`):
    for ``MAX_POOL``, a window of padding only."""
    spec = command_rules(command)
    if spec is None or not spec.late:
        return []
    config = [{name: fields[field] for name, field in window_fields(axis).items()}
              for axis in range(WINDOW_RANK)]
    if window_geometry(config).has_empty_windows():
        return [Problem(*spec.late[0])]
    return []


def verdict(command, fields, identity, *, data_length=0):
    """The status a device with ``identity`` answers for an intact request frame.

    The single statement of the status rules and their order for the host, the fake board and
    the tests; the command engine derives its checks from the same :data:`RULES`, and takes
    the late statuses (:func:`late_problems`) from its units.
    """
    found = (problems(command, fields, identity, data_length=data_length)
             or late_problems(command, fields))
    return found[0].status if found else Status.OK


def request_verdict(command, payload, identity):
    """:func:`verdict` of a whole request payload: its block parsed, a short one refused."""
    block = parameter_block(command, identity.max_dims, identity.max_operands)
    if not takes(command, identity):
        return Status.BAD_COMMAND
    if command_rules(command, identity.max_dims) is not None and len(payload) < block.size:
        return Status.BAD_LENGTH
    fields = block.unpack(payload) if block.size else {}
    return verdict(command, fields, identity, data_length=len(payload) - block.size)
