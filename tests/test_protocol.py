"""Host side of the wire protocol: framing, resynchronisation, and the shared CRC definition."""

import itertools
import random
import struct
from pathlib import Path

import numpy as np
import pytest
from amaranth.lib import crc

from maxaccel.contract.dtypes import FORMATS, DType, encode_elements
from maxaccel.contract.wire import (PARAMETERS, WINDOW_FIELD_MAX, Capacities, Identity, Status,
                                    problems, quantities, request_verdict, rules_markdown,
                                    verdict)
from maxaccel.contract.wire import (CRC_ALGORITHM, FRAME_OVERHEAD, MAGIC, MAX_PAYLOAD, Command,
                                    Frame, FrameParser, crc32, encode_frame, payload_in_frame)
from maxaccel.host.link import request_payload


def test_host_crc_is_the_gateware_catalog_crc():
    algorithm = getattr(crc.catalog, CRC_ALGORITHM)(data_width=8)
    rng = random.Random(1)
    for length in [0, 1, 2, 7, 64, 1000]:
        data = bytes(rng.getrandbits(8) for _ in range(length))
        assert crc32(data) == algorithm.compute(data)


def test_frame_layout_and_overhead():
    frame = encode_frame(Command.REDUCE, 0x1FF, b"\x01\x02\x03", Status.BAD_LENGTH)
    assert frame[:2] == MAGIC and frame[2] == Command.REDUCE and frame[3] == 0xFF
    assert int.from_bytes(frame[4:8], "little") == 3
    assert len(frame) == 3 + FRAME_OVERHEAD
    assert frame[12:15] == b"\x01\x02\x03" and frame[15] == Status.BAD_LENGTH
    assert 4096 / (4096 + FRAME_OVERHEAD) > 0.995


def frames_of(payloads):
    return [Frame(code=i % 7, seq=i, payload=p, status=i % 3) for i, p in enumerate(payloads)]


def encode(frames):
    return b"".join(encode_frame(f.code, f.seq, f.payload, f.status) for f in frames)


@pytest.mark.parametrize("chunk", [1, 3, 17, 10_000])
def test_frames_survive_any_fragmentation(chunk):
    frames = frames_of([b"", b"a", bytes(range(256)) * 3, MAGIC * 10])
    wire = encode(frames)
    parser = FrameParser()
    got = []
    for i in range(0, len(wire), chunk):
        got += parser.feed(wire[i:i + chunk])
    assert got == frames
    assert parser.pending() == 0 and parser.skipped_bytes == 0


def test_resynchronises_after_garbage_and_false_magic():
    frames = frames_of([b"x" * 40, b"", b"MXMXMX"])
    garbage = [b"\x00\xffMX\x12\x34", b"MM", b"MX" + b"\xff" * 30]
    wire = b"".join(g + encode([f]) for g, f in zip(garbage, frames)) + b"M"
    parser = FrameParser()
    assert parser.feed(wire) == frames
    assert parser.header_errors >= 2
    assert parser.skipped_bytes == sum(map(len, garbage))
    assert parser.pending() == 1  # a trailing "M" may start the next frame


def test_corrupted_payload_is_delivered_as_not_intact():
    wire = bytearray(encode_frame(Command.MAX, 5, b"hello world"))
    wire[14] ^= 0x10
    (frame,) = FrameParser().feed(bytes(wire))
    assert frame.seq == 5 and not frame.intact


def test_corrupted_header_skips_to_the_next_frame():
    good = frames_of([b"abc", b"defg"])
    wire = bytearray(encode(good))
    wire[5] ^= 0x01  # length of the first frame
    parser = FrameParser()
    assert parser.feed(bytes(wire)) == good[1:]
    assert parser.header_errors == 1


def test_random_corruption_never_yields_a_wrong_intact_frame():
    rng = random.Random(7)
    frames = frames_of([bytes(rng.getrandbits(8) for _ in range(rng.randrange(50)))
                        for _ in range(200)])
    wire = bytearray(encode(frames))
    for _ in range(60):
        position = rng.randrange(len(wire))
        kind = rng.randrange(3)
        if kind == 0:
            wire[position] ^= 1 << rng.randrange(8)
        elif kind == 1:
            del wire[position]
        else:
            wire.insert(position, rng.getrandbits(8))
    got = FrameParser().feed(bytes(wire))
    intact = [f for f in got if f.intact]
    assert len(intact) > 100
    assert all(f in frames for f in intact)


