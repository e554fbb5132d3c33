/* kernels/cpu/pool.c — see pool.h. */
#include "kernels/cpu/pool.h"
#include "kernels/clock.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long a thread spins before it sleeps on a futex: a worker waiting for
 * the next job, the caller waiting for parts a worker is running. The ops of
 * one step follow each other within microseconds, so a worker that spins
 * this long catches all of a step's ops after the first; an idle pool (a
 * daemon between steps) sleeps. On a machine whose cores are taken by other
 * work, a spinning thread only burns its own share: nobody ever waits for a
 * thread that is not running a part (the caller claims parts no worker has
 * claimed, see run_split). */
#define SPIN_NS 50000L

/* Whether splitting pays is measured, not guessed: in a trial the caller
 * runs TRIAL_WINDOWS windows of WINDOW_JOBS weighed jobs, split and serial
 * alternately (S P P S S P P S... so that a drift of the machine's load hits
 * both alike), and sums, class by class, each kind's job times and work.
 * The kind that would have done all the trial's work sooner (each class's
 * work at that kind's time per unit of work in that class) runs the next
 * STRETCH_MIN jobs, then the next trial; a trial that confirms the last
 * decision doubles the stretch (up to STRETCH_MAX), one that overturns it
 * resets it. Outside trials nothing is timed; jobs that are not weighed
 * follow the last decision, in trials too.
 *
 * Per unit of work and per class, because the windows hold different jobs:
 * a batch-64 step is ~180 jobs of very unequal size (the head alone ~30% of
 * it), and a serial window of small products weighed against a split window
 * of large ones (a prefill's 256-row products after batch-64 ones) chose
 * serial for whole measurement windows on an idle machine.
 *
 * A split window after which splitting has already lost (the trial's split
 * jobs so far took longer per unit of work than its serial ones) ends the
 * trial there and then with a serial decision: on shared cores, where a
 * worker that claimed a part can lose its core for a whole scheduler slice,
 * the split half of a trial would otherwise cost several times what serial
 * jobs cost, once per trial, and a short run pays for several trials. */
#define WINDOW_JOBS   128u
#define TRIAL_WINDOWS 8u
#define STRETCH_MIN   4096u
#define STRETCH_MAX   131072u

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(atomic_uint *w, unsigned v)
{
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *w)
{
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Spin until *w != v or SPIN_NS pass; 1 if it changed. */
static int spin_while(atomic_uint *w, unsigned v)
{
    long long t0 = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(w, memory_order_acquire) != v) return 1;
        cpu_relax();
        if ((i & 63u) == 0) {
            long long t = (long long)clock_mono_ns();
            if (!t0) t0 = t;
            else if (t - t0 > SPIN_NS) return 0;
        }
    }
}

/* The current job is one 64-bit word, so that claiming a part names the job
 * it belongs to: job number (32 bits) | parts n (16) | next unclaimed part
 * (16). A part is claimed by a compare-and-swap of the whole word; a thread
 * that arrives after the job ended (or after a later one began) finds
 * another job number or no part left and claims nothing. While a claimed
 * part runs, its job cannot end, so fn and arg (written before the job's
 * word) stay that job's. */
#define JOB(gen, n, next) (((uint64_t)(gen) << 32) | ((uint64_t)(n) << 16) | (uint64_t)(next))
#define JOB_N(c)    ((unsigned)((c) >> 16) & 0xffffu)
#define JOB_NEXT(c) ((unsigned)(c) & 0xffffu)

