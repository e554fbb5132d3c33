/* kernels/half.h — IEEE fp16 and bfloat16 ↔ fp32, bit-exact, for the host.
 * Widening is exact; narrowing rounds to nearest even (NaN stays NaN). Used
 * by the loader (half weights), the CPU backend's fallback and tests. */
#ifndef LIND_KERNELS_HALF_H
#define LIND_KERNELS_HALF_H

#include <stdint.h>
#include <string.h>

#include "kernels/mixer_math.h"

/* Widening: the per-element functions of kernels/mixer_math.h, which the
 * CPU and CUDA kernels use too (one definition). */
static inline float lind_bf16_to_f32(uint16_t h) { return lind_bf16_to_float(h); }
static inline float lind_f16_to_f32(uint16_t h) { return lind_f16_to_float(h); }

static inline uint16_t lind_f32_to_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40);   /* quiet NaN */
    b += 0x7fffu + ((b >> 16) & 1);
    return (uint16_t)(b >> 16);
}

static inline uint16_t lind_f32_to_f16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);            /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);           /* ≥ 65520: ∞ */
    if (a < 0x38800000u) {                                             /* subnormal or 0 */
        if (a < 0x33000000u) return (uint16_t)sign;                    /* < 2^-25: ±0 */
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        uint32_t q = m >> shift;                                       /* units of 2^-24 */
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1);                         /* round to nearest even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

#endif
