"""Windowed MaxPool through the ``MAX_POOL`` command: the pooling unit's route.

A core with the windowed pooling unit (``IDENTIFY``'s ``window_lanes`` above 0) pools whole
images as they stream: each input element crosses the link once and each output once. The
unit pools ``group`` images side by side, so the host sends the images of a group interleaved
element by element (a transpose of ``group x image`` blocks, ``docs/protocol.md``) and takes the
maxima back the same way, with each one's flat index inside its image when Indices are asked
for; the host adds the image's offset and renumbers them for ``storage_order``.

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

from maxaccel.contract.dtypes import decode_elements as decode, encode_elements as encode
from maxaccel.contract.pooling import WINDOW_RANK, window_config
from maxaccel.contract.wire import (PARAMETERS, WINDOW_INDEX_BYTES, Capacities, Command,
                                    problems, window_fields)

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
    the image), so as a ``MAX_POOL`` axis of its own the tile is ``size = in_stop - in_start``,
    ``out = out_stop - out_start`` and ``pad = in_start - (out_start * stride - pad_begin)``:
    its window ``o'`` has taps ``o' * stride - pad + j * dilation`` of the tile, the same input
    elements. Only a tile whose first window starts in the left padding has ``pad > 0``; a tile
    whose last window reaches past the image's end keeps the right padding (and ``ceil_mode``'s
    reach) as the unit's virtual steps.
    """

    out_start: int
    out_stop: int
    in_start: int
    in_stop: int
    pad: int

    @property
    def out(self):
        return self.out_stop - self.out_start

    @property
    def size(self):
        return self.in_stop - self.in_start


def _tile_arrays(axis, length):
    """``(out_start, out_stop, in_start, in_stop, pad)`` of the tiles of ``axis`` of ``length``
    outputs each, as int64 arrays (:class:`AxisTile`'s fields)."""
    starts = np.arange(0, axis.out_size, length, dtype=np.int64)
    stops = np.minimum(starts + length, axis.out_size)
    first = starts * axis.stride - axis.pad_begin
    last = (stops - 1) * axis.stride - axis.pad_begin + (axis.kernel - 1) * axis.dilation
    low, high = np.maximum(0, first), np.minimum(axis.size, last + 1)
    return starts, stops, low, high, low - first


def axis_tiles(axis, length):
    """The tiles of ``axis`` (a :class:`~maxaccel.contract.pooling.PoolAxis`) of ``length``
    outputs each (the last one shorter).

    Raises
    ------
    ValueError
        A tile whose windows read no input element (windows of padding only).
    """
    arrays = _tile_arrays(axis, length)
    tiles = tuple(AxisTile(*map(int, fields)) for fields in zip(*arrays))
    for tile in tiles:
        if tile.size <= 0:
            raise ValueError(f"outputs {tile.out_start}..{tile.out_stop - 1} of {axis} read "
                             f"padding only")
    return tiles


