// pypto's CPU PTO: the loops every vector instruction is built from. An instruction works on the
// destination tile's valid region; sources are read over the same region, each at its own
// strides (tile.hpp: row-major, or a ColMajor vector tile's columns). Values are computed
// in fp32 for fp16/bf16/fp32 tiles (64-bit for integers) and rounded to the destination type
// once per instruction. Inner loops are contiguous and carry `ivdep` (a destination may be the
// very same tile as a source, never a shifted one), so g++ vectorises them.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "math.hpp"
#include "tile.hpp"

namespace pto::cpu {

// dst(r, c) = f(src(r, c)) over dst's valid region; f maps a source element to a dst element.
template <class TD, class TS, class F>
inline void map1(TD& dst, const TS& src, F f)
{
    using D = typename TD::DType;
    using S = typename TS::DType;
    const size_t rows = dst.GetValidRow();
    const size_t cols = dst.GetValidCol();
    D* d = dst.data();
    const S* s = src.data();
    if (rows_contiguous<TD, TS> && cols == size_t(TD::Cols) && cols == size_t(TS::Cols)) {
        const size_t n = rows * cols;
#pragma GCC ivdep
        for (size_t i = 0; i < n; ++i) d[i] = f(s[i]);
        return;
    }
    for (size_t r = 0; r < rows; ++r) {
        D* dr = d + r * TD::RowStride;
        const S* sr = s + r * TS::RowStride;
#pragma GCC ivdep
        for (size_t c = 0; c < cols; ++c) dr[c * TD::ColStride] = f(sr[c * TS::ColStride]);
    }
}

// dst(r, c) = f(a(r, c), b(r, c)) over dst's valid region.
template <class TD, class TA, class TB, class F>
inline void map2(TD& dst, const TA& a, const TB& b, F f)
{
    using D = typename TD::DType;
    using A = typename TA::DType;
    using B = typename TB::DType;
    const size_t rows = dst.GetValidRow();
    const size_t cols = dst.GetValidCol();
    D* d = dst.data();
    const A* pa = a.data();
    const B* pb = b.data();
    if (rows_contiguous<TD, TA, TB> && cols == size_t(TD::Cols) && cols == size_t(TA::Cols) &&
        cols == size_t(TB::Cols)) {
        const size_t n = rows * cols;
#pragma GCC ivdep
        for (size_t i = 0; i < n; ++i) d[i] = f(pa[i], pb[i]);
        return;
    }
    for (size_t r = 0; r < rows; ++r) {
        D* dr = d + r * TD::RowStride;
        const A* ar = pa + r * TA::RowStride;
        const B* br = pb + r * TB::RowStride;
#pragma GCC ivdep
        for (size_t c = 0; c < cols; ++c) dr[c * TD::ColStride] = f(ar[c * TA::ColStride], br[c * TB::ColStride]);
    }
}

// dst(r, c) = f(a(r, c), b(r, 0)): b is read as a [rows, 1] column.
template <class TD, class TA, class TB, class F>
inline void map2_row_expand(TD& dst, const TA& a, const TB& b, F f)
{
    using D = typename TD::DType;
    using A = typename TA::DType;
    using B = typename TB::DType;
    const size_t rows = dst.GetValidRow();
    const size_t cols = dst.GetValidCol();
    D* d = dst.data();
    const A* pa = a.data();
    const B* pb = b.data();
    for (size_t r = 0; r < rows; ++r) {
        D* dr = d + r * TD::RowStride;
        const A* ar = pa + r * TA::RowStride;
        const B br = pb[r * TB::RowStride];
#pragma GCC ivdep
        for (size_t c = 0; c < cols; ++c) dr[c * TD::ColStride] = f(ar[c * TA::ColStride], br);
    }
}

// dst(r, c) = f(a(r, c), b(0, c)): b is read as a [1, cols] row.
template <class TD, class TA, class TB, class F>
inline void map2_col_expand(TD& dst, const TA& a, const TB& b, F f)
{
    using D = typename TD::DType;
    using A = typename TA::DType;
    using B = typename TB::DType;
    const size_t rows = dst.GetValidRow();
    const size_t cols = dst.GetValidCol();
    D* d = dst.data();
    const A* pa = a.data();
    const B* pb = b.data();
    for (size_t r = 0; r < rows; ++r) {
        D* dr = d + r * TD::RowStride;
        const A* ar = pa + r * TA::RowStride;
#pragma GCC ivdep
        for (size_t c = 0; c < cols; ++c) dr[c * TD::ColStride] = f(ar[c * TA::ColStride], pb[c * TB::ColStride]);
    }
}

// dst(r, c) = f(r, c) over dst's valid region (fills and generators).
template <class TD, class F>
inline void fill_indexed(TD& dst, F f)
{
    using D = typename TD::DType;
    const size_t rows = dst.GetValidRow();
    const size_t cols = dst.GetValidCol();
    D* d = dst.data();
    for (size_t r = 0; r < rows; ++r) {
        D* dr = d + r * TD::RowStride;
        for (size_t c = 0; c < cols; ++c) dr[c * TD::ColStride] = f(r, c);
    }
}

// ---------------------------------------------------------------- arithmetic as data
// Each operation maps computed values (float or int64) to a computed value.
struct Add {
    template <class C> C operator()(C a, C b) const { return a + b; }
};
struct Sub {
    template <class C> C operator()(C a, C b) const { return a - b; }
};
struct Mul {
    template <class C> C operator()(C a, C b) const { return a * b; }
};
struct Div {
    template <class C>
    C operator()(C a, C b) const
    {
        if constexpr (std::is_floating_point_v<C>) {
            return a / b;
        } else {  // integer tiles: the quotient truncated toward zero (true division, then the store)
            return b == 0 ? C(0) : a / b;
        }
    }
};
struct Max {  // NaN propagates, as torch.maximum
    template <class C> C operator()(C a, C b) const { return (a > b || a != a) ? a : b; }
};
struct Min {
    template <class C> C operator()(C a, C b) const { return (a < b || a != a) ? a : b; }
};
struct And {
    template <class C> C operator()(C a, C b) const { return a & b; }
};
struct Or {
    template <class C> C operator()(C a, C b) const { return a | b; }
};
struct Pow {
    template <class C> C operator()(C a, C b) const { return static_cast<C>(std::pow(a, b)); }
};
struct Rem {  // Python / torch.remainder: the result takes the divisor's sign
    template <class C>
    C operator()(C a, C b) const
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
};

// Elementwise instruction on two tiles: widen both, apply op, round to the destination.
template <class Op, class TD, class TA, class TB>
inline void binary(TD& dst, const TA& a, const TB& b)
{
    using D = typename TD::DType;
    using C = common_calc_t<D, typename TA::DType, typename TB::DType>;
    map2(dst, a, b, [](auto x, auto y) { return narrow<D>(Op{}(widen<C>(x), widen<C>(y))); });
}

// Elementwise instruction on a tile and a scalar (scalar_first: the scalar is the left operand).
template <class Op, bool scalar_first, class TD, class TS, class V>
inline void binary_scalar(TD& dst, const TS& src, V scalar)
{
    using D = typename TD::DType;
    using C = std::conditional_t<std::is_floating_point_v<V>, float,
                                 common_calc_t<D, typename TS::DType>>;
    const C s = static_cast<C>(scalar);
    map1(dst, src, [s](auto x) {
        const C v = widen<C>(x);
        return narrow<D>(scalar_first ? Op{}(s, v) : Op{}(v, s));
    });
}

// Elementwise function of one tile, computed in fp32 (or int64 for integer tiles).
template <class TD, class TS, class F>
inline void unary(TD& dst, const TS& src, F f)
{
    using D = typename TD::DType;
    using C = common_calc_t<D, typename TS::DType>;
    map1(dst, src, [f](auto x) { return narrow<D>(f(widen<C>(x))); });
}

template <class C>
inline bool compare(C a, C b, CmpMode mode)
{
    switch (mode) {
        case CmpMode::EQ:
            return a == b;
        case CmpMode::NE:
            return a != b;
        case CmpMode::LT:
            return a < b;
        case CmpMode::LE:
            return a <= b;
        case CmpMode::GT:
            return a > b;
        case CmpMode::GE:
            return a >= b;
    }
    return false;
}

}  // namespace pto::cpu
