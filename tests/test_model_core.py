"""A core for your model (``maxaccel.host.model_core``, ``maxaccel.boards.estimate``): the units
and capacities chosen from the models' max-family nodes, each node's route, the refusal before
synthesis, ``maxaccel build --model --plan-only``, and virtual boards built from the choice
(``sim?for=``; ``verilator?for=`` behind the slow gate)."""

import dataclasses
import inspect
import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import assume, given, settings, strategies as st
from onnx import TensorProto, helper

from maxaccel.bench.models import resnet18_model
from maxaccel.boards.estimate import (COEFFICIENTS, FEATURES, estimate_cells, estimate_errors,
                                      refit, report_name, report_points)
from maxaccel.boards.targets import TARGETS, load_model_reports, load_reports
from maxaccel.contract.dtypes import format_of
from maxaccel.host import OffloadSession, cli, open_device
from maxaccel.host.device import DEFAULT_FRAME_BYTES
from maxaccel.host.max_passes import operands_per_pass
from maxaccel.host.model_core import UNIT_DEFAULTS, CoreDoesNotFit, RoutePlanner, choose_core
from maxaccel.host.plan import BroadcastPlan, plan_max_pass
from maxaccel.host.transport import XdmaTransport
from maxaccel.sim import reference
from maxaccel.sim.values import random_values
from maxaccel.testing import assert_bits_equal

ROOT = Path(__file__).parent.parent
SQUEEZENET = str(ROOT / "examples" / "squeezenet1_1.onnx")
BOARDS = ["icebreaker", "ulx3s", "arty_a7_35", "nitefury"]


@pytest.fixture(scope="module")
def resnet18():
    return resnet18_model()[0]


def _save(model, path):
    onnx.save(model, str(path))
    return str(path)


