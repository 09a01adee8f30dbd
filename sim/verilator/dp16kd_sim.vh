// Behaviour of the ECP5 DP16KD block RAM, for the netlist board (maxaccel.sim.netlist).
//
// yosys ships DP16KD only as a (* blackbox *) in share/ecp5/cells_sim.v. The netlist board takes
// that declaration (its ports and parameters, unchanged) and includes this file as its body.
// It covers what yosys's ECP5 memory mapping (share/lattice/brams_map_16kd.v) instantiates, and
// the netlist board refuses, by instance name, any DP16KD whose parameters fall outside it
// (Synthesis.check_models):
//
// * true dual port, each port 1, 2, 4, 9 or 18 bits wide (2**14 / width words), or the pseudo
//   dual port of DATA_WIDTH_A = DATA_WIDTH_B = 36: port A writes 512 words of 36 bits (DIA low
//   half, DIB high half; ADA[3:0] byte enables), port B reads them (DOA low, DOB high);
// * 18-bit ports write with byte enables ADA[1:0] (9-bit bytes); narrower ports write their word;
// * REGMODE "NOREG" (the output latch is the read register), CSDECODE "0b000" (a port is
//   selected while its CS pins are 000), every *MUX parameter at its pin (no inversion);
// * WRITEMODE of a port writing: NORMAL keeps its output, WRITETHROUGH shows the new word,
//   READBEFOREWRITE the old one;
// * RESETMODE SYNC (RST zeroes the output at the clock edge whatever CE, and blocks the port's
//   write: yosys's "rdsrst zero ungated block_wr") or ASYNC (RST zeroes the output at once);
// * outputs 0 at start (yosys's "rdinit zero"); contents from INITVAL_00..3F, 18-bit unit u in
//   bits 20*(u%16) .. +17 of INITVAL_(u/16), as brams_map_16kd.v's init_slice writes them;
// * one port reading, at the same clock edge, a word the other port writes: what the hardware
//   returns in the bits being written is not established here, so this model returns them
//   complemented (the old value of every other bit), and a design that relied on either old or
//   new data there shows wrong bits instead of passing by luck. yosys's mapping relies on the
//   bits not being written reading their old value (it delays a write a cycle and bypasses only
//   the written bytes), which this keeps.
//
// Where a narrow (1/2/4-bit) word sits inside its 18-bit unit matters only for INITVAL contents
// and for ports of different widths; the netlist board refuses both for narrow ports.

localparam [20479:0] INITVALS = {
	INITVAL_3F, INITVAL_3E, INITVAL_3D, INITVAL_3C, INITVAL_3B, INITVAL_3A, INITVAL_39, INITVAL_38,
	INITVAL_37, INITVAL_36, INITVAL_35, INITVAL_34, INITVAL_33, INITVAL_32, INITVAL_31, INITVAL_30,
	INITVAL_2F, INITVAL_2E, INITVAL_2D, INITVAL_2C, INITVAL_2B, INITVAL_2A, INITVAL_29, INITVAL_28,
	INITVAL_27, INITVAL_26, INITVAL_25, INITVAL_24, INITVAL_23, INITVAL_22, INITVAL_21, INITVAL_20,
	INITVAL_1F, INITVAL_1E, INITVAL_1D, INITVAL_1C, INITVAL_1B, INITVAL_1A, INITVAL_19, INITVAL_18,
	INITVAL_17, INITVAL_16, INITVAL_15, INITVAL_14, INITVAL_13, INITVAL_12, INITVAL_11, INITVAL_10,
	INITVAL_0F, INITVAL_0E, INITVAL_0D, INITVAL_0C, INITVAL_0B, INITVAL_0A, INITVAL_09, INITVAL_08,
	INITVAL_07, INITVAL_06, INITVAL_05, INITVAL_04, INITVAL_03, INITVAL_02, INITVAL_01, INITVAL_00};
localparam PDP = DATA_WIDTH_A == 36;

reg [17:0] mem [0:1023];
integer unit_index;
initial
	for (unit_index = 0; unit_index < 1024; unit_index = unit_index + 1)
		mem[unit_index] = INITVALS[unit_index * 20 +: 18];

wire [17:0] dia = {DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0};
wire [17:0] dib = {DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0};
wire [13:0] ada = {ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0};
wire [13:0] adb = {ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0};
reg [17:0] doa = 18'd0, dob = 18'd0;
assign {DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0} = doa;
assign {DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0} = dob;

wire sel_a = {CSA2, CSA1, CSA0} == 3'b000;
wire sel_b = {CSB2, CSB1, CSB0} == 3'b000;
wire srst_a = RESETMODE == "SYNC" && RSTA, srst_b = RESETMODE == "SYNC" && RSTB;
wire arst_a = RESETMODE == "ASYNC" && RSTA, arst_b = RESETMODE == "ASYNC" && RSTB;
wire write_a = CEA && sel_a && WEA && !srst_a;
wire write_b = !PDP && CEB && sel_b && WEB && !srst_b;

