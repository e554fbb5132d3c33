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

/* Every time bound of a test is a number of seconds times this: the one
 * multiplier LIND_TEST_TIME_SCALE (default 1, never below 1; CI on a loaded
 * machine may raise it, as libuv's UV_TEST_TIMEOUT_MULTIPLIER), times 4
 * under the sanitizers (LIND_SANITIZED=1). The Python tests' SLOW is the
 * same number (tests/daemon_harness.py; 5 there under the sanitizers). */
static inline double test_time_scale(void)
{
    const char *e = getenv("LIND_TEST_TIME_SCALE");
    double s = e && *e ? atof(e) : 1.0;
    if (!(s >= 1.0))
        s = 1.0;
    return getenv("LIND_SANITIZED") ? 4 * s : s;
}
/* A limit of ms milliseconds, scaled. */
#define T_MS(ms) ((int)((ms) * test_time_scale()))

/* A crash inside a case is that case's failure: a fatal signal prints
 * "FAIL <case>: crashed (signal N)" and then dies of the signal as it would
 * have; under a sanitizer its report ends the same way. Installed at the
 * first case, only over default dispositions (a sanitizer's own handlers
 * are kept). Children forked by a test inherit it, which names the case
 * they were forked in. */
#include <signal.h>
#include <string.h>
#include <unistd.h>
static void check_say_crash_(const char *why)
{
    const char *c = check_case_;
    ssize_t r = write(1, "FAIL ", 5);
    r = write(1, c, strlen(c));
    r = write(1, ": ", 2);
    r = write(1, why, strlen(why));
    r = write(1, "\n", 1);
    (void)r;
}
static void check_on_fatal_(int sig)
{
    char why[48] = "crashed (signal ";
    size_t n = strlen(why);
    if (sig >= 10) why[n++] = (char)('0' + sig / 10);
    why[n++] = (char)('0' + sig % 10);
    why[n++] = ')';
    why[n] = 0;
    check_say_crash_(why);
    signal(sig, SIG_DFL);
    raise(sig);
}
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
void __sanitizer_set_death_callback(void (*callback)(void));
static void check_on_sanitizer_death_(void) { check_say_crash_("sanitizer report (above)"); }
#endif
static inline void check_install_crash_handler_(void)
{
    static int done;
    if (done) return;
    done = 1;
    const int sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT };
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL &&
            !(old.sa_flags & SA_SIGINFO))
{
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = check_on_fatal_;
            sigaction(sigs[i], &sa, NULL);
        }
    }
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    __sanitizer_set_death_callback(check_on_sanitizer_death_);
#endif
}

static inline void check_begin(const char *name)
{
    check_install_crash_handler_();
    check_case_ = name;
    check_failed_ = 0;
}
static inline void check_end(void) {
    if (!check_failed_) printf("PASS %s\n", check_case_);
    else check_total_failed_++;
    fflush(stdout);
}
/* Run one case: a function `void f(void)` using CHECK. */
#define RUN(f) do { check_begin(#f); f(); check_end(); } while (0)
static inline int check_exit(void) { return check_total_failed_ ? 1 : 0; }
#endif
