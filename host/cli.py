"""The ``maxaccel`` command (also ``python -m maxaccel``).

Commands: ``run``, ``bench``, ``serve``, ``boards``, ``build``, ``program``; each checks every
argument before it starts any work. ``-v`` and ``-q`` set the level of the ``maxaccel`` logger
(:mod:`logging`); progress bars (:mod:`maxaccel.contract.progress`) appear on stderr when it is a
terminal, unless ``-q``. Ctrl-C stops a command with one line and exit status 130. The help
texts below are plain text, as ``--help`` prints them.
"""

import argparse
import importlib.metadata
import logging
import os
import pathlib
import sys
import time

import numpy as np

from maxaccel.contract import progress as _progress

__all__ = ["main"]

log = _progress.log

RUN_DESCRIPTION = """\
Run an ONNX model with its Max, ReduceMax, GlobalMaxPool, MaxPool, Min, ReduceMin, ArgMax and
ArgMin nodes on a board (the virtual board by default). Prints each output's shape and dtype,
where each node ran, and whether the outputs are bit for bit those of the golden model. Inputs
not given are generated (random values mixed with edge cases: NaNs, signed zeros,
infinities, extremes) from a printed seed."""

BENCH_DESCRIPTION = """\
Measure throughput, host overhead and link efficiency per device and tensor size, with numpy and
onnxruntime on this CPU for comparison; optionally a plot and the figures as JSON, and the table
of the board build reports shipped with the package. With --ratios, each operation's device
cycles over a ReduceMax of the same input bytes, per dtype, on virtual boards (sim, verilator),
and the MaxPool table: each MaxPool class of real networks (maxaccel.bench.pools.POOL_CLASSES) over a
ReduceMax of the larger of its input and output bytes (Indices included), in float32, float16
and uint8; --pool-routes times the pools that go through the pooling unit through REDUCE too.
With --core-link (or --board NAME), each board build report's core on the compiled virtual
board: the rate at which it takes each operation's request bytes over its link's rate. With
--model-pools, each core built for a model (docs/boards/models) on the compiled virtual board:
its models' MaxPools, their cycles at the board's clock against their link-bound time.
With --transfers, on an xdma-model:BOARD device, the XDMA link's modelled throughput against
the host's transfer size (a NiteFury's transfer costs, docs/boards.md)."""

SERVE_DESCRIPTION = """\
Serve a virtual board on a pseudo-terminal until interrupted (Ctrl-C or SIGTERM). Any serial
client connects to it as to a board's serial port: the host driver with
open_device("serial:///dev/pts/N"), pyserial, or a terminal program. A client that goes away
mid-request leaves a freshly reset board for the next one."""

#: How often ``maxaccel serve``'s main thread wakes to run a Ctrl-C's or SIGTERM's handler.
SIGNAL_POLL_S = 0.1

BOARDS_DESCRIPTION = "The boards 'maxaccel build' knows, with device, link, default lanes and clock."

BUILD_DESCRIPTION = """\
Build a board's bitstream with the YoWASP toolchain (Lattice) or its Vivado build plan (Xilinx),
and print and write its report (logic, flip-flops, block RAMs, Fmax). With --model, the core
carries only the units and capacities the models' max-family nodes need (the windowed pooling
unit at the models' kernel extents, say, and no broadcast unit when no Max broadcasts); the
report gains each node's route on it, its link-bound time and why. A core the board cannot hold
is refused before any synthesis, naming the node and the nearest board or setting that would
hold it, as --core NAME=VALUE where a setting would (a Core parameter the choice then keeps:
--core window_extent=9, --core units=reduce). --plan-only prints the choice and stops there (no
toolchain needed)."""

PROGRAM_DESCRIPTION = """\
Load the bitstream 'maxaccel build' made onto the board, with the programmer its amaranth-boards
platform names (iceprog, openFPGALoader)."""

class _Failure(Exception):
    """A user mistake or an unusable device: printed as one line, exit status 2."""


#: The first bytes of a .npy file, and of a .npz (a zip archive).
_NPY_MAGIC, _ZIP_MAGIC = b"\x93NUMPY", b"PK\x03\x04"


def _read_npy(name, path):
    """The array in the .npy file ``path`` for input ``name``; a one-line failure for anything
    else (a .npz archive, a text file, a pickle)."""
    try:
        with open(path, "rb") as file:
            head = file.read(len(_NPY_MAGIC))
    except OSError as error:
        raise _Failure(f"cannot load input {name!r} from {path!r}: {error.strerror}") from None
    if head.startswith(_ZIP_MAGIC):
        raise _Failure(f"cannot load input {name!r} from {path!r}: a .npz archive; --input "
                       f"takes one array in a .npy file (numpy.save)")
    if head != _NPY_MAGIC:
        raise _Failure(f"cannot load input {name!r} from {path!r}: not a .npy file "
                       f"(numpy.save writes one)")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise _Failure(f"cannot load input {name!r} from {path!r}: {error}") from None


