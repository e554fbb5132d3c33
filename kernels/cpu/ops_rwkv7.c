/* kernels/cpu/ops_rwkv7.c — the CPU backend's rwkv7_step (kernels/backend.h):
 * RWKV-7 time mixing after its matrix products, one (run, head) pair per
 * work unit — a session's heads are independent, a run's rows go through a
 * head's state in order, so a run of T rows gives bit for bit what T single
 * steps give.
 *
 * Arithmetic: the element-wise math and every sum in double, the state S
 * stored as float (each updated element rounded once), as BlinkDL's own
 * inference code keeps it. S is a decaying sum: the decay w lies in
 * (e^{−e^{−½}}, 1) ≈ (0.545, 1) on every channel, and the kk term (‖kk‖ = 1,
 * a ∈ (0, 1)) removes part of S along kk rather than adding, so each
 * update's rounding is forgotten at the rate of the decay (docs/NUMERICS.md,
 * "Decaying states kept in fp32": 10^8 tokens, tests/test_core_stability.c).
 *
 * (S·(−kk))_i and o_i = (S·r)_i are each one chain of dependent multiply-adds
 * per row i, in j order. Summed one row at a time a step waits on those
 * chains; with AVX-512 (rwkv7_state512) eight rows are summed at once, one
 * per lane, each lane in the same j order: the same sums, the same bits. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/transpose8.h"
#include "kernels/mixer_math.h"

#ifdef CPU_TRANSPOSE8_AVX512
#define RWKV7_AVX512 1
#define TGT512 __attribute__((target("avx512f,fma")))
#endif

typedef struct rwkv7_job {
    cpu *c;
    const float *in, *par, *w2;
    float *vf, *out;
    double *tmp;          /* rwkv7_tmp_doubles() per part */
    size_t off;
    int ldi, dw, vmode, H, N;
    double eps;
    int avx512;           /* rwkv7_state512 for the rows it takes */
} rwkv7_job;

static size_t rwkv7_tmp_doubles(int N, int dw) { return 8 * (size_t)N + (size_t)dw; }

/* lind_exp rather than libm's exp: inlined and branch-free, no call per
 * channel. The channel loop below stays scalar (gcc -fopt-info-vec reports
 * no vectorized loop there). */
static double sigmoid(double x) { return 1.0 / (1.0 + lind_exp(-x)); }

/* One element of the updated S: S_ij·w_j + ((S·(−kk))_i·kk_j)·a_j + v_i·k_j,
 * every multiply-add fused, in this order (both paths below). */
static inline double rwkv7_s(double sij, double wj, double sakj, double aj, double vkj)
{
    return fma(sij, wj, fma(sakj, aj, vkj));
}

/* The S update and o = S·r for `rows` rows of one head's S (N × N) of one
 * row of the batch; i outer (rows of S), j inner over contiguous floats. */
__attribute__((noinline)) static void rwkv7_state(float *restrict S, double *restrict o, const double *restrict w,
                                                  const double *restrict kk, const double *restrict a,
                                                  const double *restrict k, const double *restrict v,
                                                  const double *restrict r, int rows, int N)
{
    for (int i = 0; i < rows; i++) {
        float *restrict Si = S + (size_t)i * N;
        double sa = 0.0;   /* (S·(−kk))_i from the old S */
        for (int j = 0; j < N; j++) sa = fma(-(double)Si[j], kk[j], sa);
        double oi = 0.0;
        for (int j = 0; j < N; j++) {
            double s = rwkv7_s((double)Si[j], w[j], sa * kk[j], a[j], v[i] * k[j]);
            Si[j] = (float)s;
            oi = fma(s, r[j], oi);
        }
        o[i] = oi;
    }
}

#ifdef RWKV7_AVX512
/* rwkv7_state for rows [0, N − N % 8), eight at a time: first (S·(−kk)) of
 * the eight rows, their 8 × 8 tiles transposed so each lane sums its row in
 * j order; then each tile updated with the columns in the lanes and
 * transposed again for o. Needs N ≥ 8; the rows left over (N % 8) are
 * rwkv7_state's, as are the columns past the last whole tile. */
