/* kernels/cpu/pool.h — a small fork-join thread pool for the CPU backend.
 *
 * cpu_pool_run(p, fn, arg, n) runs fn(arg, i, n) once for every part i < n
 * and returns when all are done. The caller and the workers claim parts from
 * the job as they come: a worker that is asleep, or waiting for a core that
 * other work holds, never delays a job unless it already started a part.
 * Waiting threads spin briefly, then sleep on a futex (see pool.c for the
 * timings), so an idle pool uses no CPU. The pool also measures, in short
 * trials that alternate split and serial jobs, whether splitting is faster;
 * where it is not (the cores are shared with other work), jobs run on the
 * caller alone until the next trial, class by class of jobs: those run
 * with cpu_pool_run_weighed say how much work they are and of which class;
 * those run with cpu_pool_run follow the class last run. Which thread runs a part never
 * changes what the part computes. One caller at a time. */
#ifndef LIND_KERNELS_CPU_POOL_H
#define LIND_KERNELS_CPU_POOL_H

typedef struct cpu_pool cpu_pool;
typedef void (*cpu_pool_fn)(void *arg, int part, int nparts);

/* A pool of `threads` threads in all, the caller included (threads − 1
 * workers). 0 or -ENOMEM / -EAGAIN. */
int  cpu_pool_new(int threads, cpu_pool **out);
void cpu_pool_free(cpu_pool *p);   /* joins the workers; NULL is a no-op */
int  cpu_pool_size(const cpu_pool *p);
/* n is clipped to cpu_pool_size(p); n ≤ 1 runs fn inline. */
void cpu_pool_run(cpu_pool *p, cpu_pool_fn fn, void *arg, int n);
/* The same, for a job the trials weigh: `work` > 0 is its size (a matrix
 * product's multiply-adds) and cls (0 ≤ cls < CPU_POOL_CLASSES) the class
 * of jobs whose time per unit of work is comparable (a product's batch-size
 * class: one row, a few, many). Each class has its own trials, which
 * compare split and serial jobs' time per unit of work, so the jobs that
 * happen to fall in a trial's split and serial windows need not be alike;
 * jobs run with cpu_pool_run follow the decision of the class last run.
 * A trial is TRIAL_WINDOWS (8) windows of CPU_POOL_WINDOW_JOBS jobs of its
 * class, serial and split as S P P S S P P S (pool.c). */
#define CPU_POOL_CLASSES 3
#define CPU_POOL_WINDOW_JOBS 32u
void cpu_pool_run_weighed(cpu_pool *p, cpu_pool_fn fn, void *arg, int n, double work, int cls);
/* How many trials have found serial jobs faster than split ones, so that
 * the stretch after them ran on the caller alone (the caller's thread only). */
unsigned long long cpu_pool_serial_stretches(const cpu_pool *p);
/* How many of those trials ended early, in a split window that had already
 * taken longer than the serial windows (see pool.c). */
unsigned long long cpu_pool_trials_cut(const cpu_pool *p);
/* on 0: split every job whatever it costs (tests that need the workers to
 * run parts at the same time); 1, the default: trials decide. */
void cpu_pool_set_judging(cpu_pool *p, int on);

#endif
