"""Online inference with Ray Serve: one deployment per maxaccel board, behind one HTTP route.

Each board is a deployment of one replica that reserves the board's Ray resource
(``ray_actor_options={"resources": {"maxaccel_board": 1}}``, the resource ``BoardPool``'s
actors reserve) and takes one request at a time, as a board does; a board of a real multi-host
cluster also pins its replica to the node the board is plugged into (``URL#NODE``, as
``BoardPool`` takes it). An ingress deployment sends each request to a free board and, if that
board's replica dies or fails on its link, to the next one: a request is answered once, by one
board.

Requests and replies are ``.npz`` bodies (``{input name: array}`` in, ``{output name: array}``
out), so every bit arrives as the board computed it (JSON has no NaN payloads, no -0 in some
clients, no bfloat16).

Run it (needs ``pip install 'maxaccel[cluster]' 'ray[serve]'``)::

    python docs/examples/serve_boards.py                      # three sim boards, this host
    python docs/examples/serve_boards.py --board verilator --board verilator
    python docs/examples/serve_boards.py --address auto \\
        --board 'xdma:///dev/xdma0#10.0.0.11' --board 'xdma:///dev/xdma0#10.0.0.12'

It serves ``examples/max_family.onnx`` on http://127.0.0.1:8000/, sends a few requests from
this script and checks each reply bit for bit against the golden model. Any client can post::

    curl --data-binary @inputs.npz http://127.0.0.1:8000/ -o outputs.npz
"""

import argparse
import io
import itertools
import pathlib
import urllib.request

import numpy as np
from ray import serve
from ray.exceptions import RayActorError

from maxaccel.cluster import BOARD_RESOURCE

MODEL = pathlib.Path(__file__).resolve().parents[2] / "examples" / "max_family.onnx"


def _npz(arrays):
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _arrays(body):
    with np.load(io.BytesIO(body), allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


@serve.deployment(num_replicas=1, max_ongoing_requests=1)
class Board:
    """One board: its device and the model's OffloadSession, opened once per replica."""

    def __init__(self, url, model):
        from maxaccel.host import OffloadSession, open_device
        self.device = open_device(url, progress=None)
        self.session = OffloadSession(model, device=self.device)

    def run(self, feeds):
        """``{output name: array}`` of one run (feeds checked as onnxruntime checks them)."""
        outputs = self.session.run(None, feeds)
        return {spec.name: value for spec, value in zip(self.session.get_outputs(), outputs)}


@serve.deployment(max_ongoing_requests=64)
class Ingress:
    """The HTTP route: each request to a board, the next board if one fails under it."""

    def __init__(self, *boards):
        self.boards = list(boards)
        self.turn = itertools.count()

    async def __call__(self, request):
        from maxaccel.host.link import LinkError
        from maxaccel.host.transport import TransportError
        feeds = _arrays(await request.body())
        first = next(self.turn)
        failures = []
        for step in range(len(self.boards)):
            board = self.boards[(first + step) % len(self.boards)]
            try:
                outputs = await board.run.remote(feeds)
            except (RayActorError, LinkError, TransportError) as error:
                failures.append(f"{type(error).__name__}: {str(error).splitlines()[0]}")
                continue
            from starlette.responses import Response
            return Response(_npz(outputs), media_type="application/octet-stream")
        raise RuntimeError("every board failed this request: " + "; ".join(failures))


def build(urls, model=MODEL):
    """The Serve application: a ``Board`` deployment per URL (``URL#NODE`` pins it to a node)
    and the ingress that routes to them."""
    boards = []
    for index, spec in enumerate(urls):
        url, _, node = spec.partition("#")
        options = {"num_cpus": 0, "resources": {BOARD_RESOURCE: 1}}
        if node:
            # A physical board is on one host. Ray gives every node a resource named
            # "node:<its IP address>"; a sliver of it pins the replica to that node.
            options["resources"][f"node:{node}"] = 0.001
        boards.append(Board.options(name=f"board-{index}", ray_actor_options=options)
                      .bind(url, str(model)))
    return Ingress.bind(*boards)


def main(argv=None):
    import ray

    from maxaccel.host import OffloadSession
    from maxaccel.sim import reference
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--board", action="append", metavar="URL[#NODE]",
                        help="a board (repeatable; default: three sim boards)")
    parser.add_argument("--address", help="join this Ray cluster (default: a local one)")
    parser.add_argument("--requests", type=int, default=6)
    args = parser.parse_args(argv)
    urls = args.board or ["sim"] * 3
    if args.address:
        ray.init(address=args.address)
    else:
        ray.init(resources={BOARD_RESOURCE: len(urls)}, include_dashboard=False)
    try:
        serve.run(build(urls), route_prefix="/")
        golden = OffloadSession(str(MODEL), device=reference)
        rng = np.random.default_rng(0)
        for number in range(args.requests):
            feeds = {spec.name: rng.standard_normal(spec.shape).astype(spec.dtype)
                     for spec in golden.get_inputs()}
            reply = urllib.request.urlopen(urllib.request.Request(
                "http://127.0.0.1:8000/", data=_npz(feeds), method="POST"), timeout=600)
            outputs = _arrays(reply.read())
            for spec, want in zip(golden.get_outputs(), golden.run(None, feeds)):
                reference.assert_same_bits(outputs[spec.name], want, spec.name)
            print(f"request {number}: {len(outputs)} outputs, the golden model's bits")
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
