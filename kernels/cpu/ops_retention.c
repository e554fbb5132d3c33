/* kernels/cpu/ops_retention.c — the CPU backend's retention_step
 * (RetNet)
 * (kernels/backend.h has its contract; the shared runners are in
 * kernels/cpu/cpu.h). */
#if defined(__GNUC__) && !defined(__clang__)
/* as backend_cpu.c: where AVX-512 is enabled, let the element-wise loops use
 * it (GCC defaults to 256-bit vectors on Intel) */
#pragma GCC target("prefer-vector-width=512")
#endif
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/mixer_math.h"

/* ---- retention (RetNet) -----------------------------------------------------
 * Split by (run, head) like delta_step: a session's heads are independent, a
 * run's rows go in order. The S update and column sums are cpu_lin_head() with
 * φ = identity (lind_lin_s, the i-order of lind_lin_column), or ret_head_f32()
 * on a float S. */
typedef struct ret_job {
    cpu *c;
    const float *in, *gamma, *norm;
    float *out;
    double *tmp;   /* dh doubles per part */
    size_t off;
    int H, dh, f32;
    float eps;
} ret_job;

/* cpu_lin_head() with φ = identity on a float S (a decaying state,
 * kernels/backend.h): each element widened, updated in double by
 * lind_lin_s(), stored rounded once, and the numerator summed from the
 * double in i order, as lind_lin_column_f32() does column by column. Four
 * rows at a time, their terms added to num[j] one after the other (the same
 * order, so the same bits): num is loaded and stored once per four rows,
 * which pays for the widening and rounding (docs/NUMERICS.md). */
__attribute__((noinline)) static void ret_head_f32(float *restrict S, double *restrict num, const float *restrict k,
                                                   const float *restrict q, const float *restrict v, double g, int dh)
{
    for (int j = 0; j < dh; j++) num[j] = 0.0;
    int i = 0;
    for (; i + 4 <= dh; i += 4) {
        float *restrict S0 = S + (size_t)i * dh, *restrict S1 = S0 + dh, *restrict S2 = S1 + dh, *restrict S3 = S2 + dh;
        float k0 = k[i], k1 = k[i + 1], k2 = k[i + 2], k3 = k[i + 3];
        double q0 = q[i], q1 = q[i + 1], q2 = q[i + 2], q3 = q[i + 3];
        for (int j = 0; j < dh; j++) {
            double s0 = lind_lin_s((double)S0[j], g, k0, v[j]), s1 = lind_lin_s((double)S1[j], g, k1, v[j]);
            double s2 = lind_lin_s((double)S2[j], g, k2, v[j]), s3 = lind_lin_s((double)S3[j], g, k3, v[j]);
            S0[j] = (float)s0;
            S1[j] = (float)s1;
            S2[j] = (float)s2;
            S3[j] = (float)s3;
            double n = num[j];
            n += q0 * s0;
            n += q1 * s1;
            n += q2 * s2;
            n += q3 * s3;
            num[j] = n;
        }
    }
    for (; i < dh; i++) {
        float *restrict Si = S + (size_t)i * dh;
        float ki = k[i];
        double qi = (double)q[i];
        for (int j = 0; j < dh; j++) {
            double s = lind_lin_s((double)Si[j], g, ki, v[j]);
            Si[j] = (float)s;
            num[j] += qi * s;
        }
    }
}

static void ret_part(void *arg, int part, int nparts)
{
    const ret_job *j = arg;
    int H = j->H, dh = j->dh, hd = H * dh, lo, hi;
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    double *o = j->tmp + (size_t)part * dh, scale = 1.0 / sqrt((double)dh);
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H;
        double g = (double)j->gamma[h];
        for (int b = j->c->run[run]; b < j->c->run[run + 1]; b++) {
            uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[b]) + j->off;
            const float *row = j->in + (size_t)b * 4 * hd;
            if (j->f32)
                ret_head_f32((float *)st + (size_t)h * dh * dh, o, row + hd + h * dh, row + h * dh,
                             row + 2 * hd + h * dh, g, dh);
            else
                cpu_lin_head((double *)st + (size_t)h * dh * dh, o, row + hd + h * dh, row + h * dh,
                             row + 2 * hd + h * dh, g, dh);
            double mean = 0.0, var = 0.0;
            for (int i = 0; i < dh; i++) {
                o[i] *= scale;
                mean += o[i];
            }
            mean /= dh;
            for (int i = 0; i < dh; i++) var += (o[i] - mean) * (o[i] - mean);
            double rs = lind_gn_rstd(var / dh, j->eps);
            float *out = j->out + (size_t)b * hd + (size_t)h * dh;
            const float *gt = row + 3 * hd + h * dh, *w = j->norm + h * dh, *bias = j->norm + hd + h * dh;
            for (int i = 0; i < dh; i++) out[i] = lind_retention_out(o[i], mean, rs, w[i], bias[i], gt[i]);
        }
    }
}

int cpu_retention_step(backend *be, const backend_buf *in, const backend_buf *gamma, const backend_buf *norm,
                              backend_buf *out, size_t state_off, int H, int dh, float eps, int f32)
{
    cpu *c = (cpu *)be;
    int parts = cpu_row_parts(c, c->nruns * H, (size_t)2 * dh * dh * c->B / c->nruns);
    double *t = (double *)cpu_tmp_get(c, 2 * (size_t)parts * dh);
    if (!t) return -ENOMEM;
    ret_job j = {c, in->p, gamma->p, norm->p, out->p, t, state_off, H, dh, f32, eps};
    cpu_pool_run(c->threads, ret_part, &j, parts);
    return 0;
}
