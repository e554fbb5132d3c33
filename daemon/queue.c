/* daemon/queue.c — see queue.h. */
#include "daemon/queue.h"

#include <errno.h>
#include <time.h>

int queue_init(queue *q, uv_async_t *async)
{
    q->head = q->tail = NULL;
    q->len = 0;
    q->async = async;
    if (pthread_mutex_init(&q->mu, NULL)) return -ENOMEM;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc) { pthread_mutex_destroy(&q->mu); return -ENOMEM; }
    return 0;
}

void queue_destroy(queue *q)
{
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
}

void queue_push(queue *q, qnode *n)
{
    n->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->tail) q->tail->next = n; else q->head = n;
    q->tail = n;
    q->len++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    if (q->async) uv_async_send(q->async);
}

qnode *queue_take_all(queue *q, int wait_ms)
{
    pthread_mutex_lock(&q->mu);
    if (!q->head && wait_ms < 0) {
        while (!q->head) pthread_cond_wait(&q->cv, &q->mu);
    } else if (!q->head && wait_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += wait_ms / 1000;
        ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        while (!q->head)
            if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT) break;
    }
    qnode *h = q->head;
    q->head = q->tail = NULL;
    q->len = 0;
    pthread_mutex_unlock(&q->mu);
    return h;
}

size_t queue_len(queue *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->len;
    pthread_mutex_unlock(&q->mu);
    return n;
}
