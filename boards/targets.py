"""The boards ``maxaccel build`` knows: device, link, clock and core configuration of each.

This module imports neither amaranth nor amaranth-boards, so ``maxaccel boards`` lists the
targets on a machine without the toolchain extra; :meth:`Target.platform` imports the board's
amaranth-boards platform when a build needs it.
"""

from dataclasses import dataclass, field
import importlib

__all__ = ["Target", "TARGETS", "DEFAULT_BAUD", "XDMA_IOCTL_ALIGN_GET", "target",
           "check_lanes", "report_markdown", "load_reports",
           "reports_dir", "core_identity", "MODEL_REPORTS", "load_model_reports",
           "model_report_markdown"]

#: The UART bit rate of the boards we build unless a target says otherwise; also the host's
#: default for ``serial://PORT`` without ``?baud=`` or ``?board=``.
DEFAULT_BAUD = 3_000_000
#: The Xilinx XDMA driver's ``IOCTL_XDMA_ALIGN_GET`` (``cdev_sgdma.h``: ``_IOR('q', 6, int)``):
#: the engine's address alignment, which a buffer given to ``read``/``write`` must meet.
XDMA_IOCTL_ALIGN_GET = (2 << 30) | (4 << 16) | (ord("q") << 8) | 6


@dataclass(frozen=True)
class Target:
    """One board ``maxaccel build`` can make a bitstream (or a Vivado build plan) for.

    Attributes
    ----------
    name : str
        The name on the command line (``maxaccel build NAME``).
    title : str
        The board as its maker calls it.
    family : str
        ``"ice40"``, ``"ecp5"`` or ``"xilinx"``; Xilinx targets get a build plan, not a
        bitstream (no Vivado here).
    device : str
        The FPGA, as its vendor spells it.
    platform_class : str
        ``"module:Class"`` of the amaranth-boards platform.
    link : str
        ``"uart"`` or ``"xdma"``: what the host's ``serial://`` or ``xdma://`` transport talks to.
    link_bytes_per_s : float
        Payload the link carries per second in one direction (a UART moves 8 data bits in 10
        bit times).
    lanes : int
        Default 64-bit datapath lanes.
    clock_mhz : float
        Default core clock (a PLL makes it from the board's oscillator where they differ).
    baud : int or None
        UART bit rate, for UART links.
    link_word : int
        Bytes per cycle the core's link carries (:class:`~maxaccel.hdl.top.Core`'s
        ``link_bytes``): 1 behind a UART; the NiteFury's 32, two of the XDMA's 16-byte AXI
        words paired, so its core (4 GB/s at 125 MHz) has 2.5 times the PCIe link's rate.
    core : dict
        Further :class:`~maxaccel.hdl.top.Core` parameters (``replay_depth``, ``max_dims``,
        ``max_operands``, ``pool_channels``, ``window_lanes``, ``units``, ``reduce_pipeline``)
        chosen so the design fits the device. The Arty's windowed pooling unit takes one
        lane (``window_lanes=1``: 8 bytes a cycle, far more than a UART brings); the ULX3S
        (``ulx3s``, its 25F) has no windowed pooling unit (with one window lane of extent 3 its
        design needs 25 691 TRELLIS_COMB of the 25F's 24 288: docs/boards.md; MaxPool goes
        through ``REDUCE`` there). That is why ``ulx3s_85f`` exists: the same board with the
        LFE5U-85F, the 25F's design plus the unit, one window lane of kernel extent 13 on the
        inner axes and 3 on a 3-D pool's outermost (the NiteFury's extents: every pool class
        of ``maxaccel bench --ratios`` goes through it; its report, ``docs/boards/
        ulx3s_85f.json``, says what it takes of the 85F: half its logic, at 30 MHz rather
        than the 25F's 60, docs/boards.md "ULX3S 85F"). The rule for
        ``reduce_pipeline``: ``"shallow"`` on the boards that run from a 12 MHz oscillator (the
        iCE40 ones, no PLL: the UART, not the core, is the limit there), where it still meets
        the clock with margin and frees about a sixth of the logic cells; ``"deep"`` (the
        default) wherever the clock asks for Fmax.
    nextpnr_options : tuple of str
        Further nextpnr arguments of the build, after ``--timing-allow-fail``. The 85F's
        ``--seed``: with nextpnr's default seed its placement leaves congestion its router
        does not clear (docs/boards.md, "ULX3S 85F").
    """

    name: str
    title: str
    family: str
    device: str
    platform_class: str
    link: str
    link_bytes_per_s: float
    lanes: int
    clock_mhz: float
    baud: int | None = None
    link_word: int = 1
    core: dict = field(default_factory=dict)
    nextpnr_options: tuple[str, ...] = ()

    def platform(self, **options):
        """An instance of the board's amaranth-boards platform."""
        module_name, _, class_name = self.platform_class.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise RuntimeError(
                f"building for {self.name} needs amaranth-boards and the YoWASP toolchain: "
                f"pip install 'maxaccel[toolchain]' ({error})") from None
        return getattr(module, class_name)(**options)