def test_identity_round_trip():
    from maxaccel.contract.wire import Identity
    identity = Identity(1, 4, frozenset({1, 2, 16}), 2048, 4, 3, 512, 48_000_000, 480_000)
    assert Identity.decode(identity.encode()) == identity
    with pytest.raises(ValueError, match="IDENTIFY reply of 3 bytes"):
        Identity.decode(b"abc")


def test_the_protocol_page_shows_the_contracts_rules():
    """docs/protocol.md's refusal table is the contract's, word for word."""
    page = (Path(__file__).parent.parent / "docs" / "protocol.md").read_text()
    assert rules_markdown() in page


def test_verdict_orders_statuses():
    """The first broken rule decides, in STATUS_ORDER; a short block is BAD_LENGTH whatever
    else is wrong."""
    identity = Identity(1, 2, frozenset({1}), 32, 2, 2, 8, 1, 1)
    load = PARAMETERS[Command.LOAD]
    # Unsupported dtype before a zero row length before too large before the wrong length.
    assert request_verdict(Command.LOAD, load.pack(3, 99, 1, 0), identity) \
        == Status.UNSUPPORTED_DTYPE
    assert request_verdict(Command.LOAD, load.pack(1, 99, 1, 0), identity) == Status.BAD_PARAMETER
    assert request_verdict(Command.LOAD, load.pack(1, 99, 1, 1), identity) == Status.TOO_LARGE
    assert request_verdict(Command.LOAD, load.pack(1, 0, 1, 1), identity) == Status.BAD_LENGTH
    assert request_verdict(Command.LOAD, load.pack(1, 0, 1, 1) + bytes(4), identity) == Status.OK
    assert request_verdict(Command.LOAD, load.pack(1, 0, 1, 1)[:-1], identity) == Status.BAD_LENGTH
    assert request_verdict(Command.IDENTIFY, b"", identity) == Status.OK
    assert request_verdict(Command.COUNTERS, b"x", identity) == Status.BAD_LENGTH
    assert request_verdict(0x7F, b"", identity) == Status.BAD_COMMAND
    found = problems(Command.LOAD, load.unpack(load.pack(1, 99, 1, 0)), identity)
    assert [p.status for p in found] == [Status.BAD_PARAMETER, Status.TOO_LARGE]


def test_the_window_rules_are_what_they_say():
    """``MAX_POOL``'s rules on kernel extents, across kernel, dilation and pad values around
    the limits (0 and 2**32 - 1 included), refuse exactly when their descriptions say: an
    extent ``(kernel - 1) * dilation + 1`` above the axis's limit, a first window of padding
    only (``(kernel - 1) * dilation < pad``), and the capacities that bind only with an extent
    above 1 on the middle or outermost axis."""
    identity = Identity(1, 1, frozenset({1}), 0, 0, 0, 0, 1, 1, window_lanes=1,
                        window_extent=3, window_columns=4, window_plane=6,
                        window_extent_outer=2)
    block = PARAMETERS[Command.MAX_POOL]
    limits = (2, 3, 3)
    values = (0, 1, 2, 3, 4, (1 << 32) - 1)
    for axis in range(3):
        for kernel, dilation, pad in itertools.product(values, values, values[:5]):
            fields = {name: 1 for name in block.names}
            fields.update({f"axis[{a}].pad": 0 for a in range(3)})
            fields.update(dtype=1, reserved=0, indices=0, groups=1)
            fields.update({"axis[2].out": 5, "axis[1].out": 2})    # over columns and plane
            fields.update({f"axis[{axis}].kernel": kernel, f"axis[{axis}].dilation": dilation,
                           f"axis[{axis}].pad": pad})
            found = {p.description.split(" (")[0]
                     for p in problems(Command.MAX_POOL, fields, identity)}
            extent = (kernel - 1) * dilation + 1
            said = {"a first window of padding only": extent - 1 < pad,
                    "a kernel extent above window_extent": extent > limits[axis],
                    "an innermost output length above window_columns with a middle kernel "
                    "extent above 1": axis == 1 and extent > 1,
                    "an output plane above window_plane with an outermost kernel extent "
                    "above 1": axis == 0 and extent > 1}
            assert {d for d, broken in said.items() if broken} == found & set(said), \
                (axis, kernel, dilation, pad, found)


