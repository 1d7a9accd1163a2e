// pypto's CPU PTO: the state of the core a thread is running — its local memories (UB, L1,
// L0A, L0B, L0C as byte arrays that TASSIGN addresses) and its pending set_flag counts.
// Pipes run one after another on the CPU, so flags cannot reorder anything; they are still
// counted so that a wait_flag with no earlier matching set_flag (a hang on the device) fails.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <pypto/kernel_error.hpp>

#include "types.hpp"

namespace pto::cpu {

enum MemSpace : int { kUB = 0, kL1 = 1, kL0A = 2, kL0B = 3, kL0C = 4, kSpaceCount = 5 };

inline const char* space_name(int s)
{
    static const char* names[kSpaceCount] = {"UB", "L1", "L0A", "L0B", "L0C"};
    return names[s];
}

constexpr int kPipeCount = 8;
constexpr int kEventCount = 8;

inline const char* pipe_name(pipe_t p)
{
    static const char* names[kPipeCount] = {"PIPE_S",    "PIPE_V", "PIPE_MTE1", "PIPE_MTE2",
                                            "PIPE_MTE3", "PIPE_M", "PIPE_ALL",  "PIPE_FIX"};
    return (p >= 0 && p < kPipeCount) ? names[p] : "PIPE_?";
}

// Capacities of the a2a3 (910B) core, used when a tile API is called outside a pypto launch.
constexpr size_t kDefaultCapacity[kSpaceCount] = {196608, 524288, 65536, 65536, 131072};

struct CoreState {
    unsigned char* memory[kSpaceCount] = {};
    size_t capacity[kSpaceCount] = {};
    size_t alignment = 32;
    int32_t pending[kPipeCount][kPipeCount][kEventCount] = {};
    std::string name = "core";

    void reset_flags() { std::memset(pending, 0, sizeof pending); }

    // Flags set and never waited for; on the device they would leak into the next kernel.
    std::string leftover_flags() const
    {
        std::string out;
        for (int s = 0; s < kPipeCount; ++s)
            for (int d = 0; d < kPipeCount; ++d)
                for (int e = 0; e < kEventCount; ++e)
                    if (pending[s][d][e] > 0) {
                        out += std::string(out.empty() ? "" : ", ") + "set_flag(" + pipe_name(s) + ", " +
                               pipe_name(d) + ", EVENT_ID" + std::to_string(e) + ")";
                    }
        return out;
    }
};

// Owns the bytes of one core's local memories.
struct CoreMemory {
    std::unique_ptr<unsigned char[], void (*)(void*)> block{nullptr, std::free};
    size_t capacity[kSpaceCount] = {};

    void allocate(const size_t (&cap)[kSpaceCount])
    {
        size_t total = 0;
        for (int s = 0; s < kSpaceCount; ++s) total += (cap[s] + 63) / 64 * 64;
        block.reset(static_cast<unsigned char*>(std::aligned_alloc(64, total == 0 ? 64 : total)));
        std::memcpy(capacity, cap, sizeof capacity);
    }

    void attach(CoreState& core) const
    {
        unsigned char* p = block.get();
        for (int s = 0; s < kSpaceCount; ++s) {
            core.memory[s] = p;
            core.capacity[s] = capacity[s];
            p += (capacity[s] + 63) / 64 * 64;
        }
    }
};

inline thread_local CoreState* tls_core = nullptr;

// The core this thread runs; outside a pypto launch a standalone a2a3-sized core per thread.
inline CoreState& current_core()
{
    if (tls_core == nullptr) {
        thread_local CoreMemory standalone_memory;
        thread_local CoreState standalone;
        standalone_memory.allocate(kDefaultCapacity);
        standalone_memory.attach(standalone);
        tls_core = &standalone;
    }
    return *tls_core;
}

inline void check_flag_args(const char* what, pipe_t src, pipe_t dst, event_t ev)
{
    if (src < 0 || src >= kPipeCount || dst < 0 || dst >= kPipeCount || ev < 0 || ev >= kEventCount) {
        pypto::fail(std::string(what) + ": pipe or event id out of range (" + std::to_string(src) + ", " +
                    std::to_string(dst) + ", " + std::to_string(ev) + ")");
    }
}

}  // namespace pto::cpu

inline void set_flag(pipe_t src, pipe_t dst, event_t ev)
{
    pto::cpu::check_flag_args("set_flag", src, dst, ev);
    pto::cpu::current_core().pending[src][dst][ev] += 1;
}

inline void wait_flag(pipe_t src, pipe_t dst, event_t ev)
{
    pto::cpu::check_flag_args("wait_flag", src, dst, ev);
    int32_t& n = pto::cpu::current_core().pending[src][dst][ev];
    if (n <= 0) {
        pypto::fail(std::string("wait_flag(") + pto::cpu::pipe_name(src) + ", " + pto::cpu::pipe_name(dst) +
                    ", EVENT_ID" + std::to_string(ev) +
                    ") has no earlier matching set_flag: on the device this pipe would wait forever");
    }
    n -= 1;
}

// Pipes execute in program order on the CPU: a barrier has nothing left to order.
inline void pipe_barrier(pipe_t) {}
