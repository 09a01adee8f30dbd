"""Gateware for maxaccel: the comparator lane, the streaming max units, the command engine."""
