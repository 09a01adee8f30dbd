// The RAMB18E1 block RAM's pins and contents, for the behaviour in ramb_sim.vh (see its header).
// Included as the body of yosys's own declaration of RAMB18E1 (share/xilinx/cells_sim.v), whose
// ports and parameters stay as yosys has them.

localparam RD = 16, RP = 2;       // data and parity bits of a row (an 18-bit word)
localparam ROWS = 1024, AB = 14;  // rows; address bits (a bit address for 1-bit ports)
localparam [16383:0] INITS = {
	INIT_3F, INIT_3E, INIT_3D, INIT_3C, INIT_3B, INIT_3A, INIT_39, INIT_38, INIT_37, INIT_36,
	INIT_35, INIT_34, INIT_33, INIT_32, INIT_31, INIT_30, INIT_2F, INIT_2E, INIT_2D, INIT_2C,
	INIT_2B, INIT_2A, INIT_29, INIT_28, INIT_27, INIT_26, INIT_25, INIT_24, INIT_23, INIT_22,
	INIT_21, INIT_20, INIT_1F, INIT_1E, INIT_1D, INIT_1C, INIT_1B, INIT_1A, INIT_19, INIT_18,
	INIT_17, INIT_16, INIT_15, INIT_14, INIT_13, INIT_12, INIT_11, INIT_10, INIT_0F, INIT_0E,
	INIT_0D, INIT_0C, INIT_0B, INIT_0A, INIT_09, INIT_08, INIT_07, INIT_06, INIT_05, INIT_04,
	INIT_03, INIT_02, INIT_01, INIT_00};
localparam [2047:0] INITPS = {
	INITP_07, INITP_06, INITP_05, INITP_04, INITP_03, INITP_02, INITP_01, INITP_00};
wire [AB-1:0] addr_a = ADDRARDADDR, addr_b = ADDRBWRADDR;
wire [RD+RP-1:0] di_a = {DIPADIP, DIADI}, di_b = {DIPBDIP, DIBDI};
wire [RP-1:0] we_a = WEA;
wire [2*RP-1:0] we_b = WEBWE;
wire [RD+RP-1:0] do_a, do_b;
assign {DOPADOP, DOADO} = do_a;
assign {DOPBDOP, DOBDO} = do_b;

`include "ramb_sim.vh"
