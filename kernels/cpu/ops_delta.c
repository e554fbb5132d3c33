/* kernels/cpu/ops_delta.c — the CPU backend's short_conv (the causal
 * depthwise convolution with its ring, split by runs) and delta_step (the
 * gated delta rule, split by (run, head))
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

typedef struct conv_job {
    cpu *c;
    const float *in, *w;
    float *out;
    size_t ring_off, idx_off;
    int ldi, ldo, n, K, silu;
} conv_job;

/* One row of one session: out[c] for c < n, ring[c][p] ← in[c]. */
__attribute__((noinline)) static void conv_row(float *out, const float *in, float *restrict ring,
                                               const float *restrict w, int p, int n, int K, int silu)
{
    int K1 = K - 1;
    for (int c = 0; c < n; c++) {
        float x = in[c];   /* read before out[c] is written: out may be in */
        float y = lind_conv_channel(w + (size_t)c * K, ring + (size_t)c * K1, p, x, K);
        ring[(size_t)c * K1 + p] = x;
        out[c] = silu ? lind_silu(y) : y;
    }
}

/* Parts split runs, never a run: its rows go in order through one ring. */
static void conv_part(void *arg, int part, int nparts)
{
    const conv_job *j = arg;
    int lo, hi;
    cpu_part_range(j->c->nruns, part, nparts, &lo, &hi);
    for (int k = lo; k < hi; k++) {
        uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[j->c->run[k]]);
        float *ring = (float *)(st + j->ring_off);
        int32_t idx;
        memcpy(&idx, st + j->idx_off, sizeof idx);
        int p = (int)((uint32_t)idx % (uint32_t)(j->K - 1));
        for (int b = j->c->run[k]; b < j->c->run[k + 1]; b++) {
            conv_row(j->out + (size_t)b * j->ldo, j->in + (size_t)b * j->ldi, ring, j->w, p, j->n, j->K, j->silu);
            p = p + 1 == j->K - 1 ? 0 : p + 1;
        }
        idx = p;
        memcpy(st + j->idx_off, &idx, sizeof idx);
    }
}

int cpu_short_conv(backend *be, const backend_buf *in, int ldi, backend_buf *out, int ldo, const backend_buf *w,
                          int n, int K, size_t ring_off, size_t idx_off, int silu)
{
    cpu *c = (cpu *)be;
    if (K < 2 || n < 0 || (in == out && ldi != ldo)) return -EINVAL;
    conv_job j = {c, in->p, w->p, out->p, ring_off, idx_off, ldi, ldo, n, K, silu};
    cpu_pool_run(c->threads, conv_part, &j, cpu_row_parts(c, c->nruns, (size_t)n * K * 2 * c->B / c->nruns));
    return 0;
}

/* Scratch doubles per part: normalized k and q, S·k then u, o (dh each). */
static size_t delta_tmp_doubles(int dh) { return 4 * (size_t)dh; }

typedef struct delta_job {
    cpu *c;
    const float *in, *A, *bias, *norm_w;
    float *out;
    double *tmp;   /* delta_tmp_doubles() per part */
    size_t off;
    int H, dh;
    float eps;
} delta_job;

/* x/‖x‖·scale over one head's dh values, as doubles. */
static void l2_head(double *restrict y, const float *restrict x, double scale, int dh)
{
    double ss = 0.0;
    for (int i = 0; i < dh; i++) ss += (double)x[i] * (double)x[i];
    double rs = lind_l2_rscale(ss) * scale;
    for (int i = 0; i < dh; i++) y[i] = (double)x[i] * rs;
}

/* One row of one head: S updated in place, o = S_t q. Two passes over S,
 * i outer and j inner over contiguous rows so they vectorize: (S k)_j, then
 * the update with the o_j sums — the operations and i-order of
 * lind_delta_column(). */
__attribute__((noinline)) static void delta_head(double *restrict S, double *restrict sku, double *restrict o,
                                                 const double *restrict k, const double *restrict q,
                                                 const float *restrict v, double alpha, double beta, int dh)
{
    for (int j = 0; j < dh; j++) sku[j] = 0.0;
    for (int i = 0; i < dh; i++) {
        const double *restrict Si = S + (size_t)i * dh;
        double ki = k[i];
        for (int j = 0; j < dh; j++) sku[j] += Si[j] * ki;
    }
    for (int j = 0; j < dh; j++) sku[j] = lind_delta_u(sku[j], v[j], alpha, beta);
    for (int j = 0; j < dh; j++) o[j] = 0.0;
    for (int i = 0; i < dh; i++) {
        double *restrict Si = S + (size_t)i * dh;
        double ki = k[i], qi = q[i];
        for (int j = 0; j < dh; j++) {
            double s = lind_delta_s(Si[j], alpha, ki, sku[j]);
            Si[j] = s;
            o[j] += qi * s;
        }
    }
}

/* Work units are (run, head) pairs: a head of a session is independent of
 * its other heads, and a run's rows go through it in order. */
static void delta_part(void *arg, int part, int nparts)
{
    const delta_job *j = arg;
    int H = j->H, dh = j->dh, hd = H * dh, lo, hi;
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    double *kn = j->tmp + (size_t)part * delta_tmp_doubles(dh), *qn = kn + dh, *sku = qn + dh, *o = sku + dh;
    double qscale = 1.0 / sqrt((double)dh);
    size_t ld = (size_t)3 * hd + 2 * (size_t)H;
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H;
        for (int b = j->c->run[run]; b < j->c->run[run + 1]; b++) {
            double *S = (double *)(cpu_slot_ptr(j->c, j->c->slots[b]) + j->off) + (size_t)h * dh * dh;
            const float *row = j->in + (size_t)b * ld;
            l2_head(qn, row + h * dh, qscale, dh);
            l2_head(kn, row + hd + h * dh, 1.0, dh);
            double beta = lind_delta_beta(row[3 * hd + h]);
            double alpha = lind_delta_alpha(row[3 * hd + H + h], j->A[h], j->bias[h]);
            delta_head(S, sku, o, kn, qn, row + 2 * hd + h * dh, alpha, beta, dh);
            double ss = 0.0;
            for (int i = 0; i < dh; i++) ss += o[i] * o[i];
            double rs = lind_rms_rscale(ss, dh, j->eps);
            float *out = j->out + (size_t)b * hd + (size_t)h * dh;
            for (int i = 0; i < dh; i++) out[i] = lind_rms_apply(o[i], rs, j->norm_w[i]);
        }
    }
}

int cpu_delta_step(backend *be, const backend_buf *in, const backend_buf *gate, const backend_buf *norm_w,
                          backend_buf *out, size_t state_off, int H, int dh, float eps)
{
    cpu *c = (cpu *)be;
    int units = c->nruns * H;
    int parts = cpu_row_parts(c, units, (size_t)4 * dh * dh * c->B / c->nruns);
    double *t = (double *)cpu_tmp_get(c, 2 * (size_t)parts * delta_tmp_doubles(dh));
    if (!t) return -ENOMEM;
    delta_job j = {c, in->p, gate->p, gate->p + H, norm_w->p, out->p, t, state_off, H, dh, eps};
    cpu_pool_run(c->threads, delta_part, &j, parts);
    return 0;
}
