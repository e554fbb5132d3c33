/* daemon/chat.h — chat templates for the HTTP front door: an OpenAI
 * message list turned into the text a chat model was trained on.
 *
 * The template is the model directory's lind_chat.json (the format
 * `lindctl chat` reads, docs/LINDCTL.md: "user" with {prompt}, optional
 * "system" with {system}, "assistant_end", "stop", "default_system"), or,
 * without one, lindctl's built-in "none" ("{prompt}\n"). The rendering is
 * the one `lindctl chat` feeds for the same conversation: a system message
 * framed by "system" (else on a line of its own), a user message framed by
 * "user" (its final newline dropped), an assistant message as its text, and
 * "assistant_end" between a reply and the next message. So a conversation
 * rendered whole equals the concatenation of its turns rendered one by one,
 * which is what lets a session be fed only the new messages. */
#ifndef LIND_DAEMON_CHAT_H
#define LIND_DAEMON_CHAT_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include "daemon/protocol.h"

typedef struct chat_template {
    char *system;            /* "...{system}..." or NULL */
    char *user;              /* "...{prompt}..." */
    char *assistant_end;     /* or NULL */
    char *default_system;    /* or NULL */
    int   n_stop;
    char  stop[PROTO_MAX_STOPS][PROTO_MAX_STOP_LEN + 1];
} chat_template;

/* Parse lind_chat.json text, or the "none" template when json is NULL.
 * 0, or -EINVAL with the reason in err. Free with chat_template_free. */
int  chat_template_parse(chat_template *t, const char *json, char *err, size_t errlen);
void chat_template_free(chat_template *t);

/* A message's text: a string, or an array of {"type":"text","text":...}
 * parts (joined), or null. 0, or -EINVAL naming the field in err.
 * *out is malloc'd. */
int  chat_message_text(json_t *msg, size_t index, char **out, size_t *len, char *err, size_t errlen);

/* Render messages[from..] (a JSON array of {role, content}) to *out
 * (malloc'd, caller frees). `after_reply`: the session's stream ends with
 * an assistant reply, so the first message gets "assistant_end" first,
 * minus what the stream already ends with (`tail`, e.g. the stop string the
 * reply stopped on). `fresh`: the conversation starts here, so the template's
 * default system prompt goes first when the messages have no system message.
 * 0, or -EINVAL (a message that is not {role: system|developer|user|assistant,
 * content}) / -ENOMEM with the reason in err. */
int  chat_render(const chat_template *t, json_t *messages, size_t from, int after_reply,
                 const uint8_t *tail, size_t tail_len, int fresh, char **out, size_t *out_len,
                 char *err, size_t errlen);

#endif
