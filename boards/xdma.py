"""The core behind the Xilinx XDMA IP's AXI4-Stream channels, for PCIe boards (NiteFury).

The XDMA IP in AXI4-Stream mode gives one host-to-card (H2C) and one card-to-host (C2H)
stream of ``width``-byte words with ``tkeep`` byte enables and ``tlast``. The host's
``xdma://`` transport writes request bytes to ``/dev/xdma0_h2c_0`` and reads reply bytes from
``/dev/xdma0_c2h_0``; these adapters turn the words into the core's link stream (bytes, or
link words of a whole AXI word) and back.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from maxaccel.hdl.kit import Checked
from maxaccel.hdl.linkword import link_signature, word_fields

__all__ = ["axi_stream_signature", "WordsToBytes", "BytesToWords", "CoreOverAXIStream"]


def axi_stream_signature(width):
    """AXI4-Stream of ``width``-byte words, as the XDMA IP's ``m_axis_h2c`` (source side)."""
    return wiring.Signature({
        "tdata": Out(8 * width),
        "tkeep": Out(width),
        "tlast": Out(1),
        "tvalid": Out(1),
        "tready": In(1),
    })


class _AdapterLink(Checked):
    """An adapter's parameters, checked before it exists."""

    @classmethod
    def check_parameters(cls, width=8, link_bytes=1):
        if link_bytes not in (1, width, 2 * width):
            raise ValueError(f"link_bytes must be 1, the AXI width {width} or twice it, "
                             f"not {link_bytes!r}")