#: The iCE40 boards' core: the run reducer only (the host expands broadcasts and pools through
#: REDUCE), with the shallow pipeline (12 MHz). The same on both, so the HX8K bitstream CI builds
#: is the iCEBreaker's design on a larger device.
_ICE40_CORE = dict(replay_depth=64, max_dims=1, max_operands=1, pool_channels=1,
                   units=("reduce",), reduce_pipeline="shallow", serial_crc=True)

#: The ULX3S's core capacities, on both its devices; the 85F adds the windowed pooling unit.
_ULX3S_CORE = dict(replay_depth=256, max_dims=4, max_operands=4, pool_channels=64)

TARGETS = {t.name: t for t in [
    Target(name="icebreaker", title="1BitSquared iCEBreaker", family="ice40",
           device="iCE40UP5K-SG48", platform_class="amaranth_boards.icebreaker:ICEBreakerPlatform",
           link="uart", baud=DEFAULT_BAUD, link_bytes_per_s=300e3, lanes=1, clock_mhz=12.0,
           core=_ICE40_CORE),
    Target(name="ice40_hx8k_breakout", title="Lattice iCE40-HX8K Breakout Board", family="ice40",
           device="iCE40HX8K-CT256",
           platform_class="amaranth_boards.ice40_hx8k_b_evn:ICE40HX8KBEVNPlatform",
           link="uart", baud=DEFAULT_BAUD, link_bytes_per_s=300e3, lanes=1, clock_mhz=12.0,
           core=_ICE40_CORE),
    Target(name="ulx3s", title="Radiona ULX3S (ECP5 25F)", family="ecp5",
           device="LFE5U-25F-6BG381C", platform_class="amaranth_boards.ulx3s:ULX3S_25F_Platform",
           link="uart", baud=DEFAULT_BAUD, link_bytes_per_s=300e3, lanes=2, clock_mhz=60.0,
           core=dict(_ULX3S_CORE, units=("reduce", "pool", "broadcast"))),
    # 30 MHz, not the 25F's 60: with the unit of extent 13 the 85F's design does not close
    # 60 (39.5 MHz routed), and behind a 3 Mbaud UART a byte a cycle at 30 MHz is still 100
    # times the link (3 Mbaud is 10 cycles a bit; docs/boards.md, "ULX3S 85F").
    Target(name="ulx3s_85f", title="Radiona ULX3S (ECP5 85F)", family="ecp5",
           device="LFE5U-85F-6BG381C", platform_class="amaranth_boards.ulx3s:ULX3S_85F_Platform",
           link="uart", baud=DEFAULT_BAUD, link_bytes_per_s=300e3, lanes=2, clock_mhz=30.0,
           core=dict(_ULX3S_CORE, window_lanes=1, window_extent=13, window_extent_outer=3,
                     window_columns=64, window_plane=1024),
           # With nextpnr's default seed and with seed 2 the router stalls in congestion;
           # seed 3 routes (docs/boards.md, "ULX3S 85F").
           nextpnr_options=("--seed", "3")),
    Target(name="arty_a7_35", title="Digilent Arty A7-35", family="xilinx",
           device="XC7A35TICSG324-1L", platform_class="amaranth_boards.arty_a7:ArtyA7_35Platform",
           link="uart", baud=4_000_000, link_bytes_per_s=400e3, lanes=2, clock_mhz=100.0,
           core=dict(replay_depth=512, max_dims=4, max_operands=4, pool_channels=128,
                     window_lanes=1)),
    # PCIe Gen2 x4: 4 lanes of 5 GT/s with 8b/10b coding, 500 MB/s each, 2.0 GB/s; a TLP
    # carries at most 128 payload bytes (the usual Max_Payload_Size) behind 24 bytes of framing,
    # sequence number, 4-dword header and LCRC (Intel AN 855, "Protocol Overhead"), 1.68 GB/s;
    # about 5% more goes to DLLPs (ACKs, flow-control updates) and SKP ordered sets: 1.6 GB/s.
    Target(name="nitefury", title="RHS Research NiteFury II (Artix-7 M.2, PCIe Gen2 x4)",
           family="xilinx", device="XC7A200T-FBG484-2",
           platform_class="amaranth_boards.nitefury:NitefuryIIPlatform",
           link="xdma", link_bytes_per_s=1.6e9, lanes=4, clock_mhz=125.0, link_word=32,
           core=dict(replay_depth=1024, max_dims=4, max_operands=4, pool_channels=256,
                     window_extent=13, window_extent_outer=3, window_columns=64,
                     window_plane=1024)),
]}


def core_identity(parameters):
    """What ``IDENTIFY`` of a :class:`~maxaccel.hdl.top.Core` made with ``parameters`` reports
    (the core constructed, not elaborated: ``Core.identity_of``), for a host's planners to ask
    what such a board would do; a ``ValueError`` for parameters no core is built with. Loads
    amaranth (the gateware's own definition of its capacities) on first use."""
    from maxaccel.hdl.top import Core
    return Core.identity_of(**parameters)


def check_lanes(lanes):
    """ValueError unless ``lanes`` is a power of two (1, 2, 4, ...)."""
    if not isinstance(lanes, int) or lanes < 1 or lanes & (lanes - 1):
        raise ValueError(f"--lanes must be a power of two (1, 2, 4, ...), not {lanes}")


