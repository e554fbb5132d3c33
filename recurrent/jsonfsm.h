/* recurrent/jsonfsm.h — a JSON automaton over bytes, and the JSON-schema
 * subset that restricts it (structured output, docs/HTTP.md).
 *
 * jsonfsm is a pushdown automaton that accepts exactly the bytes of one JSON
 * value (RFC 8259), optionally followed by whitespace, fed one byte at a
 * time. It is a plain struct with no owned memory: copying it (struct
 * assignment, or jsonfsm_copy for the used part only) clones it.
 *
 * Live-prefix contract: jsonfsm_feed keeps a state alive only while some
 * continuation of the bytes fed so far ends in a complete document that the
 * schema accepts. So a caller that only ever feeds bytes that keep the state
 * alive can always finish the document.
 *
 * What it accepts, beyond RFC 8259:
 *   - nesting at most JSONFSM_DEPTH containers deep;
 *   - at most JSONFSM_WS_MAX whitespace bytes in a row (so a generator cannot
 *     loop on spaces forever);
 *   - numbers of at most JSONFSM_NUMBER_MAX bytes;
 *   - strings: valid UTF-8 only (no overlong forms, no surrogates, nothing
 *     above U+10FFFF), escapes as RFC 8259 has them, \uXXXX surrogates only
 *     as a high-low pair (\u0000 is accepted).
 *
 * A schema (jsonfsm_schema) restricts the value further; what the compiler
 * accepts is listed at jsonfsm_schema_compile. A schema is one flat
 * malloc'd block: jsonfsm_schema_clone is one memcpy, and a jsonfsm holds a
 * borrowed pointer to it (the schema must outlive every state using it).
 *
 * Errors are values: the compiler returns 0 or -EINVAL/-ENOMEM with a
 * message naming the keyword and where it is (a JSON pointer). */
#ifndef LIND_RECURRENT_JSONFSM_H
#define LIND_RECURRENT_JSONFSM_H

#include <stddef.h>
#include <stdint.h>

#define JSONFSM_DEPTH       32   /* containers open at once */
#define JSONFSM_WS_MAX       4   /* whitespace bytes in a row */
#define JSONFSM_NUMBER_MAX  32   /* bytes of one number */
#define JSONFSM_PROPS_MAX   64   /* properties declared by one object schema */
#define JSONFSM_ENUM_MAX    64   /* values of one enum */
#define JSONFSM_NODES_MAX 4096   /* subschemas in one schema */
#define JSONFSM_POOL_MAX (64 * 1024)   /* bytes of property names and enum values */
#define JSONFSM_VALUE_MAX 4096   /* bytes of one property name or enum value (JSON form) */

typedef struct jsonfsm_schema jsonfsm_schema;

typedef struct jsonfsm_frame {
    int32_t  node;       /* schema node of this container (or of the document) */
    int32_t  key_node;   /* object: the node of the value after the current key */
    uint64_t seen;       /* object: declared properties seen (bit per property) */
    uint8_t  kind;       /* internal: document, object or array */
    uint8_t  st;         /* internal: where in the container */
    uint8_t  pad[6];
} jsonfsm_frame;

typedef struct jsonfsm {
    const jsonfsm_schema *schema;   /* borrowed; NULL: any JSON value */
    uint8_t  depth;      /* frames in use, >= 1 (frame 0 is the document) */
    uint8_t  mode;       /* internal: structural, string, number, literal */
    uint8_t  ws;         /* whitespace bytes in a row */
    uint8_t  dead;
    uint8_t  sub;        /* number state, or string escape state */
    uint8_t  u8need, u8lo, u8hi;   /* UTF-8 continuation bytes awaited and the next's range */
    uint8_t  nlen;       /* bytes of the number so far */
    uint8_t  iskey;      /* the string is an object key */
    uint8_t  sur;        /* a high surrogate awaits its low half */
    uint8_t  hexn;       /* hex digits of \uXXXX read */
    uint16_t pos;        /* bytes matched against candidates */
    uint16_t hex;
    int32_t  vnode;      /* node of the number or literal being read; -1: true/false/null */
    uint64_t cand;       /* candidate property names or literals (bit per candidate) */
    jsonfsm_frame stack[JSONFSM_DEPTH + 1];
} jsonfsm;

/* Start a document constrained by schema (NULL: any JSON value). */
void jsonfsm_init(jsonfsm *f, const jsonfsm_schema *schema);
/* Feed one byte: 1 alive, 0 dead (and dead for good). */
int  jsonfsm_feed(jsonfsm *f, uint8_t b);
/* Feed n bytes, stopping at the first that kills: 1 alive, 0 dead. */
int  jsonfsm_feed_bytes(jsonfsm *f, const uint8_t *p, size_t n);
/* The bytes fed are a complete document (the end of the text may come now). */
int  jsonfsm_is_complete(const jsonfsm *f);
/* Complete, and nothing but whitespace may follow (an object, array, string
 * or literal closed at top level; not a number, which more digits extend). */
int  jsonfsm_is_closed(const jsonfsm *f);
/* Inside a string where every byte of 0x20..0x7e but '"' and '\\', and every
 * whole UTF-8 sequence, leaves the state exactly as it is (jsonmask's fast
 * path). */
int  jsonfsm_is_free_string(const jsonfsm *f);
/* Copy the used part of src into dst (what cloning needs; faster than a
 * struct copy). jsonfsm_used_size is that part's size in bytes: two states
 * with equal used bytes behave the same. */
void   jsonfsm_copy(jsonfsm *dst, const jsonfsm *src);
size_t jsonfsm_used_size(const jsonfsm *f);

/* ---- the schema subset -------------------------------------------------- */

struct json_t;

/* Compile a JSON schema (a jansson object) into *out. Accepted keywords:
 *   type (a string or an array of them: object, array, string, number,
 *   integer, boolean, null), properties, required (names among properties),
 *   items (one schema), additionalProperties (false, true or a schema),
 *   enum (1..JSONFSM_ENUM_MAX values), const; and, ignored, the annotations
 *   title, description, $schema, $id, $comment, default, examples.
 * Anything else (e.g. $ref, anyOf, pattern, minimum) is refused with
 * -EINVAL and a message naming it. Enum and const values must be written as
 * jansson's compact form writes them (no spaces; keys in the given order);
 * "integer" means an integer written without fraction or exponent; property
 * names are matched as the bytes of their JSON string form, so a key written
 * with other escapes than that form is another key. Every required property
 * must be declared; an object may hold at most JSONFSM_PROPS_MAX declared
 * properties. The caller frees *out with free(). */
int  jsonfsm_schema_compile(const struct json_t *schema, jsonfsm_schema **out, char *err, size_t errlen);
/* The schema of json_object mode: any JSON object. 0 or -ENOMEM. */
int  jsonfsm_schema_object(jsonfsm_schema **out);
/* A copy (one block; free() it), NULL on ENOMEM. */
jsonfsm_schema *jsonfsm_schema_clone(const jsonfsm_schema *s);
/* The block's size and a hash of it (for request identity). */
size_t   jsonfsm_schema_size(const jsonfsm_schema *s);
uint64_t jsonfsm_schema_hash(const jsonfsm_schema *s);

#endif
