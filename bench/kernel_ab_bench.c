/* bench/kernel_ab_bench.c — two builds of the CPU kernels (kernels/cpu/
 * gemm.c, quant.c, pool.c) timed call by call in one process: an A/B of a
 * kernel change that the host's own drift cannot bias.
 *
 * On the shared hosts this project runs on, a machine's speed moves by
 * half within minutes (docs/CPU.md), so two builds measured one after the
 * other differ by more than most kernel changes do. Here both builds are
 * shared objects loaded side by side (bench/kernel_ab.sh builds them from
 * two git revisions), each packs its own copies of the same weight, and
 * their calls alternate A B B A …, every call timed: the ratio of the two
 * medians and of the quartiles says what the change did, drift shared.
 *
 *   usage: kernel_ab_bench A.so B.so [--kernel f32|w16|bf16|amx|q8|q4] [--n N]
 *                          [--k K] [--batch B] [--threads T] [--calls C]
 *                          [--warm]
 *     --kernel  f32: cpu_gemm_run on fp32 weights (the best ISA); w16: the
 *               same on bf16 weights (fp32 math, the half panel widened
 *               once per panel into each thread's scratch at B > 24); bf16:
 *               cpu_gemm_run_dot (vdpbf16ps); amx: cpu_gemm_run_dot_amx;
 *               q8, q4: cpu_quant_run (the best integer-dot ISA). Default amx
 *               where the CPU has AMX, else f32.
 *     --n, --k  the weight's shape N × K (default 768 × 768)
 *     --batch   rows B (default 64)
 *     --threads threads splitting the panels, as the backend's pool does
 *               (default 2)
 *     --calls   calls per build (default 400)
 *     --warm    one copy of the weight per build (cache-resident when it
 *               fits); default: copies totalling ≥ 1 GiB and ≥ 3 × L3 per
 *               build, cycled, so that every call reads its weight from DRAM
 *
 *     --token   q8, q4, f32, w16: instead of one product, one token of the
 *               RWKV-4 169M shape at B = 1 (per layer 4 + 3 products, then
 *               the 50277 × 768 head; the --n/--k/--batch options are
 *               ignored), each product on the build's own pool (pool.c):
 *               q8/q4 through its cpu_quant_matmul, so that the pool's
 *               dispatch and the activations' quantization are part of what
 *               is compared; f32/w16 through its cpu_gemm_run, the threads
 *               claiming chunks of panels as the backend does at B = 1
 *               (backend_cpu.c's claims, this program's copy of their
 *               rule). --calls counts tokens. The pools split every product
 *               (their split-or-serial trials off: a trial in one build and
 *               not in the other would bias the pair).
 *
 * Prints one markdown line: medians (µs) of A and B, A/B of the medians
 * and of the first and third quartiles (> 1: B is faster), GFLOP/s, and
 * whether B's outputs equal A's bit for bit. Needs the two builds to share
 * the kernels' C interface (kernels/cpu/gemm.h, quant.h). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/quant.h"
#include "kernels/half.h"

typedef enum { K_F32, K_BF16, K_AMX, K_Q8, K_Q4, K_W16 } kernel_kind;
static const char *const KNAME[] = {"f32", "bf16", "amx", "q8", "q4", "w16"};
#define NKIND (int)(sizeof KNAME / sizeof *KNAME)
#define MAXT 64   /* --threads at most */

/* One build: its entry points (resolved in its own object), its packed
 * weight copies and its prepared activations. */
