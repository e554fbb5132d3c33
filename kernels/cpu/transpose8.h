/* kernels/cpu/transpose8.h — an 8 × 8 block of doubles transposed in
 * registers (AVX-512), for the state updates that sum eight rows of a
 * matrix state at once, one row per lane, each lane in its row's own order
 * (ops_mamba2.c, ops_rwkv7.c): the sums of a one-row loop, without its
 * chain of dependent additions. */
#ifndef LIND_KERNELS_CPU_TRANSPOSE8_H
#define LIND_KERNELS_CPU_TRANSPOSE8_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_TRANSPOSE8_AVX512 1

/* The block r[k] (lanes: columns) transposed in place (lanes: rows). */
__attribute__((target("avx512f"))) static inline void cpu_transpose8_pd(__m512d r[8])
{
    __m512d t[8], u[8];
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm512_unpacklo_pd(r[k], r[k + 1]);
        t[k + 1] = _mm512_unpackhi_pd(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4)
        for (int i = 0; i < 2; i++) {
            u[k + 2 * i] = _mm512_shuffle_f64x2(t[k + i], t[k + i + 2], 0x88);
            u[k + 2 * i + 1] = _mm512_shuffle_f64x2(t[k + i], t[k + i + 2], 0xDD);
        }
    /* u[0..3] hold columns {0,4}, {2,6}, {1,5}, {3,7} of rows 0-3; u[4..7] of rows 4-7 */
    static const int col[4] = {0, 2, 1, 3};
    for (int i = 0; i < 4; i++) {
        r[col[i]] = _mm512_shuffle_f64x2(u[i], u[i + 4], 0x88);
        r[col[i] + 4] = _mm512_shuffle_f64x2(u[i], u[i + 4], 0xDD);
    }
}
#endif

#endif
