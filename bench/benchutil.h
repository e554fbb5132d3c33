/* bench/benchutil.h — small helpers shared by the benchmark programs
 * (every bench/NAME_bench.c): medians, and the header every result starts
 * with (the command line and the machine it ran on). Clocks are
 * kernels/clock.h's. */
#ifndef LIND_BENCH_BENCHUTIL_H
#define LIND_BENCH_BENCHUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Median of n doubles; sorts v in place. 0 for n = 0. */
double bench_median(double *v, size_t n);
/* The median, lowest and highest of n ≥ 1 doubles; sorts v in place. */
void bench_med_range(double *v, size_t n, double *med, double *lo, double *hi);
/* A list of counts "1,8,64" (each 1–4096) into out[0..max): how many, or
 * -1 when s is not such a list or holds more than max. */
int bench_parse_list(const char *s, int *out, int max);
/* Write "Command: `argv...`" and one "Machine: ..." line (CPU model, cores
 * online, memory, load average, kernel, date) as markdown to f. */
void bench_header(FILE *f, int argc, char **argv);
/* Bytes of MemAvailable from /proc/meminfo, or 0 when unknown. */
size_t bench_mem_available(void);
/* DRAM read bandwidth in GB/s (10^9 bytes/s): reading a 1 GiB buffer, the
 * best of several read strategies (2 threads each reading one half, or 1
 * thread; the compiler's vectorized sums, or explicit 64-byte loads from 1,
 * 2, 4 or 8 streams per thread with and without software prefetch), best of
 * 3 passes each, two rounds; how (if non-NULL) names the winning strategy.
 * 0 when the buffer cannot be had. Takes several seconds. */
double bench_read_gbs_how(char *how, size_t howlen);
double bench_read_gbs(void);   /* the same without the name */
/* A read probe for pairing with a measurement taken right after it, on a
 * machine whose bandwidth varies from moment to moment: bench_probe_new
 * allocates and touches a buffer of `bytes`, or of 3 × the last-level
 * cache if that is more (NULL when it cannot);
 * bench_probe_gbs reads it once with each of three strategies (two
 * threads; the scalar sums, and one and eight zmm streams each where
 * AVX-512 exists) and returns the fastest, in GB/s; bench_probe_free
 * releases it. */
typedef struct bench_probe bench_probe;
bench_probe *bench_probe_new(size_t bytes);
double bench_probe_gbs(bench_probe *p);
void bench_probe_free(bench_probe *p);
/* The same reading only the first `bytes` of the buffer, or 3 × the
 * last-level cache if that is more (one probe as large as the largest of
 * several sizes serves them all). */
double bench_probe_gbs_n(bench_probe *p, size_t bytes);
/* The arithmetic ceiling in GFLOP/s of `threads` threads running 12
 * independent chains each, no memory traffic, best of `runs` (each ~0.1–1 s):
 * dot = 0, fp32 FMA in the widest vectors the CPU has (AVX-512, else AVX2;
 * 2 FLOPs per lane); dot = 1, AVX512_BF16's vdpbf16ps (64 FLOPs per
 * instruction); dot = 2, AVX512_VNNI's vpdpbusd in GOP/s (64 int8
 * multiply-adds, 128 operations per instruction: the q8/q4 kernels' rate);
 * dot = 3, AMX's TDPBF16PS (16,384 FLOPs per instruction, four accumulator
 * tiles per thread: the bf16 compute kernel where the CPU has AMX).
 * 0 when the CPU lacks the instruction (or, for AMX, the kernel's leave). */
double bench_fma_gflops(int threads, int dot, int runs);

/* A 64-bit LCG step (seed in *s): 53 random bits. */
uint64_t bench_lcg(uint64_t *s);
/* B rows of V logits from seed: peaked (Zipf-like, -1.1·ln(1+rank) plus
 * noise, ranks shuffled) or flat (noise of σ ≈ 1). */
void bench_fill_logits(float *l, int V, int B, int peaked, uint64_t seed);

/* CPU seconds (user + system) process pid has used (0 when it cannot be
 * read), and this process. */
double bench_proc_cpu_s(int pid);
double bench_self_cpu_s(void);

#endif