class WordsToBytes(_AdapterLink, wiring.Component):
    """H2C: AXI4-Stream words to the core's link stream, the bytes ``tkeep`` marks, in order.

    Parameters
    ----------
    width : int
        Bytes per word (16 for the XDMA's 128-bit interface as the NiteFury configures it).
    link_bytes : int
        Bytes per transfer of ``o``: 1 (a byte stream, any ``tkeep``), ``width`` (the word
        itself, as a :func:`~maxaccel.hdl.linkword.link_signature` word of as many bytes as
        ``tkeep`` marks) or ``2 * width`` (two words paired into one link word). On word links
        ``tkeep`` must mark bytes from 0 up, which is what the XDMA's H2C channel gives: every
        byte, or the low bytes of a transfer's last beat. A word with a gap would reach the
        core with its bytes shifted, and the frame check would refuse it.

    Ports
    -----
    axis : In(axi_stream_signature(width))
        Words from the XDMA IP. ``tlast`` (the end of the host's ``write``) matters only when
        pairing: a word with ``tlast``, or with bytes missing, is not held for a partner. The
        link stream carries frames that the command engine delimits itself.
    o : Out(link_signature(link_bytes))
        Bytes to the core.

    Latency and throughput
    ----------------------
    ``link_bytes == width``: none; a word per cycle, a word keeping no byte is dropped.
    ``link_bytes == 2 * width``: a word per cycle in; the first word of a pair waits in a
    register, and goes out with the second in the cycle that one arrives (combinationally),
    so a link word leaves every second cycle at the AXI side's full rate; a first word that
    is a transfer's last (``tlast``, or not every byte kept) goes out alone the cycle after.
    ``link_bytes == 1``: a word is taken when its last kept byte goes out (or at once if it
    keeps none); bytes leave one per cycle, the first the cycle after its word is taken.
    """

    def __init__(self, width=8, link_bytes=1):
        self.width = width
        self.link_bytes = link_bytes
        super().__init__({"axis": In(axi_stream_signature(width)),
                          "o": Out(link_signature(link_bytes))})

    def elaborate(self, platform):
        m = Module()
        width = self.width
        if self.link_bytes == width:
            kept = self._kept(m)
            m.d.comb += [
                self.o.valid.eq(self.axis.tvalid & (kept != 0)),
                self.o.payload.data.as_value().eq(self.axis.tdata),
                self.o.payload.count.eq(kept),
                self.axis.tready.eq(self.o.ready | (kept == 0)),
            ]
            return m
        if self.link_bytes == 2 * width:
            return self._pair(m)

        data = Signal(8 * width)
        keep = Signal(width)           # bytes of the held word not yet sent
        # The lowest kept byte goes next.
        lowest = Signal(range(width))
        for index in reversed(range(width)):
            with m.If(keep[index]):
                m.d.comb += lowest.eq(index)
        remaining = Signal(width)
        m.d.comb += remaining.eq(keep & ~(1 << lowest))

        m.d.comb += [
            self.o.valid.eq(keep.any()),
            self.o.payload.eq(data.word_select(lowest, 8)),
        ]
        sent = self.o.valid & self.o.ready
        with m.If(sent):
            m.d.sync += keep.eq(remaining)
        # Take the next word once the held one is (or is about to be) all sent.
        m.d.comb += self.axis.tready.eq(~keep.any() | (sent & ~remaining.any()))
        with m.If(self.axis.tvalid & self.axis.tready):
            m.d.sync += [data.eq(self.axis.tdata), keep.eq(self.axis.tkeep)]
        return m

    def _kept(self, m):
        """The number of bytes the incoming word keeps (``tkeep`` marks them from byte 0)."""
        kept = Signal(range(self.width + 1))
        m.d.comb += kept.eq(sum(self.axis.tkeep[k] for k in range(self.width)))
        return kept

    def _pair(self, m):
        """Two AXI words to one link word: the first held, the second passed straight on."""
        width = self.width
        kept = self._kept(m)
        held = Signal()                     # a first word waits in `first`
        first = Signal(8 * width)
        first_count = Signal(range(width + 1))
        alone = Signal()                    # it ends a transfer: no partner will follow
        taken = self.axis.tvalid & self.axis.tready
        hold_incoming = [held.eq(1), first.eq(self.axis.tdata), first_count.eq(kept),
                         alone.eq(self.axis.tlast | (kept != width))]
        with m.If(~held):
            # Take the word into the register (a word keeping no byte is dropped).
            m.d.comb += self.axis.tready.eq(1)
            with m.If(self.axis.tvalid & (kept != 0)):
                m.d.sync += hold_incoming
        with m.Elif(alone):
            # The held word goes out by itself; the incoming one may take its place.
            m.d.comb += [
                self.o.valid.eq(1),
                self.o.payload.data.as_value().eq(first),
                self.o.payload.count.eq(first_count),
                self.axis.tready.eq(self.o.ready),
            ]
            with m.If(self.o.ready):
                m.d.sync += held.eq(0)
                with m.If(taken & (kept != 0)):
                    m.d.sync += hold_incoming
        with m.Else():
            # A full first word: out together with the next word that keeps bytes.
            m.d.comb += [
                self.o.valid.eq(self.axis.tvalid & (kept != 0)),
                self.o.payload.data.as_value().eq(Cat(first, self.axis.tdata)),
                self.o.payload.count.eq(width + kept),
                self.axis.tready.eq(self.o.ready | (kept == 0)),
            ]
            with m.If(taken):
                with m.If(kept != 0):
                    m.d.sync += held.eq(0)
                with m.Elif(self.axis.tlast):
                    m.d.sync += alone.eq(1)         # an empty last word ends the transfer
        return m


