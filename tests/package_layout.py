"""The repository's packages as pyproject.toml maps them: the one list the layout, bounds and
docs-names tests walk, so a new package is checked as soon as it is packaged."""

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def _packages():
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[tool.setuptools.package-dir]", 1)[1].split("\n[", 1)[0]
    folders = re.findall(r'^"maxaccel\.[\w.]+" = "(\w+)"$', section, re.M)
    return tuple(dict.fromkeys(folders))


#: Each top-level package's folder (``contract``, ``hdl``, ...), in pyproject.toml's order.
PACKAGES = _packages()
