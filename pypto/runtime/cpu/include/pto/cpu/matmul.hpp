// pypto's CPU PTO: TMATMUL / TMATMUL_ACC — dst(L0C) [+]= a(L0A) @ b(L0B).
// M and N come from dst's valid region, K from a's valid columns. fp16/bf16 inputs are widened
// to fp32 once per call and accumulated in fp32 (int8 in int32). The fp32 product runs in a
// register-blocked kernel (8 rows x 32 columns of accumulators) written with g++ vector
// extensions, which -march=native maps to AVX-512 / AVX2.
#pragma once

#include <vector>

#include "elementwise.hpp"

namespace pto::cpu {

typedef float f32x16 __attribute__((vector_size(64)));

inline f32x16 load16(const float* p)
{
    f32x16 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline void store16(float* p, f32x16 v) { std::memcpy(p, &v, sizeof v); }

constexpr size_t kMr = 8;
constexpr size_t kNr = 32;

// C[0:8, 0:32] += A[0:8, 0:K] @ B[0:K, 0:32]
inline void gemm_block_8x32(size_t K, const float* A, size_t lda, const float* B, size_t ldb, float* C, size_t ldc)
{
    f32x16 c0[kMr], c1[kMr];
    for (size_t i = 0; i < kMr; ++i) {
        c0[i] = load16(C + i * ldc);
        c1[i] = load16(C + i * ldc + 16);
    }
    for (size_t k = 0; k < K; ++k) {
        const f32x16 b0 = load16(B + k * ldb);
        const f32x16 b1 = load16(B + k * ldb + 16);
        for (size_t i = 0; i < kMr; ++i) {
            const float a = A[i * lda + k];
            c0[i] += a * b0;
            c1[i] += a * b1;
        }
    }
    for (size_t i = 0; i < kMr; ++i) {
        store16(C + i * ldc, c0[i]);
        store16(C + i * ldc + 16, c1[i]);
    }
}

// C[0:m, 0:n] += A[0:m, 0:K] @ B[0:K, 0:n] for the edges the blocked kernel does not cover.
inline void gemm_edge(size_t m, size_t n, size_t K, const float* A, size_t lda, const float* B, size_t ldb, float* C,
                      size_t ldc)
{
    for (size_t i = 0; i < m; ++i)
        for (size_t k = 0; k < K; ++k) {
            const float a = A[i * lda + k];
            float* ci = C + i * ldc;
            const float* bk = B + k * ldb;
            for (size_t j = 0; j < n; ++j) ci[j] += a * bk[j];
        }
}

// C[M, N] += A[M, K] @ B[K, N], all fp32 row-major with leading dimensions.
inline void gemm_f32(size_t M, size_t N, size_t K, const float* A, size_t lda, const float* B, size_t ldb, float* C,
                     size_t ldc)
{
    const size_t m_full = M / kMr * kMr;
    const size_t n_full = N / kNr * kNr;
    for (size_t j = 0; j < n_full; j += kNr) {
        for (size_t i = 0; i < m_full; i += kMr) gemm_block_8x32(K, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc);
        if (m_full < M) gemm_edge(M - m_full, kNr, K, A + m_full * lda, lda, B + j, ldb, C + m_full * ldc + j, ldc);
    }
    if (n_full < N) gemm_edge(M, N - n_full, K, A, lda, B + n_full, ldb, C + n_full, ldc);
}

// fp32 copy of a rows x cols region (row stride ld) into a thread-local scratch buffer.
template <class T>
inline const float* as_f32(const T* src, size_t rows, size_t cols, size_t ld, std::vector<float>& scratch)
{
    scratch.resize(rows * cols);
    for (size_t r = 0; r < rows; ++r) {
        float* out = scratch.data() + r * cols;
        const T* in = src + r * ld;
        for (size_t c = 0; c < cols; ++c) out[c] = widen<float>(in[c]);
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
        if (!accumulate)
            for (size_t i = 0; i < M; ++i) std::memset(cp + i * TC::Cols, 0, N * sizeof(float));
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
        gemm_f32(M, N, K, ap, lda, bp, ldb, cp, TC::Cols);
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