class BytesToWords(_AdapterLink, wiring.Component):
    """C2H: the core's link stream to AXI4-Stream words; a reply ends with ``tlast``.

    Link words (or bytes) are appended to a buffer of ``width + link_bytes - 1`` bytes; every
    word but a reply's last goes out full (the XDMA's C2H channel wants every ``tkeep`` bit set but on the last
    beat). A full word is held until more bytes show that more is coming, so the last word of
    a reply, full or not, can carry ``tlast``: when ``flush`` is high (the core is idle:
    nothing more will come without a new request) and nothing is arriving, the held bytes go
    out, the last word with ``tkeep`` marking its bytes and ``tlast`` set, which ends the
    host's read at once.

    Parameters
    ----------
    width : int
        Bytes per AXI word.
    link_bytes : int
        Bytes per transfer of ``i``: 1 (a byte stream), ``width`` or ``2 * width``
        (:func:`~maxaccel.hdl.linkword.link_signature` words; a word of two AXI words is split
        in two).

    Ports
    -----
    i : In(link_signature(link_bytes))
        Bytes from the core.
    flush : In(1)
        The core is idle (``Core.idle``).
    axis : Out(axi_stream_signature(width))
        Words to the XDMA IP.

    Latency and throughput
    ----------------------
    An AXI word per cycle out: one link transfer per cycle in up to ``width`` bytes, one every
    second cycle of ``2 * width`` (``i.ready`` falls while the buffer has no room for one). A
    full word goes out the cycle after the buffer holds bytes beyond it or the transfer that
    follows it arrives, or, at the end of a reply, the cycles after ``flush`` rises (one a
    word the buffer holds).
    """

    def __init__(self, width=8, link_bytes=1):
        self.width = width
        self.link_bytes = link_bytes
        super().__init__({"i": In(link_signature(link_bytes)), "flush": In(1),
                          "axis": Out(axi_stream_signature(width))})

    def elaborate(self, platform):
        m = Module()
        width = self.width
        # The bytes not yet sent: `count` of `data`, from byte 0.
        capacity = width + self.link_bytes - 1
        data = Signal(8 * capacity)
        count = Signal(range(capacity + 1))
        full = count >= width

        incoming, incoming_count = word_fields(self.i.payload, self.link_bytes)

        out_busy = self.axis.tvalid & ~self.axis.tready
        with m.If(self.axis.tready):
            m.d.sync += self.axis.tvalid.eq(0)

        # Taken if a whole transfer fits, counting a full word that can be handed over this
        # cycle as gone (it goes if the transfer arrives). On links of up to `width` bytes
        # that is: unless a full word is waiting and cannot be handed over.
        m.d.comb += self.i.ready.eq(
            Mux(full & ~out_busy, count - width, count) + self.link_bytes <= capacity)
        arriving = self.i.valid & self.i.ready
        ending = self.flush & ~self.i.valid & ~out_busy & (count != 0)
        # A full word goes once more bytes are held or arriving (so it is not the reply's
        # last), or at the end, as the last only if exactly full.
        send_full = full & ((~out_busy & (count > width)) | arriving | ending)
        send_last = ending & (count <= width)
        sent = Mux(send_full, width, Mux(send_last, count, 0))
        with m.If(send_full | send_last):
            m.d.sync += [
                self.axis.tvalid.eq(1),
                self.axis.tdata.eq(data[:8 * width]),
                self.axis.tkeep.eq(Mux(send_full, (1 << width) - 1,
                                       (Const(1, width + 1) << count) - 1)),
                self.axis.tlast.eq(send_last),
            ]
        kept = Signal.like(data)
        position = Signal.like(count)           # where the arriving bytes go
        m.d.comb += [kept.eq(data >> (sent * 8)), position.eq(count - sent)]
        with m.If(arriving):
            m.d.sync += [
                data.eq(kept | (incoming << (position * 8))),
                count.eq(position + incoming_count),
            ]
        with m.Elif(send_full | send_last):
            m.d.sync += [data.eq(kept), count.eq(position)]
        return m


