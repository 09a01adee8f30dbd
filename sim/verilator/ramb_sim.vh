// Behaviour of the Xilinx 7-series block RAMs RAMB18E1 and RAMB36E1, for the netlist board
// (maxaccel.sim.netlist).
//
// yosys ships these cells in share/xilinx/cells_sim.v with their ports, parameters and timing but
// no contents (their outputs would read 0). The netlist board keeps that declaration and
// includes ramb18e1_sim.vh or ramb36e1_sim.vh before its endmodule; each names the cell's pins
// and INIT/INITP contents for this file (RD data and RP parity bits a row, ROWS rows, AB address
// bits, di_a/di_b/we_a/we_b/addr_a/addr_b in, do_a/do_b out). It covers what yosys's Xilinx
// block-RAM mapping (share/xilinx/brams_xc6v_map.v, from brams_xc4v.txt) instantiates, and the
// netlist board refuses, by instance name, any RAMB whose parameters fall outside it
// (Synthesis.check_models, ramb_problems) or whose two ports, both used, run from different
// clocks (all of it runs at port A's clock edge, port B's if port A is unused):
//
// * RAM_MODE "TDP": two ports, each reading READ_WIDTH and writing WRITE_WIDTH bits (0 for a
//   direction it does not use; 1, 2, 4, 9, 18 and, on RAMB36E1, 36). A word of width W sits at
//   bit address ADDR (the low log2 bits of its data width ignored), its data bits in the row's
//   data bits (INIT_xx, bit n of the concatenation at x1 address n), its parity bits (9, 18 and
//   36-bit words) in the row's parity bits (INITP_xx); byte lane k of a row (data bits 8k+7..8k
//   and parity bit k) is written only while WE[k] is set. yosys replicates its enables over WE
//   ({4{WR_EN}}), so a lane's enable is the same whichever WE bit a narrow word is read to use.
// * RAM_MODE "SDP": one word of 2*(RD+RP) bits (36 on RAMB18E1, 72 on RAMB36E1): port B's pins
//   write it (low row DIADI/DIPADIP, high row DIBDI/DIPBDIP, WEBWE one bit a byte lane), port
//   A's pins read it (DOADO/DOPADOP low, DOBDO/DOPBDOP high).
// * WRITE_MODE of a port writing: WRITE_FIRST shows the word as written, READ_FIRST the word
//   before, NO_CHANGE keeps the output.
// * DOA_REG = DOB_REG = 0 (the output latch is the read register); EN gates reads, writes and
//   RSTRAM, which sets the latch to SRVAL at the edge (the write still happens); the latch
//   starts at INIT_A/INIT_B. INIT_A/B and SRVAL_A/B are in yosys's ival layout: parity bits
//   above data bits; in SDP, INIT_A/SRVAL_A is the low row, INIT_B/SRVAL_B the high one.
// * One port reading, at the same clock edge, a word the other port writes (7-series, UG473,
//   "Conflict Avoidance", synchronous clocks, RDADDR_COLLISION_HWCONFIG "DELAYED_WRITE"): the
//   read gives the old data when the writing port is READ_FIRST; otherwise the data read is
//   invalid, and this model returns the whole word read complemented, so a design relying on it
//   shows wrong bits instead of passing by luck. Both ports writing the same bits at the same
//   edge leave them undefined: here the complement of what port A writes.

localparam ROW = RD + RP, RDB = $clog2(RD);
localparam SDP = RAM_MODE == "SDP";
localparam READ_FIRST_A = WRITE_MODE_A == "READ_FIRST", READ_FIRST_B = WRITE_MODE_B == "READ_FIRST";
localparam [ROW-1:0] ONE = 1;
// The clock of both ports: port A's, or port B's if only B is used (a single-port memory).
localparam USED_A = SDP || READ_WIDTH_A != 0 || WRITE_WIDTH_A != 0;
wire clock = USED_A ? CLKARDCLK : CLKBWRCLK;

reg [ROW-1:0] mem [0:ROWS-1];
integer row_index;
initial
	for (row_index = 0; row_index < ROWS; row_index = row_index + 1)
		mem[row_index] = {INITPS[row_index * RP +: RP], INITS[row_index * RD +: RD]};

// A word of width w: its data and parity bits ...
function integer data_bits(input integer w);
	data_bits = w <= 4 ? w : 8 * (w / 9);
endfunction
function integer parity_bits(input integer w);
	parity_bits = w <= 4 ? 0 : w / 9;
endfunction
// ... where its data start in the row at address ad ...
function integer offset(input integer w, input [AB-1:0] ad);
	offset = ad[RDB-1:0] & ~(data_bits(w) - 1);
endfunction
// ... the row bits it occupies ...
function [ROW-1:0] word_mask(input integer w, input [AB-1:0] ad);
	word_mask = (((ONE << data_bits(w)) - ONE) << offset(w, ad))
		| (((ONE << parity_bits(w)) - ONE) << (RD + offset(w, ad) / 8));
endfunction
// ... the port value (data from bit 0, parity from bit RD) placed in the row ...
function [ROW-1:0] place(input integer w, input [AB-1:0] ad, input [ROW-1:0] value);
	place = ((value & ((ONE << data_bits(w)) - ONE)) << offset(w, ad))
		| (((value >> RD) & ((ONE << parity_bits(w)) - ONE)) << (RD + offset(w, ad) / 8));
endfunction
// ... and the port value read from a row.
function [ROW-1:0] pick(input integer w, input [AB-1:0] ad, input [ROW-1:0] row);
	pick = ((row >> offset(w, ad)) & ((ONE << data_bits(w)) - ONE))
		| (((row >> (RD + offset(w, ad) / 8)) & ((ONE << parity_bits(w)) - ONE)) << RD);
