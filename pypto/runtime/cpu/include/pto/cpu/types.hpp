// pypto's CPU implementation of the PTO tile API: element types, enums and device qualifiers.
// Names follow the public pto-isa headers so that generated kernels compile against either.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

// Device qualifiers and entry-point markers are empty on the CPU.
#ifndef __global__
#define __global__
#endif
#define AICORE
#define __aicore__
#define __gm__
#define __ubuf__
#define __cbuf__
#define __ca__
#define __cb__
#define __cc__

// fp16 storage: g++ 12 supports _Float16 on x86-64 (conversions round to nearest even).
typedef _Float16 half;

// bf16 storage with round-to-nearest-even from fp32 (NaN -> 0x7FC0, as torch does).
struct bfloat16_t {
    uint16_t bits;

    bfloat16_t() = default;
    bfloat16_t(float f) : bits(round_from(f)) {}

    operator float() const
    {
        const uint32_t u = static_cast<uint32_t>(bits) << 16;
        float f;
        std::memcpy(&f, &u, sizeof f);
        return f;
    }

    static uint16_t round_from(float f)
    {
        uint32_t u;
        std::memcpy(&u, &f, sizeof u);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            return 0x7fc0;
        }
        u += 0x7fffu + ((u >> 16) & 1u);
        return static_cast<uint16_t>(u >> 16);
    }
};

namespace pto {

constexpr int DYNAMIC = -1;

enum class TileType { Vec, Mat, Left, Right, Acc, Bias, Scaling };
enum class BLayout { RowMajor, ColMajor };
enum class SLayout { NoneBox, RowMajor, ColMajor };
enum class PadValue { Null, Zero, Min, Max };
enum class Layout { ND, DN, NZ };
enum class CmpMode : uint8_t { EQ = 0, NE = 1, LT = 2, LE = 3, GT = 4, GE = 5 };
enum class RoundMode : uint8_t {
    CAST_NONE = 0,
    CAST_RINT = 1,   // nearest, ties to even
    CAST_ROUND = 2,  // nearest, ties away from zero
    CAST_FLOOR = 3,
    CAST_CEIL = 4,
    CAST_TRUNC = 5,
    CAST_ODD = 6,
};

struct TileConfig {
    static constexpr int alignedSize = 32;
    static constexpr int fractalABSize = 512;
    static constexpr int fractalCSize = 1024;
};

namespace GlobalTensorDim {
constexpr int DIM_0 = 0;
constexpr int DIM_1 = 1;
constexpr int DIM_2 = 2;
constexpr int DIM_3 = 3;
constexpr int DIM_4 = 4;
constexpr int TOTAL_DIM = 5;
}  // namespace GlobalTensorDim

// Returned by every instruction, as in pto-isa (events are recorded by assignment there).
struct RecordEvent {};

namespace cpu {

template <class T>
inline constexpr bool is_float_like = std::is_floating_point_v<T> || std::is_same_v<T, half> ||
                                      std::is_same_v<T, bfloat16_t>;

// How an element type is computed with: fp16/bf16 in fp32, integers in 64-bit.
template <class T>
using calc_t = std::conditional_t<is_float_like<T>, float, std::conditional_t<std::is_same_v<T, double>, double, int64_t>>;

template <class... Ts>
using common_calc_t = std::conditional_t<(is_float_like<Ts> || ...), float, int64_t>;

template <class T>
inline float to_float(T v)
{
    return static_cast<float>(v);
}

// Convert a computed value to an element type (fp16/bf16 round to nearest even).
template <class D, class V>
inline D narrow(V v)
{
    if constexpr (std::is_same_v<D, bool>) {
        return v != V(0);
    } else if constexpr (std::is_same_v<D, bfloat16_t>) {
        return bfloat16_t(static_cast<float>(v));
    } else {
        return static_cast<D>(v);
    }
}

template <class C, class T>
inline C widen(T v)
{
    if constexpr (std::is_same_v<T, bfloat16_t>) {
        return static_cast<C>(static_cast<float>(v));
    } else {
        return static_cast<C>(v);
    }
}

// Bulk fp16 <-> fp32 conversion of n contiguous elements. g++ does not vectorise loops over
// _Float16, so whole vectors go through __builtin_convertvector, which g++ maps to the F16C /
// AVX-512 conversion instructions (round to nearest even, like the scalar conversion; NaNs stay
// NaN); a scalar loop does the rest. The vector is only as wide as the target's registers (a
// wider one changes the ABI: -Wpsabi), and no intrinsics are used (g++ 12's AVX-512 conversion
// intrinsics warn -Wmaybe-uninitialized inside its own headers).
#if defined(__AVX512F__)
constexpr size_t kHalfLanes = 16;
#elif defined(__F16C__)
constexpr size_t kHalfLanes = 8;
#else
constexpr size_t kHalfLanes = 1;     // no conversion instructions: the scalar loop only
#endif
typedef _Float16 halfxv __attribute__((vector_size(kHalfLanes * sizeof(_Float16))));
typedef float floatxv __attribute__((vector_size(kHalfLanes * sizeof(float))));

// dst[0:n] = src[0:n] converted, whole vectors SV -> DV first.
template <class DV, class SV, class D, class S>
inline void convert_bulk(const S* src, D* dst, size_t n)
{
    size_t i = 0;
    if constexpr (kHalfLanes > 1) {
        for (; i + kHalfLanes <= n; i += kHalfLanes) {
            SV in;
            std::memcpy(&in, src + i, sizeof in);
            const DV out = __builtin_convertvector(in, DV);
            std::memcpy(dst + i, &out, sizeof out);
        }
    }
    // the tail counted from 0: with i carried over, g++ 12 warns the loop may run 2^62 times
    for (size_t k = 0, tail = n - i; k < tail; ++k) dst[i + k] = static_cast<D>(src[i + k]);
}

inline void half_to_float(const half* src, float* dst, size_t n) { convert_bulk<floatxv, halfxv>(src, dst, n); }
inline void float_to_half(const float* src, half* dst, size_t n) { convert_bulk<halfxv, floatxv>(src, dst, n); }

// Whether convert_row has a bulk path for this pair (else callers keep their element loop).
template <class D, class S>
inline constexpr bool bulk_convertible = (std::is_same_v<S, half> && std::is_same_v<D, float>) ||
                                         (std::is_same_v<S, float> && std::is_same_v<D, half>);

template <class D, class S>
inline void convert_row(const S* src, D* dst, size_t n)
{
    if constexpr (std::is_same_v<S, half> && std::is_same_v<D, float>) {
        half_to_float(src, dst, n);
    } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, half>) {
        float_to_half(src, dst, n);
    } else {
        static_assert(bulk_convertible<D, S>, "convert_row: no bulk path for these types");
    }
}

}  // namespace cpu
}  // namespace pto

// Pipes and event ids, spelled as the device headers spell them.
typedef int pipe_t;
typedef int event_t;
const pipe_t PIPE_S = 0;
const pipe_t PIPE_V = 1;
const pipe_t PIPE_MTE1 = 2;
const pipe_t PIPE_MTE2 = 3;
const pipe_t PIPE_MTE3 = 4;
const pipe_t PIPE_M = 5;
const pipe_t PIPE_ALL = 6;
const pipe_t PIPE_FIX = 7;

#define EVENT_ID0 0
#define EVENT_ID1 1
#define EVENT_ID2 2
#define EVENT_ID3 3
#define EVENT_ID4 4
#define EVENT_ID5 5
#define EVENT_ID6 6
#define EVENT_ID7 7