def spp_model(channels=8, size=13):
    """YOLO's SPP block: MaxPools of 5, 9 and 13 at stride 1, concatenated with the input."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])
    nodes = [helper.make_node("MaxPool", ["x"], [f"p{k}"], name=f"spp{k}", kernel_shape=[k, k],
                              pads=[k // 2] * 4) for k in (5, 9, 13)]
    nodes.append(helper.make_node("Concat", ["x", "p5", "p9", "p13"], ["y"], axis=1))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return helper.make_model(helper.make_graph(nodes, "spp", [x], [y]), ir_version=10,
                             opset_imports=[helper.make_opsetid("", 13)])


def tiny_model():
    """A pool of 3x3 stride 2 (overlapping: the windowed unit), one of 2x2 stride 2 (the same
    bytes either way), a GlobalMaxPool (REDUCE) and a Max broadcasting a column (the broadcast
    unit). The first pool's result is an output too, so the GlobalMaxPool reading it does not
    fold it in."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], name="pool3", kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["x"], ["q"], name="pool2", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("GlobalMaxPool", ["p"], ["g"], name="gmax"),
             helper.make_node("Max", ["q", "g"], ["y"], name="bmax")]
    y, p = (helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in "yp")
    return helper.make_model(helper.make_graph(nodes, "tiny", [x], [y, p]), ir_version=10,
                             opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("board", BOARDS)
def test_squeezenet_and_resnet18_pool_through_the_windowed_unit_of_extent_3(board, resnet18):
    choice = choose_core(board, [SQUEEZENET, ("resnet18", resnet18)])
    pools = [n for n in choice.nodes if n.op == "MaxPool"]
    assert [(n.model, n.kernel) for n in pools] == [(SQUEEZENET, (3, 3))] * 3 + \
        [("resnet18", (3, 3))]
    assert all(n.route == "MAX_POOL" for n in pools)
    # The iCEBreaker holds the unit only without the run reducer, which no node needs.
    assert choice.units == (("window",) if board == "icebreaker" else ("reduce", "window"))
    assert choice.check() is choice
    # 2-D pools only: units of two axes (an outermost extent of 0); images of at most 127
    # elements a side and no Indices: fields of 7 bits, none kept.
    assert (choice.identity.window_extent, choice.identity.window_extent_outer) == (3, 0)
    assert (choice.identity.window_field_max, choice.identity.window_indices) == (127, 0)
    assert choice.identity.replay_depth == 0 and choice.identity.pool_channels == 0
    assert choice.core["window_extent"] == 3 and "broadcast" not in choice.core["units"]
    # The link-bound time is the bytes over the board's link.
    rate = TARGETS[board].link_bytes_per_s
    assert all(n.link_s == pytest.approx(n.link_bytes / rate) for n in pools)


@pytest.mark.parametrize("board", ["arty_a7_35", "nitefury"])
def test_the_xilinx_cores_for_the_two_networks_leave_vivado_room(board, resnet18):
    """A yosys estimate well under 80% of the LUTs, where the targets' own cores are at 89-90%."""
    choice = choose_core(board, [SQUEEZENET, ("resnet18", resnet18)])
    assert choice.estimate < 0.7 * choice.capacity
    assert choice.check() is choice


def test_a_13x13_spp_on_the_icebreaker_is_refused_before_synthesis(tmp_path):
    path = _save(spp_model(), tmp_path / "spp.onnx")
    choice = choose_core("icebreaker", [path])
    assert [n.route for n in choice.nodes] == ["MAX_POOL"] * 3
    assert choice.core["window_extent"] == 13 and not choice.fits()
    with pytest.raises(CoreDoesNotFit) as refused:
        choice.check()
    message = str(refused.value)
    assert message.startswith(f"icebreaker: node 'spp13' (MaxPool, kernel 13x13, model {path}) "
                              f"needs the windowed pooling unit with window_extent 13; the "
                              f"core would take about {choice.estimate} ICESTORM_LC, the "
                              f"iCE40UP5K-SG48 has 5280")
    # The iCE40's core computes the window's products serially (fewer cells there; a unit
    # updating one window at a time would not keep up with its link at 13 x 13). The ULX3S
    # 25F holds the core with such a unit: a float32 lane in 679 cycles, the UART's 1 600 at
    # 60 MHz.
    assert choice.core["window_serial_products"]
    serial = {**{k: v for k, v in choice.core.items() if k != "window_serial_products"},
              "window_serial": True}
    assert message.endswith(f"; ulx3s holds it (about "
                            f"{estimate_cells('ecp5', {'lanes': 2, **serial})} of 24288)")
    assert isinstance(refused.value, ValueError)


def test_a_board_too_small_for_the_pipelined_unit_gets_one_that_updates_a_window_at_a_time(
        tmp_path):
    """When the core does not fit with the pipelined windowed unit even with serial products,
    its lanes update one window at a time (``window_serial``) if they keep up with the link:
    SqueezeNet's 3x3 pools on the HX8K, a float32 lane in 39 cycles against the 320 a 3 Mbaud
    UART takes at 12 MHz. A 13x13 pool on the iCEBreaker would take 679 a float32 lane:
    the unit stays pipelined there. A setting given is kept."""
    choice = choose_core("ice40_hx8k_breakout", [SQUEEZENET])
    assert choice.core["window_serial"] and "window_serial_products" not in choice.core
    assert [n.route for n in choice.nodes] == ["MAX_POOL"] * 3
    products = {k: v for k, v in choice.parameters.items() if k != "window_serial"}
    assert choice.estimate == estimate_cells("ice40", choice.parameters) < estimate_cells(
        "ice40", dict(products, window_serial_products=True))
    path = _save(spp_model(), tmp_path / "spp.onnx")
    assert "window_serial" not in choose_core("icebreaker", [path]).core
    kept = choose_core("ice40_hx8k_breakout", [SQUEEZENET], fixed={"window_serial": False})
    assert kept.core["window_serial"] is False and kept.core["window_serial_products"]


def test_a_board_that_holds_the_unit_only_without_the_run_reducer_leaves_it_out(resnet18):
    """The iCEBreaker's core for SqueezeNet 1.1 and ResNet-18 (a serial window lane) is over
    the board with the run reducer and within it without: every node goes through MAX_POOL,
    so REDUCE is left out (its IDENTIFY says reduce_lanes 0). Not on the HX8K, which holds
    both, not when a node needs REDUCE, and not when units is given."""
    models = [SQUEEZENET, ("resnet18", resnet18)]
    choice = choose_core("icebreaker", models)
    assert choice.units == ("window",) and choice.core["window_serial"]
    assert choice.identity.reduce_lanes == 0 and choice.fits()
    assert [n.route for n in choice.nodes] == ["MAX_POOL"] * 4
    kept = dict(choice.parameters, units=("reduce", "window"))
    assert estimate_cells("ice40", kept) > choice.capacity >= choice.estimate
    assert choose_core("ice40_hx8k_breakout", models).units == ("reduce", "window")
    given = choose_core("icebreaker", models, fixed={"units": ("reduce", "window")})
    assert given.units == ("reduce", "window") and not given.fits()
    # A GlobalMaxPool goes through REDUCE on a core without the channels-last unit.
    both = choose_core("icebreaker", models + [tiny_model()])
    assert "reduce" in both.units


@pytest.mark.slow(reason="compiling the ULX3S 25F's core for a 13x13 SPP with Verilator, a "
                         "minute; its three pools, seconds")
def test_the_spp_on_the_ulx3s_25f_core_whose_lanes_update_one_window_at_a_time(tmp_path):
    """The 25F's core for a 13x13 SPP (float32, one window lane that updates one window at a
    time, extent 13), compiled: each pool through MAX_POOL, values and indices (NaN payloads,
    signed zeros) as the golden model's."""
    path = _save(spp_model(channels=3), tmp_path / "spp.onnx")
    choice = choose_core("ulx3s", [path])
    assert choice.core["window_serial"] and choice.fits()
    rng = np.random.default_rng(13)
    x = random_values(rng, format_of(np.float32), (1, 3, 13, 13), edge_fraction=0.3)
    with open_device(f"verilator?for={path}&board=ulx3s", progress=None) as device:
        assert device.identity.window_extent == 13
        for k in (5, 9, 13):
            pool = dict(kernel_shape=[k, k], pads=[k // 2] * 4)
            (y, indices), (want, want_indices) = (
                run(x, **pool, return_indices=True) for run in (device.max_pool,
                                                                reference.max_pool))
            assert device.last_max_pool_route.name == "MAX_POOL"
            assert_bits_equal(y, want)
            np.testing.assert_array_equal(indices, want_indices)


def test_a_refusal_names_the_largest_extent_the_board_holds(tmp_path):
    # With the pipelined unit (``window_serial`` 0): with lanes that update one window at a
    # time the 25F holds the model, every pool through MAX_POOL.
    path = _save(spp_model(), tmp_path / "spp.onnx")
    with pytest.raises(CoreDoesNotFit, match=r"^ulx3s: node 'spp13' .* has 24288 "
                                             r"\(with window_extent=10 about \d+, `--core "
                                             r"window_extent=10`: larger kernels then go "
                                             r"through REDUCE\); ulx3s_85f"):
        choose_core("ulx3s", [path], fixed={"window_serial": False}).check()
    serial = choose_core("ulx3s", [path])
    assert serial.fits() and serial.core["window_serial"]
    assert [n.route for n in serial.nodes] == ["MAX_POOL"] * 3


def test_the_nearest_board_a_refusal_names_is_sized_as_its_choice_makes_it():
    """A refusal names the nearest board with the estimate of the core that board's own
    choice makes under the same fixed settings: the iCE40-HX8K holds SqueezeNet's windowed
    unit with lanes that update one window at a time beside the run reducer (or with
    Indices), and with ``window_serial`` fixed at 0 the ULX3S 25F holds it pipelined."""
    both = {"units": ("reduce", "window")}
    for fixed, board, cells in [(both, "ice40_hx8k_breakout", 7680),
                                (dict(both, window_serial=True), "ice40_hx8k_breakout", 7680),
                                ({"window_indices": True}, "ice40_hx8k_breakout", 7680),
                                ({"window_serial": False}, "ulx3s", 24288)]:
        held = choose_core(board, [SQUEEZENET], fixed=fixed)
        assert held.fits() and bool(held.core.get("window_serial")) == (board != "ulx3s")
        with pytest.raises(CoreDoesNotFit, match=rf"; {board} holds it \(about "
                                                 rf"{held.estimate} of {cells}\)$"):
            choose_core("icebreaker", [SQUEEZENET], fixed=fixed).check()


def test_the_setting_a_refusal_names_holds_the_model(tmp_path):
    """``--core window_extent=10`` (``fixed``), which the ULX3S 25F's refusal of a 13x13 SPP
    names, gives a core that fits, the 13x13 pool through REDUCE for its capacity and the
    others through the unit; on the command line too."""
    path = _save(spp_model(), tmp_path / "spp.onnx")
    choice = choose_core("ulx3s", [path], fixed={"window_extent": 10})
    assert choice.fits() and choice.core["window_extent"] == 10
    assert [(n.node, n.route, n.why) for n in choice.nodes] == [
        ("spp5", "MAX_POOL", "the windowed pooling unit: within its capacities"),
        ("spp9", "MAX_POOL", "the windowed pooling unit: within its capacities"),
        ("spp13", "REDUCE", "capacity: beyond the windowed pooling unit's")]
    status, out, err = _cli("build", "ulx3s", "--model", path, "--core", "window_extent=10",
                            "--plan-only")
    assert (status, err) == (0, "") and "window_extent=10" in out.splitlines()[0]
    assert f"| {path} | spp13 | MaxPool | 1x8x13x13 float32 | 13x13 | REDUCE |" in out


def test_a_core_without_the_unit_the_board_cannot_hold(tmp_path):
    """The iCEBreaker's refusal of SqueezeNet's pipelined windowed unit names ``--core
    units=reduce``: that core fits, keeps none of the unit's parameters, and every MaxPool
    goes through REDUCE for want of the unit. A setting the choice would change is kept as
    given."""
    with pytest.raises(CoreDoesNotFit, match=r"\(with units=reduce about \d+, `--core "
                                             r"units=reduce`: the nodes the windowed pooling "
                                             r"unit would serve then go through REDUCE\)"):
        choose_core("icebreaker", [SQUEEZENET], fixed={"window_serial": False}).check()
    choice = choose_core("icebreaker", [SQUEEZENET], fixed={"units": ["reduce"]})
    assert choice.fits() and choice.units == ("reduce",)
    assert not any(name.startswith("window") for name in choice.core)
    assert {(n.route, n.why) for n in choice.nodes} == {
        ("REDUCE", "unit absent: the windowed pooling unit")}
    kept = choose_core("icebreaker", [SQUEEZENET], fixed={"window_serial_products": False})
    assert kept.core["window_serial_products"] is False
    assert kept.estimate > choose_core("icebreaker", [SQUEEZENET]).estimate


def test_units_given_in_place_of_those_the_model_needs(tmp_path):
    """A unit the settings add has the Core's capacities where the board builds none; one
    they leave out takes its parameters along, and naming one of them is refused; a refusal
    of the result names no node of a unit it lacks."""
    units = ("reduce", "pool", "broadcast")
    pooled = choose_core("icebreaker", [SQUEEZENET], fixed={"units": units})
    assert pooled.units == units
    assert pooled.core["pool_channels"] == UNIT_DEFAULTS["pool"]["pool_channels"]
    assert not any(name.startswith("window") for name in pooled.core)
    with pytest.raises(CoreDoesNotFit, match=r"^icebreaker: the core \(reduce, pool, "
                                             r"broadcast\); the core would take about \d+ "
                                             r"ICESTORM_LC"):
        pooled.check()
    with pytest.raises(ValueError, match=r"^window_extent=9 set a parameter of the windowed "
                                         r"pooling unit, which units=reduce leaves out$"):
        choose_core("icebreaker", [SQUEEZENET],
                    fixed={"units": ("reduce",), "window_extent": 9})


def test_a_refusal_names_the_outermost_extent_when_it_is_larger(tmp_path):
    """A 13x13x13 pool on the ULX3S 25F: the setting the refusal names lowers the outermost
    axis's extent too, and that core fits."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16, 16])
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], name="pool13", kernel_shape=[13] * 3,
                              pads=[6] * 6)]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph(nodes, "p3d", [x], [y]), ir_version=10,
                              opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(CoreDoesNotFit) as refused:
        choose_core("ulx3s", [("p3d", model)]).check()
    settings = re.search(r"`((?:--core \w+=\d+ ?)+)`", str(refused.value)).group(1).split()
    fixed = {name: int(value) for name, value in
             (setting.split("=") for setting in settings if setting != "--core")}
    assert set(fixed) == {"window_extent", "window_extent_outer"}
    assert fixed["window_extent"] == fixed["window_extent_outer"] < 13
    smaller = choose_core("ulx3s", [("p3d", model)], fixed=fixed)
    assert smaller.fits() and [n.route for n in smaller.nodes] == ["REDUCE"]


@pytest.mark.parametrize("settings, message", [
    (["window_extent"], "--core 'window_extent': give NAME=VALUE, such as window_extent=9"),
    (["window_extent=x"], "--core window_extent='x' must be an integer"),
    (["dtype=float99"], "--core dtype='float99': 'float99' is not a dtype; supported: "),
    (["window_serial_products=2"], "--core window_serial_products=2: window_serial_products "
                                   "must be True or False (or 1 or 0), not 2"),
    (["speed=11"], "--core speed=11: unknown core parameter 'speed'; a Core has dtype, "),
    (["lanes=4"], "--core lanes=4: core parameter 'lanes' is set by lanes, not by core"),
    (["units=windows"], "--core units=windows: units must be one or more of reduce, "),
    (["window_extent=0"], "--core window_extent=0: window_extent must be an integer >= 1"),
    (["window_serial=2"], "--core window_serial=2: window_serial must be True or False"),
    (["units=reduce", "window_extent=9"], "--core: window_extent=9 set a parameter of the "
                                          "windowed pooling unit, which units=reduce leaves "
                                          "out"),
])
def test_the_cli_refuses_a_bad_core_setting(tmp_path, settings, message):
    """Before anything is chosen or built (the ULX3S 25F's own core has no windowed unit:
    a window parameter's value is checked all the same)."""
    status, out, err = _cli("build", "ulx3s", "--model", SQUEEZENET,
                            *(word for setting in settings for word in ("--core", setting)),
                            "--out", str(tmp_path / "out"))
    assert status == 2 and err.count("\n") == 1
    assert err.startswith(f"maxaccel build: error: {message}")
    assert not (tmp_path / "out").exists()


def test_routes_and_reasons_of_a_mixed_model(tmp_path):
    """The overlapping pool needs the windowed unit, the broadcasting Max the broadcast unit;
    the non-overlapping pool and the channels-first GlobalMaxPool cost the link the same
    through REDUCE, so they ask for nothing (the pool takes the unit once it is there)."""
    path = _save(tiny_model(), tmp_path / "tiny.onnx")
    choice = choose_core("ulx3s", [path])
    assert choice.units == ("reduce", "broadcast", "window")
    routes = {n.node: (n.route, n.why) for n in choice.nodes}
    assert routes == {
        "pool3": ("MAX_POOL", "the windowed pooling unit: within its capacities"),
        "pool2": ("MAX_POOL", "the windowed pooling unit: within its capacities"),
        "gmax": ("REDUCE", "REDUCE: no unit takes it"),
        "bmax": ("MAX", "the broadcast unit: within its capacities")}
    # The line buffer is as wide as the widest output row; the broadcast unit replays one
    # operand of a beat a channel (2 beats) over one outer dimension (channels x pixels).
    assert choice.core["window_columns"] == 4
    assert (choice.core["max_operands"], choice.core["replay_depth"],
            choice.core["max_dims"]) == (1, 2, 1)
    # On the iCEBreaker, whose core has no broadcast unit, the same: the Core's defaults are
    # only the bounds of the choice.
    icebreaker = choose_core("icebreaker", [path])
    assert {k: icebreaker.parameters[k] for k in ("max_operands", "replay_depth", "max_dims")} \
        == {"max_operands": 1, "replay_depth": 2, "max_dims": 1}


def max_model(operand_shapes, dtype=TensorProto.FLOAT):
    """One broadcasting Max node a list of operand shapes, each operand an input."""
    inputs, nodes, outputs = [], [], []
    for i, shapes in enumerate(operand_shapes):
        names = [f"x{i}_{j}" for j in range(len(shapes))]
        inputs += [helper.make_tensor_value_info(n, dtype, list(s))
                   for n, s in zip(names, shapes)]
        nodes.append(helper.make_node("Max", names, [f"y{i}"], name=f"max{i}"))
        outputs.append(helper.make_tensor_value_info(f"y{i}", dtype, None))
    return helper.make_model(helper.make_graph(nodes, "maxes", inputs, outputs), ir_version=10,
                             opset_imports=[helper.make_opsetid("", 13)])


#: The largest frame of each board's link, as the host plans with it.
FRAME_BYTES = {"ulx3s": DEFAULT_FRAME_BYTES, "nitefury": XdmaTransport.max_frame_bytes}
_dims = st.lists(st.integers(1, 40), min_size=1, max_size=4)


@st.composite
def _broadcasting_operands(draw):
    shape = draw(_dims)
    count = draw(st.integers(2, 6))
    return [tuple(n if draw(st.booleans()) else 1 for n in shape) if i else tuple(shape)
            for i in range(count)]


@settings(max_examples=40)
@given(operand_shapes=st.lists(_broadcasting_operands(), min_size=1, max_size=3),
       board=st.sampled_from(["ulx3s", "nitefury"]))
def test_a_sized_broadcast_unit_plans_every_pass_as_the_board_s(operand_shapes, board):
    """The broadcast unit sized for a model (its replay buffer, outer dimensions and replayed
    operands no more than the nodes' passes take) plans each node's pass exactly as the
    board's own capacities do: a node of one pass gets the same pass, one of several keeps the
    board's capacities."""
    assume(any(len(set(shapes)) > 1 for shapes in operand_shapes))
    choice = choose_core(board, [("maxes", max_model(operand_shapes))])
    assert "broadcast" in choice.units
    board_identity = dataclasses.replace(
        choice.identity, **{k: TARGETS[board].core[k]
                            for k in ("replay_depth", "max_dims", "max_operands")})
    assert choice.identity.replay_depth <= board_identity.replay_depth
    on_board = RoutePlanner(board_identity, FRAME_BYTES[board])
    for shapes, node in zip(operand_shapes, choice.nodes):
        stand_ins = [np.broadcast_to(np.float32(0), s) for s in shapes]
        assert (node.route, node.link_bytes) == \
            (on_board.max(*stand_ins).route.name, on_board.max(*stand_ins).link_bytes)
        rank = max(len(s) for s in shapes)
        aligned = [(1,) * (rank - len(s)) + s for s in shapes]
        if len(set(aligned)) == 1:
            continue    # same-shape operands stream, folded without the replay buffer
        sized, whole = (plan_max_pass(aligned, 4, identity, FRAME_BYTES[board])
                        for identity in (choice.identity, board_identity))
        if isinstance(whole, BroadcastPlan) and len(aligned) <= operands_per_pass(board_identity):
            assert isinstance(sized, BroadcastPlan)
            assert (sized.dims, sized.memory_beats) == (whole.dims, whole.memory_beats)
            # The same operands in the same slots and addresses; the walk's strides are padded
            # at the front to the unit's outer dimensions.
            for a, b in zip(sized.operands, whole.operands):
                assert dataclasses.replace(a, strides=(), steps=()) == \
                    dataclasses.replace(b, strides=(), steps=())
                cut = len(b.strides) - len(a.strides)
                assert (a.strides, a.steps) == (b.strides[cut:], b.steps[cut:])
                assert not any(b.strides[:cut])


def test_the_nitefury_holds_a_13x13x13_pool_with_half_its_window_lanes():
    """A 3-D pool of extent 13 on every axis: four window lanes (one per datapath lane, the
    NiteFury's own) would take more LUTs than the XC7A200T has, two fit; the choice says so
    and its routes are the unit's."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 24, 24, 24])
    # A float16 pool beside it: a core of every element type (one of a single type is
    # smaller and would hold four).
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], name="pool13", kernel_shape=[13] * 3,
                              pads=[6] * 6),
             helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("MaxPool", ["h"], ["z"], name="pool13h", kernel_shape=[13] * 3,
                              pads=[6] * 6)]
    outputs = [helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None)
               for name in ("y", "z")]
    model = helper.make_model(helper.make_graph(nodes, "p3d", [x], outputs), ir_version=10,
                              opset_imports=[helper.make_opsetid("", 13)])
    choice = choose_core("nitefury", [("p3d", model)])
    assert "dtype" not in choice.core
    assert choice.core["window_lanes"] == choice.identity.window_lanes == 2
    assert choice.fits() and "window_lanes=2" in choice.markdown()
    target = TARGETS["nitefury"]
    assert estimate_cells(target.family, dict(choice.parameters, window_lanes=4),
                          target.link_word) > choice.capacity
    assert [(n.route, n.why) for n in choice.nodes] == [
        ("MAX_POOL", "the windowed pooling unit: within its capacities")] * 2


def test_what_no_unit_takes_and_what_is_beyond_the_unit():
    """A 4-D pool no unit takes; a 4x4 stride-4 pool beside a 3x3 one is beyond the unit the
    3x3 pool asks for (and asks for nothing itself: kernel = stride costs the same through
    REDUCE)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 3, 3, 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2, 8, 8])
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], name="pool4d", kernel_shape=[2, 2, 2, 2]),
             helper.make_node("MaxPool", ["z"], ["a"], name="pool3", kernel_shape=[3, 3]),
             helper.make_node("MaxPool", ["z"], ["b"], name="pool4", kernel_shape=[4, 4],
                              strides=[4, 4])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "yab"]
    model = helper.make_model(helper.make_graph(nodes, "pools", [x, z], outputs), ir_version=10,
                              opset_imports=[helper.make_opsetid("", 13)])
    choice = choose_core("nitefury", [("pools", model)])
    assert choice.units == ("reduce", "window") and choice.core["window_extent"] == 3
    assert [(n.node, n.route, n.why) for n in choice.nodes] == [
        ("pool4d", "REDUCE", "REDUCE: no unit takes it"),
        ("pool3", "MAX_POOL", "the windowed pooling unit: within its capacities"),
        ("pool4", "REDUCE", "capacity: beyond the windowed pooling unit's")]


