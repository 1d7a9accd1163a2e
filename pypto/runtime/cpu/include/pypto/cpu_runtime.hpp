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

    bool try_run(int64_t n, const std::function<void()>& job)
    {
        std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
        if (!busy.owns_lock()) return false;
        const int64_t helpers = n - 1;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (owner_ != getpid()) {      // a forked child has none of its parent's threads
                threads_.clear();
                owner_ = getpid();
            }
            while (static_cast<int64_t>(threads_.size()) < helpers) {
                threads_.emplace_back([this, seen = generation_]() mutable { serve(seen); });
                threads_.back().detach();
            }
            job_ = &job;
            wanted_ = helpers;
            taken_ = 0;
            remaining_ = helpers;
            ++generation_;
        }
        wake_.notify_all();
        job();
        std::unique_lock<std::mutex> lock(mutex_);
        done_.wait(lock, [this] { return remaining_ == 0; });
        job_ = nullptr;
        return true;
    }

private:
    void serve(uint64_t seen)
    {
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            wake_.wait(lock, [&] { return generation_ != seen; });
            seen = generation_;
            if (taken_ >= wanted_) continue;
            ++taken_;
            const std::function<void()>* job = job_;
            lock.unlock();
            (*job)();
            lock.lock();
            if (--remaining_ == 0) done_.notify_all();
        }
    }

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
    void run(const std::vector<std::function<void()>>& bodies)
    {
        for (size_t i = 0; i < fibers_.size(); ++i) prepare(fibers_[i], bodies[i]);
        for (size_t live = fibers_.size(); live > 0;) {
            for (size_t i = 0; i < fibers_.size(); ++i) {
                if (fibers_[i].done) continue;
                current_ = i;
                swapcontext(&home_, &fibers_[i].context);
                if (fibers_[i].done) --live;
            }
        }
    }

    // ClusterSync's yield: back to the scheduler; the thread-local core bindings of this fiber
    // are put back when it resumes.
    static void yield(void* self)
    {
        auto* me = static_cast<ClusterFibers*>(self);
#if defined(PYPTO_CPU_PTO)
        pto::cpu::CoreState* core = pto::cpu::tls_core;
#endif
        ClusterSync* cluster = detail::tls_cluster;
        const int role = detail::tls_role;
        swapcontext(&me->fibers_[me->current_].context, &me->home_);
#if defined(PYPTO_CPU_PTO)
        pto::cpu::tls_core = core;
#endif
        bind_cluster(cluster, role);
    }

private:
    struct Fiber {
        ucontext_t context;
        char* stack = nullptr;
        const std::function<void()>* body = nullptr;
        ClusterFibers* owner = nullptr;
        bool done = false;
    };

    // Its own function: getcontext returns twice, and a loop counter live across it is one that
    // g++ warns "might be clobbered" about (-Wclobbered, with sanitizers).
    __attribute__((noinline)) void prepare(Fiber& f, const std::function<void()>& body)
    {
        f.body = &body;
        f.owner = this;
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = f.stack;
        f.context.uc_stack.ss_size = kStackBytes;
        f.context.uc_link = &home_;
        const uintptr_t p = reinterpret_cast<uintptr_t>(&f);
        makecontext(&f.context, reinterpret_cast<void (*)()>(&ClusterFibers::entry), 2,
                    static_cast<unsigned>(p >> 32), static_cast<unsigned>(p & 0xffffffffu));
    }

    static void entry(unsigned hi, unsigned lo)
    {
        Fiber* f = reinterpret_cast<Fiber*>((static_cast<uintptr_t>(hi) << 32) | lo);
        (*f->body)();
        f->done = true;      // returning resumes home_ (uc_link)
    }

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
    int run(const CoreFn& cube, const CoreFn& vector)
    {
        const int64_t n = config_.block_dim;
        const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(config_.threads, n));
        std::atomic<int64_t> next{0};
        const std::function<void()> worker = [&]() {
            for (int64_t i = next++; i < n && !failed_; i = next++) {
                if (cube && vector) {
                    run_cluster(i, cube, vector);
                } else {
                    CoreIndex id{i, n, 0, 1};
                    run_core(cube ? cube : vector, id, cube ? "cube core " : "vector core ", nullptr, 0);
                }
            }
        };
        if (workers == 1) {
            worker();
        } else if (!WorkerPool::shared().try_run(workers, worker)) {
            std::vector<std::thread> own;
            for (int64_t t = 1; t < workers; ++t) own.emplace_back(worker);
            worker();
            for (auto& t : own) t.join();
        }
        if (!error_.empty()) {
            write_message(error_);
            return 1;
        }
        if (!warning_.empty()) {
            write_message(warning_);
            return 2;
        }
        return 0;
    }

