"""Bounds the project keeps, held by the suite so that they do not creep: no function of the
package over :data:`MAX_FUNCTION_LINES` lines, no issue numbers in the docs, the code or the
tests, and no commit hashes in the docs (they say what is true, not where it came from). The
one-way import graph is ``tests/test_layout.py``'s."""

import ast
import re
from pathlib import Path
from package_layout import PACKAGES

ROOT = Path(__file__).parent.parent
#: The longest function the package may hold, docstring and decorators included.
MAX_FUNCTION_LINES = 200
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = sorted(path for package in (*PACKAGES, "maxaccel", "examples")
              for pattern in ("*.py", "*.c", "*.cpp")
              for path in (ROOT / package).rglob(pattern))
TESTS = sorted((ROOT / "tests").glob("*.py"))
#: The word issue or issues, then a number (with or without a hash sign).
ISSUE = re.compile(r"\bissues? #?\d+", re.I)
#: "#12" as a reference (after a space or a bracket, before a space or punctuation): not a URL's
#: fragment (``xdma0#10.0.0.11``), a format (``{v:#04x}``) or a colour.
ISSUE_REFERENCE = re.compile(r"(?:^|(?<=[\s(\[]))#\d+(?=[\s,;:)\]]|\.(?:\s|$)|$)", re.M)
#: A git object name: 7 to 40 hex digits with a letter and a digit among them, standing alone
#: (``0x7FC00000`` and CRC residues are written with ``0x`` and capitals, so they do not match).
COMMIT = re.compile(r"(?<![\w.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])")


def shown(path):
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def long_functions(paths, limit):
    """``["path:line name (n lines)", ...]`` of every function longer than ``limit`` lines."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = node.end_lineno - start + 1
                if lines > limit:
                    found.append(f"{shown(path)}:{node.lineno} {node.name} "
                                 f"({lines} lines)")
    return found


def matches(paths, pattern):
    """``["path:line: text", ...]`` of every line of ``paths`` where ``pattern`` matches."""
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in pattern.finditer(line):
                found.append(f"{shown(path)}:{number}: {match.group()}")
    return found


def test_no_function_of_the_package_is_over_200_lines():
    paths = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    too_long = long_functions(paths, MAX_FUNCTION_LINES)
    assert not too_long, "split these functions:\n" + "\n".join(too_long)


def test_no_issue_numbers_in_docs_code_or_tests():
    found = matches(DOCS + CODE + TESTS, ISSUE)
    # "#12" alone: the docs and the package (the tests hold Verilog delays, "#5 clk = 1").
    found += matches(DOCS + CODE, ISSUE_REFERENCE)
    assert not found, "say what is true instead of the issue:\n" + "\n".join(found)


def test_no_commit_hashes_in_the_docs():
    found = matches(DOCS, COMMIT)
    assert not found, "say what is true instead of the commit:\n" + "\n".join(found)


def test_the_guards_find_what_they_guard_against(tmp_path):
    """Each guard fires on an example of its kind and stays quiet on its look-alikes."""
    source = tmp_path / "long.py"
    source.write_text("def short():\n    pass\n\n\ndef long():\n" + "    x = 1\n" * 200)
    assert [f.split()[1] for f in long_functions([source], MAX_FUNCTION_LINES)] == ["long"]
    assert long_functions([source], 201) == []
    text = tmp_path / "text.md"
    issue = "iss" + "ue"  # spelt apart, so this file passes its own guard
    text.write_text(f"as {issue} 12 says; {issue}s 27 and 29; see #31.\n(#4) and #5, too\n"
                    "xdma:///dev/xdma0#10.0.0.11 {v:#04x} f16 0x7E00 0x7FC00000 abcdef0\n"
                    "measured for commit `c7ae2c2`, the tree 7a4ec40 of 2026-11-27\n")
    assert [f.split(": ")[1] for f in matches([text], ISSUE)] == [f"{issue} 12", f"{issue}s 27"]
    assert [f.split(": ")[1] for f in matches([text], ISSUE_REFERENCE)] == ["#31", "#4", "#5"]
    assert [f.split(": ")[1] for f in matches([text], COMMIT)] == ["abcdef0", "c7ae2c2",
                                                                  "7a4ec40"]


def test_no_test_module_imports_another():
    """What several test modules share lives in a helper module of ``tests/`` (``boards.py``,
    ``fake_board.py``, ...), never in a test module another imports."""
    found = []
    for path in TESTS:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [f"{shown(path)}:{node.lineno} imports {name}" for name in names
                      if name.split(".")[0].startswith("test_")]
    assert not found, "\n".join(found)