def test_the_unit_defaults_are_the_core_s():
    defaults = {name: p.default for name, p in
                inspect.signature(__import__("maxaccel.hdl.top", fromlist=["Core"])
                                  .Core.unit_signatures).parameters.items()}
    for capacities in UNIT_DEFAULTS.values():
        assert {k: defaults[k] for k in capacities} == capacities


def _fitted_reports():
    """The build reports the estimate's bases and window terms are fitted to: those of cores
    for every element type (a core of one type is estimated with the units' own shares)."""
    return [r for r in load_reports() + load_model_reports()
            if (r.get("core") or {}).get("dtype") is None]


def test_the_estimate_against_every_build_report():
    """Within 2% of each build it is fitted to (the targets' own cores and the cores built for
    a model for every element type: docs/boards.md "A core for your model" gives the errors);
    over, by less than 10%, on each build of a core of one element type, whose units it scales
    by their own synthesis figures (static_dtype_shares), an independent check."""
    errors = estimate_errors(load_reports() + load_model_reports(), TARGETS)
    fitted = {report_name(r) for r in _fitted_reports()}
    assert set(TARGETS) < fitted
    assert {"ulx3s (squeezenet1_1, resnet18)",
            "ulx3s (squeezenet1_1, resnet18; float32)"} < set(errors)
    for board, (estimate, measured, error) in errors.items():
        if board in fitted:
            assert abs(error) < 0.02, (board, estimate, measured)
        else:
            assert 0 <= error < 0.10, (board, estimate, measured)


