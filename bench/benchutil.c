/* bench/benchutil.c — see benchutil.h. */
#include "bench/benchutil.h"
#include "kernels/clock.h"
#include "kernels/cpu/gemm.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, size_t n)
{
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void bench_med_range(double *v, size_t n, double *med, double *lo, double *hi)
{
    *med = bench_median(v, n);
    *lo = v[0];
    *hi = v[n - 1];
}

int bench_parse_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 4096 || n == max || (*end && *end != ',')) return -1;
        out[n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return n ? n : -1;
}

static size_t meminfo_kib(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    size_t kib = 0, kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            kib = strtoull(line + kl + 1, NULL, 10);
            break;
        }
    if (f) fclose(f);
    return kib;
}

size_t bench_mem_available(void) { return meminfo_kib("MemAvailable") * 1024; }

void bench_header(FILE *f, int argc, char **argv)
{
    fprintf(f, "Command: `");
    for (int i = 0; i < argc; i++) fprintf(f, "%s%s", i ? " " : "", argv[i]);
    fprintf(f, "`\n\n");
    char cpu[256] = "unknown CPU", line[512];
    FILE *c = fopen("/proc/cpuinfo", "r");
    while (c && fgets(line, sizeof line, c))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                snprintf(cpu, sizeof cpu, "%s", p + 2);
                cpu[strcspn(cpu, "\n")] = 0;
            }
            break;
        }
    if (c) fclose(c);
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) < 0) load[0] = load[1] = load[2] = -1;
    struct utsname u;
    uname(&u);
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    fprintf(f, "Machine: %s, %ld cores online, %.1f GiB memory (%.1f GiB available), load average %.2f %.2f %.2f, "
               "%s %s; %s\n\n",
            cpu, sysconf(_SC_NPROCESSORS_ONLN), (double)meminfo_kib("MemTotal") / (1 << 20),
            (double)meminfo_kib("MemAvailable") / (1 << 20), load[0], load[1], load[2], u.sysname, u.release, when);
}

/* ---- read bandwidth --------------------------------------------------------
 * Several ways to read a buffer, the best of which is the floor a
 * bandwidth-bound kernel is judged against: a reader that gets less than
 * another reasonable one would flatter the kernel. Each strategy runs with
 * 2 threads, each reading its half of a 1 GiB buffer:
 *   scalar:    the compiler's vectorization of eight running sums (the
 *              probe lind used first);
 *   zmm×S:     explicit 64-byte loads from S ∈ {1, 2, 4, 8} streams at once
 *              (S evenly spaced pieces of the half, as the batch-1 GEMM
 *              reads G1 panels at once), optionally with a software prefetch
 *              PF bytes ahead in each stream.
 * The buffer is asked for transparent huge pages (MADV_HUGEPAGE; the kernel
 * may ignore it) and every page is touched before timing. */


#define RB_BYTES ((size_t)1 << 30)

typedef struct rb_arg {
    const uint64_t *p;
    size_t n;        /* uint64 words */
    int streams, pf; /* 0 streams: the scalar loop */
    uint64_t sum;    /* kept so the loads are not optimized away */
} rb_arg;

/* Eight independent sums: the loop vectorizes and the adds never limit it. */
__attribute__((noinline)) static uint64_t rb_sum(const uint64_t *restrict p, size_t n)
{
    uint64_t s[8] = {0};
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) s[l] += p[i + l];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* S streams of 128 bytes per step each (n a multiple of S·16 words). */
__attribute__((target("avx512f"), noinline)) static uint64_t rb_zmm(const uint64_t *p, size_t n, int S, int pf)
{
    __m512i acc[8];
    for (int i = 0; i < 8; i++) acc[i] = _mm512_setzero_si512();
    size_t per = n / (size_t)S;   /* words per stream */
    for (size_t off = 0; off < per; off += 16)
        for (int j = 0; j < S; j++) {
            const uint64_t *q = p + (size_t)j * per + off;
            if (pf) _mm_prefetch((const char *)q + pf, _MM_HINT_T0);
            acc[(2 * j) & 7] = _mm512_add_epi64(acc[(2 * j) & 7], _mm512_load_si512(q));
            acc[(2 * j + 1) & 7] = _mm512_add_epi64(acc[(2 * j + 1) & 7], _mm512_load_si512(q + 8));
        }
    for (int i = 1; i < 8; i++) acc[0] = _mm512_add_epi64(acc[0], acc[i]);
    return (uint64_t)_mm512_reduce_add_epi64(acc[0]);
}