// A port of `width` bits at address `ad`: its word's place in unit ad[13:4] ...
function [4:0] offset(input integer width, input [13:0] ad);
	case (width)
		9: offset = 9 * ad[3];
		4: offset = 9 * ad[3] + 4 * ad[2];
		2: offset = 9 * ad[3] + 2 * ad[2:1];
		1: offset = 9 * ad[3] + ad[2:0];
		default: offset = 0;
	endcase
endfunction
// ... the unit bits it writes (byte enables ad[1:0] at 18 bits) ...
function [17:0] write_mask(input integer width, input [13:0] ad);
	if (width == 18) write_mask = {{9{ad[1]}}, {9{ad[0]}}};
	else write_mask = ((18'd1 << width) - 18'd1) << offset(width, ad);
endfunction
// ... the unit after writing `data` ...
function [17:0] written(input integer width, input [13:0] ad, input [17:0] data, input [17:0] old);
	written = (old & ~write_mask(width, ad)) | ((data << offset(width, ad)) & write_mask(width, ad));
endfunction
// ... and the word it reads from `unit`.
function [17:0] word(input integer width, input [13:0] ad, input [17:0] unit);
	word = width == 18 ? unit : (unit >> offset(width, ad)) & ((18'd1 << width) - 18'd1);
endfunction

generate if (PDP) begin: pseudo_dual_port
	wire [9:0] low_w = {ada[13:5], 1'b0}, high_w = {ada[13:5], 1'b1};
	wire [9:0] low_r = {adb[13:5], 1'b0}, high_r = {adb[13:5], 1'b1};
	// Bits port A writes in the word pair port B reads at this edge (see the header).
	wire [17:0] hit_low = write_a && ada[13:5] == adb[13:5] ? write_mask(18, {12'd0, ada[1:0]}) : 18'd0;
	wire [17:0] hit_high = write_a && ada[13:5] == adb[13:5] ? write_mask(18, {12'd0, ada[3:2]}) : 18'd0;
	always @(posedge CLKA)
		if (write_a) begin
			mem[low_w] <= written(18, {12'd0, ada[1:0]}, dia, mem[low_w]);
			mem[high_w] <= written(18, {12'd0, ada[3:2]}, dib, mem[high_w]);
		end
	always @(posedge CLKB or posedge arst_b)
		if (arst_b || srst_b) begin
			doa <= 18'd0;
			dob <= 18'd0;
		end else if (CEB && sel_b) begin
			doa <= mem[low_r] ^ hit_low;
			dob <= mem[high_r] ^ hit_high;
		end
end else begin: true_dual_port
	wire [9:0] unit_a = ada[13:4], unit_b = adb[13:4];
	// Bits of the unit a port reads that the other port writes at this edge (see the header).
	wire [17:0] hit_a = write_b && unit_b == unit_a ? write_mask(DATA_WIDTH_B, adb) : 18'd0;
	wire [17:0] hit_b = write_a && unit_a == unit_b ? write_mask(DATA_WIDTH_A, ada) : 18'd0;
	always @(posedge CLKA)
		if (write_a)
			mem[unit_a] <= written(DATA_WIDTH_A, ada, dia, mem[unit_a]);
	always @(posedge CLKB)
		if (write_b)
			mem[unit_b] <= written(DATA_WIDTH_B, adb, dib, mem[unit_b]);
	always @(posedge CLKA or posedge arst_a)
		if (arst_a || srst_a)
			doa <= 18'd0;
		else if (write_a) begin
			if (WRITEMODE_A == "WRITETHROUGH")
				doa <= word(DATA_WIDTH_A, ada, written(DATA_WIDTH_A, ada, dia, mem[unit_a]));
			else if (WRITEMODE_A == "READBEFOREWRITE")
				doa <= word(DATA_WIDTH_A, ada, mem[unit_a]);
		end else if (CEA && sel_a)
			doa <= word(DATA_WIDTH_A, ada, mem[unit_a] ^ hit_a);
	always @(posedge CLKB or posedge arst_b)
		if (arst_b || srst_b)
			dob <= 18'd0;
		else if (write_b) begin
			if (WRITEMODE_B == "WRITETHROUGH")
				dob <= word(DATA_WIDTH_B, adb, written(DATA_WIDTH_B, adb, dib, mem[unit_b]));
			else if (WRITEMODE_B == "READBEFOREWRITE")
				dob <= word(DATA_WIDTH_B, adb, mem[unit_b]);
		end else if (CEB && sel_b)
			dob <= word(DATA_WIDTH_B, adb, mem[unit_b] ^ hit_b);
end endgenerate
