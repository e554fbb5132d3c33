/* tests/test_core_pool.c — the CPU backend's fork-join pool (kernels/cpu/pool.h):
 *   - every part of every job runs exactly once, with the job's own arg and
 *     part count, over many jobs of every size on pools of 2, 3 and 4
 *     threads (n above the pool's size is clipped to it);
 *   - workers asleep on the futex (jobs 1 ms apart, longer than their spin)
 *     wake and take parts: each job's parts wait, bounded, until all of them
 *     have started, which only workers running them concurrently can do;
 *   - when parts run slowly on the workers and at once on the caller (a
 *     worker that has no core to run on), a trial finds serial jobs faster
 *     and the pool runs jobs on the caller (cpu_pool_serial_stretches
 *     counts it), every part still exactly once;
 *   - that trial ends as soon as its split jobs have taken longer than its
 *     serial window did (cpu_pool_trials_cut), so only a few parts ever run
 *     on the slow worker, not the trial's four split windows of them. */
/* (The wake-up case turns the judging off: on a busy machine a late worker
 * makes splitting lose, and a serial stretch would leave the parts waiting
 * for each other.) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/clock.h"
#include "kernels/cpu/pool.h"
#include "tests/check.h"

#define MAXP 8

typedef struct job {
    int id, n;
    atomic_int runs[MAXP];
    atomic_int bad_n, bad_part;
} job;

static void count_part(void *arg, int part, int nparts)
{
    job *j = arg;
    if (nparts != j->n) atomic_fetch_add(&j->bad_n, 1);
    if (part < 0 || part >= MAXP) { atomic_fetch_add(&j->bad_part, 1); return; }
    atomic_fetch_add(&j->runs[part], 1);
}

static void every_part_once(void)
{
    for (int threads = 2; threads <= 4; threads++) {
        cpu_pool *p;
        CHECK(cpu_pool_new(threads, &p) == 0, "cpu_pool_new(%d)", threads);
        if (!p) return;
        CHECK(cpu_pool_size(p) == threads, "size %d, want %d", cpu_pool_size(p), threads);
        int bad = 0;
        for (int k = 0; k < 30000 && !bad; k++) {
            job j;
            memset(&j, 0, sizeof j);
            int asked = 1 + k % (threads + 2);
            j.id = k;
            j.n = asked > threads ? threads : asked;
            cpu_pool_run(p, count_part, &j, asked);
            for (int i = 0; i < MAXP; i++) {
                int want = i < j.n ? 1 : 0, got = atomic_load(&j.runs[i]);
                if (got != want) {
                    CHECK(0, "%d threads, job %d of %d parts: part %d ran %d times", threads, k, j.n, i, got);
                    bad = 1;
                }
            }
            if (atomic_load(&j.bad_n) || atomic_load(&j.bad_part)) {
                CHECK(0, "%d threads, job %d: a part saw the wrong part count or index", threads, k);
                bad = 1;
            }
        }
        cpu_pool_free(p);
    }
}

typedef struct meet {
    int n;
    atomic_int started, gave_up;
    pthread_t who[MAXP];
} meet;

/* Waits until every part has started: only concurrent threads get past it.
 * Bounded (10 s) so a broken pool fails the case instead of hanging. */
static void meet_part(void *arg, int part, int nparts)
{
    meet *m = arg;
    (void)nparts;
    m->who[part] = pthread_self();
    atomic_fetch_add(&m->started, 1);
    double t0 = clock_mono_s();
    while (atomic_load(&m->started) < m->n)
        if (clock_mono_s() - t0 > 10.0) { atomic_fetch_add(&m->gave_up, 1); return; }
}

