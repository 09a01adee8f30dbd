"""The examples of ``docs/library.md`` run as their users run them: ``pytest`` on each file of
``examples/library/``, and every unit the page documents has one."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
EXAMPLES = sorted((ROOT / "examples" / "library").glob("test_*.py"))


def test_every_unit_of_the_library_page_has_an_example():
    page = (ROOT / "docs" / "library.md").read_text()
    for example in EXAMPLES:
        assert f"examples/library/{example.name}" in page, example.name
    for unit in ("KeyMax", "RunReducer", "ChannelsLastPool", "WindowMaxPool",
                 "SerialWindowMaxPool", "BroadcastMax"):
        section = page.split(f"### {unit}\n", 1)[1].split("\n### ", 1)[0]
        assert "**Example**: `examples/library/test_" in section, unit


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.stem)
def test_example_passes(example):
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "-p", "no:xdist", str(example)],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