typedef struct build {
    const char *path;
    void *so;
    cpu_gemm_isa (*gemm_detect)(void);
    size_t (*packed_floats)(cpu_gemm_isa, int, int);
    void (*pack)(cpu_gemm_isa, const float *, int, int, float *);
    void (*pack_half)(cpu_gemm_isa, const uint16_t *, int, int, uint16_t *);
    size_t (*scratch_floats)(cpu_gemm_isa, int);
    void (*run)(cpu_gemm_isa, cpu_gemm_wtype, const float *, int, const void *, const float *, float *, int, int,
                int, int, int, int, int, float *);
    size_t (*dot_elems)(int, int);
    void (*pack_dot)(const uint16_t *, int, int, uint16_t *);
    int (*dot_ld)(int);
    void (*round_bf16)(const float *, int, int, int, uint16_t *, int);
    void (*run_dot)(const uint16_t *, int, const uint16_t *, const float *, float *, int, int, int, int, int, int,
                    int);
    void (*run_amx)(const uint16_t *, int, const uint16_t *, const float *, float *, int, int, int, int, int, int,
                    int);
    int (*amx_supported)(void);
    cpu_quant_isa (*quant_detect)(void);
    size_t (*quant_bytes)(cpu_quant_type, int, int);
    int (*quant_pack)(cpu_quant_type, const float *, int, int, void *, char *, size_t);
    size_t (*act_bytes)(int);
    void (*quant_act)(const float *, int, int, int, void *);
    void (*quant_run)(cpu_quant_isa, cpu_quant_type, const void *, const void *, const float *, float *, int, int,
                      int, int, int, int, int);
    int (*pool_new)(int, cpu_pool **);
    void (*pool_run)(cpu_pool *, cpu_pool_fn, void *, int);
    void (*pool_judging)(cpu_pool *, int);
    int (*quant_matmul)(cpu_pool *, cpu_quant_isa, cpu_quant_type, const float *, int, const void *, const float *,
                        float *, int, int, int, int, int, cpu_quant_scratch *);
    cpu_pool *pool;           /* --token: this build's pool, and its scratch */
    cpu_quant_scratch scratch;
    void **w;     /* ncopy packed weights */
    void *xa;     /* activations in the kernel's form */
    int ldxa;     /* their row stride (elements) */
    float *y;     /* B × N outputs */
    float *scr[MAXT];   /* w16: each team thread's widening scratch */
    cpu_gemm_isa gisa;
    cpu_quant_isa qisa;
} build;

static void die(const char *what, const char *why)
{
    fprintf(stderr, "kernel_ab_bench: %s: %s\n", what, why);
    exit(1);
}

static void *sym(build *b, const char *name)
{
    void *p = dlsym(b->so, name);
    if (!p) die(b->path, dlerror());
    return p;
}

static void load(build *b, const char *path)
{
    b->path = path;
    b->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!b->so) die(path, dlerror());
    *(void **)&b->gemm_detect = sym(b, "cpu_gemm_detect");
    *(void **)&b->packed_floats = sym(b, "cpu_gemm_packed_floats");
    *(void **)&b->pack = sym(b, "cpu_gemm_pack");
    /* w16's bf16 weights: cpu_gemm_pack_bf16 where the build has it (before
     * it, bf16 used cpu_gemm_pack_half's layout) */
    if (!(*(void **)&b->pack_half = dlsym(b->so, "cpu_gemm_pack_bf16"))) *(void **)&b->pack_half = sym(b, "cpu_gemm_pack_half");
    *(void **)&b->scratch_floats = sym(b, "cpu_gemm_scratch_floats");
    *(void **)&b->run = sym(b, "cpu_gemm_run");
    *(void **)&b->dot_elems = sym(b, "cpu_gemm_dot_packed_elems");
    *(void **)&b->pack_dot = sym(b, "cpu_gemm_pack_dot");
    *(void **)&b->dot_ld = sym(b, "cpu_gemm_dot_ld");
    *(void **)&b->round_bf16 = sym(b, "cpu_gemm_round_bf16");
    *(void **)&b->run_dot = sym(b, "cpu_gemm_run_dot");
    *(void **)&b->run_amx = sym(b, "cpu_gemm_run_dot_amx");
    *(void **)&b->amx_supported = sym(b, "cpu_gemm_amx_supported");
    *(void **)&b->quant_detect = sym(b, "cpu_quant_detect");
    *(void **)&b->quant_bytes = sym(b, "cpu_quant_packed_bytes");
    *(void **)&b->quant_pack = sym(b, "cpu_quant_pack");
    *(void **)&b->act_bytes = sym(b, "cpu_quant_act_bytes");
    *(void **)&b->quant_act = sym(b, "cpu_quant_act");
    *(void **)&b->quant_run = sym(b, "cpu_quant_run");
    *(void **)&b->pool_new = sym(b, "cpu_pool_new");
    *(void **)&b->pool_run = sym(b, "cpu_pool_run");
    *(void **)&b->pool_judging = sym(b, "cpu_pool_set_judging");
    *(void **)&b->quant_matmul = sym(b, "cpu_quant_matmul");
    b->gisa = b->gemm_detect();
    b->qisa = b->quant_detect();
}