endfunction
// A port value from yosys's ival layout (INIT_A/B, SRVAL_A/B: parity above data).
function [ROW-1:0] from_ival(input integer w, input [71:0] value);
	from_ival = (value[ROW-1:0] & ((ONE << data_bits(w)) - ONE))
		| (((value[ROW-1:0] >> data_bits(w)) & ((ONE << parity_bits(w)) - ONE)) << RD);
endfunction
// The row bits of the byte lanes a write enable selects.
function [ROW-1:0] lanes(input [RP-1:0] we);
	integer k;
	lanes = 0;
	for (k = 0; k < RP; k = k + 1)
		if (we[k])
			lanes = lanes | (((ONE << 8) - ONE) << (8 * k)) | (ONE << (RD + k));
endfunction

reg [ROW-1:0] out_a, out_b;
assign do_a = out_a;
assign do_b = out_b;

generate if (SDP) begin: simple_dual_port
	initial begin
		out_a = INIT_A[ROW-1:0];
		out_b = INIT_B[ROW-1:0];
	end
	wire [AB-RDB-2:0] word_r = addr_a[AB-1:RDB+1], word_w = addr_b[AB-1:RDB+1];
	wire [ROW-1:0] mask_low = ENBWREN ? lanes(we_b[RP-1:0]) : 0;
	wire [ROW-1:0] mask_high = ENBWREN ? lanes(we_b[2*RP-1:RP]) : 0;
	wire [ROW-1:0] low = mem[{word_w, 1'b0}], high = mem[{word_w, 1'b1}];
	// The word read is the one being written, and the write mode does not make that valid.
	wire [ROW-1:0] invalid = !READ_FIRST_A && word_r == word_w && |(mask_low | mask_high) ? ~0 : 0;
	always @(posedge clock) begin
		if (|mask_low)
			mem[{word_w, 1'b0}] <= (low & ~mask_low) | (di_a & mask_low);
		if (|mask_high)
			mem[{word_w, 1'b1}] <= (high & ~mask_high) | (di_b & mask_high);
		if (ENARDEN) begin
			if (RSTRAMARSTRAM) begin
				out_a <= SRVAL_A[ROW-1:0];
				out_b <= SRVAL_B[ROW-1:0];
			end else begin
				out_a <= mem[{word_r, 1'b0}] ^ invalid;
				out_b <= mem[{word_r, 1'b1}] ^ invalid;
			end
		end
	end
end else begin: true_dual_port
	initial begin
		out_a = from_ival(READ_WIDTH_A, INIT_A);
		out_b = from_ival(READ_WIDTH_B, INIT_B);
	end
	wire [AB-RDB-1:0] row_a = addr_a[AB-1:RDB], row_b = addr_b[AB-1:RDB];
	// The row bits each port writes at this edge (none for a port that does not write).
	wire [ROW-1:0] mask_a = WRITE_WIDTH_A != 0 && ENARDEN ? word_mask(WRITE_WIDTH_A, addr_a) & lanes(we_a) : 0;
	wire [ROW-1:0] mask_b = WRITE_WIDTH_B != 0 && ENBWREN ? word_mask(WRITE_WIDTH_B, addr_b) & lanes(we_b[RP-1:0]) : 0;
	wire [ROW-1:0] old_a = mem[row_a], old_b = mem[row_b];
	wire [ROW-1:0] put_a = place(WRITE_WIDTH_A, addr_a, di_a), put_b = place(WRITE_WIDTH_B, addr_b, di_b);
	wire [ROW-1:0] after_a = (old_a & ~mask_a) | (put_a & mask_a);
	wire [ROW-1:0] after_b = (old_b & ~mask_b) | (put_b & mask_b);
	wire same_row = row_a == row_b;
	wire [ROW-1:0] after_both = (after_b & ~mask_a) | (put_a & mask_a & ~mask_b) | (~put_a & mask_a & mask_b);
	// A port's read made invalid by the other port writing into the word it reads.
	wire invalid_a = same_row && !READ_FIRST_B && |(mask_b & word_mask(READ_WIDTH_A, addr_a));
	wire invalid_b = same_row && !READ_FIRST_A && |(mask_a & word_mask(READ_WIDTH_B, addr_b));
	always @(posedge clock) begin
		if (same_row) begin
			if (|(mask_a | mask_b))
				mem[row_a] <= after_both;
		end else begin
			if (|mask_a)
				mem[row_a] <= after_a;
			if (|mask_b)
				mem[row_b] <= after_b;
		end
		if (ENARDEN && READ_WIDTH_A != 0) begin
			if (RSTRAMARSTRAM)
				out_a <= from_ival(READ_WIDTH_A, SRVAL_A);
			else if (!(|mask_a && WRITE_MODE_A == "NO_CHANGE"))
				out_a <= pick(READ_WIDTH_A, addr_a,
				              |mask_a && WRITE_MODE_A == "WRITE_FIRST" ? after_a : old_a)
				         ^ (invalid_a ? pick(READ_WIDTH_A, addr_a, ~0) : 0);
		end
		if (ENBWREN && READ_WIDTH_B != 0) begin
			if (RSTRAMB)
				out_b <= from_ival(READ_WIDTH_B, SRVAL_B);
			else if (!(|mask_b && WRITE_MODE_B == "NO_CHANGE"))
				out_b <= pick(READ_WIDTH_B, addr_b,
				              |mask_b && WRITE_MODE_B == "WRITE_FIRST" ? after_b : old_b)
				         ^ (invalid_b ? pick(READ_WIDTH_B, addr_b, ~0) : 0);
		end
	end
end endgenerate
