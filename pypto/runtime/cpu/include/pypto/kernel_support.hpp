// pypto kernel support: what generated kernels use beside the PTO tile API.
//  - scalar index math with Python semantics (floor division, modulo, min/max);
//  - gm_box: a GlobalTensor view of one tile-sized box of a GM tensor, bounds-checked
//    (check_gm_access: the whole bounds rule, in checked builds);
//  - the instructions pypto's ISA marks ext=True (pypto::TSIGMOID, pypto::TROWCUMSUM, ...),
//    written against the public tile API only (DType, Rows, Cols, data(), GetValidRow/Col) so
//    that they build with pypto's CPU header and with pto-isa's -D__CPU_SIM headers alike;
//  - cross-core flags between the cube core and the vector sub-blocks of a cluster.
// Include after <pto/pto-inst.hpp>.
#pragma once

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <pypto/kernel_error.hpp>

namespace pypto {

// Which core of a launch is running: the block index over block_num cores (clusters for a
// cube + vector kernel) and, on vector cores of a cluster, the sub-block index.
struct CoreIndex {
    int64_t block_idx = 0;
    int64_t block_num = 1;
    int64_t subblock_idx = 0;
    int64_t subblock_num = 1;
};

// ---------------------------------------------------------------- scalar index math
inline int64_t floordiv(int64_t a, int64_t b)
{
    const int64_t q = a / b;
    return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}

inline int64_t ceildiv(int64_t a, int64_t b) { return -floordiv(-a, b); }

inline int64_t mod(int64_t a, int64_t b) { return a - floordiv(a, b) * b; }

inline int64_t min(int64_t a) { return a; }
template <class... R>
inline int64_t min(int64_t a, int64_t b, R... rest)
{
    return min(a < b ? a : b, static_cast<int64_t>(rest)...);
}

inline int64_t max(int64_t a) { return a; }
template <class... R>
inline int64_t max(int64_t a, int64_t b, R... rest)
{
    return max(a > b ? a : b, static_cast<int64_t>(rest)...);
}

// ---------------------------------------------------------------- GM boxes
// The bounds rule of a GM access is stated in pypto/ir/gm_bounds.py: a tile of valid (rows, cols)
// moves the box at `offsets` whose extent is (rows, cols) over the last two dims ((cols, rows)
// transposed), 1 in leading dims (a 1-D tensor: cols, with rows in [least, 1]); in every dim
// 0 <= offset, least <= extent, offset + extent <= dim. least is 1 for a region the front end
// clipped to the tensor (a tail), else 0. A failure names the access by its site ("AIV:3", the
// number of pypto.ir.gm_bounds.access_sites) and its numbers; the Python side words the message.
namespace detail {

template <size_t N>
inline std::string list_text(const int64_t (&v)[N])
{
    std::string s = "[";
    for (size_t i = 0; i < N; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

template <size_t N>
[[noreturn]] __attribute__((noinline, cold)) void box_outside(const char* site, const int64_t (&dims)[N],
                                                            const int64_t (&offsets)[N], int64_t rows, int64_t cols)
{
    fail(std::string("GM access outside its tensor at site ") + site + ": offsets " + list_text(offsets) +
         ", valid [" + std::to_string(rows) + ", " + std::to_string(cols) + "], shape " + list_text(dims));
}

template <size_t N>
inline bool box_inside(const int64_t (&dims)[N], const int64_t (&offsets)[N], int64_t rows, int64_t cols,
                       bool transposed, int64_t least)
{
    static_assert(N >= 1, "a GM tensor has at least one dimension");
    if constexpr (N == 1) {
        return least <= rows && rows <= 1 && offsets[0] >= 0 && cols >= least && offsets[0] + cols <= dims[0];
    } else {
        bool inside = true;
        for (size_t i = 0; i < N; ++i) {
            const int64_t e = i == N - 2 ? (transposed ? cols : rows) : i == N - 1 ? (transposed ? rows : cols) : 1;
            inside &= offsets[i] >= 0 && e >= least && offsets[i] + e <= dims[i];
        }
        return inside;
    }
}

// Every build guards the memory of the tensor (the rule with least 0); the error path is out of
// line: a box is made per tile, so this stays a few loads, multiplies and compares.
template <class GT, class T, size_t N>
inline GT make_box(T* base, const int64_t (&dims)[N], const int64_t (&offsets)[N], int64_t rows, int64_t cols,
                   bool transposed, const char* site)
{
    if (__builtin_expect(!box_inside(dims, offsets, rows, cols, transposed, 0), 0))
        box_outside(site, dims, offsets, rows, cols);
    int64_t offset = 0;
    int64_t stride = 1;
    int64_t row_stride = cols;
    for (size_t i = N; i-- > 0;) {
        offset += offsets[i] * stride;
        if (N >= 2 && i == N - 2) row_stride = stride;
        stride *= dims[i];
    }
    using Shape = typename GT::Shape;
    using Stride = typename GT::Stride;
    const Stride strides = transposed ? Stride(0, 0, 0, 1, row_stride) : Stride(0, 0, 0, row_stride, 1);
    return GT(base + offset, Shape(1, 1, 1, rows, cols), strides);
}

}  // namespace detail

// The whole rule, before the tile's valid shape is set for the access (a clipped valid shape of 0
// or less would otherwise be refused as a tile error, or move nothing): compiled in by
// -DPYPTO_CHECK_GM (the cpu backend's checked mode), nothing in other builds.
template <size_t N>
inline void check_gm_access([[maybe_unused]] const int64_t (&dims)[N], [[maybe_unused]] const int64_t (&offsets)[N],
                            [[maybe_unused]] int64_t rows, [[maybe_unused]] int64_t cols,
                            [[maybe_unused]] bool transposed, [[maybe_unused]] int64_t least,
                            [[maybe_unused]] const char* site)
{
#if defined(PYPTO_CHECK_GM)
    if (__builtin_expect(!detail::box_inside(dims, offsets, rows, cols, transposed, least), 0))
        detail::box_outside(site, dims, offsets, rows, cols);
#endif
}

// The box of GM tensor `base` (shape `dims`, contiguous) starting at `offsets` whose extent is
// the tile's valid region over the last two dims (1 in leading dims).
template <class GT, class T, size_t N, class TileT>
inline GT gm_box(T* base, const int64_t (&dims)[N], const int64_t (&offsets)[N], const TileT& tile, const char* site)
{
    return detail::make_box<GT>(base, dims, offsets, tile.GetValidRow(), tile.GetValidCol(), false, site);
}

// The transposed box: GM extent [valid cols, valid rows], read column by column into the tile.
template <class GT, class T, size_t N, class TileT>
inline GT gm_box_t(T* base, const int64_t (&dims)[N], const int64_t (&offsets)[N], const TileT& tile, const char* site)
{
    return detail::make_box<GT>(base, dims, offsets, tile.GetValidRow(), tile.GetValidCol(), true, site);
}

// ---------------------------------------------------------------- ext instructions
namespace detail {

template <class T>
inline constexpr bool float_like = !std::is_integral_v<T>;

template <class T>
using calc = std::conditional_t<float_like<T>, float, int64_t>;

// Element (r, c) of a vector tile (pypto's CPU header stores plain vector tiles as pto-isa does).
template <class T>
inline size_t at(size_t r, size_t c)
{
#if defined(PYPTO_CPU_PTO)
    return pto::cpu::offset<T>(r, c);
#else
    return T::isRowMajor ? r * T::Cols + c : c * T::Rows + r;
#endif
}

template <class T>
inline calc<T> load(T v)
{
    return static_cast<calc<T>>(static_cast<std::conditional_t<float_like<T>, float, T>>(v));
}

template <class D, class V>
inline D store(V v)
{
    if constexpr (std::is_same_v<D, bool>) {
        return v != V(0);
    } else if constexpr (float_like<D>) {
        return static_cast<D>(static_cast<float>(v));
    } else {
        return static_cast<D>(v);
    }
}

template <class TD, class TS, class F>
inline void map1(TD& dst, const TS& src, F f)
{
    using D = typename TD::DType;
    const size_t rows = dst.GetValidRow(), cols = dst.GetValidCol();
    D* d = dst.data();
    const auto* s = src.data();
    for (size_t r = 0; r < rows; ++r)
#pragma GCC ivdep
        for (size_t c = 0; c < cols; ++c) d[at<TD>(r, c)] = store<D>(f(load(s[at<TS>(r, c)])));
}

template <class TD, class TA, class TB, class F>
inline void map2(TD& dst, const TA& a, const TB& b, F f)
{
    using D = typename TD::DType;
    const size_t rows = dst.GetValidRow(), cols = dst.GetValidCol();
    D* d = dst.data();
    const auto* pa = a.data();
    const auto* pb = b.data();
    for (size_t r = 0; r < rows; ++r)
#pragma GCC ivdep
        for (size_t c = 0; c < cols; ++c)
            d[at<TD>(r, c)] = store<D>(f(load(pa[at<TA>(r, c)]), load(pb[at<TB>(r, c)])));
}

template <class TD, class F>
inline void fill(TD& dst, F f)
{
    using D = typename TD::DType;
    const size_t rows = dst.GetValidRow(), cols = dst.GetValidCol();
    D* d = dst.data();
    for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c) d[at<TD>(r, c)] = store<D>(f(r, c));
}

inline float exp_f32(float x)
{
#if defined(PYPTO_CPU_PTO)
    return pto::cpu::fast_exp(x);
#else
    return std::exp(x);
#endif
}

template <class C>
inline C remainder(C a, C b)
{
    if constexpr (std::is_floating_point_v<C>) {
        const C r = std::fmod(a, b);
        return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    } else {
        if (b == 0) return 0;
        const C r = a % b;
        return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
}

// Argmax / argmin of n values at stride: first index of the extreme; a NaN wins (as torch).
template <bool is_max, class T>
inline int64_t arg_extreme(const T* x, size_t n, size_t stride)
{
    int64_t best = 0;
    float bv = static_cast<float>(x[0]);
    for (size_t i = 1; i < n && bv == bv; ++i) {
        const float v = static_cast<float>(x[i * stride]);
        if (v != v || (is_max ? v > bv : v < bv)) {
            bv = v;
            best = static_cast<int64_t>(i);
        }
    }
    return best;
}

}  // namespace detail

#define PYPTO_EXT_UNARY(NAME, EXPR)                                       \
    template <class TD, class TS>                                         \
    inline void NAME(TD& dst, TS& src)                                    \
    {                                                                     \
        detail::map1(dst, src, [](auto x) { return EXPR; });             \
    }

PYPTO_EXT_UNARY(TSIN, std::sin(float(x)))
PYPTO_EXT_UNARY(TCOS, std::cos(float(x)))
PYPTO_EXT_UNARY(TTANH, std::tanh(float(x)))
PYPTO_EXT_UNARY(TSIGMOID, 1.0f / (1.0f + detail::exp_f32(-float(x))))
PYPTO_EXT_UNARY(TERF, std::erf(float(x)))
PYPTO_EXT_UNARY(TLOG1P, std::log1p(float(x)))
PYPTO_EXT_UNARY(TEXPM1, std::expm1(float(x)))
PYPTO_EXT_UNARY(TERFC, std::erfc(float(x)))
PYPTO_EXT_UNARY(TFLOOR, std::floor(x))
PYPTO_EXT_UNARY(TCEIL, std::ceil(x))
PYPTO_EXT_UNARY(TROUND, std::nearbyint(x))
PYPTO_EXT_UNARY(TSIGN, decltype(x)((decltype(x)(0) < x) - (x < decltype(x)(0))))
PYPTO_EXT_UNARY(TISFINITE, std::isfinite(float(x)) ? 1 : 0)
#undef PYPTO_EXT_UNARY

// dst = scalar - src
template <class TD, class TS, class V>
inline void TRSUBS(TD& dst, TS& src, V scalar)
{
    detail::map1(dst, src, [scalar](auto x) { return decltype(x)(scalar) - x; });
}

// dst = src ** scalar
template <class TD, class TS, class V>
inline void TPOWS(TD& dst, TS& src, V scalar)
{
    detail::map1(dst, src, [scalar](auto x) { return std::pow(float(x), float(scalar)); });
}

// dst = scalar ** src
template <class TD, class TS, class V>
inline void TRPOWS(TD& dst, TS& src, V scalar)
{
    detail::map1(dst, src, [scalar](auto x) { return std::pow(float(scalar), float(x)); });
}

// dst = remainder(a, b) with the divisor's sign (torch.remainder)
template <class TD, class TA, class TB>
inline void TREM(TD& dst, TA& a, TB& b)
{
    detail::map2(dst, a, b, [](auto x, auto y) {
        using C = std::common_type_t<decltype(x), decltype(y)>;
        return detail::remainder<C>(C(x), C(y));
    });
}

// Products over rows / columns of the source's valid region, accumulated in fp32 (int64).
template <class TD, class TS>
inline void TROWPROD(TD& dst, TS& src)
{
    using C = detail::calc<typename TS::DType>;
    const size_t rows = src.GetValidRow(), cols = src.GetValidCol();
    for (size_t r = 0; r < rows; ++r) {
        C acc = 1;
        for (size_t c = 0; c < cols; ++c) acc *= detail::load(src.data()[detail::at<TS>(r, c)]);
        dst.data()[detail::at<TD>(r, 0)] = detail::store<typename TD::DType>(acc);
    }
}

template <class TD, class TS>
inline void TCOLPROD(TD& dst, TS& src)
{
    using C = detail::calc<typename TS::DType>;
    const size_t rows = src.GetValidRow(), cols = src.GetValidCol();
    for (size_t c = 0; c < cols; ++c) {
        C acc = 1;
        for (size_t r = 0; r < rows; ++r) acc *= detail::load(src.data()[detail::at<TS>(r, c)]);
        dst.data()[detail::at<TD>(0, c)] = detail::store<typename TD::DType>(acc);
    }
}

// dst(r, 0) = index of the row's maximum (first one; NaN counts as largest).
template <class TD, class TS>
inline void TROWARGMAX(TD& dst, TS& src)
{
    const size_t rows = src.GetValidRow(), cols = src.GetValidCol();
    for (size_t r = 0; r < rows; ++r)
        dst.data()[detail::at<TD>(r, 0)] = detail::store<typename TD::DType>(
            cols ? detail::arg_extreme<true>(src.data() + detail::at<TS>(r, 0), cols, detail::at<TS>(0, 1)) : 0);
}

template <class TD, class TS>
inline void TCOLARGMAX(TD& dst, TS& src)
{
    const size_t rows = src.GetValidRow(), cols = src.GetValidCol();
    for (size_t c = 0; c < cols; ++c)
        dst.data()[detail::at<TD>(0, c)] = detail::store<typename TD::DType>(
            rows ? detail::arg_extreme<true>(src.data() + detail::at<TS>(0, c), rows, detail::at<TS>(1, 0)) : 0);
}

// Inclusive prefix sums along each row / down each column, accumulated in fp64 (int64), as torch does.
template <class TD, class TS>
inline void TROWCUMSUM(TD& dst, TS& src)
{
    using C = std::conditional_t<detail::float_like<typename TS::DType>, double, int64_t>;
    const size_t rows = dst.GetValidRow(), cols = dst.GetValidCol();
    for (size_t r = 0; r < rows; ++r) {
        C acc = 0;
        for (size_t c = 0; c < cols; ++c) {
            acc += detail::load(src.data()[detail::at<TS>(r, c)]);
            dst.data()[detail::at<TD>(r, c)] = detail::store<typename TD::DType>(acc);
        }
    }
}

template <class TD, class TS>
inline void TCOLCUMSUM(TD& dst, TS& src)
{
    using C = std::conditional_t<detail::float_like<typename TS::DType>, double, int64_t>;
    const size_t rows = dst.GetValidRow(), cols = dst.GetValidCol();
    std::vector<C> acc(cols, C(0));
    for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c) {
            acc[c] += detail::load(src.data()[detail::at<TS>(r, c)]);
            dst.data()[detail::at<TD>(r, c)] = detail::store<typename TD::DType>(acc[c]);
        }
}

// dst(r, c) = start + c (axis 1) or start + r (axis 0)
template <class TD, class V>
inline void TARANGE(TD& dst, V start, int axis = 1)
{
    detail::fill(dst, [start, axis](size_t r, size_t c) { return start + V(axis == 0 ? r : c); });
}

// Lower / upper triangular masks: 1 where c <= r + diagonal (TTRIL) or c >= r + diagonal (TTRIU).
template <class TD>
inline void TTRIL(TD& dst, int64_t diagonal)
{
    detail::fill(dst, [diagonal](size_t r, size_t c) { return int64_t(c) <= int64_t(r) + diagonal ? 1 : 0; });
}

template <class TD>
inline void TTRIU(TD& dst, int64_t diagonal)
{
    detail::fill(dst, [diagonal](size_t r, size_t c) { return int64_t(c) >= int64_t(r) + diagonal ? 1 : 0; });
}

// ---------------------------------------------------------------- indexed row moves
// MGATHER / MSCATTER in row mode (pypto/ir/isa.py): row r of the rows tile is row offsets[0] + idx[r]
// of the 2-D GM tensor `base` (shape dims), columns offsets[1] .. + the tile's valid cols; idx is an
// int32 tile with one index per valid row. Every build checks each index before its row moves (an
// index outside the tensor fails, naming the site; nothing outside the tensor is touched); rows move in
// order, so of duplicate scatter indices the last row wins.
namespace detail {

[[noreturn]] __attribute__((noinline, cold)) inline void row_outside(const char* site, int64_t index, int64_t row,
                                                                  int64_t rows, int64_t offset, int64_t cols,
                                                                  int64_t width)
{
    fail(std::string("row index outside its tensor at site ") + site + ": index " + std::to_string(index) +
         " at row " + std::to_string(row) + ", rows " + std::to_string(rows) + ", columns " +
         std::to_string(offset) + ":" + std::to_string(offset + cols) + " of " + std::to_string(width));
}

template <class TR, class TI, class F>
inline void each_row(const TR& rows_tile, const TI& idx, const int64_t (&dims)[2], const int64_t (&offsets)[2],
                     const char* site, F move)
{
    const int64_t rows = rows_tile.GetValidRow(), cols = rows_tile.GetValidCol();
    const int64_t avail = dims[0] - offsets[0];
    if (offsets[0] < 0 || avail < 0 || offsets[1] < 0 || offsets[1] + cols > dims[1] || idx.GetValidRow() != rows)
        row_outside(site, -1, -1, avail, offsets[1], cols, dims[1]);
    const auto* ix = idx.data();
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = static_cast<int64_t>(ix[at<TI>(size_t(r), 0)]);
        if (i < 0 || i >= avail) row_outside(site, i, r, avail, offsets[1], cols, dims[1]);
        move(size_t(r), (offsets[0] + i) * dims[1] + offsets[1], size_t(cols));
    }
}

}  // namespace detail

template <class TD, class T, class TI>
inline void MGATHER(TD& dst, const T* base, const int64_t (&dims)[2], const int64_t (&offsets)[2], const TI& idx,
                    const char* site)
{
    auto* d = dst.data();
    detail::each_row(dst, idx, dims, offsets, site, [&](size_t r, int64_t at, size_t cols) {
        for (size_t c = 0; c < cols; ++c) d[detail::at<TD>(r, c)] = base[at + int64_t(c)];
    });
}

template <class T, class TS, class TI>
inline void MSCATTER(T* base, const int64_t (&dims)[2], const int64_t (&offsets)[2], const TS& src, const TI& idx,
                     const char* site)
{
    const auto* s = src.data();
    detail::each_row(src, idx, dims, offsets, site, [&](size_t r, int64_t at, size_t cols) {
        for (size_t c = 0; c < cols; ++c) base[at + int64_t(c)] = s[detail::at<TS>(r, c)];
    });
}

// ---------------------------------------------------------------- on-chip handoff (a5)
// TPUSH / TPOP move a handoff tile into / out of a FIFO slot in the consumer's buffer. Here the slot is
// the GM box the Block IR names (the FIFO's backing store on a CPU, as in pto-isa's CPU simulation of
// its TPipe); the cross-core flags around them are separate statements (passes/cross_core.py).
template <class GT, class TS>
inline void TPUSH(GT& slot, TS& src)
{
    TSTORE(slot, src);
}

template <class TD, class GT>
inline void TPOP(TD& dst, GT& slot)
{
    TLOAD(dst, slot);
}

// ---------------------------------------------------------------- cross-core flags
// A cube core and its vector sub-blocks signal each other through numbered flags. A set by the
// cube reaches every sub-block; the cube's wait passes once every sub-block has set the flag.
// How many flags a cluster has is a machine figure ([cross_core] flags in pypto/machine/*.toml):
// codegen passes it to cross_core_set / cross_core_wait as their template argument, which checks
// the id; the cluster keeps a counter for every flag id it has seen.
struct ClusterAborted : KernelError {
    using KernelError::KernelError;
};

class ClusterSync {
public:
    static constexpr int kMaxSubblocks = 4;