def test_a_unit_of_two_axes_takes_only_a_unit_outer_axis():
    """With ``window_extent_outer`` 0 (a unit of two axes) a request whose outermost axis
    holds more than one element or output is ``TOO_LARGE``, as is any kernel extent above 1
    there; a 1-D or 2-D pool (unit outer axes) passes as on a unit of three axes of outermost
    extent 1, and the ``BAD_PARAMETER`` rules still come first."""
    def identity(outer):
        return Identity(1, 1, frozenset({1}), 0, 0, 0, 0, 1, 1, window_lanes=1,
                        window_extent=3, window_columns=64, window_plane=64,
                        window_extent_outer=outer)

    def status(fields, identity):
        data = quantities(Command.MAX_POOL, fields, Capacities.of(identity), 4)["data_bytes"]
        return verdict(Command.MAX_POOL, fields, identity, data_length=data)

    two, three = identity(0), identity(1)
    block = PARAMETERS[Command.MAX_POOL]
    base = dict(dict.fromkeys(block.names, 1), dtype=1, reserved=0, indices=1, groups=2,
                **{f"axis[{a}].pad": 0 for a in range(3)},
                **{f"axis[{a}].{n}": 5 for a in (1, 2) for n in ("size", "out")},
                **{f"axis[{a}].kernel": 3 for a in (1, 2)})
    assert status(base, two) == Status.OK
    for changes, on_two, on_three in [
            ({"axis[0].size": 2}, Status.TOO_LARGE, Status.OK),
            # Two outputs of one element: the second window is padding only, which a unit
            # of three axes finds as the data streams.
            ({"axis[0].out": 2}, Status.TOO_LARGE, Status.BAD_PARAMETER),
            ({"axis[0].size": 4, "axis[0].out": 2, "axis[0].stride": 2}, Status.TOO_LARGE,
             Status.OK),
            ({"axis[0].stride": 7, "axis[0].dilation": 9}, Status.OK, Status.OK),
            ({"axis[0].kernel": 2}, Status.TOO_LARGE, Status.TOO_LARGE),
            ({"axis[0].size": 0}, Status.BAD_PARAMETER, Status.BAD_PARAMETER),
            ({"axis[0].size": 3, "axis[0].pad": 1}, Status.BAD_PARAMETER,
             Status.BAD_PARAMETER),
            ({"axis[0].size": (1 << 32) - 1}, Status.BAD_PARAMETER, Status.BAD_PARAMETER)]:
        fields = dict(base, **changes)
        assert (status(fields, two), status(fields, three)) == (on_two, on_three), changes
    fields = dict(base, **{"axis[0].size": 2})
    refused = {p.description for p in problems(Command.MAX_POOL, fields, two,
                                                data_length=2 * 2 * 25 * 4)}
    assert refused == {"an outermost axis of more than one element or output on a unit of two "
                       "axes (window_extent_outer 0)"}


def test_a_unit_made_for_small_images_without_indices_refuses_the_rest():
    """A unit of ``window_field_max`` 127 and no Indices: an axis field above 127 is
    ``BAD_PARAMETER`` (on a unit of the protocol's fields it passes), Indices asked are
    ``TOO_LARGE`` (after any ``BAD_PARAMETER``), and a pool within both passes."""
    def identity(field_max, indices):
        return Identity(1, 1, frozenset({1}), 0, 0, 0, 0, 1, 1, window_lanes=1,
                        window_extent=3, window_columns=128, window_plane=64,
                        window_extent_outer=0, window_field_max=field_max,
                        window_indices=indices)

    def status(fields, identity):
        data = quantities(Command.MAX_POOL, fields, Capacities.of(identity), 4)["data_bytes"]
        return verdict(Command.MAX_POOL, fields, identity, data_length=data)

    small, full = identity(127, 0), identity(WINDOW_FIELD_MAX, 1)
    block = PARAMETERS[Command.MAX_POOL]
    base = dict(dict.fromkeys(block.names, 1), dtype=1, reserved=0, indices=0, groups=1,
                **{f"axis[{a}].pad": 0 for a in range(3)},
                **{f"axis[{a}].{n}": 127 for a in (1, 2) for n in ("size", "out")})
    for changes, on_small, on_full in [
            ({}, Status.OK, Status.OK),
            ({"axis[2].size": 128, "axis[2].out": 128}, Status.BAD_PARAMETER, Status.OK),
            ({"axis[1].stride": 200, "axis[1].out": 1}, Status.BAD_PARAMETER, Status.OK),
            ({"indices": 1}, Status.TOO_LARGE, Status.OK),
            ({"indices": 1, "axis[1].size": 300}, Status.BAD_PARAMETER, Status.OK),
            ({"indices": 1, "axis[1].kernel": 0}, Status.BAD_PARAMETER, Status.BAD_PARAMETER)]:
        fields = dict(base, **changes)
        assert (status(fields, small), status(fields, full)) == (on_small, on_full), changes
    refused = {p.description for p in problems(Command.MAX_POOL, dict(base, indices=1), small,
                                                data_length=127 * 127 * 4)}
    assert refused == {"Indices asked of a unit without them (window_indices 0)"}


