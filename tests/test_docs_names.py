"""The names the docs give in backticks exist: a doc that names a module, a file, a function, a
class, an attribute or a ``maxaccel`` command that is not there fails here.

What is checked, in ``README.md`` and ``docs/*.md`` (code spans only; fenced blocks are
examples, not references):

* file paths under the repository's folders (``hdl/lane.py``, ``docs/boards/*.json``), and a
  test named after its file (``tests/test_pool.py::test_every_update_distance``);
* dotted names rooted in the package (``maxaccel.contract.wire.RULES``, ``contract.rules.takes``,
  ``python -m maxaccel.boards.fmax``), resolved by import and attribute;
* names rooted in one of the package's classes or modules (``RunReducer.latency``,
  ``reference.order_key``): an attribute of the class, or one its methods set on ``self``, a
  port of its signature or a field its source names;
* CamelCase names (``ChannelsLastPool``) and calls (``plan_broadcast(...)``): defined in the
  package, an ONNX operator, or a name of the libraries the docs discuss (:data:`FOREIGN`);
* ``maxaccel COMMAND``: a subcommand of the CLI's parser.
"""

import ast
import builtins
import functools
import importlib
import importlib.util
import re
from pathlib import Path

import pytest
from package_layout import PACKAGES

ROOT = Path(__file__).parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Folders a relative path in a doc is resolved under (the repository's own).
FOLDERS = (*PACKAGES, "tests", "docs", "examples", "maxaccel", ".ci")
#: Names of other projects the docs discuss, which neither the package nor onnx define: the
#: libraries' classes and functions, and the XDMA IP's and FPGA vendors' primitives.
FOREIGN = {
    # amaranth and its standard library
    "EnableInserter", "ResetInserter", "SyncFIFO", "SyncFIFOBuffered", "AsyncSerialRX",
    "StructLayout", "ArrayLayout", "Signature", "Component", "Memory",
    # onnxruntime and onnx
    "InferenceSession", "SessionOptions", "RunOptions", "CustomOpDomain", "BackendTest",
    "OrtValue", "NodeArg", "ModelProto", "GraphProto", "TensorProto",
    # Ray
    "ActorDiedError", "ActorUnavailableError", "RayActorError", "NodeAffinitySchedulingStrategy",
    "ThreadPoolExecutor",
    # onnxruntime's C API (host/device_ops.c)
    "OrtApi", "OrtApiBase", "OrtCustomOp", "RegisterCustomOps", "CreateKernelV2",
    "KernelComputeV2", "ReorderInput", "ReorderOutput",
    # FPGA primitives and the XDMA IP
    "DP16KD", "RAMB18E1", "RAMB36E1", "RAMB36", "RAMB18", "RAM64M", "DSP48E1", "IBUFDS_GTE2",
    "TRELLIS_COMB", "SB_RAM40_4K", "LUT4", "CCU2C", "MULT18X18D", "SymbiYosys",
}
#: The ``maxaccel`` subcommands a doc may name without the CLI defining them: none.
COMMAND_ALLOWED = set()


def code_spans(text):
    """Inline code spans of a Markdown text, fenced blocks left out."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return [span.strip() for span in re.findall(r"(?<!`)`([^`\n]+)`(?!`)", text)]


@functools.cache
def package_index():
    """``{name: [(module, node)]}`` of every module-level class, function and assignment of
    the package, and ``{module name: path}``."""
    index, modules = {}, {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            module = ".".join(("maxaccel", *parts))
            modules[module] = path
            tree = ast.parse(path.read_text())
            for node in tree.body:
                names = []
                if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                    names = [node.name]
                elif isinstance(node, ast.Assign):
                    names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    names = [node.target.id]
                for name in names:
                    index.setdefault(name, []).append((module, node))
    return index, modules


@functools.cache
def suite_helpers():
    """Module-level names of the test suite's files (a doc may name a test's own helper)."""
    names = set()
    for path in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                names.add(node.name)
    return names


def module_names():
    _, modules = package_index()
    return {module.rsplit(".", 1)[-1]: module for module in modules}


def resolve_dotted(name):
    """The object ``name`` (``maxaccel.a.b.C.attr``) names, or raise LookupError."""
    parts = name.split(".")
    for cut in range(len(parts), 1, -1):
        module_name = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(module_name)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        obj = importlib.import_module(module_name)
        for index, attr in enumerate(parts[cut:]):
            if hasattr(obj, attr):
                obj = getattr(obj, attr)
            elif isinstance(obj, type) and class_has(obj.__module__, obj.__name__, attr):
                return obj  # an instance's attribute: what follows is not known from here
            else:
                raise LookupError(f"{module_name} has no {'.'.join(parts[cut:index + cut + 1])}")
        return obj
    raise LookupError(f"no module {name}")


def class_has(module, class_name, attr):
    """Whether the class's source defines ``attr``: set on ``self``, annotated, or a string of
    it (a port of a signature built from a dict, a field)."""
    _, modules = package_index()
    path = modules.get(module)
    if path is None:
        return False
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Attribute) and inner.attr == attr and \
                        isinstance(inner.ctx, ast.Store):
                    return True
                if isinstance(inner, ast.AnnAssign) and getattr(inner.target, "id", "") == attr:
                    return True
                if isinstance(inner, ast.Constant) and inner.value == attr:
                    return True
                if isinstance(inner, (ast.FunctionDef, ast.Assign)) and \
                        attr in [getattr(inner, "name", None),
                                 *[getattr(t, "id", None) for t in getattr(inner, "targets", [])]]:
                    return True
            return False
    return False


def check_rooted(name):
    """A name whose first part is a module or class of the package: ``reference.order_key``,
    ``RunReducer.latency``, ``contract.rules.takes``. Returns a problem, or None."""
    first, *rest = name.split(".")
    index, _ = package_index()
    if first in PACKAGES:
        try:
            resolve_dotted("maxaccel." + name)
        except LookupError as error:
            return str(error)
        return None
    if first in index:
        candidates = [f"{module}.{name}" for module, _ in index[first]]
    elif first in module_names():
        # A module's short name (``reference.order_key``), or a variable named like it
        # (``pool.run`` of a BoardPool): the module's attribute, or one of its classes'.
        module = module_names()[first]
        candidates = [f"{module}.{'.'.join(rest)}"] + [
            f"{module}.{other}.{'.'.join(rest)}" for other, sites in index.items()
            if any(site == module and isinstance(node, ast.ClassDef) for site, node in sites)]
    else:
        return None
    errors = []
    for candidate in candidates:
        try:
            resolve_dotted(candidate)
            return None
        except LookupError as error:
            errors.append(str(error))
    return "; ".join(errors)


@functools.cache
def onnx_operator(name):
    import onnx.defs
    return onnx.defs.has(name)


@functools.cache
def cli_commands():
    from maxaccel.host.cli import _parser
    parser = _parser()
    (action,) = [a for a in parser._actions if a.dest == "command"]
    return set(action.choices)


PATH = re.compile(r"^(?:\./)?([\w.-]+)/([\w./*-]*[\w*])(?:::(\w+))?$")
DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")
CAMEL = re.compile(r"^_?[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+$")
FILE_SUFFIXES = {"py", "md", "c", "cpp", "h", "vh", "v", "sv", "tcl", "xdc", "json", "toml",
                 "onnx", "npy", "npz", "txt", "png", "bit", "bin", "sby", "log", "csv", "so"}
CALL = re.compile(r"^([A-Za-z_][\w.]*)\(")


def problems_of(span):
    """What is wrong with one code span (empty: nothing, or nothing checked)."""
    path = PATH.match(span)
    if path and path.group(1) in FOLDERS:
        folder, rest, test = path.groups()
        matches = sorted((ROOT / folder).glob(rest))
        if not matches:
            return [f"no file {folder}/{rest}"]
        if test and not re.search(rf"^\s*(?:async\s+)?def {test}\b|^class {test}\b|^{test} =",
                                  matches[0].read_text(), re.M):
            return [f"{folder}/{rest} has no {test}"]
        return []
    command = re.match(r"^maxaccel ([a-z][\w-]*)\b", span)
    if command and command.group(1) not in cli_commands() | COMMAND_ALLOWED:
        return [f"the CLI has no command {command.group(1)!r}"]
    module = re.match(r"^python3? -m ([\w.]+)", span)
    if module:
        if importlib.util.find_spec(module.group(1)) is None:
            return [f"no module {module.group(1)}"]
        return []
    call = CALL.match(span)
    name = call.group(1) if call else span
    if DOTTED.match(name) and name.rsplit(".", 1)[1] in FILE_SUFFIXES:
        return []  # a file's name (``maxaccel.tcl``, ``__main__.py``), not an attribute
    if name.startswith("maxaccel."):
        try:
            resolve_dotted(name)
        except LookupError as error:
            return [str(error)]
        return []
    if DOTTED.match(name):
        problem = check_rooted(name)
        return [problem] if problem else []
    if CAMEL.match(name) or (call and re.match(r"^[a-z_]\w*_\w+$", name)):
        index, _ = package_index()
        if name in index or name in suite_helpers() or name in FOREIGN or hasattr(builtins, name) or onnx_operator(name):
            return []
        if call and not CAMEL.match(name):
            return []  # a snake_case call of another library: not ours to check
        return [f"the package defines no {name}"]
    return []


def test_every_name_in_backticks_exists():
    missing = []
    for doc in DOCS:
        for span in code_spans(doc.read_text()):
            missing += [f"{doc.relative_to(ROOT)}: `{span}`: {problem}"
                        for problem in problems_of(span)]
    assert not missing, "\n".join(sorted(set(missing)))


@pytest.mark.parametrize("span, wrong", [
    ("hdl/lane.py", False), ("hdl/no_such_module.py", True),
    ("docs/boards/*.json", False),
    ("tests/test_layout.py::test_imports_go_one_way", False),
    ("tests/test_layout.py::test_no_such_test", True),
    ("maxaccel.contract.wire.RULES", False), ("maxaccel.contract.wire.NO_SUCH_RULES", True),
    ("contract.rules.takes", False), ("contract.wire.takes", False),
    ("contract.nowhere.takes", True),
    ("RunReducer.latency", False), ("BroadcastMax.LATENCY", False),
    ("Device.link.bytes_written", False), ("Device.no_link.bytes_written", True),
    ("BroadcastMax.no_such_latency", True),
    ("reference.order_key", False), ("reference.no_such_key", True),
    ("ChannelsLastPool", False), ("ChannelsFirstPool", True), ("GlobalMaxPool", False),
    ("plan_broadcast(shapes, 4, 2, 64, 4, 4)", False),
    ("maxaccel bench --ratios", False), ("maxaccel benchmark", True),
    ("python -m maxaccel.boards.fmax lane", False), ("python -m maxaccel.boards.speed", True),
    ("maxaccel.tcl", False), ("__main__.py", False), ("pool.run", False),
    ("tests/device_checks.py::MAXPOOL_CASES", False), ("PlainKeyMax", False),
    ("np.maximum(+0., -0.)", False), ("x.shape", False), ("(N, 1)", False),
])
def test_the_check_tells_names_that_exist_from_names_that_do_not(span, wrong):
    assert bool(problems_of(span)) == wrong, problems_of(span)


#: A doc naming a section of a page: ``docs/architecture.md``, "Command engine" or
#: [boards.md](boards.md), "ULX3S 85F".
SECTION = re.compile(r'(?:`+(?:docs/)?([\w-]+\.md)`+|\]\((?:docs/)?([\w-]+\.md)\))[),]?\s*"([^"\n]+)"')


def section_titles(page):
    """The headings and the bold run-in titles of a page, lower case, without punctuation at
    their ends."""
    text = re.sub(r"^```.*?^```", "", (ROOT / "docs" / page).read_text(), flags=re.S | re.M)
    titles = re.findall(r"^#+\s+(.+)$", text, re.M) + re.findall(r"\*\*([^*]+)\*\*", text)
    return {title.strip(" .:").replace("`", "").lower() for title in titles}


def test_every_section_a_doc_or_a_docstring_names_exists():
    """Sections named by the docs, and by the package's and the tests' docstrings and comments."""
    sources = DOCS + sorted(path for folder in (*PACKAGES, "tests")
                            for path in (ROOT / folder).rglob("*.py"))
    missing = []
    for doc in sources:
        text = re.sub(r"\s*\n\s*(?:#:?\s*)?", " ", doc.read_text())
        for match in SECTION.finditer(text):
            page = match.group(1) or match.group(2)
            title = match.group(3).strip(" .:").replace("`", "").lower()
            if not (ROOT / "docs" / page).exists():
                continue  # not a page of docs/: the file-name check above reports it
            titles = section_titles(page)
            if not any(t == title or t.startswith(title) for t in titles):
                missing.append(f"{doc.relative_to(ROOT)}: {page}, \"{match.group(3)}\"")
    assert not missing, "\n".join(missing)


def test_the_section_check_reads_headings_and_run_in_titles():
    titles = section_titles("architecture.md")
    assert {"command engine", "the kernel extent per board"} <= titles
    assert "behind the engine: windowlanes" not in titles
    text = 'see `docs/architecture.md`, "Command engine" and [boards.md](boards.md), "ULX3S 85F"'
    assert [m.group(3) for m in SECTION.finditer(text)] == ["Command engine", "ULX3S 85F"]
