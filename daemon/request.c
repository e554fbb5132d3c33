/* daemon/request.c — what a request owns. See request.h. */
#include "daemon/request.h"
#include "daemon/httpreq.h"

#include <stdlib.h>

void op_request_free(op_request *r)
{
    free(r->text);
    free(r->fresh_text);
    r->fresh_text = NULL;
    r->fresh_len = 0;
    free(r->data);
    free(r->bias_id);
    free(r->bias);
    free(r->schema);
    r->schema = NULL;
    httpreq_conv_free(r->keep_conv);
    r->keep_conv = NULL;
    r->bias_id = NULL;
    r->bias = NULL;
    r->n_bias = 0;
    r->text = r->data = NULL;
    r->text_len = r->data_len = 0;
}