static kernel_kind kind;
static int N = 768, K = 768, B = 64, threads = 2, calls = 400, ncopy, panels;
static build bld[2];
static const float *W, *X;

static cpu_quant_type qtype(void) { return kind == K_Q8 ? CPU_QUANT_Q8 : CPU_QUANT_Q4; }   /* --kernel q8/q4 */

/* Both builds' ncopy copies of W, each packed by its own build's code, and
 * X prepared by each. The copies are allocated in turns, A's and B's, so
 * that neither side's memory is systematically the later (an A/B of one
 * build against itself, with each side's copies allocated together, ran
 * the second-allocated side 2–5% faster). */
static void prepare(size_t per)
{
    uint16_t *wh = NULL;
    if (kind == K_BF16 || kind == K_AMX || kind == K_W16) {
        wh = malloc((size_t)N * K * sizeof *wh);
        if (!wh) die("weights", strerror(ENOMEM));
        for (size_t i = 0; i < (size_t)N * K; i++) wh[i] = lind_f32_to_bf16(W[i]);
    }
    for (int i = 0; i < 2; i++) {
        bld[i].w = calloc((size_t)ncopy, sizeof *bld[i].w);
        bld[i].y = calloc((size_t)B * N, sizeof(float));
        if (!bld[i].w || !bld[i].y) die("buffers", strerror(ENOMEM));
    }
    for (int c = 0; c < ncopy; c++)
        for (int i = 0; i < 2; i++) {
            build *b = &bld[i];
            char err[256];
            if (posix_memalign(&b->w[c], 64, per)) die("weights", strerror(ENOMEM));
            if (c > 0) memcpy(b->w[c], b->w[0], per);   /* packing is deterministic (and q8/q4's is slow) */
            else if (kind == K_F32) b->pack(b->gisa, W, N, K, b->w[c]);
            else if (kind == K_W16) b->pack_half(b->gisa, wh, N, K, b->w[c]);
            else if (kind == K_BF16 || kind == K_AMX) b->pack_dot(wh, N, K, b->w[c]);
            else if (b->quant_pack(qtype(), W, N, K, b->w[c], err, sizeof err))
                die("quant_pack", err);
        }
    free(wh);
    for (int i = 0; i < 2; i++) {
        build *b = &bld[i];
        if (kind == K_F32 || kind == K_W16) {
            b->xa = (void *)X;
            b->ldxa = K;
            for (int t = 0; kind == K_W16 && t < threads; t++)
                if (posix_memalign((void **)&b->scr[t], 64, b->scratch_floats(b->gisa, K) * sizeof(float)))
                    die("scratch", strerror(ENOMEM));
        } else if (kind == K_BF16 || kind == K_AMX) {
            b->ldxa = b->dot_ld(K);
            if (posix_memalign(&b->xa, 64, (size_t)B * b->ldxa * 2)) die("activations", strerror(ENOMEM));
            b->round_bf16(X, K, B, K, b->xa, b->ldxa);
        } else {
            if (posix_memalign(&b->xa, 64, (size_t)B * b->act_bytes(K))) die("activations", strerror(ENOMEM));
            b->quant_act(X, K, B, K, b->xa);
        }
    }
}

