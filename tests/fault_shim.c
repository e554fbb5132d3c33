/* tests/fault_shim.c — fault injection for the whole daemon (make test-faults).
 *
 * Linked only into build-asan/lind-faults (the Makefile), never into lind:
 * the daemon's code is the same, this file adds
 *   - an allocation shim: malloc, calloc, realloc, reallocarray, strdup,
 *     strndup, posix_memalign, aligned_alloc and memalign are defined here,
 *     in the executable, so every call — lind's own and those inside the
 *     shared libraries (SQLite, libuv, msgpack-c, jansson, OpenBLAS, libc's
 *     own such as fopen) — comes here first and goes on to the next
 *     definition (AddressSanitizer's allocator in the fault build). The N-th
 *     call fails once (returns NULL, errno ENOMEM);
 *   - an I/O shim: an SQLite VFS registered as the default over the real
 *     one, counting every xWrite, xSync and xTruncate of the store's files
 *     (the database, its -wal and journal) as a "store write"; the N-th one
 *     fails once, with SQLITE_IOERR_* or SQLITE_FULL.
 * Armed by environment variables read once, before main(), by the
 * constructor below — lind itself reads none of them:
 *   LIND_FAULT_ALLOC=N      fail the N-th allocation (1-based; 0 or unset: none)
 *   LIND_FAULT_ALLOC_FROM=  "serve" (default): count allocations from the
 *                           moment the daemon starts listening (its first
 *                           listen(2)); "start": from main() on (after the
 *                           shared libraries' constructors, which run first)
 *   LIND_FAULT_WRITE=N      fail the N-th store write, counted from start
 *   LIND_FAULT_WRITE_ERR=   "ioerr" (default) or "full" (disk full, for xWrite)
 *   LIND_FAULT_REPORT=PATH  at exit, write the counts there: one line
 *                           "allocs_start A allocs_serve S writes W fired F
 *                           kinds K", K one letter per store write in order:
 *                           w (xWrite), s (xSync), t (xTruncate)
 * Allocations the sanitizer runtime makes, and those of a new thread before
 * its start routine runs (pthread_create is wrapped to mark that moment),
 * are never failed: the runtime aborts on them, which is not lind's to
 * handle; the fault moves on to the next allocation.
 * When a fault fires the shim prints "lind-fault: failing allocation N ..."
 * and the stack (AddressSanitizer's unwinder) to stderr, so a failing N can
 * be repeated and read. The daemon is threaded: with N fixed, which call
 * is the N-th can differ between runs when threads allocate concurrently;
 * the printed stack says which one it was. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/fault_vfs.h"

/* The sanitizer runtime's unwinder, when there is one (the shim itself is
 * compiled without instrumentation: its malloc runs before the runtime is
 * initialised). glibc's backtrace() would dlopen libgcc_s mid-fault. */
void __sanitizer_print_stack_trace(void) __attribute__((weak));
#define PRINT_STACK() do { if (__sanitizer_print_stack_trace) __sanitizer_print_stack_trace(); } while (0)

static long alloc_at, write_at;
static int from_start, write_full;
static const char *report_path;
static long n_alloc, n_alloc_serve, n_write, n_fired;   /* atomics (__atomic_*) */
static long alloc_base;   /* n_alloc when the constructor ran: "start" counts from there */
static int serving;

/* ---- allocation shim ------------------------------------------------------- */

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
static int (*real_listen)(int, int);

/* dlsym may allocate before the real functions are known: from here. */
static _Alignas(16) char boot[4096];
static size_t boot_used;
static void *boot_alloc(size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (boot_used + n > sizeof boot) return NULL;
    void *p = boot + boot_used;
    boot_used += n;
    return p;
}

static void resolve(void)
{
    static int resolving;
    if (real_malloc || resolving) return;
    resolving = 1;
    real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    real_posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
    real_memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
    real_listen = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
    real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
}