struct cpu_pool {
    int size;
    pthread_t *th;
    _Atomic uint64_t job;   /* see JOB */
    atomic_uint gen;        /* job number; workers sleep on it (futex) */
    atomic_uint left;       /* parts of the current job not finished; the caller sleeps on it */
    atomic_int sleepers;    /* workers asleep on gen, or about to be */
    atomic_int caller_asleep;
    atomic_int stop;
    cpu_pool_fn fn;
    void *arg;
    /* the caller's alone: the trials (see WINDOW_JOBS) */
    int split;                     /* the last trial's decision: split jobs (1) or not */
    int trial;                     /* a trial is running */
    unsigned window;               /* the trial's window, 0..TRIAL_WINDOWS-1 */
    unsigned jobs;                 /* jobs in this window, or in this stretch */
    unsigned stretch;              /* jobs between trials */
    double trial_ns[CPU_POOL_CLASSES][2];     /* the trial's weighed job times: serial, split */
    double trial_work[CPU_POOL_CLASSES][2];   /* and their work */
    unsigned long long serial_stretches;
    unsigned long long trials_cut;   /* trials ended in a split window that lost (split_lost) */
    int no_judging;                /* cpu_pool_set_judging(p, 0): always split */
};

/* Claim and run parts of the job until none is left; whoever finishes the
 * last part wakes a sleeping caller. */
