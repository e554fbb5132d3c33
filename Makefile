# lind — top-level build. Sources are found by directory, so adding a file
# to a module needs no edit here.
#
#   make          build/lind and build/lindctl (CUDA backend too when nvcc exists)
#   make deps     install missing Debian packages (a fast no-op when present)
#   make test     deps, build lind, the tests and the benchmarks, run every test
#                 program (in parallel); ends with "N passed, N failed"
#   make test-long  the heavy parity work make test samples (the whole
#                 tokenizer corpora, the long randomized loops); docs/TESTING.md
#   make run      deps, build lind and lindctl (only), serve the shipped
#                 default model on ./lind.sock
#   make asan     the test suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench    every benchmark, results in bench/results/
#   make bench-peers  lind against rwkv.cpp in one run (bench/results/peers.md;
#                 needs bench/peers/get_rwkv_cpp.sh run once, docs/BENCHMARKS.md)
#   make install  lind, lindctl, their man pages, bash completion, the shipped
#                 model and a systemd unit under $(DESTDIR)$(PREFIX) (default /usr/local)

CC      ?= cc
BUILD   ?= build
ARCH    ?= -march=native
OPT     ?= -O3
SAN     ?=
CFLAGS  += -std=gnu11 $(OPT) $(ARCH) -g -Wall -Wextra -Werror -I. \
           -D_GNU_SOURCE -fno-strict-aliasing $(SAN)
# libpq (the PostgreSQL store): Debian puts its header under /usr/include/postgresql.
PQ_CFLAGS := $(shell pkg-config --cflags libpq 2>/dev/null || echo -I/usr/include/postgresql)
CFLAGS  += $(PQ_CFLAGS)
LDFLAGS += $(SAN)
# lindctl links only what it uses: no BLAS (OpenBLAS starts worker threads at
# load time, and a Ctrl-C delivered to one of them would never interrupt chat).
CTL_LDLIBS = -ledit -lmsgpackc -ljansson -lm -lpthread
LDLIBS  += -lopenblas -lh2o -luv -lmsgpackc -lsqlite3 -lpq -ljansson -lxxhash -lpcre2-8 -lutf8proc -lm -lpthread

# Every Debian package a build, test, tool or benchmark uses, written once
# (`make deps`, tools/deps.sh, installs the missing ones; tests/test_deps.py
# checks the Python imports against this list):
#  - build: the libraries above and their headers, pkg-config, clang (the
#    fuzzers), help2man (the man page);
#  - tests: python3-msgpack, python3-numpy, bible-kjv (the corpus), curl and
#    libcurl (HTTP), nodejs and npm (tests/test_tokenizer_npm.py's reference
#    and the openai client; a nodejs that bundles npm, such as NodeSource's,
#    conflicts with Debian's npm, so npm is asked for only when there is no
#    npm command), chromium and chromium-driver (tests/test_http_page.py
#    drives the chat page through WebDriver), systemd (systemd-analyze
#    verifies the unit file);
#  - the PostgreSQL store: libpq-dev, and postgresql's initdb and pg_ctl for
#    the private servers of the store tests and store_bench
#    (tests/pgserver.h, SKIP without them); pgbouncer (tests/scale_nodes.py
#    runs nodes through it) and haproxy (scale_balancer_pg);
#  - python3-torch: `make model`, `make test-torch` and the PyTorch agreement
#    tests (required, not optional: tests that SKIP without it would
#    otherwise never run on a fresh machine); gnuplot-nox (benchmark plots);
#    cmake and g++ (bench/peers/get_rwkv_cpp.sh builds rwkv.cpp, make
#    bench-peers).
DEPS_PKGS = libuv1-dev libmsgpack-dev libsqlite3-dev libopenblas-dev libedit-dev \
            libjansson-dev libxxhash-dev libpcre2-dev libutf8proc-dev libh2o-dev libpq-dev \
            pkg-config clang help2man \
            python3-msgpack python3-numpy bible-kjv curl libcurl4-openssl-dev nodejs \
            $(if $(shell command -v npm 2>/dev/null),,npm) chromium chromium-driver systemd \
            postgresql pgbouncer haproxy python3-torch gnuplot-nox cmake g++