def _load_inputs(pairs, session):
    specs = {s.name: s for s in session.get_inputs()}
    feeds = {}
    for pair in pairs or []:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            raise _Failure(f"--input takes NAME=FILE.npy, got {pair!r}")
        array = _read_npy(name, path)
        spec = specs.get(name)
        if (spec is not None and spec.dtype is not None and array.dtype.kind == "V"
                and array.dtype.itemsize == spec.dtype.itemsize):
            array = array.view(spec.dtype)  # bfloat16 is stored as raw 2-byte values
        feeds[name] = array
    return feeds


def _generate(spec, rng):
    from maxaccel.contract.dtypes import format_of
    from maxaccel.sim.values import random_values
    if spec.dtype is None:
        raise _Failure(f"input {spec.name!r} has no declared element type: give it with "
                       f"--input {spec.name}=FILE.npy")
    shape = tuple(d if isinstance(d, int) else 1 for d in (spec.shape or ()))
    try:
        return random_values(rng, format_of(spec.dtype), shape)
    except TypeError:
        raise _Failure(f"cannot generate input {spec.name!r} of type {spec.dtype}: give it with "
                       f"--input {spec.name}=FILE.npy") from None


def _axes_inputs(session):
    """Graph inputs that feed a ReduceMax's axes: random values would make no sense."""
    inputs = {s.name for s in session.get_inputs()}
    return {n.input[1] for n in session.model.graph.node
            if n.op_type == "ReduceMax" and len(n.input) > 1 and n.input[1] in inputs}


def _describe(array):
    return f"{array.dtype} [{', '.join(map(str, array.shape))}]"


def _check_url(url, option="--device"):
    from maxaccel.host.transport import check_url
    try:
        check_url(url)
    except (TypeError, ValueError) as error:
        raise _Failure(f"{option} {url}: {error}") from None


def _check_output(path, option):
    """A file the command will write: its folder exists and may be written, it is no folder."""
    if path is None:
        return
    target = pathlib.Path(path)
    folder = target.parent
    if target.is_dir():
        raise _Failure(f"{option} {path}: is a directory")
    if not folder.is_dir():
        raise _Failure(f"{option} {path}: directory {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise _Failure(f"{option} {path}: directory {str(folder)!r} is not writable")


def _check_input_files(pairs):
    for pair in pairs or []:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            raise _Failure(f"--input takes NAME=FILE.npy, got {pair!r}")
        if not os.path.isfile(path):
            raise _Failure(f"cannot load input {name!r} from {path!r}: no such file")


def _open(url):
    """open_device with a progress bar named after the device; logs a slow opening (the first
    use of 'verilator' builds the model)."""
    from maxaccel.host.device import open_device
    started = time.monotonic()
    device = open_device(url, progress=_progress.TransferProgress(url))
    elapsed = time.monotonic() - started
    if elapsed > 1:
        log.info(f"opened {url} in {elapsed:.1f} s")
    else:
        log.debug(f"opened {url} in {elapsed:.2f} s")
    log.debug(f"{url}: {device!r}")
    return device


def _run(args, out):
    from maxaccel.host.offload import OffloadSession
    from maxaccel.sim import reference

    _check_url(args.device)
    if not os.path.isfile(args.model):
        raise _Failure(f"no ONNX model at {args.model!r}")
    _check_input_files(args.input)
    _check_output(args.output, "--output")
    if args.seed is not None and not 0 <= args.seed < 2**128:
        raise _Failure(f"--seed {args.seed}: must be a non-negative integer")

    session = OffloadSession(args.model)
    feeds = _load_inputs(args.input, session)
    try:
        # The given inputs checked against the graph (names, shapes, dtypes) before anything
        # is generated or any device opens.
        feeds = session.check_feeds(feeds, complete=False)
    except (TypeError, ValueError) as error:
        raise _Failure(f"--input: {error}") from None
    missing = [s for s in session.get_inputs() if s.name not in feeds]
    axes = sorted(_axes_inputs(session) & {s.name for s in missing})
    if axes:
        raise _Failure(f"input(s) {', '.join(axes)} give ReduceMax axes: pass them with "
                       f"--input NAME=FILE.npy")
    if missing:
        seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy
                                                           % 2**32)
        rng = np.random.default_rng(seed)
        print(f"generated inputs with seed {seed} (repeat with --seed {seed}):", file=out)
        for spec in missing:
            feeds[spec.name] = _generate(spec, rng)
            symbolic = "" if all(isinstance(d, int) for d in (spec.shape or ())) else \
                " (symbolic sizes set to 1)"
            print(f"  {spec.name}: {_describe(feeds[spec.name])}{symbolic}", file=out)

    with _open(args.device) as device:
        session.device = device
        started = time.monotonic()
        outputs = session.run(None, feeds)
        elapsed = time.monotonic() - started
        print(f"ran {args.model} on {args.device} in {elapsed:.3f} s", file=out)
    names = [o.name for o in session.get_outputs()]
    print("outputs:", file=out)
    for name, value in zip(names, outputs):
        print(f"  {name}: {_describe(value)}", file=out)
    print("nodes, in run order (a CPU partition's nodes share its time):", file=out)
    width = max([len(n) for n, _, _ in session.last_run] + [4])
    op_types = {name: op_type for name, op_type, _ in session.last_run}
    for step in session.last_steps:
        for index, name in enumerate(step.nodes):
            op_type = op_types[name]
            timing = f"{step.name}: {1e3 * step.seconds:.2f} ms" if step.name != name else \
                f"{1e3 * step.seconds:.2f} ms"
            print(f"  {name:<{width}}  {op_type:<14} {step.where:<14} "
                  f"{timing if index == 0 else '|'}", file=out)

    golden = OffloadSession(session.model, device=reference).run(None, feeds)
    mismatches = []
    for name, value, expected in zip(names, outputs, golden):
        try:
            reference.assert_same_bits(value, expected, name)
        except AssertionError as error:
            mismatches.append(str(error))
    if mismatches:
        print("outputs DIFFER from the golden model:", file=out)
        for text in mismatches:
            print(f"  {text}", file=out)
    else:
        print("outputs match the golden model bit for bit", file=out)
    if args.output:
        np.savez(args.output, **dict(zip(names, outputs)))
        print(f"saved outputs to {args.output}", file=out)
    return 1 if mismatches else 0


