#!/usr/bin/env bash
# Checks the include layering (scripts/check_layers.sh), then builds kvinfer twice — optimised (warnings are errors) and with AddressSanitizer +
# UndefinedBehaviorSanitizer — and runs the whole test suite in both builds; builds
# it a third time with ThreadSanitizer and runs the threaded tests there; then
# every libFuzzer target for KVI_FUZZ_SECONDS (default 30) each on its seed corpus
# (scripts/fuzz.sh all: a crash, leak, timeout or out-of-memory fails the run). The
# web page's headless-Chromium test (test_web_page) runs in the optimised build
# only, when scripts/deps.sh could install chromium and playwright-core; its
# screenshot is build/testtmp/web_page.png.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs="$(nproc)"

echo "== layer check (scripts/layers.txt), then its self-test on planted violations"
scripts/check_layers.sh
scripts/check_layers.sh --self-test

echo "== optimised build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKVI_WERROR=ON >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVI_SANITIZE=ON -DKVI_WERROR=ON >/dev/null
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"

echo "== ThreadSanitizer build: the threaded tests (engine, scheduler, server)"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVI_TSAN=ON -DKVI_WERROR=ON >/dev/null
cmake --build build-tsan -j"$jobs"
# halt_on_error=0 reports every race; the exit status (66) of any process that
# reported one fails its test. libmicrohttpd is not instrumented: our data only
# crosses its threads under our own mutexes, so no suppression is needed.
TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1" \
  ctest --test-dir build-tsan --output-on-failure -j"$jobs" \
  -R '^test_(engine|scheduler|sched_sample|sched_spec|hybrid_sched|speculative|server|server_fields|server_grammar|server_tools|server_hardening|server_ops|serve_spec|loadgen)$'

echo "== fuzzing, short form: every target ${KVI_FUZZ_SECONDS:-30} s (scripts/fuzz.sh all)"
if command -v clang >/dev/null; then
  FUZZ_JOBS="$jobs" scripts/fuzz.sh all "${KVI_FUZZ_SECONDS:-30}"
else
  echo "warning: clang not found: the short fuzz run is skipped" >&2
fi
