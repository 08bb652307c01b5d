#!/usr/bin/env bash
# Every test: install what is missing, build kiln twice (optimized with g++, as users build it;
# and with clang 14, AddressSanitizer + UndefinedBehaviorSanitizer and the libFuzzer harnesses;
# warnings are errors in both), run the unit and lit tests in the sanitizer build, fuzz every
# parser for a bounded time with that build's harnesses (scripts/fuzz.sh), then every other test
# in the normal build (label mutation included: the error-path lit tests against a kiln that
# crashes or exits 0 after its diagnostic). The unit and lit tests run once, under the
# sanitizers, which catch more than the normal build would; the lit tests too large for the
# sanitizer build run in the normal one (ctest lit_scale). Each phase prints its time.
# ctest's summary is the last line printed.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
started=$(date +%s)
phase_start=$started
phase() {  # closes the phase before (its time) and names the next
  local now
  now=$(date +%s)
  [ -n "${phase_name:-}" ] && echo "   ($phase_name: $((now - phase_start)) s)"
  phase_name=$1
  phase_start=$now
  [ -n "$1" ] && echo "== $1"
  return 0
}
phase "setup"
scripts/setup.sh --tests
# The three builds, the kernel caches and ccache take about 8 GB at their largest: a full disk
# otherwise shows as a linker's "No space left on device" minutes later.
free_gb() { df -Pk . | awk 'NR == 2 { print int($4 / 1024 / 1024) }'; }
echo "   disk: $(free_gb) GB free here"
if [ "$(free_gb)" -lt 10 ]; then
  echo "warning: under 10 GB free on this disk; the builds and tests need about 8 GB" >&2
fi
# A cold ccache (a fresh machine, as CI's) saves nothing on this run and stores every object a
# second time: on a tight disk it is skipped.
if [ "$(free_gb)" -lt 16 ] && command -v ccache >/dev/null &&
   ccache -s 2>/dev/null | grep -qE '^ *Hits: +0 '; then
  echo "   disk: under 16 GB free and ccache is cold: building without it"
  export CCACHE_DISABLE=1
fi

phase "build (clang; sanitizers: address, undefined; fuzz harnesses)"
# Only what its unit and lit tests run (target check-deps) and the fuzz harnesses: the rest is
# built once, below. Line tables only (-g1): all a sanitizer report needs (function, file,
# line). clang 14 rather than g++: 177 s instead of 279 s on 2 cores, and its harnesses link
# against these libraries, where fuzzing with g++'s build needed a third build (126 s).
KILN_BUILD_TARGET="check-deps fuzzers" \
  scripts/build.sh build-asan -DCMAKE_CXX_COMPILER=clang++-14 -DKILN_SANITIZE=ON \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DKILN_WERROR=ON
phase "build"
# Without the unit tests: they run once, in the sanitizer build. And without debug information:
# a failure here is debugged in a build of one's own, and -g costs 86 s of 259 on 2 cores. The
# optimization is RelWithDebInfo's (-O2; gcc 12 at -O3 warns falsely of overlapping copies). A
# later `scripts/build.sh build` keeps these choices; pass -DKILN_UNIT_TESTS=ON and
# -DCMAKE_BUILD_TYPE=RelWithDebInfo to undo them.
scripts/build.sh build -DKILN_WERROR=ON -DKILN_UNIT_TESTS=OFF -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG"

phase "tests under sanitizers (unit, lit, serve)"
# The sanitizers exit 86 (ASan) and 87 (UBSan), never 1: an error-path test expects kiln's exit 1,
# and would pass a use-after-free that follows the diagnostic (tests/lit/lit.cfg.py does the same
# for lit run by hand; ctest's lit_sanitizer_exit_codes checks it).
export ASAN_OPTIONS=exitcode=86
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=87
if ! (cd build-asan && ctest -L 'unit|lit|serve' -j"$jobs" --output-on-failure --timeout 600 \
        >ctest.log 2>&1); then
  cat build-asan/ctest.log
  echo "sanitizer tests failed (log: build-asan/ctest.log)"
  exit 1
fi
grep -E 'tests passed|tests failed' build-asan/ctest.log

# Every parser under libFuzzer (clang-14, ASan + UBSan) for a bounded time; any finding fails.
# The harnesses are the sanitizer build's (tests/fuzz/README.md). One harness per core at a
# time, 10 s each: about 50 s for the nine on 2 cores (20 s each took 87 s of a CI run that went
# over its 15 minutes on a slow machine; 12 s for eight took 55 s); scripts/fuzz.sh run by hand
# builds its own, faster harnesses (-O1) and defaults to 30 s: longer runs hunt findings, CI's
# catch regressions.
phase "fuzz (${KILN_FUZZ_SECONDS:-10} s per harness)"
KILN_FUZZ_BUILD=build-asan KILN_FUZZ_JOBS=$jobs scripts/fuzz.sh "${KILN_FUZZ_SECONDS:-10}"

# The last phase writes models and packages of up to a few GB at once (VGG-11's ONNX file is
# 0.5 GB, ResNet-50's optimized IR as much, the ONNX zoo's tests run side by side). On a tight
# disk what no later test reads goes first: the sanitizer build's object files, precompiled
# headers and static libraries (1.4 GB on 2026-12-02), then the normal build's object files
# and precompiled headers (0.4 GB; its libkiln.a stays for the embedding tests). Every test
# from here on runs linked programs; the next build compiles them again (from ccache where it
# is warm). KILN_LEAN_BELOW_GB sets the threshold: a large value exercises this on a roomy disk.
lean_below=${KILN_LEAN_BELOW_GB:-12}
if [ "$(free_gb)" -lt "$lean_below" ]; then
  for dir in build-asan build; do
    kinds=(-name '*.o' -o -name '*.gch')
    [ "$dir" = build-asan ] && kinds+=(-o -name '*.a')
    bytes=$(find "$dir" \( "${kinds[@]}" \) -printf '%s\n' |
            awk '{s += $1} END {printf "%.1f", s / 2^30}')
    echo "   disk: $(free_gb) GB free; removing $dir's intermediate files ($bytes GB)"
    find "$dir" \( "${kinds[@]}" \) -delete
    [ "$(free_gb)" -ge "$lean_below" ] && break
  done
fi
phase "every other test"
cd build
set +e
ctest -j"$jobs" -LE '^(unit|lit|serve)$' --output-on-failure --timeout 900 2>&1 | tee ctest.log
status=${PIPESTATUS[0]}
set -e
phase ""
echo "== done in $(( $(date +%s) - started )) s"
# ctest lists the skipped tests (gpu, without a device) after its summary: repeat the summary so
# that it is the closing line.
grep -E '^[0-9]+% tests passed' ctest.log | tail -n 1
exit "$status"