def test_refitting_the_bases_on_the_reports_gives_them_back():
    points = report_points(_fitted_reports(), TARGETS)
    table = refit(points, ["base"])
    for family in ("ice40", "ecp5", "xilinx"):
        assert set(table[family]) == set(FEATURES)
        assert abs(table[family]["base"] - COEFFICIENTS[family]["base"]) < 50
    moved = refit([(f, feats, cells + 1000) for f, feats, cells in points], ["base"])
    assert all(abs(moved[f]["base"] - table[f]["base"] - 1000) <= 1 for f in table)


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    saved, sys.stderr = sys.stderr, err
    try:
        status = cli.main(list(argv), out=out)
    finally:
        sys.stderr = saved
    return status, out.getvalue(), err.getvalue()


def test_the_cli_dry_run_prints_the_choice_and_builds_nothing(tmp_path):
    status, out, err = _cli("build", "ulx3s", "--model", SQUEEZENET, "--plan-only",
                            "--out", str(tmp_path / "out"))
    assert (status, err) == (0, "")
    assert out.startswith("Core for ulx3s: units reduce, window; dtype=float32, window_lanes=1, "
                          "window_extent=3, window_extent_outer=0, window_columns=64")
    assert "Estimated logic: about " in out and " of 24288 TRELLIS_COMB (" in out
    rows = [line for line in out.splitlines() if line.startswith(f"| {SQUEEZENET} |")]
    assert len(rows) == 3 and all("| MaxPool | " in r and "| MAX_POOL |" in r for r in rows)
    assert not (tmp_path / "out").exists()


