"""Windowed MaxPool through the ``MAX_POOL`` command: the pooling unit's route.

A core with the windowed pooling unit (``IDENTIFY``'s ``window_lanes`` above 0) pools whole
images as they stream: each input element crosses the link once and each output once. The
unit pools ``group`` images side by side, so the host sends the images of a group interleaved
element by element and takes the maxima back the same way, with each one's flat index inside
its image when Indices are asked for (the contract's ``interleave_group_images`` and
``decode_window_reply``, ``docs/protocol.md``); the host adds the image's offset and renumbers
them for ``storage_order``.

A pool wider than the unit's buffers (an innermost output row above ``window_columns``, an
output plane above ``window_plane``) or whose image is larger than a frame goes in *tiles* of
the output grid (:func:`axis_tiles`), each with the input its windows read (the halo: input
elements at a tile's edge cross the link once per tile) and each an exact ``MAX_POOL`` of its
own; tiles of one configuration go together as more images of the groups (a
:class:`WindowBatch`), and the host maps each tile's indices back to the whole image.

:func:`plan_window_pool` says whether and how a pool fits the unit: every ``MAX_POOL``
parameter block it would send is checked by the wire contract's own rules
(``contract.wire.problems``), so the planner, the engine and the fake board decide the same
way. A pool that does not fit in any tiling (more than 3 spatial axes, a kernel extent above
``window_extent``, a window of padding only) goes through ``REDUCE`` (``host/pool_reduce.py``)
instead, still on the device and still exact.

Pure numpy; never imports amaranth.
"""

import functools
import heapq
import math
import operator
from dataclasses import dataclass
from itertools import product

import numpy as np

from maxaccel.contract.pooling import (WINDOW_RANK, decode_window_reply, interleave_group_images,
                                       window_config)
from maxaccel.contract.wire import (PARAMETERS, WINDOW_INDEX_BYTES, Capacities, Command,
                                    problems, window_fields)
from maxaccel.host.link import request_payload

__all__ = ["AxisTile", "WindowBatch", "WindowPoolPlan", "axis_tiles", "plan_window_pool",
           "max_pool_by_window"]

_BLOCK = PARAMETERS[Command.MAX_POOL]
#: Tile grids :func:`plan_window_pool` tries, the fewest input elements first, and how many of
#: those that fit it compares by their link cost (filler images included).
_GRIDS_TRIED = 4096
_GRIDS_COMPARED = 64


@dataclass(frozen=True)
class AxisTile:
    """One piece of a spatial axis's outputs and the input columns its windows read.

    Window ``o`` of the whole axis reads ``o * stride - pad_begin + j * dilation``; the tile's
    windows ``out_start .. out_stop - 1`` read inside ``in_start .. in_stop - 1`` (clipped to
    the image unless the padding is sent), so as a ``MAX_POOL`` axis of its own the tile is
    ``size = in_stop - in_start``, ``out = out_stop - out_start`` and ``pad = in_start -
    (out_start * stride - pad_begin)``: its window ``o'`` has taps ``o' * stride - pad + j *
    dilation`` of the tile, the same input elements. Clipped, only a tile whose first window
    starts in the left padding has ``pad > 0``, and a tile whose last window reaches past the
    image's end keeps the right padding (and ``ceil_mode``'s reach) as the unit's virtual steps.

    A tile may instead *send* the padding its windows reach (``sent_pad``): then ``in_start``
    is negative (``-sent_pad[0]``) or ``in_stop`` beyond the image (by ``sent_pad[1]``), those
    positions go as the lowest value of the dtype's order (``Format.lowest``: ``-inf``, the
    integer minimum), ``pad`` is 0 and the tile has the configuration of the inner tiles of its
    length, so their images share groups (:func:`plan_window_pool`). Every window holds an
    input element (the planner refuses windows of padding only), so a padded position never
    changes a value: ``maximum(x, lowest) = x`` on the order keys, NaN and ``-0`` included; a
    window whose real elements are all the lowest value may report a padded position as its
    index, which :func:`max_pool_by_window` moves to the window's first input element, the
    contract's tie rule.
    """

    out_start: int
    out_stop: int
    in_start: int
    in_stop: int
    pad: int
    sent_pad: tuple = (0, 0)

    @property
    def out(self):
        return self.out_stop - self.out_start

    @property
    def size(self):
        return self.in_stop - self.in_start


