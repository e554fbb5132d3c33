/* daemon/scheduler.h — the compute thread.
 *
 * It owns the model, its slots and the resident sessions (session.h), and
 * loops: take every message queued for it (requests, store replies,
 * connection events), then run one round. A round gathers up to --max-batch
 * runnable turns (round-robin when there are more), one row each, gives the
 * turns still feeding a prompt more rows (up to --prompt-chunk each, at most
 * max(--max-batch, --prompt-chunk) extra rows per round), and runs them all
 * in one model_forward, with logits only for the rows that sample. So a long
 * prompt is prefilled in chunks beside other sessions' decoding, costing
 * them a bounded delay and never a stall; model_forward is bit-identical to
 * one token per step, so batching never changes a result.
 *
 * A turn's text is tokenized here with the model's tokenizer, after the
 * session's held-back text tail (state_meta): an append keeps the undecided
 * end of its text as the new tail, a generate flushes it. The turn feeds the
 * session's pending token and those tokens, then samples, emits (each
 * token's bytes) and feeds tokens until max_tokens, a stop string (matched
 * over the output bytes, across tokens), or a cancel. The last sampled token
 * stays pending (not fed), which with the tail is what makes a stream split
 * over turns and restarts equal to an uninterrupted one. When a turn ends
 * its state is encoded and handed to the store thread; the session stays
 * busy until the store thread reports the commit.
 *
 * Turns of a connection whose unsent output is over --max-output pause at
 * a token boundary (M_PAUSE/M_RESUME from the loop). A turn cancelled by
 * `cancel` (by id or session name), by its client disconnecting, by
 * --pause-timeout or by shutdown ends at the next token boundary, also in
 * the middle of its text: the session keeps the tokens fed plus the next as
 * its pending token (at least through the tail an earlier append held back,
 * which was acknowledged), the rest of the text is dropped, and `done` /
 * the append's result says how many bytes of the text the session holds
 * (fed_bytes). So its saved state is exactly the stream its client was told
 * of. Sessions waiting for a load or a slot are at most --max-waiting. */
#ifndef LIND_DAEMON_SCHEDULER_H
#define LIND_DAEMON_SCHEDULER_H

#include "daemon/server.h"

typedef struct scheduler scheduler;

/* Start the compute thread and wait until it is ready: it loads the model
 * (srv->opt.model_dir, .backend, .be) itself, so that a GPU context
 * belongs to the thread using it, fills srv's model facts (state_bytes,
 * fingerprint, backend, ...) and settles max_resident / max_batch. 0, or a
 * negative code with the reason (model load, slots) in err. */
int  scheduler_start(server *srv, scheduler **out, char *err, size_t errlen);
/* Wait for the thread to end (after M_SHUTDOWN; it frees the model) and
 * free everything. */
void scheduler_join(scheduler *s);

#endif
