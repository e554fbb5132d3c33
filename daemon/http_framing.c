/* daemon/http_framing.c — ambiguous HTTP/1 body lengths. See http_framing.h. */
#include "daemon/http_framing.h"

#include <string.h>
#include <strings.h>

/* Is line[0..n) the header `name:`? Then *v, *vn: its value, blanks trimmed. */
static int is_header(const char *line, size_t n, const char *name, const char **v, size_t *vn)
{
    size_t k = strlen(name);
    if (n <= k || strncasecmp(line, name, k) || line[k] != ':') return 0;
    const char *p = line + k + 1, *e = line + n;
    while (p < e && (*p == ' ' || *p == '\t')) p++;
    while (e > p && (e[-1] == ' ' || e[-1] == '\t')) e--;
    *v = p;
    *vn = (size_t)(e - p);
    return 1;
}

const char *http_framing_check(h2o_req_t *req)
{
    if (req->version >= 0x200 || !req->conn || !req->conn->callbacks->get_socket) return NULL;
    h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
    if (!sock || !sock->input) return NULL;
    const char *b = sock->input->bytes;
    size_t size = sock->input->size;
    /* The head must be this request's: it starts with its method. */
    if (size <= req->method.len || memcmp(b, req->method.base, req->method.len) || b[req->method.len] != ' ')
        return NULL;
    const char *cl = NULL;
    size_t cln = 0;
    int n_cl = 0, te = 0;
    const char *p = memchr(b, '\n', size);   /* past the request line */
    while (p && (size_t)(++p - b) < size) {
        const char *end = memchr(p, '\n', size - (size_t)(p - b));
        if (!end) break;
        size_t n = (size_t)(end - p);
        if (n && p[n - 1] == '\r') n--;
        if (n == 0) break;   /* the blank line: the head ends */
        const char *v;
        size_t vn;
        if (is_header(p, n, "content-length", &v, &vn)) {
            if (n_cl++ && (vn != cln || memcmp(v, cl, vn))) return "Content-Length headers that disagree";
            cl = v;
            cln = vn;
        } else if (is_header(p, n, "transfer-encoding", &v, &vn)) {
            te = 1;
        }
        p = end;
    }
    return n_cl && te ? "Content-Length beside Transfer-Encoding" : NULL;
}
