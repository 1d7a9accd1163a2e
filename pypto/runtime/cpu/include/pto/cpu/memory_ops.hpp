// pypto's CPU PTO: data movement — TLOAD (GM -> tile), TSTORE (tile -> GM), TMOV (tile -> tile
// across memories, converting dtype when the destination's differs, e.g. L0C fp32 -> fp16 on
// the FIX pipe) and TTRANS (transpose).
#pragma once

#include "elementwise.hpp"

namespace pto::cpu {

template <class GT>
inline void check_box(const GT& gm, size_t rows, size_t cols, const char* what)
{
    const bool leading_ones = gm.GetShape(0) == 1 && gm.GetShape(1) == 1 && gm.GetShape(2) == 1;
    if (!leading_ones || size_t(gm.GetShape(3)) != rows || size_t(gm.GetShape(4)) != cols) {
        pypto::fail(std::string(what) + ": the GM box is " + std::to_string(gm.GetShape(3)) + "x" +
                    std::to_string(gm.GetShape(4)) + " but the tile's valid region is " + std::to_string(rows) +
                    "x" + std::to_string(cols));
    }
}

}  // namespace pto::cpu

namespace pto {

// Copy the GM box into the tile's valid region (element (r, c) at r * stride3 + c * stride4).
template <class TD, class GT, class... Rest, std::enable_if_t<is_tile_v<TD> && !is_tile_v<GT>, int> = 0>
inline RecordEvent TLOAD(TD& dst, GT& src, Rest&...)
{
    using D = typename TD::DType;
    static_assert(std::is_same_v<D, typename GT::DType>, "TLOAD: the tile and the GM tensor have one dtype");
    const size_t rows = dst.GetValidRow();
    const size_t cols = dst.GetValidCol();
    cpu::check_box(src, rows, cols, "TLOAD");
    const int64_t rs = src.GetStride(3);
    const int64_t cs = src.GetStride(4);
    const D* g = src.data();
    D* t = dst.data();
    if (cs == 1 && rs == int64_t(cols) && cols == size_t(TD::Cols)) {   // one contiguous block
        std::memcpy(t, g, rows * cols * sizeof(D));
        return {};
    }
    for (size_t r = 0; r < rows; ++r) {
        const D* gr = g + int64_t(r) * rs;
        D* tr = t + r * TD::Cols;
        if (cs == 1) {
            std::memcpy(tr, gr, cols * sizeof(D));
        } else {
            for (size_t c = 0; c < cols; ++c) tr[c] = gr[int64_t(c) * cs];
        }
    }
    return {};
}

// Copy the tile's valid region into the GM box, converting to the GM dtype if it differs.
template <class GT, class TS, class... Rest, std::enable_if_t<is_tile_v<TS> && !is_tile_v<GT>, int> = 0>
inline RecordEvent TSTORE(GT& dst, TS& src, Rest&...)
{
    using G = typename GT::DType;
    using S = typename TS::DType;
    const size_t rows = src.GetValidRow();
    const size_t cols = src.GetValidCol();
    cpu::check_box(dst, rows, cols, "TSTORE");
    const int64_t rs = dst.GetStride(3);
    const int64_t cs = dst.GetStride(4);
    G* g = dst.data();
    const S* t = src.data();
    if constexpr (std::is_same_v<G, S>) {
        if (cs == 1 && rs == int64_t(cols) && cols == size_t(TS::Cols)) {   // one contiguous block
            std::memcpy(g, t, rows * cols * sizeof(S));
            return {};
        }
    }
    for (size_t r = 0; r < rows; ++r) {
        G* gr = g + int64_t(r) * rs;
        const S* tr = t + r * TS::Cols;
        if constexpr (std::is_same_v<G, S>) {
            if (cs == 1) {
                std::memcpy(gr, tr, cols * sizeof(S));
                continue;
            }
        } else if constexpr (cpu::bulk_convertible<G, S>) {
            if (cs == 1) {
                cpu::convert_row(tr, gr, cols);
                continue;
            }
        }
        for (size_t c = 0; c < cols; ++c) gr[int64_t(c) * cs] = cpu::convert<G>(tr[c], RoundMode::CAST_RINT);
    }
    return {};
}

// Copy the destination's valid region from the source, converting dtype when they differ.
template <class TD, class TS, class... Rest, std::enable_if_t<is_tile_v<TD> && is_tile_v<TS>, int> = 0>
inline RecordEvent TMOV(TD& dst, TS& src, Rest&...)
{
    using D = typename TD::DType;
    using S = typename TS::DType;
    if constexpr (std::is_same_v<D, S>) {
        const size_t rows = dst.GetValidRow();
        const size_t cols = dst.GetValidCol();
        D* d = dst.data();
        const S* s = src.data();
        if (d == s && TD::Cols == TS::Cols) return {};
        if (cols == size_t(TD::Cols) && cols == size_t(TS::Cols)) {
            std::memmove(d, s, rows * cols * sizeof(D));
            return {};
        }
        for (size_t r = 0; r < rows; ++r) std::memmove(d + r * TD::Cols, s + r * TS::Cols, cols * sizeof(D));
    } else if constexpr (cpu::bulk_convertible<D, S>) {
        const size_t rows = dst.GetValidRow();
        const size_t cols = dst.GetValidCol();
        for (size_t r = 0; r < rows; ++r) cpu::convert_row(src.data() + r * TS::Cols, dst.data() + r * TD::Cols, cols);
    } else {
        cpu::map1(dst, src, [](S x) { return cpu::convert<D>(x, RoundMode::CAST_RINT); });
    }
    return {};
}

// dst(r, c) = src(c, r) over dst's valid region, in cache-sized blocks.
template <class TD, class TS, class... Rest>
inline RecordEvent TTRANS(TD& dst, TS& src, Rest&...)
{
    using D = typename TD::DType;
    const size_t rows = dst.GetValidRow();
    const size_t cols = dst.GetValidCol();
    D* d = dst.data();
    const auto* s = src.data();
    if (static_cast<const void*>(d) == static_cast<const void*>(s)) {
        pypto::fail("TTRANS: the destination tile must not be the source tile");
    }
    constexpr size_t kBlock = 32;
    for (size_t r0 = 0; r0 < rows; r0 += kBlock)
        for (size_t c0 = 0; c0 < cols; c0 += kBlock)
            for (size_t r = r0; r < std::min(rows, r0 + kBlock); ++r)
                for (size_t c = c0; c < std::min(cols, c0 + kBlock); ++c)
                    d[r * TD::Cols + c] = cpu::convert<D>(s[c * TS::Cols + r], RoundMode::CAST_RINT);
    return {};
}

}  // namespace pto
