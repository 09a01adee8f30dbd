"""The tables of figures the docs quote are generated from the files the builds and the bench
write, and printed by the functions ``maxaccel bench`` prints them with: a rebuilt report or a
new bench file changes the page with it, and a page edited by hand fails here.

* ``docs/boards.md``: the per-board table (``docs/boards/*.json``, the build reports:
  ``report_markdown``), core against link (``docs/boards/core_link.json``:
  ``format_core_link``), the model cores' pools against the link
  (``docs/boards/model_pools.json``: ``format_model_pools``) and the elements on the link per
  pool and board (the host's planners
  on each target's ``IDENTIFY``: ``format_link_elements``) and the XDMA link's modelled
  throughput against transfer size (``docs/bench/transfers.json``,
  ``bench.xdma.TRANSFERS_FILE``, written by ``bench.xdma.TRANSFERS_COMMAND``:
  ``format_transfers``);
* ``docs/benchmarks.md``: the ratio table and the MaxPool table (``docs/bench/ratios.json``,
  ``maxaccel.bench.pools.RATIOS_FILE``: ``format_ratios``, ``format_pool_ratios``), whose cycles
  ``tests/test_pool_classes.py`` asserts against the compiled board;
* ``docs/offload.md``: the whole-model table (``docs/bench/models.json``, ``bench.MODELS_FILE``,
  written by ``bench.MODELS_COMMAND``: ``format_model_table``);
* ``docs/library.md``: the library units' resources (``docs/boards/library_units.json``,
  written by ``docs/measure_library.py``: ``library_markdown``).
"""

import pathlib

from maxaccel.boards.targets import TARGETS, load_reports, report_markdown
from maxaccel.bench.cycles import RATIO_DTYPES, RATIO_OPERATIONS, format_core_link, \
    format_model_pools, format_ratios, load_core_link, load_model_pools
from maxaccel.bench.pools import POOL_CLASSES, POOL_DTYPES, RATIOS_FILE, \
    format_pool_ratios, load_ratio_tables

ROOT = pathlib.Path(__file__).parent.parent


def page(name):
    return (ROOT / "docs" / name).read_text()


def test_the_per_board_table_of_the_docs_is_the_reports_table():
    """Every board of TARGETS in order, as report_markdown prints the reports."""
    reports = load_reports()
    assert [r["board"] for r in reports] == list(TARGETS)
    assert report_markdown(reports) in page("boards.md")


def test_the_core_against_link_table_of_the_docs_is_its_file():
    core_link = load_core_link()
    assert list(core_link) == [board for board in TARGETS if board in core_link]
    assert format_core_link(core_link) in page("boards.md")


def test_the_model_pools_table_of_the_docs_is_its_file():
    """Each model report's pools, measured on its own core: the file names the boards of the
    model reports, the models each was built for, and every MaxPool of them."""
    from maxaccel.boards.estimate import report_name
    from maxaccel.boards.targets import load_model_reports
    model_pools = load_model_pools()
    reports = load_model_reports()
    assert list(model_pools) == [report_name(r) for r in reports]
    for report, rows in zip(reports, model_pools.values()):
        assert {r["model"] for r in rows} == set(report["models"])
        assert all(r["route"] == "MAX_POOL" for r in rows)
    assert format_model_pools(model_pools) in page("boards.md")


def test_the_ratio_tables_of_the_docs_are_the_bench_file():
    """Both tables of ``maxaccel bench --ratios`` in docs/benchmarks.md are the bench file's,
    which holds every operation and every MaxPool class in every dtype of the tables, measured
    on the default compiled board."""
    ratios, pools = load_ratio_tables(ROOT / RATIOS_FILE)
    assert {(r.operation, r.dtype) for r in ratios} == {
        (o, d) for o in RATIO_OPERATIONS for d in RATIO_DTYPES}
    assert {(r.operation, r.dtype) for r in pools} == {
        (p.name, d) for p in POOL_CLASSES for d in POOL_DTYPES}
    assert {r.where for r in ratios + pools} == {"verilator"}
    # Every operation and every MaxPool class at the link's rate: at most 1.1 x the link-bound
    # cycles of a ReduceMax of as many bytes.
    slow = [(r.operation, r.dtype, round(r.ratio, 3)) for r in ratios + pools if r.ratio > 1.1]
    assert not slow, slow
    text = page("benchmarks.md")
    assert format_ratios(ratios) in text
    assert format_pool_ratios(pools) in text


def test_the_link_elements_table_of_the_docs_is_the_planners():
    """docs/boards.md's elements on the link per pool and board, as the host's planners give
    them on each target's ``IDENTIFY``."""
    from maxaccel.boards.build import target_identity
    from maxaccel.bench.pools import format_link_elements
    identities = {name: target_identity(t) for name, t in TARGETS.items()}
    assert format_link_elements(identities) in page("boards.md")