#: Padding sent along an axis (:attr:`AxisTile.sent_pad`): none, the begin's, the end's, both.
_SEND_PADDING = ((False, False), (True, False), (False, True), (True, True))


def _tile_arrays(axis, length, send=(False, False)):
    """``(out_start, out_stop, in_start, in_stop, pad, before, after)`` of the tiles of
    ``axis`` of ``length`` outputs each, as int64 arrays (:class:`AxisTile`'s fields;
    ``before``, ``after``: the padding sent, where ``send`` says to send the begin's or the
    end's)."""
    starts = np.arange(0, axis.out_size, length, dtype=np.int64)
    stops = np.minimum(starts + length, axis.out_size)
    first = starts * axis.stride - axis.pad_begin
    last = (stops - 1) * axis.stride - axis.pad_begin + (axis.kernel - 1) * axis.dilation
    low = first if send[0] else np.maximum(0, first)
    high = last + 1 if send[1] else np.minimum(axis.size, last + 1)
    before, after = np.maximum(0, -low), np.maximum(0, high - axis.size)
    return starts, stops, low, high, low - first, before, after


def axis_tiles(axis, length, send=(False, False)):
    """The tiles of ``axis`` (a :class:`~maxaccel.contract.pooling.PoolAxis`) of ``length``
    outputs each (the last one shorter).

    Parameters
    ----------
    axis : PoolAxis
    length : int
        Outputs per tile.
    send : (bool, bool)
        Whether the tiles send the padding their windows reach at the axis's begin and at its
        end (:attr:`AxisTile.sent_pad`) instead of leaving it to the unit.

    Raises
    ------
    ValueError
        A tile whose windows read no input element (windows of padding only).
    """
    starts, stops, low, high, pad, before, after = _tile_arrays(axis, length, send)
    tiles = tuple(AxisTile(*map(int, fields), sent_pad=(int(b), int(a)))
                  for *fields, b, a in zip(starts, stops, low, high, pad, before, after))
    for tile in tiles:
        if tile.size - sum(tile.sent_pad) <= 0:
            raise ValueError(f"outputs {tile.out_start}..{tile.out_stop - 1} of {axis} read "
                             f"padding only")
    return tiles


@functools.lru_cache(maxsize=1024)
def _tile_kinds(axis, length, send=(False, False)):
    """``{(size, pad, out): (tiles, padding sent)}`` of the tiles of ``axis`` of ``length``
    outputs each, sending the padding as ``send`` says (:func:`axis_tiles`)."""
    starts, stops, low, high, pad, before, after = _tile_arrays(axis, length, send)
    kinds = {}
    for kind, sent in zip(zip((high - low).tolist(), pad.tolist(), (stops - starts).tolist()),
                          (before + after).tolist()):
        count, padding = kinds.get(kind, (0, 0))
        kinds[kind] = (count + 1, padding + sent)
    return kinds


@dataclass(frozen=True)
class WindowBatch:
    """The tiles of a pool that share one ``MAX_POOL`` configuration (the same ``size``,
    ``pad`` and ``out`` along every axis), pooled as images of their own: every image's tile
    at each of ``tiles``, ``len(tiles) * N * C`` images in groups of the plan's ``group``.

    Attributes
    ----------
    tiles : tuple of tuple of AxisTile
        Where each tile lies (one :class:`AxisTile` per spatial axis), in row-major order of the
        tile grid.
    group : int
        Tile images pooled side by side (one element of each per beat).
    fields : dict
        The parameter block's fields but ``groups`` and ``indices``.
    groups : int
        Groups of tile images (the last one filled up with zero images whose results are
        dropped).
    groups_per_request : int
        Groups in one request (a frame of at most ``max_frame_bytes`` each way).
    """

    tiles: tuple
    group: int
    fields: dict
    groups: int
    groups_per_request: int

    @property
    def image(self):
        """Input elements of one tile image."""
        return math.prod(t.size for t in self.tiles[0])

    @property
    def image_out(self):
        """Outputs of one tile image."""
        return math.prod(t.out for t in self.tiles[0])