class CoreOverAXIStream(wiring.Component):
    """:class:`~maxaccel.hdl.top.Core` between the XDMA IP's H2C and C2H AXI4-Stream channels.

    Parameters
    ----------
    width : int
        Bytes per AXI4-Stream word (16: the XDMA's 128-bit interface on the NiteFury).
    link_bytes : int
        The core's link width: 1 (bytes), ``width`` (an AXI word per cycle each way) or
        ``2 * width`` (two AXI words paired into a link word: the core has twice the AXI
        side's rate). Needs ``8 * lanes >= link_bytes``.
    **core_parameters
        Passed to :class:`~maxaccel.hdl.top.Core`.

    Ports
    -----
    h2c : In(axi_stream_signature(width))
        Request words from the host (``m_axis_h2c`` of the IP).
    c2h : Out(axi_stream_signature(width))
        Reply words to the host (``s_axis_c2h`` of the IP); each reply ends with ``tlast``.

    Latency and throughput
    ----------------------
    The core's: ``link_bytes`` bytes per cycle each way for the data (at most ``width`` on
    the AXI side), plus a cycle in the C2H adapter (and in the H2C one for a byte link or
    paired words) and, at the end of a reply, the cycles until the core reports idle.
    """

    def __init__(self, width=8, link_bytes=1, **core_parameters):
        from maxaccel.hdl.top import Core
        self.width = width
        self.link_bytes = link_bytes
        self.core = Core(link_bytes=link_bytes, **core_parameters)
        self.identity = self.core.identity
        super().__init__({"h2c": In(axi_stream_signature(width)),
                          "c2h": Out(axi_stream_signature(width))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        m.submodules.h2c = h2c = WordsToBytes(self.width, self.link_bytes)
        m.submodules.c2h = c2h = BytesToWords(self.width, self.link_bytes)
        wiring.connect(m, wiring.flipped(self.h2c), h2c.axis)
        wiring.connect(m, h2c.o, core.i)
        wiring.connect(m, core.o, c2h.i)
        wiring.connect(m, c2h.axis, wiring.flipped(self.c2h))
        m.d.comb += c2h.flush.eq(core.idle)
        return m


#: Tcl that creates the XDMA IP the NiteFury top instantiates as ``xdma_0`` (PG195): PCIe Gen2
#: x4, AXI4-Stream with one H2C and one C2H channel, 128-bit words at 125 MHz (Gen2 x4 moves
#: 2 GB/s raw: 16 bytes at 125 MHz match it; 64-bit words would need 250 MHz).
XDMA_IP_TCL = """\
create_ip -name xdma -vendor xilinx.com -library ip -module_name xdma_0
set_property -dict [list \\
    CONFIG.mode_selection {Advanced} \\
    CONFIG.pl_link_cap_max_link_width {X4} \\
    CONFIG.pl_link_cap_max_link_speed {5.0_GT/s} \\
    CONFIG.axi_data_width {128_bit} \\
    CONFIG.axisten_freq {125} \\
    CONFIG.xdma_axi_intf_mm {AXI_Stream} \\
    CONFIG.xdma_rnum_chnl {1} \\
    CONFIG.xdma_wnum_chnl {1} \\
    CONFIG.pf0_device_id {7024} \\
    CONFIG.pciebar2axibar_axist_bypass {0x0000000000000000} \\
] [get_ips xdma_0]
generate_target all [get_ips xdma_0]
synth_ip [get_ips xdma_0]
"""

#: The PCIe reference clock (100 MHz from the M.2 slot) for timing analysis.
XDMA_XDC = "create_clock -name pcie_refclk -period 10.000 [get_ports pcie_0__clk__p]\n"

XDMA_WIDTH = 16     # bytes per AXI4-Stream word, as XDMA_IP_TCL configures


class XDMATop(wiring.Component):
    """The NiteFury top level: the XDMA IP (``xdma_0``, a black box created by
    :data:`XDMA_IP_TCL`) on the board's PCIe lanes, and :class:`CoreOverAXIStream` on its
    AXI4-Stream channels, clocked by the IP's ``axi_aclk`` (125 MHz) and held in reset while
    ``axi_aresetn`` is low. ``link_bytes``: the core's link word, the target's ``link_word``
    (the NiteFury's 32 bytes, two AXI words: 4 GB/s at 125 MHz, 2.5 times the 1.6 GB/s PCIe
    Gen2 x4 carries, so the core is not the limit whatever the operation; needs ``lanes >=
    4``). The host reaches it with ``open_device("xdma:///dev/xdma0")``.
    """

    def __init__(self, *, link_bytes, **core_parameters):
        self.adapter = CoreOverAXIStream(XDMA_WIDTH, link_bytes=link_bytes, **core_parameters)
        self.identity = self.adapter.identity
        super().__init__({})

    def elaborate(self, platform):
        from amaranth.hdl import ClockDomain, Instance
        from amaranth.lib import io

        m = Module()
        m.domains.sync = sync = ClockDomain("sync")
        m.submodules.adapter = adapter = self.adapter
        pcie = platform.request("pcie", 0, dir="-")     # see nitefury_platform()
        m.submodules.perst = perst_buffer = io.Buffer("i", pcie.rst)
        refclk = Signal()
        m.submodules.refclk = Instance("IBUFDS_GTE2", i_I=pcie.clk.p, i_IB=pcie.clk.n,
                                       i_CEB=0, o_O=refclk)
        aclk, aresetn, link_up = Signal(), Signal(), Signal()
        h2c, c2h = adapter.h2c, adapter.c2h
        m.submodules.xdma = Instance(
            "xdma_0",
            i_sys_clk=refclk, i_sys_rst_n=~perst_buffer.i,
            o_pci_exp_txp=pcie.tx.p, o_pci_exp_txn=pcie.tx.n,
            i_pci_exp_rxp=pcie.rx.p, i_pci_exp_rxn=pcie.rx.n,
            o_axi_aclk=aclk, o_axi_aresetn=aresetn, o_user_lnk_up=link_up,
            i_usr_irq_req=0,
            o_m_axis_h2c_tdata_0=h2c.tdata, o_m_axis_h2c_tkeep_0=h2c.tkeep,
            o_m_axis_h2c_tlast_0=h2c.tlast, o_m_axis_h2c_tvalid_0=h2c.tvalid,
            i_m_axis_h2c_tready_0=h2c.tready,
            i_s_axis_c2h_tdata_0=c2h.tdata, i_s_axis_c2h_tkeep_0=c2h.tkeep,
            i_s_axis_c2h_tlast_0=c2h.tlast, i_s_axis_c2h_tvalid_0=c2h.tvalid,
            o_s_axis_c2h_tready_0=c2h.tready)
        m.d.comb += [sync.clk.eq(aclk), sync.rst.eq(~aresetn)]
        return m


def nitefury_platform():
    """amaranth-boards' NiteFury II platform with its PCIe resource corrected for the XDMA top:
    PERST# is an input to the card (the board file declares an output), and its pull-up is
    written as Vivado wants it (the board file's integer attribute breaks the Tcl). The pins are
    the board file's."""
    from amaranth.build import Attrs, DiffPairs, PinsN, Resource, Subsignal
    from amaranth_boards.nitefury import NitefuryIIPlatform

    class NitefuryIIPCIePlatform(NitefuryIIPlatform):
        resources = [r for r in NitefuryIIPlatform.resources if r.name != "pcie"] + [
            Resource("pcie", 0,
                     Subsignal("rst", PinsN("J1", dir="i"),
                               Attrs(IOSTANDARD="LVCMOS33", PULLUP="TRUE")),
                     Subsignal("clk", DiffPairs(p="F6", n="E6", dir="i")),
                     Subsignal("rx", DiffPairs(p="B10 B8 D11 D9", n="A10 A8 C11 C9", dir="i")),
                     Subsignal("tx", DiffPairs(p="B6 B4 D5 D7", n="A6 A4 C5 C7", dir="o"))),
        ]

    return NitefuryIIPCIePlatform()