    explicit ClusterSync(int subblocks) : subblocks_(subblocks)
    {
        for (int r = 0; r <= kMaxSubblocks; ++r) waiting_[r] = -1;
    }

    // role 0: the cube core; role 1 + i: vector sub-block i.
    void set(int role, int flag)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (role == 0) {
            for (int s = 0; s < subblocks_; ++s) ++counter(to_vector_[s], flag);
        } else {
            ++counter(to_cube_[role - 1], flag);
        }
        changed_.notify_all();
    }

    // Cooperative mode: the cores of the cluster are fibers of one thread, and a core that has
    // to wait hands the thread to the others through `yield` instead of blocking it.
    using YieldFn = void (*)(void*);
    void cooperative(YieldFn yield, void* arg)
    {
        yield_ = yield;
        yield_arg_ = arg;
    }

    void wait(int role, int flag)
    {
        if (yield_ != nullptr) {
            wait_cooperative(role, flag);
            return;
        }
        std::unique_lock<std::mutex> lock(mutex_);
        waiting_[role] = flag;
        while (!can_pass(role, flag)) {
            if (aborted_) throw ClusterAborted("another core of the cluster failed");
            if (everyone_else_stuck(role)) {
                aborted_ = true;
                changed_.notify_all();
                fail(std::string(role == 0 ? "the cube core" : "a vector sub-block") + " waits for cross-core flag " +
                     std::to_string(flag) + " that no core of the cluster will set (deadlock)");
            }
            changed_.wait(lock);
        }
        waiting_[role] = -1;
        if (role == 0) {
            for (int s = 0; s < subblocks_; ++s) --counter(to_cube_[s], flag);
        } else {
            --counter(to_vector_[role - 1], flag);
        }
    }

