// C entry points of the compiled virtual board: the maxaccel Core (hdl/top.py) under Verilator,
// driven a whole request at a time so that no Python runs per cycle.
//
// The cycle model is the one of sim/virtual_board.py's stream bench, cycle for cycle: request
// bytes are offered on i back to back while any is pending (the first of a burst from the cycle
// after it is seen), o is always ready, and a handshake is sampled before the rising edge.
// (Verilator spells Amaranth's `i__valid` as `i___05Fvalid`.) The board is quiescent once no
// byte is pending and, for `settle` consecutive cycles, the core has been idle with nothing on o.
//
// A core with a link of LINK_BYTES > 1 bytes per cycle takes words: the next (up to)
// LINK_BYTES pending bytes in the data bits, their count in the bits above; its reply words
// are read the same way. LINK_BYTES is defined by maxaccel.sim.verilator_board.
//
// With BENCH_CORE defined the model is maxaccel.sim.verilator_board.BenchCore: the core's reset
// (for the first `reset_cycles` cycles), `o.ready` and the UART counts are made inside it, so
// `i` is its only input; without, it is a synthesised netlist with the core's own ports.
#include <cstddef>
#include <cstdint>
#include "verilated.h"
#include "Vmaxaccel_core.h"

#ifndef LINK_BYTES
#define LINK_BYTES 1
#endif

namespace {
// A link word in a port of Verilator's integer types (up to 64 bits) or of VlWide words.
template <typename T> void put_bits(T &port, const uint8_t *bytes, size_t count) {
    uint64_t value = 0;
    for (size_t k = 0; k < count; k++) value |= uint64_t(bytes[k]) << (8 * k);
    if (LINK_BYTES > 1) value |= uint64_t(count) << (8 * LINK_BYTES);
    port = static_cast<T>(value);
}
template <std::size_t N> void put_bits(VlWide<N> &port, const uint8_t *bytes, size_t count) {
    for (std::size_t w = 0; w < N; w++) port.at(w) = 0;
    for (size_t k = 0; k < count; k++) port.at(k / 4) |= uint32_t(bytes[k]) << (8 * (k % 4));
    port.at(LINK_BYTES / 4) |= uint32_t(count);     // LINK_BYTES is a multiple of 4 here
}
template <typename T> size_t get_bits(const T &port, uint8_t *bytes) {
    uint64_t value = port;
    size_t count = LINK_BYTES > 1 ? size_t(value >> (8 * LINK_BYTES)) : 1;
    for (size_t k = 0; k < count; k++) bytes[k] = uint8_t(value >> (8 * k));
    return count;
}
template <std::size_t N> size_t get_bits(const VlWide<N> &port, uint8_t *bytes) {
    size_t count = port.at(LINK_BYTES / 4) & 0xff;
    for (size_t k = 0; k < count; k++) bytes[k] = uint8_t(port.at(k / 4) >> (8 * (k % 4)));
    return count;
}

struct Board {
    VerilatedContext context;
    Vmaxaccel_core *top;
    uint64_t cycles = 0;
    uint32_t idle_cycles = 0;
    bool offering = false;      // a request byte is on i this cycle
    Board() : top(new Vmaxaccel_core{&context}) {}
    ~Board() { top->final(); delete top; }
    void tick() {
        top->clk = 0;
        top->eval();
        top->clk = 1;
        top->eval();
        cycles++;
    }
};
}  // namespace

extern "C" {

void *maxaccel_board_new(uint32_t reset_cycles) {
    Board *board = new Board();
    board->top->i___05Fvalid = 0;
#ifndef BENCH_CORE
    board->top->o___05Fready = 1;
    board->top->rst = 1;
#endif
    for (uint32_t k = 0; k < reset_cycles; k++) board->tick();
#ifndef BENCH_CORE
    board->top->rst = 0;
#endif
    return board;
}

void maxaccel_board_delete(void *handle) { delete static_cast<Board *>(handle); }

uint64_t maxaccel_board_cycles(void *handle) { return static_cast<Board *>(handle)->cycles; }

// Runs until `out_capacity` bytes or more came out (returns 0; `out` must have room for
// LINK_BYTES - 1 more), the board is quiescent (1) or
// `max_cycles` cycles have run (2). `*in_taken` and `*out_length` are updated.
int maxaccel_board_run(void *handle, const uint8_t *in, size_t in_length, size_t *in_taken,
                       uint8_t *out, size_t out_capacity, size_t *out_length,
                       uint64_t max_cycles, uint32_t settle) {
    Board *board = static_cast<Board *>(handle);
    Vmaxaccel_core *top = board->top;
    size_t taken = *in_taken, produced = *out_length;
    int verdict = 2;
    board->idle_cycles = 0;
    for (uint64_t n = 0;; n++) {
        if (produced >= out_capacity) { verdict = 0; break; }
        if (board->idle_cycles >= settle && taken == in_length) { verdict = 1; break; }
        if (n >= max_cycles) { verdict = 2; break; }
        bool offered = board->offering;
        size_t word = 0;
        top->i___05Fvalid = offered;
        if (offered) {
            word = in_length - taken < LINK_BYTES ? in_length - taken : LINK_BYTES;
            put_bits(top->i___05Fpayload, in + taken, word);
        }
        top->clk = 0;
        top->eval();
        bool accepted = offered && top->i___05Fready;
        bool output = top->o___05Fvalid;
        uint8_t bytes[LINK_BYTES];
        size_t count = output ? get_bits(top->o___05Fpayload, bytes) : 0;
        bool idle = top->idle;
        top->clk = 1;
        top->eval();
        board->cycles++;
        for (size_t k = 0; k < count; k++) out[produced++] = bytes[k];   // `out` has LINK_BYTES spare
        if (offered) {
            board->idle_cycles = 0;
            if (accepted) {
                taken += word;
                board->offering = taken < in_length;
            }
        } else {
            board->idle_cycles = (idle && !output) ? board->idle_cycles + 1 : 0;
            board->offering = taken < in_length;    // on the bus from the next cycle
        }
    }
    *in_taken = taken;
    *out_length = produced;
    return verdict;
}

}  // extern "C"
