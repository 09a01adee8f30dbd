"""``python -m maxaccel.cluster bench``: a pool's throughput against its number of boards.

Example (the figures in ``docs/scale-out.md``)::

    python -m maxaccel.cluster bench --boards 1 2 4 --device verilator
"""

import argparse
import json
import sys


def main(argv=None):
    """Parse ``argv`` and run the command; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m maxaccel.cluster",
                                     description="maxaccel boards behind a Ray pool")
    commands = parser.add_subparsers(dest="command", required=True)
    bench = commands.add_parser(
        "bench", help="throughput against the number of boards, in device cycles",
        description="Runs a ReduceMax model over a batch of feeds (run) and one tensor cut "
                    "into a slice per board (shard) on pools of N virtual boards, and prints "
                    "the pool's makespan in device cycles (its dispatch replayed in device "
                    "time: the busiest board's cycles) and the throughput in elements per "
                    "cycle; every result is checked against the golden model.")
    bench.add_argument("--boards", type=int, nargs="+", default=[1, 2, 4], metavar="N",
                       help="pool sizes (default: 1 2 4)")
    bench.add_argument("--device", default="verilator", metavar="URL",
                       help="the virtual board each pool is made of (default: verilator)")
    bench.add_argument("--elements", type=int, default=1 << 18, metavar="N",
                       help="elements of each run's tensor (default 262144)")
    bench.add_argument("--batch", type=int, default=16, metavar="N",
                       help="runs per measurement; the shard tensor has N times the elements "
                            "(default 16)")
    bench.add_argument("--dtype", default="float32")
    bench.add_argument("--workload", action="append", choices=["run", "shard"],
                       help="only this workload (repeatable; default: both)")
    bench.add_argument("--address", metavar="ADDRESS",
                       help="join this Ray cluster (default: a local one)")
    bench.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)

    from maxaccel.cluster.bench import WORKLOADS, format_scaling, measure_scaling
    from maxaccel.host.transport import check_url
    try:
        check_url(args.device)
    except (ValueError, TypeError) as error:
        parser.error(f"--device: {error}")

    def show(r):
        print(f"  {r.workload:<5} {r.boards} board(s): makespan {r.makespan} cycles, "
              f"{r.elements_per_cycle:.2f} elements/cycle", flush=True)

    try:
        results = measure_scaling(args.boards, args.device, elements=args.elements,
                                  batch=args.batch, dtype=args.dtype,
                                  workloads=args.workload or WORKLOADS, address=args.address,
                                  progress=show)
    except (ValueError, TypeError) as error:
        parser.error(str(error))
    print(format_scaling(results))
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"command": "python -m maxaccel.cluster " + " ".join(
                sys.argv[1:] if argv is None else argv),
                "results": [r.as_dict() for r in results]}, file, indent=1)
            file.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