static void sleeping_workers_wake(void)
{
    cpu_pool *p;
    CHECK(cpu_pool_new(3, &p) == 0, "cpu_pool_new");
    if (!p) return;
    cpu_pool_set_judging(p, 0);   /* on a busy machine the pool could rightly decide to run serially */
    for (int k = 0; k < 200; k++) {
        usleep(1000);   /* longer than the workers spin: they are asleep */
        meet m;
        memset(&m, 0, sizeof m);
        m.n = 3;
        cpu_pool_run(p, meet_part, &m, 3);
        if (atomic_load(&m.gave_up)) {
            CHECK(0, "job %d: its parts never ran concurrently (%d of 3 started; %llu serial stretches)", k,
                  atomic_load(&m.started), cpu_pool_serial_stretches(p));
            break;
        }
        CHECK(!pthread_equal(m.who[0], m.who[1]) && !pthread_equal(m.who[1], m.who[2]) &&
              !pthread_equal(m.who[0], m.who[2]), "job %d: one thread ran two parts", k);
    }
    cpu_pool_free(p);
}

/* A part takes 3 ms on a worker and 20 us on the caller. */
static pthread_t caller;
static atomic_int worker_parts;
static void lopsided_part(void *arg, int part, int nparts)
{
    job *j = arg;
    if (nparts != j->n) atomic_fetch_add(&j->bad_n, 1);
    if (!pthread_equal(pthread_self(), caller)) {
        atomic_fetch_add(&worker_parts, 1);
        usleep(3000);
    } else {   /* a short wait on the caller too, so a spinning worker claims the other part */
        usleep(20);
    }
    atomic_fetch_add(&j->runs[part], 1);
}

static void slow_workers_fall_back(void)
{
    cpu_pool *p;
    CHECK(cpu_pool_new(2, &p) == 0, "cpu_pool_new");
    if (!p) return;
    CHECK(cpu_pool_serial_stretches(p) == 0, "a fresh pool is already serial");
    caller = pthread_self();
    for (int k = 0; k < 2000; k++) {
        job j;
        memset(&j, 0, sizeof j);
        j.n = 2;
        cpu_pool_run_weighed(p, lopsided_part, &j, 2, 1.0, 0);
        CHECK(atomic_load(&j.runs[0]) == 1 && atomic_load(&j.runs[1]) == 1 && !atomic_load(&j.bad_n),
              "job %d: parts ran %d and %d times", k, atomic_load(&j.runs[0]), atomic_load(&j.runs[1]));
    }
    CHECK(cpu_pool_serial_stretches(p) > 0, "2000 jobs whose parts take 3 ms on a worker and 20 us on "
          "the caller: the pool never ran serially");
    cpu_pool_free(p);
}

/* The pool starts with a trial: window 0 serial (CPU_POOL_WINDOW_JOBS jobs
 * of two short waits on the caller), then split windows whose jobs wait 3 ms
 * whenever the worker takes a part. After the few split jobs a cut needs
 * (8), splitting has clearly lost per unit of work, so the trial ends there;
 * without the cut the trial would run its four windows of split jobs and
 * the worker would take a part of most of them. */
static void losing_trial_ends_early(void)
{
    cpu_pool *p;
    CHECK(cpu_pool_new(2, &p) == 0, "cpu_pool_new");
    if (!p) return;
    caller = pthread_self();
    atomic_store(&worker_parts, 0);
    int k = 0;
    for (; k < 5000 && !cpu_pool_serial_stretches(p); k++) {
        job j;
        memset(&j, 0, sizeof j);
        j.n = 2;
        cpu_pool_run_weighed(p, lopsided_part, &j, 2, 1.0, 0);
        CHECK(atomic_load(&j.runs[0]) == 1 && atomic_load(&j.runs[1]) == 1, "job %d: parts ran %d and %d times",
              k, atomic_load(&j.runs[0]), atomic_load(&j.runs[1]));
    }
    CHECK(cpu_pool_serial_stretches(p) == 1 && cpu_pool_trials_cut(p) == 1,
          "after %d jobs: %llu serial stretches, %llu trials cut (want 1 and 1)", k,
          cpu_pool_serial_stretches(p), cpu_pool_trials_cut(p));
    /* a scheduler slice lost by the caller inside the serial window lets a
     * few more worker parts in before the cut; a window's worth cannot */
    CHECK(atomic_load(&worker_parts) <= 32, "the losing trial ran %d parts on the slow worker before it ended",
          atomic_load(&worker_parts));
    cpu_pool_free(p);
}

