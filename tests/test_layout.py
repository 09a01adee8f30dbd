"""The package layout's rules: imports go one way, and the host, the contract and the cluster
never import amaranth (``docs/architecture.md``, "Packages and imports"). The benchmarks
(``bench/``, ``maxaccel.bench``) use the driver; the driver's ``maxaccel bench`` command loads
them in its own functions only, so that the driver never loads them otherwise."""

import ast
import re
import subprocess
import sys
from pathlib import Path
from package_layout import PACKAGES

ROOT = Path(__file__).parent.parent
#: What each package may import of the others; the graph has no cycle.
ALLOWED = {
    "contract": set(),
    "hdl": {"contract"},
    "sim": {"contract", "hdl", "boards"},
    "boards": {"contract", "hdl"},
    "host": {"contract", "sim", "boards"},
    "cluster": {"contract", "sim", "host", "bench"},
    "testing": {"contract", "sim", "host"},
    "onnx_backend": {"sim", "host"},
    "bench": {"contract", "sim", "host", "boards"},
}
#: Imports that go against the graph, allowed only inside functions of one file: the command's
#: ``bench`` subcommand loads the benchmarks when it runs.
LAZY = {("host", "bench"): "host/cli.py"}


def _in_functions(tree):
    """The ids of the import statements inside a function of ``tree``."""
    return {id(inner) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for inner in ast.walk(node) if isinstance(inner, (ast.Import, ast.ImportFrom))}


