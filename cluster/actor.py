"""The Ray actor behind one board of a :class:`~maxaccel.cluster.pool.BoardPool`.

A plain class: the pool turns it into an actor with ``ray.remote`` and its own options (the
board resource, node placement, one call at a time), so the class itself needs no Ray to import
and can be driven directly in a test.
"""

from maxaccel.host.link import LinkError
from maxaccel.host.transport import TransportError

__all__ = ["BoardActor", "BoardFault", "OPERATIONS"]

#: The Device operations a pool may call on a board by name.
OPERATIONS = frozenset({"max", "min", "reduce_max", "reduce_min", "global_max_pool", "max_pool",
                        "arg_max", "arg_min"})


class BoardFault(Exception):
    """The board itself failed a call (its link gave up after its own timeout and retries, or
    its transport broke): the call may succeed on another board. Carries the original error's
    one-line description, so the pool can say what happened to the board."""


class BoardActor:
    """One board: its device, opened once, and one :class:`OffloadSession` per model.

    Parameters
    ----------
    url : str
        The board's device URL, as :func:`maxaccel.host.device.open_device` takes it.
    options : dict, optional
        Keyword arguments of ``open_device`` (``timeout_s``, ``attempts``,
        ``max_frame_bytes``); progress bars are off (no terminal in an actor).

    Raises
    ------
    Whatever ``open_device`` raises: the actor then dies, and the pool says why.
    """

    def __init__(self, url, options=None):
        from maxaccel.host.device import open_device
        self.url = url
        self.device = open_device(url, progress=None, **(options or {}))
        self.sessions = {}
        try:
            from maxaccel.bench.cycles import NoCycleCounter, cycle_counter
            self._board = cycle_counter(self.device)
        except NoCycleCounter:
            self._board = None           # a real board: no clock cycles to count

    def describe(self):
        """``repr`` of the device (what ``IDENTIFY`` reported) and whether it counts cycles."""
        return repr(self.device), self._board is not None

    def _cycles(self):
        return None if self._board is None else self._board.cycles

    def _measured(self, call):
        """``(call(), device cycles it took or None)``; a board failure becomes BoardFault."""
        start = self._cycles()
        try:
            result = call()
        except (LinkError, TransportError) as error:
            raise BoardFault(f"{type(error).__name__}: {error}") from None
        end = self._cycles()
        return result, None if start is None else end - start

    def call(self, operation, args, kwargs):
        """``device.<operation>(*args, **kwargs)`` and its device cycles (None on a real board).

        Parameters
        ----------
        operation : str
            One of :data:`OPERATIONS`.
        """
        if operation not in OPERATIONS:
            raise ValueError(f"not a device operation: {operation!r}")
        method = getattr(self.device, operation)
        return self._measured(lambda: method(*args, **kwargs))

    def run(self, key, model, output_names, feeds):
        """``OffloadSession.run(output_names, feeds)`` of the model ``key`` names, and its
        device cycles.

        Parameters
        ----------
        key : str
            The model's digest: its session is created at the board's first run of it.
        model : list
            ``[ObjectRef]`` of the serialized model (boxed, so Ray resolves it only when this
            board has no session for it yet).
        """
        session = self.sessions.get(key)
        if session is None:
            import ray
            from maxaccel.host.offload import OffloadSession
            session = self.sessions[key] = OffloadSession(ray.get(model[0]), device=self.device)
        return self._measured(lambda: session.run(output_names, feeds))

    def close(self):
        """Close the board (the pool calls it before it ends the actor)."""
        self.sessions.clear()
        self.device.close()
