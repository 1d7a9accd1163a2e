// pypto's CPU PTO: the fp32 product of TMATMUL (matmul.hpp), register-blocked. Inline when
// matmul.hpp is included alone; with PYPTO_RT_SEPARATE (the build units of
// pypto/runtime/cpu/units.py) compiled once, in the runtime unit at the cube kernels' -O level, so
// that the kernel units neither compile it again nor need -O3 for it.
#pragma once

#include "matmul.hpp"

namespace pto::cpu {

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
PYPTO_GEMM_DEF void gemm_f32(size_t M, size_t N, size_t K, const float* A, size_t lda, const float* B,
                             size_t ldb, float* C, size_t ldc, bool accumulate)
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

}  // namespace pto::cpu