def _needs_xdma_model(urls, option, what):
    """Refuse ``option`` unless every device of ``urls`` is the XDMA driver's double (``what``
    says what the option takes from it)."""
    not_model = [url for url in urls if not url.startswith("xdma-model:")]
    if not_model:
        raise _Failure(f"{option} needs xdma-model:BOARD devices (the XDMA driver's double "
                       f"{what}), not {not_model[0]}")


def _check_bench_arguments(args, urls):
    """Refuse every bad ``bench`` argument before anything is measured; returns the models
    ``--model`` names, loaded."""
    from maxaccel.contract.dtypes import format_of
    from maxaccel import bench

    for url in urls:
        _check_url(url)
    if args.ratios is not None and args.ratios < 1:
        raise _Failure(f"--ratios {args.ratios}: elements per operand must be at least 1")
    if args.pool_channels is not None and args.pool_channels < 1:
        raise _Failure(f"--pool-channels {args.pool_channels}: at least 1 channel")
    if any(n < 1 for n in args.elements or []):
        raise _Failure(f"--elements {' '.join(map(str, args.elements))}: sizes must be at "
                       f"least 1")
    try:
        format_of(args.dtype)
        if args.elements or not (args.model or args.ratios or args.core_link
                                 or args.model_pools):
            bench.check_operations(args.dtype)     # before any operation is measured
    except TypeError as error:
        raise _Failure(f"--dtype {args.dtype}: {error}") from None
    _check_output(args.json, "--json")
    _check_output(args.plot, "--plot")
    _check_output(args.core_link_json, "--core-link-json")
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (checked before any measurement)
        except ImportError:
            raise _Failure("--plot needs matplotlib: pip install 'maxaccel[bench]'") from None
    if args.reports is not None and not os.path.isdir(args.reports):
        raise _Failure(f"--reports {args.reports}: no such directory")
    if args.transfers is not None:
        if any(n < 64 for n in args.transfers):
            raise _Failure(f"--transfers {' '.join(map(str, args.transfers))}: a transfer "
                           f"holds at least 64 bytes")
        _needs_xdma_model(urls, "--transfers", "keeps the modelled transfer times")
    if args.paced is not None:
        from maxaccel.bench.xdma import WAITS
        if args.paced not in WAITS:
            raise _Failure(f"--paced {args.paced}: the wait is one of {', '.join(WAITS)}")
        if not args.model:
            raise _Failure("--paced goes with --model (it paces the device calls of whole "
                           "models)")
        _needs_xdma_model(urls, "--paced", "models each call's time on a NiteFury")
    if args.rounds is not None:
        if args.rounds < 1:
            raise _Failure(f"--rounds {args.rounds}: at least one round")
        if not args.model:
            raise _Failure("--rounds goes with --model (the rounds of each model's runs)")
    if args.core_link_json and not args.core_link:
        raise _Failure("--core-link-json goes with --core-link (or --board)")
    _check_output(args.model_pools_json, "--model-pools-json")
    if args.model_pools_json and not args.model_pools:
        raise _Failure("--model-pools-json goes with --model-pools")
    for name in args.board or ():
        from maxaccel.boards.targets import target
        try:
            target(name)    # an unknown name is refused before anything runs
        except ValueError as error:
            raise _Failure(f"--board {name}: {error}") from None
    loaded = []
    for model in args.model or []:
        try:
            loaded.append(bench.load_model(model))   # read before any device opens
        except (OSError, ValueError, TypeError) as error:
            raise _Failure(f"--model {model}: {error}") from None
    return loaded


