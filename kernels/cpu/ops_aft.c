/* kernels/cpu/ops_aft.c — the CPU backend's AFT ops: aft_step (RWKV-4
 * form, split by (run, channel slice)) and aft_window_step (AFT-local /
 * AFT-conv, split by runs)
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

/* One session's AFT channels; restrict lets the loop vectorize. */
__attribute__((noinline)) static void aft_row(float *restrict o, double *restrict num, double *restrict den, double *restrict mx,
                    const float *restrict r, const float *restrict k, const float *restrict v,
                    const float *restrict w, const float *restrict u, int d)
{
    for (int i = 0; i < d; i++)
        o[i] = lind_sigmoid(r[i]) * lind_aft_channel(&num[i], &den[i], &mx[i], k[i], v[i], w[i], u[i]);
}

/* The same on a float state (a decaying mixer's, kernels/backend.h):
 * lind_aft_channel_f32 per channel, taken apart so that each of its three
 * loops vectorizes (widen a block, aft_row's double math, round back; gcc
 * does not vectorize the one-loop form). */
enum { AFT_F32_BLOCK = 64 };
static void aft_row_f32(float *restrict o, float *restrict num, float *restrict den, float *restrict mx,
                        const float *restrict r, const float *restrict k, const float *restrict v,
                        const float *restrict w, const float *restrict u, int d)
{
    double a[AFT_F32_BLOCK], b[AFT_F32_BLOCK], p[AFT_F32_BLOCK];
    for (int c0 = 0; c0 < d; c0 += AFT_F32_BLOCK) {
        int n = d - c0 < AFT_F32_BLOCK ? d - c0 : AFT_F32_BLOCK;
        for (int i = 0; i < n; i++) {
            a[i] = num[c0 + i];
            b[i] = den[c0 + i];
            p[i] = mx[c0 + i];
        }
        aft_row(o + c0, a, b, p, r + c0, k + c0, v + c0, w + c0, u + c0, n);
        for (int i = 0; i < n; i++) lind_aft_round_f32(a[i], b[i], p[i], &num[c0 + i], &den[c0 + i], &mx[c0 + i]);
    }
}

typedef struct aft_job {
    cpu *c;
    const float *in, *w, *u;
    float *out;
    size_t off;
    int d, slices, f32;
} aft_job;

/* Parts split (run, channel slice) items, as shift_part. */
static void aft_part(void *arg, int part, int nparts)
{
    const aft_job *j = arg;
    int lo, hi, d = j->d;
    cpu_part_range(j->c->nruns * j->slices, part, nparts, &lo, &hi);
    for (int it = lo; it < hi; it++) {
        int k = it / j->slices, c0, c1;
        cpu_chan_range(d, it % j->slices, j->slices, &c0, &c1);
        for (int b = j->c->run[k]; b < j->c->run[k + 1]; b++) {
            uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[b]) + j->off;
            const float *r = j->in + (size_t)b * 3 * d;
            if (j->f32) {
                float *num = (float *)st, *den = num + d, *mx = den + d;
                aft_row_f32(j->out + (size_t)b * d + c0, num + c0, den + c0, mx + c0, r + c0, r + d + c0,
                            r + 2 * d + c0, j->w + c0, j->u + c0, c1 - c0);
            } else {
                double *num = (double *)st, *den = num + d, *mx = den + d;
                aft_row(j->out + (size_t)b * d + c0, num + c0, den + c0, mx + c0, r + c0, r + d + c0, r + 2 * d + c0,
                        j->w + c0, j->u + c0, c1 - c0);
            }
        }
    }
}

int cpu_aft_step(backend *be, const backend_buf *in, const backend_buf *w, const backend_buf *u,
                        backend_buf *out, size_t state_off, int d, int f32)
{
    cpu *c = (cpu *)be;
    const float *wp = w ? w->p : NULL, *up = u ? u->p : NULL;
    if (!wp || !up) {   /* AFT-simple: w = u = 0 */
        float *zeros = cpu_tmp_get(c, (size_t)d);
        if (!zeros) return -ENOMEM;
        memset(zeros, 0, (size_t)d * sizeof *zeros);
        if (!wp) wp = zeros;
        if (!up) up = zeros;
    }
    int slices = cpu_chan_slices(c, d);
    aft_job j = {c, in->p, wp, up, out->p, state_off, d, slices, f32};
    cpu_pool_run(c->threads, aft_part, &j, cpu_row_parts(c, c->nruns * slices, (size_t)d * 16 * c->B / c->nruns / slices));
    return 0;
}

typedef struct aftw_job {
    cpu *c;
    const float *in, *w;
    float *out;
    size_t acc_off, ring_off, pos_off;
    int d, s, H;
} aftw_job;

/* Parts split runs, never a run: the position is per session. */
static void aftw_part(void *arg, int part, int nparts)
{
    const aftw_job *j = arg;
    int lo, hi, d = j->d, s = j->s, S1 = s - 1, per = d / j->H;
    cpu_part_range(j->c->nruns, part, nparts, &lo, &hi);
    for (int k = lo; k < hi; k++) {
        int b0 = j->c->run[k];
        uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[b0]);
        double *num = (double *)(st + j->acc_off), *den = num + d, *mx = den + d;
        float *rk = (float *)(st + j->ring_off), *rv = rk + (size_t)d * S1;
        uint64_t t0 = cpu_slot_u64(st, j->pos_off);
        for (int b = b0; b < j->c->run[k + 1]; b++) {
            uint64_t t = t0 + (uint64_t)(b - b0);
            const float *row = j->in + (size_t)b * 3 * d;
            float *o = j->out + (size_t)b * d;
            for (int c = 0; c < d; c++)
                o[c] = lind_sigmoid(row[c]) *
                       (float)lind_aftw_channel(&num[c], &den[c], &mx[c], rk + (size_t)c * S1, rv + (size_t)c * S1, t,
                                                row[d + c], row[2 * d + c], j->w + (size_t)(c / per) * s, s);
        }
        uint64_t pos = t0 + (uint64_t)(j->c->run[k + 1] - b0);
        memcpy(st + j->pos_off, &pos, sizeof pos);
    }
}

int cpu_aft_window_step(backend *be, const backend_buf *in, const backend_buf *w, backend_buf *out,
                               size_t acc_off, size_t ring_off, size_t pos_off, int d, int s, int H)
{
    cpu *c = (cpu *)be;
    if (s < 2 || d < 1 || H < 1 || d % H) return -EINVAL;
    aftw_job j = {c, in->p, w->p, out->p, acc_off, ring_off, pos_off, d, s, H};
    cpu_pool_run(c->threads, aftw_part, &j, cpu_row_parts(c, c->nruns, (size_t)d * s * 8 * c->B / c->nruns));
    return 0;
}