def imported_packages(package, lazy=False):
    """``{imported package: [file:line, ...]}`` of every maxaccel import in ``package``,
    function-level imports included; without ``lazy``, the imports :data:`LAZY` allows are
    left out; with it, only those are given."""
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        in_functions = _in_functions(tree)
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module == "maxaccel":
                names = [f"maxaccel.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                allowed = LAZY.get((package, parts[1] if len(parts) > 1 else None)) == \
                    str(path.relative_to(ROOT)) and id(node) in in_functions
                if parts[0] == "maxaccel" and len(parts) > 1 and parts[1] != package and \
                        allowed == lazy:
                    found.setdefault(parts[1], []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_imports_go_one_way():
    for package in PACKAGES:
        unexpected = {p: sites for p, sites in imported_packages(package).items()
                      if p not in ALLOWED[package]}
        assert not unexpected, f"{package} imports {unexpected}"


def test_the_benchmarks_are_loaded_by_the_command_only_when_it_runs_them():
    """The one import against the graph (:data:`LAZY`) is used, and the driver's modules,
    the command's included, load no benchmark module when imported."""
    assert set(imported_packages("host", lazy=True)) == {"bench"}
    code = ("import sys, maxaccel.host.device, maxaccel.host.offload, maxaccel.host.cli; "
            "print(sorted(m for m in sys.modules if m.startswith('maxaccel.bench')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_every_allowed_import_is_used_and_the_graph_has_no_cycle():
    """The packages' real import graph is :data:`ALLOWED` (no allowance left unused, so the
    table is the graph ``docs/architecture.md`` draws, not a looser one) and has no cycle."""
    graph = {package: set(imported_packages(package)) for package in PACKAGES}
    unused = {package: ALLOWED[package] - graph[package] for package in PACKAGES}
    assert not any(unused.values()), f"allowed but not imported: {unused}"
    done, visiting = set(), set()

    def visit(package):
        assert package not in visiting, f"cycle through {package}"
        if package not in done:
            visiting.add(package)
            for other in graph[package]:
                visit(other)
            visiting.discard(package)
            done.add(package)

    for package in PACKAGES:
        visit(package)


def test_host_and_contract_load_without_amaranth():
    """Importing the driver, the pool or the core chooser (not opening a virtual board, not
    asking for a core's identity) loads no amaranth."""
    code = ("import sys, maxaccel.host.device, maxaccel.host.offload, maxaccel.host.cli, "
            "maxaccel.contract.wire, maxaccel.contract.checks, maxaccel.cluster.pool, "
            "maxaccel.cluster.actor, maxaccel.host.model_core, maxaccel.boards.estimate; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'amaranth'))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def module_level_imports(path):
    """The maxaccel packages and third-party top-level modules ``path`` imports outside any
    function: ``{name: [line, ...]}`` (``maxaccel.boards.targets`` for a maxaccel module)."""
    found = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "maxaccel":
                names = [f"maxaccel.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            found.setdefault(name, []).append(node.lineno)
    return found


def test_the_host_contract_and_cluster_never_import_amaranth():
    """Not even inside a function: a host script, the contract and a pool's driver run without
    it (the virtual boards import it, in ``sim``)."""
    for package in ("host", "contract", "cluster"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                    [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
                assert not [n for n in names if n.split(".")[0] == "amaranth"], \
                    f"{path.relative_to(ROOT)}:{node.lineno} imports amaranth"


def test_the_host_imports_sim_and_boards_inside_functions_but_the_targets():
    """What ``docs/architecture.md`` says of the host's imports: ``sim`` only inside the
    functions that open a virtual board or run the golden model, and of ``boards`` only the
    targets (plain data) at module level."""
    for path in sorted((ROOT / "host").rglob("*.py")):
        for name, lines in module_level_imports(path).items():
            parts = name.split(".")
            if parts[0] == "maxaccel" and len(parts) > 1 and parts[1] in ("sim", "boards"):
                assert name == "maxaccel.boards.targets", \
                    f"{path.relative_to(ROOT)}:{lines} imports {name} at module level"
def hdl_imports():
    """``{hdl module: {imported name, ...}}``: its sibling modules by stem (``from .kit import
    ...`` gives ``kit``), and every absolute ``maxaccel`` module and name it imports
    (``from maxaccel.contract import wire`` gives ``maxaccel.contract`` and
    ``maxaccel.contract.wire``)."""
    imports = {}
    for path in (ROOT / "hdl").glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found.update([node.module] if node.module else
                             [alias.name for alias in node.names])
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        imports[path.stem] = found
    return imports


def test_the_library_units_import_nothing_of_the_wire_protocol():
    """No module of the library (``docs/library.md``: what ``maxaccel.hdl`` exports, and the
    hdl modules those import) imports ``maxaccel.contract.wire`` (its commands, field names,
    reply formats or limits), directly or through another hdl module; the engine's modules
    do (the adapters, in ``hdl/routing.py``, translate the wire into the units' ports)."""
    imports = hdl_imports()

    def closure(modules):
        found = set()
        while modules:
            module = modules.pop()
            if module not in found:
                found.add(module)
                modules.extend(name for name in imports[module] if name in imports)
        return found

    def reaches_wire(module):
        return any(name == "maxaccel.contract.wire" for used in closure([module])
                   for name in imports[used])

    library = closure(["__init__"])
    assert {"unit", "kit", "lane", "reduce", "pool", "broadcast", "window"} <= library
    offenders = sorted(module for module in library if reaches_wire(module))
    assert not offenders, f"library modules that import maxaccel.contract.wire: {offenders}"
    assert reaches_wire("routing") and reaches_wire("window_lanes")  # the test sees imports


def private_amaranth_uses(path):
    """``[(line, what), ...]``: where ``path`` uses Amaranth's private API: a private module
    (``amaranth.hdl._ir``), a private name imported from Amaranth, or another class's mangled
    private attribute (``design._MustUse__silence``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        modules = ([node.module or ""] if isinstance(node, ast.ImportFrom) else
                   [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
        for module in modules:
            parts = module.split(".")
            if parts[0] == "amaranth" and any(part.startswith("_") for part in parts):
                found.append((node.lineno, module))
            elif parts[0] == "amaranth" and isinstance(node, ast.ImportFrom):
                found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names
                             if alias.name.startswith("_"))
        if isinstance(node, ast.Attribute) and re.match(r"_[A-Za-z]\w*__\w", node.attr):
            found.append((node.lineno, node.attr))
    return found


def test_no_package_uses_private_amaranth_api():
    """The gateware, the simulators and the builds use Amaranth's public API only (a design
    set aside goes through :func:`maxaccel.hdl.unit.set_aside`, which elaborates it)."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            uses = private_amaranth_uses(path)
            assert not uses, f"{path.relative_to(ROOT)} uses private Amaranth API: {uses}"


def test_the_private_api_check_sees_a_use(tmp_path):
    """Negative control: each kind of use :func:`private_amaranth_uses` looks for is found."""
    sample = tmp_path / "sample.py"
    sample.write_text("from amaranth.hdl._ir import Fragment\n"
                      "from amaranth import _unused\n"
                      "design._MustUse__silence = True\n"
                      "from amaranth.hdl import Module\n"
                      "self._parameters = {}\n")
    assert [line for line, _ in private_amaranth_uses(sample)] == [1, 2, 3]


def test_the_lane_width_is_the_wire_contracts():
    """The gateware's lane (one element of the widest format) is the contract's unit of
    ``IDENTIFY``'s lanes."""
    from maxaccel.contract.wire import LANE_BYTES
    from maxaccel.hdl.lane import LANE_BYTES as lane_bytes
    assert lane_bytes == LANE_BYTES


def test_the_library_exports_the_units():
    """``from maxaccel.hdl import ...`` gives the units and the key lane pieces."""
    import maxaccel.hdl as library
    for name in ("KeyMax", "RunReducer", "ChannelsLastPool", "WindowMaxPool", "BroadcastMax",
                 "ToKey", "FromKey", "LaneMax", "LaneDecode", "LaneFormat", "beat_layout"):
        assert name in library.__all__ and hasattr(library, name), name
