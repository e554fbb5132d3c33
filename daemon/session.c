/* daemon/session.c — see session.h. */
#include "daemon/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "daemon/msg.h"

int session_table_init(session_table *t)
{
    t->nbuckets = 1024;
    t->count = 0;
    t->buckets = calloc(t->nbuckets, sizeof *t->buckets);
    return t->buckets ? 0 : -1;
}

static size_t bucket_of(const session_table *t, const char *name)
{
    return (size_t)(XXH64(name, strlen(name), 0) & (t->nbuckets - 1));
}

static void grow(session_table *t)
{
    size_t nb = t->nbuckets * 2;
    session **b = calloc(nb, sizeof *b);
    if (!b) return;   /* keep the old table: longer chains, still correct */
    for (size_t i = 0; i < t->nbuckets; i++) {
        session *s = t->buckets[i];
        while (s) {
            session *next = s->hnext;
            size_t k = (size_t)(XXH64(s->name, strlen(s->name), 0) & (nb - 1));
            s->hnext = b[k];
            b[k] = s;
            s = next;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = nb;
}

session *session_find(session_table *t, const char *name)
{
    for (session *s = t->buckets[bucket_of(t, name)]; s; s = s->hnext)
        if (!strcmp(s->name, name)) return s;
    return NULL;
}

session *session_new(const char *name, size_t transcript_limit)
{
    session *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->slot = -1;
    s->meta.pending_token = -1;
    if (transcript_init(&s->tr, transcript_limit) != 0) { free(s); return NULL; }
    return s;
}

void session_insert(session_table *t, session *s)
{
    if (t->count + 1 > t->nbuckets) grow(t);
    size_t k = bucket_of(t, s->name);
    s->hnext = t->buckets[k];
    t->buckets[k] = s;
    t->count++;
}

void session_remove(session_table *t, session *s)
{
    session **pp = &t->buckets[bucket_of(t, s->name)];
    while (*pp && *pp != s) pp = &(*pp)->hnext;
    if (*pp) { *pp = s->hnext; t->count--; }
    s->hnext = NULL;
}

void session_free(session *s)
{
    if (!s) return;
    transcript_free(&s->tr);
    free(s->undo_state);
    free(s->undo_tr);
    dmsg_free(s->waiting);
    dmsg_free(s->loaded);
    free(s);
}

void session_foreach(session_table *t, void (*fn)(session *, void *), void *arg)
{
    for (size_t i = 0; i < t->nbuckets; i++)
        for (session *s = t->buckets[i]; s; ) {
            session *next = s->hnext;
            fn(s, arg);
            s = next;
        }
}

void session_table_free(session_table *t)
{
    for (size_t i = 0; i < t->nbuckets; i++) {
        session *s = t->buckets[i];
        while (s) { session *n = s->hnext; session_free(s); s = n; }
    }
    free(t->buckets);
    t->buckets = NULL;
    t->count = 0;
}
