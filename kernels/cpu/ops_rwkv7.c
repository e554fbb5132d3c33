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
 * "Decaying states kept in fp32": 10^8 tokens, tests/test_core_stability.c). */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

typedef struct rwkv7_job {
    cpu *c;
    const float *in, *par, *w2;
    float *vf, *out;
    double *tmp;          /* rwkv7_tmp_doubles() per part */
    size_t off;
    int ldi, dw, vmode, H, N;
    double eps;
} rwkv7_job;

static size_t rwkv7_tmp_doubles(int N, int dw) { return 8 * (size_t)N + (size_t)dw; }

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* The S update and o = S·r for one head of one row; i outer (rows of S),
 * j inner over contiguous floats so the loops vectorize. */
__attribute__((noinline)) static void rwkv7_state(float *restrict S, double *restrict o, const double *restrict w,
                                                  const double *restrict kk, const double *restrict a,
                                                  const double *restrict k, const double *restrict v,
                                                  const double *restrict r, int N)
{
    for (int i = 0; i < N; i++) {
        float *restrict Si = S + (size_t)i * N;
        double sa = 0.0;   /* (S·(−kk))_i from the old S */
        for (int j = 0; j < N; j++) sa -= (double)Si[j] * kk[j];
        double oi = 0.0;
        for (int j = 0; j < N; j++) {
            double s = (double)Si[j] * w[j] + sa * kk[j] * a[j] + v[i] * k[j];
            Si[j] = (float)s;
            oi += s * r[j];
        }
        o[i] = oi;
    }
}

static void rwkv7_head(const rwkv7_job *j, float *S, const float *row, float *vf, float *out, int h, double *t)
{
    int N = j->N, C = j->H * N, c0 = h * N;
    const float *par = j->par;
    const float *w0 = par, *a0 = par + C, *v0 = par + 2 * C, *kkw = par + 3 * C, *ka = par + 4 * C,
                *rk = par + 5 * C, *lw = par + 6 * C, *lb = par + 7 * C;
    double *w = t, *a = w + N, *v = a + N, *kk = v + N, *k = kk + N, *r = k + N, *o = r + N, *th = o + 2 * N;
    const float *wl = row + 6 * C;
    for (int d = 0; d < j->dw; d++) th[d] = tanh((double)wl[d]);
    for (int n = 0; n < N; n++) w[n] = w0[c0 + n];
    for (int d = 0; d < j->dw; d++) {
        const float *w2r = j->w2 + (size_t)d * C + c0;
        for (int n = 0; n < N; n++) w[n] += th[d] * (double)w2r[n];
    }
    const double emh = exp(-0.5);
    double ss = 0.0;
    for (int n = 0; n < N; n++) {
        int c = c0 + n;
        w[n] = exp(-emh * sigmoid(w[n]));
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
    rwkv7_state(S, o, w, kk, a, k, v, r, N);
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
    int H = j->H, C = H * j->N, lo, hi;
    cpu_part_range(j->c->nruns * H, part, nparts, &lo, &hi);
    double *t = j->tmp + (size_t)part * rwkv7_tmp_doubles(j->N, j->dw);
    for (int unit = lo; unit < hi; unit++) {
        int run = unit / H, h = unit % H;
        for (int b = j->c->run[run]; b < j->c->run[run + 1]; b++) {
            float *S = (float *)(cpu_slot_ptr(j->c, j->c->slots[b]) + j->off) + (size_t)h * j->N * j->N;
            rwkv7_head(j, S, j->in + (size_t)b * j->ldi, j->vf ? j->vf + (size_t)b * C : NULL,
                       j->out + (size_t)b * C, h, t);
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
                   H, N, (double)gn_eps};
    cpu_pool_run(c->threads, rwkv7_part, &j, parts);
    return 0;
}
