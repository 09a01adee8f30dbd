"""Stream testbench helpers: sources and sinks with seeded random stalls, and a runner.

For any Amaranth design with ``amaranth.lib.stream`` ports (``valid``, ``ready``, ``payload``)
clocked by the ``sync`` domain, in ``Simulator.add_testbench`` testbenches:

* :func:`send` puts payloads into a stream, idling at random between beats;
* :func:`receive` gets a number of payloads from a stream under random backpressure;
* :func:`run_streams` runs a whole test: a source per input stream, a sink per output stream,
  each stalled by its own generator seeded from one :class:`Stalls`, and then checks that
  nothing is left over: every input beat was accepted, and no output beat beyond the expected
  count appears for ``drain_cycles`` cycles. It returns what each sink received and the cycle
  of each beat (:class:`StreamRun`), so exact latencies can be asserted.

The same seed gives the same stalls, so a failure seen once is seen again. Crossing a test
with :data:`STALL_PATTERNS` (no stalls, idle sources, backpressure, both) is the discipline
every stream test of this project follows (``docs/testing.md`` has a user's example).
:func:`shared_design` keeps one simulator of a design for a test crossed with many cases.

The remaining names (:func:`beats_from_rows`, :func:`rows_from_beats`, :func:`lanes_to_bytes`,
:func:`words_from_bytes`, :func:`bytes_from_words`) pack and unpack the payload layouts of
maxaccel's own units (``maxaccel.hdl.beat``, ``maxaccel.hdl.linkword``).
"""

import collections
import inspect
import random
from dataclasses import dataclass, field

from amaranth.sim import Simulator

__all__ = ["Stalls", "STALL_PATTERNS", "StreamTimeout", "StreamRun", "send", "receive",
           "run_streams", "shared_design", "beats_from_rows", "rows_from_beats",
           "lanes_to_bytes", "words_from_bytes", "bytes_from_words"]


@dataclass(frozen=True)
class Stalls:
    """Random stall pattern of a stream test.

    Attributes
    ----------
    idle : float
        Probability that a source leaves ``valid`` low in a given cycle.
    backpressure : float
        Probability that a sink leaves ``ready`` low in a given cycle.
    seed : int
        Seed of the pattern; the same seed gives the same cycles.
    """

    idle: float = 0.0
    backpressure: float = 0.0
    seed: int = 0

    def __str__(self):
        return f"idle={self.idle} backpressure={self.backpressure} seed={self.seed}"


#: Stall patterns every stream test is crossed with.
STALL_PATTERNS = [
    Stalls(0.0, 0.0, 1),
    Stalls(0.5, 0.0, 2),
    Stalls(0.0, 0.5, 3),
    Stalls(0.3, 0.6, 4),
]


class StreamTimeout(AssertionError):
    """A stream did not deliver or accept the expected beats in time."""


async def send(ctx, stream, payloads, *, rng, idle=0.0, timeout=100_000):
    """Put ``payloads`` into ``stream`` (a testbench's put), idling at random between beats.

    Before each beat, ``valid`` stays low for a cycle with probability ``idle`` (drawn again
    each cycle); then the payload is offered with ``valid`` high until ``ready`` takes it. The
    producer never waits for ``ready`` before raising ``valid``, as the stream rules require.
    ``valid`` is low when it returns.

    Parameters
    ----------
    ctx : amaranth.sim.SimulatorContext
        The testbench's context.
    stream : amaranth.lib.stream.Interface
        The design's input stream (``valid``, ``ready``, ``payload``).
    payloads : sequence
        What ``ctx.set(stream.payload, ...)`` takes: ints, or dicts and lists for a layout.
    rng : random.Random
        The source of the idle cycles; seed it, so a failing run can be run again.
    idle : float
        Probability of an idle cycle before each beat, from 0 (none) to below 1.
    timeout : int
        Cycles a beat may wait for ``ready``.

    Raises
    ------
    StreamTimeout
        A beat was not accepted within ``timeout`` cycles.
    """
    for index, payload in enumerate(payloads):
        while rng.random() < idle:
            ctx.set(stream.valid, 0)
            await ctx.tick()
        ctx.set(stream.payload, payload)
        ctx.set(stream.valid, 1)
        for _ in range(timeout):
            _, _, ready = await ctx.tick().sample(stream.ready)
            if ready:
                break
        else:
            raise StreamTimeout(f"beat {index} of {len(payloads)} not accepted in {timeout} cycles")
    ctx.set(stream.valid, 0)