def _bench_core_link(args, out):
    """``--core-link``: core against link per operation for the build reports' boards (those of
    ``--board``, or all), each core on the compiled virtual board; ``--core-link-json`` writes
    the table (``docs/boards/core_link.json`` is this file; with ``--board`` its other boards
    are kept)."""
    import json

    from maxaccel.boards.targets import TARGETS, load_reports
    from maxaccel.bench import cycles as bench_cycles

    elements = args.ratios or 1 << 18
    reports = [r for r in load_reports(args.reports)
               if not args.board or r["board"] in args.board]
    missing = set(args.board or ()) - {r["board"] for r in reports}
    if missing:
        raise _Failure(f"--board: no build report for {', '.join(sorted(missing))} (run "
                       f"maxaccel build)")
    previous = None
    if args.board and args.core_link_json and os.path.exists(args.core_link_json):
        with open(args.core_link_json) as file:
            previous = json.load(file)
        if previous.get("elements") != elements:
            raise _Failure(f"--core-link-json {args.core_link_json} was measured with "
                           f"{previous.get('elements')} elements per operand, not {elements}: "
                           f"measure every board again")
    core_link = {}
    for report in reports:
        print(f"{report['board']}: {report['lanes']} lane(s), {report['clock_mhz']:g} MHz",
              file=out, flush=True)
        core_link[report["board"]] = bench_cycles.measure_core_link(
            report, elements, progress=lambda r: print(f"  {bench_cycles.ratio_line(r)}",
                                                       file=out, flush=True))
    print(bench_cycles.format_core_link(core_link), file=out)
    if args.core_link_json:
        if previous is not None:
            core_link = {name: core_link.get(name, previous["boards"].get(name))
                         for name in TARGETS
                         if name in core_link or name in previous["boards"]}
        with open(args.core_link_json, "w") as file:
            json.dump({"command": bench_cycles.CORE_LINK_COMMAND, "elements": elements,
                       "boards": core_link}, file, indent=1)
            file.write("\n")
        print(f"wrote {args.core_link_json}", file=out)


def _bench_model_pools(args, out):
    """``--model-pools``: the MaxPools of each model build report's models (those of
    ``--board``, or all) on its core on the compiled virtual board; ``--model-pools-json``
    writes the table (``docs/boards/model_pools.json`` is this file)."""
    import json

    from maxaccel.boards.estimate import report_name
    from maxaccel.boards.targets import load_model_reports
    from maxaccel.bench import cycles as bench_cycles

    reports = [r for r in load_model_reports(args.reports)
               if not args.board or r["board"] in args.board]
    if not reports:
        raise _Failure("--model-pools: no model build report"
                       + (f" for {', '.join(args.board)}" if args.board else ""))
    try:
        models = {tuple(r["models"]): bench_cycles.report_models(r) for r in reports}
    except FileNotFoundError as error:
        raise _Failure(f"--model-pools: {error}") from None
    model_pools = {}
    for report in reports:
        name = report_name(report)
        print(f"{name}: {report['clock_mhz']:g} MHz", file=out, flush=True)
        model_pools[name] = bench_cycles.measure_model_pools(
            report, models[tuple(report["models"])],
            progress=lambda r: print(f"  {r['model']} {r['node']}: {r['cycles']} cycles, "
                                     f"{r['link_bytes']} link bytes", file=out, flush=True))
    print(bench_cycles.format_model_pools(model_pools), file=out)
    if args.model_pools_json:
        with open(args.model_pools_json, "w") as file:
            json.dump({"command": bench_cycles.MODEL_POOLS_COMMAND, "boards": model_pools},
                      file, indent=1)
            file.write("\n")
        print(f"wrote {args.model_pools_json}", file=out)


def _measure_on(url, args, loaded, out, found):
    """Measure what ``bench`` asks on the device at ``url``, adding to the lists of ``found``
    (``measurements``, ``ratios``, ``pools``, ``models``, ``transfers``)."""
    from maxaccel import bench
    from maxaccel.bench import cycles as bench_cycles, pools as bench_pools

    elements = args.elements or bench.default_elements(url)
    with _open(url) as device:
        print(f"{device!r}", file=out, flush=True)
        only_tables = (args.model or args.ratios or args.transfers is not None
                       or args.core_link or args.model_pools)
        if args.elements or not only_tables:
            found["measurements"] += bench.measure_device(
                device, elements, dtype=args.dtype,
                progress=lambda m: print(f"  {m.operation:<18} {m.elements:>8} "
                                         f"elements {m.elements_per_s:>12.0f} "
                                         f"elements/s", file=out, flush=True))
        if args.ratios:
            found["ratios"] += bench_cycles.measure_ratios(
                device, args.ratios,
                progress=lambda r: print(f"  {bench_cycles.ratio_line(r)}", file=out,
                                         flush=True))
            found["pools"] += bench_pools.measure_pool_ratios(
                device, both_routes=args.pool_routes, channels=args.pool_channels,
                progress=lambda r: print(f"  {bench_pools.pool_ratio_line(r)}", file=out,
                                         flush=True))
        if args.transfers is not None:
            from maxaccel.bench import xdma as bench_xdma
            found["transfers"][url] = bench_xdma.measure_transfers(
                device, args.transfers or bench_xdma.TRANSFER_SIZES,
                total_bytes=bench_xdma.default_total_bytes(url),
                progress=lambda m: print(f"  {bench_xdma.transfer_line(m)}", file=out,
                                         flush=True))
        if args.paced is not None and loaded:
            from maxaccel.bench import xdma as bench_xdma
            device = bench_xdma.PacedDevice(device, args.paced)
        rounds = {} if args.rounds is None else {"rounds": args.rounds}
        for model in loaded:
            found["models"].append(bench.measure_model(device, *model, **rounds))
            measured = found["models"][-1]
            print(f"  {measured.model}: {measured.ratio:.2f}x onnxruntime outside "
                  f"the device calls on one thread, {measured.default_ratio:.2f}x "
                  f"with default threading", file=out, flush=True)


