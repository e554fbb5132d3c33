/* kernels/cpu/pool.h — a small fork-join thread pool for the CPU backend.
 *
 * cpu_pool_run(p, fn, arg, n) runs fn(arg, i, n) for every part i < n, part 0
 * on the calling thread and the others on the pool's workers, and returns
 * when all are done. Waiting threads poll, then poll yielding the CPU, then
 * sleep on a condition variable (see pool.c for the timings). One caller at a
 * time. */
#ifndef LIND_KERNELS_CPU_POOL_H
#define LIND_KERNELS_CPU_POOL_H

typedef struct cpu_pool cpu_pool;
typedef void (*cpu_pool_fn)(void *arg, int part, int nparts);

/* A pool of `threads` threads in all, the caller included (threads − 1
 * workers). 0 or -ENOMEM / -EAGAIN. */
int  cpu_pool_new(int threads, cpu_pool **out);
void cpu_pool_free(cpu_pool *p);   /* joins the workers; NULL is a no-op */
int  cpu_pool_size(const cpu_pool *p);
/* n ≤ cpu_pool_size(p); n ≤ 1 runs fn inline. */
void cpu_pool_run(cpu_pool *p, cpu_pool_fn fn, void *arg, int n);

#endif
