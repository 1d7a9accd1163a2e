// pypto CPU launcher runtime: runs the cores of one kernel launch on host threads.
//
// A launch of a one-core-type kernel runs block_dim cores; threads take block indices from a
// shared counter, and each core gets fresh flag counts and its own local memories (sized from
// the machine spec). A cube + vector kernel runs block_dim clusters; the cube core and its
// vector sub-blocks of one cluster run on threads of their own, so cross-core flags can block.
// Errors are caught per core and reported back as text (the first real one wins).
//
// Launches are short (often well under a millisecond), so nothing is created per launch: the
// worker threads are a process-wide pool that stays parked between launches, and the local
// memories of cores are recycled through a bank (a fresh allocation would page-fault anew).
// The cores of a cluster are fibers of one worker thread: a core that waits for a cross-core
// flag switches to its partners in user space (no sleeping threads, no kernel scheduler).
// The classes are declared here; the bodies of the heavy members are in cpu_runtime_impl.hpp. A
// translation unit that includes this header alone gets them inline (one-file builds); the kernel
// build units of pypto/runtime/cpu/units.py define PYPTO_RT_SEPARATE (pypto/kernel_unit.hpp) and
// link one runtime unit that compiles them once, instead of once per kernel. The singletons
// (WorkerPool::shared, MemoryBank::shared, a thread's fiber stacks) stay inline in every mode: one
// instance in the process however many kernel libraries are loaded.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ucontext.h>
#include <unistd.h>

#include <pypto/kernel_support.hpp>

namespace pypto::rt {

#if defined(PYPTO_RT_SEPARATE)
#define PYPTO_RT_DEF
#else
#define PYPTO_RT_DEF inline
#endif

// Filled by the Python side (pypto/runtime/cpu/library.py keeps the same layout).
struct LaunchConfig {
    int64_t block_dim;
    int64_t threads;
    int64_t subblocks;       // vector sub-blocks per cluster in cube + vector kernels
    int64_t capacity[5];     // UB, L1, L0A, L0B, L0C bytes per core
    int64_t alignment;       // bytes
};

// Threads that stay parked between launches. run(n, job) runs job on the caller and n - 1 pool
// threads and returns when all are done. One launch uses the pool at a time: a launch that
// finds it busy (the Python side runs independent tasks side by side) is told so and uses
// threads of its own.
class WorkerPool {
public:
    static WorkerPool& shared()
    {
        static WorkerPool* pool = new WorkerPool();   // never destroyed: parked threads die with the process
        return *pool;
    }

    bool try_run(int64_t n, const std::function<void()>& job);

private:
    void serve(uint64_t seen);

    std::mutex busy_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable done_;
    std::vector<std::thread> threads_;
    pid_t owner_ = getpid();
    const std::function<void()>* job_ = nullptr;
    uint64_t generation_ = 0;
    int64_t wanted_ = 0;
    int64_t taken_ = 0;
    int64_t remaining_ = 0;
};

#if defined(PYPTO_CPU_PTO)
// Local memories of cores, handed out per core and taken back after it: warm pages, no
// allocation per launch. Blocks of another capacity (another machine spec) are reallocated.
class MemoryBank {
public:
    static MemoryBank& shared()
    {
        static MemoryBank* bank = new MemoryBank();
        return *bank;
    }

    std::unique_ptr<pto::cpu::CoreMemory> take(const size_t (&cap)[pto::cpu::kSpaceCount])
    {
        std::unique_ptr<pto::cpu::CoreMemory> m;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!free_.empty()) {
                m = std::move(free_.back());
                free_.pop_back();
            }
        }
        if (!m) m = std::make_unique<pto::cpu::CoreMemory>();
        if (!m->block || std::memcmp(m->capacity, cap, sizeof cap) != 0) m->allocate(cap);
        return m;
    }

    void give_back(std::unique_ptr<pto::cpu::CoreMemory> m)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        free_.push_back(std::move(m));
    }

private:
    std::mutex mutex_;
    std::vector<std::unique_ptr<pto::cpu::CoreMemory>> free_;
};
#endif

// Runs the cores of one cluster as fibers of the calling thread, round robin: a fiber runs until
// it finishes or yields (a cross-core wait that cannot pass yet). Stacks are kept per thread.
class ClusterFibers {
public:
    static constexpr size_t kStackBytes = size_t(1) << 20;

    explicit ClusterFibers(size_t count) : fibers_(count)
    {
        thread_local std::vector<std::unique_ptr<char[]>> stacks;
        while (stacks.size() < count) stacks.emplace_back(new char[kStackBytes]);
        for (size_t i = 0; i < count; ++i) fibers_[i].stack = stacks[i].get();
    }

    // bodies[i] runs as fiber i; returns when every body has returned (bodies must not throw).
    void run(const std::vector<std::function<void()>>& bodies);

    // ClusterSync's yield: back to the scheduler; the thread-local core bindings of this fiber
    // are put back when it resumes.
    static void yield(void* self);

private:
    struct Fiber {
        ucontext_t context;
        char* stack = nullptr;
        const std::function<void()>* body = nullptr;
        ClusterFibers* owner = nullptr;
        bool done = false;
    };

    // Its own function (noinline, said on the definition): getcontext returns twice, and a loop
    // counter live across it is one that g++ warns "might be clobbered" about (-Wclobbered, with
    // sanitizers).
    void prepare(Fiber& f, const std::function<void()>& body);

    static void entry(unsigned hi, unsigned lo);

    std::vector<Fiber> fibers_;
    ucontext_t home_;
    size_t current_ = 0;
};

using CoreFn = std::function<void(const CoreIndex&)>;

class Launch {
public:
    Launch(const LaunchConfig& config, const char* kernel, char* message, size_t message_size)
        : config_(config), kernel_(kernel), message_(message), message_size_(message_size)
    {
        if (message_size_ > 0) message_[0] = '\0';
    }

    // Returns 0 on success, 1 when a core failed, 2 on success with warnings (text in message).
    int run(const CoreFn& cube, const CoreFn& vector);

private:
    void run_cluster(int64_t cluster, const CoreFn& cube, const CoreFn& vector);
    void run_core(const CoreFn& fn, const CoreIndex& id, const char* kind, ClusterSync* sync, int role);

    // The local memories (from the bank) and flag state of the core a thread is about to run.
    struct CoreSlot {
        explicit CoreSlot(const LaunchConfig& launch) : config(launch) {}
        ~CoreSlot() { leave(); }
        CoreSlot(const CoreSlot&) = delete;
        CoreSlot& operator=(const CoreSlot&) = delete;

        void enter(const std::string& name);
        std::string leftover_flags() const;
        void leave();

        const LaunchConfig& config;
#if defined(PYPTO_CPU_PTO)
        pto::cpu::CoreState state;          // per core: the fibers of a cluster share a thread
        pto::cpu::CoreState* current = nullptr;
        std::unique_ptr<pto::cpu::CoreMemory> memory;
#endif
    };

    void record(std::string& slot, const std::string& text);
    void write_message(const std::string& text);

    LaunchConfig config_;
    const char* kernel_;
    char* message_;
    size_t message_size_;
    std::mutex mutex_;
    std::string error_;
    std::string warning_;
    std::atomic<bool> failed_{false};
};

}  // namespace pypto::rt

#if !defined(PYPTO_RT_SEPARATE)
#include <pypto/cpu_runtime_impl.hpp>
#endif
