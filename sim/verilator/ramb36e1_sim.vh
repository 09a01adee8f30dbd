// The RAMB36E1 block RAM's pins and contents, for the behaviour in ramb_sim.vh (see its header).
// Included as the body of yosys's own declaration of RAMB36E1 (share/xilinx/cells_sim.v), whose
// ports and parameters stay as yosys has them.

localparam RD = 32, RP = 4;       // data and parity bits of a row (a 36-bit word)
localparam ROWS = 1024, AB = 15;  // rows; address bits (ADDR[15] only cascades: refused)
localparam [32767:0] INITS = {
	INIT_7F, INIT_7E, INIT_7D, INIT_7C, INIT_7B, INIT_7A, INIT_79, INIT_78, INIT_77, INIT_76,
	INIT_75, INIT_74, INIT_73, INIT_72, INIT_71, INIT_70, INIT_6F, INIT_6E, INIT_6D, INIT_6C,
	INIT_6B, INIT_6A, INIT_69, INIT_68, INIT_67, INIT_66, INIT_65, INIT_64, INIT_63, INIT_62,
	INIT_61, INIT_60, INIT_5F, INIT_5E, INIT_5D, INIT_5C, INIT_5B, INIT_5A, INIT_59, INIT_58,
	INIT_57, INIT_56, INIT_55, INIT_54, INIT_53, INIT_52, INIT_51, INIT_50, INIT_4F, INIT_4E,
	INIT_4D, INIT_4C, INIT_4B, INIT_4A, INIT_49, INIT_48, INIT_47, INIT_46, INIT_45, INIT_44,
	INIT_43, INIT_42, INIT_41, INIT_40, INIT_3F, INIT_3E, INIT_3D, INIT_3C, INIT_3B, INIT_3A,
	INIT_39, INIT_38, INIT_37, INIT_36, INIT_35, INIT_34, INIT_33, INIT_32, INIT_31, INIT_30,
	INIT_2F, INIT_2E, INIT_2D, INIT_2C, INIT_2B, INIT_2A, INIT_29, INIT_28, INIT_27, INIT_26,
	INIT_25, INIT_24, INIT_23, INIT_22, INIT_21, INIT_20, INIT_1F, INIT_1E, INIT_1D, INIT_1C,
	INIT_1B, INIT_1A, INIT_19, INIT_18, INIT_17, INIT_16, INIT_15, INIT_14, INIT_13, INIT_12,
	INIT_11, INIT_10, INIT_0F, INIT_0E, INIT_0D, INIT_0C, INIT_0B, INIT_0A, INIT_09, INIT_08,
	INIT_07, INIT_06, INIT_05, INIT_04, INIT_03, INIT_02, INIT_01, INIT_00};
localparam [4095:0] INITPS = {
	INITP_0F, INITP_0E, INITP_0D, INITP_0C, INITP_0B, INITP_0A, INITP_09, INITP_08, INITP_07,
	INITP_06, INITP_05, INITP_04, INITP_03, INITP_02, INITP_01, INITP_00};
wire [AB-1:0] addr_a = ADDRARDADDR[AB-1:0], addr_b = ADDRBWRADDR[AB-1:0];
wire [RD+RP-1:0] di_a = {DIPADIP, DIADI}, di_b = {DIPBDIP, DIBDI};
wire [RP-1:0] we_a = WEA;
wire [2*RP-1:0] we_b = WEBWE;
wire [RD+RP-1:0] do_a, do_b;
assign {DOPADOP, DOADO} = do_a;
assign {DOPBDOP, DOBDO} = do_b;
// No cascade (RAM_EXTENSION "NONE") and no ECC: these outputs are constant.
assign {CASCADEOUTA, CASCADEOUTB, SBITERR, DBITERR} = 4'b0;
assign ECCPARITY = 8'b0;
assign RDADDRECC = 9'b0;

`include "ramb_sim.vh"
