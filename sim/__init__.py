"""Golden model, simulation helpers and the virtual board of maxaccel.

``maxaccel.sim.reference`` (the golden model) needs numpy only; the simulation helpers and the
virtual board import amaranth.
"""
