// pypto's CPU PTO: data movement — TLOAD (GM -> tile), TSTORE (tile -> GM), TMOV (tile -> tile
// across memories, converting dtype when the destination's differs, e.g. L0C fp32 -> fp16 on
// the FIX pipe) and TTRANS (transpose).
#pragma once

#include "elementwise.hpp"

namespace pto::cpu {

// check_box's failure, out of line and not a template (built once per translation unit).
[[noreturn]] __attribute__((noinline, cold)) inline void box_mismatch(int64_t box_rows, int64_t box_cols,
                                                                       size_t rows, size_t cols, const char* what)
{
    pypto::fail(std::string(what) + ": the GM box is " + std::to_string(box_rows) + "x" + std::to_string(box_cols) +
                " but the tile's valid region is " + std::to_string(rows) + "x" + std::to_string(cols));
}

template <class GT>
inline void check_box(const GT& gm, size_t rows, size_t cols, const char* what)
{
    const bool leading_ones = gm.GetShape(0) == 1 && gm.GetShape(1) == 1 && gm.GetShape(2) == 1;
    if (!leading_ones || size_t(gm.GetShape(3)) != rows || size_t(gm.GetShape(4)) != cols) {
        box_mismatch(gm.GetShape(3), gm.GetShape(4), rows, cols, what);
    }
}

typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

// dst[j][i] = src[i][j] for an 8 x 8 block of 4-byte elements (rows at strides src_ld / dst_ld),
// in registers: three rounds of two-input shuffles.
template <class T>
inline void transpose8x8(const T* src, size_t src_ld, T* dst, size_t dst_ld)
{
    static_assert(sizeof(T) == 4, "transpose8x8 moves 4-byte elements");
    u32x8 r[8], t[8], u[8];
    for (int i = 0; i < 8; ++i) std::memcpy(&r[i], src + i * src_ld, sizeof(u32x8));
    const i32x8 lo1 = {0, 8, 1, 9, 4, 12, 5, 13}, hi1 = {2, 10, 3, 11, 6, 14, 7, 15};
    const i32x8 lo2 = {0, 1, 8, 9, 4, 5, 12, 13}, hi2 = {2, 3, 10, 11, 6, 7, 14, 15};
    const i32x8 lo4 = {0, 1, 2, 3, 8, 9, 10, 11}, hi4 = {4, 5, 6, 7, 12, 13, 14, 15};
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shuffle(r[i], r[i + 1], lo1);
        t[i + 1] = __builtin_shuffle(r[i], r[i + 1], hi1);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = __builtin_shuffle(t[i], t[i + 2], lo2);
        u[i + 1] = __builtin_shuffle(t[i], t[i + 2], hi2);
        u[i + 2] = __builtin_shuffle(t[i + 1], t[i + 3], lo2);
        u[i + 3] = __builtin_shuffle(t[i + 1], t[i + 3], hi2);
    }
    for (int i = 0; i < 4; ++i) {
        const u32x8 a = __builtin_shuffle(u[i], u[i + 4], lo4);
        const u32x8 b = __builtin_shuffle(u[i], u[i + 4], hi4);
        std::memcpy(dst + i * dst_ld, &a, sizeof a);
        std::memcpy(dst + (i + 4) * dst_ld, &b, sizeof b);
    }
}