MODEL   ?= models/default

# ---- CUDA (optional) --------------------------------------------------------
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
ifeq ($(strip $(NO_CUDA)),)
ifneq ($(strip $(NVCC)),)
HAVE_CUDA := 1
endif
endif

# kernels/cuda/*.c are plain C (the GPU backend's logic and its host-side
# test harness) except kernels/cuda/cuda_*.c, which need the CUDA runtime.
LIB_SRCS  := $(wildcard recurrent/*.c kernels/*.c kernels/cpu/*.c state/*.c) \
             $(filter-out kernels/cuda/cuda_%.c,$(wildcard kernels/cuda/*.c))
LIND_SRCS := $(wildcard daemon/*.c)
CLI_LIB_SRCS := $(filter-out client/lindctl%.c,$(wildcard client/*.c))
CTL_SRCS  := $(wildcard client/lindctl*.c)
TEST_SRCS := $(wildcard tests/test_*.c)
FUZZ_SRCS := $(wildcard tests/fuzz_*.c)

# The builds the targets below start (make test's, the sanitizers', the fuzz
# drivers') compile one file per core unless -j was given.
PAR = $(if $(findstring -j,$(MAKEFLAGS)),,-j$(shell nproc))

ifdef HAVE_CUDA
CU_SRCS   := $(wildcard kernels/cuda/*.cu)
LIB_SRCS  += $(wildcard kernels/cuda/cuda_*.c)
CFLAGS    += -DLIND_HAVE_CUDA -I$(CUDA_HOME)/include
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++
NVFLAGS   ?= -O3 -I. -DLIND_HAVE_CUDA -gencode arch=compute_80,code=sm_80 \
             -gencode arch=compute_90,code=sm_90 -Xcompiler -Wall,-Wextra,-Werror,-fPIC
endif

LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(CU_SRCS:%.cu=$(BUILD)/%.cu.o)
DMN_OBJS  := $(filter-out $(BUILD)/daemon/main.o,$(LIND_SRCS:%.c=$(BUILD)/%.o))
# The chat page served at GET / (daemon/http_page.c) is daemon/chat_page.html
# compiled in as a C array: the binary needs no file at run time.
DMN_OBJS  += $(BUILD)/gen/chat_page.o
CLI_LIB_OBJS := $(CLI_LIB_SRCS:%.c=$(BUILD)/%.o)
CTL_OBJS  := $(CTL_SRCS:%.c=$(BUILD)/%.o)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
# Benchmark programs are bench/*_bench.c; the other bench/*.c (the softmax
# baseline, shared helpers) are linked into each of them.
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*_bench.c))
BENCH_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(filter-out %_bench.c,$(wildcard bench/*.c)))

.PHONY: all deps test test-long test-build run asan bench bench-peers chaos model test-torch test-cuda clean fuzz man install
# Keep object files of test and bench programs (intermediates otherwise), so
# a second `make` has nothing to do.
.SECONDARY:
# `make` builds what `make run` serves with; the test and benchmark programs
# are built by the targets that run them (test-build: all of them).
# The CUDA kernels' object (when built) is named first: nvcc's one long
# compile then starts at once, beside the C files, not after them.
all: $(CU_SRCS:%.cu=$(BUILD)/%.cu.o) $(BUILD)/lind $(BUILD)/lindctl
test-build: all $(TEST_BINS) $(BENCH_BINS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -c $< -o $@

# daemon/chat_page.html as `const unsigned char chat_page_html[]` (od is
# coreutils', so nothing beyond the compiler is needed).
$(BUILD)/gen/chat_page.c: daemon/chat_page.html
	@mkdir -p $(dir $@)
	@{ echo '/* made from daemon/chat_page.html by the Makefile; do not edit */'; \
	  echo '#include <stddef.h>'; \
	  echo 'const unsigned char chat_page_html[] = {'; \
	  od -An -v -tx1 $< | sed 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '};'; \
	  echo 'const size_t chat_page_html_len = sizeof chat_page_html;'; } >$@.tmp && mv $@.tmp $@

$(BUILD)/gen/chat_page.o: $(BUILD)/gen/chat_page.c
	$(CC) $(CFLAGS) -c $< -o $@