def test_the_cli_refuses_before_any_synthesis(tmp_path):
    path = _save(spp_model(), tmp_path / "spp.onnx")
    status, out, err = _cli("build", "icebreaker", "--model", path, "--out",
                            str(tmp_path / "out"))
    assert status == 2 and err.count("\n") == 1
    assert err.startswith("maxaccel build: error: icebreaker: node 'spp13' (MaxPool, kernel "
                          "13x13")
    assert not (tmp_path / "out").exists()
    assert _cli("build", "icebreaker", "--plan-only")[0] == 2
    status, _, err = _cli("build", "icebreaker", "--model", str(tmp_path / "none.onnx"))
    assert status == 2 and "no such file" in err


def test_the_cli_adds_the_table_to_the_build_report(tmp_path, monkeypatch):
    """The build is given the chosen core, and its report gains the choice and the nodes
    (a stand-in build writes the report the real one would)."""
    from maxaccel.boards import build as build_module
    given = {}

    def fake_build(board, *, out_dir, core=None, **options):
        given.update(board=board, core=core)
        out_dir.mkdir(parents=True)
        (out_dir / "report.json").write_text(json.dumps({"board": board}))
        (out_dir / "report.md").write_text("| board |\n")
        return {}
    monkeypatch.setattr(build_module, "build", fake_build)
    status, _, err = _cli("build", "ulx3s", "--core", "window_extent=9", "--core",
                          "window_serial_products=1", "--core", "dtype=f4", "--out",
                          str(tmp_path / "own"))
    assert (status, err) == (0, "")    # without --model, over the board's own core
    assert given == {"board": "ulx3s", "core": {"window_extent": 9,
                                                "window_serial_products": 1,
                                                "dtype": "float32"}}
    out = tmp_path / "out"
    status, _, err = _cli("build", "arty_a7_35", "--model", SQUEEZENET, "--out", str(out))
    assert (status, err) == (0, "")
    assert given["board"] == "arty_a7_35" and given["core"]["units"] == ("reduce", "window")
    report = json.loads((out / "report.json").read_text())
    assert report["model_core"]["units"] == ["reduce", "window"]
    assert report["model_core"]["capacities"]["window_extent"] == 3
    assert [(n["node"], n["route"]) for n in report["nodes"]] == [
        ("/features/features.2/MaxPool", "MAX_POOL"), ("/features/features.5/MaxPool", "MAX_POOL"),
        ("/features/features.8/MaxPool", "MAX_POOL")]
    assert set(report["nodes"][0]) == {"model", "node", "op", "shape", "dtype", "kernel",
                                       "route", "link_bytes", "link_s", "why"}
    assert "| /features/features.2/MaxPool |" in (out / "report.md").read_text()