// dst(r, c) = src(c, r) for r < rows, c < cols: element (i, j) of src at src[i * src_ld + j].
// 4-byte types go through 8 x 8 register blocks; the rest and the edges element by element.
template <class T>
inline void transpose_copy(const T* src, size_t src_ld, T* dst, size_t dst_ld, size_t rows, size_t cols)
{
    size_t r0 = 0, c0 = 0;
    if constexpr (sizeof(T) == 4) {
        const size_t r8 = rows / 8 * 8, c8 = cols / 8 * 8;
        for (size_t c = 0; c < c8; c += 8)
            for (size_t r = 0; r < r8; r += 8) transpose8x8(src + c * src_ld + r, src_ld, dst + r * dst_ld + c, dst_ld);
        r0 = r8;
        c0 = c8;
        for (size_t r = 0; r < r8; ++r)           // right edge of the full-row blocks
            for (size_t c = c0; c < cols; ++c) dst[r * dst_ld + c] = src[c * src_ld + r];
    }
    for (size_t r = r0; r < rows; ++r)
        for (size_t c = 0; c < cols; ++c) dst[r * dst_ld + c] = src[c * src_ld + r];
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
    if constexpr (cpu::rows_contiguous<TD>) {
        if (cs == 1 && rs == int64_t(cols) && cols == size_t(TD::Cols)) {   // one contiguous block
            std::memcpy(t, g, rows * cols * sizeof(D));
            return {};
        }
        if (rs == 1 && cs > 0) {      // a transposed box: GM rows become tile columns
            cpu::transpose_copy(g, size_t(cs), t, size_t(TD::Cols), rows, cols);
            return {};
        }
    }
    for (size_t r = 0; r < rows; ++r) {
        const D* gr = g + int64_t(r) * rs;
        D* tr = t + r * TD::RowStride;
        if (cpu::rows_contiguous<TD> && cs == 1) {
            std::memcpy(tr, gr, cols * sizeof(D));
        } else {
            for (size_t c = 0; c < cols; ++c) tr[c * TD::ColStride] = gr[int64_t(c) * cs];
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
    if constexpr (std::is_same_v<G, S> && cpu::rows_contiguous<TS>) {
        if (cs == 1 && rs == int64_t(cols) && cols == size_t(TS::Cols)) {   // one contiguous block
            std::memcpy(g, t, rows * cols * sizeof(S));
            return {};
        }
    }
    for (size_t r = 0; r < rows; ++r) {
        G* gr = g + int64_t(r) * rs;
        const S* tr = t + r * TS::RowStride;
        if constexpr (cpu::rows_contiguous<TS> && std::is_same_v<G, S>) {
            if (cs == 1) {
                std::memcpy(gr, tr, cols * sizeof(S));
                continue;
            }
        } else if constexpr (cpu::rows_contiguous<TS> && cpu::bulk_convertible<G, S>) {
            if (cs == 1) {
                cpu::convert_row(tr, gr, cols);
                continue;
            }
        }
        for (size_t c = 0; c < cols; ++c)
            gr[int64_t(c) * cs] = cpu::convert<G>(tr[c * TS::ColStride], RoundMode::CAST_RINT);
    }
    return {};
}

// Copy the destination's valid region from the source, converting dtype when they differ.
template <class TD, class TS, class... Rest, std::enable_if_t<is_tile_v<TD> && is_tile_v<TS>, int> = 0>
inline RecordEvent TMOV(TD& dst, TS& src, Rest&...)
{
    using D = typename TD::DType;
    using S = typename TS::DType;
    if constexpr (!cpu::rows_contiguous<TD, TS>) {
        cpu::map1(dst, src, [](S x) { return cpu::convert<D>(x, RoundMode::CAST_RINT); });
    } else if constexpr (std::is_same_v<D, S>) {
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
    if constexpr (std::is_same_v<D, std::remove_cv_t<std::remove_reference_t<decltype(*s)>>> &&
                  cpu::rows_contiguous<TD, TS>) {
        cpu::transpose_copy(s, size_t(TS::Cols), d, size_t(TD::Cols), rows, cols);
        return {};
    }
    constexpr size_t kBlock = 32;
    for (size_t r0 = 0; r0 < rows; r0 += kBlock)
        for (size_t c0 = 0; c0 < cols; c0 += kBlock)
            for (size_t r = r0; r < std::min(rows, r0 + kBlock); ++r)
                for (size_t c = c0; c < std::min(cols, c0 + kBlock); ++c)
                    d[cpu::offset<TD>(r, c)] = cpu::convert<D>(s[cpu::offset<TS>(c, r)], RoundMode::CAST_RINT);
    return {};
}

}  // namespace pto