static void fired(const char *what, long n, size_t size)
{
    __atomic_add_fetch(&n_fired, 1, __ATOMIC_RELAXED);
    char line[160];
    int k = snprintf(line, sizeof line, "lind-fault: failing %s %ld (%zu bytes)\n", what, n, size);
    if (write(2, line, (size_t)k) < 0) return;
    PRINT_STACK();
}

/* Allocations a failure of which is not the program's to handle: the
 * sanitizer runtime's own, and everything a new thread does before its
 * start routine runs (the runtime's thread set-up calls glibc's
 * pthread_getattr_np, and aborts with "CHECK failed" when that fails).
 * The fault moves on to the next allocation instead. A thread runs the
 * program's code once `in_program` is set: by the constructor for the main
 * thread, by the pthread_create trampoline below for the others. */
static __thread int in_program;

static int exempt(void *caller, int is_realloc)
{
    if (!in_program) return 1;
    Dl_info di;
    if (!caller || !dladdr(caller, &di) || !di.dli_fname) return 0;
    if (strstr(di.dli_fname, "libasan") || strstr(di.dli_fname, "libubsan") ||
        strstr(di.dli_fname, "liblsan"))
        return 1;
    /* libuv grows its watcher table with realloc and abort()s when that
     * fails (maybe_resize in src/unix/core.c, reached from uv_loop_init and
     * every uv__io_start): by design, not a failure lind can answer. */
    return is_realloc && strstr(di.dli_fname, "libuv.so") != NULL;
}

/* 1 when this allocation is the one to fail. */
static int alloc_fails(size_t size, void *caller, int is_realloc)
{
    long n = __atomic_add_fetch(&n_alloc, 1, __ATOMIC_RELAXED);
    long s = 0;
    if (__atomic_load_n(&serving, __ATOMIC_ACQUIRE))
        s = __atomic_add_fetch(&n_alloc_serve, 1, __ATOMIC_RELAXED);
    long at = __atomic_load_n(&alloc_at, __ATOMIC_RELAXED);
    if (!at) return 0;
    long pos = from_start ? n - alloc_base : s;
    if (pos != at) return 0;
    if (exempt(caller, is_realloc)) {
        __atomic_store_n(&alloc_at, at + 1, __ATOMIC_RELAXED);
        return 0;
    }
    fired("allocation", at, size);
    errno = ENOMEM;
    return 1;
}
#define CALLER __builtin_return_address(0)

void *malloc(size_t n)
{
    if (!real_malloc) { resolve(); if (!real_malloc) return boot_alloc(n); }
    return alloc_fails(n, CALLER, 0) ? NULL : real_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    if (!real_calloc) {
        resolve();
        if (!real_calloc || !real_malloc) return boot_alloc(n * m);   /* zero: static */
    }
    return alloc_fails(n * m, CALLER, 0) ? NULL : real_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    if (!real_realloc) resolve();
    return alloc_fails(n, CALLER, 1) ? NULL : real_realloc(p, n);
}

void *reallocarray(void *p, size_t n, size_t m)
{
    size_t t;
    if (__builtin_mul_overflow(n, m, &t)) { errno = ENOMEM; return NULL; }
    if (!real_realloc) resolve();
    return alloc_fails(t, CALLER, 1) ? NULL : real_realloc(p, t);
}

char *strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    if (!real_malloc) resolve();
    char *p = alloc_fails(n, CALLER, 0) ? NULL : real_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

char *strndup(const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    if (!real_malloc) resolve();
    char *p = alloc_fails(n + 1, CALLER, 0) ? NULL : real_malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

int posix_memalign(void **out, size_t align, size_t n)
{
    if (!real_posix_memalign) resolve();
    return alloc_fails(n, CALLER, 0) ? ENOMEM : real_posix_memalign(out, align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    if (!real_aligned_alloc) resolve();
    return alloc_fails(n, CALLER, 0) ? NULL : real_aligned_alloc(align, n);
}

void *memalign(size_t align, size_t n)
{
    if (!real_memalign) resolve();
    return alloc_fails(n, CALLER, 0) ? NULL : real_memalign(align, n);
}

typedef struct tramp { void *(*fn)(void *); void *arg; } tramp;
static void *trampoline(void *p)
{
    tramp t = *(tramp *)p;
    free(p);
    in_program = 1;
    return t.fn(t.arg);
}

int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    static int (*real_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!real_create)
        real_create = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))
                          dlsym(RTLD_NEXT, "pthread_create");
    tramp *t = malloc(sizeof *t);   /* may be the failing allocation: then EAGAIN, as glibc's own */
    if (!t) return EAGAIN;
    t->fn = fn;
    t->arg = arg;
    int rc = real_create(th, attr, trampoline, t);
    if (rc) free(t);
    return rc;
}