def _check_board_for_model(url, path, choice, own_clock=False):
    """The board at ``url`` is the chosen core (with ``own_clock``, all of ``IDENTIFY`` but the
    clock and the frame timeout, a virtual board's own for a target's choice); the model runs
    on it bit for bit as the golden model, every MaxPool through the route the choice gave
    it."""
    rng = np.random.default_rng(7)
    x = random_values(rng, format_of(np.float32), (1, 2, 6, 6), edge_fraction=0.3)
    ignored = dict(clock_hz=0, frame_timeout_cycles=0) if own_clock else {}
    with open_device(url, progress=None) as device:
        assert dataclasses.replace(device.identity, **ignored) == \
            dataclasses.replace(choice.identity, **ignored)
        with OffloadSession(path, device=device) as session:
            outputs = session.run(None, {"x": x})
            assert [where for _, _, where in session.last_run] == ["device"] * 4
        expected = OffloadSession(path, device=reference).run(None, {"x": x})
        for got, want in zip(outputs, expected):
            assert_bits_equal(got, want)
        model = onnx.load(path)
        for node in model.graph.node:
            if node.op_type != "MaxPool":
                continue
            attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            y = device.max_pool(x, **attributes)
            assert_bits_equal(y, reference.max_pool(x, **attributes))
            route = next(n.route for n in choice.nodes if n.node == node.name)
            assert device.last_max_pool_route.name == route


def test_a_virtual_board_for_a_model(tmp_path):
    path = _save(tiny_model(), tmp_path / "tiny.onnx")
    defaults = __import__("maxaccel.sim.virtual_board", fromlist=["CORE_DEFAULTS"]).CORE_DEFAULTS
    choice = choose_core(None, [path], base=defaults)
    assert choice.units == ("reduce", "broadcast", "window")
    _check_board_for_model(f"sim?for={path}", path, choice)


def test_a_virtual_board_for_a_model_on_a_board_s_target(tmp_path):
    """``board=`` gives the target's core under the choice: the iCEBreaker's one lane and
    shallow reducer, with the units the model needs."""
    path = _save(tiny_model(), tmp_path / "tiny.onnx")
    choice = choose_core("icebreaker", [path])
    with open_device(f"sim?for={path}&board=icebreaker", progress=None) as device:
        identity = device.identity
    assert (identity.lanes, identity.window_extent, identity.window_columns,
            identity.max_operands) == (1, 3, 4, 1)
    # All of IDENTIFY but the clock and the frame timeout, the virtual board's own.
    assert dataclasses.replace(identity, clock_hz=0, frame_timeout_cycles=0) == \
        dataclasses.replace(choice.identity, clock_hz=0, frame_timeout_cycles=0)