static void *rb_thread(void *arg)
{
    rb_arg *a = arg;
    a->sum = a->streams ? rb_zmm(a->p, a->n, a->streams, a->pf) : rb_sum(a->p, a->n);
    return NULL;
}

/* GB/s of one strategy reading buf's `words` (every byte 1; a multiple of
 * threads × streams × 16) with `threads` (1 or 2) threads, best of
 * `passes`: with 2, the caller reads one half, a second thread the other
 * (its start, some microseconds, is inside the time). */
static double rb_run(uint64_t *buf, size_t words, int threads, int streams, int pf, int passes)
{
    double best = 0;
    size_t part = words / (size_t)threads;
    for (int pass = 0; pass < passes; pass++) {
        rb_arg a = {buf + part, part, streams, pf, 0}, me = {buf, part, streams, pf, 0};
        pthread_t th;
        double t0 = clock_mono_s();
        if (threads == 2 && pthread_create(&th, NULL, rb_thread, &a)) return 0;
        rb_thread(&me);
        if (threads == 2) pthread_join(th, NULL);
        double dt = clock_mono_s() - t0;
        uint64_t sum = me.sum + (threads == 2 ? a.sum : 0);
        if (sum != (uint64_t)0x0101010101010101ull * words) fprintf(stderr, "read bandwidth: bad sum\n");
        double gbs = (double)(words * sizeof(uint64_t)) / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

double bench_read_gbs_how(char *how, size_t howlen)
{
    uint64_t *buf = NULL;
    if (how && howlen) how[0] = 0;
    if (posix_memalign((void **)&buf, (size_t)2 << 20, RB_BYTES)) return 0;
#ifdef MADV_HUGEPAGE
    madvise(buf, RB_BYTES, MADV_HUGEPAGE);   /* a hint: fewer TLB misses where granted */
#endif
    memset(buf, 1, RB_BYTES);   /* fault every page in before timing */
    int zmm = 0;
#if defined(__x86_64__)
    __builtin_cpu_init();
    zmm = __builtin_cpu_supports("avx512f");
#endif
    static const int S[] = {0, 1, 2, 4, 8}, PF[] = {0, 512};   /* streams 0: the scalar sums */
    double best = 0;
    /* two rounds over the strategies, so a burst of load elsewhere on a
     * shared machine does not decide which one wins */
    for (int round = 0; round < 2; round++)
        for (int threads = 2; threads >= 1; threads--)
            for (size_t si = 0; si < sizeof S / sizeof *S; si++)
                for (size_t pi = 0; pi < sizeof PF / sizeof *PF; pi++) {
                    if ((S[si] && !zmm) || (!S[si] && PF[pi])) continue;
                    double g = rb_run(buf, RB_BYTES / sizeof(uint64_t), threads, S[si], PF[pi], 3);
                    if (g <= best) continue;
                    best = g;
                    if (!how) continue;
                    if (!S[si])
                        snprintf(how, howlen, "%d thread%s, scalar sums, 1 stream each", threads,
                                 threads > 1 ? "s" : "");
                    else
                        snprintf(how, howlen, "%d thread%s, 64-byte loads from %d stream%s each%s", threads,
                                 threads > 1 ? "s" : "", S[si], S[si] > 1 ? "s" : "",
                                 PF[pi] ? ", prefetch 512 B ahead" : "");
                }
    free(buf);
    return best;
}

double bench_read_gbs(void) { return bench_read_gbs_how(NULL, 0); }

/* The paired probe: a buffer of the measured thing's size, touched once;
 * each call reads it with the scalar loop, and with one and with eight zmm
 * streams per thread (one won on the AMD hosts, eight on the Intel ones:
 * bench_read_gbs_how names the winner), all with two threads, and keeps
 * the fastest. */
enum { PROBE_WORDS = 2 * 8 * 16 };   /* 2 threads × 8 streams × 16 words */

/* A probe reads at least 3 × the last-level cache: of a smaller buffer
 * (a 74 MB model's, where the Intel hosts have 300 MiB of L3) the second
 * and third strategies read what the first left cached, and the floor
 * would be the cache's, not memory's. */
static size_t probe_min_bytes(void)
{
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return l3 > 0 ? 3 * (size_t)l3 : 0;
}
struct bench_probe {
    uint64_t *buf;
    size_t words;   /* a multiple of PROBE_WORDS */
    int zmm;
};

bench_probe *bench_probe_new(size_t bytes)
{
    bench_probe *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    if (bytes < probe_min_bytes()) bytes = probe_min_bytes();
    p->words = bytes / sizeof(uint64_t) / PROBE_WORDS * PROBE_WORDS;
    if (p->words < PROBE_WORDS) p->words = PROBE_WORDS;
    if (posix_memalign((void **)&p->buf, (size_t)2 << 20, p->words * sizeof(uint64_t))) {
        free(p);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    madvise(p->buf, p->words * sizeof(uint64_t), MADV_HUGEPAGE);
#endif
    memset(p->buf, 1, p->words * sizeof(uint64_t));
#if defined(__x86_64__)
    __builtin_cpu_init();
    p->zmm = __builtin_cpu_supports("avx512f") != 0;
#endif
    return p;
}

double bench_probe_gbs(bench_probe *p) { return bench_probe_gbs_n(p, p->words * sizeof(uint64_t)); }

double bench_probe_gbs_n(bench_probe *p, size_t bytes)
{
    double best = 0;
    if (bytes < probe_min_bytes()) bytes = probe_min_bytes();
    size_t words = bytes / sizeof(uint64_t);
    if (words > p->words) words = p->words;
    words = words / PROBE_WORDS * PROBE_WORDS;   /* as bench_probe_new sizes it */
    if (words < PROBE_WORDS) words = PROBE_WORDS;
    static const int S[] = {0, 1, 8};
    for (size_t i = 0; i < (p->zmm ? 3u : 1u); i++) {
        double g = rb_run(p->buf, words, 2, S[i], 0, 1);
        if (g > best) best = g;
    }
    return best;
}

void bench_probe_free(bench_probe *p)
{
    if (!p) return;
    free(p->buf);
    free(p);
}

/* ---- arithmetic ceilings ------------------------------------------------------
 * 12 independent accumulator chains (more than the FMA pipes × latency of
 * current cores) per thread; each returns the FLOPs it did. */
#define FMA_ITERS 20000000L
__attribute__((target("avx512f,fma"))) static double fma512(float seed)
{
    __m512 c[12], a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(seed);
    for (int i = 0; i < 12; i++) c[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < FMA_ITERS; it++)
        _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) c[i] = _mm512_fmadd_ps(a, c[i], b);
    float s = 0;
    for (int i = 0; i < 12; i++) s += _mm512_reduce_add_ps(c[i]);
    if (s == 1.0f) fprintf(stderr, "(unlikely)\n");   /* keeps the sums */
    return 2.0 * 16 * 12 * FMA_ITERS;
}
__attribute__((target("avx2,fma"))) static double fma256(float seed)
{
    __m256 c[12], a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(seed);
    for (int i = 0; i < 12; i++) c[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < FMA_ITERS; it++)
        _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) c[i] = _mm256_fmadd_ps(a, c[i], b);
    float t[8], s = 0;
    for (int i = 0; i < 12; i++) {
        _mm256_storeu_ps(t, c[i]);
        for (int l = 0; l < 8; l++) s += t[l];
    }
    if (s == 1.0f) fprintf(stderr, "(unlikely)\n");
    return 2.0 * 8 * 12 * FMA_ITERS;
}
/* vdpbf16ps: 32 bf16 products summed in pairs into 16 fp32 lanes per
 * instruction, counted as 64 FLOPs. */
__attribute__((target("avx512f,avx512bf16"))) static double dpbf16(float seed)
{
    __m512 c[12];
    __m512bh a = (__m512bh)_mm512_set1_epi32(0x3F803F80), b = (__m512bh)_mm512_set1_epi32(0x3C003C00);
    for (int i = 0; i < 12; i++) c[i] = _mm512_set1_ps(seed * (float)i);
    for (long it = 0; it < FMA_ITERS; it++)
        _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) c[i] = _mm512_dpbf16_ps(c[i], a, b);
    float s = 0;
    for (int i = 0; i < 12; i++) s += _mm512_reduce_add_ps(c[i]);
    if (s == 1.0f) fprintf(stderr, "(unlikely)\n");
    return 2.0 * 32 * 12 * FMA_ITERS;
}