/* The daemon starts serving at its listen(2) (libuv's uv_listen). */
int listen(int fd, int backlog)
{
    if (!real_listen) resolve();
    __atomic_store_n(&serving, 1, __ATOMIC_RELEASE);
    return real_listen(fd, backlog);
}

/* ---- I/O shim: a VFS over the default one --------------------------------- */

/* The kind of every store write, in order ('w' xWrite, 's' xSync, 't'
 * xTruncate), for the report: the driver picks positions by kind. */
static char write_kinds[1 << 16];

static int write_fails(char kind, const char *what)
{
    long n = __atomic_add_fetch(&n_write, 1, __ATOMIC_RELAXED);
    if (n <= (long)sizeof write_kinds - 1) write_kinds[n - 1] = kind;
    if (!write_at || n != write_at) return 0;
    fired(what, n, 0);
    return 1;
}

/* The VFS's hook (tests/fault_vfs.h): the N-th store write fails. */
static int write_hook(char kind)
{
    static const char *const what[] = { "store write (xWrite)", "store write (xSync)", "store write (xTruncate)" };
    if (!write_fails(kind, what[kind == 'w' ? 0 : kind == 's' ? 1 : 2])) return 0;
    return kind == 'w' ? (write_full ? SQLITE_FULL : SQLITE_IOERR_WRITE)
                       : kind == 's' ? SQLITE_IOERR_FSYNC : SQLITE_IOERR_TRUNCATE;
}

static long env_long(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : 0;
}

static void report(void)
{
    if (!report_path) return;
    FILE *f = fopen(report_path, "w");
    if (!f) return;
    fprintf(f, "allocs_start %ld allocs_serve %ld writes %ld fired %ld kinds %s\n",
            __atomic_load_n(&n_alloc, __ATOMIC_RELAXED) - alloc_base -
                __atomic_load_n(&n_alloc_serve, __ATOMIC_RELAXED),
            __atomic_load_n(&n_alloc_serve, __ATOMIC_RELAXED), __atomic_load_n(&n_write, __ATOMIC_RELAXED),
            __atomic_load_n(&n_fired, __ATOMIC_RELAXED), write_kinds[0] ? write_kinds : "-");
    fclose(f);
}

__attribute__((constructor)) static void fault_init(void)
{
    resolve();
    /* Read the settings with injection off: getenv and friends allocate nothing
     * here, but the VFS registration below does. */
    long a = env_long("LIND_FAULT_ALLOC");
    const char *from = getenv("LIND_FAULT_ALLOC_FROM");
    from_start = from && !strcmp(from, "start");
    write_at = env_long("LIND_FAULT_WRITE");
    const char *we = getenv("LIND_FAULT_WRITE_ERR");
    write_full = we && !strcmp(we, "full");
    const char *rp = getenv("LIND_FAULT_REPORT");
    report_path = rp && *rp ? rp : NULL;
    if (report_path) atexit(report);
    if (fault_vfs_install("lind-fault", write_hook) != 0) {
        static const char msg[] = "lind-fault: cannot install the SQLite VFS shim\n";
        if (write(2, msg, sizeof msg - 1) < 0) _exit(70);
        _exit(70);
    }
    in_program = 1;
    alloc_base = __atomic_load_n(&n_alloc, __ATOMIC_RELAXED);
    alloc_at = a;   /* armed last: the shim's own set-up never fails */
}