static size_t copy_bytes(build *b)
{
    switch (kind) {
    case K_F32: return b->packed_floats(b->gisa, N, K) * sizeof(float);
    case K_W16: return b->packed_floats(b->gisa, N, K) * sizeof(uint16_t);
    case K_BF16: case K_AMX: return b->dot_elems(N, K) * sizeof(uint16_t);
    default: return b->quant_bytes(qtype(), N, K);
    }
}

/* Panels [p0, p1) of copy c in build b, by team thread t. */
static void call(build *b, int c, int p0, int p1, int t)
{
    const void *w = b->w[c];
    switch (kind) {
    case K_F32: b->run(b->gisa, CPU_GEMM_F32, b->xa, b->ldxa, w, NULL, b->y, N, B, N, K, p0, p1, 0, NULL); break;
    case K_W16: b->run(b->gisa, CPU_GEMM_BF16, b->xa, b->ldxa, w, NULL, b->y, N, B, N, K, p0, p1, 0, b->scr[t]); break;
    case K_BF16: b->run_dot(b->xa, b->ldxa, w, NULL, b->y, N, B, N, K, p0, p1, 0); break;
    case K_AMX: b->run_amx(b->xa, b->ldxa, w, NULL, b->y, N, B, N, K, p0, p1, 0); break;
    default:
        b->quant_run(b->qisa, qtype(), b->xa, w, NULL, b->y, N, B, N, K, p0, p1,
                     0);
    }
}

/* The team: thread t runs its share of the panels of the call the main
 * thread names, between two barriers. */
static pthread_barrier_t bar;
static volatile int cur_build = -1, cur_copy;

static void *team(void *arg)
{
    int t = (int)(intptr_t)arg, p0 = panels * t / threads, p1 = panels * (t + 1) / threads;
    for (;;) {
        pthread_barrier_wait(&bar);
        if (cur_build < 0) return NULL;
        call(&bld[cur_build], cur_copy, p0, p1, t);
        pthread_barrier_wait(&bar);
    }
}

static double timed(int which, int copy)
{
    cur_build = which;
    cur_copy = copy;
    double t0 = clock_mono_s();
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    return clock_mono_s() - t0;
}

/* --token: the RWKV-4 169M token's products in order (gemm_bench's): the
 * time mix's r (sigmoid), k, v, output (accumulate), the channel mix's r
 * (sigmoid), key (RELU2) and value (accumulate), 12 layers, then the head. */
enum { T_LAYERS = 12, T_D = 768, T_F = 3072, T_V = 50277, T_PER = 7, T_NW = T_LAYERS * T_PER + 1 };
static const struct { int N, K, flags; } TP[T_PER + 1] = {
    {T_D, T_D, CPU_GEMM_SIGMOID}, {T_D, T_D, 0}, {T_D, T_D, 0}, {T_D, T_D, CPU_GEMM_ACCUMULATE},
    {T_D, T_D, CPU_GEMM_SIGMOID}, {T_F, T_D, CPU_GEMM_RELU2}, {T_D, T_F, CPU_GEMM_ACCUMULATE}, {T_V, T_D, 0}};
static size_t t_off[T_NW + 1];   /* each product's weight inside a token's copy (bytes) */

static int t_shape(int i) { return i == T_NW - 1 ? T_PER : i % T_PER; }

/* One fp32/w16 product of a token on a build's pool: parts claim chunks of
 * panels as backend_cpu.c's claims do at B = 1 (about 1/8 of a part's
 * share, a multiple of CPU_GEMM_ROW_GROUP: this program's value, the same
 * for both builds). */
typedef struct gjob {
    build *b;
    const void *w;
    int n, k, flags, panels, chunk;
    atomic_int next;
} gjob;

