/* recurrent/tokenizer.h — text ↔ tokens, behind one small interface.
 *
 * A tokenizer kind is one file (recurrent/tokenizer_<kind>.c) exporting one
 * `tokenizer_kind` and one entry in the table in recurrent/tokenizer.c.
 * Kinds:
 *   "bytes" — one token per byte (vocab 256, token = byte value); the shipped
 *             default model's.
 *   "bpe"   — byte-level BPE read from a Hugging Face tokenizer.json (ByteLevel
 *             pre-tokenizer with its GPT-2 regex, or a Split regex + ByteLevel
 *             as Llama-3 files have; NFC; merges by rank; added and special
 *             tokens matched first): GPT-NeoX-20B (RWKV-4 Pile/Raven), GPT-2,
 *             Llama-3 and alike.
 *   "world" — the RWKV World vocabulary file (one token per line: id, a Python
 *             str/bytes literal, its byte length); greedy longest match through
 *             a trie.
 *
 * Streaming: text reaches the daemon in turns, and a turn boundary may fall
 * inside a word. tokenizer_encode(final = 0) tokenizes only the prefix of the
 * text whose tokens cannot change whatever text follows, and reports how many
 * bytes that was; the caller keeps the rest (the "tail", at most
 * TOKENIZER_TAIL_MAX bytes — a longer undecided stretch is tokenized anyway)
 * and prepends it to the next turn's text. So any split of a text into turns
 * gives the same tokens as the whole text encoded with final = 1, as long as
 * no undecided stretch outgrew TOKENIZER_TAIL_MAX (a single 5000-space regex
 * piece does; it is then cut). Each kind's rule is in its file's top comment
 * and in docs/TOKENIZERS.md.
 *
 * Errors are values: 0 or a negative errno-style code with a message in err.
 * A tokenizer is immutable after loading and may be used from several threads.
 */
#ifndef LIND_RECURRENT_TOKENIZER_H
#define LIND_RECURRENT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#define TOKENIZER_TAIL_MAX 1024   /* bytes of undecided text a stream may hold back */

typedef struct tokenizer tokenizer;

/* Load a tokenizer of kind `kind` ("bytes", "bpe", "world") from `path` (the
 * tokenizer.json or the World vocabulary file; NULL for "bytes"). On success
 * *out is a new tokenizer the caller frees with tokenizer_free(). On failure
 * <0 and err names the file, line/field and what is wrong. */
int  tokenizer_load(const char *kind, const char *path, tokenizer **out, char *err, size_t errlen);
void tokenizer_free(tokenizer *t);          /* NULL is a no-op */

const char *tokenizer_kind_name(const tokenizer *t);   /* "bytes", "bpe", "world" */
/* One more than the largest token id the tokenizer can produce or decode. */
int  tokenizer_vocab_size(const tokenizer *t);

/* Encode len bytes of text (any bytes: invalid UTF-8 is encoded too, as its
 * bytes; or, for a bpe vocabulary lacking tokens for bytes valid UTF-8 never
 * holds, as U+FFFD per ill-formed subpart, as Hugging Face would see it). Appends the tokens to *toks (a malloc'd array of *cap entries the
 * function grows with realloc; *ntoks entries in use; the caller owns it and
 * may pass NULL/0/0 to start). *consumed receives the bytes tokenized: all of
 * them when final != 0, else the stream-safe prefix (see top). 0, or -ENOMEM
 * (with *toks still valid and owned by the caller). */
int  tokenizer_encode(const tokenizer *t, const uint8_t *text, size_t len, int final,
                      int32_t **toks, size_t *ntoks, size_t *cap, size_t *consumed);

/* The bytes of token id: *len bytes at the returned pointer, owned by the
 * tokenizer. NULL (and *len = 0) for an id it does not know. Joining the
 * bytes of a text's tokens gives back the text (a lossy vocabulary's
 * U+FFFD in place of invalid UTF-8 aside, above). */
const uint8_t *tokenizer_token_bytes(const tokenizer *t, int32_t id, size_t *len);

/* Special tokens (added tokens marked special, e.g. "<|endoftext|>"): count,
 * then id and text (NUL-terminated, owned by the tokenizer) of the i-th;
 * -1 and NULL for an i out of range. Special tokens (and a tokenizer.json's
 * other added tokens) are matched in text as their literal strings before
 * any other tokenization (as Hugging Face does). */
int  tokenizer_special_count(const tokenizer *t);
int32_t tokenizer_special(const tokenizer *t, int i, const char **text);

/* What the tokenizer file says goes before a text (a tokenizer.json's
 * post_processor): 1 with *id the token it puts first, 0 when it adds
 * nothing, -1 (and *id -1) when the file does not say (bytes and world
 * kinds, an unknown post-processor). tokenizer_encode never adds it; the
 * model decides (model_bos). */
int  tokenizer_bos(const tokenizer *t, int32_t *id);

/* ---- for kind implementations (recurrent/tokenizer_<kind>.c) ------------ */
typedef struct tokenizer_kind {
    const char *name;
    int  (*load)(const char *path, void **priv, char *err, size_t errlen);
    void (*free)(void *priv);
    int  (*vocab_size)(const void *priv);
    int  (*encode)(const void *priv, const uint8_t *text, size_t len, int final,
                   int32_t **toks, size_t *ntoks, size_t *cap, size_t *consumed);
    const uint8_t *(*token_bytes)(const void *priv, int32_t id, size_t *len);
    int  (*special_count)(const void *priv);
    int32_t (*special)(const void *priv, int i, const char **text);
    int  (*bos)(const void *priv, int32_t *id);   /* NULL: the file does not say */
} tokenizer_kind;

/* Append one token to the caller's growable array (see tokenizer_encode):
 * 0 or -ENOMEM (the array is left as it was). */
int  tokenizer_push(int32_t **toks, size_t *ntoks, size_t *cap, int32_t id);

/* Literal strings matched before anything else (added/special tokens), shared
 * by the kinds. The caller owns the arrays; first[b] is 1 when some literal
 * starts with byte b, maxlen the longest literal's length. */
typedef struct tokenizer_literals {
    int n;
    const uint8_t *const *text;   /* [n] literal bytes (not NUL-terminated) */
    const size_t *len;            /* [n] their lengths, each > 0 */
    const int32_t *id;            /* [n] their token ids */
    size_t maxlen;
    uint8_t first[256];
} tokenizer_literals;

/* Encodes an ordinary stretch of text (no literal inside), same contract as
 * tokenizer_kind.encode; text starts where a literal ended or at the start. */
typedef int (*tokenizer_segment_fn)(const void *priv, const uint8_t *text, size_t len, int final,
                                    int32_t **toks, size_t *ntoks, size_t *cap, size_t *consumed);

/* Encode text split at literal matches (leftmost-longest, as Hugging Face's
 * added vocabulary): each literal becomes its id, the stretches between go
 * to seg. Streaming: a suffix of the text that is a proper prefix of a
 * literal may still become one, so with final == 0 the stretch before it is
 * passed to seg as not final and nothing from that suffix on is consumed. */
int  tokenizer_encode_literals(const tokenizer_literals *L, tokenizer_segment_fn seg, const void *priv,
                               const uint8_t *text, size_t len, int final,
                               int32_t **toks, size_t *ntoks, size_t *cap, size_t *consumed);

/* The kind called name, or NULL; names of all kinds, comma-separated. */
const tokenizer_kind *tokenizer_find_kind(const char *name);
const char *tokenizer_kind_names(char *buf, size_t len);

#endif
