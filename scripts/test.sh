#!/usr/bin/env bash
# Every test: install what is missing, build kiln twice (release-with-debug-info, and with
# AddressSanitizer + UndefinedBehaviorSanitizer; warnings are errors in both), run the unit and
# lit tests in the sanitizer build, fuzz every parser for a bounded time (scripts/fuzz.sh), then
# the whole suite in the normal build (label mutation
# included: the error-path lit tests against a kiln that crashes or exits 0 after its
# diagnostic). ctest's summary is the last line printed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
jobs=$(nproc)

echo "== build (sanitizers: address, undefined)"
# Only what its unit and lit tests run (target check-deps): the rest is built once, below.
KILN_BUILD_TARGET=check-deps \
  scripts/build.sh build-asan -DKILN_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DKILN_WERROR=ON
echo "== build"
scripts/build.sh build -DKILN_WERROR=ON

echo "== tests under sanitizers (unit, lit)"
# The sanitizers exit 86 (ASan) and 87 (UBSan), never 1: an error-path test expects kiln's exit 1,
# and would pass a use-after-free that follows the diagnostic (tests/lit/lit.cfg.py does the same
# for lit run by hand; ctest's lit_sanitizer_exit_codes checks it).
export ASAN_OPTIONS=exitcode=86
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=87
if ! (cd build-asan && ctest -L 'unit|lit' -j"$jobs" --output-on-failure --timeout 600 \
        >ctest.log 2>&1); then
  cat build-asan/ctest.log
  echo "sanitizer tests failed (log: build-asan/ctest.log)"
  exit 1
fi
grep -E 'tests passed|tests failed' build-asan/ctest.log

# Every parser under libFuzzer (clang-14, ASan + UBSan) for a bounded time; any finding fails.
# Builds only the libraries the harnesses need (build-fuzz/). tests/fuzz/README.md.
echo "== fuzz (${KILN_FUZZ_SECONDS:-30} s per harness)"
scripts/fuzz.sh "${KILN_FUZZ_SECONDS:-30}"

echo "== all tests"
cd build
set +e
ctest -j"$jobs" --output-on-failure --timeout 900 2>&1 | tee ctest.log
status=${PIPESTATUS[0]}
set -e
# ctest lists the skipped tests (gpu, without a device) after its summary: repeat the summary so
# that it is the closing line.
grep -E '^[0-9]+% tests passed' ctest.log | tail -n 1
exit "$status"

