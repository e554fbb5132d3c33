/* kernels/clock.h — the project's one clock, for every layer (kernels is
 * the lowest): monotonic time for durations and deadlines, wall time for
 * what is stored or shown (timestamps, ages, leases' expiry as the
 * database sees it), and the process's (or one thread's) CPU time for
 * rates that must not drop when other jobs take the CPUs. Header-only: each
 * is one clock_gettime. */
#ifndef LIND_KERNELS_CLOCK_H
#define LIND_KERNELS_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int64_t clock_mono_ms(void) { return (int64_t)(clock_mono_ns() / 1000000u); }

static inline double clock_mono_s(void) { return (double)clock_mono_ns() * 1e-9; }

/* Milliseconds since the Unix epoch. */
static inline int64_t clock_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* CPU seconds of the whole process (all threads). */
static inline double clock_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of the calling thread alone (single-threaded measurements
 * that other threads' work must not inflate). */
static inline double clock_thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