    void finish(int role, bool failed)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        done_[role] = true;
        waiting_[role] = -1;
        aborted_ = aborted_ || failed;
        changed_.notify_all();
    }

private:
    void wait_cooperative(int role, int flag)
    {
        waiting_[role] = flag;
        while (!can_pass(role, flag)) {
            if (aborted_) throw ClusterAborted("another core of the cluster failed");
            if (everyone_else_stuck(role)) {
                aborted_ = true;
                fail(std::string(role == 0 ? "the cube core" : "a vector sub-block") + " waits for cross-core flag " +
                     std::to_string(flag) + " that no core of the cluster will set (deadlock)");
            }
            yield_(yield_arg_);
        }
        waiting_[role] = -1;
        if (role == 0) {
            for (int s = 0; s < subblocks_; ++s) --counter(to_cube_[s], flag);
        } else {
            --counter(to_vector_[role - 1], flag);
        }
    }

    static int32_t& counter(std::vector<int32_t>& counters, int flag)
    {
        if (counters.size() <= static_cast<size_t>(flag)) counters.resize(static_cast<size_t>(flag) + 1, 0);
        return counters[static_cast<size_t>(flag)];
    }

    static int32_t count(const std::vector<int32_t>& counters, int flag)
    {
        return static_cast<size_t>(flag) < counters.size() ? counters[static_cast<size_t>(flag)] : 0;
    }

    bool can_pass(int role, int flag) const
    {
        if (role != 0) return count(to_vector_[role - 1], flag) > 0;
        for (int s = 0; s < subblocks_; ++s)
            if (count(to_cube_[s], flag) == 0) return false;
        return true;
    }

    bool everyone_else_stuck(int role) const
    {
        for (int r = 0; r <= subblocks_; ++r) {
            if (r == role || done_[r]) continue;
            if (waiting_[r] < 0 || can_pass(r, waiting_[r])) return false;
        }
        return true;
    }

    int subblocks_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<int32_t> to_vector_[kMaxSubblocks];   // per sub-block: the cube's sets not yet waited, by flag
    std::vector<int32_t> to_cube_[kMaxSubblocks];     // per sub-block: its sets the cube has not waited, by flag
    int waiting_[kMaxSubblocks + 1];
    bool done_[kMaxSubblocks + 1] = {};
    bool aborted_ = false;
    YieldFn yield_ = nullptr;
    void* yield_arg_ = nullptr;
};

