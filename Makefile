# PortLoop — two commands: `make demo` and `make test`. See README.md.
#
# Targets
#   deps         install libevent-dev and pkg-config with apt-get when missing (sudo when not root): the
#                benchmarks' C floors need libevent; the library itself needs nothing but the toolchain. Also
#                Debian's systemd package when systemd-socket-activate is missing: the example daemon's tests
#                start it through socket activation (under `make test` they fail, not skip, without it)
#   build        debug build of the package
#   test         deps, the whole suite (PORTLOOP_REQUIRE_SOCKET_ACTIVATION=1), the documentation's examples (examples), the documentation itself
#                (docs: about 25 s from a clean .build-docs on 2 cores, so it is part of test), the suite again
#                under ThreadSanitizer, leakcheck, fuzz-quick, and a release build of the Benchmarks package
#                (built, not run, so that it cannot rot)
#   examples     every ```swift example of README.md and the DocC articles, built as a reader's main.swift
#                and run, its output checked (Tests/Examples/run-examples.sh; EXAMPLES="name …" for some)
#   docs         the DocC documentation of PortLoop (Sources/PortLoop/PortLoop.docc) into .build-docs;
#                fails on any DocC warning
#   demo         port-driven wake-ups of a run loop, traced live, ~3 s (release build); flags through
#                DEMO_ARGS, e.g. make demo DEMO_ARGS="--burst 200 --producers 4"
#   demo-ipc     input events from an event server process to an app's main run loop (Source1 → Source0, with
#                main-queue blocks and a timer meanwhile), both processes traced live, ~3 s (release build);
#                flags through DEMO_IPC_ARGS, e.g. make demo-ipc DEMO_IPC_ARGS="--kill-server-after 1"
#   echod-test   the example daemon's suites only (EchoDaemon*: in-process clients, client processes,
#                socket activation with Examples/systemd), with the socket activation tool required
#   bench        the benchmarks, full runs (release build); bench-quick: fewer iterations; bench-deps (part of
#                bench-build): zlib1g-dev with apt-get when missing, for the gRPC peer
#   bench-plots  the latency and throughput scenarios (PLOT_SCENARIOS) with --json and --histograms into
#                PLOTS_DIR (Benchmarks/plots), then their charts there (Benchmarks/plot.py, gnuplot); installs
#                gnuplot-nox with apt-get when missing (bench-plot-deps). PLOT_ARGS: more portloop-bench options
#   fuzz         the C layer's fuzz harnesses (ports against a model; the wire; the shared-memory rings) for
#                FUZZ_SECONDS (600) each; fuzz-quick: 30 s, 60 s and 30 s, in test
#   leakcheck    the C send/receive/destroy stress program under AddressSanitizer + LeakSanitizer + UBSan,
#                the C layer with its allocations failing (alloc-fail), then the stress program under
#                valgrind's memcheck (stress-valgrind), ThreadSanitizer (stress-tsan) and helgrind for
#                lock-order inversions (stress-helgrind); installs valgrind with apt-get when missing
#   alloc-fail   every allocation of the C layer made to fail in turn under two workloads (in one process;
#                a client of a service in another, its transport thread and the service's process failing too),
#                then all from each on (Tests/CStress/pl_alloc_fail.c; a few seconds, under AddressSanitizer)
#   clean        remove every build directory
#
# Every recipe line is a separate command; make stops at the first one that fails, so `make test` exits
# non-zero on any failure.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

SWIFT        ?= swift
# gcc when installed, else the clang that ships with the Swift toolchain (it has the sanitizer runtimes).
CC_STRESS    ?= $(shell command -v gcc >/dev/null 2>&1 && echo gcc || echo clang)
# The sanitizer build uses the Swift toolchain's clang: its AddressSanitizer runtime locks its allocator around
# fork(), where GCC 12's does not, and a child forked while another thread was allocating hung in the allocator
# (the fork scenarios, about one run in four under load).
CC_SANITIZE  ?= $(dir $(realpath $(shell command -v $(SWIFT))))clang
SCRATCH      ?= .build
TSAN_SCRATCH ?= .build-tsan
BENCH_SCRATCH ?= Benchmarks/.build-bench
PLOTS_DIR     ?= Benchmarks/plots
PLOT_SCENARIOS ?= pingpong ipc-pingpong peers-pingpong timers throughput ipc-throughput
PLOT_ARGS     ?=
STRESS_DIR   ?= .build-stress
DEMO_ARGS    ?=
DEMO_IPC_ARGS ?=