private:
    void run_cluster(int64_t cluster, const CoreFn& cube, const CoreFn& vector)
    {
        const int64_t subblocks = std::max<int64_t>(1, config_.subblocks);
        ClusterSync sync(static_cast<int>(subblocks));
        ClusterFibers fibers(static_cast<size_t>(1 + subblocks));
        sync.cooperative(&ClusterFibers::yield, &fibers);
        std::vector<std::function<void()>> bodies;
        bodies.emplace_back([&]() {
            CoreIndex id{cluster, config_.block_dim, 0, subblocks};
            run_core(cube, id, "cube core ", &sync, 0);
        });
        for (int64_t s = 0; s < subblocks; ++s) {
            bodies.emplace_back([&, s]() {
                CoreIndex id{cluster, config_.block_dim, s, subblocks};
                run_core(vector, id, "vector sub-block ", &sync, static_cast<int>(1 + s));
            });
        }
        fibers.run(bodies);
    }

    void run_core(const CoreFn& fn, const CoreIndex& id, const char* kind, ClusterSync* sync, int role)
    {
        const std::string where = std::string(kernel_) + ", " + kind + std::to_string(id.block_idx) +
                                  (sync && role > 0 ? "." + std::to_string(role - 1) : std::string());
        CoreSlot slot(config_);
        slot.enter(where);
        bind_cluster(sync, role);
        bool failed = false;
        try {
            fn(id);
        } catch (const ClusterAborted&) {
            failed = true;
        } catch (const std::exception& e) {
            failed = true;
            record(error_, where + ": " + e.what());
        } catch (...) {      // nothing may unwind out of a fiber
            failed = true;
            record(error_, where + ": an unknown C++ exception");
        }
        if (sync) sync->finish(role, failed);
        bind_cluster(nullptr, 0);
        if (!failed) {
            const std::string left = slot.leftover_flags();
            if (!left.empty()) record(warning_, where + ": flags set and never waited for: " + left);
        }
        slot.leave();
    }

    // The local memories (from the bank) and flag state of the core a thread is about to run.
    struct CoreSlot {
        explicit CoreSlot(const LaunchConfig& launch) : config(launch) {}
        ~CoreSlot() { leave(); }
        CoreSlot(const CoreSlot&) = delete;
        CoreSlot& operator=(const CoreSlot&) = delete;

        void enter(const std::string& name)
        {
#if defined(PYPTO_CPU_PTO)
            size_t cap[pto::cpu::kSpaceCount];
            for (int s = 0; s < pto::cpu::kSpaceCount; ++s) cap[s] = static_cast<size_t>(config.capacity[s]);
            memory = MemoryBank::shared().take(cap);
            memory->attach(state);
            state.alignment = static_cast<size_t>(config.alignment);
            state.reset_flags();
            state.name = name;
            current = &state;
            pto::cpu::tls_core = &state;
#else
            (void)name;
#endif
        }

        std::string leftover_flags() const
        {
#if defined(PYPTO_CPU_PTO)
            return current ? current->leftover_flags() : std::string();
#else
            return std::string();
#endif
        }

        void leave()
        {
#if defined(PYPTO_CPU_PTO)
            pto::cpu::tls_core = nullptr;
            if (memory) MemoryBank::shared().give_back(std::move(memory));
#endif
        }

        const LaunchConfig& config;
#if defined(PYPTO_CPU_PTO)
        pto::cpu::CoreState state;          // per core: the fibers of a cluster share a thread
        pto::cpu::CoreState* current = nullptr;
        std::unique_ptr<pto::cpu::CoreMemory> memory;
#endif
    };

    void record(std::string& slot, const std::string& text)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (&slot == &error_) failed_ = true;
        if (slot.empty()) slot = text;
    }

    void write_message(const std::string& text)
    {
        if (message_size_ == 0) return;
        const size_t n = std::min(text.size(), message_size_ - 1);
        std::memcpy(message_, text.data(), n);
        message_[n] = '\0';
    }

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