TGT512 static void rwkv7_state512(float *restrict S, double *restrict o, const double *restrict w,
                                  const double *restrict kk, const double *restrict a, const double *restrict k,
                                  const double *restrict v, const double *restrict r, int N)
{
    int N8 = N - N % 8;
    for (int i0 = 0; i0 + 8 <= N; i0 += 8) {
        float *restrict S0 = S + (size_t)i0 * N;
        __m512d t[8], acc = _mm512_setzero_pd();
        double sa[8], oi[8];
        for (int j0 = 0; j0 < N8; j0 += 8) {
            for (int q = 0; q < 8; q++) t[q] = _mm512_cvtps_pd(_mm256_loadu_ps(S0 + (size_t)q * N + j0));
            cpu_transpose8_pd(t);
            for (int c = 0; c < 8; c++) acc = _mm512_fnmadd_pd(t[c], _mm512_set1_pd(kk[j0 + c]), acc);
        }
        _mm512_storeu_pd(sa, acc);
        for (int q = 0; q < 8; q++)
            for (int j = N8; j < N; j++) sa[q] = fma(-(double)S0[(size_t)q * N + j], kk[j], sa[q]);
        acc = _mm512_setzero_pd();
        for (int j0 = 0; j0 < N8; j0 += 8) {
            __m512d vw = _mm512_loadu_pd(w + j0), vkk = _mm512_loadu_pd(kk + j0), va = _mm512_loadu_pd(a + j0),
                    vk = _mm512_loadu_pd(k + j0);
            for (int q = 0; q < 8; q++) {
                float *Sq = S0 + (size_t)q * N + j0;
                __m512d sak = _mm512_mul_pd(_mm512_set1_pd(sa[q]), vkk),
                        vkj = _mm512_mul_pd(_mm512_set1_pd(v[i0 + q]), vk);
                t[q] = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_loadu_ps(Sq)), vw, _mm512_fmadd_pd(sak, va, vkj));
                _mm256_storeu_ps(Sq, _mm512_cvtpd_ps(t[q]));
            }
            cpu_transpose8_pd(t);
            for (int c = 0; c < 8; c++) acc = _mm512_fmadd_pd(t[c], _mm512_set1_pd(r[j0 + c]), acc);
        }
        _mm512_storeu_pd(oi, acc);
        for (int q = 0; q < 8; q++) {
            float *Sq = S0 + (size_t)q * N;
            for (int j = N8; j < N; j++) {
                double s = rwkv7_s((double)Sq[j], w[j], sa[q] * kk[j], a[j], v[i0 + q] * k[j]);
                Sq[j] = (float)s;
                oi[q] = fma(s, r[j], oi[q]);
            }
            o[i0 + q] = oi[q];
        }
    }
}
#endif

/* One head of one row; tanh of the decay LoRA's inner activations (the
 * row's, shared by its heads) is computed only when fresh_th. */