def _bench(args, out):
    import json

    from maxaccel import bench
    from maxaccel.bench import cycles as bench_cycles, pools as bench_pools
    from maxaccel.host.transport import TransportError

    if args.board and not args.model_pools:
        args.core_link = True
    urls = args.device or ([] if args.core_link or args.model_pools else ["sim"])
    loaded = _check_bench_arguments(args, urls)

    print(f"machine: {bench.machine_description()}", file=out)
    found = {"measurements": [], "ratios": [], "pools": [], "models": [], "transfers": {}}
    failures, sizes = [], set()
    for url in urls:
        sizes.update(args.elements or bench.default_elements(url))
        try:
            _measure_on(url, args, loaded, out, found)
        except (TransportError, RuntimeError, bench_cycles.NoCycleCounter) as error:
            failures.append(f"{url}: {error}")
            print(f"{url}: not measured: {error}", file=out)
    if args.core_link:
        _bench_core_link(args, out)
    if args.model_pools:
        _bench_model_pools(args, out)
    measurements, ratios, pools = found["measurements"], found["ratios"], found["pools"]
    models, transfers = found["models"], found["transfers"]
    if args.cpu and sizes:
        cpu, note = bench.measure_cpu(sorted(sizes), dtype=args.dtype)
        measurements += cpu
        print(f"CPU: numpy {np.__version__}, {note}", file=out)
    if measurements:
        print(bench.format_table(measurements), file=out)
    for url in dict.fromkeys(r.where for r in ratios):
        print(f"{url}: device cycles over a ReduceMax of the same input bytes, "
              f"{args.ratios} elements per operand:", file=out)
        print(bench_cycles.format_ratios([r for r in ratios if r.where == url]), file=out)
        print(f"{url}: MaxPool device cycles over a ReduceMax of the larger of the pool's "
              f"input and output bytes (Indices included):", file=out)
        print(bench_pools.format_pool_ratios([r for r in pools if r.where == url]), file=out)
    for url, results in transfers.items():
        from maxaccel.boards.targets import TARGETS
        from maxaccel.bench import xdma as bench_xdma
        link = TARGETS["nitefury"].link_bytes_per_s
        print(f"{url}: modelled XDMA throughput against transfer size (ReduceMax, tensor "
              f"bytes over the modelled time; the link is {link / 1e9:g} GB/s):", file=out)
        print(bench_xdma.format_transfers(results, link), file=out)
    if models:
        print("whole models: OffloadSession (time outside the device calls) against "
              "onnxruntime on one thread:", file=out)
        print(bench.format_model_table(models), file=out)
    from maxaccel.boards.targets import load_reports, report_markdown, reports_dir
    directory = reports_dir() if args.reports is None else args.reports
    reports = load_reports(directory)
    if reports:
        print(f"boards (build reports in {directory}):", file=out)
        print(report_markdown(reports), file=out)
        core_link = bench_cycles.load_core_link(directory)
        if core_link:
            print(f"core against link per operation (each board's core on the compiled "
                  f"virtual board, {bench_cycles.CORE_LINK_FILE}; above 1 the link is the "
                  f"limit):", file=out)
            print(bench_cycles.format_core_link(core_link), file=out)
    else:
        print(f"boards: no build reports in {directory}", file=out)
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"machine": bench.machine_description(),
                       "measurements": [m.as_dict() for m in measurements],
                       "models": [m.as_dict() for m in models],
                       "ratios": [r.as_dict() for r in ratios],
                       "pool_ratios": [r.as_dict() for r in pools],
                       "transfers": {url: [m.as_dict() for m in results]
                                     for url, results in transfers.items()},
                       "not_measured": failures}, file, indent=1)
        print(f"wrote {args.json}", file=out)
    if args.plot:
        bench.plot(measurements, args.plot, title=f"maxaccel, {args.dtype}")
        print(f"wrote {args.plot}", file=out)
    return 1 if failures else 0


def _serve(args, out):
    import signal

    from maxaccel.host.transport import open_transport
    from maxaccel.sim.serve import PtyServer

    _check_url(args.device)
    if args.link is not None:
        folder = pathlib.Path(args.link).parent
        if not folder.is_dir():
            raise _Failure(f"--link {args.link}: directory {str(folder)!r} does not exist")

    def interrupted(signum, frame):
        raise KeyboardInterrupt
    # Both explicitly: a shell starts a background job with SIGINT ignored.
    previous = {number: signal.signal(number, interrupted)
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        board = open_transport(args.device)
        try:
            server = PtyServer(board, link=args.link)
        except BaseException:
            board.close()
            raise
        try:
            print(f"serving {args.device} on {server.port}"
                  + (f" (link {server.link})" if server.link else ""), file=out)
            print(f'connect with open_device("{server.url}"); Ctrl-C stops', file=out,
                  flush=True)
            # Woken every SIGNAL_POLL_S: CPython runs a signal's handler in the main thread
            # only, and a signal the kernel gives the pump thread wakes no wait without one.
            while not server.wait(SIGNAL_POLL_S):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            server.close()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    print("stopped", file=out, flush=True)
    return 0


def _boards(args, out):
    from maxaccel.boards.targets import TARGETS
    rows = [("board", "device", "link", "lanes", "clock", "description")]
    for t in TARGETS.values():
        link = f"UART {t.baud / 1e6:g} Mbaud" if t.link == "uart" else "PCIe (Xilinx XDMA)"
        rows.append((t.name, t.device, link, str(t.lanes), f"{t.clock_mhz:g} MHz", t.title))
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip(),
              file=out)
    return 0


