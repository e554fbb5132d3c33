/* kernels/cpu/ops_linformer.c — the CPU backend's linformer_step (causal
 * Linformer)
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

/* ---- causal Linformer ---------------------------------------------------------
 * Split by (run, head); positions checked before and advanced after, as
 * cosformer_step. */
typedef struct linf_job {
    cpu *c;
    const float *in, *ef;
    float *out;
    double *tmp;   /* kp doubles per part */
    size_t off, pos_off;
    int H, dh, kp, N;
} linf_job;

static void linf_part(void *arg, int part, int nparts)
{
    const linf_job *j = arg;
    int H = j->H, dh = j->dh, hd = H * dh, kp = j->kp, lo, hi;
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    double *sp = j->tmp + (size_t)part * kp;
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H, r0 = j->c->run[run];
        uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[r0]);
        int64_t pos;
        memcpy(&pos, st + j->pos_off, sizeof pos);
        double *Kb = (double *)(st + j->off) + (size_t)h * kp * dh, *Vb = Kb + (size_t)hd * kp;
        for (int b = r0; b < j->c->run[run + 1]; b++) {
            const float *q = j->in + (size_t)b * 3 * hd + h * dh, *k = q + hd, *v = q + 2 * hd;
            size_t t = (size_t)(pos + (b - r0));
            const float *e = j->ef + t * kp, *f = j->ef + ((size_t)j->N + t) * kp;
            double mx = -1e308, sum = 0.0;
            for (int p = 0; p < kp; p++) {
                sp[p] = lind_linf_row(Kb + (size_t)p * dh, Vb + (size_t)p * dh, k, v, q, e[p], f[p], dh);
                mx = sp[p] > mx ? sp[p] : mx;
            }
            for (int p = 0; p < kp; p++) {
                sp[p] = lind_exp(sp[p] - mx);
                sum += sp[p];
            }
            float *o = j->out + (size_t)b * hd + (size_t)h * dh;
            for (int i = 0; i < dh; i++) {
                double acc = 0.0;
                for (int p = 0; p < kp; p++) acc += sp[p] * Vb[(size_t)p * dh + i];
                o[i] = (float)(acc / sum);
            }
        }
    }
}

int cpu_linformer_step(backend *be, const backend_buf *in, const backend_buf *ef, backend_buf *out,
                              size_t state_off, size_t pos_off, int H, int dh, int kp, int N)
{
    cpu *c = (cpu *)be;
    for (int r = 0; r < c->nruns; r++) {
        int64_t pos;
        memcpy(&pos, cpu_slot_ptr(c, c->slots[c->run[r]]) + pos_off, sizeof pos);
        if (pos < 0) return -EINVAL;   /* not a count of tokens: a damaged state */
        if (pos + (c->run[r + 1] - c->run[r]) > N) return -EOVERFLOW;
    }
    int parts = cpu_row_parts(c, c->nruns * H, (size_t)4 * kp * dh * c->B / c->nruns);
    double *t = (double *)cpu_tmp_get(c, 2 * (size_t)parts * kp);
    if (!t) return -ENOMEM;
    linf_job j = {c, in->p, ef->p, out->p, t, state_off, pos_off, H, dh, kp, N};
    cpu_pool_run(c->threads, linf_part, &j, parts);
    for (int r = 0; r < c->nruns; r++) {
        uint8_t *p = cpu_slot_ptr(c, c->slots[c->run[r]]) + pos_off;
        int64_t pos;
        memcpy(&pos, p, sizeof pos);
        pos = (int64_t)((uint64_t)pos + (uint64_t)(c->run[r + 1] - c->run[r]));
        memcpy(p, &pos, sizeof pos);
    }
    return 0;
}
