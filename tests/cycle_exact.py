"""A stream unit driven by hand, a beat a cycle, for tests that count exact cycles.

``run_streams`` (``maxaccel.sim.streams``) checks results under stall patterns; a test of *when*
things happen (the cycle of the last output, the ``idle`` flag at every edge) drives the unit
itself from inside a testbench, after its own set-up (a ``clear``, say), with this loop.
"""


async def feed_a_beat_a_cycle(ctx, dut, beats, edges):
    """Offer ``beats`` on ``dut.i`` one at a time (each held until taken), with ``dut.o`` always
    ready, for clock edges ``1 .. edges - 1``.

    Parameters
    ----------
    ctx
        The testbench's context.
    dut
        A unit with ``i`` and ``o`` streams and an ``idle`` output.
    beats : list
        Payloads for ``dut.i``.
    edges : int
        One more than the clock edges to run.

    Returns
    -------
    (list, list of int, int or None)
        The payloads ``dut.o`` gave, in order; ``idle`` sampled at each edge; the edge (from
        1) of the last output.
    """
    ctx.set(dut.o.ready, 1)
    received, pending, idle, last_out = [], list(beats), [], None
    for edge in range(1, edges):
        if pending:
            ctx.set(dut.i.payload, pending[0])
        ctx.set(dut.i.valid, bool(pending))
        _, _, ready, valid, payload, was_idle = await ctx.tick().sample(
            dut.i.ready, dut.o.valid, dut.o.payload, dut.idle)
        idle.append(was_idle)
        if pending and ready:
            pending.pop(0)
        if valid:
            received.append(payload)
            last_out = edge
    assert not pending, f"{len(pending)} of {len(beats)} beats not taken in {edges - 1} edges"
    return received, idle, last_out