def _check_board(args):
    from maxaccel.boards.targets import check_lanes, target
    try:
        target(args.board)
        if getattr(args, "lanes", None) is not None:
            check_lanes(args.lanes)
    except ValueError as error:
        raise _Failure(str(error)) from None
    if getattr(args, "clock", None) is not None and not args.clock > 0:
        raise _Failure(f"--clock {args.clock:g}: must be a positive frequency in MHz")


def _toolchain():
    try:
        from maxaccel.boards import build
    except ImportError as error:
        raise _Failure(f"building needs the toolchain extra: pip install 'maxaccel[toolchain]' "
                       f"({error})") from None
    return build


def _core_settings(args):
    """``{name: value}`` of the ``--core NAME=VALUE`` options (values as a virtual board's URL
    options take them, :func:`~maxaccel.host.transport.core_value`), each a parameter a Core
    has, with a value it takes over the board's core, and none of a unit the ``units`` given
    leave out: checked before anything is chosen or built."""
    from maxaccel.host.model_core import absent_unit_settings, check_unit_settings
    from maxaccel.host.transport import core_setting_refusal, core_value
    settings, given = {}, {}
    for text in args.core or ():
        name, equals, value = text.partition("=")
        if not equals or not name or not value:
            raise _Failure(f"--core {text!r}: give NAME=VALUE, such as window_extent=9")
        try:
            settings[name] = core_value(name, value)
        except ValueError as error:
            raise _Failure(f"--core {error}") from None
        given[name] = value
    if not settings:
        return settings
    from maxaccel.boards.build import core_parameters, with_core
    from maxaccel.boards.targets import core_identity, target
    if "units" in settings:
        try:
            check_unit_settings(settings, settings["units"])
        except ValueError as error:
            raise _Failure(f"--core: {error}") from None
    try:
        board = with_core(target(args.board), settings)
        # With the units whose parameters are given, so that their values are checked too.
        units = settings.get("units") or tuple(dict.fromkeys(
            [*board.core.get("units", ("reduce",)),
             *(unit for _, unit in absent_unit_settings(settings, ()))]))
        core_identity(dict(core_parameters(board, args.lanes or board.lanes, board.clock_mhz),
                           units=units))
    except (ValueError, TypeError) as error:
        names, text = core_setting_refusal(settings, str(error))
        raise _Failure(f"--core {' '.join(f'{n}={given[n]}' for n in names)}: {text}") from None
    return settings


def _model_core(args, out, settings):
    """The core chosen for ``--model`` with the ``--core`` settings (printed), refused when
    the board cannot hold it."""
    from maxaccel.host.model_core import choose_core
    for path in args.model:
        if not os.path.isfile(path):
            raise _Failure(f"--model {path}: no such file")
    base = {"lanes": args.lanes} if args.lanes is not None else None
    choice = choose_core(args.board, args.model, base=base, fixed=settings)
    print(choice.markdown(), file=out, flush=True)
    return choice.check()


def _add_to_report(directory, choice):
    """The chosen core and its per-node table added to a build's ``report.json`` and
    ``report.md``."""
    import json
    report_path, markdown_path = directory / "report.json", directory / "report.md"
    if not report_path.exists():
        return
    report = json.loads(report_path.read_text())
    report.update(choice.report())
    report_path.write_text(json.dumps(report, indent=1) + "\n")
    text = markdown_path.read_text() if markdown_path.exists() else ""
    markdown_path.write_text(text + "\n" + choice.markdown() + "\n")


def _build(args, out):
    _check_board(args)
    if args.plan_only and not args.model:
        raise _Failure("--plan-only shows the core chosen for --model: give one or more")
    settings = _core_settings(args)
    choice = _model_core(args, out, settings) if args.model else None
    if args.plan_only:
        return 0
    build = _toolchain()
    directory = pathlib.Path(args.out or pathlib.Path("build") / args.board)
    try:
        build.build(args.board, lanes=args.lanes, clock_mhz=args.clock, seed=args.seed,
                    out_dir=directory, progress=lambda text: print(text, file=out, flush=True),
                    core=choice.core if choice else settings or None)
    except build.BuildError as error:
        raise _Failure(str(error)) from None
    finally:
        if choice is not None:
            _add_to_report(directory, choice)
    return 0


def _program(args, out):
    _check_board(args)
    build = _toolchain()
    try:
        build.program(args.board, out_dir=args.out,
                      progress=lambda text: print(text, file=out, flush=True))
    except build.BuildError as error:
        raise _Failure(str(error)) from None
    return 0


def _version():
    try:
        return importlib.metadata.version("maxaccel")
    except importlib.metadata.PackageNotFoundError:   # run from a source tree, not installed
        return "unknown (not installed)"