@pytest.mark.parametrize("field_max, indices", [(WINDOW_FIELD_MAX, 1), (127, 0), (255, 1)])
def test_a_device_may_hold_the_narrow_window_fields_narrowed(field_max, indices):
    """What ``WINDOW_NARROW_FIELDS`` (every axis field) promises: with each such field seen as
    the command engine holds it, its low bytes (those ``window_field_max`` needs) and one bit
    for whether any higher byte is not 0, every request gets the status it gets on its true
    values; for a device of the protocol's largest fields, and of narrower ones, with and
    without Indices."""
    from maxaccel.contract.wire import WINDOW_NARROW_FIELDS, verdict
    identity = Identity(1, 1, frozenset({1, 11}), 0, 0, 0, 0, 1, 1, window_lanes=1,
                        window_extent=3, window_columns=64, window_plane=64,
                        window_extent_outer=3, window_field_max=field_max,
                        window_indices=indices)
    low_bits = 8 * ((field_max.bit_length() + 7) // 8)
    block = PARAMETERS[Command.MAX_POOL]
    rng = random.Random(9)
    edges = [0, 1, 2, 3, 4, 64, 65, field_max, field_max + 1, field_max + 3, 255, 256,
             WINDOW_FIELD_MAX, WINDOW_FIELD_MAX + 1, 1 << 20, (1 << 32) - 1]
    statuses = set()
    for _ in range(4000):
        # A request that pools 2 x 2 images of 3 elements an axis, 0 to 3 fields changed.
        fields = dict.fromkeys(block.names, 1)
        fields.update({f"axis[{a}].{name}": 3 for a in range(3) for name in ("size", "out")})
        fields.update({f"axis[{a}].pad": 0 for a in range(3)})
        fields.update(dtype=1, reserved=0, indices=rng.choice([0, 0, 1]), group=2, groups=2)
        for name in rng.sample(block.names, rng.choice([0, 1, 1, 2, 3])):
            fields[name] = rng.choice(edges)
        if rng.random() < 0.2:       # a span of about 2**32 against a pad on either side
            axis = rng.randrange(3)
            fields.update({f"axis[{axis}].kernel": rng.choice(edges[-4:]),
                           f"axis[{axis}].dilation": rng.choice(edges[-4:]),
                           f"axis[{axis}].pad": rng.choice(edges)})
        seen = {name: value if name not in WINDOW_NARROW_FIELDS
                else (value & ((1 << low_bits) - 1)) + ((value >> low_bits != 0) << low_bits)
                for name, value in fields.items()}
        length = rng.choice([0, 4 * 27 * 4, 4 * 27 * 4 + 1])
        status = verdict(Command.MAX_POOL, fields, identity, data_length=length)
        assert verdict(Command.MAX_POOL, seen, identity, data_length=length) == status, fields
        statuses.add(status)
    assert {Status.OK, Status.UNSUPPORTED_DTYPE, Status.BAD_PARAMETER, Status.TOO_LARGE,
            Status.BAD_LENGTH} <= statuses


def test_a_payload_written_in_place_makes_the_frame_of_its_bytes():
    """A request's payload written into its frame (a parameter block, then a tensor's
    elements from a transposed view) is bytes-like to anyone, and the frame of the same bytes
    for every attempt's sequence number; a frame already handed out keeps its header when a
    later attempt's is made."""
    values = np.arange(-500, 500, dtype=np.int32).reshape(10, 100).T
    fmt = FORMATS[DType.INT32]
    joined = b"\x05\x06" + encode_elements(values, fmt)
    payload = request_payload(b"\x05\x06", values, fmt)
    assert payload == joined and len(payload) == len(joined)
    assert struct.unpack_from("<2B", payload) == (5, 6)
    first = encode_frame(Command.MAX, 3, payload)
    assert bytes(first) == encode_frame(Command.MAX, 3, joined)
    again = encode_frame(Command.MAX, 4, payload, Status.BAD_LENGTH)
    assert bytes(again) == encode_frame(Command.MAX, 4, joined, Status.BAD_LENGTH)
    assert bytes(first) == encode_frame(Command.MAX, 3, joined)
    assert encode_frame(Command.MAX, 5, payload[1:]) == encode_frame(Command.MAX, 5, joined[1:])
    (frame,) = FrameParser().feed(again)
    assert frame.payload == joined and frame.intact and frame.seq == 4
    with pytest.raises(ValueError, match="exceeds the protocol's"):
        payload_in_frame(MAX_PAYLOAD + 1)
