"""``BoardPool``: several boards, on one host or many, behind one pool on Ray.

Design (``docs/scale-out.md``): one Ray actor per board URL (:class:`~maxaccel.cluster.actor.
BoardActor`) holds the board's device and its ONNX sessions, reserves one unit of the custom
resource :data:`BOARD_RESOURCE` and takes one call at a time. The pool keeps at most one call
in flight per board, hands the next call to whichever board is free, and collects the results
by position, so every result is taken exactly once. Ray places the actors (the resource, and a
node when a URL names one) and moves the tensors; the pool writes no scheduler and no RPC.

Failures, and what the pool does:

* the actor dies (its process crashed, its node went away, ``ray.kill``): the call goes back to
  the queue; a board whose URL names a virtual board (``sim``, ``verilator``, ``netlist:``,
  ``xdma-model:``) gets a new actor, up to ``restarts`` times, any other is dropped;
* the board gives up on its link (the driver's own reply timeout and retries: ``LinkError``,
  ``TransportError``): the same;
* the board does not answer within its timeout (``timeout_s``): its actor is killed, then as
  above;
* no board left: :class:`NoBoardLeft`, naming each board and what happened to it;
* anything else a call raises (an input the operator refuses, say) is the caller's error and is
  raised as it is.
"""

import collections
import hashlib
import logging
import math
import re
import time
from dataclasses import dataclass, field

import numpy as np

from maxaccel.cluster.actor import BoardActor, BoardFault
from maxaccel.host.transport import SimTransport, _parse, check_url

__all__ = ["BoardPool", "Board", "NoBoardLeft", "BOARD_RESOURCE", "RESTARTABLE_KINDS"]

log = logging.getLogger("maxaccel.cluster")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

#: The custom Ray resource each board's actor reserves one unit of: a node offers as many as
#: it has boards (``ray start --resources='{"maxaccel_board": 2}'``).
BOARD_RESOURCE = "maxaccel_board"

#: Board kinds (``maxaccel.host.transport`` URL kinds) a new actor can reopen at will: the
#: virtual boards, bare or behind the XDMA driver's double. A physical board that failed is
#: dropped rather than reopened behind the user's back.
RESTARTABLE_KINDS = frozenset(SimTransport.BOARDS) | {"xdma-model"}


class NoBoardLeft(RuntimeError):
    """Every board of the pool has been dropped; the message names each one and why.

    Attributes
    ----------
    boards : list of Board
        The pool's boards, each with its ``events``.
    """

    def __init__(self, message, boards):
        super().__init__(message)
        self.boards = boards


@dataclass(eq=False)
class Board:
    """One board of a pool, as :attr:`BoardPool.boards` lists it.

    Attributes
    ----------
    url : str
        The device URL the board's actor opens (without a ``#NODE`` suffix).
    node : str or None
        The Ray node the board is pinned to (IP address, host name or node id), if any.
    actor : ray.actor.ActorHandle
        The board's actor (a new handle after a restart).
    timeout_s : float
        How long one call may take on this board before the pool gives up on it.
    restartable : bool
        Whether a failed actor is replaced (virtual boards) or the board dropped.
    description : str
        What the board reported when it opened (``repr`` of its ``Device``).
    runs : int
        Calls this board completed (runs of a model and shards alike).
    failures : int
        Calls that failed on this board (and went to another).
    restarts : int
        Actors started after the first.
    cycles : int or None
        Device cycles of the completed calls (virtual boards count them; None on real boards).
    dropped : bool
        Whether the pool no longer uses it.
    events : list of str
        What happened to it, in order (each failure, restart and the drop).
    """

    url: str
    node: str | None
    actor: object
    timeout_s: float
    restartable: bool
    description: str = ""
    runs: int = 0
    failures: int = 0
    restarts: int = 0
    cycles: int | None = 0
    dropped: bool = False
    events: list = field(default_factory=list)

    @property
    def name(self):
        return self.url if self.node is None else f"{self.url}#{self.node}"

    def summary(self):
        """One line: the board, its counts and what happened to it."""
        state = "dropped" if self.dropped else "in use"
        text = (f"{self.name}: {state}, {self.runs} calls done, {self.failures} failed, "
                f"{self.restarts} restarts")
        return text + ("" if not self.events else " (" + "; ".join(self.events) + ")")


