// pypto CPU launcher runtime: the bodies of the members cpu_runtime.hpp declares.
//
// Inline (PYPTO_RT_DEF) when cpu_runtime.hpp is included alone; compiled once per build into the
// runtime unit when the kernel units define PYPTO_RT_SEPARATE (pypto/runtime/cpu/units.py).
#pragma once

#include <pypto/cpu_runtime.hpp>

namespace pypto::rt {

PYPTO_RT_DEF bool WorkerPool::try_run(int64_t n, const std::function<void()>& job)
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

PYPTO_RT_DEF void WorkerPool::serve(uint64_t seen)
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

PYPTO_RT_DEF void ClusterFibers::run(const std::vector<std::function<void()>>& bodies)
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

PYPTO_RT_DEF void ClusterFibers::yield(void* self)
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

PYPTO_RT_DEF __attribute__((noinline)) void ClusterFibers::prepare(Fiber& f, const std::function<void()>& body)
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

PYPTO_RT_DEF void ClusterFibers::entry(unsigned hi, unsigned lo)
{
    Fiber* f = reinterpret_cast<Fiber*>((static_cast<uintptr_t>(hi) << 32) | lo);
    (*f->body)();
    f->done = true;      // returning resumes home_ (uc_link)
}

PYPTO_RT_DEF int Launch::run(const CoreFn& cube, const CoreFn& vector)
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

PYPTO_RT_DEF void Launch::run_cluster(int64_t cluster, const CoreFn& cube, const CoreFn& vector)
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

PYPTO_RT_DEF void Launch::run_core(const CoreFn& fn, const CoreIndex& id, const char* kind, ClusterSync* sync, int role)
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

PYPTO_RT_DEF void Launch::CoreSlot::enter(const std::string& name)
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

PYPTO_RT_DEF std::string Launch::CoreSlot::leftover_flags() const
{
#if defined(PYPTO_CPU_PTO)
    return current ? current->leftover_flags() : std::string();
#else
    return std::string();
#endif
}

PYPTO_RT_DEF void Launch::CoreSlot::leave()
{
#if defined(PYPTO_CPU_PTO)
    pto::cpu::tls_core = nullptr;
    if (memory) MemoryBank::shared().give_back(std::move(memory));
#endif
}

PYPTO_RT_DEF void Launch::record(std::string& slot, const std::string& text)
{
    std::lock_guard<std::mutex> lock(mutex_);
    if (&slot == &error_) failed_ = true;
    if (slot.empty()) slot = text;
}

PYPTO_RT_DEF void Launch::write_message(const std::string& text)
{
    if (message_size_ == 0) return;
    const size_t n = std::min(text.size(), message_size_ - 1);
    std::memcpy(message_, text.data(), n);
    message_[n] = '\0';
}

}  // namespace pypto::rt
