// pypto's CPU PTO: row / column reductions and broadcasts.
// TROW* reduce over the SOURCE's valid region and write dst(r, 0); TCOL* write dst(0, c).
// Sums accumulate in fp32 (int64 for integer tiles) in 16 lanes so that g++ vectorises them.
#pragma once

#include "elementwise.hpp"

namespace pto::cpu {

struct SumAcc {
    template <class C> static C init() { return C(0); }
    template <class C> C operator()(C a, C b) const { return a + b; }
};
struct MaxAcc {
    template <class C>
    static C init()
    {
        return std::numeric_limits<C>::has_infinity ? -std::numeric_limits<C>::infinity()
                                                    : std::numeric_limits<C>::lowest();
    }
    template <class C> C operator()(C a, C b) const { return Max{}(a, b); }
};
struct MinAcc {
    template <class C>
    static C init()
    {
        return std::numeric_limits<C>::has_infinity ? std::numeric_limits<C>::infinity()
                                                    : std::numeric_limits<C>::max();
    }
    template <class C> C operator()(C a, C b) const { return Min{}(a, b); }
};
struct ProdAcc {
    template <class C> static C init() { return C(1); }
    template <class C> C operator()(C a, C b) const { return a * b; }
};

// Acc over x[0], x[stride], ..., x[(n - 1) * stride].
template <class Acc, class C, size_t stride, class T>
inline C reduce_strided(const T* x, size_t n)
{
    constexpr size_t kLanes = 16;
    C lane[kLanes];
    for (size_t l = 0; l < kLanes; ++l) lane[l] = Acc::template init<C>();
    size_t c = 0;
    for (; c + kLanes <= n; c += kLanes)
        for (size_t l = 0; l < kLanes; ++l) lane[l] = Acc{}(lane[l], widen<C>(x[(c + l) * stride]));
    const size_t rest = n - c;
    for (size_t l = 0; l < kLanes; ++l)
        if (l < rest) lane[l] = Acc{}(lane[l], widen<C>(x[(c + l) * stride]));
    for (size_t width = kLanes / 2; width > 0; width /= 2)
        for (size_t l = 0; l < width; ++l) lane[l] = Acc{}(lane[l], lane[l + width]);
    return lane[0];
}

template <class Acc, class TD, class TS>
inline void row_reduce(TD& dst, const TS& src)
{
    using D = typename TD::DType;
    using C = common_calc_t<typename TS::DType>;
    const size_t rows = src.GetValidRow();
    const size_t cols = src.GetValidCol();
    D* d = dst.data();
    const auto* s = src.data();
    for (size_t r = 0; r < rows; ++r)
        d[r * TD::RowStride] = narrow<D>(reduce_strided<Acc, C, TS::ColStride>(s + r * TS::RowStride, cols));
}

template <class Acc, class TD, class TS>
inline void col_reduce(TD& dst, const TS& src)
{
    using D = typename TD::DType;
    using C = common_calc_t<typename TS::DType>;
    const size_t rows = src.GetValidRow();
    const size_t cols = src.GetValidCol();
    thread_local std::vector<C> acc;
    acc.assign(cols, Acc::template init<C>());
    C* a = acc.data();
    const auto* s = src.data();
    for (size_t r = 0; r < rows; ++r) {
        const auto* sr = s + r * TS::RowStride;
#pragma GCC ivdep
        for (size_t c = 0; c < cols; ++c) a[c] = Acc{}(a[c], widen<C>(sr[c * TS::ColStride]));
    }
    D* d = dst.data();
    for (size_t c = 0; c < cols; ++c) d[c * TD::ColStride] = narrow<D>(a[c]);
}

}  // namespace pto::cpu

namespace pto {

#define PYPTO_REDUCE_INSTR(NAME, KIND, ACC)                         \
    template <class TD, class TS, class... Rest>                    \
    inline RecordEvent NAME(TD& dst, TS& src, Rest&...)             \
    {                                                               \
        cpu::KIND<cpu::ACC>(dst, src);                              \
        return {};                                                  \
    }

PYPTO_REDUCE_INSTR(TROWSUM, row_reduce, SumAcc)
PYPTO_REDUCE_INSTR(TROWMAX, row_reduce, MaxAcc)
PYPTO_REDUCE_INSTR(TROWMIN, row_reduce, MinAcc)
PYPTO_REDUCE_INSTR(TROWPROD, row_reduce, ProdAcc)
PYPTO_REDUCE_INSTR(TCOLSUM, col_reduce, SumAcc)
PYPTO_REDUCE_INSTR(TCOLMAX, col_reduce, MaxAcc)
PYPTO_REDUCE_INSTR(TCOLMIN, col_reduce, MinAcc)
PYPTO_REDUCE_INSTR(TCOLPROD, col_reduce, ProdAcc)
#undef PYPTO_REDUCE_INSTR

#define PYPTO_EXPAND_INSTR(NAME, MAP, OP)                                                          \
    template <class TD, class TA, class TB, class... Rest>                                         \
    inline RecordEvent NAME(TD& dst, TA& src0, TB& src1, Rest&...)                                 \
    {                                                                                              \
        using D = typename TD::DType;                                                              \
        using C = cpu::common_calc_t<D, typename TA::DType, typename TB::DType>;                   \
        cpu::MAP(dst, src0, src1,                                                                  \
                 [](auto x, auto y) { return cpu::narrow<D>(cpu::OP{}(cpu::widen<C>(x), cpu::widen<C>(y))); }); \
        return {};                                                                                 \
    }

PYPTO_EXPAND_INSTR(TROWEXPANDADD, map2_row_expand, Add)
PYPTO_EXPAND_INSTR(TROWEXPANDSUB, map2_row_expand, Sub)
PYPTO_EXPAND_INSTR(TROWEXPANDMUL, map2_row_expand, Mul)
PYPTO_EXPAND_INSTR(TROWEXPANDDIV, map2_row_expand, Div)
PYPTO_EXPAND_INSTR(TROWEXPANDMAX, map2_row_expand, Max)
PYPTO_EXPAND_INSTR(TROWEXPANDMIN, map2_row_expand, Min)
PYPTO_EXPAND_INSTR(TCOLEXPANDADD, map2_col_expand, Add)
PYPTO_EXPAND_INSTR(TCOLEXPANDSUB, map2_col_expand, Sub)
PYPTO_EXPAND_INSTR(TCOLEXPANDMUL, map2_col_expand, Mul)
PYPTO_EXPAND_INSTR(TCOLEXPANDDIV, map2_col_expand, Div)
PYPTO_EXPAND_INSTR(TCOLEXPANDMAX, map2_col_expand, Max)
PYPTO_EXPAND_INSTR(TCOLEXPANDMIN, map2_col_expand, Min)
#undef PYPTO_EXPAND_INSTR

// dst(r, c) = src(r, 0)
template <class TD, class TS, class... Rest>
inline RecordEvent TROWEXPAND(TD& dst, TS& src, Rest&...)
{
    using D = typename TD::DType;
    const auto* s = src.data();
    cpu::fill_indexed(dst, [s](size_t r, size_t) { return cpu::convert<D>(s[r * TS::RowStride], RoundMode::CAST_RINT); });
    return {};
}

// dst(r, c) = src(0, c)
template <class TD, class TS, class... Rest>
inline RecordEvent TCOLEXPAND(TD& dst, TS& src, Rest&...)
{
    using D = typename TD::DType;
    const auto* s = src.data();
    cpu::fill_indexed(dst, [s](size_t, size_t c) { return cpu::convert<D>(s[c * TS::ColStride], RoundMode::CAST_RINT); });
    return {};
}

}  // namespace pto