def test_the_icebreaker_s_core_for_a_model_computes_the_window_s_products_serially(tmp_path):
    """The iCEBreaker's core for the model with the pipelined windowed unit (``window_serial``
    0; the choice would make its lanes update one window at a time) would not fit with a
    multiplier per configuration product, so the unit computes them one after another; on its
    virtual board the model's nodes give the golden model's bits, each request starting the
    products over."""
    path = _save(tiny_model(), tmp_path / "tiny.onnx")
    assert choose_core("icebreaker", [path]).core["window_serial"]
    choice = choose_core("icebreaker", [path], fixed={"window_serial": False})
    assert choice.core["window_serial_products"]
    unserial = dict(choice.parameters, window_serial_products=False)
    assert choice.estimate < estimate_cells("ice40", unserial)
    url = f"sim?for={path}&board=icebreaker&window_serial=0"
    _check_board_for_model(url, path, choice, own_clock=True)
    # The indices, whose arithmetic the products are (the model asks for none, so its core
    # leaves them out: given back here): images of different sizes in turn.
    with open_device(url + "&window_indices=1", progress=None) as device:
        for shape in [(1, 2, 6, 6), (2, 1, 5, 7), (1, 1, 4, 3)]:
            x = random_values(np.random.default_rng(len(shape) + shape[-1]),
                              format_of(np.float32), shape, edge_fraction=0.4)
            pool = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                        return_indices=True)
            (y, indices), (want, want_indices) = device.max_pool(x, **pool), \
                reference.max_pool(x, **pool)
            assert device.last_max_pool_route.name == "MAX_POOL"
            assert_bits_equal(y, want)
            np.testing.assert_array_equal(indices, want_indices)


def test_a_core_of_two_window_axes_still_pools_3d_exactly():
    """On a core whose windowed unit has the two inner axes alone (``window_extent_outer`` 0)
    a 3-D pool with a kernel of 1 on its outermost axis goes through ``MAX_POOL`` a plane at a
    time, one with a larger kernel there through ``REDUCE``: values and indices as the golden
    model's."""
    url = ("sim?units=reduce,window&window_serial=1&window_extent=3&window_extent_outer=0"
           "&window_columns=16&window_plane=1&lanes=1&dtype=float32")
    x = random_values(np.random.default_rng(1), format_of(np.float32), (1, 2, 3, 4, 4),
                      edge_fraction=0.4)
    with open_device(url, progress=None) as device:
        assert device.identity.window_extent_outer == 0
        for pool, route in [(dict(kernel_shape=[1, 2, 2], strides=[2, 2, 2]), "MAX_POOL"),
                            (dict(kernel_shape=[2, 2, 2]), "REDUCE")]:
            (y, indices), (want, want_indices) = (
                run(x, **pool, return_indices=True)
                for run in (device.max_pool, reference.max_pool))
            assert device.last_max_pool_route.name == route
            assert_bits_equal(y, want)
            np.testing.assert_array_equal(indices, want_indices)


