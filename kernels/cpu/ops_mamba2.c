/* kernels/cpu/ops_mamba2.c — the CPU backend's mamba2_step (kernels/backend.h):
 * Mamba-2's selective state space update after its products and the short
 * convolution, one (run, head) pair per work unit — a session's heads are
 * independent, a run's rows go through a head's state in order, so a run of
 * T rows gives bit for bit what T single steps give.
 *
 * Arithmetic: the element-wise math and every sum in double, the state S
 * stored as float (each updated element rounded once), as Hugging Face and
 * mamba_ssm keep it. S decays: A = −exp(A_log) < 0 and dt ≥ 0 make the
 * factor exp(dt·A) ∈ (0, 1], so an update's rounding is forgotten at the
 * rate of the decay. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/mixer_math.h"

typedef struct mamba2_job {
    cpu *c;
    const float *in, *par;
    float *out;
    double *tmp;          /* mamba2_tmp_doubles() per part */
    size_t off;
    int ldi, H, P, N, G;
    float lo, hi;
} mamba2_job;

static size_t mamba2_tmp_doubles(int P, int N) { return (size_t)P + 2 * (size_t)N; }

static double silu(double x) { return x / (1.0 + lind_exp(-x)); }

/* S update and y = S·C for one head of one row; p outer (rows of S), n
 * inner over contiguous floats so the loops vectorize. */
__attribute__((noinline)) static void mamba2_state(float *restrict S, float *restrict out, const double *restrict x,
                                                   const double *restrict B, const double *restrict C,
                                                   const float *restrict z, double dA, double dt, double D, int P,
                                                   int N)
{
    for (int p = 0; p < P; p++) {
        float *restrict Sp = S + (size_t)p * N;
        double dtx = dt * x[p], y = 0.0;
        for (int n = 0; n < N; n++) {
            double s = lind_mamba2_s((double)Sp[n], dA, dtx, B[n]);
            Sp[n] = (float)s;
            y += s * C[n];
        }
        y += D * x[p];
        out[p] = (float)(y * silu((double)z[p]));
    }
}

static void mamba2_head(const mamba2_job *j, float *S, const float *row, float *out, int h, double *t)
{
    int H = j->H, P = j->P, N = j->N, G = j->G, I = H * P, GN = G * N, CD = I + 2 * GN;
    int g = h / (H / G);
    const float *cb = j->par, *dtb = j->par + CD, *A = dtb + H, *D = A + H;
    double *x = t, *B = x + P, *C = B + N;
    for (int p = 0; p < P; p++) {
        int c = h * P + p;
        x[p] = silu((double)row[c] + (double)cb[c]);
    }
    for (int n = 0; n < N; n++) {
        int cB = I + g * N + n, cC = I + GN + g * N + n;
        B[n] = silu((double)row[cB] + (double)cb[cB]);
        C[n] = silu((double)row[cC] + (double)cb[cC]);
    }
    double dt = lind_mamba2_dt(row[CD + I + h], dtb[h], j->lo, j->hi);
    double dA = lind_exp(dt * (double)A[h]);
    mamba2_state(S, out + (size_t)h * P, x, B, C, row + CD + (size_t)h * P, dA, dt, (double)D[h], P, N);
}

static void mamba2_part(void *arg, int part, int nparts)
{
    const mamba2_job *j = arg;
    int H = j->H, I = H * j->P, lo, hi;
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    double *t = j->tmp + (size_t)part * mamba2_tmp_doubles(j->P, j->N);
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H;
        for (int b = j->c->run[run]; b < j->c->run[run + 1]; b++) {
            float *S = (float *)(cpu_slot_ptr(j->c, j->c->slots[b]) + j->off) + (size_t)h * j->P * j->N;
            mamba2_head(j, S, j->in + (size_t)b * j->ldi, j->out + (size_t)b * I, h, t);
        }
    }
}

int cpu_mamba2_step(backend *be, const backend_buf *in, int ldi, const backend_buf *par, backend_buf *out,
                    size_t state_off, int H, int P, int N, int G, float dt_lo, float dt_hi)
{
    cpu *c = (cpu *)be;
    if (H < 1 || P < 1 || N < 1 || G < 1 || H % G || ldi < 2 * H * P + 2 * G * N + H || !(dt_lo <= dt_hi))
        return -EINVAL;
    int units = c->nruns * H;
    int parts = cpu_row_parts(c, units, (size_t)4 * P * N * c->B / c->nruns);
    double *t = (double *)cpu_tmp_get(c, 2 * (size_t)parts * mamba2_tmp_doubles(P, N));
    if (!t) return -ENOMEM;
    mamba2_job j = {c, in->p, par->p, out->p, t, state_off, ldi, H, P, N, G, dt_lo, dt_hi};
    cpu_pool_run(c->threads, mamba2_part, &j, parts);
    return 0;
}
