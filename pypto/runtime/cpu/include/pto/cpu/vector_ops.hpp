// pypto's CPU PTO: vector instructions (elementwise, scalar forms, unary, conversion, compare,
// select, fill). Signatures follow pto-isa; trailing tmp tiles and events are accepted and unused.
#pragma once

#include "elementwise.hpp"

namespace pto {

#define PYPTO_BINARY_INSTR(NAME, OP)                                                      \
    template <class TD, class TA, class TB, class... Rest>                                \
    inline RecordEvent NAME(TD& dst, TA& src0, TB& src1, Rest&...)                        \
    {                                                                                     \
        cpu::binary<cpu::OP>(dst, src0, src1);                                            \
        return {};                                                                        \
    }

PYPTO_BINARY_INSTR(TADD, Add)
PYPTO_BINARY_INSTR(TSUB, Sub)
PYPTO_BINARY_INSTR(TMUL, Mul)
PYPTO_BINARY_INSTR(TDIV, Div)
PYPTO_BINARY_INSTR(TMAX, Max)
PYPTO_BINARY_INSTR(TMIN, Min)
PYPTO_BINARY_INSTR(TAND, And)
PYPTO_BINARY_INSTR(TOR, Or)
PYPTO_BINARY_INSTR(TPOW, Pow)
#undef PYPTO_BINARY_INSTR

#define PYPTO_SCALAR_INSTR(NAME, OP, SCALAR_FIRST)                                                     \
    template <class TD, class TS, class V, class... Rest,                                              \
              std::enable_if_t<is_tile_v<TS> && std::is_arithmetic_v<V>, int> = 0>                     \
    inline RecordEvent NAME(TD& dst, TS& src, V scalar, Rest&...)                                      \
    {                                                                                                  \
        cpu::binary_scalar<cpu::OP, SCALAR_FIRST>(dst, src, scalar);                                   \
        return {};                                                                                     \
    }

PYPTO_SCALAR_INSTR(TADDS, Add, false)
PYPTO_SCALAR_INSTR(TSUBS, Sub, false)
PYPTO_SCALAR_INSTR(TMULS, Mul, false)
PYPTO_SCALAR_INSTR(TDIVS, Div, false)
PYPTO_SCALAR_INSTR(TMAXS, Max, false)
PYPTO_SCALAR_INSTR(TMINS, Min, false)
#undef PYPTO_SCALAR_INSTR

// TDIVS(dst, scalar, src): scalar / src (pto-isa's spelling of a reversed division).
template <class TD, class V, class TS, class... Rest,
          std::enable_if_t<is_tile_v<TS> && std::is_arithmetic_v<V>, int> = 0>
inline RecordEvent TDIVS(TD& dst, V scalar, TS& src, Rest&...)
{
    cpu::binary_scalar<cpu::Div, true>(dst, src, scalar);
    return {};
}

#define PYPTO_UNARY_INSTR(NAME, EXPR)                                     \
    template <class TD, class TS, class... Rest>                          \
    inline RecordEvent NAME(TD& dst, TS& src, Rest&...)                   \
    {                                                                     \
        cpu::unary(dst, src, [](auto x) { return EXPR; });               \
        return {};                                                        \
    }

PYPTO_UNARY_INSTR(TABS, x < 0 ? -x : x)
PYPTO_UNARY_INSTR(TNEG, -x)
PYPTO_UNARY_INSTR(TRELU, x < 0 ? decltype(x)(0) : x)
PYPTO_UNARY_INSTR(TEXP, cpu::fast_exp(x))
PYPTO_UNARY_INSTR(TLOG, cpu::fast_log(x))
PYPTO_UNARY_INSTR(TSQRT, std::sqrt(x))
PYPTO_UNARY_INSTR(TRSQRT, 1.0f / std::sqrt(x))
PYPTO_UNARY_INSTR(TRECIP, 1.0f / x)
#undef PYPTO_UNARY_INSTR

// Bitwise not of integer tiles, logical not of bool tiles.
template <class TD, class TS, class... Rest>
inline RecordEvent TNOT(TD& dst, TS& src, Rest&...)
{
    using D = typename TD::DType;
    if constexpr (std::is_same_v<typename TS::DType, bool>) {
        cpu::map1(dst, src, [](bool x) { return cpu::narrow<D>(!x); });
    } else {
        static_assert(std::is_integral_v<typename TS::DType>, "TNOT works on integer or bool tiles");
        cpu::map1(dst, src, [](auto x) { return cpu::narrow<D>(~x); });
    }
    return {};
}

// Fill the destination's valid region with a scalar.
template <class TD, class V, class... Rest, std::enable_if_t<std::is_arithmetic_v<V>, int> = 0>
inline RecordEvent TEXPANDS(TD& dst, V scalar, Rest&...)
{
    using D = typename TD::DType;
    const D v = cpu::narrow<D>(scalar);
    cpu::fill_indexed(dst, [v](size_t, size_t) { return v; });
    return {};
}

namespace cpu {

template <class D, class S>
inline D convert(S v, RoundMode mode)
{
    if constexpr (std::is_same_v<D, bool>) {
        return widen<float>(v) != 0.0f;
    } else if constexpr (is_float_like<D> || !is_float_like<S>) {
        return narrow<D>(widen<calc_t<S>>(v));
    } else {  // float -> integer: round as asked, saturate, NaN -> 0
        float f = widen<float>(v);
        switch (mode) {
            case RoundMode::CAST_ROUND:
                f = std::round(f);
                break;
            case RoundMode::CAST_FLOOR:
                f = std::floor(f);
                break;
            case RoundMode::CAST_CEIL:
                f = std::ceil(f);
                break;
            case RoundMode::CAST_TRUNC:
            case RoundMode::CAST_NONE:
                f = std::trunc(f);
                break;
            default:
                f = std::nearbyint(f);
                break;
        }
        constexpr float lo = static_cast<float>(std::numeric_limits<D>::lowest());
        constexpr float hi = static_cast<float>(std::numeric_limits<D>::max());
        if (f != f) return D(0);
        if (f <= lo) return std::numeric_limits<D>::lowest();
        if (f >= hi) return std::numeric_limits<D>::max();
        return static_cast<D>(f);
    }
}

}  // namespace cpu

// Convert between element types (fp -> fp16/bf16 rounds to nearest even; fp -> int per mode).
template <class TD, class TS, class... Rest>
inline RecordEvent TCVT(TD& dst, TS& src, RoundMode mode, Rest&...)
{
    using D = typename TD::DType;
    using S = typename TS::DType;
    if constexpr (cpu::bulk_convertible<D, S> && cpu::rows_contiguous<TD, TS>) {   // float <-> half: nearest even
        const size_t rows = dst.GetValidRow();
        const size_t cols = dst.GetValidCol();
        if (static_cast<const void*>(dst.data()) != static_cast<const void*>(src.data())) {
            for (size_t r = 0; r < rows; ++r)
                cpu::convert_row(src.data() + r * TS::Cols, dst.data() + r * TD::Cols, cols);
            return {};
        }
    }
    cpu::map1(dst, src, [mode](S x) { return cpu::convert<D>(x, mode); });
    return {};
}

template <class TD, class TS, class... Rest>
inline RecordEvent TCVT(TD& dst, TS& src)
{
    return TCVT(dst, src, RoundMode::CAST_RINT);
}

// Compare: dst = 1 where the relation holds, else 0 (one element per element, in dst's type).
template <class TD, class TA, class TB, class... Rest, std::enable_if_t<is_tile_v<TB>, int> = 0>
inline RecordEvent TCMP(TD& dst, TA& src0, TB& src1, CmpMode mode, Rest&...)
{
    using D = typename TD::DType;
    using C = cpu::common_calc_t<typename TA::DType, typename TB::DType>;
    cpu::map2(dst, src0, src1,
              [mode](auto a, auto b) { return cpu::narrow<D>(cpu::compare(cpu::widen<C>(a), cpu::widen<C>(b), mode)); });
    return {};
}

template <class TD, class TS, class V, class... Rest, std::enable_if_t<std::is_arithmetic_v<V>, int> = 0>
inline RecordEvent TCMPS(TD& dst, TS& src, V scalar, CmpMode mode, Rest&...)
{
    using D = typename TD::DType;
    using C = std::conditional_t<std::is_floating_point_v<V>, float, cpu::common_calc_t<typename TS::DType>>;
    const C s = static_cast<C>(scalar);
    cpu::map1(dst, src, [mode, s](auto a) { return cpu::narrow<D>(cpu::compare(cpu::widen<C>(a), s, mode)); });
    return {};
}

// Select: dst = mask != 0 ? src0 : src1.
template <class TD, class TM, class TA, class TB, class... Rest>
inline RecordEvent TSEL(TD& dst, TM& mask, TA& src0, TB& src1, Rest&...)
{
    using D = typename TD::DType;
    using M = typename TM::DType;
    const size_t rows = dst.GetValidRow();
    const size_t cols = dst.GetValidCol();
    D* d = dst.data();
    const M* m = mask.data();
    const auto* a = src0.data();
    const auto* b = src1.data();
    for (size_t r = 0; r < rows; ++r) {
#pragma GCC ivdep
        for (size_t c = 0; c < cols; ++c) {
            const bool pick = m[cpu::offset<TM>(r, c)] != M(0);
            d[cpu::offset<TD>(r, c)] = pick ? cpu::convert<D>(a[cpu::offset<TA>(r, c)], RoundMode::CAST_RINT)
                                            : cpu::convert<D>(b[cpu::offset<TB>(r, c)], RoundMode::CAST_RINT);
        }
    }
    return {};
}

}  // namespace pto