static void rwkv7_head(const rwkv7_job *j, float *S, const float *row, float *vf, float *out, int h, double *t,
                       int fresh_th)
{
    int N = j->N, C = j->H * N, c0 = h * N;
    const float *par = j->par;
    const float *w0 = par, *a0 = par + C, *v0 = par + 2 * C, *kkw = par + 3 * C, *ka = par + 4 * C,
                *rk = par + 5 * C, *lw = par + 6 * C, *lb = par + 7 * C;
    double *w = t, *a = w + N, *v = a + N, *kk = v + N, *k = kk + N, *r = k + N, *o = r + N, *th = o + 2 * N;
    const float *wl = row + 6 * C;
    for (int d = 0; d < j->dw && fresh_th; d++) th[d] = tanh((double)wl[d]);
    for (int n = 0; n < N; n++) w[n] = w0[c0 + n];
    /* A head reads N floats from each of W2's dw rows, C floats apart: short
     * runs the hardware prefetcher does not follow, so each row fetches the
     * one W2_AHEAD rows on. */
    enum { W2_AHEAD = 8 };
    for (int d = 0; d < j->dw; d++) {
        const float *w2r = j->w2 + (size_t)d * C + c0;
        if (d + W2_AHEAD < j->dw)
            for (int n = 0; n < N; n += 16) __builtin_prefetch(w2r + (size_t)W2_AHEAD * C + n);
        for (int n = 0; n < N; n++) w[n] += th[d] * (double)w2r[n];
    }
    const double emh = exp(-0.5);
    double ss = 0.0;
    for (int n = 0; n < N; n++) {
        int c = c0 + n;
        w[n] = lind_exp(-emh * sigmoid(w[n]));
        a[n] = sigmoid((double)a0[c] + (double)row[3 * C + c]);
        double vv = row[2 * C + c];
        if (j->vmode == 1) vf[c] = (float)vv;
        else if (j->vmode == 2) vv += ((double)vf[c] - vv) * sigmoid((double)v0[c] + (double)row[4 * C + c]);
        v[n] = vv;
        double kr = row[C + c];
        kk[n] = kr * (double)kkw[c];
        ss += kk[n] * kk[n];
        k[n] = kr * (1.0 + (a[n] - 1.0) * (double)ka[c]);   /* after kk: kk is made from the raw k */
        r[n] = row[c];
    }
    double nrm = sqrt(ss), inv = 1.0 / (nrm > 1e-12 ? nrm : 1e-12);   /* F.normalize's floor */
    for (int n = 0; n < N; n++) kk[n] *= inv;
    int i0 = 0;
#ifdef RWKV7_AVX512
    if (j->avx512 && N >= 8) {
        rwkv7_state512(S, o, w, kk, a, k, v, r, N);
        i0 = N - N % 8;
    }
#endif
    rwkv7_state(S + (size_t)i0 * N, o + i0, w, kk, a, k, v + i0, r, N - i0, N);
    double mean = 0.0, var = 0.0, bonus = 0.0;
    for (int n = 0; n < N; n++) mean += o[n];
    mean /= N;
    for (int n = 0; n < N; n++) var += (o[n] - mean) * (o[n] - mean);
    double rstd = 1.0 / sqrt(var / N + j->eps);
    for (int n = 0; n < N; n++) bonus += r[n] * k[n] * (double)rk[c0 + n];   /* the rescaled k */
    const float *g = row + 5 * C;
    for (int n = 0; n < N; n++) {
        int c = c0 + n;
        double y = (o[n] - mean) * rstd * (double)lw[c] + (double)lb[c] + bonus * v[n];
        out[c] = (float)(y * (double)g[c]);
    }
}

static void rwkv7_part(void *arg, int part, int nparts)
{
    const rwkv7_job *j = arg;
    int H = j->H, C = H * j->N, lo, hi, th_row = -1;   /* whose tanh t holds */
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    double *t = j->tmp + (size_t)part * rwkv7_tmp_doubles(j->N, j->dw);
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H;
        for (int b = j->c->run[run]; b < j->c->run[run + 1]; b++) {
            float *S = (float *)(cpu_slot_ptr(j->c, j->c->slots[b]) + j->off) + (size_t)h * j->N * j->N;
            rwkv7_head(j, S, j->in + (size_t)b * j->ldi, j->vf ? j->vf + (size_t)b * C : NULL,
                       j->out + (size_t)b * C, h, t, b != th_row);
            th_row = b;
        }
    }
}

int cpu_rwkv7_step(backend *be, const backend_buf *in, int ldi, const backend_buf *par, const backend_buf *w2,
                   int dw, backend_buf *vfirst, int vmode, backend_buf *out, size_t state_off, int H, int N,
                   float gn_eps)
{
    cpu *c = (cpu *)be;
    if (H < 1 || N < 1 || dw < 0 || vmode < 0 || vmode > 2 || (vmode && !vfirst) || ldi < 6 * H * N + dw)
        return -EINVAL;
    int units = c->nruns * H;
    int parts = cpu_row_parts(c, units, (size_t)4 * N * N * c->B / c->nruns);
    double *t = (double *)cpu_tmp_get(c, 2 * (size_t)parts * rwkv7_tmp_doubles(N, dw));
    if (!t) return -ENOMEM;
    rwkv7_job j = {c, in->p, par->p, w2->p, vfirst ? vfirst->p : NULL, out->p, t, state_off, ldi, dw, vmode,
                   H, N, (double)gn_eps, c->isa == CPU_GEMM_AVX512};
    cpu_pool_run(c->threads, rwkv7_part, &j, parts);
    return 0;
}