static void run_parts(cpu_pool *p)
{
    uint64_t c = atomic_load_explicit(&p->job, memory_order_acquire);
    for (;;) {
        unsigned n = JOB_N(c), i = JOB_NEXT(c);
        if (i >= n) return;
        if (!atomic_compare_exchange_weak_explicit(&p->job, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        p->fn(p->arg, (int)i, (int)n);
        if (atomic_fetch_sub(&p->left, 1) == 1 && atomic_load(&p->caller_asleep)) futex_wake(&p->left);
        c = atomic_load_explicit(&p->job, memory_order_acquire);
    }
}

static void *worker(void *a)
{
    cpu_pool *p = a;
    unsigned seen = 0;
    for (;;) {
        if (!spin_while(&p->gen, seen)) {
            /* Dekker with cpu_pool_run: either it sees us in sleepers and
             * wakes us, or we see its new gen here (both seq_cst). */
            atomic_fetch_add(&p->sleepers, 1);
            if (atomic_load(&p->gen) == seen) futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
            continue;
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = atomic_load_explicit(&p->gen, memory_order_acquire);
        run_parts(p);
    }
}

int cpu_pool_new(int threads, cpu_pool **out)
{
    *out = NULL;
    if (threads < 1) threads = 1;
    if (threads > 0xffff) threads = 0xffff;
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->size = 1;
    atomic_init(&p->job, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->left, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_asleep, 0);
    atomic_init(&p->stop, 0);
    p->split = 1;
    p->trial = 1;
    p->stretch = STRETCH_MIN;
    p->th = calloc((size_t)threads, sizeof *p->th);
    if (!p->th) { cpu_pool_free(p); return -ENOMEM; }
    for (int i = 1; i < threads; i++) {
        if (pthread_create(&p->th[i], NULL, worker, p) != 0) {
            cpu_pool_free(p);
            return -EAGAIN;
        }
        p->size = i + 1;
    }
    *out = p;
    return 0;
}

void cpu_pool_free(cpu_pool *p)
{
    if (!p) return;
    atomic_store(&p->stop, 1);
    atomic_fetch_add(&p->gen, 1);
    futex_wake(&p->gen);
    for (int i = 1; i < p->size; i++) pthread_join(p->th[i], NULL);
    free(p->th);
    free(p);
}

int cpu_pool_size(const cpu_pool *p) { return p->size; }

/* The trial is over: `split` runs the next stretch. */
static void decide(cpu_pool *p, int split)
{
    if (split == p->split) p->stretch = p->stretch < STRETCH_MAX ? p->stretch * 2 : STRETCH_MAX;
    else p->stretch = STRETCH_MIN;
    p->split = split;
    if (!split) p->serial_stretches++;
    p->trial = 0;
    p->jobs = 0;
}

/* Window w of a trial splits its jobs: S P P S S P P S. */
static int window_splits(unsigned w) { return ((w ^ (w >> 1)) & 1) != 0; }

/* The time the trial's work (of the classes both kinds have run) would
 * take all serial (kind 0) or all split (1). */
static void trial_estimate(const cpu_pool *p, double t[2])
{
    t[0] = t[1] = 0;
    for (int c = 0; c < CPU_POOL_CLASSES; c++) {
        const double *ns = p->trial_ns[c], *w = p->trial_work[c];
        if (w[0] <= 0 || w[1] <= 0) continue;
        t[0] += (w[0] + w[1]) * (ns[0] / w[0]);
        t[1] += (w[0] + w[1]) * (ns[1] / w[1]);
    }
}

/* Splitting has lost this trial so far: its jobs took longer per unit of
 * work than serial ones of the same classes. */
static int split_lost(const cpu_pool *p)
{
    double t[2];
    trial_estimate(p, t);
    return t[1] > t[0];
}

static void trial_start(cpu_pool *p)
{
    p->trial = 1;
    p->window = p->jobs = 0;
    for (int c = 0; c < CPU_POOL_CLASSES; c++) p->trial_ns[c][0] = p->trial_ns[c][1] = p->trial_work[c][0] =
        p->trial_work[c][1] = 0;
}

/* The job's parts on the workers and the caller. */
static void run_split(cpu_pool *p, cpu_pool_fn fn, void *arg, int n)
{
    /* The previous job has ended (left reached 0), so no thread reads fn or
     * arg now; a late worker claims nothing of the old word. */
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->left, (unsigned)n, memory_order_relaxed);
    unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->job, JOB(g, n, 0), memory_order_release);
    atomic_store(&p->gen, g);
    if (atomic_load(&p->sleepers)) futex_wake(&p->gen);
    /* The caller claims parts too: a worker that is asleep, waking, or
     * waiting for a core never holds the job up unless it already started a
     * part. */
    run_parts(p);
    for (;;) {
        unsigned left = atomic_load_explicit(&p->left, memory_order_acquire);
        if (!left) return;
        if (spin_while(&p->left, left)) continue;
        atomic_store(&p->caller_asleep, 1);   /* Dekker with run_parts' last decrement */
        while ((left = atomic_load(&p->left)) != 0) futex_wait(&p->left, left);
        atomic_store(&p->caller_asleep, 0);
        return;
    }
}

static void run_as(cpu_pool *p, int split, cpu_pool_fn fn, void *arg, int n)
{
    if (split) run_split(p, fn, arg, n);
    else
        for (int i = 0; i < n; i++) fn(arg, i, n);
}

void cpu_pool_run_weighed(cpu_pool *p, cpu_pool_fn fn, void *arg, int n, double work, int cls)
{
    if (n > p->size) n = p->size;
    if (n <= 1) {
        fn(arg, 0, 1);
        return;
    }
    if (p->no_judging) {
        run_split(p, fn, arg, n);
        return;
    }
    if (!p->trial || !(work > 0) || cls < 0 || cls >= CPU_POOL_CLASSES) {
        run_as(p, p->split, fn, arg, n);
        if (!p->trial && ++p->jobs >= p->stretch) trial_start(p);
        return;
    }
    int split = window_splits(p->window);
    long long t0 = (long long)clock_mono_ns();
    run_as(p, split, fn, arg, n);
    p->trial_ns[cls][split] += (double)((long long)clock_mono_ns() - t0);
    p->trial_work[cls][split] += work;
    if (split && split_lost(p)) {
        p->trials_cut++;
        decide(p, 0);
        return;
    }
    if (++p->jobs == WINDOW_JOBS) {
        p->jobs = 0;
        if (++p->window == TRIAL_WINDOWS) {
            double t[2];
            trial_estimate(p, t);
            decide(p, t[1] < t[0] || t[0] <= 0);   /* no class run both ways: keep splitting */
        }
    }
}

void cpu_pool_run(cpu_pool *p, cpu_pool_fn fn, void *arg, int n) { cpu_pool_run_weighed(p, fn, arg, n, 0, 0); }

void cpu_pool_set_judging(cpu_pool *p, int on) { p->no_judging = !on; }

unsigned long long cpu_pool_serial_stretches(const cpu_pool *p) { return p->serial_stretches; }

unsigned long long cpu_pool_trials_cut(const cpu_pool *p) { return p->trials_cut; }
