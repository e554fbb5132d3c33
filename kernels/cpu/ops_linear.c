/* kernels/cpu/ops_linear.c — the CPU backend's linear_step (linear
 * attention), split by runs, and the per-head S/z runners that retention_step
 * and cosformer_step share with it (cpu_lin_head, cpu_lin_z_head,
 * cpu_lin_out_head)
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

/* S ← γS + φk vᵀ and num_j = Σ_i φq_i S[i][j] for one head: i outer, j inner
 * over contiguous rows of S so it vectorizes; the same per-element operation
 * (lind_lin_s) and i-order as lind_lin_column() in kernels/mixer_math.h. */
__attribute__((noinline)) void cpu_lin_head(double *restrict S, double *restrict num, const float *restrict phik,
                                            const float *restrict phiq, const float *restrict v, double g, int dh)
{
    for (int j = 0; j < dh; j++) num[j] = 0.0;
    for (int i = 0; i < dh; i++) {
        double *restrict Si = S + (size_t)i * dh;
        float pk = phik[i];
        double pq = (double)phiq[i];
        for (int j = 0; j < dh; j++) {
            double s = lind_lin_s(Si[j], g, pk, v[j]);
            Si[j] = s;
            num[j] += pq * s;
        }
    }
}

/* Scratch floats per part: φq and φk of a row (H·dh each), then fp64
 * numerators and z terms of a head (dh each, 8-byte aligned since H·dh·2
 * floats is even). */
static size_t lin_tmp_floats(int H, int dh) { return (size_t)2 * H * dh + 4 * (size_t)dh; }

typedef struct lin_job {
    cpu *c;
    const float *in, *gamma;
    float *out, *tmp;   /* tmp: lin_tmp_floats() per part */
    size_t off;
    int H, dh;
    float eps;
} lin_job;

/* φ over n values (both branches are computed, so the loop vectorizes). */
__attribute__((noinline)) static void phi_row(float *restrict out, const float *restrict x, int n)
{
    for (int i = 0; i < n; i++) out[i] = lind_elu1(x[i]);
}

/* z ← γz + φk for one head, returning the denominator Σ_i φq_i z_i summed in
 * i order (the order of the CUDA kernel's reference); the updates vectorize,
 * the sum is a separate pass over term. */
__attribute__((noinline)) double cpu_lin_z_head(double *restrict z, double *restrict term, const float *restrict phik,
                                               const float *restrict phiq, double g, int dh)
{
    for (int i = 0; i < dh; i++) term[i] = lind_lin_z(&z[i], phik[i], phiq[i], g);
    double den = 0.0;
    for (int i = 0; i < dh; i++) den += term[i];
    return den;
}

__attribute__((noinline)) void cpu_lin_out_head(float *restrict o, const double *restrict num, double den, float eps,
                                                int dh)
{
    for (int i = 0; i < dh; i++) o[i] = lind_lin_out(num[i], den, eps);
}

static void lin_part(void *arg, int part, int nparts)
{
    const lin_job *j = arg;
    int lo, hi, H = j->H, dh = j->dh, hd = H * dh;
    cpu_part_range(j->c->nruns, part, nparts, &lo, &hi);
    float *phiq = j->tmp + (size_t)part * lin_tmp_floats(H, dh), *phik = phiq + hd;
    double *num = (double *)(phik + hd), *term = num + dh;
    for (int b = j->c->run[lo]; b < j->c->run[hi]; b++) {
        uint8_t *st = cpu_slot_ptr(j->c, j->c->slots[b]) + j->off;
        const float *q = j->in + (size_t)b * 3 * hd, *k = q + hd, *v = q + 2 * hd;
        phi_row(phiq, q, hd);
        phi_row(phik, k, hd);
        for (int h = 0; h < H; h++) {
            double *S = (double *)st + (size_t)h * dh * dh;
            double *z = (double *)st + (size_t)H * dh * dh + (size_t)h * dh;
            double g = j->gamma ? (double)j->gamma[h] : 1.0;
            double den = cpu_lin_z_head(z, term, phik + h * dh, phiq + h * dh, g, dh);
            cpu_lin_head(S, num, phik + h * dh, phiq + h * dh, v + h * dh, g, dh);
            cpu_lin_out_head(j->out + (size_t)b * hd + (size_t)h * dh, num, den, j->eps, dh);
        }
    }
}

int cpu_linear_step(backend *be, const backend_buf *in, const backend_buf *gamma, backend_buf *out,
                           size_t state_off, int H, int dh, float eps)
{
    cpu *c = (cpu *)be;
    int parts = cpu_row_parts(c, c->nruns, (size_t)H * dh * dh * c->B / c->nruns);
    float *t = cpu_tmp_get(c, (size_t)parts * lin_tmp_floats(H, dh));
    if (!t) return -ENOMEM;
    lin_job j = {c, in->p, gamma ? gamma->p : NULL, out->p, t, state_off, H, dh, eps};
    cpu_pool_run(c->threads, lin_part, &j, parts);
    return 0;
}
