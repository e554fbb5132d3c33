/* recurrent/chat.h — chat templates: how a chat model was trained to see a
 * conversation, and messages turned into that text. One module for both
 * users: the HTTP front door (an OpenAI message list, daemon/http.c via
 * daemon/httpreq.c) and `lindctl chat` (one typed message at a time,
 * client/lindctl_chat.c).
 *
 * The format is lind's small JSON (lind_chat.json in a model directory, or
 * a file given to lindctl, docs/LINDCTL.md): "user" with {prompt}, optional
 * "system" with {system}, "assistant_end", "stop" (up to STOP_MAX
 * strings of 1..STOP_MAX_LEN bytes), "default_system", "name". HF's
 * Jinja chat_template is not run. Built-ins: "none" ("{prompt}\n"),
 * "raven" (RWKV-4 Raven), "g1-think" and "world" (RWKV World / RWKV-7 G1: "System: ..."
 * then "User: ...\n\nAssistant:" turns separated by "\n\n").
 *
 * Rendering: a system message framed by "system" (else on a line of its
 * own), a user message framed by "user" (its final newline dropped), an
 * assistant message as its text, and "assistant_end" between a reply and
 * the next message. So a conversation rendered whole equals the
 * concatenation of its turns rendered one by one, which is what lets a
 * session be fed only the new messages. What the stream already ends with
 * is not repeated: a stop string the reply stopped on ("\n\nUser:"), or the
 * part of "assistant_end" a reply that ran out of length already holds. */
#ifndef LIND_RECURRENT_CHAT_H
#define LIND_RECURRENT_CHAT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <jansson.h>
#include "recurrent/stop.h"

#define CHAT_TEMPLATE_MAX 16384   /* bytes of a template file */

/* Owns its strings: free with chat_template_free. */
typedef struct chat_template {
    char   name[64];
    char  *system;            /* "...{system}..." or NULL: a system prompt is not framed */
    char  *user;              /* "...{prompt}...": one user turn, up to the reply's start */
    char  *assistant_end;     /* what closes a reply before the next message, or NULL */
    char  *default_system;    /* the system prompt when none is given, or NULL */
    size_t n_stop;
    char   stop[STOP_MAX][STOP_MAX_LEN + 1];
    uint32_t hash;            /* what the template does (its patterns, stops and default
                               * system prompt; not its name): never 0. A session records
                               * the hash of the template its chat turns are framed with
                               * (the `chat_template` field of generate/append) */
} chat_template;

/* Parse the JSON format (len bytes); `origin` names it in errors, which
 * start "ORIGIN: ". 0, -EINVAL (with the reason in err) or -ENOMEM. */
int  chat_template_from_json(chat_template *t, const char *json, size_t len, const char *origin,
                             char *err, size_t errlen);
/* The daemon's: a model directory's lind_chat.json text, or the "none"
 * template when json is NULL. As chat_template_from_json. */
int  chat_template_parse(chat_template *t, const char *json, char *err, size_t errlen);
/* A built-in name ("none", "raven", "world") or a template file's path: 0,
 * -EINVAL, -ENOENT (neither), -EIO, -EFBIG (over CHAT_TEMPLATE_MAX). */
int  chat_template_load(chat_template *t, const char *spec, char *err, size_t errlen);
/* As chat_template_load, but *json gets the template's JSON text (malloc'd,
 * NUL-terminated, checked as chat_template_from_json does): what the daemon
 * serves for `lind serve --template` and reports in hello. */
int  chat_template_read(const char *spec, char **json, char *err, size_t errlen);
/* A built-in's JSON text, or NULL for a name that is not one. */
const char *chat_template_builtin(const char *name);
/* The built-in a model family was trained with, by lind_config.format:
 * "raven" for "hf-rwkv4", "world" for "rwkv7-pth"; NULL for lind's own
 * models (their training text is the user's choice). */
const char *chat_template_for_family(const char *format);
void chat_template_free(chat_template *t);
/* The name of the built-in whose hash is h, or NULL. */
const char *chat_template_builtin_name(uint32_t h);
/* Print the built-ins, one a line. */
void chat_template_list(FILE *f);

/* A message's text: a string, or an array of {"type":"text","text":...}
 * parts (joined), or null. 0, or -EINVAL naming the field in err, or
 * -ENOMEM. *out is malloc'd (also when empty). */
int  chat_message_text(json_t *msg, size_t index, char **out, size_t *len, char *err, size_t errlen);

/* Render messages[from..] (a JSON array of {role, content}) to *out
 * (malloc'd, caller frees; "" when there is nothing). `after_reply`: the
 * session's stream ends with an assistant reply, so the first message gets
 * "assistant_end" first, minus what the stream already ends with (`tail`:
 * its last bytes, e.g. the stop string the reply stopped on). `fresh`: the
 * conversation starts here, so the template's default system prompt goes
 * first when the messages have no system message. 0, or -EINVAL (a message
 * that is not {role: system|developer|user|assistant, content}) / -ENOMEM
 * with the reason in err. */
int  chat_render(const chat_template *t, json_t *messages, size_t from, int after_reply,
                 const uint8_t *tail, size_t tail_len, int fresh, char **out, size_t *out_len,
                 char *err, size_t errlen);

/* How many bytes at the start of s (n bytes, beginning where a reply was
 * closed: assistant_end, then the next message) the stream's last bytes
 * (tail) already hold: a stop string the reply stopped on, or the part of
 * assistant_end a reply that ran out of length wrote. Nothing else is taken
 * as said: an ordinary last byte equal to the message's first is not
 * dropped. chat_render applies it to its tail; the daemon applies it on the
 * compute thread to a session's stream (its transcript's last bytes). */
size_t chat_repeated(const chat_template *t, const uint8_t *tail, size_t tail_len, const uint8_t *s, size_t n);

/* One typed message (msg_len bytes, any bytes but NUL): the system prompt
 * `system` (NULL: none) then msg as a user message, rendered as chat_render
 * does after a reply or not. 0, -EINVAL (a NUL in msg) or -ENOMEM. */
int  chat_template_format(const chat_template *t, const char *system, int after_reply,
                          const uint8_t *tail, size_t tail_len, const char *msg, size_t msg_len,
                          char **out, size_t *out_len);

#endif
