/* kernels/cpu/pool.c — see pool.h. */
#include "kernels/cpu/pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

/* How a thread waits for the next job or for the others to finish: it polls
 * (the ops of one step follow each other within microseconds, and waking a
 * sleeping thread costs tens of microseconds on a VM, so a fork-join stays
 * at about a microsecond), after POLL_NS it polls with sched_yield() so the
 * event loop and other threads sharing these cores get them at once, and
 * after SLEEP_NS (an idle pool, e.g. a daemon between steps) it sleeps on a
 * condition variable. */
#define POLL_NS  20000L
#define SLEEP_NS 2000000L

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

typedef struct poller {
    unsigned spins;
    long long t0, dt;
} poller;

/* One round of waiting; 0 once the caller should sleep instead. */
static int poll_more(poller *w) {
    if (w->dt > POLL_NS) sched_yield();
    else cpu_relax();
    if ((++w->spins & (w->dt > POLL_NS ? 15u : 255u)) == 0) {
        long long t = now_ns();
        if (!w->t0) w->t0 = t;
        w->dt = t - w->t0;
    }
    return w->dt <= SLEEP_NS;
}

struct cpu_pool {
    int size;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    atomic_uint gen;        /* job number; workers start a job when it changes */
    atomic_int pending;     /* workers still running the current job */
    int sleepers;           /* workers blocked on `go` (under mu) */
    cpu_pool_fn fn;
    void *arg;
    int n, stop;
};

typedef struct worker_arg {
    cpu_pool *p;
    int index;
} worker_arg;

static void *worker(void *a) {
    worker_arg *wa = a;
    cpu_pool *p = wa->p;
    int me = wa->index;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        poller w = {0, 0, 0};
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && poll_more(&w)) {}
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !p->stop) {
                p->sleepers++;
                pthread_cond_wait(&p->go, &p->mu);
                p->sleepers--;
            }
            int stop = p->stop;
            pthread_mutex_unlock(&p->mu);
            if (stop) return NULL;
        }
        seen = g;
        if (p->stop) return NULL;   /* written before gen was bumped */
        /* fn, arg, n were published before gen (release/acquire) */
        if (me < p->n) p->fn(p->arg, me, p->n);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

int cpu_pool_new(int threads, cpu_pool **out) {
    *out = NULL;
    if (threads < 1) threads = 1;
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->size = threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    p->th = calloc((size_t)threads, sizeof *p->th);
    if (!p->th) { cpu_pool_free(p); return -ENOMEM; }
    for (int i = 1; i < threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { p->size = i; cpu_pool_free(p); return -ENOMEM; }
        wa->p = p;
        wa->index = i;
        if (pthread_create(&p->th[i], NULL, worker, wa) != 0) {
            free(wa);
            p->size = i;
            cpu_pool_free(p);
            return -EAGAIN;
        }
    }
    *out = p;
    return 0;
}

void cpu_pool_free(cpu_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->size; i++)
        if (p->th) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p->th);
    free(p);
}

int cpu_pool_size(const cpu_pool *p) { return p->size; }

void cpu_pool_run(cpu_pool *p, cpu_pool_fn fn, void *arg, int n) {
    if (n <= 1 || p->size <= 1) {
        for (int i = 0; i < (n < 1 ? 1 : n); i++) fn(arg, i, n < 1 ? 1 : n);
        return;
    }
    if (n > p->size) n = p->size;
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    atomic_store_explicit(&p->pending, p->size - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    if (p->sleepers) pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, n);
    poller w = {0, 0, 0};
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0 && poll_more(&w)) {}
    if (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
