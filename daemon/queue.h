/* daemon/queue.h — a locked FIFO that carries work between the daemon's
 * threads (loop, compute, store).
 *
 * Nodes are intrusive: a message struct embeds a qnode as its first member.
 * A push wakes the consumer two ways, whichever it waits on: a condition
 * variable (compute and store threads) and, when given, a uv_async handle
 * (the loop thread; uv_async_send is the one libuv call safe from any
 * thread). The queue never owns its nodes' memory: the consumer frees them. */
#ifndef LIND_DAEMON_QUEUE_H
#define LIND_DAEMON_QUEUE_H

#include <pthread.h>
#include <stddef.h>
#include <uv.h>

typedef struct qnode { struct qnode *next; } qnode;

typedef struct queue {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    qnode *head, *tail;
    size_t len;
    uv_async_t *async;      /* optional: also poked on push */
} queue;

int    queue_init(queue *q, uv_async_t *async);
void   queue_destroy(queue *q);   /* the queue must be empty */
void   queue_push(queue *q, qnode *n);
/* Take every queued node, oldest first (NULL if none). With wait_ms > 0,
 * first wait up to that long for one to arrive; wait_ms < 0 waits forever. */
qnode *queue_take_all(queue *q, int wait_ms);
size_t queue_len(queue *q);

#endif