@dataclass(frozen=True)
class WindowPoolPlan:
    """A MaxPool as ``MAX_POOL`` requests.

    Attributes
    ----------
    geometry : PoolGeometry
    batches : tuple of WindowBatch
        The tiles of each image, by configuration; one batch of one tile (the whole image)
        when the pool fits the unit as it is. Input elements at a tile's edge that the next
        tile's windows also read (the halo) cross the link once per tile, and so does the
        padding a tile sends (:attr:`AxisTile.sent_pad`).
    indices : bool
        Whether the requests' frames leave room for replies with Indices.
    """

    geometry: object
    batches: tuple
    indices: bool = True

    @property
    def group(self):
        """The first batch's group (the whole pool's for one tile)."""
        return self.batches[0].group

    @property
    def fields(self):
        """The first batch's parameter block fields (the whole pool's for one tile)."""
        return self.batches[0].fields

    @property
    def images(self):
        """Images of the pool: ``N * C``."""
        return self.geometry.input_shape[0] * self.geometry.input_shape[1]

    def filler_images(self):
        """Zero images sent to fill up the batches' last groups."""
        return sum(b.groups * b.group - len(b.tiles) * self.images for b in self.batches)

    def padding_elements(self):
        """Padding elements sent (:attr:`AxisTile.sent_pad`), in every image's tiles."""
        return self.images * sum(
            math.prod(t.size for t in tiles) - math.prod(t.size - sum(t.sent_pad) for t in tiles)
            for b in self.batches for tiles in b.tiles)

    def wire_elements(self):
        """Elements that cross the link, both ways (values only; the filler images, the
        tiles' halos and the padding they send included)."""
        return sum(b.groups * b.group * (b.image + b.image_out) for b in self.batches)