namespace detail {
inline thread_local ClusterSync* tls_cluster = nullptr;
inline thread_local int tls_role = 0;
}  // namespace detail

// Bind the running thread to a cluster (the CPU launcher does this for cube + vector kernels).
inline void bind_cluster(ClusterSync* cluster, int role)
{
    detail::tls_cluster = cluster;
    detail::tls_role = role;
}

#if defined(__CCE_AICORE__)
// Device: FFTS cross-core signal within the cluster (mode 2), and the matching wait.
template <int Flags>
inline void cross_core_set(pipe_t pipe, int flag) { ffts_cross_core_sync(pipe, 1 | (2 << 4) | (flag << 8)); }
template <int Flags>
inline void cross_core_wait(pipe_t, int flag) { wait_flag_dev(flag); }
#else
namespace detail {
template <int Flags>
inline void check_cross_core_flag(int flag)
{
    static_assert(Flags > 0, "a machine has at least one cross-core flag");
    if (flag < 0 || flag >= Flags)
        fail("cross-core flag id " + std::to_string(flag) + " is out of range (the machine has " +
             std::to_string(Flags) + ")");
}
}  // namespace detail

// Flags: the machine's cross-core flag count ([cross_core] flags), from codegen.
template <int Flags>
inline void cross_core_set(int /*pipe*/, int flag)
{
    detail::check_cross_core_flag<Flags>(flag);
    if (detail::tls_cluster == nullptr) fail("cross-core set_flag in a kernel that has only one core type");
    detail::tls_cluster->set(detail::tls_role, flag);
}

template <int Flags>
inline void cross_core_wait(int /*pipe*/, int flag)
{
    detail::check_cross_core_flag<Flags>(flag);
    if (detail::tls_cluster == nullptr)
        fail("cross-core wait_flag " + std::to_string(flag) + " in a kernel that has only one core type (deadlock)");
    detail::tls_cluster->wait(detail::tls_role, flag);
}
#endif

}  // namespace pypto