static void gemm_part(void *arg, int part, int nparts)
{
    gjob *j = arg;
    (void)part;
    (void)nparts;
    for (;;) {
        int p0 = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed) * j->chunk;
        if (p0 >= j->panels) return;
        int p1 = p0 + j->chunk < j->panels ? p0 + j->chunk : j->panels;
        j->b->run(j->b->gisa, kind == K_F32 ? CPU_GEMM_F32 : CPU_GEMM_BF16, X, j->k, j->w, NULL, j->b->y, j->n, 1,
                  j->n, j->k, p0, p1, j->flags, NULL);
    }
}

static double token(int which, int copy)
{
    build *b = &bld[which];
    const uint8_t *w = b->w[copy];
    double t0 = clock_mono_s();
    for (int i = 0; i < T_NW; i++) {
        int s = t_shape(i);
        if (kind == K_F32 || kind == K_W16) {
            const int G = CPU_GEMM_ROW_GROUP, nr = b->gisa == CPU_GEMM_AVX512 ? 32 : 16;
            gjob j = {.b = b, .w = w + t_off[i], .n = TP[s].N, .k = TP[s].K, .flags = TP[s].flags,
                      .panels = (TP[s].N + nr - 1) / nr};
            int parts = threads < j.panels ? threads : j.panels, c = j.panels / (parts * 8);
            j.chunk = c <= G ? G : (c + G - 1) / G * G;
            atomic_init(&j.next, 0);
            b->pool_run(b->pool, gemm_part, &j, parts);   /* y[1 × N] = x[1 × K] · W[N × K]ᵀ */
            continue;
        }
        /* y[1 × N] = x[1 × K] · W[N × K]ᵀ */
        if (b->quant_matmul(b->pool, b->qisa, qtype(), X, TP[s].K, w + t_off[i], NULL, b->y, TP[s].N, 1, TP[s].N, TP[s].K,
                            TP[s].flags, &b->scratch))
            die("cpu_quant_matmul", strerror(ENOMEM));
    }
    return clock_mono_s() - t0;
}

/* A token's weights for both builds: each build packs the four shapes once
 * and copies them into its token copies, allocated in turns as prepare()
 * does. */
static void prepare_token(size_t per)
{
    uint16_t *wh = NULL;
    if (kind == K_W16) {
        wh = malloc((size_t)N * K * sizeof *wh);
        if (!wh) die("weights", strerror(ENOMEM));
        for (size_t i = 0; i < (size_t)N * K; i++) wh[i] = lind_f32_to_bf16(W[i]);
    }
    for (int i = 0; i < 2; i++) {
        build *b = &bld[i];
        b->w = calloc((size_t)ncopy, sizeof *b->w);
        b->y = calloc(T_V, sizeof(float));
        if (!b->w || !b->y) die("buffers", strerror(ENOMEM));
        if (b->pool_new(threads, &b->pool)) die("cpu_pool_new", strerror(ENOMEM));
        b->pool_judging(b->pool, 0);
    }
    for (int c = 0; c < ncopy; c++)
        for (int i = 0; i < 2; i++) {
            build *b = &bld[i];
            if (posix_memalign(&b->w[c], 64, per)) die("weights", strerror(ENOMEM));
            uint8_t *dst = b->w[c];
            if (c > 0) {
                memcpy(dst, b->w[0], per);
                continue;
            }
            for (int k = 0; k < T_NW; k++) {
                int s = t_shape(k), first = k;
                for (int e = 0; e < k; e++)
                    if (TP[t_shape(e)].N == TP[s].N && TP[t_shape(e)].K == TP[s].K) { first = e; break; }
                char err[256];
                if (first < k) memcpy(dst + t_off[k], dst + t_off[first], t_off[k + 1] - t_off[k]);
                else if (kind == K_F32) b->pack(b->gisa, W, TP[s].N, TP[s].K, (float *)(dst + t_off[k]));
                else if (kind == K_W16) b->pack_half(b->gisa, wh, TP[s].N, TP[s].K, (uint16_t *)(dst + t_off[k]));
                else if (b->quant_pack(qtype(), W, TP[s].N, TP[s].K, dst + t_off[k], err, sizeof err))
                    die("quant_pack", err);
            }
        }
    free(wh);
}