# Three libraries: the engine (recurrent, kernels, state), the daemon's
# internals (everything in daemon/ but main.c), the client library.
$(BUILD)/liblind.a: $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/liblinddaemon.a: $(DMN_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/liblindclient.a: $(CLI_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/lind: $(BUILD)/daemon/main.o $(BUILD)/liblinddaemon.a $(BUILD)/liblind.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# lindctl chat's templates are recurrent/chat.c, the same module the daemon uses,
# and so is its stop-string holdback (recurrent/stophold.c).
$(BUILD)/lindctl: $(CTL_OBJS) $(BUILD)/recurrent/chat.o $(BUILD)/recurrent/file.o $(BUILD)/recurrent/bytebuf.o \
                  $(BUILD)/recurrent/stophold.o $(BUILD)/liblindclient.a
	$(CC) $(LDFLAGS) -o $@ $^ $(CTL_LDLIBS)

# A test links what its name says it needs, so one module's work in progress
# never breaks another module's tests: test_daemon_* and fuzz_* the daemon
# internals, test_client_* / test_lindctl_* the client library, the rest the
# engine alone.
$(BUILD)/tests/test_daemon_%: $(BUILD)/tests/test_daemon_%.o $(BUILD)/liblinddaemon.a $(BUILD)/liblindclient.a $(BUILD)/liblind.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/tests/test_client_%: $(BUILD)/tests/test_client_%.o $(BUILD)/liblindclient.a $(BUILD)/liblind.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/tests/test_lindctl_%: $(BUILD)/tests/test_lindctl_%.o $(BUILD)/liblindclient.a $(BUILD)/liblind.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/tests/test_%: $(BUILD)/tests/test_%.o $(BUILD)/liblind.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
# The fault-injection test fails lind's own allocations too: every malloc,
# calloc and realloc call in the engine archive goes to its __wrap_* hooks.
$(BUILD)/tests/test_state_faults: LDFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc
$(BUILD)/tests/test_state_faults: $(BUILD)/tests/fault_vfs.o

# The fault-injection daemon (make test-faults): lind with tests/fault_shim.c
# linked in, whose malloc family and SQLite VFS fail the N-th allocation or
# store write when LIND_FAULT_* say so (docs/DAEMON.md, "Fault injection").
$(BUILD)/lind-faults: $(BUILD)/daemon/main.o $(BUILD)/tests/fault_shim.o $(BUILD)/tests/fault_vfs.o $(BUILD)/liblinddaemon.a $(BUILD)/liblind.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -ldl
# The shim's malloc runs before the sanitizer runtime is initialised: not instrumented.
$(BUILD)/tests/fault_shim.o $(BUILD)/tests/fault_vfs.o: CFLAGS += -fno-sanitize=all

# Benchmark programs (bench/*_bench.c) link everything; `make bench` runs
# bench/run.sh (BENCH_QUICK=1: a fast smoke run at small sizes).
$(BUILD)/bench/%: $(BUILD)/bench/%.o $(BENCH_OBJS) $(BUILD)/liblinddaemon.a $(BUILD)/liblindclient.a $(BUILD)/liblind.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# http_bench drives the HTTP front door with libcurl's multi interface.
$(BUILD)/bench/http_bench: LDLIBS += -lcurl

# store_bench measures the engine's store alone: it links no daemon.
$(BUILD)/bench/store_bench: $(BUILD)/bench/store_bench.o $(BENCH_OBJS) $(BUILD)/liblind.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

bench: deps
	@$(MAKE) --no-print-directory $(PAR) all $(BENCH_BINS)
	@sh bench/run.sh $(BUILD)

# lind against rwkv.cpp in the same run (not part of `make bench`, `make
# test` or CI): bench/peers/run.sh measures the rwkv.cpp that
# bench/peers/get_rwkv_cpp.sh built in the ignored build-peers/ (it fetches
# nothing itself, and stops saying how to get it when it is absent), on
# random weights bench/peers/make_weights.py writes in both formats; the
# result goes to bench/results/peers.md (docs/BENCHMARKS.md). PEERS_QUICK=1:
# a short check of the machinery; PEERS_ARGS: more options for peers_bench.
PEERS_BENCH = $(BUILD)/bench/peers/peers_bench
$(PEERS_BENCH): $(BUILD)/bench/peers/peers_bench.o $(BENCH_OBJS) $(BUILD)/liblind.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -ldl

bench-peers: $(PEERS_BENCH)
	@sh bench/peers/run.sh $(PEERS_BENCH)

deps:
	@sh tools/deps.sh $(DEPS_PKGS)

# tests/run.sh runs the programs LIND_TEST_JOBS at a time (default: the
# cores); every time bound in them scales with LIND_TEST_TIME_SCALE
# (docs/TESTING.md).
test: deps
	@$(MAKE) --no-print-directory $(PAR) test-build
	@sh tests/run.sh $(BUILD)

# The long tier: the programs whose heavy parity work make test samples,
# in full (LIND_TEST_LONG=1), each under its own limit (LONG_TIMEOUT
# seconds, times LIND_TEST_TIME_SCALE).
LONG_TESTS   = test_tokenizer_npm.py test_core_stability
LONG_TIMEOUT ?= 3600
test-long: deps
	@$(MAKE) --no-print-directory $(PAR) test-build
	@LIND_TEST_LONG=1 LIND_TEST_TIMEOUT=$(LONG_TIMEOUT) sh tests/run.sh $(BUILD) $(LONG_TESTS)

# The chaos campaign (bench/chaos.py, docs/SCALE.md "Chaos campaign"): three
# nodes on a private PostgreSQL under SIGKILLs, freezes, database crashes and
# terminated connections for CHAOS_SECONDS, then every acknowledged turn
# checked. Not part of make test or CI.
CHAOS_SECONDS ?= 120
chaos: deps
	@$(MAKE) --no-print-directory $(PAR) $(BUILD)/lind $(BUILD)/tests/test_daemon_scale
	@LIND_BUILD=$(BUILD) LIND_SCALE_SCRIPT=bench/chaos.py LIND_CHAOS_SECONDS=$(CHAOS_SECONDS) \
	    $(BUILD)/tests/test_daemon_scale

# The CUDA backend's tests: its kernels under the host harness against the
# CPU backend (always), and the real device against the CPU backend (a SKIP
# line saying why when there is no nvcc build or no device).
test-cuda: deps
	@$(MAKE) --no-print-directory $(PAR) $(BUILD)/lind $(filter $(BUILD)/tests/test_cuda_%,$(TEST_BINS))
	@sh tests/run.sh $(BUILD) test_cuda_

asan:
	@$(MAKE) --no-print-directory $(PAR) BUILD=build-asan OPT=-O1 \
	    SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    NO_CUDA=1 test-build
	@LIND_SANITIZED=1 ASAN_OPTIONS=detect_leaks=1 sh tests/run.sh build-asan

# Fault injection (docs/DAEMON.md, "Fault injection"), under
# AddressSanitizer (so a leak on an error path fails too; the build is
# make asan's, so after it only the shim and lind-faults are compiled):
#  - the store layer (tests/test_state_faults.c): every allocation, write
#    and fsync position of a fixed workload (`make test` runs it with every
#    7th allocation position);
#  - the whole daemon (tests/test_daemon_faults.py on build-asan/lind-faults):
#    a fixed socket workload with the N-th allocation or store write failing,
#    over a fixed (LIND_FAULTS_SEED) sample of N.
# Each program is bounded by LIND_TEST_TIMEOUT.
test-faults:
	@$(MAKE) --no-print-directory $(PAR) BUILD=build-asan OPT=-O1 \
	    SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    NO_CUDA=1 build-asan/tests/test_state_faults build-asan/lind-faults
	@LIND_FAULTS_FULL=1 LIND_FAULTS_DAEMON=1 LIND_TEST_TIMEOUT=600 ASAN_OPTIONS=detect_leaks=1 \
	    sh tests/run.sh build-asan _faults

# ThreadSanitizer: the daemon (its compute, store and loop threads), the
# tests that drive it, and the engine's threaded tests (the CPU worker pool,
# the store), every one built with -fsanitize=thread; any report fails.
# OpenBLAS is not instrumented: tests/tsan.supp names what TSan cannot see.
TSAN_TESTS = $(filter $(BUILD)/tests/test_daemon_% $(BUILD)/tests/test_core_parallel \
               $(BUILD)/tests/test_store_% $(BUILD)/tests/test_state_% $(BUILD)/tests/test_client_% \
               $(BUILD)/tests/test_lindctl_%,$(TEST_BINS))
.PHONY: tsan tsan-build test-faults fuzz-build
tsan:
	@$(MAKE) --no-print-directory $(PAR) BUILD=build-tsan OPT=-O1 \
	    SAN="-fsanitize=thread -fno-omit-frame-pointer" NO_CUDA=1 tsan-build
	@LIND_SANITIZED=1 TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	    sh tests/run.sh build-tsan test_daemon_ test_http_ test_lindctl_ test_client_ test_core_parallel \
	      test_store_ test_state_ | tee build-tsan/run.log | sed 's/^\([0-9]* passed, [0-9]* failed\)$$/tsan: \1/'; \
	  grep -q ' 0 failed$$' build-tsan/run.log
tsan-build: $(BUILD)/lind $(BUILD)/lindctl $(TSAN_TESTS)

# Builds only what it runs (lind, and lindctl to talk to it), one compile
# per core unless -j was given.
run: deps
	@$(MAKE) --no-print-directory $(PAR) all
	$(BUILD)/lind serve --model $(MODEL) --socket ./lind.sock --db ./lind.db

# The shipped model: corpus, training (at most 43 minutes on 2 cores, fixed
# seed), export, agreement fixture, loss plot. Needs python3-torch. With the
# shipped train_steps.csv present it replays that run's learning rates and
# so rebuilds the same model; LR_FROM= (empty) trains afresh.
LR_FROM ?= $(wildcard $(MODEL)/train_steps.csv)
model: deps
	/usr/bin/python3 tools/corpus.py data/kjv
	nice -n 5 /usr/bin/python3 tools/train.py --data data/kjv --out $(MODEL) $(if $(LR_FROM),--lr-from $(LR_FROM))
	/usr/bin/python3 tools/fixture.py $(MODEL) data/kjv/heldout.txt tests/fixtures
	/usr/bin/python3 tools/plot_loss.py $(MODEL)

# Regenerate the fixture from PyTorch and repeat the recurrent-vs-parallel check.
test-torch: $(BUILD)/tests/test_model_default
	@sh tools/test_torch.sh $(BUILD)

# libFuzzer targets (tests/fuzz_*.c), one per decoder of untrusted bytes:
# the protocol, the state blob, the export file, the transcript,
# safetensors headers, PyTorch .pth checkpoints, config.json, tokenizer files, HTTP request bodies,
# recorded turn answers (turnlog). Built with clang: the
# engine, the store and the protocol decoder compiled once into
# $(FUZZ_BUILD)/libfuzz.a (sanitized, no CUDA), each driver linked against
# it, so a driver gets exactly the sources it uses. Each runs for
# FUZZ_SECONDS from its seeds (tests/fuzz_seeds/NAME, kept in the tree) plus
# the corpus it grew before ($(FUZZ_BUILD)/corpus/NAME). A crash, leak,
# abort or sanitizer report fails. `make fuzz-build` only builds them.
FUZZ_SECONDS ?= 20
FUZZ_BUILD   ?= build-fuzz
FUZZ_SAN      = -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS   = -std=gnu11 -g -O1 $(ARCH) -I. -D_GNU_SOURCE -fno-strict-aliasing $(FUZZ_SAN)
FUZZ_LIB_SRCS = $(wildcard recurrent/*.c kernels/*.c kernels/cpu/*.c state/*.c) \
                $(filter-out kernels/cuda/cuda_%.c,$(wildcard kernels/cuda/*.c)) daemon/protocol.c daemon/ops.c daemon/request.c \
                daemon/httpreq.c daemon/event.c daemon/turnlog.c daemon/http_sessions.c
FUZZ_LIB_OBJS = $(FUZZ_LIB_SRCS:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_BINS     = $(FUZZ_SRCS:tests/%.c=$(FUZZ_BUILD)/%)
FUZZ_LDLIBS   = -lopenblas -lmsgpackc -lsqlite3 -ljansson -lxxhash -lpcre2-8 -lutf8proc -lm -lpthread

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

# quant.c's fully unrolled int8 micro-kernels take clang 4-5 CPU minutes
# under each sanitizer (5 s without); no decoder reaches them (only
# --dtype q8/q4 does), and make asan checks them under gcc's ASan. The same
# for gemm.c's micro-kernels (6.5 CPU minutes, 6 s without): fuzz_state's
# model packs its weights with them, but no fuzzed byte reaches them.
$(FUZZ_BUILD)/obj/kernels/cpu/quant.o: FUZZ_SAN =
$(FUZZ_BUILD)/obj/kernels/cpu/gemm.o: FUZZ_SAN =

$(FUZZ_BUILD)/libfuzz.a: $(FUZZ_LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: tests/fuzz_%.c tests/fuzz_common.h $(FUZZ_BUILD)/libfuzz.a
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_BUILD)/libfuzz.a $(FUZZ_LDLIBS)

fuzz-build: $(FUZZ_BINS)

fuzz:
	@$(MAKE) --no-print-directory $(PAR) fuzz-build
	@for f in $(FUZZ_BINS); do n=$$(basename $$f); \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$n; \
	  echo "fuzz: $$n for $(FUZZ_SECONDS) s"; \
	  ASAN_OPTIONS=detect_leaks=1 $$f -max_total_time=$(FUZZ_SECONDS) -max_len=8192 -timeout=10 \
	    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/$$n- \
	    $(FUZZ_BUILD)/corpus/$$n tests/fuzz_seeds/$$n 2>$(FUZZ_BUILD)/$$n.log || \
	    { tail -n 40 $(FUZZ_BUILD)/$$n.log; exit 1; }; \
	  grep -E '^(stat::number_of_executed_units|Done)' $(FUZZ_BUILD)/$$n.log; done

-include $(FUZZ_LIB_OBJS:.o=.d)

-include $(LIB_OBJS:.o=.d) $(DMN_OBJS:.o=.d) $(BUILD)/daemon/main.d $(CLI_LIB_OBJS:.o=.d) $(CTL_OBJS:.o=.d) $(TEST_BINS:=.d) \
         $(BENCH_BINS:=.d) $(BENCH_OBJS:.o=.d)

# The fuzz drivers link the store, so the PostgreSQL one too: libpq's header
# and library (FUZZ_LIBSRC names sources and libraries for the one clang
# line of each driver).
FUZZ_CFLAGS += $(PQ_CFLAGS)
FUZZ_LIBSRC += state/store_pg.c -lpq
FUZZ_LDLIBS += -lpq

# Man pages made by help2man from the binaries' --help (tools/mkman.sh).
man: $(BUILD)/man/lind.1
$(BUILD)/man/lind.1: $(BUILD)/lind $(BUILD)/lindctl tools/mkman.sh
	@sh tools/mkman.sh $(BUILD)

PREFIX  ?= /usr/local
DESTDIR ?=
# The shipped model goes to $(PREFIX)/share/lind/models/default, where an
# installed `lind serve` finds it without --model (next to $(PREFIX)/bin/lind);
# the systemd unit to $(PREFIX)/lib/systemd/system/lind.service.
MODEL_FILES = $(MODEL)/config.json $(MODEL)/model.safetensors \
              $(wildcard $(MODEL)/lind_chat.json $(MODEL)/tokenizer.json $(MODEL)/tokenizer_config.json)
install: $(BUILD)/lind $(BUILD)/lindctl $(BUILD)/man/lind.1
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	    $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
	    $(DESTDIR)$(PREFIX)/share/lind/models/default $(DESTDIR)$(PREFIX)/lib/systemd/system
	install -m 755 $(BUILD)/lind $(BUILD)/lindctl $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(BUILD)/man/lind.1 $(BUILD)/man/lindctl.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 tools/completion/lind.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/lind
	install -m 644 tools/completion/lindctl.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/lindctl
	install -m 644 $(MODEL_FILES) $(DESTDIR)$(PREFIX)/share/lind/models/default/
	sed 's|@PREFIX@|$(PREFIX)|g' tools/systemd/lind.service.in > $(DESTDIR)$(PREFIX)/lib/systemd/system/lind.service
	chmod 644 $(DESTDIR)$(PREFIX)/lib/systemd/system/lind.service

clean:
	rm -rf build build-asan build-tsan build-fuzz

# ---- the GPU check (tools/gpu/check.sh, docs/CUDA.md) ------------------------
# Programs for a lent GPU machine, which has CUDA, cuBLAS and PyTorch but none
# of this project's Debian libraries: the engine (liblind.a) for a baseline
# x86-64 (the CPU backend picks AVX2/AVX-512 at run time), linked statically
# against the Debian archives it uses and cudart, dynamically only against
# libcublas (the device's own). Sent with the tree: `carry` build-gpu.
GPU_BUILD   = build-gpu
GPU_ARCH    = -march=x86-64-v2
GPU_NVFLAGS = -O3 -I. -DLIND_HAVE_CUDA -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90a,code=sm_90a \
              -gencode arch=compute_80,code=sm_80 -Xcompiler -Wall,-Wextra,-Werror,-fPIC
GPU_LDLIBS  = -static-libgcc -Wl,-Bstatic -lopenblas -lgfortran -lquadmath -ljansson -lxxhash -lpcre2-8 \
              -lutf8proc -lsqlite3 -Wl,-Bdynamic -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
              -lcublas -lcudart_static -lrt -ldl -lm -lpthread -static-libstdc++ -Wl,-Bstatic -lstdc++ -Wl,-Bdynamic
GPU_PROGS   = $(GPU_BUILD)/tests/test_cuda_backend $(GPU_BUILD)/tools/gpu/step_bench $(GPU_BUILD)/tools/gpu/ceilings
.PHONY: gpu-check-build gpu-check-dry
gpu-check-build:
ifndef HAVE_CUDA
	@echo "gpu-check-build: needs nvcc (CUDA at /usr/local/cuda)"; exit 1
else
	@$(MAKE) --no-print-directory $(PAR) BUILD=$(GPU_BUILD) ARCH="$(GPU_ARCH)" NVFLAGS="$(GPU_NVFLAGS)" \
	    $(GPU_BUILD)/liblind.a $(GPU_BUILD)/tests/test_cuda_backend.o $(GPU_BUILD)/tools/gpu/step_bench.o
	$(CC) -o $(GPU_BUILD)/tests/test_cuda_backend $(GPU_BUILD)/tests/test_cuda_backend.o $(GPU_BUILD)/liblind.a $(GPU_LDLIBS)
	$(CC) -o $(GPU_BUILD)/tools/gpu/step_bench $(GPU_BUILD)/tools/gpu/step_bench.o $(GPU_BUILD)/liblind.a $(GPU_LDLIBS)
	$(NVCC) -O3 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 -o $(GPU_BUILD)/tools/gpu/ceilings \
	    tools/gpu/ceilings.cu -lcublas -Xlinker -rpath,$(CUDA_HOME)/lib64
	@# the kernels' resources as ptxas reports them for sm_90 (no device time)
	$(NVCC) $(GPU_NVFLAGS) -Xptxas -v -c kernels/cuda/kernels.cu -o /dev/null 2> $(GPU_BUILD)/ptxas.txt
	@sh tools/gpu/ptxas_summary.sh $(GPU_BUILD)/ptxas.txt
	@# what travels to the device (the tree and what it carries must stay under 64 MiB)
	@mkdir -p $(GPU_BUILD)/carry
	@for p in $(GPU_PROGS); do strip -o $(GPU_BUILD)/carry/$$(basename $$p) $$p && xz -f -6 -T2 $(GPU_BUILD)/carry/$$(basename $$p); done
	@cp $(GPU_BUILD)/ptxas.txt $(GPU_BUILD)/carry/
	@du -sh $(GPU_BUILD)/carry
endif
# What check.sh does, here: every step that needs no device runs, the rest
# must fail clearly (the SKIP line, "no device") and nothing may hang.
gpu-check-dry: gpu-check-build
	@sh tools/gpu/check.sh $(GPU_BUILD)/dry-out