def _loudness(parser, default):
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-v", "--verbose", action="count",
                       default=0 if default else argparse.SUPPRESS,
                       help="say more: the device opened, where its compiled model came "
                            "from, the serial port's low-latency mode (-vv: every retry on "
                            "the link)")
    group.add_argument("-q", "--quiet", action="store_true",
                       default=False if default else argparse.SUPPRESS,
                       help="only errors and warnings; no progress bars")


def _parser(prog="maxaccel"):
    from maxaccel.boards.targets import DEFAULT_BAUD
    from maxaccel.host.transport import URL_FORMS
    epilog = (f"Device URLs: sim (the virtual board, simulated), verilator (the same gateware "
              f"compiled), serial://PORT (at {DEFAULT_BAUD} baud, the rate of the boards we "
              f"build; ?board=NAME for a board's own rate, ?baud=N for any), "
              f"xdma:///dev/xdma0. Compiled models are cached in $MAXACCEL_CACHE_DIR (default "
              f"~/.cache/maxaccel).")
    parser = argparse.ArgumentParser(
        prog=prog, epilog=epilog,
        description="Offload ONNX Max, ReduceMax, GlobalMaxPool, MaxPool, Min, ReduceMin, ArgMax "
                    "and ArgMin to a maxaccel FPGA board.")
    parser.add_argument("--version", action="version", version=f"maxaccel {_version()}")
    _loudness(parser, default=True)
    # -v / -q also after the command (maxaccel run -q ...).
    common = argparse.ArgumentParser(add_help=False)
    _loudness(common, default=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_parser = commands.add_parser

    def add_command(*positional, **options):
        return add_parser(*positional, parents=[common], **options)
    commands.add_parser = add_command
    device_help = f"device URL (default: sim, the virtual board); one of: {', '.join(URL_FORMS)}"

    run = commands.add_parser("run", help="run an ONNX model, offloading the max family",
                              description=RUN_DESCRIPTION, epilog=epilog)
    run.add_argument("model", metavar="MODEL.onnx")
    run.add_argument("--device", default="sim", metavar="URL", help=device_help)
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                     help="an input from a .npy file (repeatable); inputs not given are "
                          "generated")
    run.add_argument("--output", metavar="OUT.npz",
                     help="save the outputs by name (bfloat16 as raw 2-byte values)")
    run.add_argument("--seed", type=int, metavar="N", help="seed for generated inputs")
    run.set_defaults(handler=_run)

    bench = commands.add_parser("bench", help="measure throughput, host overhead and link "
                                              "efficiency", description=BENCH_DESCRIPTION,
                                epilog=epilog)
    bench.add_argument("--device", action="append", metavar="URL",
                       help="a device to measure (repeatable; default: sim)")
    bench.add_argument("--elements", type=int, nargs="+", metavar="N",
                       help="tensor sizes in elements (default: 256 1024 4096 on sim, "
                            "1024 to 1048576 elsewhere)")
    bench.add_argument("--dtype", default="float32", help="element type (default float32)")
    bench.add_argument("--model", action="append", metavar="MODEL.onnx",
                       help="also time a whole model (repeatable): OffloadSession on each "
                            "device, outside its device calls, against onnxruntime, on one "
                            "thread and with default threading; 'conv' is a built-in model of "
                            "two 3x3 Convs, a ReduceMax and a Gemm, and 'audio', 'segnet', "
                            "'kws', 'resnet18', 'control' those of maxaccel.bench.models "
                            "(with --model, operations are timed only if --elements is given)")
    bench.add_argument("--rounds", type=int, metavar="N",
                       help="with --model: N rounds, each a block of the session's runs and "
                            "a block of onnxruntime's, the two taking turns to go first; each "
                            "figure is the median of its blocks' medians (default 5)")
    bench.add_argument("--ratios", type=int, nargs="?", const=1 << 18, metavar="N",
                       help="also print each operation's device cycles over those of a "
                            "ReduceMax of the same input bytes, for float32, float16, int8 "
                            "and float64, N elements per operand (default 262144); virtual "
                            "boards only (with --ratios, operations are timed only if "
                            "--elements is given); and the MaxPool table "
                            "(maxaccel.bench.pools.POOL_CLASSES)")
    bench.add_argument("--pool-routes", action="store_true",
                       help="with --ratios: also time each MaxPool class that goes through "
                            "the pooling unit (MAX_POOL) through REDUCE, its fallback route")
    bench.add_argument("--pool-channels", type=int, metavar="C",
                       help="with --ratios: run the MaxPool classes on C channels instead of "
                            "their networks' (a quicker, scaled-down table)")
    bench.add_argument("--transfers", type=int, nargs="*", metavar="BYTES",
                       help="on xdma-model:BOARD devices: the modelled XDMA throughput of a "
                            "ReduceMax against the transfer size (default sizes: 512 4096 "
                            "65536 1048576 8388608)")
    bench.add_argument("--paced", nargs="?", const="interrupts", metavar="WAIT",
                       help="with --model, on xdma-model:BOARD devices: time the models with "
                            "each device call taking its modelled time on a NiteFury (the "
                            "board's results for inputs it has seen, after a wait as the XDMA "
                            "driver's: WAIT 'interrupts', asleep until each transfer's "
                            "interrupt, its default, or 'polling') instead of the "
                            "simulation's")
    bench.add_argument("--cpu", action=argparse.BooleanOptionalAction, default=True,
                       help="also time numpy and onnxruntime on this CPU (default: yes)")
    bench.add_argument("--core-link", action="store_true",
                       help="measure core against link per operation for every board build "
                            "report: the board's core (its capacities, lanes, clock and link "
                            "word) on the compiled virtual board, for float32, float16, int8 "
                            "and float64 at the --ratios size (default 262144 elements per "
                            "operand); no device is timed unless --device is given")
    bench.add_argument("--board", action="append", metavar="NAME",
                       help="with --core-link (implied) or --model-pools: only this board's "
                            "reports (repeatable)")
    bench.add_argument("--core-link-json", metavar="FILE",
                       help="with --core-link: write its table (docs/boards/core_link.json is "
                            "this file); with --board, the file's other boards are kept")
    bench.add_argument("--model-pools", action="store_true",
                       help="for every build report of a core built for models "
                            "(docs/boards/models): its models' MaxPools on that core on the "
                            "compiled virtual board, their cycles at the board's clock against "
                            "their link-bound time; no device is timed unless --device is given")
    bench.add_argument("--model-pools-json", metavar="FILE",
                       help="with --model-pools: write its table (docs/boards/model_pools.json "
                            "is this file)")
    bench.add_argument("--plot", metavar="FILE.png", help="write a plot (needs matplotlib)")
    bench.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    bench.add_argument("--reports", metavar="DIR",
                       help="print the per-board table of the build reports (BOARD.json) in "
                            "DIR (default: the reports shipped with the package)")
    bench.set_defaults(handler=_bench)

    serve = commands.add_parser("serve", help="expose the virtual board on a pseudo-terminal",
                                description=SERVE_DESCRIPTION)
    serve.add_argument("--device", default="sim", metavar="URL",
                       help="the board to serve (default: sim, the virtual board; "
                            "verilator, sim?lanes=4 and other options as for --device of run)")
    serve.add_argument("--link", metavar="PATH",
                       help="also make a symbolic link PATH to the pseudo-terminal (a stable "
                            "name for scripts)")
    serve.set_defaults(handler=_serve)

    from maxaccel.host import soak as soak_module
    soak = commands.add_parser("soak", help="drive every operation through a faulty link",
                               description=soak_module.__doc__,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    soak_module.add_arguments(soak)
    soak.set_defaults(handler=lambda args, out: soak_module.soak(args, out))

    boards = commands.add_parser("boards", help="list the FPGA boards maxaccel builds for",
                                 description=BOARDS_DESCRIPTION)
    boards.set_defaults(handler=_boards)

    build = commands.add_parser("build", help="build a bitstream (or a Vivado build plan) for "
                                              "a board", description=BUILD_DESCRIPTION)
    build.add_argument("board", metavar="BOARD", help="a board 'maxaccel boards' lists")
    build.add_argument("--lanes", type=int, metavar="N", help="64-bit datapath lanes")
    build.add_argument("--clock", type=float, metavar="MHZ", help="core clock (a PLL makes it)")
    build.add_argument("--seed", type=int, metavar="N",
                       help="nextpnr's placement seed (Lattice boards; default: the board's "
                            "own, docs/boards.md)")
    build.add_argument("--out", metavar="DIR", help="build directory (default build/BOARD)")
    build.add_argument("--model", action="append", metavar="MODEL.onnx",
                       help="size the core for this ONNX model's max-family nodes (repeat for "
                            "several models)")
    build.add_argument("--core", action="append", metavar="NAME=VALUE",
                       help="a Core parameter over the board's core, or over the one chosen "
                            "for --model, which keeps it (repeatable): window_extent=9 sends "
                            "larger kernels through REDUCE, units=reduce leaves the other "
                            "units out")
    build.add_argument("--plan-only", action="store_true",
                       help="print the core chosen for --model and each node's route on it, "
                            "and build nothing")
    build.set_defaults(handler=_build)

    program = commands.add_parser("program", help="load a built bitstream onto a board",
                                  description=PROGRAM_DESCRIPTION)
    program.add_argument("board", metavar="BOARD")
    program.add_argument("--out", metavar="DIR", help="build directory (default build/BOARD)")
    program.set_defaults(handler=_program)
    return parser


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (a test may replace it)."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("maxaccel: %(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


_HANDLER = _StderrHandler()


def _configure_logging(verbose, quiet):
    if _HANDLER not in log.handlers:
        log.addHandler(_HANDLER)
    log.setLevel(logging.WARNING if quiet else logging.INFO if not verbose else logging.DEBUG)
    _progress.set_enabled(not quiet)


def main(argv=None, out=None, prog="maxaccel"):
    """Entry point of the ``maxaccel`` console script; returns the exit status (2 for a user
    mistake or an unusable device, 130 after Ctrl-C)."""
    out = sys.stdout if out is None else out
    args = _parser(prog).parse_args(argv)
    _configure_logging(args.verbose, args.quiet)
    from maxaccel.host.link import DeviceError, LinkError
    try:
        return args.handler(args, out)
    except KeyboardInterrupt:
        print(f"maxaccel {args.command}: interrupted", file=sys.stderr)
        return 130
    except (_Failure, ValueError, TypeError, OSError, LinkError, DeviceError,
            RuntimeError) as error:
        print(f"maxaccel {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
