/* kernels/cpu/ops_favor.c — the CPU backend's favor_features (FAVOR+
 * features of the Performer, row-wise)
 * (kernels/backend.h has its contract; the shared runners are in
 * kernels/cpu/cpu.h). */
#if defined(__GNUC__) && !defined(__clang__)
/* as backend_cpu.c: where AVX-512 is enabled, let the element-wise loops use
 * it (GCC defaults to 256-bit vectors on Intel) */
#pragma GCC target("prefer-vector-width=512")
#endif
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/mixer_math.h"

/* ---- FAVOR+ features (row-wise) ---------------------------------------------- */
typedef struct favor_job {
    cpu *c;
    const float *in, *omega;
    float *out;
    int ldi, ldo, H, dh, m;
    float ck;
} favor_job;

static void favor_part(void *arg, int part, int nparts)
{
    const favor_job *j = arg;
    int lo, hi;
    cpu_part_range(j->c->B, part, nparts, &lo, &hi);
    for (int r = lo; r < hi; r++)
        for (int p = 0; p < 2; p++)
            for (int h = 0; h < j->H; h++)
                lind_favor_head(j->out + (size_t)r * j->ldo + (size_t)(p * j->H + h) * j->m,
                                j->in + (size_t)r * j->ldi + (size_t)(p * j->H + h) * j->dh, j->omega, j->dh, j->m,
                                p == 0, j->ck);
}

int cpu_favor_features(backend *be, const backend_buf *in, int ldi, const backend_buf *omega,
                              backend_buf *out, int ldo, int H, int dh, int m, float ck)
{
    cpu *c = (cpu *)be;
    favor_job j = {c, in->p, omega->p, out->p, ldi, ldo, H, dh, m, ck};
    cpu_pool_run(c->threads, favor_part, &j, cpu_row_parts(c, c->B, (size_t)6 * H * m * dh));
    return 0;
}
