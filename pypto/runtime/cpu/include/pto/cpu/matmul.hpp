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

#if defined(PYPTO_RT_SEPARATE)
#define PYPTO_GEMM_DEF
#else
#define PYPTO_GEMM_DEF inline
#endif

// C[0:M, 0:N] (+)= A[0:M, 0:K] @ B[0:K, 0:N], fp32, row strides lda / ldb / ldc (gemm.hpp).
PYPTO_GEMM_DEF void gemm_f32(size_t M, size_t N, size_t K, const float* A, size_t lda, const float* B, size_t ldb,
                             float* C, size_t ldc, bool accumulate = true);

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

#if !defined(PYPTO_RT_SEPARATE)
#include "gemm.hpp"
#endif
