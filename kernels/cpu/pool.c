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

/* Whether splitting pays is measured, not guessed, for each class of
 * weighed jobs (cpu_pool_run_weighed: a matrix product's batch-size class)
 * on its own: in a trial the caller runs TRIAL_WINDOWS windows of
 * CPU_POOL_WINDOW_JOBS jobs of the class, split and serial alternately
 * (S P P S S P P S... so that a drift of the machine's load hits both
 * alike), and sums each kind's job times and work. The kind with the
 * shorter time per unit of work runs the class's next STRETCH_MIN jobs, then
 * the class's next trial; a trial that confirms the last decision doubles
 * the stretch (up to STRETCH_MAX), one that overturns it resets it. Outside
 * trials nothing is timed. Jobs run with cpu_pool_run (norms, the mixers'
 * recurrences) follow the decision of the class last run, the products of
 * the same step: trials of their own cost a second trial's split windows
 * on shared cores (batch 8 under a CPU hog, 2 threads 7-15% below 1).
 *
 * Per class and per unit of work, because a trial's windows hold different
 * jobs: a batch-64 step is ~180 jobs of very unequal size (the head alone
 * ~30% of it), a batch-1 product streams its weights where a batch-64 one
 * computes, and with one decision for all, or job times summed as they
 * came, a batch-1 trial decided batch 64's split, or a serial window of
 * small products weighed against a split window of large ones (a prefill's
 * 256-row products after batch-64 ones), and whole measurement windows ran
 * serially on an idle machine.
 *
 * A trial in which splitting has clearly lost (its CUT_JOBS or more split
 * jobs so far took CUT_RATIO times longer per unit of work than its serial
 * ones) ends there and then with a serial decision. On shared cores a
 * worker that claimed a part can lose its core for a whole scheduler slice,
 * and the split half of a trial would otherwise cost several times what
 * serial jobs cost, once per trial; a short run pays for several trials.
 * Clearly, because where splitting gains little (a batch-1 product whose
 * weights one thread nearly streams alone) a cut on any split job that came
 * out slower chose serial on an idle machine.
 *
 * The first job of a split window after a serial one is not timed: it
 * wakes a worker that slept through the serial window (the shipped model's
 * 192-wide products at batch 1, about 3 us each, came out twice as slow
 * over 8 split jobs with it and went serial, where a whole window of them
 * splits 1.8x faster). */
#define TRIAL_WINDOWS 8u
#define CUT_JOBS      2u
#define CUT_RATIO     1.5
#define STRETCH_MIN   4096u
#define STRETCH_MAX   131072u

typedef struct pool_class {
    int split;          /* the last trial's decision: split jobs (1) or not */
    int trial;          /* a trial is running */
    unsigned window;    /* the trial's window, 0..TRIAL_WINDOWS-1 */
    unsigned jobs;      /* jobs in this window, or in this stretch */
    unsigned stretch;   /* jobs between trials */
    unsigned split_jobs;   /* the trial's split jobs so far */
    double ns[2];       /* the trial's job times: serial, split */
    double work[2];     /* and their work */
} pool_class;

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
    /* the caller's alone: the trials (see TRIAL_WINDOWS) */
    pool_class cls[CPU_POOL_CLASSES];
    int last;                      /* the class of the last weighed job */
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
    for (int c = 0; c < CPU_POOL_CLASSES; c++) {   /* each class starts with a trial */
        p->cls[c].split = 1;
        p->cls[c].trial = 1;
        p->cls[c].stretch = STRETCH_MIN;
    }
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

/* The class's trial is over: `split` runs its next stretch. */
static void decide(cpu_pool *p, pool_class *c, int split)
{
    if (split == c->split) c->stretch = c->stretch < STRETCH_MAX ? c->stretch * 2 : STRETCH_MAX;
    else c->stretch = STRETCH_MIN;
    c->split = split;
    if (!split) p->serial_stretches++;
    c->trial = 0;
    c->jobs = 0;
}

/* Window w of a trial splits its jobs: S P P S S P P S. */
static int window_splits(unsigned w) { return ((w ^ (w >> 1)) & 1) != 0; }

/* Split jobs so far took more than `ratio` times longer per unit of work
 * than serial ones. */
static int split_slower(const pool_class *c, double ratio)
{
    return c->work[0] > 0 && c->work[1] > 0 && c->ns[1] * c->work[0] > ratio * c->ns[0] * c->work[1];
}

static void trial_start(pool_class *c)
{
    c->trial = 1;
    c->window = c->jobs = c->split_jobs = 0;
    c->ns[0] = c->ns[1] = c->work[0] = c->work[1] = 0;
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
    if (!(work > 0) || cls < 0 || cls >= CPU_POOL_CLASSES) {   /* not weighed: as the last class */
        run_as(p, p->cls[p->last].split, fn, arg, n);
        return;
    }
    pool_class *c = &p->cls[cls];
    p->last = cls;
    if (!c->trial) {
        run_as(p, c->split, fn, arg, n);
        if (++c->jobs >= c->stretch) trial_start(c);
        return;
    }
    int split = window_splits(c->window);
    long long t0 = (long long)clock_mono_ns();
    run_as(p, split, fn, arg, n);
    /* a split window's first job wakes a worker that slept through the
     * serial one: a cost of alternating, not of splitting */
    int first = split && (c->jobs == 0 && !window_splits(c->window - 1));
    if (!first) {
        c->ns[split] += (double)((long long)clock_mono_ns() - t0);
        c->work[split] += work;
    }
    if (split && !first && ++c->split_jobs >= CUT_JOBS && split_slower(c, CUT_RATIO)) {
        p->trials_cut++;
        decide(p, c, 0);
        return;
    }
    if (++c->jobs == CPU_POOL_WINDOW_JOBS) {
        c->jobs = 0;
        if (++c->window == TRIAL_WINDOWS) decide(p, c, !split_slower(c, 1.0));
    }
}

void cpu_pool_run(cpu_pool *p, cpu_pool_fn fn, void *arg, int n) { cpu_pool_run_weighed(p, fn, arg, n, 0, -1); }

void cpu_pool_set_judging(cpu_pool *p, int on) { p->no_judging = !on; }

unsigned long long cpu_pool_serial_stretches(const cpu_pool *p) { return p->serial_stretches; }

unsigned long long cpu_pool_trials_cut(const cpu_pool *p) { return p->trials_cut; }