# CShims/pl_main_queue.c calls libdispatch's main-queue hooks: link the toolchain's libdispatch.
SWIFT_RUNTIME_DIR = $(shell d=$$(dirname "$$(readlink -f "$$(command -v $(SWIFT))")")/../lib/swift/linux; \
                      [ -d "$$d" ] && cd "$$d" && pwd)
comma := ,
DISPATCH_LIBS   = $(if $(SWIFT_RUNTIME_DIR),-L$(SWIFT_RUNTIME_DIR) -Wl$(comma)-rpath$(comma)$(SWIFT_RUNTIME_DIR) -ldispatch)
STRESS_SOURCES  = Tests/CStress/pl_stress.c $(wildcard CShims/*.c)
STRESS_CFLAGS   = -std=gnu11 -O1 -g -Wall -Wextra -pthread -ICShims/include -ICShims
STRESS_LIBS     = $(DISPATCH_LIBS)
SANITIZE        = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
# Each run of the stress program has a time limit, in seconds after $(STRESS_TIMEOUT), far above its usual time: a
# deadlock in the C layer, which these runs are there to find, fails `make test` instead of hanging it. timeout(1)
# signals the program's whole process group, the scenarios' children with it.
STRESS_TIMEOUT  = timeout -k 30

.PHONY: all deps build test leakcheck alloc-fail stress-valgrind stress-tsan stress-helgrind valgrind-deps fuzz fuzz-quick bench-deps bench-build bench bench-quick bench-plot-deps bench-plots demo demo-ipc echod-test clean

all: build

# $(call apt_install,TARGET,PACKAGES): one shell command that installs Debian packages with apt-get, through sudo
# when not root; without either it fails with a line saying what to install.
define apt_install
echo "$(1): installing $(2)"; \
if [ "$$(id -u)" -eq 0 ]; then SUDO=""; \
elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; \
else echo "$(1): not root and no sudo: install $(2) yourself" >&2; exit 1; fi; \
$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq; \
$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(2)
endef

# Quiet and idempotent when libevent, pkg-config and systemd-socket-activate are already there.
deps:
	@packages=""; \
	if ! { command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libevent_core libevent_pthreads; }; then \
	    packages="libevent-dev pkg-config"; \
	fi; \
	if ! command -v systemd-socket-activate >/dev/null 2>&1; then packages="$$packages systemd"; fi; \
	if [ -z "$$packages" ]; then exit 0; fi; \
	$(call apt_install,deps,$$packages); \
	pkg-config --exists libevent_core libevent_pthreads; \
	command -v systemd-socket-activate >/dev/null

build: deps
	$(SWIFT) build --scratch-path $(SCRATCH)

# The example daemon's socket activation tests fail here, rather than skip, when the tool is missing.
# --no-parallel: many suites start processes and wait for them on their thread, and a 2-core machine's cooperative
# pool has two threads; run side by side, two such suites held both for minutes and the async suites, waiting for
# a thread, ran into their time limits. One test at a time takes about 1.5 min here, and no test waits for another.
test: export PORTLOOP_REQUIRE_SOCKET_ACTIVATION = 1
test: deps
	$(SWIFT) test --no-parallel --scratch-path $(SCRATCH)
	$(MAKE) --no-print-directory examples
	$(MAKE) --no-print-directory docs
	$(SWIFT) test --no-parallel --sanitize=thread --scratch-path $(TSAN_SCRATCH)
	$(MAKE) --no-print-directory leakcheck
	$(MAKE) --no-print-directory fuzz-quick
	$(MAKE) --no-print-directory bench-build
	@echo "make test: all passed"

.PHONY: examples docs

# One generated package with an executable per example, in .build-examples (see the script's header).
examples: deps
	SWIFT=$(SWIFT) Tests/Examples/run-examples.sh $(EXAMPLES)

# DocC prints its warnings and, with --warnings-as-errors, fails on them; the grep also catches a warning
# printed by the plugin or the symbol-graph step, which that flag does not cover. The site lands in
# .build-docs/plugins/Swift-DocC/outputs/PortLoop.doccarchive; to browse it, `swift package --scratch-path .build-docs
# preview-documentation --target PortLoop`.
docs: deps
	$(SWIFT) package --scratch-path .build-docs generate-documentation --target PortLoop \
	    --warnings-as-errors 2>&1 | tee .build-docs.log
	@if grep -E -i '(^|[^a-z])warning:' .build-docs.log; then \
	    echo "docs: DocC printed warnings (above)" >&2; exit 1; \
	fi
	@echo "docs: built with no warnings"

leakcheck: deps valgrind-deps
	@mkdir -p $(STRESS_DIR)
	$(CC_SANITIZE) $(STRESS_CFLAGS) $(SANITIZE) -fuse-ld=lld -o $(STRESS_DIR)/pl_stress_asan $(STRESS_SOURCES) $(STRESS_LIBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1:exitcode=23 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    $(STRESS_TIMEOUT) 900 $(STRESS_DIR)/pl_stress_asan
	$(MAKE) --no-print-directory alloc-fail
	$(MAKE) --no-print-directory stress-valgrind
	$(MAKE) --no-print-directory stress-tsan
	$(MAKE) --no-print-directory stress-helgrind

# The allocation-failure harness: the linker's --wrap sends the C layer's malloc, calloc, realloc and strdup
# through it. LeakSanitizer is asked after every run, so the run that leaked is named.
ALLOC_FAIL_WRAP = -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup
alloc-fail: deps
	@mkdir -p $(STRESS_DIR)
	$(CC_SANITIZE) $(STRESS_CFLAGS) $(SANITIZE) -fuse-ld=lld $(ALLOC_FAIL_WRAP) -o $(STRESS_DIR)/pl_alloc_fail \
	    Tests/CStress/pl_alloc_fail.c $(wildcard CShims/*.c) $(STRESS_LIBS)
	ASAN_OPTIONS=detect_leaks=1:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	PL_ALLOC_FAIL_TMP=$(abspath $(STRESS_DIR)) $(STRESS_TIMEOUT) 300 $(STRESS_DIR)/pl_alloc_fail

# valgrind for stress-valgrind and stress-helgrind, with apt-get when missing.
valgrind-deps:
	@if command -v valgrind >/dev/null 2>&1; then exit 0; fi; \
	$(call apt_install,valgrind-deps,valgrind)

# The C layer's fuzz harnesses (Tests/CFuzz), with libFuzzer from the Swift toolchain's clang, AddressSanitizer,
# LeakSanitizer and UBSan: pl_fuzz_model (ports and sets against a reference model), pl_fuzz_wire (what another
# process can send: frames and the handshake) and pl_fuzz_ring (what another process can write into a shared-memory
# ring). fuzz-quick (part of make test) runs them FUZZ_QUICK_SECONDS, FUZZ_WIRE_QUICK_SECONDS and
# FUZZ_RING_QUICK_SECONDS; fuzz runs each FUZZ_SECONDS and prints libFuzzer's figures. The corpora grow in
# .build-fuzz/corpus, .build-fuzz/wire-corpus and .build-fuzz/ring-corpus, seeded from Tests/CFuzz/corpus,
# Tests/CFuzz/wire-corpus and Tests/CFuzz/ring-corpus.
FUZZ_CC            ?= $(dir $(realpath $(shell command -v $(SWIFT))))clang
FUZZ_DIR           ?= .build-fuzz
FUZZ_SECONDS       ?= 600
FUZZ_QUICK_SECONDS ?= 30
FUZZ_WIRE_QUICK_SECONDS ?= 60
FUZZ_RING_QUICK_SECONDS ?= 30
FUZZ_FLAGS          = -std=gnu11 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fuse-ld=lld \
                      -ICShims/include -ICShims

$(FUZZ_DIR)/pl_fuzz_model: Tests/CFuzz/pl_fuzz_model.c $(wildcard CShims/*.c CShims/*.h CShims/include/*.h)
	@mkdir -p $(FUZZ_DIR)/corpus
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ Tests/CFuzz/pl_fuzz_model.c $(wildcard CShims/*.c) $(DISPATCH_LIBS)

$(FUZZ_DIR)/pl_fuzz_wire: Tests/CFuzz/pl_fuzz_wire.c $(wildcard CShims/*.c CShims/*.h CShims/include/*.h)
	@mkdir -p $(FUZZ_DIR)/wire-corpus
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ Tests/CFuzz/pl_fuzz_wire.c $(wildcard CShims/*.c) $(DISPATCH_LIBS)

$(FUZZ_DIR)/pl_fuzz_ring: Tests/CFuzz/pl_fuzz_ring.c $(wildcard CShims/*.c CShims/*.h CShims/include/*.h)
	@mkdir -p $(FUZZ_DIR)/ring-corpus
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ Tests/CFuzz/pl_fuzz_ring.c $(wildcard CShims/*.c) $(DISPATCH_LIBS)

FUZZ_SUMMARY = grep -E '^(\#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss|Done )|ERROR|SUMMARY'

fuzz-quick: $(FUZZ_DIR)/pl_fuzz_model $(FUZZ_DIR)/pl_fuzz_wire $(FUZZ_DIR)/pl_fuzz_ring
	$(FUZZ_DIR)/pl_fuzz_model -max_total_time=$(FUZZ_QUICK_SECONDS) -print_final_stats=1 \
	    $(FUZZ_DIR)/corpus Tests/CFuzz/corpus 2>&1 | $(FUZZ_SUMMARY)
	$(FUZZ_DIR)/pl_fuzz_wire -max_total_time=$(FUZZ_WIRE_QUICK_SECONDS) -print_final_stats=1 \
	    $(FUZZ_DIR)/wire-corpus Tests/CFuzz/wire-corpus 2>&1 | $(FUZZ_SUMMARY)
	$(FUZZ_DIR)/pl_fuzz_ring -max_total_time=$(FUZZ_RING_QUICK_SECONDS) -print_final_stats=1 \
	    $(FUZZ_DIR)/ring-corpus Tests/CFuzz/ring-corpus 2>&1 | $(FUZZ_SUMMARY)
	@echo "fuzz-quick: no failure (model $(FUZZ_QUICK_SECONDS) s, wire $(FUZZ_WIRE_QUICK_SECONDS) s, ring $(FUZZ_RING_QUICK_SECONDS) s)"

fuzz: $(FUZZ_DIR)/pl_fuzz_model $(FUZZ_DIR)/pl_fuzz_wire $(FUZZ_DIR)/pl_fuzz_ring
	$(FUZZ_DIR)/pl_fuzz_model -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $(FUZZ_DIR)/corpus Tests/CFuzz/corpus
	$(FUZZ_DIR)/pl_fuzz_wire -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    $(FUZZ_DIR)/wire-corpus Tests/CFuzz/wire-corpus
	$(FUZZ_DIR)/pl_fuzz_ring -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    $(FUZZ_DIR)/ring-corpus Tests/CFuzz/ring-corpus

# The stress program without sanitizers, for valgrind (memcheck and helgrind): built once for both. DWARF 4: valgrind
# cannot read the DWARF 5 that newer clangs write.
$(STRESS_DIR)/pl_stress: $(STRESS_SOURCES) $(wildcard CShims/*.h CShims/include/*.h)
	@mkdir -p $(STRESS_DIR)
	$(CC_STRESS) $(STRESS_CFLAGS) -gdwarf-4 -o $@ $(STRESS_SOURCES) $(STRESS_LIBS)

# That program under valgrind's leak checker (about 25 s on 2 cores; part of `leakcheck`). --child-silent-after-fork:
# the fork scenarios' children inherit the parent's memory, which valgrind would report as their leaks. It silences
# their other errors too: a scenario run in a process of its own, and each helper child a scenario forks, asks
# memcheck how many it found, and fails the scenario on them (Tests/CStress/pl_stress.c, run_in_own_process and
# child_exit). --fair-sched:
# valgrind runs one thread at a time, and by default a thread spinning on the port layer's adaptive mutexes
# (descriptor_for_waiter's pollers) can keep the others from running for minutes.
stress-valgrind: deps valgrind-deps $(STRESS_DIR)/pl_stress
	$(STRESS_TIMEOUT) 900 valgrind -q --fair-sched=yes --child-silent-after-fork=yes --leak-check=full \
	    --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
	    --error-exitcode=1 $(STRESS_DIR)/pl_stress

# The same program under ThreadSanitizer (about 20 s): data races in the C layer, whose atomics it understands (the
# Swift suites under --sanitize=thread reach the C layer only through the Swift API). A report stops the process it
# is in, and a scenario whose process stopped fails. The sanitizer's libdispatch interceptors need the blocks
# runtime. die_after_fork=0: the fork scenarios' children start threads, which the sanitizer refuses by default in
# the child of a process with threads.
stress-tsan: deps
	@mkdir -p $(STRESS_DIR)
	$(CC_SANITIZE) $(STRESS_CFLAGS) -fsanitize=thread -fno-omit-frame-pointer -fuse-ld=lld -o $(STRESS_DIR)/pl_stress_tsan \
	    $(STRESS_SOURCES) $(STRESS_LIBS) $(if $(SWIFT_RUNTIME_DIR),-lBlocksRuntime)
	TSAN_OPTIONS=halt_on_error=1:die_after_fork=0 $(STRESS_TIMEOUT) 900 $(STRESS_DIR)/pl_stress_tsan

# The same program under helgrind (about 3 min): lock-order inversions, which are deadlocks waiting for the wrong
# moment (two threads taking two locks in opposite orders), and misuse of the pthread API. Helgrind sees an
# inversion as soon as both orders have happened once in one process, whatever the timing; the Swift toolchain's
# ThreadSanitizer (LLVM 21) reports none. One log per process (the scenarios fork); Tests/CStress/helgrind-verdict.sh
# reads them. Races are suppressed (Tests/CStress/helgrind.supp: helgrind does not model C11 atomics);
# --history-level=none keeps it fast, at the cost of the second stack of a race, which is not reported anyway.
HELGRIND_LOGS = $(STRESS_DIR)/helgrind
stress-helgrind: deps valgrind-deps $(STRESS_DIR)/pl_stress
	rm -rf $(HELGRIND_LOGS) && mkdir -p $(HELGRIND_LOGS)
	$(STRESS_TIMEOUT) 1800 valgrind -q --tool=helgrind --fair-sched=yes --history-level=none \
	    --suppressions=Tests/CStress/helgrind.supp --log-file=$(HELGRIND_LOGS)/%p.log $(STRESS_DIR)/pl_stress
	Tests/CStress/helgrind-verdict.sh $(HELGRIND_LOGS)/*.log

# The benchmarks' gRPC peer (grpc-swift-nio-transport) links zlib: install zlib1g-dev when its header is missing.
bench-deps:
	@if [ -f /usr/include/zlib.h ]; then exit 0; fi; \
	$(call apt_install,bench-deps,zlib1g-dev)

# SwiftPM plans a path dependency's sources only when the root package changed, so a file added to PortLoop
# would stay unbuilt here ("cannot find ... in scope"): drop the plan, never the build products, every time.
bench-build: deps bench-deps
	rm -f $(BENCH_SCRATCH)/release.yaml
	$(SWIFT) build -c release --package-path Benchmarks --scratch-path $(BENCH_SCRATCH)

bench: bench-build
	$(BENCH_SCRATCH)/release/portloop-bench

bench-quick: bench-build
	$(BENCH_SCRATCH)/release/portloop-bench --quick

# The charts are drawn by gnuplot (Debian's gnuplot-nox); the script that feeds it needs only python3.
bench-plot-deps:
	@if command -v gnuplot >/dev/null 2>&1; then exit 0; fi; \
	$(call apt_install,bench-plot-deps,gnuplot-nox)

bench-plots: bench-build bench-plot-deps
	mkdir -p $(PLOTS_DIR)
	$(BENCH_SCRATCH)/release/portloop-bench --json --histograms $(PLOTS_DIR)/histograms.json $(PLOT_ARGS) \
	    $(PLOT_SCENARIOS) > $(PLOTS_DIR)/results.json
	python3 Benchmarks/plot.py $(PLOTS_DIR)/results.json $(PLOTS_DIR)/histograms.json $(PLOTS_DIR)

demo: deps
	$(SWIFT) run --scratch-path $(SCRATCH) -c release portloop-demo $(DEMO_ARGS)

# The demo starts itself twice (the app, then the event server) in a namespace it makes under /tmp and removes.
demo-ipc: deps
	$(SWIFT) run --scratch-path $(SCRATCH) -c release portloop-demo-ipc $(DEMO_IPC_ARGS)

echod-test: export PORTLOOP_REQUIRE_SOCKET_ACTIVATION = 1
echod-test: deps
	$(SWIFT) test --scratch-path $(SCRATCH) --filter EchoDaemon

clean:
	rm -rf .build .build-* $(TSAN_SCRATCH) $(STRESS_DIR) Benchmarks/.build Benchmarks/.build-*
