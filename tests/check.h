/* tests/check.h — the tiny assertion kit every C test uses.
 *
 * A test program prints one line per case: "PASS name" or "FAIL name: why";
 * tests/run.sh counts them. CHECK() records a failure and lets the case go
 * on so one run shows every broken expectation of a case. */
#ifndef LIND_TESTS_CHECK_H
#define LIND_TESTS_CHECK_H
#include <stdio.h>
#include <stdlib.h>

static int check_failed_;   /* failures in the current case */
static int check_total_failed_;

#define CHECK(cond, ...) do { if (!(cond)) { \
    if (!check_failed_) printf("FAIL %s: ", check_case_); else printf("   also: "); \
    printf(__VA_ARGS__); printf(" (%s:%d)\n", __FILE__, __LINE__); \
    fflush(stdout); check_failed_++; } } while (0)

static const char *check_case_ = "?";

static inline void check_begin(const char *name) { check_case_ = name; check_failed_ = 0; }
static inline void check_end(void) {
    if (!check_failed_) printf("PASS %s\n", check_case_);
    else check_total_failed_++;
    fflush(stdout);
}
/* Run one case: a function `void f(void)` using CHECK. */
#define RUN(f) do { check_begin(#f); f(); check_end(); } while (0)
static inline int check_exit(void) { return check_total_failed_ ? 1 : 0; }
#endif
