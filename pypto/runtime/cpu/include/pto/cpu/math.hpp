// pypto's CPU PTO: fp32 exp and log written as branch-free arithmetic so that g++ vectorises the
// loops that call them (the libm calls stay scalar without -ffast-math). Accuracy is about 1 ulp
// over the whole range, like the vectorised functions torch uses on the CPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace pto::cpu {

inline float bits_to_float(uint32_t u)
{
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

inline uint32_t float_to_bits(float f)
{
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float fast_exp(float x)
{
    // exp(x) = 2^n * exp(r), n = round(x / ln2), |r| <= ln2 / 2; ln2 split in two for exactness.
    float clamped = x < -104.0f ? -104.0f : x;
    clamped = clamped > 89.0f ? 89.0f : clamped;
    const float n = std::nearbyint(clamped * 1.44269504088896341f);
    float r = std::fma(n, -0.693145751953125f, clamped);
    r = std::fma(n, -1.428606765330187045e-06f, r);
    // Minimax polynomial of exp(r) on [-ln2/2, ln2/2] (Cephes expf).
    float p = 1.9875691500e-04f;
    p = std::fma(p, r, 1.3981999507e-03f);
    p = std::fma(p, r, 8.3334519073e-03f);
    p = std::fma(p, r, 4.1665795894e-02f);
    p = std::fma(p, r, 1.6666665459e-01f);
    p = std::fma(p, r, 5.0000001201e-01f);
    p = std::fma(p, r * r, r);
    p += 1.0f;
    // 2^n in two halves so that results in the subnormal range and up to 2^128 stay exact.
    const int32_t ni = static_cast<int32_t>(n);
    const int32_t n1 = ni >> 1;
    const int32_t n2 = ni - n1;
    const float s1 = bits_to_float(static_cast<uint32_t>(n1 + 127) << 23);
    const float s2 = bits_to_float(static_cast<uint32_t>(n2 + 127) << 23);
    float y = p * s1 * s2;
    y = x > 88.72283935546875f ? INFINITY : y;
    y = x < -103.972076416015625f ? 0.0f : y;
    return x != x ? x : y;
}

inline float fast_log(float x)
{
    // x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log(x) = e * ln2 + log(m).
    const bool subnormal = x < 1.17549435e-38f;
    const float xs = subnormal ? x * 8388608.0f : x;  // 2^23
    const uint32_t u = float_to_bits(xs);
    int32_t e = static_cast<int32_t>((u >> 23) & 0xff) - 127;
    float m = bits_to_float((u & 0x007fffffu) | 0x3f800000u);
    const bool big = m > 1.41421356f;
    m = big ? m * 0.5f : m;
    e = big ? e + 1 : e;
    const float ef = static_cast<float>(e) - (subnormal ? 23.0f : 0.0f);
    const float f = m - 1.0f;
    // log(1 + f) = f - f^2/2 + f^3 * P(f), P from Cephes logf (degree 8).
    float p = 7.0376836292e-2f;
    p = std::fma(p, f, -1.1514610310e-1f);
    p = std::fma(p, f, 1.1676998740e-1f);
    p = std::fma(p, f, -1.2420140846e-1f);
    p = std::fma(p, f, 1.4249322787e-1f);
    p = std::fma(p, f, -1.6668057665e-1f);
    p = std::fma(p, f, 2.0000714765e-1f);
    p = std::fma(p, f, -2.4999993993e-1f);
    p = std::fma(p, f, 3.3333331174e-1f);
    const float f2 = f * f;
    float y = f2 * f * p;
    y = std::fma(ef, -2.12194440e-4f, y);
    y = std::fma(f2, -0.5f, y);
    y = f + y;
    y = std::fma(ef, 0.693359375f, y);
    y = x == INFINITY ? INFINITY : y;
    y = x == 0.0f ? -INFINITY : y;
    y = x < 0.0f ? NAN : y;
    return x != x ? x : y;
}

}  // namespace pto::cpu