/* vpdpbusd (AVX512_VNNI): 64 u8 x s8 products summed in fours into 16 int32
 * lanes per instruction, counted as 128 operations (the int8 kernels' rate). */
__attribute__((target("avx512f,avx512vnni"))) static double dpbusd(float seed)
{
    __m512i c[12], a = _mm512_set1_epi32(0x01010101), b = _mm512_set1_epi32(0x02020202);
    for (int i = 0; i < 12; i++) c[i] = _mm512_set1_epi32((int)(seed * 1000.0f) + i);
    for (long it = 0; it < FMA_ITERS; it++)
        _Pragma("GCC unroll 12") for (int i = 0; i < 12; i++) c[i] = _mm512_dpbusd_epi32(c[i], a, b);
    long long s = 0;
    for (int i = 0; i < 12; i++) s += _mm512_reduce_add_epi32(c[i]);
    if (s == 1) fprintf(stderr, "(unlikely)\n");
    return 2.0 * 64 * 12 * FMA_ITERS;
}

/* AMX TDPBF16PS: 16 × 16 fp32 accumulators += 16 rows × 32 bf16 by 32 × 16,
 * 8,192 products (16,384 FLOPs) per instruction; four independent
 * accumulator tiles from two A and two B tiles, as the kernel's 32-row
 * blocks use them, and no memory traffic. */