def _split_node(spec):
    """``(url, node)`` of a board spec ``URL`` or ``URL#NODE``."""
    if not isinstance(spec, str):
        raise TypeError(f"a board is a device URL string, got {spec!r}")
    url, _, node = spec.partition("#")
    if "#" in spec and not node:
        raise ValueError(f"board {spec!r}: '#' must be followed by a Ray node (its IP address, "
                         f"host name or node id)")
    return url, node or None


def _one_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _model_bytes(model):
    """The model's serialized bytes, checked to be an ONNX model (as OffloadSession reads it)."""
    from maxaccel.host.offload import read_model
    if isinstance(model, (bytes, bytearray)):
        read_model(model)               # ValueError if it does not parse
        return bytes(model)
    return read_model(model).SerializeToString()


class BoardPool:
    """Boards behind one pool: runs spread over them, shards combined exactly, failover.

    Parameters
    ----------
    urls : list of str
        One device URL per board (``open_device``'s: ``"sim"``, ``"verilator"``,
        ``"serial:///dev/ttyUSB0"``, ``"xdma:///dev/xdma0"``...), optionally followed by
        ``#NODE`` to pin the board to a Ray node (its IP address, host name or node id): the
        URL is then opened on that node. A virtual board may be listed several times (each is
        a board of its own); a physical board only once per node.
    address : str, optional
        A running Ray cluster to join (``"auto"``, ``"ray://head:10001"``, ``"head:6379"``);
        its nodes must offer the :data:`BOARD_RESOURCE` resource. Default: start a local Ray
        instance offering one unit per board, shut down with the pool. If Ray is already
        initialised in this process, the pool uses it and leaves it running.
    timeout_s : float or list of float
        How long one call may take on a board (one per board, or one for all) before the pool
        gives up on that board: its actor is killed and the call goes to another board.
        Default 600 s.
    restarts : int, optional
        New actors a virtual board may get after failures before it is dropped (default 2);
        physical boards are dropped at their first failure.
    open_timeout_s : float
        How long the boards may take to open (a ``"verilator"`` board builds its model at its
        first use, which takes minutes).
    device_options : dict, optional
        Keyword arguments of ``open_device`` for every board (``timeout_s``, ``attempts``,
        ``max_frame_bytes``).
    ray_options : dict, optional
        Extra keyword arguments of ``ray.init`` (``num_cpus``, ``runtime_env``...).

    Raises
    ------
    ValueError, TypeError
        No URL, a malformed URL, a physical board listed twice, a bad timeout: before Ray
        starts.
    ImportError
        Ray is not installed (``pip install 'maxaccel[cluster]'``).
    RuntimeError
        A board did not open (the message says which and why); the pool releases the others.

    Attributes
    ----------
    boards : list of Board
        Every board, in the order of ``urls``.
    restarts : int
        As the argument (may be changed between calls).
    last_calls : list of (int, int or None)
        For each call of the latest :meth:`run`, :meth:`reduce_max`, :meth:`reduce_min`,
        :meth:`arg_max`, :meth:`arg_min`, :meth:`max` or :meth:`min`, in order:
        the position in :attr:`boards` of the board that completed it and the device cycles it
        took there (None on a real board).

    Notes
    -----
    A pool serves one caller at a time: call it from one thread (its calls block until every
    result is in). For concurrent clients, put it behind a server, or use one pool per client
    on disjoint boards; ``docs/examples/serve_boards.py`` serves boards with Ray Serve.
    """

    def __init__(self, urls, address=None, *, timeout_s=600.0, restarts=2,
                 open_timeout_s=900.0, device_options=None, ray_options=None):
        if isinstance(urls, str) or not hasattr(urls, "__iter__"):
            raise TypeError(f"urls must be a list of device URLs, got {urls!r}")
        specs = [_split_node(spec) for spec in urls]
        if not specs:
            raise ValueError("a BoardPool needs at least one board URL")
        kinds = []
        for url, _ in specs:
            check_url(url)              # the form and options, as open_device checks them
            kinds.append(_parse(url)[0])
        seen = set()
        for (url, node), kind in zip(specs, kinds):
            if kind not in RESTARTABLE_KINDS:
                if (url, node) in seen:
                    raise ValueError(f"board {url!r} is listed twice: a physical board is opened "
                                     f"by one actor only")
                seen.add((url, node))
        if isinstance(timeout_s, (int, float)):
            timeouts = [float(timeout_s)] * len(specs)
        else:
            timeouts = [float(t) for t in timeout_s]
            if len(timeouts) != len(specs):
                raise ValueError(f"timeout_s has {len(timeouts)} values for {len(specs)} boards")
        if any(not t > 0 or math.isnan(t) for t in timeouts):
            raise ValueError(f"timeout_s must be positive seconds, got {timeout_s!r}")
        if int(restarts) != restarts or restarts < 0:
            raise ValueError(f"restarts must be a non-negative integer, got {restarts!r}")
        try:
            import ray
        except ImportError:
            raise ImportError("BoardPool needs Ray: pip install 'maxaccel[cluster]'") from None
        self._ray = ray
        self.restarts = int(restarts)
        self._device_options = dict(device_options or {})
        self._started_ray = False
        self._closed = False
        self._models = {}               # digest -> (ObjectRef of the bytes, feed checker)
        self.last_calls = []
        if not ray.is_initialized():
            options = dict(include_dashboard=False, logging_level=logging.WARNING,
                           log_to_driver=False)
            if address is None:
                options["resources"] = {BOARD_RESOURCE: len(specs)}
            options.update(ray_options or {})
            ray.init(address=address, **options)
            self._started_ray = True
        self.boards = [Board(url, node, None, timeout, kind in RESTARTABLE_KINDS)
                       for (url, node), timeout, kind in zip(specs, timeouts, kinds)]
        try:
            offered = ray.cluster_resources().get(BOARD_RESOURCE, 0)
            if offered < len(specs):
                # Actors would wait for a node that never comes: say so now.
                raise ValueError(
                    f"the Ray cluster offers {offered:g} {BOARD_RESOURCE!r} resources and the "
                    f"pool has {len(specs)} boards: start each node with its boards' count "
                    f"(ray start --resources='{{\"{BOARD_RESOURCE}\": N}}', or "
                    f"ray.init(resources=...))")
            self._open(open_timeout_s)
        except BaseException:
            self.close()
            raise

    # --- life cycle ----------------------------------------------------------------------------

    def _actor_options(self, board):
        options = dict(num_cpus=0, resources={BOARD_RESOURCE: 1}, max_concurrency=1,
                       max_restarts=0, max_task_retries=0)
        if board.node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                self._node_id(board.node), soft=False)
        return options

    def _node_id(self, node):
        for info in self._ray.nodes():
            if info.get("Alive") and node in (info.get("NodeManagerAddress"),
                                              info.get("NodeManagerHostname"),
                                              info.get("NodeID"), info.get("NodeName")):
                return info["NodeID"]
        alive = [info.get("NodeManagerAddress") for info in self._ray.nodes() if info.get("Alive")]
        raise ValueError(f"no live Ray node {node!r}; the cluster's nodes: {', '.join(alive)}")

    def _start(self, board):
        remote = self._ray.remote(BoardActor).options(**self._actor_options(board))
        board.actor = remote.remote(board.url, self._device_options)
        return board.actor.describe.remote()

    def _open(self, open_timeout_s):
        ray = self._ray
        pending = {self._start(board): board for board in self.boards}
        ready, waiting = ray.wait(list(pending), num_returns=len(pending),
                                  timeout=open_timeout_s)
        problems = [f"{pending[ref].name}: did not open within {open_timeout_s:g} s (is a "
                    f"node offering the {BOARD_RESOURCE!r} resource free for it?)"
                    for ref in waiting]
        for ref in ready:
            board = pending[ref]
            try:
                board.description, counts = ray.get(ref)
            except Exception as error:   # the actor's constructor raised: the board's error
                problems.append(f"{board.name}: "
                                f"{_cause(error).removeprefix('did not open: ')}")
            else:
                if not counts:
                    board.cycles = None
        if problems:
            raise RuntimeError("boards that did not open: " + "; ".join(problems))

    def close(self):
        """Close every board and end its actor; shut Ray down if the pool started it
        (idempotent)."""
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        closing = [b.actor.close.remote() for b in self.boards
                   if b.actor is not None and not b.dropped]
        if closing:
            ray.wait(closing, num_returns=len(closing), timeout=30)
        for board in self.boards:
            if board.actor is not None:
                ray.kill(board.actor)
        self._models.clear()
        if self._started_ray:
            ray.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        live = sum(not b.dropped for b in self.boards)
        return f"<BoardPool {live} of {len(self.boards)} boards in use>"

    # --- failover ------------------------------------------------------------------------------

    def _live(self):
        return [b for b in self.boards if not b.dropped]

    def _failed(self, board, what):
        """``board`` failed a call (``what`` says how): replace its actor if it may be, or
        drop it."""
        board.failures += 1
        board.events.append(what)
        self._ray.kill(board.actor)      # hung or dead: end it either way
        if board.restartable and board.restarts < self.restarts:
            board.restarts += 1
            board.events.append(f"restart {board.restarts}")
            try:
                self._start(board)
            except ValueError as error:  # its node is gone
                board.events.append(str(error))
            else:
                log.warning("board %s: %s; restarted", board.name, what)
                return
        board.dropped = True
        board.events.append("dropped")
        log.warning("board %s: %s; dropped", board.name, what)

    def _map(self, method, calls):
        """Run ``calls`` (argument tuples of the actors' ``method``) over the boards, one call
        in flight per board, each call until one board completes it; the results in order."""
        ray = self._ray
        from ray.exceptions import RayActorError
        if self._closed:
            raise ValueError("the pool is closed")
        results = [None] * len(calls)
        done = [False] * len(calls)
        self.last_calls = [None] * len(calls)
        queue = collections.deque(range(len(calls)))
        flying = {}                     # ObjectRef -> (call index, board, deadline)
        while queue or flying:
            busy = {id(board) for _, board, _ in flying.values()}
            for board in self._live():
                if not queue:
                    break
                if id(board) not in busy:
                    index = queue.popleft()
                    ref = getattr(board.actor, method).remote(*calls[index])
                    flying[ref] = (index, board, time.monotonic() + board.timeout_s)
            if not flying:
                raise NoBoardLeft(
                    f"no board left in the pool, {len(queue)} of {len(calls)} calls not done: "
                    + "; ".join(b.summary() for b in self.boards), list(self.boards))
            wait = max(0.0, min(deadline for _, _, deadline in flying.values())
                       - time.monotonic())
            ready, _ = ray.wait(list(flying), num_returns=1, timeout=wait)
            for ref in ready:
                index, board, _ = flying.pop(ref)
                try:
                    value, cycles = ray.get(ref)
                except (RayActorError, BoardFault) as error:
                    queue.appendleft(index)
                    self._failed(board, f"call {index}: {_cause(error)}")
                    continue
                except Exception as error:
                    raise _unwrapped(error) from None
                assert not done[index], f"call {index} completed twice"
                results[index], done[index] = value, True
                self.last_calls[index] = (self.boards.index(board), cycles)
                board.runs += 1
                if board.cycles is not None and cycles is not None:
                    board.cycles += cycles
            now = time.monotonic()
            for ref, (index, board, deadline) in list(flying.items()):
                if deadline <= now:
                    del flying[ref]
                    queue.appendleft(index)
                    self._failed(board, f"call {index}: no answer within "
                                        f"{board.timeout_s:g} s")
        return results

    # --- models --------------------------------------------------------------------------------

    def run(self, model, feeds_list, output_names=None):
        """Run ``model`` once per feeds dict, each run on one board.

        Parameters
        ----------
        model : str, os.PathLike, bytes or onnx.ModelProto
            The ONNX model, as :class:`~maxaccel.host.offload.OffloadSession` takes it; each
            board creates its session for it once, at its first run of it.
        feeds_list : list of dict
            One ``{input name: array}`` per run, checked against the model's inputs before any
            is sent.
        output_names : list of str, optional
            As ``OffloadSession.run``'s (default: every output).

        Returns
        -------
        list of list of numpy.ndarray
            One output list per feeds dict, in order: the bits one board's ``OffloadSession``
            returns.

        Raises
        ------
        ValueError, TypeError
            A model that does not load, or feeds that do not match its inputs.
        NoBoardLeft
            Every board failed.
        """
        from maxaccel.host.offload import OffloadSession
        data = _model_bytes(model)
        key = hashlib.sha256(data).hexdigest()
        if key not in self._models:
            # The model's bytes go to the object store once; a session on the host (no device
            # opened) checks feeds as each board's session would.
            self._models[key] = (self._ray.put(data), OffloadSession(data))
        ref, checker = self._models[key]
        if isinstance(feeds_list, dict):
            raise TypeError("feeds_list is a list of feeds dicts (one per run), not one dict")
        feeds_list = list(feeds_list)
        checked = []
        for number, feeds in enumerate(feeds_list):
            try:
                checked.append(checker.check_feeds(feeds))
            except (TypeError, ValueError) as error:
                raise type(error)(f"feeds {number}: {error}") from None
        if output_names is not None:
            known = {spec.name for spec in checker.outputs}
            unknown = [name for name in output_names if name not in known]
            if unknown:
                raise ValueError(f"unknown output(s) {', '.join(map(repr, unknown))}; the "
                                 f"model's outputs: {', '.join(sorted(known))}")
            output_names = list(output_names)
        return self._map("run", [(key, [ref], output_names, feeds) for feeds in checked])

    # --- sharded operators ---------------------------------------------------------------------

    def _pieces(self, size, pieces):
        count = len(self._live()) if pieces is None else int(pieces)
        if count < 1:
            raise ValueError(f"pieces must be at least 1, got {pieces!r}")
        return max(1, min(size, count))

    def reduce_max(self, x, axes=None, keepdims=True, noop_with_empty_axes=False, *,
                   pieces=None):
        """ONNX ``ReduceMax`` of ``x`` split across the boards, combined exactly.

        ``x`` is cut along its longest axis into ``pieces`` slices (default: one per board in
        use), each reduced on a board with the dimensions kept. Slices of a kept axis are
        joined; partial maxima of a reduced axis are combined on the host by the golden
        model's ``reduce_max`` (the maximum over order keys is associative and commutative,
        so the bits are those of one board's reduction: NaN absorbing, ``+0 > -0``).

        Parameters
        ----------
        x, axes, keepdims, noop_with_empty_axes
            As :meth:`maxaccel.host.device.Device.reduce_max` (checked before anything is
            sent).
        pieces : int, optional
            How many slices (at most the longest axis' length).

        Returns
        -------
        numpy.ndarray
            Bit for bit :func:`maxaccel.sim.reference.reduce_max`'s result.
        """
        return self._reduce("reduce_max", x, axes, keepdims, noop_with_empty_axes, pieces)

    def reduce_min(self, x, axes=None, keepdims=True, noop_with_empty_axes=False, *,
                   pieces=None):
        """ONNX ``ReduceMin`` of ``x`` split across the boards, combined exactly: as
        :meth:`reduce_max`, the partial minima combined by the golden model's ``reduce_min``
        (NaN absorbing, ``-0 < +0``; an empty set's ``+inf``, integer maximum or True from one
        board). Bit for bit :func:`maxaccel.sim.reference.reduce_min`'s result."""
        return self._reduce("reduce_min", x, axes, keepdims, noop_with_empty_axes, pieces)

    def _reduce(self, operation, x, axes, keepdims, noop_with_empty_axes, pieces):
        """``reduce_max`` or ``reduce_min`` (``operation``) split across the boards."""
        from maxaccel.contract.checks import check_reduce_max
        from maxaccel.sim import reference
        values, _, axes, keepdims, noop = check_reduce_max(x, axes, keepdims,
                                                           noop_with_empty_axes, name=operation)
        if values.ndim == 0 or values.size == 0 or (not axes and noop):
            # Nothing to spread: one board answers (the empty reduction's value included).
            return self._map("call", [(operation, (values, axes, keepdims, noop), {})])[0]
        reduced = sorted(axes) if axes else list(range(values.ndim))
        axis, _, parts = self._shards(operation, values, pieces, reduced, True, False)
        if axis in reduced:
            combined = getattr(reference, operation)(np.stack(parts), axes=[0], keepdims=False)
        else:
            combined = np.concatenate(parts, axis=axis)
        if keepdims:
            return combined
        return combined.reshape([n for a, n in enumerate(combined.shape) if a not in reduced])

    def arg_max(self, x, axis=0, keepdims=True, select_last_index=False, *, pieces=None):
        """ONNX ``ArgMax`` of ``x`` split across the boards, combined exactly.

        ``x`` is cut along its longest axis into ``pieces`` slices (default: one per board in
        use), each searched on a board with the dimensions kept. Slices of another axis than
        ``axis`` are joined; slices of ``axis`` give a position each, and the host picks among
        them by the values there (taken from ``x``: no second trip over a link) with the
        golden model's ``arg_max``, the first slice winning a tie (the last with
        ``select_last_index``), so the result is one board's: the first NaN, else the first
        maximum, ``+0`` above ``-0``.

        Parameters
        ----------
        x, axis, keepdims, select_last_index
            As :meth:`maxaccel.host.device.Device.arg_max` (checked before anything is sent).
        pieces : int, optional
            How many slices (at most the longest axis' length).

        Returns
        -------
        numpy.ndarray
            Bit for bit :func:`maxaccel.sim.reference.arg_max`'s result (int64).
        """
        return self._arg("arg_max", x, axis, keepdims, select_last_index, pieces)

    def arg_min(self, x, axis=0, keepdims=True, select_last_index=False, *, pieces=None):
        """ONNX ``ArgMin`` of ``x`` split across the boards: as :meth:`arg_max`, the slices'
        positions picked among by the golden model's ``arg_min``. Bit for bit
        :func:`maxaccel.sim.reference.arg_min`'s result."""
        return self._arg("arg_min", x, axis, keepdims, select_last_index, pieces)

    def _shards(self, operation, values, pieces, *arguments):
        """``values`` cut along its longest axis into ``pieces`` slices (default: one per
        board in use), ``operation(slice, *arguments)`` on the boards. Returns ``(axis,
        slices, results)``."""
        axis = int(np.argmax(values.shape))
        slices = np.array_split(values, self._pieces(values.shape[axis], pieces), axis=axis)
        return axis, slices, self._map("call", [(operation, (piece, *arguments), {})
                                                for piece in slices])

    def _arg(self, operation, x, axis, keepdims, select_last_index, pieces):
        """``arg_max`` or ``arg_min`` (``operation``) split across the boards."""
        from maxaccel.contract.checks import check_arg
        from maxaccel.sim import reference
        values, _, axis, keepdims, last, _ = check_arg(x, axis, keepdims, select_last_index,
                                                       operation)
        if values.size == 0:
            return self._map("call", [(operation, (values, axis, keepdims, last), {})])[0]
        cut, slices, parts = self._shards(operation, values, pieces, axis, True, last)
        if cut != axis:
            combined = np.concatenate(parts, axis=cut)
        else:
            found = np.stack([np.take_along_axis(piece, part, axis=axis)
                              for piece, part in zip(slices, parts)])
            best = getattr(reference, operation)(found, axis=0, keepdims=True,
                                                 select_last_index=last)
            starts = np.cumsum([0] + [piece.shape[axis] for piece in slices[:-1]])
            positions = np.stack(parts) + starts.reshape((-1,) + (1,) * values.ndim)
            combined = np.take_along_axis(positions, best, axis=0)[0]
        return combined if keepdims else np.squeeze(combined, axis=axis)

    def max(self, *inputs, pieces=None):
        """ONNX ``Max`` of ``inputs`` (numpy broadcasting) split across the boards.

        The output is cut along its longest axis into ``pieces`` slices (default: one per
        board in use); each board computes its slice from the matching slices of the inputs
        (an input broadcast along that axis goes whole), and the slices are joined: every
        output element comes from exactly one board, and every input byte crosses one link
        once (an input broadcast along the cut crosses each link that needs it).

        Returns
        -------
        numpy.ndarray
            Bit for bit :func:`maxaccel.sim.reference.max`'s result.
        """
        return self._elementwise("max", inputs, pieces)

    def min(self, *inputs, pieces=None):
        """ONNX ``Min`` of ``inputs`` split across the boards as :meth:`max` splits a Max: bit
        for bit :func:`maxaccel.sim.reference.min`'s result."""
        return self._elementwise("min", inputs, pieces)

    def _elementwise(self, operation, inputs, pieces):
        """``max`` or ``min`` (``operation``) of ``inputs``, its output sliced across the
        boards."""
        from maxaccel.contract.checks import check_max
        natives, _, shape = check_max(inputs, name=operation)
        if len(shape) == 0 or math.prod(shape) == 0:
            return self._map("call", [(operation, tuple(natives), {})])[0]
        rank = len(shape)
        aligned = [a.reshape((1,) * (rank - a.ndim) + a.shape) for a in natives]
        axis = int(np.argmax(shape))
        count = self._pieces(shape[axis], pieces)
        bounds = np.linspace(0, shape[axis], count + 1).round().astype(int)
        calls = []
        for start, stop in zip(bounds[:-1], bounds[1:]):
            index = (slice(None),) * axis + (slice(start, stop),)
            calls.append((operation, tuple(a if a.shape[axis] == 1 else a[index]
                                           for a in aligned), {}))
        return np.concatenate(self._map("call", calls), axis=axis)

    def cycles(self):
        """Device cycles each board spent on its completed calls, in the order of
        :attr:`boards` (None for a real board, which counts none)."""
        return [b.cycles for b in self.boards]


def _cause(error):
    """One line naming what went wrong in an actor: the original error, not Ray's wrapper. An
    actor whose constructor raised (the board did not open) carries that error only as the
    last line of its message."""
    message = getattr(error, "error_msg", "")
    if "creation task" in message:
        lines = [line.strip() for line in _ANSI.sub("", message).splitlines() if line.strip()]
        name, _, text = lines[-1].partition(": ")
        return f"did not open: {name.rpartition('.')[2]}: {text}"
    return _one_line(_unwrapped(error))


def _unwrapped(error):
    """The exception a call raised inside its actor, without Ray's ``RayTaskError`` wrapper
    (Ray's is also an instance of the cause's class, but its message is the whole remote
    traceback)."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error