async def receive(ctx, stream, count, *, rng, backpressure=0.0, timeout=100_000):
    """Get ``count`` payloads from ``stream`` (a testbench's get), under random backpressure.

    Each cycle ``ready`` is low with probability ``backpressure``, high otherwise; a beat is
    taken on a clock edge where both ``valid`` and ``ready`` are high. ``ready`` is low when it
    returns, so beats beyond ``count`` stay in the design (:func:`run_streams` checks there
    are none).

    Parameters
    ----------
    ctx : amaranth.sim.SimulatorContext
        The testbench's context.
    stream : amaranth.lib.stream.Interface
        The design's output stream.
    count : int or callable
        The number of beats to take, or ``complete(payloads)``, true once the payloads taken
        so far are all there are (for a stream whose number of beats depends on its data).
    rng : random.Random
        The source of the backpressure; seed it, so a failing run can be run again.
    backpressure : float
        Probability that ``ready`` is low in a cycle, from 0 (never) to 1 (always: nothing is
        taken, and it times out).
    timeout : int
        Cycles without a beat after which it gives up.

    Returns
    -------
    list
        The payloads, as ``ctx.tick().sample`` gives them (ints, or views of a layout).

    Raises
    ------
    StreamTimeout
        No beat for ``timeout`` cycles before the last.
    """
    received, _, _ = await _take(ctx, stream, count, rng=rng, backpressure=backpressure,
                                 timeout=timeout, name="the stream")
    ctx.set(stream.ready, 0)
    return received


async def _take(ctx, stream, count, *, rng, backpressure, timeout, name):
    """Take beats as :func:`receive` does, leaving ``ready`` as the last cycle set it;
    ``(payloads, arrivals, edges)``: the edge of each beat and the edges waited in all,
    counted from 1 at the first edge."""
    complete = count if callable(count) else (lambda beats: len(beats) >= count)
    edges, waited = 0, 0
    received, arrivals = [], []
    while not complete(received):
        ready = rng.random() >= backpressure
        ctx.set(stream.ready, ready)
        _, _, valid, payload = await ctx.tick().sample(stream.valid, stream.payload)
        edges += 1
        if ready and valid:
            received.append(payload)
            arrivals.append(edges)
            waited = 0
        else:
            waited += 1
            if waited > timeout:
                raise StreamTimeout(f"{name} received {len(received)} beats (not complete), "
                                    f"then nothing for {timeout} cycles")
    return received, arrivals, edges


#: ``{(factory, args, kwargs): design}``: the designs :func:`shared_design` made.
_SHARED = {}
#: ``{id(design): _Bench}`` of shared designs, least recently used first.
_BENCHES = collections.OrderedDict()
#: Simulators kept at once per process (each holds its design, compiled).
_BENCHES_KEPT = 4


def shared_design(factory, *args, **kwargs):
    """The design ``factory(*args, **kwargs)``, made once per process and argument list.

    :func:`run_streams` keeps the simulator of a shared design and resets it between runs
    (:meth:`amaranth.sim.Simulator.reset`: signals and memories to their initial values, the
    clock and every process restarted), so a test crossed with stall patterns, dtypes or data
    builds and compiles the design once rather than once a case: for a whole core that is most of
    a case's time. A shared design must not be changed after it is made.
    """
    key = (factory, args, tuple(sorted(kwargs.items())))
    if key not in _SHARED:
        _SHARED[key] = factory(*args, **kwargs)
    return _SHARED[key]