static int quartile_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: kernel_ab_bench A.so B.so [--kernel f32|w16|bf16|amx|q8|q4] [--n N] [--k K] "
                        "[--batch B] [--threads T] [--calls C] [--warm] [--token]\n");
        return 2;
    }
    load(&bld[0], argv[1]);
    load(&bld[1], argv[2]);
    int warm = 0, kset = 0, tok = 0;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--warm")) { warm = 1; continue; }
        if (!strcmp(a, "--token")) { tok = 1; continue; }
        if (!v) die(a, "needs a value");
        i++;
        if (!strcmp(a, "--kernel")) {
            int k = 0;
            while (k < NKIND && strcmp(v, KNAME[k])) k++;
            if (k == NKIND) die("--kernel", "f32, w16, bf16, amx, q8 or q4");
            kind = (kernel_kind)k;
            kset = 1;
        } else if (!strcmp(a, "--n")) N = atoi(v);
        else if (!strcmp(a, "--k")) K = atoi(v);
        else if (!strcmp(a, "--batch")) B = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--calls")) calls = atoi(v);
        else die(a, "unknown option");
    }
    if (N < 1 || K < 1 || B < 1 || threads < 1 || threads > MAXT || calls < 4) die("options", "out of range");
    if (!kset) kind = bld[0].amx_supported() && bld[1].amx_supported() ? K_AMX : K_F32;
    if (kind == K_AMX) {
        for (int i = 0; i < 2; i++)
            if (!bld[i].amx_supported()) die(bld[i].path, "this CPU or kernel does not allow AMX");
        if (K % 32) die("--k", "the AMX kernel takes K a multiple of 32");
    }
    if (tok) {
        if (kind != K_Q8 && kind != K_Q4 && kind != K_F32 && kind != K_W16)
            die("--token", "takes --kernel q8, q4, f32 or w16");
        N = T_V;   /* the host weight: the largest shape's */
        K = T_D;
        B = 1;
    }
    /* the fp32 kernels' panels are 16 columns wide on an AVX2-only CPU */
    int nr = kind == K_Q8 || kind == K_Q4                                   ? CPU_QUANT_NR
             : (kind == K_F32 || kind == K_W16) && bld[0].gisa != CPU_GEMM_AVX512 ? 16
                                                                               : 32;
    panels = (N + nr - 1) / nr;
    if (threads > panels) threads = panels;

    size_t nx = (size_t)B * K < T_F ? T_F : (size_t)B * K;
    float *w = malloc((size_t)N * K * sizeof *w), *x = malloc(nx * sizeof *x);
    if (!w || !x) die("host data", strerror(ENOMEM));
    unsigned r = 12345;
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = ((float)((r = r * 1103515245u + 12345u) >> 9 & 0xFFFF) / 65536.0f - 0.5f) * 0.1f;
    for (size_t i = 0; i < nx; i++) x[i] = (float)((r = r * 1103515245u + 12345u) >> 9 & 0xFFFF) / 65536.0f - 0.5f;
    W = w;
    X = x;
    size_t per = copy_bytes(&bld[0]) > copy_bytes(&bld[1]) ? copy_bytes(&bld[0]) : copy_bytes(&bld[1]);
    if (tok)
        for (int i = 0; i < T_NW; i++) {
            int sh = t_shape(i);
            size_t a, b;
            if (kind == K_F32 || kind == K_W16) {
                size_t el = kind == K_F32 ? sizeof(float) : sizeof(uint16_t);
                a = bld[0].packed_floats(bld[0].gisa, TP[sh].N, TP[sh].K) * el;
                b = bld[1].packed_floats(bld[1].gisa, TP[sh].N, TP[sh].K) * el;
            } else {
                a = bld[0].quant_bytes(qtype(), TP[sh].N, TP[sh].K);
                b = bld[1].quant_bytes(qtype(), TP[sh].N, TP[sh].K);
            }
            t_off[i + 1] = t_off[i] + ((a > b ? a : b) + 63) / 64 * 64;
            per = t_off[i + 1];
        }
    size_t cold = (size_t)1 << 30;
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0 && 3 * (size_t)l3 > cold) cold = 3 * (size_t)l3;
    ncopy = warm ? 1 : (int)(cold / per + 1);
    if (tok) {
        prepare_token(per);
        token(0, 0);   /* unmeasured, then whether B's outputs equal A's */
        token(1, 0);
        int same = !memcmp(bld[0].y, bld[1].y, (size_t)T_V * sizeof(float));
        double *ta = malloc((size_t)calls * sizeof *ta), *tb = malloc((size_t)calls * sizeof *tb);
        if (!ta || !tb) die("timings", strerror(ENOMEM));
        for (int i = 0, copy = 0; i < calls; i++) {   /* A B, then B A */
            copy = (copy + 1) % ncopy;
            int first = i & 1;
            double t1 = token(first, copy), t2 = token(!first, copy);
            ta[i] = first ? t2 : t1;
            tb[i] = first ? t1 : t2;
        }
        qsort(ta, (size_t)calls, sizeof *ta, quartile_cmp);
        qsort(tb, (size_t)calls, sizeof *tb, quartile_cmp);
        double ma = ta[calls / 2], mb = tb[calls / 2], gb = per / 1e9;
        printf("| %s | token (169M, %d products) | 1 | %d | %s | %.1f | %.1f | %.3f | %.3f–%.3f | %.1f / %.1f GB/s | %s |\n",
               KNAME[kind], T_NW, threads, warm ? "warm" : "cold", ma * 1e6, mb * 1e6, ma / mb,
               ta[calls / 4] / tb[calls / 4], ta[3 * calls / 4] / tb[3 * calls / 4], gb / ma, gb / mb,
               same ? "yes" : "no");
        return 0;
    }
    prepare(per);

    pthread_barrier_init(&bar, NULL, (unsigned)threads + 1);
    pthread_t th[64];
    for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, team, (void *)(intptr_t)t);
    /* unmeasured: one call each, then whether B's outputs equal A's */
    timed(0, 0);
    timed(1, 0);
    int same = !memcmp(bld[0].y, bld[1].y, (size_t)B * N * sizeof(float));
    double *ta = malloc((size_t)calls * sizeof *ta), *tb = malloc((size_t)calls * sizeof *tb);
    int copy = 0;
    for (int i = 0; i < calls; i++) {   /* A B, then B A: neither always goes first */
        copy = (copy + 1) % ncopy;
        int first = i & 1;
        double t1 = timed(first, copy), t2 = timed(!first, copy);
        ta[i] = first ? t2 : t1;
        tb[i] = first ? t1 : t2;
    }
    cur_build = -1;
    pthread_barrier_wait(&bar);
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
    qsort(ta, (size_t)calls, sizeof *ta, quartile_cmp);
    qsort(tb, (size_t)calls, sizeof *tb, quartile_cmp);
    double ma = ta[calls / 2], mb = tb[calls / 2], flop = 2.0 * B * N * K;
    printf("| %s | %d × %d | %d | %d | %s | %.1f | %.1f | %.3f | %.3f–%.3f | %.0f / %.0f | %s |\n", KNAME[kind], N, K,
           B, threads, warm ? "warm" : "cold", ma * 1e6, mb * 1e6, ma / mb, ta[calls / 4] / tb[calls / 4],
           ta[3 * calls / 4] / tb[3 * calls / 4], flop / ma * 1e-9, flop / mb * 1e-9, same ? "yes" : "no");
    return 0;
}
