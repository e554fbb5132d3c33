/* kernels/cpu/ops_cosformer.c — the CPU backend's cosformer_step
 * (kernels/backend.h has its contract; the shared runners are in
 * kernels/cpu/cpu.h). */
#if defined(__GNUC__) && !defined(__clang__)
/* as backend_cpu.c: where AVX-512 is enabled, let the element-wise loops use
 * it (GCC defaults to 256-bit vectors on Intel) */
#pragma GCC target("prefer-vector-width=512")
#endif
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/mixer_math.h"

/* ---- cosFormer -----------------------------------------------------------------
 * Split by (run, head); each (S, z) pair through cpu_lin_z_head()/cpu_lin_head() with
 * γ = 1 and the pair's features, the pairs' sums added in pair order. The
 * position counters are read by every head of a run and advanced after the
 * parallel part. */
static size_t cos_tmp_floats(int dh) { return (size_t)2 * LIND_COS_PAIRS_MAX * dh + 4 * (size_t)dh; }

typedef struct cos_job {
    cpu *c;
    const float *in;
    float *out, *tmp;
    size_t off, pos_off;
    int H, dh, M, periodic;
    float eps;
} cos_job;

static void cos_part(void *arg, int part, int nparts)
{
    const cos_job *j = arg;
    int H = j->H, dh = j->dh, hd = H * dh, P = j->periodic ? 3 : 2, lo, hi;
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    float *phiq = j->tmp + (size_t)part * cos_tmp_floats(dh), *phik = phiq + LIND_COS_PAIRS_MAX * dh;
    double *num = (double *)(phik + LIND_COS_PAIRS_MAX * dh), *term = num + dh;
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H, r0 = j->c->run[run];
        uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[r0]);
        int64_t pos;
        memcpy(&pos, st + j->pos_off, sizeof pos);
        for (int b = r0; b < j->c->run[run + 1]; b++) {
            const float *q = j->in + (size_t)b * 3 * hd + h * dh, *k = q + hd, *v = q + 2 * hd;
            /* unsigned sum: any stored position (periodic form) wraps instead of overflowing */
            double th = lind_cos_theta((long long)(int64_t)((uint64_t)pos + (uint64_t)(b - r0)), j->M, j->periodic),
                   den = 0.0, acc[1024];
            for (int i = 0; i < dh; i++) acc[i] = 0.0;
            for (int p = 0; p < P; p++) {
                float mult = lind_cos_mult(th, p);
                for (int i = 0; i < dh; i++) {
                    phiq[i] = lind_cos_feature(q[i], mult);
                    phik[i] = lind_cos_feature(k[i], mult);
                }
                double *S = (double *)(st + j->off) + ((size_t)p * H + h) * dh * dh;
                double *z = (double *)(st + j->off) + (size_t)P * hd * dh + ((size_t)p * H + h) * dh;
                den += cpu_lin_z_head(z, term, phik, phiq, 1.0, dh);
                cpu_lin_head(S, num, phik, phiq, v, 1.0, dh);
                for (int i = 0; i < dh; i++) acc[i] += num[i];
            }
            cpu_lin_out_head(j->out + (size_t)b * hd + (size_t)h * dh, acc, den, j->eps, dh);
        }
    }
}

int cpu_cosformer_step(backend *be, const backend_buf *in, backend_buf *out, size_t state_off, size_t pos_off,
                              int H, int dh, int M, int periodic, float eps)
{
    cpu *c = (cpu *)be;
    if (dh > 1024 || M < 1) return -EINVAL;
    /* the horizon form's refusal; the periodic form reads any position
     * (reduced mod 2M, C's remainder: a negative one is a valid angle too) */
    for (int r = 0; r < c->nruns && !periodic; r++) {
        int64_t pos;
        memcpy(&pos, cpu_slot_ptr(c, c->slots[c->run[r]]) + pos_off, sizeof pos);
        if (pos < 0) return -EINVAL;   /* not a count of tokens: a damaged state */
        if (pos + (c->run[r + 1] - c->run[r]) > M) return -EOVERFLOW;
    }
    int parts = cpu_row_parts(c, c->nruns * H, (size_t)3 * dh * dh * c->B / c->nruns);
    float *t = cpu_tmp_get(c, (size_t)parts * cos_tmp_floats(dh));
    if (!t) return -ENOMEM;
    cos_job j = {c, in->p, out->p, t, state_off, pos_off, H, dh, M, periodic, eps};
    cpu_pool_run(c->threads, cos_part, &j, parts);
    for (int r = 0; r < c->nruns; r++) {
        uint8_t *p = cpu_slot_ptr(c, c->slots[c->run[r]]) + pos_off;
        int64_t pos;
        memcpy(&pos, p, sizeof pos);
        pos = (int64_t)((uint64_t)pos + (uint64_t)(c->run[r + 1] - c->run[r]));
        memcpy(p, &pos, sizeof pos);
    }
    return 0;
}