class _Bench:
    """A :class:`~amaranth.sim.Simulator` of ``dut`` with a clock and testbench slots.

    Slot ``i`` runs the ``i``-th testbench of the current run; slots beyond it return at once.
    Testbenches run in the order they were added, so a run's order is its list's order.
    """

    def __init__(self, dut):
        self.simulator = Simulator(dut)
        self.simulator.add_clock(1e-8)
        self.testbenches = []
        self.slots = 0

    def run(self, testbenches):
        self.simulator.reset()      # the slots added so far restart; a new simulator has none
        self.testbenches = testbenches
        while self.slots < len(testbenches):
            async def slot(ctx, index=self.slots):
                if index < len(self.testbenches):
                    await self.testbenches[index](ctx)
            self.simulator.add_testbench(slot)
            self.slots += 1
        self.simulator.run()


def _bench(dut):
    """A new :class:`_Bench` of ``dut``, or the kept one if ``dut`` is a shared design."""
    if not any(design is dut for design in _SHARED.values()):
        return _Bench(dut)
    key = id(dut)
    if key in _BENCHES:
        _BENCHES.move_to_end(key)
    else:
        _BENCHES[key] = _Bench(dut)
        while len(_BENCHES) > _BENCHES_KEPT:
            _BENCHES.popitem(last=False)
    return _BENCHES[key]


@dataclass
class StreamRun:
    """What :func:`run_streams` observed.

    Attributes
    ----------
    received : dict
        ``{sink name: [payload, ...]}``.
    cycles : dict
        ``{sink name: n}``: the clock edge, counted from 1 at the first edge, at which each sink
        took its last expected beat. With no stalls, a unit that accepts one beat per cycle and
        has latency L delivers its last beat of N at ``cycles == N + L`` (per output beat).
    arrivals : dict
        ``{sink name: [n, ...]}``: the clock edge, counted as in ``cycles``, at which each sink
        took each of its beats (``arrivals[name][-1] == cycles[name]``).
    """

    received: dict = field(default_factory=dict)
    cycles: dict = field(default_factory=dict)
    arrivals: dict = field(default_factory=dict)


def run_streams(dut, *, sources, sinks, stalls=Stalls(), setup=None, drain_cycles=32,
                timeout=20_000, check=None):
    """Simulate ``dut`` with stalling sources and sinks; check nothing is left over or lost.

    Parameters
    ----------
    dut : Elaboratable
        Design under test, clocked by the ``sync`` domain.
    sources : dict
        ``{stream: [payload, ...]}`` for the input streams.
    sinks : dict
        ``{name: (stream, count)}`` for the output streams; ``count`` is the number of beats
        expected, or a function of the beats received so far that says they are complete (for
        link words, whose number depends on how the bytes were split).
    stalls : Stalls
        Idle and backpressure probabilities and the seed.
    setup : callable, optional
        ``setup(ctx)`` sets static inputs (dtype, configuration); it runs before the first edge.
    drain_cycles : int
        After everything expected has been sent and received, the cycles during which no sink
        may see ``valid``.
    timeout : int
        Cycles without progress after which a source or sink fails the test.
    check : callable, optional
        ``check(ctx)`` runs once everything expected has been sent and received and
        ``drain_cycles`` more edges have passed: it reads status outputs with ``ctx.get`` (a
        sticky error flag, an idle flag) and raises ``AssertionError`` if they are wrong. If it
        returns an awaitable (an ``async def``), that is awaited, so it may drive the design on.

    Returns
    -------
    StreamRun

    Raises
    ------
    StreamTimeout
        A source could not deliver or a sink did not receive its beats.
    AssertionError
        A sink saw a beat beyond its expected count.
    """
    rng = random.Random(stalls.seed)
    # One generator per stream so that one stream's pattern does not depend on another's.
    source_rngs = [random.Random(rng.getrandbits(64)) for _ in sources]
    sink_rngs = {name: random.Random(rng.getrandbits(64)) for name in sinks}
    run = StreamRun()
    finished = []
    testbenches = []

    if setup is not None:
        async def configure(ctx):
            setup(ctx)
        testbenches.append(configure)

    for (stream, payloads), source_rng in zip(sources.items(), source_rngs):
        async def source(ctx, stream=stream, payloads=payloads, source_rng=source_rng):
            await send(ctx, stream, payloads, rng=source_rng, idle=stalls.idle, timeout=timeout)
            finished.append(stream)
        testbenches.append(source)

    for name, (stream, count) in sinks.items():
        async def sink(ctx, name=name, stream=stream, count=count):
            received, arrivals, edges = await _take(
                ctx, stream, count, rng=sink_rngs[name], backpressure=stalls.backpressure,
                timeout=timeout, name=f"sink {name!r}")
            run.received[name] = received
            run.cycles[name] = edges
            run.arrivals[name] = arrivals
            finished.append(name)
            # Stay ready: anything beyond the expected beats is an error, caught below.
            ctx.set(stream.ready, 1)
            for _ in range(drain_cycles + timeout):
                if len(finished) == len(sources) + len(sinks):
                    break
                _, _, valid = await ctx.tick().sample(stream.valid)
                if valid:
                    raise AssertionError(f"sink {name!r} got a beat beyond the expected "
                                         f"{len(received)}")
            for _ in range(drain_cycles):
                _, _, valid = await ctx.tick().sample(stream.valid)
                if valid:
                    raise AssertionError(f"sink {name!r} got a beat beyond the expected "
                                         f"{len(received)}")
        testbenches.append(sink)

    if check is not None:
        async def final_check(ctx):
            while len(finished) < len(sources) + len(sinks):
                await ctx.tick()
            for _ in range(drain_cycles):
                await ctx.tick()
            result = check(ctx)
            if inspect.isawaitable(result):
                await result
        testbenches.append(final_check)

    _bench(dut).run(testbenches)
    unsent = [s for s in sources if s not in finished]
    if unsent:
        raise StreamTimeout(f"{len(unsent)} source(s) did not deliver all their beats")
    return run