/* Parts that sleep work × 100 µs each: a split job takes about half what a
 * serial one does, whatever else the machine is doing (sleeping needs no
 * core). */
typedef struct sleepy {
    int work;
} sleepy;
static void sleepy_part(void *arg, int part, int nparts)
{
    (void)part;
    (void)nparts;
    const sleepy *s = arg;
    struct timespec ts = {0, 100000L * s->work};
    nanosleep(&ts, NULL);
}

/* The fresh pool's first trial, its windows of CPU_POOL_WINDOW_JOBS weighed
 * jobs serial and split as S P P S S P P S, gets small jobs (work 1) in its serial windows
 * and 16 times larger ones in its split windows, as when a workload's jobs
 * change size under a trial. Per unit of work splitting is about twice as
 * fast (three times, with the serial jobs' two sleeps' overshoot), and the
 * trial must say so however late a loaded machine wakes the worker, up to
 * about 3 ms a job; summed without the work, the split windows took five
 * times as long and the trial chose serial. */
static void trial_weighs_work(void)
{
    cpu_pool *p;
    CHECK(cpu_pool_new(2, &p) == 0, "cpu_pool_new");
    if (!p) return;
    for (unsigned k = 0; k < 8 * CPU_POOL_WINDOW_JOBS; k++) {
        unsigned w = k / CPU_POOL_WINDOW_JOBS;
        sleepy s = {((w ^ (w >> 1)) & 1) ? 16 : 1};
        cpu_pool_run_weighed(p, sleepy_part, &s, 2, (double)s.work, 2);
    }
    CHECK(cpu_pool_serial_stretches(p) == 0 && cpu_pool_trials_cut(p) == 0,
          "split jobs twice as fast per unit of work: %llu serial stretches, %llu trials cut (want 0 and 0)",
          cpu_pool_serial_stretches(p), cpu_pool_trials_cut(p));
    cpu_pool_free(p);
}

/* A sleepy part that says whether a worker ran it. */
static atomic_int sleepy_on_worker;
static void sleepy_seen_part(void *arg, int part, int nparts)
{
    if (!pthread_equal(pthread_self(), caller)) atomic_fetch_add(&sleepy_on_worker, 1);
    sleepy_part(arg, part, nparts);
}

/* Two classes of weighed jobs in turn: class 0's parts wait 3 ms on the
 * worker and 20 us on the caller (splitting loses), class 2's sleep 5 ms
 * on both threads (splitting wins). Each class decides for itself: after both
 * trials class 0 runs serially and class 2 still splits. With one decision
 * for both, the class-0 trial's serial choice ran class 2 serially too. */
static void classes_decide_apart(void)
{
    cpu_pool *p;
    CHECK(cpu_pool_new(2, &p) == 0, "cpu_pool_new");
    if (!p) return;
    caller = pthread_self();
    for (unsigned k = 0; k < 8 * CPU_POOL_WINDOW_JOBS + 8; k++) {
        job j;
        memset(&j, 0, sizeof j);
        j.n = 2;
        cpu_pool_run_weighed(p, lopsided_part, &j, 2, 1.0, 0);
        sleepy s = {50};   /* 5 ms a part: a loaded machine's late wake-ups do not turn it */
        cpu_pool_run_weighed(p, sleepy_seen_part, &s, 2, 50.0, 2);
    }
    CHECK(cpu_pool_serial_stretches(p) == 1, "%llu serial stretches (want 1: class 0's)",
          cpu_pool_serial_stretches(p));
    atomic_store(&sleepy_on_worker, 0);
    for (int k = 0; k < 16; k++) {
        sleepy s = {50};
        cpu_pool_run_weighed(p, sleepy_seen_part, &s, 2, 50.0, 2);
    }
    CHECK(atomic_load(&sleepy_on_worker) > 0, "class 2 no longer splits after class 0 chose serial");
    cpu_pool_free(p);
}

int main(void)
{
    RUN(every_part_once);
    RUN(sleeping_workers_wake);
    RUN(slow_workers_fall_back);
    RUN(losing_trial_ends_early);
    RUN(trial_weighs_work);
    RUN(classes_decide_apart);
    return check_exit();
}