@pytest.mark.parametrize("dtype", ["float32", "every"])
def test_a_core_whose_windowed_unit_updates_one_window_at_a_time(dtype):
    """``window_serial``: the windowed unit of SerialWindowMaxPool lanes, no reply FIFO; on its
    virtual board MaxPools of several shapes and element types (NaN payloads, signed zeros)
    go through MAX_POOL, values and indices as the golden model's."""
    url = (f"sim?units=reduce,window&window_serial=1&window_extent=3&window_extent_outer=1"
           f"&window_columns=16&window_plane=1&lanes=1&dtype={dtype}")
    types = [np.float32] if dtype == "float32" else [np.float32, np.float16, np.int8]
    with open_device(url, progress=None) as device:
        assert (device.identity.window_lanes, device.identity.window_extent) == (1, 3)
        for n, (shape, pool) in enumerate([
                ((1, 2, 6, 6), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
                ((2, 1, 5, 7), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
                ((1, 3, 9), dict(kernel_shape=[2], strides=[2]))]):
            for t in types:
                x = random_values(np.random.default_rng(n), format_of(t), shape,
                                  edge_fraction=0.4)
                (y, indices), (want, want_indices) = (
                    run(x, **pool, return_indices=True)
                    for run in (device.max_pool, reference.max_pool))
                assert device.last_max_pool_route.name == "MAX_POOL"
                assert_bits_equal(y, want)
                np.testing.assert_array_equal(indices, want_indices)


def test_several_models_and_bad_model_options(tmp_path):
    tiny = _save(tiny_model(), tmp_path / "tiny.onnx")
    spp = _save(spp_model(channels=1), tmp_path / "spp.onnx")
    from maxaccel.host.transport import check_url, core_options
    # Both forms name the same two models; the URL's other options apply over the choice.
    with open_device(f"sim?for={tiny}&for={spp}&window_lanes=1", progress=None) as device:
        assert (device.identity.window_extent, device.identity.max_operands) == (13, 1)
    assert core_options("sim", {"for": (tiny, spp)})["window_extent"] == 13
    check_url(f"sim?for={tiny},{spp}")
    with pytest.raises(ValueError, match="no ONNX model at"):
        check_url(f"sim?for={tmp_path / 'none.onnx'}")
    with pytest.raises(ValueError, match="board='nosuch'.*no such board"):
        check_url(f"verilator?for={tiny}&board=nosuch")
    with pytest.raises(ValueError, match="a netlist URL takes only for="):
        check_url(f"netlist:icebreaker?for={tiny}&board=ulx3s")
    options = core_options("netlist", {"board": "icebreaker", "for": (tiny,)})
    assert options["core"] == choose_core("icebreaker", [tiny]).core


@pytest.mark.slow(reason="compiling a core chosen for a model with Verilator takes minutes")
def test_a_compiled_board_for_a_model(tmp_path):
    path = _save(tiny_model(), tmp_path / "tiny.onnx")
    defaults = __import__("maxaccel.sim.verilator_board",
                          fromlist=["VERILATOR_DEFAULTS"]).VERILATOR_DEFAULTS
    choice = choose_core(None, [path], base=defaults)
    _check_board_for_model(f"verilator?for={path}", path, choice)


def test_the_docs_tables_are_the_choice_and_the_estimate_s(resnet18):
    """docs/boards.md, "A core for your model": the table of the two networks per board and
    the estimate against every build report, as the functions print them."""
    from maxaccel.boards.estimate import errors_markdown
    from maxaccel.host.model_core import choices_markdown
    page = (ROOT / "docs" / "boards.md").read_text()
    choices = [choose_core(board, [SQUEEZENET, ("resnet18", resnet18)]) for board in TARGETS]
    assert choices_markdown(choices) in page
    assert errors_markdown(estimate_errors(load_reports() + load_model_reports(),
                                           TARGETS)) in page


@pytest.mark.slow(reason="synthesising the iCEBreaker's core chosen for a model with yosys and "
                         "compiling its gate-level netlist with Verilator takes many minutes")
def test_the_icebreaker_netlist_for_a_model(tmp_path):
    """What the iCEBreaker's bitstream for the model computes, gate by gate: bit for bit, each
    MaxPool through its route."""
    path = _save(tiny_model(), tmp_path / "tiny.onnx")
    _check_board_for_model(f"netlist:icebreaker?for={path}", path,
                           choose_core("icebreaker", [path]))


@pytest.mark.slow(reason="synthesising the iCEBreaker's core for SqueezeNet 1.1 and ResNet-18 "
                         "and compiling its gate-level netlist with Verilator, 3 minutes; their "
                         "four pools on it, 30 s")
def test_the_squeezenet_and_resnet18_pools_on_the_icebreaker_netlist_for_them(tmp_path, resnet18):
    """The iCEBreaker's core for the two networks (float32, the windowed unit's lanes updating
    one window at a time, fields of 7 bits, no Indices, no run reducer), gate by gate: each of
    their MaxPools, with its attributes on its input's spatial size (two channels), through
    MAX_POOL, as the golden model's; Indices, which neither network asks for, refused."""
    path = _save(resnet18, tmp_path / "resnet18.onnx")
    choice = choose_core("icebreaker", [SQUEEZENET, path])
    assert choice.core["window_serial"] and choice.core["units"] == ("window",)
    assert (choice.core["window_field_max"], choice.core["window_indices"]) == (127, False)
    pools = {node.name: (model, {a.name: helper.get_attribute_value(a) for a in node.attribute})
             for model in (SQUEEZENET, path) for node in onnx.load(model).graph.node
             if node.op_type == "MaxPool"}
    rng = np.random.default_rng(55)
    with open_device(f"netlist:icebreaker?for={SQUEEZENET},{path}", progress=None) as device:
        assert device.identity == choice.identity
        for n in choice.nodes:
            model, attributes = pools[n.node]
            x = random_values(rng, format_of(np.float32), (1, 2) + n.shape[2:],
                              edge_fraction=0.3)
            y = device.max_pool(x, **attributes)
            assert device.last_max_pool_route.name == n.route == "MAX_POOL"
            assert_bits_equal(y, reference.max_pool(x, **attributes))
        with pytest.raises(ValueError, match="window_indices is 0"):
            device.max_pool(x, **attributes, return_indices=True)


def test_board_alone_gives_the_target_s_bitstream_core():
    """``board=`` without ``for=``: the target's bitstream's core, the Core's own default for
    what the target leaves to it (the Arty's extent 3, not the compiled board's 13); so is a
    netlist board's."""
    from maxaccel.host.transport import core_options
    from maxaccel.sim.netlist import core_parameters
    options = core_options("verilator", {"board": "arty_a7_35"})
    assert (options["lanes"], options["window_extent"], options["replay_depth"]) == (2, 3, 512)
    assert core_parameters("arty_a7_35")["window_extent"] == 3


def test_a_model_of_one_element_type_gets_a_core_of_that_type(tmp_path):
    """Every node of the SPP block is float32: the core is built for float32 alone, reports it
    as its one type, and is estimated smaller than the same core serving every type."""
    path = _save(spp_model(), tmp_path / "spp.onnx")
    choice = choose_core("ulx3s_85f", [path])
    assert choice.core["dtype"] == "float32"
    assert choice.identity.dtypes == {format_of(np.float32).dtype}
    every_type = dict(choice.parameters, dtype=None)
    assert choice.estimate < estimate_cells("ecp5", every_type)
    assert "dtype=float32" in choice.markdown()


def test_a_virtual_board_s_core_parameters_are_kept_by_the_choice(tmp_path):
    """``for=`` with Core parameters in the URL: the choice keeps them, as ``--core`` does
    (here without the serial unit the iCEBreaker's choice would make), and they are
    read as ``--core`` reads them."""
    from maxaccel.host.transport import core_options, core_value
    path = _save(spp_model(), tmp_path / "spp.onnx")
    options = core_options("sim", {"for": (path,), "board": "ulx3s", "window_extent": 9})
    assert options["window_extent"] == 9 and options["units"] == ("reduce", "window")
    serial = core_options("sim", {"for": (SQUEEZENET,), "board": "icebreaker"})
    assert serial["window_serial"] is True
    kept = core_options("sim", {"for": (SQUEEZENET,), "board": "icebreaker",
                                "window_serial": 0, "window_serial_products": 0})
    assert not kept.get("window_serial") and not kept.get("window_serial_products")
    assert [core_value("dtype", "f4"), core_value("dtype", "every"),
            core_value("units", "reduce,window,"), core_value("window_extent", "9")] == [
        "float32", None, ("reduce", "window"), 9]
    with pytest.raises(ValueError, match=r"^window_extent='nine' must be an integer$"):
        core_value("window_extent", "nine")
