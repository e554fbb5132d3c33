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
 * rate of the decay.
 *
 * y_p = Σ_n S[p][n]·C_n is one chain of dependent additions per row p, in
 * n order (the CUDA body's order too). Summed one row at a time, a step
 * waits on that chain; with AVX-512 (mamba2_state512) eight rows are summed
 * at once, one per lane, each lane in the same n order: the same sums. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/transpose8.h"
#include "kernels/mixer_math.h"

#ifdef CPU_TRANSPOSE8_AVX512
#define MAMBA2_AVX512 1
#define TGT512 __attribute__((target("avx512f,fma")))
#endif

typedef struct mamba2_job {
    cpu *c;
    const float *in, *par;
    float *out;
    double *tmp;          /* mamba2_tmp_doubles() per part */
    size_t off;
    int ldi, H, P, N, G;
    int avx512;           /* mamba2_state512 for the rows it takes */
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

#ifdef MAMBA2_AVX512
/* mamba2_state for rows [0, P − P % 8), eight at a time: the updates of an
 * 8 × 8 tile of S with columns in the lanes, then the tile transposed so
 * each lane adds its row's eight terms in n order. Every multiply-add is
 * fused, as mamba2_state compiled for a CPU with FMA. Needs N ≥ 8; the
 * rows left over (P % 8) are mamba2_state's. The eight rows are read across,
 * eight short streams the hardware prefetcher does not follow, so each tile
 * prefetches its share of the next eight rows (the next 32·N bytes of S). */
TGT512 static void mamba2_state512(float *restrict S, float *restrict out, const double *restrict x,
                                   const double *restrict B, const double *restrict C, const float *restrict z,
                                   double dA, double dt, double D, int P, int N)
{
    __m512d vdA = _mm512_set1_pd(dA);
    int N8 = N - N % 8;
    for (int p0 = 0; p0 + 8 <= P; p0 += 8) {
        float *restrict S0 = S + (size_t)p0 * N;
        double dtx[8], y[8];
        for (int k = 0; k < 8; k++) dtx[k] = dt * x[p0 + k];
        __m512d vy = _mm512_setzero_pd(), vdtx[8], r[8];
        for (int k = 0; k < 8; k++) vdtx[k] = _mm512_set1_pd(dtx[k]);
        for (int n0 = 0; n0 < N8; n0 += 8) {
            __m512d vB = _mm512_loadu_pd(B + n0);
            const char *next = (const char *)(S0 + (size_t)8 * N) + (size_t)n0 * 32;   /* 256 of its 32·N bytes */
            for (int i = 0; i < 4; i++) _mm_prefetch(next + 64 * i, _MM_HINT_T0);
            for (int k = 0; k < 8; k++) {   /* lind_mamba2_s: S·dA + (dt·x)·B */
                float *Sk = S0 + (size_t)k * N + n0;
                r[k] = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_loadu_ps(Sk)), vdA, _mm512_mul_pd(vdtx[k], vB));
                _mm256_storeu_ps(Sk, _mm512_cvtpd_ps(r[k]));
            }
            cpu_transpose8_pd(r);
            for (int i = 0; i < 8; i++) vy = _mm512_fmadd_pd(r[i], _mm512_set1_pd(C[n0 + i]), vy);
        }
        _mm512_storeu_pd(y, vy);
        for (int k = 0; k < 8; k++) {
            float *Sk = S0 + (size_t)k * N;
            for (int n = N8; n < N; n++) {
                double s = fma((double)Sk[n], dA, dtx[k] * B[n]);
                Sk[n] = (float)s;
                y[k] = fma(s, C[n], y[k]);
            }
            out[p0 + k] = (float)(fma(D, x[p0 + k], y[k]) * silu((double)z[p0 + k]));
        }
    }
}
#endif

/* One head of one row; B and C (its group's) are computed only when
 * fresh_bc: a part's heads of one row share them group by group. */
static void mamba2_head(const mamba2_job *j, float *S, const float *row, float *out, int h, double *t, int fresh_bc)
{
    int H = j->H, P = j->P, N = j->N, G = j->G, I = H * P, GN = G * N, CD = I + 2 * GN;
    int g = h / (H / G);
    const float *cb = j->par, *dtb = j->par + CD, *A = dtb + H, *D = A + H;
    double *x = t, *B = x + P, *C = B + N;
    for (int p = 0; p < P; p++) {
        int c = h * P + p;
        x[p] = silu((double)row[c] + (double)cb[c]);
    }
    for (int n = 0; n < N && fresh_bc; n++) {
        int cB = I + g * N + n, cC = I + GN + g * N + n;
        B[n] = silu((double)row[cB] + (double)cb[cB]);
        C[n] = silu((double)row[cC] + (double)cb[cC]);
    }
    double dt = lind_mamba2_dt(row[CD + I + h], dtb[h], j->lo, j->hi);
    double dA = lind_exp(dt * (double)A[h]);
    const float *z = row + CD + (size_t)h * P;
    out += (size_t)h * P;
    int p0 = 0;
#ifdef MAMBA2_AVX512
    if (j->avx512 && N >= 8) {
        mamba2_state512(S, out, x, B, C, z, dA, dt, (double)D[h], P, N);
        p0 = P - P % 8;
    }
#endif
    mamba2_state(S + (size_t)p0 * N, out + p0, x + p0, B, C, z + p0, dA, dt, (double)D[h], P - p0, N);
}

static void mamba2_part(void *arg, int part, int nparts)
{
    const mamba2_job *j = arg;
    int H = j->H, I = H * j->P, lo, hi, bc_row = -1, bc_g = -1;   /* whose B and C t holds */
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    double *t = j->tmp + (size_t)part * mamba2_tmp_doubles(j->P, j->N);
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H, g = h / (H / j->G);
        for (int b = j->c->run[run]; b < j->c->run[run + 1]; b++) {
            float *S = (float *)(cpu_slot_ptr(j->c, j->c->slots[b]) + j->off) + (size_t)h * j->P * j->N;
            int fresh = b != bc_row || g != bc_g;
            mamba2_head(j, S, j->in + (size_t)b * j->ldi, j->out + (size_t)b * I, h, t, fresh);
            bc_row = b;
            bc_g = g;
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
    mamba2_job j = {c, in->p, par->p, out->p, t, state_off, ldi, H, P, N, G, c->isa == CPU_GEMM_AVX512, dt_lo, dt_hi};
    cpu_pool_run(c->threads, mamba2_part, &j, parts);
    return 0;
}