@functools.lru_cache(maxsize=1024)
def _tile_kinds(axis, length):
    """``{(size, pad, out): tiles}`` of the tiles of ``axis`` of ``length`` outputs each."""
    starts, stops, low, high, pad = _tile_arrays(axis, length)
    kinds, counts = np.unique(np.stack([high - low, pad, stops - starts], axis=1), axis=0,
                              return_counts=True)
    return {tuple(int(v) for v in kind): int(n) for kind, n in zip(kinds, counts)}


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
        tile's windows also read (the halo) cross the link once per tile.
    """

    geometry: object
    batches: tuple

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

    def wire_elements(self):
        """Elements that cross the link, both ways (values only; the filler images and the
        tiles' halos included)."""
        return sum(b.groups * b.group * (b.image + b.image_out) for b in self.batches)


def _lengths(axis, longest):
    """Candidate tile lengths of an axis (outputs per tile) up to ``longest``, one per number
    of tiles, the fewest input elements sent along the axis first (then the fewest tiles):
    ``[(elements, tiles, length), ...]``."""
    lengths = {-(-axis.out_size // count) for count in range(1, axis.out_size + 1)}
    candidates = []
    for length in lengths:
        if length <= longest:
            _, _, low, high, _ = _tile_arrays(axis, length)
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


def plan_window_pool(geometry, fmt, identity, max_frame_bytes, tile_outputs=None):
    """The ``MAX_POOL`` plan of a pool on a device, or ``None`` if it does not fit.

    A pool wider than the unit's buffers (``window_columns`` outputs of the innermost axis, an
    output plane of ``window_plane``) or whose image is larger than a frame is cut into tiles
    (:func:`axis_tiles`, a grid of them over the spatial axes), each an exact ``MAX_POOL`` of
    its own. The tile grids (a tile length per axis) are walked from the fewest input elements
    sent (the largest tiles) up; of the first :data:`_GRIDS_COMPARED` whose every tile the wire
    contract's rules (``contract.wire.problems``) accept, the plan takes the one with the fewest
    elements on the link both ways, counting the zero images that fill each batch's last group,
    then the fewest tiles, then the fewest requests.

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
    """
    config = window_config(geometry)
    if identity.window_lanes == 0 or config is None or geometry.has_empty_windows():
        return None
    images = geometry.input_shape[0] * geometry.input_shape[1]
    widest = Capacities.of(identity).window_bytes // fmt.nbytes
    axes = geometry.axes
    checked = {}

    def per_request(tiles, group):
        """Groups of ``tiles``' images in one frame each way (0: not one)."""
        image = math.prod(t.size for t in tiles)
        image_out = math.prod(t.out for t in tiles)
        return max_frame_bytes // (group * max(image * fmt.nbytes,
                                               image_out * (fmt.nbytes + WINDOW_INDEX_BYTES)))

    def fields(tiles, group):
        """The parameter block of ``tiles`` (one per axis) in groups of ``group``."""
        block = {"dtype": fmt.dtype, "group": group}
        for axis, values in enumerate(config):
            block.update((window_fields(axis)[name], value) for name, value in values.items())
        first = WINDOW_RANK - len(tiles)
        for axis, tile in enumerate(tiles):
            names = window_fields(first + axis)
            block.update({names["size"]: tile.size, names["pad"]: tile.pad,
                          names["out"]: tile.out})
        return block

    def fits(tiles, group=None):
        """Whether the device takes ``tiles`` (one per axis) in groups of ``group`` (default:
        as wide as the unit), whole groups in a frame."""
        group = group or max(1, widest)
        key = (tuple((t.size, t.pad, t.out) for t in tiles), group)
        if key not in checked:
            check = dict(fields(tiles, group), indices=1, groups=1, reserved=0)
            image = math.prod(t.size for t in tiles)
            checked[key] = per_request(tiles, group) > 0 and not problems(
                Command.MAX_POOL, check, identity, data_length=group * image * fmt.nbytes)
        return checked[key]

    def fitting(grid):
        """``{(size, pad, out): tiles}`` per axis of ``grid``, or None if a tile does not fit."""
        kinds = [_tile_kinds(a, n) for a, n in zip(axes, grid)]
        shapes = [[AxisTile(0, out, 0, size, pad) for size, pad, out in k] for k in kinds]
        return kinds if all(fits(tiles) for tiles in product(*shapes)) else None

    def group_of(count):
        """The group of a batch of ``count`` tiles: as wide as the unit, or narrower when
        there are fewer tile images (that fits too: every capacity but the frame is per image,
        and the frame then holds fewer bytes)."""
        return max(1, min(widest, count * images))

    def cost(kinds):
        """(link elements, tiles, requests) of a grid's tiles (``kinds`` as :func:`fitting`
        gives them), a batch of tile images per configuration."""
        elements = requests = 0
        for batch in product(*(k.items() for k in kinds)):
            count = math.prod(n for _, n in batch)
            tiles = [AxisTile(0, out, 0, size, pad) for (size, pad, out), _ in batch]
            group = group_of(count)
            groups = -(-count * images // group)
            elements += groups * group * (math.prod(t.size for t in tiles)
                                          + math.prod(t.out for t in tiles))
            requests += -(-groups // per_request(tiles, group))
        return elements, math.prod(sum(k.values()) for k in kinds), requests

    def plan(grid):
        batches = {}
        for tiles in product(*(axis_tiles(a, n) for a, n in zip(axes, grid))):
            batches.setdefault(tuple((t.size, t.pad, t.out) for t in tiles), []).append(tiles)
        made = []
        for tiles in batches.values():
            group = group_of(len(tiles))
            groups = -(-len(tiles) * images // group)
            made.append(WindowBatch(tuple(tiles), group, fields(tiles[0], group), groups,
                                    min(per_request(tiles[0], group), groups)))
        return WindowPoolPlan(geometry, tuple(made))

    if tile_outputs is not None:
        grid = tuple(operator.index(n) for n in tile_outputs)
        if len(grid) != len(axes) or min(grid) < 1:
            raise ValueError(f"tile_outputs needs a length >= 1 per spatial axis "
                             f"({len(axes)}), got {list(tile_outputs)}")
        return None if fitting(grid) is None else plan(grid)
    # Tiles of one output need the least of every capacity: if they do not fit, nothing does.
    # Each capacity grows with a tile's length, so the longest tile along an axis (the others
    # of one output) bounds that axis's lengths.
    best = (1,) * len(axes)
    kinds = fitting(best)
    if kinds is None:
        return None
    longest = []
    for k, axis in enumerate(axes):
        low, high = 1, axis.out_size
        while low < high:
            middle = (low + high + 1) // 2
            if fitting(best[:k] + (middle,) + best[k + 1:]) is None:
                high = middle - 1
            else:
                low = middle
        longest.append(low)
    best_cost, found = cost(kinds), 0
    for tried, grid in enumerate(_grids(axes, longest)):
        if tried == _GRIDS_TRIED or found == _GRIDS_COMPARED:
            break
        kinds = fitting(grid)
        if kinds is not None:
            found += 1
            candidate = cost(kinds)
            if candidate < best_cost:
                best, best_cost = grid, candidate
    return plan(best)


def max_pool_by_window(values, fmt, plan, request, return_indices):
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

    Returns
    -------
    numpy.ndarray or (numpy.ndarray, numpy.ndarray)
        ``y`` and, with ``return_indices``, the int64 Indices.
    """
    geometry, images = plan.geometry, plan.images
    spatial = values.reshape((images,) + geometry.spatial_shape)
    out_shape = tuple(a.out_size for a in geometry.axes)
    bits = f"=u{fmt.nbytes}"
    out = np.empty((images,) + out_shape, values.dtype)
    where = [np.empty((images,) + out_shape, np.int64)
             for _ in geometry.axes] if return_indices else None
    for batch in plan.batches:
        group = batch.group
        value_bytes = group * fmt.nbytes
        count = len(batch.tiles) * images
        tile_shape = tuple(t.size for t in batch.tiles[0])
        stacked = np.zeros((batch.groups * group, batch.image), values.dtype)
        for k, tiles in enumerate(batch.tiles):
            inputs = (slice(None),) + tuple(slice(t.in_start, t.in_stop) for t in tiles)
            stacked[k * images:(k + 1) * images] = spatial[inputs].reshape(images, -1)
        # groups x image x group: a group's images interleaved element by element.
        interleaved = stacked.reshape(batch.groups, group, batch.image).transpose(0, 2, 1)
        maxima = np.empty((batch.groups, batch.image_out, group), values.dtype)
        found = np.empty((batch.groups, batch.image_out, group), np.int64) \
            if return_indices else None
        for start in range(0, batch.groups, batch.groups_per_request):
            chunk = interleaved[start:start + batch.groups_per_request]
            block = _BLOCK.pack(**batch.fields, groups=len(chunk), indices=int(return_indices))
            reply = request(block + encode(chunk, fmt))
            rows = slice(start, start + len(chunk))
            if return_indices:
                reply = np.frombuffer(reply, np.uint8).reshape(
                    len(chunk), batch.image_out, value_bytes + group * WINDOW_INDEX_BYTES)
                found[rows] = reply[..., value_bytes:].copy().view("<u4").reshape(
                    len(chunk), batch.image_out, group)
                reply = reply[..., :value_bytes].tobytes()
            maxima.view(bits)[rows] = decode(
                reply, fmt, (len(chunk), batch.image_out, group)).view(bits)
        tile_out = tuple(t.out for t in batch.tiles[0])
        maxima = maxima.transpose(0, 2, 1).reshape((-1,) + tile_out)[:count]
        if return_indices:
            # The tile's flat index -> coordinates in the tile (-> in the image, below).
            coordinates = np.unravel_index(
                found.transpose(0, 2, 1).reshape((-1,) + tile_out)[:count], tile_shape)
        for k, tiles in enumerate(batch.tiles):
            outputs = (slice(None),) + tuple(slice(t.out_start, t.out_stop) for t in tiles)
            mine = slice(k * images, (k + 1) * images)
            out.view(bits)[outputs] = maxima[mine].view(bits)
            if return_indices:
                for axis, t in enumerate(tiles):
                    where[axis][outputs] = coordinates[axis][mine] + t.in_start
    y = out.reshape(geometry.output_shape)
    if not return_indices:
        return y
    channel = np.arange(images, dtype=np.int64).reshape((images,) + (1,) * len(out_shape))
    indices = geometry.indices(channel, where)
    return y, indices.reshape(geometry.output_shape)