#define AMX_ITERS 2000000L
__attribute__((target("amx-tile,amx-bf16"))) static double tdpbf16(float seed)
{
    static const uint16_t one[16 * 32] __attribute__((aligned(64))) = {0};
    static const int rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    cpu_gemm_amx_configure(rows);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, one, 64);
    _tile_loadd(5, one, 64);
    _tile_loadd(6, one, 64);
    _tile_loadd(7, one, 64);
    for (long it = 0; it < AMX_ITERS; it++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    float out[16 * 16] __attribute__((aligned(64)));
    _tile_stored(0, out, 64);
    _tile_release();
    if (out[0] == seed) fprintf(stderr, "(unlikely)\n");
    return 16384.0 * 4 * AMX_ITERS;
}

static void *fma_thread(void *arg)
{
    double *io = arg;   /* in: the kind (0 AVX-512, 1 AVX2, 2 vdpbf16ps, 3 vpdpbusd, 4 AMX); out: FLOPs */
    int kind = (int)io[0];
    io[0] = kind == 4   ? tdpbf16(0.001f)
            : kind == 3 ? dpbusd(0.001f)
            : kind == 2 ? dpbf16(0.001f)
            : kind == 0 ? fma512(0.001f)
                        : fma256(0.001f);
    return NULL;
}

double bench_fma_gflops(int threads, int dot, int runs)
{
    int kind = -1;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (dot == 3) kind = cpu_gemm_amx_supported() ? 4 : -1;
    else if (dot == 2) kind = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni") ? 3 : -1;
    else if (dot) kind = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") ? 2 : -1;
    else if (__builtin_cpu_supports("avx512f")) kind = 0;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) kind = 1;
#endif
    if (kind < 0) return 0;
    if (threads > 64) threads = 64;
    double best = 0;
    for (int run = 0; run < runs; run++) {
        pthread_t th[64];
        double io[64], t0 = clock_mono_s();
        int n = 0;
        for (; n < threads; n++) {
            io[n] = kind;
            if (pthread_create(&th[n], NULL, fma_thread, &io[n])) break;
        }
        double sum = 0;
        for (int i = 0; i < n; i++) {
            pthread_join(th[i], NULL);
            sum += io[i];
        }
        double g = sum / (clock_mono_s() - t0) / 1e9;
        if (g > best) best = g;
    }
    return best;
}

uint64_t bench_lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

static double unif(uint64_t *s)
{
    return (double)bench_lcg(s) * 0x1.0p-53;
}

/* B rows of V logits of the given shape. */
void bench_fill_logits(float *l, int V, int B, int peaked, uint64_t seed)
{
    int *perm = malloc(sizeof(int) * (size_t)V);
    for (int b = 0; b < B; b++) {
        float *r = l + (size_t)b * V;
        for (int i = 0; i < V; i++) perm[i] = i;
        for (int i = V - 1; i > 0; i--) {
            int j = (int)(bench_lcg(&seed) % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (int i = 0; i < V; i++) {
            double g = unif(&seed) + unif(&seed) + unif(&seed) + unif(&seed) - 2.0;   /* σ ≈ 0.58 */
            r[perm[i]] = peaked ? (float)(-1.1 * log(1.0 + i) + 0.3 * g) : (float)(g * 1.73);
        }
    }
    free(perm);
}

double bench_proc_cpu_s(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long ut = 0, st = 0;
    if (fgets(buf, sizeof buf, f)) {
        const char *q = strrchr(buf, ')');   /* the command may hold spaces and parentheses */
        if (q && sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) ut = st = 0;
    }
    fclose(f);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

double bench_self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}
