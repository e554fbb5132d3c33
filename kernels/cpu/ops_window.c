/* kernels/cpu/ops_window.c — the CPU backend's window_step (sliding-window
 * softmax attention), split by (run, head)
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

typedef struct win_job {
    cpu *c;
    const float *in, *slopes;
    float *out, *tmp;   /* tmp: 4·dh floats per part (q rotated, dh doubles) */
    size_t ring_off, glob_off, pos_off;
    int H, dh, w, dil, g;
    float rope_base;
} win_job;

/* Work units are (run, head) pairs: heads touch disjoint columns of the
 * rings, a run's rows go through one head in order. The position is only
 * read here; cpu_window_step advances it after every unit is done. */
static void win_part(void *arg, int part, int nparts)
{
    const win_job *j = arg;
    int H = j->H, dh = j->dh, hd = H * dh, lo, hi;
    long L = (long)j->w * j->dil;
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    float *q = j->tmp + (size_t)part * 4 * dh;
    double *acc = (double *)(q + 2 * dh);
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H, b0 = j->c->run[run];
        uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[b0]);
        float *rk = (float *)(st + j->ring_off) + (size_t)h * dh, *rv = rk + (size_t)L * hd;
        float *gk = (float *)(st + j->glob_off) + (size_t)h * dh, *gv = gk + (size_t)j->g * hd;
        uint64_t t0 = cpu_slot_u64(st, j->pos_off);
        double slope = j->rope_base > 0 ? 0.0 : (double)j->slopes[h];
        for (int b = b0; b < j->c->run[run + 1]; b++) {
            uint64_t t = t0 + (uint64_t)(b - b0);
            const float *row = j->in + (size_t)b * 3 * hd + (size_t)h * dh;
            float *kd = rk + (size_t)(t % (uint64_t)L) * hd, *vd = rv + (size_t)(t % (uint64_t)L) * hd;
            if (j->rope_base > 0) {
                lind_rope(kd, row + hd, t, dh, j->rope_base);
                lind_rope(q, row, t, dh, j->rope_base);
            } else {
                memcpy(kd, row + hd, (size_t)dh * sizeof *kd);
                memcpy(q, row, (size_t)dh * sizeof *q);
            }
            memcpy(vd, row + 2 * hd, (size_t)dh * sizeof *vd);
            if (t < (uint64_t)j->g) {
                memcpy(gk + (size_t)t * hd, kd, (size_t)dh * sizeof *kd);
                memcpy(gv + (size_t)t * hd, vd, (size_t)dh * sizeof *vd);
            }
            lind_window_head(j->out + (size_t)b * hd + (size_t)h * dh, acc, q, rk, rv, gk, gv, hd, t, j->w, j->dil,
                             j->g, slope, dh);
        }
    }
}

int cpu_window_step(backend *be, const backend_buf *in, const backend_buf *slopes, backend_buf *out,
                           size_t ring_off, size_t glob_off, size_t pos_off, int H, int dh, int w, int dil, int g,
                           float rope_base)
{
    cpu *c = (cpu *)be;
    if (H < 1 || dh < 1 || dh > 256 || w < 1 || dil < 1 || g < 0 || (rope_base > 0 && dh % 2) ||
        (!slopes && !(rope_base > 0)))
        return -EINVAL;
    int units = c->nruns * H;
    int parts = cpu_row_parts(c, units, (size_t)4 * dh * (size_t)(w + g) * c->B / c->nruns);
    float *t = cpu_tmp_get(c, (size_t)parts * 4 * dh);
    if (!t) return -ENOMEM;
    win_job j = {c, in->p, slopes ? slopes->p : NULL, out->p, t, ring_off, glob_off, pos_off, H, dh, w, dil, g,
                 rope_base};
    cpu_pool_run(c->threads, win_part, &j, parts);
    for (int k = 0; k < c->nruns; k++) {
        uint8_t *st = cpu_slot_ptr(c, c->slots[c->run[k]]);
        uint64_t pos = cpu_slot_u64(st, pos_off) + (uint64_t)(c->run[k + 1] - c->run[k]);
        memcpy(st + pos_off, &pos, sizeof pos);
    }
    return 0;
}