def test_the_performance_table_of_the_offload_guide_is_the_bench_file():
    """docs/offload.md's table is the models of ``bench.MODELS_FILE`` as ``maxaccel bench``
    prints them, with the command that wrote the file; every model of the command, paced."""
    from maxaccel import bench
    models = bench.load_model_measurements(ROOT / bench.MODELS_FILE)
    assert len(models) == bench.MODELS_COMMAND.count("--model ")
    assert all(m.where.endswith("paced (interrupts)") for m in models)
    text = page("offload.md")
    assert bench.format_model_table(models) in text
    assert bench.MODELS_COMMAND in text


def test_the_model_core_table_of_the_docs_is_the_model_reports():
    """docs/boards.md's table of cores built for a model is their reports' (``docs/boards/
    models``), every report's build meets its clock, and the core it records (its
    ``IDENTIFY``) takes every MaxPool of its models through the windowed pooling unit, in one
    tile an image, as the host's planner routes them, with Indices where a node asks for them
    (float32, and float16 and uint8 on a core for every element type)."""
    import numpy as np
    from onnx import helper, shape_inference

    from maxaccel.bench.cycles import report_models
    from maxaccel.boards.targets import load_model_reports, model_report_markdown
    from maxaccel.contract.dtypes import format_of
    from maxaccel.contract.pooling import resolve_max_pool
    from maxaccel.contract.wire import Command
    from maxaccel.hdl.top import Core
    from maxaccel.host.device import plan_max_pool

    reports = load_model_reports()
    assert reports
    assert model_report_markdown(reports) in page("boards.md")
    for report in reports:
        assert report["fmax_mhz"] is None or report["fmax_mhz"] >= report["clock_mhz"]
        core = dict(report["core"], units=tuple(report["core"]["units"]))
        identity = Core.identity_of(**core)
        for name, model in report_models(report):
            model = shape_inference.infer_shapes(model)
            shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                      for v in list(model.graph.value_info) + list(model.graph.input)}
            pools = [node for node in model.graph.node if node.op_type == "MaxPool"]
            assert pools, name
            for node in pools:
                attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
                geometry = resolve_max_pool(
                    shapes[node.input[0]], attributes["kernel_shape"],
                    attributes.get("strides"), attributes.get("pads"),
                    ceil_mode=attributes.get("ceil_mode", 0))
                served = [d for d in (np.float32, np.float16, np.uint8)
                          if format_of(d).dtype in identity.dtypes]
                assert np.float32 in served
                for dtype in served:
                    route, plan = plan_max_pool(geometry, format_of(dtype), identity, 1 << 20,
                                                indices=len(node.output) > 1)
                    assert route == Command.MAX_POOL, (report["board"], name, node.name)
                    assert [len(batch.tiles) for batch in plan.batches] == [1]


def test_the_resource_points_table_of_the_docs_is_their_file():
    """docs/boards.md's resource points of a core's parts are ``--points``'s file, which holds
    every point of POINTS."""
    import json

    from maxaccel.boards.resources import POINTS, POINTS_FILE, points_markdown

    document = json.loads((ROOT / POINTS_FILE).read_text())
    assert [(p["part"], p["family"]) for p in document["points"]] == [
        (part, family) for part, family, _ in POINTS]
    assert points_markdown(document) in page("boards.md")


def test_the_xdma_transfers_table_of_the_docs_is_the_bench_file():
    """docs/boards.md's modelled XDMA throughput against transfer size is the bench file's, as
    ``maxaccel bench --transfers`` prints it, with the command that wrote the file: every
    default size around the compiled board (each request's write the size less the bytes
    short of a whole element), and 8 MiB requests at 90% of the link or more."""
    from maxaccel.bench.xdma import (TRANSFER_SIZES, TRANSFERS_COMMAND, TRANSFERS_FILE,
                                     format_transfers, load_transfers)
    link = TARGETS["nitefury"].link_bytes_per_s
    ((url, rows),) = load_transfers(ROOT / TRANSFERS_FILE).items()
    assert url == "xdma-model:verilator" and len(rows) == len(TRANSFER_SIZES)
    assert all(size - 4 < m.transfer_bytes <= size for size, m in zip(TRANSFER_SIZES, rows))
    assert rows[-1].bytes_per_s >= 0.9 * link
    text = page("boards.md")
    assert format_transfers(rows, link) in text
    assert TRANSFERS_COMMAND in text


def test_the_library_resources_table_of_the_docs_is_its_file():
    """docs/library.md's resources of each unit are ``docs/measure_library.py``'s file, which
    holds every unit of LIBRARY_UNITS with each element type on each family."""
    import json

    from maxaccel.boards.resources import (LIBRARY_DTYPES, LIBRARY_FAMILIES, LIBRARY_FILE,
                                           LIBRARY_UNITS, library_markdown)

    document = json.loads((ROOT / LIBRARY_FILE).read_text())
    assert [(row["unit"], tuple(row["args"]), row["kwargs"], row["dtype"], list(row["counts"]))
            for row in document["units"]] == [
        (unit, args, kwargs, dtype and dtype.name, list(LIBRARY_FAMILIES))
        for unit, args, kwargs in LIBRARY_UNITS for dtype in LIBRARY_DTYPES]
    assert library_markdown(document) in page("library.md")
