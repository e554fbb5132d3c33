/* kernels/cpu/ops_shift.c — the CPU backend's shift_mix (token shift),
 * split by (run, channel slice)
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

typedef struct shift_job {
    cpu *c;
    const float *h, *mu;
    float *out;
    size_t off;
    int d, nmix, slices;
} shift_job;

/* One row's channels [0, n) of d: out[p·d + i] for p < nmix, then prev ← h. */
__attribute__((noinline)) static void shift_row(float *restrict out, float *restrict prev, const float *restrict h,
                                                const float *restrict mu, int d, int n, int nmix)
{
    for (int p = 0; p < nmix; p++)
        for (int i = 0; i < n; i++) out[p * d + i] = lind_shift_mix(h[i], prev[i], mu[p * d + i]);
    for (int i = 0; i < n; i++) prev[i] = h[i];
}

/* Parts split (run, channel slice) items, never a run's rows: they go in
 * order through one state. */
static void shift_part(void *arg, int part, int nparts)
{
    const shift_job *j = arg;
    int lo, hi, d = j->d;
    cpu_part_range(j->c->nruns * j->slices, part, nparts, &lo, &hi);
    for (int it = lo; it < hi; it++) {
        int k = it / j->slices, c0, c1;
        cpu_chan_range(d, it % j->slices, j->slices, &c0, &c1);
        for (int b = j->c->run[k]; b < j->c->run[k + 1]; b++)
            shift_row(j->out + (size_t)b * j->nmix * d + c0, (float *)(cpu_slot_ptr(j->c, j->c->slots[b]) + j->off) + c0,
                      j->h + (size_t)b * d + c0, j->mu + c0, d, c1 - c0, j->nmix);
    }
}

int cpu_shift_mix(backend *be, const backend_buf *h, const backend_buf *mu, backend_buf *out,
                         size_t shift_off, int d, int nmix)
{
    cpu *c = (cpu *)be;
    int slices = cpu_chan_slices(c, d);
    shift_job j = {c, h->p, mu->p, out->p, shift_off, d, nmix, slices};
    cpu_pool_run(c->threads, shift_part, &j,
                 cpu_row_parts(c, c->nruns * slices, (size_t)d * nmix * 2 * c->B / c->nruns / slices));
    return 0;
}