def beats_from_rows(rows, lanes):
    """Pack rows of bytes into beat payloads (see :func:`maxaccel.hdl.beat.beat_layout`).

    Parameters
    ----------
    rows : iterable of bytes
        Each row's elements, little-endian; a row may be empty.
    lanes : int
        Lanes per beat.

    Returns
    -------
    list of dict
        Beat payloads for ``ctx.set``; padding bytes are zero.
    """
    beat_bytes = 8 * lanes
    beats = []
    for row in rows:
        row = bytes(row)
        chunks = [row[i:i + beat_bytes] for i in range(0, len(row), beat_bytes)] or [b""]
        for index, chunk in enumerate(chunks):
            padded = chunk.ljust(beat_bytes, b"\0")
            beats.append({
                "data": [int.from_bytes(padded[8 * j:8 * j + 8], "little") for j in range(lanes)],
                "nbytes": len(chunk),
                "first": index == 0,
                "last": index == len(chunks) - 1,
            })
    return beats


def lanes_to_bytes(lanes):
    """The bytes of a beat's ``data`` field (a sampled ArrayLayout view or a list of ints)."""
    return b"".join(int(lane).to_bytes(8, "little") for lane in lanes)


def rows_from_beats(beats):
    """Unpack sampled beat payloads into rows of bytes; checks ``first``/``last`` framing."""
    rows, current = [], None
    for index, beat in enumerate(beats):
        if beat.first != (current is None):
            raise AssertionError(f"beat {index}: first={beat.first} but a row is "
                                 f"{'open' if current is not None else 'not open'}")
        current = (current or b"") + lanes_to_bytes(beat.data)[:beat.nbytes]
        if beat.last:
            rows.append(current)
            current = None
    if current is not None:
        raise AssertionError("the last row has no beat with last set")
    return rows


def words_from_bytes(data, width, rng):
    """Split ``data`` into link word payloads (:func:`maxaccel.hdl.linkword.word_layout`) of
    random counts from 1 to ``width``; plain bytes for ``width == 1``."""
    if width == 1:
        return list(data)
    words, position = [], 0
    while position < len(data):
        count = min(rng.randint(1, width), len(data) - position)
        chunk = data[position:position + count].ljust(width, b"\0")
        words.append({"data": list(chunk), "count": count})
        position += count
    return words


def bytes_from_words(words):
    """The bytes of sampled link words (or of plain byte payloads)."""
    if words and isinstance(words[0], int):
        return bytes(words)
    return b"".join(bytes(int(b) for b in word.data)[:word.count] for word in words)
