/* tests/test_store_corrupt.c — damage done behind the store's back (a blob
 * changed or cut by a direct UPDATE, a blob from another model) is reported
 * for that session alone, with its specific error, while every other session
 * still loads and decodes. Run against SQLite, then against a PostgreSQL
 * server the test starts (corrupted_session_isolated_pg; SKIP when it
 * cannot run here). */
#include "tests/check.h"
#include "tests/pgserver.h"
#include "tests/testmodel.h"
#include "state/format.h"
#include "state/store.h"

#include <sqlite3.h>
#include <string.h>

#define N 6

static const char *pg_uri;   /* NULL: SQLite */

static void corrupted_session_isolated(void)
{
    char dir[64] = "/tmp/lind-corrupt-test-XXXXXX", path[256], mdir[128], mdir2[128], err[256] = "";
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp"); return; }
    snprintf(mdir, sizeof mdir, "%s/model", dir);
    snprintf(mdir2, sizeof mdir2, "%s/model2", dir);
    if (pg_uri)
        snprintf(path, sizeof path, "%s", pg_uri);
    else
        snprintf(path, sizeof path, "%s/sessions.db", dir);
    testmodel_cfg c = testmodel_config(32, 2, 4, 8, 64, "linear,aft", 0, "simple");
    model *m = NULL, *m2 = NULL;
    if (testmodel_write(mdir, &c, 7, NULL) < 0 || testmodel_write(mdir2, &c, 8, NULL) < 0 ||
        model_load(mdir, "cpu", &m, err, sizeof err) < 0 ||
        model_load(mdir2, "cpu", &m2, err, sizeof err) < 0 || model_slots_reserve(m, 1) < 0) {
        CHECK(0, "setup: %s", err);
        return;
    }
    size_t sb = model_state_bytes(m);
    uint8_t *raw[N], *out = malloc(sb);
    store *s = NULL;
    CHECK(store_open(path, NULL, &s, err, sizeof err) == 0, "open: %s", err);
    if (!s) return;
    store_record recs[N];
    uint8_t *blobs[N];
    char names[N][16];
    for (int i = 0; i < N; i++) {
        state_meta mt;
        memset(&mt, 0, sizeof mt);
        sampler_params p = sampler_defaults();
        sampler_init(&mt.sampler, &p);
        mt.pending_token = -1;
        model *which = i == 5 ? m2 : m;   /* session 5: saved by another model */
        model_slots_reserve(which, 1);
        model_slot_reset(which, 0);
        int slot = 0, tok = 0;
        for (int k = 0; k <= i + 3; k++, tok = 'a' + k) {
            model_step(which, &slot, &tok, 1, NULL);
            mt.tokens++;
        }
        raw[i] = malloc(sb);
        model_slot_read(which, 0, raw[i]);
        size_t len;
        CHECK(state_encode(which, &mt, raw[i], &blobs[i], &len, err, sizeof err) == 0, "encode %d", i);
        snprintf(names[i], sizeof names[i], "s%d", i);
        recs[i] = (store_record){ names[i], blobs[i], len, NULL, 0, mt.tokens };
    }
    CHECK(store_save(s, recs, N, err, sizeof err) == 0, "grouped save: %s", err);

    /* Behind the store's back: flip one byte of s1's state, cut s3's short. */
    uint8_t *bad = malloc(recs[1].state_len);
    memcpy(bad, recs[1].state, recs[1].state_len);
    bad[recs[1].state_len / 2] ^= 0x40;
    if (pg_uri) {
        PGconn *c = PQconnectdb(path);
        const char *vals[1] = { (const char *)bad };
        int lens[1] = { (int)recs[1].state_len }, fmts[1] = { 1 };
        PGresult *r = PQexecParams(c, "UPDATE lind_sessions SET state = $1 WHERE name = 's1'", 1,
                                   NULL, vals, lens, fmts, 0);
        CHECK(PQresultStatus(r) == PGRES_COMMAND_OK, "update s1: %s", PQerrorMessage(c));
        PQclear(r);
        r = PQexec(c, "UPDATE lind_sessions SET state = substring(state from 1 for 1000)"
                      " WHERE name = 's3'");
        CHECK(PQresultStatus(r) == PGRES_COMMAND_OK, "update s3: %s", PQerrorMessage(c));
        PQclear(r);
        PQfinish(c);
    } else {
        sqlite3 *db = NULL;
        sqlite3_open(path, &db);
        sqlite3_stmt *st;
        sqlite3_prepare_v2(db, "UPDATE sessions SET state = ?1 WHERE name = 's1'", -1, &st, NULL);
        sqlite3_bind_blob(st, 1, bad, (int)recs[1].state_len, SQLITE_STATIC);
        CHECK(sqlite3_step(st) == SQLITE_DONE, "update s1");
        sqlite3_finalize(st);
        CHECK(sqlite3_exec(db, "UPDATE sessions SET state = substr(state, 1, 1000) WHERE name = 's3'",
                           NULL, NULL, NULL) == SQLITE_OK, "update s3");
        sqlite3_close(db);
    }
    free(bad);

    int expect[N] = { 0, STATE_E_CHECKSUM, 0, STATE_E_TRUNCATED, 0, STATE_E_MODEL };
    for (int i = 0; i < N; i++) {
        store_loaded l;
        int rc = store_load(s, names[i], &l, err, sizeof err);
        CHECK(rc == 0, "%s: the store itself loads every row (%s)", names[i], err);
        if (rc < 0) continue;
        state_meta mt;
        err[0] = 0;
        rc = state_decode(m, l.state, l.state_len, &mt, out, err, sizeof err);
        CHECK(rc == expect[i], "%s: decode gave %s (%s), want %s", names[i], state_strerror(rc), err,
              state_strerror(expect[i]));
        if (expect[i] == 0 && rc == 0)
            CHECK(memcmp(out, raw[i], sb) == 0 && mt.tokens == (uint64_t)i + 4,
                  "%s: intact session restored bit-identical", names[i]);
        store_loaded_free(&l);
    }
    /* The healthy sessions still save over the damaged ones' neighbours. */
    CHECK(store_save(s, &recs[1], 1, err, sizeof err) == 0, "repair by saving again: %s", err);
    store_loaded l;
    state_meta mt;
    store_load(s, "s1", &l, NULL, 0);
    CHECK(state_decode(m, l.state, l.state_len, &mt, out, err, sizeof err) == 0, "s1 repaired: %s", err);
    store_loaded_free(&l);
    store_close(s);
    for (int i = 0; i < N; i++) {
        free(raw[i]);
        free(blobs[i]);
    }
    free(out);
    model_free(m);
    model_free(m2);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("NOTE could not remove %s\n", dir);
}

int main(void)
{
    RUN(corrupted_session_isolated);
    pgserver pg;
    char why[600], uri[256];
    int up = pgserver_start(&pg, NULL, why, sizeof why);
    if (up > 0) {
        printf("SKIP corrupted_session_isolated_pg: cannot start a PostgreSQL server: %s\n", why);
    } else if (up < 0 || pgserver_createdb(&pg, "corrupt", why, sizeof why) < 0) {
        printf("FAIL corrupted_session_isolated_pg: could not start the PostgreSQL server: %s\n", why);
        check_total_failed_++;
    } else {
        pgserver_uri(&pg, "corrupt", uri, sizeof uri);
        pg_uri = uri;
        check_begin("corrupted_session_isolated_pg");
        corrupted_session_isolated();
        check_end();
    }
    pgserver_stop(&pg);
    return check_exit();
}
