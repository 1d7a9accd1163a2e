// pypto's CPU PTO: TMATMUL / TMATMUL_ACC — dst(L0C) [+]= a(L0A) @ b(L0B).
// M and N come from dst's valid region, K from a's valid columns. fp16/bf16 inputs are widened
// to fp32 once per call and accumulated in fp32 (int8 in int32). The fp32 product runs in a
// register-blocked kernel (up to 8 rows x 2 vectors of columns of accumulators) written with g++
// vector extensions. The vector is as wide as the widest register the build targets (64 bytes
// with AVX-512, 32 with AVX, 16 otherwise): a vector wider than the target's registers passed by
// value changes the ABI and g++ warns (-Wpsabi) on every such host.
#pragma once

#include <vector>

#include "elementwise.hpp"

namespace pto::cpu {

#if defined(__AVX512F__)
constexpr size_t kLanes = 16;
#elif defined(__AVX__)
constexpr size_t kLanes = 8;
#else
constexpr size_t kLanes = 4;
#endif
typedef float f32xv __attribute__((vector_size(kLanes * sizeof(float))));

inline f32xv loadv(const float* p)
{
    f32xv v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline void storev(float* p, f32xv v) { std::memcpy(p, &v, sizeof v); }

constexpr size_t kMr = 8;    // rows of C per micro-kernel call

// C[0:MR, 0:kLanes*NV] (+)= A[0:MR, 0:K] @ B[0:K, 0:kLanes*NV], the accumulators in registers for the
// whole K loop. `load_c` false starts them at zero (a plain TMATMUL: no memset, no C reads).
// Every C element sums its products in k order with one fused multiply-add each, as before.
template <size_t MR, size_t NV>
inline void gemm_micro(size_t K, const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc,
                       bool load_c)
{
    f32xv acc[MR][NV];
    for (size_t i = 0; i < MR; ++i)
        for (size_t v = 0; v < NV; ++v) acc[i][v] = load_c ? loadv(C + i * ldc + v * kLanes) : f32xv{};
    for (size_t k = 0; k < K; ++k) {
        f32xv b[NV];
        for (size_t v = 0; v < NV; ++v) b[v] = loadv(B + k * ldb + v * kLanes);
        for (size_t i = 0; i < MR; ++i) {
            const float a = A[i * lda + k];
            for (size_t v = 0; v < NV; ++v) acc[i][v] += a * b[v];
        }
    }
    for (size_t i = 0; i < MR; ++i)
        for (size_t v = 0; v < NV; ++v) storev(C + i * ldc + v * kLanes, acc[i][v]);
}

template <size_t NV>
inline void gemm_rows(size_t m, size_t K, const float* A, size_t lda, const float* B, size_t ldb, float* C,
                      size_t ldc, bool load_c)
{
    switch (m) {
        case 1: return gemm_micro<1, NV>(K, A, lda, B, ldb, C, ldc, load_c);
        case 2: return gemm_micro<2, NV>(K, A, lda, B, ldb, C, ldc, load_c);
        case 3: return gemm_micro<3, NV>(K, A, lda, B, ldb, C, ldc, load_c);
        case 4: return gemm_micro<4, NV>(K, A, lda, B, ldb, C, ldc, load_c);
        case 5: return gemm_micro<5, NV>(K, A, lda, B, ldb, C, ldc, load_c);
        case 6: return gemm_micro<6, NV>(K, A, lda, B, ldb, C, ldc, load_c);
        case 7: return gemm_micro<7, NV>(K, A, lda, B, ldb, C, ldc, load_c);
        default: return gemm_micro<8, NV>(K, A, lda, B, ldb, C, ldc, load_c);
    }
}

// C[M, 0:kLanes*NV] over all M in blocks of kMr rows (the last block shorter).
template <size_t NV>
inline void gemm_panel(size_t M, size_t K, const float* A, size_t lda, const float* B, size_t ldb, float* C,
                       size_t ldc, bool load_c)
{
    for (size_t i = 0; i < M; i += kMr)
        gemm_rows<NV>(std::min(kMr, M - i), K, A + i * lda, lda, B, ldb, C + i * ldc, ldc, load_c);
}

// C[M, N] (+)= A[M, K] @ B[K, N], all fp32 row-major with leading dimensions. Columns go in
// panels of two vectors and one; a last partial panel narrower than a vector runs on zero-padded copies.
inline void gemm_f32(size_t M, size_t N, size_t K, const float* A, size_t lda, const float* B, size_t ldb, float* C,
                     size_t ldc, bool accumulate = true)
{
    size_t j = 0;
    for (; j + 2 * kLanes <= N; j += 2 * kLanes) gemm_panel<2>(M, K, A, lda, B + j, ldb, C + j, ldc, accumulate);
    for (; j + kLanes <= N; j += kLanes) gemm_panel<1>(M, K, A, lda, B + j, ldb, C + j, ldc, accumulate);
    if (j == N || M == 0) return;
    const size_t n = N - j;
    thread_local std::vector<float> bpad, cpad;
    bpad.assign(K * kLanes, 0.0f);
    cpad.assign(M * kLanes, 0.0f);
    for (size_t k = 0; k < K; ++k) std::memcpy(bpad.data() + k * kLanes, B + k * ldb + j, n * sizeof(float));
    if (accumulate)
        for (size_t i = 0; i < M; ++i) std::memcpy(cpad.data() + i * kLanes, C + i * ldc + j, n * sizeof(float));
    gemm_panel<1>(M, K, A, lda, bpad.data(), kLanes, cpad.data(), kLanes, accumulate);
    for (size_t i = 0; i < M; ++i) std::memcpy(C + i * ldc + j, cpad.data() + i * kLanes, n * sizeof(float));
}

// fp32 copy of a rows x cols region (row stride ld) into a thread-local scratch buffer.
template <class T>
inline const float* as_f32(const T* src, size_t rows, size_t cols, size_t ld, std::vector<float>& scratch)
{
    scratch.resize(rows * cols);
    for (size_t r = 0; r < rows; ++r) {
        float* out = scratch.data() + r * cols;
        const T* in = src + r * ld;
        if constexpr (bulk_convertible<float, T>) {
            convert_row(in, out, cols);
        } else {
            for (size_t c = 0; c < cols; ++c) out[c] = widen<float>(in[c]);
        }
    }
    return scratch.data();
}

template <class TC, class TA, class TB>
inline void matmul(TC& c, const TA& a, const TB& b, bool accumulate)
{
    using CT = typename TC::DType;
    using AT = typename TA::DType;
    using BT = typename TB::DType;
    const size_t M = c.GetValidRow();
    const size_t N = c.GetValidCol();
    const size_t K = a.GetValidCol();
    if (a.GetValidRow() < M || b.GetValidRow() < K || b.GetValidCol() < N) {
        pypto::fail("TMATMUL: operands' valid shapes [" + std::to_string(a.GetValidRow()) + ", " +
                    std::to_string(a.GetValidCol()) + "] @ [" + std::to_string(b.GetValidRow()) + ", " +
                    std::to_string(b.GetValidCol()) + "] do not cover the result's [" + std::to_string(M) + ", " +
                    std::to_string(N) + "]");
    }
    CT* cp = c.data();
    if constexpr (std::is_same_v<CT, float>) {
        thread_local std::vector<float> a32, b32;
        const float* ap;
        const float* bp;
        size_t lda = TA::Cols, ldb = TB::Cols;
        if constexpr (std::is_same_v<AT, float>) {
            ap = a.data();
        } else {
            ap = as_f32(a.data(), M, K, TA::Cols, a32);
            lda = K;
        }
        if constexpr (std::is_same_v<BT, float>) {
            bp = b.data();
        } else {
            bp = as_f32(b.data(), K, N, TB::Cols, b32);
            ldb = N;
        }
        gemm_f32(M, N, K, ap, lda, bp, ldb, cp, TC::Cols, accumulate);
    } else {  // integer cube (int8 x int8 -> int32)
        const AT* ap = a.data();
        const BT* bp = b.data();
        for (size_t i = 0; i < M; ++i)
            for (size_t j = 0; j < N; ++j) {
                int64_t acc = accumulate ? int64_t(cp[i * TC::Cols + j]) : 0;
                for (size_t k = 0; k < K; ++k) acc += int64_t(ap[i * TA::Cols + k]) * int64_t(bp[k * TB::Cols + j]);
                cp[i * TC::Cols + j] = static_cast<CT>(acc);
            }
    }
}

}  // namespace pto::cpu

namespace pto {

template <class TC, class TA, class TB, class... Rest, std::enable_if_t<is_tile_v<TB>, int> = 0>
inline RecordEvent TMATMUL(TC& c, TA& a, TB& b, Rest&...)
{
    cpu::matmul(c, a, b, false);
    return {};
}

// TMATMUL_ACC(c_out, c_in, a, b): c_out = c_in + a @ b.
template <class TC, class TA, class TB, class... Rest, std::enable_if_t<is_tile_v<TB>, int> = 0>
inline RecordEvent TMATMUL_ACC(TC& c_out, TC& c_in, TA& a, TB& b, Rest&...)
{
    if (c_out.data() != c_in.data()) TMOV(c_out, c_in);
    cpu::matmul(c_out, a, b, true);
    return {};
}

// TMATMUL_ACC(c, a, b): c += a @ b.
template <class TC, class TA, class TB, std::enable_if_t<is_tile_v<TB> && !std::is_same_v<TC, TA>, int> = 0>
inline RecordEvent TMATMUL_ACC(TC& c, TA& a, TB& b)
{
    cpu::matmul(c, a, b, true);
    return {};
}

}  // namespace pto
