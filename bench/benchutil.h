/* bench/benchutil.h — small helpers shared by the benchmark programs
 * (every bench/NAME_bench.c): a monotonic clock, medians, and the header every
 * result starts with (the command line and the machine it ran on). */
#ifndef LIND_BENCH_BENCHUTIL_H
#define LIND_BENCH_BENCHUTIL_H

#include <stddef.h>
#include <stdio.h>

/* Seconds on CLOCK_MONOTONIC. */
double bench_now(void);
/* Median of n doubles; sorts v in place. 0 for n = 0. */
double bench_median(double *v, size_t n);
/* Write "Command: `argv...`" and one "Machine: ..." line (CPU model, cores
 * online, memory, load average, kernel, date) as markdown to f. */
void bench_header(FILE *f, int argc, char **argv);
/* Bytes of MemAvailable from /proc/meminfo, or 0 when unknown. */
size_t bench_mem_available(void);
/* DRAM read bandwidth in GB/s (10^9 bytes/s): 2 threads summing halves of a
 * 1 GiB buffer, best of 5 passes. 0 when the buffer or threads cannot be
 * had. Takes about a second. */
double bench_read_gbs(void);

#endif
