// C entry point of the exhaustive 16-bit check: maxaccel's LaneMax (hdl/lane.py) under
// Verilator, fed every ordered pair (a, b) of 16-bit operands, four pairs per cycle (the lane
// holds four 16-bit elements), with the lane's pipeline kept full.
#include <cstddef>
#include <cstdint>
#include "verilated.h"
#include "Vmaxaccel_lane.h"

extern "C" {

// out[(a - a_first) * 65536 + b] = max(a, b) (min(a, b) with `minimum`) as the lane computes
// it, for a in [a_first, a_first + a_count) and every b; `latency` is the lane's pipeline depth.
void maxaccel_lane_pairs(uint8_t dtype, uint8_t minimum, uint32_t latency, uint32_t a_first,
                         uint32_t a_count, uint16_t *out) {
    VerilatedContext context;
    Vmaxaccel_lane *lane = new Vmaxaccel_lane{&context};
    lane->rst = 0;
    lane->dtype = dtype;
    lane->minimum = minimum;
    const uint64_t vectors = uint64_t(a_count) * 65536 / 4;
    for (uint64_t t = 0; t < vectors + latency; t++) {
        if (t < vectors) {
            uint64_t first = t * 4;                     // pair index of element 0
            uint64_t a = a_first + first / 65536, b = first % 65536;
            lane->a = a * 0x0001000100010001ULL;
            lane->b = b | (b + 1) << 16 | (b + 2) << 32 | (b + 3) << 48;
        }
        lane->clk = 0;
        lane->eval();
        if (t >= latency) {
            uint64_t result = lane->result;
            uint16_t *slot = out + (t - latency) * 4;
            for (int k = 0; k < 4; k++) slot[k] = uint16_t(result >> (16 * k));
        }
        lane->clk = 1;
        lane->eval();
    }
    lane->final();
    delete lane;
}

}  // extern "C"