def _lengths(axis, longest):
    """Candidate tile lengths of an axis (outputs per tile) up to ``longest``, one per number
    of tiles, the fewest input elements sent along the axis first (then the fewest tiles):
    ``[(elements, tiles, length), ...]``."""
    lengths = {-(-axis.out_size // count) for count in range(1, axis.out_size + 1)}
    candidates = []
    for length in lengths:
        if length <= longest:
            _, _, low, high, *_ = _tile_arrays(axis, length)
            candidates.append((int((high - low).sum()), -(-axis.out_size // length), length))
    return sorted(candidates)


def _grids(axes, longest):
    """Tile grids (a length per axis, at most ``longest``), the fewest input elements sent
    first, then the fewest tiles: a best-first walk over the product of each axis's
    :func:`_lengths` (the cost of a grid is the product of its axes', so it never falls along
    an axis's list)."""
    lists = [_lengths(a, n) for a, n in zip(axes, longest)]

    def key(position):
        picked = [candidates[k] for candidates, k in zip(lists, position)]
        return (math.prod(p[0] for p in picked), math.prod(p[1] for p in picked), position)

    start = (0,) * len(lists)
    heap, seen = [key(start)], {start}
    while heap:
        *_, position = heapq.heappop(heap)
        yield tuple(candidates[k][2] for candidates, k in zip(lists, position))
        for axis in range(len(lists)):
            following = position[:axis] + (position[axis] + 1,) + position[axis + 1:]
            if following[axis] < len(lists[axis]) and following not in seen:
                seen.add(following)
                heapq.heappush(heap, key(following))


def plan_window_pool(geometry, fmt, identity, max_frame_bytes, tile_outputs=None,
                     send_padding=None, indices=True):
    """The ``MAX_POOL`` plan of a pool on a device, or ``None`` if it does not fit.

    A pool wider than the unit's buffers (``window_columns`` outputs of the innermost axis, an
    output plane of ``window_plane``) or whose image is larger than a frame is cut into tiles
    (:func:`axis_tiles`, a grid of them over the spatial axes), each an exact ``MAX_POOL`` of
    its own. The tile grids (a tile length per axis) are walked from the fewest input elements
    sent (the largest tiles) up; of the first :data:`_GRIDS_COMPARED` whose every tile the wire
    contract's rules (``contract.wire.problems``) accept, the plan takes the one with the fewest
    elements on the link both ways, counting the zero images that fill each batch's last group,
    then the fewest tiles, then the fewest requests, then the least padding sent.

    A grid whose batches need zero images is also tried with its tiles *sending* the padding
    at the begin, the end or both ends of each axis cut into tiles of more than one
    configuration (:attr:`AxisTile.sent_pad`): the edge tiles then have the inner tiles'
    configuration and their images fill the same groups, for the padding's elements instead of
    the zero images' (80 uint8 images in groups of 32 on a row of two tiles: 66 columns a tile
    instead of 65, and no zero image instead of 16 a configuration).

    Parameters
    ----------
    geometry : PoolGeometry
    fmt : Format
    identity : Identity
        The device's ``IDENTIFY``.
    max_frame_bytes : int
        Largest request or reply payload.
    tile_outputs : sequence of int, optional
        Outputs per tile along each spatial axis, instead of the cheapest grid that fits (for
        tests: tiles of one output, tile edges in the padding).
    send_padding : sequence of (bool, bool), optional
        With ``tile_outputs``: per spatial axis, whether the tiles send the padding at its
        begin and at its end (default: neither; the unit pads).
    indices : bool
        Whether the replies carry Indices (u32 each): a reply without them is smaller, so a
        frame may hold more groups and a tile more outputs. A plan made without them cannot be
        run with them (:func:`max_pool_by_window`).
    """
    config = window_config(geometry)
    if identity.window_lanes == 0 or config is None or geometry.has_empty_windows():
        return None
    planner = _WindowPlanner(geometry, fmt, identity, max_frame_bytes, indices, config)
    axes, unit_pads = geometry.axes, planner.unit_pads
    if tile_outputs is not None:
        grid = tuple(operator.index(n) for n in tile_outputs)
        if len(grid) != len(axes) or min(grid) < 1:
            raise ValueError(f"tile_outputs needs a length >= 1 per spatial axis "
                             f"({len(axes)}), got {list(tile_outputs)}")
        sends = unit_pads if send_padding is None else tuple(
            (bool(begin), bool(end)) for begin, end in send_padding)
        if len(sends) != len(axes):
            raise ValueError(f"send_padding needs a (begin, end) pair per spatial axis "
                             f"({len(axes)}), got {list(send_padding)}")
        return None if planner.fitting(grid, sends) is None else planner.plan(grid, sends)
    if send_padding is not None:
        raise ValueError("send_padding goes with tile_outputs")
    best = planner.cheapest()
    return None if best is None else planner.plan(*best)


class _WindowPlanner:
    """The tile grids of one pool on one device, their fit and their cost
    (:func:`plan_window_pool`)."""

    def __init__(self, geometry, fmt, identity, max_frame_bytes, indices, config):
        self.geometry, self.fmt, self.identity = geometry, fmt, identity
        self.max_frame_bytes, self.indices, self.config = max_frame_bytes, indices, config
        self.images = geometry.input_shape[0] * geometry.input_shape[1]
        self.widest = Capacities.of(identity).window_bytes // fmt.nbytes
        self.axes = geometry.axes
        self.unit_pads = ((False, False),) * len(self.axes)
        self.checked = {}

    def per_request(self, tiles, group):
        """Groups of ``tiles``' images in one frame each way (0: not one)."""
        fmt = self.fmt
        image = math.prod(t.size for t in tiles)
        image_out = math.prod(t.out for t in tiles)
        reply = image_out * (fmt.nbytes + WINDOW_INDEX_BYTES * self.indices)
        return self.max_frame_bytes // (group * max(image * fmt.nbytes, reply))

    def fields(self, tiles, group):
        """The parameter block of ``tiles`` (one per axis) in groups of ``group``."""
        block = {"dtype": self.fmt.dtype, "group": group}
        for axis, values in enumerate(self.config):
            block.update((window_fields(axis)[name], value) for name, value in values.items())
        first = WINDOW_RANK - len(tiles)
        for axis, tile in enumerate(tiles):
            names = window_fields(first + axis)
            block.update({names["size"]: tile.size, names["pad"]: tile.pad,
                          names["out"]: tile.out})
        return block

    def fits(self, tiles, group=None):
        """Whether the device takes ``tiles`` (one per axis) in groups of ``group`` (default:
        as wide as the unit), whole groups in a frame."""
        group = group or max(1, self.widest)
        key = (tuple((t.size, t.pad, t.out) for t in tiles), group)
        checked = self.checked
        if key not in checked:
            check = dict(self.fields(tiles, group), indices=int(self.indices), groups=1,
                         reserved=0)
            image = math.prod(t.size for t in tiles)
            checked[key] = self.per_request(tiles, group) > 0 and not problems(
                Command.MAX_POOL, check, self.identity,
                data_length=group * image * self.fmt.nbytes)
        return checked[key]

    def fitting(self, grid, sends=None):
        """``{(size, pad, out): (tiles, padding sent)}`` per axis of ``grid`` (tiles sending
        the padding as ``sends`` says, default: none), or None if a tile does not fit."""
        sends = sends or self.unit_pads
        kinds = [_tile_kinds(a, n, send) for a, n, send in zip(self.axes, grid, sends)]
        shapes = [[AxisTile(0, out, 0, size, pad) for size, pad, out in k] for k in kinds]
        return kinds if all(self.fits(tiles) for tiles in product(*shapes)) else None

    def group_of(self, count):
        """The group of a batch of ``count`` tiles: as wide as the unit, or narrower when
        there are fewer tile images (that fits too: every capacity but the frame is per image,
        and the frame then holds fewer bytes)."""
        return max(1, min(self.widest, count * self.images))

    def cost(self, kinds):
        """``(link elements, tiles, requests, padding elements sent)`` of a grid's tiles
        (``kinds`` as :meth:`fitting` gives them), a batch of tile images per configuration,
        and the zero images that fill the batches' last groups."""
        images = self.images
        elements = requests = padding = filler = 0
        for batch in product(*(k.items() for k in kinds)):
            count = math.prod(n for _, (n, _) in batch)
            tiles = [AxisTile(0, out, 0, size, pad) for (size, pad, out), _ in batch]
            group = self.group_of(count)
            groups = -(-count * images // group)
            elements += groups * group * (math.prod(t.size for t in tiles)
                                          + math.prod(t.out for t in tiles))
            requests += -(-groups // self.per_request(tiles, group))
            filler += groups * group - count * images
            # Over the tiles of the batch (the product of each axis's), the padding sent is
            # their elements less their input elements, each a product of per-axis sums.
            padding += images * (math.prod(n * size for (size, _, _), (n, _) in batch)
                                 - math.prod(n * size - sent for (size, _, _), (n, sent) in batch))
        tiles = math.prod(sum(n for n, _ in k.values()) for k in kinds)
        return (elements, tiles, requests, padding), filler

    def sendings(self, grid, kinds):
        """Per axis, the padding the tiles of ``grid`` may send (:data:`_SEND_PADDING`): only
        along an axis cut into tiles of more than one configuration (sending the padding
        makes them alike) and only where its tiles reach the padding; not none on every axis.
        """
        options = []
        for axis, length, k in zip(self.axes, grid, kinds):
            reach = (axis.pad_begin > 0, axis.reach_end > 0) if len(k) > 1 else (False, False)
            options.append([send for send in _SEND_PADDING
                            if all(r or not s for r, s in zip(reach, send))])
        return [sends for sends in product(*options) if sends != self.unit_pads]

    def plan(self, grid, sends=None):
        """The :class:`WindowPoolPlan` of ``grid``, its tiles sending the padding as
        ``sends`` says (default: none)."""
        sends = sends or self.unit_pads
        batches = {}
        for tiles in product(*(axis_tiles(a, n, send)
                               for a, n, send in zip(self.axes, grid, sends))):
            batches.setdefault(tuple((t.size, t.pad, t.out) for t in tiles), []).append(tiles)
        made = []
        for tiles in batches.values():
            group = self.group_of(len(tiles))
            groups = -(-len(tiles) * self.images // group)
            made.append(WindowBatch(tuple(tiles), group, self.fields(tiles[0], group), groups,
                                    min(self.per_request(tiles[0], group), groups)))
        return WindowPoolPlan(self.geometry, tuple(made), bool(self.indices))

    def longest(self):
        """Per axis, the longest tile that fits with the other axes' tiles of one output, or
        None if tiles of one output do not fit: they need the least of every capacity, so
        then nothing does. Each capacity grows with a tile's length, so the longest tile along
        an axis bounds that axis's lengths."""
        one = (1,) * len(self.axes)
        if self.fitting(one) is None:
            return None
        longest = []
        for k, axis in enumerate(self.axes):
            low, high = 1, axis.out_size
            while low < high:
                middle = (low + high + 1) // 2
                if self.fitting(one[:k] + (middle,) + one[k + 1:]) is None:
                    high = middle - 1
                else:
                    low = middle
            longest.append(low)
        return longest

    def cheapest(self):
        """``(grid, sends)`` of the cheapest plan :func:`plan_window_pool` compares, or None
        if no tile fits."""
        longest = self.longest()
        if longest is None:
            return None
        one = (1,) * len(self.axes)
        best, (best_cost, _), found = (one, self.unit_pads), self.cost(self.fitting(one)), 0
        for tried, grid in enumerate(_grids(self.axes, longest)):
            if tried == _GRIDS_TRIED or found == _GRIDS_COMPARED:
                break
            kinds = self.fitting(grid)
            if kinds is None:
                continue
            found += 1
            candidate, filler = self.cost(kinds)
            if candidate < best_cost:
                best, best_cost = (grid, self.unit_pads), candidate
            # Sending padding adds elements and can save only zero images (and requests).
            for sends in self.sendings(grid, kinds) if filler else ():
                padded = self.fitting(grid, sends)
                if padded is not None:
                    candidate, _ = self.cost(padded)
                    if candidate < best_cost:
                        best, best_cost = (grid, sends), candidate
        return best


def max_pool_by_window(values, fmt, plan, request, return_indices, out=None):
    """Pool ``values`` (native byte order) as :func:`maxaccel.sim.reference.max_pool` does,
    through ``MAX_POOL`` requests: for each batch of the plan, the tiles of every image as
    images of their own, a chunk of groups a request.

    Parameters
    ----------
    values : numpy.ndarray
        ``N x C x D1..Dn``.
    fmt : Format
    plan : WindowPoolPlan
    request : callable(payload) -> bytes
        Sends one ``MAX_POOL`` request, returns its reply payload.
    return_indices : bool
    out : numpy.ndarray, optional
        ``y``'s array (its shape and dtype, strided or not): each tile's maxima are written
        straight into it.

    Returns
    -------
    numpy.ndarray or (numpy.ndarray, numpy.ndarray)
        ``y`` (``out`` if given) and, with ``return_indices``, the int64 Indices.
    """
    if return_indices and not plan.indices:
        raise ValueError("the plan's frames leave no room for Indices: plan_window_pool(..., "
                         "indices=True)")
    geometry, images = plan.geometry, plan.images
    spatial = values.reshape((images,) + geometry.spatial_shape)
    out_shape = tuple(a.out_size for a in geometry.axes)
    bits = f"=u{fmt.nbytes}"
    # Tiles that send padding read it from a copy of the images framed in the lowest value.
    every = [tiles for batch in plan.batches for tiles in batch.tiles]
    frame = [tuple(max(tiles[axis].sent_pad[end] for tiles in every) for end in (0, 1))
             for axis in range(len(out_shape))]
    if any(map(any, frame)):
        framed = np.empty((images,) + tuple(a.size + sum(f) for a, f in zip(geometry.axes,
                                                                             frame)), values.dtype)
        framed.view(bits)[...] = _padding_bits(fmt)
        framed[(slice(None),) + tuple(slice(f[0], f[0] + a.size) for a, f in
                                      zip(geometry.axes, frame))] = spatial
        spatial = framed
    y = np.empty(geometry.output_shape, values.dtype) if out is None else out
    outer = geometry.output_shape[:2]     # N x C: the images
    where = [np.empty((images,) + out_shape, np.int64)
             for _ in geometry.axes] if return_indices else None
    for batch in plan.batches:
        group = batch.group
        count = len(batch.tiles) * images
        tile_shape = tuple(t.size for t in batch.tiles[0])
        inputs = [(slice(None),) + tuple(slice(t.in_start + f[0], t.in_stop + f[0])
                                         for t, f in zip(tiles, frame)) for tiles in batch.tiles]
        if count == batch.groups * group == images:
            # One tile and no filler images: the tile as it lies (a view where numpy can),
            # copied once, into each request's frame.
            stacked = spatial[inputs[0]].reshape(images, -1)
        else:
            stacked = np.empty((batch.groups * group, batch.image), values.dtype)
            stacked[count:] = 0
            for k, tile in enumerate(inputs):
                stacked[k * images:(k + 1) * images] = spatial[tile].reshape(images, -1)
        interleaved = interleave_group_images(stacked, group)
        maxima = np.empty((batch.groups * group, batch.image_out), values.dtype)
        found = np.empty(maxima.shape, np.int64) if return_indices else None
        for start in range(0, batch.groups, batch.groups_per_request):
            chunk = interleaved[start:start + batch.groups_per_request]
            block = _BLOCK.pack(**batch.fields, groups=len(chunk), indices=int(return_indices))
            reply = request(request_payload(block, chunk, fmt))
            chunk_images = slice(start * group, (start + len(chunk)) * group)
            chunk_maxima, chunk_found = decode_window_reply(reply, fmt, group, batch.image_out,
                                                            return_indices)
            maxima.view(bits)[chunk_images] = chunk_maxima.view(bits)
            if return_indices:
                found[chunk_images] = chunk_found
        tile_out = tuple(t.out for t in batch.tiles[0])
        maxima = maxima.reshape((-1,) + tile_out)[:count]
        if return_indices:
            # The tile's flat index -> coordinates in the tile (-> in the image, below).
            coordinates = np.unravel_index(found.reshape((-1,) + tile_out)[:count], tile_shape)
        for k, tiles in enumerate(batch.tiles):
            spans = tuple(slice(t.out_start, t.out_stop) for t in tiles)
            mine = slice(k * images, (k + 1) * images)
            y.view(bits)[(slice(None), slice(None)) + spans] = \
                maxima[mine].view(bits).reshape(outer + tile_out)
            if return_indices:
                for axis, t in enumerate(tiles):
                    where[axis][(slice(None),) + spans] = coordinates[axis][mine] + t.in_start
    if not return_indices:
        return y
    if any(map(any, frame)):
        where = _first_input_where_padding_won(geometry, where)
    channel = np.arange(images, dtype=np.int64).reshape((images,) + (1,) * len(out_shape))
    indices = geometry.indices(channel, where)
    return y, indices.reshape(geometry.output_shape)


def _padding_bits(fmt):
    """Bits of the padding a tile sends: the least element of the order (``-inf``, the integer
    minimum), which no window's maximum can be below."""
    return fmt.lowest


def _first_input_where_padding_won(geometry, where):
    """Indices of windows whose winner was sent padding, moved to the contract's winner.

    A tile that sends padding (:attr:`AxisTile.sent_pad`) sends the lowest value of the order,
    which the unit compares as an element: a window wins a padded position only if its maximum
    key is the lowest key, so every input element of the window has the lowest key (no
    element is below it, and a NaN's key is the greatest) and the contract's winner, the first
    input element in row-major window order holding the maximum, is the window's first input
    element. A window is the product of its per-axis taps and its input elements the product
    of each axis's taps inside the image, so that element is, along each axis, the window's
    first tap inside the image. A window whose winner is an input element is the unit's own
    answer: no padded position before it held its key, so no input element did either. Values
    need no correction: a padded winner's value is the lowest, the value of every input element
    of its window.

    Parameters
    ----------
    geometry : PoolGeometry
    where : list of numpy.ndarray
        Per spatial axis, each output's winner's coordinate in the image (outside ``0 ..
        size - 1`` for sent padding), ``images x out_1 x ... x out_n``.

    Returns
    -------
    list of numpy.ndarray
        The coordinates, every window's winner inside the image.
    """
    padding = np.zeros(where[0].shape, bool)
    for coordinate, axis in zip(where, geometry.axes):
        padding |= (coordinate < 0) | (coordinate >= axis.size)
    moved = []
    for k, (coordinate, axis) in enumerate(zip(where, geometry.axes)):
        starts = axis.starts()
        # The first tap at or after coordinate 0: taps are start + j * dilation.
        first = starts + np.maximum(0, -(starts // axis.dilation)) * axis.dilation
        shape = [1] * coordinate.ndim
        shape[1 + k] = axis.out_size
        moved.append(np.where(padding, first.reshape(shape), coordinate))
    return moved
