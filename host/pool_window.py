"""Windowed MaxPool through the ``MAX_POOL`` command: the pooling unit's route.

A core with the windowed pooling unit (``IDENTIFY``'s ``window_lanes`` above 0) pools whole
images as they stream: each input element crosses the link once and each output once. The
unit pools ``group`` images side by side, so the host sends the images of a group interleaved
element by element (a transpose of ``group x image`` blocks, ``docs/protocol.md``) and takes the
maxima back the same way, with each one's flat index inside its image when Indices are asked
for; the host adds the image's offset and renumbers them for ``storage_order``.

:func:`plan_window_pool` says whether a pool fits the unit: the ``MAX_POOL`` parameter block it
would send is checked by the wire contract's own rules (``contract.wire.problems``), so the
planner, the engine and the fake board decide the same way. A pool that does not fit (more
than 3 spatial axes, a kernel extent, an output row or plane beyond the unit's buffers, a
window of padding only, an image larger than a frame) goes through ``REDUCE``
(``host/pool_reduce.py``) instead, still on the device and still exact.

Pure numpy; never imports amaranth.
"""

import math
from dataclasses import dataclass

import numpy as np

from maxaccel.contract.dtypes import decode_elements as decode, encode_elements as encode
from maxaccel.contract.pooling import window_config
from maxaccel.contract.wire import (PARAMETERS, WINDOW_INDEX_BYTES, Capacities, Command,
                                    problems, window_fields)

__all__ = ["WindowPoolPlan", "plan_window_pool", "max_pool_by_window"]

_BLOCK = PARAMETERS[Command.MAX_POOL]


@dataclass(frozen=True)
class WindowPoolPlan:
    """A MaxPool as ``MAX_POOL`` requests.

    Attributes
    ----------
    geometry : PoolGeometry
    group : int
        Images pooled side by side (one element of each per beat).
    groups : int
        Groups of the whole tensor (its ``N * C`` images, the last group filled up with
        zero images whose results are dropped).
    groups_per_request : int
        Groups in one request (a frame of at most ``max_frame_bytes`` each way).
    fields : dict
        The parameter block's fields but ``groups`` and ``indices``.
    """

    geometry: object
    group: int
    groups: int
    groups_per_request: int
    fields: dict

    @property
    def image(self):
        return self.geometry.channel_stride

    @property
    def image_out(self):
        return math.prod(a.out_size for a in self.geometry.axes)

    def wire_elements(self):
        """Elements that cross the link, both ways (values only; the filler images included)."""
        return self.groups * self.group * (self.image + self.image_out)


def plan_window_pool(geometry, fmt, identity, max_frame_bytes):
    """The ``MAX_POOL`` plan of a pool on a device, or ``None`` if it does not fit.

    Parameters
    ----------
    geometry : PoolGeometry
    fmt : Format
    identity : Identity
        The device's ``IDENTIFY``.
    max_frame_bytes : int
        Largest request or reply payload.
    """
    config = window_config(geometry)
    if identity.window_lanes == 0 or config is None or geometry.has_empty_windows():
        return None
    capacities = Capacities.of(identity)
    images = geometry.input_shape[0] * geometry.input_shape[1]
    group = max(1, min(capacities.window_bytes // fmt.nbytes, images))
    fields = {"dtype": fmt.dtype, "group": group}
    for axis, values in enumerate(config):
        fields.update((window_fields(axis)[name], value) for name, value in values.items())
    image = geometry.channel_stride
    image_out = math.prod(a.out_size for a in geometry.axes)
    group_bytes = group * max(image * fmt.nbytes,
                              image_out * (fmt.nbytes + WINDOW_INDEX_BYTES))
    per_request = max_frame_bytes // max(group_bytes, 1)
    if per_request == 0:
        return None
    check = dict(fields, indices=1, groups=1, reserved=0)
    if problems(Command.MAX_POOL, check, identity,
                data_length=group * image * fmt.nbytes):
        return None
    groups = -(-images // group)
    return WindowPoolPlan(geometry, group, groups, min(per_request, groups), fields)


def max_pool_by_window(values, fmt, plan, request, return_indices):
    """Pool ``values`` (native byte order) as :func:`maxaccel.sim.reference.max_pool` does,
    through ``MAX_POOL`` requests.

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
    geometry = plan.geometry
    images = geometry.input_shape[0] * geometry.input_shape[1]
    group, groups = plan.group, plan.groups
    flat = values.reshape(images, plan.image)
    if groups * group != images:
        flat = np.concatenate([flat, np.zeros((groups * group - images, plan.image),
                                              values.dtype)])
    # groups x image x group: a group's images interleaved element by element.
    interleaved = flat.reshape(groups, group, plan.image).transpose(0, 2, 1)
    out = np.empty((groups, group, plan.image_out), values.dtype)
    where = np.empty((groups, group, plan.image_out), np.int64) if return_indices else None
    value_bytes = group * fmt.nbytes
    for start in range(0, groups, plan.groups_per_request):
        chunk = interleaved[start:start + plan.groups_per_request]
        block = _BLOCK.pack(**plan.fields, groups=len(chunk), indices=int(return_indices))
        reply = request(block + encode(chunk, fmt))
        if return_indices:
            rows = np.frombuffer(reply, np.uint8).reshape(
                len(chunk), plan.image_out, value_bytes + group * WINDOW_INDEX_BYTES)
            maxima = decode(rows[..., :value_bytes].tobytes(), fmt,
                            (len(chunk), plan.image_out, group))
            found = rows[..., value_bytes:].copy().view("<u4").reshape(
                len(chunk), plan.image_out, group)
            where[start:start + len(chunk)] = found.transpose(0, 2, 1)
        else:
            maxima = decode(reply, fmt, (len(chunk), plan.image_out, group))
        out.view(f"=u{fmt.nbytes}")[start:start + len(chunk)] = \
            maxima.transpose(0, 2, 1).view(f"=u{fmt.nbytes}")
    y = out.reshape(groups * group, -1)[:images].reshape(geometry.output_shape)
    if not return_indices:
        return y
    offsets = where.reshape(groups * group, -1)[:images]
    coordinates = np.unravel_index(offsets, geometry.spatial_shape)
    channel = np.arange(images, dtype=np.int64)[:, None]
    indices = geometry.indices(channel, coordinates)
    return y, indices.reshape(geometry.output_shape)