def target(name):
    """The :class:`Target` called ``name``; a :class:`ValueError` naming the known ones if
    there is none."""
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown board {name!r}; known boards: {', '.join(TARGETS)}") from None


#: How each family's reports count block RAM (the unit of ``block_rams``).
_BLOCK_RAM = {"ice40": "EBR", "ecp5": "DP16KD", "xilinx": "RAMB36"}
#: How the per-board table names each kind of link.
_LINK_NAMES = {"xdma": "PCIe (Xilinx XDMA)"}


def _report_cells(r):
    """The cells of a report's row in :func:`report_markdown` after ``board``: device, link,
    lanes, clock, Fmax, logic, FFs, BRAM, core peak, link peak."""
    if r["fmax_mhz"] is not None:
        fmax = f"{r['fmax_mhz']:.1f} MHz"
    else:
        fmax = "needs Vivado" if r["family"] == "xilinx" else "-"
    link = (f"UART {r['baud'] / 1e6:g} Mbaud" if r["link"] == "uart"
            else _LINK_NAMES.get(r["link"], r["link"]))
    return [r["device"], link, str(r["lanes"]), f"{r['clock_mhz']:g} MHz", fmax,
            f"{r['logic_cells'][0]} / {r['logic_cells'][1]} {r['logic_cell_type']}",
            str(r["flip_flops"]),
            f"{r['block_rams'][0]} / {r['block_rams'][1]} {_BLOCK_RAM[r['family']]}",
            f"{r['core_bytes_per_s'] / 1e6:g} MB/s", f"{r['link_bytes_per_s'] / 1e6:g} MB/s"]


_REPORT_HEADINGS = ["device", "link", "lanes", "clock", "Fmax", "logic", "FFs", "BRAM",
                    "core peak", "link peak"]


def _table(headings, rows):
    return "\n".join(["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
                     + ["| " + " | ".join(row) + " |" for row in rows])


def report_markdown(reports):
    """A markdown table of build reports: the per-board table of ``docs/boards.md`` (a test
    keeps the page's table equal to this one of ``docs/boards/*.json``)."""
    return _table(["board"] + _REPORT_HEADINGS,
                  [[r["board"]] + _report_cells(r) for r in reports])


#: Where the reports of cores built for models are, under :func:`reports_dir`: one
#: ``BOARD-MODEL.json`` per build (``maxaccel build``'s ``report.json`` with ``"models"``,
#: the models the core was chosen for, added).
MODEL_REPORTS = "models"


def _core_text(report):
    """A report's core in a few words: its units, the one element type they serve if built
    for one, and the windowed pooling unit's window lanes, kernel extents (inner / outermost)
    and output columns (its ``IDENTIFY``)."""
    units = "+".join(report["core"]["units"])
    dtype = report["core"].get("dtype")
    if dtype is not None:
        units += f" ({dtype} only)"
    if "window" not in report["core"]["units"]:
        return units
    c = report["capacities"]
    return (f"{units}: {c['window_lanes']} window lane(s), extent "
            f"{c['window_extent']} / {c['window_extent_outer']}, {c['window_columns']} columns")


def model_report_markdown(reports):
    """A markdown table of the reports of cores built for models (:func:`load_model_reports`):
    the models, the core and the per-board table's columns (``docs/boards.md``, "Built for a
    model")."""
    return _table(["board", "models", "core"] + _REPORT_HEADINGS,
                  [[r["board"], ", ".join(r["models"]), _core_text(r)]
                   + _report_cells(r) for r in reports])


def load_model_reports(directory=None):
    """The reports of :data:`MODEL_REPORTS` in ``directory`` (default :func:`reports_dir`), in
    :data:`TARGETS` order, a board's cores for every element type before those of one type,
    then by file name; an empty list if there is none."""
    import json
    import pathlib
    directory = pathlib.Path(reports_dir() if directory is None else directory) / MODEL_REPORTS
    order = {name: k for k, name in enumerate(TARGETS)}
    reports = [json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))]
    return sorted(reports, key=lambda r: (order.get(r["board"], len(order)),
                                          (r.get("core") or {}).get("dtype") is not None))


def reports_dir():
    """Where the board reports of ``docs/boards`` are, wherever the package is installed: in
    a wheel they are package data (``maxaccel/boards/reports``); in a source tree or an
    editable install, ``docs/boards`` beside this folder."""
    import pathlib
    here = pathlib.Path(__file__).resolve().parent
    packaged = here / "reports"
    return packaged if packaged.is_dir() else here.parent / "docs" / "boards"


def load_reports(directory=None):
    """The build reports (``report.json`` of ``maxaccel build``, saved as ``BOARD.json``) in
    ``directory`` (default :func:`reports_dir`), in :data:`TARGETS` order; an empty list if
    there is none."""
    import json
    import pathlib
    directory = reports_dir() if directory is None else directory
    reports = []
    for name in TARGETS:
        path = pathlib.Path(directory) / f"{name}.json"
        if path.exists():
            reports.append(json.loads(path.read_text()))
    return reports
